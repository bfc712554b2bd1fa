package serve

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
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
	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/runner"
)

const token = "finance-token-0123456789abcdef"

// The runs API on the embedded store, in process: the filters of GET /runs,
// GET /runs/{id}, and the 409 that names the run in progress.
func TestRunsAPIReadsTheRunRecord(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewSQLite(t).DB
	st := dbopen.Store(db, nil)
	getenv := func(k string) string {
		return map[string]string{"STRIPE_API_KEY": "sk_test_serve", "STRIPE_API_BASE": "http://127.0.0.1:1"}[k]
	}
	cfg, err := config.Load(filepath.Join(t.TempDir(), "none.yaml"), false, getenv, os.ReadFile)
	require.NoError(t, err)
	at := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	add := func(provider, account, status, trigger string) int64 {
		r := models.Run{Provider: provider, Account: account, Status: status, Trigger: trigger,
			WindowStart: at, WindowEnd: at.Add(time.Hour), StartedAt: at, Notes: models.JSON("[]")}
		require.NoError(t, st.CreateRun(ctx, &r))
		return r.ID
	}
	r1 := add("stripe", "", models.RunSucceeded, models.TriggerSchedule)
	r2 := add("stripe", "acct_1A", models.RunFailed, models.TriggerAPI)
	r3 := add("gocardless", "", models.RunSucceeded, models.TriggerSchedule)
	r4 := add("stripe", "", models.RunRunning, models.TriggerAPI)
	s := &Server{Runner: &runner.Service{Config: cfg, DB: db, Store: st}, Log: slog.New(slog.DiscardHandler), Metrics: metrics.New(),
		Tokens: map[string]string{"finance": token}, Providers: []string{"stripe", "gocardless"}}
	srv := httptest.NewServer(s.Handler(ctx))
	t.Cleanup(srv.Close)

	do := func(method, path, body string) (int, map[string]any) {
		t.Helper()
		req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		var m map[string]any
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&m))
		return resp.StatusCode, m
	}
	list := func(query string) []int64 {
		t.Helper()
		code, body := do("GET", "/runs"+query, "")
		require.Equal(t, 200, code, body)
		ids := []int64{}
		for _, r := range body["runs"].([]any) {
			ids = append(ids, int64(r.(map[string]any)["id"].(float64)))
		}
		return ids
	}
	require.Equal(t, []int64{r4, r3, r2, r1}, list(""))
	require.Equal(t, []int64{r4, r3}, list("?limit=2"))
	require.Equal(t, []int64{r4, r2, r1}, list("?provider=stripe"))
	require.Equal(t, []int64{r2}, list("?account=acct_1A"))
	require.Equal(t, []int64{r4, r3, r1}, list("?account="))
	require.Equal(t, []int64{r4, r1}, list("?provider=stripe&account="))
	require.Equal(t, []int64{r3, r1}, list("?trigger=schedule"))
	require.Equal(t, []int64{r3, r1}, list("?status=succeeded"))
	require.Equal(t, []int64{}, list("?status="))
	code, body := do("GET", "/runs?limit=0", "")
	require.Equal(t, 400, code)
	require.Equal(t, "limit", body["field"])

	code, body = do("GET", "/runs/"+itoa(r2), "")
	require.Equal(t, 200, code, body)
	require.Equal(t, "acct_1A", body["account"])
	require.Equal(t, "failed", body["status"])
	code, body = do("GET", "/runs/999", "")
	require.Equal(t, 404, code)
	require.Equal(t, "no run 999", body["error"])
	code, _ = do("GET", "/runs/x", "")
	require.Equal(t, 400, code)

	// Another holder has the lock: 409 with the run in progress.
	lock, err := st.TryLock(ctx, "stripe/")
	require.NoError(t, err)
	t.Cleanup(func() { _ = lock.Release(ctx) })
	code, body = do("POST", "/runs", `{"provider":"stripe"}`)
	require.Equal(t, 409, code, body)
	require.Equal(t, float64(r4), body["run_id"])
	require.Equal(t, ErrBusy.Error(), body["error"])
}

func itoa(n int64) string { b, _ := json.Marshal(n); return string(b) }
