package pgstore

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5/stdlib"
	"gorm.io/gorm"

	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/store"
	"github.com/reconciler/reconciler/store/internal/sqlbase"
)

// FewRowsStatement is a statement that finds a batch's few rows among a
// run's many, with arguments of the right kinds in the order it takes them.
type FewRowsStatement struct {
	Name  string
	Table string
	SQL   string
	Args  []any
	Probe string // what its plan shows when it probes the index for each id
}

// FewRowsStatements are LoadCarry's, SaveCarry's DELETE, DeleteItems' and
// the question of which events are recorded (InsertEvents, MissingEvents).
var FewRowsStatements = []FewRowsStatement{
	{"LoadCarry", "reconciler_carry", loadCarrySQL, []any{1, `["pi_1","pi_2"]`}, "= ANY"},
	{"DropCarry", "reconciler_carry", dropCarrySQL, []any{1, `["pi_1","pi_2"]`}, "= ANY"},
	{"DeleteItems", "drift_items", deleteItemsSQL, []any{1, "stripe", `["pi_1","pi_2"]`}, "= ANY"},
	{"MissingEvents", "webhook_events", models.DefaultAppSchema().SQL(`SELECT v.id ` + missingEventsSQL), []any{`["evt_1","evt_2"]`, "stripe"},
		"Index Only Scan using"},
}

// BatchStatements are the statements that find a batch's payments among
// the whole table's (LoadPayments and the guarded UPDATEs), and its items
// among the run's (ReplaceItems), templated with m.
func BatchStatements(m models.AppSchema) []FewRowsStatement {
	const at = "2026-01-01T00:00:00Z"
	update := func(name, q, arg string) FewRowsStatement {
		return FewRowsStatement{name, m.Payments.Name, m.SQL(q), sqlbase.Updated(m, []any{arg}, at, "stripe"), "= ANY"}
	}
	return []FewRowsStatement{
		{"LoadPayments", m.Payments.Name, m.SQL(loadPaymentsSQL), []any{"stripe", `["pi_1","pi_2"]`}, "= ANY"},
		update("ApplySteps", applyStepsSQL(applyStepsSettleSQL),
			`[{"provider_id":"pi_1","to_state":"settled","preds":"captured","at":"`+at+`","refund":0,"settle_at":"`+at+`","payout_id":"po_1"}]`),
		update("RaiseRefunds", raiseRefundsSQL, `[{"provider_id":"pi_1","refund":5}]`),
		update("RecordSettlements", recordSettlementsSQL, `[{"provider_id":"pi_1","at":"`+at+`","payout_id":"po_1"}]`),
		update("RecordCaptured", recordCapturedSQL, `[{"provider_id":"pi_1","amount_captured":5}]`),
		{"ReplaceItems", "drift_items", replaceItemsSQL,
			[]any{`[{"provider_id":"pi_1","kind":"behind","action":"repaired"}]`, at, 1, "stripe"}, "= ANY"},
	}
}

// The store suite's batches are small: every one of them COPYs its events
// (copyEvents), and the suite's recorded events make the COPY fall back.
func init() { copyEventsMin = 1 }

// PaymentsBothWays runs q (a template of the store's names) in one
// transaction on the transaction's pgx connection (tx.payments) and
// through database/sql (sqlbase.Conn.Payments).
func PaymentsBothWays(ctx context.Context, s *Store, q string, args ...any) (native, viaSQL []store.Payment, err error) {
	err = s.InTx(ctx, func(_ context.Context, x store.Tx) error {
		t := x.(tx)
		if err := t.c.Driver(func(dc any) error {
			if _, ok := dc.(*stdlib.Conn); !ok {
				return errors.New("not pgx's connection: the native path would not run")
			}
			return nil
		}); err != nil {
			return err
		}
		var err error
		if native, err = t.payments(0, t.c.SQL(q), args...); err != nil {
			return err
		}
		viaSQL, err = t.c.Payments(0, t.c.SQL(q), args...)
		return err
	})
	return native, viaSQL, err
}

// PaymentsVia runs q in a transaction natively (tx.payments) or through
// database/sql (sqlbase.Conn.Payments).
func PaymentsVia(ctx context.Context, s *Store, native bool, n int, q string, args ...any) (out []store.Payment, err error) {
	err = s.InTx(ctx, func(_ context.Context, x store.Tx) error {
		t := x.(tx)
		var err error
		if native {
			out, err = t.payments(n, t.c.SQL(q), args...)
		} else {
			out, err = t.c.Payments(n, t.c.SQL(q), args...)
		}
		return err
	})
	return out, err
}

// PaymentColumns is sqlbase.PaymentColumns, for the tests' statements.
const PaymentColumns = sqlbase.PaymentColumns

// Dollars is dollars: a statement's ? numbered $1, $2, … as gorm does.
func Dollars(q string, nargs int) string { return dollars(q, nargs) }

// NewInsertOnly is New without a connection of the transaction's own: its
// batches INSERT their events instead of COPYing them.
func NewInsertOnly(db *gorm.DB) *Store {
	s := New(db, nil)
	s.OwnConn = false
	return s
}

// Columns is the catalog's columns of table (CheckSchema's).
func Columns(ctx context.Context, db *gorm.DB, table string) (map[string]string, error) {
	return catalog{}.Columns(ctx, db, models.AppTable{Name: table})
}
