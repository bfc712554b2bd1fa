package scenario_test

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/reconciler/reconciler/internal/pgtest"
	"github.com/reconciler/reconciler/internal/webhooksim"
	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/providers/gocardless"
	"github.com/reconciler/reconciler/providers/gocardless/gcfake"
	"github.com/reconciler/reconciler/providers/stripe"
	"github.com/reconciler/reconciler/providers/stripe/stripefake"
	"github.com/reconciler/reconciler/reconcile"
	"github.com/reconciler/reconciler/verify"
)

// lose drops every fifth delivery (and a seeded tenth more) and delivers
// the rest in a seeded random order.
func lose(ds []webhooksim.Delivery, seed uint64) []webhooksim.Delivery {
	r := rand.New(rand.NewPCG(seed, seed))
	var out []webhooksim.Delivery
	for i, d := range ds {
		if i%5 == 2 || r.IntN(10) == 0 {
			continue
		}
		out = append(out, d)
	}
	r.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// listingNotes returns the run's "listing" note.
func listingNotes(t *testing.T, run models.Run) map[string]any {
	t.Helper()
	var notes map[string]any
	require.NoError(t, json.Unmarshal(run.Notes, &notes))
	l, ok := notes["listing"].(map[string]any)
	require.True(t, ok, "the run's notes say which part was read by listing: %s", run.Notes)
	return l
}

// TestNinetyDaysStripe: finance asks about the last 90 days, of which
// Stripe's event log holds 30. The run lists the older 60 days' objects
// and reads the last 30 from the log; verify --all, whose oracle is
// Stripe's own objects (every payment Stripe lists as created in the
// window, rows missing locally included), then finds nothing.
//
// It runs twice, the second time as when Stripe answers late (ReadAhead):
// the older days' intents are then listed in stretches at once and the
// window's payouts read beside them, several at once; the rows must be the
// same.
func TestNinetyDaysStripe(t *testing.T) { bothWays(t, "Stripe", ninetyDaysStripe) }

// bothWays runs a 90-day month one list at a time and as when the provider
// answers late (late), and requires the same payments' rows of both.
func bothWays(t *testing.T, provider string, month func(t *testing.T, late bool) []models.Payment) {
	var rows [2][]models.Payment
	for i, late := range []bool{false, true} {
		t.Run(map[bool]string{false: "one list at a time", true: "lists at once, as when " + provider + " answers late"}[late], func(t *testing.T) {
			rows[i] = month(t, late)
		})
	}
	require.Equal(t, len(rows[0]), len(rows[1]))
	for i := range rows[0] {
		a, b := rows[0][i], rows[1][i]
		a.ID, b.ID, a.CreatedAt, b.CreatedAt, a.UpdatedAt, b.UpdatedAt = 0, 0, time.Time{}, time.Time{}, time.Time{}, time.Time{}
		require.Equal(t, a, b, "payment %s", a.ProviderID)
	}
}

func ninetyDaysStripe(t *testing.T, late bool) []models.Payment {
	db := pgtest.New(t)
	ctx := context.Background()
	now := time.Date(2026, 11, 20, 6, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	fake := stripefake.New(stripefake.Options{Now: clock, Seed: 7})
	url := fake.Start()
	t.Cleanup(fake.Close)
	acct := fake.Account("")
	since := now.Add(-90 * 24 * time.Hour)
	acct.Generate(stripefake.GenOptions{Payments: 1500, Start: since.Add(time.Hour), End: now.Add(-time.Hour), Seed: 11})
	ds := lose(webhooksim.Stripe(acct.Deliveries()), 3)
	_, _, err := webhooksim.Seed(ctx, db.DB, "stripe", ds, now, func(int, webhooksim.Delivery) bool { return true })
	require.NoError(t, err)

	run := func() reconcile.Result {
		p, err := stripe.New(stripe.Config{APIKey: "sk_test_ninety", BaseURL: url, ReadAhead: late})
		require.NoError(t, err)
		res, err := reconcile.Run(ctx, reconcile.Options{DB: db.DB, Provider: p, Since: since, Until: now, Now: clock, StuckLimit: -1, BatchSize: 250})
		require.NoError(t, err)
		require.Equal(t, models.RunSucceeded, res.Run.Status)
		return res
	}
	res := run()
	l := listingNotes(t, res.Run)
	require.Equal(t, since.Format(time.RFC3339), l["since"])
	require.Equal(t, now.Add(-stripe.EventRetention).Format(time.RFC3339), l["until"])
	require.Positive(t, res.Run.Repaired)

	t.Logf("90 days of Stripe: %d payments examined, %d repaired, %d refused, %d reported, %d events read, %d API requests (%v by listing)",
		res.Run.Examined, res.Run.Repaired, res.Run.Refused, res.Run.Reported, res.Run.EventsRead, res.Run.APIRequests, l["api_requests"])
	require.Empty(t, calledAhead(t, db.DB, res.Run.ID), "Stripe's webhooks here only lag: no row is ahead of a log that showed its state")
	// The miss ratio counts the log's missed webhooks, not the listed facts.
	listed := int64(l["synthetic_events"].(float64))
	require.Positive(t, listed)
	require.Less(t, listed, res.Run.SyntheticEvents)
	require.Less(t, reconcile.MissRatio(res.Run), float64(res.Run.SyntheticEvents)/float64(res.Run.EventsRead))
	t.Logf("miss ratio %.3f (synthetic %d, of which %d listed, events read %d)", reconcile.MissRatio(res.Run), res.Run.SyntheticEvents, listed, res.Run.EventsRead)
	rep, err := verify.Run(ctx, verify.Options{DB: db.DB, Provider: stripe.Name, Reader: verifier(t, url), Since: since, Until: now, All: true, Now: clock})
	require.NoError(t, err)
	var rows int64
	require.NoError(t, db.Model(&models.Payment{}).Where("provider = 'stripe'").Count(&rows).Error)
	require.EqualValues(t, 1500, rows, "every payment Stripe holds has a row")
	require.GreaterOrEqual(t, rep.InWindow, 1500)
	require.Empty(t, rep.Unexplained, "verify --all after the 90-day run")
	t.Logf("verify --all: %s", rep.Statement)

	again := run()
	require.Zero(t, again.Run.Repaired, "a second run over the same 90 days repairs nothing")
	require.Zero(t, again.Run.SyntheticEvents)
	var out []models.Payment
	require.NoError(t, db.Where("provider = 'stripe'").Order("provider_id").Find(&out).Error)
	return out
}

// calledAhead lists the payments a run called ahead of a log that never
// showed their state (the local-ahead rule's item).
func calledAhead(t *testing.T, db *gorm.DB, run int64) []string {
	t.Helper()
	var ids []string
	require.NoError(t, db.Model(&models.DriftItem{}).Where("run_id = ? AND CAST(detail AS TEXT) LIKE ?", run, "%never shows%").Pluck("provider_id", &ids).Error)
	return ids
}

func verifier(t *testing.T, url string) reconcile.CurrentReader {
	p, err := stripe.New(stripe.Config{APIKey: "sk_test_ninety", BaseURL: url})
	require.NoError(t, err)
	return p.Verifier()
}

// TestNinetyDaysGoCardless is the same for GoCardless with an event log
// kept 30 days (providers.gocardless.event_retention).
//
// It runs twice, the second time paced at 400 requests/s against a fake
// answering 25 ms late, as when GoCardless answers late: the older days'
// payments are then listed in stretches at once, their own reads and the
// payouts' items several at once; the rows must be the same.
func TestNinetyDaysGoCardless(t *testing.T) { bothWays(t, "GoCardless", ninetyDaysGoCardless) }

func ninetyDaysGoCardless(t *testing.T, late bool) []models.Payment {
	db := pgtest.New(t)
	ctx := context.Background()
	now := time.Date(2026, 11, 30, 6, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	fake := gcfake.New(gcfake.Options{Now: clock, Seed: 7})
	url := fake.Start()
	t.Cleanup(fake.Close)
	since := now.Add(-90 * 24 * time.Hour)
	fake.Generate(gcfake.GenOptions{Payments: 1500, Start: since.Add(time.Hour), End: now.Add(-time.Hour), Seed: 11})
	ds := lose(webhooksim.GoCardless(fake.Deliveries()), 5)
	_, _, err := webhooksim.Seed(ctx, db.DB, "gocardless", ds, now, func(int, webhooksim.Delivery) bool { return true })
	require.NoError(t, err)
	newP := func() *gocardless.Provider {
		cfg := gocardless.Config{AccessToken: "sandbox_ninety", BaseURL: url, Retention: 30 * 24 * time.Hour}
		if late {
			cfg.RequestsPerSecond = 400
		}
		p, err := gocardless.New(cfg)
		require.NoError(t, err)
		return p
	}
	if late {
		fake.SetLatency(25 * time.Millisecond)
	}
	run := func() reconcile.Result {
		res, err := reconcile.Run(ctx, reconcile.Options{DB: db.DB, Provider: newP(), Since: since, Until: now, Now: clock, StuckLimit: -1, BatchSize: 250})
		require.NoError(t, err)
		require.Equal(t, models.RunSucceeded, res.Run.Status)
		return res
	}
	res := run()
	l := listingNotes(t, res.Run)
	require.Equal(t, since.Format(time.RFC3339), l["since"])
	require.Equal(t, now.Add(-30*24*time.Hour).Format(time.RFC3339), l["until"])
	require.Positive(t, res.Run.Repaired)

	t.Logf("90 days of GoCardless: %d payments examined, %d repaired, %d refused, %d reported, %d events read, %d API requests (%v by listing)",
		res.Run.Examined, res.Run.Repaired, res.Run.Refused, res.Run.Reported, res.Run.EventsRead, res.Run.APIRequests, l["api_requests"])
	// A row is ahead of GoCardless only where a chargeback was cancelled
	// and that webhook lost: the row says chargeback, the payment is paid
	// out again, and the state machine cannot move back.
	cancelled := map[string]bool{}
	for _, d := range fake.Deliveries() {
		for _, f := range d.Facts {
			if d.EventType == "payments.chargeback_cancelled" {
				cancelled[f.PaymentID] = true
			}
		}
	}
	for _, id := range calledAhead(t, db.DB, res.Run.ID) {
		require.True(t, cancelled[id], "%s is called ahead of GoCardless, which never cancelled its chargeback", id)
	}
	rep, err := verify.Run(ctx, verify.Options{DB: db.DB, Provider: gocardless.Name, Reader: newP().Verifier(), Since: since, Until: now, All: true, Now: clock})
	require.NoError(t, err)
	var rows int64
	require.NoError(t, db.Model(&models.Payment{}).Where("provider = 'gocardless'").Count(&rows).Error)
	require.EqualValues(t, 1500, rows, "every payment GoCardless holds has a row")
	require.Empty(t, rep.Unexplained, "verify --all after the 90-day run")
	t.Logf("verify --all: %s", rep.Statement)

	again := run()
	require.Zero(t, again.Run.Repaired, "a second run over the same 90 days repairs nothing")
	var out []models.Payment
	require.NoError(t, db.Where("provider = 'gocardless'").Order("provider_id").Find(&out).Error)
	return out
}
