package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/reconciler/reconciler/internal/retry"
)

type fakeClock struct {
	mu    sync.Mutex
	t     time.Time
	slept []time.Duration
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) sleep(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if d > 0 {
		c.slept = append(c.slept, d)
		c.t = c.t.Add(d)
	}
	return ctx.Err()
}

func server(t *testing.T, h func(n int64, w http.ResponseWriter)) (*httptest.Server, *atomic.Int64) {
	var n atomic.Int64
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { h(n.Add(1), w) }))
	t.Cleanup(s.Close)
	return s, &n
}

func get(t *testing.T, tr *Transport, url string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}

func TestRetries429And5xxThenSucceeds(t *testing.T) {
	s, n := server(t, func(n int64, w http.ResponseWriter) {
		switch n {
		case 1, 2:
			w.WriteHeader(429)
		case 3:
			w.WriteHeader(503)
		default:
			w.WriteHeader(200)
		}
	})
	c := &fakeClock{t: time.Unix(0, 0)}
	tr := New(Options{Sleep: c.sleep, Now: c.now, MaxRetries: 8})
	if resp := get(t, tr, s.URL); resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if n.Load() != 4 || tr.Requests() != 4 {
		t.Fatalf("requests: server %d, counted %d", n.Load(), tr.Requests())
	}
	if by := tr.ByStatus(); by[429] != 2 || by[503] != 1 || by[200] != 1 {
		t.Fatalf("by status %v", by)
	}
	if len(c.slept) != 3 {
		t.Fatalf("backoffs %v", c.slept)
	}
}

func TestShouldRetryFalseStopsAndRetryAfterIsHonoured(t *testing.T) {
	s, n := server(t, func(n int64, w http.ResponseWriter) {
		w.Header().Set("Stripe-Should-Retry", "false")
		w.WriteHeader(500)
	})
	c := &fakeClock{t: time.Unix(0, 0)}
	tr := New(Options{Sleep: c.sleep, Now: c.now, ShouldRetryHeader: "Stripe-Should-Retry"})
	if resp := get(t, tr, s.URL); resp.StatusCode != 500 || n.Load() != 1 {
		t.Fatalf("status %d after %d requests; Stripe-Should-Retry: false must stop retrying", resp.StatusCode, n.Load())
	}

	s2, _ := server(t, func(n int64, w http.ResponseWriter) {
		if n == 1 {
			w.Header().Set("Retry-After", "7")
			w.WriteHeader(429)
			return
		}
		w.WriteHeader(200)
	})
	c2 := &fakeClock{t: time.Unix(0, 0)}
	tr2 := New(Options{Sleep: c2.sleep, Now: c2.now, MaxRetries: 8})
	get(t, tr2, s2.URL)
	if len(c2.slept) != 1 || c2.slept[0] < 7*time.Second {
		t.Fatalf("slept %v, want at least Retry-After 7s", c2.slept)
	}
}

func TestGivesUpAfterMaxRetries(t *testing.T) {
	s, n := server(t, func(_ int64, w http.ResponseWriter) { w.WriteHeader(429) })
	c := &fakeClock{t: time.Unix(0, 0)}
	tr := New(Options{Sleep: c.sleep, Now: c.now, MaxRetries: 3})
	_, err := do(tr, s.URL+"/v1/events")
	var re *retry.Error
	if !errors.As(err, &re) || !errors.Is(err, retry.ErrExhausted) || n.Load() != 4 || re.Attempts != 4 {
		t.Fatalf("err %v after %d requests; want retries exhausted after 4", err, n.Load())
	}
	// Backoff grows and stays within bounds.
	for _, d := range c.slept {
		if d <= 0 || d > 45*time.Second {
			t.Fatalf("backoff %v out of bounds", d)
		}
	}
}

func do(tr *Transport, url string) (*http.Response, error) {
	return doCtx(context.Background(), tr, url)
}

func doCtx(ctx context.Context, tr *Transport, url string) (*http.Response, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := tr.RoundTrip(req)
	if err == nil {
		_, err = io.ReadAll(resp.Body)
		resp.Body.Close()
	}
	return resp, err
}

// The first case: a provider answering 429 with Retry-After: 10.
// max_retries 8 must mean 9 attempts, each wait at least 10s, all within
// the documented deadline, and the error must name the last answer.
func TestRateLimitedMakesMaxRetriesPlusOneAttemptsWithinTheDeadline(t *testing.T) {
	s, n := server(t, func(_ int64, w http.ResponseWriter) {
		w.Header().Set("Retry-After", "10")
		w.WriteHeader(429)
	})
	c := &fakeClock{t: time.Unix(0, 0)}
	tr := New(Options{Sleep: c.sleep, Now: c.now, MaxRetries: 8, RequestsPerSecond: 20})
	_, err := do(tr, s.URL+"/v1/events")
	if n.Load() != 9 || tr.Requests() != 9 {
		t.Fatalf("%d requests (counted %d), want max_retries+1 = 9", n.Load(), tr.Requests())
	}
	elapsed := c.now().Sub(time.Unix(0, 0))
	if elapsed > DefaultDeadline || elapsed < 80*time.Second {
		t.Fatalf("took %v; want 8 waits of at least 10s within the deadline %v", elapsed, DefaultDeadline)
	}
	for _, d := range c.slept {
		if d < 10*time.Second {
			t.Fatalf("waited %v < Retry-After 10s (all: %v)", d, c.slept)
		}
	}
	msg := fmt.Sprint(err)
	for _, want := range []string{"GET /v1/events: gave up after 9 attempts in ", "last answer HTTP 429 Too Many Requests (Retry-After 10s)"} {
		if !strings.Contains(msg, want) {
			t.Fatalf("error %q does not say %q", msg, want)
		}
	}
	if strings.Contains(msg, "Timeout") || !errors.Is(err, retry.ErrExhausted) {
		t.Fatalf("error %q: want retries exhausted, not a client timeout", msg)
	}
}

// The second case: the provider unreachable.
func TestUnreachableMakesMaxRetriesPlusOneAttemptsAndNamesTheLastError(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now: connection refused
	c := &fakeClock{t: time.Unix(0, 0)}
	tr := New(Options{Sleep: c.sleep, Now: c.now, MaxRetries: 8})
	_, err = do(tr, "http://"+addr+"/v1/events")
	if tr.Requests() != 9 || tr.ByStatus()[0] != 9 {
		t.Fatalf("%d attempts (%v), want 9", tr.Requests(), tr.ByStatus())
	}
	if elapsed := c.now().Sub(time.Unix(0, 0)); elapsed > DefaultDeadline {
		t.Fatalf("took %v, past the deadline %v", elapsed, DefaultDeadline)
	}
	msg := fmt.Sprint(err)
	if !strings.Contains(msg, "gave up after 9 attempts") || !strings.Contains(msg, "last error: dial tcp "+addr) ||
		!strings.Contains(msg, "connection refused") {
		t.Fatalf("error %q: want the attempts and the last dial error", msg)
	}
}

func TestRetryAfterAsHTTPDateIsHonoured(t *testing.T) {
	c := &fakeClock{t: time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)}
	at := c.t.Add(42 * time.Second).Format(http.TimeFormat)
	s, n := server(t, func(n int64, w http.ResponseWriter) {
		if n == 1 {
			w.Header().Set("Retry-After", at)
			w.WriteHeader(503)
			return
		}
		w.WriteHeader(200)
	})
	tr := New(Options{Sleep: c.sleep, Now: c.now, MaxRetries: 8})
	if resp, err := do(tr, s.URL); err != nil || resp.StatusCode != 200 || n.Load() != 2 {
		t.Fatalf("%v after %d requests", err, n.Load())
	}
	if len(c.slept) != 1 || c.slept[0] != 42*time.Second {
		t.Fatalf("slept %v, want one wait of 42s until the Retry-After date", c.slept)
	}
}

func TestShouldRetryTrueRetriesAConflict(t *testing.T) {
	s, n := server(t, func(n int64, w http.ResponseWriter) {
		if n == 1 {
			w.Header().Set("Stripe-Should-Retry", "true")
			w.WriteHeader(409)
			return
		}
		w.WriteHeader(200)
	})
	c := &fakeClock{t: time.Unix(0, 0)}
	tr := New(Options{Sleep: c.sleep, Now: c.now, MaxRetries: 8, ShouldRetryHeader: "Stripe-Should-Retry"})
	if resp, err := do(tr, s.URL); err != nil || resp.StatusCode != 200 || n.Load() != 2 {
		t.Fatalf("%v after %d requests; Stripe-Should-Retry: true must retry a 409", err, n.Load())
	}
	// Without the header a 409 is the caller's answer.
	s2, n2 := server(t, func(_ int64, w http.ResponseWriter) { w.WriteHeader(409) })
	if resp, err := do(tr, s2.URL); err != nil || resp.StatusCode != 409 || n2.Load() != 1 {
		t.Fatalf("%v after %d requests; a plain 409 is not retried", err, n2.Load())
	}
}

// A hanging attempt times out on its own; the next attempt succeeds.
func TestAttemptTimeoutFailsOneAttemptAndTheNextSucceeds(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	var n atomic.Int64
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			select {
			case <-r.Context().Done():
			case <-release:
			}
			return
		}
		w.Write([]byte("ok"))
	}))
	defer s.Close()
	c := &fakeClock{t: time.Unix(0, 0)}
	tr := New(Options{Sleep: c.sleep, Now: c.now, MaxRetries: 8, Timeout: 100 * time.Millisecond})
	start := time.Now()
	resp, err := do(tr, s.URL)
	if err != nil || resp.StatusCode != 200 || n.Load() != 2 {
		t.Fatalf("%v after %d requests", err, n.Load())
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("took %v: the attempt timeout was not applied", d)
	}
	if by := tr.ByStatus(); by[0] != 1 || by[200] != 1 {
		t.Fatalf("by status %v, want one timed-out attempt and one answer", by)
	}
}

// The overall deadline is reported as the deadline: a Retry-After that
// would pass it ends the request at once, naming it.
func TestDeadlineIsReportedAsSuch(t *testing.T) {
	s, n := server(t, func(_ int64, w http.ResponseWriter) {
		w.Header().Set("Retry-After", "10")
		w.WriteHeader(429)
	})
	c := &fakeClock{t: time.Unix(0, 0)}
	tr := New(Options{Sleep: c.sleep, Now: c.now, MaxRetries: 8, Deadline: 25 * time.Second})
	_, err := do(tr, s.URL+"/v1/events")
	if n.Load() != 3 || !errors.Is(err, retry.ErrDeadline) {
		t.Fatalf("%v after %d requests; want the deadline after 3 (waits of 10s in 25s)", err, n.Load())
	}
	if msg := err.Error(); !strings.Contains(msg, "would pass the request deadline of 25s") || !strings.Contains(msg, "last answer HTTP 429") {
		t.Fatalf("error %q does not name the deadline and the last answer", msg)
	}

	// A hanging provider: the deadline ends the attempt in flight.
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }))
	defer hang.Close()
	tr2 := New(Options{MaxRetries: 8, Timeout: time.Minute, Deadline: 200 * time.Millisecond})
	start := time.Now()
	_, err = do(tr2, hang.URL+"/v1/events")
	if d := time.Since(start); !errors.Is(err, retry.ErrDeadline) || d > 5*time.Second || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v after %v; want the request deadline of 200ms", err, d)
	}
	if !strings.Contains(err.Error(), "request deadline of 200ms passed after 1 attempt") {
		t.Fatalf("error %q", err)
	}
}

func TestPacingSpacesRequests(t *testing.T) {
	s, _ := server(t, func(_ int64, w http.ResponseWriter) { w.WriteHeader(200) })
	c := &fakeClock{t: time.Unix(0, 0)}
	tr := New(Options{Sleep: c.sleep, Now: c.now, RequestsPerSecond: 10})
	for range 11 {
		get(t, tr, s.URL)
	}
	// 11 requests at 10/s: the last starts 1s after the first.
	if got := c.now().Sub(time.Unix(0, 0)); got != time.Second {
		t.Fatalf("11 requests took %v of paced time, want 1s", got)
	}
}

func TestCanceledContextStopsWaiting(t *testing.T) {
	s, n := server(t, func(_ int64, w http.ResponseWriter) { w.WriteHeader(429) })
	tr := New(Options{MinBackoff: time.Hour, MaxBackoff: time.Hour, MaxRetries: 3, Deadline: 10 * time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel) // SIGTERM during the backoff
	start := time.Now()
	_, err := doCtx(ctx, tr, s.URL)
	if err == nil || time.Since(start) > 5*time.Second || !errors.Is(err, context.Canceled) || n.Load() != 1 {
		t.Fatalf("err %v after %v and %d requests; a canceled context must end the backoff at once", err, time.Since(start), n.Load())
	}
	if !strings.Contains(err.Error(), "stopped after 1 attempt") {
		t.Fatalf("error %q", err)
	}
}

func TestRateLimitHeadersDelayUntilReset(t *testing.T) {
	c := &fakeClock{t: time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)}
	reset := c.t.Add(7 * time.Second)
	s, _ := server(t, func(n int64, w http.ResponseWriter) {
		w.Header().Set("RateLimit-Remaining", map[bool]string{true: "0", false: "5"}[n == 1])
		w.Header().Set("RateLimit-Reset", reset.Format(http.TimeFormat))
		w.WriteHeader(200)
	})
	tr := New(Options{Sleep: c.sleep, Now: c.now, RateLimitRemaining: "RateLimit-Remaining", RateLimitReset: "RateLimit-Reset"})
	get(t, tr, s.URL) // spends the budget
	get(t, tr, s.URL) // must wait for the reset
	if len(c.slept) != 1 || c.slept[0] != 7*time.Second {
		t.Fatalf("slept %v, want one wait of 7s until the reset", c.slept)
	}
}

// answerIn is a provider that answers each request after the next of its
// delays on the clock c, with the next of its statuses.
type answerIn struct {
	c        *fakeClock
	delays   []time.Duration
	statuses []int
	n        int
}

func (a *answerIn) RoundTrip(req *http.Request) (*http.Response, error) {
	a.c.mu.Lock()
	a.c.t = a.c.t.Add(a.delays[a.n])
	a.c.mu.Unlock()
	st := a.statuses[a.n]
	a.n++
	return &http.Response{StatusCode: st, Header: http.Header{}, Body: io.NopCloser(strings.NewReader("")), Request: req}, nil
}

// Latency is a moving average of the answered attempts' times, each new
// answer a quarter of it, the first taken whole; failed answers (a 429, a
// 500) are not part of it, whatever they took. Interval is the pacing
// budget's period, 0 unpaced. (Stripe's read-ahead starts on them.)
func TestLatencyAndInterval(t *testing.T) {
	c := &fakeClock{t: time.Unix(0, 0)}
	ms := time.Millisecond
	a := &answerIn{c: c,
		delays:   []time.Duration{100 * ms, 500 * ms, 20 * ms, 900 * ms, 60 * ms, 60 * ms},
		statuses: []int{200, 200, 200, 429, 500, 200}}
	tr := New(Options{Base: a, Sleep: c.sleep, Now: c.now, MaxRetries: 8, MinBackoff: ms, MaxBackoff: ms})
	if got := tr.Latency(); got != 0 {
		t.Fatalf("latency before any answer: %v", got)
	}
	want := []time.Duration{100 * ms, 200 * ms, 155 * ms}
	for i, w := range want {
		get(t, tr, "http://provider.invalid/v1/events")
		if got := tr.Latency(); got != w {
			t.Fatalf("after answer %d: latency %v, want %v", i+1, got, w)
		}
	}
	// The 429 and the 500 are retried; only the 200 after them counts.
	get(t, tr, "http://provider.invalid/v1/events")
	if got, w := tr.Latency(), 155*ms+(60*ms-155*ms)/4; got != w {
		t.Fatalf("after two failed attempts and an answer: latency %v, want %v", got, w)
	}
	if tr.Interval() != 0 {
		t.Fatalf("unpaced: interval %v", tr.Interval())
	}
	if got := New(Options{RequestsPerSecond: 20}).Interval(); got != 50*ms {
		t.Fatalf("20 requests/s: interval %v", got)
	}
	if got := New(Options{RequestsPerSecond: 10}).Interval(); got != 100*ms {
		t.Fatalf("10 requests/s: interval %v", got)
	}
}
