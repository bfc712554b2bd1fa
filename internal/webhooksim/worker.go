package webhooksim

import (
	"context"
	"fmt"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/store/pgstore"
)

// Worker plays the application's webhook worker over webhook_events, the
// way the seeds tell a team to write one: it claims an unprocessed event
// with a short statement of its own (reclaiming a claim older than Lease,
// the mark of a worker that crashed), then processes it in one transaction
// that moves the payments with the published guard, runs the event's side
// effects (Effect) and sets processed_at, so a crash before the commit
// leaves the event unprocessed for the next claim. PostgreSQL.
//
// This is how events a repair: deliver run records reach the application.
type Worker struct {
	DB     *gorm.DB
	Source string
	// Facts says what an event means for the payments (the application's
	// own parsing of the provider's payload).
	Facts func(eventID, eventType string, payload []byte) ([]Fact, error)
	// Lease is how old a claim must be to be taken over (the seeds: 5
	// minutes).
	Lease time.Duration
	// Now is the worker's clock (claimed_at and the lease); nil is the
	// wall clock.
	Now func() time.Time
	// Effect, when set, runs the event's side effects inside its
	// processing transaction (fulfilment, receipts, ledger postings),
	// before the payment writes.
	Effect func(tx *gorm.DB, eventID string) error
	// Crash, when set, is called after the side effects and the payment
	// writes and before the
	// commit: an error or a panic there aborts the transaction as a
	// worker dying mid-event would, leaving the claim behind.
	Crash func(eventID string) error
}

func (w *Worker) now() time.Time {
	if w.Now == nil {
		return time.Now().UTC()
	}
	return w.Now().UTC()
}

// Drain claims and processes events until none is claimable, and returns
// how many it processed. It stops at the first error.
func (w *Worker) Drain(ctx context.Context) (int, error) {
	n := 0
	for {
		var ids []string
		cutoff := w.now().Add(-w.Lease)
		if err := w.DB.WithContext(ctx).Raw(`SELECT event_id FROM webhook_events
			WHERE source = ? AND processed_at IS NULL AND (claimed_at IS NULL OR claimed_at < ?)
			ORDER BY received_at, id LIMIT 50`, w.Source, cutoff).Scan(&ids).Error; err != nil {
			return n, err
		}
		if len(ids) == 0 {
			return n, nil
		}
		progressed := false
		for _, id := range ids {
			done, err := w.Process(ctx, id)
			if err != nil {
				return n, err
			}
			if done {
				n++
				progressed = true
			}
		}
		if !progressed {
			// Every candidate was taken by another worker meanwhile.
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// Process claims event id and processes it. It reports false when the claim
// found it taken by a live worker or already processed (return, do not
// retry).
func (w *Worker) Process(ctx context.Context, id string) (bool, error) {
	at := w.now()
	var claimed []struct {
		EventType string
		Payload   []byte
	}
	// The seeds' claim: a statement of its own, committed at once.
	if err := w.DB.WithContext(ctx).Raw(`UPDATE webhook_events
		SET claimed_at = ?, attempts = attempts + 1
		WHERE source = ? AND event_id = ? AND processed_at IS NULL
		  AND (claimed_at IS NULL OR claimed_at < ?)
		RETURNING event_type, payload`, at, w.Source, id, at.Add(-w.Lease)).Scan(&claimed).Error; err != nil {
		return false, fmt.Errorf("claim %s: %w", id, err)
	}
	if len(claimed) == 0 {
		return false, nil
	}
	facts, err := w.Facts(id, claimed[0].EventType, claimed[0].Payload)
	if err != nil {
		msg := err.Error()
		_ = w.DB.WithContext(ctx).Exec(`UPDATE webhook_events SET last_error = ? WHERE source = ? AND event_id = ?`, msg, w.Source, id).Error
		return false, fmt.Errorf("event %s: %w", id, err)
	}
	done := false
	for range 10 {
		err = w.DB.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
			// Another worker may have reclaimed it (this one was slower than
			// the lease) and finished it: the row lock decides who does.
			var ev models.WebhookEvent
			if err := tx.Clauses(clause.Locking{Strength: "UPDATE"}).
				Where("source = ? AND event_id = ?", w.Source, id).Take(&ev).Error; err != nil {
				return err
			}
			if ev.ProcessedAt != nil {
				return nil
			}
			if w.Effect != nil {
				if err := w.Effect(tx, id); err != nil {
					return err
				}
			}
			for _, f := range facts {
				if err := ApplyFact(tx, w.Source, f); err != nil {
					return err
				}
			}
			if w.Crash != nil {
				if err := w.Crash(id); err != nil {
					return err
				}
			}
			done = true
			return tx.Exec(`UPDATE webhook_events SET processed_at = ?, last_error = NULL WHERE source = ? AND event_id = ?`,
				w.now(), w.Source, id).Error
		})
		if !pgstore.IsConflict(err) {
			break
		}
		done = false
	}
	if err != nil {
		return false, fmt.Errorf("process %s: %w", id, err)
	}
	return done, nil
}
