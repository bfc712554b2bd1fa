// Package transport is the HTTP round tripper every provider client sits on:
// it paces requests to a budget, retries rate limits and server errors with
// backoff, and counts requests by status code.
package transport

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/reconciler/reconciler/clock"
)

// Options configures a Transport. The zero value of each field has a
// sensible default.
type Options struct {
	// Base performs the requests; nil means http.DefaultTransport.
	Base http.RoundTripper
	// RequestsPerSecond is the pacing budget; 0 disables pacing.
	RequestsPerSecond float64
	// MaxRetries is how often one request is retried; 0 never retries.
	MaxRetries int
	// MinBackoff and MaxBackoff bound the exponential backoff; defaults
	// 250ms and 30s.
	MinBackoff, MaxBackoff time.Duration
	// ShouldRetryHeader names a response header through which the provider
	// says whether a retry can succeed ("Stripe-Should-Retry"); "false" stops
	// retrying, "true" retries a status that would otherwise not be.
	ShouldRetryHeader string
	// RateLimitRemaining and RateLimitReset name response headers through
	// which the provider announces its budget (GoCardless: RateLimit-Remaining
	// and RateLimit-Reset, an HTTP date). When the remaining budget reaches
	// zero, requests wait until the reset instead of provoking 429s.
	RateLimitRemaining, RateLimitReset string
	// Sleep waits for d or until ctx ends; nil means a real timer. Tests
	// inject a fake.
	Sleep func(ctx context.Context, d time.Duration) error
	// Now is the clock the pacer reads; nil means time.Now.
	Now func() time.Time
}

// Transport is an http.RoundTripper. Only idempotent methods (GET, HEAD) are
// retried; a reconciler never writes to a provider.
type Transport struct {
	o Options

	mu       sync.Mutex
	next     time.Time // the pacer's next free slot
	total    int64
	byStatus map[int]int64 // 0 counts transport errors
}

// New returns a Transport with o's defaults filled in.
func New(o Options) *Transport {
	if o.Base == nil {
		o.Base = http.DefaultTransport
	}
	if o.MinBackoff == 0 {
		o.MinBackoff = 250 * time.Millisecond
	}
	if o.MaxBackoff == 0 {
		o.MaxBackoff = 30 * time.Second
	}
	if o.Sleep == nil {
		o.Sleep = clock.System.Sleep
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Transport{o: o, byStatus: map[int]int64{}}
}

// Requests returns the number of HTTP requests sent, retries included.
func (t *Transport) Requests() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.total
}

// ByStatus returns the requests sent by response status code; 0 counts
// requests that got no response.
func (t *Transport) ByStatus() map[int]int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[int]int64, len(t.byStatus))
	for k, v := range t.byStatus {
		out[k] = v
	}
	return out
}

// wait blocks until the pacer grants a slot. The slot is taken before the
// wait so that concurrent callers queue behind one another.
func (t *Transport) wait(ctx context.Context, extra time.Duration) error {
	t.mu.Lock()
	now := t.o.Now()
	slot := t.next
	if slot.Before(now) {
		slot = now
	}
	if extra > 0 && slot.Before(now.Add(extra)) {
		slot = now.Add(extra) // a 429 pushes everyone back, not just this request
	}
	if t.o.RequestsPerSecond > 0 {
		t.next = slot.Add(time.Duration(float64(time.Second) / t.o.RequestsPerSecond))
	} else {
		t.next = slot
	}
	t.mu.Unlock()
	return t.o.Sleep(ctx, slot.Sub(now))
}

func (t *Transport) count(status int) {
	t.mu.Lock()
	t.total++
	t.byStatus[status]++
	t.mu.Unlock()
}

// RoundTrip sends req, pacing and retrying it.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	idempotent := req.Method == http.MethodGet || req.Method == http.MethodHead
	var backoff time.Duration
	for attempt := 0; ; attempt++ {
		if err := t.wait(ctx, backoff); err != nil {
			return nil, err
		}
		resp, err := t.o.Base.RoundTrip(req)
		status := 0
		if resp != nil {
			status = resp.StatusCode
		}
		t.count(status)
		t.observeBudget(resp)
		if !idempotent || attempt >= t.o.MaxRetries || ctx.Err() != nil || !t.retryable(resp, err) {
			return resp, err
		}
		backoff = t.backoff(attempt, resp)
		if resp != nil {
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
			_ = resp.Body.Close()
		}
	}
}

// observeBudget pushes the pacer's next slot to the provider's reset time
// when the response says the budget is spent.
func (t *Transport) observeBudget(resp *http.Response) {
	if resp == nil || t.o.RateLimitRemaining == "" {
		return
	}
	rem, err := strconv.Atoi(resp.Header.Get(t.o.RateLimitRemaining))
	if err != nil || rem > 0 {
		return
	}
	reset, err := http.ParseTime(resp.Header.Get(t.o.RateLimitReset))
	if err != nil {
		return
	}
	if now := t.o.Now(); reset.Sub(now) > t.o.MaxBackoff {
		reset = now.Add(t.o.MaxBackoff) // a clock skew must not stall the run
	}
	t.mu.Lock()
	if reset.After(t.next) {
		t.next = reset
	}
	t.mu.Unlock()
}

func (t *Transport) retryable(resp *http.Response, err error) bool {
	if err != nil {
		return !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
	}
	if h := t.o.ShouldRetryHeader; h != "" {
		switch resp.Header.Get(h) {
		case "false":
			return false
		case "true":
			return true
		}
	}
	return resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500
}

// backoff is exponential with full jitter, at least Retry-After when the
// provider sent one.
func (t *Transport) backoff(attempt int, resp *http.Response) time.Duration {
	d := t.o.MinBackoff << min(attempt, 20)
	if d > t.o.MaxBackoff || d <= 0 {
		d = t.o.MaxBackoff
	}
	d = d/2 + rand.N(d/2+1)
	if resp != nil {
		if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
			if ra := time.Duration(s) * time.Second; ra > d {
				d = min(ra, t.o.MaxBackoff)
			}
		}
	}
	return d
}

// Counter counts one client's requests through a transport that others may
// share, so each run reports its own requests.
type Counter struct {
	Base http.RoundTripper

	mu       sync.Mutex
	total    int64
	byStatus map[int]int64
}

// RoundTrip implements http.RoundTripper. Retries inside Base count once.
func (c *Counter) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := c.Base.RoundTrip(req)
	status := 0
	if resp != nil {
		status = resp.StatusCode
	}
	c.mu.Lock()
	if c.byStatus == nil {
		c.byStatus = map[int]int64{}
	}
	c.total++
	c.byStatus[status]++
	c.mu.Unlock()
	return resp, err
}

// Requests returns the requests counted.
func (c *Counter) Requests() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.total
}
