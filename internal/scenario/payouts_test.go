package scenario_test

import (
	"bytes"
	"context"
	"encoding/csv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/reconciler/reconciler/internal/pgtest"
	"github.com/reconciler/reconciler/internal/scenario"
	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/payouts"
	"github.com/reconciler/reconciler/providers/gocardless"
	"github.com/reconciler/reconciler/providers/gocardless/gcfake"
	"github.com/reconciler/reconciler/providers/stripe"
	"github.com/reconciler/reconciler/providers/stripe/stripefake"
	"github.com/reconciler/reconciler/reconcile"
)

// payoutWorld is one provider's payout story over real HTTP, with the rows
// the engine's own run left.
type payoutWorld struct {
	db     *pgtest.DB
	s      *scenario.Payouts
	source payouts.Source
	// unjudged is the outcome of the payout that cannot be checked.
	unjudged payouts.Outcome
}

func stripePayoutWorld(t *testing.T, db *pgtest.DB) payoutWorld {
	now := time.Date(2026, 11, 20, 6, 0, 0, 0, time.UTC)
	fake := stripefake.New(stripefake.Options{Now: func() time.Time { return now }, Seed: 11})
	url := fake.Start()
	t.Cleanup(fake.Close)
	s := scenario.NewStripePayouts(fake.Account(""), now)
	p, err := stripe.New(stripe.Config{APIKey: "sk_test_payouts", BaseURL: url})
	require.NoError(t, err)
	runEngine(t, db, p, s, now)
	return payoutWorld{db: db, s: s, source: p, unjudged: payouts.OutcomeInProgress}
}

func goCardlessPayoutWorld(t *testing.T, db *pgtest.DB) payoutWorld {
	now := time.Date(2026, 11, 30, 6, 0, 0, 0, time.UTC)
	fake := gcfake.New(gcfake.Options{Now: func() time.Time { return now }, Seed: 11})
	url := fake.Start()
	t.Cleanup(fake.Close)
	s := scenario.NewGoCardlessPayouts(fake, now)
	p, err := gocardless.New(gocardless.Config{AccessToken: "sandbox_payouts", BaseURL: url})
	require.NoError(t, err)
	runEngine(t, db, p, s, now)
	return payoutWorld{db: db, s: s, source: p, unjudged: payouts.OutcomeItemsUnavailable}
}

// runEngine lets the real run make the rows (and record each payment's
// payout), from an empty database, over every event of the story.
func runEngine(t *testing.T, db *pgtest.DB, p reconcile.Provider, s *scenario.Payouts, now time.Time) {
	t.Helper()
	res, err := reconcile.Run(context.Background(), reconcile.Options{DB: db.DB, Provider: p, Since: s.Since.Add(-10 * 24 * time.Hour), Until: now,
		Now: func() time.Time { return now }, StuckLimit: -1})
	require.NoError(t, err)
	require.Equal(t, models.RunSucceeded, res.Run.Status, res.Run.Error)
}

// reconcilePayouts runs payout reconciliation and returns the CSV's rows,
// header first.
func (w payoutWorld) reconcilePayouts(t *testing.T) (payouts.Report, [][]string) {
	t.Helper()
	rep, err := payouts.Run(context.Background(), payouts.Options{Source: w.source, Rows: payouts.GormRows{DB: w.db.DB}, Since: w.s.Since, Until: w.s.Until})
	require.NoError(t, err)
	var buf bytes.Buffer
	require.NoError(t, payouts.Write(&buf, "csv", rep))
	recs, err := csv.NewReader(&buf).ReadAll()
	require.NoError(t, err)
	require.Equal(t, payouts.CSVHeader, recs[0])
	return rep, recs
}

// snapshot is every row the tables hold, to prove nothing was written.
func snapshot(t *testing.T, db *pgtest.DB) []any {
	t.Helper()
	var ps []models.Payment
	var evs []models.WebhookEvent
	var runs []models.Run
	var items []models.DriftItem
	require.NoError(t, db.Order("id").Find(&ps).Error)
	require.NoError(t, db.Order("id").Find(&evs).Error)
	require.NoError(t, db.Order("id").Find(&runs).Error)
	require.NoError(t, db.Order("id").Find(&items).Error)
	return []any{ps, evs, runs, items}
}

// The "done when": a payout whose amount is not its transactions
// and one whose rows name the wrong payout each come first in the payout
// CSV, the reconciled ones after, on both stores and both providers.
func TestPayoutsScenario(t *testing.T) {
	for _, c := range []struct {
		name  string
		world func(*testing.T, *pgtest.DB) payoutWorld
		db    func(testing.TB) *pgtest.DB
		// amountSays is how the wrong amount's explanation starts after
		// "does not reconcile: ".
		amountSays string
	}{
		{"stripe/postgres", stripePayoutWorld, pgtest.New, "its amount is 5.00 GBP more than its 1 balance transaction add up to (45.00 GBP)"},
		{"stripe/sqlite", stripePayoutWorld, pgtest.NewSQLite, "its amount is 5.00 GBP more than its 1 balance transaction add up to (45.00 GBP)"},
		{"gocardless/postgres", goCardlessPayoutWorld, pgtest.New, "its amount is 1.00 GBP less than its 1 payout item add up to (8.00 GBP)"},
		{"gocardless/sqlite", goCardlessPayoutWorld, pgtest.NewSQLite, "its amount is 1.00 GBP less than its 1 payout item add up to (8.00 GBP)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			w := c.world(t, c.db(t))
			s := w.s
			ctx := context.Background()

			// As the run left them, every payout but the wrong amount
			// reconciles.
			rep, _ := w.reconcilePayouts(t)
			require.Equal(t, 1, rep.Mismatches, "%+v", rep.Results)
			require.Equal(t, s.WrongAmount, rep.Results[0].PayoutID)

			require.NoError(t, s.MisnameRow(ctx, w.db.DB))
			before := snapshot(t, w.db)
			rep, recs := w.reconcilePayouts(t)
			require.Equal(t, before, snapshot(t, w.db), "payout reconciliation writes nothing")
			col := map[string]int{}
			for i, h := range recs[0] {
				col[h] = i
			}
			rows := recs[1:]
			require.Len(t, rows, 2+len(s.Reconciled)+1, "one row per payout of the window: %v", rows)
			require.Equal(t, 2, rep.Mismatches)
			byID := map[string][]string{}
			for _, r := range rows {
				byID[r[col["payout_id"]]] = r
			}
			require.NotContains(t, byID, s.Outside, "created before the window")

			// The two mismatches first (by arrival date), then the rest.
			require.Equal(t, []string{s.WrongAmount, s.WrongRows}, []string{rows[0][col["payout_id"]], rows[1][col["payout_id"]]})
			for i, r := range rows {
				require.Equal(t, i < 2, r[col["mismatch"]] == "true", "row %d %v", i, r)
			}
			wa := byID[s.WrongAmount]
			require.Equal(t, "mismatch", wa[col["result"]])
			require.Equal(t, "Payout "+s.WrongAmount+" of "+wa[col["amount"]]+" GBP does not reconcile: "+c.amountSays+".",
				wa[col["explanation"]])
			require.NotEqual(t, "0.00", wa[col["difference"]])
			require.Equal(t, "1", wa[col["rows_naming"]], "its row is right: only its amount is wrong")

			wr := byID[s.WrongRows]
			require.Equal(t, "mismatch", wr[col["result"]])
			require.Equal(t, "0.00", wr[col["difference"]], "its amount is right")
			require.Equal(t, "1", wr[col["paid_elsewhere"]])
			require.Equal(t, "2", wr[col["payments"]])
			require.Equal(t, "1", wr[col["rows_naming"]])
			require.Contains(t, wr[col["explanation"]], "1 payment it paid out is recorded against another payout ("+s.Misnamed+" names "+s.Outside+")")

			for _, id := range s.Reconciled {
				r := byID[id]
				require.Equal(t, "reconciled", r[col["result"]], "%s: %s", id, r[col["explanation"]])
				require.Equal(t, "0.00", r[col["difference"]])
				require.Equal(t, r[col["payments"]], r[col["rows_naming"]])
				require.Equal(t, r[col["payments_amount"]], r[col["rows_amount"]])
				for _, p := range payouts.Problems {
					require.Equal(t, "0", r[col[string(p)]], "%s %s", id, p)
				}
			}
			u := byID[s.Unjudged]
			require.Equal(t, string(w.unjudged), u[col["result"]], u[col["explanation"]])
			require.Equal(t, "false", u[col["mismatch"]])

			// The first reconciled payout carries a later payout's refund
			// (and, on Stripe, a dispute withdrawal) of its payments:
			// those lines sit in the later payout, whose rows still name
			// the first, and that is no mismatch.
			second := byID[s.Reconciled[1]]
			require.NotEqual(t, "0.00", second[col["refunds"]])
			if c.name[:6] == "stripe" {
				require.NotEqual(t, "0.00", byID[s.Reconciled[2]][col["disputes"]])
			} else {
				require.Equal(t, "-0.70", byID[s.Reconciled[0]][col["fees"]])
			}

			// A row naming a payout of the window that did not pay it: both
			// payouts say so.
			require.NoError(t, w.db.Model(&models.Payment{}).Where("provider = ? AND provider_id = ?", s.Provider, s.Misnamed).
				Update("payout_id", s.Reconciled[0]).Error)
			rep, _ = w.reconcilePayouts(t)
			require.Equal(t, 3, rep.Mismatches)
			var first payouts.Result
			for _, r := range rep.Results {
				if r.PayoutID == s.Reconciled[0] {
					first = r
				}
			}
			require.True(t, first.Mismatch)
			require.Equal(t, 1, first.Counts[payouts.NotInPayout])
			require.Contains(t, first.Explanation, "1 row names this payout but is not paid out in it ("+s.Misnamed+")")
		})
	}
}
