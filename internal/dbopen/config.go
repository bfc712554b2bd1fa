package dbopen

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"strings"
	"time"

	"net/url"

	"gorm.io/gorm"

	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/store/pgstore"
	"github.com/reconciler/reconciler/store/sqlitestore"
)

// Params say which database Open opens (config.Database's values: this
// package sits below config, which must not be imported here).
type Params struct {
	// URL is a PostgreSQL URL or DSN; "" means no database is configured.
	URL string
	// SQLitePath is the embedded store's file, opened when URL is "".
	SQLitePath string
	// Reason says why the embedded store is used ("no database
	// configured"), for the log line that says so.
	Reason string
	// MustExist: the embedded store's file must be there already (the
	// commands that only read it never create it).
	MustExist bool
	// MaxOpenConns bounds the PostgreSQL pool.
	MaxOpenConns int
	// Log, when set, is told that the embedded store is in use.
	Log *slog.Logger
	// Schema names the application's tables (config's schema section);
	// the zero value is the contract's. It is attached to the connection
	// (models.WithAppSchema), so every store and reader over it uses it, and
	// Schema.Own puts our own tables first on the PostgreSQL search_path.
	Schema models.AppSchema
}

// ErrNoEmbeddedStore is Open's error when p.MustExist and the embedded
// store's file does not exist: nothing was created.
var ErrNoEmbeddedStore = errors.New("no database")

// Open connects to PostgreSQL at p.URL and pings it, or, when no database is
// configured, opens the embedded SQLite file at p.SQLitePath (and says so).
// The URL is never in an error: it may hold a password.
func Open(ctx context.Context, p Params) (*gorm.DB, error) {
	if p.URL == "" {
		if p.MustExist {
			if _, err := os.Stat(p.SQLitePath); errors.Is(err, fs.ErrNotExist) {
				return nil, fmt.Errorf("%w: the embedded store %s does not exist; set DATABASE_URL or run reconciler migrate or run first", ErrNoEmbeddedStore, p.SQLitePath)
			}
		}
		if p.Log != nil {
			reason := p.Reason
			if reason == "" {
				reason = "no database configured"
			}
			p.Log.Info("using the embedded SQLite store", "path", p.SQLitePath, "reason", reason,
				"note", "one machine only; PostgreSQL is the production store")
		}
		_, statErr := os.Stat(p.SQLitePath)
		db, err := SQLite(p.SQLitePath)
		if err != nil {
			return nil, err
		}
		if err := db.WithContext(ctx).Exec(`SELECT 1`).Error; err != nil {
			return nil, fmt.Errorf("open the embedded store %s: %w", p.SQLitePath, err)
		}
		if err := prepare(ctx, db, p); err != nil {
			closeDB(db)
			if errors.Is(statErr, fs.ErrNotExist) {
				// A refused schema leaves nothing behind: not even the
				// empty file opening it created.
				for _, f := range []string{p.SQLitePath, p.SQLitePath + "-wal", p.SQLitePath + "-shm", p.SQLitePath + "-journal"} {
					_ = os.Remove(f)
				}
			}
			return nil, err
		}
		return db, nil
	}
	redacted := func(err error) error {
		return fmt.Errorf("connect to the database: %s", strings.ReplaceAll(pgstore.OneLine(err), p.URL, "[DATABASE_URL]"))
	}
	dsn, err := withOwnSchema(p.URL, p.Schema.Own)
	if err != nil {
		return nil, err
	}
	db, err := Postgres(dsn)
	if err != nil {
		return nil, redacted(err)
	}
	sqlDB, err := db.DB()
	if err != nil {
		return nil, err
	}
	sqlDB.SetMaxOpenConns(p.MaxOpenConns)
	// A connection keeps buffers as large as the largest batch it carried:
	// few idle connections, closed soon, keep the process's memory flat.
	sqlDB.SetMaxIdleConns(2)
	sqlDB.SetConnMaxIdleTime(30 * time.Second)
	pctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := sqlDB.PingContext(pctx); err != nil {
		return nil, redacted(err)
	}
	if err := prepare(ctx, db, p); err != nil {
		closeDB(db)
		return nil, err
	}
	return db, nil
}

// closeDB closes db's connections, for a database Open will not return.
func closeDB(db *gorm.DB) {
	if sqlDB, err := db.DB(); err == nil {
		_ = sqlDB.Close()
	}
}

// prepare gives db its application schema (unless p.Schema is the zero
// value) and checks the application's tables against it (CheckSchema),
// before any command reads a provider or writes anything; ctx from
// SkipSchemaCheck skips the check (migrate --app-tables, which creates the
// tables it would not find). The log says which optional columns the
// application's tables lack, which the job then does not record.
func prepare(ctx context.Context, db *gorm.DB, p Params) error {
	if p.Schema.Payments.Name != "" {
		if err := models.WithAppSchema(db, p.Schema); err != nil {
			return err
		}
	}
	if skip, _ := ctx.Value(skipCheckKey{}).(bool); !skip {
		if err := CheckSchema(ctx, db); err != nil {
			return err // the one line the command prints
		}
	}
	if absent := p.Schema.Absent(); len(absent) > 0 && p.Log != nil && p.Schema.Payments.Name != "" {
		p.Log.Info("the application's tables lack optional columns: the job does not record them", "absent", strings.Join(absent, ", "))
	}
	return nil
}

type skipCheckKey struct{}

// SkipSchemaCheck returns ctx under which Open does not check the
// application's tables: for creating them.
func SkipSchemaCheck(ctx context.Context) context.Context {
	return context.WithValue(ctx, skipCheckKey{}, true)
}

// Migrate is reconciler migrate: with appTables, the application's tables
// as db's mapping names them first (models.CreateAppTables, for a team
// starting fresh; a table that exists is left alone), then the migrations
// (models.Migrate: in a mapped install, our own tables only), each step
// said on out.
func Migrate(ctx context.Context, db *gorm.DB, appTables bool, out io.Writer) error {
	if appTables {
		created, err := models.CreateAppTables(ctx, db)
		if err != nil {
			return err
		}
		for _, t := range created {
			fmt.Fprintf(out, "app tables: %s is there\n", t)
		}
		if err := CheckSchema(ctx, db); err != nil {
			return err
		}
	}
	applied, err := models.Migrate(ctx, db)
	if err != nil {
		return err
	}
	if len(applied) == 0 {
		fmt.Fprintln(out, "migrations: up to date")
	}
	for _, v := range applied {
		fmt.Fprintf(out, "migrations: applied %s\n", v)
	}
	return nil
}

// withOwnSchema is dsn with schema first on its search_path (before the
// DSN's own search_path, or PostgreSQL's default "$user", public), so that
// our tables live in it and unqualified application tables are still found
// where they were. The DSN is a URL or key=value pairs.
func withOwnSchema(dsn, schema string) (string, error) {
	if schema == "" {
		return dsn, nil
	}
	path := func(old string) string {
		if old == "" {
			old = `"$user", public`
		}
		return models.QuoteIdent(schema) + ", " + old
	}
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return "", errors.New("database.url is not a valid URL")
		}
		q := u.Query()
		q.Set("search_path", path(q.Get("search_path")))
		u.RawQuery = q.Encode()
		return u.String(), nil
	}
	return dsn + " search_path='" + strings.ReplaceAll(path(""), "'", `\'`) + "'", nil
}

// CheckSchema checks the application's tables of db's mapping against the
// live schema (a *store.SchemaError names the first problem). A default
// install with migrations pending is not checked: its migrations create and
// alter the contract's tables, and the check runs once they have.
func CheckSchema(ctx context.Context, db *gorm.DB) error {
	if !models.AppSchemaOf(db).Mapped() {
		if pending, err := models.Pending(ctx, db); err != nil || len(pending) > 0 {
			return nil
		}
	}
	if db.Dialector.Name() == "sqlite" {
		return sqlitestore.CheckSchema(ctx, db)
	}
	return pgstore.CheckSchema(ctx, db)
}

// PoolHeadroom is how many pooled connections are kept beside the runs'
// for the short readers: serve's /readyz ping and migration check, GET
// /runs and GET /runs/{id}, so that those never queue behind a run.
const PoolHeadroom = 2

// ConnsPerRun is the most pooled connections one run holds at once: one,
// to write. On PostgreSQL the run's advisory lock lives on a connection of
// its own, dialled outside the pool (store/pgstore), so a run's lock and its
// work never compete for the pool; the embedded store's lock is a row.
func ConnsPerRun(*gorm.DB) int { return 1 }

// RunsFor is how many runs at once db's pool has room for, headroom kept:
// (pool - PoolHeadroom) / ConnsPerRun, at least 1. The pool is the
// configured size on PostgreSQL (database.max_open_conns, default 10: 8
// runs), the pool SQLite opened with otherwise (4: 2 runs, whose writes
// SQLite serialises anyway).
func RunsFor(db *gorm.DB, configured int) int {
	pool := configured
	if db.Dialector.Name() == "sqlite" {
		if sqlDB, err := db.DB(); err == nil {
			pool = sqlDB.Stats().MaxOpenConnections
		}
	}
	return max(1, (pool-PoolHeadroom)/ConnsPerRun(db))
}

// RoomForRuns makes room in db's pool for n runs at once, so that n runs
// and the short readers never queue for a connection: the pool is raised
// to ConnsPerRun*n + PoolHeadroom. The embedded store's lock is a
// row, and its pool stays as SQLite opened it. It returns the pool's new
// size, 0 when it did not change.
func RoomForRuns(db *gorm.DB, configured, n int) int {
	need := ConnsPerRun(db)*n + PoolHeadroom
	if n < 2 || db.Dialector.Name() == "sqlite" || configured >= need {
		return 0
	}
	sqlDB, err := db.DB()
	if err != nil {
		return 0
	}
	sqlDB.SetMaxOpenConns(need)
	sqlDB.SetMaxIdleConns(need)
	return need
}
