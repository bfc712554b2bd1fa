package pgstore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/reconciler/reconciler/internal/pgtest"
	"github.com/reconciler/reconciler/store"
	"github.com/reconciler/reconciler/store/pgstore"
)

// TestFewRowsStatementsUseTheIndex: the statements that find a batch's few
// rows among all of a run's (its drift items, what it carries) probe an
// index for them in PostgreSQL's generic plan, the one a prepared
// statement settles on, however many rows the run has. The join form
// (USING jsonb_array_elements_text(…)) hashed the ids and scanned every
// row of the run, in each batch.
func TestFewRowsStatementsUseTheIndex(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	require.NoError(t, db.Exec(`INSERT INTO reconciliation_runs (id, provider, account, window_start, window_end, started_at, status, trigger, dry_run)
		VALUES (1, 'stripe', '', now(), now(), now(), 'running', 'manual', false)`).Error)
	require.NoError(t, db.Exec(`INSERT INTO drift_items (run_id, provider, provider_id, kind, action)
		SELECT 1, 'stripe', 'pi_' || i, 'missing_local', 'repaired' FROM generate_series(1, 5000) i`).Error)
	require.NoError(t, db.Exec(`INSERT INTO reconciler_carry (run_id, provider_id, state)
		SELECT 1, 'pi_' || i, '{}' FROM generate_series(1, 5000) i`).Error)
	require.NoError(t, db.Exec(`INSERT INTO webhook_events (source, event_id, event_type, payload)
		SELECT 'stripe', 'evt_' || i, 'charge.captured', '{}' FROM generate_series(1, 5000) i`).Error)
	// On the mapped layout webhook_events is the tests' view over the
	// application's table (pgtest.Mapped), which is what is analyzed.
	events := "webhook_events"
	if pgtest.Mapped() {
		events = db.Schema + "_app.inbox"
	}
	m := pgstore.New(db.DB, nil).AppSchema()
	require.NoError(t, db.Exec(m.SQL(`INSERT INTO {payments} ({provider}, {provider_id}, {state}, {amount}, {currency})
		SELECT 'stripe', 'pi_' || i, {'captured'}, 100, 'gbp' FROM generate_series(1, 5000) i`)).Error)
	require.NoError(t, db.Exec(m.SQL(`ANALYZE {payments}`)).Error)
	require.NoError(t, db.Exec(`ANALYZE `+events).Error)
	require.NoError(t, db.Exec(`ANALYZE drift_items`).Error)
	require.NoError(t, db.Exec(`ANALYZE reconciler_carry`).Error)

	plan := func(t *testing.T, sql string, args []any) string {
		t.Helper()
		tx := db.Begin()
		defer tx.Rollback()
		return pgtest.Explain(t, tx, "force_generic_plan", pgstore.Dollars(sql, len(args)), args...)
	}
	for _, st := range append(slices.Clip(pgstore.FewRowsStatements), pgstore.BatchStatements(m)...) {
		t.Run(st.Name, func(t *testing.T) {
			p := plan(t, st.SQL, st.Args)
			t.Logf("%s:\n%s", st.Name, p)
			require.NotContains(t, p, "Seq Scan on "+st.Table, "%s scans the run's rows:\n%s", st.Name, p)
			require.Contains(t, p, st.Probe, "%s probes the index for the ids:\n%s", st.Name, p)
		})
	}
	// The form it replaced scans the run's items at this size (a run of
	// 5,000 items: from about 15,000 the scan costs the planner more than
	// the probes): the rows above are enough to catch it.
	join := plan(t, `DELETE FROM drift_items d USING jsonb_array_elements_text(CAST(? AS jsonb)) AS v(id)
		WHERE d.run_id = ? AND d.provider = ? AND d.provider_id = v.id`, []any{`["pi_1","pi_2"]`, 1, "stripe"})
	require.Contains(t, join, "Seq Scan on drift_items", "the join form no longer scans here: the test's table no longer tells the forms apart:\n%s", join)
	// The batch's UPDATEs joined jsonb_to_recordset and hashed the whole
	// payments table at this size (up to about 25,000 rows).
	upd := plan(t, m.SQL(`UPDATE {payments} p SET {amount_refunded} = v.refund
		FROM jsonb_to_recordset(CAST(? AS jsonb)) AS v(provider_id text, refund bigint)
		WHERE p.{provider} = ? AND p.{provider_id} = v.provider_id`), []any{`[{"provider_id":"pi_1","refund":5}]`, "stripe"})
	require.Contains(t, upd, "Seq Scan on "+m.Payments.Name, "the join form no longer scans the payments here: the test's table no longer tells the forms apart:\n%s", upd)
	// And the anti-join MissingEvents had (NOT EXISTS) hashes the events.
	anti := plan(t, `SELECT count(*) FROM jsonb_array_elements_text(CAST(? AS jsonb)) AS v(id)
		WHERE NOT EXISTS (SELECT 1 FROM webhook_events w WHERE w.source = ? AND w.event_id = v.id)`, []any{`["evt_1","evt_2"]`, "stripe"})
	require.Contains(t, anti, "Hash Anti Join", "the anti-join no longer hashes the events here: the test's table no longer tells the forms apart:\n%s", anti)
}

// TestCopyEventsKeepsPayloads: the events' COPY (every batch in these
// tests: export_test.go) stores each payload as the JSON it was, whatever
// its whitespace (tabs, newlines, carriage returns end COPY's fields and
// rows) and escapes (backslashes are COPY's own escape), and stamps
// processed_at with the server's time when the clock is the wall's.
func TestCopyEventsKeepsPayloads(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	st := pgstore.New(db.DB, nil)
	payloads := []string{
		"{\"a\":\t\"tab\\tin\\\\a string\",\n\"b\": [1,\r\n2.50, null],\r\"c\": \"\\u00e9\\\"\\\\N\"}",
		`{"ends with a backslash pair": "\\"}`,
		`{"é": "日本", "emoji": "\ud83d\ude00"}`,
	}
	var rows []store.Event
	for i, p := range payloads {
		rows = append(rows, store.Event{EventID: fmt.Sprintf("evt_%d", i), EventType: "x", Payload: json.RawMessage(p)})
	}
	require.NoError(t, db.Exec(`INSERT INTO reconciliation_runs (id, provider, account, window_start, window_end, started_at, status, trigger, dry_run)
		VALUES (7, 'stripe', '', now(), now(), now(), 'running', 'manual', false)`).Error)
	var trips atomic.Int64
	require.NoError(t, st.InTx(store.CountTrips(ctx, &trips), func(ctx context.Context, tx store.Tx) error {
		n, err := tx.InsertEventsDirect(ctx, 7, "stripe", rows)
		require.NoError(t, err)
		require.Equal(t, int64(len(rows)), n)
		return nil
	}))
	require.Equal(t, int64(2+4), trips.Load(), "BEGIN, COMMIT, and the COPY's four: it did not fall back")
	for i, p := range payloads {
		var same, stamped, synthetic bool
		var run int64
		require.NoError(t, db.Raw(st.AppSchema().SQL(`SELECT {payload} = CAST(? AS jsonb), {processed_at} BETWEEN now() - interval '1 minute' AND now(), {synthetic}, {run_id}
			FROM {webhook_events} WHERE {source} = 'stripe' AND {event_id} = ?`), p, fmt.Sprintf("evt_%d", i)).Row().Scan(&same, &stamped, &synthetic, &run))
		require.True(t, same, "payload %d came back other than it was sent", i)
		require.True(t, stamped, "processed_at is the server's time")
		require.True(t, synthetic)
		require.Equal(t, int64(7), run)
	}
}
