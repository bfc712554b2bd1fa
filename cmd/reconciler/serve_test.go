package main_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
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
	return startServeWith(t, w, "serve:\n  schedule: \""+schedule+"\"\nrun:\n  stuck_limit: -1\n  batch_size: 20\n")
}

// startServeWith starts `reconciler serve` with the configuration yaml.
func startServeWith(t *testing.T, w *world, yaml string) *served {
	t.Helper()
	cfg := writeFile(t, yaml)
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
	require.Equal(t, body["id"], body["run_id"], "a 202 names the run as a 409 does, and as id")
	run := s.waitRun(t, int64(body["id"].(float64)))
	require.Equal(t, models.RunSucceeded, run.Status)
	require.Equal(t, int64(1), run.Repaired)
	require.Len(t, run.Items, 1)

	code, body = s.do(t, "GET", "/runs?limit=10", financeToken, "")
	require.Equal(t, 200, code)
	require.Len(t, body["runs"], 2)
	newest := body["runs"].([]any)[0].(map[string]any)
	require.NotContains(t, newest, "items", "a list entry does not claim an empty items")
	require.Equal(t, float64(1), newest["item_count"])
	code, _ = s.do(t, "GET", "/runs/999999", financeToken, "")
	require.Equal(t, 404, code)

	// 409 while another process holds the run lock.
	sqlDB, err := w.db.DB.DB()
	require.NoError(t, err)
	conn, err := sqlDB.Conn(context.Background())
	require.NoError(t, err)
	// The run's record ends before its lock is let go: wait for the lock.
	var ok bool
	for deadline := time.Now().Add(10 * time.Second); !ok && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		require.NoError(t, conn.QueryRowContext(context.Background(), `SELECT pg_try_advisory_lock(hashtextextended(current_schema() || '/reconciler/stripe/', 0))`).Scan(&ok))
	}
	require.True(t, ok, "the run's lock was let go")
	code, _ = s.do(t, "POST", "/runs", financeToken, `{"provider":"stripe"}`)
	require.Equal(t, 409, code)
	require.NoError(t, conn.Close())

	// Metrics of the runs it made (observed just after a run's record ends):
	// the dry run only in its own counter.
	var m []byte
	wants := []string{
		`reconciler_runs_total{account="",provider="stripe",status="succeeded"} 1`,
		`reconciler_dry_runs_total{account="",provider="stripe",status="succeeded"} 1`,
		`reconciler_drift_items_total{account="",action="repaired",kind="missing_local",provider="stripe"} 1`,
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

// 40 ad-hoc runs for distinct accounts at once and 12 accounts on a
// schedule every second, on the default pool (database.max_open_conns 10):
// every run ends or is refused with a reason, /readyz answers 200 all along,
// and after SIGTERM no run is left running.
func TestServeUnderLoadNeverWedges(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	var accounts []string
	for i := range 12 {
		a := fmt.Sprintf("acct_sched%02d", i)
		accounts = append(accounts, a)
		w.fake.Account(a).Generate(stripefake.GenOptions{Payments: 150, Start: w.now.Add(-5 * time.Hour), End: w.now.Add(-time.Hour), Seed: int64(i + 1)})
	}
	for i := range 40 {
		w.fake.Account(fmt.Sprintf("acct_adhoc%02d", i)).Generate(stripefake.GenOptions{Payments: 20, Start: w.now.Add(-5 * time.Hour), End: w.now.Add(-time.Hour), Seed: int64(i + 100)})
	}
	w.fake.SetLatency(20 * time.Millisecond)
	s := startServeWith(t, w, "serve:\n  schedule: \"@every 1s\"\nrun:\n  stuck_limit: -1\n  batch_size: 20\nproviders:\n  stripe:\n    accounts: ["+strings.Join(accounts, ", ")+"]\n")

	// /readyz, every 50 ms, until the end.
	stopProbe := make(chan struct{})
	probed := make(chan [2]int, 1)
	go func() {
		ok, notOK := 0, 0
		for {
			select {
			case <-stopProbe:
				probed <- [2]int{ok, notOK}
				return
			case <-time.After(50 * time.Millisecond):
			}
			c := http.Client{Timeout: 5 * time.Second}
			resp, err := c.Get(s.base + "/readyz")
			if err == nil && resp.StatusCode == 200 {
				ok++
			} else {
				notOK++
			}
			if err == nil {
				resp.Body.Close()
			}
		}
	}()

	type answer struct {
		code       int
		id         int64
		reason     string
		retryAfter string
	}
	answers := make([]answer, 40)
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Go(func() {
			req, _ := http.NewRequest("POST", s.base+"/runs", strings.NewReader(fmt.Sprintf(`{"provider":"stripe","account":"acct_adhoc%02d"}`, i)))
			req.Header.Set("Authorization", "Bearer "+financeToken)
			c := http.Client{Timeout: 20 * time.Second}
			resp, err := c.Do(req)
			if err != nil {
				answers[i] = answer{reason: err.Error()}
				return
			}
			defer resp.Body.Close()
			var b map[string]any
			_ = json.NewDecoder(resp.Body).Decode(&b)
			a := answer{code: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After")}
			if id, ok := b["id"].(float64); ok {
				a.id = int64(id)
			}
			a.reason, _ = b["error"].(string)
			answers[i] = a
		})
	}
	wg.Wait()
	accepted, refused := 0, 0
	for i, a := range answers {
		switch a.code {
		case 202:
			accepted++
			r := s.waitRun(t, a.id)
			require.Equal(t, models.RunSucceeded, r.Status, "run %d", a.id)
		case 429:
			refused++
			require.Contains(t, a.reason, "too many runs", i)
			require.NotEmpty(t, a.retryAfter, i)
		case 409:
			t.Fatalf("POST %d: 409 for a distinct account", i)
		default:
			t.Fatalf("POST %d: %d %q", i, a.code, a.reason)
		}
	}
	require.Positive(t, accepted)

	// The schedule keeps going: each of its accounts runs within a few ticks.
	deadline := time.Now().Add(30 * time.Second)
	for {
		var n int64
		require.NoError(t, w.db.Raw(`SELECT count(DISTINCT account) FROM reconciliation_runs WHERE trigger = 'schedule' AND status = 'succeeded'`).Scan(&n).Error)
		if n == 12 {
			break
		}
		require.True(t, time.Now().Before(deadline), "only %d of 12 scheduled accounts ran\n%s", n, s.stderr.String())
		time.Sleep(100 * time.Millisecond)
	}
	close(stopProbe)
	p := <-probed
	require.Zero(t, p[1], "/readyz answered other than 200 %d times of %d", p[1], p[0]+p[1])
	require.Contains(t, s.stderr.String(), "max_runs")

	require.NoError(t, s.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-s.exited:
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not exit within the grace period")
	}
	require.Equal(t, 0, s.cmd.ProcessState.ExitCode(), s.stderr.String())
	var running, interrupted, total int64
	require.NoError(t, w.db.Raw(`SELECT count(*) FROM reconciliation_runs WHERE status = 'running'`).Scan(&running).Error)
	require.NoError(t, w.db.Raw(`SELECT count(*) FROM reconciliation_runs WHERE status = 'interrupted'`).Scan(&interrupted).Error)
	require.NoError(t, w.db.Raw(`SELECT count(*) FROM reconciliation_runs`).Scan(&total).Error)
	require.Zero(t, running, "runs left running after SIGTERM")
	t.Logf("ad-hoc: %d accepted, %d refused (429); /readyz: %d answers, all 200; runs recorded: %d, %d of them interrupted by SIGTERM",
		accepted, refused, p[0], total, interrupted)
}

func TestServeRefusesSharedTokens(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	res := cli(t, w.with("RECONCILER_API_TOKENS", "finance:"+financeToken+",ops:"+financeToken, "RECONCILER_HTTP_ADDR", "127.0.0.1:0"), "serve")
	require.Equal(t, 2, res.code, res.stderr)
	require.Contains(t, res.stderr, `"finance"`)
	require.Contains(t, res.stderr, `"ops"`)
	require.NotContains(t, res.stderr, financeToken)
}
