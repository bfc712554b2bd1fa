// Package retry is the one retry policy of every outbound HTTP call: the
// providers' clients (through providers/transport), the chat notification
// and the Pushgateway push. One logical request gets at most MaxRetries+1
// attempts, each bounded by AttemptTimeout, all of them and the waits
// between bounded by Deadline; waits are exponential with jitter
// (cenkalti/backoff) and at least what the server's Retry-After asked for
// (seconds or an HTTP date, RFC 9110 section 10.2.3). A failure says why it
// stopped, after how many attempts and how long, and what the last answer
// or error was.
package retry

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v5"

	"github.com/reconciler/reconciler/clock"
)

// Defaults of a Policy's zero fields.
const (
	DefaultMinBackoff = 250 * time.Millisecond
	DefaultMaxBackoff = 30 * time.Second
)

// Why a request stopped being retried: an *Error unwraps to one of these
// or to the caller's context error (context.Canceled on SIGTERM).
var (
	// ErrExhausted: every attempt the policy allows was made.
	ErrExhausted = errors.New("retries exhausted")
	// ErrDeadline: the request's overall deadline passed, or the next
	// attempt could only start after it.
	ErrDeadline = errors.New("request deadline passed")
)

// Policy says how one logical request is retried. The zero value makes one
// attempt with no timeout of its own.
type Policy struct {
	// MaxRetries is how often a failed attempt is retried: a request makes
	// at most MaxRetries+1 attempts.
	MaxRetries int
	// AttemptTimeout bounds each attempt, from sending the request to
	// closing the response body; 0: no bound of its own.
	AttemptTimeout time.Duration
	// Deadline bounds the whole request: every attempt and every wait
	// between attempts; 0: no bound beyond the caller's context.
	Deadline time.Duration
	// MinBackoff and MaxBackoff bound the exponential backoff (jitter ±50%
	// around 250ms·2ⁿ, capped at 30s by default). A Retry-After longer than
	// the backoff is waited in full, within Deadline.
	MinBackoff, MaxBackoff time.Duration
	// ShouldRetryHeader names a response header through which the server
	// says whether a retry can succeed (Stripe: "Stripe-Should-Retry").
	// "false" stops retrying any status, "true" retries any status.
	ShouldRetryHeader string
	// Now and Sleep are the clock; nil: the wall clock. Tests stub them.
	Now   func() time.Time
	Sleep func(ctx context.Context, d time.Duration) error
}

// Attempt is what one attempt came to, as Hooks.Observe sees it.
type Attempt struct {
	N      int           // 1 for the first attempt
	Status int           // the answer's status; 0 when there was none
	Err    error         // the attempt's error; nil when it answered
	Took   time.Duration // how long the attempt took to answer
	Retry  bool          // another attempt follows
	Wait   time.Duration // the wait before it (when Retry)
	Detail string        // Describe's words for a discarded answer
}

// Hooks let a caller see and shape the attempts; every field is optional.
type Hooks struct {
	// Wait waits d before an attempt (0 before the first); nil: Sleep. A
	// transport that paces its requests waits its pacing here too.
	Wait func(ctx context.Context, d time.Duration) error
	// Observe is called after every attempt, before its answer is drained
	// or returned.
	Observe func(a Attempt, resp *http.Response)
	// Describe words an answer the policy discards (retried or given up
	// on) for Attempt.Detail and Error.Detail; it may read the body. It is
	// not called for the answer returned to the caller.
	Describe func(resp *http.Response) string
}

// Error is a request that failed after the policy's attempts.
type Error struct {
	Op         string        // "GET /v1/events"; "" is left out (a secret URL)
	Attempts   int           // attempts made
	Elapsed    time.Duration // from the first attempt to giving up
	Status     int           // the last answer's status; 0 when the last attempt had none
	StatusText string        // its reason phrase
	RetryAfter time.Duration // the last answer's Retry-After, 0 when none
	Detail     string        // Hooks.Describe's words for the last answer
	Last       error         // the last attempt's error, when it had no answer
	Deadline   time.Duration // the policy's deadline, for ErrDeadline
	Wait       time.Duration // ErrDeadline before an attempt: the wait that would pass it
	// Cause is why it stopped: ErrExhausted, ErrDeadline, or the caller's
	// context error.
	Cause error
}

func (e *Error) Error() string {
	var b strings.Builder
	if e.Op != "" {
		b.WriteString(e.Op + ": ")
	}
	took := e.Elapsed.Round(100 * time.Millisecond)
	switch {
	case errors.Is(e.Cause, ErrExhausted):
		fmt.Fprintf(&b, "gave up after %s in %s", attempts(e.Attempts), took)
	case errors.Is(e.Cause, ErrDeadline) && e.Wait > 0:
		fmt.Fprintf(&b, "gave up after %s in %s: the next attempt, in %s, would pass the request deadline of %s",
			attempts(e.Attempts), took, e.Wait.Round(100*time.Millisecond), e.Deadline)
	case errors.Is(e.Cause, ErrDeadline):
		fmt.Fprintf(&b, "request deadline of %s passed after %s", e.Deadline, attempts(e.Attempts))
	default:
		fmt.Fprintf(&b, "stopped after %s in %s: %v", attempts(e.Attempts), took, e.Cause)
	}
	switch {
	case e.Status != 0:
		fmt.Fprintf(&b, ": last answer HTTP %d %s", e.Status, e.StatusText)
		if e.RetryAfter > 0 {
			fmt.Fprintf(&b, " (Retry-After %s)", e.RetryAfter.Round(time.Second))
		}
		if e.Detail != "" {
			b.WriteString(": " + e.Detail)
		}
	case e.Last != nil:
		fmt.Fprintf(&b, ": last error: %v", e.Last)
	}
	return b.String()
}

// Unwrap returns why the request stopped and the last attempt's error.
func (e *Error) Unwrap() []error {
	if e.Last != nil {
		return []error{e.Cause, e.Last}
	}
	return []error{e.Cause}
}

func attempts(n int) string {
	if n == 1 {
		return "1 attempt"
	}
	return strconv.Itoa(n) + " attempts"
}

// AttemptTimeoutError is an attempt that did not finish within the
// policy's AttemptTimeout.
type AttemptTimeoutError struct{ Timeout time.Duration }

func (e *AttemptTimeoutError) Error() string {
	return fmt.Sprintf("attempt timed out after %s", e.Timeout)
}

// RetryAfter reads a Retry-After header at now: delay-seconds or an
// HTTP-date (RFC 9110 section 10.2.3). It reports false when the header is
// absent or unreadable; a date in the past is a zero wait.
func RetryAfter(h http.Header, now time.Time) (time.Duration, bool) {
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0, false
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n < 0 {
			return 0, false
		}
		return time.Duration(min(n, int64(24*time.Hour/time.Second))) * time.Second, true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return max(t.Sub(now), 0), true
}

func (p Policy) now() time.Time {
	if p.Now != nil {
		return p.Now()
	}
	return time.Now()
}

func (p Policy) sleep(ctx context.Context, d time.Duration) error {
	if p.Sleep != nil {
		return p.Sleep(ctx, d)
	}
	return clock.System.Sleep(ctx, d)
}

// Retryable reports whether an attempt's outcome is worth another attempt
// while parent (the caller's context) is live: network errors and attempt
// timeouts are, certificate errors are not; 429 and 5xx are, other
// statuses are not, unless ShouldRetryHeader says otherwise.
func (p Policy) Retryable(parent context.Context, resp *http.Response, err error) bool {
	if parent.Err() != nil {
		return false
	}
	if err != nil {
		var unknownCA x509.UnknownAuthorityError
		var verify *tls.CertificateVerificationError
		var hostname x509.HostnameError
		return !errors.As(err, &unknownCA) && !errors.As(err, &verify) && !errors.As(err, &hostname)
	}
	if h := p.ShouldRetryHeader; h != "" {
		switch resp.Header.Get(h) {
		case "false":
			return false
		case "true":
			return true
		}
	}
	return resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500
}

// Do sends req through send until an attempt succeeds or is not worth
// retrying (its answer is returned, body unread), or the policy gives up
// (an *Error). req's context is the caller's: when it ends, Do stops at
// once. A request with a body is retried only when req.GetBody can replay
// it. op labels errors ("GET /v1/events"); pass "" when the URL is a
// secret.
func (p Policy) Do(req *http.Request, op string, send func(*http.Request) (*http.Response, error), h Hooks) (*http.Response, error) {
	ctx := req.Context()
	if p.MinBackoff <= 0 {
		p.MinBackoff = DefaultMinBackoff
	}
	if p.MaxBackoff <= 0 {
		p.MaxBackoff = DefaultMaxBackoff
	}
	wait := h.Wait
	if wait == nil {
		wait = p.sleep
	}
	bo := &backoff.ExponentialBackOff{
		InitialInterval: p.MinBackoff, RandomizationFactor: 0.5, Multiplier: 2, MaxInterval: p.MaxBackoff,
	}
	start := p.now()
	var deadline time.Time
	if p.Deadline > 0 {
		deadline = start.Add(p.Deadline)
	}
	fail := &Error{Op: op, Deadline: p.Deadline}
	stop := func(cause error) (*http.Response, error) {
		fail.Cause, fail.Elapsed = cause, p.now().Sub(start)
		return nil, fail
	}
	replayable := req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
	var pause time.Duration
	for n := 1; ; n++ {
		// Nothing to wait for before the first attempt, unless a pacer is.
		if h.Wait != nil || pause > 0 {
			if err := wait(ctx, pause); err != nil {
				if ctx.Err() != nil {
					return stop(ctx.Err())
				}
				return stop(err)
			}
		}
		now := p.now()
		timeout, capped := p.AttemptTimeout, false
		if !deadline.IsZero() {
			left := deadline.Sub(now)
			if left <= 0 {
				return stop(ErrDeadline)
			}
			if timeout <= 0 || left < timeout {
				timeout, capped = left, true
			}
		}
		resp, cancel, err := p.attempt(ctx, req, n, timeout, send)
		a := Attempt{N: n, Err: err, Took: p.now().Sub(now)}
		pastDeadline := false
		if err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
			// The attempt's own time ran out (or the request's, when less
			// of it was left than an attempt may take).
			pastDeadline = capped
			err = &AttemptTimeoutError{Timeout: timeout}
			a.Err = err
		}
		if resp != nil {
			a.Status = resp.StatusCode
		}
		worth := p.Retryable(ctx, resp, err)
		a.Retry = worth && n <= p.MaxRetries && replayable && !pastDeadline
		if err == nil && !worth {
			// Success, or an answer no retry can change: the caller's.
			if h.Observe != nil {
				h.Observe(a, resp)
			}
			resp.Body = &cancelBody{ReadCloser: resp.Body, cancel: cancel}
			return resp, nil
		}
		var ra time.Duration
		if resp != nil {
			ra, _ = RetryAfter(resp.Header, p.now())
			if h.Describe != nil {
				a.Detail = h.Describe(resp)
			}
		}
		if a.Retry {
			a.Wait = max(bo.NextBackOff(), ra)
		}
		if h.Observe != nil {
			h.Observe(a, resp)
		}
		fail.Attempts, fail.Status, fail.StatusText, fail.RetryAfter, fail.Detail, fail.Last = n, 0, "", 0, a.Detail, err
		if resp != nil {
			fail.Status, fail.StatusText, fail.RetryAfter = resp.StatusCode, http.StatusText(resp.StatusCode), ra
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
			_ = resp.Body.Close()
		}
		cancel()
		switch {
		case ctx.Err() != nil:
			return stop(ctx.Err())
		case pastDeadline:
			return stop(ErrDeadline)
		case !worth:
			// An error no retry can mend (a certificate): the error itself.
			if op != "" {
				return nil, fmt.Errorf("%s: %w", op, err)
			}
			return nil, err
		case !a.Retry:
			return stop(ErrExhausted)
		case !deadline.IsZero() && !p.now().Add(a.Wait).Before(deadline):
			fail.Wait = a.Wait
			return stop(ErrDeadline)
		}
		pause = a.Wait
	}
}

// attempt sends one copy of req with its own timeout. The returned cancel
// ends the attempt's context; the caller calls it once the answer is done
// with (closing the body does, for an answer returned).
func (p Policy) attempt(ctx context.Context, req *http.Request, n int, timeout time.Duration, send func(*http.Request) (*http.Response, error)) (*http.Response, context.CancelFunc, error) {
	actx, cancel := ctx, context.CancelFunc(func() {})
	if timeout > 0 {
		actx, cancel = context.WithTimeout(ctx, timeout)
	}
	r := req.Clone(actx)
	if n > 1 && req.GetBody != nil {
		body, err := req.GetBody()
		if err != nil {
			return nil, cancel, err
		}
		r.Body = body
	}
	resp, err := send(r)
	if err != nil && resp != nil {
		_ = resp.Body.Close()
		resp = nil
	}
	if err == nil && actx.Err() != nil && ctx.Err() == nil {
		// The answer came as the attempt's time ran out: its body cannot be
		// read, so the attempt timed out.
		_ = resp.Body.Close()
		return nil, cancel, context.DeadlineExceeded
	}
	return resp, cancel, err
}

// cancelBody ends an attempt's context when its answer's body is closed.
type cancelBody struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b *cancelBody) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}

// Transport is an http.RoundTripper that sends every request by Policy.
// Only the methods in Methods are retried (default GET and HEAD); others
// make one attempt, still bounded by the attempt timeout.
type Transport struct {
	Policy Policy
	// Base sends each attempt; nil: http.DefaultTransport.
	Base http.RoundTripper
	// Methods are the methods retried; nil: GET and HEAD.
	Methods []string
	// Hooks see each attempt.
	Hooks Hooks
	// HideURL leaves the request's path out of errors (a webhook URL).
	HideURL bool
}

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	p := t.Policy
	if !t.retried(req.Method) {
		p.MaxRetries = 0
	}
	op := req.Method + " " + req.URL.Path
	if t.HideURL {
		op = req.Method
	}
	return p.Do(req, op, base.RoundTrip, t.Hooks)
}

func (t *Transport) retried(method string) bool {
	if t.Methods == nil {
		return method == http.MethodGet || method == http.MethodHead
	}
	for _, m := range t.Methods {
		if m == method {
			return true
		}
	}
	return false
}
