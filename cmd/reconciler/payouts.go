package main

import (
	"context"
	"io"
	"log/slog"

	"github.com/reconciler/reconciler/config"
	"github.com/reconciler/reconciler/payouts/payoutcmd"
)

// cmdPayoutsMain is `reconciler payouts` (payouts/payoutcmd,
// docs/payouts.md): exit 0 when no payout mismatches, 4 when one does
// (as verify's unexplained difference), 1 a failure, 2 usage. It writes
// nothing to the database.
func cmdPayoutsMain(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	mismatch, err := payoutcmd.Run(ctx, args, payoutcmd.Env{Stdout: stdout, Stderr: stderr, Getenv: getenv,
		Logger: func(c config.Config) *slog.Logger { return newLogger(c, stderr) }})
	if err != nil || !mismatch {
		return exitCode(err, stderr)
	}
	return exitDiffers
}
