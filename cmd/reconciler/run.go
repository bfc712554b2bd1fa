package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/reconciler/reconciler/config"
	"github.com/reconciler/reconciler/metrics"
	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/providers/gocardless"
	"github.com/reconciler/reconciler/providers/stripe"
	"github.com/reconciler/reconciler/reconcile"
	"github.com/reconciler/reconciler/report"
	"github.com/reconciler/reconciler/workdays"
)

// knownProviders are the names --provider accepts.
var knownProviders = []string{stripe.Name, gocardless.Name}

type runFlags struct {
	config, since, until, window, reportFile, format, trigger, lockWait string
	accountsFrom, shard                                                 string
	providers, accounts                                                 multiFlag
	dryRun, noMigrate                                                   bool
	batchSize, concurrency                                              int
}

// job is one (provider, account) to reconcile.
type job struct {
	provider string
	account  string
}

func cmdRun(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	var f runFlags
	fs := newFlagSet("run", stderr)
	fs.StringVar(&f.config, "config", "", "config file (default $RECONCILER_CONFIG, else ./config.yaml)")
	fs.Var(&f.providers, "provider", "provider to reconcile (repeatable; default: every configured one)")
	fs.Var(&f.accounts, "account", "connected account id, acct_… (repeatable; default: the configured accounts)")
	fs.StringVar(&f.since, "since", "", "window start, RFC 3339 or date (default: until - window - overlap, or the last checkpoint)")
	fs.StringVar(&f.until, "until", "", "window end, exclusive (default: now)")
	fs.StringVar(&f.window, "window", "", "window length when --since is not given (default from config: 24h)")
	fs.BoolVar(&f.dryRun, "dry-run", false, "decide and report, but write only the run and its drift items")
	fs.StringVar(&f.reportFile, "report", "", "write the report to this file (default: stdout)")
	fs.StringVar(&f.format, "format", "md", "report format: json, csv, md or html")
	fs.StringVar(&f.trigger, "trigger", models.TriggerManual, "what started the run, recorded on it: manual, schedule or api")
	fs.BoolVar(&f.noMigrate, "no-migrate", false, "do not apply pending migrations first")
	fs.IntVar(&f.batchSize, "batch-size", 0, "payments per write transaction (default from config)")
	fs.StringVar(&f.lockWait, "lock-wait", "", "keep trying this long for a lock another run holds before exit code 3 (default from config: 0s)")
	fs.StringVar(&f.accountsFrom, "accounts-from", "", "Stripe connected accounts to reconcile, instead of --account and the configured ones: a file (one acct_… a line, # comments) or \"stripe\" (list them through the API)")
	fs.IntVar(&f.concurrency, "concurrency", defaultConcurrency, "accounts reconciled at once (1..64), sharing one Stripe request budget")
	fs.StringVar(&f.shard, "shard", "", "take only the accounts of shard INDEX/COUNT, e.g. 2/8 (default: $JOB_COMPLETION_INDEX/$RECONCILER_SHARD_COUNT when set)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}

	// Everything is validated before anything touches the database.
	cfg, err := loadConfig(f.config, getenv)
	if err != nil {
		return err
	}
	var since, until time.Time
	if f.since != "" {
		if since, err = config.ParseTime(f.since); err != nil {
			return usagef("--since: %v", err)
		}
	}
	if f.until != "" {
		if until, err = config.ParseTime(f.until); err != nil {
			return usagef("--until: %v", err)
		}
	}
	if !since.IsZero() && !until.IsZero() && !since.Before(until) {
		return usagef("--since %s must be before --until %s", f.since, f.until)
	}
	if f.window != "" {
		d, err := time.ParseDuration(f.window)
		if err != nil || d <= 0 {
			return usagef("--window: %q is not a positive duration (write e.g. 24h, 90m)", f.window)
		}
		cfg.Run.Window = config.Duration(d)
	}
	if !report.ValidFormat(f.format) {
		return usagef("--format: unknown format %q (use json, csv, md or html)", f.format)
	}
	switch f.trigger {
	case models.TriggerManual, models.TriggerSchedule, models.TriggerAPI:
	default:
		return usagef("--trigger: unknown trigger %q (use manual, schedule or api)", f.trigger)
	}
	if f.lockWait != "" {
		d, err := time.ParseDuration(f.lockWait)
		if err != nil || d < 0 {
			return usagef("--lock-wait: %q is not a duration (write e.g. 30s)", f.lockWait)
		}
		cfg.Run.LockWait = config.Duration(d)
	}
	if f.batchSize != 0 {
		if f.batchSize < 1 {
			return usagef("--batch-size: must be positive")
		}
		cfg.Run.BatchSize = f.batchSize
	}
	jobs, err := plan(cfg, f)
	if err != nil {
		return err
	}
	if err := checkProviders(cfg, jobs); err != nil {
		return err
	}
	fo, err := planFanOut(f, jobs, getenv)
	if err != nil {
		return err
	}
	var out io.Writer = stdout
	if f.reportFile != "" {
		rf, err := os.Create(f.reportFile)
		if err != nil {
			return usagef("--report: %v", err)
		}
		defer rf.Close()
		out = rf
	}

	log := newLogger(cfg, stderr)
	// Connected accounts share one paced transport: one budget per process.
	tr := sharedStripeTransport(cfg, fo, jobs)
	if jobs, err = resolveAccounts(ctx, cfg, fo, jobs, tr, log); err != nil {
		return err
	}
	total := len(jobs)
	jobs = inShard(jobs, fo.shard)
	if fo.shard.on() {
		log.Info("sharded", "shard", fo.shard.String(), "accounts_total", total, "accounts_in_shard", len(jobs))
	}
	workers := min(fo.concurrency, max(len(jobs), 1))
	db, err := openDB(ctx, cfg, log)
	if err != nil {
		return err
	}
	if sqlDB, err := db.DB(); err == nil {
		defer sqlDB.Close()
	}
	sizePool(cfg, db, workers, log)
	if cfg.Database.AutoMigrate && !f.noMigrate {
		if _, err := models.Migrate(ctx, db); err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
	}

	// SIGTERM cancels ctx: the batch in flight finishes, the run is recorded
	// interrupted. Past the grace period the process exits regardless.
	go func() {
		<-ctx.Done()
		t := time.NewTimer(cfg.Run.ShutdownGrace.D())
		defer t.Stop()
		<-t.C
		log.Error("shutdown grace period exceeded; exiting", "grace", cfg.Run.ShutdownGrace.D())
		os.Exit(exitFailed)
	}()

	m := metrics.New()
	notifyRun := notifier(cfg, db, m, log)
	// Up to workers jobs at once, each its own run (lock, run row, report
	// section). SIGTERM cancels ctx: nothing new starts, the runs in flight
	// finish their batch and record themselves interrupted.
	outs := make([]outcome, len(jobs))
	runEach(ctx, workers, len(jobs), func(i int) {
		j := jobs[i]
		out := &outs[i]
		out.started = true
		jlog := log.With("provider", j.provider, "account", j.account)
		p, err := providerFor(cfg, j.provider, tr, jlog)
		if err != nil {
			out.err = err
			jlog.Error("run failed", "error", err)
			return
		}
		o := engineOptions(cfg, db, p, log)
		o.Account, o.Since, o.Until, o.DryRun = j.account, since, until, f.dryRun
		o.Trigger, o.TriggeredBy = f.trigger, triggeredBy(getenv)
		if workers == 1 {
			o.Progress = progressPrinter(stderr)
		}
		out.res, out.err = reconcile.Run(ctx, o)
		if bs, ok := p.(interface{ RequestsByStatus() map[int]int64 }); ok && !(j.provider == stripe.Name && tr != nil) {
			out.byStatus = bs.RequestsByStatus()
		}
		if out.res.Run.ID != 0 {
			notifyRun(ctx, out.res.Run.ID)
		}
		switch {
		case errors.Is(out.err, reconcile.ErrLocked):
			jlog.Warn("another run holds the lock; nothing done")
		case out.err != nil:
			jlog.Error("run failed", "run_id", out.res.Run.ID, "error", out.err)
		}
	})
	var runIDs []int64
	var failed, locked []string
	sharedObserved := false
	for i, o := range outs {
		if !o.started {
			continue
		}
		j := jobs[i]
		byStatus := o.byStatus
		if j.provider == stripe.Name && tr != nil && o.res.Run.ID != 0 && !sharedObserved {
			byStatus, sharedObserved = tr.ByStatus(), true // the shared transport's requests, once
		}
		m.Observe(o.res, byStatus)
		if o.res.Run.ID != 0 {
			runIDs = append(runIDs, o.res.Run.ID)
		}
		name := j.provider + "/" + orPlatform(j.account)
		switch {
		case errors.Is(o.err, reconcile.ErrLocked):
			locked = append(locked, name)
		case o.err != nil:
			failed = append(failed, name)
		}
	}
	sum := summarize(total, jobs, outs)
	sum.log(log, fo.shard)
	log.Info("process", "peak_rss_mib", peakRSSMiB())
	if u := cfg.Metrics.PushgatewayURL; u != "" {
		host, _ := os.Hostname()
		if err := m.Push(context.WithoutCancel(ctx), u, pushInstance(host, fo.shard)); err != nil {
			log.Warn("metrics not pushed", "error", err) // never fails the run
		}
	}
	if len(runIDs) > 0 {
		if err := report.Write(context.WithoutCancel(ctx), out, db, f.format, runIDs...); err != nil {
			return fmt.Errorf("write report: %w", err)
		}
	}
	switch {
	case len(failed) > 0:
		return fmt.Errorf("run failed for %v", failed)
	case sum.notStarted > 0:
		return fmt.Errorf("interrupted: %d of %d accounts were not started", sum.notStarted, len(jobs))
	case len(locked) > 0:
		return lockedError{fmt.Sprintf("another run holds the lock for %v; nothing was done there", locked)}
	}
	return nil
}

func orPlatform(a string) string {
	if a == "" {
		return "platform"
	}
	return a
}

// triggeredBy names who started a manual run, for the run record.
func triggeredBy(getenv func(string) string) string {
	for _, k := range []string{"RECONCILER_TRIGGERED_BY", "USER"} {
		if v := getenv(k); v != "" {
			return v
		}
	}
	return ""
}

// plan turns flags and config into the (provider, account) jobs to run.
func plan(cfg config.Config, f runFlags) ([]job, error) {
	providers := []string(f.providers)
	for _, p := range providers {
		if !slices.Contains(knownProviders, p) {
			return nil, usagef("--provider: unknown provider %q (known: %v)", p, knownProviders)
		}
	}
	if len(providers) == 0 {
		if cfg.Providers.Stripe.On() {
			providers = append(providers, stripe.Name)
		}
		if cfg.Providers.GoCardless.On() {
			providers = append(providers, gocardless.Name)
		}
		if len(providers) == 0 {
			return nil, &config.Error{Key: "providers", Msg: "no provider is configured", Hint: "set STRIPE_API_KEY or GOCARDLESS_ACCESS_TOKEN (or their *_file keys), or pass --provider"}
		}
	}
	var jobs []job
	for _, p := range providers {
		accounts := []string(f.accounts)
		switch {
		case p == gocardless.Name && len(accounts) > 0:
			return nil, usagef("--account: gocardless has no connected accounts; run it without --account")
		case p == gocardless.Name:
			accounts = []string{""}
		case len(accounts) == 0:
			accounts = cfg.Providers.Stripe.Accounts
		}
		for _, a := range accounts {
			if a != "" && !strings.HasPrefix(a, "acct_") {
				return nil, usagef("--account: %q is not a connected account id (acct_…)", a)
			}
			jobs = append(jobs, job{provider: p, account: a})
		}
	}
	return jobs, nil
}

// engineOptions are the engine's options from the configuration.
func engineOptions(cfg config.Config, db *gorm.DB, p reconcile.Provider, log *slog.Logger) reconcile.Options {
	o := reconcile.Options{
		DB: db, Provider: p, Window: cfg.Run.Window.D(), Overlap: cfg.Run.Overlap.D(), BatchSize: cfg.Run.BatchSize,
		StuckAfter: cfg.Run.StuckAfter.D(), StuckLimit: cfg.Run.StuckLimit, LockWait: cfg.Run.LockWait.D(), Logger: log,
	}
	if p.Name() == gocardless.Name {
		cal, _ := calendar(cfg) // validated by checkProviders before anything runs
		n := cfg.Providers.GoCardless.StuckAfterWorkingDays
		o.StuckBefore = func(now time.Time) time.Time { return cal.Before(now, n) }
	}
	return o
}

// calendar is the UK working-day calendar for Direct Debit thresholds.
func calendar(cfg config.Config) (*workdays.Calendar, error) {
	f := cfg.Providers.GoCardless.HolidaysFile
	if f == "" {
		return workdays.EnglandAndWales(), nil
	}
	cal, err := workdays.Load(f)
	if err != nil {
		return nil, &config.Error{Key: "providers.gocardless.holidays_file", Msg: err.Error(), Hint: "one ISO date (2026-12-25) a line; or remove the key to use the embedded list"}
	}
	return cal, nil
}

// checkProviders builds every job's provider once, so that a missing key or
// a bad holiday file is a configuration error before the database is touched.
func checkProviders(cfg config.Config, jobs []job) error {
	for _, j := range jobs {
		if _, err := newProvider(cfg, j.provider, nil); err != nil {
			return err
		}
		if j.provider == gocardless.Name {
			if _, err := calendar(cfg); err != nil {
				return err
			}
		}
	}
	return nil
}

// newProvider builds the client for one provider.
func newProvider(cfg config.Config, name string, log *slog.Logger) (reconcile.Provider, error) {
	switch name {
	case stripe.Name:
		s := cfg.Providers.Stripe
		if s.APIKey() == "" {
			return nil, &config.Error{Key: "STRIPE_API_KEY", Msg: "is not set", Hint: "export STRIPE_API_KEY=sk_test_… or mount it and set providers.stripe.api_key_file"}
		}
		return stripe.New(stripe.Config{APIKey: s.APIKey(), BaseURL: s.APIBase, RequestsPerSecond: s.RequestsPerSecond,
			MaxRetries: s.MaxRetries, Timeout: s.Timeout.D(), Logger: log})
	case gocardless.Name:
		g := cfg.Providers.GoCardless
		if g.AccessToken() == "" {
			return nil, &config.Error{Key: "GOCARDLESS_ACCESS_TOKEN", Msg: "is not set", Hint: "export GOCARDLESS_ACCESS_TOKEN=sandbox_… or mount it and set providers.gocardless.access_token_file"}
		}
		return gocardless.New(gocardless.Config{AccessToken: g.AccessToken(), BaseURL: g.APIBase, RequestsPerSecond: g.RequestsPerSecond,
			MaxRetries: g.MaxRetries, Timeout: g.Timeout.D(), Retention: g.EventRetention.D(), Logger: log})
	}
	return nil, usagef("unknown provider %q", name)
}

// progressPrinter shows live progress on a terminal and nothing otherwise.
func progressPrinter(stderr io.Writer) func(reconcile.Progress) {
	if !isTerminal(stderr) {
		return nil
	}
	return func(p reconcile.Progress) {
		rate := 0.0
		if s := p.Elapsed.Seconds(); s > 0 {
			rate = float64(p.EventsRead) / s
		}
		fmt.Fprintf(stderr, "\r\033[Krun %d: %d events, %d payments decided, %d repaired, %d refused, %d requests, %.0f events/s, %s",
			p.RunID, p.EventsRead, p.Examined, p.Repaired, p.Refused, p.Requests, rate, p.Elapsed.Truncate(time.Second))
	}
}

func cmdMigrate(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	fs := newFlagSet("migrate", stderr)
	cfgPath := fs.String("config", "", "config file (default $RECONCILER_CONFIG, else ./config.yaml)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	cfg, err := loadConfig(*cfgPath, getenv)
	if err != nil {
		return err
	}
	db, err := openDB(ctx, cfg, newLogger(cfg, stderr))
	if err != nil {
		return err
	}
	if sqlDB, err := db.DB(); err == nil {
		defer sqlDB.Close()
	}
	applied, err := models.Migrate(ctx, db)
	if err != nil {
		return err
	}
	if len(applied) == 0 {
		fmt.Fprintln(stdout, "migrations: up to date")
	}
	for _, v := range applied {
		fmt.Fprintf(stdout, "migrations: applied %s\n", v)
	}
	return nil
}
