package stripe

import (
	"testing"
	"time"

	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/reconcile"
)

// Partial captures (docs/providers/stripe.md): up to 2025-03-31.basil the
// released remainder is counted in amount_refunded, and is not a refund.
func TestCapturedRefundsOfAPartialCapture(t *testing.T) {
	cases := []struct {
		name     string
		ch       leanCharge
		version  string
		want     int64
		captured int64
	}{
		{"full capture, partial refund", leanCharge{Amount: 100, AmountCaptured: 100, AmountRefunded: 30, Captured: true}, "2023-10-16", 30, 0},
		{"60 of 100 captured, nothing refunded", leanCharge{Amount: 100, AmountCaptured: 60, AmountRefunded: 40, Captured: true}, "2023-10-16", 0, 60},
		{"60 of 100 captured, 25 refunded", leanCharge{Amount: 100, AmountCaptured: 60, AmountRefunded: 65, Captured: true}, "2023-10-16", 25, 60},
		{"60 of 100 captured, all refunded", leanCharge{Amount: 100, AmountCaptured: 60, AmountRefunded: 100, Captured: true, Refunded: true}, "2023-10-16", 60, 60},
		{"rendered in basil: the remainder is not counted", leanCharge{Amount: 100, AmountCaptured: 60, AmountRefunded: 25, Captured: true}, "2025-03-31.basil", 25, 60},
		{"no version: treated as the pinned one", leanCharge{Amount: 100, AmountCaptured: 60, AmountRefunded: 40, Captured: true}, "", 0, 60},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ch := c.ch
			ch.PaymentIntent, ch.Currency = "pi_1", "gbp"
			if got := capturedRefunds(&ch, c.version); got != c.want {
				t.Fatalf("capturedRefunds = %d, want %d", got, c.want)
			}
			chg, ok := chargeChange(reconcile.Change{At: time.Unix(1, 0)}, &ch, c.version)
			if !ok || chg.AmountRefunded != c.want || chg.AmountCaptured != c.captured || !chg.View {
				t.Fatalf("chargeChange = %+v (ok %v), want amount_refunded %d, amount_captured %d, a view", chg, ok, c.want, c.captured)
			}
			if ch.Refunded != (chg.State == models.StateRefunded) {
				t.Fatalf("state %s for refunded=%v", chg.State, ch.Refunded)
			}
		})
	}
	// The hold released by canceling an authorisation is never a refund.
	if _, ok := chargeChange(reconcile.Change{}, &leanCharge{PaymentIntent: "pi_1", Amount: 100, AmountRefunded: 100, Refunded: true}, "2023-10-16"); ok {
		t.Fatal("an uncaptured charge marked refunded was mapped")
	}
}
