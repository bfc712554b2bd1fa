package stripe_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/providers/stripe"
	"github.com/reconciler/reconciler/providers/stripe/stripefake"
	"github.com/reconciler/reconciler/reconcile"
)

// A server that serves the events and the payment intents but not the newer
// look-ups (GET /v1/account, the balance-transaction expansion, the payout
// and dispute lists: an older or partial fake) still gets a finished run:
// each optional look-up is skipped with a warning, never a failed run.
func TestOptionalLookupsRefusedDegrade(t *testing.T) {
	now := time.Date(2026, 11, 20, 6, 0, 0, 0, time.UTC)
	fake := stripefake.New(stripefake.Options{Now: func() time.Time { return now }, Seed: 9})
	a := fake.Account("")
	pi := a.CreatePayment(1000, "gbp", false, now.Add(-100*time.Hour))
	a.Capture(pi, now.Add(-100*time.Hour))
	a.Dispute(pi, now.Add(-99*time.Hour))
	refuse := func(r *http.Request) bool {
		return r.URL.Path == "/v1/account" || r.URL.Path == "/v1/payouts" || r.URL.Path == "/v1/disputes" ||
			strings.Contains(r.URL.RawQuery, "balance_transaction")
	}
	srv := fake.Handler()
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if refuse(r) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte(`{"error":{"type":"invalid_request_error","message":"Unrecognized request URL or parameter."}}`))
			return
		}
		srv.ServeHTTP(w, r)
	})
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)
	p, err := stripe.New(stripe.Config{APIKey: "sk_test_degrade", BaseURL: ts.URL})
	require.NoError(t, err)
	cs, err := p.Fetch(context.Background(), reconcile.FetchParams{ProviderIDs: []string{pi}})
	require.NoError(t, err, "the stuck path finishes without the optional look-ups")
	require.NotEmpty(t, cs)
	require.Equal(t, models.StateCaptured, cs[0].State, "the payment is still read")
}
