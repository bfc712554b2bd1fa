package runner

// Connected accounts at scale: accounts from a file or listed through
// Stripe's API (--accounts-from), several reconciled at once (--concurrency)
// with every Stripe client on one paced transport so that
// requests_per_second is the whole process's budget, and several processes
// (the pods of a Kubernetes Indexed Job) splitting the accounts by a stable
// hash with no coordination (--shard INDEX/COUNT).

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/reconciler/reconciler/config"
	"github.com/reconciler/reconciler/internal/dbopen"
	"github.com/reconciler/reconciler/internal/memlimit"
	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/providers/stripe"
	"github.com/reconciler/reconciler/reconcile"
	"github.com/reconciler/reconciler/store"
)

const (
	// AccountsFromStripe as FanOut.AccountsFrom lists the connected
	// accounts through the API; anything else is a file path (./stripe for
	// a file named stripe).
	AccountsFromStripe = "stripe"
	// DefaultConcurrency and MaxConcurrency bound FanOut.Concurrency.
	DefaultConcurrency = 4
	MaxConcurrency     = 64
	// The environment a Kubernetes Indexed Job gives each pod, and the count
	// the manifest sets beside it (equal to the Job's completions).
	envShardIndex = "JOB_COMPLETION_INDEX"
	envShardCount = "RECONCILER_SHARD_COUNT"
)

// FanOut is how a process spreads its jobs: the caller's --accounts-from,
// --concurrency and --shard.
type FanOut struct {
	// AccountsFrom replaces the Stripe jobs' accounts: "" (keep them),
	// AccountsFromStripe, or a file of one acct_… a line (# comments).
	AccountsFrom string
	// Concurrency is how many jobs run at once, 1..MaxConcurrency.
	Concurrency int
	// Shard is INDEX/COUNT; "" reads the Indexed Job's environment
	// (JOB_COMPLETION_INDEX with RECONCILER_SHARD_COUNT) through Getenv.
	Shard  string
	Getenv func(string) string
	// Accounts are the caller's --account values, exclusive with
	// AccountsFrom.
	Accounts []string
}

// Fleet is a validated fan-out of jobs, built by FanOut.Check, resolved
// into this process's jobs by Service.Resolve and run by Service.RunAll.
type Fleet struct {
	// Jobs are this process's jobs (once resolved); Total counts them
	// before sharding.
	Jobs  []Job
	Total int

	from        string
	fileIDs     []string // the file's accounts, read by Check
	concurrency int
	shard       shard
}

// Check validates f for the planned jobs. A file is read here, so a bad
// line is a usage error before anything is touched.
func (f FanOut) Check(jobs []Job) (Fleet, error) {
	fl := Fleet{Jobs: jobs, Total: len(jobs), from: f.AccountsFrom, concurrency: f.Concurrency}
	if fl.concurrency < 1 || fl.concurrency > MaxConcurrency {
		return fl, usagef("--concurrency: %d is out of range (1..%d)", fl.concurrency, MaxConcurrency)
	}
	getenv := f.Getenv
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	s, err := resolveShard(f.Shard, getenv)
	if err != nil {
		return fl, err
	}
	fl.shard = s
	if fl.from == "" {
		return fl, nil
	}
	if len(f.Accounts) > 0 {
		return fl, usagef("--accounts-from and --account are mutually exclusive: list the accounts in one place")
	}
	if stripeJobs(jobs) == 0 {
		return fl, usagef("--accounts-from: only Stripe has connected accounts, and Stripe is not part of this run")
	}
	if fl.from != AccountsFromStripe {
		if fl.fileIDs, err = readAccountsFile(fl.from); err != nil {
			return fl, err
		}
	}
	return fl, nil
}

func stripeJobs(jobs []Job) int {
	n := 0
	for _, j := range jobs {
		if j.Provider == stripe.Name {
			n++
		}
	}
	return n
}

// Resolve turns fl into this process's jobs: the accounts of the file or
// those Stripe lists (one request per 100 accounts), then this process's
// shard. When more than one Stripe account is to run it sets up the one
// paced transport their clients share (a single Stripe account keeps a
// transport of its own, and its run counts retries too).
func (s *Service) Resolve(ctx context.Context, fl Fleet) (Fleet, error) {
	if stripeJobs(fl.Jobs) > 1 || fl.from != "" {
		c := s.Config.Providers.Stripe
		s.budget = stripe.NewTransportFor(stripe.Config{RequestsPerSecond: c.RequestsPerSecond, MaxRetries: c.MaxRetries,
			Timeout: c.Timeout.D(), RequestDeadline: c.RequestDeadline.D()})
	}
	log := s.logger()
	switch fl.from {
	case "":
	case AccountsFromStripe:
		p, err := stripeClient(s.Config, s.budget, log)
		if err != nil {
			return fl, err
		}
		ids, err := p.ConnectedAccounts(ctx)
		if err != nil {
			return fl, fmt.Errorf("--accounts-from stripe: %w", err)
		}
		var valid []string
		for _, id := range ids {
			if validAccountID(id) {
				valid = append(valid, id)
			} else {
				log.Warn("skipping a connected account id that is not acct_…", "account", id)
			}
		}
		log.Info("connected accounts listed", "source", "stripe", "accounts", len(valid))
		fl.Jobs = withAccounts(fl.Jobs, valid)
	default:
		fl.Jobs = withAccounts(fl.Jobs, fl.fileIDs)
	}
	fl.Total = len(fl.Jobs)
	fl.Jobs = inShard(fl.Jobs, fl.shard)
	if fl.shard.on() {
		log.Info("sharded", "shard", fl.shard.String(), "accounts_total", fl.Total, "accounts_in_shard", len(fl.Jobs))
	}
	return fl, nil
}

// Workers is how many jobs run at once.
func (fl Fleet) Workers() int { return min(fl.concurrency, max(len(fl.Jobs), 1)) }

// PushInstance is the Pushgateway grouping key: the host name, plus the
// shard when sharded, so that the pods of an Indexed Job (which share the
// manifest's stable hostname) do not overwrite each other's metrics.
func (fl Fleet) PushInstance(host string) string {
	if !fl.shard.on() || fl.shard.count == 1 {
		return host
	}
	return host + "-shard-" + strconv.Itoa(fl.shard.index)
}

// RunAll runs fl's jobs, each its own run (lock, run row, report section),
// up to Workers at once; req gives them their window and trigger (its
// Progress only when one runs at a time). Once ctx is done nothing new
// starts: the runs in flight finish their batch and record themselves
// interrupted. It logs the summary line and returns every job's outcome.
func (s *Service) RunAll(ctx context.Context, fl Fleet, req Request) Batch {
	workers := fl.Workers()
	s.sizePool(workers)
	if workers > 1 {
		req.Progress = nil
	}
	log := s.logger()
	outs := make([]Outcome, len(fl.Jobs))
	runEach(ctx, workers, len(fl.Jobs), func(i int) {
		out := &outs[i]
		*out = Outcome{Job: fl.Jobs[i], Started: true}
		r := req
		r.Job = fl.Jobs[i]
		run, err := s.Start(ctx, r)
		switch {
		case errors.Is(err, reconcile.ErrLocked):
			out.Err = s.heldBy(ctx, r.Job, err)
			log.Warn("another run holds the lock; nothing done", "provider", r.Provider, "account", r.Account, "error", out.Err)
		case err != nil && errors.Is(err, context.Canceled):
			out.Err = err
			log.Warn("run interrupted", "provider", r.Provider, "account", r.Account, "error", err)
		case err != nil:
			out.Err = err
			log.Error("run failed", "provider", r.Provider, "account", r.Account, "error", err)
		default:
			out.Result, out.Err = run.Execute(ctx)
		}
	})
	if req.endProgress != nil {
		req.endProgress()
	}
	b := Batch{Outcomes: outs, total: fl.Total, shard: fl.shard}
	b.summary().log(log, fl.shard)
	return b
}

// sizePool makes room in the database pool for concurrent runs (see
// dbopen.RoomForRuns), and in the process's soft memory limit
// (memlimit.ForRuns).
func (s *Service) sizePool(workers int) {
	if workers < 2 {
		return
	}
	if limit, raised := memlimit.ForRuns(workers); raised {
		s.logger().Info("soft memory limit raised for concurrent runs (each keeps one run's room)",
			"limit_mib", limit>>20, "concurrency", workers)
	}
	if s.DB == nil {
		return
	}
	configured := s.Config.Database.MaxOpenConns
	if n := dbopen.RoomForRuns(s.DB, configured, workers); n > 0 {
		s.logger().Info("database pool raised for concurrent accounts (one lock and one writing connection each, and the readers' headroom)",
			"max_open_conns", n, "configured", configured, "concurrency", workers)
	}
}

// MaxRuns is how many runs at once the process's database pool has room
// for without raising it (dbopen.RunsFor: database.max_open_conns less the
// readers' headroom, over each run's connections): serve's bound.
func (s *Service) MaxRuns() int {
	if s.DB == nil {
		return DefaultConcurrency
	}
	return dbopen.RunsFor(s.DB, s.Config.Database.MaxOpenConns)
}

// MakeRoom raises the database pool, when it must, for n runs at once
// (dbopen.RoomForRuns): a bound above MaxRuns needs it.
func (s *Service) MakeRoom(n int) { s.sizePool(n) }

// Batch is what RunAll did: one outcome per job, in the jobs' order.
type Batch struct {
	Outcomes []Outcome
	total    int
	shard    shard
}

// RunIDs are the recorded runs, in the jobs' order.
func (b Batch) RunIDs() []int64 {
	var ids []int64
	for _, o := range b.Outcomes {
		if o.Started && o.Result.Run.ID != 0 {
			ids = append(ids, o.Result.Run.ID)
		}
	}
	return ids
}

// Err says how the batch went wrong, nil when every job ran: some failed
// (exit 1), some were never started (exit 1), or some found their lock held
// (errors.Is reconcile.ErrLocked; exit 3).
func (b Batch) Err() error {
	var failed, locked []string
	var cause error
	for _, o := range b.Outcomes {
		switch {
		case !o.Started:
		case errors.Is(o.Err, reconcile.ErrLocked):
			var h heldError
			if errors.As(o.Err, &h) {
				locked = append(locked, fmt.Sprintf("%s (run %d, started %s)", o, h.run.ID, h.run.StartedAt.UTC().Format(time.RFC3339)))
			} else {
				locked = append(locked, o.String())
			}
		case o.Err != nil:
			if cause == nil {
				cause = o.Err
			}
			failed = append(failed, o.String())
		}
	}
	sum := b.summary()
	switch {
	case len(failed) == 1:
		return fmt.Errorf("run failed for %s: %s", failed[0], cause)
	case len(failed) > 1:
		return fmt.Errorf("run failed for %s; the first, %s: %s", strings.Join(failed, ", "), failed[0], cause)
	case sum.notStarted > 0:
		return fmt.Errorf("interrupted: %d of %d accounts were not started", sum.notStarted, sum.inShard)
	case len(locked) > 0:
		return lockedError{jobs: locked}
	}
	return nil
}

// lockedError means some runs found their lock held and did nothing.
type lockedError struct{ jobs []string }

func (e lockedError) Error() string {
	them := "it"
	if len(e.jobs) > 1 {
		them = "them"
	}
	return fmt.Sprintf("another run holds the lock for %s: nothing was done there; wait for %s, or use --lock-wait 10m", strings.Join(e.jobs, ", "), them)
}

// heldError is a lock found held with the run that holds it, as its run
// record says (a run of another process or replica alike).
type heldError struct {
	run models.Run
	err error // reconcile.ErrLocked's chain
}

func (e heldError) Error() string {
	return fmt.Sprintf("%v (run %d, started %s)", e.err, e.run.ID, e.run.StartedAt.UTC().Format(time.RFC3339))
}

func (e heldError) Unwrap() error { return e.err }

// heldBy adds to err, the lock of j found held, the running run that holds
// it when its record says; err alone when it does not.
func (s *Service) heldBy(ctx context.Context, j Job, err error) error {
	if s.Store == nil {
		return err
	}
	run, ok, rerr := store.Running(ctx, s.Store, j.Provider, j.Account)
	if rerr != nil || !ok {
		return err
	}
	return heldError{run: run, err: err}
}

func (e lockedError) Unwrap() error { return reconcile.ErrLocked }

// summary is the one-line account of a batch on the log.
type summary struct {
	total, inShard, succeeded, failed, interrupted, locked, notStarted int
}

func (b Batch) summary() summary {
	s := summary{total: b.total, inShard: len(b.Outcomes)}
	for _, o := range b.Outcomes {
		switch {
		case !o.Started, o.Err != nil && o.Result.Run.ID == 0 && errors.Is(o.Err, context.Canceled):
			// Canceled before its run was recorded: it never started.
			s.notStarted++
		case errors.Is(o.Err, reconcile.ErrLocked):
			s.locked++
		case o.Err != nil && o.Result.Run.Status == models.RunInterrupted:
			s.interrupted++
		case o.Err != nil:
			s.failed++
		default:
			s.succeeded++
		}
	}
	return s
}

func (s summary) log(log *slog.Logger, sh shard) {
	level := slog.LevelInfo
	if s.failed+s.interrupted+s.locked+s.notStarted > 0 {
		level = slog.LevelWarn
	}
	attrs := []any{"accounts_total", s.total, "accounts_in_shard", s.inShard, "succeeded", s.succeeded,
		"failed", s.failed, "interrupted", s.interrupted, "locked", s.locked, "not_started", s.notStarted}
	if sh.on() {
		attrs = append(attrs, "shard", sh.String())
	}
	log.Log(context.Background(), level, "accounts summary", attrs...)
}

// runEach calls do(i) for i in [0, n) on at most workers goroutines. Once
// ctx is done it starts nothing new; the calls in flight finish (they see
// the canceled ctx). It returns how many were started.
func runEach(ctx context.Context, workers, n int, do func(i int)) (started int) {
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(workers, n) {
		wg.Go(func() {
			for i := range next {
				do(i)
			}
		})
	}
	for i := 0; i < n && ctx.Err() == nil; i++ {
		select {
		case next <- i:
			started++
		case <-ctx.Done():
		}
	}
	close(next)
	wg.Wait()
	return started
}

// withAccounts replaces the Stripe jobs by one per listed account (in the
// place of the first Stripe job), keeping the other providers' jobs.
func withAccounts(jobs []Job, accounts []string) []Job {
	var out []Job
	done := false
	for _, j := range jobs {
		if j.Provider != stripe.Name {
			out = append(out, j)
			continue
		}
		if !done {
			for _, a := range accounts {
				out = append(out, Job{Provider: stripe.Name, Account: a})
			}
			done = true
		}
	}
	return out
}

// shard is this process's slice of the jobs: those whose key hashes to
// index modulo count. The zero value (count 0) takes everything.
type shard struct{ index, count int }

func (s shard) on() bool { return s.count > 0 }

func (s shard) String() string {
	if !s.on() {
		return ""
	}
	return strconv.Itoa(s.index) + "/" + strconv.Itoa(s.count)
}

// owns reports whether job j belongs to this shard: FNV-1a (32 bits) of the
// account id modulo count. Jobs without an account (the Stripe platform,
// GoCardless) hash their provider name instead, so they land on one shard
// each rather than on every one.
func (s shard) owns(j Job) bool {
	if !s.on() {
		return true
	}
	return int(shardHash(shardKey(j))%uint32(s.count)) == s.index
}

func shardKey(j Job) string {
	if j.Account == "" {
		return j.Provider
	}
	return j.Account
}

func shardHash(key string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(key))
	return h.Sum32()
}

// inShard keeps the jobs this process owns.
func inShard(jobs []Job, s shard) []Job {
	if !s.on() {
		return jobs
	}
	var out []Job
	for _, j := range jobs {
		if s.owns(j) {
			out = append(out, j)
		}
	}
	return out
}

// parseShard parses INDEX/COUNT with 0 <= INDEX < COUNT.
func parseShard(v string) (shard, error) {
	i, c, ok := strings.Cut(strings.TrimSpace(v), "/")
	if !ok {
		return shard{}, fmt.Errorf("%q is not INDEX/COUNT (e.g. 2/8)", v)
	}
	return shardOf(i, c, v)
}

func shardOf(index, count, what string) (shard, error) {
	n, err := strconv.Atoi(strings.TrimSpace(count))
	if err != nil {
		return shard{}, fmt.Errorf("%q: COUNT %q is not a number", what, count)
	}
	i, err := strconv.Atoi(strings.TrimSpace(index))
	if err != nil {
		return shard{}, fmt.Errorf("%q: INDEX %q is not a number", what, index)
	}
	if n < 1 {
		return shard{}, fmt.Errorf("%q: COUNT must be at least 1", what)
	}
	if i < 0 || i >= n {
		return shard{}, fmt.Errorf("%q: INDEX must be in 0..%d (0 <= INDEX < COUNT)", what, n-1)
	}
	return shard{index: i, count: n}, nil
}

// resolveShard is --shard, else the Indexed Job's environment
// (JOB_COMPLETION_INDEX with RECONCILER_SHARD_COUNT), else no sharding.
func resolveShard(flagValue string, getenv func(string) string) (shard, error) {
	if flagValue != "" {
		s, err := parseShard(flagValue)
		if err != nil {
			return shard{}, usagef("--shard: %v (write INDEX/COUNT with 0 <= INDEX < COUNT, e.g. 2/8)", err)
		}
		return s, nil
	}
	idx, cnt := strings.TrimSpace(getenv(envShardIndex)), strings.TrimSpace(getenv(envShardCount))
	key := envShardIndex + ", " + envShardCount
	hint := "set both (the Indexed Job sets " + envShardIndex + "; set " + envShardCount + " to its completions) or neither, or pass --shard INDEX/COUNT"
	switch {
	case idx == "" && cnt == "":
		return shard{}, nil
	case idx == "" || cnt == "":
		set := envShardIndex
		if idx == "" {
			set = envShardCount
		}
		return shard{}, &config.Error{Key: key, Msg: "only " + set + " is set", Hint: hint}
	}
	s, err := shardOf(idx, cnt, idx+"/"+cnt)
	if err != nil {
		return shard{}, &config.Error{Key: key, Msg: err.Error(), Hint: hint}
	}
	return s, nil
}

// readAccountsFile reads one connected account id (acct_…) a line; blank
// lines and # comments are ignored, duplicates are dropped.
func readAccountsFile(path string) ([]string, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, usagef("--accounts-from: %v (give a readable file of acct_… ids, one a line, or \"stripe\")", err)
	}
	defer fh.Close()
	var ids []string
	seen := map[string]bool{}
	sc := bufio.NewScanner(fh)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		if !validAccountID(line) {
			return nil, usagef("--accounts-from %s line %d: %q is not a connected account id (acct_…)", path, n, line)
		}
		if !seen[line] {
			seen[line] = true
			ids = append(ids, line)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, usagef("--accounts-from %s: %v (write one acct_… id a line)", path, err)
	}
	if len(ids) == 0 {
		return nil, usagef("--accounts-from %s: no account id in the file (list one acct_… id a line)", path)
	}
	return ids, nil
}

func validAccountID(s string) bool {
	return ValidAccountID(s)
}
