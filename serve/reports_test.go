package serve

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"html"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/reconciler/reconciler/clock"
	"github.com/reconciler/reconciler/config"
	"github.com/reconciler/reconciler/internal/dbopen"
	"github.com/reconciler/reconciler/internal/pgtest"
	"github.com/reconciler/reconciler/metrics"
	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/runner"
)

const linkKey = "report-link-key-0123456789abcdef-0123456789"

// syncBuffer is a log sink the server's goroutines may write to.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// answer is one response, read whole.
type answer struct {
	code   int
	header http.Header
	body   string
}

// A report opens in a browser from the chat message's signed link, HTML
// and CSV, end to end: the message runner posts carries a link the real
// handler accepts on PostgreSQL. Altered, borrowed, expired and missing
// signatures are refused without a byte of the report; a bearer token
// opens it too; the key appears in no answer, no log line and no message.
func TestReportPageSignedLinks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t).DB
	st := dbopen.Store(db, nil)

	// The chat: a fake Slack webhook keeping what it was sent.
	var posted []string
	var pmu sync.Mutex
	chat := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		pmu.Lock()
		posted = append(posted, string(b))
		pmu.Unlock()
	}))
	t.Cleanup(chat.Close)

	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "config.yaml")
	require.NoError(t, os.WriteFile(cfgPath, []byte("notify:\n  report_url: https://reconciler.example/runs/{id}/report.html\n  report_link_ttl: 48h\n"), 0o600))
	env := map[string]string{"RECONCILER_REPORT_LINK_KEY": linkKey, "RECONCILER_SLACK_WEBHOOK_URL": chat.URL + "/services/T/B/x"}
	cfg, err := config.Load(cfgPath, true, func(k string) string { return env[k] }, os.ReadFile)
	require.NoError(t, err)
	require.NoError(t, cfg.Validate())

	signedAt := time.Date(2026, 11, 2, 3, 0, 0, 0, time.UTC)
	var nowNanos atomic.Int64
	nowNanos.Store(signedAt.Add(time.Hour).UnixNano())
	clk := clock.Func(func() time.Time { return time.Unix(0, nowNanos.Load()).UTC() })

	seed := func(payment string) int64 {
		start := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
		f := start.Add(25 * time.Hour)
		run := models.Run{Provider: "stripe", Status: models.RunSucceeded, Trigger: models.TriggerSchedule,
			WindowStart: start, WindowEnd: start.Add(24 * time.Hour), StartedAt: f, FinishedAt: &f, Notes: models.JSON("{}")}
		require.NoError(t, st.CreateRun(ctx, &run))
		require.NoError(t, db.Create(&models.DriftItem{RunID: run.ID, Provider: "stripe", ProviderID: payment, Kind: models.KindConflict,
			Action: models.ActionRefused, Detail: models.JSON(`{"explanation":"The provider says refunded; the local row says canceled."}`)}).Error)
		return run.ID
	}
	runA, runB := seed("pi_report_a"), seed("pi_report_b")

	logs := &syncBuffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	s := &Server{Runner: &runner.Service{Config: cfg, DB: db, Store: st, Log: log}, Log: log, Metrics: metrics.New(),
		Tokens: map[string]string{"finance": token}, Providers: []string{"stripe"}, Clock: clk, MaxRuns: 1}
	srv := httptest.NewServer(s.Handler(ctx))
	t.Cleanup(srv.Close)

	var answers []answer
	get := func(path, bearerToken string) answer {
		t.Helper()
		req, err := http.NewRequest("GET", srv.URL+path, nil)
		require.NoError(t, err)
		if bearerToken != "" {
			req.Header.Set("Authorization", "Bearer "+bearerToken)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		a := answer{code: resp.StatusCode, header: resp.Header, body: string(b)}
		answers = append(answers, a)
		return a
	}
	private := func(a answer) {
		t.Helper()
		require.Equal(t, "private, no-store", a.header.Get("Cache-Control"))
		require.Equal(t, "nosniff", a.header.Get("X-Content-Type-Options"))
		require.Equal(t, "no-referrer", a.header.Get("Referrer-Policy"))
	}

	// The message the run's hook posts, signed at signedAt.
	sum := runner.Summaries{Config: cfg, DB: db, Store: st, Log: log, Clock: clock.Func(func() time.Time { return signedAt })}
	d := sum.Post(ctx, runA)
	require.Equal(t, runner.DeliverySent, d.Status, "%v", d.Err)
	require.NoError(t, d.Err)
	pmu.Lock()
	require.Len(t, posted, 1)
	msg := posted[0]
	pmu.Unlock()
	var decoded struct {
		Blocks []struct {
			Text *struct{ Text string } `json:"text"`
		} `json:"blocks"`
	}
	require.NoError(t, json.Unmarshal([]byte(msg), &decoded))
	var texts []string
	for _, b := range decoded.Blocks {
		if b.Text != nil {
			texts = append(texts, b.Text.Text)
		}
	}
	m := regexp.MustCompile(`<(https://[^|>]+)\|Full report>`).FindStringSubmatch(strings.Join(texts, "\n"))
	require.NotNil(t, m, "the message links the report: %s", msg)
	link, err := url.Parse(html.UnescapeString(m[1]))
	require.NoError(t, err)
	require.Equal(t, "reconciler.example", link.Host)
	require.Equal(t, "/runs/"+itoa(runA)+"/report.html", link.Path)
	require.Equal(t, itoa(signedAt.Add(48*time.Hour).Unix()), link.Query().Get("expires"), "report_link_ttl from the config")
	sig := link.Query().Get("sig")
	require.Len(t, sig, 64)

	// The signed link opens the HTML page...
	page := get(link.RequestURI(), "")
	require.Equal(t, http.StatusOK, page.code, page.body)
	private(page)
	require.Equal(t, "text/html; charset=utf-8", page.header.Get("Content-Type"))
	csp := page.header.Get("Content-Security-Policy")
	require.Contains(t, csp, "default-src 'none'")
	require.Contains(t, csp, "frame-ancestors 'none'")
	require.NotContains(t, csp, "script-src")
	require.Contains(t, page.body, "pi_report_a")
	require.NotContains(t, page.body, "pi_report_b")
	require.NotContains(t, strings.ToLower(page.body), "<script", "the page needs no script: the CSP forbids them")
	// ...which links its CSV with the same signature.
	href := regexp.MustCompile(`<a href="(report\.csv[^"]*)"`).FindStringSubmatch(page.body)
	require.NotNil(t, href, "the page links its CSV")
	csvURL, err := url.Parse(srv.URL + link.RequestURI())
	require.NoError(t, err)
	csvURL, err = csvURL.Parse(html.UnescapeString(href[1]))
	require.NoError(t, err)
	require.Equal(t, "/runs/"+itoa(runA)+"/report.csv", csvURL.Path)
	require.Equal(t, sig, csvURL.Query().Get("sig"))
	csv := get(csvURL.RequestURI(), "")
	require.Equal(t, http.StatusOK, csv.code, csv.body)
	private(csv)
	require.Equal(t, "text/csv; charset=utf-8", csv.header.Get("Content-Type"))
	require.Equal(t, `attachment; filename="reconciler-run-`+itoa(runA)+`.csv"`, csv.header.Get("Content-Disposition"))
	require.Contains(t, csv.body, "pi_report_a")
	require.True(t, strings.HasPrefix(csv.body, "run_id,"), csv.body[:min(80, len(csv.body))])

	refused := func(a answer, code int, says ...string) {
		t.Helper()
		require.Equal(t, code, a.code, a.body)
		private(a)
		require.Equal(t, "text/plain; charset=utf-8", a.header.Get("Content-Type"))
		require.NotContains(t, a.body, "pi_report_", "no report in a refusal")
		require.NotContains(t, a.body, "<html")
		for _, s := range says {
			require.Contains(t, a.body, s)
		}
	}
	q := link.Query()
	with := func(path string, set func(url.Values)) string {
		v := url.Values{}
		for k, vs := range q {
			v[k] = append([]string(nil), vs...)
		}
		set(v)
		return path + "?" + v.Encode()
	}
	pathA, pathB := "/runs/"+itoa(runA)+"/report.html", "/runs/"+itoa(runB)+"/report.html"
	tampered := []byte(sig)
	tampered[10] = "0123456789abcdef"[(strings.IndexByte("0123456789abcdef", tampered[10])+1)%16]
	refused(get(with(pathA, func(v url.Values) { v.Set("sig", string(tampered)) }), ""), http.StatusForbidden, "not valid")
	refused(get(with(pathA, func(v url.Values) { v.Set("expires", itoa(signedAt.Add(480*time.Hour).Unix())) }), ""), http.StatusForbidden, "not valid")
	refused(get(with(pathB, func(url.Values) {}), ""), http.StatusForbidden, "not valid")
	refused(get(with("/runs/"+itoa(runB)+"/report.csv", func(url.Values) {}), ""), http.StatusForbidden)
	refused(get(pathA, ""), http.StatusUnauthorized, "bearer token or a signed link")
	refused(get(pathA, "not-the-token-0123456789"), http.StatusUnauthorized)
	refused(get(pathA+"?sig="+sig, ""), http.StatusUnauthorized)
	require.Equal(t, `Bearer realm="reconciler"`, get(pathA, "").header.Get("WWW-Authenticate"))

	// A bearer token opens both formats; the page's CSV link then carries
	// no signature (there is none to pass on).
	tok := get(pathA, token)
	require.Equal(t, http.StatusOK, tok.code, tok.body)
	require.Contains(t, tok.body, "pi_report_a")
	require.Contains(t, tok.body, `<a href="report.csv" download>`)
	tokCSV := get("/runs/"+itoa(runB)+"/report.csv", token)
	require.Equal(t, http.StatusOK, tokCSV.code)
	require.Contains(t, tokCSV.body, "pi_report_b")

	// A run that does not exist is 404, once access is granted.
	gone := runner.Summaries{Config: cfg, Clock: clk}.ReportLink(999999)
	gu, err := url.Parse(gone)
	require.NoError(t, err)
	refused(get(gu.RequestURI(), ""), http.StatusNotFound, "no run 999999")
	refused(get("/runs/999999/report.csv", token), http.StatusNotFound)
	refused(get("/runs/0/report.html", token), http.StatusBadRequest)

	// Expired: the link opened until expires, not after.
	nowNanos.Store(signedAt.Add(48*time.Hour - time.Second).UnixNano())
	require.Equal(t, http.StatusOK, get(link.RequestURI(), "").code)
	nowNanos.Store(signedAt.Add(48 * time.Hour).UnixNano())
	refused(get(link.RequestURI(), ""), http.StatusForbidden, "this link expired on 2026-11-04 03:00 UTC",
		"reconciler report --run "+itoa(runA))
	refused(get(csvURL.RequestURI(), ""), http.StatusForbidden, "expired")
	require.Equal(t, http.StatusOK, get(pathA, token).code, "a token is not subject to the link's expiry")

	// A rotated key revokes every link: a server restarted with a new key.
	env["RECONCILER_REPORT_LINK_KEY"] = strings.Repeat("z", 40)
	rotated, err := config.Load(cfgPath, true, func(k string) string { return env[k] }, os.ReadFile)
	require.NoError(t, err)
	s2 := &Server{Runner: &runner.Service{Config: rotated, DB: db, Store: st, Log: log}, Log: log, Metrics: metrics.New(),
		Tokens: map[string]string{"finance": token}, Providers: []string{"stripe"}, Clock: clk, MaxRuns: 1}
	srv2 := httptest.NewServer(s2.Handler(ctx))
	t.Cleanup(srv2.Close)
	nowNanos.Store(signedAt.Add(time.Hour).UnixNano())
	resp, err := http.Get(srv2.URL + link.RequestURI())
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusForbidden, resp.StatusCode, "a link signed with the old key")
	require.Equal(t, http.StatusOK, get(link.RequestURI(), "").code, "the old server still opens it")

	// The key is in no answer, no log line, no message.
	keyHex := hex.EncodeToString([]byte(linkKey))
	for _, a := range answers {
		for _, text := range []string{a.body, strings.Join(flatten(a.header), "\n")} {
			require.NotContains(t, text, linkKey)
			require.NotContains(t, text, keyHex)
		}
	}
	require.NotContains(t, logs.String(), linkKey)
	require.NotContains(t, msg, linkKey)
	require.NotContains(t, logs.String(), sig, "the signed link is not logged either")
}

func flatten(h http.Header) []string {
	var out []string
	for k, vs := range h {
		for _, v := range vs {
			out = append(out, k+": "+v)
		}
	}
	return out
}

// Without a link key, a signature opens nothing (and says so as a
// refusal), while a token still does.
func TestReportPageWithoutKeyNeedsAToken(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t).DB
	st := dbopen.Store(db, nil)
	cfg, err := config.Load(filepath.Join(t.TempDir(), "none.yaml"), false, func(string) string { return "" }, os.ReadFile)
	require.NoError(t, err)
	at := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	run := models.Run{Provider: "stripe", Status: models.RunFailed, Trigger: models.TriggerAPI,
		WindowStart: at, WindowEnd: at.Add(time.Hour), StartedAt: at, FinishedAt: &at, Notes: models.JSON("{}")}
	require.NoError(t, st.CreateRun(ctx, &run))
	s := &Server{Runner: &runner.Service{Config: cfg, DB: db, Store: st}, Log: slog.New(slog.DiscardHandler), Metrics: metrics.New(),
		Tokens: map[string]string{"finance": token}, Providers: []string{"stripe"}, MaxRuns: 1}
	srv := httptest.NewServer(s.Handler(ctx))
	t.Cleanup(srv.Close)
	// Signed with a key this server does not have.
	other, err := config.Load(filepath.Join(t.TempDir(), "none.yaml"), false, func(k string) string {
		return map[string]string{"RECONCILER_REPORT_LINK_KEY": linkKey}[k]
	}, os.ReadFile)
	require.NoError(t, err)
	other.Notify.ReportURL = srv.URL + "/runs/{id}/report.html"
	resp, err := http.Get(runner.Summaries{Config: other}.ReportLink(run.ID))
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusForbidden, resp.StatusCode, string(b))

	req, _ := http.NewRequest("GET", srv.URL+"/runs/"+itoa(run.ID)+"/report.html", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, string(b), "<html")
}
