package reconcile_test

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/reconciler/reconciler/internal/webhooksim"
	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/providers/stripe/stripefake"
	"github.com/reconciler/reconciler/reconcile"
)

// Issue 12: a run whose lock is lost (its session's backend terminated)
// notices before its next commit and stops interrupted, without touching
// the record of the run that holds the lock now.

// pausedProvider blocks the first page of its listing: it says so on
// reached and waits for resume before handing the page on.
type pausedProvider struct {
	reconcile.Provider
	reached, resume chan struct{}
}

func (p *pausedProvider) ListChanges(ctx context.Context, lp reconcile.ListParams, fn func(reconcile.Page) error) error {
	first := true
	return p.Provider.ListChanges(ctx, lp, func(pg reconcile.Page) error {
		if first {
			first = false
			close(p.reached)
			<-p.resume
		}
		return fn(pg)
	})
}

// lockHolder is the backend holding the run lock of stripe's platform
// account in e's schema, or 0.
func (e *env) lockHolder() int64 {
	e.t.Helper()
	var pid int64
	require.NoError(e.t, e.db.Raw(`SELECT coalesce(max(pid), 0) FROM pg_locks
		WHERE locktype = 'advisory' AND granted AND objsubid = 1
		  AND ((classid::bigint << 32) | objid::bigint) = hashtextextended(? || '/reconciler/' || 'stripe/', 0)`, e.db.Schema).Scan(&pid).Error)
	return pid
}

// terminateLock ends the session of the run lock's holder and waits until
// the server has released the lock.
func (e *env) terminateLock() {
	e.t.Helper()
	pid := e.lockHolder()
	require.NotZero(e.t, pid, "the run holds a session advisory lock")
	require.NoError(e.t, e.db.Exec(`SELECT pg_terminate_backend(?)`, pid).Error)
	require.Eventually(e.t, func() bool { return e.lockHolder() == 0 }, 10*time.Second, 10*time.Millisecond)
}

type runOutcome struct {
	res reconcile.Result
	err error
}

// startPaused starts a run whose first page waits until the returned
// resume is called; it returns once the run is waiting.
func (e *env) startPaused(batchSize int) (resume func() runOutcome) {
	p := &pausedProvider{Provider: e.provider(), reached: make(chan struct{}), resume: make(chan struct{})}
	done := make(chan runOutcome, 1)
	go func() {
		res, err := reconcile.Run(context.Background(), reconcile.Options{DB: e.db.DB, Provider: p, Now: func() time.Time { return now },
			StuckLimit: -1, BatchSize: batchSize})
		done <- runOutcome{res, err}
	}()
	select {
	case <-p.reached:
	case out := <-done:
		e.t.Fatalf("the run ended before its first page: %v", out.err)
	}
	return func() runOutcome {
		close(p.resume)
		return <-done
	}
}

// Run A loses its lock while it waits for a page; run B takes the lock,
// marks A interrupted and succeeds; A then resumes: it commits nothing,
// ends with an error, and B's view of the record stands.
func TestLostLockStopsTheRunInterrupted(t *testing.T) {
	e := newEnv(t)
	e.acct.Generate(stripefake.GenOptions{Payments: 60, Start: at(-20), End: at(-1), Seed: 29})
	e.deliver(func(i int, _ webhooksim.Delivery) bool { return i%3 != 0 })

	resumeA := e.startPaused(10)
	var a models.Run
	require.NoError(t, e.db.Order("id").First(&a).Error)
	require.Equal(t, models.RunRunning, a.Status)

	e.terminateLock()
	b := e.run(nil)
	require.Equal(t, models.RunSucceeded, b.Run.Status)
	require.NoError(t, e.db.First(&a, a.ID).Error)
	require.Equal(t, models.RunInterrupted, a.Status, "B found A dead")

	out := resumeA()
	require.Error(t, out.err, "a run that lost its lock must not claim success")
	require.Contains(t, out.err.Error(), "lost the run lock")
	require.False(t, errors.Is(out.err, reconcile.ErrBadWindow))
	require.Equal(t, a.ID, out.res.Run.ID)
	require.Equal(t, models.RunInterrupted, out.res.Run.Status, "the Result shows the record as it is")

	var rows []models.Run
	require.NoError(t, e.db.Order("id").Find(&rows).Error)
	require.Len(t, rows, 2)
	require.Equal(t, models.RunInterrupted, rows[0].Status, "A's row stays interrupted")
	require.Equal(t, a.Error, rows[0].Error, "A's record is B's, untouched")
	require.Zero(t, rows[0].Examined, "A committed no batch after losing its lock")
	require.Equal(t, models.RunSucceeded, rows[1].Status)
	var succeeded int64
	require.NoError(t, e.db.Model(&models.Run{}).Where("status = ?", models.RunSucceeded).Count(&succeeded).Error)
	require.Equal(t, int64(1), succeeded, "exactly one succeeded record for the two runs")
	e.verifyEvery()
}

// With no successor, the run that lost its lock records itself
// interrupted, saying why.
func TestLostLockWithoutASuccessorRecordsWhy(t *testing.T) {
	e := newEnv(t)
	e.acct.Generate(stripefake.GenOptions{Payments: 30, Start: at(-20), End: at(-1), Seed: 31})
	resume := e.startPaused(10)
	e.terminateLock()
	out := resume()
	require.Error(t, out.err)
	require.Contains(t, out.err.Error(), "lost the run lock")
	require.Equal(t, models.RunInterrupted, out.res.Run.Status)
	require.NotNil(t, out.res.Run.Error)
	require.Contains(t, *out.res.Run.Error, "lost the run lock")
	require.Zero(t, out.res.Run.Examined, "no batch committed after the lock was lost")
	// The next run reads the whole window.
	res := e.run(nil)
	e.assertConverged(res.Run.ID)
}

// On the embedded store the lock is lost when its row no longer names this
// process.
func TestSQLiteLostLockRow(t *testing.T) {
	e := newEnvOn(t, "sqlite")
	e.acct.Generate(stripefake.GenOptions{Payments: 30, Start: at(-20), End: at(-1), Seed: 37})
	resume := e.startPaused(10)
	require.NoError(t, e.db.Exec(`UPDATE run_locks SET pid = ? WHERE key = 'stripe/'`, os.Getppid()).Error)
	out := resume()
	require.Error(t, out.err)
	require.Contains(t, out.err.Error(), "lost the run lock")
	require.Equal(t, models.RunInterrupted, out.res.Run.Status)
	require.Zero(t, out.res.Run.Examined)
	var n int64
	require.NoError(t, e.db.Raw(`SELECT count(*) FROM run_locks WHERE pid = ?`, os.Getppid()).Scan(&n).Error)
	require.Equal(t, int64(1), n, "the other holder's row is left alone")
}
