// Package storetest is the one suite every store.Store implementation
// passes (the model is River's riverdrivertest): each dialect package runs
// Run against a real database of its dialect, and the suite asserts the
// exact rows every statement leaves, so a dialect that drifts from the
// contract of package store fails here rather than in a scenario.
//
// The suite is the same for every dialect. What a dialect genuinely does
// differently (the embedded store's takeover of a dead local lock holder,
// PostgreSQL's deadlocks) is tested in that dialect's own package.
package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/reconciler/reconciler/clock"
	"github.com/reconciler/reconciler/store"
)

// Options is what the suite needs to know of a dialect beyond its store.
type Options struct {
	// Dialect is what the store's Dialect must say: "postgres", "sqlite".
	Dialect string
	// DB returns the connection under a store that open returned: the suite
	// seeds rows as the live webhook worker would have left them and reads
	// back exact rows with it, in SQL every dialect speaks.
	DB func(s store.Store) *gorm.DB
	// WithClock returns a store over the same database as s whose clock is
	// c: the suite checks what the statements stamp.
	WithClock func(s store.Store, c clock.Clock) store.Store
	// Precision is the finest step of a provider time the dialect keeps
	// through the batch statements: time.Microsecond on PostgreSQL,
	// time.Millisecond on the embedded store (SQLite's date functions
	// count milliseconds). The suite's times are multiples of it, and must
	// come back exactly.
	Precision time.Duration
	// LoseLock takes the run lock named key away from its holder the way
	// the dialect loses one: PostgreSQL terminates the backend of the lock's
	// session; the embedded store's row is taken over by another holder.
	LoseLock func(t *testing.T, s store.Store, key string)
	// EventsTrips is the round trips InsertEventsDirect takes beyond one
	// statement when it writes (PostgreSQL's COPY: its time, a savepoint
	// and its release).
	EventsTrips int64
}

// Run runs the suite. open returns a fresh, migrated, empty database's
// store on the wall clock, closed when t ends; every test opens its own
// and runs in parallel.
func Run(t *testing.T, open func(t *testing.T) store.Store, o Options) {
	require.NotNil(t, open, "storetest: open is nil")
	require.NotEmpty(t, o.Dialect, "storetest: Options.Dialect is empty")
	require.NotNil(t, o.DB, "storetest: Options.DB is nil")
	require.NotNil(t, o.WithClock, "storetest: Options.WithClock is nil")
	require.Positive(t, o.Precision, "storetest: Options.Precision is not set")
	require.NotNil(t, o.LoseLock, "storetest: Options.LoseLock is nil")
	h := &harness{open: open, o: o}
	groups := []struct {
		name  string
		tests []test
	}{
		{"Store", storeTests},
		{"Tx", txTests},
		{"RunRecord", runTests},
		{"Reads", readTests},
		{"Lock", lockTests},
		{"InTx", inTxTests},
		{"Clock", clockTests},
		{"Notifications", notificationTests},
	}
	for _, g := range groups {
		t.Run(g.name, func(t *testing.T) {
			t.Parallel()
			for _, tc := range g.tests {
				t.Run(tc.name, func(t *testing.T) {
					t.Parallel()
					tc.fn(t, h.env(t))
				})
			}
		})
	}
}

// test is one test of the suite.
type test struct {
	name string
	fn   func(t *testing.T, e *env)
}

type harness struct {
	open func(t *testing.T) store.Store
	o    Options
}

// env is one test's database.
type env struct {
	t *testing.T
	o Options
	// s is the store open returned, on the wall clock.
	s store.Store
	// st is a store over the same database whose clock stands still at
	// now: what its statements stamp is known exactly.
	st  store.Store
	now time.Time
	db  *gorm.DB
	ctx context.Context
}

func (h *harness) env(t *testing.T) *env {
	s := h.open(t)
	require.NotNil(t, s)
	e := &env{t: t, o: h.o, s: s, db: h.o.DB(s), ctx: context.Background()}
	e.now = e.time(time.Date(2030, 5, 6, 7, 8, 9, 987654321, time.UTC))
	now := e.now
	e.st = h.o.WithClock(s, clock.Func(func() time.Time { return now }))
	return e
}

// withClock is a store over e's database whose clock stands still at at.
func (e *env) withClock(at time.Time) store.Store {
	return e.o.WithClock(e.s, clock.Func(func() time.Time { return at }))
}

// time truncates t to what the dialect keeps.
func (e *env) time(t time.Time) time.Time { return t.Truncate(e.o.Precision) }

// T0 is the suite's reference provider time: a weekday morning with a
// fraction of a second the dialect keeps exactly.
func (e *env) t0() time.Time {
	return e.time(time.Date(2026, 3, 14, 9, 26, 53, 123456789, time.UTC))
}

// tx runs fn in one transaction of st and requires it to commit.
func (e *env) tx(st store.Store, fn func(tx store.Tx)) {
	e.t.Helper()
	require.NoError(e.t, st.InTx(e.ctx, func(_ context.Context, tx store.Tx) error { fn(tx); return nil }))
}

// ptr returns a pointer to v.
func ptr[T any](v T) *T { return &v }

var storeTests = []test{
	{"Dialect", func(t *testing.T, e *env) {
		require.Equal(t, e.o.Dialect, e.s.Dialect())
		require.Equal(t, e.o.Dialect, e.st.Dialect())
	}},
}
