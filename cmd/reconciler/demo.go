package main

import (
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"

	"github.com/spf13/cobra"

	"github.com/reconciler/reconciler/internal/cli"
	"github.com/reconciler/reconciler/internal/demo"
)

// demoCmd runs the whole job on a machine with only Go: fake Stripe and
// GoCardless in-process on loopback, accounts with every drift kind, a local
// database seeded as the webhooks left it, a reconciliation of each, the
// report on the terminal and in an HTML file.
func (e env) demoCmd() *cobra.Command {
	c := cli.Command(doc("demo"), nil)
	fs := c.Flags()
	var payments int
	var seed int64
	cli.IntVar(fs, &payments, "payments", 500, fmt.Sprintf("generated payments per provider, besides the crafted ones (0 to %d)", demo.MaxPayments))
	cli.IntVar(fs, &seed, "seed", 1, "generator seed: the same seed builds the same accounts (0 or more)")
	dbFile := fs.String("db", "", "keep the local database in this file (default: a fresh throwaway file)")
	htmlFile := fs.String("html", "reconciler-demo.html", "write the HTML report to this file")
	verbose := fs.BoolP("verbose", "v", false, "log at info level (default: warnings only)")
	progress := fs.Bool("progress", false, "say each phase on stderr even when it is not a terminal (on a terminal it always does)")
	c.RunE = func(c *cobra.Command, _ []string) error {
		ctx, stdout, stderr, getenv := c.Context(), e.stdout, e.stderr, e.getenv
		level := slog.LevelWarn
		if *verbose {
			level = slog.LevelInfo
		}
		// The demo holds both fakes' whole data set in this process (a live
		// heap of about 100 MiB at 20,000 payments), which the job's 56 MiB
		// soft memory limit (main) is not meant for: near it the garbage
		// collector ran without pause, a third of the demo's CPU at 8,000
		// payments. 1 GiB leaves the largest demo room. GOMEMLIMIT, when set,
		// still applies.
		if getenv("GOMEMLIMIT") == "" {
			defer debug.SetMemoryLimit(debug.SetMemoryLimit(1 << 30))
		}
		// Under that limit the job's GOGC 200 (main) let the heap reach
		// three times the fakes' live data: 456–509 MiB of peak RSS at
		// 20,000 payments. At Go's default 100, 351–364 MiB in the same
		// time within the machine's noise (12.4–13.8 s against 12.3–13.3;
		// docs/benchmarks.md, session 10). GOGC, when set, still applies.
		if getenv("GOGC") == "" {
			defer debug.SetGCPercent(debug.SetGCPercent(100))
		}
		var prog *demo.Progress
		logTo := stderr
		if live := isTerminal(stderr); live || *progress {
			prog = demo.NewProgress(stderr, live)
			logTo = prog // a log line ends the progress line first
		}
		err := demo.Run(ctx, demo.Options{
			Payments: payments, Seed: seed, DBPath: *dbFile, HTMLPath: *htmlFile,
			Stdout: stdout, Color: isTerminal(stdout),
			Log:      slog.New(slog.NewTextHandler(logTo, &slog.HandlerOptions{Level: level})),
			Progress: prog,
		})
		// The options are the flags: what the caller can fix is a usage error.
		var oe *demo.OptionError
		if errors.As(err, &oe) {
			return usagef("--%s: %v", oe.Option, oe.Err)
		}
		return err
	}
	return c
}
