package reconcile_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/reconciler/reconciler/internal/pgtest"
	"github.com/reconciler/reconciler/providers/stripe/stripefake"
	"github.com/reconciler/reconciler/reconcile"
)

// TestEmptySchemaAnalyzedMidRun: a run into an empty schema grows the
// tables its batch statements join from nothing, so no statistics exist
// when it starts. The engine analyzes them as its batches grow them (issue
// 16: without it every later statement read the run's whole payments and
// items), and only once: a table analyzed is autovacuum's to keep.
func TestEmptySchemaAnalyzedMidRun(t *testing.T) {
	if pgtest.Mapped() {
		t.Skip("the mapped schema's tables are the application's")
	}
	e := newEnv(t)
	e.acct.CreatePayment(100, "gbp", false, at(-24*8))
	e.acct.Generate(stripefake.GenOptions{Payments: 6000, Start: at(-24 * 6), End: at(-1), Seed: 1616})
	analyzed := func(table string) (n int64) {
		require.NoError(t, e.db.Raw(`SELECT analyze_count + autoanalyze_count FROM pg_stat_all_tables WHERE relid = to_regclass(?)`, table).Scan(&n).Error)
		return n
	}
	for _, table := range []string{"payments", "webhook_events", "drift_items"} {
		require.NoError(t, e.db.Exec(`ALTER TABLE `+table+` SET (autovacuum_enabled = false)`).Error)
		require.Zero(t, analyzed(table), table)
	}
	res := e.run(func(o *reconcile.Options) { o.Since, o.Until, o.BatchSize = at(-24*6-1), now, 500 })
	require.EqualValues(t, 6000, res.Run.Repaired)
	for _, table := range []string{"payments", "webhook_events", "drift_items"} {
		// The statistics counters are sent when a backend's transaction
		// ends; wait for them rather than sleep.
		require.Eventually(t, func() bool { return analyzed(table) > 0 }, 10*time.Second, 100*time.Millisecond, table)
		require.EqualValues(t, 1, analyzed(table), "%s is analyzed once, however many batches follow", table)
	}
}
