// Package payoutcmd is `reconciler payouts`: its flags, the wiring of the
// configuration, the database and the provider, and the report. It sits
// beside package payouts rather than in cmd/reconciler, which stays under
// its thin-command bound (internal/archtest), and apart from payouts itself,
// which cannot import the configuration (config imports the providers,
// which import payouts).
package payoutcmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/spf13/pflag"

	"github.com/reconciler/reconciler/config"
	"github.com/reconciler/reconciler/internal/dbopen"
	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/payouts"
	"github.com/reconciler/reconciler/runner"
	"github.com/reconciler/reconciler/store"
)

// Env is what the command line gives the command.
type Env struct {
	Stdout, Stderr io.Writer
	Getenv         func(string) string
	// Logger builds the command's logger from the configuration (the
	// command line's own: JSON unless stderr is a terminal).
	Logger func(config.Config) *slog.Logger
}

func usagef(format string, a ...any) error { return runner.UsageError{Err: fmt.Errorf(format, a...)} }

// Flags are the command's flags.
type Flags struct {
	Config, Provider, Account, Since, Until, Output string
}

// Bind defines the flags on fs, with their help.
func (f *Flags) Bind(fs *pflag.FlagSet) {
	fs.StringVar(&f.Config, "config", "", "config file (default $RECONCILER_CONFIG, else ./config.yaml)")
	fs.StringVar(&f.Provider, "provider", "", "stripe or gocardless (required)")
	fs.StringVar(&f.Account, "account", "", "Stripe connected account id, acct_… (default: the platform)")
	fs.StringVar(&f.Since, "since", "", "payouts created from, RFC 3339 or date (required)")
	fs.StringVar(&f.Until, "until", "", "payouts created before, exclusive (default: now)")
	fs.StringVarP(&f.Output, "output", "o", "text", "output: csv, json or text")
}

// Run reconciles the payouts of one provider account created in
// [--since, --until) and writes the report to Stdout; it reports whether
// a payout mismatches (the command exits 4). A mistake in the flags or the
// configuration is a runner.UsageError or a *config.Error (exit 2), found
// before anything is read or written. It writes nothing to the database,
// and never creates the embedded store's file.
func Run(ctx context.Context, f Flags, env Env) (mismatch bool, err error) {
	cfgPath, provider, account, sinceFlag, untilFlag, output := f.Config, f.Provider, f.Account, f.Since, f.Until, f.Output
	switch {
	case provider == "":
		return false, usagef("--provider is required: give --provider stripe or --provider gocardless")
	case sinceFlag == "":
		return false, usagef("--since is required: give the first day of the payouts, e.g. --since 2026-11-01")
	case !payouts.ValidFormat(output):
		return false, usagef("-o: unknown output %s (use csv, json or text)", config.Quote(output))
	}
	since, err := config.ParseTime(sinceFlag)
	if err != nil {
		return false, usagef("--since: %v", err)
	}
	until := time.Now()
	if untilFlag != "" {
		if until, err = config.ParseTime(untilFlag); err != nil {
			return false, usagef("--until: %v", err)
		}
	}
	if !since.Before(until) {
		return false, usagef("--since %s is not before --until (now when not given): give an earlier --since", config.Quote(sinceFlag))
	}

	path, must := config.Path(cfgPath, env.Getenv)
	cfg, err := config.Load(path, must, env.Getenv, os.ReadFile)
	if err == nil {
		err = cfg.Validate()
	}
	if err != nil {
		return false, err
	}
	var accounts []string
	if account != "" {
		accounts = []string{account}
	}
	if _, err := runner.Plan(cfg, []string{provider}, accounts); err != nil {
		return false, err // an unknown provider, an account GoCardless lacks, a missing key
	}
	d := cfg.Database
	if _, err := os.Stat(d.SQLitePath); d.URL == "" && err != nil {
		return false, &config.Error{Key: "DATABASE_URL", Msg: "is not set and the embedded store " + d.SQLitePath + " does not exist",
			Hint: "export DATABASE_URL=postgres://… (the database the runs write to), or set database.sqlite_path"}
	}

	log := env.Logger(cfg)
	db, err := dbopen.Open(ctx, dbopen.Params{URL: d.URL, SQLitePath: d.SQLitePath, MaxOpenConns: d.MaxOpenConns, Log: log, Schema: cfg.Schema.Mapping()})
	if se := new(store.SchemaError); errors.As(err, &se) {
		return false, runner.UsageError{Err: err} // the application's tables do not match the mapping: exit 2
	} else if err != nil {
		return false, err
	}
	defer func() {
		if sqlDB, err := db.DB(); err == nil {
			_ = sqlDB.Close()
		}
	}()
	if pending, err := models.Pending(ctx, db); err != nil || len(pending) > 0 {
		return false, errors.New("the database has no reconciler schema or pending migrations: run reconciler migrate")
	}
	p, err := runner.NewProvider(cfg, provider, log)
	if err != nil {
		return false, err
	}
	src, ok := p.(payouts.Source)
	if !ok {
		return false, fmt.Errorf("payouts: provider %s lists no payouts", provider)
	}
	rep, err := payouts.Run(ctx, payouts.Options{Source: src, Rows: payouts.GormRows{DB: db}, Account: account, Since: since, Until: until})
	if err != nil {
		return false, err
	}
	fmt.Fprintf(env.Stderr, "payouts %s: %d payouts, %d mismatching, %d in progress, %d with items unavailable; %d API requests\n",
		runner.Job{Provider: provider, Account: account}, rep.Payouts, rep.Mismatches, rep.InProgress, rep.Unavailable, p.Requests())
	return rep.Mismatches > 0, payouts.Write(env.Stdout, output, rep)
}
