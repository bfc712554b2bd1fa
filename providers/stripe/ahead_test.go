package stripe_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/reconciler/reconciler/providers/stripe"
	"github.com/reconciler/reconciler/providers/stripe/stripefake"
	"github.com/reconciler/reconciler/reconcile"
)

// listing is what ListChanges handed on: the pages' events, changes and
// cursors, in order.
type listing struct {
	events  []reconcile.Event
	changes []reconcile.Change
	cursors []string
}

func listAll(t *testing.T, p *stripe.Provider, lp reconcile.ListParams) listing {
	t.Helper()
	var l listing
	require.NoError(t, p.ListChanges(context.Background(), lp, func(pg reconcile.Page) error {
		l.events = append(l.events, pg.Events...)
		l.changes = append(l.changes, pg.Changes...)
		l.cursors = append(l.cursors, pg.Cursor)
		return nil
	}))
	return l
}

// aheadAccount is a fake account whose window holds about payments
// payments created over span before now: dense enough (span short) that
// a second holds several events, so that read-aheads meet the stream
// inside seconds.
func aheadAccount(t *testing.T, payments int, span time.Duration, anchor bool) (u string, lp reconcile.ListParams) {
	t.Helper()
	_, a, u := aheadFake(t, 11, anchor)
	a.Generate(stripefake.GenOptions{Payments: payments, Start: now.Add(-span), End: now.Add(-time.Minute), Seed: 9})
	return u, reconcile.ListParams{Since: now.Add(-span - time.Hour), Until: now}
}

// aheadFake starts a fake Stripe and returns it, its platform account and
// its URL; anchored, the account has a payment 40 hours before now (an
// event before the windows the tests list).
func aheadFake(t *testing.T, seed int64, anchor bool) (*stripefake.Server, *stripefake.Account, string) {
	t.Helper()
	fake := stripefake.New(stripefake.Options{Now: func() time.Time { return now }, Seed: seed})
	u := fake.Start()
	t.Cleanup(fake.Close)
	a := fake.Account("")
	if anchor {
		a.CreatePayment(100, "gbp", false, now.Add(-40*time.Hour))
	}
	return fake, a, u
}

func aheadProvider(t *testing.T, u string, cfg stripe.Config) *stripe.Provider {
	t.Helper()
	cfg.APIKey, cfg.BaseURL, cfg.MaxRetries = "sk_test_x", u, 3
	cfg.Sleep = func(ctx context.Context, _ time.Duration) error { return ctx.Err() }
	p, err := stripe.New(cfg)
	require.NoError(t, err)
	return p
}

// TestReadAheadDeliversWhatTheStreamDoes: with read-aheads taken over and
// over (a few hundred events each, so that they meet the stream inside
// seconds of several events), ListChanges hands on the same events, in the
// same order, with the same changes and pages, as the stream alone; a
// read-ahead costs at most two requests more; and no file is left behind.
func TestReadAheadDeliversWhatTheStreamDoes(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name     string
		payments int
		span     time.Duration
		anchor   bool
		page     int64
		n        int
	}{
		{"dense, anchored, 100 a page, 250 ahead", 1500, 40 * time.Minute, true, 100, 250},
		{"dense, anchored, 37 a page, 90 ahead", 1500, 40 * time.Minute, true, 37, 90},
		{"sparse days, anchored, 100 a page, 400 ahead", 1500, 30 * time.Hour, true, 100, 400},
		// Daily payouts sweeping charges two days old: their balance
		// transactions are listed ahead too (payoutahead.go).
		{"four days of payouts, anchored, 100 a page, 300 ahead", 2000, 96 * time.Hour, true, 100, 300},
		{"young account (no anchor), 100 a page, 300 ahead", 1200, 2 * time.Hour, false, 100, 300},
	} {
		t.Run(c.name, func(t *testing.T) {
			u, lp := aheadAccount(t, c.payments, c.span, c.anchor)
			base := aheadProvider(t, u, stripe.Config{PageSize: c.page})
			want := listAll(t, base, lp)
			require.Greater(t, len(want.events), 2000, "a window long enough for several read-aheads")

			dir := t.TempDir()
			p := aheadProvider(t, u, stripe.Config{PageSize: c.page, ReadAhead: true, ReadAheadEvents: c.n, ReadAheadDir: dir})
			got := listAll(t, p, lp)
			requireSameListing(t, want, got)
			taken := p.ReadAheadsTaken()
			require.GreaterOrEqual(t, taken, int64(3), "read-aheads the stream went on from")
			require.LessOrEqual(t, p.Requests(), base.Requests()+2*taken+2,
				"requests: %d alone, %d with %d read-aheads", base.Requests(), p.Requests(), taken)
			left, err := os.ReadDir(dir)
			require.NoError(t, err)
			require.Empty(t, left, "a read-ahead's file is unlinked when made")

			// Resumed from a cursor in the middle: the rest of the window.
			requireResumes(t, aheadProvider(t, u, stripe.Config{PageSize: c.page, ReadAhead: true, ReadAheadEvents: c.n, ReadAheadDir: dir}),
				lp, want, want.cursors[len(want.cursors)/2])
		})
	}
}

// TestReadAheadCutShort: stretches planned at a density the window does not
// keep (a quiet day, then a burst), or more than the read-aheads' bound on
// disk holds, are listed in part: such a read-ahead is cut short, at a
// page's end, and the stream reads on to where it began, meeting it inside
// a second, instead of going on from the stretch before; the listing is
// the same.
func TestReadAheadCutShort(t *testing.T) {
	t.Parallel()
	_, a, u := aheadFake(t, 12, true)
	a.Generate(stripefake.GenOptions{Payments: 150, Start: now.Add(-30 * time.Hour), End: now.Add(-3 * time.Hour), Seed: 5})
	a.Generate(stripefake.GenOptions{Payments: 1500, Start: now.Add(-3 * time.Hour), End: now.Add(-2*time.Hour - 50*time.Minute), Seed: 6})
	a.Generate(stripefake.GenOptions{Payments: 100, Start: now.Add(-2*time.Hour - 50*time.Minute), End: now.Add(-time.Minute), Seed: 7})
	lp := reconcile.ListParams{Since: now.Add(-31 * time.Hour), Until: now}
	for _, c := range []struct {
		page int64
		n    int
		most int64 // ReadAheadMax: the read-aheads listing at once share it
	}{{100, 80, 0}, {100, 150, 0}, {37, 40, 0}, {100, 150, 150 << 10}, {37, 60, 60 << 10}} {
		want := listAll(t, aheadProvider(t, u, stripe.Config{PageSize: c.page}), lp)
		p := aheadProvider(t, u, stripe.Config{PageSize: c.page, ReadAhead: true, ReadAheadEvents: c.n, ReadAheadMax: c.most})
		requireSameListing(t, want, listAll(t, p, lp))
		require.Positive(t, p.ReadAheadsTaken())
	}
}

// TestReadAheadWithinItsBounds: a read-ahead stops at the process's bound
// on its files (the stream reads the rest), and without a temp directory
// there is none (one warning); either way the same listing.
func TestReadAheadWithinItsBounds(t *testing.T) {
	t.Parallel()
	u, lp := aheadAccount(t, 1500, 40*time.Minute, true)
	want := listAll(t, aheadProvider(t, u, stripe.Config{}), lp)

	small := aheadProvider(t, u, stripe.Config{ReadAhead: true, ReadAheadEvents: 400, ReadAheadMax: 64 << 10})
	requireSameListing(t, want, listAll(t, small, lp))
	require.Positive(t, small.ReadAheadsTaken(), "a read-ahead cut short by the bound is still taken")

	var logs bytes.Buffer
	var mu sync.Mutex
	none := aheadProvider(t, u, stripe.Config{ReadAhead: true, ReadAheadDir: "/nonexistent/reconciler",
		Logger: slog.New(slog.NewTextHandler(lockedWriter{&logs, &mu}, nil))})
	requireSameListing(t, want, listAll(t, none, lp))
	require.Zero(t, none.ReadAheadsTaken())
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, 1, strings.Count(logs.String(), "stripe read-ahead has no temp file"), "one warning, then no read-ahead: %s", logs.String())
}

// TestReadAheadThatDisagreesIsLetGo: a server whose lists from the newest
// end give each second's events in another order than its cursor's pages
// (Stripe documents one order; a proxy reverses it here) is caught where a
// read-ahead meets the stream: the read-ahead is let go and the stream
// reads on by itself, the listing the same.
func TestReadAheadThatDisagreesIsLetGo(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name     string
		payments int
		span     time.Duration
		page     int64
		n        int
	}{
		// Pages of 100: most meetings are inside a page, where the rest of
		// the page tells the two orders apart.
		{"100 a page", 1500, 20 * time.Minute, 100, 300},
		// The stream's pages cut to their oldest event (page 1): nothing of
		// a page is left after the event where they meet, so the
		// read-aheads are taken; the second they met in, and the newest
		// second of each, come in the read-ahead's order and none twice.
		{"the stream's pages of one event", 300, 3 * time.Minute, 1, 150},
	} {
		t.Run(c.name, func(t *testing.T) {
			u, lp := aheadAccount(t, c.payments, c.span, true)
			want := listAll(t, aheadProvider(t, u, stripe.Config{}), lp)
			p := aheadProvider(t, reorderingProxy(t, u, c.page == 1), stripe.Config{ReadAhead: true, ReadAheadEvents: c.n})
			got := listAll(t, p, lp)
			require.ElementsMatch(t, ids(want.events), ids(got.events), "every event once")
			for i := 1; i < len(got.events); i++ {
				require.False(t, got.events[i].At.Before(got.events[i-1].At), "oldest second first, at %d", i)
			}
			require.Equal(t, len(want.changes), len(got.changes), "as many changes")
			if c.page == 1 {
				require.Positive(t, p.ReadAheadsTaken())
			} else {
				require.Less(t, p.ReadAheadsTaken(), int64(len(want.events)/c.n), "most read-aheads let go where they met the stream")
			}
		})
	}
}

// reorderingProxy serves the fake at u, except that the events lists a
// read-ahead asks for (created[lt], no ending_before) give each second's
// events in the reverse of the fake's order; with single, the stream's
// pages (ending_before) hold only their oldest event.
func reorderingProxy(t *testing.T, u string, single bool) string {
	return proxy(t, u, nil, func(r *http.Request, q url.Values, body []byte) []byte {
		if r.URL.Path != "/v1/events" {
			return body
		}
		switch {
		case q.Get("ending_before") == "" && q.Get("created[lt]") != "":
			return reverseSeconds(body)
		case q.Get("ending_before") != "" && single:
			return oldestOnly(body)
		}
		return body
	})
}

// proxy serves the fake at u through intercept, which answers a request
// itself when it reports true (nil: none); the fake's successful answers
// go back through rewrite (nil: as they came).
func proxy(t *testing.T, u string, intercept func(w http.ResponseWriter, r *http.Request, q url.Values) bool, rewrite func(r *http.Request, q url.Values, body []byte) []byte) string {
	target, err := url.Parse(u)
	require.NoError(t, err)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q, _ := url.ParseQuery(r.URL.RawQuery)
		if intercept != nil && intercept(w, r, q) {
			return
		}
		r.URL.Scheme, r.URL.Host, r.RequestURI = target.Scheme, target.Host, ""
		resp, err := http.DefaultTransport.RoundTrip(r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if rewrite != nil && resp.StatusCode == http.StatusOK {
			body = rewrite(r, q, body)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(resp.StatusCode)
		_, _ = w.Write(body)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestReadAheadThatFailsIsLetGo: a read-ahead whose requests Stripe refuses
// is let go with a warning (naming the status, never the key), none is
// started again, and the stream reads the window itself: the same listing.
func TestReadAheadThatFailsIsLetGo(t *testing.T) {
	t.Parallel()
	u, lp := aheadAccount(t, 1500, 40*time.Minute, true)
	want := listAll(t, aheadProvider(t, u, stripe.Config{}), lp)
	refused := 0
	var mu sync.Mutex
	refusing := proxy(t, u, func(w http.ResponseWriter, r *http.Request, q url.Values) bool {
		if r.URL.Path != "/v1/events" || q.Get("ending_before") != "" || q.Get("created[lt]") == "" || q.Get("limit") == "1" {
			return false // the stream's pages and its anchor
		}
		mu.Lock()
		refused++
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = io.WriteString(w, `{"error":{"type":"invalid_request_error","message":"no stretches today"}}`)
		return true
	}, nil)
	var logs bytes.Buffer
	var logMu sync.Mutex
	p := aheadProvider(t, refusing, stripe.Config{ReadAhead: true, ReadAheadEvents: 300,
		Logger: slog.New(slog.NewTextHandler(lockedWriter{&logs, &logMu}, nil))})
	requireSameListing(t, want, listAll(t, p, lp))
	require.Zero(t, p.ReadAheadsTaken())
	mu.Lock()
	require.Positive(t, refused, "read-aheads were tried")
	// Three start at once, and the window's payout events are listed once
	// (payoutahead.go), refused alike.
	require.LessOrEqual(t, refused, 3+1, "none started once one failed (three start at once)")
	mu.Unlock()
	logMu.Lock()
	defer logMu.Unlock()
	require.Contains(t, logs.String(), "stripe read-ahead failed")
	require.Contains(t, logs.String(), "no stretches today")
	require.NotContains(t, logs.String(), "sk_test_x")
}

type lockedWriter struct {
	w  io.Writer
	mu *sync.Mutex
}

func (l lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

// reverseSeconds reverses the order of each run of events of one second in
// a list page; a body it cannot read (a request the client canceled) goes
// on as it came.
func reverseSeconds(body []byte) []byte {
	var page map[string]json.RawMessage
	var data []json.RawMessage
	if json.Unmarshal(body, &page) != nil || json.Unmarshal(page["data"], &data) != nil {
		return body
	}
	created := make([]int64, len(data))
	for i, m := range data {
		var e struct {
			Created int64 `json:"created"`
		}
		if json.Unmarshal(m, &e) != nil {
			return body
		}
		created[i] = e.Created
	}
	for i := 0; i < len(data); {
		j := i
		for j < len(data) && created[j] == created[i] {
			j++
		}
		for a, b := i, j-1; a < b; a, b = a+1, b-1 {
			data[a], data[b] = data[b], data[a]
		}
		i = j
	}
	out, err := json.Marshal(data)
	if err != nil {
		return body
	}
	page["data"] = out
	if body, err = json.Marshal(page); err != nil {
		panic(err)
	}
	return body
}

// oldestOnly keeps the last (oldest) event of a list page, with has_more
// when it held more.
func oldestOnly(body []byte) []byte {
	var page map[string]json.RawMessage
	var data []json.RawMessage
	if json.Unmarshal(body, &page) != nil || json.Unmarshal(page["data"], &data) != nil || len(data) < 2 {
		return body
	}
	page["data"], _ = json.Marshal(data[len(data)-1:])
	page["has_more"] = json.RawMessage("true")
	out, err := json.Marshal(page)
	if err != nil {
		panic(err)
	}
	return out
}

func requireSameListing(t *testing.T, want, got listing) {
	t.Helper()
	require.Equal(t, ids(want.events), ids(got.events), "the events, in order")
	require.Equal(t, len(want.changes), len(got.changes), "as many changes")
	for i := range want.changes {
		require.Equal(t, want.changes[i], got.changes[i], "change %d", i)
	}
	require.Equal(t, want.cursors, got.cursors, "the pages' cursors")
	for i := range want.events {
		require.JSONEq(t, string(want.events[i].Payload), string(got.events[i].Payload), "event %s's payload", want.events[i].ID)
	}
}

func ids(evs []reconcile.Event) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.ID
	}
	return out
}

// TestReadAheadSplitDeliversTheSame: with Stripe answering late, the
// stretches the stream waits for once the window's end is queued are split
// whenever a read-ahead's slot is free (the older half of a stretch's
// unlisted rest listed beside it), and ListChanges hands on the same
// events, changes, pages and cursors as the stream alone, at pages of 37
// and 100, from a cursor too; no file is left behind.
func TestReadAheadSplitDeliversTheSame(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		page int64
		n    int
	}{
		{"37 a page, 600 ahead", 37, 600},
		{"100 a page, 1000 ahead", 100, 1000},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			fake, a, u := aheadFake(t, 13, true)
			a.Generate(stripefake.GenOptions{Payments: 1500, Start: now.Add(-6 * time.Hour), End: now.Add(-time.Minute), Seed: 8})
			lp := reconcile.ListParams{Since: now.Add(-7 * time.Hour), Until: now}
			base := aheadProvider(t, u, stripe.Config{PageSize: c.page})
			want := listAll(t, base, lp)

			fake.SetLatency(15 * time.Millisecond)
			dir := t.TempDir()
			p := aheadProvider(t, u, stripe.Config{PageSize: c.page, ReadAhead: true, ReadAheadEvents: c.n, ReadAheadDir: dir})
			got := listAll(t, p, lp)
			requireSameListing(t, want, got)
			require.Positive(t, p.ReadAheadsSplit(), "stretches split while the stream waited")
			require.LessOrEqual(t, p.Requests(), base.Requests()+2*(p.ReadAheadsTaken()+p.ReadAheadsSplit())+2,
				"requests: %d alone, %d with %d read-aheads, %d split", base.Requests(), p.Requests(), p.ReadAheadsTaken(), p.ReadAheadsSplit())
			left, err := os.ReadDir(dir)
			require.NoError(t, err)
			require.Empty(t, left)

			requireResumes(t, aheadProvider(t, u, stripe.Config{PageSize: c.page, ReadAhead: true, ReadAheadEvents: c.n, ReadAheadDir: dir}),
				lp, want, want.cursors[len(want.cursors)/3])
		})
	}
}

// requireResumes: a run resumed after cursor (one of want's) hands on the
// rest of want's events, in order.
func requireResumes(t *testing.T, p *stripe.Provider, lp reconcile.ListParams, want listing, cursor string) {
	t.Helper()
	i := 0
	for want.events[i].ID != cursor {
		i++
	}
	r := listAll(t, p, reconcile.ListParams{Since: lp.Since, Until: lp.Until, After: cursor})
	require.Equal(t, ids(want.events[i+1:]), ids(r.events), "resumed after %s", cursor)
}
