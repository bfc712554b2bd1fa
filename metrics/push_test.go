package metrics

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/reconciler/reconciler/internal/retry"
)

// The push follows the one retry policy: a Pushgateway answering 503 is
// retried with the same body, and one that keeps failing is given up on
// after PushMaxRetries+1 attempts, naming its last answer.
func TestPushRetriesByTheSharedPolicy(t *testing.T) {
	var mu sync.Mutex
	var bodies []string
	fail := 2
	gw := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		bodies = append(bodies, string(b))
		if len(bodies) <= fail {
			w.Header().Set("Retry-After", "3")
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer gw.Close()
	var waits []time.Duration
	policy := retry.Policy{MaxRetries: PushMaxRetries, AttemptTimeout: PushAttemptTimeout, Deadline: PushDeadline,
		Sleep: func(ctx context.Context, d time.Duration) error { waits = append(waits, d); return ctx.Err() }}

	m := New()
	m.Notified("slack", "sent")
	require.NoError(t, m.push(context.Background(), gw.URL, "pod-1", policy))
	require.Len(t, bodies, 3, "two 503s, then the push")
	require.NotEmpty(t, bodies[0])
	require.Equal(t, bodies[0], bodies[2], "the retry sends the same body")
	require.Equal(t, []time.Duration{3 * time.Second, 3 * time.Second}, waits, "Retry-After is honoured")

	mu.Lock()
	bodies, fail = nil, 100
	mu.Unlock()
	err := m.push(context.Background(), gw.URL, "pod-1", policy)
	require.ErrorIs(t, err, retry.ErrExhausted)
	require.Len(t, bodies, PushMaxRetries+1)
	require.Contains(t, err.Error(), "gave up after 4 attempts")
	require.Contains(t, err.Error(), "last answer HTTP 503 Service Unavailable (Retry-After 3s)")
}

// A hanging Pushgateway costs one attempt timeout, not the run's grace.
func TestPushAttemptTimeout(t *testing.T) {
	gw := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body) // the server sees the client go only once the body is read
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
	}))
	defer gw.Close()
	policy := retry.Policy{MaxRetries: 1, AttemptTimeout: 50 * time.Millisecond, Deadline: PushDeadline,
		Sleep: func(ctx context.Context, _ time.Duration) error { return ctx.Err() }}
	start := time.Now()
	err := New().push(context.Background(), gw.URL, "", policy)
	require.Error(t, err)
	require.Less(t, time.Since(start), 5*time.Second)
	var at *retry.AttemptTimeoutError
	require.True(t, errors.As(err, &at), "err %v", err)
	require.True(t, strings.Contains(err.Error(), "gave up after 2 attempts"), "err %v", err)
}
