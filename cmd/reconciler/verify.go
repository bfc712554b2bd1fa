package main

import (
	"fmt"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/reconciler/reconciler/config"
	"github.com/reconciler/reconciler/internal/cli"
	"github.com/reconciler/reconciler/runner"
	"github.com/reconciler/reconciler/verify"
)

// exitDiffers is verify's exit code when a payment differs from the
// provider and no drift item explains it (DESIGN section 7).
const exitDiffers = 4

// verifyCmd exits 0 when nothing is unexplained, 4 on an unexplained
// difference, 1 on a failure, 2 on a usage error.
func (e env) verifyCmd() *cobra.Command {
	c := cli.Command(doc("verify"), nil)
	fs := c.Flags()
	var f runFlags
	var output, seed string
	var sample int
	var all, byID bool
	fs.StringVar(&f.config, "config", "", "config file (default $RECONCILER_CONFIG, else ./config.yaml)")
	fs.StringArrayVar(&f.providers, "provider", nil, "provider to verify, stripe or gocardless (repeatable; default: every configured one)")
	fs.StringArrayVar(&f.accounts, "account", nil, "Stripe connected account id, acct_… (repeatable; default: the configured accounts)")
	fs.StringVar(&f.since, "since", "", "window start, RFC 3339 or date (default: until - 25h)")
	fs.StringVar(&f.until, "until", "", "window end, exclusive (default: now)")
	fs.IntVar(&sample, "sample", verify.DefaultSample, "check N payments of the window drawn at random")
	fs.BoolVar(&all, "all", false, "check every payment of the window")
	fs.BoolVar(&byID, "by-id", false, "read every payment by id, never by listing the window's payments (the default lists them when that costs fewer requests)")
	fs.StringVar(&seed, "seed", "", "seed of the random sample, to repeat one (default: from the clock; printed in the summary)")
	cli.OneOf(c, &output, "output", "o", "table", "output: a table, or JSON for programs", "table", "json")
	c.RunE = func(c *cobra.Command, _ []string) error {
		ctx, stdout, stderr, getenv := c.Context(), e.stdout, e.stderr, e.getenv
		switch {
		case all && fs.Changed("sample"):
			return usagef("--sample and --all are mutually exclusive: give one (--all checks every payment of the window)")
		case sample < 1:
			return usagef("--sample: %d is not a positive number of payments (write e.g. --sample 100, or --all)", sample)
		}
		if err := config.CheckFlagInt("--sample", int64(sample)); err != nil {
			return err
		}
		seedN := verify.NewSeed()
		if seed != "" {
			n, err := strconv.ParseUint(seed, 10, 64)
			switch {
			case all:
				return usagef("--seed repeats a --sample: --all draws nothing (drop --seed, or give --sample N)")
			case err != nil || n > maxSeed:
				return usagef("--seed: %s is not an integer from 0 to %d (write e.g. --seed 42, the seed a sample printed)", config.Quote(seed), maxSeed)
			}
			seedN = n
		}

		cfg, err := loadConfig(f.config, getenv)
		if err != nil {
			return err
		}
		since, until, err := config.ParseWindow(f.since, f.until)
		if err != nil {
			return err
		}
		if !since.IsZero() && until.IsZero() && !since.Before(time.Now()) {
			return usagef("--since %s is in the future: the window would be empty (give an earlier --since)", config.Quote(f.since))
		}
		jobs, err := runner.Plan(cfg, f.providers, f.accounts)
		if err != nil {
			return err
		}

		log := newLogger(cfg, stderr)
		db, st, closeDB, err := openDB(ctx, cfg, log, true)
		if err != nil {
			return err
		}
		defer closeDB()

		out := verify.NewOutput(all, sample, seedN)
		for i, j := range jobs {
			name := j.String()
			jlog := log.With("provider", j.Provider, "account", j.Account)
			p, err := runner.NewProvider(cfg, j.Provider, jlog)
			if err != nil {
				return err
			}
			reader, err := runner.CurrentReader(p)
			if err != nil {
				return err
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
				return err
			}
		} else if err := out.WriteTable(stdout, accountName); err != nil {
			return err
		}
		if len(out.Failed) > 0 {
			return fmt.Errorf("verify failed for %v", out.Failed)
		}
		if out.Unexplained > 0 {
			return cli.Exit(exitDiffers)
		}
		return nil
	}
	return c
}

// maxSeed is the largest --seed: a JSON reader holding numbers as doubles
// reads it back exactly.
const maxSeed = 1<<53 - 1

// accountName is a report's ACCOUNT column.
func accountName(r verify.Report) string {
	return runner.Job{Provider: r.Provider, Account: r.Account}.AccountName()
}
