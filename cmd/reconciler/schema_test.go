package main_test

import (
	"strings"
	"testing"
	"time"

	"github.com/glebarez/sqlite"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/reconciler/reconciler/providers/stripe/stripefake"
)

// Issue 18 from outside: a team's own tables (schema <fresh>_app: orders
// and inbox, columns and states of their own), created by migrate
// --app-tables, reconciled by the built binary; and every bad mapping is
// exit 2 with one line naming it and the fix, before any provider request
// and before anything is written.

// mappedConfig maps the test team's tables; extra lines are appended under
// schema: (yaml, two-space indented).
func mappedConfig(app string, extra ...string) string {
	return `schema:
  app_schema: ` + app + `
  payments:
    table: orders
    columns: {id: order_no, provider: psp, provider_id: ext_id, state: status, amount: total_minor, amount_captured: "-"}
  webhook_events:
    table: inbox
    columns: {source: psp, event_id: psp_event_id, payload: body, processed_at: handled_at, synthetic: recovered}
  states: {created: new, authorised: authorized, captured: paid, settled: paid_out, refunded: returned, canceled: voided}
` + strings.Join(extra, "\n")
}

// appSchema is a fresh schema for our tables and one beside it for the
// team's, created by the binary's migrate --app-tables.
func appSchema(t *testing.T, cfg func(app string) string) (*freshSchema, string, string) {
	t.Helper()
	return appSchemaOwn(t, func(app string) string { return mappedConfig(app) }, cfg)
}

// appSchemaOwn is appSchema migrating with the configuration base writes.
func appSchemaOwn(t *testing.T, base, cfg func(app string) string) (*freshSchema, string, string) {
	t.Helper()
	s := newFreshSchema(t)
	app := s.name + "_app"
	t.Cleanup(func() {
		_ = s.admin.Exec(`DROP SCHEMA IF EXISTS ` + app + ` CASCADE`).Error
		_ = s.admin.Exec(`DROP SCHEMA IF EXISTS ` + s.name + `_own CASCADE`).Error
	})
	path := writeFile(t, base(app))
	r := cli(t, map[string]string{"DATABASE_URL": s.url}, "migrate", "--config", path, "--app-tables")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "app tables: "+app+".orders is there")
	require.Contains(t, r.stdout, "migrations: applied 0001_init")
	return s, app, writeFile(t, cfg(app))
}

func TestMappedSchemaRunThroughTheBinary(t *testing.T) {
	t.Parallel()
	// Our own tables in a schema of their own too (schema.own_schema).
	withOwn := func(app string) string {
		return mappedConfig(app, "  own_schema: "+strings.TrimSuffix(app, "_app")+"_own")
	}
	s, app, cfg := appSchemaOwn(t, withOwn, withOwn)
	own := s.name + "_own"
	var cols []string
	require.NoError(t, s.admin.Raw(`SELECT column_name FROM information_schema.columns WHERE table_schema = ? AND table_name = 'orders' ORDER BY ordinal_position`, app).Scan(&cols).Error)
	require.Contains(t, cols, "ext_id")
	require.NotContains(t, cols, "amount_captured", "an optional column mapped to - is not created")
	require.NotContains(t, cols, "provider_id")

	now := time.Now().UTC()
	fake := stripefake.New(stripefake.Options{Seed: 1})
	fake.Account("").Generate(stripefake.GenOptions{Payments: 40, Start: now.Add(-20 * time.Hour), End: now.Add(-time.Hour), Seed: 2})
	base := fake.Start()
	t.Cleanup(fake.Close)
	env := map[string]string{"DATABASE_URL": s.url, "STRIPE_API_KEY": "sk_test_mapped", "STRIPE_API_BASE": base}

	r := cli(t, env, "run", "--config", cfg, "--provider", "stripe", "--dry-run", "--format", "json")
	require.Equal(t, 0, r.code, r.stderr)
	var n int64
	require.NoError(t, s.admin.Raw(`SELECT count(*) FROM `+app+`.orders`).Scan(&n).Error)
	require.Zero(t, n, "a dry run writes no payment")

	r = cli(t, env, "run", "--config", cfg, "--provider", "stripe")
	require.Equal(t, 0, r.code, r.stderr)
	require.NoError(t, s.admin.Raw(`SELECT count(*) FROM `+app+`.orders`).Scan(&n).Error)
	require.Positive(t, n, "the run created the team's rows")
	var states []string
	require.NoError(t, s.admin.Raw(`SELECT DISTINCT status FROM `+app+`.orders ORDER BY 1`).Scan(&states).Error)
	for _, st := range states {
		require.Contains(t, []string{"new", "authorized", "paid", "paid_out", "returned", "voided", "failed", "chargeback"}, st, "states are written in the team's words")
	}
	require.NoError(t, s.admin.Raw(`SELECT count(*) FROM `+app+`.inbox WHERE recovered AND handled_at IS NOT NULL`).Scan(&n).Error)
	require.Positive(t, n, "missed events recorded in the team's inbox")
	var tables []string
	require.NoError(t, s.admin.Raw(`SELECT table_name FROM information_schema.tables WHERE table_schema = ?`, s.name).Scan(&tables).Error)
	require.Empty(t, tables, "our tables are in the own schema, and a mapped install never creates the contract's tables")
	var notes []string
	require.NoError(t, s.admin.Raw(`SELECT notes::text FROM `+own+`.reconciliation_runs ORDER BY id`).Scan(&notes).Error)
	require.Len(t, notes, 2, "the dry run and the run, recorded in the own schema")
	require.Contains(t, notes[1], `"not_recorded": ["payments.amount_captured"]`, "the run says what the team's table cannot hold")

	// verify reads the same rows through the mapping.
	r = cli(t, env, "verify", "--config", cfg, "--provider", "stripe", "--all", "--since", now.Add(-48*time.Hour).Format(time.RFC3339))
	require.Equal(t, 0, r.code, r.stderr+r.stdout)
}

func TestBadMappingExit2OneLineNothingReadOrWritten(t *testing.T) {
	t.Parallel()
	fake := stripefake.New(stripefake.Options{Seed: 1})
	base := fake.Start()
	t.Cleanup(fake.Close)
	replace := func(old, new string) func(string) string {
		return func(app string) string { return strings.Replace(mappedConfig(app), old, new, 1) }
	}
	for _, c := range []struct {
		name   string
		cfg    func(app string) string
		mangle func(t *testing.T, s *freshSchema, app string) // the live schema, broken after migrate
		want   []string
	}{
		{name: "missing table", cfg: replace("table: orders", "table: order_rows"),
			want: []string{"schema: table ", ".order_rows (payments) not found", "schema.payments.table", "migrate --app-tables"}},
		{name: "missing column", cfg: replace("amount: total_minor", "amount: total_minor, amount_refunded: refunded_cents"),
			want: []string{"schema: column payments.amount_refunded not found in table ", ".orders; map it with schema.payments.columns.amount_refunded or add it"}},
		{name: "wrong type", cfg: replace("amount: total_minor", "amount: currency"),
			want: []string{"schema: column payments.amount (", ".orders.currency) is text, want bigint, integer, smallint", "schema.payments.columns.amount"}},
		{name: "wrong type altered", cfg: func(app string) string { return mappedConfig(app) },
			mangle: func(t *testing.T, s *freshSchema, app string) {
				require.NoError(t, s.admin.Exec(`ALTER TABLE `+app+`.inbox ALTER COLUMN body TYPE text`).Error)
			},
			want: []string{"schema: column webhook_events.payload (", ".inbox.body) is text, want jsonb, json"}},
		{name: "unmapped state", cfg: func(app string) string { return mappedConfig(app) },
			mangle: func(t *testing.T, s *freshSchema, app string) {
				require.NoError(t, s.admin.Exec(`INSERT INTO `+app+`.orders (psp, ext_id, status, total_minor, currency) VALUES ('stripe', 'pi_hold', 'on_hold', 100, 'gbp')`).Error)
			},
			want: []string{`schema: state "on_hold" in `, ".orders.status is not mapped", "schema.states.<state>: on_hold", "never guesses"}},
		{name: "duplicate state value", cfg: replace("settled: paid_out", "settled: paid"),
			want: []string{"schema.states.", `"paid" is also the value of schema.states.`}},
		{name: "no unique key", cfg: func(app string) string { return mappedConfig(app) },
			mangle: func(t *testing.T, s *freshSchema, app string) {
				var name string
				require.NoError(t, s.admin.Raw(`SELECT conname FROM pg_constraint WHERE conrelid = ?::regclass AND contype = 'u'`, app+".orders").Scan(&name).Error)
				require.NoError(t, s.admin.Exec(`ALTER TABLE `+app+`.orders DROP CONSTRAINT `+name).Error)
			},
			want: []string{"schema: table ", ".orders has no unique constraint on (psp, ext_id)", "CREATE UNIQUE INDEX ON"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, app, cfg := appSchema(t, c.cfg)
			if c.mangle != nil {
				c.mangle(t, s, app)
			}
			count := func() (runs, orders, inbox int64) {
				runs = s.runRows(t)
				require.NoError(t, s.admin.Raw(`SELECT count(*) FROM `+app+`.orders`).Scan(&orders).Error)
				require.NoError(t, s.admin.Raw(`SELECT count(*) FROM `+app+`.inbox`).Scan(&inbox).Error)
				return
			}
			r0, o0, i0 := count()
			before := fake.Requests()
			env := map[string]string{"DATABASE_URL": s.url, "STRIPE_API_KEY": "sk_test_mapped", "STRIPE_API_BASE": base}
			for _, args := range [][]string{
				{"run", "--config", cfg, "--provider", "stripe"},
				{"run", "--config", cfg, "--provider", "stripe", "--accounts-from", "stripe"},
				{"verify", "--config", cfg, "--provider", "stripe", "--all"},
			} {
				r := cli(t, env, args...)
				lines := strings.Split(strings.TrimRight(r.stderr, "\n"), "\n")
				require.Equal(t, 2, r.code, "%v: exit %d\n%s", args, r.code, r.stderr)
				require.Len(t, lines, 1, "%v: one stderr line:\n%s", args, r.stderr)
				for _, w := range c.want {
					require.Contains(t, lines[0], w, "%v", args)
				}
			}
			r1, o1, i1 := count()
			require.Equal(t, [3]int64{r0, o0, i0}, [3]int64{r1, o1, i1}, "nothing written: runs, orders, inbox")
			require.Equal(t, before, fake.Requests(), "no provider request")
		})
	}
}

// TestMappedSchemaOnTheEmbeddedStore is the same through the binary on the
// embedded SQLite file (no schemas there): migrate --app-tables, a run in
// the team's words, and an unmapped state refused before any request.
func TestMappedSchemaOnTheEmbeddedStore(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := writeFile(t, "database: {embedded: true, sqlite_path: "+dir+"/team.db}\n"+strings.Replace(mappedConfig(""), "  app_schema: \n", "", 1))
	now := time.Now().UTC()
	fake := stripefake.New(stripefake.Options{Seed: 1})
	fake.Account("").Generate(stripefake.GenOptions{Payments: 30, Start: now.Add(-20 * time.Hour), End: now.Add(-time.Hour), Seed: 5})
	base := fake.Start()
	t.Cleanup(fake.Close)
	env := map[string]string{"STRIPE_API_KEY": "sk_test_mapped", "STRIPE_API_BASE": base}

	// Before the tables exist a run is refused, and leaves nothing behind:
	// not even the empty file opening the store would create.
	r := cli(t, env, "run", "--config", cfg, "--provider", "stripe")
	require.Equal(t, 2, r.code, r.stderr)
	require.Contains(t, r.stderr, "schema: table orders (payments) not found")
	require.NoFileExists(t, dir+"/team.db")
	require.Zero(t, fake.Requests(), "no provider request")

	r = cli(t, env, "migrate", "--config", cfg, "--app-tables")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "app tables: orders is there")
	r = cli(t, env, "run", "--config", cfg, "--provider", "stripe")
	require.Equal(t, 0, r.code, r.stderr)

	db, err := gorm.Open(sqlite.Open(dir+"/team.db"), &gorm.Config{Logger: logger.Discard})
	require.NoError(t, err)
	t.Cleanup(func() {
		if s, err := db.DB(); err == nil {
			_ = s.Close()
		}
	})
	var states []string
	require.NoError(t, db.Raw(`SELECT DISTINCT status FROM orders`).Scan(&states).Error)
	require.NotEmpty(t, states)
	require.NotContains(t, states, "captured", "written in the team's words")
	var n int64
	require.NoError(t, db.Raw(`SELECT count(*) FROM inbox WHERE recovered`).Scan(&n).Error)
	require.Positive(t, n)

	require.NoError(t, db.Exec(`UPDATE orders SET status = 'on_hold' WHERE order_no = (SELECT min(order_no) FROM orders)`).Error)
	var runs int64
	require.NoError(t, db.Raw(`SELECT count(*) FROM reconciliation_runs`).Scan(&runs).Error)
	before := fake.Requests()
	r = cli(t, env, "run", "--config", cfg, "--provider", "stripe")
	require.Equal(t, 2, r.code, r.stderr)
	// The embedded store's own first log line says it is in use (issue 18's
	// configuration that never guesses); the error is the one line after it.
	lines := strings.Split(strings.TrimRight(r.stderr, "\n"), "\n")
	require.Len(t, lines, 2, r.stderr)
	require.Contains(t, lines[0], "using the embedded SQLite store")
	require.True(t, strings.HasPrefix(lines[1], `reconciler: schema: state "on_hold" in orders.status is not mapped`), lines[1])
	require.Equal(t, before, fake.Requests(), "no provider request")
	var after int64
	require.NoError(t, db.Raw(`SELECT count(*) FROM reconciliation_runs`).Scan(&after).Error)
	require.Equal(t, runs, after, "no run recorded")
}
