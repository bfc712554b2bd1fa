package main_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/report"
)

// connected creates n connected accounts in the fake, each with one payment
// captured three hours ago that the local database has never heard of (a
// missing_local repair), and returns their ids.
func connected(t *testing.T, w *world, n int) []string {
	t.Helper()
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("acct_1Fan%02dOut", i)
		a := w.fake.Account(ids[i])
		pi := a.CreatePayment(int64(1000+i), "gbp", false, w.now.Add(-3*time.Hour))
		a.Capture(pi, w.now.Add(-3*time.Hour+time.Minute))
	}
	return ids
}

func accountsFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "accounts.txt")
	require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
	return p
}

// runAccounts maps account -> its run rows' statuses, and fails on a run
// of another provider.
func runAccounts(t *testing.T, runs []models.Run) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, r := range runs {
		require.Equal(t, "stripe", r.Provider)
		out[r.Account] = append(out[r.Account], r.Status)
	}
	return out
}

// assertRepaired: every account's payment is in the database, captured,
// under its account.
func assertRepaired(t *testing.T, w *world, ids []string) {
	t.Helper()
	var rows []models.Payment
	require.NoError(t, w.db.Find(&rows).Error)
	byAccount := map[string]int{}
	for _, p := range rows {
		require.Equal(t, models.StateCaptured, p.State, "payment %s of %s", p.ProviderID, p.Account)
		byAccount[p.Account]++
	}
	for _, id := range ids {
		require.Equal(t, 1, byAccount[id], "account %s: its payment repaired exactly once", id)
	}
	require.Len(t, rows, len(ids))
}

// verifyAccounts runs verify --all for each of ids (the run's --config in
// args) and requires it clean, every account checked.
func verifyAccounts(t *testing.T, w *world, ids []string, args ...string) verified {
	t.Helper()
	for _, id := range ids {
		args = append(args, "--account", id)
	}
	v := verifyClean(t, w.env, w.firstEvent(ids...).Add(-time.Hour), w.now.Add(time.Hour), args...)
	require.Len(t, v.out.Reports, len(ids), "one report per account")
	var n int64
	require.NoError(t, w.db.Raw(`SELECT count(*) FROM payments WHERE account IN ?`, ids).Scan(&n).Error)
	require.Equal(t, int(n), v.out.Checked, "verify checked every row of the accounts")
	return v
}

// summaryLine returns the "accounts summary" log line of a run's stderr.
func summaryLine(t *testing.T, stderr string) map[string]any {
	t.Helper()
	for _, line := range strings.Split(stderr, "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil && m["msg"] == "accounts summary" {
			return m
		}
	}
	t.Fatalf("no accounts summary on stderr:\n%s", stderr)
	return nil
}

func requireSummary(t *testing.T, stderr string, total, inShard, succeeded, failed, locked int) {
	t.Helper()
	m := summaryLine(t, stderr)
	got := []float64{m["accounts_total"].(float64), m["accounts_in_shard"].(float64), m["succeeded"].(float64), m["failed"].(float64), m["locked"].(float64)}
	want := []float64{float64(total), float64(inShard), float64(succeeded), float64(failed), float64(locked)}
	require.Equal(t, want, got, "summary total, in shard, succeeded, failed, locked: %v", m)
}

func TestAccountsFromFileConcurrently(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	ids := connected(t, w, 12)
	file := accountsFile(t, "# connected accounts of the platform\n\n"+strings.Join(ids[:6], "\n")+"\n  "+
		strings.Join(ids[6:], "  # a comment\n")+"\n"+ids[0]+"\n")

	r := cli(t, w.env, "run", "--accounts-from", file, "--concurrency", "4", "--format", "json")
	require.Equal(t, 0, r.code, r.stderr)

	byAccount := runAccounts(t, w.runs(t))
	require.Len(t, byAccount, 12, "one run per account, the platform not among them (a duplicate line is dropped)")
	for _, id := range ids {
		require.Equal(t, []string{models.RunSucceeded}, byAccount[id], id)
	}
	assertRepaired(t, w, ids)
	var rep report.Report
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep))
	require.Len(t, rep.Runs, 12, "one report section per account")
	for _, run := range rep.Runs {
		require.Equal(t, int64(1), run.Repaired, run.Account)
		require.Positive(t, run.APIRequests, "each account counts its own requests on the shared transport")
	}
	requireSummary(t, r.stderr, 12, 12, 12, 0, 0)
	verifyAccounts(t, w, ids)
}

func TestAccountsFromStripeListsConnectedAccounts(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	ids := connected(t, w, 12)

	r := cli(t, w.env, "run", "--accounts-from", "stripe", "--concurrency", "4")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, int64(1), w.fake.RequestsByPath()["/v1/accounts"], "12 accounts are one page of GET /v1/accounts")

	byAccount := runAccounts(t, w.runs(t))
	require.Len(t, byAccount, 12)
	for _, id := range ids {
		require.Equal(t, []string{models.RunSucceeded}, byAccount[id], id)
	}
	assertRepaired(t, w, ids)
	requireSummary(t, r.stderr, 12, 12, 12, 0, 0)
	verifyAccounts(t, w, ids)
}

func shardOf(account string, count int) int {
	h := fnv.New32a()
	h.Write([]byte(account))
	return int(h.Sum32() % uint32(count))
}

func TestShardsSplitAccountsWithNoOverlap(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	ids := connected(t, w, 12)
	file := accountsFile(t, strings.Join(ids, "\n")+"\n")
	want := map[int][]string{}
	for _, id := range ids {
		want[shardOf(id, 3)] = append(want[shardOf(id, 3)], id)
	}
	require.Len(t, want, 3, "the test's accounts land on every shard")

	// The three shards at once, as the pods of an Indexed Job run.
	type done struct {
		i   int
		res result
		err error
	}
	ch := make(chan done, 3)
	for i := range 3 {
		go func() {
			res, err := runBinary(w.env, "run", "--accounts-from", file, "--shard", fmt.Sprintf("%d/3", i), "--format", "json")
			ch <- done{i, res, err}
		}()
	}
	for range 3 {
		d := <-ch
		require.NoError(t, d.err)
		require.Equal(t, 0, d.res.code, "shard %d: %s", d.i, d.res.stderr)
		var rep report.Report
		require.NoError(t, json.Unmarshal([]byte(d.res.stdout), &rep))
		var got []string
		for _, run := range rep.Runs {
			got = append(got, run.Account)
		}
		slices.Sort(got)
		require.Equal(t, want[d.i], got, "shard %d takes the accounts whose FNV-1a hash mod 3 is %d", d.i, d.i)
		requireSummary(t, d.res.stderr, 12, len(want[d.i]), len(want[d.i]), 0, 0)
		require.Equal(t, fmt.Sprintf("%d/3", d.i), summaryLine(t, d.res.stderr)["shard"])
	}
	runs := w.runs(t)
	byAccount := runAccounts(t, runs)
	require.Len(t, byAccount, 12, "the shards cover every account")
	for _, id := range ids {
		require.Equal(t, []string{models.RunSucceeded}, byAccount[id], "account %s: exactly one run across the shards", id)
	}
	assertRepaired(t, w, ids)

	// The Indexed Job's environment gives the same slice as --shard 1/3.
	last := runs[len(runs)-1].ID
	r := cli(t, w.with("JOB_COMPLETION_INDEX", "1", "RECONCILER_SHARD_COUNT", "3"), "run", "--accounts-from", file)
	require.Equal(t, 0, r.code, r.stderr)
	var got []string
	for _, run := range w.runs(t) {
		if run.ID > last {
			got = append(got, run.Account)
		}
	}
	slices.Sort(got)
	require.Equal(t, want[1], got)
	require.Equal(t, "1/3", summaryLine(t, r.stderr)["shard"])

	// --shard wins over the environment.
	last = w.runs(t)[len(w.runs(t))-1].ID
	r = cli(t, w.with("JOB_COMPLETION_INDEX", "1", "RECONCILER_SHARD_COUNT", "3"), "run", "--accounts-from", file, "--shard", "0/1")
	require.Equal(t, 0, r.code, r.stderr)
	n := 0
	for _, run := range w.runs(t) {
		if run.ID > last {
			n++
		}
	}
	require.Equal(t, 12, n, "--shard 0/1 takes every account")
	verifyAccounts(t, w, ids)
}

// runBinary is cli without testing.T, for goroutines.
func runBinary(env map[string]string, args ...string) (result, error) {
	cmd := exec.Command(binary, args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code, err = ee.ExitCode(), nil
	}
	return result{code, so.String(), se.String()}, err
}

func TestAccountsOneFailingDoesNotStopTheOthers(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	ids := connected(t, w, 8)
	bad := ids[3]
	w.fake.FailAccount(bad, 500)
	cfg := writeFile(t, "providers:\n  stripe:\n    max_retries: 1\n")
	file := accountsFile(t, strings.Join(ids, "\n")+"\n")

	r := cli(t, w.env, "run", "--config", cfg, "--accounts-from", file, "--concurrency", "4", "--format", "json")
	require.Equal(t, 1, r.code, r.stderr)
	require.Contains(t, r.stderr, "run failed for stripe/"+bad+": ")

	runs := w.runs(t)
	require.Len(t, runs, 8)
	for _, run := range runs {
		if run.Account == bad {
			require.Equal(t, models.RunFailed, run.Status)
			require.NotNil(t, run.Error)
			require.Contains(t, *run.Error, "HTTP 500")
		} else {
			require.Equal(t, models.RunSucceeded, run.Status, run.Account)
		}
	}
	// The error is logged with its account.
	var logged bool
	for _, line := range strings.Split(r.stderr, "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil && m["msg"] == "run failed" && m["account"] == bad {
			logged = true
		}
	}
	require.True(t, logged, "the failure is logged with its account:\n%s", r.stderr)
	// The report still has every account, the failed one included.
	var rep report.Report
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep))
	require.Len(t, rep.Runs, 8)
	requireSummary(t, r.stderr, 8, 8, 7, 1, 0)

	var repaired int64
	require.NoError(t, w.db.Raw(`SELECT count(*) FROM payments WHERE account <> ?`, bad).Scan(&repaired).Error)
	require.Equal(t, int64(7), repaired)
	// The accounts that ran match Stripe (the failing one still fails).
	var good []string
	for _, id := range ids {
		if id != bad {
			good = append(good, id)
		}
	}
	verifyAccounts(t, w, good)
}

// TestAccountsShareOneRequestBudget: six accounts reconciled at once stay
// within the configured requests_per_second as a whole. Each account has
// ten stuck payments to re-fetch, so the job is paced, not started up.
// The assertion is a ceiling with a generous margin, never a speed.
func TestAccountsShareOneRequestBudget(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	ids := connected(t, w, 6)
	old := w.now.Add(-5 * 24 * time.Hour)
	for _, id := range ids {
		a := w.fake.Account(id)
		for i := range 10 {
			pi := a.CreatePayment(500, "gbp", true, old)
			a.Authorise(pi, old.Add(time.Duration(i)*time.Minute))
			ts := old.Add(time.Duration(i) * time.Minute)
			require.NoError(t, w.db.Create(&models.Payment{Provider: "stripe", Account: id, ProviderID: pi,
				State: models.StateAuthorised, Amount: 500, Currency: "gbp", SourceUpdatedAt: &ts}).Error)
		}
	}
	cfg := writeFile(t, "providers:\n  stripe:\n    requests_per_second: 20\n")
	file := accountsFile(t, strings.Join(ids, "\n")+"\n")

	before := w.fake.Requests()
	start := time.Now()
	r := cli(t, w.env, "run", "--config", cfg, "--accounts-from", file, "--concurrency", "6")
	wall := time.Since(start)
	require.Equal(t, 0, r.code, r.stderr)
	n := w.fake.Requests() - before
	rate := float64(n) / wall.Seconds()
	t.Logf("6 accounts at once, requests_per_second 20: %d requests in %v = %.1f requests/s", n, wall.Round(time.Millisecond), rate)
	require.GreaterOrEqual(t, n, int64(6*11), "each account re-fetched its stuck payments")
	require.Less(t, rate, 22.0, "the six accounts share one budget of 20 requests/s")
	for _, run := range w.runs(t) {
		require.Equal(t, models.RunSucceeded, run.Status, run.Account)
	}
	verifyAccounts(t, w, ids, "--config", cfg)
}

func TestAccountsAndShardUsageErrorsExit2(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	bad := accountsFile(t, "acct_1Good\n# fine\nacct_1Also\nnot-an-account\n")
	empty := accountsFile(t, "# nothing here\n\n")
	good := accountsFile(t, "acct_1Good\n")
	cases := []struct {
		name string
		env  map[string]string
		args []string
		want []string
	}{
		{"bad line", w.env, []string{"run", "--accounts-from", bad}, []string{"--accounts-from", "line 4", "not-an-account"}},
		{"empty file", w.env, []string{"run", "--accounts-from", empty}, []string{"--accounts-from", "no account id"}},
		{"missing file", w.env, []string{"run", "--accounts-from", "/nonexistent/accounts.txt"}, []string{"--accounts-from"}},
		{"with --account", w.env, []string{"run", "--accounts-from", good, "--account", "acct_1Other"}, []string{"--accounts-from and --account"}},
		{"gocardless only", w.with("GOCARDLESS_ACCESS_TOKEN", "sandbox_x"), []string{"run", "--provider", "gocardless", "--accounts-from", good}, []string{"--accounts-from", "only Stripe"}},
		{"shard index too big", w.env, []string{"run", "--shard", "3/3"}, []string{"--shard", "INDEX"}},
		{"shard not a pair", w.env, []string{"run", "--shard", "x"}, []string{"--shard", "INDEX/COUNT"}},
		{"shard count zero", w.env, []string{"run", "--shard", "0/0"}, []string{"--shard", "COUNT"}},
		{"shard negative", w.env, []string{"run", "--shard", "-1/3"}, []string{"--shard"}},
		{"concurrency zero", w.env, []string{"run", "--concurrency", "0"}, []string{"--concurrency"}},
		{"concurrency too high", w.env, []string{"run", "--concurrency", "65"}, []string{"--concurrency"}},
		{"index without count", w.with("JOB_COMPLETION_INDEX", "1"), []string{"run"}, []string{"JOB_COMPLETION_INDEX", "RECONCILER_SHARD_COUNT"}},
		{"count without index", w.with("RECONCILER_SHARD_COUNT", "3"), []string{"run"}, []string{"JOB_COMPLETION_INDEX", "RECONCILER_SHARD_COUNT"}},
		{"env index out of range", w.with("JOB_COMPLETION_INDEX", "3", "RECONCILER_SHARD_COUNT", "3"), []string{"run"}, []string{"JOB_COMPLETION_INDEX", "RECONCILER_SHARD_COUNT", "INDEX"}},
	}
	for _, c := range cases {
		r := cli(t, c.env, c.args...)
		require.Equal(t, 2, r.code, "%s: %s", c.name, r.stderr)
		for _, s := range c.want {
			require.Contains(t, r.stderr, s, c.name)
		}
	}
	require.Empty(t, w.runs(t), "usage errors touch nothing")
	require.Zero(t, w.fake.Requests(), "usage errors make no request")
}

// TestAccountsSIGTERMStartsNoNewAccount: SIGTERM lets the runs in flight
// record themselves interrupted and starts no other account.
func TestAccountsSIGTERMStartsNoNewAccount(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	ids := connected(t, w, 12)
	file := accountsFile(t, strings.Join(ids, "\n")+"\n")
	w.fake.SetLatency(300 * time.Millisecond)

	cmd := exec.Command(binary, "run", "--accounts-from", file, "--concurrency", "2")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	for k, v := range w.env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	se := &lockedBuffer{}
	cmd.Stderr = se
	require.NoError(t, cmd.Start())
	// SIGTERM once the first two accounts (--concurrency 2) are past their
	// start: each request takes 300ms, so no third account starts before
	// one of them finishes.
	deadline := time.Now().Add(30 * time.Second)
	for strings.Count(se.String(), `"msg":"run started"`) < 2 {
		require.True(t, time.Now().Before(deadline), "no run started:\n%s", se.String())
		time.Sleep(5 * time.Millisecond)
	}
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	err := cmd.Wait()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	require.Equal(t, 1, ee.ExitCode(), se.String())

	runs := w.runs(t)
	require.NotEmpty(t, runs)
	require.Len(t, runs, 2, "no new account starts after SIGTERM")
	interrupted := 0
	for _, r := range runs {
		require.NotEqual(t, models.RunRunning, r.Status, "every started run is recorded")
		if r.Status == models.RunInterrupted {
			interrupted++
		}
	}
	require.Positive(t, interrupted)
	m := summaryLine(t, se.String())
	require.Equal(t, float64(12-len(runs)), m["not_started"], "%v", m)
}

// lockedBuffer is a bytes.Buffer a process writes while the test reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
