package main

// Connected accounts at scale: --accounts-from (a file, or the platform's
// connected accounts listed through Stripe's API), --concurrency (accounts
// reconciled at once, every Stripe client sharing one paced transport so
// requests_per_second is the whole process's budget) and --shard INDEX/COUNT
// (several processes, such as the pods of a Kubernetes Indexed Job, split
// the accounts by a stable hash with no coordination).

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

	"gorm.io/gorm"

	"github.com/reconciler/reconciler/config"
	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/providers/stripe"
	"github.com/reconciler/reconciler/providers/transport"
	"github.com/reconciler/reconciler/reconcile"
)

const (
	// accountsFromStripe as --accounts-from lists the connected accounts
	// through the API; anything else is a file path (./stripe for a file
	// named stripe).
	accountsFromStripe = "stripe"
	defaultConcurrency = 4
	maxConcurrency     = 64
	// The environment a Kubernetes Indexed Job gives each pod, and the count
	// the manifest sets beside it (equal to the Job's completions).
	envShardIndex = "JOB_COMPLETION_INDEX"
	envShardCount = "RECONCILER_SHARD_COUNT"
)

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
func (s shard) owns(j job) bool {
	if !s.on() {
		return true
	}
	return int(shardHash(shardKey(j))%uint32(s.count)) == s.index
}

func shardKey(j job) string {
	if j.account == "" {
		return j.provider
	}
	return j.account
}

func shardHash(key string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(key))
	return h.Sum32()
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
			return shard{}, usagef("--shard: %v", err)
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
		return nil, usagef("--accounts-from: %v", err)
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
		return nil, usagef("--accounts-from %s: %v", path, err)
	}
	if len(ids) == 0 {
		return nil, usagef("--accounts-from %s: no account id in the file", path)
	}
	return ids, nil
}

func validAccountID(s string) bool {
	rest, ok := strings.CutPrefix(s, "acct_")
	if !ok || rest == "" {
		return false
	}
	for _, r := range rest {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}

// fanOut is the validated --accounts-from, --concurrency and --shard.
type fanOut struct {
	from        string   // "", "stripe" or a file
	fileIDs     []string // the file's accounts, read while validating
	concurrency int
	shard       shard
}

// planFanOut validates the fan-out flags; a file is read here, so a bad
// line is a usage error before anything is touched.
func planFanOut(f runFlags, jobs []job, getenv func(string) string) (fanOut, error) {
	fo := fanOut{from: f.accountsFrom, concurrency: f.concurrency}
	if fo.concurrency < 1 || fo.concurrency > maxConcurrency {
		return fo, usagef("--concurrency: %d is out of range (1..%d)", fo.concurrency, maxConcurrency)
	}
	s, err := resolveShard(f.shard, getenv)
	if err != nil {
		return fo, err
	}
	fo.shard = s
	if fo.from == "" {
		return fo, nil
	}
	if len(f.accounts) > 0 {
		return fo, usagef("--accounts-from and --account are mutually exclusive: list the accounts in one place")
	}
	hasStripe := false
	for _, j := range jobs {
		hasStripe = hasStripe || j.provider == stripe.Name
	}
	if !hasStripe {
		return fo, usagef("--accounts-from: only Stripe has connected accounts, and Stripe is not part of this run")
	}
	if fo.from != accountsFromStripe {
		if fo.fileIDs, err = readAccountsFile(fo.from); err != nil {
			return fo, err
		}
	}
	return fo, nil
}

// sharedStripeTransport is the one paced transport every Stripe client of
// this process uses when it reads more than one account, so that
// requests_per_second is a budget for the whole process. nil when a single
// Stripe account runs (its client keeps its own transport, and its run row
// counts retries too, as before).
func sharedStripeTransport(cfg config.Config, fo fanOut, jobs []job) *transport.Transport {
	n := 0
	for _, j := range jobs {
		if j.provider == stripe.Name {
			n++
		}
	}
	if n < 2 && fo.from == "" {
		return nil
	}
	s := cfg.Providers.Stripe
	return stripe.NewTransport(s.RequestsPerSecond, s.MaxRetries, nil)
}

// stripeClient is newProvider's Stripe client on the shared transport.
func stripeClient(cfg config.Config, tr *transport.Transport, log *slog.Logger) (*stripe.Provider, error) {
	s := cfg.Providers.Stripe
	if s.APIKey() == "" {
		return nil, &config.Error{Key: "STRIPE_API_KEY", Msg: "is not set", Hint: "export STRIPE_API_KEY=sk_test_… or mount it and set providers.stripe.api_key_file"}
	}
	return stripe.New(stripe.Config{APIKey: s.APIKey(), BaseURL: s.APIBase, Timeout: s.Timeout.D(), Logger: log, Transport: tr})
}

// providerFor builds a job's provider: Stripe clients on the shared
// transport when there is one.
func providerFor(cfg config.Config, name string, tr *transport.Transport, log *slog.Logger) (reconcile.Provider, error) {
	if name == stripe.Name && tr != nil {
		return stripeClient(cfg, tr, log)
	}
	return newProvider(cfg, name, log)
}

// withAccounts replaces the Stripe jobs by one per listed account (in the
// place of the first Stripe job), keeping the other providers' jobs.
func withAccounts(jobs []job, accounts []string) []job {
	var out []job
	done := false
	for _, j := range jobs {
		if j.provider != stripe.Name {
			out = append(out, j)
			continue
		}
		if !done {
			for _, a := range accounts {
				out = append(out, job{provider: stripe.Name, account: a})
			}
			done = true
		}
	}
	return out
}

// resolveAccounts applies --accounts-from to the planned jobs: the file's
// accounts, or those Stripe lists (one request per 100 accounts, through
// the shared transport).
func resolveAccounts(ctx context.Context, cfg config.Config, fo fanOut, jobs []job, tr *transport.Transport, log *slog.Logger) ([]job, error) {
	switch fo.from {
	case "":
		return jobs, nil
	case accountsFromStripe:
		p, err := stripeClient(cfg, tr, log)
		if err != nil {
			return nil, err
		}
		ids, err := p.ConnectedAccounts(ctx)
		if err != nil {
			return nil, fmt.Errorf("--accounts-from stripe: %w", err)
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
		return withAccounts(jobs, valid), nil
	default:
		return withAccounts(jobs, fo.fileIDs), nil
	}
}

// inShard keeps the jobs this process owns.
func inShard(jobs []job, s shard) []job {
	if !s.on() {
		return jobs
	}
	var out []job
	for _, j := range jobs {
		if s.owns(j) {
			out = append(out, j)
		}
	}
	return out
}

// sizePool makes room in the PostgreSQL pool for concurrent runs: each holds
// one connection for its advisory lock and needs another to write, so a pool
// no larger than the number of runs could deadlock.
func sizePool(cfg config.Config, db *gorm.DB, workers int, log *slog.Logger) {
	if workers < 2 || models.SQLite(db) {
		return
	}
	need := 2 * workers
	if cfg.Database.MaxOpenConns >= need {
		return
	}
	if sqlDB, err := db.DB(); err == nil {
		sqlDB.SetMaxOpenConns(need)
		sqlDB.SetMaxIdleConns(need)
		log.Info("database pool raised for concurrent accounts (one lock and one writing connection each)",
			"max_open_conns", need, "configured", cfg.Database.MaxOpenConns, "concurrency", workers)
	}
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

// outcome is one job's result.
type outcome struct {
	started bool
	res     reconcile.Result
	err     error
	// byStatus: the requests of this job's own transport (nil when shared).
	byStatus map[int]int64
}

// summary is the one-line account of a fan-out run on stderr.
type summary struct {
	total, inShard, succeeded, failed, interrupted, locked, notStarted int
}

func summarize(total int, jobs []job, outs []outcome) summary {
	s := summary{total: total, inShard: len(jobs)}
	for _, o := range outs {
		switch {
		case !o.started, o.err != nil && o.res.Run.ID == 0 && errors.Is(o.err, context.Canceled):
			// Canceled before its run was recorded: it never started.
			s.notStarted++
		case errors.Is(o.err, reconcile.ErrLocked):
			s.locked++
		case o.err != nil && o.res.Run.Status == models.RunInterrupted:
			s.interrupted++
		case o.err != nil:
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

// pushInstance is the Pushgateway grouping key: the host name, plus the
// shard when sharded, so that the pods of an Indexed Job (which share the
// manifest's stable hostname) do not overwrite each other's metrics.
func pushInstance(host string, sh shard) string {
	if !sh.on() || sh.count == 1 {
		return host
	}
	return host + "-shard-" + strconv.Itoa(sh.index)
}
