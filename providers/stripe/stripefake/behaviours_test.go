package stripefake

import (
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/reconciler/reconciler/models"
	"github.com/stripe/stripe-go/v76"
	"github.com/stripe/stripe-go/v76/client"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// clockAPI is newAPI with a clock the test moves.
func clockAPI(t *testing.T) (*Server, *client.API, *atomic.Int64) {
	var clk atomic.Int64
	clk.Store(now0.Unix())
	s := New(Options{Now: func() time.Time { return time.Unix(clk.Load(), 0).UTC() }, Seed: 7})
	return s, apiFor(t, s, "sk_test_fake123"), &clk
}

type evt struct {
	Type, APIVersion string
	Raw              json.RawMessage
}

// eventsOf lists the account's events oldest first (as types, versions and
// data objects) through stripe-go, filtered by types when given.
func eventsOf(t *testing.T, sc *client.API, types ...string) []evt {
	t.Helper()
	p := &stripe.EventListParams{ListParams: stripe.ListParams{Limit: stripe.Int64(100)}}
	if len(types) > 0 {
		p.Types = stripe.StringSlice(types)
	}
	var out []evt
	it := sc.Events.List(p)
	for it.Next() {
		e := it.Event()
		out = append(out, evt{string(e.Type), e.APIVersion, e.Data.Raw})
	}
	require.NoError(t, it.Err())
	for l, r := 0, len(out)-1; l < r; l, r = l+1, r-1 {
		out[l], out[r] = out[r], out[l]
	}
	return out
}

func typesOf(es []evt) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.Type
	}
	return out
}

func chargeOf(t *testing.T, raw json.RawMessage) stripe.Charge {
	t.Helper()
	var c stripe.Charge
	require.NoError(t, json.Unmarshal(raw, &c))
	return c
}

// fullPI fetches the payment intent with latest_charge, its refunds and its
// balance transaction expanded, as the real provider's re-fetch does.
func fullPI(t *testing.T, sc *client.API, pi string) *stripe.PaymentIntent {
	t.Helper()
	gp := &stripe.PaymentIntentParams{}
	gp.AddExpand("latest_charge.balance_transaction")
	gp.AddExpand("latest_charge.refunds")
	p, err := sc.PaymentIntents.Get(pi, gp)
	require.NoError(t, err)
	require.NotNil(t, p.LatestCharge)
	return p
}

func TestPartialCapturePreBasil(t *testing.T) {
	s, sc := newAPI(t)
	a := s.Account("")
	at := now0.Add(-3 * 24 * time.Hour)
	pi := a.CreatePayment(10000, "gbp", true, at)
	a.Authorise(pi, at.Add(time.Second))
	a.PartialCapture(pi, 6000, at.Add(time.Hour))

	es := eventsOf(t, sc)
	assert.Equal(t, []string{"payment_intent.created", "payment_intent.amount_capturable_updated",
		"payment_intent.succeeded", "charge.captured", "charge.refunded"}, typesOf(es))
	for _, e := range es {
		assert.Equal(t, "2023-10-16", e.APIVersion)
	}
	var evPI stripe.PaymentIntent
	require.NoError(t, json.Unmarshal(es[2].Raw, &evPI))
	assert.Equal(t, int64(6000), evPI.AmountReceived)
	assert.Zero(t, evPI.AmountCapturable)
	ref := chargeOf(t, es[4].Raw)
	assert.Equal(t, int64(10000), ref.Amount)
	assert.Equal(t, int64(6000), ref.AmountCaptured)
	assert.Equal(t, int64(4000), ref.AmountRefunded)
	assert.True(t, ref.Captured)
	assert.False(t, ref.Refunded)

	p := fullPI(t, sc, pi)
	assert.Equal(t, stripe.PaymentIntentStatusSucceeded, p.Status)
	assert.Equal(t, int64(10000), p.Amount)
	assert.Equal(t, int64(6000), p.AmountReceived)
	assert.Zero(t, p.AmountCapturable)
	ch := p.LatestCharge
	assert.Equal(t, int64(10000), ch.Amount)
	assert.Equal(t, int64(6000), ch.AmountCaptured)
	assert.Equal(t, int64(4000), ch.AmountRefunded)
	assert.True(t, ch.Captured)
	assert.False(t, ch.Refunded)
	require.Len(t, ch.Refunds.Data, 1)
	rel := ch.Refunds.Data[0]
	assert.Equal(t, int64(4000), rel.Amount)
	assert.Equal(t, stripe.RefundStatusSucceeded, rel.Status)
	assert.Equal(t, int64(10000), ch.BalanceTransaction.Amount, "the capture's balance transaction shows the authorised amount")
	assert.Equal(t, stripe.BalanceTransactionTypeCharge, ch.BalanceTransaction.Type)

	// the reversal: a refund balance transaction sourced by the remainder's refund
	lp := &stripe.BalanceTransactionListParams{Source: stripe.String(rel.ID)}
	lp.AddExpand("data.source")
	it := sc.BalanceTransactions.List(lp)
	require.True(t, it.Next())
	bt := it.BalanceTransaction()
	assert.Equal(t, stripe.BalanceTransactionTypeRefund, bt.Type)
	assert.Equal(t, int64(-4000), bt.Amount)
	assert.Equal(t, rel.ID, bt.Source.Refund.ID)
	require.False(t, it.Next())
	require.NoError(t, it.Err())

	exp := a.ExpectedAt(now0)[pi]
	assert.Equal(t, models.StateCaptured, exp.State)
	assert.Equal(t, int64(6000), exp.AmountCaptured)
	assert.Zero(t, exp.AmountRefunded)
	for _, d := range a.Deliveries() {
		for _, f := range d.Facts {
			assert.Zero(t, f.AmountRefunded, d.EventType)
			if d.EventType == "payment_intent.succeeded" || d.EventType == "charge.captured" {
				assert.Equal(t, int64(6000), f.AmountCaptured)
				assert.Equal(t, models.StateCaptured, f.State)
			}
		}
	}

	// the same payment fetched in Basil: no Refund, one balance transaction
	// of the captured amount
	st, hdr, body := rawGet(t, s, "/v1/payment_intents/"+pi+"?expand[]=latest_charge.refunds&expand[]=latest_charge.balance_transaction",
		"Stripe-Version", "2025-03-31.basil")
	require.Equal(t, 200, st, string(body))
	assert.Equal(t, "2025-03-31.basil", hdr.Get("Stripe-Version"))
	var bp stripe.PaymentIntent
	require.NoError(t, json.Unmarshal(body, &bp))
	assert.Equal(t, int64(6000), bp.LatestCharge.AmountCaptured)
	assert.Zero(t, bp.LatestCharge.AmountRefunded)
	assert.Empty(t, bp.LatestCharge.Refunds.Data)
	assert.Equal(t, int64(6000), bp.LatestCharge.BalanceTransaction.Amount)
	st, _, _ = rawGet(t, s, "/v1/refunds/"+rel.ID, "Stripe-Version", "2025-03-31.basil")
	assert.Equal(t, 404, st)
	_, _, body = rawGet(t, s, "/v1/balance_transactions?source="+rel.ID, "Stripe-Version", "2025-03-31.basil")
	ids, _ := listIDs(t, body)
	assert.Empty(t, ids)

	// refunding all captured money: amount_refunded = amount, refunded
	a.Refund(pi, 0, at.Add(2*time.Hour))
	ch = fullPI(t, sc, pi).LatestCharge
	assert.Equal(t, int64(10000), ch.AmountRefunded)
	assert.True(t, ch.Refunded)
	require.Len(t, ch.Refunds.Data, 2)
	assert.Equal(t, int64(6000), ch.Refunds.Data[0].Amount)
	exp = a.ExpectedAt(now0)[pi]
	assert.Equal(t, models.StateRefunded, exp.State)
	assert.Equal(t, int64(6000), exp.AmountRefunded)
	_, _, body = rawGet(t, s, "/v1/charges/"+ch.ID, "Stripe-Version", "2025-03-31.basil")
	bc := chargeOf(t, body)
	assert.Equal(t, int64(6000), bc.AmountRefunded)
	assert.True(t, bc.Refunded)

	// a payout sums the same either way
	po := a.Payout(at.Add(24*time.Hour), pi)
	pout, err := sc.Payouts.Get(po, nil)
	require.NoError(t, err)
	assert.Equal(t, int64(0), pout.Amount)

	assert.Panics(t, func() { a.PartialCapture(pi, 10, at) }, "not in requires_capture")
}

func TestPartialCaptureBasilEvents(t *testing.T) {
	s, sc := newAPI(t)
	a := s.Account("")
	at := now0.Add(-3 * 24 * time.Hour)
	pi := a.CreatePayment(10000, "gbp", true, at)
	a.Authorise(pi, at.Add(time.Second))
	a.SetAPIVersion("2025-03-31.basil")
	a.PartialCapture(pi, 6000, at.Add(time.Hour))

	es := eventsOf(t, sc)
	assert.Equal(t, []string{"payment_intent.created", "payment_intent.amount_capturable_updated",
		"payment_intent.succeeded", "charge.captured"}, typesOf(es))
	assert.Equal(t, "2023-10-16", es[1].APIVersion, "emitted before SetAPIVersion")
	assert.Equal(t, "2025-03-31.basil", es[2].APIVersion)
	assert.Equal(t, "2025-03-31.basil", es[3].APIVersion)
	c := chargeOf(t, es[3].Raw)
	assert.Equal(t, int64(6000), c.AmountCaptured)
	assert.Zero(t, c.AmountRefunded, "Basil does not count the remainder")
	assert.False(t, c.Refunded)

	// fetched objects stay in the request's version (stripe-go: 2023-10-16)
	ch := fullPI(t, sc, pi).LatestCharge
	assert.Equal(t, int64(4000), ch.AmountRefunded)
	assert.Len(t, ch.Refunds.Data, 1)

	// a Basil account's later refund event counts captured money only
	a.Refund(pi, 1000, at.Add(2*time.Hour))
	es = eventsOf(t, sc, "charge.refunded")
	require.Len(t, es, 1)
	assert.Equal(t, int64(1000), chargeOf(t, es[0].Raw).AmountRefunded)
	assert.Equal(t, int64(1000), a.ExpectedAt(now0)[pi].AmountRefunded)

	// cancellation in Basil sends no charge.refunded either
	pi2 := a.CreatePayment(500, "gbp", true, at)
	a.Authorise(pi2, at.Add(time.Second))
	a.Cancel(pi2, at.Add(time.Minute))
	var types []string
	for _, d := range a.Deliveries() {
		if d.Facts[0].PaymentID == pi2 {
			types = append(types, d.EventType)
		}
	}
	assert.Equal(t, []string{"payment_intent.created", "payment_intent.amount_capturable_updated", "payment_intent.canceled"}, types)
	assert.Equal(t, models.StateCanceled, a.ExpectedAt(now0)[pi2].State)
}

func TestAPIVersionRules(t *testing.T) {
	for v, want := range map[string]rules{
		"2023-10-16":         0,
		"2024-09-30.acacia":  0,
		"2024-10-28.acacia":  ruleAcacia,
		"2025-02-24.acacia":  ruleAcacia,
		"2025-03-31.basil":   ruleAcacia | ruleBasil,
		"2025-08-27.basil":   ruleAcacia | ruleBasil,
		"2031-01-01.zeta":    ruleAcacia | ruleBasil,
		"not-a-version":      ruleAcacia | ruleBasil,
		"2024-13-99.unknown": ruleAcacia | ruleBasil,
	} {
		assert.Equal(t, want, rulesOf(v), v)
	}
}

func TestAPIVersionRefundEvents(t *testing.T) {
	s, sc := newAPI(t)
	a := s.Account("")
	at := now0.Add(-3 * 24 * time.Hour)
	pi := a.CreatePayment(10000, "gbp", false, at)
	a.Capture(pi, at)
	a.Refund(pi, 100, at.Add(time.Minute)) // 2023-10-16: charge.refunded only
	a.SetAPIVersion("2024-10-28.acacia")
	re := a.Refund(pi, 200, at.Add(2*time.Minute))
	a.FailRefund(re, at.Add(3*time.Minute))
	pend := a.PendingRefund(pi, 300, at.Add(4*time.Minute))
	a.CancelRefund(pend, at.Add(5*time.Minute))
	a.SetAPIVersion("2031-01-01.zeta") // unknown: the newest rules
	pi2 := a.CreatePayment(10000, "gbp", true, at)
	a.Authorise(pi2, at.Add(time.Minute))
	a.PartialCapture(pi2, 7000, at.Add(10*time.Minute))
	a.Refund(pi2, 0, at.Add(11*time.Minute))

	es := eventsOf(t, sc, "charge.refunded", "charge.refund.updated", "refund.*")
	type tv struct{ Type, Version, Status string }
	var got []tv
	for _, e := range es {
		var o struct{ Object, Status string }
		require.NoError(t, json.Unmarshal(e.Raw, &o))
		if o.Object == "refund" {
			var r stripe.Refund
			require.NoError(t, json.Unmarshal(e.Raw, &r))
			assert.Contains(t, []string{pi, pi2}, r.PaymentIntent.ID)
		}
		got = append(got, tv{e.Type, e.APIVersion, o.Status})
	}
	const acacia, zeta = "2024-10-28.acacia", "2031-01-01.zeta"
	assert.Equal(t, []tv{
		{"charge.refunded", "2023-10-16", "succeeded"},
		{"charge.refunded", acacia, "succeeded"},
		{"refund.created", acacia, "succeeded"},
		{"charge.refund.updated", acacia, "failed"},
		{"refund.updated", acacia, "failed"},
		{"refund.failed", acacia, "failed"},
		{"charge.refunded", acacia, "succeeded"},
		{"refund.created", acacia, "pending"},
		{"charge.refund.updated", acacia, "canceled"},
		{"refund.updated", acacia, "canceled"},
		// zeta renders as Basil: the partial capture creates no refund
		{"charge.refunded", zeta, "succeeded"},
		{"refund.created", zeta, "succeeded"},
	}, got)
	last := chargeOf(t, es[len(es)-2].Raw)
	assert.Equal(t, int64(7000), last.AmountRefunded, "Basil rules for a future version")
	assert.True(t, last.Refunded)
}

func TestPayoutReconciliationInProgress(t *testing.T) {
	s, sc := newAPI(t)
	a := s.Account("")
	at := now0.Add(-5 * 24 * time.Hour)
	var pis []string
	for i := 0; i < 5; i++ {
		pi := a.CreatePayment(int64(1000*(i+1)), "gbp", false, at.Add(time.Duration(i)*time.Minute))
		a.Capture(pi, at.Add(time.Duration(i)*time.Minute))
		pis = append(pis, pi)
	}
	paidAt := at.Add(48 * time.Hour)
	po := a.PayoutInProgress(paidAt, pis...)

	listed := func() []string {
		var ids []string
		lp := &stripe.BalanceTransactionListParams{Payout: stripe.String(po)}
		lp.AddExpand("data.source")
		it := sc.BalanceTransactions.List(lp)
		for it.Next() {
			ids = append(ids, it.BalanceTransaction().Source.Charge.PaymentIntent.ID)
		}
		require.NoError(t, it.Err())
		return ids
	}
	assert.Equal(t, []string{pis[1], pis[0]}, listed(), "in progress: the older half, rounded down")
	p, err := sc.Payouts.Get(po, nil)
	require.NoError(t, err)
	assert.Equal(t, stripe.PayoutReconciliationStatusInProgress, p.ReconciliationStatus)
	assert.Equal(t, int64(15000), p.Amount)
	assert.True(t, p.Automatic)

	a.CompleteReconciliation(po, paidAt.Add(time.Hour))
	assert.Equal(t, reversed(pis), listed())
	p, err = sc.Payouts.Get(po, nil)
	require.NoError(t, err)
	assert.Equal(t, stripe.PayoutReconciliationStatusCompleted, p.ReconciliationStatus)

	es := eventsOf(t, sc, "payout.*")
	require.Len(t, es, 2)
	var p1, p2 stripe.Payout
	require.NoError(t, json.Unmarshal(es[0].Raw, &p1))
	require.NoError(t, json.Unmarshal(es[1].Raw, &p2))
	assert.Equal(t, "payout.paid", es[0].Type)
	assert.Equal(t, stripe.PayoutReconciliationStatusInProgress, p1.ReconciliationStatus)
	assert.Equal(t, "payout.reconciliation_completed", es[1].Type)
	assert.Equal(t, stripe.PayoutReconciliationStatusCompleted, p2.ReconciliationStatus)
	assert.Equal(t, po, p2.ID)

	exp := a.ExpectedAt(now0)
	for _, pi := range pis {
		assert.Equal(t, models.StateSettled, exp[pi].State)
		assert.Equal(t, paidAt, exp[pi].At)
		assert.Equal(t, po, exp[pi].PayoutID)
	}
	// an ordinary payout stays completed
	pi := a.CreatePayment(100, "gbp", false, at)
	a.Capture(pi, at)
	p, err = sc.Payouts.Get(a.Payout(paidAt, pi), nil)
	require.NoError(t, err)
	assert.Equal(t, stripe.PayoutReconciliationStatusCompleted, p.ReconciliationStatus)
	assert.Panics(t, func() { a.CompleteReconciliation(p.ID, paidAt) })
}

func TestManualPayouts(t *testing.T) {
	s, sc, clk := clockAPI(t)
	a := s.Account("")
	a.SetManualPayouts(3)

	acct, err := sc.Accounts.Get()
	require.NoError(t, err)
	assert.Equal(t, "account", acct.Object)
	assert.NotEmpty(t, acct.ID)
	sched := acct.Settings.Payouts.Schedule
	assert.Equal(t, stripe.AccountSettingsPayoutsScheduleIntervalManual, sched.Interval)
	assert.Equal(t, int64(3), sched.DelayDays)
	assert.False(t, acct.Settings.Payouts.DebitNegativeBalances)
	same, err := sc.Accounts.GetByID(acct.ID, nil)
	require.NoError(t, err)
	assert.Equal(t, acct.ID, same.ID)

	// a connected account pays out daily by default
	s.Account("acct_auto")
	_, _, body := rawGet(t, s, "/v1/account", "Stripe-Account", "acct_auto")
	var conn stripe.Account
	require.NoError(t, json.Unmarshal(body, &conn))
	assert.Equal(t, "acct_auto", conn.ID)
	assert.Equal(t, stripe.AccountSettingsPayoutsScheduleIntervalDaily, conn.Settings.Payouts.Schedule.Interval)
	assert.Equal(t, int64(2), conn.Settings.Payouts.Schedule.DelayDays)
	byID, err := sc.Accounts.GetByID("acct_auto", nil)
	require.NoError(t, err)
	assert.Equal(t, "acct_auto", byID.ID)
	_, err = sc.Accounts.GetByID("acct_nope", nil)
	require.Error(t, err)

	captured := now0.Add(-time.Hour)
	pi := a.CreatePayment(2500, "gbp", false, captured.Add(-time.Minute))
	a.Capture(pi, captured)
	availableOn := captured.Add(3 * 24 * time.Hour)

	btOf := func() *stripe.BalanceTransaction {
		ch := fullPI(t, sc, pi).LatestCharge
		return ch.BalanceTransaction
	}
	bt := btOf()
	assert.Equal(t, availableOn.Unix(), bt.AvailableOn)
	assert.Equal(t, stripe.BalanceTransactionStatusPending, bt.Status)
	assert.Equal(t, models.StateCaptured, a.ExpectedAt(availableOn.Add(time.Hour))[pi].State, "the server's clock has not reached available_on")

	clk.Store(availableOn.Unix() - 1)
	assert.Equal(t, stripe.BalanceTransactionStatusPending, btOf().Status)
	clk.Store(availableOn.Unix())
	assert.Equal(t, stripe.BalanceTransactionStatusAvailable, btOf().Status)
	clk.Store(availableOn.Add(time.Hour).Unix())
	exp := a.ExpectedAt(availableOn.Add(time.Hour))[pi]
	assert.Equal(t, models.StateSettled, exp.State)
	assert.Equal(t, availableOn, exp.At)
	assert.Empty(t, exp.PayoutID)
	assert.Equal(t, models.StateCaptured, a.ExpectedAt(availableOn.Add(-time.Second))[pi].State)

	po := a.ManualPayout(availableOn.Add(time.Minute), 2500, "GBP")
	p, err := sc.Payouts.Get(po, nil)
	require.NoError(t, err)
	assert.False(t, p.Automatic)
	assert.Equal(t, stripe.PayoutReconciliationStatusNotApplicable, p.ReconciliationStatus)
	assert.Equal(t, int64(2500), p.Amount)
	assert.Equal(t, stripe.Currency("gbp"), p.Currency)
	assert.Equal(t, stripe.PayoutStatusPaid, p.Status)
	es := eventsOf(t, sc, "payout.paid")
	require.Len(t, es, 1)

	it := sc.BalanceTransactions.List(&stripe.BalanceTransactionListParams{Payout: stripe.String(po)})
	require.False(t, it.Next())
	var se *stripe.Error
	require.ErrorAs(t, it.Err(), &se)
	assert.Equal(t, 400, se.HTTPStatusCode)
	assert.Equal(t, stripe.ErrorTypeInvalidRequest, se.Type)
	assert.Equal(t, "Balance transaction history can only be filtered on automatic transfers, not manual.", se.Msg)
	assert.Equal(t, "payout", se.Param)

	assert.Panics(t, func() { a.Payout(now0, pi) })
	assert.Empty(t, a.PayoutCaptured(now0, 0))
	assert.Equal(t, models.StateSettled, a.ExpectedAt(availableOn.Add(time.Hour))[pi].State, "the manual payout implies nothing")

	// every account's balance transactions are pending until available_on
	clk.Store(now0.Unix())
	b := s.Account("acct_auto")
	pi2 := b.CreatePayment(100, "gbp", false, now0)
	b.Capture(pi2, now0)
	_, _, body = rawGet(t, s, "/v1/balance_transactions", "Stripe-Account", "acct_auto")
	var l struct{ Data []stripe.BalanceTransaction }
	require.NoError(t, json.Unmarshal(body, &l))
	require.Len(t, l.Data, 1)
	assert.Equal(t, now0.Add(48*time.Hour).Unix(), l.Data[0].AvailableOn)
	assert.Equal(t, stripe.BalanceTransactionStatusPending, l.Data[0].Status)
}

func TestChargeExpansions(t *testing.T) {
	s, sc := newAPI(t)
	a := s.Account("")
	at := now0.Add(-5 * 24 * time.Hour)
	pi := a.CreatePayment(5000, "eur", false, at)
	a.Capture(pi, at.Add(time.Minute))
	re := a.Refund(pi, 1200, at.Add(time.Hour))
	a.Dispute(pi, at.Add(2*time.Hour))

	p := fullPI(t, sc, pi)
	ch := p.LatestCharge
	assert.True(t, ch.Disputed)
	assert.Equal(t, int64(5000), ch.AmountCaptured)
	assert.Equal(t, at.Add(time.Minute).Unix(), ch.Created)
	bt := ch.BalanceTransaction
	require.NotNil(t, bt)
	assert.Equal(t, "balance_transaction", bt.Object)
	assert.Equal(t, int64(5000), bt.Amount)
	assert.Equal(t, int64(5000), bt.Net)
	assert.Equal(t, stripe.BalanceTransactionTypeCharge, bt.Type)
	assert.Equal(t, stripe.BalanceTransactionReportingCategory("charge"), bt.ReportingCategory)
	assert.Equal(t, ch.ID, bt.Source.ID)
	assert.Equal(t, stripe.Currency("eur"), bt.Currency)
	require.Len(t, ch.Refunds.Data, 1)
	r := ch.Refunds.Data[0]
	assert.Equal(t, re, r.ID)
	assert.Equal(t, "refund", r.Object)
	assert.Equal(t, int64(1200), r.Amount)
	assert.Equal(t, ch.ID, r.Charge.ID)
	assert.Equal(t, pi, r.PaymentIntent.ID)
	assert.Equal(t, stripe.RefundStatusSucceeded, r.Status)
	assert.True(t, len(r.BalanceTransaction.ID) > 4)
	assert.Equal(t, stripe.Currency("eur"), r.Currency)
	assert.Equal(t, at.Add(time.Hour).Unix(), r.Created)

	// each expansion alone, and the charge's own
	gp := &stripe.PaymentIntentParams{}
	gp.AddExpand("latest_charge.balance_transaction")
	p, err := sc.PaymentIntents.Get(pi, gp)
	require.NoError(t, err)
	assert.Equal(t, int64(5000), p.LatestCharge.BalanceTransaction.Amount)
	assert.Nil(t, p.LatestCharge.Refunds)
	cp := &stripe.ChargeParams{}
	cp.AddExpand("balance_transaction")
	c, err := sc.Charges.Get(ch.ID, cp)
	require.NoError(t, err)
	assert.Equal(t, int64(5000), c.BalanceTransaction.Amount)
	lp := &stripe.PaymentIntentListParams{}
	lp.AddExpand("data.latest_charge.balance_transaction")
	lp.AddExpand("data.latest_charge.refunds")
	it := sc.PaymentIntents.List(lp)
	require.True(t, it.Next())
	assert.Equal(t, int64(5000), it.PaymentIntent().LatestCharge.BalanceTransaction.Amount)
	assert.Len(t, it.PaymentIntent().LatestCharge.Refunds.Data, 1)
	require.NoError(t, it.Err())
}

func btIDs(t *testing.T, sc *client.API, p *stripe.BalanceTransactionListParams) []*stripe.BalanceTransaction {
	t.Helper()
	var out []*stripe.BalanceTransaction
	it := sc.BalanceTransactions.List(p)
	for it.Next() {
		out = append(out, it.BalanceTransaction())
	}
	require.NoError(t, it.Err())
	return out
}

func TestListBalanceTransactions(t *testing.T) {
	s, sc := newAPI(t)
	a := s.Account("")
	t0 := now0.Add(-10 * 24 * time.Hour)
	var pis []string
	for i := 0; i < 4; i++ {
		at := t0.Add(time.Duration(i) * time.Hour)
		pi := a.CreatePayment(int64(1000+i), "gbp", false, at)
		a.Capture(pi, at)
		pis = append(pis, pi)
	}
	re := a.Refund(pis[1], 300, t0.Add(5*time.Hour))
	dp := a.Dispute(pis[2], t0.Add(6*time.Hour))
	a.WithdrawDisputeFunds(dp, t0.Add(6*time.Hour))

	all := btIDs(t, sc, &stripe.BalanceTransactionListParams{})
	require.Len(t, all, 6)
	var types []string
	for i, bt := range all {
		types = append(types, string(bt.Type))
		if i > 0 {
			assert.LessOrEqual(t, bt.Created, all[i-1].Created, "newest first")
		}
	}
	assert.Equal(t, []string{"adjustment", "refund", "charge", "charge", "charge", "charge"}, types)
	assert.Equal(t, int64(-1002), all[0].Amount)
	assert.Equal(t, stripe.BalanceTransactionReportingCategory("dispute"), all[0].ReportingCategory)
	assert.Equal(t, dp, all[0].Source.ID)
	assert.Equal(t, re, all[1].Source.ID)

	// the rendered fields
	_, _, body := rawGet(t, s, "/v1/balance_transactions?limit=1&type=charge")
	var l struct{ Data []map[string]json.RawMessage }
	require.NoError(t, json.Unmarshal(body, &l))
	require.Len(t, l.Data, 1)
	for _, k := range []string{"id", "object", "amount", "available_on", "created", "currency", "fee", "net", "reporting_category", "source", "status", "type"} {
		assert.Contains(t, l.Data[0], k)
	}

	charges := btIDs(t, sc, &stripe.BalanceTransactionListParams{Type: stripe.String("charge")})
	assert.Len(t, charges, 4)
	assert.Empty(t, btIDs(t, sc, &stripe.BalanceTransactionListParams{Type: stripe.String("payment")}), "card charges are type charge")
	refunds := btIDs(t, sc, &stripe.BalanceTransactionListParams{Type: stripe.String("refund")})
	require.Len(t, refunds, 1)
	assert.Equal(t, int64(-300), refunds[0].Amount)

	ch0 := fullPI(t, sc, pis[0]).LatestCharge.ID
	bySource := btIDs(t, sc, &stripe.BalanceTransactionListParams{Source: stripe.String(ch0)})
	require.Len(t, bySource, 1)
	assert.Equal(t, int64(1000), bySource[0].Amount)
	assert.Empty(t, btIDs(t, sc, &stripe.BalanceTransactionListParams{Source: stripe.String("ch_unknown")}))

	ranged := btIDs(t, sc, &stripe.BalanceTransactionListParams{CreatedRange: &stripe.RangeQueryParams{
		GreaterThan: t0.Unix(), LesserThanOrEqual: t0.Add(5 * time.Hour).Unix()}})
	assert.Len(t, ranged, 4) // charges 1..3 and the refund

	// paging with cursors, and expansion of every kind of source
	lp := &stripe.BalanceTransactionListParams{ListParams: stripe.ListParams{Limit: stripe.Int64(2)}}
	lp.AddExpand("data.source")
	paged := btIDs(t, sc, lp)
	require.Len(t, paged, 6)
	for i := range paged {
		assert.Equal(t, all[i].ID, paged[i].ID)
	}
	assert.Equal(t, dp, paged[0].Source.Dispute.ID)
	assert.Equal(t, re, paged[1].Source.Refund.ID)
	assert.Equal(t, pis[3], paged[2].Source.Charge.PaymentIntent.ID)
	after := btIDs(t, sc, &stripe.BalanceTransactionListParams{ListParams: stripe.ListParams{StartingAfter: stripe.String(all[1].ID)}})
	assert.Len(t, after, 4)
	assert.Equal(t, all[2].ID, after[0].ID)
	_, _, body = rawGet(t, s, "/v1/balance_transactions?limit=2&ending_before="+all[3].ID)
	ids, more := listIDs(t, body)
	assert.Equal(t, []string{all[1].ID, all[2].ID}, ids)
	assert.True(t, more)
}

func TestListPayouts(t *testing.T) {
	s, sc := newAPI(t)
	a := s.Account("")
	t0 := now0.Add(-10 * 24 * time.Hour)
	var pos []string
	for i := 0; i < 4; i++ {
		at := t0.Add(time.Duration(i) * 24 * time.Hour)
		pi := a.CreatePayment(100, "gbp", false, at)
		a.Capture(pi, at)
		pos = append(pos, a.Payout(at.Add(time.Hour), pi))
	}
	a.FailPayout(pos[1], "failed", t0.Add(3*24*time.Hour))

	list := func(p *stripe.PayoutListParams) []string {
		var ids []string
		it := sc.Payouts.List(p)
		for it.Next() {
			ids = append(ids, it.Payout().ID)
		}
		require.NoError(t, it.Err())
		return ids
	}
	assert.Equal(t, reversed(pos), list(&stripe.PayoutListParams{ListParams: stripe.ListParams{Limit: stripe.Int64(1)}}))
	day1 := t0.Add(24*time.Hour + time.Hour).Unix()
	assert.Equal(t, []string{pos[3], pos[2]}, list(&stripe.PayoutListParams{ArrivalDateRange: &stripe.RangeQueryParams{GreaterThan: day1}}))
	assert.Equal(t, []string{pos[1]}, list(&stripe.PayoutListParams{ArrivalDate: stripe.Int64(day1)}))
	assert.Equal(t, []string{pos[1], pos[0]}, list(&stripe.PayoutListParams{CreatedRange: &stripe.RangeQueryParams{LesserThanOrEqual: day1}}))
	assert.Equal(t, []string{pos[1]}, list(&stripe.PayoutListParams{Status: stripe.String("failed")}))
	assert.Equal(t, []string{pos[3], pos[2], pos[0]}, list(&stripe.PayoutListParams{Status: stripe.String("paid")}))
	assert.Equal(t, []string{pos[1], pos[0]}, list(&stripe.PayoutListParams{ListParams: stripe.ListParams{StartingAfter: stripe.String(pos[2])}}))
	// stripe-go walks ending_before pages oldest to newest
	assert.Equal(t, []string{pos[2], pos[3]}, list(&stripe.PayoutListParams{ListParams: stripe.ListParams{EndingBefore: stripe.String(pos[1])}}))
	st, _, _ := rawGet(t, s, "/v1/payouts?arrival_date[gte]=x")
	assert.Equal(t, 400, st)

	p, err := sc.Payouts.Get(pos[1], nil)
	require.NoError(t, err)
	assert.Equal(t, stripe.PayoutStatusFailed, p.Status)
	assert.Equal(t, stripe.PayoutFailureCodeCouldNotProcess, p.FailureCode)
	assert.Nil(t, p.FailureBalanceTransaction)
	_, _, body := rawGet(t, s, "/v1/payouts/"+pos[0])
	var m map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(body, &m))
	for _, k := range []string{"id", "object", "amount", "arrival_date", "automatic", "created", "currency", "status", "reconciliation_status", "failure_balance_transaction", "failure_code"} {
		assert.Contains(t, m, k)
	}
}

func TestDisputeFunds(t *testing.T) {
	s, sc := newAPI(t)
	a := s.Account("")
	t0 := now0.Add(-10 * 24 * time.Hour)
	pi := a.CreatePayment(4200, "gbp", false, t0)
	a.Capture(pi, t0)
	a.Payout(t0.Add(48*time.Hour), pi)
	dp := a.Dispute(pi, t0.Add(3*24*time.Hour))
	a.WithdrawDisputeFunds(dp, t0.Add(3*24*time.Hour))
	a.UpdateDispute(dp, "under_review", t0.Add(4*24*time.Hour))
	a.ReinstateDisputeFunds(dp, t0.Add(5*24*time.Hour))

	es := eventsOf(t, sc, "charge.dispute.*")
	assert.Equal(t, []string{"charge.dispute.created", "charge.dispute.funds_withdrawn", "charge.dispute.updated", "charge.dispute.funds_reinstated"}, typesOf(es))
	var amounts [][]int64
	var statuses []string
	for _, e := range es {
		var d stripe.Dispute
		require.NoError(t, json.Unmarshal(e.Raw, &d))
		assert.Equal(t, dp, d.ID)
		assert.Equal(t, pi, d.PaymentIntent.ID)
		var am []int64
		for _, bt := range d.BalanceTransactions {
			am = append(am, bt.Amount)
			assert.Equal(t, stripe.BalanceTransactionTypeAdjustment, bt.Type)
			assert.Equal(t, dp, bt.Source.ID)
		}
		amounts = append(amounts, am)
		statuses = append(statuses, string(d.Status))
	}
	assert.Equal(t, [][]int64{nil, {-4200}, {-4200}, {-4200, 4200}}, amounts)
	assert.Equal(t, []string{"needs_response", "needs_response", "under_review", "under_review"}, statuses)

	d, err := sc.Disputes.Get(dp, nil)
	require.NoError(t, err)
	assert.Equal(t, "dispute", d.Object)
	assert.Equal(t, int64(4200), d.Amount)
	assert.Equal(t, stripe.DisputeStatusUnderReview, d.Status)
	require.Len(t, d.BalanceTransactions, 2)
	assert.Equal(t, stripe.BalanceTransactionReportingCategory("dispute_reversal"), d.BalanceTransactions[1].ReportingCategory)
	assert.Equal(t, stripe.DisputeReasonFraudulent, d.Reason)
	assert.False(t, d.IsChargeRefundable)

	assert.Equal(t, models.StateSettled, a.ExpectedAt(now0)[pi].State, "funds events change nothing")
	a.CloseDispute(dp, "lost", t0.Add(6*24*time.Hour))
	assert.Equal(t, models.StateChargeback, a.ExpectedAt(now0)[pi].State)

	// the next payout sweeps the adjustments
	pi2 := a.CreatePayment(1000, "gbp", false, t0.Add(5*24*time.Hour))
	a.Capture(pi2, t0.Add(5*24*time.Hour))
	po := a.Payout(t0.Add(7*24*time.Hour), pi2)
	p, err := sc.Payouts.Get(po, nil)
	require.NoError(t, err)
	assert.Equal(t, int64(1000), p.Amount)
	assert.Len(t, btIDs(t, sc, &stripe.BalanceTransactionListParams{Payout: stripe.String(po)}), 3)
}

func TestPendingAndCanceledRefunds(t *testing.T) {
	s, sc := newAPI(t)
	a := s.Account("")
	t0 := now0.Add(-10 * 24 * time.Hour)
	pi := a.CreatePayment(5000, "gbp", false, t0)
	a.Capture(pi, t0)
	re := a.PendingRefund(pi, 2000, t0.Add(time.Hour))

	ch := fullPI(t, sc, pi).LatestCharge
	assert.Equal(t, int64(2000), ch.AmountRefunded, "a pending card refund counts")
	require.Len(t, ch.Refunds.Data, 1)
	assert.Equal(t, stripe.RefundStatusPending, ch.Refunds.Data[0].Status)

	a.CancelRefund(re, t0.Add(2*time.Hour))
	ch = fullPI(t, sc, pi).LatestCharge
	assert.Zero(t, ch.AmountRefunded, "a canceled refund no longer counts")
	assert.False(t, ch.Refunded)
	r, err := sc.Refunds.Get(re, nil)
	require.NoError(t, err)
	assert.Equal(t, stripe.RefundStatusCanceled, r.Status)
	assert.Empty(t, r.FailureReason)

	es := eventsOf(t, sc, "charge.refunded", "charge.refund.updated")
	require.Len(t, es, 2)
	assert.Equal(t, int64(2000), chargeOf(t, es[0].Raw).AmountRefunded)
	var er stripe.Refund
	require.NoError(t, json.Unmarshal(es[1].Raw, &er))
	assert.Equal(t, "charge.refund.updated", es[1].Type)
	assert.Equal(t, stripe.RefundStatusCanceled, er.Status)

	// a full pending refund that fails
	full := a.PendingRefund(pi, 0, t0.Add(3*time.Hour))
	ch = fullPI(t, sc, pi).LatestCharge
	assert.Equal(t, int64(5000), ch.AmountRefunded)
	assert.True(t, ch.Refunded)
	a.FailRefund(full, t0.Add(4*time.Hour))
	ch = fullPI(t, sc, pi).LatestCharge
	assert.Zero(t, ch.AmountRefunded)
	assert.False(t, ch.Refunded)
	r, err = sc.Refunds.Get(full, nil)
	require.NoError(t, err)
	assert.Equal(t, stripe.RefundStatusFailed, r.Status)
	assert.NotEmpty(t, r.FailureReason)
	assert.NotEmpty(t, r.FailureBalanceTransaction.ID)

	// the webhooks never lower amount_refunded; Reverted says how much of
	// it is not refunded money
	exp := a.ExpectedAt(now0)[pi]
	assert.Equal(t, models.StateRefunded, exp.State)
	assert.Equal(t, int64(5000), exp.AmountRefunded)
	assert.Equal(t, int64(5000), exp.Reverted, "none of it is refunded money")
	assert.Panics(t, func() { a.CancelRefund(full, now0) })
}

func TestNewEventTypesFilter(t *testing.T) {
	s, sc := newAPI(t)
	a := s.Account("")
	a.SetAPIVersion("2024-10-28.acacia")
	t0 := now0.Add(-10 * 24 * time.Hour)
	pi := a.CreatePayment(5000, "gbp", false, t0)
	a.Capture(pi, t0)
	re := a.Refund(pi, 100, t0.Add(time.Hour))
	a.FailRefund(re, t0.Add(2*time.Hour))
	dp := a.Dispute(pi, t0.Add(3*time.Hour))
	a.WithdrawDisputeFunds(dp, t0.Add(3*time.Hour))
	po := a.PayoutInProgress(t0.Add(48*time.Hour), pi)
	a.CompleteReconciliation(po, t0.Add(49*time.Hour))

	for _, typ := range []string{"refund.created", "refund.updated", "refund.failed", "charge.dispute.funds_withdrawn", "payout.reconciliation_completed"} {
		es := eventsOf(t, sc, typ)
		require.Len(t, es, 1, typ)
		assert.Equal(t, "2024-10-28.acacia", es[0].APIVersion)
	}
	assert.Equal(t, []string{"refund.created", "refund.updated", "refund.failed", "payout.reconciliation_completed"},
		typesOf(eventsOf(t, sc, "refund.*", "payout.reconciliation_completed")))
	ds := a.Deliveries()
	got, err := sc.Events.Get(ds[len(ds)-1].EventID, nil)
	require.NoError(t, err)
	assert.Equal(t, "payout.reconciliation_completed", string(got.Type))
}
