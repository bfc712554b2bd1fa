package main

import (
	"log/slog"

	"github.com/spf13/cobra"

	"github.com/reconciler/reconciler/config"
	"github.com/reconciler/reconciler/internal/cli"
	"github.com/reconciler/reconciler/payouts"
	"github.com/reconciler/reconciler/payouts/payoutcmd"
)

// payoutsCmd is `reconciler payouts` (payouts/payoutcmd, docs/payouts.md):
// exit 0 when no payout mismatches, 4 when one does (as verify's
// unexplained difference), 1 a failure, 2 usage. It writes nothing to the
// database.
func (e env) payoutsCmd() *cobra.Command {
	var f payoutcmd.Flags
	c := cli.Command(doc("payouts"), func(c *cobra.Command, _ []string) error {
		mismatch, err := payoutcmd.Run(c.Context(), f, payoutcmd.Env{Stdout: e.stdout, Stderr: e.stderr, Getenv: e.getenv,
			Logger: func(c config.Config) *slog.Logger { return newLogger(c, e.stderr) }})
		if err == nil && mismatch {
			return cli.Exit(exitDiffers)
		}
		return err
	})
	f.Bind(c.Flags())
	cli.Values(c, "output", payouts.Formats...)
	return c
}
