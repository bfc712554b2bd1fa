package stripe_test

import (
	"context"
	"testing"
	"time"

	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/providers/providertest"
	"github.com/reconciler/reconciler/providers/stripe"
	"github.com/reconciler/reconciler/providers/stripe/stripefake"
	"github.com/reconciler/reconciler/reconcile"
)

type fake struct {
	t   *testing.T
	s   *stripefake.Server
	url string
}

func (f *fake) Provider(maxRetries int, timeout time.Duration) reconcile.Provider {
	p, err := stripe.New(stripe.Config{APIKey: "sk_test_conformance", BaseURL: f.url, MaxRetries: maxRetries, Timeout: timeout,
		Sleep: func(ctx context.Context, _ time.Duration) error { return ctx.Err() }})
	if err != nil {
		f.t.Fatal(err)
	}
	return p
}

func (f *fake) AddPayment(at time.Time) string {
	return f.s.Account("").CreatePayment(100, "gbp", false, at)
}
func (f *fake) Precision() time.Duration   { return time.Second }
func (f *fake) PageSize() int              { return 100 }
func (f *fake) FailNext(status, n int)     { f.s.FailNext(status, n) }
func (f *fake) SetLatency(d time.Duration) { f.s.SetLatency(d) }
func (f *fake) Requests() int64            { return f.s.Requests() }
func (f *fake) StatusCases(at time.Time) []providertest.StatusCase {
	a := f.s.Account("")
	var out []providertest.StatusCase
	for i, c := range []struct {
		raw  string
		want models.State
	}{
		{"requires_payment_method", models.StateCreated}, {"requires_confirmation", models.StateCreated},
		{"requires_action", models.StateCreated}, {"processing", models.StateCreated},
		{"requires_capture", models.StateAuthorised}, {"succeeded", models.StateCaptured},
		{"canceled", models.StateCanceled}, {"requires_reauthorization", models.StateNone},
	} {
		when := at.Add(time.Duration(i) * time.Minute)
		pi := a.CreatePayment(100, "gbp", true, when)
		a.SetRawStatus(pi, c.raw, "payment_intent.processing", when.Add(time.Second))
		out = append(out, providertest.StatusCase{Raw: c.raw, PaymentID: pi, At: when.Add(time.Second), Want: c.want, Unknown: c.want == models.StateNone})
	}
	// Charges and disputes: refunded, chargeback.
	pi := a.CreatePayment(100, "gbp", false, at)
	a.Capture(pi, at.Add(time.Second))
	a.Refund(pi, 100, at.Add(2*time.Second))
	out = append(out, providertest.StatusCase{Raw: "charge.refunded", PaymentID: pi, At: at.Add(2 * time.Second), Want: models.StateRefunded})
	pi2 := a.CreatePayment(100, "gbp", false, at)
	a.Capture(pi2, at.Add(time.Second))
	dp := a.Dispute(pi2, at.Add(2*time.Second))
	a.CloseDispute(dp, "lost", at.Add(3*time.Second))
	out = append(out, providertest.StatusCase{Raw: "dispute lost", PaymentID: pi2, At: at.Add(3 * time.Second), Want: models.StateChargeback})
	pi3 := a.CreatePayment(100, "gbp", false, at.Add(-72*time.Hour))
	a.Capture(pi3, at.Add(-72*time.Hour))
	a.Payout(at.Add(4*time.Second), pi3)
	out = append(out, providertest.StatusCase{Raw: "payout.paid", PaymentID: pi3, At: at.Add(4 * time.Second), Want: models.StateSettled})
	return out
}

func TestConformance(t *testing.T) {
	providertest.Run(t, func(t *testing.T, now time.Time) providertest.Fake {
		s := stripefake.New(stripefake.Options{Now: func() time.Time { return now }, Seed: 5})
		url := s.Start()
		t.Cleanup(s.Close)
		return &fake{t: t, s: s, url: url}
	})
}
