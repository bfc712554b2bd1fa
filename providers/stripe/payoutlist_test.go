package stripe_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/reconciler/reconciler/payouts"
	"github.com/reconciler/reconciler/providers/stripe"
	"github.com/reconciler/reconciler/providers/stripe/stripefake"
)

// listPayouts collects every payout ListPayouts delivers, by id.
func listPayouts(t *testing.T, p *stripe.Provider, account string, since, until time.Time) map[string]payouts.Payout {
	t.Helper()
	out := map[string]payouts.Payout{}
	require.NoError(t, p.ListPayouts(context.Background(), payouts.Params{Account: account, Since: since, Until: until}, func(po payouts.Payout) error {
		_, dup := out[po.ID]
		require.False(t, dup, "payout %s delivered twice", po.ID)
		out[po.ID] = po
		return nil
	}))
	return out
}

func TestListPayoutsFromTheFake(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 20, 6, 0, 0, 0, time.UTC)
	fake := stripefake.New(stripefake.Options{Now: func() time.Time { return now }, Seed: 7})
	url := fake.Start()
	t.Cleanup(fake.Close)
	a := fake.Account("")
	h := func(x float64) time.Time { return now.Add(time.Duration(x * float64(time.Hour))) }
	pay := func(amount int64, at time.Time) string {
		pi := a.CreatePayment(amount, "gbp", false, at)
		a.Capture(pi, at.Add(time.Minute))
		return pi
	}
	pi1, pi2 := pay(1000, h(-90)), pay(2500, h(-89))
	po1 := a.Payout(h(-80), pi1, pi2)
	a.Refund(pi1, 300, h(-70)) // after po1: swept by the next payout
	dp := a.Dispute(pi2, h(-69))
	a.WithdrawDisputeFunds(dp, h(-69))
	pi3 := pay(4000, h(-60))
	po2 := a.Payout(h(-50), pi3)
	pi4, pi5 := pay(700, h(-40)), pay(800, h(-40))
	po3 := a.PayoutInProgress(h(-30), pi4, pi5)
	pi6 := pay(900, h(-20))
	po4 := a.Payout(h(-10), pi6)
	a.SetPayoutAmount(po4, 1900)
	early := a.Payout(h(-200), pay(100, h(-201))) // before the window

	p, err := stripe.New(stripe.Config{APIKey: "sk_test_payouts", BaseURL: url})
	require.NoError(t, err)
	before := fake.RequestsByPath()
	got := listPayouts(t, p, "", h(-100), now)
	require.Len(t, got, 4)
	require.NotContains(t, got, early, "created before the window")
	used := fake.RequestsByPath()
	require.EqualValues(t, 1, used["/v1/payouts"]-before["/v1/payouts"], "one page of payouts")
	require.EqualValues(t, 4, used["/v1/balance_transactions"]-before["/v1/balance_transactions"], "one page of transactions a payout")

	g1 := got[po1]
	require.Equal(t, "paid", g1.Status)
	require.True(t, g1.Paid)
	require.EqualValues(t, 3500, g1.Amount)
	require.Equal(t, "gbp", g1.Currency)
	require.Equal(t, payouts.ListingComplete, g1.Listing)
	require.EqualValues(t, 1, g1.Scale)
	require.Equal(t, h(-80).Truncate(24*time.Hour), g1.ArrivalDate)
	require.Equal(t, h(-80).Truncate(time.Second), g1.Created)
	for i := range g1.Lines {
		require.True(t, strings.HasPrefix(g1.Lines[i].ID, "txn_"), g1.Lines[i].ID)
		g1.Lines[i].ID = ""
	}
	require.ElementsMatch(t, []payouts.Line{
		{Type: "charge", Kind: payouts.KindCharge, Amount: 1000, Net: 1000, PaymentID: pi1, PaymentAmount: 1000},
		{Type: "charge", Kind: payouts.KindCharge, Amount: 2500, Net: 2500, PaymentID: pi2, PaymentAmount: 2500},
	}, g1.Lines)

	// The refund and the dispute of po1's payments are in po2, naming
	// their payments; only the charge pays a payment out.
	g2 := got[po2]
	require.EqualValues(t, 4000-300-2500, g2.Amount)
	kinds := map[payouts.Kind]string{}
	for _, l := range g2.Lines {
		kinds[l.Kind] += l.PaymentID + " "
	}
	require.Equal(t, map[payouts.Kind]string{payouts.KindCharge: pi3 + " ", payouts.KindRefund: pi1 + " ", payouts.KindDispute: pi2 + " "}, kinds)

	g3 := got[po3]
	require.Equal(t, payouts.ListingInProgress, g3.Listing)
	require.Contains(t, g3.Note, "in_progress")
	require.Len(t, g3.Lines, 1, "the fake lists half of it while in progress")

	require.EqualValues(t, 1900, got[po4].Amount, "SetPayoutAmount")
	require.Len(t, got[po4].Lines, 1)

	// The window is [since, until): a payout created at until is not in it,
	// one at since is.
	require.NotContains(t, listPayouts(t, p, "", h(-100), h(-10)), po4)
	require.Contains(t, listPayouts(t, p, "", h(-10), now), po4)
	require.Contains(t, listPayouts(t, p, "", h(-10).Add(-time.Millisecond), h(-10).Add(time.Millisecond)), po4)
}

// A payout made by hand: Stripe cannot list its transactions, and none is
// asked for; one that says automatic but is refused the same way (a 400)
// is read alike.
func TestListPayoutsManual(t *testing.T) {
	t.Parallel()
	now := time.Now().UTC().Truncate(time.Second)
	fake := stripefake.New(stripefake.Options{Seed: 3})
	url := fake.Start()
	t.Cleanup(fake.Close)
	acct := "acct_1Manual"
	a := fake.Account(acct)
	a.SetManualPayouts(2)
	po := a.ManualPayout(now.Add(-time.Hour), 5000, "gbp")
	p, err := stripe.New(stripe.Config{APIKey: "sk_test_payouts", BaseURL: url})
	require.NoError(t, err)
	got := listPayouts(t, p, acct, now.Add(-2*time.Hour), now)
	require.Len(t, got, 1)
	require.Equal(t, payouts.ListingUnavailable, got[po].Listing)
	require.Contains(t, got[po].Note, "by hand")
	require.Zero(t, fake.RequestsByPath()["/v1/balance_transactions"])
	require.Empty(t, listPayouts(t, p, "", now.Add(-2*time.Hour), now), "the platform has none: the account is read with Stripe-Account")
}

// More than a page: 120 payouts, one of 150 transactions.
func TestListPayoutsPages(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 20, 6, 0, 0, 0, time.UTC)
	fake := stripefake.New(stripefake.Options{Now: func() time.Time { return now }, Seed: 5})
	url := fake.Start()
	t.Cleanup(fake.Close)
	a := fake.Account("")
	start := now.Add(-200 * time.Hour)
	var big []string
	for i := range 150 {
		pi := a.CreatePayment(int64(100+i), "gbp", false, start)
		a.Capture(pi, start.Add(time.Minute))
		big = append(big, pi)
	}
	bigPO := a.Payout(start.Add(time.Hour), big...)
	for i := range 119 {
		at := start.Add(time.Duration(2+i) * time.Hour)
		pi := a.CreatePayment(1000, "gbp", false, at)
		a.Capture(pi, at.Add(time.Minute))
		a.Payout(at.Add(time.Minute), pi)
	}
	p, err := stripe.New(stripe.Config{APIKey: "sk_test_payouts", BaseURL: url})
	require.NoError(t, err)
	got := listPayouts(t, p, "", start, now)
	require.Len(t, got, 120)
	require.Len(t, got[bigPO].Lines, 150)
	used := fake.RequestsByPath()
	require.EqualValues(t, 2, used["/v1/payouts"])
	require.EqualValues(t, 119+2, used["/v1/balance_transactions"], "one page for each small payout, two for the big one")
	require.EqualValues(t, 2+119+2, p.Requests())
}

// Stripe as its documentation and a sandbox listing show it, which the fake
// does not model: the payout's own balance transaction (type payout, source
// the payout, net -amount) in its listing, processing fees on charges, a
// stripe_fee line, a dispute adjustment whose source is the dispute, and
// a transfer. payout.amount equals the net of the others.
func TestListPayoutsStripeShapes(t *testing.T) {
	t.Parallel()
	var seen []url.Values
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = append(seen, r.URL.Query())
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/v1/payouts":
			fmt.Fprint(w, `{"object":"list","has_more":false,"url":"/v1/payouts","data":[
{"id":"po_shape","object":"payout","amount":2641,"arrival_date":1762732800,"automatic":true,"balance_transaction":"txn_po","created":1762646400,
 "currency":"eur","reconciliation_status":"completed","status":"paid"},
{"id":"po_refused","object":"payout","amount":100,"arrival_date":1762732800,"automatic":true,"created":1762646401,"currency":"eur",
 "reconciliation_status":"completed","status":"paid"}]}`)
		case "/v1/balance_transactions":
			if r.URL.Query().Get("payout") == "po_refused" {
				w.WriteHeader(http.StatusBadRequest)
				fmt.Fprint(w, `{"error":{"message":"Balance transaction history can only be filtered on automatic transfers, not manual.","param":"payout","type":"invalid_request_error"}}`)
				return
			}
			fmt.Fprint(w, `{"object":"list","has_more":false,"url":"/v1/balance_transactions","data":[
{"id":"txn_po","object":"balance_transaction","amount":-2641,"fee":0,"net":-2641,"type":"payout","reporting_category":"payout",
 "source":{"id":"po_shape","object":"payout","amount":2641}},
{"id":"txn_ch1","object":"balance_transaction","amount":2000,"fee":88,"net":1912,"type":"charge","reporting_category":"charge",
 "source":{"id":"ch_1","object":"charge","amount":2000,"amount_captured":2000,"captured":true,"payment_intent":"pi_1","billing_details":{"name":"Ada Lovelace"}}},
{"id":"txn_ch2","object":"balance_transaction","amount":1500,"fee":73,"net":1427,"type":"payment","reporting_category":"charge",
 "source":{"id":"py_2","object":"charge","amount":1500,"amount_captured":1500,"captured":true,"payment_intent":{"id":"pi_2","object":"payment_intent"}}},
{"id":"txn_re","object":"balance_transaction","amount":-500,"fee":0,"net":-500,"type":"refund","reporting_category":"refund",
 "source":{"id":"re_1","object":"refund","amount":500,"charge":"ch_9","payment_intent":"pi_9"}},
{"id":"txn_fee","object":"balance_transaction","amount":-98,"fee":0,"net":-98,"type":"stripe_fee","reporting_category":"fee","source":null},
{"id":"txn_dp","object":"balance_transaction","amount":-1500,"fee":1500,"net":-3000,"type":"adjustment","reporting_category":"dispute",
 "source":{"id":"dp_1","object":"dispute","amount":1500,"payment_intent":"pi_8"}},
{"id":"txn_tr","object":"balance_transaction","amount":2900,"fee":0,"net":2900,"type":"transfer","reporting_category":"transfer","source":"tr_1"}]}`)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(ts.Close)
	p, err := stripe.New(stripe.Config{APIKey: "sk_test_shapes", BaseURL: ts.URL})
	require.NoError(t, err)
	got := listPayouts(t, p, "", time.Unix(1762646400, 0), time.Unix(1762646402, 0))
	po := got["po_shape"]
	require.Len(t, po.Lines, 6, "the payout's own transaction is not a line")
	require.Equal(t, time.Date(2025, 11, 10, 0, 0, 0, 0, time.UTC), po.ArrivalDate)
	byID := map[string]payouts.Line{}
	for _, l := range po.Lines {
		byID[l.ID] = l
	}
	require.Equal(t, payouts.Line{ID: "txn_ch1", Type: "charge", Kind: payouts.KindCharge, Amount: 2000, Fee: 88, Net: 1912, PaymentID: "pi_1", PaymentAmount: 2000}, byID["txn_ch1"])
	require.Equal(t, payouts.Line{ID: "txn_ch2", Type: "payment", Kind: payouts.KindCharge, Amount: 1500, Fee: 73, Net: 1427, PaymentID: "pi_2", PaymentAmount: 1500}, byID["txn_ch2"])
	require.Equal(t, payouts.Line{ID: "txn_re", Type: "refund", Kind: payouts.KindRefund, Amount: -500, Net: -500, PaymentID: "pi_9"}, byID["txn_re"])
	require.Equal(t, payouts.Line{ID: "txn_fee", Type: "stripe_fee", Kind: payouts.KindFee, Amount: -98, Net: -98}, byID["txn_fee"])
	require.Equal(t, payouts.Line{ID: "txn_dp", Type: "adjustment", Kind: payouts.KindDispute, Amount: -1500, Fee: 1500, Net: -3000, PaymentID: "pi_8"}, byID["txn_dp"])
	require.Equal(t, payouts.Line{ID: "txn_tr", Type: "transfer", Kind: payouts.KindOther, Amount: 2900, Net: 2900}, byID["txn_tr"])

	r := payouts.Check(stripe.Name, "", po, payouts.Local{Paid: map[string]payouts.Row{}})
	require.Zero(t, r.Difference, "payout.amount is the net of its transactions but its own: %s", r.Explanation)
	require.Equal(t, []int64{3500, -500, -1759, -1500, 2900}, []int64{r.Charges, r.Refunds, r.Fees, r.Disputes, r.Other})

	require.Equal(t, payouts.ListingUnavailable, got["po_refused"].Listing, "the 400 for a manual payout")
	require.Equal(t, url.Values{"created[gte]": {"1762646400"}, "created[lt]": {"1762646402"}, "limit": {"100"}}, seen[0])
	require.Equal(t, url.Values{"payout": {"po_shape"}, "limit": {"100"}, "expand[0]": {"data.source"}}, seen[1])
}

// Failures are errors naming the request, never the key; an error from fn
// stops the listing as it is.
func TestListPayoutsErrors(t *testing.T) {
	t.Parallel()
	fake := stripefake.New(stripefake.Options{Seed: 9})
	url := fake.Start()
	t.Cleanup(fake.Close)
	now := time.Now().UTC()
	a := fake.Account("")
	pi := a.CreatePayment(100, "gbp", false, now.Add(-3*time.Hour))
	a.Capture(pi, now.Add(-3*time.Hour))
	a.Payout(now.Add(-2*time.Hour), pi)
	a.Payout(now.Add(-time.Hour), pi)

	bad, err := stripe.New(stripe.Config{APIKey: "sk_test_SECRETKEY", BaseURL: url})
	require.NoError(t, err)
	fake.FailNext(http.StatusInternalServerError, 1)
	err = bad.ListPayouts(context.Background(), payouts.Params{Since: now.Add(-4 * time.Hour), Until: now}, func(payouts.Payout) error { return nil })
	require.ErrorContains(t, err, "list stripe payouts")
	require.ErrorContains(t, err, "last answer HTTP 500 Internal Server Error")
	require.NotContains(t, err.Error(), "SECRETKEY")

	stop := errors.New("stop")
	n := 0
	err = bad.ListPayouts(context.Background(), payouts.Params{Since: now.Add(-4 * time.Hour), Until: now}, func(payouts.Payout) error { n++; return stop })
	require.ErrorIs(t, err, stop)
	require.Equal(t, 1, n)

	unauth, err := stripe.New(stripe.Config{APIKey: "pk_test_SECRETKEY", BaseURL: url})
	require.NoError(t, err)
	err = unauth.ListPayouts(context.Background(), payouts.Params{Since: now.Add(-4 * time.Hour), Until: now}, func(payouts.Payout) error { return nil })
	require.ErrorContains(t, err, "HTTP 401")
	require.False(t, strings.Contains(err.Error(), "SECRETKEY"), err.Error())
}

// Every request payout reconciliation makes, against Stripe's own
// stripe-mock (which validates parameter names and types against Stripe's
// OpenAPI spec), with its listing rewritten into a payout's own
// transaction and a captured charge of stripe-mock's objects.
func TestStripeMockListPayouts(t *testing.T) {
	t.Parallel()
	m := startStripeMock(t)
	charge := m.object(t, "/v1/charges/ch_stripemock_payout")
	charge["captured"], charge["amount"], charge["amount_captured"], charge["payment_intent"] = true, 1099, 1099, "pi_stripemock_payout"
	var payoutID string
	m.setRewrite("/v1/payouts", func(_ url.Values, b map[string]any) {
		po := firstOf(t, b, "payouts")
		payoutID = fmt.Sprint(po["id"])
		po["amount"], po["automatic"], po["reconciliation_status"], po["status"] = 1069, true, "completed", "paid"
	})
	m.setRewrite("/v1/balance_transactions", func(_ url.Values, b map[string]any) {
		fixture := firstOf(t, b, "balance transactions")
		own, ch := map[string]any{}, map[string]any{}
		for k, v := range fixture {
			own[k], ch[k] = v, v
		}
		own["id"], own["type"], own["amount"], own["fee"], own["net"], own["source"] = "txn_stripemock_own", "payout", -1069, 0, -1069, map[string]any{"id": payoutID, "object": "payout"}
		ch["id"], ch["type"], ch["amount"], ch["fee"], ch["net"], ch["source"] = "txn_stripemock_charge", "charge", 1099, 30, 1069, charge
		b["data"] = []any{own, ch}
	})
	p, err := stripe.New(stripe.Config{APIKey: stripeMockKey, BaseURL: m.URL})
	require.NoError(t, err)
	since, until := time.Now().Add(-48*time.Hour).Truncate(time.Second), time.Now().Truncate(time.Second)
	got := listPayouts(t, p, "acct_1StripeMock", since, until)
	require.Len(t, got, 1)
	po := got[payoutID]
	require.Len(t, po.Lines, 1)
	require.Equal(t, "pi_stripemock_payout", po.Lines[0].PaymentID)
	r := payouts.Check(stripe.Name, "acct_1StripeMock", po, payouts.Local{Paid: map[string]payouts.Row{}})
	require.Zero(t, r.Difference, r.Explanation)

	pos := ofPath(m.exchanges(), http.MethodGet, "/v1/payouts")
	require.Len(t, pos, 1)
	require.Equal(t, url.Values{"created[gte]": {unixStr(since)}, "created[lt]": {unixStr(until)}, "limit": {"100"}}, pos[0].Query)
	require.Equal(t, "acct_1StripeMock", pos[0].Account)
	bts := ofPath(m.exchanges(), http.MethodGet, "/v1/balance_transactions")
	require.Len(t, bts, 1)
	require.Equal(t, url.Values{"payout": {payoutID}, "limit": {"100"}, "expand[0]": {"data.source"}}, bts[0].Query)
	require.Equal(t, "acct_1StripeMock", bts[0].Account)
	m.requireAllAccepted(t, p)
}
