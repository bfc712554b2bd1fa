package gocardless

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/reconciler/reconciler/internal/tmpfile"
	"github.com/reconciler/reconciler/reconcile"
)

// listedTimes counts, through a proxy in front of the fake, how often
// each payment event was listed with its payment (the pages a slice reads;
// an instant's pages marked past the hold are listed without it).
type listedTimes struct {
	mu   sync.Mutex
	seen map[string]int
}

func (l *listedTimes) proxy(t *testing.T, next http.Handler) string {
	t.Helper()
	l.seen = map[string]int{}
	ts := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if r.URL.Path != "/events" || q.Get("resource_type") != "payments" || q.Get("include") != "payment" || q.Get("action") != "" {
			next.ServeHTTP(rw, r)
			return
		}
		rec := httptest.NewRecorder()
		next.ServeHTTP(rec, r)
		var pg struct {
			Events []struct {
				ID string `json:"id"`
			} `json:"events"`
		}
		if json.Unmarshal(rec.Body.Bytes(), &pg) == nil {
			l.mu.Lock()
			for _, e := range pg.Events {
				l.seen[e.ID]++
			}
			l.mu.Unlock()
		}
		for k, v := range rec.Header() {
			rw.Header()[k] = v
		}
		rw.WriteHeader(rec.Code)
		_, _ = rw.Write(rec.Body.Bytes())
	}))
	t.Cleanup(ts.Close)
	return ts.URL
}

// again is how many payment events were listed with their payment more
// than once, and the most times one was.
func (l *listedTimes) again() (n, most int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range l.seen {
		if c > 1 {
			n++
		}
		most = max(most, c)
	}
	return n, most
}

// TestSlicesGivenUpAreReadBackFromTheSpill: a slice given up (its payment
// events passed the hold) read every payment event of the stretch it
// covered; those pages are kept on disk, and the shorter slices through
// that stretch read them from there rather than asking GoCardless again.
// The window's pages are those of one whole reading with the spill, with
// no spill (a directory that cannot hold one, or the feature off) and with
// a spill too small to keep a slice. With the spill, far fewer payment
// events are listed twice (those left are the instants a slice was given
// up in, read in part, then as slices of their own), none more than twice,
// and the requests fall.
func TestSlicesGivenUpAreReadBackFromTheSpill(t *testing.T) {
	t.Parallel()
	w := newSlicedWorld(t, 3000)
	whole := w.list(t, 1<<30, 500, w.lp)

	type run struct {
		requests    int64
		again, most int
		ahead       int
		log         string
	}
	read := func(t *testing.T, hold int, dir string, most int64, ahead bool) run {
		t.Helper()
		var lt listedTimes
		var logs bytes.Buffer
		p, err := New(Config{AccessToken: "sandbox_spill", BaseURL: lt.proxy(t, w.server.Handler()), Hold: hold, PageSize: 100,
			Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		require.NoError(t, err)
		p.spillDir, p.spillMax, p.noPrefetch = dir, most, !ahead // unpaced, as a test's provider is
		p.spills = tmpfile.NewBudget(1 << 30)                    // not shared with the tests running beside it
		var pages []reconcile.Page
		require.NoError(t, p.ListChanges(context.Background(), w.lp, func(pg reconcile.Page) error {
			// The spill's file is unlinked from the start: nothing to
			// clean up, whatever ends the process. (The callback runs on
			// the provider's goroutine: it returns its failure.)
			// (A file listed ahead may be seen between its creation and
			// its unlinking, a few system calls later.)
			if left, err := os.ReadDir(dir); err == nil && len(left) > 0 {
				time.Sleep(50 * time.Millisecond)
				if _, err := os.Stat(filepath.Join(dir, left[0].Name())); err == nil {
					return fmt.Errorf("the spill's file is visible in its directory: %s", left[0].Name())
				}
			}
			pages = append(pages, pg)
			return nil
		}))
		if left, err := os.ReadDir(dir); err == nil {
			require.Empty(t, left, "files left in the spill's directory")
		}
		// The same events, changes and cursors as one whole reading (whose
		// pages are 500 events long: compare the events in order).
		var got, want []reconcile.Event
		var gotC, wantC []reconcile.Change
		for _, pg := range pages {
			got, gotC = append(got, pg.Events...), append(gotC, pg.Changes...)
		}
		for _, pg := range whole.pages {
			want, wantC = append(want, pg.Events...), append(wantC, pg.Changes...)
		}
		require.Equal(t, want, got)
		require.Equal(t, wantC, gotC)
		r := run{requests: p.Requests(), ahead: p.listedAhead, log: logs.String()}
		r.again, r.most = lt.again()
		return r
	}
	for _, hold := range []int{333, 1500} {
		dir := t.TempDir()
		spilled := read(t, hold, dir, 0, true)
		notAhead := read(t, hold, dir, 0, false)
		off := read(t, hold, "", -1, false)
		unwritable := read(t, hold, filepath.Join(dir, "missing"), 0, true)
		small := read(t, hold, t.TempDir(), 64<<10, true) // less than a page
		t.Logf("hold %d: requests %d with the spill (%d slices listed ahead), %d without listing ahead, %d without the spill, %d spill too small; events listed again %d (at most %d times) with, %d (at most %d) without",
			hold, spilled.requests, spilled.ahead, notAhead.requests, off.requests, small.requests, spilled.again, spilled.most, off.again, off.most)
		// Listing ahead costs no request: each slice listed ahead is the
		// one the window reads next.
		assert.Positive(t, spilled.ahead, "hold %d: no slice was listed ahead", hold)
		assert.Equal(t, notAhead.requests, spilled.requests, "hold %d: requests listing ahead", hold)

		require.Positive(t, off.again, "hold %d: no slice was given up: the month does not test the spill", hold)
		assert.LessOrEqual(t, spilled.most, 2, "hold %d: with the spill, a payment event listed more than twice", hold)
		assert.Less(t, spilled.again*4, off.again, "hold %d: events listed again with the spill", hold)
		assert.Less(t, spilled.requests, off.requests, "hold %d", hold)
		assert.Equal(t, off.requests, unwritable.requests, "hold %d: no spill file, every slice from GoCardless", hold)
		assert.Contains(t, unwritable.log, "could not spill", "hold %d: the missing spill is said", hold)
		assert.NotContains(t, spilled.log, "could not spill")
		// A spill too small for a page keeps none, and lists nothing
		// ahead after the first page that did not fit.
		assert.Equal(t, off.requests+1, small.requests, "hold %d: a spill too small to keep a page", hold)
		assert.NotContains(t, spilled.log+unwritable.log, "sandbox_spill", "the token in a log line")
	}
}

// TestSpillKeepsWithinItsBound: a region whose pages pass the bound is
// let go whole, the file cut back; regions released last first give the
// file's space back.
func TestSpillKeepsWithinItsBound(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	page := []byte(`{"events":[{"id":"EV1","created_at":"2026-12-01T00:00:00.000Z"}],"linked":{},"meta":{"cursors":{"after":null}}}`)
	budget := tmpfile.NewBudget(1 << 20)
	s, err := openSpill(t.TempDir(), int64(3*(len(page)+4)), budget)
	require.NoError(t, err)
	defer s.close()
	size := func() int64 {
		st, err := s.f.Stat()
		require.NoError(t, err)
		return st.Size()
	}

	a := s.begin()
	s.add(a, page, at, at, at)
	s.add(a, page, at, at, at)
	require.True(t, s.keep(a))
	b := s.begin()
	s.add(b, page, at, at, at)
	s.add(b, page, at, at, at) // past the bound
	require.True(t, b.full)
	require.False(t, s.keep(b), "a region past the bound is not kept")
	assert.Equal(t, a.end, size(), "the file cut back to the kept region")

	c := s.begin()
	s.add(c, page, at, at, at)
	require.True(t, s.keep(c))
	var n int
	require.NoError(t, s.pages(c, at, at.Add(time.Millisecond), func(pg *eventsPage) error {
		n++
		assert.Equal(t, page, pg.body)
		assert.Equal(t, at, pg.read)
		assert.JSONEq(t, `{"id":"EV1","created_at":"2026-12-01T00:00:00.000Z"}`, string(pg.Events[0]))
		return nil
	}))
	assert.Equal(t, 1, n)
	require.NoError(t, s.pages(c, at.Add(time.Millisecond), at.Add(time.Hour), func(*eventsPage) error {
		t.Error("a page outside the stretch asked for")
		return nil
	}))

	s.release(a) // not the last: kept until c goes
	assert.Equal(t, c.end, size())
	s.release(c)
	assert.Zero(t, size(), "every region released: the file is empty")
	assert.Empty(t, s.regions)
	assert.EqualValues(t, 1<<20, budget.Left(), "every byte given back to the budget")
}

// TestSpillsShareTheProcessBudget: runs at once share one bound on disk
// (a pod whose /tmp passes its sizeLimit is evicted): a page past what the
// process's spills may still write is not kept, and a spill closed gives
// its bytes back.
func TestSpillsShareTheProcessBudget(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	page := []byte(`{"events":[],"linked":{},"meta":{"cursors":{"after":null}}}`)
	budget := tmpfile.NewBudget(int64(2 * (len(page) + 4)))
	a, err := openSpill(t.TempDir(), 1<<20, budget)
	require.NoError(t, err)
	b, err := openSpill(t.TempDir(), 1<<20, budget)
	require.NoError(t, err)
	defer b.close()

	ra := a.begin()
	a.add(ra, page, at, at, at)
	a.add(ra, page, at, at, at)
	require.False(t, ra.full)
	rb := b.begin()
	b.add(rb, page, at, at, at)
	assert.True(t, rb.full, "the process's budget was spent by the other spill")
	require.False(t, b.keep(rb))

	a.close()
	rb = b.begin()
	b.add(rb, page, at, at, at)
	assert.False(t, rb.full, "a closed spill gives its bytes back")
	assert.True(t, b.keep(rb))
	assert.Zero(t, budget.Left()-int64(len(page)+4))
}

// TestLittleWaitsForTheWindowsLastAnswer: at the provider's pacing a
// window's requests are its wall time, and what the engine still has to
// write once GoCardless has answered the last of them is time the rate
// limit goes unused. GoCardless lists newest first, so what the window's
// first slice reads (the whole window, given up past its cap) is its
// newest stretch, delivered last. The first slice is given up at the
// probe's cap (an eighth of the hold), not the hold: of a window of more
// than 10,000 events read at a hold of 1,500, at most half the hold is
// delivered after the last answer (about 330 events; more than the hold
// before). The bound leaves room for a page or two handed on late on a
// busy machine.
func TestLittleWaitsForTheWindowsLastAnswer(t *testing.T) {
	t.Parallel()
	w := newSlicedWorld(t, 3000)
	var answered atomic.Int64
	ts := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		rec := httptest.NewRecorder()
		w.server.Handler().ServeHTTP(rec, r)
		answered.Add(1) // before the answer leaves: a page counted late is counted in the tail
		for k, v := range rec.Header() {
			rw.Header()[k] = v
		}
		rw.WriteHeader(rec.Code)
		_, _ = rw.Write(rec.Body.Bytes())
	}))
	t.Cleanup(ts.Close)
	const hold = 1500
	p, err := New(Config{AccessToken: "sandbox_tail", BaseURL: ts.URL, Hold: hold, PageSize: 100})
	require.NoError(t, err)
	p.noPrefetch = false // slices listed ahead, as a paced provider lists them
	p.spills = tmpfile.NewBudget(1 << 30)
	type delivered struct {
		answered int64
		events   int
	}
	var pages []delivered
	events := 0
	require.NoError(t, p.ListChanges(context.Background(), w.lp, func(pg reconcile.Page) error {
		pages = append(pages, delivered{answered.Load(), len(pg.Events)})
		events += len(pg.Events)
		return nil
	}))
	last := answered.Load()
	require.Equal(t, p.Requests(), last, "every request answered once (no retries)")
	tail := 0
	for _, d := range pages {
		if d.answered == last {
			tail += d.events
		}
	}
	t.Logf("%d events, %d requests; %d events delivered after the last answer", events, last, tail)
	require.Greater(t, events, 10_000)
	assert.LessOrEqual(t, tail, hold/2, "events delivered after the window's last answer")
}

// TestAWindowThatFitsTheHoldIsOneSlice: the first slice's probe gives the
// window up only when the density of what it read says the window holds
// more than the hold. A month of 3,706 events read at the default hold is
// one slice, with the requests of one whole reading (it was 14 against 11
// when the probe gave every window past its cap up).
func TestAWindowThatFitsTheHoldIsOneSlice(t *testing.T) {
	t.Parallel()
	w := newSlicedWorld(t, 1000)
	whole := w.list(t, 1<<30, 500, w.lp)
	got := w.list(t, DefaultHold, 500, w.lp)
	events := 0
	for _, pg := range got.pages {
		events += len(pg.Events)
	}
	require.Greater(t, events, 2*probeCap(DefaultHold), "the window must pass the probe's cap")
	assert.Equal(t, []int{events}, got.slices, "one slice")
	assert.Equal(t, whole.requests, got.requests, "the requests of one whole reading")
	assert.Equal(t, whole.pages, got.pages)
}
