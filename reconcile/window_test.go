package reconcile_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/reconciler/reconciler/internal/webhooksim"
	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/providers/stripe"
	"github.com/reconciler/reconciler/reconcile"
)

// Issue 12: a window is validated once, after every clamp, before a run row
// is written; a window that cannot be read as asked is reconcile.ErrBadWindow
// (exit 2), never a run recorded succeeded.

// runs counts the run rows.
func (e *env) runs() int64 {
	e.t.Helper()
	var n int64
	require.NoError(e.t, e.db.Model(&models.Run{}).Count(&n).Error)
	return n
}

// An --until in the future is refused before anything is written, and the
// lock it took is released; the checkpoint stays where it was, so the next
// default run still catches up over the skipped night.
func TestFutureUntilIsABadWindow(t *testing.T) {
	stores(t, func(t *testing.T, e *env) {
		require.NoError(t, e.db.Exec(`INSERT INTO reconciliation_runs (provider, account, window_start, window_end, started_at, finished_at, status, trigger, dry_run)
			VALUES ('stripe', '', ?, ?, ?, ?, 'succeeded', 'schedule', false)`, at(-97), at(-72), at(-72), at(-72)).Error)
		pi := e.acct.CreatePayment(1000, "gbp", false, at(-50))
		e.acct.Capture(pi, at(-50).Add(time.Minute))
		for _, until := range []time.Time{now.Add(365 * 24 * time.Hour), time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC), now.Add(reconcile.MaxClockSkew + time.Second)} {
			_, err := e.tryRun(func(o *reconcile.Options) { o.Since, o.Until = at(-1), until })
			require.ErrorIs(t, err, reconcile.ErrBadWindow, "until %s", until)
			require.Contains(t, err.Error(), "in the future")
		}
		require.Equal(t, int64(1), e.runs(), "no run row for a refused window")

		// A little skew is allowed: an until a minute ahead reads the window.
		res := e.run(func(o *reconcile.Options) { o.Since, o.Until = at(-2), now.Add(time.Minute) })
		require.True(t, res.Run.WindowEnd.Equal(now.Add(time.Minute)))

		// The lock was released, and the default run catches up from the
		// real checkpoint.
		res = e.run(nil)
		require.True(t, res.Run.WindowStart.Equal(at(-73)), "window starts at the checkpoint less the overlap, got %v", res.Run.WindowStart)
		require.Equal(t, models.StateCaptured, e.payment(pi).State)
	})
}

// A succeeded run recorded before the engine refused future windows (its
// window ends in 2099, after it finished) is no checkpoint: the default run
// still widens back over the skipped nights.
func TestRecordedFutureWindowIsNoCheckpoint(t *testing.T) {
	stores(t, func(t *testing.T, e *env) {
		require.NoError(t, e.db.Exec(`INSERT INTO reconciliation_runs (provider, account, window_start, window_end, started_at, finished_at, status, trigger, dry_run)
			VALUES ('stripe', '', ?, ?, ?, ?, 'succeeded', 'schedule', false)`, at(-97), at(-72), at(-72), at(-72)).Error)
		require.NoError(t, e.db.Exec(`INSERT INTO reconciliation_runs (provider, account, window_start, window_end, started_at, finished_at, status, trigger, dry_run)
			VALUES ('stripe', '', ?, ?, ?, ?, 'succeeded', 'manual', false)`, at(-60), time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC), at(-59), at(-59)).Error)
		pi := e.acct.CreatePayment(1000, "gbp", false, at(-50))
		e.acct.Capture(pi, at(-50).Add(time.Minute))
		res := e.run(nil)
		require.True(t, res.Run.WindowStart.Equal(at(-73)), "window starts at the checkpoint less the overlap, got %v", res.Run.WindowStart)
		require.Equal(t, models.StateCaptured, e.payment(pi).State)
	})
}

// In mode events, a window wholly before the provider's horizon would be
// clamped into an inverted one: it is refused, no run row is written and nothing is
// repaired (the stuck path included).
func TestWindowWhollyBeforeTheHorizonIsABadWindow(t *testing.T) {
	stores(t, func(t *testing.T, e *env) {
		pi := e.acct.CreatePayment(1000, "gbp", true, at(-24*10))
		e.acct.Authorise(pi, at(-24*10).Add(time.Minute))
		e.deliver(func(int, webhooksim.Delivery) bool { return true })
		e.acct.Cancel(pi, at(-24*9)) // the stuck path would repair it
		day := func(y int) time.Time { return time.Date(y, 1, 1, 0, 0, 0, 0, time.UTC) }
		horizon := now.Add(-stripe.EventRetention)
		for _, c := range []struct {
			name         string
			since, until time.Time
			says         string
		}{
			{"both before the horizon", day(2006), day(2016), "wholly before"},
			{"until before the horizon, default since", time.Time{}, horizon.Add(-time.Hour), "wholly before"},
			{"until at the horizon", horizon.Add(-48 * time.Hour), horizon, "wholly before"},
			{"inverted", at(-1), at(-2), "not before"},
			{"empty", at(-1), at(-1), "not before"},
			{"since in the future", now.Add(time.Hour), time.Time{}, "not before"},
			{"since before 2000 (a sentinel, not a date)", time.Date(1, 1, 1, 0, 0, 0, 1, time.UTC), time.Time{}, "before 2000"},
			{"until before 2000", time.Time{}, day(1999), "before 2000"},
		} {
			_, err := e.tryRun(func(o *reconcile.Options) {
				o.Since, o.Until, o.StuckLimit, o.Mode = c.since, c.until, 10, reconcile.ModeEvents
			})
			require.ErrorIs(t, err, reconcile.ErrBadWindow, c.name)
			require.Contains(t, err.Error(), c.says, c.name)
		}
		require.Zero(t, e.runs(), "no run row for a refused window")
		require.Equal(t, models.StateAuthorised, e.payment(pi).State, "nothing repaired")

		// A window only partly before the horizon is still clamped, with a
		// note; the lock of the refused runs was released.
		res := e.run(func(o *reconcile.Options) { o.Since, o.StuckLimit, o.Mode = day(2006), 10, reconcile.ModeEvents })
		require.True(t, res.Run.WindowStart.Equal(horizon), "clamped to the horizon, got %v", res.Run.WindowStart)
		require.Contains(t, string(res.Run.Notes), "clamped_from")
		require.Equal(t, models.StateCanceled, e.payment(pi).State)
	})
}
