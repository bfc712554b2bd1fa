package main_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/providers/stripe/stripefake"
	"github.com/reconciler/reconciler/report"
)

const financeToken = "finance-token-0123456789abcdef"

type served struct {
	cmd    *exec.Cmd
	base   string
	stderr *bytes.Buffer
	exited chan struct{}
}

// startServe starts `reconciler serve` on a loopback port with schedule.
func startServe(t *testing.T, w *world, schedule string) *served {
	t.Helper()
	cfg := writeFile(t, "serve:\n  schedule: \""+schedule+"\"\nrun:\n  stuck_limit: -1\n  batch_size: 20\n")
	cmd := exec.Command(binary, "serve", "--config", cfg)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "RECONCILER_HTTP_ADDR=127.0.0.1:0",
		"RECONCILER_API_TOKENS=finance:" + financeToken + ",ops:ops-token-0123456789abcdef"}
	for k, v := range w.env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	s := &served{cmd: cmd, stderr: &bytes.Buffer{}, exited: make(chan struct{})}
	cmd.Stderr = s.stderr
	require.NoError(t, cmd.Start())
	go func() { _ = cmd.Wait(); close(s.exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-s.exited
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err, s.stderr.String())
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "listening on ")
	require.True(t, ok, line)
	s.base = "http://" + addr
	return s
}

func (s *served) do(t *testing.T, method, path, token, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, s.base+path, strings.NewReader(body))
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	return resp.StatusCode, m
}

func (s *served) waitRun(t *testing.T, id int64) report.RunReport {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		req, _ := http.NewRequest("GET", s.base+"/runs/"+itoa(id), nil)
		req.Header.Set("Authorization", "Bearer "+financeToken)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		var r report.RunReport
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&r))
		resp.Body.Close()
		if r.Status != models.RunRunning {
			return r
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("run %d did not finish", id)
	return report.RunReport{}
}

func itoa(n int64) string { b, _ := json.Marshal(n); return string(b) }

func TestServeAPI(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	pi := w.acct.CreatePayment(4200, "gbp", false, w.now.Add(-3*time.Hour))
	w.acct.Capture(pi, w.now.Add(-3*time.Hour+time.Minute))
	s := startServe(t, w, "0 0 1 1 *")

	code, _ := s.do(t, "GET", "/healthz", "", "")
	require.Equal(t, 200, code)
	code, body := s.do(t, "GET", "/readyz", "", "")
	require.Equal(t, 200, code, body)

	// Refused: no token, a wrong token, malformed and invalid bodies.
	code, _ = s.do(t, "POST", "/runs", "", `{"provider":"stripe"}`)
	require.Equal(t, 401, code)
	code, _ = s.do(t, "POST", "/runs", "not-a-valid-token-at-all", `{"provider":"stripe"}`)
	require.Equal(t, 401, code)
	code, _ = s.do(t, "GET", "/runs", "", "")
	require.Equal(t, 401, code)
	for _, c := range []struct{ body, field string }{
		{`{"provider":"stripe"`, ""},
		{`{"provider":"stripe","sinse":"2026-11-01"}`, "sinse"},
		{`{"provider":"stripe","since":"yesterday"}`, "since"},
		{`{"provider":"stripe","until":"2026-13-40"}`, "until"},
		{`{"provider":"stripe","since":"2026-11-02","until":"2026-11-01"}`, "since"},
		{`{"provider":"paypal"}`, "provider"},
		{`{}`, "provider"},
		{`{"provider":"stripe","account":"bogus"}`, "account"},
		{`{"provider":"stripe","dry_run":"yes"}`, "dry_run"},
	} {
		code, body = s.do(t, "POST", "/runs", financeToken, c.body)
		require.Equal(t, 400, code, c.body)
		if c.field != "" {
			require.Equal(t, c.field, body["field"], c.body)
		}
		require.NotEmpty(t, body["error"])
	}

	// An ad-hoc dry run, then a real one, followed to completion.
	code, body = s.do(t, "POST", "/runs", financeToken, `{"provider":"stripe","dry_run":true}`)
	require.Equal(t, 202, code, body)
	dry := s.waitRun(t, int64(body["id"].(float64)))
	require.Equal(t, models.RunSucceeded, dry.Status)
	require.True(t, dry.DryRun)
	require.Equal(t, "api", dry.Trigger)
	require.Equal(t, "finance", dry.TriggeredBy, "the token's name is recorded")
	code, body = s.do(t, "POST", "/runs", financeToken, `{"provider":"stripe","since":"`+w.now.Add(-24*time.Hour).Format(time.RFC3339)+`"}`)
	require.Equal(t, 202, code, body)
	run := s.waitRun(t, int64(body["id"].(float64)))
	require.Equal(t, models.RunSucceeded, run.Status)
	require.Equal(t, int64(1), run.Repaired)
	require.Len(t, run.Items, 1)

	code, body = s.do(t, "GET", "/runs?limit=10", financeToken, "")
	require.Equal(t, 200, code)
	require.Len(t, body["runs"], 2)
	code, _ = s.do(t, "GET", "/runs/999999", financeToken, "")
	require.Equal(t, 404, code)

	// 409 while another process holds the run lock.
	sqlDB, err := w.db.DB.DB()
	require.NoError(t, err)
	conn, err := sqlDB.Conn(context.Background())
	require.NoError(t, err)
	var ok bool
	require.NoError(t, conn.QueryRowContext(context.Background(), `SELECT pg_try_advisory_lock(hashtextextended(current_schema() || '/reconciler/stripe/', 0))`).Scan(&ok))
	require.True(t, ok)
	code, _ = s.do(t, "POST", "/runs", financeToken, `{"provider":"stripe"}`)
	require.Equal(t, 409, code)
	require.NoError(t, conn.Close())

	// Metrics of the runs it made (observed just after a run's record ends).
	var m []byte
	wants := []string{
		`reconciler_runs_total{account="",provider="stripe",status="succeeded"} 2`,
		`reconciler_drift_items_total{account="",action="repaired",kind="missing_local",provider="stripe"} 2`,
		`reconciler_provider_requests_total{code="200",provider="stripe"}`,
		`reconciler_last_success_timestamp_seconds{account="",provider="stripe"}`,
		`reconciler_webhook_miss_ratio{account="",provider="stripe"} 1`,
		`reconciler_run_duration_seconds_bucket`,
	}
	for i := 0; ; i++ {
		resp, err := http.Get(s.base + "/metrics")
		require.NoError(t, err)
		m, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		missing := ""
		for _, want := range wants {
			if !strings.Contains(string(m), want) {
				missing = want
			}
		}
		if missing == "" {
			break
		}
		require.Less(t, i, 100, "metric missing: %s\n%s", missing, m)
		time.Sleep(20 * time.Millisecond)
	}
	require.NotContains(t, string(m), financeToken)
	require.NotContains(t, s.stderr.String(), financeToken)
}

func TestServeScheduleFires(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	pi := w.acct.CreatePayment(100, "gbp", false, w.now.Add(-time.Hour))
	w.acct.Capture(pi, w.now.Add(-time.Hour))
	startServe(t, w, "@every 1s")
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		var runs []models.Run
		require.NoError(t, w.db.Where("trigger = 'schedule' AND status = 'succeeded'").Find(&runs).Error)
		if len(runs) >= 2 {
			var p models.Payment
			require.NoError(t, w.db.Where("provider_id = ?", pi).First(&p).Error)
			require.Equal(t, models.StateCaptured, p.State)
			require.Equal(t, "schedule", runs[0].TriggeredBy)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal("the schedule did not fire twice within 30s")
}

func TestServeSIGTERMInterruptsTheRunAndTheNextCompletes(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.acct.Generate(stripefake.GenOptions{Payments: 600, Start: w.now.Add(-20 * time.Hour), End: w.now.Add(-time.Hour), Seed: 31})
	w.fake.SetLatency(20 * time.Millisecond)
	s := startServe(t, w, "0 0 1 1 *")
	code, body := s.do(t, "POST", "/runs", financeToken, `{"provider":"stripe"}`)
	require.Equal(t, 202, code, body)
	id := int64(body["id"].(float64))
	deadline := time.Now().Add(30 * time.Second)
	for {
		var n int64
		require.NoError(t, w.db.Raw(`SELECT examined FROM reconciliation_runs WHERE id = ?`, id).Scan(&n).Error)
		if n > 0 {
			break
		}
		require.True(t, time.Now().Before(deadline))
		time.Sleep(5 * time.Millisecond)
	}
	require.NoError(t, s.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-s.exited:
	case <-time.After(25 * time.Second):
		t.Fatal("serve did not exit within the grace period")
	}
	require.Equal(t, 0, s.cmd.ProcessState.ExitCode(), s.stderr.String())
	var r models.Run
	require.NoError(t, w.db.First(&r, id).Error)
	require.Equal(t, models.RunInterrupted, r.Status)

	w.fake.SetLatency(0)
	res := cli(t, w.env, "run")
	require.Equal(t, 0, res.code, res.stderr)
	assertProviderStates(t, w, id, w.runs(t)[1].ID)
}

func TestRunPushesMetricsToAPushgateway(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	got := make(chan string, 4)
	gw := httptestServer(t, func(rw http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- r.Method + " " + r.URL.Path + "\n" + string(b)
		rw.WriteHeader(http.StatusOK)
	})
	r := cli(t, w.with("RECONCILER_PUSHGATEWAY_URL", gw), "run")
	require.Equal(t, 0, r.code, r.stderr)
	select {
	case body := <-got:
		require.True(t, strings.HasPrefix(body, "PUT /metrics/job/reconciler"), body[:40])
		require.Contains(t, body, "reconciler_runs_total")
	case <-time.After(5 * time.Second):
		t.Fatal("nothing pushed")
	}
}
