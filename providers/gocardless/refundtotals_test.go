package gocardless

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/providers/gocardless/gcfake"
	"github.com/reconciler/reconciler/reconcile"
)

// TestRefundTotalsFromLinkedPayments: a refund event does not carry its
// payment's amount_refunded. A refunded payment whose payment events the
// window lists (with include=payment) gets it from the linked payment, read
// after the refund was created, with no request of its own; only the others
// are read one by one: a payment whose events all precede the window, and a
// refund created less than totalsSkew before its payment's page was read.
// Whole, in slices, and with the kept totals let go after every payment,
// the window's pages are the same, and each refund carries the total
// GoCardless shows for the payment.
func TestRefundTotalsFromLinkedPayments(t *testing.T) {
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	s := gcfake.New(gcfake.Options{Now: func() time.Time { return now }, Seed: 5})
	d := func(days int) time.Time { return now.Add(-time.Duration(days)*24*time.Hour + 11*time.Minute) }
	paid := func(amount int64, created int) string {
		pm := s.CreatePayment(amount, "GBP", d(created))
		s.Submit(pm, d(created-1))
		s.Confirm(pm, d(created-3))
		s.PayOut(d(created-4), pm)
		return pm
	}
	// Refunded twice in part: both refunds carry the payment's total now.
	partly := paid(1000, 12)
	s.Refund(partly, 300, d(7))
	s.Refund(partly, 200, d(3))
	// Refunded whole.
	whole := paid(800, 11)
	s.Refund(whole, 800, d(5))
	// Paid out before the window: no payment event of the window links it.
	older := paid(1500, 45)
	s.Refund(older, 500, d(2))
	// Refunded seconds before the window's end, and so before its payment
	// events' pages were read (the provider's clock is the fake's).
	recent := paid(700, 9)
	s.Refund(recent, 700, now.Add(-30*time.Second))
	// Payments never refunded, so that the window holds more than a slice.
	for i := range 12 {
		paid(int64(100+i), 20-i)
	}
	url := s.Start()
	t.Cleanup(s.Close)
	lp := reconcile.ListParams{Since: now.Add(-31 * 24 * time.Hour), Until: now}

	type read struct {
		changes []reconcile.Change
		gets    int64
		slices  int
	}
	list := func(hold, kept int) read {
		p, err := New(Config{AccessToken: "sandbox_totals", BaseURL: url, Hold: hold, PageSize: 7, Now: func() time.Time { return now }})
		require.NoError(t, err)
		p.totalsKept = kept
		before := s.RequestsByPath()["/payments/{id}"]
		var r read
		p.held = func(time.Time, time.Time, int) { r.slices++ }
		require.NoError(t, p.ListChanges(context.Background(), lp, func(pg reconcile.Page) error {
			r.changes = append(r.changes, pg.Changes...)
			return nil
		}))
		r.gets = s.RequestsByPath()["/payments/{id}"] - before
		return r
	}
	// shown is the payment as GoCardless shows it now (asked after the
	// reads, so not counted in them).
	shown := func(pm string) Payment {
		req := httptest.NewRequest(http.MethodGet, "/payments/"+pm, nil)
		req.Header.Set("Authorization", "Bearer sandbox_totals")
		req.Header.Set("GoCardless-Version", Version)
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, req)
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
		var r struct {
			Payments Payment `json:"payments"`
		}
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &r))
		return r.Payments
	}

	all := list(1<<30, 0)
	assert.Equal(t, int64(2), all.gets, "only the payment paid out before the window and the refund within totalsSkew of the read are read one by one")
	refunds := 0
	for _, c := range all.changes {
		if c.EventType != "refunds.created" {
			continue
		}
		refunds++
		pm := shown(c.ProviderID)
		assert.Equal(t, pm.AmountRefunded, c.AmountRefunded, "%s: amount_refunded", c.ProviderID)
		assert.Equal(t, pm.Amount, c.Amount, "%s: amount", c.ProviderID)
		assert.Equal(t, "gbp", c.Currency, "%s: currency", c.ProviderID)
		want := models.StateNone
		if pm.AmountRefunded >= pm.Amount {
			want = models.StateRefunded
		}
		assert.Equal(t, want, c.State, "%s: state", c.ProviderID)
	}
	require.Equal(t, 5, refunds)
	for _, c := range all.changes {
		if c.EventType == "refunds.created" && c.ProviderID == partly {
			assert.Equal(t, int64(500), c.AmountRefunded, "each refund of a payment carries its total now")
		}
	}

	sliced := list(12, 0)
	require.Greater(t, sliced.slices, 3, "the window was not sliced")
	assert.Equal(t, all.changes, sliced.changes, "read in slices of 12 events")
	assert.Equal(t, int64(2), sliced.gets, "read in slices: the refunded payments' events come before their refunds")

	forgetful := list(12, 1)
	assert.Equal(t, all.changes, forgetful.changes, "with one total kept at a time, each refund still carries its payment's")
	assert.Greater(t, forgetful.gets, int64(2), "totals let go are read again")
}
