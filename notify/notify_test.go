package notify

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/reconciler/reconciler/internal/pgtest"
	"github.com/reconciler/reconciler/internal/retry"
	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/report"
)

const secretPath = "/services/T000/B000/SECRETxyz"

// receiver is a fake Slack webhook: it answers with the statuses in plan
// (the last one repeating) and keeps the bodies it accepted with 2xx.
type receiver struct {
	srv      *httptest.Server
	mu       sync.Mutex
	plan     []int
	calls    int
	accepted [][]byte
	delay    time.Duration
}

func newReceiver(t *testing.T, plan ...int) *receiver {
	t.Helper()
	rc := &receiver{plan: plan}
	rc.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if rc.delay > 0 {
			time.Sleep(rc.delay)
		}
		rc.mu.Lock()
		i := min(rc.calls, len(rc.plan)-1)
		code := rc.plan[i]
		rc.calls++
		if code < 300 {
			rc.accepted = append(rc.accepted, body)
		}
		rc.mu.Unlock()
		if r.URL.Path != secretPath {
			http.Error(w, "no_service", http.StatusNotFound)
			return
		}
		if code == http.StatusTooManyRequests {
			w.Header().Set("Retry-After", "7")
		}
		w.WriteHeader(code)
		if code < 300 {
			fmt.Fprint(w, "ok")
		} else {
			// A hostile receiver echoing the URL must not leak it either.
			fmt.Fprintf(w, "error for %s", r.URL.Path)
		}
	}))
	t.Cleanup(rc.srv.Close)
	return rc
}

func (rc *receiver) url() string { return rc.srv.URL + secretPath }

func (rc *receiver) counts() (calls, accepted int) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.calls, len(rc.accepted)
}

// sleeps records backoff waits instead of sleeping.
type sleeps struct {
	mu sync.Mutex
	d  []time.Duration
}

func (s *sleeps) sleep(_ context.Context, d time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.d = append(s.d, d)
	return nil
}

func (s *sleeps) all() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Duration(nil), s.d...)
}

func newRun(t *testing.T, db *gorm.DB) report.RunReport {
	t.Helper()
	start := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	run := models.Run{Provider: "stripe", Account: "acct_1", WindowStart: start, WindowEnd: start.Add(24 * time.Hour),
		StartedAt: start.Add(25 * time.Hour), Status: "succeeded", Trigger: "schedule", Examined: 10, Refused: 1,
		Notes: models.JSON(`{}`)}
	require.NoError(t, db.Create(&run).Error)
	rr := report.Summary(run)
	rr.Items = []report.Item{{ProviderID: "pi_1", Kind: models.KindConflict, Action: models.ActionRefused,
		LocalState: ptr("succeeded"), ProviderState: ptr("refunded"), Amount: 1234, Currency: "gbp",
		Explanation: "The provider refunded a payment we think succeeded."}}
	return rr
}

type notification struct {
	ID        int64
	Status    string
	Attempts  int
	LastError *string
	SentAt    *time.Time
}

func rows(t *testing.T, db *gorm.DB, runID int64) []notification {
	t.Helper()
	var out []notification
	require.NoError(t, db.Raw(`SELECT id, status, attempts, last_error, sent_at FROM sent_notifications WHERE run_id = ?`, runID).
		Scan(&out).Error)
	return out
}

func ptr(s string) *string { return &s }

func TestDeliverOnceAcrossRerun(t *testing.T) {
	db := pgtest.New(t)
	rr := newRun(t, db.DB)
	rc := newReceiver(t, 200)
	s := &Slack{URL: rc.url(), ReportLink: func(id int64) string { return fmt.Sprintf("https://reports.example/runs/%d", id) }}
	ctx := context.Background()

	sent, err := s.Deliver(ctx, db.DB, rr)
	require.NoError(t, err)
	assert.True(t, sent)

	// A rerun of the job for the same run: nothing is posted again.
	sent, err = s.Deliver(ctx, db.DB, rr)
	require.NoError(t, err)
	assert.False(t, sent)

	calls, accepted := rc.counts()
	assert.Equal(t, 1, calls)
	assert.Equal(t, 1, accepted)
	assert.Contains(t, string(rc.accepted[0]), fmt.Sprintf("https://reports.example/runs/%d|Full report", rr.ID))
	n := rows(t, db.DB, rr.ID)
	require.Len(t, n, 1)
	assert.Equal(t, StatusSent, n[0].Status)
	assert.Equal(t, 1, n[0].Attempts)
	assert.NotNil(t, n[0].SentAt)
	assert.Nil(t, n[0].LastError)

	// Another channel is another notification.
	s2 := &Slack{URL: rc.url(), Channel: "slack-ops"}
	sent, err = s2.Deliver(ctx, db.DB, rr)
	require.NoError(t, err)
	assert.True(t, sent)
	assert.Len(t, rows(t, db.DB, rr.ID), 2)
}

func TestDeliverRetriesServerErrors(t *testing.T) {
	db := pgtest.New(t)
	rr := newRun(t, db.DB)
	rc := newReceiver(t, 500, 429, 200)
	var sl sleeps
	s := &Slack{URL: rc.url(), Sleep: sl.sleep}

	sent, err := s.Deliver(context.Background(), db.DB, rr)
	require.NoError(t, err)
	assert.True(t, sent)
	calls, accepted := rc.counts()
	assert.Equal(t, 3, calls)
	assert.Equal(t, 1, accepted, "one message received")
	// Exponential backoff after the 500, then the 429's Retry-After.
	// The shared policy's jitter: ±50% around the base.
	waits := sl.all()
	require.Len(t, waits, 2)
	assert.InDelta(t, float64(BackoffBase), float64(waits[0]), float64(BackoffBase/2)+1)
	assert.Equal(t, 7*time.Second, waits[1])
	n := rows(t, db.DB, rr.ID)
	require.Len(t, n, 1)
	assert.Equal(t, StatusSent, n[0].Status)
	assert.Equal(t, 3, n[0].Attempts)

	sent, err = s.Deliver(context.Background(), db.DB, rr)
	require.NoError(t, err)
	assert.False(t, sent)
	calls, _ = rc.counts()
	assert.Equal(t, 3, calls)
}

// deliverConcurrently runs n Deliver calls at once, each with its own
// Slack value as if each were its own process, and returns how many sent.
func deliverConcurrently(t *testing.T, db *gorm.DB, rr report.RunReport, url string, n int) int {
	t.Helper()
	var wg sync.WaitGroup
	var sentCount atomic.Int32
	errs := make(chan error, n)
	start := make(chan struct{})
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			s := &Slack{URL: url}
			sent, err := s.Deliver(context.Background(), db, rr)
			if err != nil {
				errs <- err
			}
			if sent {
				sentCount.Add(1)
			}
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	return int(sentCount.Load())
}

func TestDeliverConcurrentSendsOnce(t *testing.T) {
	db := pgtest.New(t)

	t.Run("new row", func(t *testing.T) {
		rr := newRun(t, db.DB)
		rc := newReceiver(t, 200)
		rc.delay = 100 * time.Millisecond // keep the first sender holding the lock while the others arrive
		assert.Equal(t, 1, deliverConcurrently(t, db.DB, rr, rc.url(), 10))
		calls, accepted := rc.counts()
		assert.Equal(t, 1, calls)
		assert.Equal(t, 1, accepted)
		r := rows(t, db.DB, rr.ID)
		require.Len(t, r, 1)
		assert.Equal(t, StatusSent, r[0].Status)
		assert.Equal(t, 1, r[0].Attempts)
	})

	// The row already exists (an earlier run failed): the INSERT no longer
	// serialises the callers, the row lock must.
	t.Run("failed row", func(t *testing.T) {
		rr := newRun(t, db.DB)
		bad := newReceiver(t, 400)
		_, err := (&Slack{URL: bad.url()}).Deliver(context.Background(), db.DB, rr)
		require.Error(t, err)

		rc := newReceiver(t, 200)
		rc.delay = 100 * time.Millisecond
		assert.Equal(t, 1, deliverConcurrently(t, db.DB, rr, rc.url(), 10))
		calls, accepted := rc.counts()
		assert.Equal(t, 1, calls)
		assert.Equal(t, 1, accepted)
		r := rows(t, db.DB, rr.ID)
		require.Len(t, r, 1)
		assert.Equal(t, StatusSent, r[0].Status)
		assert.Equal(t, 2, r[0].Attempts)
	})
}

func TestDeliverClientErrorNotRetriedThenRedelivered(t *testing.T) {
	db := pgtest.New(t)
	rr := newRun(t, db.DB)
	bad := newReceiver(t, 400)
	var sl sleeps
	s := &Slack{URL: bad.url(), Sleep: sl.sleep}

	sent, err := s.Deliver(context.Background(), db.DB, rr)
	require.Error(t, err)
	assert.False(t, sent)
	assert.Contains(t, err.Error(), "400")
	calls, _ := bad.counts()
	assert.Equal(t, 1, calls, "a 400 is not retried")
	assert.Empty(t, sl.all())
	n := rows(t, db.DB, rr.ID)
	require.Len(t, n, 1)
	assert.Equal(t, StatusFailed, n[0].Status)
	assert.Equal(t, 1, n[0].Attempts)
	require.NotNil(t, n[0].LastError)
	assert.Contains(t, *n[0].LastError, "400")
	assert.Nil(t, n[0].SentAt)

	// Fixed configuration, rerun: the failed row is retried and delivered.
	good := newReceiver(t, 200)
	s.URL = good.url()
	sent, err = s.Deliver(context.Background(), db.DB, rr)
	require.NoError(t, err)
	assert.True(t, sent)
	_, accepted := good.counts()
	assert.Equal(t, 1, accepted)
	n = rows(t, db.DB, rr.ID)
	assert.Equal(t, StatusSent, n[0].Status)
	assert.Equal(t, 2, n[0].Attempts)
	assert.Nil(t, n[0].LastError)
}

func TestDeliverAttemptsBoundedAcrossCalls(t *testing.T) {
	db := pgtest.New(t)
	rr := newRun(t, db.DB)
	rc := newReceiver(t, 503)
	var sl sleeps
	s := &Slack{URL: rc.url(), Sleep: sl.sleep, MaxAttempts: 3}

	sent, err := s.Deliver(context.Background(), db.DB, rr)
	require.Error(t, err)
	assert.False(t, sent)
	calls, _ := rc.counts()
	assert.Equal(t, 3, calls)
	waits := sl.all()
	require.Len(t, waits, 2)
	assert.InDelta(t, float64(BackoffBase), float64(waits[0]), float64(BackoffBase/2)+1)
	assert.InDelta(t, float64(2*BackoffBase), float64(waits[1]), float64(BackoffBase)+1)
	n := rows(t, db.DB, rr.ID)
	assert.Equal(t, StatusFailed, n[0].Status)
	assert.Equal(t, 3, n[0].Attempts)

	// Attempts are used up: a rerun posts nothing.
	sent, err = s.Deliver(context.Background(), db.DB, rr)
	require.ErrorIs(t, err, ErrAttemptsExhausted)
	assert.False(t, sent)
	calls, _ = rc.counts()
	assert.Equal(t, 3, calls)
}

func TestWebhookURLNeverLeaks(t *testing.T) {
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))

	closed := httptest.NewServer(http.NotFoundHandler())
	closedURL := closed.URL + secretPath
	closed.Close()
	release := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(slow.Close)
	t.Cleanup(func() { close(release) }) // runs first

	cases := []struct {
		name   string
		url    func(t *testing.T) string
		client *http.Client
	}{
		{"server error echoing the path", func(t *testing.T) string { return newReceiver(t, 500).url() }, nil},
		{"client error echoing the path", func(t *testing.T) string { return newReceiver(t, 403).url() }, nil},
		{"connection refused", func(*testing.T) string { return closedURL }, nil},
		{"timeout", func(*testing.T) string { return slow.URL + secretPath }, &http.Client{Timeout: 50 * time.Millisecond}},
		{"unparseable URL", func(*testing.T) string { return "http://bad host" + secretPath }, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			db := pgtest.New(t)
			rr := newRun(t, db.DB)
			var sl sleeps
			s := &Slack{URL: c.url(t), Sleep: sl.sleep, Log: log, Client: c.client, MaxAttempts: 2}
			_, err := s.Deliver(context.Background(), db.DB, rr)
			require.Error(t, err)
			assert.NotContains(t, err.Error(), "SECRETxyz")
			assert.NotContains(t, err.Error(), "/services/")
			n := rows(t, db.DB, rr.ID)
			require.Len(t, n, 1)
			require.NotNil(t, n[0].LastError)
			assert.NotContains(t, *n[0].LastError, "SECRETxyz")
			assert.NotEmpty(t, *n[0].LastError)
			t.Log(err)
		})
	}
	require.NotEmpty(t, logs.String())
	assert.NotContains(t, logs.String(), "SECRETxyz")
	assert.NotContains(t, logs.String(), "/services/")
}

func TestDeliverCancelled(t *testing.T) {
	db := pgtest.New(t)
	rr := newRun(t, db.DB)
	rc := newReceiver(t, 500)
	ctx, cancel := context.WithCancel(context.Background())
	s := &Slack{URL: rc.url(), Sleep: func(ctx context.Context, d time.Duration) error { cancel(); return ctx.Err() }}
	sent, err := s.Deliver(ctx, db.DB, rr)
	assert.False(t, sent)
	require.ErrorIs(t, err, context.Canceled)
	// The failure is still recorded although ctx is cancelled.
	n := rows(t, db.DB, rr.ID)
	assert.Equal(t, StatusFailed, n[0].Status)
	assert.Equal(t, 1, n[0].Attempts)
}

func TestDeliverUnknownRun(t *testing.T) {
	db := pgtest.New(t)
	rc := newReceiver(t, 200)
	s := &Slack{URL: rc.url()}
	_, err := s.Deliver(context.Background(), db.DB, report.RunReport{ID: 987654})
	require.Error(t, err)
	calls, _ := rc.counts()
	assert.Equal(t, 0, calls)
}

// --- Message ---

func decode(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m), "valid JSON")
	return m
}

// texts returns every text in the payload, the fallback first.
func texts(t *testing.T, m map[string]any) []string {
	t.Helper()
	out := []string{m["text"].(string)}
	for _, b := range m["blocks"].([]any) {
		bl := b.(map[string]any)
		if tx, ok := bl["text"].(map[string]any); ok {
			out = append(out, tx["text"].(string))
		}
		if fs, ok := bl["fields"].([]any); ok {
			for _, f := range fs {
				out = append(out, f.(map[string]any)["text"].(string))
			}
		}
	}
	return out
}

func sampleRun(items int) report.RunReport {
	start := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	rr := report.RunReport{ID: 42, Provider: "stripe", Account: "acct_9", WindowStart: start, WindowEnd: start.Add(24 * time.Hour),
		Status: "succeeded", Examined: 1234, InSync: 1100, Repaired: 7, Refused: 3, Reported: int64(items), SyntheticEvents: 5,
		EventsRead: 200, WebhookMissRatio: 0.025}
	rr.Items = append(rr.Items, report.Item{ProviderID: "pi_repaired", Kind: models.KindBehind, Action: models.ActionRepaired,
		Amount: 500, Currency: "usd", Explanation: "repaired, not listed"})
	for i := range items {
		rr.Items = append(rr.Items, report.Item{ProviderID: fmt.Sprintf("pi_%03d", i), Kind: models.KindStale,
			Action: models.ActionReported, LocalState: ptr("processing"), ProviderState: ptr("succeeded"),
			Amount: 1000 + int64(i), Currency: "eur", Explanation: "Stale local state."})
	}
	return rr
}

func TestMessageCountsAndItems(t *testing.T) {
	rr := sampleRun(1)
	rr.Items = append(rr.Items, report.Item{ProviderID: "pi_jpy", Kind: models.KindConflict, Action: models.ActionRefused,
		LocalState: ptr("succeeded"), ProviderState: nil, Amount: 1234, Currency: "jpy", Explanation: "Refused."})
	b, err := Message(rr, "reports/run-42.md")
	require.NoError(t, err)
	m := decode(t, b)
	all := strings.Join(texts(t, m), "\n")
	for _, want := range []string{"run 42", "stripe", "acct_9", "2026-03-01T00:00:00Z", "2026-03-02T00:00:00Z",
		"*Examined*\n1234", "*Repaired*\n7", "*Refused*\n3", "*Reported*\n1", "*Synthetic events*\n5", "2.50%",
		"pi_000", "stale", "processing → succeeded", "10.00 EUR", "Stale local state.",
		"pi_jpy", "succeeded → —", "1234 JPY", "Full report: reports/run-42.md"} {
		assert.Contains(t, all, want)
	}
	assert.NotContains(t, all, "pi_repaired", "repaired items are counted, not listed")
	// Refused first.
	assert.Less(t, strings.Index(all, "pi_jpy"), strings.Index(all, "pi_000"))
	assert.Contains(t, m["text"], "examined 1234")
}

func TestMessageListsAtMost20(t *testing.T) {
	b, err := Message(sampleRun(27), "")
	require.NoError(t, err)
	all := strings.Join(texts(t, decode(t, b)), "\n")
	assert.Contains(t, all, "pi_019")
	assert.NotContains(t, all, "pi_020")
	assert.Contains(t, all, "and 7 more")
	assert.NotContains(t, all, "Full report")

	b, err = Message(sampleRun(20), "")
	require.NoError(t, err)
	all = strings.Join(texts(t, decode(t, b)), "\n")
	assert.Contains(t, all, "pi_019")
	assert.NotContains(t, all, "more")

	b, err = Message(sampleRun(0), "")
	require.NoError(t, err)
	assert.Contains(t, strings.Join(texts(t, decode(t, b)), "\n"), "Nothing needs a human.")
}

func TestMessageEscapes(t *testing.T) {
	rr := sampleRun(0)
	rr.Account = "acct_<b>"
	rr.Items = append(rr.Items, report.Item{ProviderID: "pi_<script>alert(1)</script>", Kind: "conflict",
		Action: models.ActionRefused, Currency: "usd", Explanation: "Tom & Jerry <!channel> <https://evil.example|click>"})
	b, err := Message(rr, "https://reports.example/r?a=1&b=<2>|x")
	require.NoError(t, err)
	m := decode(t, b)
	all := strings.Join(texts(t, m), "\n")
	assert.NotContains(t, all, "<script>")
	assert.Contains(t, all, "&lt;script&gt;alert(1)&lt;/script&gt;")
	assert.Contains(t, all, "Tom &amp; Jerry &lt;!channel&gt; &lt;https://evil.example|click&gt;")
	assert.Contains(t, all, "acct_&lt;b&gt;")
	assert.Contains(t, all, "<https://reports.example/r?a=1&amp;b=&lt;2&gt;%7Cx|Full report>")
	// The only < in the payload is the report link's.
	assert.Equal(t, 1, strings.Count(all, "<"))
}

func TestMessageCarriesOnlyAllowedFields(t *testing.T) {
	rr := sampleRun(0)
	rr.Notes = map[string]any{"warning": "note@example.com"}
	rr.Items = append(rr.Items, report.Item{ProviderID: "pi_pii", Kind: models.KindMismatch, Action: models.ActionRefused,
		LocalState: ptr("succeeded"), ProviderState: ptr("failed"), Amount: 99, Currency: "gbp", Explanation: "Mismatch.",
		EventID: "evt_secret_event", DashboardURL: "https://dashboard.stripe.com/acct_9/payments/pi_pii",
		Detail: map[string]any{"customer_email": "jane@example.com", "raw": map[string]any{"billing_details": "1 High St"}}})
	b, err := Message(rr, "")
	require.NoError(t, err)
	s := string(b)
	for _, leak := range []string{"jane@example.com", "customer_email", "billing_details", "1 High St", "evt_secret_event",
		"dashboard.stripe.com", "note@example.com"} {
		assert.NotContains(t, s, leak)
	}
	assert.Contains(t, s, "pi_pii")

	// Payload shape: only Slack's text and blocks, blocks only of section
	// type with mrkdwn text or fields.
	m := decode(t, b)
	keys := []string{}
	for k := range m {
		keys = append(keys, k)
	}
	assert.ElementsMatch(t, []string{"text", "blocks"}, keys)
	for _, bl := range m["blocks"].([]any) {
		for k, v := range bl.(map[string]any) {
			assert.Contains(t, []string{"type", "text", "fields"}, k)
			if k == "type" {
				assert.Equal(t, "section", v)
			}
		}
	}
}

func TestMessageSizeLimits(t *testing.T) {
	rr := sampleRun(0)
	long := strings.Repeat("<&>", 2000)
	rr.Items = append(rr.Items, report.Item{ProviderID: long, Kind: long, Action: models.ActionRefused,
		LocalState: &long, ProviderState: &long, Currency: "usd", Explanation: long})
	b, err := Message(rr, "")
	require.NoError(t, err)
	for _, s := range texts(t, decode(t, b)) {
		assert.LessOrEqual(t, len([]rune(s)), 3000)
	}
}

// TestDeliverOnTheEmbeddedStore: the claim and its record work on SQLite
// too (the demo and trial installs), sent once across a rerun.
func TestDeliverOnTheEmbeddedStore(t *testing.T) {
	db := pgtest.NewSQLite(t)
	rr := newRun(t, db.DB)
	rc := newReceiver(t, 503, 200)
	var sl sleeps
	s := &Slack{URL: rc.url(), Sleep: sl.sleep}
	sent, err := s.Deliver(context.Background(), db.DB, rr)
	require.NoError(t, err)
	assert.True(t, sent)
	sent, err = s.Deliver(context.Background(), db.DB, rr)
	require.NoError(t, err)
	assert.False(t, sent)
	calls, accepted := rc.counts()
	assert.Equal(t, 2, calls)
	assert.Equal(t, 1, accepted)
	n := rows(t, db.DB, rr.ID)
	require.Len(t, n, 1)
	assert.Equal(t, StatusSent, n[0].Status)
	assert.Equal(t, 2, n[0].Attempts)
	assert.NotNil(t, n[0].SentAt)
	assert.Nil(t, n[0].LastError)
}

// The chat path follows the one retry policy (internal/retry): a 429's
// Retry-After as an HTTP date is honoured, and a receiver that keeps
// failing is given up on after MaxAttempts POSTs with an error naming the
// last answer, never the URL.
func TestDeliverRetriesByTheSharedPolicy(t *testing.T) {
	db := pgtest.New(t)
	rr := newRun(t, db.DB)
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		if calls.Add(1) == 1 {
			w.Header().Set("Retry-After", time.Now().Add(30*time.Second).UTC().Format(http.TimeFormat))
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		fmt.Fprint(w, "ok")
	}))
	t.Cleanup(srv.Close)
	var sl sleeps
	s := &Slack{URL: srv.URL + secretPath, Sleep: sl.sleep}
	sent, err := s.Deliver(context.Background(), db.DB, rr)
	require.NoError(t, err)
	assert.True(t, sent)
	waits := sl.all()
	require.Len(t, waits, 1)
	assert.InDelta(t, float64(30*time.Second), float64(waits[0]), float64(2*time.Second), "Retry-After as an HTTP date")

	rr2 := newRun(t, db.DB)
	rc := newReceiver(t, 503)
	s = &Slack{URL: rc.url(), Sleep: sl.sleep, MaxAttempts: 3}
	_, err = s.Deliver(context.Background(), db.DB, rr2)
	require.ErrorIs(t, err, retry.ErrExhausted)
	assert.Contains(t, err.Error(), "gave up after 3 attempts")
	assert.Contains(t, err.Error(), "last answer HTTP 503 Service Unavailable: slack answered 503 error for [redacted]")
	assert.NotContains(t, err.Error(), "SECRETxyz")
	calls2, _ := rc.counts()
	assert.Equal(t, 3, calls2)
}
