package pgstore_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/reconciler/reconciler/internal/dbopen"
	"github.com/reconciler/reconciler/internal/pgtest"
	"github.com/reconciler/reconciler/store"
	"github.com/reconciler/reconciler/store/pgstore"
)

// stripeSized is an event of about 3 kB (a charge's size in stripe-mock's
// fixtures), different for each i, so that pglz finds little to repeat in
// its first kilobyte, as in Stripe's own.
func stripeSized(i int) json.RawMessage {
	var b strings.Builder
	fmt.Fprintf(&b, `{"id":"evt_%d","object":"event","data":{"object":{"id":"ch_%d"`, i, i)
	for k := 0; k < 70; k++ {
		fmt.Fprintf(&b, `,"field_%02d_%d":"value %d of %d, %x"`, k, i, k*7919%1000, i, k*i*2654435761)
	}
	b.WriteString(`}}}`)
	return json.RawMessage(b.String())
}

// lz4DB is a fresh schema with run 7 recorded, on a server that offers
// lz4 (the test is skipped on one that does not).
func lz4DB(t *testing.T) *pgtest.DB {
	db := pgtest.New(t)
	var offered bool
	require.NoError(t, db.Raw(`SELECT coalesce((SELECT 'lz4' = ANY(enumvals) FROM pg_settings
		WHERE name = 'default_toast_compression'), false)`).Row().Scan(&offered))
	if !offered {
		t.Skip("this PostgreSQL was built without lz4")
	}
	require.NoError(t, db.Exec(`INSERT INTO reconciliation_runs (id, provider, account, window_start, window_end, started_at, status, trigger, dry_run)
		VALUES (7, 'stripe', '', now(), now(), now(), 'running', 'manual', false)`).Error)
	return db
}

// recordEvents records a large and a small event for each of ids through
// st, in one batch, and returns each row's compression method ("" for a
// payload stored as it was).
func recordEvents(t *testing.T, st *pgstore.Store, db *pgtest.DB, ids ...int) map[string]string {
	t.Helper()
	ctx := context.Background()
	var rows []store.Event
	for _, i := range ids {
		rows = append(rows,
			store.Event{EventID: fmt.Sprintf("evt_big_%d", i), EventType: "charge.refunded", Payload: stripeSized(i)},
			store.Event{EventID: fmt.Sprintf("evt_small_%d", i), EventType: "charge.refunded", Payload: json.RawMessage(`{"id":"small"}`)})
	}
	require.Greater(t, len(rows[0].Payload), 2500)
	require.NoError(t, st.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
		n, err := tx.InsertEventsDirect(ctx, 7, "stripe", rows)
		require.Equal(t, int64(len(rows)), n)
		return err
	}))
	got := map[string]string{}
	for _, r := range rows {
		var m sql.NullString
		require.NoError(t, db.Raw(`SELECT pg_column_compression(payload) FROM webhook_events WHERE event_id = ?`, r.EventID).Row().Scan(&m))
		got[r.EventID] = m.String
	}
	return got
}

// A batch's large payloads are stored with lz4 when the server offers it
// and nobody chose a method, on both paths (COPY and INSERT); small ones
// are not compressed at all; the setting does not outlive the batch's
// transaction.
func TestEventPayloadsUseLZ4(t *testing.T) {
	t.Parallel()
	db := lz4DB(t)
	for name, st := range map[string]*pgstore.Store{"copy": pgstore.New(db.DB, nil), "insert": pgstore.NewInsertOnly(db.DB)} {
		base := map[string]int{"copy": 0, "insert": 100}[name]
		got := recordEvents(t, st, db, base+1, base+2)
		for _, i := range []int{base + 1, base + 2} {
			require.Equal(t, "lz4", got[fmt.Sprintf("evt_big_%d", i)], "%s: a large payload", name)
			require.Equal(t, "", got[fmt.Sprintf("evt_small_%d", i)], "%s: a small payload is stored as it is", name)
		}
	}
	sqlDB, err := db.DB.DB()
	require.NoError(t, err)
	for range 3 { // the pool's connections, after the batches
		var method string
		require.NoError(t, sqlDB.QueryRow(`SHOW default_toast_compression`).Scan(&method))
		require.Equal(t, "pglz", method, "the batch's setting stays in its transaction")
	}
}

// A method someone chose (here in the connection's options; postgresql.conf,
// ALTER DATABASE and ALTER ROLE alike) is the one used.
func TestEventPayloadsKeepAChosenMethod(t *testing.T) {
	t.Parallel()
	db := lz4DB(t)
	chosen, err := dbopen.Postgres(db.URL + "&default_toast_compression=pglz")
	require.NoError(t, err)
	t.Cleanup(func() {
		if s, err := chosen.DB(); err == nil {
			_ = s.Close()
		}
	})
	got := recordEvents(t, pgstore.New(chosen, nil), db, 1)
	require.NotEqual(t, "lz4", got["evt_big_1"], "the chosen pglz (or none, when pglz gives up)")
}
