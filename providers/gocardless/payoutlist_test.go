package gocardless

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/reconciler/reconciler/payouts"
	"github.com/reconciler/reconciler/providers/gocardless/gcfake"
)

func listGCPayouts(t *testing.T, p *Provider, since, until time.Time) map[string]payouts.Payout {
	t.Helper()
	out := map[string]payouts.Payout{}
	require.NoError(t, p.ListPayouts(context.Background(), payouts.Params{Since: since, Until: until}, func(po payouts.Payout) error {
		_, dup := out[po.ID]
		require.False(t, dup, "payout %s delivered twice", po.ID)
		out[po.ID] = po
		return nil
	}))
	return out
}

// collected creates a payment and collects it (submitted, confirmed).
func collected(s *gcfake.Server, amount int64, at time.Time) string {
	pm := s.CreatePayment(amount, "GBP", at)
	s.Submit(pm, at.Add(time.Hour))
	s.Confirm(pm, at.Add(2*time.Hour))
	return pm
}

func TestListPayoutsFromGCFake(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 30, 6, 0, 0, 0, time.UTC)
	s := gcfake.New(gcfake.Options{Now: func() time.Time { return now }, Seed: 4})
	url := s.Start()
	t.Cleanup(s.Close)
	d := func(days float64) time.Time { return now.Add(time.Duration(days * 24 * float64(time.Hour))) }

	pm1, pm2 := collected(s, 1000, d(-20)), collected(s, 2500, d(-20))
	po1 := s.PayOut(d(-18), pm1, pm2)
	s.AddPayoutFee(po1, pm1, 25)
	s.AddPayoutFee(po1, pm2, 45)
	rf := s.Refund(pm1, 400, d(-15))
	pm3 := collected(s, 3000, d(-14))
	po2 := s.PayOut(d(-12), pm3)
	s.RefundSettled(rf, d(-12), po2)
	s.ChargeBack(pm2, d(-11))
	s.ChargebackSettled(pm2, d(-11), po2)
	pm4 := collected(s, 800, d(-9))
	po3 := s.PayOut(d(-8), pm4)
	s.SetPayoutAmount(po3, 700)
	old := s.PayOut(d(-200), collected(s, 500, d(-202))) // items gone after six months

	p, err := New(Config{AccessToken: "sandbox_payouts", BaseURL: url})
	require.NoError(t, err)
	got := listGCPayouts(t, p, d(-210), now)
	require.Len(t, got, 4)
	used := s.RequestsByPath()
	require.EqualValues(t, 1, used["/payouts"])
	require.EqualValues(t, 4, used["/payout_items"], "one page a payout, the one that answers 410 too")

	g1 := got[po1]
	require.Equal(t, "paid", g1.Status)
	require.True(t, g1.Paid)
	require.Equal(t, "gbp", g1.Currency)
	require.EqualValues(t, 10, g1.Scale)
	require.EqualValues(t, 3500-70, g1.Amount)
	require.Equal(t, d(-18).Truncate(24*time.Hour), g1.ArrivalDate)
	require.Equal(t, d(-18), g1.Created)
	require.Equal(t, payouts.ListingComplete, g1.Listing)
	require.ElementsMatch(t, []payouts.Line{
		{Type: "payment_paid_out", Kind: payouts.KindCharge, Amount: 10000, Net: 10000, PaymentID: pm1, PaymentAmount: 10000},
		{Type: "payment_paid_out", Kind: payouts.KindCharge, Amount: 25000, Net: 25000, PaymentID: pm2, PaymentAmount: 25000},
		{Type: "gocardless_fee", Kind: payouts.KindFee, Amount: -250, Net: -250, PaymentID: pm1},
		{Type: "gocardless_fee", Kind: payouts.KindFee, Amount: -450, Net: -450, PaymentID: pm2},
	}, g1.Lines)
	r := payouts.Check(Name, "", g1, payouts.Local{Paid: map[string]payouts.Row{}})
	require.Zero(t, r.Difference, r.Explanation)
	require.EqualValues(t, -70, r.Fees)

	kinds := map[payouts.Kind]string{}
	for _, l := range got[po2].Lines {
		kinds[l.Kind] += l.PaymentID + " "
	}
	require.Equal(t, map[payouts.Kind]string{payouts.KindCharge: pm3 + " ", payouts.KindRefund: pm1 + " ", payouts.KindDispute: pm2 + " "}, kinds)
	require.Zero(t, payouts.Check(Name, "", got[po2], payouts.Local{Paid: map[string]payouts.Row{}}).Difference)

	require.EqualValues(t, 700, got[po3].Amount)
	require.EqualValues(t, -100, payouts.Check(Name, "", got[po3], payouts.Local{Paid: map[string]payouts.Row{}}).Difference)

	g := got[old]
	require.Equal(t, payouts.ListingUnavailable, g.Listing, "410 Gone is not a failure")
	require.Contains(t, g.Note, "six months")
	require.Empty(t, g.Lines)

	require.NotContains(t, listGCPayouts(t, p, d(-17), now), po1, "[since, until): created before since")
	require.NotContains(t, listGCPayouts(t, p, d(-210), d(-18)), po1, "created at until")
	require.Contains(t, listGCPayouts(t, p, d(-18), d(-18).Add(time.Millisecond)), po1)
}

// A page of payouts holds 500, a page of items 500.
func TestListPayoutsGCPages(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 30, 6, 0, 0, 0, time.UTC)
	s := gcfake.New(gcfake.Options{Now: func() time.Time { return now }, Seed: 6})
	url := s.Start()
	t.Cleanup(s.Close)
	start := now.Add(-40 * 24 * time.Hour)
	var many []string
	for i := range 600 {
		many = append(many, collected(s, int64(100+i), start))
	}
	big := s.PayOut(start.Add(24*time.Hour), many...)
	for i := range 500 {
		at := start.Add(48*time.Hour + time.Duration(i)*time.Minute)
		s.PayOut(at, collected(s, 100, at.Add(-3*time.Hour)))
	}
	p, err := New(Config{AccessToken: "sandbox_payouts", BaseURL: url})
	require.NoError(t, err)
	got := listGCPayouts(t, p, start, now)
	require.Len(t, got, 501)
	require.Len(t, got[big].Lines, 600)
	used := s.RequestsByPath()
	require.EqualValues(t, 2, used["/payouts"])
	require.EqualValues(t, 500+2, used["/payout_items"])
	require.EqualValues(t, 2+500+2, p.Requests())
}

func TestListPayoutsGCErrors(t *testing.T) {
	t.Parallel()
	now := time.Now().UTC()
	s := gcfake.New(gcfake.Options{Seed: 8})
	url := s.Start()
	t.Cleanup(s.Close)
	s.PayOut(now.Add(-time.Hour), collected(s, 100, now.Add(-5*time.Hour)))
	p, err := New(Config{AccessToken: "sandbox_SECRETTOKEN", BaseURL: url})
	require.NoError(t, err)
	win := payouts.Params{Since: now.Add(-2 * time.Hour), Until: now}

	require.ErrorContains(t, p.ListPayouts(context.Background(), payouts.Params{Account: "acct_1X", Since: win.Since, Until: win.Until},
		func(payouts.Payout) error { return nil }), "no connected accounts")

	s.FailNext(http.StatusInternalServerError, 1)
	err = p.ListPayouts(context.Background(), win, func(payouts.Payout) error { return nil })
	require.ErrorContains(t, err, "list gocardless payouts")
	require.NotContains(t, err.Error(), "SECRETTOKEN")

	// The payout list answers; its items do not (not a 410): a failure.
	calls := 0
	s2 := gcfake.New(gcfake.Options{Seed: 8})
	h := s2.Handler()
	s2.PayOut(now.Add(-time.Hour), collected(s2, 100, now.Add(-5*time.Hour)))
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls++
		if r.URL.Path == "/payout_items" {
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprint(w, `{"error":{"message":"Resource not found","type":"invalid_api_usage","code":404,"errors":[{"reason":"resource_not_found"}]}}`)
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)
	p2, err := New(Config{AccessToken: "sandbox_payouts", BaseURL: ts.URL})
	require.NoError(t, err)
	err = p2.ListPayouts(context.Background(), win, func(payouts.Payout) error { return nil })
	require.ErrorContains(t, err, "list gocardless payout items of PO")
	require.ErrorContains(t, err, "HTTP 404")
	require.Equal(t, 2, calls)

	stop := errors.New("stop")
	require.ErrorIs(t, p.ListPayouts(context.Background(), win, func(payouts.Payout) error { return stop }), stop)
}

func TestFinTenths(t *testing.T) {
	for in, want := range map[string]int64{"1000.0": 10000, "-12.5": -125, "300": 3000, "0.0": 0, "-0.5": -5, " 7.1 ": 71} {
		got, err := finTenths(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	for _, in := range []string{"", "1.25", "1.", ".5", "abc", "1e3", "--1", "+1", "1,000.0", "99999999999999999999.0", "1.x"} {
		_, err := finTenths(in)
		require.Error(t, err, in)
	}
	_, err := finItemLine(finItem{Type: "payment_paid_out", Amount: "12.34"})
	require.ErrorContains(t, err, `payout item payment_paid_out: amount "12.34" is not in minor units to one decimal place`)
}

// tenthsString writes tenths as GoCardless writes an item amount.
func tenthsString(n int64) string {
	s := fmt.Sprintf("%d.%d", n/10, abs64(n%10))
	if n < 0 && n > -10 {
		s = "-" + s
	}
	return s
}

// FuzzFinTenths: any tenths written as GoCardless writes them reads back,
// and whatever else reads at all reads back the same once rewritten;
// nothing panics.
func FuzzFinTenths(f *testing.F) {
	f.Add(int64(10000), "1.25")
	f.Add(int64(-125), "-0.5")
	f.Fuzz(func(t *testing.T, n int64, junk string) {
		if n > 1<<50 || n < -(1<<50) {
			t.Skip()
		}
		got, err := finTenths(tenthsString(n))
		require.NoError(t, err, tenthsString(n))
		require.Equal(t, n, got, tenthsString(n))
		if v, err := finTenths(junk); err == nil {
			again, err := finTenths(tenthsString(v))
			require.NoError(t, err)
			require.Equal(t, v, again, "%q", junk)
			require.False(t, strings.ContainsAny(strings.TrimSpace(junk), "eE,+"), "%q", junk)
		}
	})
}

func abs64(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}
