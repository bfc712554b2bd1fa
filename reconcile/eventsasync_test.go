package reconcile_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/reconciler/reconciler/internal/dbopen"
	"github.com/reconciler/reconciler/internal/webhooksim"
	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/providers/stripe/stripefake"
	"github.com/reconciler/reconciler/reconcile"
	"github.com/reconciler/reconciler/store"
)

// soloStore hands the engine transactions that check the rule the events'
// insert runs under (batch.go, insertEvents): while it is in flight, in a
// goroutine of its own, nothing else is sent on the transaction. Each
// insert is held a few milliseconds, so that a statement sent beside it
// would be seen. failAt, when positive, makes that insert (counted from 1)
// fail.
type soloStore struct {
	store.Store
	failAt   int64
	inserts  atomic.Int64
	overlaps atomic.Int64
}

func (s *soloStore) InTx(ctx context.Context, fn func(ctx context.Context, tx store.Tx) error) error {
	return s.Store.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
		return fn(ctx, &soloTx{Tx: tx, s: s})
	})
}

type soloTx struct {
	store.Tx
	s    *soloStore
	busy atomic.Bool
}

var errInjected = errors.New("injected events insert failure")

// other is every statement but the events' insert.
func (t *soloTx) other() {
	if t.busy.Load() {
		t.s.overlaps.Add(1)
	}
}

func (t *soloTx) events(insert func() (int64, error)) (int64, error) {
	if !t.busy.CompareAndSwap(false, true) {
		t.s.overlaps.Add(1)
	}
	defer t.busy.Store(false)
	time.Sleep(3 * time.Millisecond)
	if n := t.s.inserts.Add(1); n == t.s.failAt {
		return 0, errInjected
	}
	return insert()
}

func (t *soloTx) InsertEvents(ctx context.Context, runID int64, source string, rows []store.Event) (int64, error) {
	return t.events(func() (int64, error) { return t.Tx.InsertEvents(ctx, runID, source, rows) })
}

func (t *soloTx) InsertEventsDirect(ctx context.Context, runID int64, source string, rows []store.Event) (int64, error) {
	return t.events(func() (int64, error) { return t.Tx.InsertEventsDirect(ctx, runID, source, rows) })
}

func (t *soloTx) LoadPayments(ctx context.Context, provider string, ids []string) ([]store.Payment, error) {
	t.other()
	return t.Tx.LoadPayments(ctx, provider, ids)
}

func (t *soloTx) InsertPayments(ctx context.Context, provider, account string, rows []store.NewPayment) ([]store.Payment, error) {
	t.other()
	return t.Tx.InsertPayments(ctx, provider, account, rows)
}

func (t *soloTx) ApplySteps(ctx context.Context, provider string, steps []store.Step) ([]store.Payment, error) {
	t.other()
	return t.Tx.ApplySteps(ctx, provider, steps)
}

func (t *soloTx) RaiseRefunds(ctx context.Context, provider string, rows []store.Refund) ([]store.Payment, error) {
	t.other()
	return t.Tx.RaiseRefunds(ctx, provider, rows)
}

func (t *soloTx) RecordSettlements(ctx context.Context, provider string, rows []store.Settlement) ([]store.Payment, error) {
	t.other()
	return t.Tx.RecordSettlements(ctx, provider, rows)
}

func (t *soloTx) RecordCaptured(ctx context.Context, provider string, rows []store.Capture) ([]store.Payment, error) {
	t.other()
	return t.Tx.RecordCaptured(ctx, provider, rows)
}

func (t *soloTx) LoadCarry(ctx context.Context, runID int64, ids []string) ([]store.Carry, error) {
	t.other()
	return t.Tx.LoadCarry(ctx, runID, ids)
}

func (t *soloTx) SaveCarry(ctx context.Context, runID int64, rows []store.Carry, drop []string) error {
	t.other()
	return t.Tx.SaveCarry(ctx, runID, rows, drop)
}

func (t *soloTx) DeleteItems(ctx context.Context, runID int64, provider string, ids []string) error {
	t.other()
	return t.Tx.DeleteItems(ctx, runID, provider, ids)
}

func (t *soloTx) InsertItems(ctx context.Context, runID int64, provider string, rows []store.Item) error {
	t.other()
	return t.Tx.InsertItems(ctx, runID, provider, rows)
}

func (t *soloTx) ReplaceItems(ctx context.Context, runID int64, provider string, rows []store.Item) error {
	t.other()
	return t.Tx.ReplaceItems(ctx, runID, provider, rows)
}

func (t *soloTx) MissingEvents(ctx context.Context, source string, ids []string) (int64, error) {
	t.other()
	return t.Tx.MissingEvents(ctx, source, ids)
}

func (t *soloTx) AddCounts(ctx context.Context, runID int64, p store.Progress) error {
	t.other()
	return t.Tx.AddCounts(ctx, runID, p)
}

// TestEventsInsertAloneOnItsTransaction: a run whose batches insert missed
// events (a third of the webhooks lost, batches of 40 payments, a carry
// that spills) sends nothing else on a batch's transaction while the
// events' insert is in flight, records every missed event and counts each
// once; the same world run again records nothing new.
func TestEventsInsertAloneOnItsTransaction(t *testing.T) {
	stores(t, func(t *testing.T, e *env) {
		e.acct.Generate(stripefake.GenOptions{Payments: 200, Start: at(-24 * 3), End: at(-1), Seed: 11})
		_, missed := e.deliver(func(i int, _ webhooksim.Delivery) bool { return i%3 != 1 })
		require.Positive(t, missed)
		s := &soloStore{Store: dbopen.Store(e.db.DB, nil)}
		res := e.run(func(o *reconcile.Options) {
			o.Store, o.Since, o.BatchSize, o.CarryMemory = s, at(-24*4), 40, -1
		})
		require.Zero(t, s.overlaps.Load(), "a statement was sent beside the events' insert")
		require.Greater(t, s.inserts.Load(), int64(3), "the run's batches inserted events")
		var synthetic int64
		require.NoError(t, e.db.Raw(`SELECT count(*) FROM webhook_events WHERE synthetic AND run_id = ?`, res.Run.ID).Scan(&synthetic).Error)
		require.Equal(t, synthetic, res.Run.SyntheticEvents)
		require.Equal(t, int64(missed), synthetic, "every missed webhook recorded once")

		again := e.run(func(o *reconcile.Options) { o.Store, o.Since, o.BatchSize = s, at(-24*4), 40 })
		require.Zero(t, again.Run.SyntheticEvents)
		require.Zero(t, s.overlaps.Load())
	})
}

// TestEventsInsertFailureRollsBackItsBatch: when a batch's events' insert
// fails (the second insert of the run), the run fails with that error and
// the batch writes nothing: no payment, no event, no item of it; the
// batches before it stand.
func TestEventsInsertFailureRollsBackItsBatch(t *testing.T) {
	stores(t, func(t *testing.T, e *env) {
		e.acct.Generate(stripefake.GenOptions{Payments: 120, Start: at(-24 * 3), End: at(-1), Seed: 12})
		s := &soloStore{Store: dbopen.Store(e.db.DB, nil), failAt: 2}
		var batches []reconcile.Progress
		_, err := reconcile.Run(context.Background(), reconcile.Options{DB: e.db.DB, Store: s, Provider: e.provider(),
			Now: func() time.Time { return now }, StuckLimit: -1, Since: at(-24 * 4), BatchSize: 40,
			Progress: func(p reconcile.Progress) { batches = append(batches, p) }})
		require.ErrorIs(t, err, errInjected)
		require.NotEmpty(t, batches, "the batches before the failing one committed")
		last := batches[len(batches)-1]
		var run models.Run
		require.NoError(t, e.db.Order("id DESC").First(&run).Error)
		require.Equal(t, models.RunFailed, run.Status)
		require.Equal(t, last.EventsRead, run.EventsRead, "the run's counts are the committed batches'")
		require.Positive(t, run.EventsRead)
		var payments, events, items int64
		require.NoError(t, e.db.Raw(`SELECT count(*) FROM payments`).Scan(&payments).Error)
		require.NoError(t, e.db.Raw(`SELECT count(*) FROM webhook_events`).Scan(&events).Error)
		require.NoError(t, e.db.Raw(`SELECT count(*) FROM drift_items WHERE run_id = ?`, run.ID).Scan(&items).Error)
		require.Positive(t, payments)
		require.LessOrEqual(t, payments, run.Examined, "no payment of the failed batch was written")
		require.Equal(t, run.EventsRead, events, "only the committed batches' events were written (an empty schema: every event is new)")
		require.Equal(t, run.SyntheticEvents, events)
		require.Equal(t, run.Repaired+run.Refused+run.Reported, items, "only the committed batches' items were written")
	})
}
