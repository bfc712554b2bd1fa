package reconcile_test

// The fault suite's in-process half: malformed provider responses and a 429
// storm, through the real stripe-go client over HTTP against the fake.
// The binary half (SIGKILL, a cut database connection) is in
// cmd/reconciler/faults_test.go.

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/reconciler/reconciler/internal/pgtest"
	"github.com/reconciler/reconciler/internal/webhooksim"
	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/providers/stripe"
	"github.com/reconciler/reconciler/providers/stripe/stripefake"
	"github.com/reconciler/reconciler/reconcile"
)

// faultFixture builds an account whose listed events all fall in distinct
// seconds, so that a page boundary is a time boundary: an anchor payment
// three days back (outside tonight's window), then 150 payments a minute
// apart over the window, captured (a fifth with manual capture), every
// tenth refunded. The payment_intent.created webhooks of even payments were
// delivered (those rows exist); everything else was missed.
func faultFixture(e *env) (pis []string) {
	e.t.Helper()
	anchor := e.acct.CreatePayment(100, "gbp", false, at(-72))
	e.acct.Capture(anchor, at(-72).Add(time.Second))
	base := at(-20)
	for i := range 150 {
		t0 := base.Add(time.Duration(i) * time.Minute)
		manual := i%5 == 0
		pi := e.acct.CreatePayment(int64(1000+i), "gbp", manual, t0)
		if manual {
			e.acct.Authorise(pi, t0.Add(10*time.Second))
		}
		e.acct.Capture(pi, t0.Add(30*time.Second))
		if i%10 == 3 {
			e.acct.Refund(pi, int64(1000+i), t0.Add(45*time.Second))
		}
		pis = append(pis, pi)
	}
	even := map[string]bool{}
	for i, pi := range pis {
		if i%2 == 0 {
			even[pi] = true
		}
	}
	e.deliver(func(_ int, d webhooksim.Delivery) bool {
		return d.EventType == "payment_intent.created" && len(d.Facts) == 1 && even[d.Facts[0].PaymentID] || d.At.Before(at(-48))
	})
	return pis
}

// faultProvider is a provider that retries patiently without sleeping.
func (e *env) faultProvider(maxRetries int) *stripe.Provider {
	p, err := stripe.New(stripe.Config{APIKey: "sk_test_reconciler", BaseURL: e.url, MaxRetries: maxRetries,
		Sleep: func(ctx context.Context, _ time.Duration) error { return ctx.Err() }})
	require.NoError(e.t, err)
	return p
}

func (e *env) tryRun(mod func(*reconcile.Options)) (reconcile.Result, error) {
	e.t.Helper()
	o := reconcile.Options{DB: e.db.DB, Provider: e.faultProvider(10), Now: func() time.Time { return now }, StuckLimit: -1, BatchSize: 25}
	if mod != nil {
		mod(&o)
	}
	return reconcile.Run(context.Background(), o)
}

type rowState struct {
	State          models.State
	At             time.Time
	Amount         int64
	Currency       string
	AmountRefunded int64
}

func (e *env) rows() map[string]rowState {
	e.t.Helper()
	var ps []models.Payment
	require.NoError(e.t, e.db.Where("provider = 'stripe'").Find(&ps).Error)
	out := map[string]rowState{}
	for _, p := range ps {
		r := rowState{State: p.State, Amount: p.Amount, Currency: p.Currency, AmountRefunded: p.AmountRefunded}
		if p.SourceUpdatedAt != nil {
			r.At = p.SourceUpdatedAt.UTC()
		}
		out[p.ProviderID] = r
	}
	return out
}

// syntheticEvents are the events runs recorded.
func (e *env) syntheticEvents() map[string]bool {
	var ids []string
	require.NoError(e.t, e.db.Raw(`SELECT event_id FROM webhook_events WHERE synthetic`).Scan(&ids).Error)
	out := map[string]bool{}
	for _, id := range ids {
		out[id] = true
	}
	return out
}

// assertBatchesWhole: every run's counters equal the items and events it
// wrote, so no batch was half-written (each is one transaction with its
// counters).
func (e *env) assertBatchesWhole() {
	e.t.Helper()
	var bad []struct {
		ID                 int64
		Counted, Items     int64
		Synthetic, Written int64
	}
	require.NoError(e.t, e.db.Raw(`SELECT r.id, r.repaired + r.refused + r.reported AS counted,
		(SELECT count(*) FROM drift_items d WHERE d.run_id = r.id) AS items,
		r.synthetic_events AS synthetic, (SELECT count(*) FROM webhook_events w WHERE w.run_id = r.id) AS written
		FROM reconciliation_runs r WHERE NOT r.dry_run`).Scan(&bad).Error)
	for _, r := range bad {
		require.Equal(e.t, r.Counted, r.Items, "run %d: items counted vs written", r.ID)
		require.Equal(e.t, r.Synthetic, r.Written, "run %d: synthetic events counted vs written", r.ID)
	}
}

// A page that cannot be decoded fails the run with an error naming the
// request, and nothing of that page is written; the pages before it are.
// The rerun (the fault gone) converges.
func TestFaultMalformedPageFailsTheRunAndWritesNothingOfIt(t *testing.T) {
	for _, c := range []struct{ kind, want string }{
		{stripefake.CorruptTruncated, "list stripe events"},
		{stripefake.CorruptWrongTypes, "list stripe events"},
		{stripefake.CorruptWrongObjectTypes, "decode payment intent in stripe event evt_"},
	} {
		t.Run(c.kind, func(t *testing.T) {
			e := newEnv(t)
			forbidBackwards(t, e.db.DB)
			faultFixture(e)
			before := e.rows()
			// The anchor request and the first page are served clean; the
			// second page of events is corrupted.
			e.fake.CorruptAfter(c.kind, 2, 1)
			res, err := e.tryRun(nil)
			require.Error(t, err)
			t.Logf("%s: %v", c.kind, err)
			require.Contains(t, err.Error(), c.want)
			require.Equal(t, models.RunFailed, res.Run.Status)
			require.NotNil(t, res.Run.Error)
			require.Contains(t, *res.Run.Error, c.want)

			pages := e.fake.Corrupted()
			require.Len(t, pages, 1)
			require.NotEmpty(t, pages[0].Events)
			cut := slices.MinFunc(pages[0].Created, func(a, b time.Time) int { return a.Compare(b) })
			recorded := e.syntheticEvents()
			for _, id := range pages[0].Events {
				require.False(t, recorded[id], "event %s of the corrupted page was recorded", id)
			}
			after := e.rows()
			moved := 0
			for id, r := range after {
				if b, ok := before[id]; ok && b == r {
					continue
				}
				moved++
				require.True(t, r.At.Before(cut), "payment %s moved to %s@%s by the corrupted page (it starts at %s)", id, r.State, r.At, cut)
			}
			require.Positive(t, moved, "the page before the corrupted one was written")
			e.assertBatchesWhole()

			res2 := e.run(func(o *reconcile.Options) { o.BatchSize = 25 })
			e.assertConverged(res.Run.ID, res2.Run.ID)
			e.assertBatchesWhole()
			e.verifyEvery()
		})
	}
}

// newFaultEnv is newEnv without t.Parallel, for tests that compare two
// environments.
func newFaultEnv(t *testing.T) *env {
	t.Helper()
	db := pgtest.New(t)
	fake := stripefake.New(stripefake.Options{Now: func() time.Time { return now }, Seed: 42})
	url := fake.Start()
	t.Cleanup(fake.Close)
	return &env{t: t, db: db, fake: fake, acct: fake.Account(""), url: url}
}

type outcome struct {
	rows      map[string]rowState
	items     []string // provider_id kind/action, sorted
	synthetic []string
	run       models.Run
}

func (e *env) outcome(res reconcile.Result) outcome {
	o := outcome{rows: e.rows(), synthetic: syntheticIDs(e.t, e.db.DB), run: res.Run}
	for _, it := range e.items(res.Run.ID) {
		o.items = append(o.items, it.ProviderID+" "+it.Kind+"/"+it.Action)
	}
	slices.Sort(o.items)
	return o
}

// Fields Stripe never sent, on every object at every depth (a newer API
// version adds fields without notice), are ignored: the run's outcome is
// exactly a clean run's.
func TestFaultUnknownFieldsAreTolerated(t *testing.T) {
	t.Parallel()
	var got [2]outcome
	for i, kind := range []string{"", stripefake.CorruptUnknownFields} {
		e := newFaultEnv(t)
		forbidBackwards(t, e.db.DB)
		faultFixture(e)
		if kind != "" {
			e.fake.CorruptNext(kind, 1000)
		}
		res := e.run(func(o *reconcile.Options) { o.BatchSize = 25 })
		if kind != "" {
			require.NotEmpty(t, e.fake.Corrupted(), "the fields were added")
		}
		e.assertConverged(res.Run.ID)
		e.verifyEvery()
		got[i] = e.outcome(res)
	}
	clean, odd := got[0], got[1]
	require.Equal(t, clean.rows, odd.rows)
	require.Equal(t, clean.items, odd.items)
	require.Equal(t, clean.synthetic, odd.synthetic)
	require.Equal(t, [6]int64{clean.run.Examined, clean.run.InSync, clean.run.Repaired, clean.run.Refused, clean.run.Reported, clean.run.SyntheticEvents},
		[6]int64{odd.run.Examined, odd.run.InSync, odd.run.Repaired, odd.run.Refused, odd.run.Reported, odd.run.SyntheticEvents})
}

// An absurd amount (9e18, just under the int64 limit) in the payment intent
// snapshots: nothing overflows, no existing row's amount changes, each
// existing row whose newest amount-carrying fact is such a snapshot gets a
// mismatch item, and states still move. A payment missing locally is
// created with the provider's amount, absurd or not: reconciler has no
// other record of it, never invents or clamps an amount, and the
// missing_local item shows the amount to the person reading the report.
func TestFaultAbsurdAmountsAreReportedNeverWritten(t *testing.T) {
	e := newEnv(t)
	forbidBackwards(t, e.db.DB)
	pis := faultFixture(e)
	before := e.rows()
	e.fake.CorruptNext(stripefake.CorruptAbsurdAmount, 1000)
	res, err := e.tryRun(nil)
	require.NoError(t, err)
	require.Equal(t, models.RunSucceeded, res.Run.Status)
	e.assertConverged(res.Run.ID)

	mismatch := map[string]bool{}
	for _, it := range e.items(res.Run.ID) {
		switch it.Kind {
		case models.KindMismatch:
			mismatch[it.ProviderID] = true
			require.Equal(t, models.ActionReported, it.Action)
			require.Contains(t, string(it.Detail), `"provider_amount": 9000000000000000000`)
		case models.KindMissingLocal:
			require.NotContains(t, before, it.ProviderID)
		}
	}
	after := e.rows()
	for i, pi := range pis {
		b, existed := before[pi]
		a := after[pi]
		auto := i%5 != 0 && i%10 != 3 // no charge fact carries the real amount after the snapshot
		switch {
		case existed:
			require.Equal(t, b.Amount, a.Amount, "%s: an existing row's amount is never changed", pi)
			require.Equal(t, b.Currency, a.Currency)
			require.Equal(t, auto, mismatch[pi], "%s: mismatch reported exactly when the newest fact is the absurd snapshot", pi)
		case auto:
			require.Equal(t, stripefake.AbsurdAmount, a.Amount, "%s: created with the provider's amount", pi)
		default:
			require.Equal(t, int64(1000+i), a.Amount, "%s: created with the newest fact's (the charge's) amount", pi)
		}
	}
	require.NotEmpty(t, mismatch)

	// The provider still serves the absurd snapshots: rows keep their
	// amounts, mismatches say so.
	res2 := e.run(func(o *reconcile.Options) { o.BatchSize = 25 })
	for id, r := range e.rows() {
		require.Equal(t, after[id].Amount, r.Amount, "%s: amounts are never changed", id)
	}
	require.Positive(t, res2.Run.Reported)

	// The provider corrects itself. The rows created with the absurd amount
	// now differ from the provider's real one: the next run reports them,
	// changes no amount, and verify finds every difference explained.
	var absurd []string
	for id, r := range e.rows() {
		if r.Amount == stripefake.AbsurdAmount {
			absurd = append(absurd, id)
		}
	}
	require.NotEmpty(t, absurd)
	e.fake.CorruptNext(stripefake.CorruptAbsurdAmount, 0)
	res3 := e.run(func(o *reconcile.Options) { o.BatchSize = 25; o.Since = at(-25) })
	reported := map[string]bool{}
	for _, it := range e.items(res3.Run.ID) {
		if it.Kind == models.KindMismatch && it.Action == models.ActionReported {
			reported[it.ProviderID] = true
		}
	}
	for _, id := range absurd {
		require.True(t, reported[id], "%s: the absurd amount is reported once the provider corrects itself", id)
	}
	for id, r := range e.rows() {
		require.Equal(t, after[id].Amount, r.Amount, "%s: amounts are never changed", id)
	}
	e.verifyExplained(absurd...)
}

// A negative amount in the payment intent snapshots changes no existing row
// (the fact is treated as carrying no amount), and states still move.
func TestFaultNegativeAmountsNeverChangeARow(t *testing.T) {
	e := newEnv(t)
	forbidBackwards(t, e.db.DB)
	pis := faultFixture(e)
	before := e.rows()
	e.fake.CorruptNext(stripefake.CorruptNegativeAmount, 1000)
	res, err := e.tryRun(nil)
	require.NoError(t, err)
	e.assertExplained(res.Run.ID) // the payments missing locally are refused, not invented
	after := e.rows()
	for _, pi := range pis {
		if b, ok := before[pi]; ok {
			require.Equal(t, b.Amount, after[pi].Amount, pi)
			require.Equal(t, b.Currency, after[pi].Currency, pi)
		}
	}
	e.verifyEvery()
}

func TestFaultNegativeAmountCreatesNoInventedRow(t *testing.T) {
	e := newEnv(t)
	faultFixture(e)
	e.fake.CorruptNext(stripefake.CorruptNegativeAmount, 1000)
	_, err := e.tryRun(nil)
	require.NoError(t, err)
	for id, r := range e.rows() {
		require.NotEmpty(t, r.Currency, "%s was created with no currency", id)
		require.Positive(t, r.Amount, "%s was created with an amount the provider never reported", id)
	}
	e.verifyEvery()
}

// Events whose created lies a year after now (after the window the run
// asked for) must never be applied at that time: a row whose
// source_updated_at is in the future refuses every real fact until then as
// stale. Right: the run fails with an error naming the event (the provider
// broke the created[lt] bound of the query) or leaves such events out; either
// way no row moves to a future time and the next real fact applies.
func TestFaultFutureTimestampsNeverBlockLaterFacts(t *testing.T) {
	e := newEnv(t)
	forbidBackwards(t, e.db.DB)
	pis := faultFixture(e)
	e.fake.CorruptNext(stripefake.CorruptFuture, 1000)
	res, err := e.tryRun(nil)
	if err == nil {
		for id, r := range e.rows() {
			require.False(t, r.At.After(now), "%s moved to %s at %s, after the run's now", id, r.State, r.At)
		}
	} else {
		require.Equal(t, models.RunFailed, res.Run.Status)
	}
	// An hour later a real refund happens; tonight's run must apply it.
	e.fake.CorruptNext(stripefake.CorruptFuture, 0)
	pi := pis[1] // captured, not refunded
	e.acct.Refund(pi, 1001, now.Add(time.Hour))
	later := now.Add(2 * time.Hour)
	e.run(func(o *reconcile.Options) { o.Now = func() time.Time { return later } })
	p := e.payment(pi)
	require.Equal(t, models.StateRefunded, p.State, "a real fact after the bogus one applies")
	since, _ := e.window()
	e.requireCovers(e.verifyAll(since, later.Add(time.Hour)))
}

// Half the provider's requests answered 429: the run retries through the
// storm and converges; every request is counted.
func TestFaultHalfTheRequestsRateLimited(t *testing.T) {
	e := newEnv(t)
	forbidBackwards(t, e.db.DB)
	e.acct.Generate(stripefake.GenOptions{Payments: 400, Start: at(-20), End: at(-1), Seed: 23})
	e.deliver(func(i int, _ webhooksim.Delivery) bool { return i%5 != 0 })
	e.fake.SetFailureRate(429, 0.5)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := reconcile.Run(ctx, reconcile.Options{DB: e.db.DB, Provider: e.faultProvider(60), Now: func() time.Time { return now },
		StuckLimit: -1, BatchSize: 25})
	e.fake.SetFailureRate(429, 0)
	require.NoError(t, err)
	by := e.fake.RequestsByStatus()
	require.Greater(t, by[429], int64(10), "the storm happened")
	require.InDelta(t, 0.5, float64(by[429])/float64(e.fake.Requests()), 0.15)
	require.Equal(t, e.fake.Requests(), res.Run.APIRequests)
	e.assertConverged(res.Run.ID)
	e.assertBatchesWhole()
	res2 := e.run(nil)
	require.Zero(t, res2.Run.Repaired)
	require.Zero(t, res2.Run.SyntheticEvents)
	e.verifyEvery()
}
