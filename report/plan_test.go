package report

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/reconciler/reconciler/internal/pgtest"
	"github.com/reconciler/reconciler/models"
)

// TestItemPagesWalkTheIndex: a page of a run's items is read by walking
// drift_items_run_action_idx (migration 0013) in id order, with no sort of
// the run's items and no walk of the nights before it, on the statistics
// a report meets right after a run: drift_items analysed before the run
// filled it. On drift_items_run_idx (run_id), which 0013
// replaced, the same page fetched every item of the run and sorted them
// (40 ms a page on the 20,000-item month of issue 16, growing with the
// square of the run's items): the test checks that its table still tells
// the two apart.
func TestItemPagesWalkTheIndex(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	require.NoError(t, db.Exec(`ALTER TABLE drift_items SET (autovacuum_enabled = false)`).Error)
	now := time.Date(2026, 11, 20, 0, 0, 0, 0, time.UTC)
	newRun := func() int64 {
		run := models.Run{Provider: "stripe", WindowStart: now, WindowEnd: now, StartedAt: now, Status: "succeeded", Trigger: "manual", Notes: models.JSON(`{}`)}
		require.NoError(t, db.Create(&run).Error)
		return run.ID
	}
	fill := func(runID int64, n int) {
		require.NoError(t, db.Exec(`INSERT INTO drift_items (run_id, provider, provider_id, kind, action, detail)
			SELECT ?, 'stripe', 'pi_' || i, CASE WHEN i % 50 = 0 THEN 'stale' ELSE 'missing_local' END,
			       CASE WHEN i % 50 = 0 THEN 'refused' ELSE 'repaired' END, '{"reason":"x"}'
			FROM generate_series(1, CAST(? AS int)) i`, runID, n).Error)
	}
	// The nights before (analysed), then the run being reported, filled
	// after the statistics were taken.
	for range 10 {
		fill(newRun(), 3000)
	}
	require.NoError(t, db.Exec(`ANALYZE drift_items`).Error)
	run := models.Run{ID: newRun()}
	fill(run.ID, 30000)

	explain := func(t *testing.T, tx *gorm.DB, args ...any) string {
		t.Helper()
		sql := itemsPageSQL
		for i := range args {
			sql = strings.Replace(sql, "?", fmt.Sprintf("$%d", i+1), 1)
		}
		return pgtest.Explain(t, tx, "force_custom_plan", sql, args...)
	}
	pages := []struct {
		action string
		last   int64
	}{
		{models.ActionRepaired, 0},    // the first page
		{models.ActionRepaired, 5000}, // a later one
		{models.ActionRefused, 0},     // a rare action
	}
	// Custom plans: a page's generic plan (its parameters unknown) costs
	// PostgreSQL far more than these, so it keeps planning each page with
	// its values.
	for _, p := range pages {
		t.Run(fmt.Sprintf("%s_after_%d", p.action, p.last), func(t *testing.T) {
			tx := db.Begin()
			defer tx.Rollback()
			plan := explain(t, tx, run.ID, p.action, p.last, itemPage)
			t.Logf("%s", plan)
			require.NotContains(t, plan, "Sort", "a page sorts the run's items:\n%s", plan)
			require.Contains(t, plan, "Index Scan using drift_items_run_action_idx", "a page does not walk the run's items in order:\n%s", plan)
		})
	}
	t.Run("the index 0013 replaced sorts", func(t *testing.T) {
		tx := db.Begin()
		defer tx.Rollback()
		require.NoError(t, tx.Exec(`DROP INDEX drift_items_run_action_idx`).Error)
		require.NoError(t, tx.Exec(`CREATE INDEX drift_items_run_idx ON drift_items (run_id)`).Error)
		plan := explain(t, tx, run.ID, models.ActionRepaired, 5000, itemPage)
		require.Contains(t, plan, "Sort", "the old index no longer sorts here: the test's table no longer tells them apart:\n%s", plan)
	})
}
