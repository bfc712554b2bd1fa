package reconcile_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/reconciler/reconciler/internal/webhooksim"
	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/providers/stripe/stripefake"
	"github.com/reconciler/reconciler/reconcile"
	"github.com/reconciler/reconciler/verify"
)

// The money model of DESIGN sections 2-5 as revised: each test is one of the
// cases issue 10 saw go wrong, on both stores.

func TestEmptyBatchIsHarmless(t *testing.T) {
	stores(t, func(t *testing.T, e *env) {
		// A payout that swept no charge: its page carries an event and no
		// change for any payment (it failed on PostgreSQL: jsonb null).
		e.acct.Payout(at(-3))
		pi := e.paid(1000, at(-2))
		res := e.run(func(o *reconcile.Options) { o.BatchSize = 1 })
		require.Equal(t, models.StateCaptured, e.payment(pi).State)
		require.Equal(t, int64(1), res.Run.Examined)
		dry := e.run(func(o *reconcile.Options) { o.DryRun = true; o.BatchSize = 1 })
		require.Equal(t, models.RunSucceeded, dry.Run.Status)
		e.verifyEvery()
	})
}

func TestLocalAheadOfTheProviderIsAConflict(t *testing.T) {
	stores(t, func(t *testing.T, e *env) {
		seed := func(pi string, state models.State, ts time.Time, refunded int64) {
			require.NoError(t, e.db.Exec(`INSERT INTO payments (provider, provider_id, state, amount, currency, amount_refunded, source_updated_at)
				VALUES ('stripe', ?, ?, 1000, 'gbp', ?, ?)`, pi, string(state), refunded, ts).Error)
		}
		// Captured inside the window, no refund at all; the row says refunded
		// at the same second as the capture.
		sameSecond := e.paid(1000, at(-5))
		seed(sameSecond, models.StateRefunded, at(-5), 1000)
		// Refunded later inside the window: the window's log never shows it.
		inWindow := e.paid(1000, at(-6))
		seed(inWindow, models.StateRefunded, at(-2), 1000)
		// Refunded before the window; a payout in the window expands the
		// charge as it is now: not refunded.
		old := e.paid(1000, at(-24*4))
		seed(old, models.StateRefunded, at(-24*3), 1000)
		// Settled, with a partial refund recorded that never happened.
		partial := e.paid(1000, at(-24*4))
		seed(partial, models.StateSettled, at(-24*3), 400)
		e.acct.Payout(at(-3), old, partial)
		// Refunded after the window's end (the live worker moved it during
		// the run): not a conflict.
		late := e.paid(1000, at(-4))
		seed(late, models.StateRefunded, now.Add(time.Minute), 1000)
		// In sync: no item.
		fine := e.paid(1000, at(-4))
		e.acct.Refund(fine, 1000, at(-3))
		seed(fine, models.StateRefunded, at(-3), 1000)

		res := e.run(nil)
		byPI := map[string][]string{}
		for _, it := range e.items(res.Run.ID) {
			byPI[it.ProviderID] = append(byPI[it.ProviderID], it.Kind+"/"+it.Action)
		}
		for name, pi := range map[string]string{"same second": sameSecond, "in window": inWindow, "before the window": old, "partial refund": partial} {
			require.Equal(t, []string{"conflict/refused"}, byPI[pi], name)
		}
		require.Empty(t, byPI[late], "a local fact after the window's end is not judged")
		require.Empty(t, byPI[fine], "a row in sync gets no item")
		require.Equal(t, models.StateRefunded, e.payment(inWindow).State, "nothing is moved back")
		require.Equal(t, int64(400), e.payment(partial).AmountRefunded, "amount_refunded is never lowered")
		require.NotNil(t, e.payment(old).PayoutID, "the payout is recorded whatever the state")

		// Verify over a window reaching past now: each row ahead of the
		// provider differs from it and its conflict item explains that. The
		// row moved after the run's window is not the run's to judge, and
		// nothing at this provider refunded it: verify names it, and only
		// it, unexplained.
		since, until := e.window()
		rep := e.verifyReport(since, until)
		require.Equal(t, 6, rep.InWindow)
		e.requireExplained(rep, sameSecond, inWindow, old, partial)
		require.Equal(t, []verify.Difference{{ProviderID: late, Field: verify.FieldState, Local: "refunded", Provider: "captured (succeeded)"},
			{ProviderID: late, Field: verify.FieldAmountRefunded, Local: "1000", Provider: "0"}}, rep.Unexplained)
		// Over the run's own window, verify finds nothing unexplained.
		rep = e.verifyReport(since, now)
		require.Equal(t, 5, rep.InWindow)
		require.Empty(t, rep.Unexplained, e.describe(rep.Unexplained))
		e.requireExplained(rep, sameSecond, inWindow, old, partial)
	})
}

func TestPartialRefundAcrossBatchesIsKept(t *testing.T) {
	for _, size := range []int{1, 2, 1000} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			stores(t, func(t *testing.T, e *env) {
				pi := e.paid(5000, at(-24*3))
				e.acct.Refund(pi, 4081, at(-10))
				// Filler payments put the refund and the payout in different batches.
				for i := range 5 {
					e.acct.CreatePayment(100, "gbp", false, at(-9).Add(time.Duration(i)*time.Minute))
				}
				po := e.acct.Payout(at(-2), pi)
				res := e.run(func(o *reconcile.Options) { o.BatchSize = size })
				p := e.payment(pi)
				require.Equal(t, models.StateSettled, p.State)
				require.Equal(t, int64(4081), p.AmountRefunded)
				require.NotNil(t, p.PayoutID)
				require.Equal(t, po, *p.PayoutID)
				require.True(t, p.SettledAt.Equal(at(-2)))
				var kinds []string
				for _, it := range e.items(res.Run.ID) {
					if it.ProviderID == pi {
						kinds = append(kinds, it.Kind)
					}
				}
				require.Equal(t, []string{"missing_local"}, kinds, "one item, whatever the batch size")
				e.verifyEvery()
			})
		})
	}
}

func TestLostDisputeAloneCreatesTheRowFromTheProvider(t *testing.T) {
	stores(t, func(t *testing.T, e *env) {
		pi := e.paid(2500, at(-24*10))
		dp := e.acct.Dispute(pi, at(-24*9))
		e.acct.CloseDispute(dp, "lost", at(-5))
		res := e.run(nil)
		p := e.payment(pi)
		require.Equal(t, models.StateChargeback, p.State)
		require.Equal(t, int64(2500), p.Amount, "the amount comes from the PaymentIntent, fetched by id")
		require.Equal(t, "gbp", p.Currency)
		require.True(t, p.SourceUpdatedAt.Equal(at(-5)))
		require.Equal(t, []string{"missing_local/repaired"}, itemKinds(e.items(res.Run.ID)))
		e.verifyEvery()
	})
}

func TestSettlementRecordedWhateverTheState(t *testing.T) {
	stores(t, func(t *testing.T, e *env) {
		pi := e.paid(1000, at(-24*4))
		e.acct.Refund(pi, 1000, at(-24*3))
		e.deliver(func(int, webhooksim.Delivery) bool { return true })
		po := e.acct.Payout(at(-3), pi)
		res := e.run(nil)
		p := e.payment(pi)
		require.Equal(t, models.StateRefunded, p.State)
		require.Equal(t, po, *p.PayoutID)
		require.True(t, p.SettledAt.Equal(at(-3)))
		require.Empty(t, e.items(res.Run.ID), "filling in a settlement is bookkeeping, not drift")
		require.Equal(t, int64(1), res.Run.SettlementsRecorded)
		e.verifyEvery()
	})
}

// paid creates a payment captured at once (the capture at the same second).
func (e *env) paid(amount int64, t time.Time) string {
	pi := e.acct.CreatePayment(amount, "gbp", false, t)
	e.acct.Capture(pi, t)
	return pi
}

// outcomeOf is everything a run leaves that must not depend on the batch
// size: rows, synthetic events and items.
func (e *env) outcomeOf(runID int64) (rows, events, items []string) {
	var ps []models.Payment
	require.NoError(e.t, e.db.Where("provider = 'stripe'").Order("provider_id").Find(&ps).Error)
	for _, p := range ps {
		rows = append(rows, fmt.Sprintf("%s %s %s %d %v %v %d", p.ProviderID, p.State, fmtTime(p.SourceUpdatedAt), p.AmountRefunded,
			fmtTime(p.SettledAt), deref(p.PayoutID), p.Amount))
	}
	events = syntheticIDs(e.t, e.db.DB)
	for _, it := range e.items(runID) {
		items = append(items, fmt.Sprintf("%s %s/%s %s→%s", it.ProviderID, it.Kind, it.Action, deref(it.LocalState), deref(it.ProviderState)))
	}
	slices.Sort(items)
	return rows, events, items
}

func fmtTime(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

func deref(s *string) string {
	if s == nil {
		return "-"
	}
	return *s
}

func TestOutcomeIndependentOfBatchSize(t *testing.T) {
	for _, store := range []string{"postgres", "sqlite"} {
		t.Run(store, func(t *testing.T) {
			t.Parallel()
			var want [3][]string
			// Batch sizes, and what the run carries between batches kept
			// in memory (0: the default budget), spilled to the carry table
			// in part (a budget of 4 KiB) or wholly (-1).
			for i, v := range []struct{ size, carry int }{{1000, 0}, {7, 0}, {1, 0}, {7, -1}, {25, 4 << 10}} {
				size := v.size
				e := newEnvSerial(t, store)
				e.acct.Generate(stripefake.GenOptions{Payments: 300, Start: at(-24 * 6), End: at(-1), Seed: 11})
				// Webhooks lost per event, the rest delivered in random order.
				ds := webhooksim.Stripe(e.acct.Deliveries())
				rng := rand.New(rand.NewPCG(5, 6))
				var kept []webhooksim.Delivery
				for _, d := range ds {
					if rng.IntN(10) >= 3 {
						kept = append(kept, d)
					}
				}
				rng.Shuffle(len(kept), func(i, j int) { kept[i], kept[j] = kept[j], kept[i] })
				for _, d := range kept {
					require.NoError(t, webhooksim.Apply(context.Background(), e.db.DB, "stripe", d))
				}
				res := e.run(func(o *reconcile.Options) { o.BatchSize, o.CarryMemory = size, v.carry })
				rows, events, items := e.outcomeOf(res.Run.ID)
				require.NotEmpty(t, items)
				// Over the run's window (the default 25 hours): payments whose
				// every fact and lost webhook lies before it are not this
				// run's to repair.
				e.verifyAll(res.Run.WindowStart, now.Add(time.Hour))
				if i == 0 {
					want = [3][]string{rows, events, items}
					continue
				}
				require.Equal(t, strings.Join(want[0], "\n"), strings.Join(rows, "\n"), "rows at batch size %d, carry memory %d", size, v.carry)
				require.Equal(t, want[1], events, "synthetic events at batch size %d, carry memory %d", size, v.carry)
				require.Equal(t, strings.Join(want[2], "\n"), strings.Join(items, "\n"), "items at batch size %d, carry memory %d", size, v.carry)
			}
		})
	}
}

// TestSettlementRecordedWithTheStep: a payout that settles a captured
// payment moves it to settled and records the payout in one statement
// (store.Step.Settled), counted as a settlement as RecordSettlements' would
// be.
func TestSettlementRecordedWithTheStep(t *testing.T) {
	stores(t, func(t *testing.T, e *env) {
		pi := e.paid(1000, at(-24*4))
		e.deliver(func(int, webhooksim.Delivery) bool { return true })
		po := e.acct.Payout(at(-3), pi)
		res := e.run(nil)
		p := e.payment(pi)
		require.Equal(t, models.StateSettled, p.State)
		require.Equal(t, po, *p.PayoutID)
		require.True(t, p.SettledAt.Equal(at(-3)))
		require.Equal(t, []string{"behind/repaired"}, itemKinds(e.items(res.Run.ID)))
		require.Equal(t, int64(1), res.Run.SettlementsRecorded)
		e.verifyEvery()

		// Nothing left to do: the next run records nothing.
		res = e.run(nil)
		require.Zero(t, res.Run.SettlementsRecorded)
		require.Empty(t, e.items(res.Run.ID))
	})
}
