package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"

	"github.com/reconciler/reconciler/config"
	"github.com/reconciler/reconciler/internal/demo"
)

// cmdDemo runs the whole job on a machine with only Go: fake Stripe and
// GoCardless in-process on loopback, accounts with every drift kind, a local
// database seeded as the webhooks left it, a reconciliation of each, the
// report on the terminal and in an HTML file.
func cmdDemo(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	fs := newFlagSet("demo", stderr)
	payments := fs.Int("payments", 500, fmt.Sprintf("generated payments per provider, besides the crafted ones (0 to %d)", demo.MaxPayments))
	seed := fs.Int64("seed", 1, "generator seed: the same seed builds the same accounts (0 or more)")
	dbFile := fs.String("db", "", "keep the local database in this file (default: a fresh throwaway file)")
	htmlFile := fs.String("html", "reconciler-demo.html", "write the HTML report to this file")
	verbose := fs.Bool("v", false, "log at info level (default: warnings only)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := config.CheckFlagInt("--payments", int64(*payments)); err != nil {
		return err
	}
	if err := config.CheckFlagInt("--seed", *seed); err != nil {
		return err
	}
	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelInfo
	}
	err := demo.Run(ctx, demo.Options{
		Payments: *payments, Seed: *seed, DBPath: *dbFile, HTMLPath: *htmlFile,
		Stdout: stdout, Color: isTerminal(stdout),
		Log: slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level})),
	})
	// The options are the flags: what the caller can fix is a usage error.
	var oe *demo.OptionError
	if errors.As(err, &oe) {
		return usagef("--%s: %v", oe.Option, oe.Err)
	}
	return err
}
