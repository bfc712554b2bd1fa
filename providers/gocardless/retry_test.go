package gocardless_test

// GoCardless retries: a failure GoCardless will retry itself
// (details.will_attempt_retry true, Success+) is not final, and a payment
// retried and collected ends where the collection put it; a final failure
// ends failed; a late failure after the payout ends failed, and its
// settlement against a payout adds nothing.

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/reconciler/reconciler/internal/pgtest"
	"github.com/reconciler/reconciler/internal/webhooksim"
	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/providers/gocardless"
	"github.com/reconciler/reconciler/reconcile"
	"github.com/reconciler/reconciler/workdays"
)

// Monday 30 November 2026, 10:00 London.
var retryNow = time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)

// day is `days` calendar days before retryNow at h o'clock (and 123 ms).
func day(days, h int) time.Time {
	return retryNow.AddDate(0, 0, -days).Truncate(24 * time.Hour).Add(time.Duration(h)*time.Hour + 123*time.Millisecond)
}

type retryWorld struct {
	t  *testing.T
	db *pgtest.DB
	f  *fake
}

func newRetryWorld(t *testing.T) *retryWorld {
	return &retryWorld{t: t, db: pgtest.New(t), f: newFake(t, retryNow)}
}

// deliver seeds the webhooks keep accepts, as the application's worker
// would have applied them.
func (w *retryWorld) deliver(keep func(pm, eventType string) bool) {
	ds := webhooksim.GoCardless(w.f.s.Deliveries())
	_, _, err := webhooksim.Seed(context.Background(), w.db.DB, "gocardless", ds, retryNow, func(_ int, d webhooksim.Delivery) bool {
		return keep(d.Facts[0].PaymentID, d.EventType)
	})
	require.NoError(w.t, err)
}

func (w *retryWorld) run() reconcile.Result {
	p, err := gocardless.New(gocardless.Config{AccessToken: "sandbox_x", BaseURL: w.f.url, Sleep: func(ctx context.Context, _ time.Duration) error { return ctx.Err() }})
	require.NoError(w.t, err)
	cal := workdays.EnglandAndWales()
	res, err := reconcile.Run(context.Background(), reconcile.Options{DB: w.db.DB, Provider: p, Since: retryNow.AddDate(0, 0, -20),
		Now: func() time.Time { return retryNow }, StuckBefore: func(n time.Time) time.Time { return cal.Before(n, 5) }})
	require.NoError(w.t, err)
	require.Equal(w.t, models.RunSucceeded, res.Run.Status)
	return res
}

func (w *retryWorld) rows() map[string]models.Payment {
	var rows []models.Payment
	require.NoError(w.t, w.db.Where("provider = 'gocardless'").Find(&rows).Error)
	out := map[string]models.Payment{}
	for _, r := range rows {
		out[r.ProviderID] = r
	}
	return out
}

func (w *retryWorld) items(runID int64) map[string][]models.DriftItem {
	var items []models.DriftItem
	require.NoError(w.t, w.db.Where("run_id = ?", runID).Find(&items).Error)
	out := map[string][]models.DriftItem{}
	for _, it := range items {
		out[it.ProviderID] = append(out[it.ProviderID], it)
	}
	return out
}

func kindsOf(items []models.DriftItem) []string {
	var out []string
	for _, it := range items {
		out = append(out, it.Kind+"/"+it.Action)
	}
	return out
}

func TestRetriedFailureEndsWhereTheCollectionPutIt(t *testing.T) {
	t.Parallel()
	w := newRetryWorld(t)
	s := w.f.s
	// Success+ payments: submitted, failed on the charge date for
	// insufficient funds (will_attempt_retry true), resubmitted by
	// GoCardless, submitted again and collected.
	retry := func(amount int64) string {
		pm := s.CreatePayment(amount, "GBP", day(14, 9))
		s.SetRetryIfPossible(pm, true)
		s.Submit(pm, day(13, 15))
		s.FailWillRetry(pm, day(10, 6))
		s.AutoRetry(pm, day(10, 7))
		s.Submit(pm, day(8, 15))
		return pm
	}
	settled := retry(2500)
	s.Confirm(settled, day(5, 6))
	s.PayOut(day(4, 7), settled)
	captured := retry(2600)
	s.Confirm(captured, day(1, 6))
	// The application's worker marked this one failed on the first failure
	// (it ignored will_attempt_retry): the state machine cannot leave failed.
	failedLocally := retry(2700)
	s.Confirm(failedLocally, day(5, 6))
	s.PayOut(day(4, 7), failedLocally)
	// Failed, GoCardless will retry it, not resubmitted yet.
	pending := s.CreatePayment(2800, "GBP", day(7, 9))
	s.Submit(pending, day(6, 15))
	s.FailWillRetry(pending, day(3, 6))
	// Retried, and the retry failed finally.
	retriedThenFailed := retry(2900)
	s.Fail(retriedThenFailed, day(5, 6))
	// A final failure (will_attempt_retry false).
	final := s.CreatePayment(3000, "GBP", day(7, 9))
	s.Submit(final, day(6, 15))
	s.Fail(final, day(3, 6))
	// A final failure the merchant retried through the API, collected: the
	// local failed row cannot follow, a person must decide.
	manual := s.CreatePayment(3100, "GBP", day(14, 9))
	s.Submit(manual, day(13, 15))
	s.Fail(manual, day(10, 6))
	s.RequestResubmission(manual, day(9, 11))
	s.Submit(manual, day(8, 15))
	s.Confirm(manual, day(5, 6))

	// Only created and submitted arrived (and, for manual, the final
	// failure): the rows are authorised (manual: failed).
	w.deliver(func(pm, typ string) bool {
		switch typ {
		case "payments.created", "payments.submitted":
			return true
		case "payments.failed":
			return pm == manual
		}
		return false
	})
	require.NoError(t, w.db.Exec(`UPDATE payments SET state = 'failed', source_updated_at = ? WHERE provider_id = ?`, day(10, 6), failedLocally).Error)
	before := w.rows()
	require.Equal(t, models.StateAuthorised, before[settled].State)
	require.Equal(t, models.StateFailed, before[manual].State)

	res := w.run()
	got, items := w.rows(), w.items(res.Run.ID)
	for id, want := range map[string]models.State{
		settled: models.StateSettled, captured: models.StateCaptured, failedLocally: models.StateFailed,
		pending: models.StateAuthorised, retriedThenFailed: models.StateFailed, final: models.StateFailed,
		manual: models.StateFailed,
	} {
		require.Equal(t, want, got[id].State, id)
	}
	require.Equal(t, []string{"behind/repaired"}, kindsOf(items[settled]), "retried and paid out: settled, not failed")
	require.Equal(t, []string{"behind/repaired"}, kindsOf(items[captured]))
	require.Empty(t, items[pending], "a failure GoCardless will retry changes nothing")
	require.Equal(t, []string{"behind/repaired"}, kindsOf(items[retriedThenFailed]))
	require.Equal(t, []string{"behind/repaired"}, kindsOf(items[final]))
	require.Equal(t, []string{"conflict/refused"}, kindsOf(items[failedLocally]))
	require.Contains(t, string(items[failedLocally][0].Detail), "will_attempt_retry true")
	require.Equal(t, []string{"conflict/refused"}, kindsOf(items[manual]), "a resubmission after a final failure is for a human")
	require.Contains(t, string(items[manual][0].Detail), "will_attempt_retry false")

	// The ground truth the webhooks imply agrees (gcfake ExpectedAt).
	want := s.ExpectedAt(retryNow)
	for _, id := range []string{settled, captured, pending, retriedThenFailed, final, manual} {
		require.Equal(t, want[id].State, got[id].State, id)
	}

	again := w.run()
	require.Zero(t, again.Run.Repaired)
	require.Zero(t, again.Run.SyntheticEvents)
}

func TestLateFailureAfterPayoutEndsFailed(t *testing.T) {
	t.Parallel()
	w := newRetryWorld(t)
	s := w.f.s
	cycle := func(amount int64) string {
		pm := s.CreatePayment(amount, "GBP", day(14, 9))
		s.Submit(pm, day(13, 15))
		s.Confirm(pm, day(10, 6))
		s.PayOut(day(9, 7), pm)
		s.Fail(pm, day(7, 8)) // the bank reported it failed after the payout
		s.LateFailureSettled(pm, day(6, 7))
		return pm
	}
	missedFailure := cycle(1000) // failed and late_failure_settled missed: settled locally
	alreadyFailed := cycle(1100) // the failure arrived: failed locally
	onlyCreated := cycle(1200)   // everything after created missed
	w.deliver(func(pm, typ string) bool {
		switch {
		case typ == "payments.created":
			return true
		case pm == onlyCreated, typ == "payments.late_failure_settled":
			return false
		case typ == "payments.failed":
			return pm == alreadyFailed
		}
		return true
	})
	before := w.rows()
	require.Equal(t, models.StateSettled, before[missedFailure].State)
	require.Equal(t, models.StateFailed, before[alreadyFailed].State)

	res := w.run()
	got, items := w.rows(), w.items(res.Run.ID)
	for _, id := range []string{missedFailure, alreadyFailed, onlyCreated} {
		require.Equal(t, models.StateFailed, got[id].State, id)
		require.Equal(t, day(7, 8), got[id].SourceUpdatedAt.UTC(), "%s: failed at the late failure", id)
	}
	require.Equal(t, []string{"behind/repaired"}, kindsOf(items[missedFailure]), "settled → failed: no conflict")
	require.Empty(t, items[alreadyFailed], "a row already failed after a late failure is in sync")
	require.Equal(t, []string{"behind/repaired"}, kindsOf(items[onlyCreated]))
}

// The stuck path re-fetches a payment by id. A failed payment keeps status
// failed until GoCardless resubmits it, so a failed payment with
// retry_if_possible is mapped by its latest failed event.
func TestFetchedFailedPaymentWithARetryComing(t *testing.T) {
	t.Parallel()
	f := newFake(t, retryNow)
	s := f.s
	pending := s.CreatePayment(1000, "GBP", day(10, 9))
	s.Submit(pending, day(9, 15))
	s.FailWillRetry(pending, day(6, 6))
	finalAfterRetry := s.CreatePayment(1100, "GBP", day(10, 9))
	s.Submit(finalAfterRetry, day(9, 15))
	s.FailWillRetry(finalAfterRetry, day(6, 6))
	s.AutoRetry(finalAfterRetry, day(6, 7))
	s.Submit(finalAfterRetry, day(5, 15))
	s.Fail(finalAfterRetry, day(2, 6))
	noRetry := s.CreatePayment(1200, "GBP", day(10, 9))
	s.Submit(noRetry, day(9, 15))
	s.Fail(noRetry, day(6, 6))
	resubmitted := s.CreatePayment(1300, "GBP", day(10, 9))
	s.Submit(resubmitted, day(9, 15))
	s.FailWillRetry(resubmitted, day(6, 6))
	s.AutoRetry(resubmitted, day(6, 7))

	p, err := gocardless.New(gocardless.Config{AccessToken: "sandbox_x", BaseURL: f.url})
	require.NoError(t, err)
	got, err := p.Fetch(context.Background(), reconcile.FetchParams{ProviderIDs: []string{pending, finalAfterRetry, noRetry, resubmitted}})
	require.NoError(t, err)
	require.Len(t, got, 4)
	by := map[string]reconcile.Change{}
	for _, c := range got {
		by[c.ProviderID] = c
	}
	require.Equal(t, models.StateNone, by[pending].State, "failed, and GoCardless will retry it: not final")
	require.Equal(t, gocardless.RawFailedWillRetry, by[pending].RawStatus)
	require.False(t, by[pending].Unknown)
	require.Empty(t, by[pending].EventID)
	require.Equal(t, models.StateFailed, by[finalAfterRetry].State)
	require.Equal(t, day(2, 6), by[finalAfterRetry].At, "the time of the final failure")
	require.True(t, strings.HasPrefix(by[finalAfterRetry].EventID, "recon:"+finalAfterRetry+":failed:"))
	require.Equal(t, models.StateFailed, by[noRetry].State, "retry_if_possible false: GoCardless never retries it")
	require.Equal(t, models.StateCreated, by[resubmitted].State, "pending_submission again after the retry")
	require.Equal(t, int64(4), f.s.RequestsByPath()["/events"], "each payment's own events are read once: they date its state and say whether a retry is coming")

	// Through the engine: the stuck authorised row of the pending retry is
	// not failed.
	db := pgtest.New(t)
	require.NoError(t, db.Exec(`INSERT INTO payments (provider, provider_id, state, amount, currency, source_updated_at) VALUES ('gocardless', ?, 'authorised', 1000, 'gbp', ?)`, pending, day(9, 15)).Error)
	require.NoError(t, db.Exec(`INSERT INTO payments (provider, provider_id, state, amount, currency, source_updated_at) VALUES ('gocardless', ?, 'authorised', 1100, 'gbp', ?)`, finalAfterRetry, day(5, 15)).Error)
	cal := workdays.EnglandAndWales()
	res, err := reconcile.Run(context.Background(), reconcile.Options{DB: db.DB, Provider: p, Since: retryNow.Add(-time.Hour),
		Now: func() time.Time { return retryNow }, StuckBefore: func(n time.Time) time.Time { return cal.Before(n, 1) }})
	require.NoError(t, err)
	var rows []models.Payment
	require.NoError(t, db.Where("provider = 'gocardless'").Order("amount").Find(&rows).Error)
	require.Len(t, rows, 2)
	require.Equal(t, models.StateAuthorised, rows[0].State, "a failure GoCardless will retry leaves the row where it was")
	require.Equal(t, models.StateFailed, rows[1].State)
	var items []models.DriftItem
	require.NoError(t, db.Where("run_id = ?", res.Run.ID).Find(&items).Error)
	for _, it := range items {
		require.NotEqual(t, pending, it.ProviderID, "no drift item for a pending retry: %+v", it)
	}
}

// A window that starts after the failure: a resubmission by GoCardless
// (details.cause payment_autoretried) is normal, one through the API is a
// revert; the normal one is reported only for a local row recorded failed,
// which the retry's collection cannot leave.
func TestResubmissionWithoutItsFailureInTheWindow(t *testing.T) {
	t.Parallel()
	w := newRetryWorld(t)
	s := w.f.s
	story := func(amount int64, final bool) string {
		pm := s.CreatePayment(amount, "GBP", day(10, 9))
		s.Submit(pm, day(9, 15))
		if final {
			s.Fail(pm, day(6, 6))
			s.RequestResubmission(pm, day(3, 7))
		} else {
			s.FailWillRetry(pm, day(6, 6))
			s.AutoRetry(pm, day(3, 7))
		}
		s.Submit(pm, day(2, 15))
		return pm
	}
	auto, autoFailedLocally := story(1000, false), story(1100, false)
	manual, manualFailedLocally := story(1200, true), story(1300, true)
	for _, r := range []struct {
		pm, state string
		amount    int64
	}{{auto, "authorised", 1000}, {autoFailedLocally, "failed", 1100}, {manual, "authorised", 1200}, {manualFailedLocally, "failed", 1300}} {
		require.NoError(t, w.db.Exec(`INSERT INTO payments (provider, provider_id, state, amount, currency, source_updated_at) VALUES ('gocardless', ?, ?, ?, 'gbp', ?)`,
			r.pm, r.state, r.amount, day(6, 6)).Error)
	}
	p, err := gocardless.New(gocardless.Config{AccessToken: "sandbox_x", BaseURL: w.f.url})
	require.NoError(t, err)
	res, err := reconcile.Run(context.Background(), reconcile.Options{DB: w.db.DB, Provider: p, Since: day(4, 0), Until: retryNow,
		Now: func() time.Time { return retryNow }, StuckLimit: -1})
	require.NoError(t, err)
	items := w.items(res.Run.ID)
	require.Empty(t, items[auto], "GoCardless retrying its own failure is normal")
	require.Equal(t, []string{"conflict/refused"}, kindsOf(items[autoFailedLocally]), "but a local failed row cannot follow it")
	require.Equal(t, []string{"conflict/refused"}, kindsOf(items[manual]))
	require.Equal(t, []string{"conflict/refused"}, kindsOf(items[manualFailedLocally]))
	got := w.rows()
	require.Equal(t, models.StateAuthorised, got[auto].State)
	require.Equal(t, models.StateFailed, got[autoFailedLocally].State)
}
