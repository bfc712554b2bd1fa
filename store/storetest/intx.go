package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/reconciler/reconciler/clock"
	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/store"
)

// InTx, the retry on store.ErrConflict, the run lock, RoundTrips and the
// clock.

var inTxTests = []test{
	{"CommitsAndRollsBack", testInTxCommitsAndRollsBack},
	{"RetriesConflictsFromTheStart", testInTxRetriesConflicts},
	{"GivesUpOnConflicts", testInTxGivesUpOnConflicts},
	{"StopsWaitingWhenCtxEnds", testInTxStopsWaitingWhenCtxEnds},
	{"OtherErrorsAreNotRetried", testInTxOtherErrorsNotRetried},
}

var lockTests = []test{
	{"TryLock", testTryLock},
	{"HeldUntilLost", testHeld},
}

var clockTests = []test{
	{"StubbedClockStampsItsTime", testClockStubbed},
	{"SystemClockStampsTheServersNow", testClockSystem},
}

// recClock is a stubbed clock that records the retries' sleeps instead of
// sleeping (so a test of the retry is fast); onSleep, when set, answers
// them.
type recClock struct {
	now     time.Time
	mu      sync.Mutex
	sleeps  []time.Duration
	onSleep func(ctx context.Context) error
}

func (c *recClock) Now() time.Time { return c.now }

func (c *recClock) Sleep(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	c.sleeps = append(c.sleeps, d)
	c.mu.Unlock()
	if c.onSleep != nil {
		return c.onSleep(ctx)
	}
	return ctx.Err()
}

func (c *recClock) slept() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.sleeps...)
}

var errBoom = errors.New("boom")

func newPayment(id string, at time.Time) store.NewPayment {
	return store.NewPayment{ProviderID: id, State: models.StateCaptured, At: at, Amount: 100, Currency: "gbp"}
}

func testInTxCommitsAndRollsBack(t *testing.T, e *env) {
	t0 := e.t0()
	e.tx(e.st, func(tx store.Tx) {
		_, err := tx.InsertPayments(e.ctx, "stripe", "", []store.NewPayment{newPayment("pi_ok", t0)})
		require.NoError(t, err)
	})
	err := e.st.InTx(e.ctx, func(ctx context.Context, tx store.Tx) error {
		if _, err := tx.InsertPayments(ctx, "stripe", "", []store.NewPayment{newPayment("pi_rolled_back", t0)}); err != nil {
			return err
		}
		if _, err := tx.ApplySteps(ctx, "stripe", []store.Step{{ProviderID: "pi_ok", To: models.StateSettled, At: t0}}); err != nil {
			return err
		}
		// The transaction sees its own writes.
		ps, err := tx.LoadPayments(ctx, "stripe", []string{"pi_ok", "pi_rolled_back"})
		require.NoError(t, err)
		require.Len(t, ps, 2)
		require.Equal(t, models.StateSettled, ps[0].State)
		return fmt.Errorf("wrapped: %w", errBoom)
	})
	require.ErrorIs(t, err, errBoom)
	e.requirePayments(payment{Provider: "stripe", ProviderID: "pi_ok", State: models.StateCaptured, Amount: 100, Currency: "gbp", At: ptr(t0),
		CreatedAt: e.now, UpdatedAt: e.now})
}

func testInTxRetriesConflicts(t *testing.T, e *env) {
	t0 := e.t0()
	c := &recClock{now: e.now}
	st := e.o.WithClock(e.s, c)
	before := st.RoundTrips()
	attempts := 0
	err := st.InTx(e.ctx, func(ctx context.Context, tx store.Tx) error {
		attempts++
		id := fmt.Sprintf("pi_attempt_%d", attempts)
		created, err := tx.InsertPayments(ctx, "stripe", "", []store.NewPayment{newPayment(id, t0)})
		require.NoError(t, err)
		require.Len(t, created, 1)
		require.Equal(t, id, created[0].ProviderID)
		if attempts == 1 {
			return fmt.Errorf("first attempt: %w", store.ErrConflict)
		}
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, 2, attempts)
	require.Len(t, c.slept(), 1, "one wait, on the store's clock")
	require.Positive(t, c.slept()[0])
	e.requirePayments(payment{Provider: "stripe", ProviderID: "pi_attempt_2", State: models.StateCaptured, Amount: 100, Currency: "gbp",
		At: ptr(t0), CreatedAt: e.now, UpdatedAt: e.now})
	require.Equal(t, before+6, st.RoundTrips(), "both attempts' statements count")
}

func testInTxGivesUpOnConflicts(t *testing.T, e *env) {
	c := &recClock{now: e.now}
	st := e.o.WithClock(e.s, c)
	attempts := 0
	err := st.InTx(e.ctx, func(ctx context.Context, tx store.Tx) error {
		attempts++
		return store.ErrConflict
	})
	require.ErrorIs(t, err, store.ErrConflict)
	require.Greater(t, attempts, 1, "retried")
	require.Less(t, attempts, 100, "bounded")
	require.GreaterOrEqual(t, len(c.slept()), attempts-1)
}

func testInTxStopsWaitingWhenCtxEnds(t *testing.T, e *env) {
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	c := &recClock{now: e.now, onSleep: func(ctx context.Context) error { cancel(); return ctx.Err() }}
	st := e.o.WithClock(e.s, c)
	attempts := 0
	err := st.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
		attempts++
		return store.ErrConflict
	})
	require.ErrorIs(t, err, store.ErrConflict)
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, 1, attempts)
}

func testInTxOtherErrorsNotRetried(t *testing.T, e *env) {
	c := &recClock{now: e.now}
	st := e.o.WithClock(e.s, c)
	attempts := 0
	err := st.InTx(e.ctx, func(ctx context.Context, tx store.Tx) error {
		attempts++
		return errBoom
	})
	require.ErrorIs(t, err, errBoom)
	require.NotErrorIs(t, err, store.ErrConflict)
	require.Equal(t, 1, attempts)
	require.Empty(t, c.slept())
}

// testRoundTrips: every batch statement is one round trip whatever its
// length, BEGIN and COMMIT are two more, and only InTx counts.
func testRoundTrips(t *testing.T, e *env) {
	t0 := e.t0()
	r := e.run(models.Run{})
	var rows []store.NewPayment
	var ids []string
	var steps []store.Step
	var refunds []store.Refund
	var settles []store.Settlement
	var captures []store.Capture
	var carries []store.Carry
	var items []store.Item
	var events []store.Event
	for i := range 50 {
		id := fmt.Sprintf("pi_%02d", i)
		ids = append(ids, id)
		rows = append(rows, newPayment(id, t0))
		steps = append(steps, store.Step{ProviderID: id, To: models.StateSettled, At: t0})
		refunds = append(refunds, store.Refund{ProviderID: id, Amount: 10})
		settles = append(settles, store.Settlement{ProviderID: id, At: t0, PayoutID: "po_1"})
		captures = append(captures, store.Capture{ProviderID: id, Amount: 90})
		carries = append(carries, store.Carry{ProviderID: id, State: []byte(`{}`)})
		items = append(items, store.Item{ProviderID: id, Kind: models.KindBehind, Action: models.ActionRepaired})
		events = append(events, store.Event{EventID: "evt_" + id, EventType: "x", Payload: []byte(`{}`)})
	}
	var mine atomic.Int64
	ctx := store.CountTrips(e.ctx, &mine)
	start := e.st.RoundTrips()
	require.NoError(t, e.st.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
		_, err := tx.InsertPayments(ctx, "stripe", "", rows)
		require.NoError(t, err)
		_, err = tx.LoadPayments(ctx, "stripe", ids)
		require.NoError(t, err)
		moved, err := tx.ApplySteps(ctx, "stripe", steps)
		require.NoError(t, err)
		require.Len(t, moved, 50)
		_, err = tx.RaiseRefunds(ctx, "stripe", refunds)
		require.NoError(t, err)
		_, err = tx.RecordSettlements(ctx, "stripe", settles)
		require.NoError(t, err)
		_, err = tx.RecordCaptured(ctx, "stripe", captures)
		require.NoError(t, err)
		require.NoError(t, tx.SaveCarry(ctx, r.ID, carries, nil))         // 1
		require.NoError(t, tx.SaveCarry(ctx, r.ID, carries[:1], ids[1:])) // 2: a delete and an upsert
		_, err = tx.LoadCarry(ctx, r.ID, ids)
		require.NoError(t, err)
		require.NoError(t, tx.InsertItems(ctx, r.ID, "stripe", items))
		require.NoError(t, tx.DeleteItems(ctx, r.ID, "stripe", ids))
		n, err := tx.InsertEvents(ctx, r.ID, "stripe", events)
		require.NoError(t, err)
		require.Equal(t, int64(50), n)
		_, err = tx.MissingEvents(ctx, "stripe", ids)
		require.NoError(t, err)
		return tx.AddCounts(ctx, r.ID, store.Progress{})
	}))
	statements := int64(15)
	if e.o.Dialect == "postgres" {
		// InsertEvents first asks which events are recorded already, so
		// that their payloads are not sent again (issue 16).
		statements++
	}
	statements += e.o.EventsTrips
	require.Equal(t, start+2+statements, e.st.RoundTrips())
	require.Equal(t, int64(2+statements), mine.Load(), "the caller's own count")

	// Another caller's transaction is not counted in mine.
	e.tx(e.st, func(store.Tx) {})
	require.Equal(t, start+2+statements+2, e.st.RoundTrips())
	require.Equal(t, int64(2+statements), mine.Load())

	// The run record and the reads are not batch statements.
	now := e.t0()
	run := models.Run{Provider: "stripe", WindowStart: now, WindowEnd: now, StartedAt: now, Status: models.RunRunning, Trigger: models.TriggerManual, Notes: models.JSON(`{}`)}
	require.NoError(t, e.st.CreateRun(e.ctx, &run))
	_, err := e.st.GetRun(e.ctx, run.ID)
	require.NoError(t, err)
	_, err = e.st.FindRuns(e.ctx, store.RunQuery{})
	require.NoError(t, err)
	_, err = e.st.PaymentsInWindow(e.ctx, store.PaymentQuery{Provider: "stripe", Since: now.Add(-time.Hour), Until: now.Add(time.Hour), Limit: 10})
	require.NoError(t, err)
	require.Equal(t, start+2+statements+2, e.st.RoundTrips())
}

func testTryLock(t *testing.T, e *env) {
	l1, err := e.s.TryLock(e.ctx, "stripe/")
	require.NoError(t, err)
	_, err = e.s.TryLock(e.ctx, "stripe/")
	require.ErrorIs(t, err, store.ErrLocked)
	// The lock is the database's, not the store value's.
	_, err = e.st.TryLock(e.ctx, "stripe/")
	require.ErrorIs(t, err, store.ErrLocked)

	// Different keys do not block each other.
	l2, err := e.s.TryLock(e.ctx, "stripe/acct_1")
	require.NoError(t, err)
	l3, err := e.s.TryLock(e.ctx, "gocardless/")
	require.NoError(t, err)

	require.NoError(t, l1.Release(e.ctx))
	l1, err = e.st.TryLock(e.ctx, "stripe/")
	require.NoError(t, err, "after Release the lock is free")
	_, err = e.s.TryLock(e.ctx, "stripe/acct_1")
	require.ErrorIs(t, err, store.ErrLocked, "releasing one key leaves the others held")
	for _, l := range []store.Lock{l1, l2, l3} {
		require.NoError(t, l.Release(e.ctx))
	}
	for _, k := range []string{"stripe/", "stripe/acct_1", "gocardless/"} {
		l, err := e.s.TryLock(e.ctx, k)
		require.NoError(t, err, k)
		require.NoError(t, l.Release(e.ctx))
	}
}

// Held says whether the lock is still the holder's: nil while it is,
// ErrLockLost once the dialect lost it, and the lost lock is free for
// another holder (the run that takes over).
func testHeld(t *testing.T, e *env) {
	l, err := e.s.TryLock(e.ctx, "stripe/")
	require.NoError(t, err)
	other, err := e.s.TryLock(e.ctx, "stripe/acct_1")
	require.NoError(t, err)
	require.NoError(t, l.Held(e.ctx))
	require.NoError(t, l.Held(e.ctx), "asking twice changes nothing")

	e.o.LoseLock(t, e.s, "stripe/")
	require.ErrorIs(t, l.Held(e.ctx), store.ErrLockLost)
	require.ErrorIs(t, l.Held(e.ctx), store.ErrLockLost, "a lost lock stays lost")
	require.NoError(t, other.Held(e.ctx), "losing one key's lock loses no other")
	_ = l.Release(e.ctx) // its session is gone or its row another's; releasing it is harmless
	require.NoError(t, other.Release(e.ctx))
}

// stamped is every stamp the statements write, read back.
type stamped struct {
	created, updated map[string]time.Time // payments, by provider_id
	items            map[string]time.Time // drift_items.created_at
	events           map[string]time.Time // webhook_events.processed_at
}

func (e *env) stamps() stamped {
	e.t.Helper()
	s := stamped{created: map[string]time.Time{}, updated: map[string]time.Time{}, items: map[string]time.Time{}, events: map[string]time.Time{}}
	for _, p := range e.payments() {
		s.created[p.ProviderID], s.updated[p.ProviderID] = p.CreatedAt, p.UpdatedAt
	}
	for _, it := range e.items() {
		s.items[it.ProviderID] = it.CreatedAt
	}
	for _, ev := range e.events() {
		if ev.ProcessedAt != nil {
			s.events[ev.EventID] = *ev.ProcessedAt
		}
	}
	return s
}

// stampAll runs every stamping statement, each in its own transaction on
// the store st(i) returns for statement i.
func (e *env) stampAll(st func(i int) store.Store) {
	e.t.Helper()
	t0 := e.t0()
	r := e.run(models.Run{})
	for _, id := range []string{"pi_steps", "pi_refunds", "pi_settles", "pi_captures"} {
		e.seed(payment{ProviderID: id, State: models.StateCaptured, Amount: 100, At: ptr(t0)})
	}
	stmts := []func(tx store.Tx) error{
		func(tx store.Tx) error {
			_, err := tx.InsertPayments(e.ctx, "stripe", "", []store.NewPayment{newPayment("pi_insert", t0)})
			return err
		},
		func(tx store.Tx) error {
			_, err := tx.ApplySteps(e.ctx, "stripe", []store.Step{{ProviderID: "pi_steps", To: models.StateSettled, At: t0}})
			return err
		},
		func(tx store.Tx) error {
			_, err := tx.RaiseRefunds(e.ctx, "stripe", []store.Refund{{ProviderID: "pi_refunds", Amount: 10}})
			return err
		},
		func(tx store.Tx) error {
			_, err := tx.RecordSettlements(e.ctx, "stripe", []store.Settlement{{ProviderID: "pi_settles", At: t0, PayoutID: "po_1"}})
			return err
		},
		func(tx store.Tx) error {
			_, err := tx.RecordCaptured(e.ctx, "stripe", []store.Capture{{ProviderID: "pi_captures", Amount: 90}})
			return err
		},
		func(tx store.Tx) error {
			return tx.InsertItems(e.ctx, r.ID, "stripe", []store.Item{{ProviderID: "pi_item", Kind: models.KindBehind, Action: models.ActionRepaired}})
		},
		func(tx store.Tx) error {
			_, err := tx.InsertEvents(e.ctx, r.ID, "stripe", []store.Event{{EventID: "evt_1", EventType: "x", Payload: []byte(`{}`)}})
			return err
		},
	}
	for i, stmt := range stmts {
		require.NoError(e.t, st(i).InTx(e.ctx, func(_ context.Context, tx store.Tx) error { return stmt(tx) }))
	}
}

func testClockStubbed(t *testing.T, e *env) {
	at := func(i int) time.Time {
		return e.time(e.now.Add(time.Duration(i+1)*time.Hour + time.Duration(i)*1234567*time.Nanosecond))
	}
	e.stampAll(func(i int) store.Store { return e.o.WithClock(e.s, clock.Func(func() time.Time { return at(i) })) })
	s := e.stamps()
	seeded := e.seeded()
	require.Equal(t, map[string]time.Time{"pi_insert": at(0), "pi_steps": seeded, "pi_refunds": seeded, "pi_settles": seeded, "pi_captures": seeded}, s.created)
	require.Equal(t, map[string]time.Time{"pi_insert": at(0), "pi_steps": at(1), "pi_refunds": at(2), "pi_settles": at(3), "pi_captures": at(4)}, s.updated)
	require.Equal(t, map[string]time.Time{"pi_item": at(5)}, s.items)
	require.Equal(t, map[string]time.Time{"evt_1": at(6)}, s.events)
}

func testClockSystem(t *testing.T, e *env) {
	before := time.Now()
	e.stampAll(func(int) store.Store { return e.s })
	after := time.Now()
	s := e.stamps()
	within := func(what string, got time.Time) {
		t.Helper()
		lo, hi := before.Truncate(e.o.Precision), after.Add(e.o.Precision)
		require.False(t, got.Before(lo) || got.After(hi), "%s stamped %s, not the server's now (between %s and %s)",
			what, got.Format(time.RFC3339Nano), lo.Format(time.RFC3339Nano), hi.Format(time.RFC3339Nano))
	}
	within("payments.created_at of an inserted row", s.created["pi_insert"])
	for id, at := range s.updated {
		within("payments.updated_at of "+id, at)
	}
	within("drift_items.created_at", s.items["pi_item"])
	within("webhook_events.processed_at", s.events["evt_1"])
}
