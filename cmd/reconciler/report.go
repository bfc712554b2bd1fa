package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/reconciler/reconciler/config"
	"github.com/reconciler/reconciler/internal/cli"
	"github.com/reconciler/reconciler/report"
	"github.com/reconciler/reconciler/runner"
	"github.com/reconciler/reconciler/store"
)

func (e env) reportCmd() *cobra.Command {
	c := cli.Command(doc("report"), nil)
	fs := c.Flags()
	cfgPath := fs.String("config", "", "config file (default $RECONCILER_CONFIG, else ./config.yaml)")
	runID := fs.Int64("run", 0, "the run to render")
	last := fs.Bool("last", false, "render the latest finished run (of --provider and --account when given)")
	var history int
	cli.IntVar(fs, &history, "history", 0, "render the last N finished runs as a trend (1 to 1000)")
	var format string
	cli.OneOf(c, &format, "format", "", "md", "report format", report.Formats...)
	provider := fs.String("provider", "", "with --last or --history: only this provider")
	account := fs.String("account", "", "with --last or --history and --provider: only this account")
	output := fs.String("output", "", "write to this file instead of stdout")
	doNotify := fs.Bool("notify", false, "post the run's summary to the configured chat if it was not posted yet (at most once per run)")
	link := fs.Bool("link", false, "print a fresh signed link that opens the run's report in a browser (notify.report_url, the report link key)")
	c.RunE = func(c *cobra.Command, _ []string) (err error) {
		ctx, stdout, stderr, getenv := c.Context(), e.stdout, e.stderr, e.getenv
		n := 0
		for _, set := range []bool{*runID != 0, *last, history != 0} {
			if set {
				n++
			}
		}
		if n != 1 {
			return usagef("report: give exactly one of --run ID, --last or --history N")
		}
		if *runID < 0 {
			return usagef("--run: %d is not a run id (use a positive id from reconciler runs list, or --last)", *runID)
		}
		if *account != "" && *provider == "" {
			return usagef("--account needs --provider (give --provider stripe with it)")
		}
		cfg, err := loadConfig(*cfgPath, getenv)
		if err != nil {
			return err
		}
		db, st, closeDB, err := openDB(ctx, cfg, newLogger(cfg, stderr), true)
		if err != nil {
			return err
		}
		defer closeDB()
		var out io.Writer = stdout
		if *output != "" {
			f, err := os.Create(*output)
			if err != nil {
				return usagef("--output: %v", err)
			}
			defer func() {
				if cerr := f.Close(); cerr != nil && err == nil {
					err = fmt.Errorf("write %s: %w", *output, cerr)
				}
			}()
			out = f
		}
		if history > 0 {
			runs, err := report.LoadHistory(ctx, db, history, *provider, *account)
			if err != nil {
				return err
			}
			return report.RenderHistory(out, runs, format)
		}
		id, runs := *runID, runner.Runs{Record: st}
		if *last {
			r, ok, err := runs.LatestFinished(ctx, *provider, *account)
			if err != nil {
				return err
			}
			if !ok {
				return errors.New("no finished run yet")
			}
			id = r.ID
		}
		if _, err := runs.Get(ctx, id); errors.Is(err, store.ErrNotFound) {
			return usagef("--run: no run %d", id)
		} else if err != nil {
			return err
		}
		if *link {
			return runner.PrintReportLink(cfg, stdout, id)
		}
		if *doNotify { // a delivery failure exits 1 after the report is written
			if err = runner.NotifyExplicit(ctx, cfg, db, st, newLogger(cfg, stderr), stderr, id); errors.As(err, new(*config.Error)) {
				return err
			}
		}
		return errors.Join(err, report.Write(ctx, out, db, format, id))
	}
	return c
}
