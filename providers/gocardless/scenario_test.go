package gocardless_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/reconciler/reconciler/internal/pgtest"
	"github.com/reconciler/reconciler/internal/webhooksim"
	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/providers/gocardless"
	"github.com/reconciler/reconciler/reconcile"
	"github.com/reconciler/reconciler/verify"
	"github.com/reconciler/reconciler/workdays"
)

// A Bacs cycle whose webhooks were partly missed: submitted, confirmed,
// paid out, a late failure (before and after the payout), a chargeback, a
// cancelled chargeback, a merchant's resubmission after a final failure, a
// failure GoCardless retried and then collected, a refund. The run leaves
// every payment where GoCardless implies, reports what it must, and a rerun
// changes nothing.
func TestBacsCycleWithMissedWebhooks(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	// Monday 30 November 2026, 10:00 London.
	now := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	f := newFake(t, now)
	s := f.s
	d := func(days int, h int) time.Time {
		return now.AddDate(0, 0, -days).Truncate(24 * time.Hour).Add(time.Duration(h)*time.Hour + 123*time.Millisecond)
	}
	// The cycle of each payment: created Mon 23 Nov, submitted Tue, confirmed Fri, paid out Mon 30.
	cycle := func(upTo int) string {
		pm := s.CreatePayment(2500, "GBP", d(7, 9))
		steps := []func(){
			func() { s.Submit(pm, d(6, 15)) },
			func() { s.Confirm(pm, d(3, 6)) },
		}
		for i := 0; i < upTo && i < len(steps); i++ {
			steps[i]()
		}
		return pm
	}
	settled := cycle(2)
	s.PayOut(d(0, 7), settled)
	lateFail := cycle(2)
	s.Fail(lateFail, d(2, 16)) // after confirmed: failed
	failedAfterPayout := cycle(2)
	s.PayOut(d(1, 7), failedAfterPayout)
	s.Fail(failedAfterPayout, d(0, 8)) // settled → failed: a Direct Debit late failure after payout
	chargedBack := cycle(2)
	s.PayOut(d(2, 7), chargedBack)
	s.ChargeBack(chargedBack, d(1, 9))
	cbCancelled := cycle(2)
	s.PayOut(d(2, 7), cbCancelled)
	s.ChargeBack(cbCancelled, d(1, 9))
	s.CancelChargeback(cbCancelled, d(0, 9))
	resubmitted := cycle(1)
	s.Fail(resubmitted, d(4, 16)) // final (will_attempt_retry false)
	s.RequestResubmission(resubmitted, d(3, 11))
	// Success+: failed with will_attempt_retry true, resubmitted by
	// GoCardless, collected on the retry and paid out.
	retried := s.CreatePayment(2500, "GBP", d(10, 9))
	s.Submit(retried, d(9, 15))
	s.FailWillRetry(retried, d(6, 6))
	s.AutoRetry(retried, d(6, 7))
	s.Submit(retried, d(4, 15))
	s.Confirm(retried, d(1, 6))
	s.PayOut(d(0, 7), retried)
	refunded := cycle(2)
	s.PayOut(d(2, 7), refunded)
	s.Refund(refunded, 2500, d(1, 8))
	unknownLocally := cycle(2)
	// The refund lifecycle: a refund that failed after it was counted, and
	// a refund action nobody documents.
	refundFailed := cycle(2)
	s.PayOut(d(2, 7), refundFailed)
	rfFailed := s.RefundCreated(refundFailed, 1000, d(1, 8))
	s.RefundFailed(rfFailed, d(0, 6))
	refundOdd := cycle(2)
	rfOdd := s.RefundCreated(refundOdd, 500, d(1, 8))
	s.RefundRawAction(rfOdd, "refund_mystery", d(0, 7))
	// A payout that bounced after it was paid.
	bounced := cycle(2)
	bouncedPayout := s.PayOut(d(2, 7), bounced)
	s.BouncePayout(bouncedPayout, d(1, 10))

	// The webhooks: every "created" arrived, and about half the rest.
	ds := webhooksim.GoCardless(s.Deliveries())
	_, missed, err := webhooksim.Seed(context.Background(), db.DB, "gocardless", ds, now, func(i int, dl webhooksim.Delivery) bool {
		for _, f := range dl.Facts {
			if f.PaymentID == unknownLocally {
				return false
			}
		}
		return dl.EventType == "payments.created" || i%2 == 0
	})
	require.NoError(t, err)
	require.Positive(t, missed)

	run := func() reconcile.Result {
		p, err := gocardless.New(gocardless.Config{AccessToken: "sandbox_x", BaseURL: f.url, Sleep: func(ctx context.Context, _ time.Duration) error { return ctx.Err() }})
		require.NoError(t, err)
		cal := workdays.EnglandAndWales()
		res, err := reconcile.Run(context.Background(), reconcile.Options{DB: db.DB, Provider: p, Since: now.AddDate(0, 0, -10),
			Now: func() time.Time { return now }, StuckBefore: func(n time.Time) time.Time { return cal.Before(n, 5) }})
		require.NoError(t, err)
		return res
	}
	res := run()

	var rows []models.Payment
	require.NoError(t, db.Where("provider = 'gocardless'").Find(&rows).Error)
	got := map[string]models.Payment{}
	for _, r := range rows {
		got[r.ProviderID] = r
	}
	var items []models.DriftItem
	require.NoError(t, db.Where("run_id = ?", res.Run.ID).Find(&items).Error)
	kinds := map[string][]string{}
	refused := map[string]bool{}
	for _, it := range items {
		kinds[it.ProviderID] = append(kinds[it.ProviderID], it.Kind+"/"+it.Action)
		refused[it.ProviderID] = refused[it.ProviderID] || it.Action == models.ActionRefused
	}
	// Where GoCardless implies, or refused with a drift item saying why (the
	// webhooks delivered a failure after a payout they also missed).
	for id, want := range s.ExpectedAt(now) {
		if got[id].State != want.State || got[id].AmountRefunded != want.AmountRefunded {
			require.True(t, refused[id], "%s is %s, GoCardless implies %s, and no refused item says why", id, got[id].State, want.State)
		}
	}
	require.Equal(t, models.StateSettled, got[settled].State)
	require.Equal(t, models.StateFailed, got[lateFail].State)
	require.Equal(t, models.StateFailed, got[failedAfterPayout].State)
	require.Equal(t, models.StateSettled, got[retried].State, "a failure GoCardless retried is not final")
	require.Equal(t, models.StateChargeback, got[chargedBack].State)
	require.Equal(t, models.StateChargeback, got[cbCancelled].State)
	require.Equal(t, models.StateFailed, got[resubmitted].State)
	require.Equal(t, models.StateRefunded, got[refunded].State)
	require.Equal(t, int64(2500), got[refunded].AmountRefunded)
	require.Equal(t, models.StateCaptured, got[unknownLocally].State)

	require.Contains(t, kinds[unknownLocally], "missing_local/repaired")
	require.NotContains(t, kinds[failedAfterPayout], "conflict/refused", "a late failure after payout is an allowed edge")
	require.NotContains(t, kinds[retried], "conflict/refused", "a retry after a failure GoCardless retries is normal")
	require.Contains(t, kinds[cbCancelled], "conflict/refused", "a cancelled chargeback is for a human")
	require.Contains(t, kinds[resubmitted], "conflict/refused", "a resubmission is for a human")
	var synthetic int64
	require.NoError(t, db.Raw(`SELECT count(*) FROM webhook_events WHERE synthetic`).Scan(&synthetic).Error)
	require.Equal(t, int64(missed), synthetic, "every missed event recorded once")
	require.Equal(t, int64(missed), res.Run.SyntheticEvents)

	require.Equal(t, models.StateSettled, got[bounced].State, "a bounced payout moves nothing back")
	require.Equal(t, bouncedPayout, deref(got[bounced].PayoutID), "links.payout recorded")
	require.Contains(t, kinds[bounced], "conflict/refused", "a payout that bounced after it was paid is for a human")
	require.Contains(t, kinds[refundFailed], "conflict/refused", "a refund counted, then failed, is for a human")
	require.Equal(t, int64(1000), got[refundFailed].AmountRefunded, "GoCardless's total: counted at creation, never lowered")
	require.Contains(t, kinds[refundOdd], "unknown_status/reported", "an unknown refund action is reported")
	for _, id := range []string{settled, retried, chargedBack, refunded} {
		require.NotEmpty(t, deref(got[id].PayoutID), "%s: the payout that paid it out is recorded", id)
	}

	again := run()
	require.Zero(t, again.Run.Repaired)
	require.Zero(t, again.Run.SyntheticEvents)

	// The oracle is GoCardless's own objects: every difference is explained.
	rep, err := verify.Run(context.Background(), verify.Options{DB: db.DB, Provider: gocardless.Name, Reader: mustProvider(t, f.url).Verifier(),
		Since: now.AddDate(0, 0, -14), Until: now.Add(time.Hour), All: true, Now: func() time.Time { return now }})
	require.NoError(t, err)
	require.Equal(t, len(rows), rep.Checked)
	require.Empty(t, rep.Unexplained, "verify --all: differences no item explains")
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func mustProvider(t *testing.T, url string) *gocardless.Provider {
	t.Helper()
	p, err := gocardless.New(gocardless.Config{AccessToken: "sandbox_x", BaseURL: url})
	require.NoError(t, err)
	return p
}

// A payment submitted on Friday is not stuck on Monday: the threshold counts
// UK working days.
func TestStuckThresholdCountsWorkingDays(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	friday := time.Date(2026, 11, 27, 15, 0, 0, 0, time.UTC)
	f := newFake(t, friday)
	pm := f.s.CreatePayment(1000, "GBP", friday.Add(-time.Hour))
	f.s.Submit(pm, friday)
	require.NoError(t, db.Exec(`INSERT INTO payments (provider, provider_id, state, amount, currency, source_updated_at) VALUES ('gocardless', ?, 'authorised', 1000, 'gbp', ?)`, pm, friday).Error)
	cal := workdays.EnglandAndWales()
	fetches := func(now time.Time) int64 {
		p, err := gocardless.New(gocardless.Config{AccessToken: "sandbox_x", BaseURL: f.url})
		require.NoError(t, err)
		before := f.s.RequestsByPath()["/payments/{id}"]
		_, err = reconcile.Run(context.Background(), reconcile.Options{DB: db.DB, Provider: p, Since: now.Add(-time.Hour), Now: func() time.Time { return now },
			StuckBefore: func(n time.Time) time.Time { return cal.Before(n, 3) }})
		require.NoError(t, err)
		return f.s.RequestsByPath()["/payments/{id}"] - before
	}
	monday := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	require.Zero(t, fetches(monday), "one working day after Friday is not stuck")
	thursday := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	require.Equal(t, int64(1), fetches(thursday), "three working days after Friday 15:00 it is stuck and re-fetched")
}
