package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/reconciler/reconciler/clock"
	"github.com/reconciler/reconciler/internal/dbopen"
	"github.com/reconciler/reconciler/internal/pgtest"
	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/store"
	"github.com/reconciler/reconciler/store/pgstore"
	"github.com/reconciler/reconciler/store/storetest"
)

// open returns a store on a fresh schema of its own.
func open(t *testing.T) store.Store { return pgstore.New(pgtest.New(t).DB, nil) }

func dbOf(s store.Store) *gorm.DB { return s.(*pgstore.Store).DB }

var suite = storetest.Options{
	Dialect:   "postgres",
	DB:        dbOf,
	WithClock: func(s store.Store, c clock.Clock) store.Store { return pgstore.New(dbOf(s), c) },
	Precision: time.Microsecond,
	// The suite's batches COPY their events (export_test.go): the time, a
	// savepoint and its release beside the COPY.
	EventsTrips: 3,
	LoseLock: func(t *testing.T, s store.Store, key string) {
		db := dbOf(s)
		var schema string
		require.NoError(t, db.Raw(`SELECT current_schema()`).Scan(&schema).Error)
		pid := holderIn(t, db, schema, key)
		require.NotZero(t, pid, "the lock is a session advisory lock")
		require.NoError(t, db.Exec(`SELECT pg_terminate_backend(?)`, pid).Error)
		require.Eventually(t, func() bool { return holderIn(t, db, schema, key) == 0 }, 10*time.Second, 10*time.Millisecond)
	},
}

func TestStoreSuite(t *testing.T) {
	t.Parallel()
	storetest.Run(t, open, suite)
}

// TestStoreSuiteMapped runs the suite on an application schema of its own
// (issue 18: table orders in a schema of its own, every column and state
// renamed; pgtest's mapped layout): every statement must honour the mapping.
func TestStoreSuiteMapped(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) store.Store { return pgstore.New(pgtest.NewMapped(t).DB, nil) }, suite)
}

// PostgreSQL's own behaviour: a real deadlock retried by InTx, the error
// translation, and advisory locks that die with their session and are
// scoped to a schema.

func TestDeadlockIsRetried(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	st := pgstore.New(db.DB, nil)
	at := time.Date(2026, 3, 14, 9, 0, 0, 0, time.UTC)
	require.NoError(t, st.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
		_, err := tx.InsertPayments(ctx, "stripe", "", []store.NewPayment{
			{ProviderID: "pi_a", State: models.StateCaptured, At: at, Amount: 1000, Currency: "gbp"},
			{ProviderID: "pi_b", State: models.StateCaptured, At: at, Amount: 1000, Currency: "gbp"},
		})
		return err
	}))

	// Each transaction raises one row, waits until the other has raised
	// the other row, then raises the other's: a lock cycle PostgreSQL
	// breaks by aborting one of them (40P01), which InTx runs again.
	aHolds, bHolds := make(chan struct{}), make(chan struct{})
	var attempts atomic.Int32
	var mu sync.Mutex
	var aborted []error
	raise := func(first, second string, amount int64, mine, theirs chan struct{}) error {
		n := 0
		return st.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
			n++
			attempts.Add(1)
			if _, err := tx.RaiseRefunds(ctx, "stripe", []store.Refund{{ProviderID: first, Amount: amount}}); err != nil {
				mu.Lock()
				aborted = append(aborted, err)
				mu.Unlock()
				return err
			}
			if n == 1 {
				close(mine)
				select {
				case <-theirs:
				case <-time.After(10 * time.Second): // the other failed early: no deadlock, and the test says so
				}
			}
			_, err := tx.RaiseRefunds(ctx, "stripe", []store.Refund{{ProviderID: second, Amount: amount}})
			if err != nil {
				mu.Lock()
				aborted = append(aborted, err)
				mu.Unlock()
			}
			return err
		})
	}
	var wg sync.WaitGroup
	var errA, errB error
	wg.Add(2)
	go func() { defer wg.Done(); errA = raise("pi_a", "pi_b", 100, aHolds, bHolds) }()
	go func() { defer wg.Done(); errB = raise("pi_b", "pi_a", 200, bHolds, aHolds) }()
	wg.Wait()
	require.NoError(t, errA)
	require.NoError(t, errB)
	// One of the two ran again; under load PostgreSQL may break the cycle
	// more than once (a CI run saw five attempts, three deadlocks), and
	// each break is retried: every attempt past the first two is one
	// deadlock, and nothing else failed.
	require.NotEmpty(t, aborted, "a deadlock")
	require.Equal(t, int32(2+len(aborted)), attempts.Load(), "each aborted attempt ran again, once")
	for _, err := range aborted {
		require.True(t, pgstore.IsConflict(err), "%v", err)
		var pg *pgconn.PgError
		require.ErrorAs(t, err, &pg)
		require.Equal(t, "40P01", pg.Code, "a deadlock")
	}

	// Whichever was aborted, the 200s won: a raise never lowers.
	var got []store.Payment
	require.NoError(t, st.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
		var err error
		got, err = tx.LoadPayments(ctx, "stripe", []string{"pi_a", "pi_b"})
		return err
	}))
	require.Len(t, got, 2)
	require.Equal(t, []int64{200, 200}, []int64{got[0].AmountRefunded, got[1].AmountRefunded})
}

func TestIsConflict(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		err  error
		want bool
	}{
		{&pgconn.PgError{Code: "40P01"}, true},                          // deadlock_detected
		{&pgconn.PgError{Code: "40001"}, true},                          // serialization_failure
		{fmt.Errorf("apply: %w", &pgconn.PgError{Code: "40001"}), true}, // wrapped
		{fmt.Errorf("again: %w", store.ErrConflict), true},              // already translated
		{&pgconn.PgError{Code: "23505"}, false},                         // unique_violation
		{&pgconn.PgError{Code: "57014"}, false},                         // query_canceled
		{errors.New("40P01"), false},
		{context.Canceled, false},
		{nil, false},
	} {
		require.Equal(t, c.want, pgstore.IsConflict(c.err), "%v", c.err)
	}
}

// advisoryHolder is the backend holding the store's run lock key in
// schema, or 0.
func advisoryHolder(t *testing.T, db *pgtest.DB, key string) int64 {
	t.Helper()
	return holderIn(t, db.DB, db.Schema, key)
}

// holderIn is the backend holding the store's run lock key in schema, or 0.
func holderIn(t *testing.T, db *gorm.DB, schema, key string) int64 {
	t.Helper()
	var pid int64
	require.NoError(t, db.Raw(`SELECT coalesce(max(pid), 0) FROM pg_locks
		WHERE locktype = 'advisory' AND granted AND objsubid = 1
		  AND ((classid::bigint << 32) | objid::bigint) = hashtextextended(? || '/reconciler/' || ?, 0)`, schema, key).Scan(&pid).Error)
	return pid
}

func TestLockDiesWithItsSession(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	st := pgstore.New(db.DB, nil)
	l, err := st.TryLock(ctx, "stripe/")
	require.NoError(t, err)
	pid := advisoryHolder(t, db, "stripe/")
	require.NotZero(t, pid, "the lock is a session advisory lock")
	_, err = st.TryLock(ctx, "stripe/")
	require.ErrorIs(t, err, store.ErrLocked)

	// The holder's session dies (its process was killed): the server
	// releases the lock.
	require.NoError(t, db.Exec(`SELECT pg_terminate_backend(?)`, pid).Error)
	require.Eventually(t, func() bool { return advisoryHolder(t, db, "stripe/") == 0 }, 10*time.Second, 10*time.Millisecond)
	l2, err := st.TryLock(ctx, "stripe/")
	require.NoError(t, err)
	require.NoError(t, l2.Release(ctx))
	_ = l.Release(ctx) // its connection is gone; releasing it is harmless
	l3, err := st.TryLock(ctx, "stripe/")
	require.NoError(t, err)
	require.NoError(t, l3.Release(ctx))
}

func TestLocksOfSchemasAreApart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b := pgstore.New(pgtest.New(t).DB, nil), pgstore.New(pgtest.New(t).DB, nil)
	la, err := a.TryLock(ctx, "stripe/")
	require.NoError(t, err)
	lb, err := b.TryLock(ctx, "stripe/")
	require.NoError(t, err, "a deployment in another schema of the same database does not block this one")
	require.NoError(t, la.Release(ctx))
	require.NoError(t, lb.Release(ctx))
}

// The lock's connection is its own, outside the pool: runs holding locks
// never starve their own transactions of pool connections.
func TestLockConnectionIsOutsideThePool(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	sqlDB, err := db.DB.DB()
	require.NoError(t, err)
	sqlDB.SetMaxOpenConns(1)
	st := pgstore.New(db.DB, nil)
	var locks []store.Lock
	for _, key := range []string{"stripe/", "stripe/acct_1", "gocardless/"} {
		tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		l, err := st.TryLock(tctx, key)
		cancel()
		require.NoError(t, err, key)
		locks = append(locks, l)
	}
	tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	require.NoError(t, st.InTx(tctx, func(ctx context.Context, tx store.Tx) error {
		_, err := tx.LoadPayments(ctx, "stripe", []string{"pi_a"})
		return err
	}), "three held locks leave the pool of one free")
	var inUse int
	require.NoError(t, db.Raw(`SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted AND pid <> pg_backend_pid()`).Scan(&inUse).Error)
	require.GreaterOrEqual(t, inUse, 3)
	for _, l := range locks {
		require.NoError(t, l.Held(ctx))
		require.NoError(t, l.Release(ctx))
	}
}

func TestOneLine(t *testing.T) {
	// pgx's connect error with sslmode=prefer: one line per attempt, the
	// same failure twice.
	connect := errors.New("failed to connect to `user=u database=db`:\n\t127.0.0.1:1 (localhost): dial error: connection refused\n\t127.0.0.1:1 (localhost): dial error: connection refused")
	require.Equal(t, "failed to connect to `user=u database=db`: 127.0.0.1:1 (localhost): dial error: connection refused", pgstore.OneLine(connect))
	two := errors.New("failed to connect to `user=u database=db`:\n\t[::1]:1 (localhost): dial error: refused\n\t127.0.0.1:1 (localhost): dial error: refused")
	require.Equal(t, "failed to connect to `user=u database=db`: [::1]:1 (localhost): dial error: refused; 127.0.0.1:1 (localhost): dial error: refused", pgstore.OneLine(two))
	pg := &pgconn.PgError{Severity: "ERROR", Code: "23505", Message: "duplicate key value violates unique constraint \"runs_pkey\"", Detail: "Key (id)=(41)\nalready exists."}
	require.Equal(t, `save run: ERROR: duplicate key value violates unique constraint "runs_pkey" (SQLSTATE 23505) (detail: Key (id)=(41) already exists.)`, pgstore.OneLine(fmt.Errorf("save run: %w", pg)))
}

// A database that cannot be reached is one line, each failure once, and the
// URL's password is nowhere in it.
func TestConnectErrorIsOneLine(t *testing.T) {
	t.Parallel()
	_, err := dbopen.Open(context.Background(), dbopen.Params{URL: "postgres://u:sekret@127.0.0.1:1/db?connect_timeout=2", MaxOpenConns: 2})
	require.Error(t, err)
	msg := err.Error()
	require.NotContains(t, msg, "\n")
	require.NotContains(t, msg, "sekret")
	require.Contains(t, msg, "connect to the database: failed to connect to `user=u database=db`: ")
	require.Equal(t, 1, strings.Count(msg, "connection refused"), msg)
}

// TestRefreshStats: a payments table PostgreSQL has never analyzed is
// analyzed once it holds 256 KiB, and only then; once analyzed, never
// again (autovacuum keeps its statistics). A small table is left alone.
func TestRefreshStats(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	st := pgstore.New(db.DB, nil)
	payments := st.AppSchema().Payments.Ident()
	// Autovacuum must not analyze the table behind the test's back.
	require.NoError(t, db.Exec(`ALTER TABLE `+payments+` SET (autovacuum_enabled = false)`).Error)
	insert := func(from, n int) { insertCaptured(t, st, from, n) }
	analyzed := func() bool {
		var ok bool
		require.NoError(t, db.Raw(`SELECT coalesce(last_analyze, last_autoanalyze) IS NOT NULL FROM pg_stat_all_tables WHERE relid = to_regclass(?)`, payments).Scan(&ok).Error)
		return ok
	}

	insert(0, 100)
	done, err := st.RefreshStats(ctx)
	require.NoError(t, err)
	require.Empty(t, done, "a table under 256 KiB is not worth analyzing")
	require.False(t, analyzed())

	insert(100, 12_000)
	done, err = st.RefreshStats(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{payments}, done)
	require.True(t, analyzed())
	var tuples float64
	require.NoError(t, db.Raw(`SELECT reltuples FROM pg_class WHERE oid = to_regclass(?)`, payments).Scan(&tuples).Error)
	require.InDelta(t, 12_100, tuples, 1, "the planner now knows the table's size")
	// The small sample: a histogram of at most 11 bounds (statistics target
	// 10), and the ids known unique.
	var bounds int
	var distinct float64
	require.NoError(t, db.Raw(`SELECT coalesce(array_length(s.histogram_bounds, 1), 0), s.n_distinct
		FROM pg_stats s JOIN pg_namespace n ON n.nspname = s.schemaname JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = s.tablename
		WHERE c.oid = to_regclass(?) AND quote_ident(s.attname) = ?`, payments, st.AppSchema().SQL(`{provider_id}`)).Row().Scan(&bounds, &distinct))
	require.Positive(t, bounds)
	require.LessOrEqual(t, bounds, 11, "RefreshStats samples at statistics target 10")
	require.Equal(t, -1.0, distinct, "provider_id is unique")

	insert(12_100, 12_000)
	done, err = st.RefreshStats(ctx)
	require.NoError(t, err)
	require.Empty(t, done, "a table analyzed once is autovacuum's to keep")
}

// TestRefreshStatsWaitsBriefly: a table some other session holds (a
// VACUUM, an index build: a lock ANALYZE conflicts with) is not waited for
// past the lock timeout; RefreshStats says so and the run goes on without.
func TestRefreshStatsWaitsBriefly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	st := pgstore.New(db.DB, nil)
	payments := st.AppSchema().Payments.Ident()
	require.NoError(t, db.Exec(`ALTER TABLE `+payments+` SET (autovacuum_enabled = false)`).Error)
	insertCaptured(t, st, 0, 5000)
	holder := db.Begin()
	defer holder.Rollback()
	require.NoError(t, holder.Exec(`LOCK TABLE `+payments+` IN SHARE UPDATE EXCLUSIVE MODE`).Error)
	start := time.Now()
	_, err := st.RefreshStats(ctx)
	require.ErrorContains(t, err, "lock timeout")
	require.Less(t, time.Since(start), 10*time.Second)
	require.NoError(t, holder.Rollback().Error)
	done, err := st.RefreshStats(ctx)
	require.NoError(t, err)
	require.Contains(t, done, payments)
}

// insertCaptured inserts n captured payments pi_<from>… through the store.
func insertCaptured(t *testing.T, st *pgstore.Store, from, n int) {
	t.Helper()
	rows := make([]store.NewPayment, n)
	for i := range rows {
		rows[i] = store.NewPayment{ProviderID: fmt.Sprintf("pi_%06d", from+i), State: models.StateCaptured,
			At: time.Date(2026, 3, 14, 9, 0, 0, 0, time.UTC), Amount: 1000, Currency: "gbp"}
	}
	require.NoError(t, st.InTx(context.Background(), func(ctx context.Context, tx store.Tx) error {
		_, err := tx.InsertPayments(ctx, "stripe", "", rows)
		return err
	}))
}
