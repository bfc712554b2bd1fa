package stripe_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	stripego "github.com/stripe/stripe-go/v76"

	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/providers/stripe"
	"github.com/reconciler/reconciler/providers/stripe/stripefake"
	"github.com/reconciler/reconciler/reconcile"
)

var now = time.Date(2026, 11, 20, 6, 0, 0, 0, time.UTC)

func setup(t *testing.T) (*stripefake.Server, *stripe.Provider) {
	t.Helper()
	t.Parallel()
	fake := stripefake.New(stripefake.Options{Now: func() time.Time { return now }, Seed: 3})
	url := fake.Start()
	t.Cleanup(fake.Close)
	p, err := stripe.New(stripe.Config{APIKey: "sk_test_x", BaseURL: url, MaxRetries: 5,
		Sleep: func(ctx context.Context, _ time.Duration) error { return ctx.Err() }})
	require.NoError(t, err)
	return fake, p
}

func collect(t *testing.T, p *stripe.Provider, lp reconcile.ListParams) ([]reconcile.Event, []reconcile.Change) {
	t.Helper()
	var evs []reconcile.Event
	var cs []reconcile.Change
	require.NoError(t, p.ListChanges(context.Background(), lp, func(pg reconcile.Page) error {
		evs = append(evs, pg.Events...)
		cs = append(cs, pg.Changes...)
		return nil
	}))
	return evs, cs
}

func TestPaymentIntentStateEveryStatus(t *testing.T) {
	want := map[stripego.PaymentIntentStatus]models.State{
		stripego.PaymentIntentStatusRequiresPaymentMethod: models.StateCreated,
		stripego.PaymentIntentStatusRequiresConfirmation:  models.StateCreated,
		stripego.PaymentIntentStatusRequiresAction:        models.StateCreated,
		stripego.PaymentIntentStatusProcessing:            models.StateCreated,
		stripego.PaymentIntentStatusRequiresCapture:       models.StateAuthorised,
		stripego.PaymentIntentStatusSucceeded:             models.StateCaptured,
		stripego.PaymentIntentStatusCanceled:              models.StateCanceled,
	}
	for status, state := range want {
		got, ok := stripe.PaymentIntentState(string(status))
		require.True(t, ok, status)
		require.Equal(t, state, got, status)
	}
	for _, s := range []string{"", "requires_reauthorization", "SUCCEEDED"} {
		_, ok := stripe.PaymentIntentState(s)
		require.False(t, ok, "%q must be unknown, never guessed", s)
	}
}

func TestWindowBoundsInclusiveStartExclusiveEnd(t *testing.T) {
	fake, p := setup(t)
	a := fake.Account("")
	since, until := now.Add(-2*time.Hour), now.Add(-time.Hour)
	a.CreatePayment(100, "gbp", false, now.Add(-5*time.Hour)) // anchor
	before := a.CreatePayment(100, "gbp", false, since.Add(-time.Second))
	first := a.CreatePayment(100, "gbp", false, since)
	last := a.CreatePayment(100, "gbp", false, until.Add(-time.Second))
	after := a.CreatePayment(100, "gbp", false, until)
	_, cs := collect(t, p, reconcile.ListParams{Since: since, Until: until})
	var ids []string
	for _, c := range cs {
		ids = append(ids, c.ProviderID)
	}
	require.Equal(t, []string{first, last}, ids)
	require.NotContains(t, ids, before)
	require.NotContains(t, ids, after)
}

func TestStreamsOldestFirstAcrossPagesWithAndWithoutAnchor(t *testing.T) {
	for _, anchor := range []bool{true, false} {
		fake := stripefake.New(stripefake.Options{Now: func() time.Time { return now }, Seed: 4})
		url := fake.Start()
		p, err := stripe.New(stripe.Config{APIKey: "sk_test_x", BaseURL: url})
		require.NoError(t, err)
		a := fake.Account("")
		if anchor {
			a.CreatePayment(100, "gbp", false, now.Add(-40*time.Hour))
		}
		a.Generate(stripefake.GenOptions{Payments: 400, Start: now.Add(-20 * time.Hour), End: now.Add(-time.Minute), Seed: 8})
		evs, _ := collect(t, p, reconcile.ListParams{Since: now.Add(-24 * time.Hour), Until: now})
		want := 0
		for _, d := range a.Deliveries() {
			if !d.At.Before(now.Add(-24*time.Hour)) && contains(stripe.EventTypes, d.EventType) {
				want++
			}
		}
		require.Len(t, evs, want, "anchor=%v: every event once", anchor)
		seen := map[string]bool{}
		for i, e := range evs {
			require.False(t, seen[e.ID], "duplicate %s", e.ID)
			seen[e.ID] = true
			if i > 0 {
				require.False(t, e.At.Before(evs[i-1].At), "not oldest first at %d", i)
			}
		}
		perPage := float64(p.Requests()) / (float64(want) / 100)
		if anchor {
			require.LessOrEqual(t, perPage, 1.6, "list requests per 100 events (payout pages included)")
		}
		fake.Close()
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func TestConnectedAccountsAreSeparate(t *testing.T) {
	fake, p := setup(t)
	plat := fake.Account("").CreatePayment(100, "gbp", false, now.Add(-time.Hour))
	conn := fake.Account("acct_1Connected").CreatePayment(200, "eur", false, now.Add(-time.Hour))
	_, cs := collect(t, p, reconcile.ListParams{Account: "acct_1Connected", Since: now.Add(-2 * time.Hour), Until: now})
	require.Len(t, cs, 1)
	require.Equal(t, conn, cs[0].ProviderID)
	require.Equal(t, "eur", cs[0].Currency)
	_, cs = collect(t, p, reconcile.ListParams{Since: now.Add(-2 * time.Hour), Until: now})
	require.Len(t, cs, 1)
	require.Equal(t, plat, cs[0].ProviderID)
}

func TestPayoutSettlesSweptCharges(t *testing.T) {
	fake, p := setup(t)
	a := fake.Account("")
	var pis []string
	for i := range 150 { // more than one page of balance transactions
		pi := a.CreatePayment(int64(100+i), "gbp", false, now.Add(-50*time.Hour))
		a.Capture(pi, now.Add(-50*time.Hour))
		pis = append(pis, pi)
	}
	a.Payout(now.Add(-time.Hour), pis...)
	_, cs := collect(t, p, reconcile.ListParams{Since: now.Add(-2 * time.Hour), Until: now})
	settled := map[string]bool{}
	for _, c := range cs {
		require.Equal(t, models.StateSettled, c.State)
		require.True(t, c.At.Equal(now.Add(-time.Hour)), "settled at the payout event's time")
		settled[c.ProviderID] = true
	}
	require.Len(t, settled, 150)
}

func TestMappingTrapsAndReverts(t *testing.T) {
	fake, p := setup(t)
	a := fake.Account("")
	t0 := now.Add(-3 * time.Hour)
	held := a.CreatePayment(500, "gbp", true, t0)
	a.Authorise(held, t0.Add(time.Second))
	a.Cancel(held, t0.Add(2*time.Second))
	paid := a.CreatePayment(900, "gbp", false, t0)
	a.Capture(paid, t0.Add(time.Second))
	re := a.Refund(paid, 300, t0.Add(3*time.Second))
	a.FailRefund(re, t0.Add(4*time.Second))
	dp := a.Dispute(paid, t0.Add(5*time.Second))
	a.CloseDispute(dp, "won", t0.Add(6*time.Second))
	a.SetRawStatus(held, "requires_reauthorization", "payment_intent.processing", t0.Add(7*time.Second))

	_, cs := collect(t, p, reconcile.ListParams{Since: now.Add(-4 * time.Hour), Until: now})
	var heldStates []models.State
	var partial, revertRefund, revertDispute, unknown bool
	for _, c := range cs {
		switch {
		case c.ProviderID == held && c.Unknown:
			unknown = true
			require.Equal(t, "requires_reauthorization", c.RawStatus)
		case c.ProviderID == held:
			heldStates = append(heldStates, c.State)
			require.Zero(t, c.AmountRefunded, "a released hold is not a refund")
		case c.Revert != "" && c.RawStatus == "refund_failed":
			revertRefund = true
		case c.Revert != "" && c.RawStatus == "dispute_won":
			revertDispute = true
			require.Equal(t, []models.State{models.StateChargeback}, c.RevertOnlyFrom)
		case c.ProviderID == paid && c.AmountRefunded == 300 && c.State == models.StateNone:
			partial = true
		}
	}
	require.Equal(t, []models.State{models.StateCreated, models.StateAuthorised, models.StateCanceled}, heldStates)
	require.True(t, partial, "partial refund raises amount only")
	require.True(t, revertRefund)
	require.True(t, revertDispute)
	require.True(t, unknown)
}

func TestFetchInfersTimesAndIDs(t *testing.T) {
	fake, p := setup(t)
	a := fake.Account("")
	t0 := now.Add(-200 * time.Hour)
	canceled := a.CreatePayment(500, "gbp", true, t0)
	a.Authorise(canceled, t0.Add(time.Minute))
	a.Cancel(canceled, t0.Add(time.Hour))
	refunded := a.CreatePayment(700, "gbp", false, t0)
	a.Capture(refunded, t0.Add(time.Minute))
	a.Refund(refunded, 700, t0.Add(2*time.Hour))
	cs, err := p.Fetch(context.Background(), reconcile.FetchParams{ProviderIDs: []string{canceled, refunded, "pi_doesnotexist000000000000"}})
	require.NoError(t, err, "a payment unknown to the provider is skipped, not fatal")
	byID := map[string][]reconcile.Change{}
	for _, c := range cs {
		require.True(t, c.Inferred)
		require.Equal(t, reconcile.SyntheticEventID(c.ProviderID, c.State, c.At), c.EventID)
		byID[c.ProviderID] = append(byID[c.ProviderID], c)
	}
	require.Len(t, byID[canceled], 1)
	require.Equal(t, models.StateCanceled, byID[canceled][0].State)
	require.True(t, byID[canceled][0].At.Equal(t0.Add(time.Hour)), "canceled_at")
	require.Len(t, byID[refunded], 2)
	require.Equal(t, models.StateRefunded, byID[refunded][1].State)
	require.True(t, byID[refunded][1].At.Equal(t0.Add(2*time.Hour)), "the refund's created")
	require.Equal(t, int64(700), byID[refunded][1].AmountRefunded)
}

func TestCancellationStopsWithinASecond(t *testing.T) {
	fake, p := setup(t)
	fake.Account("").Generate(stripefake.GenOptions{Payments: 2000, Start: now.Add(-20 * time.Hour), End: now, Seed: 1})
	fake.SetLatency(300 * time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(100 * time.Millisecond); cancel() }()
	done := make(chan error, 1)
	go func() {
		done <- p.ListChanges(ctx, reconcile.ListParams{Since: now.Add(-24 * time.Hour), Until: now}, func(reconcile.Page) error { return nil })
	}()
	select {
	case err := <-done:
		require.ErrorIs(t, err, context.Canceled)
	case <-time.After(time.Second):
		t.Fatal("ListChanges did not stop within a second of cancellation")
	}
}

func TestErrorsNameStatusNotKey(t *testing.T) {
	fake, p := setup(t)
	fake.SetFailureRate(500, 1)
	err := p.ListChanges(context.Background(), reconcile.ListParams{Since: now.Add(-time.Hour), Until: now}, func(reconcile.Page) error { return nil })
	require.Error(t, err)
	// The retry policy's words: the attempts, the last answer, Stripe's own
	// error; never the key.
	require.Contains(t, err.Error(), "gave up after 6 attempts")
	require.Contains(t, err.Error(), "last answer HTTP 500 Internal Server Error")
	require.Contains(t, err.Error(), "api_error: An unknown error occurred")
	require.NotContains(t, err.Error(), "sk_test_x")
	require.Equal(t, int64(6), p.Requests(), "one request and five retries")
}

// TestLargePayoutIsStreamed: a payout of 2,500 charges reaches the engine
// in pages of at most a thousand of its changes as its balance
// transactions are read, never held whole: the first page is handed on
// after 11 of its 25 pages of balance transactions. The payout's event
// goes with the first page; the cursor moves past it only with the last.
func TestLargePayoutIsStreamed(t *testing.T) {
	fake, p := setup(t)
	a := fake.Account("")
	var pis []string
	for i := range 2500 {
		pi := a.CreatePayment(int64(100+i), "gbp", false, now.Add(-50*time.Hour))
		a.Capture(pi, now.Add(-50*time.Hour))
		pis = append(pis, pi)
	}
	a.Payout(now.Add(-time.Hour), pis...)
	type seen struct {
		events, changes int
		cursor          string
		btPages         int64
	}
	var pages []seen
	settled := map[string]bool{}
	var payoutEvent string
	require.NoError(t, p.ListChanges(context.Background(), reconcile.ListParams{Since: now.Add(-2 * time.Hour), Until: now}, func(pg reconcile.Page) error {
		for _, e := range pg.Events {
			if e.Type == "payout.paid" {
				payoutEvent = e.ID
			}
		}
		for _, c := range pg.Changes {
			require.Equal(t, models.StateSettled, c.State)
			settled[c.ProviderID] = true
		}
		pages = append(pages, seen{len(pg.Events), len(pg.Changes), pg.Cursor, fake.RequestsByPath()["/v1/balance_transactions"]})
		return nil
	}))
	require.Len(t, settled, 2500)
	require.NotEmpty(t, payoutEvent)
	require.Len(t, pages, 3, "%+v", pages)
	require.Equal(t, []int{1000, 1000, 500}, []int{pages[0].changes, pages[1].changes, pages[2].changes})
	require.Equal(t, 1, pages[0].events, "the payout's event goes with its first page")
	require.Zero(t, pages[1].events+pages[2].events)
	require.NotEqual(t, payoutEvent, pages[0].cursor)
	require.NotEqual(t, payoutEvent, pages[1].cursor)
	require.Equal(t, payoutEvent, pages[2].cursor, "the cursor moves past the payout with its last page")
	require.Less(t, pages[0].btPages, int64(25), "the first page was handed on before the payout's last balance transactions were read")
}
