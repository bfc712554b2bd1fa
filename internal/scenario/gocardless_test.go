package scenario_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/reconciler/reconciler/internal/pgtest"
	"github.com/reconciler/reconciler/internal/scenario"
	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/providers/gocardless"
	"github.com/reconciler/reconciler/providers/gocardless/gcfake"
	"github.com/reconciler/reconciler/reconcile"
	"github.com/reconciler/reconciler/verify"
)

func TestGoCardlessEveryDriftKind(t *testing.T) {
	for name, now := range map[string]time.Time{
		"monday morning":     time.Date(2026, 11, 30, 6, 0, 0, 0, time.UTC),
		"sunday":             time.Date(2026, 11, 29, 18, 0, 0, 0, time.UTC),
		"after christmas":    time.Date(2026, 12, 28, 9, 0, 0, 0, time.UTC), // a bank holiday (Boxing Day substitute)
		"summer time, early": time.Date(2026, 7, 14, 0, 30, 0, 0, time.UTC),
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			db := pgtest.New(t)
			ctx := context.Background()
			fake := gcfake.New(gcfake.Options{Now: func() time.Time { return now }, Seed: 1})
			url := fake.Start()
			t.Cleanup(fake.Close)
			s := scenario.NewGoCardless(fake, now, scenario.Options{Payments: 200, Seed: 3, MissEvery: 10})
			require.Positive(t, s.Missed)
			for _, d := range eventTimes(fake) {
				require.False(t, d.After(now), "every event is in the past")
				require.False(t, d.Before(s.Start), "Start is the oldest event")
			}
			require.NoError(t, s.SeedLocal(ctx, db.DB, now))

			run := func() reconcile.Result {
				p, err := gocardless.New(gocardless.Config{AccessToken: "sandbox_scenario", BaseURL: url})
				require.NoError(t, err)
				res, err := reconcile.Run(ctx, reconcile.Options{DB: db.DB, Provider: p, Since: s.Start.Add(-time.Hour), Until: now,
					Now: func() time.Time { return now }, StuckLimit: -1})
				require.NoError(t, err)
				require.Equal(t, models.RunSucceeded, res.Run.Status)
				return res
			}
			res := run()
			var items []models.DriftItem
			require.NoError(t, db.Where("run_id = ?", res.Run.ID).Find(&items).Error)
			got := map[string]string{}
			for _, it := range items {
				got[it.ProviderID] += it.Kind + "/" + it.Action + " "
			}
			for id, want := range map[string]string{
				s.MissingLocal: "missing_local/repaired", s.Submitted: "behind/repaired", s.Confirmed: "behind/repaired",
				s.PaidOut: "behind/repaired", s.LateFailure: "behind/repaired",
				s.ChargedBack: "behind/repaired", s.ChargebackCancelled: "conflict/refused", s.Refunded: "behind/repaired",
				s.Stale: "stale/refused", s.Mismatch: "mismatch/reported", s.UnknownStatus: "unknown_status/reported",
			} {
				require.Contains(t, got[id], want, "%s %v", id, got)
			}
			require.Empty(t, got[s.OutOfOrder], "delivered out of order, but the guard left it right")
			require.Empty(t, got[s.FailedAfterPayout], "a late failure after the payout, already recorded, is in sync")

			var rows []models.Payment
			require.NoError(t, db.Where("provider = 'gocardless'").Find(&rows).Error)
			state := map[string]models.Payment{}
			for _, r := range rows {
				state[r.ProviderID] = r
			}
			for id, want := range map[string]models.State{
				s.MissingLocal: models.StateCaptured, s.Submitted: models.StateAuthorised, s.Confirmed: models.StateCaptured,
				s.PaidOut: models.StateSettled, s.LateFailure: models.StateFailed, s.FailedAfterPayout: models.StateFailed,
				s.ChargedBack: models.StateChargeback, s.ChargebackCancelled: models.StateChargeback, s.Refunded: models.StateRefunded,
				s.Stale: models.StateAuthorised, s.OutOfOrder: models.StateSettled,
			} {
				require.Equal(t, want, state[id].State, id)
			}
			require.Equal(t, int64(s.Missed), res.Run.SyntheticEvents, "every missed event recorded once")
			require.Equal(t, "test", res.Run.Mode)

			again := run()
			require.Zero(t, again.Run.Repaired)
			require.Zero(t, again.Run.SyntheticEvents)
			require.Equal(t, res.Run.Refused, again.Run.Refused, "what a human must decide is still refused")

			// verify --all over the scenario's window: GoCardless's own
			// current objects agree with every row, but for the payments a
			// run left for a human, each explained by its item.
			p, err := gocardless.New(gocardless.Config{AccessToken: "sandbox_scenario", BaseURL: url})
			require.NoError(t, err)
			rep, err := verify.Run(ctx, verify.Options{DB: db.DB, Provider: gocardless.Name, Reader: p.Verifier(),
				Since: s.Start.Add(-time.Hour), Until: now, All: true, Now: func() time.Time { return now }})
			require.NoError(t, err)
			require.Equal(t, len(rows), rep.InWindow, "the window holds every row")
			require.Equal(t, len(rows), rep.Checked)
			require.Empty(t, rep.Unexplained, "verify --all: differences no drift item explains")
			require.Equal(t, 4, rep.Differing, "only the payments left for a human differ: %v", rep.ExplainedDifferences)
			explained := map[string]bool{}
			for _, d := range rep.ExplainedDifferences {
				explained[d.ProviderID] = true
			}
			for _, id := range []string{s.ChargebackCancelled, s.Stale, s.Mismatch, s.UnknownStatus} {
				require.True(t, explained[id], "%s differs from GoCardless, explained by its item: %v", id, rep.ExplainedDifferences)
			}
			t.Logf("verify --all: %d checked, %d differing, all explained: %v", rep.Checked, rep.Differing, rep.ExplainedDifferences)
		})
	}
}

// eventTimes lists the times of every event the fake holds.
func eventTimes(s *gcfake.Server) []time.Time {
	var out []time.Time
	for _, d := range s.Deliveries() {
		out = append(out, d.At)
	}
	return out
}
