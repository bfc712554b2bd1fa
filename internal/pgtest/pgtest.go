// Package pgtest gives each test its own schema in the PostgreSQL named by
// DATABASE_URL, migrated and dropped afterwards, so tests run in parallel
// against a real database. scripts/test.sh starts a throwaway server when
// DATABASE_URL is unset.
package pgtest

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/reconciler/reconciler/internal/dbopen"
	"github.com/reconciler/reconciler/models"
)

var seq atomic.Int64

// DB is one test's database: a fresh migrated schema.
type DB struct {
	*gorm.DB
	// URL connects to the same schema (for a binary under test).
	URL    string
	Schema string
}

// New creates a schema for t, migrates it and returns a pool whose
// search_path is that schema. Without DATABASE_URL the test is skipped
// unless CI is set, where it fails: CI must never silently skip the database.
func New(t testing.TB) *DB {
	t.Helper()
	return newPG(t, Mapped())
}

func newPG(t testing.TB, mapped bool) *DB {
	t.Helper()
	base := os.Getenv("DATABASE_URL")
	if base == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("DATABASE_URL is unset in CI; run the tests through scripts/test.sh")
		}
		t.Skip("DATABASE_URL is unset; run the tests through scripts/test.sh")
	}
	schema := fmt.Sprintf("t_%s_%d_%d", sanitize(t.Name()), os.Getpid(), seq.Add(1))
	if len(schema) > 56 { // room for the mapped layout's _app
		schema = schema[len(schema)-56:]
		schema = "t" + strings.TrimLeft(schema, "_0123456789")
	}
	admin := open(t, base)
	if err := admin.Exec(`CREATE SCHEMA ` + schema).Error; err != nil {
		t.Fatalf("create schema: %v", err)
	}
	u := WithSchema(t, base, schema)
	db := open(t, u)
	d := &DB{DB: db, URL: u, Schema: schema}
	t.Cleanup(func() {
		if sqlDB, err := db.DB(); err == nil {
			_ = sqlDB.Close()
		}
		if os.Getenv("PGTEST_KEEP") == "" {
			_ = admin.Exec(`DROP SCHEMA ` + schema + ` CASCADE`).Error
			_ = admin.Exec(`DROP SCHEMA IF EXISTS ` + schema + `_app CASCADE`).Error
		}
		if sqlDB, err := admin.DB(); err == nil {
			_ = sqlDB.Close()
		}
	})
	if mapped {
		mapTables(t, d, MappedSchema(schema+"_app"), false)
		return d
	}
	if _, err := models.Migrate(context.Background(), db); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	return d
}

// NewSQLite returns a migrated embedded store in a temporary file, for the
// scenario tests that run on both stores.
func NewSQLite(t testing.TB) *DB {
	t.Helper()
	return newSQLite(t, Mapped())
}

func newSQLite(t testing.TB, mapped bool) *DB {
	t.Helper()
	path := filepath.Join(t.TempDir(), "reconciler.db")
	db, err := dbopen.SQLite(path)
	if err != nil {
		t.Fatalf("open sqlite: %v", err)
	}
	t.Cleanup(func() {
		if sqlDB, err := db.DB(); err == nil {
			_ = sqlDB.Close()
		}
	})
	d := &DB{DB: db, URL: path}
	if mapped {
		mapTables(t, d, MappedSchema(""), true)
		return d
	}
	if _, err := models.Migrate(context.Background(), db); err != nil {
		t.Fatalf("migrate sqlite: %v", err)
	}
	return d
}

// WithSchema returns base with search_path set to schema.
func WithSchema(t testing.TB, base, schema string) string {
	u, err := url.Parse(base)
	if err != nil || u.Scheme == "" {
		t.Fatalf("DATABASE_URL must be a postgres:// URL for tests: %v", err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

func open(t testing.TB, dsn string) *gorm.DB {
	t.Helper()
	db, err := gorm.Open(postgres.Open(dsn), &gorm.Config{Logger: logger.Discard, NowFunc: func() time.Time { return time.Now().UTC() }})
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	return db
}

func sanitize(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()
}

// ForbidBackwards installs a trigger that fails any update of payments that
// moves a row off an allowed edge, back in provider time, or lowers
// amount_refunded: the tests' witness that "never" holds. PostgreSQL only.
// On the mapped layout it watches the application's table, in its names.
func ForbidBackwards(t testing.TB, db *gorm.DB) {
	t.Helper()
	m := models.AppSchemaOf(db)
	var pairs []string
	for _, from := range models.States {
		for _, to := range models.States {
			if models.CanMove(from, to) {
				pairs = append(pairs, models.QuoteLiteral(m.AppState(from)+">"+m.AppState(to)))
			}
		}
	}
	err := db.Exec(fmt.Sprintf(m.SQL(`
CREATE FUNCTION forbid_backwards() RETURNS trigger AS $$
BEGIN
  IF NEW.{state} <> OLD.{state} AND NOT (OLD.{state} || '>' || NEW.{state}) = ANY (ARRAY[%s]) THEN
    RAISE EXCEPTION 'backward move %% -> %%', OLD.{state}, NEW.{state};
  END IF;
  IF OLD.{source_updated_at} IS NOT NULL AND NEW.{source_updated_at} < OLD.{source_updated_at} THEN
    RAISE EXCEPTION 'moved back in provider time';
  END IF;
  IF NEW.{amount_refunded} < OLD.{amount_refunded} THEN
    RAISE EXCEPTION 'amount_refunded lowered';
  END IF;
  RETURN NEW;
END $$ LANGUAGE plpgsql;
CREATE TRIGGER forbid_backwards BEFORE UPDATE ON {payments} FOR EACH ROW EXECUTE FUNCTION forbid_backwards();`),
		strings.Join(pairs, ","))).Error
	if err != nil {
		t.Fatalf("install forbid_backwards: %v", err)
	}
}
