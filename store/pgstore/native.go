package pgstore

import (
	"database/sql"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/reconciler/reconciler/store"
	"github.com/reconciler/reconciler/store/internal/sqlbase"
)

// payments runs a statement returning sqlbase.PaymentColumns (n: how many
// rows it may return) on the transaction's pgx connection directly,
// skipping gorm and database/sql: the batch's reads and guarded writes
// return thousands of rows a run, and each value went through a
// driver.Value (boxed) and database/sql's conversion to its destination,
// with gorm's statement building before: about a fifteenth of a rerun's
// job CPU, a third less this way (62 → 43 ms a month's rerun, CPU
// profiles; issue 16). Without the transaction's own connection (a pool
// of another driver) it is sqlbase.Conn.Payments.
//
// The columns a mapped schema may use (the catalog's Kind: text, varchar,
// char, citext; bigint, integer, smallint; timestamp with or without time
// zone; or NULL for a column it lacks) scan into the same values as
// through database/sql: TestNativePaymentsScanLikeDatabaseSQL.
func (t tx) payments(n int, q string, args ...any) ([]store.Payment, error) {
	if t.c.Raw == nil {
		return t.c.Payments(n, q, args...)
	}
	ctx := t.c.Tx.Statement.Context
	out := make([]store.Payment, 0, n)
	times := sqlbase.Times{N: n}
	err := t.c.Driver(func(dc any) error {
		sc, ok := dc.(*stdlib.Conn)
		if !ok {
			return errNotPgx
		}
		rows, err := sc.Conn().Query(ctx, dollars(q, len(args)), args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		var (
			state            string
			at, settled      nullTime
			payout           pgtype.Text
			captured         pgtype.Int8
			amount, refunded pgtype.Int8
		)
		for rows.Next() {
			var p store.Payment
			if err := rows.Scan(&p.ProviderID, &state, &at, &amount, &p.Currency, &refunded, &settled, &payout, &captured); err != nil {
				return err
			}
			st, err := t.c.Base().Schema.OurState(state)
			if err != nil {
				return err
			}
			p.State, p.Amount, p.AmountRefunded, p.PayoutID, p.AmountCaptured = st, amount.Int64, refunded.Int64, payout.String, captured.Int64
			p.At, p.SettledAt = times.Of(at.t, at.ok), times.Of(settled.t, settled.ok)
			out = append(out, p)
		}
		return rows.Err()
	})
	if err == errNotPgx {
		return t.c.Payments(n, q, args...)
	}
	return out, err
}

// nullTime scans a timestamp with or without time zone, or NULL.
type nullTime struct {
	t  time.Time
	ok bool
}

func (v *nullTime) ScanTimestamptz(s pgtype.Timestamptz) error {
	v.t, v.ok = s.Time, s.Valid
	return nil
}

func (v *nullTime) ScanTimestamp(s pgtype.Timestamp) error {
	v.t, v.ok = s.Time, s.Valid
	return nil
}

// Scan is for a column of no known type: a mapped schema's NULL.
func (v *nullTime) Scan(src any) error {
	switch s := src.(type) {
	case nil:
		*v = nullTime{}
	case time.Time:
		*v = nullTime{t: s, ok: true}
	default:
		return fmt.Errorf("cannot scan %T into a time", src)
	}
	return nil
}

var (
	_ pgtype.TimestamptzScanner = (*nullTime)(nil)
	_ pgtype.TimestampScanner   = (*nullTime)(nil)
	_ sql.Scanner               = (*nullTime)(nil)
)

// dollars numbers a statement's first nargs ? placeholders $1, $2, … as
// gorm's Raw does (which numbers them wherever they are: the statements
// quote no question mark).
func dollars(q string, nargs int) string {
	var b strings.Builder
	b.Grow(len(q) + 8)
	n := 0
	for i := 0; i < len(q); i++ {
		if q[i] == '?' && n < nargs {
			n++
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(n))
			continue
		}
		b.WriteByte(q[i])
	}
	return b.String()
}
