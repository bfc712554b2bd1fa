package verify_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/reconciler/reconciler/internal/dbopen"
	"github.com/reconciler/reconciler/internal/pgtest"
	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/providers/gocardless"
	"github.com/reconciler/reconciler/providers/gocardless/gcfake"
	"github.com/reconciler/reconciler/providers/stripe"
	"github.com/reconciler/reconciler/providers/stripe/stripefake"
	"github.com/reconciler/reconciler/reconcile"
	"github.com/reconciler/reconciler/store"
	"github.com/reconciler/reconciler/verify"
)

// stripeWorld is a real PostgreSQL schema, the fake Stripe over HTTP and
// the real Stripe provider (stripe-go) reading it.
type stripeWorld struct {
	db   *pgtest.DB
	fake *stripefake.Server
	acct *stripefake.Account
	p    *stripe.Provider
	now  time.Time
}

func newStripeWorld(t *testing.T) *stripeWorld {
	t.Helper()
	db := pgtest.New(t)
	fake := stripefake.New(stripefake.Options{Seed: 7})
	url := fake.Start()
	t.Cleanup(fake.Close)
	p, err := stripe.New(stripe.Config{APIKey: "sk_test_verify", BaseURL: url, MaxRetries: 2})
	require.NoError(t, err)
	return &stripeWorld{db: db, fake: fake, acct: fake.Account(""), p: p, now: time.Now().UTC().Truncate(time.Second)}
}

func (w *stripeWorld) ago(d time.Duration) time.Time { return w.now.Add(-d) }

// seed inserts a local row of provider/account "" as a webhook worker
// would have left it, its state set an hour ago.
func seed(t *testing.T, db *pgtest.DB, provider, id string, st models.State, amount, refunded int64, edit ...func(*models.Payment)) models.Payment {
	t.Helper()
	at := time.Now().UTC().Add(-time.Hour).Truncate(time.Second)
	p := models.Payment{Provider: provider, ProviderID: id, State: st, Amount: amount, Currency: "gbp", AmountRefunded: refunded, SourceUpdatedAt: &at}
	for _, e := range edit {
		e(&p)
	}
	require.NoError(t, db.Create(&p).Error)
	return p
}

func paidOutBy(po string, at time.Time) func(*models.Payment) {
	return func(p *models.Payment) { p.PayoutID, p.SettledAt = &po, &at }
}

func (w *stripeWorld) run(t *testing.T, o verify.Options) verify.Report {
	t.Helper()
	o.DB, o.Provider = w.db.DB, stripe.Name
	if o.Reader == nil {
		o.Reader = w.p.Verifier()
	}
	if o.Now == nil {
		o.Now = func() time.Time { return w.now }
	}
	rep, err := verify.Run(context.Background(), o)
	require.NoError(t, err)
	return rep
}

// driftItem records that a run left pid for a human.
func driftItem(t *testing.T, db *pgtest.DB, provider, pid, kind, action string) {
	t.Helper()
	now := time.Now().UTC()
	run := models.Run{Provider: provider, WindowStart: now.Add(-25 * time.Hour), WindowEnd: now, StartedAt: now, FinishedAt: &now,
		Status: models.RunSucceeded, Trigger: models.TriggerManual, Notes: models.JSON(`{}`)}
	require.NoError(t, db.Create(&run).Error)
	require.NoError(t, db.Create(&models.DriftItem{RunID: run.ID, Provider: provider, ProviderID: pid, Kind: kind, Action: action, Detail: models.JSON(`{}`)}).Error)
}

func TestVerifyStripeRowsEqualToTheProviderHaveNoDifference(t *testing.T) {
	t.Parallel()
	w := newStripeWorld(t)
	a := w.acct
	h := w.ago

	captured := a.CreatePayment(2000, "gbp", false, h(5*time.Hour))
	a.Capture(captured, h(5*time.Hour))
	// The cancel trap: the released hold shows on the charge as refunded,
	// but no captured money was refunded.
	canceled := a.CreatePayment(1500, "gbp", true, h(5*time.Hour))
	a.Authorise(canceled, h(5*time.Hour))
	a.Cancel(canceled, h(4*time.Hour))
	authorised := a.CreatePayment(900, "eur", true, h(5*time.Hour))
	a.Authorise(authorised, h(5*time.Hour))
	partial := a.CreatePayment(3000, "gbp", false, h(5*time.Hour))
	a.Capture(partial, h(5*time.Hour))
	a.Refund(partial, 500, h(3*time.Hour))
	settled := a.CreatePayment(4000, "gbp", false, h(30*time.Hour))
	a.Capture(settled, h(30*time.Hour))
	// Refunded after the payout that swept it: settlement is a fact of its own.
	refundedAfterPayout := a.CreatePayment(2500, "gbp", false, h(30*time.Hour))
	a.Capture(refundedAfterPayout, h(30*time.Hour))
	po := a.Payout(h(2*time.Hour), settled, refundedAfterPayout)
	a.Refund(refundedAfterPayout, 0, h(time.Hour))
	lost := a.CreatePayment(7000, "gbp", false, h(40*time.Hour))
	a.Capture(lost, h(40*time.Hour))
	a.CloseDispute(a.Dispute(lost, h(10*time.Hour)), "lost", h(2*time.Hour))
	won := a.CreatePayment(6000, "gbp", false, h(40*time.Hour))
	a.Capture(won, h(40*time.Hour))
	a.CloseDispute(a.Dispute(won, h(10*time.Hour)), "won", h(2*time.Hour))

	seed(t, w.db, stripe.Name, captured, models.StateCaptured, 2000, 0)
	seed(t, w.db, stripe.Name, canceled, models.StateCanceled, 1500, 0)
	seed(t, w.db, stripe.Name, authorised, models.StateAuthorised, 900, 0, func(p *models.Payment) { p.Currency = "eur" })
	seed(t, w.db, stripe.Name, partial, models.StateCaptured, 3000, 500)
	seed(t, w.db, stripe.Name, settled, models.StateSettled, 4000, 0, paidOutBy(po, h(2*time.Hour)))
	seed(t, w.db, stripe.Name, refundedAfterPayout, models.StateRefunded, 2500, 2500, paidOutBy(po, h(2*time.Hour)))
	seed(t, w.db, stripe.Name, lost, models.StateChargeback, 7000, 0)
	seed(t, w.db, stripe.Name, won, models.StateCaptured, 6000, 0)
	// Settled locally without a payout to look at: Stripe's objects cannot
	// tell, so captured at the provider is no difference.
	noPayout := a.CreatePayment(1100, "gbp", false, h(6*time.Hour))
	a.Capture(noPayout, h(6*time.Hour))
	seed(t, w.db, stripe.Name, noPayout, models.StateSettled, 1100, 0)

	rep := w.run(t, verify.Options{All: true})
	require.Equal(t, 9, rep.Checked)
	require.Equal(t, 9, rep.InWindow)
	require.Empty(t, rep.Unexplained)
	require.Zero(t, rep.Differing)
	require.True(t, rep.OK())

	by := w.fake.RequestsByPath()
	require.Equal(t, int64(1), by["/v1/payouts/{id}"], "each payout read once for the whole verification")
	require.Equal(t, int64(1), by["/v1/balance_transactions"], "its balance transactions listed once")
	require.Equal(t, int64(2), by["/v1/disputes"], "disputes listed for the two disputed charges only")
	// The five created in the window are read from one list page; the
	// four created before it by id.
	require.Equal(t, int64(1), by["/v1/payment_intents"])
	require.Equal(t, int64(4), by["/v1/payment_intents/{id}"])

	// Read by id alone (NoListing), the same answer.
	rep2 := w.run(t, verify.Options{All: true, NoListing: true})
	require.Equal(t, rep.Checked, rep2.Checked)
	require.Empty(t, rep2.Unexplained)
	require.Equal(t, int64(4+9), w.fake.RequestsByPath()["/v1/payment_intents/{id}"])
}

func TestVerifyStripeRefundedLocallyCapturedAtTheProvider(t *testing.T) {
	t.Parallel()
	w := newStripeWorld(t)
	pi := w.acct.CreatePayment(5000, "gbp", false, w.ago(3*time.Hour))
	w.acct.Capture(pi, w.ago(3*time.Hour))
	seed(t, w.db, stripe.Name, pi, models.StateRefunded, 5000, 0)

	rep := w.run(t, verify.Options{All: true})
	require.Equal(t, 1, rep.Checked)
	require.Equal(t, 1, rep.Differing)
	require.Zero(t, rep.Explained)
	require.Equal(t, []verify.Difference{{ProviderID: pi, Field: verify.FieldState, Local: "refunded", Provider: "captured (succeeded)"}}, rep.Unexplained)
	require.False(t, rep.OK())

	// A repaired item explains nothing (the repair should have fixed it);
	// a refused one does.
	driftItem(t, w.db, stripe.Name, pi, models.KindBehind, models.ActionRepaired)
	rep = w.run(t, verify.Options{All: true})
	require.Len(t, rep.Unexplained, 1)
	driftItem(t, w.db, stripe.Name, pi, models.KindConflict, models.ActionRefused)
	rep = w.run(t, verify.Options{All: true})
	require.Equal(t, 1, rep.Differing)
	require.Equal(t, 1, rep.Explained)
	require.Empty(t, rep.Unexplained)
	require.Len(t, rep.ExplainedDifferences, 1)
	require.True(t, rep.OK())
}

func TestVerifyStripeWrongAmountRefunded(t *testing.T) {
	t.Parallel()
	w := newStripeWorld(t)
	pi := w.acct.CreatePayment(5000, "gbp", false, w.ago(3*time.Hour))
	w.acct.Capture(pi, w.ago(3*time.Hour))
	w.acct.Refund(pi, 1200, w.ago(2*time.Hour))
	seed(t, w.db, stripe.Name, pi, models.StateCaptured, 5000, 1000)
	other := w.acct.CreatePayment(800, "gbp", false, w.ago(3*time.Hour))
	w.acct.Capture(other, w.ago(3*time.Hour))
	seed(t, w.db, stripe.Name, other, models.StateCaptured, 799, 0, func(p *models.Payment) { p.Currency = "GBP" })

	rep := w.run(t, verify.Options{All: true})
	require.Equal(t, 2, rep.Differing)
	require.ElementsMatch(t, []verify.Difference{
		{ProviderID: pi, Field: verify.FieldAmountRefunded, Local: "1000", Provider: "1200"},
		{ProviderID: other, Field: verify.FieldAmount, Local: "799", Provider: "800"},
		{ProviderID: other, Field: verify.FieldAmountCaptured, Local: "null (amount 799)", Provider: "800"},
	}, rep.Unexplained, "currency compares case-insensitively")
}

func TestVerifyStripeNotFoundAtTheProvider(t *testing.T) {
	t.Parallel()
	w := newStripeWorld(t)
	seed(t, w.db, stripe.Name, "pi_3NotAtStripe0000000000", models.StateCaptured, 100, 0)
	rep := w.run(t, verify.Options{All: true})
	require.Equal(t, []verify.Difference{{ProviderID: "pi_3NotAtStripe0000000000", Field: verify.FieldFound, Local: "captured", Provider: "not found"}}, rep.Unexplained)
}

func TestVerifyStripePayoutFailedAfterItWasPaid(t *testing.T) {
	t.Parallel()
	w := newStripeWorld(t)
	a := w.acct
	pi := a.CreatePayment(4000, "gbp", false, w.ago(30*time.Hour))
	a.Capture(pi, w.ago(30*time.Hour))
	po := a.Payout(w.ago(3*time.Hour), pi)
	other := a.CreatePayment(700, "gbp", false, w.ago(30*time.Hour))
	a.Capture(other, w.ago(30*time.Hour))
	po2 := a.Payout(w.ago(3*time.Hour), other)
	seed(t, w.db, stripe.Name, pi, models.StateSettled, 4000, 0, paidOutBy(po, w.ago(3*time.Hour)))
	// A row naming a payout that did not pay it.
	seed(t, w.db, stripe.Name, other, models.StateSettled, 700, 0, paidOutBy(po, w.ago(3*time.Hour)))
	rep := w.run(t, verify.Options{All: true})
	require.ElementsMatch(t, []verify.Difference{
		{ProviderID: other, Field: verify.FieldState, Local: "settled", Provider: "captured (succeeded)"},
		{ProviderID: other, Field: verify.FieldPayout, Local: po, Provider: "not in " + po + " (paid)"},
	}, rep.Unexplained, "%s is in %s", other, po2)

	a.FailPayout(po, "failed", w.ago(time.Hour))
	rep = w.run(t, verify.Options{All: true})
	require.Contains(t, rep.Unexplained, verify.Difference{ProviderID: pi, Field: verify.FieldState, Local: "settled", Provider: "captured (succeeded)"})
	require.Contains(t, rep.Unexplained, verify.Difference{ProviderID: pi, Field: verify.FieldPayout, Local: po + " paid", Provider: po + " failed"})
}

func TestVerifyWindowSelectsBySourceOrSettlementTime(t *testing.T) {
	t.Parallel()
	w := newStripeWorld(t)
	a := w.acct
	mk := func() string {
		pi := a.CreatePayment(100, "gbp", false, w.ago(100*time.Hour))
		a.Capture(pi, w.ago(100*time.Hour))
		return pi
	}
	old, recentSettle, recent := mk(), mk(), mk()
	po := a.Payout(w.ago(2*time.Hour), recentSettle)
	seed(t, w.db, stripe.Name, old, models.StateCaptured, 100, 0, func(p *models.Payment) { at := w.ago(99 * time.Hour); p.SourceUpdatedAt = &at })
	seed(t, w.db, stripe.Name, recentSettle, models.StateSettled, 100, 0, func(p *models.Payment) { at := w.ago(99 * time.Hour); p.SourceUpdatedAt = &at },
		paidOutBy(po, w.ago(2*time.Hour)))
	seed(t, w.db, stripe.Name, recent, models.StateCaptured, 100, 0)
	// Another provider's and another account's rows are not this verification's.
	seed(t, w.db, gocardless.Name, "PM0000000001", models.StateCaptured, 100, 0)
	seed(t, w.db, stripe.Name, "pi_other_account", models.StateCaptured, 100, 0, func(p *models.Payment) { p.Account = "acct_1Other" })

	rec := &recorder{r: w.p.Verifier()}
	rep := w.run(t, verify.Options{All: true, Reader: rec})
	require.Equal(t, 2, rep.InWindow)
	require.ElementsMatch(t, []string{recentSettle, recent}, rec.ids())
	require.True(t, rep.OK(), "%v", rep.Unexplained)

	// A window given explicitly: [since, until).
	rep = w.run(t, verify.Options{All: true, Since: w.ago(99 * time.Hour), Until: w.ago(98 * time.Hour)})
	require.Equal(t, 2, rep.InWindow, "source_updated_at = since is in the window")
	rep = w.run(t, verify.Options{All: true, Since: w.ago(101 * time.Hour), Until: w.ago(99 * time.Hour)})
	require.Equal(t, 0, rep.InWindow, "source_updated_at = until is not")
}

// recorder records the ids asked of a reader.
type recorder struct {
	r   reconcile.CurrentReader
	mu  sync.Mutex
	got []string
}

func (r *recorder) Current(ctx context.Context, p reconcile.CurrentParams) ([]reconcile.Current, error) {
	r.mu.Lock()
	r.got = append(r.got, p.IDs...)
	r.mu.Unlock()
	return r.r.Current(ctx, p)
}

func (r *recorder) ids() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.got...)
}

func TestVerifySamplePicksNDistinctRows(t *testing.T) {
	t.Parallel()
	w := newStripeWorld(t)
	var all []string
	for i := range 60 {
		pi := w.acct.CreatePayment(int64(100+i), "gbp", false, w.ago(3*time.Hour))
		w.acct.Capture(pi, w.ago(3*time.Hour))
		seed(t, w.db, stripe.Name, pi, models.StateCaptured, int64(100+i), 0)
		all = append(all, pi)
	}
	sample := func(seed uint64, n int) (verify.Report, []string) {
		rec := &recorder{r: w.p.Verifier()}
		rep := w.run(t, verify.Options{Sample: n, Reader: rec, Rand: rand.New(rand.NewPCG(seed, 1)), PageSize: 7})
		return rep, rec.ids()
	}
	rep, ids := sample(1, 10)
	require.Equal(t, 10, rep.Checked)
	require.Equal(t, 60, rep.InWindow)
	require.Len(t, ids, 10)
	require.Len(t, distinct(ids), 10, "distinct rows")
	for _, id := range ids {
		require.Contains(t, all, id)
	}
	_, again := sample(1, 10)
	require.Equal(t, ids, again, "the same seed draws the same sample")
	_, other := sample(2, 10)
	require.NotEqual(t, ids, other, "another seed draws another sample")

	// A sample larger than the window checks the whole window once.
	rep, ids = sample(3, 1000)
	require.Equal(t, 60, rep.Checked)
	require.Len(t, distinct(ids), 60)

	// The default is a sample of 100.
	rep = w.run(t, verify.Options{})
	require.Equal(t, verify.DefaultSample, rep.Sample)
	require.Equal(t, 60, rep.Checked)

	// Uniform: over many draws of 10 of 60, each row is picked about 1/6 of
	// the time (reservoir sampling; the bound is loose enough never to flake).
	counts := map[string]int{}
	const draws = 300
	rnd := rand.New(rand.NewPCG(42, 42))
	for range draws {
		rec := &recorder{r: fixedReader{}}
		_, err := verify.Run(context.Background(), verify.Options{DB: w.db.DB, Provider: stripe.Name, Reader: rec, Sample: 10, Rand: rnd,
			Now: func() time.Time { return w.now }})
		require.NoError(t, err)
		for _, id := range rec.ids() {
			counts[id]++
		}
	}
	for _, id := range all {
		require.InDelta(t, draws/6, counts[id], 30, "row %s picked %d times", id, counts[id])
	}
}

// fixedReader answers that every payment is found captured (the uniformity
// check needs no provider).
type fixedReader struct{}

func (fixedReader) Current(_ context.Context, p reconcile.CurrentParams) ([]reconcile.Current, error) {
	out := make([]reconcile.Current, len(p.IDs))
	for i, id := range p.IDs {
		out[i] = reconcile.Current{ProviderID: id, Found: true, State: models.StateCaptured}
	}
	return out, nil
}

func distinct(ids []string) []string {
	s := slices.Clone(ids)
	slices.Sort(s)
	return slices.Compact(s)
}

func TestVerifyAllPagesThroughTheWindow(t *testing.T) {
	t.Parallel()
	w := newStripeWorld(t)
	for i := range 25 {
		pi := w.acct.CreatePayment(int64(100+i), "gbp", false, w.ago(3*time.Hour))
		w.acct.Capture(pi, w.ago(3*time.Hour))
		seed(t, w.db, stripe.Name, pi, models.StateCaptured, int64(100+i), 0)
	}
	rec := &recorder{r: w.p.Verifier()}
	rep := w.run(t, verify.Options{All: true, PageSize: 4, Reader: rec})
	require.Equal(t, 25, rep.Checked)
	require.Len(t, distinct(rec.ids()), 25)
	require.True(t, rep.OK())
}

func TestVerifyProviderFailureIsAnError(t *testing.T) {
	t.Parallel()
	w := newStripeWorld(t)
	pi := w.acct.CreatePayment(100, "gbp", false, w.ago(3*time.Hour))
	w.acct.Capture(pi, w.ago(3*time.Hour))
	seed(t, w.db, stripe.Name, pi, models.StateCaptured, 100, 0)
	w.fake.SetFailureRate(http.StatusInternalServerError, 1)
	_, err := verify.Run(context.Background(), verify.Options{DB: w.db.DB, Provider: stripe.Name, Reader: w.p.Verifier(), All: true})
	require.ErrorContains(t, err, "HTTP 500")
}

func TestVerifyOptionsValidate(t *testing.T) {
	t.Parallel()
	r := fixedReader{}
	now := time.Now()
	for _, c := range []struct {
		o    verify.Options
		want string
	}{
		{verify.Options{Provider: "stripe", Reader: r}, "DB"},
		{verify.Options{Provider: "stripe", Reader: r, All: true, Sample: 3}, "mutually exclusive"},
		{verify.Options{Provider: "stripe", Reader: r, Sample: -1}, "negative"},
		{verify.Options{Provider: "stripe", Reader: r, Since: now, Until: now}, "not before"},
	} {
		if c.want != "DB" {
			c.o.DB = &gorm.DB{} // non-nil is all Validate needs; never used
		}
		require.ErrorContains(t, c.o.Validate(), c.want)
	}
}

// ---- GoCardless ------------------------------------------------------------

// newGoCardlessWorld is a real PostgreSQL schema, the fake GoCardless over
// HTTP and the real GoCardless provider reading it; h(d) is d before now.
func newGoCardlessWorld(t *testing.T, seed int64) (db *pgtest.DB, fake *gcfake.Server, p *gocardless.Provider, now time.Time, h func(time.Duration) time.Time) {
	t.Helper()
	db = pgtest.New(t)
	fake = gcfake.New(gcfake.Options{Seed: seed})
	url := fake.Start()
	t.Cleanup(fake.Close)
	p, err := gocardless.New(gocardless.Config{AccessToken: "sandbox_verify", BaseURL: url})
	require.NoError(t, err)
	now = time.Now().UTC().Truncate(time.Millisecond)
	return db, fake, p, now, func(d time.Duration) time.Time { return now.Add(-d) }
}

func TestVerifyGoCardless(t *testing.T) {
	t.Parallel()
	db, fake, p, now, h := newGoCardlessWorld(t, 3)

	confirmed := fake.CreatePayment(1000, "GBP", h(100*time.Hour))
	fake.Submit(confirmed, h(90*time.Hour))
	fake.Confirm(confirmed, h(10*time.Hour))
	paid := fake.CreatePayment(2000, "GBP", h(100*time.Hour))
	fake.Submit(paid, h(90*time.Hour))
	fake.Confirm(paid, h(20*time.Hour))
	po := fake.PayOut(h(5*time.Hour), paid)
	refunded := fake.CreatePayment(3000, "GBP", h(100*time.Hour))
	fake.Submit(refunded, h(90*time.Hour))
	fake.Confirm(refunded, h(20*time.Hour))
	fake.Refund(refunded, 0, h(6*time.Hour))
	partly := fake.CreatePayment(4000, "GBP", h(100*time.Hour))
	fake.Submit(partly, h(90*time.Hour))
	fake.Confirm(partly, h(20*time.Hour))
	fake.Refund(partly, 1000, h(6*time.Hour))
	failed := fake.CreatePayment(500, "GBP", h(100*time.Hour))
	fake.Submit(failed, h(90*time.Hour))
	fake.Fail(failed, h(8*time.Hour))
	// Settled locally while GoCardless has not paid it out: GoCardless can tell.
	notPaid := fake.CreatePayment(600, "GBP", h(100*time.Hour))
	fake.Submit(notPaid, h(90*time.Hour))
	fake.Confirm(notPaid, h(10*time.Hour))
	// Paid out by another payout than the row says.
	otherPO := fake.CreatePayment(700, "GBP", h(100*time.Hour))
	fake.Submit(otherPO, h(90*time.Hour))
	fake.Confirm(otherPO, h(20*time.Hour))
	po2 := fake.PayOut(h(4*time.Hour), otherPO)

	seed(t, db, gocardless.Name, confirmed, models.StateCaptured, 1000, 0)
	seed(t, db, gocardless.Name, paid, models.StateSettled, 2000, 0, paidOutBy(po, h(5*time.Hour)))
	seed(t, db, gocardless.Name, refunded, models.StateRefunded, 3000, 3000)
	seed(t, db, gocardless.Name, partly, models.StateCaptured, 4000, 1000)
	seed(t, db, gocardless.Name, failed, models.StateFailed, 500, 0)
	seed(t, db, gocardless.Name, notPaid, models.StateSettled, 600, 0)
	seed(t, db, gocardless.Name, otherPO, models.StateSettled, 700, 0, paidOutBy(po, h(4*time.Hour)))
	seed(t, db, gocardless.Name, "PM00NOTATGOCARDLESS", models.StateCaptured, 100, 0)

	rep, err := verify.Run(context.Background(), verify.Options{DB: db.DB, Provider: gocardless.Name, Reader: p.Verifier(), All: true,
		Now: func() time.Time { return now }})
	require.NoError(t, err)
	require.Equal(t, 8, rep.Checked)
	require.ElementsMatch(t, []verify.Difference{
		{ProviderID: notPaid, Field: verify.FieldState, Local: "settled", Provider: "captured (confirmed)"},
		{ProviderID: otherPO, Field: verify.FieldPayout, Local: po, Provider: po2 + " paid"},
		{ProviderID: "PM00NOTATGOCARDLESS", Field: verify.FieldFound, Local: "captured", Provider: "not found"},
	}, rep.Unexplained)
	require.Equal(t, 3, rep.Differing)
	by := fake.RequestsByPath()
	require.Equal(t, int64(8), by["/payments/{id}"])
	require.Equal(t, int64(2), by["/payouts/{id}"], "each payout read once")
}

func TestVerifyCompare(t *testing.T) {
	t.Parallel()
	i64 := func(v int64) *int64 { return &v }
	str := func(v string) *string { return &v }
	row := models.Payment{ProviderID: "pi_1", State: models.StateCaptured, Amount: 1000, Currency: "gbp"}
	cur := reconcile.Current{ProviderID: "pi_1", Found: true, State: models.StateCaptured, Amount: 1000, Currency: "gbp", AmountCaptured: 1000, RawStatus: "succeeded"}
	with := func(f func(*models.Payment, *reconcile.Current)) (models.Payment, reconcile.Current) {
		r, c := row, cur
		f(&r, &c)
		return r, c
	}
	cases := []struct {
		name   string
		f      func(*models.Payment, *reconcile.Current)
		fields []string
	}{
		{"equal", func(*models.Payment, *reconcile.Current) {}, nil},
		{"settled, settlement unknown", func(r *models.Payment, _ *reconcile.Current) { r.State = models.StateSettled }, nil},
		{"settled, provider knows it is not", func(r *models.Payment, c *reconcile.Current) { r.State = models.StateSettled; c.SettlementKnown = true },
			[]string{verify.FieldState}},
		{"captured, provider settled", func(_ *models.Payment, c *reconcile.Current) { c.State = models.StateSettled; c.SettlementKnown = true },
			[]string{verify.FieldState}},
		{"chargeback without the provider", func(r *models.Payment, _ *reconcile.Current) { r.State = models.StateChargeback }, []string{verify.FieldState}},
		{"unknown status", func(_ *models.Payment, c *reconcile.Current) { c.State, c.Unknown = models.StateNone, true }, []string{verify.FieldState}},
		{"not found", func(r *models.Payment, c *reconcile.Current) {
			r.Amount = 1
			*c = reconcile.Current{ProviderID: "pi_1"}
		}, []string{verify.FieldFound}},
		{"currency", func(_ *models.Payment, c *reconcile.Current) { c.Currency = "eur" }, []string{verify.FieldCurrency}},
		{"partial capture recorded", func(r *models.Payment, c *reconcile.Current) { r.AmountCaptured = i64(600); c.AmountCaptured = 600 }, nil},
		{"partial capture not recorded", func(_ *models.Payment, c *reconcile.Current) { c.AmountCaptured = 600 }, []string{verify.FieldAmountCaptured}},
		{"nothing captured", func(_ *models.Payment, c *reconcile.Current) { c.AmountCaptured = 0 }, nil},
		{"payout not checked", func(r *models.Payment, _ *reconcile.Current) { r.PayoutID = str("po_1") }, nil},
		{"payout matches", func(r *models.Payment, c *reconcile.Current) {
			r.PayoutID = str("po_1")
			c.SettlementKnown, c.PayoutID, c.PayoutStatus = true, "po_1", "paid"
		}, nil},
		{"payout canceled", func(r *models.Payment, c *reconcile.Current) {
			r.PayoutID = str("po_1")
			c.SettlementKnown, c.PayoutID, c.PayoutStatus = true, "po_1", "canceled"
		}, []string{verify.FieldPayout}},
		{"every field", func(r *models.Payment, c *reconcile.Current) {
			r.State, r.Amount, r.Currency, r.AmountRefunded, r.PayoutID = models.StateRefunded, 999, "usd", 5, str("po_1")
			c.SettlementKnown = true
		}, []string{verify.FieldState, verify.FieldAmount, verify.FieldCurrency, verify.FieldAmountRefunded, verify.FieldAmountCaptured, verify.FieldPayout}},
	}
	for _, c := range cases {
		r, cu := with(c.f)
		var got []string
		for _, d := range verify.Compare(r, cu) {
			require.Equal(t, "pi_1", d.ProviderID)
			got = append(got, d.Field)
		}
		require.Equal(t, c.fields, got, c.name)
	}
}

// TestVerifyOnTheEmbeddedStore runs the window and the drift-item lookup on
// SQLite, the store `reconciler demo` and a trial install use.
func TestVerifyOnTheEmbeddedStore(t *testing.T) {
	t.Parallel()
	db := pgtest.NewSQLite(t)
	fake := stripefake.New(stripefake.Options{Seed: 9})
	url := fake.Start()
	t.Cleanup(fake.Close)
	p, err := stripe.New(stripe.Config{APIKey: "sk_test_verify", BaseURL: url})
	require.NoError(t, err)
	now := time.Now().UTC().Truncate(time.Second)
	a := fake.Account("")
	in := a.CreatePayment(100, "gbp", false, now.Add(-3*time.Hour))
	a.Capture(in, now.Add(-3*time.Hour))
	edge := a.CreatePayment(200, "gbp", false, now.Add(-30*time.Hour))
	a.Capture(edge, now.Add(-30*time.Hour))
	out := a.CreatePayment(300, "gbp", false, now.Add(-30*time.Hour))
	a.Capture(out, now.Add(-30*time.Hour))
	seed(t, db, stripe.Name, in, models.StateRefunded, 100, 0)
	seed(t, db, stripe.Name, edge, models.StateCaptured, 200, 0, func(p *models.Payment) { at := now.Add(-25 * time.Hour); p.SourceUpdatedAt = &at })
	seed(t, db, stripe.Name, out, models.StateCaptured, 300, 0, func(p *models.Payment) { at := now.Add(-25*time.Hour - time.Second); p.SourceUpdatedAt = &at })
	o := verify.Options{DB: db.DB, Provider: stripe.Name, Reader: p.Verifier(), All: true, Now: func() time.Time { return now }}
	rep, err := verify.Run(context.Background(), o)
	require.NoError(t, err)
	require.Equal(t, 2, rep.InWindow, "since is inclusive")
	require.Len(t, rep.Unexplained, 1)
	driftItem(t, db, stripe.Name, in, models.KindConflict, models.ActionRefused)
	o.Reader = p.Verifier()
	rep, err = verify.Run(context.Background(), o)
	require.NoError(t, err)
	require.Equal(t, 1, rep.Explained)
	require.True(t, rep.OK())
}

// countingStore counts the window reads verify makes through it.
type countingStore struct {
	store.Store
	mu    sync.Mutex
	pages int
}

func (c *countingStore) PaymentsInWindow(ctx context.Context, q store.PaymentQuery) ([]models.Payment, error) {
	c.mu.Lock()
	c.pages++
	c.mu.Unlock()
	return c.Store.PaymentsInWindow(ctx, q)
}

// TestVerifyReadsThroughOptionsStore: a caller's store, when given, is the
// one the window is read through, in both modes.
func TestVerifyReadsThroughOptionsStore(t *testing.T) {
	t.Parallel()
	w := newStripeWorld(t)
	for i := range 5 {
		pi := w.acct.CreatePayment(int64(100+i), "gbp", false, w.ago(3*time.Hour))
		w.acct.Capture(pi, w.ago(3*time.Hour))
		seed(t, w.db, stripe.Name, pi, models.StateCaptured, int64(100+i), 0)
	}
	st := &countingStore{Store: dbopen.Store(w.db.DB, nil)}
	rep := w.run(t, verify.Options{All: true, PageSize: 2, Store: st})
	require.Equal(t, 5, rep.Checked)
	require.True(t, rep.OK())
	require.Equal(t, 4, st.pages, "three pages and the empty one")
	rep = w.run(t, verify.Options{Sample: 3, Store: st, Rand: rand.New(rand.NewPCG(1, 1))})
	require.Equal(t, 3, rep.Checked)
	require.Equal(t, 5, rep.InWindow)
	require.Equal(t, 6, st.pages)
}

// verify --all lists the provider's payments created in the window: one
// with money and no local row is a difference ("found": missing locally),
// recorded as a missing_local item; one still at created (nothing
// authorised or paid) is none.
func TestVerifyAllFindsPaymentsMissingLocally(t *testing.T) {
	t.Parallel()
	w := newStripeWorld(t)
	a := w.acct
	known := a.CreatePayment(1000, "gbp", false, w.ago(3*time.Hour))
	a.Capture(known, w.ago(3*time.Hour))
	seed(t, w.db, stripe.Name, known, models.StateCaptured, 1000, 0)
	missing := a.CreatePayment(2500, "gbp", false, w.ago(2*time.Hour))
	a.Capture(missing, w.ago(2*time.Hour))
	a.CreatePayment(700, "gbp", true, w.ago(time.Hour)) // at requires_payment_method: no money

	rep := w.run(t, verify.Options{All: true, Record: true})
	require.Equal(t, 2, rep.InWindow)
	require.Equal(t, 2, rep.Checked)
	require.Equal(t, []verify.Difference{{ProviderID: missing, Field: verify.FieldFound, Local: "missing", Provider: "captured (succeeded)"}}, rep.Unexplained)
	var items []models.DriftItem
	require.NoError(t, w.db.Where("run_id = ?", rep.RunID).Find(&items).Error)
	require.Len(t, items, 1)
	require.Equal(t, models.KindMissingLocal, items[0].Kind)
	require.Equal(t, models.ActionReported, items[0].Action)

	// Sampled verification draws from the local rows: the missing one is
	// not in its population.
	rep = w.run(t, verify.Options{Sample: 10})
	require.Equal(t, 1, rep.InWindow)
	require.Empty(t, rep.Unexplained)

	// A run that left an item for it explains it.
	driftItem(t, w.db, stripe.Name, missing, models.KindUnknownStatus, models.ActionReported)
	rep = w.run(t, verify.Options{All: true})
	require.Empty(t, rep.Unexplained)
	require.Equal(t, 1, rep.Explained)
}

// streamingLister is a provider's lister that counts the lists in flight
// and, until want of them have begun, holds each back (at most a few
// seconds): a verification that lists its stretches one after another
// never has more than one in flight.
type streamingLister struct {
	*stripe.Verifier
	want    int
	fail    string // a list of a stretch starting at this time fails
	mu      sync.Mutex
	begun   int
	now     int
	most    int
	windows []reconcile.ListParams
	all     chan struct{}
}

func (l *streamingLister) ListCurrent(ctx context.Context, lp reconcile.ListParams, fn func([]reconcile.Current) error) error {
	l.mu.Lock()
	l.windows = append(l.windows, lp)
	l.begun++
	l.now++
	l.most = max(l.most, l.now)
	if l.begun == l.want {
		close(l.all)
	}
	l.mu.Unlock()
	defer func() { l.mu.Lock(); l.now--; l.mu.Unlock() }()
	select {
	case <-l.all:
	case <-time.After(3 * time.Second):
	}
	if l.fail != "" && lp.Since.Format(time.RFC3339) == l.fail {
		return errors.New("planted failure of one stretch")
	}
	return l.Verifier.ListCurrent(ctx, lp, fn)
}

// verify --all over a window with more rows than a stretch is given lists
// stretches of the window's time at once (a list read through its cursor
// makes one request an answer's time), and finds what one list finds:
// every payment once, the same differences in the same order.
func TestVerifyListsStretchesOfALargeWindowAtOnce(t *testing.T) {
	t.Parallel()
	w := newStripeWorld(t)
	for i := range 48 {
		at := w.ago(time.Duration(i)*7*time.Minute + 5*time.Minute)
		pi := w.acct.CreatePayment(int64(100+i), "gbp", false, at)
		w.acct.Capture(pi, at)
		st, amount := models.StateCaptured, int64(100+i)
		if i%10 == 3 {
			amount++ // a difference
		}
		seed(t, w.db, stripe.Name, pi, st, amount, 0)
	}
	missing := w.acct.CreatePayment(999, "gbp", false, w.ago(3*time.Hour))
	w.acct.Capture(missing, w.ago(3*time.Hour))
	since := w.ago(6 * time.Hour)

	one := &streamingLister{Verifier: w.p.Verifier(), want: 1, all: make(chan struct{})}
	rep1 := w.run(t, verify.Options{All: true, Since: since, Reader: one, PageSize: 5})
	require.Len(t, one.windows, 1, "48 rows: one list")
	many := &streamingLister{Verifier: w.p.Verifier(), want: 4, all: make(chan struct{})}
	rep4 := w.run(t, verify.Options{All: true, Since: since, Reader: many, PageSize: 5, StreamRows: 10})

	require.Equal(t, 4, many.most, "four stretches listed at once")
	slices.SortFunc(many.windows, func(a, b reconcile.ListParams) int { return a.Since.Compare(b.Since) })
	require.Equal(t, since, many.windows[0].Since)
	require.Equal(t, w.now, many.windows[3].Until)
	for i := 1; i < 4; i++ {
		require.Equal(t, many.windows[i-1].Until, many.windows[i].Since, "the stretches partition the window")
	}
	for _, rep := range []verify.Report{rep1, rep4} {
		require.Equal(t, 49, rep.InWindow)
		require.Equal(t, 49, rep.Checked)
		require.Equal(t, 6, rep.Differing)
		require.Len(t, rep.Unexplained, 11, "amount and amount_captured for each of five, found for one")
		require.True(t, slices.IsSortedFunc(rep.Unexplained, func(a, b verify.Difference) int { return strings.Compare(a.ProviderID, b.ProviderID) }),
			"the differences by provider_id")
		require.Contains(t, rep.Unexplained, verify.Difference{ProviderID: missing, Field: verify.FieldFound, Local: "missing", Provider: "captured (succeeded)"})
	}
	require.Equal(t, rep1.Unexplained, rep4.Unexplained)

	// A lister whose provider answers late asks for more stretches (as
	// many as its latency needs, one for every two fifths of StreamRows
	// rows at most): six here, the same report.
	late := &lateStreamingLister{streamingLister{Verifier: w.p.Verifier(), want: 6, all: make(chan struct{})}}
	rep6 := w.run(t, verify.Options{All: true, Since: since, Reader: late, PageSize: 5, StreamRows: 10})
	require.Equal(t, 6, late.most, "six stretches listed at once")
	require.Len(t, late.windows, 6)
	require.Equal(t, rep1.Unexplained, rep6.Unexplained)
	require.Equal(t, 49, rep6.Checked)

	// A stretch whose list fails fails the verification, and it returns.
	bad := &streamingLister{Verifier: w.p.Verifier(), want: 4, all: make(chan struct{}), fail: many.windows[2].Since.Format(time.RFC3339)}
	_, err := verify.Run(context.Background(), verify.Options{DB: w.db.DB, Provider: stripe.Name, Reader: bad, All: true, Since: since,
		Now: func() time.Time { return w.now }, PageSize: 5, StreamRows: 10})
	require.ErrorContains(t, err, "planted failure of one stretch")
}

// lateStreamingLister is a streamingLister whose provider answers late: it
// asks for six stretches.
type lateStreamingLister struct{ streamingLister }

func (*lateStreamingLister) ListStretches(context.Context, string) int { return 6 }

// warmingReader records the payouts verify asks to be read ahead.
type warmingReader struct {
	*stripe.Verifier
	mu     sync.Mutex
	warmed []string
}

func (r *warmingReader) WarmPayouts(ctx context.Context, account string, ids []string) {
	r.mu.Lock()
	r.warmed = append(r.warmed, ids...)
	r.mu.Unlock()
	r.Verifier.WarmPayouts(ctx, account, ids)
}

// verify --all reads the payouts its window's rows name beside its
// listing (a payout's transactions are one list read through its cursor),
// each once, and finds what it found reading each when a page named it.
func TestVerifyAllReadsTheWindowsPayoutsBeside(t *testing.T) {
	t.Parallel()
	w := newStripeWorld(t)
	a := w.acct
	var payouts []string
	for p := range 3 {
		var pis []string
		for i := range 4 {
			pi := a.CreatePayment(int64(1000+10*p+i), "gbp", false, w.ago(30*time.Hour))
			a.Capture(pi, w.ago(30*time.Hour))
			pis = append(pis, pi)
		}
		po := a.Payout(w.ago(3*time.Hour), pis...)
		for i, pi := range pis {
			seed(t, w.db, stripe.Name, pi, models.StateSettled, int64(1000+10*p+i), 0, paidOutBy(po, w.ago(3*time.Hour)))
		}
		payouts = append(payouts, po)
	}
	// One row names a payout that did not pay it.
	wrong := a.CreatePayment(700, "gbp", false, w.ago(30*time.Hour))
	a.Capture(wrong, w.ago(30*time.Hour))
	seed(t, w.db, stripe.Name, wrong, models.StateSettled, 700, 0, paidOutBy(payouts[1], w.ago(3*time.Hour)))
	slices.Sort(payouts)

	before := w.fake.RequestsByPath()
	r := &warmingReader{Verifier: w.p.Verifier()}
	rep := w.run(t, verify.Options{All: true, Since: w.ago(48 * time.Hour), Reader: r, PageSize: 3})
	after := w.fake.RequestsByPath()
	require.Equal(t, payouts, r.warmed, "the window's payouts, each once")
	require.Equal(t, int64(3), after["/v1/payouts/{id}"]-before["/v1/payouts/{id}"], "each payout read once")
	require.Equal(t, 13, rep.Checked)
	require.Equal(t, []verify.Difference{
		{ProviderID: wrong, Field: verify.FieldState, Local: "settled", Provider: "captured (succeeded)"},
		{ProviderID: wrong, Field: verify.FieldPayout, Local: payouts[1], Provider: "not in " + payouts[1] + " (paid)"},
	}, rep.Unexplained)

	// Without reading ahead, the same.
	v := w.p.Verifier()
	plain := w.run(t, verify.Options{All: true, Since: w.ago(48 * time.Hour), PageSize: 3, Reader: struct {
		reconcile.CurrentReader
		reconcile.CurrentLister
	}{v, v}})
	require.Equal(t, rep.Unexplained, plain.Unexplained)
	require.Equal(t, rep.Checked, plain.Checked)
}

// GoCardless: verify --all over a window its payments were created in
// lists them (500 a page) and reads none of them again by id; only the rows
// the listing did not name (created before the window) are read by id, a
// few at once, and each payout is read once however many ask for it.
// Until issue 16's sixteenth session the GoCardless reader ignored what
// the listing had read and read every payment by id, one after another.
func TestVerifyGoCardlessReadsListedPaymentsOnce(t *testing.T) {
	t.Parallel()
	db, fake, p, now, h := newGoCardlessWorld(t, 5)
	// n payments from amount up, created, submitted and confirmed at those
	// times before now; seedAll gives them local rows.
	confirmed := func(n int, amount int64, created, submitted, confirmed time.Duration) []string {
		var ids []string
		for i := range n {
			pm := fake.CreatePayment(amount+int64(i), "GBP", h(created))
			fake.Submit(pm, h(submitted))
			fake.Confirm(pm, h(confirmed))
			ids = append(ids, pm)
		}
		return ids
	}
	seedAll := func(ids []string, amount int64, st models.State, edit ...func(*models.Payment)) {
		for i, pm := range ids {
			seed(t, db, gocardless.Name, pm, st, amount+int64(i), 0, edit...)
		}
	}
	paid := confirmed(30, 1000, 20*time.Hour, 19*time.Hour, 10*time.Hour)
	po := fake.PayOut(h(5*time.Hour), paid[:10]...)
	seedAll(paid[:10], 1000, models.StateSettled, paidOutBy(po, h(5*time.Hour)))
	seedAll(paid[10:], 1010, models.StateCaptured)
	// Created before the window, paid out in it by one payout: not listed,
	// read by id, a few at once, their payout read once.
	older := confirmed(12, 900, 100*time.Hour, 90*time.Hour, 30*time.Hour)
	po2 := fake.PayOut(h(6*time.Hour), older...)
	seedAll(older, 900, models.StateSettled, paidOutBy(po2, h(6*time.Hour)))
	// A listed payment whose row is wrong.
	require.NoError(t, db.Model(&models.Payment{}).Where("provider_id = ?", paid[20]).Update("amount_refunded", 5).Error)

	before := fake.RequestsByPath()
	rep, err := verify.Run(context.Background(), verify.Options{DB: db.DB, Provider: gocardless.Name, Reader: p.Verifier(), All: true,
		Since: h(24 * time.Hour), Now: func() time.Time { return now }})
	require.NoError(t, err)
	after := fake.RequestsByPath()
	require.Equal(t, 42, rep.Checked)
	require.Equal(t, []verify.Difference{{ProviderID: paid[20], Field: verify.FieldAmountRefunded, Local: "5", Provider: "0"}}, rep.Unexplained)
	require.Equal(t, int64(1), after["/payments"]-before["/payments"], "one page lists the window")
	require.Equal(t, int64(12), after["/payments/{id}"]-before["/payments/{id}"], "only the payments the listing did not name are read by id")
	require.Equal(t, int64(2), after["/payouts/{id}"]-before["/payouts/{id}"], "each payout read once")
}
