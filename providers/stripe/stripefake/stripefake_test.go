package stripefake

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/reconciler/reconciler/models"
	"github.com/stripe/stripe-go/v76"
	"github.com/stripe/stripe-go/v76/client"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var now0 = time.Date(2024, 3, 1, 12, 0, 0, 0, time.UTC)

func fixedNow() time.Time { return now0 }

func apiFor(t testing.TB, s *Server, key string) *client.API {
	t.Helper()
	base := s.Start()
	t.Cleanup(s.Close)
	b := stripe.GetBackendWithConfig(stripe.APIBackend, &stripe.BackendConfig{
		URL:               stripe.String(base),
		LeveledLogger:     &stripe.LeveledLogger{Level: stripe.LevelNull},
		MaxNetworkRetries: stripe.Int64(0),
	})
	return client.New(key, &stripe.Backends{API: b, Connect: b, Uploads: b})
}

func newAPI(t testing.TB) (*Server, *client.API) {
	s := New(Options{Now: fixedNow, Seed: 7})
	return s, apiFor(t, s, "sk_test_fake123")
}

func eventIDs(t testing.TB, it interface {
	Next() bool
	Event() *stripe.Event
	Err() error
}) []string {
	t.Helper()
	var ids []string
	for it.Next() {
		ids = append(ids, it.Event().ID)
	}
	require.NoError(t, it.Err())
	return ids
}

func deliveryIDs(ds []Delivery) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.EventID
	}
	return out
}

func reversed(s []string) []string {
	s = slices.Clone(s)
	slices.Reverse(s)
	return s
}

func rawGet(t testing.TB, s *Server, path string, hdr ...string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest("GET", s.Start()+path, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer sk_test_raw")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return res.StatusCode, res.Header, body
}

type rawList struct {
	Object  string            `json:"object"`
	URL     string            `json:"url"`
	HasMore bool              `json:"has_more"`
	Data    []json.RawMessage `json:"data"`
}

func listIDs(t testing.TB, body []byte) ([]string, bool) {
	t.Helper()
	var l rawList
	require.NoError(t, json.Unmarshal(body, &l), string(body))
	require.Equal(t, "list", l.Object)
	var ids []string
	for _, d := range l.Data {
		var o struct{ ID string }
		require.NoError(t, json.Unmarshal(d, &o))
		ids = append(ids, o.ID)
	}
	return ids, l.HasMore
}

// seedEvents creates n payments with heavy same-second collisions, some
// captured, all within the last 10 days.
func seedEvents(a *Account, n int) {
	base := now0.Add(-10 * 24 * time.Hour)
	for i := 0; i < n; i++ {
		at := base.Add(time.Duration(i/3) * time.Minute)
		pi := a.CreatePayment(int64(100+i), "GBP", false, at)
		if i%4 == 0 {
			a.Capture(pi, at)
		}
	}
}

func TestPagingNewestFirst(t *testing.T) {
	s, sc := newAPI(t)
	a := s.Account("")
	seedEvents(a, 300)
	want := reversed(deliveryIDs(a.Deliveries()))
	require.Len(t, want, 375)

	got := eventIDs(t, sc.Events.List(&stripe.EventListParams{ListParams: stripe.ListParams{Limit: stripe.Int64(7)}}))
	assert.Equal(t, want, got)
	assert.Equal(t, int64((375+6)/7), s.RequestsByPath()["/v1/events"])

	// default limit 10, with created ordering checked on decoded events
	it := sc.Events.List(&stripe.EventListParams{})
	var prev *stripe.Event
	n := 0
	for it.Next() {
		e := it.Event()
		if prev != nil {
			require.LessOrEqual(t, e.Created, prev.Created)
		}
		prev = e
		n++
	}
	require.NoError(t, it.Err())
	assert.Equal(t, 375, n)
}

func TestEndingBeforeWalksOldestToNewest(t *testing.T) {
	s, sc := newAPI(t)
	a := s.Account("")
	seedEvents(a, 100)
	asc := deliveryIDs(a.Deliveries())
	for _, k := range []int{0, 1, 37, len(asc) - 2, len(asc) - 1} {
		got := eventIDs(t, sc.Events.List(&stripe.EventListParams{ListParams: stripe.ListParams{
			Limit: stripe.Int64(6), EndingBefore: stripe.String(asc[k])}}))
		if k == len(asc)-1 {
			assert.Empty(t, got)
			continue
		}
		assert.Equal(t, asc[k+1:], got, "ending_before %d", k)
	}
	// starting_after from the middle
	desc := reversed(asc)
	got := eventIDs(t, sc.Events.List(&stripe.EventListParams{ListParams: stripe.ListParams{
		Limit: stripe.Int64(9), StartingAfter: stripe.String(desc[40])}}))
	assert.Equal(t, desc[41:], got)
}

func TestCursorPagesRaw(t *testing.T) {
	s := New(Options{Now: fixedNow})
	a := s.Account("")
	for i := 0; i < 20; i++ {
		a.CreatePayment(100, "gbp", false, now0.Add(-time.Hour).Add(time.Duration(i/4)*time.Second))
	}
	e := deliveryIDs(a.Deliveries()) // ascending e0..e19
	t.Cleanup(s.Close)

	_, _, body := rawGet(t, s, "/v1/events?limit=3&ending_before="+e[5])
	ids, more := listIDs(t, body)
	assert.Equal(t, []string{e[8], e[7], e[6]}, ids)
	assert.True(t, more)

	_, _, body = rawGet(t, s, "/v1/events?limit=3&ending_before="+e[16])
	ids, more = listIDs(t, body)
	assert.Equal(t, []string{e[19], e[18], e[17]}, ids)
	assert.False(t, more)

	_, _, body = rawGet(t, s, "/v1/events?limit=3&starting_after="+e[5])
	ids, more = listIDs(t, body)
	assert.Equal(t, []string{e[4], e[3], e[2]}, ids)
	assert.True(t, more)

	_, _, body = rawGet(t, s, "/v1/events?limit=3&starting_after="+e[2])
	ids, more = listIDs(t, body)
	assert.Equal(t, []string{e[1], e[0]}, ids)
	assert.False(t, more)

	// cursor outside the filters is fine
	_, _, body = rawGet(t, s, "/v1/events?limit=100&type=charge.*&starting_after="+e[10])
	ids, more = listIDs(t, body)
	assert.Empty(t, ids)
	assert.False(t, more)

	// unknown cursor
	st, _, body := rawGet(t, s, "/v1/events?starting_after=evt_nope")
	assert.Equal(t, 400, st)
	assert.Contains(t, string(body), "resource_missing")
	st, _, _ = rawGet(t, s, "/v1/events?starting_after="+e[1]+"&ending_before="+e[3])
	assert.Equal(t, 400, st)
}

func TestCreatedBounds(t *testing.T) {
	s, sc := newAPI(t)
	a := s.Account("")
	t0 := now0.Add(-time.Hour)
	for _, d := range []int{0, 1, 1, 1, 2, 3} {
		a.CreatePayment(100, "gbp", false, t0.Add(time.Duration(d)*time.Second))
	}
	asc := deliveryIDs(a.Deliveries())
	u := t0.Unix()
	list := func(p *stripe.EventListParams) []string {
		p.Limit = stripe.Int64(2)
		return eventIDs(t, sc.Events.List(p))
	}
	assert.Equal(t, reversed(asc[1:4]), list(&stripe.EventListParams{Created: stripe.Int64(u + 1)}))
	assert.Equal(t, reversed(asc[1:]), list(&stripe.EventListParams{CreatedRange: &stripe.RangeQueryParams{GreaterThanOrEqual: u + 1}}))
	assert.Equal(t, reversed(asc[4:]), list(&stripe.EventListParams{CreatedRange: &stripe.RangeQueryParams{GreaterThan: u + 1}}))
	assert.Equal(t, reversed(asc[:1]), list(&stripe.EventListParams{CreatedRange: &stripe.RangeQueryParams{LesserThan: u + 1}}))
	assert.Equal(t, reversed(asc[:4]), list(&stripe.EventListParams{CreatedRange: &stripe.RangeQueryParams{LesserThanOrEqual: u + 1}}))
	assert.Equal(t, reversed(asc[1:5]), list(&stripe.EventListParams{CreatedRange: &stripe.RangeQueryParams{GreaterThan: u, LesserThan: u + 3}}))
	assert.Empty(t, list(&stripe.EventListParams{Created: stripe.Int64(u + 10)}))

	st, _, body := rawGet(t, s, "/v1/events?created[gte]=abc")
	assert.Equal(t, 400, st)
	assert.Contains(t, string(body), "parameter_invalid_integer")
	for _, l := range []string{"0", "101", "x"} {
		st, _, body = rawGet(t, s, "/v1/events?limit="+l)
		assert.Equal(t, 400, st, l)
		assert.Contains(t, string(body), "parameter_invalid_integer")
	}
}

func TestTypesFilter(t *testing.T) {
	s, sc := newAPI(t)
	a := s.Account("")
	at := now0.Add(-48 * time.Hour)
	pi := a.CreatePayment(1000, "gbp", true, at)
	a.Authorise(pi, at.Add(time.Second))
	a.Capture(pi, at.Add(time.Hour))
	a.Refund(pi, 300, at.Add(2*time.Hour))
	pi2 := a.CreatePayment(500, "gbp", false, at.Add(3*time.Hour))
	a.Capture(pi2, at.Add(3*time.Hour))

	typesOf := func(p *stripe.EventListParams) []string {
		var out []string
		it := sc.Events.List(p)
		for it.Next() {
			out = append(out, string(it.Event().Type))
		}
		require.NoError(t, it.Err())
		return out
	}
	assert.Equal(t, []string{"payment_intent.succeeded", "charge.refunded", "payment_intent.succeeded"},
		typesOf(&stripe.EventListParams{Types: stripe.StringSlice([]string{"payment_intent.succeeded", "charge.refunded"})}))
	assert.Equal(t, []string{"charge.refunded", "charge.captured"}, typesOf(&stripe.EventListParams{Type: stripe.String("charge.*")}))
	assert.Len(t, typesOf(&stripe.EventListParams{Type: stripe.String("*")}), 7)
	assert.Equal(t, []string{"payment_intent.created", "payment_intent.created"},
		typesOf(&stripe.EventListParams{Type: stripe.String("payment_intent.created")}))

	// raw types[] form
	_, _, body := rawGet(t, s, "/v1/events?types[]=charge.captured&types[]=payment_intent.amount_capturable_updated")
	ids, _ := listIDs(t, body)
	assert.Len(t, ids, 2)

	many := make([]string, 21)
	for i := range many {
		many[i] = fmt.Sprintf("x.%d", i)
	}
	it := sc.Events.List(&stripe.EventListParams{Types: stripe.StringSlice(many)})
	require.False(t, it.Next())
	var se *stripe.Error
	require.ErrorAs(t, it.Err(), &se)
	assert.Equal(t, 400, se.HTTPStatusCode)
}

func TestHorizon(t *testing.T) {
	s, sc := newAPI(t)
	a := s.Account("")
	oldPI := a.CreatePayment(100, "gbp", false, now0.Add(-31*24*time.Hour))
	edge := a.CreatePayment(100, "gbp", false, now0.Add(-30*24*time.Hour))
	a.CreatePayment(100, "gbp", false, now0.Add(-29*24*time.Hour))
	ds := a.Deliveries()
	require.Len(t, ds, 3)
	got := eventIDs(t, sc.Events.List(&stripe.EventListParams{}))
	assert.Equal(t, []string{ds[2].EventID, ds[1].EventID}, got)
	_ = edge

	it := sc.Events.List(&stripe.EventListParams{ListParams: stripe.ListParams{StartingAfter: stripe.String(ds[0].EventID)}})
	require.False(t, it.Next())
	var se *stripe.Error
	require.ErrorAs(t, it.Err(), &se)
	assert.Equal(t, 400, se.HTTPStatusCode)
	assert.Equal(t, stripe.ErrorCodeResourceMissing, se.Code)

	_, err := sc.Events.Get(ds[0].EventID, nil)
	require.ErrorAs(t, err, &se)
	assert.Equal(t, 404, se.HTTPStatusCode)
	ev, err := sc.Events.Get(ds[1].EventID, nil)
	require.NoError(t, err)
	assert.Equal(t, "payment_intent.created", string(ev.Type))

	// the old payment itself is still retrievable
	p, err := sc.PaymentIntents.Get(oldPI, nil)
	require.NoError(t, err)
	assert.Equal(t, oldPI, p.ID)
}

func TestStripeAccountHeader(t *testing.T) {
	s, sc := newAPI(t)
	s.Account("").CreatePayment(100, "gbp", false, now0.Add(-time.Hour))
	pi := s.Account("acct_123").CreatePayment(777, "eur", false, now0.Add(-time.Hour))

	p := &stripe.EventListParams{}
	p.SetStripeAccount("acct_123")
	it := sc.Events.List(p)
	require.True(t, it.Next())
	e := it.Event()
	assert.Equal(t, "acct_123", e.Account)
	var obj stripe.PaymentIntent
	require.NoError(t, json.Unmarshal(e.Data.Raw, &obj))
	assert.Equal(t, pi, obj.ID)
	assert.Equal(t, int64(777), obj.Amount)
	assert.Equal(t, stripe.Currency("eur"), obj.Currency)
	require.False(t, it.Next())
	require.NoError(t, it.Err())

	// not visible from the platform
	_, err := sc.PaymentIntents.Get(pi, nil)
	var se *stripe.Error
	require.ErrorAs(t, err, &se)
	assert.Equal(t, 404, se.HTTPStatusCode)
	assert.Equal(t, stripe.ErrorCodeResourceMissing, se.Code)
	gp := &stripe.PaymentIntentParams{}
	gp.SetStripeAccount("acct_123")
	got, err := sc.PaymentIntents.Get(pi, gp)
	require.NoError(t, err)
	assert.Equal(t, stripe.PaymentIntentStatusRequiresPaymentMethod, got.Status)
}

func TestObjectsAndExpand(t *testing.T) {
	s, sc := newAPI(t)
	a := s.Account("")
	at := now0.Add(-5 * 24 * time.Hour)
	pi := a.CreatePayment(5000, "gbp", true, at)
	a.SetCustomer(pi, "Ada Lovelace", "ada@example.com")
	a.Authorise(pi, at.Add(time.Second))
	a.Capture(pi, at.Add(time.Hour))
	r1 := a.Refund(pi, 1000, at.Add(2*time.Hour))
	r2 := a.Refund(pi, 500, at.Add(3*time.Hour))
	po := a.Payout(at.Add(24*time.Hour), pi)

	p, err := sc.PaymentIntents.Get(pi, nil)
	require.NoError(t, err)
	assert.Equal(t, stripe.PaymentIntentStatusSucceeded, p.Status)
	assert.Equal(t, stripe.PaymentIntentCaptureMethodManual, p.CaptureMethod)
	assert.Equal(t, int64(5000), p.AmountReceived)
	assert.Equal(t, "Ada Lovelace", p.Metadata["customer_name"])
	assert.Equal(t, "ada@example.com", p.Metadata["customer_email"])
	assert.Equal(t, "ada@example.com", p.ReceiptEmail)
	assert.True(t, strings.HasPrefix(p.Customer.ID, "cus_"))
	require.NotNil(t, p.LatestCharge)
	chID := p.LatestCharge.ID
	assert.True(t, strings.HasPrefix(chID, "ch_"))
	assert.Zero(t, p.LatestCharge.Amount, "unexpanded")

	gp := &stripe.PaymentIntentParams{}
	gp.AddExpand("latest_charge.refunds")
	p, err = sc.PaymentIntents.Get(pi, gp)
	require.NoError(t, err)
	ch := p.LatestCharge
	assert.Equal(t, chID, ch.ID)
	assert.Equal(t, int64(1500), ch.AmountRefunded)
	assert.Equal(t, int64(5000), ch.AmountCaptured)
	assert.True(t, ch.Captured)
	assert.False(t, ch.Refunded)
	assert.Equal(t, pi, ch.PaymentIntent.ID)
	assert.Equal(t, "Ada Lovelace", ch.BillingDetails.Name)
	require.NotNil(t, ch.Refunds)
	require.Len(t, ch.Refunds.Data, 2)
	assert.Equal(t, r2, ch.Refunds.Data[0].ID)
	assert.Equal(t, r1, ch.Refunds.Data[1].ID)
	assert.Equal(t, stripe.RefundStatusSucceeded, ch.Refunds.Data[0].Status)
	assert.Equal(t, "/v1/charges/"+chID+"/refunds", ch.Refunds.URL)

	gp = &stripe.PaymentIntentParams{}
	gp.AddExpand("latest_charge")
	p, err = sc.PaymentIntents.Get(pi, gp)
	require.NoError(t, err)
	assert.Equal(t, int64(5000), p.LatestCharge.Amount)
	assert.Nil(t, p.LatestCharge.Refunds)

	c, err := sc.Charges.Get(chID, nil)
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(c.BalanceTransaction.ID, "txn_"))

	rf, err := sc.Refunds.Get(r1, nil)
	require.NoError(t, err)
	assert.Equal(t, chID, rf.Charge.ID)
	rit := sc.Refunds.List(&stripe.RefundListParams{Charge: stripe.String(chID)})
	var rids []string
	for rit.Next() {
		rids = append(rids, rit.Refund().ID)
	}
	require.NoError(t, rit.Err())
	assert.Equal(t, []string{r2, r1}, rids)

	pout, err := sc.Payouts.Get(po, nil)
	require.NoError(t, err)
	assert.Equal(t, int64(3500), pout.Amount)
	assert.Equal(t, stripe.PayoutStatusPaid, pout.Status)
	assert.True(t, pout.Automatic)

	lp := &stripe.BalanceTransactionListParams{Payout: stripe.String(po)}
	lp.AddExpand("data.source")
	bit := sc.BalanceTransactions.List(lp)
	var kinds []string
	var sum int64
	for bit.Next() {
		bt := bit.BalanceTransaction()
		sum += bt.Net
		kinds = append(kinds, string(bt.Type))
		switch bt.Type {
		case stripe.BalanceTransactionTypeCharge:
			require.NotNil(t, bt.Source.Charge)
			assert.Equal(t, chID, bt.Source.Charge.ID)
			assert.Equal(t, int64(5000), bt.Source.Charge.Amount)
		case stripe.BalanceTransactionTypeRefund:
			require.NotNil(t, bt.Source.Refund)
			assert.Equal(t, chID, bt.Source.Refund.Charge.ID)
		}
	}
	require.NoError(t, bit.Err())
	assert.Equal(t, []string{"refund", "refund", "charge"}, kinds)
	assert.Equal(t, int64(3500), sum)

	bit = sc.BalanceTransactions.List(&stripe.BalanceTransactionListParams{Payout: stripe.String(po)})
	for bit.Next() {
		bt := bit.BalanceTransaction()
		assert.NotEmpty(t, bt.Source.ID)
		assert.Nil(t, bt.Source.Charge)
	}
	require.NoError(t, bit.Err())

	pit := sc.Payouts.List(&stripe.PayoutListParams{Status: stripe.String("paid")})
	require.True(t, pit.Next())
	assert.Equal(t, po, pit.Payout().ID)
	require.NoError(t, pit.Err())

	lpi := &stripe.PaymentIntentListParams{}
	lpi.AddExpand("data.latest_charge")
	piit := sc.PaymentIntents.List(lpi)
	require.True(t, piit.Next())
	assert.Equal(t, int64(5000), piit.PaymentIntent().LatestCharge.Amount)
	require.NoError(t, piit.Err())

	// unknown expansion
	gp = &stripe.PaymentIntentParams{}
	gp.AddExpand("customer")
	_, err = sc.PaymentIntents.Get(pi, gp)
	var se *stripe.Error
	require.ErrorAs(t, err, &se)
	assert.Equal(t, 400, se.HTTPStatusCode)

	// 404 path and unknown object
	st, _, body := rawGet(t, s, "/v1/customers")
	assert.Equal(t, 404, st)
	assert.Contains(t, string(body), `"type":"invalid_request_error"`)
	_, err = sc.Disputes.Get("dp_missing", nil)
	require.ErrorAs(t, err, &se)
	assert.Equal(t, 404, se.HTTPStatusCode)
}

func TestSnapshotsAreCopies(t *testing.T) {
	s, sc := newAPI(t)
	a := s.Account("")
	at := now0.Add(-time.Hour)
	pi := a.CreatePayment(1200, "gbp", false, at)
	a.Capture(pi, at.Add(time.Minute))
	it := sc.Events.List(&stripe.EventListParams{})
	var statuses []string
	for it.Next() {
		var p stripe.PaymentIntent
		require.NoError(t, json.Unmarshal(it.Event().Data.Raw, &p))
		statuses = append(statuses, string(p.Status))
		assert.Equal(t, pi, p.ID)
	}
	require.NoError(t, it.Err())
	assert.Equal(t, []string{"succeeded", "requires_payment_method"}, statuses)

	// Deliveries payload is what the list returns
	ds := a.Deliveries()
	_, _, body := rawGet(t, s, "/v1/events/"+ds[0].EventID)
	assert.JSONEq(t, string(ds[0].Payload), string(body))
}

func TestFaultsAndAuth(t *testing.T) {
	s, sc := newAPI(t)
	s.Account("").CreatePayment(100, "gbp", false, now0.Add(-time.Hour))

	s.FailNext(429, 1)
	s.SetShouldRetryHeader("true")
	it := sc.Events.List(&stripe.EventListParams{})
	assert.False(t, it.Next(), "first request fails")
	it = sc.Events.List(&stripe.EventListParams{})
	assert.True(t, it.Next(), "second request succeeds")

	s.FailNext(429, 2)
	for i := 0; i < 2; i++ {
		it = sc.Events.List(&stripe.EventListParams{})
		require.False(t, it.Next())
		var se *stripe.Error
		require.ErrorAs(t, it.Err(), &se)
		assert.Equal(t, 429, se.HTTPStatusCode)
		assert.Equal(t, stripe.ErrorCodeRateLimit, se.Code)
		assert.Equal(t, stripe.ErrorTypeInvalidRequest, se.Type)
		assert.NotEmpty(t, se.RequestID)
		assert.Equal(t, "true", se.LastResponse.Header.Get("Stripe-Should-Retry"))
	}
	s.SetShouldRetryHeader("")
	s.FailNext(500, 1)
	_, err := sc.Events.Get("evt_x", nil)
	var se *stripe.Error
	require.ErrorAs(t, err, &se)
	assert.Equal(t, 500, se.HTTPStatusCode)
	assert.Equal(t, stripe.ErrorTypeAPI, se.Type)
	assert.Empty(t, se.LastResponse.Header.Get("Stripe-Should-Retry"))
	var apiErr *stripe.APIError
	assert.ErrorAs(t, se.Err, &apiErr)

	// failure rate is deterministic per seed
	run := func() []int {
		s2 := New(Options{Now: fixedNow, Seed: 42})
		s2.SetFailureRate(503, 0.3)
		h := s2.Handler()
		var out []int
		for i := 0; i < 50; i++ {
			req, _ := http.NewRequest("GET", "/v1/events", nil)
			req.Header.Set("Authorization", "Bearer rk_test_1")
			rw := &recorder{h: http.Header{}}
			h.ServeHTTP(rw, req)
			out = append(out, rw.status)
		}
		return out
	}
	r1, r2 := run(), run()
	assert.Equal(t, r1, r2)
	assert.Contains(t, r1, 503)
	assert.Contains(t, r1, 200)

	// auth
	bad := apiFor(t, s, "pk_test_secretish")
	_, err = bad.PaymentIntents.Get("pi_x", nil)
	require.ErrorAs(t, err, &se)
	assert.Equal(t, 401, se.HTTPStatusCode)
	assert.NotContains(t, string(se.LastResponse.RawJSON), "secretish")
	st, hdr, body := rawGet(t, s, "/v1/events", "Authorization", "Basic abc")
	assert.Equal(t, 401, st)
	assert.NotEmpty(t, hdr.Get("Request-Id"))
	assert.Contains(t, string(body), "invalid_request_error")

	before := s.Requests()
	s.SetLatency(20 * time.Millisecond)
	t0 := time.Now()
	_, _ = sc.Events.Get("evt_x", nil)
	assert.GreaterOrEqual(t, time.Since(t0), 20*time.Millisecond)
	s.SetLatency(0)
	assert.Equal(t, before+1, s.Requests())
	assert.Positive(t, s.RequestsByStatus()[401])
	assert.Positive(t, s.RequestsByStatus()[429])
	assert.Positive(t, s.RequestsByPath()["/v1/events/{id}"])
}

type bodyRecorder struct {
	h      http.Header
	status int
	body   []byte
}

func (r *bodyRecorder) Header() http.Header { return r.h }
func (r *bodyRecorder) Write(p []byte) (int, error) {
	r.body = append(r.body, p...)
	return len(p), nil
}
func (r *bodyRecorder) WriteHeader(s int) { r.status = s }

type recorder struct {
	h      http.Header
	status int
}

func (r *recorder) Header() http.Header         { return r.h }
func (r *recorder) Write(p []byte) (int, error) { return len(p), nil }
func (r *recorder) WriteHeader(s int)           { r.status = s }

func TestExpectedAtCrafted(t *testing.T) {
	s := New(Options{Now: fixedNow})
	a := s.Account("")
	t0 := now0.Add(-10 * 24 * time.Hour)
	at := func(h int) time.Time { return t0.Add(time.Duration(h) * time.Hour) }

	// refund then payout: ends refunded
	p1 := a.CreatePayment(1000, "gbp", false, at(0))
	a.Capture(p1, at(1))
	a.Refund(p1, 0, at(2))
	a.Payout(at(3), p1)

	// cancel trap: authorised then canceled, amount_refunded stays 0
	p2 := a.CreatePayment(2000, "gbp", true, at(0))
	a.Authorise(p2, at(1))
	a.Cancel(p2, at(2))

	// dispute lost → chargeback, won → unchanged
	p3 := a.CreatePayment(3000, "gbp", false, at(0))
	a.Capture(p3, at(1))
	d3 := a.Dispute(p3, at(5))
	a.CloseDispute(d3, "lost", at(6))
	p4 := a.CreatePayment(4000, "gbp", false, at(0))
	a.Capture(p4, at(1))
	d4 := a.Dispute(p4, at(5))
	a.CloseDispute(d4, "won", at(6))

	// partial refund, payout, remaining refund
	p5 := a.CreatePayment(5000, "gbp", false, at(0))
	a.Capture(p5, at(1))
	a.Refund(p5, 1000, at(2))
	a.Payout(at(3), p5)
	a.Refund(p5, 4000, at(4))

	// failed refund: a revert the webhooks do not apply
	p6 := a.CreatePayment(6000, "gbp", false, at(0))
	a.Capture(p6, at(1))
	r6 := a.Refund(p6, 0, at(2))
	a.FailRefund(r6, at(3))

	// failed attempt then success, same-second collisions
	p7 := a.CreatePayment(7000, "gbp", false, at(0))
	a.FailAttempt(p7, at(0))
	a.Capture(p7, at(0))

	// created later
	p8 := a.CreatePayment(8000, "gbp", false, at(20))

	exp := a.ExpectedAt(at(10))
	assert.NotContains(t, exp, p8)
	assert.Equal(t, Expected{State: models.StateRefunded, At: at(2), AmountRefunded: 1000, Amount: 1000, Currency: "gbp"}, exp[p1])
	assert.Equal(t, Expected{State: models.StateCanceled, At: at(2), AmountRefunded: 0, Amount: 2000, Currency: "gbp"}, exp[p2])
	assert.Equal(t, models.StateChargeback, exp[p3].State)
	assert.Equal(t, at(6), exp[p3].At)
	assert.Equal(t, models.StateCaptured, exp[p4].State)
	assert.Equal(t, Expected{State: models.StateRefunded, At: at(4), AmountRefunded: 5000, Amount: 5000, Currency: "gbp"}, exp[p5])
	assert.Equal(t, models.StateRefunded, exp[p6].State)
	assert.Equal(t, int64(6000), exp[p6].AmountRefunded)
	assert.Equal(t, models.StateCaptured, exp[p7].State)

	mid := a.ExpectedAt(at(3))
	assert.Equal(t, models.StateSettled, mid[p5].State)
	assert.Equal(t, int64(1000), mid[p5].AmountRefunded)
	assert.Equal(t, models.StateCaptured, a.ExpectedAt(at(1))[p1].State)
	assert.Equal(t, models.StateCreated, a.ExpectedAt(at(0))[p1].State)
	assert.Contains(t, a.ExpectedAt(at(20)), p8)

	// the trap is visible on the wire
	_, sc := s, apiFor(t, s, "sk_test_x")
	gp := &stripe.PaymentIntentParams{}
	gp.AddExpand("latest_charge")
	p, err := sc.PaymentIntents.Get(p2, gp)
	require.NoError(t, err)
	assert.Equal(t, stripe.PaymentIntentStatusCanceled, p.Status)
	assert.Equal(t, at(2).Unix(), p.CanceledAt)
	assert.True(t, p.LatestCharge.Refunded)
	assert.False(t, p.LatestCharge.Captured)
	assert.Equal(t, int64(2000), p.LatestCharge.AmountRefunded)
	p, err = sc.PaymentIntents.Get(p6, gp)
	require.NoError(t, err)
	assert.Zero(t, p.LatestCharge.AmountRefunded)
	assert.False(t, p.LatestCharge.Refunded)

	var types []string
	for _, d := range a.Deliveries() {
		if len(d.Facts) > 0 && d.Facts[0].PaymentID == p2 {
			types = append(types, d.EventType)
		}
	}
	assert.Equal(t, []string{"payment_intent.created", "payment_intent.amount_capturable_updated", "payment_intent.canceled", "charge.refunded"}, types)
}

func TestGenerateRealistic(t *testing.T) {
	mk := func() *Account {
		s := New(Options{Now: fixedNow, Seed: 3})
		a := s.Account("")
		a.Generate(GenOptions{Payments: 20000, Start: now0.Add(-28 * 24 * time.Hour), End: now0, Seed: 11})
		return a
	}
	a, b := mk(), mk()
	da, db := a.Deliveries(), b.Deliveries()
	require.Equal(t, len(da), len(db))
	for i := range da {
		require.Equal(t, da[i].Payload, db[i].Payload)
	}
	counts := map[string]int{}
	for _, d := range da {
		counts[d.EventType]++
		require.Less(t, d.At.Unix(), now0.Unix())
	}
	t.Logf("events %d: %v", len(da), counts)
	assert.Equal(t, 20000, counts["payment_intent.created"])
	for _, typ := range []string{"payment_intent.succeeded", "payment_intent.amount_capturable_updated", "charge.captured",
		"payment_intent.canceled", "charge.refunded", "payment_intent.payment_failed", "charge.dispute.created",
		"charge.dispute.closed", "charge.refund.updated", "payout.paid"} {
		assert.Positive(t, counts[typ], typ)
	}
	states := map[models.State]int{}
	for _, e := range a.ExpectedAt(now0) {
		states[e.State]++
	}
	t.Logf("states: %v", states)
	for _, st := range []models.State{models.StateCreated, models.StateCaptured, models.StateSettled, models.StateRefunded, models.StateCanceled, models.StateChargeback, models.StateAuthorised} {
		assert.Positive(t, states[st], st)
	}

	// every event decodes through stripe-go and pages consistently
	s := New(Options{Now: fixedNow, Seed: 3})
	s.Account("").Generate(GenOptions{Payments: 3000, Start: now0.Add(-20 * 24 * time.Hour), End: now0, Seed: 5})
	sc := apiFor(t, s, "sk_live_abc")
	want := reversed(deliveryIDs(s.Account("").Deliveries()))
	it := sc.Events.List(&stripe.EventListParams{ListParams: stripe.ListParams{Limit: stripe.Int64(100)}})
	var got []string
	for it.Next() {
		e := it.Event()
		got = append(got, e.ID)
		var err error
		switch {
		case strings.HasPrefix(string(e.Type), "payment_intent."):
			err = json.Unmarshal(e.Data.Raw, &stripe.PaymentIntent{})
		case e.Type == "charge.refunded" || e.Type == "charge.captured":
			var c stripe.Charge
			err = json.Unmarshal(e.Data.Raw, &c)
			require.NotEmpty(t, c.PaymentIntent.ID)
		case strings.HasPrefix(string(e.Type), "charge.dispute."):
			err = json.Unmarshal(e.Data.Raw, &stripe.Dispute{})
		case e.Type == "charge.refund.updated":
			err = json.Unmarshal(e.Data.Raw, &stripe.Refund{})
		case e.Type == "payout.paid":
			var p stripe.Payout
			err = json.Unmarshal(e.Data.Raw, &p)
			require.Positive(t, p.Amount)
		default:
			t.Fatalf("unexpected type %s", e.Type)
		}
		require.NoError(t, err)
	}
	require.NoError(t, it.Err())
	assert.Equal(t, want, got)
}

func TestIDs(t *testing.T) {
	c := newIDCodec(1, "")
	c2 := newIDCodec(1, "acct_1")
	seen := map[string]bool{}
	for n := 0; n < 5000; n++ {
		for k := kind(0); k < kindCount; k++ {
			id := c.id(k, n)
			require.False(t, seen[id], id)
			seen[id] = true
			require.Equal(t, n, c.decode(k, id, 5000))
			require.Equal(t, -1, c2.decode(k, id, 5000))
			if k == kPI {
				require.Len(t, id, 27)
			}
		}
	}
	assert.Equal(t, -1, c.decode(kPI, "pi_123", 10))
}

// TestScale1M generates a million payments and pages through events; set
// STRIPEFAKE_BIG=1 to run it.
func TestScale1M(t *testing.T) {
	if os.Getenv("STRIPEFAKE_BIG") == "" {
		t.Skip("set STRIPEFAKE_BIG=1")
	}
	s := New(Options{Now: fixedNow, Seed: 1})
	a := s.Account("")
	t0 := time.Now()
	a.Generate(GenOptions{Payments: 1_000_000, Start: now0.Add(-29 * 24 * time.Hour), End: now0, Seed: 1})
	gen := time.Since(t0)
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	t.Logf("generate %v, events %d, heap %d MB, sys %d MB", gen, len(a.events), ms.HeapAlloc>>20, ms.Sys>>20)

	sc := apiFor(t, s, "sk_test_big")
	t0 = time.Now()
	it := sc.Events.List(&stripe.EventListParams{ListParams: stripe.ListParams{Limit: stripe.Int64(100)}})
	n := 0
	for it.Next() && n < 100_000 {
		n++
	}
	require.NoError(t, it.Err())
	t.Logf("first list (incl. sort) + %d events paged in %v", n, time.Since(t0))
	t0 = time.Now()
	it = sc.Events.List(&stripe.EventListParams{Type: stripe.String("charge.dispute.closed"), ListParams: stripe.ListParams{Limit: stripe.Int64(100)}})
	n = 0
	for it.Next() {
		n++
	}
	require.NoError(t, it.Err())
	t.Logf("%d dispute.closed events via type filter in %v", n, time.Since(t0))
	// server side only: 1,000 pages of 100 through the handler
	h := s.Handler()
	cursor := ""
	t0 = time.Now()
	for i := 0; i < 1000; i++ {
		path := "/v1/events?limit=100"
		if cursor != "" {
			path += "&starting_after=" + cursor
		}
		req, _ := http.NewRequest("GET", path, nil)
		req.Header.Set("Authorization", "Bearer sk_test_big")
		rw := &bodyRecorder{h: http.Header{}}
		h.ServeHTTP(rw, req)
		require.Equal(t, 200, rw.status)
		ids, more := listIDs(t, rw.body)
		require.Len(t, ids, 100)
		require.True(t, more)
		cursor = ids[len(ids)-1]
	}
	t.Logf("1000 raw pages (server + JSON id parse) in %v", time.Since(t0))
	t0 = time.Now()
	exp := a.ExpectedAt(now0)
	t.Logf("ExpectedAt %d payments in %v", len(exp), time.Since(t0))
}

func TestPayoutsAndOrphanRefunds(t *testing.T) {
	s, sc := newAPI(t)
	a := s.Account("")
	t0 := now0.Add(-10 * 24 * time.Hour)
	p1 := a.CreatePayment(1000, "gbp", false, t0)
	a.Capture(p1, t0.Add(time.Minute))
	p2 := a.CreatePayment(2000, "gbp", false, t0.Add(3*24*time.Hour))
	a.Capture(p2, t0.Add(3*24*time.Hour))

	assert.Equal(t, "", a.PayoutCaptured(t0.Add(24*time.Hour), 48*time.Hour))
	po1 := a.PayoutCaptured(t0.Add(4*24*time.Hour), 48*time.Hour) // sweeps p1 only
	require.NotEmpty(t, po1)
	a.Refund(p1, 400, t0.Add(5*24*time.Hour)) // after p1 was paid out
	po2 := a.PayoutCaptured(t0.Add(6*24*time.Hour), 48*time.Hour)
	require.NotEmpty(t, po2)

	amount := func(po string) int64 {
		p, err := sc.Payouts.Get(po, nil)
		require.NoError(t, err)
		return p.Amount
	}
	assert.Equal(t, int64(1000), amount(po1))
	assert.Equal(t, int64(2000-400), amount(po2))

	var facts []Fact
	for _, d := range a.Deliveries() {
		if d.EventType == "payout.paid" {
			facts = append(facts, d.Facts...)
			var ev stripe.Event
			require.NoError(t, json.Unmarshal(d.Payload, &ev))
			assert.Equal(t, d.At.Unix(), ev.Created)
		}
	}
	require.Len(t, facts, 2)
	assert.Equal(t, p1, facts[0].PaymentID)
	assert.Equal(t, models.StateSettled, facts[0].State)
	assert.Equal(t, t0.Add(4*24*time.Hour), facts[0].At)
	assert.Equal(t, p2, facts[1].PaymentID)

	it := sc.Payouts.List(&stripe.PayoutListParams{})
	var ids []string
	for it.Next() {
		ids = append(ids, it.Payout().ID)
	}
	require.NoError(t, it.Err())
	assert.Equal(t, []string{po2, po1}, ids)
	it = sc.Payouts.List(&stripe.PayoutListParams{Status: stripe.String("pending")})
	assert.False(t, it.Next())
	require.NoError(t, it.Err())
}

func TestConcurrentBuildAndList(t *testing.T) {
	s, sc := newAPI(t)
	a := s.Account("")
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < 300; i++ {
			// deliberately out of time order to force lazy re-sorts
			at := now0.Add(-time.Duration((i*7919)%1000) * time.Minute)
			pi := a.CreatePayment(100, "gbp", false, at)
			a.Capture(pi, at.Add(time.Second))
		}
	}()
	for {
		select {
		case <-done:
			got := eventIDs(t, sc.Events.List(&stripe.EventListParams{ListParams: stripe.ListParams{Limit: stripe.Int64(100)}}))
			assert.Equal(t, reversed(deliveryIDs(a.Deliveries())), got)
			return
		default:
			it := sc.Events.List(&stripe.EventListParams{ListParams: stripe.ListParams{Limit: stripe.Int64(50), Single: true}})
			for it.Next() {
			}
			require.NoError(t, it.Err())
		}
	}
}
