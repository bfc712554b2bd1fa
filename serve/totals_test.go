package serve

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/reconciler/reconciler/config"
	"github.com/reconciler/reconciler/internal/dbopen"
	"github.com/reconciler/reconciler/internal/pgtest"
	"github.com/reconciler/reconciler/metrics"
	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/report"
	"github.com/reconciler/reconciler/runner"
)

// GET /runs/{id} on PostgreSQL carries the window's money totals per
// currency (minor units) and says of a dry run's items that they are one;
// GET /runs lists runs without totals.
func TestRunsAPIGetRunHasTotalsAndDryRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t).DB
	st := dbopen.Store(db, nil)
	getenv := func(k string) string {
		return map[string]string{"STRIPE_API_KEY": "sk_test_serve", "STRIPE_API_BASE": "http://127.0.0.1:1"}[k]
	}
	cfg, err := config.Load(filepath.Join(t.TempDir(), "none.yaml"), false, getenv, os.ReadFile)
	require.NoError(t, err)
	start := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	in, out := start.Add(time.Hour), start.Add(-time.Hour)
	for i, p := range []models.Payment{
		{State: models.StateSettled, Amount: 1200, Currency: "eur", SourceUpdatedAt: &in, SettledAt: &in},
		{State: models.StateRefunded, Amount: 800, Currency: "eur", AmountRefunded: 800, SourceUpdatedAt: &in},
		{State: models.StateChargeback, Amount: 300, Currency: "usd", SourceUpdatedAt: &in},
		{State: models.StateCaptured, Amount: 99999, Currency: "eur", SourceUpdatedAt: &out}, // outside the window
	} {
		p.Provider, p.ProviderID = "stripe", "pi_s"+itoa(int64(i))
		require.NoError(t, db.Create(&p).Error)
	}
	f := start.Add(25 * time.Hour)
	run := models.Run{Provider: "stripe", Status: models.RunSucceeded, Trigger: models.TriggerAPI, DryRun: true,
		WindowStart: start, WindowEnd: start.Add(24 * time.Hour), StartedAt: f, FinishedAt: &f, Notes: models.JSON("{}")}
	require.NoError(t, st.CreateRun(ctx, &run))
	require.NoError(t, db.Create(&models.DriftItem{RunID: run.ID, Provider: "stripe", ProviderID: "pi_new", Kind: models.KindBehind,
		Action: models.ActionRepaired, Detail: models.JSON(`{"explanation":"The captured webhook was never received; the payment was marked captured from the provider's record."}`)}).Error)

	s := &Server{Runner: &runner.Service{Config: cfg, DB: db, Store: st}, Log: slog.New(slog.DiscardHandler), Metrics: metrics.New(),
		Tokens: map[string]string{"finance": token}, Providers: []string{"stripe", "gocardless"}}
	srv := httptest.NewServer(s.Handler(ctx))
	t.Cleanup(srv.Close)
	get := func(path string, v any) {
		t.Helper()
		req, err := http.NewRequest("GET", srv.URL+path, nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Equal(t, 200, resp.StatusCode)
		require.NoError(t, json.NewDecoder(resp.Body).Decode(v))
	}
	var got report.RunReport
	get("/runs/"+itoa(run.ID), &got)
	require.NotNil(t, got.Totals)
	require.Equal(t, []report.CurrencyTotals{
		{Currency: "eur", Payments: 2, Captured: 2000, Refunded: 800, Settled: 1200},
		{Currency: "usd", Payments: 1, Captured: 300, Disputed: 300},
	}, got.Totals.Rows)
	require.Nil(t, got.Totals.Provider)
	require.Equal(t, report.ProviderNotMeasured, got.Totals.ProviderNote)
	require.True(t, got.Totals.Flagged, "a dry run's repairs were not applied: the rows differ")
	require.Equal(t, int64(1), got.Totals.DifferingItems)
	require.Len(t, got.Items, 1)
	require.True(t, got.Items[0].DryRun)
	require.Contains(t, got.Items[0].Explanation, "would be marked captured")
	require.NotContains(t, got.Items[0].Explanation, "was marked")

	var raw map[string][]map[string]any
	get("/runs", &raw)
	require.Len(t, raw["runs"], 1)
	require.NotContains(t, raw["runs"][0], "totals", "a list of runs carries no totals")
}
