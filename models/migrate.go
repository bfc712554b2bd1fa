package models

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"slices"
	"sort"
	"strings"

	"gorm.io/gorm"
)

//go:embed migrations/*.sql migrations_sqlite/*.sql
var migrationFS embed.FS

// The published guard's functions on a mapped PostgreSQL install, as
// templates in the application's names (AppSchema.SQL).
var (
	//go:embed guard_mapped.sql
	guardMappedSQL string
	//go:embed guard_mapped_settlement.sql
	guardMappedSettlementSQL string
)

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
// it applied. What is recorded is read once and skipped; each of the rest
// is checked again under an advisory lock taken inside its transaction,
// so concurrent callers are serialised and running it twice at once is
// harmless.
//
// A mapped install (AppSchemaOf(db).Mapped(): the application's own tables,
// issue 18) applies the same versions without their app-tables sections:
// the application's tables are never created or altered (CreateAppTables
// does that, for a team starting fresh), and the guard's SQL functions of
// migration 0005, which name the contract's tables, are replaced by the
// same functions in the application's names, installed again by every
// Migrate (installMappedGuard). With
// AppSchema.Own set, that PostgreSQL schema is created first: the
// connection's search_path (internal/dbopen) puts our tables in it.
func Migrate(ctx context.Context, db *gorm.DB) ([]string, error) {
	app := AppSchemaOf(db)
	if app.Own != "" && !SQLite(db) {
		if err := db.WithContext(ctx).Exec(`CREATE SCHEMA IF NOT EXISTS ` + QuoteIdent(app.Own)).Error; err != nil {
			return nil, fmt.Errorf("create schema %s: %w", app.Own, err)
		}
	}
	if err := db.WithContext(ctx).Exec(`CREATE TABLE IF NOT EXISTS schema_migrations (
		version text PRIMARY KEY,
		applied_at timestamptz NOT NULL DEFAULT CURRENT_TIMESTAMP)`).Error; err != nil {
		return nil, fmt.Errorf("create schema_migrations: %w", err)
	}
	// What is recorded stays applied: only the rest go through the lock.
	// A run migrates before it starts, and every migration was applied
	// one transaction each (13 round trips and more on every run).
	var recorded []string
	if err := db.WithContext(ctx).Raw(`SELECT version FROM schema_migrations`).Scan(&recorded).Error; err != nil {
		return nil, fmt.Errorf("read schema_migrations: %w", err)
	}
	var applied []string
	for _, m := range migrationsFor(db) {
		if slices.Contains(recorded, m.Version) {
			continue
		}
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
			q := m.SQL
			if app.Mapped() {
				q = withoutAppTables(q)
			}
			if err := tx.Exec(q).Error; err != nil {
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
	if app.Mapped() && !SQLite(db) {
		if err := installMappedGuard(ctx, db, app); err != nil {
			return applied, err
		}
	}
	return applied, nil
}

// installMappedGuard (re)creates the guard's PostgreSQL functions in the
// application's names and state values, in the current schema (our own
// schema when AppSchema.Own is set). On a mapped install migration 0005's
// functions, which name the contract's tables, are left out; these stand in
// for them, written from the mapping this migrate read. Without settled_at
// and payout_id there is no settlement to record, and
// reconciler_record_settlement is dropped.
func installMappedGuard(ctx context.Context, db *gorm.DB, app AppSchema) error {
	return db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := tx.Exec(`SELECT pg_advisory_xact_lock(?)`, migrationLockKey).Error; err != nil {
			return err
		}
		if err := tx.Exec(app.SQL(guardMappedSQL)).Error; err != nil {
			return fmt.Errorf("install the guard's functions for the mapped tables: %w", err)
		}
		settle := `DROP FUNCTION IF EXISTS reconciler_record_settlement(text, text, text, timestamptz)`
		if app.Has("settled_at") && app.Has("payout_id") {
			settle = app.SQL(guardMappedSettlementSQL)
		}
		if err := tx.Exec(settle).Error; err != nil {
			return fmt.Errorf("install the guard's settlement function for the mapped tables: %w", err)
		}
		return nil
	})
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

// The markers around a migration's statements on the application's tables.
const (
	appTablesBegin = "-- app-tables: begin"
	appTablesEnd   = "-- app-tables: end"
)

// withoutAppTables is q without its app-tables sections.
func withoutAppTables(q string) string {
	var b strings.Builder
	skip := false
	for _, line := range strings.SplitAfter(q, "\n") {
		switch t := strings.TrimSpace(line); {
		case strings.HasPrefix(t, appTablesBegin):
			skip = true
		case strings.HasPrefix(t, appTablesEnd):
			skip = false
		case !skip:
			b.WriteString(line)
		}
	}
	return b.String()
}

// CreateAppTables creates the application's tables as AppSchemaOf(db)
// names them, with the contract's types, defaults and unique keys, when
// they do not exist (reconciler migrate --app-tables, for a team starting
// fresh); optional columns mapped to nothing are left out. An existing table
// is never altered. For the contract's own names the migrations create
// them (Migrate), and so does this. It returns what it created.
func CreateAppTables(ctx context.Context, db *gorm.DB) ([]string, error) {
	s := AppSchemaOf(db)
	if !s.Mapped() {
		if _, err := Migrate(ctx, db); err != nil {
			return nil, err
		}
		return []string{s.Payments.Qualified(), s.Events.Qualified()}, nil
	}
	lite := SQLite(db)
	var created []string
	for _, t := range []struct {
		table   AppTable
		cols    []AppColumn
		unique  [2]string
		indexes [][]string
	}{
		{s.Payments, PaymentColumns, [2]string{"provider", "provider_id"}, [][]string{{"provider", "account", "source_updated_at"}, {"provider", "payout_id"}}},
		{s.Events, EventColumns, [2]string{"source", "event_id"}, nil},
	} {
		if lite && t.table.Schema != "" {
			return created, fmt.Errorf("%s: the embedded store has no schemas: map the table without one", t.table.Qualified())
		}
		var exists int64
		q := `SELECT count(*) FROM information_schema.tables WHERE table_schema = coalesce(NULLIF(?, ''), current_schema()) AND table_name = ?`
		args := []any{t.table.Schema, t.table.Name}
		if lite {
			q, args = `SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?`, []any{t.table.Name}
		}
		if err := db.WithContext(ctx).Raw(q, args...).Scan(&exists).Error; err != nil {
			return created, fmt.Errorf("look for %s: %w", t.table.Qualified(), err)
		}
		if exists > 0 {
			continue
		}
		var stmts []string
		if t.table.Schema != "" {
			stmts = append(stmts, `CREATE SCHEMA IF NOT EXISTS `+QuoteIdent(t.table.Schema))
		}
		var defs []string
		if t.cols[0].Name != "id" { // the events table's own key, which the job never reads
			defs = append(defs, "id "+columnDef(lite, "id", KindInteger, "pk"))
		}
		for _, c := range t.cols {
			name := t.table.Columns[c.Name]
			if name == "" {
				continue
			}
			defs = append(defs, QuoteIdent(name)+" "+columnDef(lite, c.Name, c.Kind, ""))
		}
		defs = append(defs, "UNIQUE ("+QuoteIdent(t.table.Columns[t.unique[0]])+", "+QuoteIdent(t.table.Columns[t.unique[1]])+")")
		stmts = append(stmts, "CREATE TABLE "+t.table.Ident()+" (\n    "+strings.Join(defs, ",\n    ")+"\n)")
		for _, ix := range t.indexes {
			var cols []string
			for _, c := range ix {
				if t.table.Columns[c] != "" {
					cols = append(cols, QuoteIdent(t.table.Columns[c]))
				}
			}
			if len(cols) != len(ix) {
				continue
			}
			name := QuoteIdent(t.table.Name + "_reconciler_" + strings.Join(ix, "_") + "_idx")
			stmts = append(stmts, "CREATE INDEX IF NOT EXISTS "+name+" ON "+t.table.Ident()+" ("+strings.Join(cols, ", ")+")")
		}
		err := db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
			for _, q := range stmts {
				if err := tx.Exec(q).Error; err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return created, fmt.Errorf("create %s: %w", t.table.Qualified(), err)
		}
		created = append(created, t.table.Qualified())
	}
	return created, nil
}

// columnDef is a column's type, nullability and default as the contract's
// migrations write it, in either dialect; kind "pk" with name id is the
// events table's own key.
func columnDef(lite bool, name string, kind ColumnKind, pk string) string {
	if name == "id" || pk != "" {
		if lite {
			return "INTEGER PRIMARY KEY AUTOINCREMENT"
		}
		return "bigserial PRIMARY KEY"
	}
	typ := map[ColumnKind][2]string{
		KindText: {"text", "TEXT"}, KindInteger: {"bigint", "INTEGER"}, KindTime: {"timestamptz", "DATETIME"},
		KindJSON: {"jsonb", "TEXT"}, KindBool: {"boolean", "BOOLEAN"},
	}[kind]
	t := typ[0]
	if lite {
		t = typ[1]
	}
	now := "now()"
	if lite {
		now = "CURRENT_TIMESTAMP"
	}
	switch name {
	case "account":
		return t + " NOT NULL DEFAULT ''"
	case "amount_refunded", "attempts":
		return t + " NOT NULL DEFAULT 0"
	case "created_at", "updated_at", "received_at":
		return t + " NOT NULL DEFAULT " + now
	case "synthetic":
		if lite {
			return t + " NOT NULL DEFAULT 0"
		}
		return t + " NOT NULL DEFAULT false"
	case "provider", "provider_id", "state", "amount", "currency", "source", "event_id", "event_type", "payload":
		return t + " NOT NULL"
	}
	return t
}
