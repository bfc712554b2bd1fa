package stripe

import (
	"testing"
	"time"

	stripego "github.com/stripe/stripe-go/v76"

	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/reconcile"
)

// Partial captures (docs/providers/stripe.md): up to 2025-03-31.basil the
// released remainder is counted in amount_refunded, and is not a refund.
func TestCapturedRefundsOfAPartialCapture(t *testing.T) {
	pi := &stripego.PaymentIntent{ID: "pi_1"}
	cases := []struct {
		name     string
		ch       stripego.Charge
		version  string
		want     int64
		captured int64
	}{
		{"full capture, partial refund", stripego.Charge{Amount: 100, AmountCaptured: 100, AmountRefunded: 30, Captured: true}, "2023-10-16", 30, 0},
		{"60 of 100 captured, nothing refunded", stripego.Charge{Amount: 100, AmountCaptured: 60, AmountRefunded: 40, Captured: true}, "2023-10-16", 0, 60},
		{"60 of 100 captured, 25 refunded", stripego.Charge{Amount: 100, AmountCaptured: 60, AmountRefunded: 65, Captured: true}, "2023-10-16", 25, 60},
		{"60 of 100 captured, all refunded", stripego.Charge{Amount: 100, AmountCaptured: 60, AmountRefunded: 100, Captured: true, Refunded: true}, "2023-10-16", 60, 60},
		{"rendered in basil: the remainder is not counted", stripego.Charge{Amount: 100, AmountCaptured: 60, AmountRefunded: 25, Captured: true}, "2025-03-31.basil", 25, 60},
		{"no version: treated as the pinned one", stripego.Charge{Amount: 100, AmountCaptured: 60, AmountRefunded: 40, Captured: true}, "", 0, 60},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ch := c.ch
			ch.PaymentIntent, ch.Currency = pi, "gbp"
			if got := CapturedRefunds(&ch, c.version); got != c.want {
				t.Fatalf("CapturedRefunds = %d, want %d", got, c.want)
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
	if _, ok := chargeChange(reconcile.Change{}, &stripego.Charge{PaymentIntent: pi, Amount: 100, AmountRefunded: 100, Refunded: true}, "2023-10-16"); ok {
		t.Fatal("an uncaptured charge marked refunded was mapped")
	}
}
