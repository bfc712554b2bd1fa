package pgtest

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/reconciler/reconciler/internal/dbopen"
	"github.com/reconciler/reconciler/models"
)

// The mapped layout (issue 18): the application's tables under names of
// their own, as a team that already had them would have them, and the job
// mapped onto them (models.AppSchema). New and NewSQLite give it instead of
// the contract's layout when RECONCILER_TEST_SCHEMA is "mapped", so that any
// suite (the scenario suite, the store suite) runs on it unchanged; NewMapped
// and NewSQLiteMapped give it always.
//
// The tests' own seeds and checks keep speaking the contract: the test's
// schema holds views named payments and webhook_events over the mapped
// tables, translating columns and states both ways (INSTEAD OF triggers for
// the tests' direct writes). The job never sees them: every statement it
// sends names the mapped tables, schema-qualified on PostgreSQL, and
// models/appschema_test.go fails any store or guard statement that names the
// contract's tables outside a template.

// Mapped reports whether RECONCILER_TEST_SCHEMA asks for the mapped layout.
func Mapped() bool { return os.Getenv("RECONCILER_TEST_SCHEMA") == "mapped" }

// MappedSchema is the test application's mapping: table orders and inbox
// (in PostgreSQL schema app, "" for SQLite), every column renamed (one that
// needs quoting), and states paid, paid_out, ….
func MappedSchema(app string) models.AppSchema {
	m := models.DefaultAppSchema()
	m.Payments = models.AppTable{Schema: app, Name: "orders", Columns: map[string]string{
		"id": "order_no", "provider": "psp", "account": "psp_account", "provider_id": "ext_id", "state": "status",
		"amount": "Total", "currency": "currency_code", "amount_refunded": "refunded_minor", "source_updated_at": "psp_updated_at",
		"settled_at": "paid_out_at", "payout_id": "payout_ref", "amount_captured": "captured_minor",
		"created_at": "inserted_at", "updated_at": "modified_at",
	}}
	m.Events = models.AppTable{Schema: app, Name: "inbox", Columns: map[string]string{
		"source": "psp", "event_id": "psp_event_id", "event_type": "kind", "payload": "body", "processed_at": "handled_at",
		"synthetic": "recovered", "run_id": "recovery_run", "received_at": "arrived_at", "claimed_at": "locked_at",
		"attempts": "tries", "last_error": "error_text",
	}}
	m.States = map[models.State]string{
		models.StateCreated: "new", models.StateAuthorised: "authorized", models.StateCaptured: "paid",
		models.StateSettled: "paid_out", models.StateRefunded: "returned", models.StateCanceled: "voided",
		models.StateFailed: "declined", models.StateChargeback: "disputed_lost",
	}
	return m
}

// NewMapped is New on the mapped layout: the application's tables in
// schema <test schema>_app, ours in the test's schema, migrated as a mapped
// install (the app tables created by models.CreateAppTables, what migrate
// --app-tables runs).
func NewMapped(t testing.TB) *DB {
	t.Helper()
	return newPG(t, true)
}

// NewSQLiteMapped is NewSQLite on the mapped layout (no schemas there).
func NewSQLiteMapped(t testing.TB) *DB {
	t.Helper()
	return newSQLite(t, true)
}

func mapTables(t testing.TB, d *DB, m models.AppSchema, lite bool) {
	t.Helper()
	ctx := context.Background()
	if err := models.WithAppSchema(d.DB, m); err != nil {
		t.Fatalf("mapped layout: %v", err)
	}
	if _, err := models.CreateAppTables(ctx, d.DB); err != nil {
		t.Fatalf("mapped layout: create the app tables: %v", err)
	}
	if _, err := models.Migrate(ctx, d.DB); err != nil {
		t.Fatalf("mapped layout: migrate: %v", err)
	}
	for _, q := range viewsSQL(m, lite) {
		if err := d.DB.Exec(q).Error; err != nil {
			t.Fatalf("mapped layout: %v\n%s", err, q)
		}
	}
	if err := dbopen.CheckSchema(ctx, d.DB); err != nil {
		t.Fatalf("mapped layout: the check refuses it: %v", err)
	}
}

// viewsSQL are the contract-named views over m's tables, for the tests'
// own seeds and checks.
func viewsSQL(m models.AppSchema, lite bool) []string {
	var out []string
	for _, v := range []struct {
		view  string
		table models.AppTable
		cols  []string
		key   string // the table's own key: what the triggers find a row by
	}{
		{"payments", m.Payments, []string{"id", "provider", "account", "provider_id", "state", "amount", "currency", "amount_refunded",
			"source_updated_at", "settled_at", "payout_id", "amount_captured", "created_at", "updated_at"}, m.Payments.Columns["id"]},
		{"webhook_events", m.Events, []string{"id", "source", "event_id", "event_type", "payload", "received_at", "claimed_at",
			"processed_at", "attempts", "last_error", "synthetic", "run_id"}, "id"},
	} {
		col := func(c string) string {
			if c == "id" && v.view == "webhook_events" {
				return "id"
			}
			return models.QuoteIdent(v.table.Columns[c])
		}
		toOurs, toTheirs := "CASE %s", "CASE %s"
		for _, st := range models.States {
			toOurs += fmt.Sprintf(" WHEN %s THEN %s", models.QuoteLiteral(m.AppState(st)), models.QuoteLiteral(string(st)))
			toTheirs += fmt.Sprintf(" WHEN %s THEN %s", models.QuoteLiteral(string(st)), models.QuoteLiteral(m.AppState(st)))
		}
		toOurs, toTheirs = toOurs+" ELSE %[1]s END", toTheirs+" ELSE %[1]s END"
		var sel, ins, vals, set []string
		for _, c := range v.cols {
			expr := col(c)
			if c == "state" {
				expr = fmt.Sprintf(toOurs, expr)
			}
			sel = append(sel, expr+" AS "+c)
			if c == "id" {
				continue
			}
			val := "NEW." + c
			switch c {
			case "state":
				val = fmt.Sprintf(toTheirs, val)
			case "account", "last_error":
				if c == "account" {
					val = "coalesce(NEW.account, '')"
				}
			case "amount_refunded", "attempts":
				val = "coalesce(NEW." + c + ", 0)"
			case "synthetic":
				val = "coalesce(NEW.synthetic, false)"
			case "created_at", "updated_at", "received_at":
				now := "now()"
				if lite {
					now = "CURRENT_TIMESTAMP"
				}
				val = "coalesce(NEW." + c + ", " + now + ")"
			}
			ins, vals = append(ins, col(c)), append(vals, val)
			if c != "created_at" && c != "received_at" {
				set = append(set, col(c)+" = "+strings.Replace(val, "coalesce(NEW.updated_at, now())", "NEW.updated_at", 1))
			}
		}
		table := v.table.Ident()
		out = append(out, "CREATE VIEW "+v.view+" AS SELECT "+strings.Join(sel, ", ")+" FROM "+table)
		insert := "INSERT INTO " + table + " (" + strings.Join(ins, ", ") + ") VALUES (" + strings.Join(vals, ", ") + ")"
		update := "UPDATE " + table + " SET " + strings.Join(set, ", ") + " WHERE " + models.QuoteIdent(v.key) + " = OLD.id"
		del := "DELETE FROM " + table + " WHERE " + models.QuoteIdent(v.key) + " = OLD.id"
		if lite {
			out = append(out,
				"CREATE TRIGGER "+v.view+"_ins INSTEAD OF INSERT ON "+v.view+" BEGIN "+insert+"; END",
				"CREATE TRIGGER "+v.view+"_upd INSTEAD OF UPDATE ON "+v.view+" BEGIN "+update+"; END",
				"CREATE TRIGGER "+v.view+"_del INSTEAD OF DELETE ON "+v.view+" BEGIN "+del+"; END")
			continue
		}
		out = append(out, fmt.Sprintf(`CREATE FUNCTION %[1]s_view() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'INSERT' THEN
    %[2]s RETURNING %[5]s INTO NEW.id;
    RETURN NEW;
  ELSIF TG_OP = 'UPDATE' THEN
    %[3]s;
    RETURN NEW;
  END IF;
  %[4]s;
  RETURN OLD;
END $$`, v.view, insert, update, del, models.QuoteIdent(v.key)),
			fmt.Sprintf(`CREATE TRIGGER %[1]s_view INSTEAD OF INSERT OR UPDATE OR DELETE ON %[1]s FOR EACH ROW EXECUTE FUNCTION %[1]s_view()`, v.view))
	}
	return out
}
