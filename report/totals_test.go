package report

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/reconciler/reconciler/internal/dbopen"
	"github.com/reconciler/reconciler/internal/pgtest"
	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/reconcile"
)

// totalsWorld is a PostgreSQL database with one run's window of payments:
// rows of every state in two currencies, rows outside the window, of
// another account and of another provider, which the totals leave out.
type totalsWorld struct {
	db         *pgtest.DB
	real, dry  models.Run
	start, end time.Time
}

func newTotalsWorld(t *testing.T) totalsWorld {
	t.Helper()
	db := pgtest.New(t)
	start := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	end := start.Add(24 * time.Hour)
	in, before, after := start.Add(time.Hour), start.Add(-time.Hour), end.Add(time.Hour)
	w := totalsWorld{db: db, start: start, end: end}
	i := 0
	pay := func(provider, account string, state models.State, amount int64, currency string, refunded int64, updated, settled *time.Time, captured *int64) {
		i++
		p := models.Payment{Provider: provider, Account: account, ProviderID: "pi_t" + string(rune('a'+i)), State: state, Amount: amount,
			Currency: currency, AmountRefunded: refunded, SourceUpdatedAt: updated, SettledAt: settled, AmountCaptured: captured}
		require.NoError(t, db.Create(&p).Error)
	}
	// In the window (source_updated_at in it), gbp.
	pay("stripe", "", models.StateCreated, 100, "gbp", 0, &in, nil, nil)               // not captured
	pay("stripe", "", models.StateAuthorised, 200, "gbp", 0, &in, nil, nil)            // not captured
	pay("stripe", "", models.StateCaptured, 1000, "gbp", 0, &in, nil, ptr[int64](800)) // partial capture: 800
	pay("stripe", "", models.StateSettled, 2000, "gbp", 0, &in, &in, nil)              // settled in the window
	pay("stripe", "", models.StateRefunded, 3000, "gbp", 3000, &in, &before, nil)      // settled before the window
	pay("stripe", "", models.StateCaptured, 500, "gbp", 150, &in, nil, nil)            // partly refunded
	pay("stripe", "", models.StateChargeback, 700, "gbp", 0, &in, nil, nil)            // disputed
	pay("stripe", "", models.StateCanceled, 900, "gbp", 0, &in, nil, nil)              // never captured
	pay("stripe", "", models.StateFailed, 400, "gbp", 0, &in, nil, nil)                // never captured
	// Only settled_at in the window: in the population, settled counts.
	pay("stripe", "", models.StateSettled, 4000, "gbp", 0, &before, &in, nil)
	// jpy, a zero-decimal currency.
	pay("stripe", "", models.StateSettled, 5000, "jpy", 1000, &in, &in, nil)
	// Outside: before and after the window, another account, another provider.
	pay("stripe", "", models.StateCaptured, 99999, "gbp", 0, &before, nil, nil)
	pay("stripe", "", models.StateCaptured, 99999, "gbp", 0, &after, &after, nil)
	pay("stripe", "acct_other", models.StateCaptured, 99999, "gbp", 0, &in, &in, nil)
	pay("gocardless", "", models.StateCaptured, 99999, "gbp", 0, &in, &in, nil)

	mk := func(dry bool) models.Run {
		f := end.Add(time.Minute)
		r := models.Run{Provider: "stripe", WindowStart: start, WindowEnd: end, StartedAt: end, FinishedAt: &f, Status: "succeeded",
			Trigger: "manual", DryRun: dry, Notes: models.JSON(`{}`), Mode: "test"}
		require.NoError(t, db.Create(&r).Error)
		item := func(id, kind, action, detail string) {
			require.NoError(t, db.Create(&models.DriftItem{RunID: r.ID, Provider: "stripe", ProviderID: id, Kind: kind, Action: action,
				LocalState: ptr("authorised"), ProviderState: ptr("captured"), Detail: models.JSON(detail)}).Error)
		}
		item("pi_r1", models.KindBehind, models.ActionRepaired,
			`{"explanation":"The captured webhook was never received; the payment was marked captured from the provider's record.","amount":2500,"currency":"gbp"}`)
		item("pi_r2", models.KindMissingLocal, models.ActionRepaired,
			`{"explanation":"The payment was unknown locally (its webhooks never arrived); it was created as settled from the provider's record.","amount":1000,"currency":"gbp"}`)
		item("pi_r3", models.KindBehind, models.ActionRepaired,
			`{"explanation":"A refund webhook was missed; amount_refunded was raised from the provider's record.","amount":4000,"currency":"gbp"}`)
		// The provider has 12.00 EUR more, and 5 JPY less.
		item("pi_m1", models.KindMismatch, models.ActionReported,
			`{"explanation":"The amount or currency recorded locally differs from the provider's; the amount was not changed.","local_amount":1000,"local_currency":"eur","provider_amount":2200,"provider_currency":"eur"}`)
		item("pi_m2", models.KindMismatch, models.ActionReported,
			`{"explanation":"The amount or currency recorded locally differs from the provider's; the amount was not changed.","local_amount":505,"local_currency":"jpy","provider_amount":500,"provider_currency":"jpy"}`)
		// A partial capture: a real run recorded amount_captured.
		item("pi_m3", models.KindMismatch, models.ActionReported,
			`{"explanation":"The provider captured £8.00 of the £10.00 authorised (a partial capture); the £2.00 released went back to the customer and is not a refund. amount_captured was recorded; amount was not changed.","local_amount":1000,"amount_captured":800,"released":200}`)
		item("pi_c1", models.KindConflict, models.ActionRefused, `{"explanation":"The local state refunded is ahead of the provider: no refund; nothing was changed."}`)
		item("pi_d1", models.KindDispute, models.ActionReported, `{"explanation":"The customer's bank disputes the payment."}`)
		return r
	}
	w.real, w.dry = mk(false), mk(true)
	return w
}

func TestReportTotalsFromRows(t *testing.T) {
	w := newTotalsWorld(t)
	ctx := context.Background()
	for _, r := range []models.Run{w.real, w.dry} {
		tt, err := LoadTotals(ctx, w.db.DB, r)
		require.NoError(t, err)
		require.NotNil(t, tt.RowsReadAt)
		assert.Equal(t, []CurrencyTotals{
			// captured: 800 + 2000 + 3000 + 500 + 700 + 4000; refunded 3000 + 150;
			// disputed 700; settled 2000 + 4000 (the refunded row settled before).
			{Currency: "gbp", Payments: 10, Captured: 11000, Refunded: 3150, Disputed: 700, Settled: 6000},
			{Currency: "jpy", Payments: 1, Captured: 5000, Refunded: 1000, Settled: 5000},
		}, tt.Rows, "dry run %v", r.DryRun)
		assert.Nil(t, tt.Provider, "the provider's totals are never made up")
		assert.Equal(t, ProviderNotMeasured, tt.ProviderNote)
		assert.Equal(t, []CurrencyAmount{{Currency: "eur", Amount: 1200, Items: 1}, {Currency: "jpy", Amount: -5, Items: 1}}, tt.AmountDifferences)
		assert.True(t, tt.Flagged)
		if r.DryRun {
			// 3 would repair, 3 mismatch (the partial capture was not recorded), 1 conflict; not the dispute.
			assert.Equal(t, int64(7), tt.DifferingItems)
		} else {
			// 2 mismatch (the partial capture was recorded), 1 conflict.
			assert.Equal(t, int64(3), tt.DifferingItems)
		}
		assert.Contains(t, tt.Flag, "+12.00 EUR")
		assert.Contains(t, tt.Flag, "-5 JPY")
	}

	// A run with no item saying the rows differ is not flagged.
	f := w.end.Add(time.Minute)
	clean := models.Run{Provider: "stripe", WindowStart: w.start, WindowEnd: w.end, StartedAt: w.end, FinishedAt: &f, Status: "succeeded",
		Trigger: "manual", Notes: models.JSON(`{}`)}
	require.NoError(t, w.db.Create(&clean).Error)
	require.NoError(t, w.db.Create(&models.DriftItem{RunID: clean.ID, Provider: "stripe", ProviderID: "pi_x", Kind: models.KindBehind,
		Action: models.ActionRepaired, Detail: models.JSON(`{}`)}).Error)
	tt, err := LoadTotals(ctx, w.db.DB, clean)
	require.NoError(t, err)
	assert.False(t, tt.Flagged)
	assert.Empty(t, tt.Flag)
	assert.Len(t, tt.Rows, 2)
}

// TestReportTotalsFromTheRunsOwnCounts: a finished run records its items'
// counts by kind and action in its notes (reconcile.DriftCountsNote), and
// the totals read them instead of counting the items again; the totals are
// the same. A run still running, or one without the note, is counted from
// its items. A run whose counts show no mismatch item reads none.
func TestReportTotalsFromTheRunsOwnCounts(t *testing.T) {
	w := newTotalsWorld(t)
	ctx := context.Background()
	counted, err := LoadTotals(ctx, w.db.DB, w.real)
	require.NoError(t, err)
	counts, err := dbopen.Store(w.db.DB, nil).DriftCounts(ctx, w.real.ID)
	require.NoError(t, err)
	noted := w.real
	var cs []map[string]any
	for _, c := range counts {
		cs = append(cs, map[string]any{"kind": c.Kind, "action": c.Action, "n": c.N})
	}
	b, err := json.Marshal(map[string]any{reconcile.DriftCountsNote: cs})
	require.NoError(t, err)
	noted.Notes = models.JSON(b)
	fromNotes, err := LoadTotals(ctx, w.db.DB, noted)
	require.NoError(t, err)
	assert.Equal(t, counted.DifferingItems, fromNotes.DifferingItems)
	assert.Equal(t, counted.AmountDifferences, fromNotes.AmountDifferences)
	assert.Equal(t, counted.Flag, fromNotes.Flag)

	// Counts that are not the items' show which were read: a run still
	// running is counted from its items whatever its notes say.
	b, err = json.Marshal(map[string]any{reconcile.DriftCountsNote: []map[string]any{{"kind": models.KindConflict, "action": models.ActionRefused, "n": 40}}})
	require.NoError(t, err)
	bogus := w.real
	bogus.Notes = models.JSON(b)
	fromBogus, err := LoadTotals(ctx, w.db.DB, bogus)
	require.NoError(t, err)
	assert.Equal(t, int64(40), fromBogus.DifferingItems, "a finished run's own counts are read")
	assert.Empty(t, fromBogus.AmountDifferences, "no mismatch item counted: none read")
	js, err := json.Marshal(fromBogus)
	require.NoError(t, err)
	assert.Contains(t, string(js), `"amount_differences":[]`, "no difference is an empty list, as before, not null")
	bogus.Status = models.RunRunning
	running, err := LoadTotals(ctx, w.db.DB, bogus)
	require.NoError(t, err)
	assert.Equal(t, counted.DifferingItems, running.DifferingItems, "a running run's items are counted")
	assert.Equal(t, counted.AmountDifferences, running.AmountDifferences)
}

// Every format carries the totals, flagged before the first item, and a
// dry run's repaired items say "would repair" where a real run's say
// "repaired", read from the database as `reconciler report` reads them.
func TestReportTotalsAndDryRunEveryFormat(t *testing.T) {
	w := newTotalsWorld(t)
	ctx := context.Background()
	pastTense := []string{"the payment was marked", "it was created as", "amount_refunded was raised", "amount_captured was recorded"}
	for _, r := range []models.Run{w.real, w.dry} {
		for _, f := range Formats {
			var buf bytes.Buffer
			require.NoError(t, Write(ctx, &buf, w.db.DB, f, r.ID), f)
			out := buf.String()
			name := f + map[bool]string{true: " dry run", false: " real run"}[r.DryRun]

			// Totals, before any item.
			flag := strings.Index(out, "totals differ from the provider")
			first := strings.Index(out, "pi_c1") // a refused item: listed first
			require.GreaterOrEqual(t, flag, 0, "%s: the totals are flagged", name)
			require.Greater(t, first, flag, "%s: the flag comes before any item", name)
			switch f {
			case "json":
				assert.Contains(t, out, `"captured":11000`, name)
				assert.Contains(t, out, `"currency":"jpy","payments":1,"captured":5000`, name)
			case "csv":
				assert.Contains(t, out, ",total_captured,rows,true,,,110.00,GBP,", name)
				assert.Contains(t, out, ",total_settled,rows,true,,,5000,JPY,", name)
			default:
				for _, s := range []string{"110.00 GBP", "31.50 GBP", "7.00 GBP", "60.00 GBP", "5000 JPY", "1000 JPY"} {
					assert.Contains(t, out, s, name)
				}
			}
			assert.Contains(t, out, "not measured by a run", name)

			// Dry run or not, unambiguous in every format.
			// The text format lists explanations of the items needing a
			// human only; the repaired ones are examples, by action.
			explained := f != "text"
			if r.DryRun {
				if explained {
					assert.Contains(t, out, "would be marked captured", name)
					assert.Contains(t, out, WouldRepairPrefix, name)
				}
				for _, p := range pastTense {
					assert.NotContains(t, out, p, "%s: a dry run did nothing", name)
				}
				switch f {
				case "html":
					assert.Contains(t, out, `<span class="badge a-repaired">would repair</span>`, name)
				case "md":
					assert.Contains(t, out, "· `behind` · would repair ·", name)
				case "text":
					assert.Regexp(t, `pi_r1 +behind +would repair `, out, name)
					assert.Contains(t, out, "Would repair (3; dry run, nothing was changed):", name)
				}
			} else {
				if explained {
					assert.Contains(t, out, "the payment was marked captured", name)
				} else {
					assert.Regexp(t, `pi_r1 +behind +repaired `, out, name)
				}
				assert.NotContains(t, out, "would repair", name)
				assert.NotContains(t, out, "Would repair", name)
				assert.NotContains(t, out, "would be", name)
			}
			switch f {
			case "json":
				var rep Report
				require.NoError(t, json.Unmarshal(buf.Bytes(), &rep))
				require.NotNil(t, rep.Runs[0].Totals)
				assert.Equal(t, r.DryRun, rep.Runs[0].DryRun)
				require.Len(t, rep.Runs[0].Items, 8)
				for _, it := range rep.Runs[0].Items {
					assert.Equal(t, r.DryRun, it.DryRun, "%s: each item says whether it is a dry run's", name)
				}
			case "csv":
				rows, err := csv.NewReader(&buf).ReadAll()
				require.NoError(t, err)
				dry := slices.Index(rows[0], "dry_run")
				require.Equal(t, 17, dry, "dry_run keeps its place; columns after it are added ones")
				require.Equal(t, CSVHeader[:17], []string{"run_id", "provider", "account", "mode", "provider_id", "kind", "action", "needs_human",
					"local_state", "provider_state", "amount", "currency", "amount_refunded", "provider_time", "time_inferred", "explanation", "dashboard_url"},
					"existing columns keep their names and order")
				items := 0
				for _, row := range rows[1:] {
					assert.Equal(t, map[bool]string{true: "true", false: "false"}[r.DryRun], row[dry], name)
					if row[4] != "" {
						items++
					}
				}
				assert.Equal(t, 8, items)
			}
		}
	}
}
