package main_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/reconciler/reconciler/internal/pgtest"
	"github.com/reconciler/reconciler/internal/webhooksim"
	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/providers/gocardless/gcfake"
	"github.com/reconciler/reconciler/providers/stripe"
	"github.com/reconciler/reconciler/providers/stripe/stripefake"
	"github.com/reconciler/reconciler/report"
	"github.com/reconciler/reconciler/verify"
)

var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "reconciler-bin")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "reconciler")
	out, err := exec.Command("go", "build", "-o", binary, ".").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "build: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

type result struct {
	code           int
	stdout, stderr string
}

// cli runs the built binary with exactly env (plus PATH) in dir.
func cli(t *testing.T, env map[string]string, args ...string) result {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Dir = t.TempDir()
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return result{code, so.String(), se.String()}
}

type world struct {
	db   *pgtest.DB
	fake *stripefake.Server
	acct *stripefake.Account
	env  map[string]string
	now  time.Time
}

func newWorld(t *testing.T) *world {
	t.Helper()
	db := pgtest.New(t)
	now := time.Now().UTC().Truncate(time.Second)
	fake := stripefake.New(stripefake.Options{Seed: 1})
	url := fake.Start()
	t.Cleanup(fake.Close)
	return &world{db: db, fake: fake, acct: fake.Account(""), now: now, env: map[string]string{
		"DATABASE_URL": db.URL, "STRIPE_API_KEY": "sk_test_cli", "STRIPE_API_BASE": url,
	}}
}

func (w *world) with(kv ...string) map[string]string {
	env := map[string]string{}
	for k, v := range w.env {
		env[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] == "" {
			delete(env, kv[i])
		} else {
			env[kv[i]] = kv[i+1]
		}
	}
	return env
}

func (w *world) runs(t *testing.T) []models.Run {
	var runs []models.Run
	require.NoError(t, w.db.Order("id").Find(&runs).Error)
	return runs
}

// firstEvent is the time of the oldest event of the named Stripe accounts
// of the fake (the platform when none is named).
func (w *world) firstEvent(accounts ...string) time.Time {
	if len(accounts) == 0 {
		accounts = []string{""}
	}
	first := w.now
	for _, a := range accounts {
		for _, d := range w.fake.Account(a).Deliveries() {
			if d.At.Before(first) {
				first = d.At
			}
		}
	}
	return first
}

// verifyOutput is what `reconciler verify -o json` prints.
type verifyOutput struct {
	OK          bool            `json:"ok"`
	Checked     int             `json:"checked"`
	Differing   int             `json:"differing"`
	Explained   int             `json:"explained"`
	Unexplained int             `json:"unexplained"`
	Reports     []verify.Report `json:"reports"`
}

// verified is one `reconciler verify --all` of the built binary.
type verified struct {
	out     verifyOutput
	summary []string // verify's summary lines (stderr), one per provider and account
	wall    time.Duration
}

// verifyClean runs the built binary's `reconciler verify --all` over
// [since, until) with env (the run's environment) and args (the run's
// --config, --account, …), and requires exit 0: nothing differs from the
// provider's own objects that no drift item explains. The oracle is the
// provider's objects, never the fake's truth file.
func verifyClean(t *testing.T, env map[string]string, since, until time.Time, args ...string) verified {
	t.Helper()
	args = append([]string{"verify", "--all", "--since", since.UTC().Format(time.RFC3339), "--until", until.UTC().Format(time.RFC3339), "-o", "json"}, args...)
	start := time.Now()
	r := cli(t, env, args...)
	v := verified{wall: time.Since(start)}
	for _, line := range strings.Split(r.stderr, "\n") {
		if strings.HasPrefix(line, "verify ") {
			v.summary = append(v.summary, line)
		}
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &v.out), "verify -o json: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	var diffs []string
	for _, rep := range v.out.Reports {
		for _, d := range rep.Unexplained {
			diffs = append(diffs, fmt.Sprintf("%s/%s %s %s: local %s, provider %s", rep.Provider, rep.Account, d.ProviderID, d.Field, d.Local, d.Provider))
		}
	}
	require.Equal(t, 0, r.code, "verify --all exit %d: %s\nunexplained:\n%s", r.code, strings.Join(v.summary, "\n"), strings.Join(diffs, "\n"))
	require.True(t, v.out.OK)
	require.Positive(t, v.out.Checked, "verify checked nothing: %s", strings.Join(v.summary, "\n"))
	return v
}

// requireVerifiedAll: the verification checked every payment row of the
// database (the window held them all).
func requireVerifiedAll(t *testing.T, w *world, v verified) {
	t.Helper()
	var n int64
	require.NoError(t, w.db.Raw(`SELECT count(*) FROM payments`).Scan(&n).Error)
	require.Equal(t, int(n), v.out.Checked, "verify checked every row: %s", strings.Join(v.summary, "\n"))
}

func writeFile(t *testing.T, body string) string {
	p := filepath.Join(t.TempDir(), "config.yaml")
	require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
	return p
}

func TestUsageAndConfigErrorsExit2BeforeTheDatabase(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	typo := writeFile(t, "run:\n  windw: 24h\n")
	badDur := writeFile(t, "run:\n  window: yesterday\n")
	badRPS := writeFile(t, "providers:\n  stripe:\n    requests_per_second: 0\n")
	cases := []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{"unknown flag", w.env, []string{"run", "--bogus"}, "run: unknown flag --bogus (run reconciler run --help for its flags)"},
		{"bad since", w.env, []string{"run", "--since", "last tuesday"}, "--since"},
		{"since after until", w.env, []string{"run", "--since", "2026-11-02", "--until", "2026-11-01"}, "must be before --until"},
		{"bad format", w.env, []string{"run", "--format", "pdf"}, "--format"},
		{"unknown provider", w.env, []string{"run", "--provider", "paypal"}, `unknown provider "paypal"`},
		{"unknown config key", w.env, []string{"run", "--config", typo}, "windw"},
		{"bad duration", w.env, []string{"run", "--config", badDur}, "not a duration"},
		{"out of range", w.env, []string{"run", "--config", badRPS}, "providers.stripe.requests_per_second"},
		{"missing config file", w.env, []string{"run", "--config", "/nonexistent.yaml"}, "--config"},
		{"no key", w.with("STRIPE_API_KEY", ""), []string{"run"}, "STRIPE_API_KEY"},
		{"publishable key", w.with("STRIPE_API_KEY", "pk_test_x"), []string{"run"}, "publishable"},
		{"unknown command", w.env, []string{"frobnicate"}, "unknown command"},
	}
	for _, c := range cases {
		r := cli(t, c.env, c.args...)
		require.Equal(t, 2, r.code, "%s: %s", c.name, r.stderr)
		require.Contains(t, r.stderr, c.want, c.name)
	}
	require.Empty(t, w.runs(t), "usage errors touch nothing")
}

func TestRunExit0ReportAndRerun(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	pi := w.acct.CreatePayment(4200, "gbp", false, w.now.Add(-3*time.Hour))
	w.acct.Capture(pi, w.now.Add(-3*time.Hour+time.Minute))

	r := cli(t, w.env, "run", "--format", "json")
	require.Equal(t, 0, r.code, r.stderr)
	var rep report.Report
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep))
	require.Len(t, rep.Runs, 1)
	require.Equal(t, "succeeded", rep.Runs[0].Status)
	require.Equal(t, int64(1), rep.Runs[0].Repaired)
	require.Equal(t, "missing_local", rep.Runs[0].Items[0].Kind)
	// Logs are JSON lines on stderr (not a terminal), with run id, provider, account.
	for _, line := range strings.Split(strings.TrimSpace(r.stderr), "\n") {
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &m), line)
	}
	require.Contains(t, r.stderr, `"run_id":`)

	md := filepath.Join(t.TempDir(), "r.md")
	r = cli(t, w.env, "run", "--report", md, "--format", "md")
	require.Equal(t, 0, r.code, r.stderr)
	b, err := os.ReadFile(md)
	require.NoError(t, err)
	require.Contains(t, string(b), "| repaired | 0 |")
	require.Contains(t, string(b), "No drift.")
	requireVerifiedAll(t, w, verifyClean(t, w.env, w.firstEvent().Add(-time.Hour), w.now.Add(time.Hour)))

	r = cli(t, w.env, "version")
	require.Equal(t, 0, r.code)
	require.Contains(t, r.stdout, "reconciler ")
	r = cli(t, w.env, "migrate")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "up to date")
}

func TestRunFailsExit1AndIsRecordedFailed(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.fake.SetFailureRate(500, 1)
	cfg := writeFile(t, "providers:\n  stripe:\n    max_retries: 1\n")
	r := cli(t, w.env, "run", "--config", cfg)
	require.Equal(t, 1, r.code, r.stderr)
	require.Contains(t, r.stderr, "HTTP 500")
	runs := w.runs(t)
	require.Len(t, runs, 1)
	require.Equal(t, models.RunFailed, runs[0].Status)
	require.NotNil(t, runs[0].Error)
}

func TestLockHeldExit3(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	sqlDB, err := w.db.DB.DB()
	require.NoError(t, err)
	conn, err := sqlDB.Conn(context.Background())
	require.NoError(t, err)
	defer conn.Close()
	var ok bool
	require.NoError(t, conn.QueryRowContext(context.Background(), `SELECT pg_try_advisory_lock(hashtextextended(current_schema() || '/reconciler/stripe/', 0))`).Scan(&ok))
	require.True(t, ok)
	r := cli(t, w.env, "run")
	require.Equal(t, 3, r.code, r.stderr)
	require.Contains(t, r.stderr, "holds the lock")
	require.Empty(t, w.runs(t))
}

func TestKilledBetweenBatchesThenRerun(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.acct.Generate(stripefake.GenOptions{Payments: 600, Start: w.now.Add(-20 * time.Hour), End: w.now.Add(-time.Hour), Seed: 21})
	_, _, err := webhooksim.Seed(context.Background(), w.db.DB, "stripe", webhooksim.Stripe(w.acct.Deliveries()), w.now,
		func(i int, _ webhooksim.Delivery) bool { return i%3 != 0 })
	require.NoError(t, err)
	w.fake.SetLatency(15 * time.Millisecond)

	cmd := startAfterFirstBatch(t, w, nil)
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	_ = cmd.Wait()
	runs := w.runs(t)
	require.Len(t, runs, 1)
	require.Equal(t, models.RunRunning, runs[0].Status, "a killed run cannot record anything")

	w.fake.SetLatency(0)
	r := cli(t, w.env, "run", "--lock-wait", "20s", "--format", "json")
	require.Equal(t, 0, r.code, r.stderr)
	runs = w.runs(t)
	require.Equal(t, models.RunInterrupted, runs[0].Status)
	require.Equal(t, models.RunSucceeded, runs[1].Status)
	assertProviderStates(t, w, runs[0].ID, runs[1].ID)
	requireVerifiedAll(t, w, verifyClean(t, w.env, w.firstEvent().Add(-time.Hour), w.now.Add(time.Hour)))
}

// startAfterFirstBatch starts `reconciler run` in small batches and returns
// once its first batch has committed.
func startAfterFirstBatch(t *testing.T, w *world, stderr *bytes.Buffer) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(binary, "run", "--batch-size", "20")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	for k, v := range w.env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	if stderr != nil {
		cmd.Stderr = stderr
	}
	require.NoError(t, cmd.Start())
	deadline := time.Now().Add(60 * time.Second)
	for {
		var n int64
		require.NoError(t, w.db.Raw(`SELECT coalesce(max(examined), 0) FROM reconciliation_runs`).Scan(&n).Error)
		if n > 0 {
			return cmd
		}
		require.True(t, time.Now().Before(deadline), "no batch committed in time")
		time.Sleep(5 * time.Millisecond)
	}
}

// assertProviderStates: every payment is where the provider implies, or a
// refused item of these runs says why.
func assertProviderStates(t *testing.T, w *world, runIDs ...int64) (wrong int) {
	t.Helper()
	return len(providerStates(t, w, runIDs...))
}

// providerStates is assertProviderStates returning the payments left for a
// human.
func providerStates(t *testing.T, w *world, runIDs ...int64) (wrong []string) {
	t.Helper()
	var items []models.DriftItem
	require.NoError(t, w.db.Where("run_id IN ? AND action = 'refused'", runIDs).Find(&items).Error)
	refused := map[string]bool{}
	for _, it := range items {
		refused[it.ProviderID] = true
	}
	var rows []models.Payment
	require.NoError(t, w.db.Find(&rows).Error)
	have := map[string]models.Payment{}
	for _, p := range rows {
		have[p.ProviderID] = p
	}
	for id, want := range w.acct.ExpectedAt(w.now) {
		p, ok := have[id]
		require.True(t, ok, "payment %s missing", id)
		if p.State != want.State || p.AmountRefunded != want.AmountRefunded {
			require.True(t, refused[id], "payment %s is %s/%d, provider implies %s/%d", id, p.State, p.AmountRefunded, want.State, want.AmountRefunded)
			wrong = append(wrong, id)
		}
	}
	return wrong
}

// TestTenThousandPayments is the acceptance scenario of the foundation
// issue: 10,000 payments over five days, a tenth of the webhooks missed.
func TestTenThousandPayments(t *testing.T) {
	if testing.Short() {
		t.Skip("acceptance scenario")
	}
	t.Parallel()
	w := newWorld(t)
	// An account with history before the window (an anchor for paging).
	w.acct.CreatePayment(100, "gbp", false, w.now.Add(-10*24*time.Hour))
	w.acct.Generate(stripefake.GenOptions{Payments: 10000, Start: w.now.Add(-5 * 24 * time.Hour), End: w.now.Add(-time.Minute), Seed: 99})
	ds := webhooksim.Stripe(w.acct.Deliveries())
	missed := map[string]bool{}
	_, nMissed, err := webhooksim.Seed(context.Background(), w.db.DB, "stripe", ds, w.now,
		func(i int, d webhooksim.Delivery) bool {
			if i%10 == 3 {
				missed[d.EventID] = true
				return false
			}
			return true
		})
	require.NoError(t, err)
	wantSynthetic := 0
	for _, d := range ds {
		if missed[d.EventID] && containsStr(stripe.EventTypes, d.EventType) {
			wantSynthetic++
		}
	}
	since := w.now.Add(-6 * 24 * time.Hour).Format(time.RFC3339)
	// Stripe's live-mode read budget; the default config paces to 20/s, safe for test mode.
	cfg := writeFile(t, "providers:\n  stripe:\n    requests_per_second: 100\n")
	before := w.fake.Requests()
	start := time.Now()
	r := cli(t, w.env, "run", "--config", cfg, "--since", since, "--format", "json")
	wall := time.Since(start)
	require.Equal(t, 0, r.code, r.stderr)
	var rep report.Report
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep))
	run := rep.Runs[0]
	require.Equal(t, int64(wantSynthetic), run.SyntheticEvents, "each missed event inserted exactly once")
	var synthetic int64
	require.NoError(t, w.db.Raw(`SELECT count(*) FROM webhook_events WHERE synthetic`).Scan(&synthetic).Error)
	require.Equal(t, int64(wantSynthetic), synthetic)
	wrongIDs := providerStates(t, w, run.ID)
	wrong := len(wrongIDs)
	require.Equal(t, int(run.Refused), len(refusedItems(run)))
	// No payment the provider's records settle is left for a human.
	for _, id := range wrongIDs {
		var p models.Payment
		require.NoError(t, w.db.Where("provider_id = ?", id).First(&p).Error)
		t.Logf("left for a human: %s %s refunded=%d at=%v settled=%v", id, p.State, p.AmountRefunded, p.SourceUpdatedAt, p.SettledAt)
		for _, it := range run.Items {
			if it.ProviderID == id {
				b, _ := json.Marshal(it)
				t.Logf("  item %s", b)
			}
		}
	}
	require.Zero(t, wrong, "payments left for a human that the provider's records settle: %v", wrongIDs)

	// The oracle: `reconciler verify --all` over every payment (the anchor
	// included), against the provider's own objects.
	v := verifyClean(t, w.env, w.firstEvent().Add(-time.Hour), w.now.Add(time.Hour), "--config", cfg)
	requireVerifiedAll(t, w, v)
	t.Logf("verify --all: %s; wall %v", strings.Join(v.summary, "; "), v.wall.Round(time.Millisecond))
	for _, rep := range v.out.Reports {
		for _, d := range rep.ExplainedDifferences {
			var kinds []string
			for _, it := range run.Items {
				if it.ProviderID == d.ProviderID {
					ps := "-"
					if it.ProviderState != nil {
						ps = *it.ProviderState
					}
					kinds = append(kinds, it.Kind+"/"+it.Action+" provider "+ps+": "+it.Explanation)
				}
			}
			t.Logf("explained: %s %s: local %s, provider %s (items: %s)", d.ProviderID, d.Field, d.Local, d.Provider, strings.Join(kinds, ", "))
		}
	}

	var trips float64
	for _, line := range strings.Split(r.stderr, "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil && m["msg"] == "run finished" {
			trips, _ = m["db_round_trips"].(float64)
		}
	}
	t.Logf("10,000 payments, %d events, %d webhooks missed (%d of listed types): wall %v (binary start to exit), %.0f payments/s, %.0f events/s, %d API requests (%.2f per 100 events), %.0f DB round trips (%.4f per payment), %d payments left for a human",
		len(ds), nMissed, wantSynthetic, wall.Round(time.Millisecond), 10000/wall.Seconds(), float64(run.EventsRead)/wall.Seconds(),
		w.fake.Requests()-before, 100*float64(run.APIRequests)/float64(run.EventsRead), trips, trips/10000, wrong)

	r = cli(t, w.env, "run", "--config", cfg, "--since", since, "--format", "json")
	require.Equal(t, 0, r.code, r.stderr)
	rep = report.Report{}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep))
	require.Zero(t, rep.Runs[0].Repaired, "a rerun repairs nothing")
	require.Zero(t, rep.Runs[0].SyntheticEvents, "a rerun inserts no events")
}

func refusedItems(r report.RunReport) []report.Item {
	var out []report.Item
	for _, it := range r.Items {
		if it.Action == "refused" {
			out = append(out, it)
		}
	}
	return out
}

func containsStr(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func TestNoSecretInAnyOutput(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	pi := w.acct.CreatePayment(100, "gbp", false, w.now.Add(-time.Hour))
	w.acct.Capture(pi, w.now.Add(-time.Hour))
	const key = "sk_test_SuperSecretKey4242"
	const pw = "hunter2Password"
	dbURL := strings.Replace(w.db.URL, "postgres@", "postgres:"+pw+"@", 1)
	for _, args := range [][]string{{"run"}, {"run", "--format", "json"}, {"migrate"}} {
		r := cli(t, w.with("STRIPE_API_KEY", key, "DATABASE_URL", dbURL), args...)
		require.Equal(t, 0, r.code, r.stderr)
		for _, out := range []string{r.stdout, r.stderr} {
			require.NotContains(t, out, key)
			require.NotContains(t, out, pw)
		}
	}
	// Failures too: an unreachable database, a failing provider.
	bad := strings.Replace(dbURL, "127.0.0.1:", "127.0.0.1:1", 1)
	r := cli(t, w.with("STRIPE_API_KEY", key, "DATABASE_URL", bad), "run")
	require.NotEqual(t, 0, r.code)
	require.NotContains(t, r.stderr, pw)
	w.fake.SetFailureRate(401, 1)
	cfg := writeFile(t, "providers:\n  stripe:\n    max_retries: 0\n")
	r = cli(t, w.with("STRIPE_API_KEY", key, "DATABASE_URL", dbURL), "run", "--config", cfg)
	require.Equal(t, 1, r.code)
	require.NotContains(t, r.stderr+r.stdout, key)
	var errs []string
	require.NoError(t, w.db.Raw(`SELECT coalesce(error, '') FROM reconciliation_runs`).Scan(&errs).Error)
	require.NotContains(t, strings.Join(errs, "\n"), key)
}

func TestSIGTERMFinishesTheBatchAndRecordsInterrupted(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.acct.Generate(stripefake.GenOptions{Payments: 600, Start: w.now.Add(-20 * time.Hour), End: w.now.Add(-time.Hour), Seed: 5})
	w.fake.SetLatency(20 * time.Millisecond)
	var se bytes.Buffer
	cmd := startAfterFirstBatch(t, w, &se)
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	err := cmd.Wait()
	require.Error(t, err)
	require.Equal(t, 1, cmd.ProcessState.ExitCode(), se.String())
	runs := w.runs(t)
	require.Len(t, runs, 1)
	require.Equal(t, models.RunInterrupted, runs[0].Status)
	require.NotNil(t, runs[0].FinishedAt)
	// The lock was released: the next run starts at once and completes.
	w.fake.SetLatency(0)
	r := cli(t, w.env, "run")
	require.Equal(t, 0, r.code, r.stderr)
	assertProviderStates(t, w, runs[0].ID, w.runs(t)[1].ID)
	requireVerifiedAll(t, w, verifyClean(t, w.env, w.firstEvent().Add(-time.Hour), w.now.Add(time.Hour)))
}

func TestAccountsAndDryRunFlags(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	pi := w.fake.Account("acct_1Test").CreatePayment(100, "gbp", false, w.now.Add(-time.Hour))
	w.fake.Account("acct_1Test").Capture(pi, w.now.Add(-time.Hour))
	w.acct.CreatePayment(100, "gbp", false, w.now.Add(-time.Hour))

	r := cli(t, w.env, "run", "--account", "acct_1Test", "--account", "acct_1Other", "--dry-run", "--format", "json")
	require.Equal(t, 0, r.code, r.stderr)
	var rep report.Report
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep))
	require.Len(t, rep.Runs, 2, "one run per account")
	require.Equal(t, "acct_1Test", rep.Runs[0].Account)
	require.True(t, rep.Runs[0].DryRun)
	require.Equal(t, int64(1), rep.Runs[0].Repaired)
	require.Zero(t, rep.Runs[1].Examined)
	var n int64
	require.NoError(t, w.db.Raw(`SELECT count(*) FROM payments`).Scan(&n).Error)
	require.Zero(t, n, "a dry run writes no payment")

	r = cli(t, w.env, "run", "--account", "acct_1Test")
	require.Equal(t, 0, r.code, r.stderr)
	var p models.Payment
	require.NoError(t, w.db.Where("provider_id = ?", pi).First(&p).Error)
	require.Equal(t, "acct_1Test", p.Account)
	require.Equal(t, models.StateCaptured, p.State)
	v := verifyClean(t, w.env, w.firstEvent("acct_1Test").Add(-time.Hour), w.now.Add(time.Hour), "--account", "acct_1Test")
	require.Equal(t, 1, v.out.Checked)
}

func TestSeveralProvidersOneFailing(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	gc := gcfake.New(gcfake.Options{Seed: 2})
	gcURL := gc.Start()
	t.Cleanup(gc.Close)
	pi := w.acct.CreatePayment(100, "gbp", false, w.now.Add(-time.Hour))
	w.acct.Capture(pi, w.now.Add(-time.Hour))
	pm := gc.CreatePayment(500, "GBP", w.now.Add(-2*time.Hour))
	gc.Submit(pm, w.now.Add(-time.Hour))
	env := w.with("GOCARDLESS_ACCESS_TOKEN", "sandbox_cli_token", "GOCARDLESS_API_BASE", gcURL)

	r := cli(t, env, "run", "--format", "json")
	require.Equal(t, 0, r.code, r.stderr)
	var rep report.Report
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep))
	require.Len(t, rep.Runs, 2, "one run per provider")
	byProvider := map[string]report.RunReport{}
	for _, run := range rep.Runs {
		byProvider[run.Provider] = run
	}
	require.Equal(t, int64(1), byProvider["stripe"].Repaired)
	require.Equal(t, int64(1), byProvider["gocardless"].Repaired)
	// Both providers' rows are their objects: verify --all over both.
	v := verifyClean(t, env, w.now.Add(-3*time.Hour), w.now.Add(time.Hour))
	require.Len(t, v.out.Reports, 2, "one report per provider")
	requireVerifiedAll(t, w, v)

	// GoCardless down: Stripe still runs; the exit code says a run failed.
	gc.SetFailureRate(500, 1)
	cfg := writeFile(t, "providers:\n  gocardless:\n    max_retries: 0\n")
	r = cli(t, env, "run", "--config", cfg, "--format", "json")
	require.Equal(t, 1, r.code, r.stderr)
	rep = report.Report{}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep))
	require.Len(t, rep.Runs, 2)
	for _, run := range rep.Runs {
		want := map[string]string{"stripe": models.RunSucceeded, "gocardless": models.RunFailed}[run.Provider]
		require.Equal(t, want, run.Status, run.Provider)
	}
	require.NotContains(t, r.stderr+r.stdout, "sandbox_cli_token")

	r = cli(t, env, "run", "--provider", "gocardless", "--account", "acct_1x")
	require.Equal(t, 2, r.code)
	require.Contains(t, r.stderr, "no connected accounts")
}

// Without DATABASE_URL the job runs on the embedded SQLite file and says so.
func TestEmbeddedStoreWithoutDatabaseURL(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	pi := w.acct.CreatePayment(100, "gbp", false, w.now.Add(-time.Hour))
	w.acct.Capture(pi, w.now.Add(-time.Hour))
	dir := t.TempDir()
	env := w.with("DATABASE_URL", "")
	run := func(args ...string) result {
		cmd := exec.Command(binary, args...)
		cmd.Dir = dir
		cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
		for k, v := range env {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
		var so, se bytes.Buffer
		cmd.Stdout, cmd.Stderr = &so, &se
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
		return result{code, so.String(), se.String()}
	}
	r := run("run", "--format", "json")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stderr, "embedded SQLite store")
	require.Contains(t, r.stderr, `"path":"reconciler.db"`)
	_, err := os.Stat(filepath.Join(dir, "reconciler.db"))
	require.NoError(t, err)
	var rep report.Report
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep))
	require.Equal(t, int64(1), rep.Runs[0].Repaired)
	r = run("run", "--format", "json")
	require.Equal(t, 0, r.code, r.stderr)
	rep = report.Report{}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep))
	require.Zero(t, rep.Runs[0].Repaired, "a rerun on the embedded store repairs nothing")
	r = run("report", "--last", "--format", "md")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "## Run 2")
	r = run("migrate")
	require.Equal(t, 0, r.code, r.stderr)
	// verify --all on the embedded store: the row is Stripe's.
	r = run("verify", "--all", "--since", w.firstEvent().Add(-time.Hour).Format(time.RFC3339), "--until", w.now.Add(time.Hour).Format(time.RFC3339))
	require.Equal(t, 0, r.code, "%s\n%s", r.stdout, r.stderr)
	require.Contains(t, r.stderr, "verify stripe/platform: 1 checked, 0 differing")
}
