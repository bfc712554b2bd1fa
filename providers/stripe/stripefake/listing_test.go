package stripefake

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestListingFilters checks the filters object listing relies on, on every
// list it reads: created[gte] inclusive and created[lt] exclusive on payment
// intents, refunds and disputes, arrival_date on payouts, and the
// data.payment_intent expansion of refunds and disputes.
func TestListingFilters(t *testing.T) {
	s := New(Options{Now: fixedNow, Seed: 11})
	t.Cleanup(s.Close)
	a := s.Account("")
	t0 := now0.Add(-10 * 24 * time.Hour)
	old := a.CreatePayment(1000, "gbp", false, t0.Add(-time.Second)) // before the window
	a.Capture(old, t0.Add(-time.Second))
	first := a.CreatePayment(2000, "gbp", false, t0)
	a.Capture(first, t0)
	last := a.CreatePayment(3000, "gbp", false, t0.Add(time.Hour-time.Second))
	a.Capture(last, t0.Add(time.Hour-time.Second))
	after := a.CreatePayment(4000, "gbp", false, t0.Add(time.Hour))
	a.Capture(after, t0.Add(time.Hour))
	reOld := a.Refund(old, 100, t0)                              // in the window, of the older payment
	reLast := a.Refund(last, 100, t0.Add(time.Hour-time.Second)) // last second of the window
	a.Refund(first, 100, t0.Add(time.Hour))                      // at the window's end: not in it
	dpOld := a.Dispute(old, t0.Add(time.Minute))
	a.Dispute(after, t0.Add(time.Hour))
	po := a.Payout(t0.Add(30*time.Minute), old, first)

	win := fmt.Sprintf("created[gte]=%d&created[lt]=%d&limit=100", t0.Unix(), t0.Add(time.Hour).Unix())
	ids := func(path string) []string {
		t.Helper()
		status, _, body := rawGet(t, s, path)
		require.Equal(t, http.StatusOK, status, "%s: %s", path, body)
		got, more := listIDs(t, body)
		require.False(t, more)
		return got
	}
	require.Equal(t, []string{last, first}, ids("/v1/payment_intents?"+win+
		"&expand[]=data.latest_charge.refunds&expand[]=data.latest_charge.balance_transaction"), "newest first, [gte, lt)")
	require.Equal(t, []string{reLast, reOld}, ids("/v1/refunds?"+win))
	require.Equal(t, []string{dpOld}, ids("/v1/disputes?"+win))
	arrival := fmt.Sprintf("arrival_date[gte]=%d&arrival_date[lt]=%d", t0.Unix(), t0.Add(time.Hour).Unix())
	require.Equal(t, []string{po}, ids("/v1/payouts?"+arrival))
	require.Empty(t, ids(fmt.Sprintf("/v1/payouts?arrival_date[gte]=%d", t0.Add(30*time.Minute+time.Second).Unix())))

	// data.payment_intent expands each refund's and dispute's payment
	// intent (with its created), stripe-go's indexed spelling too.
	for _, path := range []string{"/v1/refunds?" + win + "&expand[]=data.payment_intent",
		"/v1/disputes?" + win + "&" + url.Values{"expand[0]": {"data.payment_intent"}}.Encode()} {
		status, _, body := rawGet(t, s, path)
		require.Equal(t, http.StatusOK, status, "%s: %s", path, body)
		var l struct {
			Object string `json:"object"`
			URL    string `json:"url"`
			Data   []struct {
				ID            string `json:"id"`
				PaymentIntent struct {
					ID      string `json:"id"`
					Object  string `json:"object"`
					Created int64  `json:"created"`
				} `json:"payment_intent"`
			} `json:"data"`
		}
		require.NoError(t, json.Unmarshal(body, &l), string(body))
		require.Equal(t, "list", l.Object)
		require.NotEmpty(t, l.URL)
		require.NotEmpty(t, l.Data)
		for _, o := range l.Data {
			require.Equal(t, "payment_intent", o.PaymentIntent.Object, path)
			require.NotEmpty(t, o.PaymentIntent.ID)
			if o.PaymentIntent.ID == old {
				require.Equal(t, t0.Add(-time.Second).Unix(), o.PaymentIntent.Created)
			}
		}
	}
	status, _, body := rawGet(t, s, "/v1/refunds?expand[]=data.payment_intent&expand[]=data.charge")
	require.Equal(t, http.StatusBadRequest, status, "only data.payment_intent: %s", body)
	status, _, body = rawGet(t, s, "/v1/payouts?expand[]=data.payment_intent")
	require.Equal(t, http.StatusBadRequest, status, "not on payouts: %s", body)
}
