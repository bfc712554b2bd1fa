package gocardless_test

import (
	"context"
	"testing"
	"time"

	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/providers/gocardless"
	"github.com/reconciler/reconciler/providers/gocardless/gcfake"
	"github.com/reconciler/reconciler/providers/providertest"
	"github.com/reconciler/reconciler/reconcile"
)

type fake struct {
	t   *testing.T
	s   *gcfake.Server
	url string
}

func newFake(t *testing.T, now time.Time) *fake {
	s := gcfake.New(gcfake.Options{Now: func() time.Time { return now }, Seed: 9})
	url := s.Start()
	t.Cleanup(s.Close)
	return &fake{t: t, s: s, url: url}
}

func (f *fake) Provider(maxRetries int, timeout time.Duration) reconcile.Provider {
	p, err := gocardless.New(gocardless.Config{AccessToken: "sandbox_conformance", BaseURL: f.url, MaxRetries: maxRetries, Timeout: timeout,
		Sleep: func(ctx context.Context, _ time.Duration) error { return ctx.Err() }})
	if err != nil {
		f.t.Fatal(err)
	}
	return p
}

func (f *fake) AddPayment(at time.Time) string { return f.s.CreatePayment(100, "GBP", at) }
func (f *fake) Precision() time.Duration       { return time.Millisecond }
func (f *fake) PageSize() int                  { return 500 }
func (f *fake) FailNext(status, n int)         { f.s.FailNext(status, n) }
func (f *fake) SetLatency(d time.Duration)     { f.s.SetLatency(d) }
func (f *fake) Requests() int64                { return f.s.Requests() }
func (f *fake) StatusCases(at time.Time) []providertest.StatusCase {
	s := f.s
	var out []providertest.StatusCase
	add := func(raw string, pm string, when time.Time, want models.State) {
		out = append(out, providertest.StatusCase{Raw: raw, PaymentID: pm, At: when.Truncate(time.Millisecond), Want: want, Unknown: want == models.StateNone})
	}
	// noState is a known fact that moves no state (not an unknown status).
	noState := func(raw string, pm string, when time.Time) {
		out = append(out, providertest.StatusCase{Raw: raw, PaymentID: pm, At: when.Truncate(time.Millisecond), Want: models.StateNone})
	}
	ms := time.Millisecond
	pm := s.CreatePayment(100, "GBP", at)
	add("pending_submission", pm, at, models.StateCreated)
	pm = s.CreatePayment(100, "GBP", at)
	s.Submit(pm, at.Add(ms))
	add("submitted", pm, at.Add(ms), models.StateAuthorised)
	pm = s.CreatePayment(100, "GBP", at)
	s.Submit(pm, at.Add(ms))
	s.Confirm(pm, at.Add(2*ms))
	add("confirmed", pm, at.Add(2*ms), models.StateCaptured)
	paid := s.CreatePayment(100, "GBP", at)
	s.Submit(paid, at.Add(ms))
	s.Confirm(paid, at.Add(2*ms))
	s.PayOut(at.Add(3*ms), paid)
	add("paid_out", paid, at.Add(3*ms), models.StateSettled)
	pm = s.CreatePayment(100, "GBP", at)
	s.Cancel(pm, at.Add(ms))
	add("cancelled", pm, at.Add(ms), models.StateCanceled)
	pm = s.CreatePayment(100, "GBP", at)
	s.DenyApproval(pm, at.Add(ms))
	add("customer_approval_denied", pm, at.Add(ms), models.StateCanceled)
	pm = s.CreatePayment(100, "GBP", at)
	s.Submit(pm, at.Add(ms))
	s.Fail(pm, at.Add(2*ms))
	add("failed", pm, at.Add(2*ms), models.StateFailed)
	// A failure GoCardless will retry (details.will_attempt_retry true) is
	// not final, nor is its resubmission a revert.
	pm = s.CreatePayment(100, "GBP", at)
	s.Submit(pm, at.Add(ms))
	s.FailWillRetry(pm, at.Add(2*ms))
	noState("failed, will_attempt_retry", pm, at.Add(2*ms))
	s.AutoRetry(pm, at.Add(3*ms))
	noState("resubmission_requested, payment_autoretried", pm, at.Add(3*ms))
	s.Submit(pm, at.Add(4*ms))
	s.Confirm(pm, at.Add(5*ms))
	add("confirmed after a retry", pm, at.Add(5*ms), models.StateCaptured)
	late := s.CreatePayment(100, "GBP", at)
	s.Submit(late, at.Add(ms))
	s.Confirm(late, at.Add(2*ms))
	s.PayOut(at.Add(3*ms), late)
	s.Fail(late, at.Add(4*ms))
	add("failed after paid_out", late, at.Add(4*ms), models.StateFailed)
	s.LateFailureSettled(late, at.Add(5*ms))
	add("late_failure_settled", late, at.Add(5*ms), models.StateFailed)
	cb := s.CreatePayment(100, "GBP", at)
	s.Submit(cb, at.Add(ms))
	s.Confirm(cb, at.Add(2*ms))
	s.PayOut(at.Add(3*ms), cb)
	s.ChargeBack(cb, at.Add(4*ms))
	add("charged_back", cb, at.Add(4*ms), models.StateChargeback)
	pm = s.CreatePayment(100, "GBP", at)
	s.SetRawStatus(pm, "some_new_status", "some_new_action", at.Add(ms))
	add("some_new_status", pm, at.Add(ms), models.StateNone)
	early := at.Add(-15 * time.Hour) // the refund is paid a day after it is created
	rf := s.CreatePayment(100, "GBP", early)
	s.Submit(rf, early.Add(ms))
	s.Confirm(rf, early.Add(2*ms))
	// GoCardless raises amount_refunded when a refund is created, not when
	// it is paid (docs/providers/gocardless.md, "Refunds").
	s.Refund(rf, 100, at.Add(3*ms))
	add("refund created in full", rf, at.Add(3*ms), models.StateRefunded)

	// The rest of the refund lifecycle (docs/providers/gocardless.md).
	revert := func(raw, pm string, t time.Time) {
		out = append(out, providertest.StatusCase{Raw: raw, PaymentID: pm, At: t, Revert: true})
	}
	for i, step := range []string{"failed", "funds_returned"} {
		pm := s.CreatePayment(100, "GBP", early)
		s.Submit(pm, early.Add(ms))
		s.Confirm(pm, early.Add(2*ms))
		r := s.RefundCreated(pm, 40, at.Add(time.Duration(10+i)*ms))
		t := at.Add(time.Duration(20+i) * ms)
		if step == "failed" {
			s.RefundFailed(r, t)
		} else {
			s.RefundFundsReturned(r, t)
		}
		revert("refund "+step, pm, t)
	}
	odd := s.CreatePayment(100, "GBP", early)
	s.Submit(odd, early.Add(ms))
	s.Confirm(odd, early.Add(2*ms))
	r := s.RefundCreated(odd, 40, at.Add(30*ms))
	s.RefundRawAction(r, "some_new_refund_action", at.Add(31*ms))
	out = append(out, providertest.StatusCase{Raw: "refund some_new_refund_action", PaymentID: odd, At: at.Add(31 * ms), Unknown: true})
	// A payout that bounced after it was paid: a revert for each payment.
	bp := s.CreatePayment(100, "GBP", early)
	s.Submit(bp, early.Add(ms))
	s.Confirm(bp, early.Add(2*ms))
	po := s.PayOut(at.Add(40*ms), bp)
	s.BouncePayout(po, at.Add(41*ms))
	revert("payout bounced", bp, at.Add(41*ms))
	return out
}

func TestConformance(t *testing.T) {
	providertest.Run(t, func(t *testing.T, now time.Time) providertest.Fake { return newFake(t, now) })
}
