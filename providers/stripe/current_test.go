package stripe_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"
	stripego "github.com/stripe/stripe-go/v76"

	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/providers/stripe"
	"github.com/reconciler/reconciler/reconcile"
)

// TestStripeMockVerifierRequests checks every request verify makes against
// Stripe's own OpenAPI spec: the PaymentIntent with its latest charge, the
// payout, its balance transactions with their sources, and the disputes of
// a PaymentIntent, on the platform and on a connected account.
func TestStripeMockVerifierRequests(t *testing.T) {
	t.Parallel()
	m := startStripeMock(t)
	p := newStripeMockProvider(t, m)
	v := p.Verifier()
	ctx := context.Background()
	for _, account := range []string{"", "acct_1Verify"} {
		cur, err := v.Current(ctx, reconcile.CurrentParams{Account: account, IDs: []string{"pi_verify1", "pi_verify2"},
			Payouts: map[string]string{"pi_verify1": "po_verify"}})
		require.NoError(t, err)
		require.Len(t, cur, 2)
		for i, id := range []string{"pi_verify1", "pi_verify2"} {
			require.Equal(t, id, cur[i].ProviderID, "in the order asked")
			require.True(t, cur[i].Found)
		}
		_, err = v.NewestDisputeID(ctx, account, "pi_verify1")
		require.NoError(t, err)
	}
	require.Equal(t, 2, m.requested(http.MethodGet, "/v1/payment_intents/pi_verify1"))
	require.Equal(t, 2, m.requested(http.MethodGet, "/v1/payouts/po_verify"), "once per account")
	require.Positive(t, m.requested(http.MethodGet, "/v1/balance_transactions"))
	require.Equal(t, 2, m.requested(http.MethodGet, "/v1/disputes"))
	for _, x := range m.exchanges() {
		switch x.Path {
		case "/v1/payment_intents/pi_verify1":
			require.Equal(t, []string{"latest_charge"}, expand(x.Query))
		case "/v1/balance_transactions":
			require.Equal(t, "po_verify", x.Query.Get("payout"))
			require.Equal(t, []string{"data.source"}, expand(x.Query))
		case "/v1/disputes":
			require.Equal(t, "pi_verify1", x.Query.Get("payment_intent"))
		}
	}
	m.requireAllAccepted(t, p)
}

// expand returns the expand parameter however it is encoded (stripe-go
// writes expand[0]=…).
func expand(q url.Values) []string {
	out := append([]string(nil), q["expand[]"]...)
	for i := 0; ; i++ {
		v, ok := q[fmt.Sprintf("expand[%d]", i)]
		if !ok {
			return out
		}
		out = append(out, v...)
	}
}

func TestCurrentOf(t *testing.T) {
	t.Parallel()
	pi := func(status string, ch *stripego.Charge) *stripego.PaymentIntent {
		return &stripego.PaymentIntent{ID: "pi_1", Amount: 1000, Currency: "GBP", Status: stripego.PaymentIntentStatus(status), LatestCharge: ch}
	}
	for _, c := range []struct {
		name     string
		pi       *stripego.PaymentIntent
		state    models.State
		refunded int64
		captured int64
		unknown  bool
	}{
		{"processing", pi("processing", nil), models.StateCreated, 0, 0, false},
		{"requires_capture", pi("requires_capture", &stripego.Charge{Amount: 1000}), models.StateAuthorised, 0, 0, false},
		{"succeeded", pi("succeeded", &stripego.Charge{Amount: 1000, AmountCaptured: 1000, Captured: true}), models.StateCaptured, 0, 1000, false},
		{"partially refunded", pi("succeeded", &stripego.Charge{Amount: 1000, AmountCaptured: 1000, Captured: true, AmountRefunded: 300}), models.StateCaptured, 300, 1000, false},
		{"refunded", pi("succeeded", &stripego.Charge{Amount: 1000, AmountCaptured: 1000, Captured: true, AmountRefunded: 1000, Refunded: true}), models.StateRefunded, 1000, 1000, false},
		// The cancel trap: the released hold is no refund.
		{"canceled authorisation", pi("canceled", &stripego.Charge{Amount: 1000, AmountRefunded: 1000, Refunded: true}), models.StateCanceled, 0, 0, false},
		// A partial capture: Stripe counts the released 400 in amount_refunded.
		{"partial capture", pi("succeeded", &stripego.Charge{Amount: 1000, AmountCaptured: 600, Captured: true, AmountRefunded: 400}), models.StateCaptured, 0, 600, false},
		{"partial capture refunded", pi("succeeded", &stripego.Charge{Amount: 1000, AmountCaptured: 600, Captured: true, AmountRefunded: 1000, Refunded: true}), models.StateRefunded, 600, 600, false},
		{"unknown", pi("requires_reauthorization", nil), models.StateNone, 0, 0, true},
	} {
		got := stripe.CurrentOf(c.pi)
		require.True(t, got.Found, c.name)
		require.Equal(t, "gbp", got.Currency, c.name)
		require.Equal(t, c.state, got.State, c.name)
		require.Equal(t, c.refunded, got.AmountRefunded, c.name)
		require.Equal(t, c.captured, got.AmountCaptured, c.name)
		require.Equal(t, c.unknown, got.Unknown, c.name)
		require.False(t, got.SettlementKnown, "%s: a PaymentIntent alone cannot tell settlement", c.name)
	}
}
