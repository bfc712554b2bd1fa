package models

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"sort"
	"strings"

	"gorm.io/gorm"
)

//go:embed migrations/*.sql migrations_sqlite/*.sql
var migrationFS embed.FS

// SQLite reports whether db is the embedded SQLite store (else PostgreSQL).
func SQLite(db *gorm.DB) bool { return db.Dialector.Name() == "sqlite" }

// Migration is one embedded schema change, applied at most once.
type Migration struct {
	Version string // file name without extension, e.g. "0001_init"
	SQL     string
}

// Migrations returns the embedded PostgreSQL migrations in the order they apply.
func Migrations() []Migration { return migrations("migrations") }

func migrationsFor(db *gorm.DB) []Migration {
	if SQLite(db) {
		return migrations("migrations_sqlite")
	}
	return migrations("migrations")
}

func migrations(dir string) []Migration {
	names, err := fs.Glob(migrationFS, dir+"/*.sql")
	if err != nil {
		panic(err) // the pattern is constant
	}
	sort.Strings(names)
	out := make([]Migration, 0, len(names))
	for _, n := range names {
		b, err := migrationFS.ReadFile(n)
		if err != nil {
			panic(err)
		}
		v := strings.TrimSuffix(strings.TrimPrefix(n, dir+"/"), ".sql")
		out = append(out, Migration{Version: v, SQL: string(b)})
	}
	return out
}

// migrationLockKey serialises concurrent migrators (two pods starting at once).
const migrationLockKey = 0x7265636f6e63 // "reconc"

// Migrate applies every embedded migration not yet recorded in
// schema_migrations, each in its own transaction, and returns the versions
// it applied. Concurrent callers are serialised by an advisory lock taken
// inside each transaction, so running it twice at once is harmless.
func Migrate(ctx context.Context, db *gorm.DB) ([]string, error) {
	if err := db.WithContext(ctx).Exec(`CREATE TABLE IF NOT EXISTS schema_migrations (
		version text PRIMARY KEY,
		applied_at timestamptz NOT NULL DEFAULT CURRENT_TIMESTAMP)`).Error; err != nil {
		return nil, fmt.Errorf("create schema_migrations: %w", err)
	}
	var applied []string
	for _, m := range migrationsFor(db) {
		done := false
		err := db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
			if !SQLite(db) { // SQLite serialises writers itself
				if err := tx.Exec(`SELECT pg_advisory_xact_lock(?)`, migrationLockKey).Error; err != nil {
					return err
				}
			}
			var n int64
			if err := tx.Raw(`SELECT count(*) FROM schema_migrations WHERE version = ?`, m.Version).Scan(&n).Error; err != nil {
				return err
			}
			if n > 0 {
				return nil
			}
			if err := tx.Exec(m.SQL).Error; err != nil {
				return err
			}
			done = true
			return tx.Exec(`INSERT INTO schema_migrations (version) VALUES (?)`, m.Version).Error
		})
		if err != nil {
			return applied, fmt.Errorf("migration %s: %w", m.Version, err)
		}
		if done {
			applied = append(applied, m.Version)
		}
	}
	return applied, nil
}

// Pending returns the versions not yet applied; readiness checks use it.
func Pending(ctx context.Context, db *gorm.DB) ([]string, error) {
	var have []string
	if err := db.WithContext(ctx).Raw(`SELECT version FROM schema_migrations`).Scan(&have).Error; err != nil {
		return nil, fmt.Errorf("read schema_migrations: %w", err)
	}
	seen := map[string]bool{}
	for _, v := range have {
		seen[v] = true
	}
	var pending []string
	for _, m := range migrationsFor(db) {
		if !seen[m.Version] {
			pending = append(pending, m.Version)
		}
	}
	return pending, nil
}
