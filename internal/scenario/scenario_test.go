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

func TestEveryDriftKind(t *testing.T) {
	db := pgtest.New(t)
	now := time.Date(2026, 11, 20, 6, 0, 0, 0, time.UTC)
	fake := stripefake.New(stripefake.Options{Now: func() time.Time { return now }, Seed: 1})
	url := fake.Start()
	t.Cleanup(fake.Close)
	s := scenario.NewStripe(fake.Account(""), now, scenario.Options{Payments: 200, Seed: 3, MissEvery: 10})
	require.NoError(t, s.SeedLocal(context.Background(), db.DB, now))
	p, err := stripe.New(stripe.Config{APIKey: "sk_test_scenario", BaseURL: url})
	require.NoError(t, err)
	res, err := reconcile.Run(context.Background(), reconcile.Options{DB: db.DB, Provider: p, Now: func() time.Time { return now }, StuckLimit: -1})
	require.NoError(t, err)
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
	require.Equal(t, "test", res.Run.Mode)

	// verify --all: every row of the scenario compared with Stripe's own
	// objects (never the fake's truth file). The crafted contradictions a
	// run leaves for a human are explained by their items; nothing else
	// differs.
	first := now
	for _, d := range s.Acct.Deliveries() {
		if d.At.Before(first) {
			first = d.At
		}
	}
	rep, err := verify.Run(context.Background(), verify.Options{DB: db.DB, Provider: stripe.Name, Reader: p.Verifier(),
		Since: first.Add(-time.Hour), Until: now.Add(time.Hour), All: true, Now: func() time.Time { return now }})
	require.NoError(t, err)
	var rows int64
	require.NoError(t, db.Model(&models.Payment{}).Where("provider = 'stripe'").Count(&rows).Error)
	require.Equal(t, int(rows), rep.InWindow, "the window holds every row")
	require.Equal(t, rep.InWindow, rep.Checked)
	require.Empty(t, rep.Unexplained, "verify --all: differences no drift item explains")
	explained := map[string]bool{}
	for _, d := range rep.ExplainedDifferences {
		explained[d.ProviderID] = true
	}
	for _, id := range []string{s.Conflict, s.Stale, s.Mismatch, s.UnknownStatus, s.LocalAhead} {
		require.True(t, explained[id], "%s: the crafted contradiction is an explained difference: %v", id, rep.ExplainedDifferences)
	}
	t.Logf("verify --all: %d checked, %d differing, %d explained", rep.Checked, rep.Differing, rep.Explained)
}
