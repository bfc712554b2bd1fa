// Package webhooksim plays the application's live webhook worker in tests:
// it records a delivery in webhook_events (ON CONFLICT DO NOTHING) and moves
// payments with the same guarded statement the application uses, so tests
// can seed a database "as the webhooks left it" and race the job.
package webhooksim

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/providers/gocardless/gcfake"
	"github.com/reconciler/reconciler/providers/stripe/stripefake"
	"github.com/reconciler/reconciler/reconcile"
)

// Delivery is one webhook delivery: an event and the facts it implies.
type Delivery struct {
	EventID, EventType string
	At                 time.Time
	Payload            []byte
	Facts              []Fact
}

// Fact is one implied change of a payment.
type Fact struct {
	PaymentID      string
	State          models.State // StateNone: no state change
	At             time.Time
	AmountRefunded int64
	Amount         int64
	Currency       string
}

// Stripe converts the fake Stripe's deliveries.
func Stripe(ds []stripefake.Delivery) []Delivery {
	out := make([]Delivery, len(ds))
	for i, d := range ds {
		out[i] = Delivery{EventID: d.EventID, EventType: d.EventType, At: d.At, Payload: d.Payload}
		for _, f := range d.Facts {
			out[i].Facts = append(out[i].Facts, Fact{PaymentID: f.PaymentID, State: f.State, At: f.At, AmountRefunded: f.AmountRefunded, Amount: f.Amount, Currency: f.Currency})
		}
	}
	return out
}

// GoCardless converts the fake GoCardless's deliveries.
func GoCardless(ds []gcfake.Delivery) []Delivery {
	out := make([]Delivery, len(ds))
	for i, d := range ds {
		out[i] = Delivery{EventID: d.EventID, EventType: d.EventType, At: d.At, Payload: d.Payload}
		for _, f := range d.Facts {
			out[i].Facts = append(out[i].Facts, Fact{PaymentID: f.PaymentID, State: f.State, At: f.At, AmountRefunded: f.AmountRefunded, Amount: f.Amount, Currency: f.Currency})
		}
	}
	return out
}

// Apply processes one delivery for provider source: a duplicate delivery
// (the event id is already recorded) does nothing.
// Like a real worker, it retries a transaction PostgreSQL aborted for a
// deadlock.
func Apply(ctx context.Context, db *gorm.DB, source string, d Delivery) error {
	var err error
	for range 10 {
		err = db.WithContext(ctx).Transaction(func(tx *gorm.DB) error { return apply(tx, source, d) })
		if !reconcile.Retryable(err) {
			return err
		}
		time.Sleep(time.Duration(rand.IntN(20)) * time.Millisecond)
	}
	return err
}

func apply(tx *gorm.DB, source string, d Delivery) error {
	{
		q := `INSERT INTO webhook_events (source, event_id, event_type, payload, processed_at)
			VALUES (?, ?, ?, CAST(? AS jsonb), now()) ON CONFLICT (source, event_id) DO NOTHING`
		if models.SQLite(tx) {
			q = `INSERT INTO webhook_events (source, event_id, event_type, payload, processed_at)
			VALUES (?, ?, ?, ?, CURRENT_TIMESTAMP) ON CONFLICT (source, event_id) DO NOTHING`
		}
		res := tx.Exec(q, source, d.EventID, d.EventType, string(d.Payload))
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected == 0 {
			return nil // duplicate delivery
		}
		for _, f := range d.Facts {
			if err := ApplyFact(tx, source, f); err != nil {
				return err
			}
		}
		return nil
	}
}

// ApplyFact applies one fact with the guard of DESIGN section 2.
func ApplyFact(tx *gorm.DB, source string, f Fact) error {
	if f.State == models.StateNone {
		if f.AmountRefunded > 0 {
			return tx.Exec(`UPDATE payments SET amount_refunded = ? WHERE provider = ? AND provider_id = ? AND amount_refunded < ? AND state <> 'canceled'`,
				f.AmountRefunded, source, f.PaymentID, f.AmountRefunded).Error
		}
		return nil
	}
	refund := int64(0)
	if f.State != models.StateCanceled {
		refund = f.AmountRefunded
	}
	if err := tx.Exec(`INSERT INTO payments (provider, provider_id, state, amount, currency, amount_refunded, source_updated_at)
		VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (provider, provider_id) DO NOTHING`,
		source, f.PaymentID, string(f.State), f.Amount, f.Currency, refund, f.At.UTC()).Error; err != nil {
		return err
	}
	if models.SQLite(tx) {
		return tx.Exec(`UPDATE payments SET state = ?, source_updated_at = ?, amount_refunded = max(amount_refunded, ?), updated_at = CURRENT_TIMESTAMP
		WHERE provider = ? AND provider_id = ? AND instr(',' || ? || ',', ',' || state || ',') > 0
		  AND (source_updated_at IS NULL OR julianday(source_updated_at) <= julianday(?))`,
			string(f.State), f.At.UTC(), refund, source, f.PaymentID, preds(f.State), f.At.UTC()).Error
	}
	return tx.Exec(`UPDATE payments SET state = ?, source_updated_at = ?, amount_refunded = GREATEST(amount_refunded, ?), updated_at = now()
		WHERE provider = ? AND provider_id = ? AND state = ANY(string_to_array(?, ','))
		  AND (source_updated_at IS NULL OR source_updated_at <= ?)`,
		string(f.State), f.At, refund, source, f.PaymentID, preds(f.State), f.At).Error
}

func preds(to models.State) string {
	var s []string
	for _, p := range models.Predecessors(to) {
		s = append(s, string(p))
	}
	return strings.Join(s, ",")
}

// Seed delivers every delivery up to t that keep(i, d) accepts, as the
// webhooks would have left the database.
func Seed(ctx context.Context, db *gorm.DB, source string, ds []Delivery, t time.Time, keep func(i int, d Delivery) bool) (delivered, missed int, err error) {
	err = db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		for i, d := range ds {
			if d.At.After(t) {
				continue
			}
			if !keep(i, d) {
				missed++
				continue
			}
			if err := apply(tx, source, d); err != nil {
				return fmt.Errorf("deliver %s: %w", d.EventID, err)
			}
			delivered++
		}
		return nil
	})
	return delivered, missed, err
}
