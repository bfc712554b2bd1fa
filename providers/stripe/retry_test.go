package stripe_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/reconciler/reconciler/internal/retry"
	"github.com/reconciler/reconciler/providers/stripe"
	"github.com/reconciler/reconciler/providers/stripe/stripefake"
	"github.com/reconciler/reconciler/reconcile"
)

// stepClock is a stubbed clock whose sleeps advance it.
type stepClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *stepClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

func (c *stepClock) sleep(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	c.t = c.t.Add(max(d, 0))
	c.mu.Unlock()
	return ctx.Err()
}

// rateLimited is stripefake answering every request 429 with Retry-After
// (the fake sends Stripe's rate_limit error; the proxy adds the header).
func rateLimited(t *testing.T, retryAfter string) (*stripefake.Server, string) {
	fake := stripefake.New(stripefake.Options{Now: func() time.Time { return now }, Seed: 3})
	u, err := url.Parse(fake.Start())
	require.NoError(t, err)
	t.Cleanup(fake.Close)
	fake.FailNext(http.StatusTooManyRequests, 1<<30)
	proxy := httputil.NewSingleHostReverseProxy(u)
	proxy.ModifyResponse = func(r *http.Response) error {
		if r.StatusCode == http.StatusTooManyRequests {
			r.Header.Set("Retry-After", retryAfter)
		}
		return nil
	}
	front := httptest.NewServer(proxy)
	t.Cleanup(front.Close)
	return fake, front.URL
}

func listWindow(ctx context.Context, p *stripe.Provider) error {
	return p.ListChanges(ctx, reconcile.ListParams{Since: now.Add(-24 * time.Hour), Until: now}, func(reconcile.Page) error { return nil })
}

// The first case end to end: the real provider, as configured by
// default (8 retries, 30s per attempt, 3m per request), against Stripe's
// fake answering 429 with Retry-After: 10. It makes exactly 9 attempts,
// within the request deadline, and the run's error names the last answer
// and Stripe's own error, not a client timeout.
func TestRateLimitedProviderGivesUpAfterMaxRetriesPlusOne(t *testing.T) {
	t.Parallel()
	fake, base := rateLimited(t, "10")
	c := &stepClock{t: now}
	p, err := stripe.New(stripe.Config{APIKey: "sk_test_x", BaseURL: base, MaxRetries: stripe.DefaultMaxRetries,
		RequestsPerSecond: stripe.DefaultRequestsPerSecond, Sleep: c.sleep, Now: c.now})
	require.NoError(t, err)
	err = listWindow(context.Background(), p)
	require.ErrorIs(t, err, retry.ErrExhausted)
	require.EqualValues(t, stripe.DefaultMaxRetries+1, fake.Requests(), "max_retries + 1 attempts")
	require.EqualValues(t, stripe.DefaultMaxRetries+1, p.Requests())
	took := c.now().Sub(now)
	require.GreaterOrEqual(t, took, 80*time.Second, "8 waits of Retry-After 10s at least")
	require.LessOrEqual(t, took, stripe.DefaultRequestDeadline, "within the request deadline")
	require.Contains(t, err.Error(), "stripe: GET /v1/events: gave up after 9 attempts in ") // the run's first request, the anchor
	require.Contains(t, err.Error(), "last answer HTTP 429 Too Many Requests (Retry-After 10s): invalid_request_error (rate_limit): Too many requests")
	require.NotContains(t, err.Error(), "Timeout")
	require.NotContains(t, err.Error(), "sk_test_x")
	t.Log(err)
}

// The same on the wall clock with a short Retry-After: the attempts are
// spaced by it for real, and the whole takes what the waits add up to.
func TestRateLimitedProviderOnTheWallClock(t *testing.T) {
	t.Parallel()
	fake, base := rateLimited(t, "1")
	p, err := stripe.New(stripe.Config{APIKey: "sk_test_x", BaseURL: base, MaxRetries: 2})
	require.NoError(t, err)
	start := time.Now()
	err = listWindow(context.Background(), p)
	took := time.Since(start)
	require.ErrorIs(t, err, retry.ErrExhausted)
	require.EqualValues(t, 3, fake.Requests())
	require.GreaterOrEqual(t, took, 2*time.Second)
	require.Less(t, took, 10*time.Second)
	require.Contains(t, err.Error(), "gave up after 3 attempts")
}

// The second case: Stripe unreachable. Exactly 9 attempts within
// the deadline, and the error names the last dial error.
func TestUnreachableProviderGivesUpNamingTheLastError(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	c := &stepClock{t: now}
	p, err := stripe.New(stripe.Config{APIKey: "sk_test_x", BaseURL: "http://" + addr, MaxRetries: 8, Sleep: c.sleep, Now: c.now})
	require.NoError(t, err)
	err = listWindow(context.Background(), p)
	require.ErrorIs(t, err, retry.ErrExhausted)
	require.EqualValues(t, 9, p.Requests())
	require.LessOrEqual(t, c.now().Sub(now), stripe.DefaultRequestDeadline)
	require.Contains(t, err.Error(), "gave up after 9 attempts")
	require.Contains(t, err.Error(), "last error: dial tcp "+addr)
	require.Contains(t, err.Error(), "connection refused")
}

// stripe-go's own retries are off: one policy decides, so a 500 with
// Stripe-Should-Retry: false is one request, not stripe-go's retries
// times ours.
func TestOnePolicyDecides(t *testing.T) {
	t.Parallel()
	fake := stripefake.New(stripefake.Options{Now: func() time.Time { return now }, Seed: 3})
	base := fake.Start()
	t.Cleanup(fake.Close)
	fake.FailNext(http.StatusInternalServerError, 100)
	fake.SetShouldRetryHeader("false")
	p, err := stripe.New(stripe.Config{APIKey: "sk_test_x", BaseURL: base, MaxRetries: 8,
		Sleep: func(ctx context.Context, _ time.Duration) error { return ctx.Err() }})
	require.NoError(t, err)
	err = listWindow(context.Background(), p)
	require.Error(t, err)
	require.EqualValues(t, 1, fake.Requests(), "Stripe-Should-Retry: false stops at once")
	var ae *stripe.APIError
	require.True(t, errors.As(err, &ae) && ae.Status == 500, "the answer is Stripe's error: %v", err)

	fake.SetShouldRetryHeader("")
	fake.FailNext(http.StatusInternalServerError, 100)
	err = listWindow(context.Background(), p)
	require.ErrorIs(t, err, retry.ErrExhausted)
	require.EqualValues(t, 1+9, fake.Requests(), "8 retries, not multiplied by stripe-go's")
}

// SIGTERM during a backoff ends the request at once.
func TestCancelStopsTheBackoff(t *testing.T) {
	t.Parallel()
	_, base := rateLimited(t, "60")
	p, err := stripe.New(stripe.Config{APIKey: "sk_test_x", BaseURL: base, MaxRetries: 8})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(200*time.Millisecond, cancel)
	start := time.Now()
	err = listWindow(ctx, p)
	require.ErrorIs(t, err, context.Canceled)
	require.Less(t, time.Since(start), 5*time.Second)
}
