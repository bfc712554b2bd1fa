package serve

import (
	"bufio"
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/reconciler/reconciler/config"
	"github.com/reconciler/reconciler/internal/dbopen"
	"github.com/reconciler/reconciler/internal/pgtest"
	"github.com/reconciler/reconciler/metrics"
	"github.com/reconciler/reconciler/runner"
)

// startServer serves s on a loopback port with t's timeouts until the test
// ends; it returns the address.
func startServer(t *testing.T, s *Server) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	addrc := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- s.ListenAndServe(ctx, "127.0.0.1:0", 5*time.Second, func(a string) { addrc <- a }) }()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case a := <-addrc:
		return a
	case err := <-done:
		t.Fatal(err)
	}
	return ""
}

func apiServer(t *testing.T) *Server {
	t.Helper()
	db := pgtest.NewSQLite(t).DB
	getenv := func(k string) string {
		return map[string]string{"STRIPE_API_KEY": "sk_test_serve", "STRIPE_API_BASE": "http://127.0.0.1:1"}[k]
	}
	cfg, err := config.Load(filepath.Join(t.TempDir(), "none.yaml"), false, getenv, os.ReadFile)
	require.NoError(t, err)
	return &Server{Runner: &runner.Service{Config: cfg, DB: db, Store: dbopen.Store(db, nil)}, Log: slog.New(slog.DiscardHandler),
		Metrics: metrics.New(), Tokens: map[string]string{"finance": token}, Providers: []string{"stripe"},
		Schedule: never{}}
}

type never struct{}

func (never) Next(time.Time) time.Time { return time.Time{} }

// A client that sends headers too slowly, or a partial body without end,
// or idles on a keep-alive connection, is cut off by the server.
func TestAPITimeoutsCutSlowClients(t *testing.T) {
	t.Parallel()
	s := apiServer(t)
	s.Timeouts = Timeouts{ReadHeader: 200 * time.Millisecond, Read: 400 * time.Millisecond, Write: time.Second, Idle: 300 * time.Millisecond}
	addr := startServer(t, s)
	closedWithin := func(name string, c net.Conn, d time.Duration) {
		t.Helper()
		require.NoError(t, c.SetReadDeadline(time.Now().Add(5*time.Second)))
		start := time.Now()
		_, _ = bufio.NewReader(c).ReadString(0) // until the server closes
		require.Less(t, time.Since(start), d, name)
	}
	// Headers begun, never finished.
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer c.Close()
	_, err = c.Write([]byte("POST /runs HTTP/1.1\r\nHost: x\r\n"))
	require.NoError(t, err)
	closedWithin("slow headers", c, 2*time.Second)
	// Headers and a partial body, no token.
	c2, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer c2.Close()
	_, err = c2.Write([]byte("POST /runs HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{\"provider\":"))
	require.NoError(t, err)
	closedWithin("partial body", c2, 2*time.Second)
	// An idle keep-alive after one request.
	c3, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer c3.Close()
	_, err = c3.Write([]byte("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"))
	require.NoError(t, err)
	closedWithin("idle keep-alive", c3, 2*time.Second)
}

func TestAPIStrictRequests(t *testing.T) {
	t.Parallel()
	s := apiServer(t)
	addr := startServer(t, s)
	do := func(method, path, body string) (int, map[string]any) {
		t.Helper()
		req, err := http.NewRequest(method, "http://"+addr+path, strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		var m map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&m)
		return resp.StatusCode, m
	}
	for _, c := range []struct{ name, body, field, msg string }{
		{"trailing garbage", `{"provider":"stripe"}garbage`, "", "data after"},
		{"a second value", `{"provider":"stripe"} {"provider":"stripe"}`, "", "data after"},
		{"duplicate key", `{"provider":"stripe","dry_run":true,"dry_run":false}`, "dry_run", `duplicate key "dry_run"`},
		{"not an object", `["stripe"]`, "", "not a JSON object"},
		{"empty", ``, "", "empty"},
		{"truncated", `{"provider":"stripe"`, "", "unexpected EOF"},
		{"unknown field", `{"provider":"stripe","sinse":"x"}`, "sinse", "unknown field"},
		{"account with a newline", `{"provider":"stripe","account":"acct_1\nX"}`, "account", "not a connected account"},
		{"account too long", `{"provider":"stripe","account":"acct_` + strings.Repeat("a", 60000) + `"}`, "account", "not a connected account"},
		{"account not acct_", `{"provider":"stripe","account":"cus_1"}`, "account", "not a connected account"},
	} {
		code, body := do("POST", "/runs", c.body)
		require.Equal(t, 400, code, c.name)
		require.Contains(t, body["error"], c.msg, c.name)
		if c.field != "" {
			require.Equal(t, c.field, body["field"], c.name)
		}
	}
	code, _ := do("POST", "/runs", `{"provider":"stripe","account":"acct_`+strings.Repeat("a", 70000)+`"}`)
	require.Equal(t, http.StatusRequestEntityTooLarge, code)
	for _, id := range []string{"+1", "%201", "1e0", "01", "0", "-1", "1.0", "99999999999999999999"} {
		code, body := do("GET", "/runs/"+id, "")
		require.Equal(t, 400, code, id)
		require.Equal(t, "id", body["field"], id)
	}
	code, _ = do("GET", "/runs/1", "")
	require.Equal(t, 404, code)
}

func TestParseRunID(t *testing.T) {
	for s, want := range map[string]int64{"1": 1, "42": 42, "9223372036854775807": 9223372036854775807} {
		got, err := parseRunID(s)
		require.NoError(t, err, s)
		require.Equal(t, want, got)
	}
	for _, s := range []string{"", "0", "00", "01", "+1", "-1", " 1", "1 ", "1e0", "0x1", "9223372036854775808"} {
		_, err := parseRunID(s)
		require.Error(t, err, s)
	}
}

func TestTokenCheck(t *testing.T) {
	callers := digests(map[string]string{"finance": token, "ops": "ops-token-0123456789abcdef"})
	h := auth(callers, func(w http.ResponseWriter, _ *http.Request, caller string) { _, _ = w.Write([]byte(caller)) })
	for bearer, want := range map[string]string{token: "finance", "ops-token-0123456789abcdef": "ops", token + "x": "", token[:10]: "", "": ""} {
		req, _ := http.NewRequest("GET", "/", nil)
		req.Header.Set("Authorization", "Bearer "+bearer)
		rec := &recorder{header: http.Header{}}
		h(rec, req)
		if want == "" {
			require.Equal(t, 401, rec.code, bearer)
		} else {
			require.Equal(t, want, rec.body.String(), bearer)
		}
	}
}

type recorder struct {
	header http.Header
	code   int
	body   strings.Builder
}

func (r *recorder) Header() http.Header { return r.header }
func (r *recorder) Write(b []byte) (int, error) {
	if r.code == 0 {
		r.code = 200
	}
	return r.body.Write(b)
}
func (r *recorder) WriteHeader(c int) { r.code = c }

// Beyond the bound POST /runs answers 429 with Retry-After; once shutting
// down, 503.
func TestAPIRefusesBeyondTheBound(t *testing.T) {
	t.Parallel()
	s := apiServer(t)
	s.MaxRuns = 1
	require.Equal(t, 1, s.Bound())
	s.slots <- struct{}{} // a run in flight
	srv := startServer(t, s)
	req, _ := http.NewRequest("POST", "http://"+srv+"/runs", strings.NewReader(`{"provider":"stripe"}`))
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	var body map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
	resp.Body.Close()
	require.Equal(t, 429, resp.StatusCode)
	require.Equal(t, retryAfter, resp.Header.Get("Retry-After"))
	require.Contains(t, body["error"], "too many runs")
	<-s.slots
	s.stopStarting()
	_, err = s.Start(context.Background(), runner.Request{Job: runner.Job{Provider: "stripe"}})
	require.ErrorIs(t, err, ErrShuttingDown)
	require.Empty(t, s.slots, "the slot is given back")
}
