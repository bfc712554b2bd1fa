package scenario_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/reconciler/reconciler/internal/pgtest"
	"github.com/reconciler/reconciler/internal/scenario"
	"github.com/reconciler/reconciler/providers/stripe"
	"github.com/reconciler/reconciler/providers/stripe/stripefake"
	"github.com/reconciler/reconciler/reconcile"
	"github.com/reconciler/reconciler/report"
)

// TestRunTotals checks a run's money totals against sums the test makes
// itself: the rows side against the rows in the database, the provider
// side against the crafted contradictions the run leaves for a human.
func TestRunTotals(t *testing.T) {
	db := pgtest.New(t)
	now := time.Date(2026, 11, 20, 6, 0, 0, 0, time.UTC)
	fake := stripefake.New(stripefake.Options{Now: func() time.Time { return now }, Seed: 1})
	url := fake.Start()
	t.Cleanup(fake.Close)
	s := scenario.NewStripe(fake.Account(""), now, scenario.Options{Payments: 300, Seed: 5, MissEvery: 4})
	ctx := context.Background()
	require.NoError(t, s.SeedLocal(ctx, db.DB, now))
	run := func(dry bool) reconcile.Result {
		p, err := stripe.New(stripe.Config{APIKey: "sk_test_totals", BaseURL: url})
		require.NoError(t, err)
		res, err := reconcile.Run(ctx, reconcile.Options{DB: db.DB, Provider: p, Now: func() time.Time { return now },
			Since: now.Add(-72 * time.Hour), Until: now, StuckLimit: -1, DryRun: dry, BatchSize: 37})
		require.NoError(t, err)
		require.Len(t, res.Totals, 1, "one currency")
		return res
	}
	dry := run(true)
	real := run(false)
	require.Equal(t, dry.Totals[0].Provider, real.Totals[0].Provider, "a dry run measures the provider's side as the real run does")
	require.Equal(t, dry.Totals[0].Payments, real.Totals[0].Payments)
	require.NotEqual(t, dry.Totals[0].Provider, dry.Totals[0].Rows, "before the repair the rows' money differs")

	// Every payment of the account had a fact in the 72 hours: the rows
	// side is the sum over every row, as SQL sums it.
	var want struct{ N, Captured, Refunded, Disputed, Settled int64 }
	require.NoError(t, db.Raw(`SELECT count(*) AS n,
		coalesce(sum(CASE WHEN state IN ('captured','settled','refunded','chargeback') THEN coalesce(amount_captured, amount) ELSE 0 END),0) AS captured,
		coalesce(sum(amount_refunded),0) AS refunded,
		coalesce(sum(CASE WHEN state = 'chargeback' THEN amount ELSE 0 END),0) AS disputed,
		coalesce(sum(CASE WHEN settled_at >= ? AND settled_at < ? THEN coalesce(amount_captured, amount) ELSE 0 END),0) AS settled
		FROM payments WHERE provider = 'stripe'`, real.Run.WindowStart, real.Run.WindowEnd).Scan(&want).Error)
	got := real.Totals[0]
	require.Equal(t, want.N, got.Payments)
	require.Equal(t, reconcile.Money{Captured: want.Captured, Refunded: want.Refunded, Disputed: want.Disputed, Settled: want.Settled}, got.Rows)
	require.Positive(t, got.Rows.Refunded)

	// What the run refused is what the totals differ by: the provider
	// captured the conflict (75.00, canceled locally), the stale capture
	// (12.50, authorised locally) and 30.00 of the mismatch's 29.99.
	require.Equal(t, got.Rows.Captured+7500+1250+1, got.Provider.Captured)
	require.Equal(t, got.Rows.Refunded, got.Provider.Refunded)
	require.Equal(t, got.Rows.Settled, got.Provider.Settled)
	var notes map[string]any
	require.NoError(t, json.Unmarshal(real.Run.Notes, &notes))
	require.Contains(t, notes, "totals")

	// Every format states both sides and the difference, and flags the
	// window before any item.
	for _, f := range []string{"md", "html", "csv", "json", "text"} {
		var buf bytes.Buffer
		require.NoError(t, report.Write(ctx, &buf, db.DB, f, real.Run.ID))
		out := buf.String()
		flag := strings.Index(out, "totals differ from the provider")
		require.GreaterOrEqual(t, flag, 0, f)
		require.Less(t, flag, strings.Index(out, s.Conflict), "%s: flagged before any item", f)
		switch f {
		case "json":
			require.Contains(t, out, `"measured":true`)
			require.Contains(t, out, `"side":"difference","payments":`+strconv.FormatInt(got.Payments, 10)+`,"captured":8751`)
		case "csv":
			require.Contains(t, out, ",total_captured,difference,true,,,87.51,GBP,")
		case "html":
			require.Contains(t, out, "&#43;87.51 GBP", f)
		default:
			require.Contains(t, out, "+87.51 GBP", f)
		}
	}
}
