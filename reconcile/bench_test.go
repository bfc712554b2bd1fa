package reconcile_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/reconciler/reconciler/internal/pgtest"
	"github.com/reconciler/reconciler/internal/webhooksim"
	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/providers/stripe"
	"github.com/reconciler/reconciler/providers/stripe/stripefake"
	"github.com/reconciler/reconciler/reconcile"
)

// BenchmarkRun reconciles a generated account of 10,000 payments whose
// webhooks were a tenth missed, end to end: fake Stripe over HTTP through
// stripe-go, decisions, batched writes to PostgreSQL. Each iteration starts
// from the same seeded schema (TRUNCATE … CASCADE: every table that names a
// run, the drift items, the carry, the acknowledgements and the checks
// among them, is emptied with the runs).
func BenchmarkRun(b *testing.B) {
	db := pgtest.New(b)
	fake := stripefake.New(stripefake.Options{Now: func() time.Time { return now }, Seed: 1})
	url := fake.Start()
	b.Cleanup(fake.Close)
	acct := fake.Account("")
	acct.CreatePayment(100, "gbp", false, now.Add(-10*24*time.Hour)) // history before the window
	acct.Generate(stripefake.GenOptions{Payments: 10000, Start: now.Add(-5 * 24 * time.Hour), End: now.Add(-time.Minute), Seed: 99})
	ds := webhooksim.Stripe(acct.Deliveries())
	_, _, err := webhooksim.Seed(context.Background(), db.DB, "stripe", ds, now, func(i int, _ webhooksim.Delivery) bool { return i%10 != 3 })
	require.NoError(b, err)
	require.NoError(b, db.Exec(`CREATE TABLE seed_payments AS SELECT * FROM payments; CREATE TABLE seed_events AS SELECT * FROM webhook_events`).Error)
	b.ResetTimer()
	var events int64
	for range b.N {
		b.StopTimer()
		require.NoError(b, db.Exec(`TRUNCATE payments, webhook_events, reconciliation_runs CASCADE; INSERT INTO payments SELECT * FROM seed_payments; INSERT INTO webhook_events SELECT * FROM seed_events`).Error)
		p, err := stripe.New(stripe.Config{APIKey: "sk_test_bench", BaseURL: url})
		require.NoError(b, err)
		b.StartTimer()
		res, err := reconcile.Run(context.Background(), reconcile.Options{DB: db.DB, Provider: p, Since: now.Add(-6 * 24 * time.Hour), Now: func() time.Time { return now }, StuckLimit: -1})
		require.NoError(b, err)
		require.Equal(b, models.RunSucceeded, res.Run.Status)
		events = res.Run.EventsRead
		b.ReportMetric(float64(res.Run.APIRequests)*100/float64(res.Run.EventsRead), "requests/100events")
		b.ReportMetric(float64(res.DBRoundTrips)/float64(res.Run.Examined), "roundtrips/payment")
	}
	b.ReportMetric(float64(events)*float64(b.N)/b.Elapsed().Seconds(), "events/s")
}
