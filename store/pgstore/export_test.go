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
