package transport

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"
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
	if resp := get(t, tr, s.URL); resp.StatusCode != 429 || n.Load() != 4 {
		t.Fatalf("status %d after %d requests", resp.StatusCode, n.Load())
	}
	// Backoff grows and stays within bounds.
	for _, d := range c.slept {
		if d <= 0 || d > 30*time.Second {
			t.Fatalf("backoff %v out of bounds", d)
		}
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
	s, _ := server(t, func(_ int64, w http.ResponseWriter) { w.WriteHeader(429) })
	tr := New(Options{MinBackoff: time.Hour, MaxBackoff: time.Hour, MaxRetries: 3})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.URL, nil)
	start := time.Now()
	_, err := (&http.Client{Transport: tr}).Do(req)
	if err == nil || time.Since(start) > 5*time.Second {
		t.Fatalf("err %v after %v; a canceled context must end the backoff", err, time.Since(start))
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
