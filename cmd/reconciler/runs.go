package main

import (
	"context"
	"errors"
	"strconv"

	"github.com/spf13/cobra"
	"gorm.io/gorm"

	"github.com/reconciler/reconciler/config"
	"github.com/reconciler/reconciler/internal/cli"
	"github.com/reconciler/reconciler/internal/runview"
	"github.com/reconciler/reconciler/report"
	"github.com/reconciler/reconciler/runner"
	"github.com/reconciler/reconciler/store"
)

// runsCmd reads the run record as serve's GET /runs and GET /runs/{id} do.
func (e env) runsCmd() *cobra.Command {
	var cfgPath, output, provider, account string
	var limit int
	list := cli.Command(doc("runs_list"), func(c *cobra.Command, _ []string) error {
		f := runner.Filter{Limit: limit}
		if c.Flags().Changed("provider") {
			f.Provider = &provider
		}
		if c.Flags().Changed("account") {
			f.Account = &account
		}
		return e.readRuns(c.Context(), cfgPath, output, func(_ *gorm.DB, runs runner.Runs) error {
			rs, err := runs.List(c.Context(), f)
			if err != nil {
				return err
			}
			return runview.List(e.stdout, output, rs)
		})
	})
	show := cli.Command(doc("runs_show"), func(c *cobra.Command, args []string) error {
		id, err := strconv.ParseInt(args[0], 10, 64)
		if err != nil || id < 1 {
			return usagef("runs show: %s is not a run id (give a positive id from reconciler runs list)", config.Quote(args[0]))
		}
		return e.readRuns(c.Context(), cfgPath, output, func(db *gorm.DB, runs runner.Runs) error {
			if _, err := runs.Get(c.Context(), id); errors.Is(err, store.ErrNotFound) {
				return usagef("runs show: no run %d (list them with reconciler runs list)", id)
			} else if err != nil {
				return err
			}
			rep, err := report.Load(c.Context(), db, id)
			if err != nil {
				return err
			}
			return runview.Show(e.stdout, output, rep.Runs[0])
		})
	})
	show.Args = cli.ExactArgs(1, "one run id")
	cli.OneOf(list, &provider, "provider", "", "", "only the runs of this provider", runner.Providers...)
	list.Flags().StringVar(&account, "account", "", `only the runs of this account (acct_…; "" for the platform)`)
	cli.IntVar(list.Flags(), &limit, "limit", 50, "at most this many runs, newest first (1 to 1000)")
	for _, c := range []*cobra.Command{list, show} {
		c.Flags().StringVar(&cfgPath, "config", "", "config file (default $RECONCILER_CONFIG, else ./config.yaml)")
		cli.OneOf(c, &output, "output", "o", "table", "output: aligned columns, or the HTTP API's JSON", runview.Formats...)
	}
	return cli.Group(doc("runs"), list, show)
}

// readRuns opens the run record read-only (the database must
// exist and be migrated: an embedded store's file is never created) and
// calls read.
func (e env) readRuns(ctx context.Context, cfgPath, output string, read func(*gorm.DB, runner.Runs) error) error {
	cfg, err := loadConfig(cfgPath, e.getenv)
	if err != nil {
		return err
	}
	db, st, closeDB, err := openDB(ctx, cfg, newLogger(cfg, e.stderr), true)
	if err != nil {
		return err
	}
	defer closeDB()
	return read(db, runner.Runs{Record: st})
}
