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

// parseFlags parses args, turning any flag error into a usage error.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{fmt.Errorf("%s: %w", fs.Name(), err)}
	}
	if fs.NArg() > 0 {
		return usagef("%s: unexpected argument %q", fs.Name(), fs.Arg(0))
	}
	return nil
}

// loadConfig reads and validates the configuration.
func loadConfig(flagPath string, getenv func(string) string) (config.Config, error) {
	path, must := config.Path(flagPath, getenv)
	cfg, err := config.Load(path, must, getenv, os.ReadFile)
	if err != nil {
		return cfg, err
	}
	return cfg, cfg.Validate()
}

// newLogger writes JSON to stderr unless it is a terminal (or the config
// says otherwise).
func newLogger(cfg config.Config, stderr io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(cfg.Log.Level))
	opts := &slog.HandlerOptions{Level: level}
	format := cfg.Log.Format
	if format == "auto" {
		format = "json"
		if isTerminal(stderr) {
			format = "text"
		}
	}
	if format == "text" {
		return slog.New(slog.NewTextHandler(stderr, opts))
	}
	return slog.New(slog.NewJSONHandler(stderr, opts))
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// openDB connects to PostgreSQL, or, when no database is configured, opens
// the embedded SQLite file (and says so). The URL is never printed: it may
// hold a password.
func openDB(ctx context.Context, cfg config.Config, log *slog.Logger) (*gorm.DB, error) {
	if cfg.Database.URL == "" {
		path := cfg.Database.SQLitePath
		if log != nil {
			log.Info("no DATABASE_URL: using the embedded SQLite store (one machine only; PostgreSQL is the production store)", "path", path)
		}
		db, err := dbopen.SQLite(path)
		if err != nil {
			return nil, err
		}
		if err := db.WithContext(ctx).Exec(`SELECT 1`).Error; err != nil {
			return nil, fmt.Errorf("open the embedded store %s: %w", path, err)
		}
		return db, nil
	}
	db, err := dbopen.Postgres(cfg.Database.URL)
	if err != nil {
		return nil, fmt.Errorf("connect to the database: %s", redactDSN(err.Error(), cfg.Database.URL))
	}
	sqlDB, err := db.DB()
	if err != nil {
		return nil, err
	}
	sqlDB.SetMaxOpenConns(cfg.Database.MaxOpenConns)
	// A connection keeps buffers as large as the largest batch it carried:
	// few idle connections, closed soon, keep the process's memory flat.
	sqlDB.SetMaxIdleConns(2)
	sqlDB.SetConnMaxIdleTime(30 * time.Second)
	pctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := sqlDB.PingContext(pctx); err != nil {
		return nil, fmt.Errorf("connect to the database: %s", redactDSN(err.Error(), cfg.Database.URL))
	}
	return db, nil
}

// redactDSN removes the DSN and any password from a driver message.
func redactDSN(msg, dsn string) string {
	if dsn != "" {
		msg = strings.ReplaceAll(msg, dsn, "[DATABASE_URL]")
	}
	return msg
}
