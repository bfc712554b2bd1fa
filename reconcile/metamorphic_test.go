package reconcile_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
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

// The metamorphic suite: one provider account, reconciled from databases
// that the webhooks left in different ways (each event lost on its own,
// the rest delivered in random order, some twice, some while the job runs),
// at different batch sizes, with runs interrupted and resumed. Whatever the
// path, the final rows are identical, and equal the provider's own current
// objects: `verify --all` finds nothing that no drift item explains. The
// oracle is the provider's objects, never the fake's truth file.

type variant struct {
	name      string
	lossSeed  uint64
	loss      int // percent of events whose webhook is lost
	batchSize int
	interrupt bool // cancel the first run part-way, then resume
	race      bool // deliver a share of the webhooks while the job runs
	// carryMemory is Options.CarryMemory: 0 the default budget, -1 every
	// carried payment spilled to the carry table, a few KiB some of them.
	carryMemory int
	// readAhead: the provider reads ahead of its events stream whatever
	// the latency, each read-ahead aiming at this many events (0: as it
	// does on loopback, never).
	readAhead int
	// latency: every answer of the fake this late during the runs, so
	// that the stream waits for its read-aheads and may split the last
	// stretches (whether it does depends on timing: in two of three runs
	// measured; TestReadAheadSplitDeliversTheSame requires it).
	latency time.Duration
}

var metamorphicVariants = []variant{
	{name: "all delivered, in order", loss: 0, batchSize: 1000},
	{name: "30% lost, batch 1000", lossSeed: 1, loss: 30, batchSize: 1000},
	{name: "30% lost, batch 7", lossSeed: 2, loss: 30, batchSize: 7},
	{name: "60% lost, batch 1", lossSeed: 3, loss: 60, batchSize: 1},
	{name: "30% lost, interrupted and resumed", lossSeed: 4, loss: 30, batchSize: 25, interrupt: true},
	{name: "30% lost, webhooks racing the job", lossSeed: 5, loss: 30, batchSize: 50, race: true},
	{name: "every webhook lost", lossSeed: 6, loss: 100, batchSize: 100},
	{name: "every webhook lost, the carry spilled", lossSeed: 6, loss: 100, batchSize: 7, carryMemory: -1},
	{name: "30% lost, batch 7, the carry partly spilled", lossSeed: 2, loss: 30, batchSize: 7, carryMemory: 8 << 10},
	{name: "30% lost, batch 7, read ahead 150 events at a time", lossSeed: 2, loss: 30, batchSize: 7, readAhead: 150},
	{name: "30% lost, interrupted and resumed, read ahead", lossSeed: 4, loss: 30, batchSize: 25, interrupt: true, readAhead: 120},
	{name: "every webhook lost, read ahead", lossSeed: 6, loss: 100, batchSize: 100, readAhead: 200},
	{name: "30% lost, read ahead while Stripe answers late, the last stretches split", lossSeed: 2, loss: 30, batchSize: 100, readAhead: 300, latency: 10 * time.Millisecond},
}

func TestMetamorphicStripe(t *testing.T) {
	for _, store := range []string{"postgres", "sqlite"} {
		t.Run(store, func(t *testing.T) {
			t.Parallel()
			var want []string
			var wantFrom string
			for _, v := range metamorphicVariants {
				if store == "sqlite" && v.race {
					continue // concurrency is a PostgreSQL guarantee
				}
				rows := runVariant(t, store, v)
				if want == nil {
					want, wantFrom = rows, v.name
					continue
				}
				if d := lineDiff(want, rows); d != "" {
					t.Fatalf("final rows of %q differ from %q:\n%s", v.name, wantFrom, d)
				}
			}
		})
	}
}

// metamorphicAccount is the provider's side, the same for every variant:
// realistic histories over six days (refunds, partial refunds, disputes,
// failed refunds, cancels, daily payouts), with an anchor before them.
func metamorphicAccount(e *env) {
	e.acct.CreatePayment(100, "gbp", false, at(-24*8))
	e.acct.Generate(stripefake.GenOptions{Payments: 400, Start: at(-24 * 6), End: at(-1), Seed: 77})
}

func runVariant(t *testing.T, store string, v variant) []string {
	t.Helper()
	e := newEnvSerial(t, store)
	e.readAhead = v.readAhead
	metamorphicAccount(e)
	ds := webhooksim.Stripe(e.acct.Deliveries())
	rng := rand.New(rand.NewPCG(v.lossSeed, 99))
	var kept, late []webhooksim.Delivery
	since := at(-24*6 - 1)
	for _, d := range ds {
		// Webhooks before the window were handled long ago; inside it, each
		// one is lost on its own.
		if rng.IntN(100) < v.loss && !d.At.Before(since) {
			continue
		}
		kept = append(kept, d)
		if rng.IntN(8) == 0 {
			kept = append(kept, d) // delivered twice
		}
	}
	if v.loss > 0 {
		rng.Shuffle(len(kept), func(i, j int) { kept[i], kept[j] = kept[j], kept[i] })
	}
	if v.race {
		kept, late = kept[:len(kept)/2], kept[len(kept)/2:]
	}
	ctx := context.Background()
	for _, d := range kept {
		require.NoError(t, webhooksim.Apply(ctx, e.db.DB, "stripe", d))
	}
	opts := func(o *reconcile.Options) {
		o.Since, o.BatchSize, o.CarryMemory = since, v.batchSize, v.carryMemory
	}
	var runIDs []int64
	e.fake.SetLatency(v.latency)
	switch {
	case v.interrupt:
		ctx, cancel := context.WithCancel(ctx)
		batches := 0
		o := reconcile.Options{DB: e.db.DB, Provider: e.provider(), Now: func() time.Time { return now }, StuckLimit: -1,
			Progress: func(reconcile.Progress) {
				if batches++; batches == 5 {
					cancel()
				}
			}}
		opts(&o)
		first, err := reconcile.Run(ctx, o)
		require.ErrorIs(t, err, reconcile.ErrInterrupted)
		require.Equal(t, models.RunInterrupted, first.Run.Status)
		// The rerun resumes after the crashed run's last committed event.
		res := e.run(opts)
		require.Contains(t, string(res.Run.Notes), "resumed_from_run")
		runIDs = append(runIDs, first.Run.ID, res.Run.ID)
		// A full run over the whole window afterwards finds the rest.
		runIDs = append(runIDs, e.run(opts).Run.ID)
	case v.race:
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, d := range late {
				if err := webhooksim.Apply(ctx, e.db.DB, "stripe", d); err != nil {
					t.Error(err)
					return
				}
			}
		}()
		runIDs = append(runIDs, e.run(opts).Run.ID)
		wg.Wait()
		runIDs = append(runIDs, e.run(opts).Run.ID) // what the race left behind
	default:
		runIDs = append(runIDs, e.run(opts).Run.ID)
	}

	e.fake.SetLatency(0)
	if v.latency > 0 {
		var split int64
		for _, p := range e.made {
			split += p.ReadAheadsSplit()
		}
		t.Logf("%s: %d stretches split", v.name, split)
	}

	// The oracle: the provider's own current objects.
	rep, err := verify.Run(ctx, verify.Options{DB: e.db.DB, Provider: stripe.Name, Reader: e.provider().Verifier(),
		Since: since.Add(-24 * time.Hour), Until: now.Add(time.Hour), All: true, Now: func() time.Time { return now }})
	require.NoError(t, err)
	require.Positive(t, rep.Checked, v.name)
	require.Empty(t, rep.Unexplained, "%s: verify --all found differences no item explains", v.name)

	// A rerun repairs nothing.
	again := e.run(opts)
	require.Zero(t, again.Run.Repaired, "%s: a rerun repaired", v.name)
	require.Zero(t, again.Run.SyntheticEvents, "%s: a rerun inserted events", v.name)

	// No payment the provider settles is left for a human: every refused
	// item is one the provider's own records cannot settle (a refund that
	// failed after it was recorded, a dispute won after a chargeback).
	var refused []models.DriftItem
	require.NoError(t, e.db.Where("run_id IN ? AND action = 'refused'", runIDs).Find(&refused).Error)
	for _, it := range refused {
		require.Contains(t, []string{"refund_failed", "refund_canceled", "dispute_won"}, deref(it.ProviderState),
			"%s: payment %s left for a human: %s", v.name, it.ProviderID, string(it.Detail))
	}

	var ps []models.Payment
	require.NoError(t, e.db.Where("provider = 'stripe'").Order("provider_id").Find(&ps).Error)
	out := make([]string, 0, len(ps))
	for _, p := range ps {
		out = append(out, fmt.Sprintf("%s %s at=%s refunded=%d settled=%s payout=%s amount=%d %s", p.ProviderID, p.State, fmtTime(p.SourceUpdatedAt),
			p.AmountRefunded, fmtTime(p.SettledAt), deref(p.PayoutID), p.Amount, p.Currency))
	}
	t.Logf("%s: %d rows, %d checked by verify, %d refused items", v.name, len(out), rep.Checked, len(refused))
	return out
}

// lineDiff lists the lines only one side has (both are sorted by payment).
func lineDiff(want, got []string) string {
	in := func(xs []string) map[string]bool {
		m := map[string]bool{}
		for _, x := range xs {
			m[x] = true
		}
		return m
	}
	w, g := in(want), in(got)
	var b strings.Builder
	for _, x := range want {
		if !g[x] {
			b.WriteString("- " + x + "\n")
		}
	}
	for _, x := range got {
		if !w[x] {
			b.WriteString("+ " + x + "\n")
		}
	}
	return b.String()
}
