package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/reconciler/reconciler/config"
	"github.com/reconciler/reconciler/runner"
	"github.com/reconciler/reconciler/verify"
)

// exitDiffers is verify's exit code when a payment differs from the
// provider and no drift item explains it (DESIGN section 7).
const exitDiffers = 4

// cmdVerifyMain runs verify and returns its exit code: 0 nothing
// unexplained, 4 an unexplained difference, 1 a failure, 2 usage.
func cmdVerifyMain(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	differs, err := cmdVerify(ctx, args, stdout, stderr, getenv)
	if err != nil {
		return exitCode(err, stderr)
	}
	if differs {
		return exitDiffers
	}
	return exitOK
}

func cmdVerify(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) (differs bool, err error) {
	var f runFlags
	var output, seed string
	var sample int
	var all, byID bool
	fs := newFlagSet("verify", stderr)
	fs.StringVar(&f.config, "config", "", "config file (default $RECONCILER_CONFIG, else ./config.yaml)")
	fs.Var(&f.providers, "provider", "provider to verify (repeatable; default: every configured one)")
	fs.Var(&f.accounts, "account", "connected account id, acct_… (repeatable; default: the configured accounts)")
	fs.StringVar(&f.since, "since", "", "window start, RFC 3339 or date (default: until - 25h)")
	fs.StringVar(&f.until, "until", "", "window end, exclusive (default: now)")
	fs.IntVar(&sample, "sample", verify.DefaultSample, "check N payments of the window drawn at random")
	fs.BoolVar(&all, "all", false, "check every payment of the window")
	fs.BoolVar(&byID, "by-id", false, "read every payment by id, never by listing the window's payments (the default lists them when that costs fewer requests)")
	fs.StringVar(&seed, "seed", "", "seed of the random sample, to repeat one (default: from the clock; printed in the summary)")
	fs.StringVar(&output, "o", "table", "output: table or json")
	fs.StringVar(&output, "output", "table", "output: table or json (same as -o)")
	if err := parseFlags(fs, args); err != nil {
		return false, err
	}
	switch {
	case all && given(fs, "sample"):
		return false, usagef("--sample and --all are mutually exclusive: give one (--all checks every payment of the window)")
	case sample < 1:
		return false, usagef("--sample: %d is not a positive number of payments (write e.g. --sample 100, or --all)", sample)
	case output != "table" && output != "json":
		return false, usagef("-o: unknown output %s (use table or json)", config.Quote(output))
	}
	if err := config.CheckFlagInt("--sample", int64(sample)); err != nil {
		return false, err
	}
	seedN := verify.NewSeed()
	if seed != "" {
		n, err := strconv.ParseUint(seed, 10, 64)
		switch {
		case all:
			return false, usagef("--seed repeats a --sample: --all draws nothing (drop --seed, or give --sample N)")
		case err != nil || n > maxSeed:
			return false, usagef("--seed: %s is not an integer from 0 to %d (write e.g. --seed 42, the seed a sample printed)", config.Quote(seed), maxSeed)
		}
		seedN = n
	}

	cfg, err := loadConfig(f.config, getenv)
	if err != nil {
		return false, err
	}
	since, until, err := parseWindow(f.since, f.until)
	if err != nil {
		return false, err
	}
	if !since.IsZero() && until.IsZero() && !since.Before(time.Now()) {
		return false, usagef("--since %s is in the future: the window would be empty (give an earlier --since)", config.Quote(f.since))
	}
	jobs, err := runner.Plan(cfg, f.providers, f.accounts)
	if err != nil {
		return false, err
	}
	if cfg.Database.URL == "" {
		if _, err := os.Stat(cfg.Database.SQLitePath); err != nil {
			return false, &config.Error{Key: "DATABASE_URL", Msg: "is not set and the embedded store " + cfg.Database.SQLitePath + " does not exist",
				Hint: "export DATABASE_URL=postgres://… (the database the runs write to), or set database.sqlite_path"}
		}
	}

	log := newLogger(cfg, stderr)
	db, st, closeDB, err := openDB(ctx, cfg, log, true)
	if err != nil {
		return false, err
	}
	defer closeDB()

	out := verify.NewOutput(all, sample, seedN)
	for i, j := range jobs {
		name := j.String()
		jlog := log.With("provider", j.Provider, "account", j.Account)
		p, err := runner.NewProvider(cfg, j.Provider, jlog)
		if err != nil {
			return false, err
		}
		reader, err := runner.CurrentReader(p)
		if err != nil {
			return false, err
		}
		jseed := seedN + uint64(i)
		o := verify.Options{DB: db, Store: st, Provider: j.Provider, Account: j.Account, Reader: reader, Since: since, Until: until, NoListing: byID,
			All: all, Seed: &jseed, Record: true, Source: p}
		if !all {
			o.Sample = sample
		}
		rep, err := verify.Run(ctx, o)
		if err != nil {
			jlog.Error("verify failed", "error", err, "run_id", rep.RunID)
			fmt.Fprintf(stderr, "verify %s: failed after %d checked: %v\n", name, rep.Checked, err)
			out.Fail(name)
			continue
		}
		out.Add(rep)
		fmt.Fprintln(stderr, verify.Summary(name, rep, p.Requests()))
	}
	if output == "json" {
		if err := out.WriteJSON(stdout); err != nil {
			return false, err
		}
	} else if err := out.WriteTable(stdout, accountName); err != nil {
		return false, err
	}
	if len(out.Failed) > 0 {
		return false, fmt.Errorf("verify failed for %v", out.Failed)
	}
	return out.Unexplained > 0, nil
}

// maxSeed is the largest --seed: a JSON reader holding numbers as doubles
// reads it back exactly.
const maxSeed = 1<<53 - 1

// accountName is a report's ACCOUNT column.
func accountName(r verify.Report) string {
	return runner.Job{Provider: r.Provider, Account: r.Account}.AccountName()
}
