package pgstore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/reconciler/reconciler/internal/pgtest"
	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/store/pgstore"
)

// TestNativePaymentsScanLikeDatabaseSQL: the batch statements' rows, read
// on the transaction's pgx connection, are what database/sql read, for
// every column type a mapped schema may use (pgstore's catalog Kind) and
// for NULL, a NULL literal (a mapped schema's missing column) and
// arguments beside a quoted identifier. The test fails when a type
// scans differently or a placeholder is numbered wrong.
func TestNativePaymentsScanLikeDatabaseSQL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	// citext, when the server has it (contrib), for the state: a type
	// pgx does not know, read as text.
	stateType := "text"
	if db.Exec(`CREATE EXTENSION IF NOT EXISTS citext`).Error == nil {
		stateType = "citext"
	}
	require.NoError(t, db.Exec(`CREATE TABLE kinds (
		provider_id varchar(40) PRIMARY KEY, state `+stateType+` NOT NULL, at timestamp, amount integer NOT NULL,
		currency char(3) NOT NULL, refunded smallint NOT NULL, settled timestamptz, payout varchar, captured bigint)`).Error)
	app := models.AppSchemaOf(db.DB) // the application's state values on the mapped layout
	require.NoError(t, db.Exec(`INSERT INTO kinds VALUES
		('pi_1', ?, '2026-11-20 06:00:00.123456', 2147483647, 'gbp', 32767, '2026-11-21 01:02:03+02', 'po_1', 9223372036854775807),
		('pi_2', ?, NULL, -5, 'EUR', 0, NULL, NULL, NULL),
		('pi_3', ?, '1999-12-31 23:59:59', 0, 'usd', -1, '2038-01-19 03:14:08+00', '', 0)`,
		app.AppState(models.StateCaptured), app.AppState(models.StateSettled), app.AppState(models.StateRefunded)).Error)
	st := pgstore.New(db.DB, nil)
	for _, c := range []struct {
		name string
		q    string
		args []any
		rows int
	}{
		{"every kind", `SELECT provider_id, state, at, amount, currency, refunded, settled, payout, captured FROM kinds
			WHERE state <> 'x' AND "provider_id" <> ? AND amount > ? ORDER BY provider_id`, []any{"pi_9", int64(-10)}, 3},
		{"NULL literals", `SELECT provider_id, state, at, amount, currency, refunded, NULL, NULL, NULL FROM kinds
			WHERE provider_id IN (SELECT jsonb_array_elements_text(CAST(? AS jsonb))) ORDER BY provider_id`, []any{`["pi_1","pi_3"]`}, 2},
		{"a time argument", `SELECT provider_id, state, coalesce(CAST(? AS timestamptz), at), amount, currency, refunded, settled, payout, captured
			FROM kinds WHERE provider_id = ?`, []any{nil, "pi_2"}, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			native, viaSQL, err := pgstore.PaymentsBothWays(ctx, st, c.q, c.args...)
			require.NoError(t, err)
			require.Len(t, native, c.rows)
			require.Equal(t, viaSQL, native)
		})
	}
	native, _, err := pgstore.PaymentsBothWays(ctx, st, `SELECT provider_id, state, at, amount, currency, refunded, settled, payout, captured FROM kinds ORDER BY provider_id`)
	require.NoError(t, err)
	require.Equal(t, models.StateCaptured, native[0].State, "state as %s", stateType)
	require.Equal(t, int64(2147483647), native[0].Amount)
	require.Equal(t, int64(9223372036854775807), native[0].AmountCaptured)
	require.Equal(t, "2026-11-20T06:00:00.123456Z", native[0].At.UTC().Format("2006-01-02T15:04:05.999999Z07:00"))
	require.Equal(t, "2026-11-20T23:02:03Z", native[0].SettledAt.UTC().Format("2006-01-02T15:04:05Z07:00"))
	require.Nil(t, native[1].At)
	require.Nil(t, native[1].SettledAt)
	require.Equal(t, "", native[1].PayoutID)
}

// BenchmarkLoadPaymentsScan reads a batch's 1,000 rows (LoadPayments'
// statement) on the transaction's pgx connection and through database/sql,
// in one transaction each.
func BenchmarkLoadPaymentsScan(b *testing.B) {
	ctx := context.Background()
	db := pgtest.New(b)
	app := models.AppSchemaOf(db.DB)
	require.NoError(b, db.Exec(`INSERT INTO payments (provider, provider_id, state, amount, currency, amount_refunded, source_updated_at, settled_at, payout_id)
		SELECT 'stripe', 'pi_' || i, ?, 1000 + i, 'gbp', 0, now(), CASE WHEN i % 2 = 0 THEN now() END, CASE WHEN i % 2 = 0 THEN 'po_1' END
		FROM generate_series(1, 1000) i`, app.AppState(models.StateCaptured)).Error)
	ids := make([]string, 1000)
	for i := range ids {
		ids[i] = fmt.Sprintf("pi_%d", i+1)
	}
	arg, err := json.Marshal(ids)
	require.NoError(b, err)
	st := pgstore.New(db.DB, nil)
	q := `SELECT ` + pgstore.PaymentColumns + ` FROM {payments} WHERE {provider} = ? AND {provider_id} IN (SELECT jsonb_array_elements_text(CAST(? AS jsonb))) ORDER BY {provider_id}`
	for _, native := range []bool{true, false} {
		name := "database-sql"
		if native {
			name = "pgx"
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				rows, err := pgstore.PaymentsVia(ctx, st, native, len(ids), q, "stripe", string(arg))
				if err != nil || len(rows) != len(ids) {
					b.Fatalf("%d rows, %v", len(rows), err)
				}
			}
		})
	}
}
