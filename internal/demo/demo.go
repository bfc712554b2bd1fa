// Package demo runs the whole reconciliation job on a machine with only Go:
// fake Stripe and GoCardless servers in-process on loopback, accounts with
// every drift kind, a local SQLite database seeded as the webhooks left it,
// one reconciliation of each through the real clients, and the report on
// the terminal (report's text format) and in an HTML file.
package demo

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/reconciler/reconciler/internal/dbopen"
	"github.com/reconciler/reconciler/internal/scenario"
	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/providers/gocardless"
	"github.com/reconciler/reconciler/providers/gocardless/gcfake"
	"github.com/reconciler/reconciler/providers/stripe"
	"github.com/reconciler/reconciler/providers/stripe/stripefake"
	"github.com/reconciler/reconciler/reconcile"
	"github.com/reconciler/reconciler/report"
	"github.com/reconciler/reconciler/store"
)

// Trigger names the demo's runs (triggered_by), so that a kept database
// knows it holds a demo.
const Trigger = "demo"

// MaxPayments keeps the demo a matter of seconds.
const MaxPayments = 100_000

// Options says what demo to run and where its output goes.
type Options struct {
	// Payments is how many payments each fake provider generates besides
	// the crafted ones (0 to MaxPayments); Seed makes them (0 or more): the
	// same values build the same accounts.
	Payments int
	Seed     int64
	// DBPath keeps the local database in this file; "" uses a fresh
	// throwaway file, deleted when Run returns. A kept file must be new or
	// hold a demo made with the same Payments and Seed.
	DBPath string
	// HTMLPath is where the HTML report is written; a failed demo leaves no
	// file there.
	HTMLPath string
	// Stdout receives the report as text and the demo's explanation, in
	// colour when Color is set; nil discards them.
	Stdout io.Writer
	Color  bool
	// Log receives the runs' logs; nil discards them.
	Log *slog.Logger
	// Progress, when set, is told each phase as it begins and each run's
	// counts as they grow; nil says nothing.
	Progress *Progress
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// OptionError is an option the caller can fix. Option is named as the
// demo command's flag is ("payments", "seed", "db", "html"), and Err says
// what is wrong and how to fix it, in the command's words: the command
// reports "--<Option>: <Err>" as a usage error.
type OptionError struct {
	Option string
	Err    error
}

func (e *OptionError) Error() string { return e.Option + ": " + e.Err.Error() }
func (e *OptionError) Unwrap() error { return e.Err }

func optionErrorf(option, format string, a ...any) error {
	return &OptionError{Option: option, Err: fmt.Errorf(format, a...)}
}

// Validate checks the options that can be checked before any work: the
// ranges of Payments and Seed, that HTMLPath is given, and that DBPath, if
// given, is not a directory and lies in one that exists. Every error is an
// *OptionError.
func (o Options) Validate() error {
	if o.Payments < 0 || o.Payments > MaxPayments {
		return optionErrorf("payments", "%d is out of range (0 to %d)", o.Payments, MaxPayments)
	}
	if o.Seed < 0 {
		return optionErrorf("seed", "%d is negative (use 0 or more)", o.Seed)
	}
	if o.HTMLPath == "" {
		return optionErrorf("html", "needs a file name")
	}
	if o.DBPath != "" {
		if fi, err := os.Stat(o.DBPath); err == nil && fi.IsDir() {
			return optionErrorf("db", "%s is a directory, not a database file", o.DBPath)
		}
		if _, err := os.Stat(filepath.Dir(o.DBPath)); err != nil {
			return &OptionError{Option: "db", Err: err}
		}
	}
	return nil
}

// Run runs the demo: it validates o, creates the HTML file, opens (and
// migrates) the database, starts the fakes, seeds the database unless it
// already holds this demo, reconciles each provider, then writes the report
// to Stdout and to the HTML file and explains what happened.
//
// Errors the caller can fix (bad options, a database file holding
// something else) are *OptionError and come before any output. A run that
// fails is logged and the others still reported; Run then returns an error
// naming the failed providers.
//
// When ctx is done, Run stops at once: seeding and reading the providers
// stop, the batch each run has in flight is written, no report is made,
// and the error is both ctx.Err() and its cause (the signal, for the
// command).
func Run(ctx context.Context, o Options) error {
	if err := o.Validate(); err != nil {
		return err
	}
	if o.Stdout == nil {
		o.Stdout = io.Discard
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	started := o.Now()
	log := o.Log
	prog := o.Progress
	prog.begin(o.Now)
	defer prog.done()

	htmlPath, err := filepath.Abs(o.HTMLPath)
	if err != nil {
		return &OptionError{Option: "html", Err: err}
	}
	hf, err := os.Create(htmlPath)
	if err != nil {
		return &OptionError{Option: "html", Err: err}
	}
	written := false
	defer func() {
		hf.Close()
		if !written {
			os.Remove(htmlPath) // no empty page left behind by a failed demo
		}
	}()

	// A fresh database each time, unless DBPath keeps one.
	dbPath, throwaway := o.DBPath, o.DBPath == ""
	if throwaway {
		dir, err := os.MkdirTemp("", "reconciler-demo-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		dbPath = filepath.Join(dir, "reconciler-demo.db")
	}
	if abs, err := filepath.Abs(dbPath); err == nil {
		dbPath = abs
	}
	db, err := openDB(ctx, dbPath)
	if err != nil {
		return fmt.Errorf("open the demo database: %w", err)
	}
	if sqlDB, err := db.DB(); err == nil {
		defer sqlDB.Close()
	}
	log.Info("demo database", "path", dbPath, "throwaway", throwaway)

	// A kept database that already holds the demo: rebuild the same
	// accounts as of the same instant, so the runs are reruns of the same
	// window.
	now := o.Now().UTC().Truncate(time.Second)
	first, err := firstRun(ctx, db)
	if err != nil {
		return fmt.Errorf("read the demo database: %w", err)
	}
	rerun := first.ID != 0
	if rerun {
		now = first.WindowEnd.UTC()
	} else {
		var n int64
		if err := db.WithContext(ctx).Model(&models.Payment{}).Count(&n).Error; err != nil {
			return fmt.Errorf("read the demo database: %w", err)
		}
		if n > 0 {
			return optionErrorf("db", "%s holds %d payments the demo did not make; give a new file", dbPath, n)
		}
	}

	// The fake providers, on loopback, with clocks at the real now.
	prog.phase("generating %s payments on a fake Stripe and a fake GoCardless", report.Thousands(int64(o.Payments)))
	so := scenario.Options{Payments: o.Payments, Seed: o.Seed, MissEvery: 10}
	sf := stripefake.New(stripefake.Options{Seed: o.Seed})
	stripeURL := sf.Start()
	defer sf.Close()
	ss := scenario.NewStripe(sf.Account(""), now, so)
	// Stripe as it really behaves: a partial capture, a payout that failed
	// after it was paid, an open dispute, failed refunds, a payout listed
	// late, a capture only the stuck path settles; a connected account
	// that pays out by hand; one whose events are in newer API versions.
	sb := scenario.NewStripeBehaviour(sf.Account(""), sf.Account(ManualAccount), sf.Account(NewerAccount), now)
	gf := gcfake.New(gcfake.Options{Seed: o.Seed})
	gcURL := gf.Start()
	defer gf.Close()
	gs := scenario.NewGoCardless(gf, now, so)
	// GoCardless as it really behaves: a Success+ retry, late failures after
	// the payout, the refund lifecycle, a payout that bounced, payout ids,
	// and payments only the stuck path finds, dated by their own events.
	gb := scenario.NewGoCardlessBehaviour(gf, now)
	log.Info("fake providers", "stripe", stripeURL, "gocardless", gcURL)
	if err := ctx.Err(); err != nil {
		return interrupted(ctx)
	}

	if rerun {
		prog.phase("reading the kept database")
		var stripeIDs []string
		for _, a := range sb.Accounts() {
			stripeIDs = append(stripeIDs, sf.Account(a).PaymentIDs()...)
		}
		ok, err := matches(ctx, db, stripeIDs, gf.PaymentIDs(), ss, gs, sb, gb)
		if err != nil {
			return fmt.Errorf("read the demo database: %w", err)
		}
		if !ok {
			return optionErrorf("db", "%s holds a demo made with other --payments or --seed values (or one that did not finish); pass the same values or give a new file", dbPath)
		}
	} else {
		deliveries := len(ss.Deliveries) + len(gs.Deliveries) + len(gb.Deliveries)
		for _, ds := range sb.Deliveries {
			deliveries += len(ds)
		}
		prog.phase("seeding the local database with %s webhook deliveries", report.Thousands(int64(deliveries)))
		if err := ss.SeedLocal(ctx, db, now); err != nil {
			return seedError(ctx, "Stripe", err)
		}
		if err := sb.SeedLocal(ctx, db, now); err != nil {
			return seedError(ctx, "Stripe", err)
		}
		if err := gs.SeedLocal(ctx, db, now); err != nil {
			return seedError(ctx, "GoCardless", err)
		}
		if err := gb.SeedLocal(ctx, db, now); err != nil {
			return seedError(ctx, "GoCardless", err)
		}
	}

	// One reconciliation per provider, through the real clients.
	since := gs.Start.Add(-time.Hour).Truncate(time.Hour)
	if s := gb.Start.Add(-time.Hour).Truncate(time.Hour); s.Before(since) {
		since = s
	}
	if s := now.Add(-72 * time.Hour); s.Before(since) {
		since = s
	}
	gp, err := gocardless.New(gocardless.Config{AccessToken: "sandbox_demo", BaseURL: gcURL, Logger: log})
	if err != nil {
		return err
	}
	var targets []target
	for _, a := range sb.Accounts() {
		// One provider per account, so that each run counts its own
		// requests. The stuck-payment path is on for Stripe: a crafted
		// capture waits for its payout there.
		sp, err := stripe.New(stripe.Config{APIKey: "sk_test_demo", BaseURL: stripeURL, Logger: log})
		if err != nil {
			return err
		}
		targets = append(targets, target{p: sp, title: title("Stripe", a), account: a, stuck: true})
	}
	// GoCardless's stuck path counts UK working days; two crafted payments
	// are found only by it.
	targets = append(targets, target{p: gp, title: title("GoCardless", ""), stuck: true, stuckBefore: func(time.Time) time.Time { return gb.StuckBefore }})
	ids, failed := reconcileAll(ctx, db, targets, since, now, log, prog)
	if ctx.Err() != nil {
		return interrupted(ctx)
	}
	if len(ids) == 0 {
		return fmt.Errorf("demo: no run was recorded (%s failed)", strings.Join(failed, ", "))
	}
	prog.phase("writing the report")
	rep, err := report.Load(ctx, db, ids...)
	if err != nil {
		if ctx.Err() != nil {
			return interrupted(ctx)
		}
		return err
	}
	prog.done() // the report starts on a line of its own

	out := &terminal{w: o.Stdout, color: o.Color}
	out.intro(o.Payments, o.Seed, dbPath, throwaway, rerun)
	if err := report.RenderText(o.Stdout, rep, report.TextOptions{Color: o.Color, MoreIn: "the HTML report"}); err != nil {
		return fmt.Errorf("write the report: %w", err)
	}
	if err := report.RenderHTML(hf, rep); err != nil {
		return fmt.Errorf("write %s: %w", htmlPath, err)
	}
	if err := hf.Close(); err != nil {
		return fmt.Errorf("write %s: %w", htmlPath, err)
	}
	written = true
	out.printf("%s %s\n\n", out.bold("HTML report:"), htmlPath)
	delivered := len(ss.Deliveries) + len(gs.Deliveries)
	for _, ds := range sb.Deliveries {
		delivered += len(ds)
	}
	delivered += len(gb.Deliveries)
	out.explain(rep, story{payments: o.Payments, missed: ss.Missed + gs.Missed + sb.Missed + gb.Missed,
		delivered: delivered, rerun: rerun, htmlPath: htmlPath})
	out.printf("%s\n", out.dim(fmt.Sprintf("Finished in %.1fs.", o.Now().Sub(started).Seconds())))
	if len(failed) > 0 {
		return fmt.Errorf("demo: the run failed for %s", strings.Join(failed, ", "))
	}
	return nil
}

// reconcileAll runs one reconciliation per provider over [since, until) and
// returns the ids of the runs recorded and the names of the providers whose
// run failed (each failure logged). It stops early when ctx is done; a run
// it stopped is no failure.
func reconcileAll(ctx context.Context, db *gorm.DB, targets []target, since, until time.Time, log *slog.Logger, prog *Progress) (ids []int64, failed []string) {
	for _, t := range targets {
		if ctx.Err() != nil {
			break
		}
		limit := -1
		if t.stuck {
			limit = 0 // the default
		}
		prog.phase("reconciling %s", t.title)
		o := reconcile.Options{DB: db, Provider: t.p, Account: t.account, Since: since, Until: until,
			Trigger: models.TriggerManual, TriggeredBy: Trigger, StuckLimit: limit, StuckBefore: t.stuckBefore, Logger: log}
		if prog != nil {
			o.Progress = prog.run
		}
		res, err := reconcile.Run(ctx, o)
		if res.Run.ID != 0 {
			ids = append(ids, res.Run.ID)
		}
		switch {
		case err != nil && ctx.Err() != nil:
			log.Warn("run interrupted", "provider", t.p.Name(), "account", t.account, "run_id", res.Run.ID, "error", err)
		case err != nil:
			name := t.p.Name()
			if t.account != "" {
				name += "/" + t.account
			}
			log.Error("run failed", "provider", t.p.Name(), "account", t.account, "run_id", res.Run.ID, "error", err)
			failed = append(failed, name)
		}
	}
	return ids, failed
}

// title names a run's provider and account for the progress line.
func title(provider, account string) string {
	if account == "" {
		return provider
	}
	return provider + " " + account
}

// interrupted is Run's error when ctx is done: it says ctx's cause (the
// signal, for the command) and is both the cause and ctx.Err().
func interrupted(ctx context.Context) error {
	return &interruptedError{cause: context.Cause(ctx), err: ctx.Err()}
}

type interruptedError struct{ cause, err error }

func (e *interruptedError) Error() string   { return "demo interrupted: " + e.cause.Error() }
func (e *interruptedError) Unwrap() []error { return []error{e.cause, e.err} }

// seedError is a failed seeding's error: interrupted when ctx is done
// (the seeding's statements stop with it).
func seedError(ctx context.Context, provider string, err error) error {
	if ctx.Err() != nil {
		return interrupted(ctx)
	}
	return fmt.Errorf("seed the %s payments: %w", provider, err)
}

// target is one run of the demo: a provider, one of its accounts, and
// whether the stuck-payment path is on.
type target struct {
	p           reconcile.Provider
	title       string // for the progress line
	account     string
	stuck       bool
	stuckBefore func(now time.Time) time.Time // nil: the default threshold
}

// The demo's connected Stripe accounts.
const (
	// ManualAccount pays out by hand (settings.payouts.schedule.interval
	// manual): its charges settle when their funds become available.
	ManualAccount = "acct_1DemoManualPayouts"
	// NewerAccount's events are rendered in newer API versions than the
	// client pins (2025-03-31.basil, then one no release has yet).
	NewerAccount = "acct_1DemoNewerVersion"
)

// openDB opens (creating) the embedded store at path and migrates it.
func openDB(ctx context.Context, path string) (*gorm.DB, error) {
	db, err := dbopen.SQLite(path)
	if err != nil {
		return nil, err
	}
	if _, err := models.Migrate(ctx, db); err != nil {
		if sqlDB, cerr := db.DB(); cerr == nil {
			sqlDB.Close()
		}
		return nil, fmt.Errorf("migrate %s: %w", path, err)
	}
	return db, nil
}

// firstRun is the database's first demo run; its ID is 0 when there is
// none.
func firstRun(ctx context.Context, db *gorm.DB) (models.Run, error) {
	runs, err := dbopen.Store(db, nil).FindRuns(ctx, store.RunQuery{TriggeredBy: Trigger, Ascending: true, Limit: 1})
	if err != nil || len(runs) == 0 {
		return models.Run{}, err
	}
	return runs[0], nil
}

// matches reports whether a kept database holds the demo these fakes
// describe: every payment of both providers, the crafted ones included.
func matches(ctx context.Context, db *gorm.DB, stripeIDs, gcIDs []string, ss *scenario.Stripe, gs *scenario.GoCardless, sb *scenario.StripeBehaviour, gb *scenario.GoCardlessBehaviour) (bool, error) {
	behaviour := []string{sb.PartialCapture, sb.PayoutFailed, sb.OpenDispute, sb.RefundFailedCounted, sb.ReconciledLate, sb.StuckCaptured, sb.ManualSettled, sb.NewerPartial}
	gcBehaviour := []string{gb.SuccessPlusRetried, gb.RefundFailedCounted, gb.PayoutBounced, gb.StuckPaidOut}
	for _, c := range []struct {
		provider string
		all      int
		crafted  []string
	}{
		{stripe.Name, len(stripeIDs), append([]string{ss.MissingLocal, ss.Behind, ss.Conflict, ss.Stale, ss.Mismatch, ss.UnknownStatus, ss.OutOfOrder, ss.LocalAhead}, behaviour...)},
		{gocardless.Name, len(gcIDs), []string{gs.MissingLocal, gs.Submitted, gs.Confirmed, gs.PaidOut, gs.LateFailure, gs.FailedAfterPayout,
			gs.ChargedBack, gs.ChargebackCancelled, gs.Refunded, gs.Stale, gs.Mismatch, gs.UnknownStatus, gs.OutOfOrder, gcBehaviour[0], gcBehaviour[1], gcBehaviour[2], gcBehaviour[3]}},
	} {
		var all, crafted int64
		q := db.WithContext(ctx).Model(&models.Payment{})
		if err := q.Where("provider = ?", c.provider).Count(&all).Error; err != nil {
			return false, err
		}
		q = db.WithContext(ctx).Model(&models.Payment{})
		if err := q.Where("provider = ? AND provider_id IN ?", c.provider, c.crafted).Count(&crafted).Error; err != nil {
			return false, err
		}
		if all != int64(c.all) || crafted != int64(len(c.crafted)) {
			return false, nil
		}
	}
	return true, nil
}
