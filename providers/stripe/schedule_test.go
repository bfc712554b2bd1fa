package stripe_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/providers/stripe"
	"github.com/reconciler/reconciler/providers/stripe/stripefake"
	"github.com/reconciler/reconciler/reconcile"
)

// seen is one request a recording front saw: its path and query, when it
// came and when its answer was sent.
type seen struct {
	path, query string
	start, end  time.Time
}

// recording serves the fake behind a front that records every request, and
// answers those fail says fail with a 500 of Stripe's error JSON.
type recording struct {
	mu   sync.Mutex
	reqs []seen
}

func (r *recording) all() []seen {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]seen(nil), r.reqs...)
}

func (r *recording) of(path string) []seen {
	var out []seen
	for _, s := range r.all() {
		if s.path == path {
			out = append(out, s)
		}
	}
	return out
}

// stamped calls stamp before the answer's status goes out: the answer's
// time as the client sees it begins no earlier.
type stamped struct {
	http.ResponseWriter
	stamp func()
	once  sync.Once
}

func (s *stamped) WriteHeader(code int) {
	s.once.Do(s.stamp)
	s.ResponseWriter.WriteHeader(code)
}

func (s *stamped) Write(b []byte) (int, error) {
	s.once.Do(s.stamp)
	return s.ResponseWriter.Write(b)
}

func recorded(t *testing.T, fake *stripefake.Server, fail func(*http.Request) bool) (*recording, *stripe.Provider) {
	t.Helper()
	rec := &recording{}
	h := fake.Handler()
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Recorded when it comes (a request ListChanges waited for is
		// recorded before it returns), its end set before the answer goes.
		rec.mu.Lock()
		i := len(rec.reqs)
		rec.reqs = append(rec.reqs, seen{path: r.URL.Path, query: r.URL.RawQuery, start: time.Now()})
		rec.mu.Unlock()
		sw := &stamped{ResponseWriter: w, stamp: func() {
			rec.mu.Lock()
			rec.reqs[i].end = time.Now()
			rec.mu.Unlock()
		}}
		if fail != nil && fail(r) {
			sw.Header().Set("Content-Type", "application/json")
			sw.WriteHeader(http.StatusInternalServerError)
			fmt.Fprint(sw, `{"error":{"type":"api_error","message":"An unknown error occurred"}}`)
			return
		}
		h.ServeHTTP(sw, r)
	}))
	t.Cleanup(front.Close)
	p, err := stripe.New(stripe.Config{APIKey: "sk_test_x", BaseURL: front.URL, MaxRetries: 2,
		Sleep: func(ctx context.Context, _ time.Duration) error { return ctx.Err() }})
	require.NoError(t, err)
	return rec, p
}

// TestScheduleAskedBesideTheEvents: the account's payout schedule (GET
// /v1/account) is asked for once the anchor answered, beside the window's
// first page rather than before it, so that a run's first requests wait for
// one answer less; the changes are those of the window all the same, and no
// request outlives ListChanges.
func TestScheduleAskedBesideTheEvents(t *testing.T) {
	t.Parallel()
	fake := stripefake.New(stripefake.Options{Now: func() time.Time { return now }, Seed: 3})
	a := fake.Account("")
	a.Generate(stripefake.GenOptions{Payments: 60, Start: now.Add(-72 * time.Hour), End: now.Add(-time.Hour), Seed: 3})
	fake.SetLatency(60 * time.Millisecond)
	rec, p := recorded(t, fake, nil)
	lp := reconcile.ListParams{Since: now.Add(-48 * time.Hour), Until: now}
	_, cs := collect(t, p, lp)
	require.NotEmpty(t, cs)

	all := rec.all()
	require.Equal(t, "/v1/events", all[0].path, "the anchor is the run's first request")
	acct := rec.of("/v1/account")
	require.Len(t, acct, 1, "the schedule, once")
	require.False(t, acct[0].start.Before(all[0].end), "asked once the anchor answered")
	var firstPage *seen
	for i := range all {
		if all[i].path == "/v1/events" && i > 0 {
			firstPage = &all[i]
			break
		}
	}
	require.NotNil(t, firstPage)
	require.True(t, acct[0].start.Before(firstPage.end), "asked beside the window's first page, not before it: account %v–%v, page %v–%v",
		acct[0].start, acct[0].end, firstPage.start, firstPage.end)

	// The same window with the schedule known before (a second ListChanges
	// on the same provider asks no schedule): the same changes.
	_, again := collect(t, p, lp)
	require.Equal(t, cs, again)
	require.Len(t, rec.of("/v1/account"), 1, "read once per provider and account")
	n := len(rec.all())
	time.Sleep(150 * time.Millisecond)
	require.Len(t, rec.all(), n, "no request after ListChanges returned")
}

// TestScheduleErrorFailsTheRun: a schedule Stripe fails to give (a 500 after
// the retries) fails the window as it did when it was asked first, naming
// the request; and a provider that fails the run's first request, the
// anchor, is asked nothing else.
func TestScheduleErrorFailsTheRun(t *testing.T) {
	t.Parallel()
	lp := reconcile.ListParams{Since: now.Add(-48 * time.Hour), Until: now}
	t.Run("schedule", func(t *testing.T) {
		t.Parallel()
		fake := stripefake.New(stripefake.Options{Now: func() time.Time { return now }, Seed: 3})
		fake.Account("").Generate(stripefake.GenOptions{Payments: 30, Start: now.Add(-72 * time.Hour), End: now.Add(-time.Hour), Seed: 3})
		rec, p := recorded(t, fake, func(r *http.Request) bool { return r.URL.Path == "/v1/account" })
		err := p.ListChanges(context.Background(), lp, func(reconcile.Page) error { return nil })
		require.ErrorContains(t, err, "get stripe account")
		require.ErrorContains(t, err, "GET /v1/account")
		require.Len(t, rec.of("/v1/account"), 3, "one request and two retries")
	})
	t.Run("anchor", func(t *testing.T) {
		t.Parallel()
		fake := stripefake.New(stripefake.Options{Now: func() time.Time { return now }, Seed: 3})
		rec, p := recorded(t, fake, func(r *http.Request) bool { return r.URL.Path == "/v1/events" })
		err := p.ListChanges(context.Background(), lp, func(reconcile.Page) error { return nil })
		require.ErrorContains(t, err, "find stripe anchor event")
		require.Len(t, rec.all(), 3, "the anchor, retried twice, and nothing else")
		require.Empty(t, rec.of("/v1/account"))
	})
}

// TestManualAccountQuietWindowSettles: on an account that pays out by hand,
// a window that holds no event at all, with none before it inside Stripe's
// 30 days either (no anchor), still settles the charge whose funds became
// available in it. ListChanges returned at the empty window before it read
// the schedule, and no window ever settled that charge.
func TestManualAccountQuietWindowSettles(t *testing.T) {
	fake, p := setup(t)
	const acct = "acct_1QuietManual"
	a := fake.Account(acct)
	a.SetManualPayouts(31)
	since, until := now.Add(-2*24*time.Hour), now
	captured := now.Add(-32 * 24 * time.Hour) // its events past the horizon; available a day before now
	pi := a.CreatePayment(1500, "eur", false, captured)
	a.Capture(pi, captured)
	evs, cs := collect(t, p, reconcile.ListParams{Account: acct, Since: since, Until: until})
	require.Empty(t, evs, "the window holds no event")
	var settled []reconcile.Change
	for _, c := range cs {
		if c.ProviderID == pi && c.State == models.StateSettled {
			settled = append(settled, c)
		}
	}
	require.Len(t, settled, 1, "changes: %+v", cs)
	require.True(t, captured.Add(31*24*time.Hour).Equal(settled[0].At), "at available_on: %v", settled[0].At)
}
