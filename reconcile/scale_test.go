package reconcile_test

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/reconciler/reconciler/internal/webhooksim"
	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/providers/stripe"
	"github.com/reconciler/reconciler/providers/stripe/stripefake"
	"github.com/reconciler/reconciler/reconcile"
	"github.com/reconciler/reconciler/verify"
)

// TestTwentyThousandPaymentsLostPerEvent is issue 10's acceptance scenario:
// 20,000 payments over six days, each webhook lost on its own at 30 %, the
// rest delivered in random order, and 1 % of the rows that the provider
// shows captured or settled edited to "refunded" (the most dangerous drift).
// The oracle is the provider's own objects (verify --all), not the fake's
// truth file: after one run no payment differs from the provider without an
// item that says why, every contradicted row is a conflict, and no payment
// that was already in sync got an item.
func TestTwentyThousandPaymentsLostPerEvent(t *testing.T) {
	n := 20000
	if testing.Short() {
		n = 2000
	}
	t.Parallel()
	e := newEnvSerial(t, "postgres")
	ctx := context.Background()
	e.acct.CreatePayment(100, "gbp", false, at(-24*8))
	e.acct.Generate(stripefake.GenOptions{Payments: n, Start: at(-24 * 6), End: at(-1), Seed: 2010})
	rng := rand.New(rand.NewPCG(20, 10))
	var kept []webhooksim.Delivery
	for _, d := range webhooksim.Stripe(e.acct.Deliveries()) {
		if rng.IntN(100) >= 30 || d.At.Before(at(-24*6)) {
			kept = append(kept, d)
		}
	}
	rng.Shuffle(len(kept), func(i, j int) { kept[i], kept[j] = kept[j], kept[i] })
	_, _, err := webhooksim.Seed(ctx, e.db.DB, "stripe", kept, now, func(int, webhooksim.Delivery) bool { return true })
	require.NoError(t, err)

	since, until := at(-24*6-1), now
	check := func() verify.Report {
		rep, err := verify.Run(ctx, verify.Options{DB: e.db.DB, Provider: stripe.Name, Reader: e.provider().Verifier(),
			Since: since.Add(-48 * time.Hour), Until: until.Add(time.Hour), All: true, Now: func() time.Time { return now }})
		require.NoError(t, err)
		return rep
	}
	// Before the run: which rows already equal the provider's objects.
	before := check()
	differs := map[string]bool{}
	for _, d := range before.Unexplained {
		differs[d.ProviderID] = true
	}
	var rows []models.Payment
	require.NoError(t, e.db.Where("provider = 'stripe'").Order("provider_id").Find(&rows).Error)
	// In sync: verify finds no difference, and the row is where every
	// provider fact puts it (verify cannot tell captured from settled for a
	// row that names no payout, so the fake's own view picks those out; it
	// only selects the rows, the oracle stays verify).
	truth := e.acct.ExpectedAt(now)
	inSync := map[string]bool{}
	for _, p := range rows {
		if w, ok := truth[p.ProviderID]; ok && !differs[p.ProviderID] && w.State == p.State && w.AmountRefunded == p.AmountRefunded {
			inSync[p.ProviderID] = true
		}
	}
	// Edit 1 % of the in-sync captured or settled rows, none refunded at the
	// provider, to "refunded", at times inside, at and before the window.
	contradicted := map[string]bool{}
	for i, p := range rows {
		if !inSync[p.ProviderID] || p.AmountRefunded != 0 || (p.State != models.StateCaptured && p.State != models.StateSettled) || i%100 != 0 {
			continue
		}
		ts := *p.SourceUpdatedAt
		switch len(contradicted) % 3 {
		case 1:
			ts = ts.Add(time.Hour)
		case 2:
			ts = since.Add(-time.Hour) // before the window: only a current view can contradict it
		}
		if !ts.Before(until) {
			ts = *p.SourceUpdatedAt
		}
		require.NoError(t, e.db.Exec(`UPDATE payments SET state = 'refunded', amount_refunded = amount, source_updated_at = ? WHERE provider = 'stripe' AND provider_id = ?`,
			ts, p.ProviderID).Error)
		contradicted[p.ProviderID] = true
		delete(inSync, p.ProviderID)
	}
	require.Greater(t, len(contradicted), n/400)

	res := e.run(func(o *reconcile.Options) { o.Since, o.Until = since, until })
	items := e.items(res.Run.ID)
	byPI := map[string][]models.DriftItem{}
	for _, it := range items {
		byPI[it.ProviderID] = append(byPI[it.ProviderID], it)
	}

	after := check()
	var total int64
	require.NoError(t, e.db.Model(&models.Payment{}).Where("provider = 'stripe'").Count(&total).Error)
	require.Equal(t, int(total), after.Checked, "every row is checked")
	require.Empty(t, after.Unexplained, "payments that differ from the provider with no item to say why")
	for id := range contradicted {
		var kinds []string
		for _, it := range byPI[id] {
			kinds = append(kinds, it.Kind)
		}
		require.Contains(t, kinds, models.KindConflict, "contradicted row %s: items %v", id, kinds)
	}
	var wrongInSync int
	disputes := 0
	for id := range inSync {
		for _, it := range byPI[id] {
			if it.Kind == models.KindDispute {
				// An open dispute is a notice for support, not drift: the
				// row is right, and the customer's bank is asking.
				disputes++
				continue
			}
			wrongInSync++
			t.Errorf("payment %s was in sync and got %s/%s: %s", id, it.Kind, it.Action, string(it.Detail))
		}
	}
	t.Logf("%d in-sync payments with an open dispute reported", disputes)
	// Left for a human: refused items on payments that are not among the
	// contradicted rows and that the provider's records settle.
	var human int
	for id, its := range byPI {
		for _, it := range its {
			if it.Action == models.ActionRefused && !contradicted[id] {
				switch deref(it.ProviderState) {
				case "refund_failed", "refund_canceled", "dispute_won", "payout_failed", "payout_canceled":
				default:
					human++
					t.Errorf("payment %s left for a human: %s/%s %s", id, it.Kind, deref(it.ProviderState), string(it.Detail))
				}
			}
		}
	}
	again := e.run(func(o *reconcile.Options) { o.Since, o.Until = since, until })
	require.Zero(t, again.Run.Repaired, "a rerun repairs nothing")
	require.Zero(t, again.Run.SyntheticEvents, "a rerun inserts no event")
	t.Logf("%d payments (%d rows before the run), %d events read, %d webhooks delivered; before the run %d rows differed from the provider; after: %d checked, "+
		"%d unexplained, %d explained; %d contradicted rows all conflicts; %d in-sync payments with an item; %d left for a human; %d items; %d API requests",
		total, len(rows), res.Run.EventsRead, len(kept), len(before.Unexplained), after.Checked, len(after.Unexplained), after.Explained,
		len(contradicted), wrongInSync, human, len(items), res.Run.APIRequests)
}
