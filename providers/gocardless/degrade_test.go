package gocardless_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/providers/gocardless"
	"github.com/reconciler/reconciler/providers/gocardless/gcfake"
	"github.com/reconciler/reconciler/reconcile"
)

// A server that lists payment and refund events but not the newer look-ups
// (creditor events, a payment's own events, its refunds: an older or partial
// fake) still gets a finished read: each is skipped with a warning.
func TestOptionalLookupsRefusedDegrade(t *testing.T) {
	now := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	s := gcfake.New(gcfake.Options{Now: func() time.Time { return now }, Seed: 4})
	pm := s.CreatePayment(2500, "GBP", now.Add(-200*time.Hour))
	s.Submit(pm, now.Add(-190*time.Hour))
	s.Confirm(pm, now.Add(-120*time.Hour))
	s.Refund(pm, 2500, now.Add(-5*time.Hour))
	srv := s.Handler()
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if q.Get("resource_type") == "creditors" || q.Get("payment") != "" {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnprocessableEntity)
			_, _ = w.Write([]byte(`{"error":{"type":"validation_failed","code":422,"message":"Invalid filter","errors":[]}}`))
			return
		}
		srv.ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)
	p, err := gocardless.New(gocardless.Config{AccessToken: "sandbox_x", BaseURL: ts.URL})
	require.NoError(t, err)
	var got []reconcile.Change
	err = p.ListChanges(context.Background(), reconcile.ListParams{Since: now.Add(-24 * time.Hour), Until: now}, func(pg reconcile.Page) error {
		got = append(got, pg.Changes...)
		return nil
	})
	require.NoError(t, err, "the window is read without creditor events")
	require.NotEmpty(t, got, "the refund's facts are read")
	cs, err := p.Fetch(context.Background(), reconcile.FetchParams{ProviderIDs: []string{pm}})
	require.NoError(t, err, "the stuck path finishes without the payment's events or refunds")
	require.Len(t, cs, 1)
	require.Equal(t, models.StateRefunded, cs[0].State)
}
