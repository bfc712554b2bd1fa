package reconcile_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/reconciler/reconciler/internal/webhooksim"
	"github.com/reconciler/reconciler/models"
)

// A payout can show paid, then fail (Stripe documents it): its payments are
// never moved back; each gets one conflict naming the payout, and the row
// keeps settled_at and payout_id.
func TestPayoutFailedAfterPaidIsAConflictNamingIt(t *testing.T) {
	stores(t, func(t *testing.T, e *env) {
		a := e.paid(1200, at(-24*4))
		b := e.paid(3400, at(-24*4).Add(time.Minute))
		e.acct.Refund(b, 3400, at(-24*3))
		po := e.acct.Payout(at(-6), a, b)
		e.deliver(func(int, webhooksim.Delivery) bool { return true })
		e.acct.FailPayout(po, "failed", at(-2))

		res := e.run(nil)
		for pi, state := range map[string]models.State{a: models.StateSettled, b: models.StateRefunded} {
			p := e.payment(pi)
			require.Equal(t, state, p.State, "never moved back")
			require.NotNil(t, p.PayoutID)
			require.Equal(t, po, *p.PayoutID)
		}
		items := e.items(res.Run.ID)
		require.Len(t, items, 2)
		for _, it := range items {
			require.Equal(t, "conflict/refused", it.Kind+"/"+it.Action)
			require.Equal(t, "payout_failed", *it.ProviderState)
			require.Contains(t, string(it.Detail), po)
		}
		again := e.run(nil)
		require.Zero(t, again.Run.Repaired)
	})
}
