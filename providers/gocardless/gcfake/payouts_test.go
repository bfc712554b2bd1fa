package gcfake

import (
	"encoding/json"
	"net/url"
	"testing"
	"time"

	"github.com/reconciler/reconciler/models"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type payoutList struct {
	Payouts []map[string]any `json:"payouts"`
	Meta    meta             `json:"meta"`
}

func payoutIDs(l payoutList) []string {
	out := make([]string, len(l.Payouts))
	for i, p := range l.Payouts {
		out[i] = p["id"].(string)
	}
	return out
}

func TestBouncePayout(t *testing.T) {
	s := newServer(t, Options{Seed: 41})
	a, po := paidOut(s, 1000)
	bounceAt := t0.AddDate(0, 0, 6)
	s.BouncePayout(po, bounceAt)

	var o struct {
		Payouts map[string]any `json:"payouts"`
	}
	getJSON(t, s, "/payouts/"+po, &o)
	assert.Equal(t, "bounced", o.Payouts["status"])
	assert.Equal(t, float64(1000), o.Payouts["amount"])

	l := listEventsOK(t, s, "resource_type=creditors")
	require.Len(t, l.Events, 1)
	e := l.Events[0]
	assert.Equal(t, "creditors", e.ResourceType)
	assert.Equal(t, "bounced_payout", e.Action)
	assert.Equal(t, ts(bounceAt), e.CreatedAt)
	require.Len(t, e.Links, 2)
	assert.Regexp(t, `^CR[0-9A-Z]{12}$`, e.Links["creditor"])
	assert.Equal(t, po, e.Links["payout"])
	assert.Equal(t, map[string]any{"origin": "gocardless", "cause": "bounced_payout",
		"description": "A payout for this creditor has failed. Please contact your bank for more information or retry the payout."}, e.Details)
	assert.Equal(t, map[string]any{}, e.Metadata)
	var byID struct {
		Events event `json:"events"`
	}
	getJSON(t, s, "/events/"+e.ID, &byID)
	assert.Equal(t, e, byID.Events)

	// the payments it paid are unchanged
	p := getPaymentObj(t, s, a)
	assert.Equal(t, "paid_out", p.Status)
	assert.Equal(t, po, p.Links["payout"])
	x := s.ExpectedAt(bounceAt.Add(time.Hour))[a]
	assert.Equal(t, models.StateSettled, x.State)
	assert.Equal(t, po, x.PayoutID)
	ds := s.Deliveries()
	last := ds[len(ds)-1]
	assert.Equal(t, "creditors.bounced_payout", last.EventType)
	assert.Equal(t, Fact{EventID: e.ID, EventType: "creditors.bounced_payout", At: bounceAt, Currency: "gbp", PayoutID: po},
		last.Facts[0])
	assert.Empty(t, listEventsOK(t, s, "resource_type=payments&created_at[gte]="+url.QueryEscape(ts(bounceAt))).Events)
	assert.Len(t, listEventsOK(t, s, "payment="+a).Events, 4, "the bounce is no payment event")
}

func TestListPayouts(t *testing.T) {
	s := newServer(t, Options{Seed: 42})
	var all []string // oldest first
	for i := range 5 {
		all = append(all, s.PayOut(t0.Add(time.Duration(i)*time.Hour)))
	}
	s.BouncePayout(all[1], t0.Add(10*time.Hour))
	s.BouncePayout(all[3], t0.Add(10*time.Hour))
	newest := []string{all[4], all[3], all[2], all[1], all[0]}

	var l payoutList
	getJSON(t, s, "/payouts", &l)
	assert.Equal(t, newest, payoutIDs(l))
	assert.Equal(t, 50, l.Meta.Limit)
	assert.Nil(t, l.Meta.Cursors.After)
	p := l.Payouts[0]
	assert.Equal(t, ts(t0.Add(4*time.Hour)), p["created_at"])
	assert.Equal(t, "2026-11-02", p["arrival_date"])
	assert.Equal(t, "GBP", p["currency"])
	assert.Equal(t, "paid", p["status"])
	assert.Equal(t, float64(0), p["deducted_fees"])
	assert.Equal(t, "merchant", p["payout_type"])

	getJSON(t, s, "/payouts?status=bounced", &l)
	assert.Equal(t, []string{all[3], all[1]}, payoutIDs(l))
	getJSON(t, s, "/payouts?status=paid&limit=2", &l)
	assert.Equal(t, []string{all[4], all[2]}, payoutIDs(l))
	require.NotNil(t, l.Meta.Cursors.After)
	getJSON(t, s, "/payouts?status=paid&limit=2&after="+*l.Meta.Cursors.After, &l)
	assert.Equal(t, []string{all[0]}, payoutIDs(l))
	assert.Nil(t, l.Meta.Cursors.After)
	getJSON(t, s, "/payouts?limit=2&before="+all[1], &l)
	assert.Equal(t, []string{all[3], all[2]}, payoutIDs(l))
	getJSON(t, s, "/payouts?status=pending", &l)
	assert.Empty(t, l.Payouts)
	getJSON(t, s, "/payouts?created_at[gte]="+url.QueryEscape(ts(t0.Add(time.Hour)))+
		"&created_at[lt]="+url.QueryEscape(ts(t0.Add(3*time.Hour))), &l)
	assert.Equal(t, []string{all[2], all[1]}, payoutIDs(l))
	getJSON(t, s, "/payouts?created_at[gt]="+url.QueryEscape(ts(t0.Add(3*time.Hour))), &l)
	assert.Equal(t, []string{all[4]}, payoutIDs(l))
	getJSON(t, s, "/payouts?created_at[lte]="+url.QueryEscape(ts(t0)), &l)
	assert.Equal(t, []string{all[0]}, payoutIDs(l))

	for _, bad := range []string{"limit=501", "after=PO000000000000", "created_at[gte]=yesterday"} {
		st, _, body := get(t, s, "/payouts?"+bad)
		assert.Equal(t, 400, st, bad)
		decodeErr(t, body)
	}
	assert.Equal(t, int64(0), s.RequestsByPath()["unknown"])
	assert.Positive(t, s.RequestsByPath()["/payouts"])
}

type payoutItem struct {
	Type   string            `json:"type"`
	Amount string            `json:"amount"`
	Taxes  []any             `json:"taxes"`
	Links  map[string]string `json:"links"`
}

type itemList struct {
	Items []payoutItem `json:"payout_items"`
	Meta  meta         `json:"meta"`
}

func TestPayoutItems(t *testing.T) {
	c := &clock{t: t0.AddDate(0, 1, 0)}
	s := newServer(t, Options{Seed: 43, Now: c.Now})
	day := func(n int) time.Time { return t0.AddDate(0, 0, n) }
	a := s.CreatePayment(1200, "GBP", t0)
	b := s.CreatePayment(800, "GBP", t0)
	late := s.CreatePayment(500, "GBP", t0)
	for _, pm := range []string{a, b, late} {
		s.Submit(pm, day(1))
		s.Confirm(pm, day(4))
	}
	po1 := s.PayOut(day(5), a, b, late)
	s.AddPayoutFee(po1, a, 30)
	s.Fail(late, day(6))
	rf := s.RefundCreated(a, 200, day(6))
	s.RefundPaid(rf, day(7))
	s.ChargeBack(b, day(7))
	po2 := s.PayOut(day(8))
	s.LateFailureSettled(late, day(8), po2)
	s.RefundSettled(rf, day(8), po2)
	s.ChargebackSettled(b, day(8), po2)
	s.AddPayoutFee(po2, b, -15)
	s.RefundFailed(rf, day(9))
	po3 := s.PayOut(day(10))
	s.RefundFundsReturned(rf, day(10), po3)

	var l itemList
	getJSON(t, s, "/payout_items?payout="+po1, &l)
	empty := []any{}
	assert.Equal(t, []payoutItem{
		{"payment_paid_out", "1200.0", empty, map[string]string{"payment": a}},
		{"payment_paid_out", "800.0", empty, map[string]string{"payment": b}},
		{"payment_paid_out", "500.0", empty, map[string]string{"payment": late}},
		{"gocardless_fee", "-30.0", empty, map[string]string{"payment": a}},
	}, l.Items)
	assert.Nil(t, l.Meta.Cursors.After)
	mandate := getRefundObj(t, s, rf)["links"].(map[string]any)["mandate"].(string)
	getJSON(t, s, "/payout_items?payout="+po2, &l)
	assert.Equal(t, []payoutItem{
		{"payment_failed", "-500.0", empty, map[string]string{"payment": late}},
		{"payment_refunded", "-200.0", empty, map[string]string{"payment": a, "refund": rf, "mandate": mandate}},
		{"payment_charged_back", "-800.0", empty, map[string]string{"payment": b}},
		{"gocardless_fee", "15.0", empty, map[string]string{"payment": b}},
	}, l.Items)
	getJSON(t, s, "/payout_items?payout="+po3, &l)
	assert.Equal(t, []payoutItem{
		{"refund_funds_returned", "200.0", empty, map[string]string{"payment": a, "refund": rf, "mandate": mandate}},
	}, l.Items)

	// the payouts' amounts are the sums of their items, net of fees
	var o struct {
		Payouts map[string]any `json:"payouts"`
	}
	getJSON(t, s, "/payouts/"+po1, &o)
	assert.Equal(t, float64(2470), o.Payouts["amount"])
	assert.Equal(t, float64(30), o.Payouts["deducted_fees"])
	getJSON(t, s, "/payouts/"+po2, &o)
	assert.Equal(t, float64(-1485), o.Payouts["amount"])
	assert.Equal(t, float64(-15), o.Payouts["deducted_fees"])

	// cursor pagination
	getJSON(t, s, "/payout_items?payout="+po1+"&limit=3", &l)
	require.Len(t, l.Items, 3)
	assert.Equal(t, 3, l.Meta.Limit)
	require.NotNil(t, l.Meta.Cursors.After)
	require.NotNil(t, l.Meta.Cursors.Before)
	after := *l.Meta.Cursors.After
	getJSON(t, s, "/payout_items?payout="+po1+"&limit=3&after="+after, &l)
	require.Len(t, l.Items, 1)
	assert.Equal(t, "gocardless_fee", l.Items[0].Type)
	assert.Nil(t, l.Meta.Cursors.After)
	getJSON(t, s, "/payout_items?payout="+po1+"&limit=2&before="+*l.Meta.Cursors.Before, &l)
	require.Len(t, l.Items, 2)
	assert.Equal(t, []string{"800.0", "500.0"}, []string{l.Items[0].Amount, l.Items[1].Amount})
	getJSON(t, s, "/payout_items?payout="+po1+"&limit=500", &l)
	assert.Len(t, l.Items, 4)
	st, _, body := get(t, s, "/payout_items?payout="+po3+"&after="+after)
	assert.Equal(t, 400, st, "a cursor past the payout's items")
	assert.Equal(t, "cursor_not_found", decodeErr(t, body).Error.Errors[0].Reason)

	for _, bad := range []struct {
		q      string
		status int
	}{
		{"", 400}, {"payout=" + po1 + "&limit=501", 400}, {"payout=" + po1 + "&after=nope", 400},
		{"payout=PO000000000000", 404},
	} {
		st, _, body := get(t, s, "/payout_items?"+bad.q)
		assert.Equal(t, bad.status, st, bad.q)
		decodeErr(t, body)
	}

	// six months on, po1 (created 6 months and a second ago) is gone; po3
	// (created 5 days after it) is not
	c.Add(day(5).AddDate(0, 6, 0).Sub(c.Now()) + time.Second)
	st, _, body = get(t, s, "/payout_items?payout="+po1)
	require.Equal(t, 410, st, string(body))
	e := decodeErr(t, body)
	assert.Equal(t, 410, e.Error.Code)
	assert.Equal(t, "invalid_api_usage", e.Error.Type)
	assert.Contains(t, e.Error.Message, "last 6 months")
	getJSON(t, s, "/payout_items?payout="+po3, &l)
	assert.Len(t, l.Items, 1)
	getJSON(t, s, "/payouts/"+po1, &o) // the payout itself is still served
}

func TestEventsFilters(t *testing.T) {
	s := newServer(t, Options{Seed: 44})
	day := func(n int) time.Time { return t0.AddDate(0, 0, n) }
	a := s.CreatePayment(1000, "GBP", t0)
	b := s.CreatePayment(2000, "GBP", t0)
	po := s.PayOut(day(4), a, b)
	rf1 := s.Refund(a, 100, day(6))
	rf2 := s.RefundCreated(a, 100, day(7))
	s.RefundCreated(b, 100, day(7))
	s.RefundFailed(rf2, day(8))
	s.Fail(a, day(9))
	po2 := s.PayOut(day(10))
	s.LateFailureSettled(a, day(10), po2)
	s.BouncePayout(po, day(11))

	l := listEventsOK(t, s, "refund="+rf2)
	assert.Equal(t, []string{"failed", "created"}, actions(l.Events))
	for _, e := range l.Events {
		assert.Equal(t, rf2, e.Links["refund"])
	}
	assert.Equal(t, []string{"paid", "created"}, actions(listEventsOK(t, s, "refund="+rf1).Events))
	assert.Equal(t, []string{"created"}, actions(listEventsOK(t, s, "refund="+rf1+"&action=created").Events))
	assert.Empty(t, listEventsOK(t, s, "refund=RF000000000000").Events)

	l = listEventsOK(t, s, "payout="+po)
	assert.Equal(t, []string{"bounced_payout", "paid_out", "paid_out"}, actions(l.Events))
	for _, e := range l.Events {
		assert.Equal(t, po, e.Links["payout"])
	}
	assert.Equal(t, []string{"late_failure_settled"}, actions(listEventsOK(t, s, "payout="+po2).Events))
	l = listEventsOK(t, s, "payout="+po+"&payment="+b)
	assert.Equal(t, []string{"paid_out"}, actions(l.Events))
	assert.Equal(t, b, l.Events[0].Links["payment"])
	assert.Empty(t, listEventsOK(t, s, "payout=PO000000000000").Events)

	assert.Equal(t, []string{"bounced_payout"}, actions(listEventsOK(t, s, "resource_type=creditors").Events))
	assert.Len(t, listEventsOK(t, s, "resource_type=refunds").Events, 5)

	for _, bad := range []string{"resource_type=refunds&refund=" + rf1, "resource_type=payments&payout=" + po,
		"resource_type=creditors&payout=" + po, "resource_type=payments&payment=" + a} {
		st, _, body := get(t, s, "/events?"+bad)
		assert.Equal(t, 400, st, bad)
		e := decodeErr(t, body)
		assert.Equal(t, "invalid_filter", e.Error.Errors[0].Reason, bad)
		assert.Contains(t, e.Error.Message, "resource_type cannot be used together with", bad)
	}
	st, _, body := get(t, s, "/events?resource_type=creditors&include=creditor")
	assert.Equal(t, 400, st)
	assert.Equal(t, "validation_failed", decodeErr(t, body).Error.Type)
}

// The stuck path dates each state of a payment from the created_at of its
// events: GET /events?payment=… returns every one of them, its refunds'
// included.
func TestEventsByPaymentDateEveryState(t *testing.T) {
	s := newServer(t, Options{Seed: 45})
	at := func(h int) time.Time { return t0.Add(time.Duration(h)*time.Hour + 123*time.Millisecond) }
	pm := s.CreatePayment(1000, "GBP", at(0))
	s.Submit(pm, at(30))
	s.Confirm(pm, at(100))
	po := s.PayOut(at(125), pm)
	rf := s.RefundCreated(pm, 300, at(150))
	s.RefundPaid(rf, at(170))
	s.Fail(pm, at(175))
	other := s.CreatePayment(1000, "GBP", at(1))
	s.Submit(other, at(31))

	l := listEventsOK(t, s, "payment="+pm)
	type row struct{ typ, at string }
	var got []row
	for _, e := range l.Events {
		got = append(got, row{e.ResourceType + "." + e.Action, e.CreatedAt})
		assert.Equal(t, pm, e.Links["payment"])
	}
	assert.Equal(t, []row{
		{"payments.failed", "2026-11-09T16:00:00.123Z"},
		{"refunds.paid", "2026-11-09T11:00:00.123Z"},
		{"refunds.created", "2026-11-08T15:00:00.123Z"},
		{"payments.paid_out", "2026-11-07T14:00:00.123Z"},
		{"payments.confirmed", "2026-11-06T13:00:00.123Z"},
		{"payments.submitted", "2026-11-03T15:00:00.123Z"},
		{"payments.created", "2026-11-02T09:00:00.123Z"},
	}, got)
	assert.Equal(t, po, l.Events[3].Links["payout"])
	for i, r := range got {
		want, err := time.Parse(time.RFC3339Nano, r.at)
		require.NoError(t, err)
		assert.Equal(t, []time.Time{at(175), at(170), at(150), at(125), at(100), at(30), at(0)}[i], want)
	}
	// the list pages like any other
	l = listEventsOK(t, s, "payment="+pm+"&limit=4")
	require.NotNil(t, l.Meta.Cursors.After)
	l = listEventsOK(t, s, "payment="+pm+"&limit=4&after="+*l.Meta.Cursors.After)
	assert.Equal(t, []string{"confirmed", "submitted", "created"}, actions(l.Events))
	assert.Nil(t, l.Meta.Cursors.After)
	var raw map[string]any
	require.NoError(t, json.Unmarshal(mustBody(t, s, "/events?payment="+pm+"&action=paid_out"), &raw))
	assert.Len(t, raw["events"], 1)
}

func mustBody(t testing.TB, s *Server, path string) []byte {
	t.Helper()
	st, _, body := get(t, s, path)
	require.Equal(t, 200, st, string(body))
	return body
}
