package gocardless_test

// The verify oracle and GoCardless retries: a Success+ payment keeps status
// failed after a failure GoCardless will retry (details.will_attempt_retry
// true), then shows pending_submission once GoCardless resubmits it. The
// engine rightly applies no state for such a failure and keeps the row
// where the payment's chain put it; verify must agree with that row, not
// report it failed.

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/providers/gocardless"
	"github.com/reconciler/reconciler/reconcile"
	"github.com/reconciler/reconciler/verify"
)

func TestVerifierFailureGoCardlessWillRetry(t *testing.T) {
	t.Parallel()
	w := newRetryWorld(t)
	s := w.f.s
	// Failed on the charge date, GoCardless will retry it, not resubmitted
	// yet: status failed, the engine keeps authorised.
	pending := s.CreatePayment(1000, "GBP", day(10, 9))
	s.Submit(pending, day(9, 15))
	s.FailWillRetry(pending, day(6, 6))
	// Resubmitted by GoCardless, not submitted again yet: status
	// pending_submission, the engine keeps authorised.
	resubmitted := s.CreatePayment(1100, "GBP", day(10, 9))
	s.Submit(resubmitted, day(9, 15))
	s.FailWillRetry(resubmitted, day(6, 6))
	s.AutoRetry(resubmitted, day(6, 7))
	// A retried failure reported late, after the payment was confirmed:
	// status failed, the engine keeps captured.
	lateRetry := s.CreatePayment(1200, "GBP", day(14, 9))
	s.Submit(lateRetry, day(13, 15))
	s.Confirm(lateRetry, day(10, 6))
	s.FailWillRetry(lateRetry, day(9, 6))
	// Retried, and the retry failed finally: failed.
	finalAfterRetry := s.CreatePayment(1300, "GBP", day(14, 9))
	s.Submit(finalAfterRetry, day(13, 15))
	s.FailWillRetry(finalAfterRetry, day(10, 6))
	s.AutoRetry(finalAfterRetry, day(10, 7))
	s.Submit(finalAfterRetry, day(8, 15))
	s.Fail(finalAfterRetry, day(5, 6))
	// A final failure of a payment GoCardless never retries: failed, and
	// no event is read for it.
	noRetry := s.CreatePayment(1400, "GBP", day(10, 9))
	s.Submit(noRetry, day(9, 15))
	s.Fail(noRetry, day(6, 6))
	// A final failure the merchant retried through the API: the row stays
	// failed (a person decides, the run's refused item explains it), the
	// provider shows pending_submission: created.
	manual := s.CreatePayment(1500, "GBP", day(10, 9))
	s.SetRetryIfPossible(manual, true)
	s.Submit(manual, day(9, 15))
	s.Fail(manual, day(6, 6))
	s.RequestResubmission(manual, day(5, 11))
	// A Success+ payment that never failed: pending_submission is created.
	fresh := s.CreatePayment(1600, "GBP", day(3, 9))
	s.SetRetryIfPossible(fresh, true)
	// Retried and collected: confirmed, captured.
	collected := s.CreatePayment(1700, "GBP", day(14, 9))
	s.Submit(collected, day(13, 15))
	s.FailWillRetry(collected, day(10, 6))
	s.AutoRetry(collected, day(10, 7))
	s.Submit(collected, day(8, 15))
	s.Confirm(collected, day(5, 6))

	// The oracle alone.
	p, err := gocardless.New(gocardless.Config{AccessToken: "sandbox_x", BaseURL: w.f.url})
	require.NoError(t, err)
	ids := []string{pending, resubmitted, lateRetry, finalAfterRetry, noRetry, manual, fresh, collected}
	before := s.RequestsByPath()["/events"]
	cur, err := p.Verifier().Current(context.Background(), reconcile.CurrentParams{IDs: ids})
	require.NoError(t, err)
	require.Len(t, cur, len(ids))
	by := map[string]reconcile.Current{}
	for _, c := range cur {
		require.True(t, c.Found, c.ProviderID)
		require.False(t, c.Unknown, c.ProviderID)
		by[c.ProviderID] = c
	}
	for id, want := range map[string]struct {
		state models.State
		raw   string
	}{
		pending:         {models.StateAuthorised, "failed"},
		resubmitted:     {models.StateAuthorised, "pending_submission"},
		lateRetry:       {models.StateCaptured, "failed"},
		finalAfterRetry: {models.StateFailed, "failed"},
		noRetry:         {models.StateFailed, "failed"},
		manual:          {models.StateCreated, "pending_submission"},
		fresh:           {models.StateCreated, "pending_submission"},
		collected:       {models.StateCaptured, "confirmed"},
	} {
		require.Equal(t, want.state, by[id].State, id)
		require.Equal(t, want.raw, by[id].RawStatus, id)
		require.True(t, by[id].SettlementKnown, id)
	}
	require.Zero(t, by[pending].AmountCaptured, "nothing was collected")
	require.Zero(t, by[lateRetry].AmountCaptured, "the late failure took the money back")
	// One /events request for each Success+ payment whose status can hide
	// a retry (pending, resubmitted, lateRetry, finalAfterRetry, manual,
	// fresh), and one more for each of those whose latest failure
	// GoCardless retries (pending, resubmitted, lateRetry).
	require.Equal(t, int64(6+3), s.RequestsByPath()["/events"]-before)

	// Through the engine and verify: only created was delivered; the run
	// repairs the rest from the window, and verify --all agrees with every
	// row it left (the manual retry's failed row is explained by its
	// refused item).
	w.deliver(func(_, typ string) bool { return typ == "payments.created" })
	res := w.run()
	rows := w.rows()
	for id, want := range map[string]models.State{
		pending: models.StateAuthorised, resubmitted: models.StateAuthorised, lateRetry: models.StateCaptured,
		finalAfterRetry: models.StateFailed, noRetry: models.StateFailed, manual: models.StateFailed,
		fresh: models.StateCreated, collected: models.StateCaptured,
	} {
		require.Equal(t, want, rows[id].State, id)
	}
	require.ElementsMatch(t, []string{"behind/repaired", "conflict/refused"}, kindsOf(w.items(res.Run.ID)[manual]),
		"failed from the window, and the resubmission after a final failure left for a human")

	rep, err := verify.Run(context.Background(), verify.Options{DB: w.db.DB, Provider: gocardless.Name, Reader: p.Verifier(), All: true,
		Since: retryNow.AddDate(0, 0, -30), Until: retryNow.Add(time.Hour), Now: func() time.Time { return retryNow }})
	require.NoError(t, err)
	require.Equal(t, len(ids), rep.Checked)
	require.Empty(t, rep.Unexplained, "a failure GoCardless will retry is not failed")
	require.Equal(t, []verify.Difference{{ProviderID: manual, Field: verify.FieldState, Local: "failed", Provider: "created (pending_submission)"}},
		rep.ExplainedDifferences)
}
