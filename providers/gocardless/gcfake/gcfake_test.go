package gcfake

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reconciler/reconciler/models"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const token = "sandbox_SECRETtoken123"

var t0 = time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC) // a Monday

func newServer(t testing.TB, opts Options) *Server {
	s := New(opts)
	s.Start()
	t.Cleanup(s.Close)
	return s
}

// get performs a GET with valid headers unless overridden (a value "" removes
// the header).
func get(t testing.TB, s *Server, path string, hdr ...string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest("GET", s.Start()+path, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("GoCardless-Version", "2015-07-06")
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i+1] == "" {
			req.Header.Del(hdr[i])
		} else {
			req.Header.Set(hdr[i], hdr[i+1])
		}
	}
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return res.StatusCode, res.Header, body
}

type event struct {
	ID           string            `json:"id"`
	CreatedAt    string            `json:"created_at"`
	Action       string            `json:"action"`
	ResourceType string            `json:"resource_type"`
	Links        map[string]string `json:"links"`
	Details      map[string]any    `json:"details"`
	Metadata     map[string]any    `json:"metadata"`
}

type payment struct {
	ID             string            `json:"id"`
	CreatedAt      string            `json:"created_at"`
	ChargeDate     string            `json:"charge_date"`
	Amount         int64             `json:"amount"`
	Currency       string            `json:"currency"`
	Status         string            `json:"status"`
	AmountRefunded int64             `json:"amount_refunded"`
	Reference      *string           `json:"reference"`
	Metadata       map[string]string `json:"metadata"`
	Links          map[string]string `json:"links"`
}

type meta struct {
	Cursors struct {
		Before *string `json:"before"`
		After  *string `json:"after"`
	} `json:"cursors"`
	Limit int `json:"limit"`
}

type eventList struct {
	Events []event `json:"events"`
	Linked *struct {
		Payments []payment        `json:"payments"`
		Refunds  []map[string]any `json:"refunds"`
	} `json:"linked"`
	Meta meta `json:"meta"`
}

type apiErr struct {
	Error struct {
		Message          string `json:"message"`
		DocumentationURL string `json:"documentation_url"`
		Type             string `json:"type"`
		RequestID        string `json:"request_id"`
		Code             int    `json:"code"`
		Errors           []struct {
			Reason  string `json:"reason"`
			Message string `json:"message"`
		} `json:"errors"`
	} `json:"error"`
}

func listEventsOK(t testing.TB, s *Server, q string) eventList {
	t.Helper()
	st, _, body := get(t, s, "/events?"+q)
	require.Equal(t, 200, st, string(body))
	var l eventList
	require.NoError(t, json.Unmarshal(body, &l), string(body))
	return l
}

func decodeErr(t testing.TB, body []byte) apiErr {
	t.Helper()
	var e apiErr
	require.NoError(t, json.Unmarshal(body, &e), string(body))
	require.Len(t, e.Error.Errors, 1)
	return e
}

func ids(evs []event) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.ID
	}
	return out
}

func ts(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z") }

// assertNewestFirst checks the (created_at desc, id desc) order.
func assertNewestFirst(t testing.TB, evs []event) {
	t.Helper()
	for i := 1; i < len(evs); i++ {
		a, b := evs[i-1], evs[i]
		require.True(t, a.CreatedAt > b.CreatedAt || a.CreatedAt == b.CreatedAt && a.ID > b.ID,
			"order at %d: %v %v", i, a, b)
	}
}

func TestPagingAfterAndBefore(t *testing.T) {
	s := newServer(t, Options{Seed: 3})
	s.Generate(GenOptions{Payments: 1500, Start: t0, End: t0.Add(45 * 24 * time.Hour), Seed: 9})

	var want []string
	for _, d := range s.Deliveries() {
		if strings.HasPrefix(d.EventType, "payments.") {
			want = append(want, d.EventID)
		}
	}
	slices.Reverse(want)
	require.Greater(t, len(want), 4000)

	// after: newest first, no duplicate, no gap
	var got []event
	q := "resource_type=payments&limit=97"
	l := listEventsOK(t, s, q)
	require.Nil(t, l.Linked)
	pages := 0
	for {
		pages++
		require.Equal(t, 97, l.Meta.Limit)
		got = append(got, l.Events...)
		require.NotNil(t, l.Meta.Cursors.Before)
		assert.Equal(t, l.Events[0].ID, *l.Meta.Cursors.Before)
		if l.Meta.Cursors.After == nil {
			break
		}
		assert.Equal(t, l.Events[len(l.Events)-1].ID, *l.Meta.Cursors.After)
		l = listEventsOK(t, s, q+"&after="+*l.Meta.Cursors.After)
	}
	assert.Equal(t, (len(want)+96)/97, pages)
	assert.Equal(t, want, ids(got))
	assertNewestFirst(t, got)

	// before: walk back up from the oldest event
	oldest := got[len(got)-1].ID
	var up []string
	cur := oldest
	for {
		l := listEventsOK(t, s, q+"&before="+cur)
		if len(l.Events) == 0 {
			assert.Nil(t, l.Meta.Cursors.Before)
			break
		}
		assertNewestFirst(t, l.Events)
		require.NotNil(t, l.Meta.Cursors.After, "older items remain below a before page")
		page := ids(l.Events)
		slices.Reverse(page)
		up = append(up, page...)
		cur = *l.Meta.Cursors.Before
	}
	slices.Reverse(up)
	assert.Equal(t, want[:len(want)-1], up)

	// before from the middle returns exactly the items immediately newer
	mid := 2000
	l = listEventsOK(t, s, "resource_type=payments&limit=50&before="+want[mid])
	assert.Equal(t, want[mid-50:mid], ids(l.Events))
	l = listEventsOK(t, s, "resource_type=payments&limit=50&after="+want[mid])
	assert.Equal(t, want[mid+1:mid+51], ids(l.Events))

	// no resource_type: every event; default limit 50
	all := s.Deliveries()
	l = listEventsOK(t, s, "")
	assert.Equal(t, 50, l.Meta.Limit)
	require.Len(t, l.Events, 50)
	assert.Equal(t, all[len(all)-1].EventID, l.Events[0].ID)

	// refunds
	l = listEventsOK(t, s, "resource_type=refunds&limit=500")
	require.NotEmpty(t, l.Events)
	for _, e := range l.Events {
		assert.Equal(t, "refunds", e.ResourceType)
		assert.True(t, strings.HasPrefix(e.Links["refund"], "RF"))
		assert.True(t, strings.HasPrefix(e.Links["payment"], "PM"))
	}

	// bad parameters
	for _, bad := range []string{"limit=501", "limit=0", "limit=x", "after=EV000000000000", "before=nope",
		"after=" + want[0] + "&before=" + want[1], "resource_type=bogus"} {
		st, _, body := get(t, s, "/events?"+bad)
		assert.Equal(t, 400, st, bad)
		e := decodeErr(t, body)
		assert.Equal(t, 400, e.Error.Code)
	}
}

func TestCreatedAtBounds(t *testing.T) {
	s := newServer(t, Options{Seed: 1})
	base := time.Date(2026, 11, 20, 10, 0, 0, 123_000_000, time.UTC)
	for i := range 5 {
		s.CreatePayment(1000, "gbp", base.Add(time.Duration(i)*time.Millisecond))
	}
	all := ids(listEventsOK(t, s, "resource_type=payments").Events) // newest first
	require.Len(t, all, 5)
	at := func(i int) string { return url.QueryEscape(ts(base.Add(time.Duration(i) * time.Millisecond))) }
	cases := []struct {
		q    string
		want []string
	}{
		{"created_at[gte]=" + at(1), all[:4]},
		{"created_at[gt]=" + at(1), all[:3]},
		{"created_at[lte]=" + at(3), all[1:]},
		{"created_at[lt]=" + at(3), all[2:]},
		{"created_at[gte]=" + at(1) + "&created_at[lt]=" + at(3), all[2:4]},
		{"created_at[gt]=" + at(1) + "&created_at[lte]=" + at(3), all[1:3]},
		{"created_at[gt]=" + at(4), nil},
		// sub-millisecond bounds compare exactly
		{"created_at[gte]=" + url.QueryEscape("2026-11-20T10:00:00.1245Z"), all[:3]},
		{"created_at[lte]=" + url.QueryEscape("2026-11-20T10:00:00.1245Z"), all[3:]},
		// other offsets
		{"created_at[gte]=" + url.QueryEscape("2026-11-20T11:00:00.125+01:00"), all[:3]},
	}
	for _, c := range cases {
		l := listEventsOK(t, s, "resource_type=payments&"+c.q)
		assert.Equal(t, c.want, nilIfEmpty(ids(l.Events)), c.q)
		if len(c.want) == 0 {
			assert.Nil(t, l.Meta.Cursors.Before)
			assert.Nil(t, l.Meta.Cursors.After)
		}
	}
	// paging stays inside the bounds
	l := listEventsOK(t, s, "resource_type=payments&limit=1&created_at[lte]="+at(3)+"&created_at[gte]="+at(2))
	assert.Equal(t, all[1:2], ids(l.Events))
	require.NotNil(t, l.Meta.Cursors.After)
	l = listEventsOK(t, s, "resource_type=payments&limit=1&created_at[lte]="+at(3)+"&created_at[gte]="+at(2)+"&after="+*l.Meta.Cursors.After)
	assert.Equal(t, all[2:3], ids(l.Events))
	assert.Nil(t, l.Meta.Cursors.After)

	for _, bad := range []string{"2026-11-20", "yesterday", "2026-11-20T10:00:00.123"} {
		st, _, body := get(t, s, "/events?created_at[gte]="+url.QueryEscape(bad))
		require.Equal(t, 400, st, bad)
		e := decodeErr(t, body)
		assert.Equal(t, "invalid_filter", e.Error.Errors[0].Reason)
		assert.Equal(t, "invalid_api_usage", e.Error.Type)
	}
	// the payments list filters the same way
	st, _, body := get(t, s, "/payments?limit=2&created_at[gt]="+at(0))
	require.Equal(t, 200, st)
	var pl struct {
		Payments []payment `json:"payments"`
		Meta     meta      `json:"meta"`
	}
	require.NoError(t, json.Unmarshal(body, &pl))
	require.Len(t, pl.Payments, 2)
	ids := s.PaymentIDs()
	assert.Equal(t, []string{ids[4], ids[3]}, []string{pl.Payments[0].ID, pl.Payments[1].ID})
	require.NotNil(t, pl.Meta.Cursors.After)
	st, _, body = get(t, s, "/payments?limit=2&created_at[gt]="+at(0)+"&after="+*pl.Meta.Cursors.After)
	require.Equal(t, 200, st)
	require.NoError(t, json.Unmarshal(body, &pl))
	assert.Equal(t, []string{ids[2], ids[1]}, []string{pl.Payments[0].ID, pl.Payments[1].ID})
	assert.Nil(t, pl.Meta.Cursors.After)
}

func nilIfEmpty(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	return s
}

func TestIncludeLinked(t *testing.T) {
	s := newServer(t, Options{Seed: 2})
	a := s.CreatePayment(1500, "GBP", t0)
	b := s.CreatePayment(2500, "GBP", t0.Add(time.Second))
	s.Submit(a, t0.Add(time.Hour))
	s.Submit(b, t0.Add(time.Hour))
	s.Confirm(a, t0.Add(72*time.Hour))
	po := s.PayOut(t0.Add(96*time.Hour), a)
	rf := s.Refund(a, 500, t0.Add(120*time.Hour))

	l := listEventsOK(t, s, "resource_type=payments&include=payment")
	require.NotNil(t, l.Linked)
	require.Len(t, l.Linked.Payments, 2, "each linked payment once")
	byID := map[string]payment{}
	for _, p := range l.Linked.Payments {
		byID[p.ID] = p
	}
	pa := byID[a]
	assert.Equal(t, "paid_out", pa.Status, "current state, not a snapshot")
	assert.Equal(t, int64(1500), pa.Amount)
	assert.Equal(t, "GBP", pa.Currency)
	assert.Equal(t, int64(500), pa.AmountRefunded)
	assert.Equal(t, po, pa.Links["payout"])
	assert.True(t, strings.HasPrefix(pa.Links["mandate"], "MD"))
	assert.True(t, strings.HasPrefix(pa.Links["creditor"], "CR"))
	assert.Nil(t, pa.Reference)
	assert.NotEmpty(t, pa.Metadata["customer_name"])
	assert.Contains(t, pa.Metadata["customer_email"], "@")
	assert.Equal(t, "submitted", byID[b].Status)
	assert.NotContains(t, byID[b].Links, "payout")
	for _, e := range l.Events {
		assert.Equal(t, "bacs", e.Details["scheme"])
		assert.NotEmpty(t, e.Details["origin"])
		assert.NotEmpty(t, e.Details["cause"])
		assert.NotNil(t, e.Metadata)
	}

	l = listEventsOK(t, s, "resource_type=refunds&include=refund")
	require.Len(t, l.Events, 2)
	assert.Equal(t, []string{"paid", "created"}, []string{l.Events[0].Action, l.Events[1].Action})
	require.Len(t, l.Linked.Refunds, 1)
	assert.Equal(t, rf, l.Linked.Refunds[0]["id"])
	assert.Equal(t, "paid", l.Linked.Refunds[0]["status"])

	for _, bad := range []string{"include=payment", "resource_type=refunds&include=payment",
		"resource_type=payments&include=refund", "resource_type=payments&include=mandate"} {
		st, _, body := get(t, s, "/events?"+bad)
		assert.Equal(t, 400, st, bad)
		assert.Equal(t, "validation_failed", decodeErr(t, body).Error.Type, bad)
	}
}

func TestGetEndpoints(t *testing.T) {
	s := newServer(t, Options{Seed: 4})
	pm := s.CreatePayment(1000, "gbp", t0)
	s.Submit(pm, t0.Add(time.Hour))
	s.Confirm(pm, t0.Add(4*24*time.Hour))
	po := s.PayOut(time.Date(2026, 11, 25, 7, 0, 0, 0, time.UTC), pm)
	rf := s.Refund(pm, 0, time.Date(2026, 11, 30, 7, 0, 0, 0, time.UTC))

	st, _, body := get(t, s, "/payments/"+pm)
	require.Equal(t, 200, st)
	var p struct {
		Payments payment `json:"payments"`
	}
	require.NoError(t, json.Unmarshal(body, &p))
	assert.Equal(t, pm, p.Payments.ID)
	assert.Equal(t, "paid_out", p.Payments.Status)
	assert.Equal(t, int64(1000), p.Payments.AmountRefunded)
	assert.Equal(t, "2026-11-06", p.Payments.ChargeDate)
	assert.Equal(t, "2026-11-02T09:00:00.000Z", p.Payments.CreatedAt)

	st, _, body = get(t, s, "/refunds/"+rf)
	require.Equal(t, 200, st)
	var r struct {
		Refunds map[string]any `json:"refunds"`
	}
	require.NoError(t, json.Unmarshal(body, &r))
	assert.Equal(t, rf, r.Refunds["id"])
	assert.Equal(t, float64(1000), r.Refunds["amount"])
	assert.Equal(t, "GBP", r.Refunds["currency"])
	assert.Equal(t, pm, r.Refunds["links"].(map[string]any)["payment"])

	st, _, body = get(t, s, "/payouts/"+po)
	require.Equal(t, 200, st)
	var o struct {
		Payouts map[string]any `json:"payouts"`
	}
	require.NoError(t, json.Unmarshal(body, &o))
	assert.Equal(t, "paid", o.Payouts["status"])
	assert.Equal(t, "2026-11-25", o.Payouts["arrival_date"])
	assert.Equal(t, float64(1000), o.Payouts["amount"])

	st, _, body = get(t, s, "/refunds")
	require.Equal(t, 200, st, string(body))

	for _, path := range []string{"/payments/PM000000000000", "/payments/" + rf, "/refunds/RFXXXXXXXXXXXX", "/payouts/PO1",
		"/events/EV123"} {
		st, _, body := get(t, s, path)
		assert.Equal(t, 404, st, path)
		e := decodeErr(t, body)
		assert.Equal(t, "invalid_api_usage", e.Error.Type)
		assert.Equal(t, "resource_not_found", e.Error.Errors[0].Reason)
	}
	for _, path := range []string{"/", "/mandates", "/payments/a/b", "/v1/events"} {
		st, h, _ := get(t, s, path)
		assert.Equal(t, 404, st, path)
		assert.NotEmpty(t, h.Get("RateLimit-Remaining"))
	}
	assert.Equal(t, int64(4), s.RequestsByPath()["unknown"])
}

func TestAuthAndVersion(t *testing.T) {
	s := newServer(t, Options{Seed: 5})
	for _, auth := range []string{"", "Bearer ", "Bearer sk_test_123", "sandbox_abc", "Bearer sandbox_", "Basic live_x"} {
		st, h, body := get(t, s, "/events", "Authorization", auth)
		assert.Equal(t, 401, st, auth)
		e := decodeErr(t, body)
		assert.Equal(t, 401, e.Error.Code)
		assert.Equal(t, "invalid_api_usage", e.Error.Type)
		assert.NotEmpty(t, e.Error.RequestID)
		assert.True(t, strings.HasPrefix(e.Error.DocumentationURL, "https://developer.gocardless.com/api-reference#"))
		assert.NotEmpty(t, h.Get("RateLimit-Limit"))
		if tok := strings.TrimSpace(strings.TrimPrefix(auth, "Bearer ")); tok != "" {
			assert.NotContains(t, string(body), tok)
		}
	}
	st, _, body := get(t, s, "/events", "Authorization", "Bearer live_abc")
	assert.Equal(t, 200, st, string(body))
	assert.NotContains(t, string(body), token)

	st, h, body := get(t, s, "/events", "GoCardless-Version", "")
	assert.Equal(t, 400, st)
	assert.Equal(t, "missing_version_header", decodeErr(t, body).Error.Errors[0].Reason)
	assert.Equal(t, "1000", h.Get("RateLimit-Limit"))
	assert.Equal(t, "1000", h.Get("RateLimit-Remaining"))
	st, _, body = get(t, s, "/events", "GoCardless-Version", "2014-11-03")
	assert.Equal(t, 400, st)
	assert.Equal(t, "version_not_found", decodeErr(t, body).Error.Errors[0].Reason)
	assert.Equal(t, map[int]int64{401: 6, 200: 1, 400: 2}, s.RequestsByStatus())
	assert.Equal(t, int64(9), s.Requests())
}

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func TestRateLimit(t *testing.T) {
	c := &clock{t: time.Date(2026, 11, 20, 10, 0, 0, 500_000_000, time.UTC)}
	s := newServer(t, Options{Seed: 6, Now: c.Now})
	st, h, _ := get(t, s, "/events")
	require.Equal(t, 200, st)
	assert.Equal(t, "1000", h.Get("RateLimit-Limit"))
	assert.Equal(t, "1000", h.Get("RateLimit-Remaining"))
	_, err := time.Parse(time.RFC1123, h.Get("RateLimit-Reset"))
	require.NoError(t, err)

	s.SetRateLimit(3, time.Minute)
	for i := range 3 {
		st, h, _ := get(t, s, "/events")
		require.Equal(t, 200, st)
		assert.Equal(t, "3", h.Get("RateLimit-Limit"))
		assert.Equal(t, fmt.Sprint(2-i), h.Get("RateLimit-Remaining"))
		c.Add(10 * time.Second)
	}
	st, h, body := get(t, s, "/events")
	require.Equal(t, 429, st)
	e := decodeErr(t, body)
	assert.Equal(t, "invalid_api_usage", e.Error.Type)
	assert.Equal(t, "rate_limit_exceeded", e.Error.Errors[0].Reason)
	assert.Equal(t, 429, e.Error.Code)
	assert.Equal(t, "0", h.Get("RateLimit-Remaining"))
	assert.Equal(t, "3", h.Get("RateLimit-Limit"))
	reset, err := time.Parse(time.RFC1123, h.Get("RateLimit-Reset"))
	require.NoError(t, err)
	assert.Equal(t, "Fri, 20 Nov 2026 10:01:01 GMT", h.Get("RateLimit-Reset"), "window end rounded up to the second")
	assert.True(t, reset.Equal(time.Date(2026, 11, 20, 10, 1, 1, 0, time.UTC)))

	c.Add(29 * time.Second) // 10:00:59.5: still inside the window
	st, _, _ = get(t, s, "/events")
	require.Equal(t, 429, st)
	c.Add(time.Second) // 10:01:00.5: the window has reset
	st, h, _ = get(t, s, "/events")
	require.Equal(t, 200, st)
	assert.Equal(t, "2", h.Get("RateLimit-Remaining"))
	assert.Equal(t, "Fri, 20 Nov 2026 10:02:01 GMT", h.Get("RateLimit-Reset"))
	assert.Equal(t, int64(2), s.RequestsByStatus()[429])

	s.SetRateLimit(0, 0)
	st, h, _ = get(t, s, "/events")
	require.Equal(t, 200, st)
	assert.Equal(t, "1000", h.Get("RateLimit-Remaining"))
}

func TestFailNextAndFailureRate(t *testing.T) {
	s := newServer(t, Options{Seed: 7})
	s.FailNext(500, 2)
	for range 2 {
		st, h, body := get(t, s, "/events")
		require.Equal(t, 500, st)
		e := decodeErr(t, body)
		assert.Equal(t, "gocardless", e.Error.Type)
		assert.Equal(t, "internal_server_error", e.Error.Errors[0].Reason)
		assert.NotEmpty(t, h.Get("RateLimit-Reset"))
	}
	st, _, _ := get(t, s, "/events")
	require.Equal(t, 200, st)

	s.FailNext(429, 1)
	st, h, body := get(t, s, "/events")
	require.Equal(t, 429, st)
	assert.Equal(t, "rate_limit_exceeded", decodeErr(t, body).Error.Errors[0].Reason)
	assert.Equal(t, "0", h.Get("RateLimit-Remaining"))
	_, err := time.Parse(time.RFC1123, h.Get("RateLimit-Reset"))
	require.NoError(t, err)
	st, _, _ = get(t, s, "/events")
	require.Equal(t, 200, st)

	// an unauthenticated request does not consume an injected failure
	s.FailNext(503, 1)
	st, _, _ = get(t, s, "/events", "Authorization", "")
	require.Equal(t, 401, st)
	st, _, _ = get(t, s, "/events")
	require.Equal(t, 503, st)

	s.SetFailureRate(500, 0.5)
	fails := 0
	for range 200 {
		if st, _, _ := get(t, s, "/payments"); st == 500 {
			fails++
		}
	}
	assert.InDelta(t, 100, fails, 30)
	s.SetFailureRate(500, 0)
	st, _, _ = get(t, s, "/payments")
	require.Equal(t, 200, st)
	assert.Equal(t, map[int]int64{500: int64(2 + fails), 200: int64(3 + 200 - fails), 429: 1, 401: 1, 503: 1}, s.RequestsByStatus())

	s.SetLatency(50 * time.Millisecond)
	start := time.Now()
	get(t, s, "/events")
	assert.GreaterOrEqual(t, time.Since(start), 50*time.Millisecond)
}

func TestExpectedAtBacsCycle(t *testing.T) {
	s := New(Options{Seed: 8})
	day := func(n int, h int) time.Time { return t0.AddDate(0, 0, n).Add(time.Duration(h) * time.Hour) }
	cycle := func(pm string) {
		s.Submit(pm, day(1, 6))
		s.Confirm(pm, day(4, -3))
	}
	// late failure after confirmed → failed
	late := s.CreatePayment(1000, "GBP", t0)
	cycle(late)
	s.Fail(late, day(5, 0))
	// late failure after paid_out → failed (settled → failed is an allowed
	// edge: a Direct Debit late failure after payout), then settled against
	// a payout: stays failed
	lateSettled := s.CreatePayment(1100, "GBP", t0)
	cycle(lateSettled)
	s.PayOut(day(5, -2), lateSettled)
	s.Fail(lateSettled, day(7, 0))
	s.LateFailureSettled(lateSettled, day(8, 7))
	// chargeback, then cancelled: stays chargeback
	cb := s.CreatePayment(1200, "GBP", t0)
	cycle(cb)
	s.PayOut(day(5, -2), cb)
	s.ChargeBack(cb, day(20, 0))
	s.CancelChargeback(cb, day(27, 0))
	// early failure, resubmission: stays failed
	re := s.CreatePayment(1300, "GBP", t0)
	s.Submit(re, day(1, 6))
	s.Fail(re, day(4, -3))
	s.RequestResubmission(re, day(5, 0))
	s.Submit(re, day(6, 6))
	// full refund after payout → refunded, partial → settled
	full := s.CreatePayment(1400, "gbp", t0)
	cycle(full)
	po := s.PayOut(day(5, -2), full)
	rf1 := s.Refund(full, 400, day(10, 0))
	s.Refund(full, 0, day(11, 0))
	part := s.CreatePayment(1500, "GBP", t0)
	cycle(part)
	s.PayOut(day(5, -2), part)
	s.Refund(part, 200, day(10, 0))
	// cancelled; denied; raw status
	can := s.CreatePayment(1600, "GBP", t0)
	s.Cancel(can, day(0, 2))
	den := s.CreatePayment(1700, "GBP", t0)
	s.DenyApproval(den, day(0, 3))
	raw := s.CreatePayment(1800, "GBP", t0)
	s.SetRawStatus(raw, "mystery", "mystery_happened", day(1, 0))
	later := s.CreatePayment(1900, "GBP", day(40, 0))
	// Success+: fails with will_attempt_retry true, GoCardless resubmits it,
	// and the retry is collected and paid out → settled, never failed
	retried := s.CreatePayment(2000, "GBP", t0)
	s.SetRetryIfPossible(retried, true)
	s.Submit(retried, day(1, 6))
	s.FailWillRetry(retried, day(4, -3))
	s.AutoRetry(retried, day(4, -2))
	s.Submit(retried, day(6, 6))
	s.Confirm(retried, day(9, -3))
	s.PayOut(day(10, -2), retried)
	// a failure GoCardless will retry, not yet resubmitted → still authorised
	pending := s.CreatePayment(2100, "GBP", t0)
	s.Submit(pending, day(1, 6))
	s.FailWillRetry(pending, day(4, -3))
	// retried, and the retry fails finally → failed
	retriedFailed := s.CreatePayment(2200, "GBP", t0)
	s.Submit(retriedFailed, day(1, 6))
	s.FailWillRetry(retriedFailed, day(4, -3))
	s.AutoRetry(retriedFailed, day(4, -2))
	s.Submit(retriedFailed, day(6, 6))
	s.Fail(retriedFailed, day(9, -3))
	// a late failure after payout that GoCardless retries: its settlement
	// against a payout is not final either → settled again after the retry
	lateRetried := s.CreatePayment(2300, "GBP", t0)
	cycle(lateRetried)
	s.PayOut(day(5, -2), lateRetried)
	s.FailWillRetry(lateRetried, day(7, 0))
	s.LateFailureSettled(lateRetried, day(8, 7))
	s.AutoRetry(lateRetried, day(8, 8))
	s.Submit(lateRetried, day(11, 6))
	s.Confirm(lateRetried, day(14, -3))
	s.PayOut(day(15, -2), lateRetried)

	assert.NotEmpty(t, po)
	assert.NotEmpty(t, rf1)

	end := s.ExpectedAt(day(60, 0))
	want := map[string]models.State{
		late: models.StateFailed, lateSettled: models.StateFailed, cb: models.StateChargeback,
		re: models.StateFailed, full: models.StateRefunded, part: models.StateSettled,
		can: models.StateCanceled, den: models.StateCanceled, raw: models.StateCreated, later: models.StateCreated,
		retried: models.StateSettled, pending: models.StateAuthorised, retriedFailed: models.StateFailed,
		lateRetried: models.StateSettled,
	}
	for id, st := range want {
		assert.Equal(t, st, end[id].State, id)
		assert.Equal(t, "gbp", end[id].Currency)
	}
	assert.Len(t, end, len(want))
	assert.Equal(t, int64(1400), end[full].AmountRefunded)
	assert.Equal(t, day(11, 0), end[full].At, "refunded when the second refund was created (GoCardless raises amount_refunded then)")
	assert.Equal(t, int64(200), end[part].AmountRefunded)
	assert.Equal(t, int64(1400), end[full].Amount)
	assert.Equal(t, day(20, 0), end[cb].At)
	assert.Equal(t, day(5, 0), end[late].At)
	assert.Equal(t, day(7, 0), end[lateSettled].At, "failed at the late failure; its settlement changes nothing")
	assert.Equal(t, day(10, -2), end[retried].At)
	assert.Equal(t, day(1, 6), end[pending].At, "a failure that will be retried is not final")
	assert.Equal(t, models.StateCaptured, s.ExpectedAt(day(9, -3))[retried].State)
	assert.Equal(t, models.StateAuthorised, s.ExpectedAt(day(4, -2))[retried].State, "failed, will be retried: unchanged")
	assert.Equal(t, models.StateSettled, s.ExpectedAt(day(8, 8))[lateRetried].State)

	// over time
	at := func(t time.Time, id string) Expected { return s.ExpectedAt(t)[id] }
	assert.Equal(t, models.StateCreated, at(day(1, 5), late).State)
	assert.Equal(t, models.StateAuthorised, at(day(1, 6), late).State, "At <= t is inclusive")
	assert.Equal(t, models.StateCaptured, at(day(4, -3), late).State)
	assert.Equal(t, models.StateSettled, at(day(10, 0).Add(-time.Millisecond), full).State)
	assert.Equal(t, int64(0), at(day(10, 0).Add(-time.Millisecond), full).AmountRefunded, "refund not yet created")
	assert.Equal(t, int64(400), at(day(10, 0), full).AmountRefunded, "raised at creation, not when paid")
	assert.Equal(t, models.StateSettled, at(day(11, 0).Add(-time.Millisecond), full).State)
	assert.Equal(t, models.StateRefunded, at(day(11, 0), full).State)
	assert.NotContains(t, s.ExpectedAt(day(39, 0)), later)
	assert.Empty(t, s.ExpectedAt(t0.Add(-time.Millisecond)))

	// deliveries: oldest first, types, facts
	ds := s.Deliveries()
	types := map[string]int{}
	for i, d := range ds {
		if i > 0 {
			require.False(t, d.At.Before(ds[i-1].At))
		}
		types[d.EventType]++
		require.Len(t, d.Facts, 1)
		f := d.Facts[0]
		assert.Equal(t, d.EventID, f.EventID)
		assert.Equal(t, d.At, f.At)
		var ev event
		require.NoError(t, json.Unmarshal(d.Payload, &ev))
		assert.Equal(t, d.EventID, ev.ID)
		assert.Equal(t, d.EventType, ev.ResourceType+"."+ev.Action)
		assert.Equal(t, f.PaymentID, ev.Links["payment"])
		if d.EventType == "refunds.created" && ev.Links["refund"] == rf1 {
			assert.Equal(t, int64(400), f.AmountRefunded)
			assert.Equal(t, models.StateNone, f.State)
			assert.Equal(t, rf1, f.RefundID)
		}
		if d.EventType == "refunds.paid" {
			assert.Equal(t, int64(0), f.AmountRefunded, "amount_refunded was raised at creation")
			assert.Equal(t, models.StateNone, f.State)
		}
		if d.EventType == "payments.paid_out" {
			assert.True(t, strings.HasPrefix(ev.Links["payout"], "PO"), "paid_out carries links.payout")
			assert.Equal(t, ev.Links["payout"], f.PayoutID)
		} else if ev.ResourceType == "payments" && d.EventType != "payments.late_failure_settled" {
			assert.NotContains(t, ev.Links, "payout")
		}
		if d.EventType == "payments.failed" {
			assert.Equal(t, "bank", ev.Details["origin"])
			retry, ok := ev.Details["will_attempt_retry"].(bool)
			require.True(t, ok, "every payment failed event carries will_attempt_retry")
			switch {
			case f.PaymentID == late || f.PaymentID == lateSettled:
				assert.Equal(t, "refer_to_payer", ev.Details["cause"])
				assert.Equal(t, "ARUDD-0", ev.Details["reason_code"])
				assert.False(t, retry)
				assert.Equal(t, models.StateFailed, f.State)
			case retry:
				assert.Contains(t, []string{pending, retried, retriedFailed, lateRetried}, f.PaymentID)
				assert.Equal(t, "refer_to_payer", ev.Details["cause"], "Success+ retries insufficient funds only")
				assert.Equal(t, "ARUDD-0", ev.Details["reason_code"])
				assert.Equal(t, models.StateNone, f.State, "a failure GoCardless retries is not final")
			case f.PaymentID == retriedFailed:
				assert.Equal(t, models.StateFailed, f.State, "the retry's failure is final")
			default:
				assert.Equal(t, "mandate_cancelled", ev.Details["cause"])
				assert.Equal(t, models.StateFailed, f.State)
			}
		} else {
			assert.NotContains(t, ev.Details, "will_attempt_retry")
		}
		if d.EventType == "payments.resubmission_requested" {
			if f.PaymentID == re {
				assert.Equal(t, map[string]any{"origin": "api", "cause": "payment_retried"}, map[string]any{"origin": ev.Details["origin"], "cause": ev.Details["cause"]})
			} else {
				assert.Equal(t, map[string]any{"origin": "gocardless", "cause": "payment_autoretried"}, map[string]any{"origin": ev.Details["origin"], "cause": ev.Details["cause"]})
			}
			assert.Equal(t, models.StateNone, f.State)
		}
		if d.EventType == "payments.late_failure_settled" {
			// The payout debit of a late failure: the failed event before
			// it established the failure (for a retried one too).
			assert.Equal(t, models.StateNone, f.State, f.PaymentID)
		}
	}
	for _, typ := range []string{"payments.created", "payments.submitted", "payments.confirmed", "payments.paid_out",
		"payments.failed", "payments.cancelled", "payments.customer_approval_denied", "payments.charged_back",
		"payments.chargeback_cancelled", "payments.resubmission_requested", "payments.mystery_happened",
		"payments.late_failure_settled", "refunds.created", "refunds.paid"} {
		assert.Positive(t, types[typ], typ)
	}
}

// The stuck-payment path reads a payment's latest failure with
// GET /events?payment=…&action=failed; resource_type cannot be combined
// with payment.
func TestEventsFilteredByPaymentAndAction(t *testing.T) {
	s := newServer(t, Options{Seed: 13})
	a := s.CreatePayment(1000, "GBP", t0)
	b := s.CreatePayment(1000, "GBP", t0)
	s.Submit(a, t0.Add(time.Hour))
	s.Submit(b, t0.Add(time.Hour))
	s.FailWillRetry(a, t0.Add(72*time.Hour))
	s.Fail(b, t0.Add(72*time.Hour))
	s.AutoRetry(a, t0.Add(73*time.Hour))
	s.Submit(a, t0.Add(96*time.Hour))
	s.Fail(a, t0.Add(168*time.Hour))

	l := listEventsOK(t, s, "payment="+a)
	assert.Equal(t, []string{"failed", "submitted", "resubmission_requested", "failed", "submitted", "created"}, actions(l.Events))
	l = listEventsOK(t, s, "payment="+a+"&action=failed&limit=1")
	require.Len(t, l.Events, 1)
	assert.Equal(t, false, l.Events[0].Details["will_attempt_retry"], "the newest failure is the final one")
	require.NotNil(t, l.Meta.Cursors.After)
	l = listEventsOK(t, s, "payment="+a+"&action=failed&after="+*l.Meta.Cursors.After)
	require.Len(t, l.Events, 1)
	assert.Equal(t, true, l.Events[0].Details["will_attempt_retry"])
	assert.Equal(t, a, l.Events[0].Links["payment"])
	l = listEventsOK(t, s, "action=failed")
	assert.Len(t, l.Events, 3)
	assert.Empty(t, listEventsOK(t, s, "payment=PM000000000000").Events)
	assert.Empty(t, listEventsOK(t, s, "action=no_such_action").Events)

	var p struct {
		Payments payment `json:"payments"`
	}
	_, _, body := get(t, s, "/payments/"+a)
	require.NoError(t, json.Unmarshal(body, &p))
	assert.Equal(t, "failed", p.Payments.Status)
	var raw map[string]any
	require.NoError(t, json.Unmarshal(body, &raw))
	assert.Equal(t, true, raw["payments"].(map[string]any)["retry_if_possible"], "FailWillRetry implies Success+")
	_, _, body = get(t, s, "/payments/"+b)
	require.NoError(t, json.Unmarshal(body, &raw))
	assert.Equal(t, false, raw["payments"].(map[string]any)["retry_if_possible"])

	st, _, body := get(t, s, "/events?resource_type=payments&payment="+a)
	assert.Equal(t, 400, st)
	assert.Equal(t, "invalid_filter", decodeErr(t, body).Error.Errors[0].Reason)
}

func actions(evs []event) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.Action
	}
	return out
}

func TestGenerateDeterministicAndRealistic(t *testing.T) {
	gen := func() *Server {
		s := New(Options{Seed: 11})
		s.Generate(GenOptions{Payments: 20000, Start: t0, End: t0.Add(60 * 24 * time.Hour), Seed: 12})
		return s
	}
	a, b := gen(), gen()
	da, db := a.Deliveries(), b.Deliveries()
	require.Equal(t, len(da), len(db))
	for i := range da {
		require.Equal(t, da[i].Payload, db[i].Payload)
	}
	end := t0.Add(60 * 24 * time.Hour)
	counts := map[string]int{}
	for _, d := range da {
		counts[d.EventType]++
		require.True(t, d.At.Before(end))
		require.True(t, !d.At.Before(t0))
		wd := d.At.Weekday()
		if d.EventType != "payments.created" && d.EventType != "payments.cancelled" &&
			d.EventType != "payments.customer_approval_denied" {
			require.True(t, wd != time.Saturday && wd != time.Sunday, "%s on %v", d.EventType, d.At)
		}
	}
	t.Logf("events %d: %v", len(da), counts)
	n := 20000.0
	assert.InDelta(t, 0.02*n, counts["payments.cancelled"], 0.006*n)
	assert.InDelta(t, 0.01*n, counts["payments.customer_approval_denied"], 0.004*n)
	assert.InDelta(t, 0.04*n, counts["payments.failed"], 0.01*n)
	assert.Positive(t, counts["payments.charged_back"])
	assert.Positive(t, counts["payments.chargeback_cancelled"])
	assert.Positive(t, counts["payments.resubmission_requested"])
	assert.Positive(t, counts["payments.late_failure_settled"])
	assert.Positive(t, counts["refunds.paid"])
	// Success+: every resubmission is GoCardless's, after a failure it said
	// it would retry; such a payment ends where its retry put it.
	expected := a.ExpectedAt(end)
	type story struct{ retriedFail, finalFail, resubmitted, collected bool }
	stories := map[string]*story{}
	for _, d := range da {
		switch d.EventType {
		case "payments.failed", "payments.resubmission_requested", "payments.confirmed":
		default:
			continue
		}
		var ev event
		require.NoError(t, json.Unmarshal(d.Payload, &ev))
		st := stories[d.Facts[0].PaymentID]
		if st == nil {
			st = &story{}
			stories[d.Facts[0].PaymentID] = st
		}
		switch d.EventType {
		case "payments.failed":
			if ev.Details["will_attempt_retry"] == true {
				st.retriedFail = true
			} else {
				st.finalFail = true
			}
		case "payments.resubmission_requested":
			require.True(t, st.retriedFail && !st.finalFail, "a resubmission follows a failure GoCardless retries")
			assert.Equal(t, "payment_autoretried", ev.Details["cause"])
			st.resubmitted = true
		case "payments.confirmed":
			st.collected = st.resubmitted
		}
	}
	collected := 0
	for id, st := range stories {
		switch {
		case st.retriedFail && !st.finalFail:
			assert.NotEqual(t, models.StateFailed, expected[id].State, "%s: a retried failure is not final", id)
			if st.collected {
				collected++
				assert.Contains(t, []models.State{models.StateCaptured, models.StateSettled}, expected[id].State, id)
			}
		case st.finalFail:
			assert.Equal(t, models.StateFailed, expected[id].State, id)
		}
	}
	assert.Greater(t, collected, 50, "payments failed, retried by GoCardless and collected")
	states := map[models.State]int{}
	for _, e := range expected {
		states[e.State]++
	}
	t.Logf("states: %v", states)
	assert.Greater(t, states[models.StateSettled], int(0.7*n))
	assert.Positive(t, states[models.StateRefunded])
	assert.Positive(t, states[models.StateChargeback])
	assert.Positive(t, states[models.StateFailed])
	assert.Positive(t, states[models.StateCanceled])

	// a generated payment's links and paid_out bursts
	l := listEventsOK(t, func() *Server { a.Start(); t.Cleanup(a.Close); return a }(),
		"resource_type=payments&include=payment&limit=500")
	require.Len(t, l.Events, 500)
	for _, p := range l.Linked.Payments {
		if p.Status == "paid_out" {
			assert.True(t, strings.HasPrefix(p.Links["payout"], "PO"))
		}
	}
}

func TestMillionEvents(t *testing.T) {
	if testing.Short() {
		t.Skip("large")
	}
	s := newServer(t, Options{Seed: 21})
	start := time.Now()
	s.Generate(GenOptions{Payments: 300_000, Start: t0, End: t0.Add(30 * 24 * time.Hour), Seed: 22})
	t.Logf("generated %d events in %v", len(s.events), time.Since(start))
	require.Greater(t, len(s.events), 1_000_000)
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	t.Logf("heap in use %.1f MiB", float64(ms.HeapInuse)/(1<<20))

	// sort once, then every page is fast, deep cursors included
	listEventsOK(t, s, "limit=1")
	start = time.Now()
	q := "resource_type=payments&include=payment&limit=500&created_at[gte]=" + url.QueryEscape(ts(t0.Add(10*24*time.Hour)))
	l := listEventsOK(t, s, q)
	n := 0
	for l.Meta.Cursors.After != nil && n < 200 {
		n++
		l = listEventsOK(t, s, q+"&after="+*l.Meta.Cursors.After)
	}
	el := time.Since(start)
	t.Logf("%d pages of 500 in %v (%v a page)", n+1, el, el/time.Duration(n+1))
	assert.Less(t, el/time.Duration(n+1), 50*time.Millisecond)
}

func BenchmarkGenerateMillion(b *testing.B) {
	for range b.N {
		s := New(Options{Seed: 1})
		s.Generate(GenOptions{Payments: 1_000_000, Start: t0, End: t0.Add(30 * 24 * time.Hour), Seed: 2})
		s.rlock()
		s.mu.RUnlock()
		b.ReportMetric(float64(len(s.events)), "events")
	}
}

func TestIDs(t *testing.T) {
	c := newIDCodec(42)
	prev := ""
	for _, n := range []int{0, 1, 2, 35, 36, 1000, 999_999, 5_000_000} {
		id := c.id(kEvent, n)
		require.Len(t, id, 14)
		require.Equal(t, "EV", id[:2])
		for _, r := range id[2:] {
			require.True(t, r >= '0' && r <= '9' || r >= 'A' && r <= 'Z', id)
		}
		require.Greater(t, id, prev, "ids sort in creation order")
		prev = id
		require.Equal(t, n, c.decode(kEvent, id, 10_000_000))
		require.Equal(t, -1, c.decode(kEvent, id, n))
		require.Equal(t, -1, c.decode(kPayment, "PM"+id[2:], 10_000_000))
	}
	d := newIDCodec(43)
	require.NotEqual(t, c.id(kPayment, 0), d.id(kPayment, 0))
}
