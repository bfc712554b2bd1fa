package runner

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/reconciler/reconciler/config"
	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/reconcile"
)

func env(kv ...string) func(string) string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) string { return m[k] }
}

func accountsFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "accounts.txt")
	require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
	return p
}

func stripeJobs12() ([]Job, []string) {
	ids := make([]string, 12)
	jobs := make([]Job, 12)
	for i := range ids {
		ids[i] = fmt.Sprintf("acct_1Fan%02dOut", i)
		jobs[i] = Job{Provider: "stripe", Account: ids[i]}
	}
	return jobs, ids
}

func fnvMod(key string, n int) int {
	h := fnv.New32a()
	h.Write([]byte(key))
	return int(h.Sum32() % uint32(n))
}

// The shards of a count split the jobs by FNV-1a of the account (the
// provider's name for jobs without one) with no overlap and no gap.
func TestShardsSplitJobsWithNoOverlap(t *testing.T) {
	t.Parallel()
	jobs, ids := stripeJobs12()
	jobs = append(jobs, Job{Provider: "stripe"}, Job{Provider: "gocardless"})
	want := map[int][]Job{}
	for _, j := range jobs {
		key := j.Account
		if key == "" {
			key = j.Provider
		}
		want[fnvMod(key, 3)] = append(want[fnvMod(key, 3)], j)
	}
	require.Len(t, want, 3, "the test's accounts land on every shard")
	seen := map[Job]int{}
	for i := range 3 {
		got := inShard(jobs, shard{index: i, count: 3})
		require.Equal(t, want[i], got, "shard %d takes the jobs whose FNV-1a hash mod 3 is %d", i, i)
		for _, j := range got {
			seen[j]++
		}
	}
	require.Len(t, seen, len(jobs), "the shards cover every job")
	for j, n := range seen {
		require.Equal(t, 1, n, "%s: exactly one shard", j)
	}
	require.Equal(t, jobs, inShard(jobs, shard{}), "no shard takes everything")
	require.Equal(t, jobs, inShard(jobs, shard{index: 0, count: 1}), "0/1 takes everything")
	require.Len(t, ids, 12)
}

func TestShardFromFlagAndEnvironment(t *testing.T) {
	t.Parallel()
	s, err := resolveShard("", env("JOB_COMPLETION_INDEX", "1", "RECONCILER_SHARD_COUNT", "3"))
	require.NoError(t, err)
	require.Equal(t, shard{index: 1, count: 3}, s, "the Indexed Job's environment gives the shard")
	require.Equal(t, "1/3", s.String())
	s, err = resolveShard(" 0/1 ", env("JOB_COMPLETION_INDEX", "1", "RECONCILER_SHARD_COUNT", "3"))
	require.NoError(t, err)
	require.Equal(t, shard{index: 0, count: 1}, s, "--shard wins over the environment")
	s, err = resolveShard("", env())
	require.NoError(t, err)
	require.False(t, s.on())
	require.Empty(t, s.String())

	var ue UsageError
	for _, c := range []struct {
		flag string
		want []string
	}{
		{"3/3", []string{"--shard", "INDEX"}},
		{"x", []string{"--shard", "INDEX/COUNT"}},
		{"0/0", []string{"--shard", "COUNT"}},
		{"-1/3", []string{"--shard"}},
		{"a/3", []string{"--shard", "INDEX"}},
		{"1/b", []string{"--shard", "COUNT"}},
	} {
		_, err := resolveShard(c.flag, env())
		require.ErrorAs(t, err, &ue, c.flag)
		for _, w := range c.want {
			require.Contains(t, err.Error(), w, c.flag)
		}
	}
	var ce *config.Error
	for _, c := range []struct {
		name string
		env  func(string) string
		want []string
	}{
		{"index without count", env("JOB_COMPLETION_INDEX", "1"), []string{"JOB_COMPLETION_INDEX", "RECONCILER_SHARD_COUNT", "only JOB_COMPLETION_INDEX"}},
		{"count without index", env("RECONCILER_SHARD_COUNT", "3"), []string{"JOB_COMPLETION_INDEX", "RECONCILER_SHARD_COUNT", "only RECONCILER_SHARD_COUNT"}},
		{"env index out of range", env("JOB_COMPLETION_INDEX", "3", "RECONCILER_SHARD_COUNT", "3"), []string{"JOB_COMPLETION_INDEX", "RECONCILER_SHARD_COUNT", "INDEX"}},
	} {
		_, err := resolveShard("", c.env)
		require.ErrorAs(t, err, &ce, c.name)
		for _, w := range c.want {
			require.Contains(t, err.Error(), w, c.name)
		}
	}
}

func TestReadAccountsFile(t *testing.T) {
	t.Parallel()
	_, ids := stripeJobs12()
	file := accountsFile(t, "# connected accounts of the platform\n\n"+strings.Join(ids[:6], "\n")+"\n  "+
		strings.Join(ids[6:], "  # a comment\n")+"\n"+ids[0]+"\n")
	got, err := readAccountsFile(file)
	require.NoError(t, err)
	require.Equal(t, ids, got, "comments and blank lines ignored, a duplicate line dropped")

	var ue UsageError
	for _, c := range []struct {
		name, path string
		want       []string
	}{
		{"bad line", accountsFile(t, "acct_1Good\n# fine\nacct_1Also\nnot-an-account\n"), []string{"--accounts-from", "line 4", "not-an-account"}},
		{"not alphanumeric", accountsFile(t, "acct_1-x\n"), []string{"--accounts-from", "line 1"}},
		{"empty file", accountsFile(t, "# nothing here\n\n"), []string{"--accounts-from", "no account id"}},
		{"missing file", "/nonexistent/accounts.txt", []string{"--accounts-from"}},
	} {
		_, err := readAccountsFile(c.path)
		require.ErrorAs(t, err, &ue, c.name)
		for _, w := range c.want {
			require.Contains(t, err.Error(), w, c.name)
		}
	}
}

func TestFanOutCheck(t *testing.T) {
	t.Parallel()
	good := accountsFile(t, "acct_1Good\n")
	platform := []Job{{Provider: "stripe"}}
	var ue UsageError
	for _, c := range []struct {
		name string
		f    FanOut
		jobs []Job
		want string
	}{
		{"concurrency zero", FanOut{Concurrency: 0}, platform, "--concurrency"},
		{"concurrency too high", FanOut{Concurrency: 65}, platform, "--concurrency"},
		{"with --account", FanOut{Concurrency: 1, AccountsFrom: good, Accounts: []string{"acct_1Other"}}, platform, "--accounts-from and --account"},
		{"gocardless only", FanOut{Concurrency: 1, AccountsFrom: good}, []Job{{Provider: "gocardless"}}, "only Stripe"},
		{"bad shard", FanOut{Concurrency: 1, Shard: "3/3"}, platform, "--shard"},
	} {
		_, err := c.f.Check(c.jobs)
		require.ErrorAs(t, err, &ue, c.name)
		require.Contains(t, err.Error(), c.want, c.name)
	}
	var ce *config.Error
	_, err := FanOut{Concurrency: 1, Getenv: env("JOB_COMPLETION_INDEX", "1")}.Check(platform)
	require.ErrorAs(t, err, &ce, "the environment's shard is a configuration error")

	fl, err := FanOut{Concurrency: 4, AccountsFrom: good}.Check(platform)
	require.NoError(t, err)
	require.Equal(t, []string{"acct_1Good"}, fl.fileIDs, "the file is read while checking")
	require.Equal(t, 1, fl.Workers(), "no more workers than jobs")
	fl, err = FanOut{Concurrency: 4}.Check(make([]Job, 10))
	require.NoError(t, err)
	require.Equal(t, 4, fl.Workers())
	fl, err = FanOut{Concurrency: 4}.Check(nil)
	require.NoError(t, err)
	require.Equal(t, 1, fl.Workers())
}

func TestResolveAccountsFromFileAndShard(t *testing.T) {
	t.Parallel()
	_, ids := stripeJobs12()
	file := accountsFile(t, strings.Join(ids, "\n")+"\n")
	jobs := []Job{{Provider: "gocardless"}, {Provider: "stripe"}, {Provider: "stripe", Account: "acct_1Configured"}}
	fl, err := FanOut{Concurrency: 2, AccountsFrom: file, Shard: "1/3"}.Check(jobs)
	require.NoError(t, err)
	s := &Service{Config: config.Default()}
	fl, err = s.Resolve(context.Background(), fl)
	require.NoError(t, err)
	require.NotNil(t, s.budget, "accounts from a file share one request budget")
	require.Equal(t, 13, fl.Total, "gocardless and the file's twelve accounts, before sharding")
	all := withAccounts(jobs, ids)
	require.Equal(t, Job{Provider: "gocardless"}, all[0], "other providers keep their place")
	require.Len(t, all, 13, "the Stripe jobs are replaced by the file's")
	require.Equal(t, inShard(all, shard{index: 1, count: 3}), fl.Jobs)

	// One Stripe account keeps a transport of its own; two share one.
	s = &Service{Config: config.Default()}
	_, err = s.Resolve(context.Background(), Fleet{Jobs: []Job{{Provider: "stripe"}, {Provider: "gocardless"}}, concurrency: 1})
	require.NoError(t, err)
	require.Nil(t, s.budget)
	_, err = s.Resolve(context.Background(), Fleet{Jobs: []Job{{Provider: "stripe"}, {Provider: "stripe", Account: "acct_1x"}}, concurrency: 1})
	require.NoError(t, err)
	require.NotNil(t, s.budget)
}

func TestPushInstance(t *testing.T) {
	t.Parallel()
	require.Equal(t, "host", Fleet{}.PushInstance("host"))
	require.Equal(t, "host", Fleet{shard: shard{index: 0, count: 1}}.PushInstance("host"))
	require.Equal(t, "host-shard-2", Fleet{shard: shard{index: 2, count: 8}}.PushInstance("host"))
}

func TestRunEachBoundsWorkersAndStopsOnCancel(t *testing.T) {
	t.Parallel()
	var running, peak, calls atomic.Int64
	started := runEach(context.Background(), 3, 10, func(int) {
		n := running.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		time.Sleep(5 * time.Millisecond)
		running.Add(-1)
		calls.Add(1)
	})
	require.Equal(t, 10, started)
	require.Equal(t, int64(10), calls.Load())
	require.LessOrEqual(t, peak.Load(), int64(3), "at most workers at once")

	// Canceled while two are in flight: they finish, nothing new starts.
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	var done []int
	var sawCancel atomic.Int64
	inFlight := make(chan struct{}, 2)
	release := make(chan struct{})
	go func() {
		<-inFlight
		<-inFlight
		cancel()
		close(release)
	}()
	started = runEach(ctx, 2, 12, func(i int) {
		inFlight <- struct{}{}
		<-release
		if ctx.Err() != nil {
			sawCancel.Add(1)
		}
		mu.Lock()
		done = append(done, i)
		mu.Unlock()
	})
	require.Equal(t, 2, started, "no new job starts after the cancel")
	require.Len(t, done, 2, "the calls in flight finish")
	require.Equal(t, int64(2), sawCancel.Load(), "the calls in flight see the canceled ctx")

	require.Zero(t, runEach(context.Background(), 4, 0, func(int) { t.Fatal("called") }))
}

func TestBatchSummaryAndError(t *testing.T) {
	t.Parallel()
	run := func(id int64, status string) reconcile.Result {
		return reconcile.Result{Run: models.Run{ID: id, Status: status}}
	}
	ok := Outcome{Job: Job{"stripe", "acct_1A"}, Started: true, Result: run(1, models.RunSucceeded)}
	failed := Outcome{Job: Job{"stripe", "acct_1B"}, Started: true, Result: run(2, models.RunFailed), Err: errors.New("HTTP 500")}
	locked := Outcome{Job: Job{"stripe", ""}, Started: true, Err: reconcile.ErrLocked}
	interrupted := Outcome{Job: Job{"stripe", "acct_1C"}, Started: true, Result: run(3, models.RunInterrupted), Err: context.Canceled}
	canceledEarly := Outcome{Job: Job{"stripe", "acct_1D"}, Started: true, Err: context.Canceled}
	notStarted := Outcome{Job: Job{"stripe", "acct_1E"}}

	b := Batch{Outcomes: []Outcome{ok, failed, locked, interrupted, canceledEarly, notStarted}, total: 9}
	require.Equal(t, summary{total: 9, inShard: 6, succeeded: 1, failed: 1, interrupted: 1, locked: 1, notStarted: 2}, b.summary())
	require.Equal(t, []int64{1, 2, 3}, b.RunIDs())
	require.EqualError(t, b.Err(), "run failed for stripe/acct_1B, stripe/acct_1C, stripe/acct_1D; the first, stripe/acct_1B: HTTP 500")
	b = Batch{Outcomes: []Outcome{ok, failed, locked}}
	require.EqualError(t, b.Err(), "run failed for stripe/acct_1B: HTTP 500")

	b = Batch{Outcomes: []Outcome{ok, locked, notStarted}}
	require.EqualError(t, b.Err(), "interrupted: 1 of 3 accounts were not started")

	b = Batch{Outcomes: []Outcome{ok, locked}}
	err := b.Err()
	require.EqualError(t, err, "another run holds the lock for stripe/platform: nothing was done there; wait for it, or use --lock-wait 10m")
	require.ErrorIs(t, err, reconcile.ErrLocked, "exit code 3")
	held := Outcome{Job: Job{"stripe", "acct_1F"}, Started: true, Err: heldError{run: models.Run{ID: 41, StartedAt: time.Date(2026, 12, 2, 1, 0, 0, 0, time.UTC)}, err: reconcile.ErrLocked}}
	err = Batch{Outcomes: []Outcome{ok, locked, held}}.Err()
	require.EqualError(t, err, "another run holds the lock for stripe/platform, stripe/acct_1F (run 41, started 2026-12-02T01:00:00Z): nothing was done there; wait for them, or use --lock-wait 10m")
	require.ErrorIs(t, err, reconcile.ErrLocked, "exit code 3")

	require.NoError(t, Batch{Outcomes: []Outcome{ok}}.Err())
	require.NoError(t, Batch{}.Err())
}

func TestPlan(t *testing.T) {
	t.Parallel()
	load := func(kv ...string) config.Config {
		cfg, err := config.Load(filepath.Join(t.TempDir(), "none.yaml"), false, env(kv...), os.ReadFile)
		require.NoError(t, err)
		return cfg
	}
	both := load("STRIPE_API_KEY", "sk_test_x", "GOCARDLESS_ACCESS_TOKEN", "sandbox_x")
	jobs, err := Plan(both, nil, nil)
	require.NoError(t, err)
	require.Equal(t, []Job{{Provider: "stripe"}, {Provider: "gocardless"}}, jobs, "every configured provider, the platform")
	jobs, err = Plan(both, []string{"stripe"}, []string{"acct_1A", "acct_1B"})
	require.NoError(t, err)
	require.Equal(t, []Job{{"stripe", "acct_1A"}, {"stripe", "acct_1B"}}, jobs)
	require.Equal(t, "stripe/acct_1A", jobs[0].String())
	require.Equal(t, "stripe/platform", Job{Provider: "stripe"}.String())

	var ue UsageError
	var ce *config.Error
	for _, c := range []struct {
		name                string
		cfg                 config.Config
		providers, accounts []string
		usage               bool
		want                string
	}{
		{"unknown provider", both, []string{"paypal"}, nil, true, `--provider: unknown provider "paypal" (known: stripe, gocardless)`},
		{"gocardless account", both, []string{"gocardless"}, []string{"acct_1x"}, true, "no connected accounts"},
		{"not an account", both, nil, []string{"bogus"}, true, "not a connected account id"},
		{"nothing configured", load(), nil, nil, false, "no provider is configured"},
		{"no stripe key", load(), []string{"stripe"}, nil, false, "STRIPE_API_KEY"},
		{"no gocardless token", load(), []string{"gocardless"}, nil, false, "GOCARDLESS_ACCESS_TOKEN"},
	} {
		_, err := Plan(c.cfg, c.providers, c.accounts)
		if c.usage {
			require.ErrorAs(t, err, &ue, c.name)
		} else {
			require.ErrorAs(t, err, &ce, c.name)
		}
		require.Contains(t, err.Error(), c.want, c.name)
	}
	bad := both
	bad.Providers.GoCardless.HolidaysFile = "/nonexistent/holidays.txt"
	_, err = Plan(bad, nil, nil)
	require.ErrorAs(t, err, &ce)
	require.Equal(t, "providers.gocardless.holidays_file", ce.Key)
}
