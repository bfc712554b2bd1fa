package retry

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		h    string
		want time.Duration
		ok   bool
	}{
		{"", 0, false},
		{"10", 10 * time.Second, true},
		{" 0 ", 0, true},
		{"-1", 0, false},
		{"1.5", 0, false},
		{now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second, true},
		{"Monday, 30-Nov-26 10:00:07 GMT", 7 * time.Second, true}, // RFC 850, still to be accepted
		{"Mon Nov 30 10:00:05 2026", 5 * time.Second, true},       // asctime
		{now.Add(-time.Minute).Format(http.TimeFormat), 0, true},  // past: no wait
		{"soon", 0, false},
	} {
		h := http.Header{}
		if c.h != "" {
			h.Set("Retry-After", c.h)
		}
		got, ok := RetryAfter(h, now)
		if got != c.want || ok != c.ok {
			t.Errorf("Retry-After %q: %v %v, want %v %v", c.h, got, ok, c.want, c.ok)
		}
	}
}

// A POST is retried with its body sent again in full.
func TestDoReplaysTheBody(t *testing.T) {
	var mu sync.Mutex
	var got []string
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, string(b))
		n := len(got)
		mu.Unlock()
		if n < 3 {
			w.WriteHeader(http.StatusBadGateway)
		}
	}))
	defer s.Close()
	req, _ := http.NewRequest(http.MethodPost, s.URL, bytes.NewReader([]byte(`{"text":"hi"}`)))
	var seen []Attempt
	p := Policy{MaxRetries: 5, Sleep: func(ctx context.Context, _ time.Duration) error { return ctx.Err() }}
	resp, err := p.Do(req, "", http.DefaultTransport.RoundTrip, Hooks{Observe: func(a Attempt, _ *http.Response) { seen = append(seen, a) }})
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("%v %v", resp, err)
	}
	resp.Body.Close()
	if len(got) != 3 || got[0] != got[2] || got[2] != `{"text":"hi"}` {
		t.Fatalf("bodies %q", got)
	}
	if len(seen) != 3 || !seen[0].Retry || !seen[1].Retry || seen[2].Retry || seen[1].Status != 502 {
		t.Fatalf("attempts %+v", seen)
	}
}

// Stripe-Should-Retry: false stops retrying a 500, which is then the
// caller's answer with its body.
func TestShouldRetryFalse(t *testing.T) {
	n := 0
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n++
		w.Header().Set("Stripe-Should-Retry", "false")
		w.WriteHeader(500)
		io.WriteString(w, `{"error":{}}`)
	}))
	defer s.Close()
	req, _ := http.NewRequest(http.MethodGet, s.URL, nil)
	p := Policy{MaxRetries: 5, ShouldRetryHeader: "Stripe-Should-Retry"}
	resp, err := p.Do(req, "GET /", http.DefaultTransport.RoundTrip, Hooks{})
	if err != nil || resp.StatusCode != 500 || n != 1 {
		t.Fatalf("%v after %d attempts", err, n)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != `{"error":{}}` {
		t.Fatalf("body %q", b)
	}
}

// A caller's deadline is the caller's: reported as its context error, not
// as the policy's deadline.
func TestCallersDeadlineIsNotThePolicys(t *testing.T) {
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }))
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.URL, nil)
	_, err := Policy{MaxRetries: 3, Deadline: time.Hour, AttemptTimeout: time.Minute}.Do(req, "GET /", http.DefaultTransport.RoundTrip, Hooks{})
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrDeadline) || !strings.Contains(err.Error(), "stopped after 1 attempt") {
		t.Fatalf("err %v", err)
	}
}
