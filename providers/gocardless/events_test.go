package gocardless

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/reconciler/reconciler/internal/tmpfile"
	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/providers/gocardless/gcfake"
	"github.com/reconciler/reconciler/reconcile"
)

// slicedWorld is a fake GoCardless with gcfake.Generate's month of Bacs
// payments (failures, Success+ retries that fail again days later,
// refunds, chargebacks and their cancellations, payouts that sweep a day's
// payments at the same instant) and a window over all of it.
type slicedWorld struct {
	url    string
	lp     reconcile.ListParams
	server *gcfake.Server
	// Facts whose meaning depends on a failure days before them (the
	// forward pass, carried from slice to slice): a late failure that
	// GoCardless retries, settled against a payout four days later, and a
	// failure GoCardless retries that the merchant resubmits four days later.
	lateRetried, merchantRetried string
	// unordered: the server lists an instant's events in another order
	// than the window's reversed (its instants are held whole).
	unordered bool
}

func newSlicedWorld(t *testing.T, payments int) slicedWorld {
	t.Helper()
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	s := gcfake.New(gcfake.Options{Now: func() time.Time { return now }, Seed: 11})
	s.Generate(gcfake.GenOptions{Payments: payments, Start: now.Add(-30 * 24 * time.Hour), End: now.Add(-time.Hour), Seed: 3})
	d := func(days int) time.Time { return now.Add(-time.Duration(days)*24*time.Hour + 17*time.Minute) }
	late := s.CreatePayment(1200, "GBP", d(20))
	s.Submit(late, d(19))
	s.Confirm(late, d(16))
	s.PayOut(d(15), late)
	s.FailWillRetry(late, d(14))
	s.LateFailureSettled(late, d(10))
	merchant := s.CreatePayment(900, "GBP", d(20))
	s.Submit(merchant, d(19))
	s.FailWillRetry(merchant, d(16))
	s.RequestResubmission(merchant, d(12))
	// A payout that bounces days after it was paid (a creditors event).
	bounced := s.CreatePayment(5100, "GBP", d(9))
	s.Submit(bounced, d(8))
	s.Confirm(bounced, d(5))
	s.BouncePayout(s.PayOut(d(4), bounced), d(2))
	url := s.Start()
	t.Cleanup(s.Close)
	return slicedWorld{url: url, server: s, lp: reconcile.ListParams{Since: now.Add(-31 * 24 * time.Hour), Until: now},
		lateRetried: late, merchantRetried: merchant}
}

// listed is what a provider delivered for a window, and how.
type listed struct {
	pages    []reconcile.Page
	slices   []int // events held by each slice (or chunk of an instant)
	chunks   int   // chunks of an instant past the hold, after its first
	most     int   // the most events a slice or chunk held
	lastFrom time.Time
	requests int64
}

func (w slicedWorld) list(t *testing.T, hold, pageSize int, lp reconcile.ListParams) listed {
	t.Helper()
	p, err := New(Config{AccessToken: "sandbox_sliced", BaseURL: w.url, Hold: hold, PageSize: pageSize})
	require.NoError(t, err)
	p.noPrefetch = false // slices listed ahead, as a paced provider lists them
	p.spills = tmpfile.NewBudget(1 << 30)
	var out listed
	p.held = func(from, end time.Time, n int) {
		out.slices = append(out.slices, n)
		if from.Equal(out.lastFrom) {
			out.chunks++ // a further chunk of one instant
		}
		out.lastFrom = from
		out.most = max(out.most, n)
		if !w.unordered {
			// An instant past the hold is read in chunks (gcfake lists
			// in the order delivered, reversed): nothing is held past
			// the hold.
			assert.LessOrEqual(t, n, hold, "a slice [%s, %s) held more than the hold", from, end)
		}
	}
	require.NoError(t, p.ListChanges(context.Background(), lp, func(pg reconcile.Page) error {
		out.pages = append(out.pages, pg)
		return nil
	}))
	out.requests = p.Requests()
	return out
}

// TestSlicedWindowDeliversTheWholeWindow: a window read in slices of at
// most a few dozen to a few thousand events delivers exactly what it
// delivers read whole (the same pages, events, changes and cursors), the
// facts judged by what comes later in the window included.
func TestSlicedWindowDeliversTheWholeWindow(t *testing.T) {
	t.Parallel()
	w := newSlicedWorld(t, 3000)
	whole := w.list(t, 1<<30, 500, w.lp)
	require.Len(t, whole.slices, 1, "read whole: one slice")
	events := 0
	for _, pg := range whole.pages {
		events += len(pg.Events)
	}
	require.Greater(t, events, 10_000)

	// The month must exercise what slicing could get wrong: a normal
	// resubmission whose payment fails finally days later (judged by a
	// later slice's failure), and many events at one instant.
	var judged int
	for _, pg := range whole.pages {
		for _, c := range pg.Changes {
			if c.RawStatus == RawRetried && len(c.RevertOnlyFrom) == 0 {
				judged++
			}
		}
	}
	require.Positive(t, judged, "no resubmission whose payment fails again later: the scenario does not test failuresAfter")
	var lateSeen, merchantSeen bool
	for _, pg := range whole.pages {
		for _, c := range pg.Changes {
			lateSeen = lateSeen || c.ProviderID == w.lateRetried && c.RawStatus == RawLateFailureSettledWillRetry && c.State == models.StateNone
			merchantSeen = merchantSeen || c.ProviderID == w.merchantRetried && c.RawStatus == RawRetried
		}
	}
	require.True(t, lateSeen, "the late failure GoCardless retries: its settlement must move no state")
	require.True(t, merchantSeen, "the merchant's resubmission after a failure GoCardless retries is a normal one")
	var bouncedSeen bool
	for _, pg := range whole.pages {
		for _, c := range pg.Changes {
			bouncedSeen = bouncedSeen || c.RawStatus == "payout_bounced"
		}
	}
	require.True(t, bouncedSeen, "no bounced payout: the creditors' events are not tested")

	for _, hold := range []int{40, 333, 4000} {
		t.Run(fmt.Sprintf("hold=%d", hold), func(t *testing.T) {
			t.Parallel()
			got := w.list(t, hold, 500, w.lp)
			assert.Greater(t, len(got.slices), 1, "the window was not sliced")
			require.Equal(t, len(whole.pages), len(got.pages))
			for i := range whole.pages {
				require.Equal(t, whole.pages[i], got.pages[i], "page %d", i)
			}
			t.Logf("hold %d: %d slices, %d further chunks of instants, %d requests (whole: %d)", hold, len(got.slices), got.chunks, got.requests, whole.requests)
			if hold == 40 {
				// Each day's paid_out events at one instant pass a hold
				// of 40: they are split, not held whole.
				assert.Positive(t, got.chunks, "no instant was split")
			}
			if hold == 4000 {
				// A hold of about a third of the month: its slices cost
				// their payment pages, the sparse refunds and creditors
				// read ahead: 4 requests more than the whole reading
				// (92 against 70 when written, 48 against 26 since the
				// refunded payments' totals come from the payment events'
				// linked payments; ending the side streams' stretches at
				// each slice took 142 against 70; 30 against 26 since a
				// slice given up is read back from disk).
				assert.LessOrEqual(t, got.requests, whole.requests+8, "requests of a sliced read")
			}
		})
	}
}

// TestSlicedWindowWithoutTheActionFilter: should GoCardless refuse action
// with resource_type, the later failures are read from the payment events
// unfiltered, and the slices still deliver the whole window.
func TestSlicedWindowWithoutTheActionFilter(t *testing.T) {
	t.Parallel()
	w := newSlicedWorld(t, 600)
	whole := w.list(t, 1<<30, 500, w.lp)
	var refused atomic.Int64
	ts := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if q.Get("action") != "" && q.Get("resource_type") != "" {
			refused.Add(1)
			rw.Header().Set("Content-Type", "application/json")
			rw.WriteHeader(http.StatusUnprocessableEntity)
			_, _ = rw.Write([]byte(`{"error":{"message":"action cannot be used with resource_type","type":"validation_failed","code":422,"request_id":"x","errors":[]}}`))
			return
		}
		w.server.Handler().ServeHTTP(rw, r)
	}))
	t.Cleanup(ts.Close)
	refusing := w
	refusing.url = ts.URL
	got := refusing.list(t, 40, 500, w.lp)
	require.Positive(t, refused.Load(), "the action filter was never asked for")
	require.Equal(t, whole.pages, got.pages)
}

// TestSlicedWindowResumes: a run resuming after a committed event gets the
// rest of the window, sliced or not.
func TestSlicedWindowResumes(t *testing.T) {
	t.Parallel()
	w := newSlicedWorld(t, 800)
	whole := w.list(t, 1<<30, 100, w.lp)
	require.Greater(t, len(whole.pages), 4)
	cut := whole.pages[len(whole.pages)/2]
	lp := w.lp
	lp.After, lp.AfterAt = cut.Cursor, cut.CursorAt
	want := whole.pages[len(whole.pages)/2+1:]
	for _, hold := range []int{1 << 30, 150} {
		got := w.list(t, hold, 100, lp)
		require.Equal(t, want, got.pages, "hold %d", hold)
	}
}

// TestSlicedWindowReportsAnUnknownStatusOnce: a payment whose current
// status the mapping does not know, with events in several slices, is
// reported once.
func TestSlicedWindowReportsAnUnknownStatusOnce(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	s := gcfake.New(gcfake.Options{Now: func() time.Time { return now }, Seed: 12})
	s.Generate(gcfake.GenOptions{Payments: 300, Start: now.Add(-10 * 24 * time.Hour), End: now.Add(-time.Hour), Seed: 4})
	pm := s.CreatePayment(700, "GBP", now.Add(-9*24*time.Hour))
	s.Submit(pm, now.Add(-8*24*time.Hour))
	s.SetRawStatus(pm, "under_review", "placed_under_review", now.Add(-2*time.Hour))
	url := s.Start()
	t.Cleanup(s.Close)
	w := slicedWorld{url: url, server: s, lp: reconcile.ListParams{Since: now.Add(-11 * 24 * time.Hour), Until: now}}
	for _, hold := range []int{1 << 30, 60} {
		got := w.list(t, hold, 500, w.lp)
		var unknown []reconcile.Change
		for _, pg := range got.pages {
			for _, c := range pg.Changes {
				if c.ProviderID == pm && c.Unknown && c.RawStatus == "under_review" {
					unknown = append(unknown, c)
				}
			}
		}
		require.Len(t, unknown, 1, "hold %d: the unknown current status once a window", hold)
		assert.Equal(t, models.StateNone, unknown[0].State)
		if hold < 1<<30 {
			assert.Greater(t, len(got.slices), 3)
		}
	}
}

// instantWorld is a fake GoCardless whose one millisecond T holds more
// events than a small hold: a normal resubmission (after a failure
// GoCardless said it would retry), the payouts of 40
// other payments, a refund (a side stream's event) in their midst, and the
// resubmitted payment's final failure, in that order of creation (and of
// id). Read with a hold of 10, T is split into chunks, and the
// resubmission (in the first chunk) is judged by the failure in the last.
func instantWorld(t *testing.T) (slicedWorld, string) {
	t.Helper()
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	s := gcfake.New(gcfake.Options{Now: func() time.Time { return now }, Seed: 21})
	d := func(days int) time.Time { return now.Add(-time.Duration(days) * 24 * time.Hour) }
	T := d(3).Add(7 * time.Hour)
	pm := s.CreatePayment(1500, "GBP", d(9))
	s.Submit(pm, d(8))
	s.FailWillRetry(pm, d(6))
	var others []string
	for range 40 {
		o := s.CreatePayment(2000, "GBP", d(8))
		s.Submit(o, d(7))
		s.Confirm(o, d(5))
		others = append(others, o)
	}
	s.RequestResubmission(pm, T)
	s.PayOut(T, others[:20]...)
	s.RefundCreated(others[0], 500, T)
	s.PayOut(T, others[20:]...)
	s.Fail(pm, T)
	url := s.Start()
	t.Cleanup(s.Close)
	return slicedWorld{url: url, server: s, lp: reconcile.ListParams{Since: d(10), Until: now}}, pm
}

// TestSlicedWindowSplitsAnInstant: an instant past the hold is read in
// chunks (none holding more than the hold) and delivers what one reading
// of the whole window does: the refund among its events in its place,
// the resubmission judged by the failure chunks later, and a run resuming
// after any page gets the rest.
func TestSlicedWindowSplitsAnInstant(t *testing.T) {
	t.Parallel()
	w, pm := instantWorld(t)
	whole := w.list(t, 1<<30, 7, w.lp)
	judged := false
	for _, pg := range whole.pages {
		for _, c := range pg.Changes {
			judged = judged || c.ProviderID == pm && c.RawStatus == RawRetried && len(c.RevertOnlyFrom) == 0
		}
	}
	require.True(t, judged, "read whole, the resubmission is judged by the failure after it")
	got := w.list(t, 10, 7, w.lp)
	assert.GreaterOrEqual(t, got.chunks, 4, "the instant's 43 events were not split")
	require.Equal(t, whole.pages, got.pages)
	t.Logf("%d chunks after the first, %d requests (whole: %d)", got.chunks, got.requests, whole.requests)
	// Each instant past the hold costs its pages twice, its chunks ending
	// at their oldest event: 66 requests when written; reading each chunk
	// on to the next page took 86.
	assert.LessOrEqual(t, got.requests, int64(70), "requests of the split instants")

	for i := range whole.pages[:len(whole.pages)-1] {
		lp := w.lp
		lp.After, lp.AfterAt = whole.pages[i].Cursor, whole.pages[i].CursorAt
		require.Equal(t, whole.pages[i+1:], w.list(t, 10, 7, lp).pages, "resumed after page %d", i)
	}
}

// TestSlicedWindowHoldsAnUnorderedInstantWhole: should GoCardless list one
// millisecond's events in an order other than the window's reversed (here
// each page reversed), the instant cannot be cut into chunks of that
// order; it is held whole and still delivered as one reading delivers it.
func TestSlicedWindowHoldsAnUnorderedInstantWhole(t *testing.T) {
	t.Parallel()
	w, _ := instantWorld(t)
	whole := w.list(t, 1<<30, 7, w.lp)
	ts := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		rec := httptest.NewRecorder()
		w.server.Handler().ServeHTTP(rec, r)
		var body map[string]json.RawMessage
		if r.URL.Path != "/events" || rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &body) != nil {
			rw.WriteHeader(rec.Code)
			_, _ = rw.Write(rec.Body.Bytes())
			return
		}
		var evs []json.RawMessage
		require.NoError(t, json.Unmarshal(body["events"], &evs))
		slices.Reverse(evs)
		body["events"], _ = json.Marshal(evs)
		out, _ := json.Marshal(body)
		rw.Header().Set("Content-Type", "application/json")
		_, _ = rw.Write(out)
	}))
	t.Cleanup(ts.Close)
	reversing := w
	reversing.url, reversing.unordered = ts.URL, true
	got := reversing.list(t, 10, 7, w.lp)
	require.Equal(t, whole.pages, got.pages)
	assert.Zero(t, got.chunks, "an instant listed out of order was split")
	assert.GreaterOrEqual(t, got.most, 43, "the instant T was not held whole")
}

// TestSlicedWindowFromAServerThatIgnoresTheFilters: a server (a fake, a
// proxy) that ignores created_at[gte] and created_at[lt] lists its whole
// log for every slice; the events outside each slice are skipped, so the
// window is still delivered once, in the pages one reading gives, and
// the slicing ends.
func TestSlicedWindowFromAServerThatIgnoresTheFilters(t *testing.T) {
	t.Parallel()
	w := newSlicedWorld(t, 600)
	whole := w.list(t, 1<<30, 500, w.lp)
	ts := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		q.Del("created_at[gte]")
		q.Del("created_at[lt]")
		r.URL.RawQuery = q.Encode()
		w.server.Handler().ServeHTTP(rw, r)
	}))
	t.Cleanup(ts.Close)
	ignoring := w
	ignoring.url = ts.URL
	lp := w.lp
	lp.Since = lp.Since.Add(10 * 24 * time.Hour) // events before the window are listed too
	want := w.list(t, 1<<30, 500, lp)
	count := func(l listed) (n int) {
		for _, pg := range l.pages {
			n += len(pg.Events)
		}
		return n
	}
	require.Less(t, count(want), count(whole), "the server's log must hold events before the window")
	for _, hold := range []int{1 << 30, 333} {
		got := ignoring.list(t, hold, 500, lp)
		require.Equal(t, want.pages, got.pages, "hold %d", hold)
	}
}

// TestReadingGoesOnWhileAPageIsHandedOn: the engine's callback blocks
// while it writes a batch; the provider reads the next slice meanwhile
// (at a provider's pacing, the requests are the run's wall time). The
// first page's callback waits until the provider has made more requests;
// without the overlap it would wait forever. A callback that fails stops
// the reading, and its error is returned.
func TestReadingGoesOnWhileAPageIsHandedOn(t *testing.T) {
	t.Parallel()
	w := newSlicedWorld(t, 600)
	whole := w.list(t, 1<<30, 500, w.lp)

	p, err := New(Config{AccessToken: "sandbox_overlap", BaseURL: w.url, Hold: 200, PageSize: 100})
	require.NoError(t, err)
	// Without a spill: the slice read meanwhile must ask GoCardless, not
	// read a slice given up back from disk.
	p.spillMax = -1
	var pages []reconcile.Page
	require.NoError(t, p.ListChanges(context.Background(), w.lp, func(pg reconcile.Page) error {
		if len(pages) == 0 {
			at := p.Requests()
			deadline := time.Now().Add(10 * time.Second)
			for p.Requests() <= at+2 {
				if time.Now().After(deadline) {
					return fmt.Errorf("no request while the first page was handed on (%d requests)", at)
				}
				time.Sleep(time.Millisecond)
			}
		}
		pages = append(pages, pg)
		return nil
	}))
	var events, wholeEvents []string
	for _, pg := range pages {
		for _, e := range pg.Events {
			events = append(events, e.ID)
		}
	}
	for _, pg := range whole.pages {
		for _, e := range pg.Events {
			wholeEvents = append(wholeEvents, e.ID)
		}
	}
	require.Equal(t, wholeEvents, events, "the same events in the same order as one reading of the whole window")

	stop := errors.New("the engine failed")
	p, err = New(Config{AccessToken: "sandbox_overlap", BaseURL: w.url, Hold: 200, PageSize: 100})
	require.NoError(t, err)
	calls := 0
	err = p.ListChanges(context.Background(), w.lp, func(reconcile.Page) error {
		calls++
		if calls == 2 {
			return stop
		}
		return nil
	})
	require.ErrorIs(t, err, stop)
	assert.Equal(t, 2, calls, "no page is handed on after the callback failed")
	sliced := w.list(t, 200, 100, w.lp)
	assert.Less(t, p.Requests(), sliced.requests, "the reading stopped when the callback failed")
}
