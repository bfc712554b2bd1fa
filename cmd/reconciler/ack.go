package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/reconciler/reconciler/acks"
	"github.com/reconciler/reconciler/clock"
	"github.com/reconciler/reconciler/internal/cli"
)

func (e env) ackCmd() *cobra.Command {
	c := cli.Command(doc("ack"), nil)
	c.Args = cobra.ArbitraryArgs // the fingerprints, among the flags
	fs := c.Flags()
	cfgPath := fs.String("config", "", "config file (default $RECONCILER_CONFIG, else ./config.yaml)")
	note := fs.String("note", "", `why the items need nothing more, e.g. --note "refunded by hand, ticket 4411" (required)`)
	by := fs.String("by", "", "who looked at them (default $USER)")
	reopen := fs.Bool("reopen", false, "take the acknowledgements back: the items count as open again")
	c.RunE = func(c *cobra.Command, args []string) error {
		ctx, stdout, stderr, getenv, fps := c.Context(), e.stdout, e.stderr, e.getenv, args
		if !fs.Changed("by") {
			*by = getenv("USER")
		}
		switch {
		case len(fps) == 0:
			return usagef("ack: give the fingerprints of the items (the fingerprint column of reconciler report --last)")
		case strings.TrimSpace(*note) == "":
			return usagef(`--note: say why the items need nothing more (e.g. --note "refunded by hand, ticket 4411")`)
		case strings.TrimSpace(*by) == "":
			return usagef("--by: say who looked at the items ($USER is not set)")
		}
		cfg, err := loadConfig(*cfgPath, getenv)
		if err != nil {
			return err
		}
		db, _, closeDB, err := openDB(ctx, cfg, newLogger(cfg, stderr), true)
		if err != nil {
			return err
		}
		defer closeDB()
		targets, err := acks.Resolve(ctx, db, fps)
		if errors.Is(err, acks.ErrUnknown) {
			return usageError{Err: err}
		} else if err != nil {
			return err
		}
		if _, err := acks.Record(ctx, db, targets, *by, *note, clock.System.Now(), *reopen); err != nil {
			return err
		}
		for _, t := range targets {
			fmt.Fprintf(stdout, "%s %s, by %s\n", map[bool]string{false: "acknowledged", true: "reopened"}[*reopen], t, *by)
		}
		return nil
	}
	return c
}
