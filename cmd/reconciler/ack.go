package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/reconciler/reconciler/acks"
	"github.com/reconciler/reconciler/clock"
)

func cmdAck(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	fs := newFlagSet("ack", stderr)
	cfgPath := fs.String("config", "", "config file (default $RECONCILER_CONFIG, else ./config.yaml)")
	note := fs.String("note", "", `why the items need nothing more, e.g. --note "refunded by hand, ticket 4411" (required)`)
	by := fs.String("by", getenv("USER"), "who looked at them (default $USER)")
	reopen := fs.Bool("reopen", false, "take the acknowledgements back: the items count as open again")
	fps, err := parseInterleaved(fs, args)
	switch {
	case err != nil:
		return err
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
