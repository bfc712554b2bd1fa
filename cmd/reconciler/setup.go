package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"time"

	"gorm.io/gorm"

	"github.com/reconciler/reconciler/config"
	"github.com/reconciler/reconciler/internal/dbopen"
	"github.com/reconciler/reconciler/internal/logging"
	"github.com/reconciler/reconciler/internal/memlimit"
	"github.com/reconciler/reconciler/reconcile"
	"github.com/reconciler/reconciler/store"
)

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

// watchMemory keeps the process's own soft memory limit above the live
// heap (memlimit.Watch), logging each raise on log, until ctx ends or the
// returned stop is called.
func watchMemory(ctx context.Context, log *slog.Logger) (stop func()) {
	ctx, stop = context.WithCancel(ctx)
	go memlimit.Watch(ctx, 250*time.Millisecond, log)
	return stop
}

// openDB opens the configured database and its store (dbopen.OpenStore);
// closeDB releases the connections. migrated: the schema must be there,
// with no migration pending (for the commands that only read it), and an
// embedded store's file is never created (a usage error: exit 2).
func openDB(ctx context.Context, cfg config.Config, log *slog.Logger, migrated bool) (db *gorm.DB, st store.Store, closeDB func(), err error) {
	d := cfg.Database
	reason, _ := cfg.EmbeddedStore()
	db, st, closeDB, err = dbopen.OpenStore(ctx, dbopen.Params{URL: d.URL, SQLitePath: d.SQLitePath, MaxOpenConns: d.MaxOpenConns, Log: log, Reason: reason, MustExist: migrated, Schema: cfg.Schema.Mapping()})
	if errors.Is(err, dbopen.ErrNoEmbeddedStore) || errors.As(err, new(*store.SchemaError)) { // issue 18: the application's tables are checked first
		err = usageError{Err: err}
	}
	return db, st, closeDB, err
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
