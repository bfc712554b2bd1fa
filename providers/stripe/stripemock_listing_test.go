package stripe_test

// Object listing (ListObjects, ListCurrent) against Stripe's own
// stripe-mock: every request it makes is validated against Stripe's OpenAPI
// spec, and its answers (stripe-mock's fixtures, and those fixtures
// rewritten into the objects a case needs) are decoded and mapped.
//
// What stripe-mock answers to these lists (v0.203.0), whatever the filters:
// one PaymentIntent pi_1PgafyB7WZ01zgkWSjxsAJo3, requires_payment_method,
// created 1234567890, whose expanded latest_charge ch_1PgafuB7WZ01zgkWXYmPNZs8
// is uncaptured with an available balance transaction and one embedded
// succeeded refund; one automatic payout po_1Pgc79B7WZ01zgkWu1KToYf4,
// in_transit, arrival_date 1234567890; one refund and one dispute created
// 1234567890 whose payment_intent, null in the fixture, comes back expanded
// into that PaymentIntent when data.payment_intent is asked for.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/providers/stripe"
	"github.com/reconciler/reconciler/reconcile"
)

const (
	mockPI      = "pi_1PgafyB7WZ01zgkWSjxsAJo3"
	mockPayout  = "po_1Pgc79B7WZ01zgkWu1KToYf4"
	mockCreated = 1234567890
)

// mockWindow is a window around stripe-mock's fixtures (all created
// 1234567890), so that they are the window's.
func mockWindow(account string) reconcile.ListParams {
	f := time.Unix(mockCreated, 0).UTC()
	return reconcile.ListParams{Account: account, Since: f.Add(-time.Hour), Until: f.Add(time.Hour)}
}

func TestStripeMockObjectListing(t *testing.T) {
	t.Parallel()
	direct := startStripeMockProcess(t)
	t.Run("Fixtures", func(t *testing.T) { t.Parallel(); testStripeMockListFixtures(t, direct) })
	t.Run("Rewritten", func(t *testing.T) { t.Parallel(); testStripeMockListRewritten(t, direct) })
	t.Run("ListCurrent", func(t *testing.T) { t.Parallel(); testStripeMockListCurrent(t, direct) })
	t.Run("Stretches", func(t *testing.T) { t.Parallel(); testStripeMockListStretches(t, direct) })
}

// testStripeMockListStretches: the window listed as stretches of its time
// at once (Stripe answering late, forced here; verify's stretches are
// ListCurrent calls over parts of the window). Every stretch's request is
// stripe-mock's to validate; stripe-mock lists its fixture in every
// stretch whatever the filter, and only the stretch that holds it keeps it.
func testStripeMockListStretches(t *testing.T, direct string) {
	m := proxyStripeMock(t, direct)
	p, err := stripe.New(stripe.Config{APIKey: stripeMockKey, BaseURL: m.URL, MaxRetries: 2, Timeout: 30 * time.Second, ReadAhead: true})
	require.NoError(t, err)
	ctx := context.Background()
	lp := mockWindow("")
	var cs []reconcile.Change
	require.NoError(t, p.ListObjects(ctx, lp, func(pg reconcile.Page) error { cs = append(cs, pg.Changes...); return nil }))
	require.Len(t, cs, 1, "%+v", cs)
	require.Equal(t, mockPI, cs[0].ProviderID)
	pis := ofPath(m.exchanges(), http.MethodGet, "/v1/payment_intents")
	require.Len(t, pis, 4, "four stretches")
	lo := map[string]bool{}
	for _, x := range pis {
		lo[x.Query.Get("created[gte]")] = true
	}
	require.Len(t, lo, 4, "four stretches, each its own: %v", pis)

	v := p.Verifier()
	f := time.Unix(mockCreated, 0).UTC()
	found := 0
	for _, part := range []reconcile.ListParams{{Since: lp.Since, Until: f}, {Since: f, Until: lp.Until}} {
		require.NoError(t, v.ListCurrent(ctx, part, func(cur []reconcile.Current) error { found += len(cur); return nil }))
	}
	require.Equal(t, 1, found, "the fixture listed once across the stretches")
	m.requireAllAccepted(t, p)
}

// testStripeMockListFixtures: stripe-mock's fixtures as they are, on the
// platform and a connected account. The PaymentIntent is created; the payout
// is in transit, so it settles nothing and its balance transactions are not
// read; the refund and the dispute belong to that PaymentIntent, created in
// the window, so nothing is re-read. A window after the fixtures lists
// nothing of them.
func testStripeMockListFixtures(t *testing.T, direct string) {
	m := proxyStripeMock(t, direct)
	p := newStripeMockProvider(t, m)
	ctx := context.Background()
	for _, account := range []string{"", "acct_1StripeMockListing"} {
		n := len(m.exchanges())
		lp := mockWindow(account)
		var cs []reconcile.Change
		require.NoError(t, p.ListObjects(ctx, lp, func(pg reconcile.Page) error { cs = append(cs, pg.Changes...); return nil }))
		require.Len(t, cs, 1, "%+v", cs)
		c := cs[0]
		require.Equal(t, mockPI, c.ProviderID)
		require.Equal(t, models.StateCreated, c.State)
		require.Equal(t, int64(mockCreated), c.At.Unix())
		require.Equal(t, "requires_payment_method", c.RawStatus)
		require.Equal(t, int64(1099), c.Amount)
		require.Equal(t, "usd", c.Currency)
		require.True(t, c.Inferred)
		require.Equal(t, reconcile.SyntheticEventID(mockPI, models.StateCreated, c.At), c.EventID)
		var payload map[string]any
		require.NoError(t, json.Unmarshal(c.Payload, &payload))
		require.Equal(t, mockPI, payload["id"])

		xs := after(m.exchanges(), n)
		for _, x := range xs {
			require.Equal(t, account, x.Account, "%s", x)
		}
		window := url.Values{"created[gte]": {unixStr(lp.Since)}, "created[lt]": {unixStr(lp.Until)}, "limit": {"100"}}
		with := func(v url.Values, kv ...string) url.Values {
			out := url.Values{}
			for k, vs := range v {
				out[k] = vs
			}
			for i := 0; i+1 < len(kv); i += 2 {
				out[kv[i]] = []string{kv[i+1]}
			}
			return out
		}
		pis := ofPath(xs, http.MethodGet, "/v1/payment_intents")
		require.Len(t, pis, 1)
		require.Equal(t, with(window, "expand[0]", "data.latest_charge.balance_transaction", "expand[1]", "data.latest_charge.refunds"), pis[0].Query)
		pos := ofPath(xs, http.MethodGet, "/v1/payouts")
		require.Len(t, pos, 1)
		require.Equal(t, url.Values{"arrival_date[gte]": {unixStr(lp.Since)}, "arrival_date[lt]": {unixStr(lp.Until)}, "limit": {"100"}}, pos[0].Query)
		res := ofPath(xs, http.MethodGet, "/v1/refunds")
		require.Len(t, res, 1)
		require.Equal(t, with(window, "expand[0]", "data.payment_intent"), res[0].Query)
		ds := ofPath(xs, http.MethodGet, "/v1/disputes")
		require.Len(t, ds, 1)
		require.Equal(t, with(window, "expand[0]", "data.payment_intent"), ds[0].Query)
		require.Len(t, ofPath(xs, http.MethodGet, "/v1/account"), 1, "the schedule, once per account")
		require.Len(t, xs, 5, "the schedule and four lists of one page: %v", xs)
	}

	// A window after the fixtures: each is outside the filter Stripe would
	// have applied, and skipped.
	f := time.Unix(mockCreated, 0).UTC()
	var cs []reconcile.Change
	require.NoError(t, p.ListObjects(ctx, reconcile.ListParams{Since: f.Add(time.Second), Until: f.Add(time.Hour)},
		func(pg reconcile.Page) error { cs = append(cs, pg.Changes...); return nil }))
	require.Empty(t, cs)
	m.requireAllAccepted(t, p)
}

// testStripeMockListRewritten: stripe-mock's answers rewritten into a
// captured, disputed PaymentIntent of the window refunded after its end, a
// paid payout that paid it out, and a refund and a dispute of the window
// that belong to a PaymentIntent created the day before, which is re-read by
// id. Every request is stripe-mock's to validate; the changes are capped at
// the window's end.
func testStripeMockListRewritten(t *testing.T, direct string) {
	m := proxyStripeMock(t, direct)
	p := newStripeMockProvider(t, m)
	const older = "pi_stripemock_listing_older"
	lp := mockWindow("")
	f := int64(mockCreated)
	afterEnd := lp.Until.Unix() + 60
	captureOf := func(b map[string]any, id string, btCreated, refundCreated int64) {
		ch := mapOf(t, b["latest_charge"], "latest_charge (expanded)")
		assert.Equal(t, false, ch["captured"], "stripe-mock's charge")
		ch["captured"], ch["amount"], ch["amount_captured"], ch["amount_refunded"], ch["disputed"], ch["payment_intent"] = true, 1099, 1099, 100, true, id
		bt := mapOf(t, ch["balance_transaction"], "latest_charge.balance_transaction (expanded)")
		assert.Equal(t, "available", bt["status"])
		bt["created"], bt["available_on"] = btCreated, btCreated+60
		refunds := mapOf(t, ch["refunds"], "latest_charge.refunds (expanded)")
		re := firstOf(t, refunds, "latest_charge.refunds")
		assert.Equal(t, "succeeded", re["status"], "stripe-mock's refund")
		assert.EqualValues(t, 100, re["amount"])
		re["created"], re["payment_intent"] = refundCreated, id
		b["status"] = "succeeded"
	}
	m.setRewrite("/v1/payment_intents", func(_ url.Values, b map[string]any) {
		pi := firstOf(t, b, "payment intents")
		assert.Equal(t, mockPI, pi["id"])
		captureOf(pi, mockPI, f+60, afterEnd) // refunded after the window's end
	})
	m.setRewrite("/v1/payment_intents/"+older, func(_ url.Values, b map[string]any) {
		b["created"] = f - 86400
		captureOf(b, older, f-86000, f+600) // refunded in the window
	})
	m.setRewrite("/v1/payouts", func(_ url.Values, b map[string]any) {
		po := firstOf(t, b, "payouts")
		assert.Equal(t, "in_transit", po["status"], "stripe-mock's payout")
		po["status"], po["arrival_date"] = "paid", f+1800
	})
	charge := m.object(t, "/v1/charges/ch_stripemock_listing")
	charge["captured"], charge["amount"], charge["amount_captured"], charge["amount_refunded"], charge["payment_intent"] = true, 1099, 1099, 100, mockPI
	m.setRewrite("/v1/balance_transactions", func(q url.Values, b map[string]any) {
		assert.Equal(t, mockPayout, q.Get("payout"))
		firstOf(t, b, "balance transactions")["source"] = charge
	})
	olderOf := func(q url.Values, b map[string]any) {
		if q.Get("created[gte]") == "" {
			return // a PaymentIntent's disputes: stripe-mock's as they are
		}
		pi := mapOf(t, firstOf(t, b, "list")["payment_intent"], "payment_intent (expanded)")
		assert.Equal(t, mockPI, pi["id"], "stripe-mock expands its PaymentIntent")
		pi["id"], pi["created"] = older, f-86400
	}
	m.setRewrite("/v1/refunds", olderOf)
	m.setRewrite("/v1/disputes", olderOf)

	var pages int
	var cs []reconcile.Change
	require.NoError(t, p.ListObjects(context.Background(), lp, func(pg reconcile.Page) error {
		pages++
		cs = append(cs, pg.Changes...)
		return nil
	}))
	got := byPayment(cs)
	require.Len(t, got, 2, "%v", brief(cs))
	for _, c := range cs {
		require.True(t, c.At.Before(lp.Until), "%s %s at %v", c.ProviderID, c.State, c.At)
		require.True(t, c.Inferred)
		if c.State.Valid() {
			require.Equal(t, reconcile.SyntheticEventID(c.ProviderID, c.State, c.At), c.EventID)
		}
	}

	// The window's PaymentIntent: captured at its balance transaction's
	// created; its refund came after the end, so none is counted and its
	// dispute (dated by that refund) is left out; settled by the payout.
	var captured, settled *reconcile.Change
	for i, c := range got[mockPI] {
		switch c.State {
		case models.StateCaptured:
			captured = &got[mockPI][i]
		case models.StateSettled:
			settled = &got[mockPI][i]
		default:
			t.Fatalf("unexpected change of %s: %v", mockPI, brief(got[mockPI]))
		}
	}
	require.NotNil(t, captured, "%v", brief(got[mockPI]))
	require.Equal(t, f+60, captured.At.Unix())
	require.True(t, captured.View)
	require.False(t, captured.ViewCurrent, "the view is as of the end")
	require.Zero(t, captured.AmountRefunded, "Stripe's amount_refunded 100 came after the end")
	require.False(t, captured.Refunded)
	require.NotNil(t, settled, "%v", brief(got[mockPI]))
	require.Equal(t, mockPayout, settled.PayoutID)
	require.Equal(t, f+1800, settled.At.Unix(), "at the payout's arrival_date")
	require.Equal(t, "reconciler.payout.paid", settled.EventType)
	require.False(t, settled.View, "the expanded charge counts a refund made after the end")
	require.Zero(t, settled.AmountRefunded)
	var payout map[string]any
	require.NoError(t, json.Unmarshal(settled.Payload, &payout))
	require.Equal(t, mockPayout, payout["id"])

	// The older PaymentIntent, re-read once for its refund and its dispute
	// of the window: captured the day before, 100 refunded in the window,
	// and stripe-mock's open dispute reported.
	var notice bool
	plan := reconcile.Decide(reconcile.Local{}, got[older])
	require.NotNil(t, plan.Latest)
	require.Equal(t, models.StateCaptured, plan.Latest.To)
	require.Equal(t, f-86000, plan.Latest.At.Unix())
	require.Equal(t, int64(100), plan.RefundTo)
	for _, c := range got[older] {
		if c.NoticeKind == models.KindDispute {
			notice = true
			require.Equal(t, "dispute_warning_needs_response", c.RawStatus)
			require.Equal(t, f+600, c.At.Unix(), "dated by the refund, the newest time its objects show")
		}
	}
	require.True(t, notice, "%v", brief(got[older]))

	xs := m.exchanges()
	require.Len(t, ofPath(xs, http.MethodGet, "/v1/payment_intents"), 1)
	bts := ofPath(xs, http.MethodGet, "/v1/balance_transactions")
	require.Len(t, bts, 1, "the paid payout's balance transactions, one page")
	require.Equal(t, url.Values{"payout": {mockPayout}, "limit": {"100"}, "expand[0]": {"data.source"}}, bts[0].Query)
	re := ofPath(xs, http.MethodGet, "/v1/payment_intents/"+older)
	require.Len(t, re, 1, "re-read once for its refund and its dispute")
	require.Equal(t, []string{"latest_charge.refunds", "latest_charge.balance_transaction"}, expands(re[0].Query))
	var byPI []string
	for _, x := range ofPath(xs, http.MethodGet, "/v1/disputes") {
		if id := x.Query.Get("payment_intent"); id != "" {
			require.Equal(t, url.Values{"payment_intent": {id}, "limit": {"100"}}, x.Query)
			byPI = append(byPI, id)
		}
	}
	require.ElementsMatch(t, []string{mockPI, older}, byPI, "each disputed charge's disputes")
	require.Empty(t, ofPath(xs, http.MethodGet, "/v1/payouts/"+mockPayout), "the listed payout is not read again")
	require.Len(t, xs, 9, "the schedule, four lists, two disputes, the payout's transactions, one re-read: %v", xs)
	require.Positive(t, pages)
	m.requireAllAccepted(t, p)
}

// testStripeMockListCurrent: ListCurrent decodes stripe-mock's listed
// PaymentIntent and answers for it what Current answers by id; on a manual
// schedule it expands the charge's balance transaction too.
func testStripeMockListCurrent(t *testing.T, direct string) {
	m := proxyStripeMock(t, direct)
	p := newStripeMockProvider(t, m)
	ctx := context.Background()
	for _, account := range []string{"", "acct_1StripeMockManual"} {
		if account != "" {
			m.setRewrite("/v1/account", func(_ url.Values, b map[string]any) {
				sched := mapOf(t, mapOf(t, mapOf(t, b["settings"], "settings")["payouts"], "settings.payouts")["schedule"], "schedule")
				sched["interval"] = "manual"
			})
		}
		n := len(m.exchanges())
		v := p.Verifier()
		var listed []reconcile.Current
		require.NoError(t, v.ListCurrent(ctx, mockWindow(account), func(cs []reconcile.Current) error {
			listed = append(listed, cs...)
			return nil
		}))
		require.Len(t, listed, 1)
		c := listed[0]
		require.Equal(t, reconcile.Current{ProviderID: mockPI, Found: true, State: models.StateCreated, Amount: 1099, Currency: "usd",
			RawStatus: "requires_payment_method"}, c, "stripe-mock's uncaptured fixture")
		cur, err := v.Current(ctx, reconcile.CurrentParams{Account: account, IDs: []string{mockPI}})
		require.NoError(t, err)
		require.Equal(t, cur[0], c, "as Current answers it by id")

		xs := after(m.exchanges(), n)
		pis := ofPath(xs, http.MethodGet, "/v1/payment_intents")
		require.Len(t, pis, 1)
		want := []string{"data.latest_charge"}
		if account != "" {
			want = append(want, "data.latest_charge.balance_transaction")
		}
		require.Equal(t, want, expands(pis[0].Query), "account %q", account)
		lp := mockWindow(account)
		require.Equal(t, unixStr(lp.Since), pis[0].Query.Get("created[gte]"))
		require.Equal(t, unixStr(lp.Until), pis[0].Query.Get("created[lt]"))
		require.Equal(t, "100", pis[0].Query.Get("limit"))
		require.Len(t, ofPath(xs, http.MethodGet, fmt.Sprintf("/v1/payment_intents/%s", mockPI)), 1, "Current's read by id")
		require.Empty(t, ofPath(xs, http.MethodGet, "/v1/disputes"), "stripe-mock's charge is not disputed")
	}
	m.requireAllAccepted(t, p)
}
