package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/reconciler/reconciler/config"
	"github.com/reconciler/reconciler/internal/buildinfo"
	"github.com/reconciler/reconciler/internal/cli"
	"github.com/reconciler/reconciler/internal/profiling"
	"github.com/reconciler/reconciler/metrics"
	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/reconcile"
	"github.com/reconciler/reconciler/report"
	"github.com/reconciler/reconciler/runner"
)

type runFlags struct {
	config, since, until, reportFile, format, trigger, accountsFrom, shard, mode, repair string
	providers, accounts                                                                  []string
	dryRun, noMigrate                                                                    bool
	batchSize, concurrency                                                               int
	window, lockWait                                                                     time.Duration
}

func (e env) runCmd() *cobra.Command {
	var f runFlags
	c := cli.Command(doc("run"), func(c *cobra.Command, _ []string) error { return e.run(c.Context(), c.Flags(), f) })
	fs := c.Flags()
	fs.StringVar(&f.config, "config", "", "config file (default $RECONCILER_CONFIG, else ./config.yaml)")
	fs.StringArrayVar(&f.providers, "provider", nil, "provider to reconcile, stripe or gocardless (repeatable; default: every configured one)")
	fs.StringArrayVar(&f.accounts, "account", nil, "Stripe connected account id, acct_… (repeatable; default: the configured accounts)")
	fs.StringVar(&f.since, "since", "", "window start, RFC 3339 or date (default: until - window - overlap, or the last checkpoint)")
	fs.StringVar(&f.until, "until", "", "window end, exclusive (default: now)")
	cli.DurationVar(fs, &f.window, "window", "window length when --since is not given (default from config: 24h)")
	cli.OneOf(c, &f.mode, "mode", "", reconcile.ModeAuto, "how the window is read: auto (the event log, and object listing for any part older than it), listing (object listing only) or events (the event log only)", reconcile.ModeAuto, reconcile.ModeListing, reconcile.ModeEvents)
	fs.StringVar(&f.repair, "repair", "", "apply (repair the rows) or deliver (record the missed events unprocessed for your own webhook worker; write no payment); default from config run.repair: apply")
	fs.BoolVar(&f.dryRun, "dry-run", false, "decide and report, but write only the run and its drift items")
	fs.StringVar(&f.reportFile, "report", "", "write the report to this file (default: stdout)")
	cli.OneOf(c, &f.format, "format", "", "md", "report format", report.Formats...)
	cli.OneOf(c, &f.trigger, "trigger", "", models.TriggerManual, "what started the run, recorded on it", models.TriggerManual, models.TriggerSchedule, models.TriggerAPI)
	fs.BoolVar(&f.noMigrate, "no-migrate", false, "do not apply pending migrations first")
	cli.IntVar(fs, &f.batchSize, "batch-size", 0, "payments per write transaction (default from config)")
	cli.DurationVar(fs, &f.lockWait, "lock-wait", "keep trying this long for a lock another run holds before exit code 3 (default from config: 0s)")
	fs.StringVar(&f.accountsFrom, "accounts-from", "", "Stripe connected accounts to reconcile, instead of --account and the configured ones: a file (one acct_… a line, # comments) or \"stripe\" (list them through the API)")
	cli.IntVar(fs, &f.concurrency, "concurrency", runner.DefaultConcurrency, "accounts reconciled at once (1..64), sharing one Stripe request budget")
	fs.StringVar(&f.shard, "shard", "", "take only the accounts of shard INDEX/COUNT, e.g. 2/8 (default: $JOB_COMPLETION_INDEX/$RECONCILER_SHARD_COUNT when set)")
	cli.Values(c, "repair", reconcile.RepairModes...)
	return c
}

func (e env) run(ctx context.Context, fs *pflag.FlagSet, f runFlags) (err error) {
	stdout, stderr, getenv := e.stdout, e.stderr, e.getenv
	// Everything is validated before anything touches the database.
	cfg, err := loadConfig(f.config, getenv)
	if err != nil {
		return err
	}
	since, until, err := config.ParseWindow(f.since, f.until)
	if err != nil {
		return err
	}
	if err := notFuture(since, until, f.since, f.until); err != nil {
		return err
	}
	if fs.Changed("window") {
		cfg.Run.Window = config.Duration(f.window)
	}
	if fs.Changed("lock-wait") {
		cfg.Run.LockWait = config.Duration(f.lockWait)
	}
	if fs.Changed("batch-size") {
		cfg.Run.BatchSize = f.batchSize
	}
	jobs, err := runner.Plan(cfg, f.providers, f.accounts)
	if err != nil {
		return err
	}
	fleet, err := runner.FanOut{AccountsFrom: f.accountsFrom, Concurrency: f.concurrency, Shard: f.shard, Getenv: getenv, Accounts: f.accounts}.Check(jobs)
	if err != nil {
		return err
	}
	var out io.Writer = stdout
	if f.reportFile != "" {
		rf, err := os.Create(f.reportFile)
		if err != nil {
			return usagef("--report: %v", err)
		}
		defer func() {
			if cerr := rf.Close(); cerr != nil && err == nil {
				err = fmt.Errorf("write report %s: %w", f.reportFile, cerr)
			}
		}()
		out = rf
	}

	log := newLogger(cfg, stderr)
	defer watchMemory(ctx, log)()
	db, st, closeDB, err := openDB(ctx, cfg, log, false) // before any provider request: the schema check (issue 18)
	if err != nil {
		return err
	}
	defer closeDB()
	svc := &runner.Service{Config: cfg, Log: log}
	if fleet, err = svc.Resolve(ctx, fleet); err != nil {
		return err
	}
	if cfg.Database.AutoMigrate && !f.noMigrate {
		if _, err := models.Migrate(ctx, db); err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
	}

	// SIGTERM cancels ctx: nothing new starts, the batches in flight finish
	// and record their runs interrupted; past the grace period it exits.
	go func() {
		<-ctx.Done()
		t := time.NewTimer(cfg.Run.ShutdownGrace.D())
		defer t.Stop()
		<-t.C
		log.Error("shutdown grace period exceeded; exiting", "grace", cfg.Run.ShutdownGrace.D())
		os.Exit(exitFailed)
	}()

	m := metrics.NewWith(metrics.Options{Version: buildinfo.Version(version), DB: db, Runs: st, Log: log})
	svc.DB, svc.Store, svc.Hooks = db, st, runner.Observe(m, runner.Notifier(cfg, db, st, m, log))
	req := runner.Request{Since: since, Until: until, DryRun: f.dryRun, Mode: f.mode, Repair: f.repair, Trigger: f.trigger, TriggeredBy: triggeredBy(getenv)}
	if isTerminal(stderr) {
		req.ShowProgress(stderr) // live progress on a terminal only
	}
	batch := svc.RunAll(ctx, fleet, req)
	log.Info("process", "peak_rss_mib", profiling.PeakRSSMiB())
	if u := cfg.Metrics.PushgatewayURL; u != "" {
		host, _ := os.Hostname()
		if err := m.Push(context.WithoutCancel(ctx), u, fleet.PushInstance(host)); err != nil {
			log.Warn("metrics not pushed", "error", err) // never fails the run
		}
	}
	if ids := batch.RunIDs(); len(ids) > 0 {
		if err := report.Write(context.WithoutCancel(ctx), out, db, f.format, ids...); err != nil {
			return fmt.Errorf("write report: %w", err)
		}
	}
	if err := badWindow(batch); err != nil {
		return err
	}
	return batch.Err()
}

// badWindow is the engine's refusal of the window asked for
// (reconcile.ErrBadWindow, before any run row): a usage error, exit 2.
func badWindow(b runner.Batch) error {
	for _, o := range b.Outcomes {
		if errors.Is(o.Err, reconcile.ErrBadWindow) {
			return usagef("%s: %v (give --since and --until no later than now, --since first)", o.Job, o.Err)
		}
	}
	return nil
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
