// Package transport is the HTTP round tripper every provider client sits on:
// it paces requests to a budget (golang.org/x/time/rate), sends each by the
// one retry policy (internal/retry: an attempt timeout, an overall deadline,
// backoff with jitter, Retry-After and the provider's should-retry header),
// and counts requests by status code.
package transport

import (
	"context"
	"net/http"
	"strconv"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/reconciler/reconciler/clock"
	"github.com/reconciler/reconciler/internal/retry"
)

// Defaults of Options' zero fields.
const (
	// DefaultTimeout bounds one attempt: sending the request, the answer's
	// headers and reading its body.
	DefaultTimeout = 30 * time.Second
	// DefaultDeadline bounds one request: every attempt and every wait
	// between them. It leaves room for 8 retries at the default backoff
	// (about 1 minute of waits in all), or 8 waits of a Retry-After of 10s
	// (the waits grow past 10s from the sixth retry), with attempts
	// answering at once; a provider that hangs for the whole timeout is
	// given up on by the deadline first.
	DefaultDeadline = 3 * time.Minute
)

// Options configures a Transport. The zero value of each field has a
// sensible default.
type Options struct {
	// Base performs the requests; nil means http.DefaultTransport.
	Base http.RoundTripper
	// RequestsPerSecond is the pacing budget; 0 disables pacing.
	RequestsPerSecond float64
	// MaxRetries is how often one request is retried; 0 never retries. A
	// request makes at most MaxRetries+1 attempts.
	MaxRetries int
	// Timeout bounds each attempt (DefaultTimeout when 0); Deadline bounds
	// the request, attempts and waits together (DefaultDeadline when 0).
	// Neither is an http.Client.Timeout: that would bound all attempts
	// together and hide why they failed.
	Timeout, Deadline time.Duration
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
	// Describe words an answer the transport gives up on, from its body
	// (the provider's error type and message, its request id), for the
	// error; nil: the status alone.
	Describe func(resp *http.Response) string
	// Sleep waits for d or until ctx ends; nil means a real timer. Tests
	// inject a fake.
	Sleep func(ctx context.Context, d time.Duration) error
	// Now is the clock the pacer and the deadline read; nil means time.Now.
	Now func() time.Time
}

// Transport is an http.RoundTripper. Only idempotent methods (GET, HEAD) are
// retried; a reconciler never writes to a provider.
type Transport struct {
	o      Options
	policy retry.Policy

	mu       sync.Mutex
	lim      *rate.Limiter // nil: unpaced
	hold     time.Time     // no request starts before (a backoff, a spent budget)
	total    int64
	byStatus map[int]int64 // 0 counts transport errors
	// latency is a moving average of how long answered attempts took to
	// answer (Latency).
	latency time.Duration
}

// New returns a Transport with o's defaults filled in.
func New(o Options) *Transport {
	if o.Base == nil {
		o.Base = http.DefaultTransport
	}
	if o.MinBackoff == 0 {
		o.MinBackoff = retry.DefaultMinBackoff
	}
	if o.MaxBackoff == 0 {
		o.MaxBackoff = retry.DefaultMaxBackoff
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Deadline == 0 {
		o.Deadline = DefaultDeadline
	}
	if o.Sleep == nil {
		o.Sleep = clock.System.Sleep
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	t := &Transport{o: o, byStatus: map[int]int64{}}
	if o.RequestsPerSecond > 0 {
		t.lim = rate.NewLimiter(rate.Limit(o.RequestsPerSecond), 1)
	}
	t.policy = retry.Policy{
		MaxRetries: o.MaxRetries, AttemptTimeout: o.Timeout, Deadline: o.Deadline,
		MinBackoff: o.MinBackoff, MaxBackoff: o.MaxBackoff, ShouldRetryHeader: o.ShouldRetryHeader,
		Now: o.Now, Sleep: o.Sleep,
	}
	return t
}

// Policy is the retry policy every request follows.
func (t *Transport) Policy() retry.Policy { return t.policy }

// Requests returns the number of HTTP requests sent, retries included.
func (t *Transport) Requests() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.total
}

// Latency is how long the provider takes to answer, as seen lately: a
// moving average (each answer a quarter) of the time from an attempt's
// start to its answer's headers, over the successful attempts; 0 before
// the first.
func (t *Transport) Latency() time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.latency
}

// Interval is the time between two requests at the pacing budget; 0 when
// unpaced.
func (t *Transport) Interval() time.Duration {
	if t.o.RequestsPerSecond <= 0 {
		return 0
	}
	return time.Duration(float64(time.Second) / t.o.RequestsPerSecond)
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

// wait blocks until the pacer grants a slot. A backoff (extra) holds every
// request of the transport back, not just this one: the provider's limit
// is the account's. The slot is reserved before the wait so that
// concurrent callers queue behind one another.
func (t *Transport) wait(ctx context.Context, extra time.Duration) error {
	t.mu.Lock()
	now := t.o.Now()
	if extra > 0 && t.hold.Before(now.Add(extra)) {
		t.hold = now.Add(extra)
	}
	at := now
	if t.hold.After(at) {
		at = t.hold
	}
	d := at.Sub(now)
	if t.lim != nil {
		d = t.lim.ReserveN(at, 1).DelayFrom(now)
	}
	t.mu.Unlock()
	return t.o.Sleep(ctx, d)
}

func (t *Transport) observe(a retry.Attempt, resp *http.Response) {
	t.mu.Lock()
	t.total++
	t.byStatus[a.Status]++
	if a.Status >= 200 && a.Status < 300 {
		if t.latency == 0 {
			t.latency = max(a.Took, 1)
		} else {
			t.latency += (a.Took - t.latency) / 4
		}
	}
	t.mu.Unlock()
	t.observeBudget(resp)
}

// RoundTrip sends req, pacing and retrying it.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	p := t.policy
	if req.Method != http.MethodGet && req.Method != http.MethodHead {
		p.MaxRetries = 0
	}
	path := req.URL.Path
	if path == "" {
		path = "/"
	}
	return p.Do(req, req.Method+" "+path, t.o.Base.RoundTrip, retry.Hooks{Wait: t.wait, Observe: t.observe, Describe: t.o.Describe})
}

// observeBudget holds requests back until the provider's reset time when
// the response says the budget is spent.
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
	if reset.After(t.hold) {
		t.hold = reset
	}
	t.mu.Unlock()
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
