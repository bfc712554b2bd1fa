package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/reconciler/reconciler/config"
	"github.com/reconciler/reconciler/internal/dbopen"
	"github.com/reconciler/reconciler/internal/logging"
	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/reconcile"
	"github.com/reconciler/reconciler/store"
)

// multiFlag collects a repeatable flag.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

// parseFlags parses args, turning any flag error into a usage error: one
// line naming the flag, never the flag package's usage dump (that is -h's).
func parseFlags(fs *flag.FlagSet, args []string) error {
	out := fs.Output()
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	fs.SetOutput(out)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.Usage()
			return err
		}
		return usagef("%s: %v (run reconciler %s -h for its flags)", fs.Name(), err, fs.Name())
	}
	if fs.NArg() > 0 {
		return usageError{Err: fmt.Errorf("%s: %w %s (flags come before nothing else; run reconciler %s -h)", fs.Name(), errUnexpectedArg, config.Quote(fs.Arg(0)), fs.Name())}
	}
	return nil
}

var errUnexpectedArg = errors.New("unexpected argument")

// parseInterleaved parses fs from args in which flags and positional
// arguments mix ("ack FP1 FP2 --note TEXT"), and returns the positional ones.
func parseInterleaved(fs *flag.FlagSet, args []string) (pos []string, err error) {
	for err = parseFlags(fs, args); err != nil && errors.Is(err, errUnexpectedArg); err = parseFlags(fs, args) {
		pos, args = append(pos, fs.Arg(0)), fs.Args()[1:]
	}
	return pos, err
}

// given reports whether flag name was set on the command line.
func given(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// loadConfig reads and validates the configuration.
func loadConfig(flagPath string, getenv func(string) string) (config.Config, error) {
	path, must := config.Path(flagPath, getenv)
	cfg, err := config.LoadEnv(path, must, config.EnvOf(getenv), os.ReadFile)
	if err != nil {
		return cfg, err
	}
	return cfg, cfg.Validate()
}

func newLogger(cfg config.Config, stderr io.Writer) *slog.Logger {
	return logging.New(cfg.Log.Level, cfg.Log.Format, stderr)
}

var isTerminal = logging.IsTerminal

// openDB opens the configured database (dbopen.Open) and its store; closeDB
// releases the connections. migrated: the schema must be there, with no
// migration pending (for the commands that only read it), and an embedded
// store's file is never created.
func openDB(ctx context.Context, cfg config.Config, log *slog.Logger, migrated bool) (db *gorm.DB, st store.Store, closeDB func(), err error) {
	d := cfg.Database
	reason, _ := cfg.EmbeddedStore()
	db, err = dbopen.Open(ctx, dbopen.Params{URL: d.URL, SQLitePath: d.SQLitePath, MaxOpenConns: d.MaxOpenConns, Log: log, Reason: reason, MustExist: migrated, Schema: cfg.Schema.Mapping()})
	if errors.Is(err, dbopen.ErrNoEmbeddedStore) || errors.As(err, new(*store.SchemaError)) { // issue 18: the application's tables are checked first
		return nil, nil, nil, usageError{Err: err}
	} else if err != nil {
		return nil, nil, nil, err
	}
	closeDB = func() {
		if sqlDB, err := db.DB(); err == nil {
			_ = sqlDB.Close()
		}
	}
	if migrated {
		if pending, err := models.Pending(ctx, db); err != nil || len(pending) > 0 {
			closeDB()
			return nil, nil, nil, errors.New("the database has no reconciler schema or pending migrations: run reconciler migrate")
		}
	}
	return db, dbopen.Store(db, nil), closeDB, nil
}

// parseWindow parses --since and --until, either of which may be empty.
func parseWindow(sinceFlag, untilFlag string) (since, until time.Time, err error) {
	return config.ParseWindow(sinceFlag, untilFlag)
}

// notFuture is the clock's part of the engine's window check, for run:
// a window ending in the future is refused before the database is touched
// (verify, which writes nothing, may read up to any time).
func notFuture(since, until time.Time, sinceFlag, untilFlag string) error {
	now := time.Now()
	if until.After(now.Add(reconcile.MaxClockSkew)) {
		return usagef("--until %s is in the future (give a time up to %s from now, or leave it out for now)", config.Quote(untilFlag), reconcile.MaxClockSkew)
	}
	if since.After(now.Add(reconcile.MaxClockSkew)) {
		return usagef("--since %s is in the future (give a past time)", config.Quote(sinceFlag))
	}
	return nil
}
