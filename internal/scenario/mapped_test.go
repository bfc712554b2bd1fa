package scenario_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/reconciler/reconciler/internal/pgtest"
	"github.com/reconciler/reconciler/internal/scenario"
	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/providers/stripe"
	"github.com/reconciler/reconciler/providers/stripe/stripefake"
	"github.com/reconciler/reconciler/reconcile"
	"github.com/reconciler/reconciler/verify"
)

// TestEveryDriftKindOnTheTeamsOwnSchema is issue 18's scenario: the job
// on an application schema with other table, column and state names
// (pgtest's mapped layout: orders and inbox, ext_id, status paid,
// paid_out, …), on both stores. Every drift kind comes out as on the
// contract's tables, the rows are written in the team's words, and verify
// --all, reading through the same mapping, finds nothing unexplained. (The
// whole scenario suite runs on this layout too:
// RECONCILER_TEST_SCHEMA=mapped, see scripts/test.sh.)
func TestEveryDriftKindOnTheTeamsOwnSchema(t *testing.T) {
	t.Parallel()
	for _, store := range []struct {
		name string
		open func(testing.TB) *pgtest.DB
	}{{"postgres", pgtest.NewMapped}, {"sqlite", pgtest.NewSQLiteMapped}} {
		t.Run(store.name, func(t *testing.T) {
			t.Parallel()
			db := store.open(t)
			ctx := context.Background()
			m := models.AppSchemaOf(db.DB)
			require.True(t, m.Mapped())
			now := time.Date(2026, 11, 20, 6, 0, 0, 0, time.UTC)
			fake := stripefake.New(stripefake.Options{Now: func() time.Time { return now }, Seed: 1})
			url := fake.Start()
			t.Cleanup(fake.Close)
			s := scenario.NewStripe(fake.Account(""), now, scenario.Options{Payments: 100, Seed: 3, MissEvery: 10})
			require.NoError(t, s.SeedLocal(ctx, db.DB, now))
			p, err := stripe.New(stripe.Config{APIKey: "sk_test_mapped", BaseURL: url})
			require.NoError(t, err)
			res, err := reconcile.Run(ctx, reconcile.Options{DB: db.DB, Provider: p, Now: func() time.Time { return now }, StuckLimit: -1})
			require.NoError(t, err)
			require.Positive(t, res.Run.Repaired)
			require.Positive(t, res.Run.SyntheticEvents)

			var items []models.DriftItem
			require.NoError(t, db.Where("run_id = ?", res.Run.ID).Find(&items).Error)
			got := map[string]string{}
			for _, it := range items {
				got[it.ProviderID] += it.Kind + "/" + it.Action + " "
			}
			for id, want := range map[string]string{
				s.MissingLocal: "missing_local/repaired", s.Behind: "behind/repaired", s.Conflict: "conflict/refused",
				s.Stale: "stale/refused", s.Mismatch: "mismatch/reported", s.UnknownStatus: "unknown_status/reported",
				s.LocalAhead: "conflict/refused",
			} {
				require.Contains(t, got[id], want, id)
			}

			// The team's table holds the team's words only, and the
			// repaired payment in its own columns.
			var states []string
			require.NoError(t, db.Raw(m.SQL(`SELECT DISTINCT {state} FROM {payments} ORDER BY 1`)).Scan(&states).Error)
			require.NotEmpty(t, states)
			for _, st := range states {
				require.NotContains(t, []string{"created", "authorised", "captured", "settled", "refunded", "canceled", "failed", "chargeback"}, st)
			}
			var behind string
			require.NoError(t, db.Raw(`SELECT status FROM `+m.Payments.Ident()+` WHERE ext_id = ?`, s.Behind).Scan(&behind).Error)
			require.Equal(t, "paid", behind, "behind: authorised → captured, written as paid")
			var recovered int64
			require.NoError(t, db.Raw(`SELECT count(*) FROM `+m.Events.Ident()+` WHERE recovered AND recovery_run = ?`, res.Run.ID).Scan(&recovered).Error)
			require.Equal(t, res.Run.SyntheticEvents, recovered, "the missed events are in the team's inbox, marked recovered")

			first := now
			for _, d := range s.Acct.Deliveries() {
				if d.At.Before(first) {
					first = d.At
				}
			}
			rep, err := verify.Run(ctx, verify.Options{DB: db.DB, Provider: stripe.Name, Reader: p.Verifier(),
				Since: first.Add(-time.Hour), Until: now.Add(time.Hour), All: true, Now: func() time.Time { return now }})
			require.NoError(t, err)
			require.Positive(t, rep.Checked)
			require.Empty(t, rep.Unexplained, "verify --all through the mapping")

			// A rerun repairs nothing.
			again, err := reconcile.Run(ctx, reconcile.Options{DB: db.DB, Provider: p, Now: func() time.Time { return now }, StuckLimit: -1})
			require.NoError(t, err)
			require.Zero(t, again.Run.Repaired)
			require.Zero(t, again.Run.SyntheticEvents)
		})
	}
}
