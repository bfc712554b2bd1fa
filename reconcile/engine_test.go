package reconcile_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/reconciler/reconciler/internal/dbopen"
	"github.com/reconciler/reconciler/internal/pgtest"
	"github.com/reconciler/reconciler/internal/webhooksim"
	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/providers/stripe"
	"github.com/reconciler/reconciler/providers/stripe/stripefake"
	"github.com/reconciler/reconciler/reconcile"
	"github.com/reconciler/reconciler/verify"
)

var now = time.Date(2026, 11, 20, 6, 0, 0, 0, time.UTC)

type env struct {
	t    *testing.T
	db   *pgtest.DB
	fake *stripefake.Server
	acct *stripefake.Account
	url  string
	// readAhead, when set, is the events each of the provider's
	// read-aheads aims at, reading ahead whatever the latency.
	readAhead int
	// made is every provider provider() made, to read their counters.
	made []*stripe.Provider
}

func newEnv(t *testing.T) *env { return newEnvOn(t, "postgres") }

// newEnvOn makes an environment on the named store: "postgres" or "sqlite".
func newEnvOn(t *testing.T, store string) *env {
	t.Helper()
	t.Parallel()
	return newEnvSerial(t, store)
}

// newEnvSerial is newEnvOn for a test that makes several environments.
func newEnvSerial(t *testing.T, store string) *env {
	t.Helper()
	var db *pgtest.DB
	if store == "sqlite" {
		db = pgtest.NewSQLite(t)
	} else {
		db = pgtest.New(t)
	}
	fake := stripefake.New(stripefake.Options{Now: func() time.Time { return now }, Seed: 42})
	url := fake.Start()
	t.Cleanup(fake.Close)
	return &env{t: t, db: db, fake: fake, acct: fake.Account(""), url: url}
}

// stores runs a scenario test on PostgreSQL and on the embedded SQLite store.
func stores(t *testing.T, f func(t *testing.T, e *env)) {
	for _, name := range []string{"postgres", "sqlite"} {
		t.Run(name, func(t *testing.T) { f(t, newEnvOn(t, name)) })
	}
}

func (e *env) provider() *stripe.Provider {
	p, err := stripe.New(stripe.Config{APIKey: "sk_test_reconciler", BaseURL: e.url, MaxRetries: 10,
		Sleep:     func(ctx context.Context, _ time.Duration) error { return ctx.Err() },
		ReadAhead: e.readAhead > 0, ReadAheadEvents: e.readAhead})
	require.NoError(e.t, err)
	e.made = append(e.made, p)
	return p
}

func (e *env) run(mod func(*reconcile.Options)) reconcile.Result {
	e.t.Helper()
	o := reconcile.Options{DB: e.db.DB, Provider: e.provider(), Now: func() time.Time { return now }, StuckLimit: -1}
	if mod != nil {
		mod(&o)
	}
	res, err := reconcile.Run(context.Background(), o)
	require.NoError(e.t, err)
	require.Equal(e.t, models.RunSucceeded, res.Run.Status)
	return res
}

func (e *env) payment(id string) models.Payment {
	e.t.Helper()
	var p models.Payment
	require.NoError(e.t, e.db.Where("provider = 'stripe' AND provider_id = ?", id).First(&p).Error)
	return p
}

func (e *env) items(runID int64) []models.DriftItem {
	var items []models.DriftItem
	require.NoError(e.t, e.db.Where("run_id = ?", runID).Order("id").Find(&items).Error)
	return items
}

// deliver applies the account's deliveries whose index keep accepts.
func (e *env) deliver(keep func(i int, d webhooksim.Delivery) bool) (delivered, missed int) {
	e.t.Helper()
	d, m, err := webhooksim.Seed(context.Background(), e.db.DB, "stripe", webhooksim.Stripe(e.acct.Deliveries()), now, keep)
	require.NoError(e.t, err)
	return d, m
}

func deliverTypes(types ...string) func(int, webhooksim.Delivery) bool {
	return func(_ int, d webhooksim.Delivery) bool { return slices.Contains(types, d.EventType) }
}

func at(h float64) time.Time { return now.Add(time.Duration(h * float64(time.Hour))) }

func itemKinds(items []models.DriftItem) []string {
	var out []string
	for _, it := range items {
		out = append(out, it.Kind+"/"+it.Action)
	}
	return out
}

func syntheticIDs(t *testing.T, db *gorm.DB) []string {
	var ids []string
	require.NoError(t, db.Raw(`SELECT event_id FROM webhook_events WHERE synthetic ORDER BY event_id`).Scan(&ids).Error)
	return ids
}

func forbidBackwards(t *testing.T, db *gorm.DB) { pgtest.ForbidBackwards(t, db) }

// window is a verify window covering every payment of the test: from the
// account's first event less an hour to now plus an hour.
func (e *env) window() (since, until time.Time) {
	e.t.Helper()
	first := now
	for _, d := range e.acct.Deliveries() {
		if d.At.Before(first) {
			first = d.At
		}
	}
	return first.Add(-time.Hour), now.Add(time.Hour)
}

// verifyReport is `reconciler verify --all` over [since, until): every row
// of the window compared with the provider's own current objects (the
// oracle is the provider, never the fake's truth file).
func (e *env) verifyReport(since, until time.Time) verify.Report {
	e.t.Helper()
	rep, err := verify.Run(context.Background(), verify.Options{DB: e.db.DB, Provider: stripe.Name, Reader: e.provider().Verifier(),
		Since: since, Until: until, All: true, Now: func() time.Time { return now }})
	require.NoError(e.t, err)
	require.Positive(e.t, rep.Checked, "verify --all checked nothing")
	return rep
}

// verifyAll: every scenario ends with verify --all finding nothing that no
// drift item explains.
func (e *env) verifyAll(since, until time.Time) verify.Report {
	e.t.Helper()
	rep := e.verifyReport(since, until)
	require.Empty(e.t, rep.Unexplained, "verify --all: differences from the provider that no drift item explains:\n%s", e.describe(rep.Unexplained))
	return rep
}

// verifyEvery is verifyAll over e.window(), which must hold every row of
// the account.
func (e *env) verifyEvery() verify.Report {
	e.t.Helper()
	since, until := e.window()
	rep := e.verifyAll(since, until)
	e.requireCovers(rep)
	return rep
}

// requireCovers: the verification checked every row of the account.
func (e *env) requireCovers(rep verify.Report) {
	e.t.Helper()
	var rows int64
	require.NoError(e.t, e.db.Model(&models.Payment{}).Where("provider = 'stripe' AND account = ''").Count(&rows).Error)
	require.Equal(e.t, int(rows), rep.Checked, "the verify window [%s, %s) holds every row", rep.Since.Format(time.RFC3339), rep.Until.Format(time.RFC3339))
}

// verifyExplained is verifyEvery for a test that deliberately leaves rows
// contradicting the provider: each of ids differs from the provider, and a
// drift item left for a human (refused, reported) explains it.
func (e *env) verifyExplained(ids ...string) verify.Report {
	e.t.Helper()
	rep := e.verifyEvery()
	e.requireExplained(rep, ids...)
	return rep
}

// requireExplained: each of ids differs from the provider and an item
// explains it.
func (e *env) requireExplained(rep verify.Report, ids ...string) {
	e.t.Helper()
	require.Positive(e.t, rep.Explained, "the deliberate contradiction is explained by an item")
	explained := map[string]bool{}
	for _, d := range rep.ExplainedDifferences {
		explained[d.ProviderID] = true
	}
	for _, id := range ids {
		require.True(e.t, explained[id], "%s: verify finds no explained difference (explained:\n%s)", id, e.describe(rep.ExplainedDifferences))
	}
}

// describe lists differences, each with every drift item of its payment.
func (e *env) describe(ds []verify.Difference) string {
	var b strings.Builder
	for _, d := range ds {
		fmt.Fprintf(&b, "  %s %s: local %s, provider %s\n", d.ProviderID, d.Field, d.Local, d.Provider)
		var items []models.DriftItem
		require.NoError(e.t, e.db.Where("provider = 'stripe' AND provider_id = ?", d.ProviderID).Order("id").Find(&items).Error)
		for _, it := range items {
			fmt.Fprintf(&b, "    run %d %s/%s %s→%s %s\n", it.RunID, it.Kind, it.Action, deref(it.LocalState), deref(it.ProviderState), string(it.Detail))
		}
	}
	return b.String()
}

func TestMissingLocal(t *testing.T) {
	stores(t, func(t *testing.T, e *env) {
		pi := e.acct.CreatePayment(2500, "gbp", false, at(-3))
		e.acct.Capture(pi, at(-3).Add(time.Minute))

		res := e.run(nil)
		p := e.payment(pi)
		require.Equal(t, models.StateCaptured, p.State)
		require.Equal(t, int64(2500), p.Amount)
		require.Equal(t, "gbp", p.Currency)
		require.True(t, p.SourceUpdatedAt.Equal(at(-3).Add(time.Minute)), "source_updated_at is the provider's time, got %v", p.SourceUpdatedAt)
		require.Equal(t, []string{"missing_local/repaired"}, itemKinds(e.items(res.Run.ID)))
		require.Equal(t, int64(2), res.Run.SyntheticEvents) // payment_intent.created and .succeeded
		var ev models.WebhookEvent
		require.NoError(t, e.db.Where("synthetic").First(&ev).Error)
		require.Equal(t, res.Run.ID, *ev.RunID)
		require.NotNil(t, ev.ProcessedAt)
		require.Contains(t, string(ev.Payload), pi)
		e.verifyEvery()
	})
}

func TestBehindAndRerunChangesNothing(t *testing.T) {
	stores(t, func(t *testing.T, e *env) {
		pi := e.acct.CreatePayment(1000, "gbp", true, at(-5))
		e.acct.Authorise(pi, at(-5).Add(time.Minute))
		e.acct.Capture(pi, at(-2))
		e.deliver(deliverTypes("payment_intent.created", "payment_intent.amount_capturable_updated"))

		res := e.run(nil)
		require.Equal(t, models.StateCaptured, e.payment(pi).State)
		items := e.items(res.Run.ID)
		require.Equal(t, []string{"behind/repaired"}, itemKinds(items))
		require.Equal(t, "authorised", *items[0].LocalState)
		require.Equal(t, "captured", *items[0].ProviderState)
		// payment_intent.succeeded and charge.captured were missed.
		require.Equal(t, int64(2), res.Run.SyntheticEvents)

		before := e.payment(pi)
		res2 := e.run(nil)
		require.Zero(t, res2.Run.Repaired)
		require.Zero(t, res2.Run.SyntheticEvents)
		require.Empty(t, e.items(res2.Run.ID))
		after := e.payment(pi)
		require.Equal(t, before.UpdatedAt, after.UpdatedAt, "a rerun must not touch the row")
		e.verifyEvery()
	})
}

func TestConflictLocalTerminal(t *testing.T) {
	stores(t, func(t *testing.T, e *env) {
		pi := e.acct.CreatePayment(1000, "gbp", false, at(-4))
		e.acct.Capture(pi, at(-3))
		require.NoError(t, e.db.Exec(`INSERT INTO payments (provider, provider_id, state, amount, currency, source_updated_at) VALUES ('stripe', ?, 'canceled', 1000, 'gbp', ?)`, pi, at(-3.5)).Error)

		res := e.run(nil)
		require.Equal(t, models.StateCanceled, e.payment(pi).State, "never moved off a terminal state")
		items := e.items(res.Run.ID)
		require.Equal(t, []string{"conflict/refused"}, itemKinds(items))
		require.Equal(t, "canceled", *items[0].LocalState)
		require.Equal(t, "captured", *items[0].ProviderState)
		require.Equal(t, int64(1), res.Run.Refused)
		e.verifyExplained(pi)
	})
}

func TestRefundBeforePayoutRefunds(t *testing.T) {
	stores(t, func(t *testing.T, e *env) {
		pi := e.acct.CreatePayment(1000, "gbp", false, at(-6))
		e.acct.Capture(pi, at(-6).Add(time.Minute))
		e.acct.Refund(pi, 1000, at(-4))
		// The payout's webhook arrived (a later provider time than the
		// refund's); the refund's was missed. A payout undoes no refund.
		require.NoError(t, e.db.Exec(`INSERT INTO payments (provider, provider_id, state, amount, currency, source_updated_at) VALUES ('stripe', ?, 'settled', 1000, 'gbp', ?)`, pi, at(-2)).Error)

		res := e.run(nil)
		p := e.payment(pi)
		require.Equal(t, models.StateRefunded, p.State)
		require.Equal(t, int64(1000), p.AmountRefunded)
		require.True(t, p.SourceUpdatedAt.Equal(at(-4)), "source_updated_at holds the refund's time: %v", p.SourceUpdatedAt)
		require.Equal(t, []string{"behind/repaired"}, itemKinds(e.items(res.Run.ID)))
		e.verifyEvery()
	})
}

func TestStaleRefusedByTimeGuard(t *testing.T) {
	stores(t, func(t *testing.T, e *env) {
		pi := e.acct.CreatePayment(1000, "gbp", true, at(-6))
		e.acct.Capture(pi, at(-4))
		// Someone recorded the authorisation at a later provider time than
		// the capture.
		require.NoError(t, e.db.Exec(`INSERT INTO payments (provider, provider_id, state, amount, currency, source_updated_at) VALUES ('stripe', ?, 'authorised', 1000, 'gbp', ?)`, pi, at(-2)).Error)

		res := e.run(nil)
		p := e.payment(pi)
		require.Equal(t, models.StateAuthorised, p.State)
		require.True(t, p.SourceUpdatedAt.Equal(at(-2)))
		require.Equal(t, []string{"stale/refused"}, itemKinds(e.items(res.Run.ID)))
		e.verifyExplained(pi)
	})
}

func TestMismatchReportedStateStillMoves(t *testing.T) {
	stores(t, func(t *testing.T, e *env) {
		pi := e.acct.CreatePayment(1000, "gbp", false, at(-4))
		e.acct.Capture(pi, at(-3))
		require.NoError(t, e.db.Exec(`INSERT INTO payments (provider, provider_id, state, amount, currency, source_updated_at) VALUES ('stripe', ?, 'created', 999, 'eur', ?)`, pi, at(-4)).Error)

		res := e.run(nil)
		p := e.payment(pi)
		require.Equal(t, models.StateCaptured, p.State)
		require.Equal(t, int64(999), p.Amount, "amounts are reported, never changed")
		require.Equal(t, "eur", p.Currency)
		require.ElementsMatch(t, []string{"mismatch/reported", "behind/repaired"}, itemKinds(e.items(res.Run.ID)))
		e.verifyExplained(pi)

		// The run's notes count its items by kind and action, as its
		// report reads them (report.LoadTotals).
		var notes struct {
			Counts []struct {
				Kind, Action string
				N            int64
			} `json:"drift_counts"`
		}
		require.NoError(t, json.Unmarshal(res.Run.Notes, &notes))
		got := map[string]int64{}
		for _, c := range notes.Counts {
			got[c.Kind+"/"+c.Action] = c.N
		}
		require.Equal(t, map[string]int64{"mismatch/reported": 1, "behind/repaired": 1}, got)
		require.Len(t, res.Drift, 2)
		for k, n := range res.Drift {
			require.Equal(t, n, got[k.Kind+"/"+k.Action], "the result's counts are the notes'")
		}
	})
}

func TestUnknownStatusReported(t *testing.T) {
	stores(t, func(t *testing.T, e *env) {
		pi := e.acct.CreatePayment(1000, "gbp", true, at(-4))
		e.acct.Authorise(pi, at(-4).Add(time.Minute))
		e.deliver(func(int, webhooksim.Delivery) bool { return true })
		e.acct.SetRawStatus(pi, "requires_reauthorization", "payment_intent.processing", at(-2))

		res := e.run(nil)
		require.Equal(t, models.StateAuthorised, e.payment(pi).State, "an unknown status is never guessed")
		items := e.items(res.Run.ID)
		require.Equal(t, []string{"unknown_status/reported"}, itemKinds(items))
		require.Equal(t, "requires_reauthorization", *items[0].ProviderState)
		e.verifyExplained(pi)
	})
}

func TestStripeTrapsAndChargeback(t *testing.T) {
	stores(t, func(t *testing.T, e *env) {
		// Canceling an authorisation marks its charge refunded: still canceled, 0 refunded.
		canceled := e.acct.CreatePayment(1000, "gbp", true, at(-10))
		e.acct.Authorise(canceled, at(-10).Add(time.Minute))
		e.acct.Cancel(canceled, at(-9))
		// A failed attempt is not final on Stripe.
		retried := e.acct.CreatePayment(700, "gbp", false, at(-10))
		e.acct.FailAttempt(retried, at(-10).Add(time.Minute))
		// Refund, then the payout sweeping it: ends refunded.
		refunded := e.acct.CreatePayment(1200, "gbp", false, at(-20))
		e.acct.Capture(refunded, at(-20).Add(time.Minute))
		e.acct.Refund(refunded, 1200, at(-8))
		e.acct.Payout(at(-7), refunded)
		// Partial refund, a lost dispute.
		partial := e.acct.CreatePayment(2000, "gbp", false, at(-20))
		e.acct.Capture(partial, at(-20).Add(time.Minute))
		e.acct.Refund(partial, 500, at(-6))
		disputed := e.acct.CreatePayment(3000, "gbp", false, at(-20))
		e.acct.Capture(disputed, at(-20).Add(time.Minute))
		dp := e.acct.Dispute(disputed, at(-5))
		e.acct.CloseDispute(dp, "lost", at(-4))

		res := e.run(func(o *reconcile.Options) { o.Since = at(-24) })
		got := func(id string) (models.State, int64) { p := e.payment(id); return p.State, p.AmountRefunded }
		s, r := got(canceled)
		require.Equal(t, models.StateCanceled, s)
		require.Zero(t, r)
		s, _ = got(retried)
		require.Equal(t, models.StateCreated, s)
		s, r = got(refunded)
		require.Equal(t, models.StateRefunded, s)
		require.Equal(t, int64(1200), r)
		s, r = got(partial)
		require.Equal(t, models.StateCaptured, s)
		require.Equal(t, int64(500), r)
		s, _ = got(disputed)
		require.Equal(t, models.StateChargeback, s)
		for id, want := range e.acct.ExpectedAt(now) {
			p := e.payment(id)
			require.Equal(t, want.State, p.State, id)
			require.Equal(t, want.AmountRefunded, p.AmountRefunded, id)
		}
		require.Zero(t, res.Run.Refused)
		e.verifyEvery()
	})
}

func TestDuplicateAndShuffledDeliveriesConverge(t *testing.T) {
	stores(t, func(t *testing.T, e *env) {
		e.acct.Generate(stripefake.GenOptions{Payments: 300, Start: at(-20), End: at(-1), Seed: 7})
		ds := webhooksim.Stripe(e.acct.Deliveries())
		rng := rand.New(rand.NewPCG(1, 2))
		// Webhooks arrive shuffled, some twice, a fifth never.
		var shuffled []webhooksim.Delivery
		for _, d := range ds {
			if rng.IntN(5) == 0 {
				continue
			}
			shuffled = append(shuffled, d)
			if rng.IntN(4) == 0 {
				shuffled = append(shuffled, d)
			}
		}
		rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		for _, d := range shuffled {
			require.NoError(t, webhooksim.Apply(context.Background(), e.db.DB, "stripe", d))
		}
		res := e.run(nil)
		e.assertConverged(res.Run.ID)
		res2 := e.run(nil)
		require.Zero(t, res2.Run.Repaired)
		require.Zero(t, res2.Run.SyntheticEvents)
		e.verifyEvery()
	})
}

// assertConverged: every payment is in the state the provider implies, or a
// refused drift item of this run says why not (the guard refusing an older
// fact that arrived after a newer one).
func (e *env) assertConverged(runIDs ...int64) {
	e.t.Helper()
	wrong, total := e.assertExplained(runIDs...)
	require.Less(e.t, wrong, total/20+1, "too many payments left for a human")
}

// assertExplained: every payment is where the provider implies or a refused
// item says why; it returns how many are left for a human, of how many.
func (e *env) assertExplained(runIDs ...int64) (wrong, total int) {
	e.t.Helper()
	refused := map[string]bool{}
	for _, id := range runIDs {
		for _, it := range e.items(id) {
			if it.Action == models.ActionRefused {
				refused[it.ProviderID] = true
			}
		}
	}
	var rows []models.Payment
	require.NoError(e.t, e.db.Where("provider = 'stripe'").Find(&rows).Error)
	have := map[string]models.Payment{}
	for _, r := range rows {
		have[r.ProviderID] = r
	}
	wrong = 0
	for id, want := range e.acct.ExpectedAt(now) {
		p, ok := have[id]
		if !ok {
			require.True(e.t, refused[id], "payment %s missing and no refused item says why", id)
			wrong++
			continue
		}
		if p.State != want.State || p.AmountRefunded != want.AmountRefunded {
			require.True(e.t, refused[id], "payment %s is %s/%d, provider implies %s/%d, and no refused item says why", id, p.State, p.AmountRefunded, want.State, want.AmountRefunded)
			wrong++
		}
	}
	return wrong, len(have)
}

func TestTwentyConcurrentRunsAndARacingWriter(t *testing.T) {
	e := newEnv(t)
	forbidBackwards(t, e.db.DB)
	e.acct.Generate(stripefake.GenOptions{Payments: 400, Start: at(-20), End: at(-1), Seed: 11})
	ds := webhooksim.Stripe(e.acct.Deliveries())
	rng := rand.New(rand.NewPCG(3, 4))
	var late []webhooksim.Delivery
	e.deliver(func(i int, d webhooksim.Delivery) bool {
		if rng.IntN(3) == 0 {
			late = append(late, d)
			return false
		}
		return true
	})
	var wg sync.WaitGroup
	errs := make(chan error, 21)
	// The live webhook worker delivers the late events, shuffled, while 20
	// runs (lock bypassed) reconcile the same payments.
	wg.Add(1)
	go func() {
		defer wg.Done()
		rng.Shuffle(len(late), func(i, j int) { late[i], late[j] = late[j], late[i] })
		for _, d := range late {
			if err := webhooksim.Apply(context.Background(), e.db.DB, "stripe", d); err != nil {
				errs <- err
				return
			}
		}
	}()
	runIDs := make([]int64, 20)
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := reconcile.Run(context.Background(), reconcile.Options{DB: e.db.DB, Provider: e.provider(), SkipLock: true,
				Now: func() time.Time { return now }, StuckLimit: -1, BatchSize: 50})
			if err != nil {
				errs <- err
				return
			}
			runIDs[i] = res.Run.ID
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	e.assertConverged(runIDs...)
	// Every event is recorded exactly once (the unique key makes "at most"
	// certain; here we check "at least").
	var n int64
	require.NoError(t, e.db.Raw(`SELECT count(*) FROM webhook_events`).Scan(&n).Error)
	lateIDs := map[string]bool{}
	for _, d := range late {
		lateIDs[d.EventID] = true
	}
	listed := 0
	for _, d := range ds {
		if slices.Contains(stripe.EventTypes, d.EventType) || !lateIDs[d.EventID] {
			listed++
		}
	}
	require.Equal(t, int64(listed), n)
	e.verifyEvery()
}

func TestSurvives429And500(t *testing.T) {
	stores(t, func(t *testing.T, e *env) {
		e.acct.Generate(stripefake.GenOptions{Payments: 200, Start: at(-20), End: at(-1), Seed: 5})
		e.deliver(func(i int, _ webhooksim.Delivery) bool { return i%3 != 0 })
		e.fake.FailNext(500, 3)
		e.fake.SetFailureRate(429, 0.4)
		res := e.run(func(o *reconcile.Options) { o.BatchSize = 40 })
		e.fake.SetFailureRate(429, 0)
		by := e.fake.RequestsByStatus()
		require.Greater(t, by[429], int64(5), "the storm happened")
		require.Equal(t, int64(3), by[500])
		e.assertConverged(res.Run.ID)
		require.Equal(t, e.fake.Requests(), res.Run.APIRequests, "every request, retries included, is counted")
		e.verifyEvery()
	})
}

func TestDryRunWritesOnlyRunAndItems(t *testing.T) {
	stores(t, func(t *testing.T, e *env) {
		e.acct.Generate(stripefake.GenOptions{Payments: 100, Start: at(-20), End: at(-1), Seed: 9})
		e.deliver(func(i int, _ webhooksim.Delivery) bool { return i%4 != 0 })
		var before []models.Payment
		require.NoError(t, e.db.Order("id").Find(&before).Error)
		var evBefore int64
		require.NoError(t, e.db.Model(&models.WebhookEvent{}).Count(&evBefore).Error)

		dry := e.run(func(o *reconcile.Options) { o.DryRun = true })
		var after []models.Payment
		require.NoError(t, e.db.Order("id").Find(&after).Error)
		require.Equal(t, before, after)
		var evAfter int64
		require.NoError(t, e.db.Model(&models.WebhookEvent{}).Count(&evAfter).Error)
		require.Equal(t, evBefore, evAfter)
		require.Positive(t, dry.Run.Repaired)

		real := e.run(nil)
		require.Equal(t, dry.Run.Repaired, real.Run.Repaired, "the dry run predicts the real one")
		require.Equal(t, dry.Run.SyntheticEvents, real.Run.SyntheticEvents)
		require.ElementsMatch(t, itemKinds(e.items(dry.Run.ID)), itemKinds(e.items(real.Run.ID)))
		e.verifyEvery()
	})
}

func TestLockAndInterruptedBookkeeping(t *testing.T) {
	e := newEnv(t)
	e.acct.Generate(stripefake.GenOptions{Payments: 20, Start: at(-20), End: at(-1), Seed: 3})
	// A run that died: its row stays running.
	require.NoError(t, e.db.Exec(`INSERT INTO reconciliation_runs (provider, account, window_start, window_end, started_at, status, trigger, dry_run)
		VALUES ('stripe', '', ?, ?, ?, 'running', 'schedule', false)`, at(-30), at(-5), at(-5)).Error)

	sqlDB, err := e.db.DB.DB()
	require.NoError(t, err)
	conn, err := sqlDB.Conn(context.Background())
	require.NoError(t, err)
	var ok bool
	require.NoError(t, conn.QueryRowContext(context.Background(), `SELECT pg_try_advisory_lock(hashtextextended(current_schema() || '/reconciler/stripe/', 0))`).Scan(&ok))
	require.True(t, ok)
	_, err = reconcile.Run(context.Background(), reconcile.Options{DB: e.db.DB, Provider: e.provider(), Now: func() time.Time { return now }})
	require.True(t, errors.Is(err, reconcile.ErrLocked), "got %v", err)
	var runs int64
	require.NoError(t, e.db.Model(&models.Run{}).Count(&runs).Error)
	require.Equal(t, int64(1), runs, "a locked-out run writes nothing")
	// Closing a pooled connection keeps its session (and the lock): unlock.
	_, err = conn.ExecContext(context.Background(), `SELECT pg_advisory_unlock_all()`)
	require.NoError(t, err)
	require.NoError(t, conn.Close())

	e.run(nil)
	var dead models.Run
	require.NoError(t, e.db.Order("id").First(&dead).Error)
	require.Equal(t, models.RunInterrupted, dead.Status)
	e.verifyEvery()
}

func TestCanceledContextRecordsInterrupted(t *testing.T) {
	stores(t, func(t *testing.T, e *env) {
		e.acct.Generate(stripefake.GenOptions{Payments: 300, Start: at(-20), End: at(-1), Seed: 13})
		ctx, cancel := context.WithCancel(context.Background())
		batches := 0
		res, err := reconcile.Run(ctx, reconcile.Options{DB: e.db.DB, Provider: e.provider(), Now: func() time.Time { return now },
			BatchSize: 50, StuckLimit: -1, Progress: func(reconcile.Progress) {
				batches++
				if batches == 2 {
					cancel()
				}
			}})
		require.ErrorIs(t, err, reconcile.ErrInterrupted)
		require.Equal(t, models.RunInterrupted, res.Run.Status)
		require.Positive(t, res.Run.Examined, "the batches before the signal were written")
		// The next run completes the window and converges.
		res2 := e.run(nil)
		e.assertConverged(res.Run.ID, res2.Run.ID)
		e.verifyEvery()
	})
}

func TestCheckpointCatchesUpASkippedNight(t *testing.T) {
	stores(t, func(t *testing.T, e *env) {
		// Last success ended three days ago; tonight's default window reaches back to it.
		require.NoError(t, e.db.Exec(`INSERT INTO reconciliation_runs (provider, account, window_start, window_end, started_at, finished_at, status, trigger, dry_run)
			VALUES ('stripe', '', ?, ?, ?, ?, 'succeeded', 'schedule', false)`, at(-97), at(-72), at(-72), at(-72)).Error)
		pi := e.acct.CreatePayment(1000, "gbp", false, at(-50))
		e.acct.Capture(pi, at(-50).Add(time.Minute))
		res := e.run(nil)
		require.True(t, res.Run.WindowStart.Equal(at(-73)), "window starts at the checkpoint less the overlap, got %v", res.Run.WindowStart)
		require.Equal(t, models.StateCaptured, e.payment(pi).State)
		e.verifyEvery()
	})
}

func TestStuckPaymentPath(t *testing.T) {
	stores(t, func(t *testing.T, e *env) {
		pi := e.acct.CreatePayment(1000, "gbp", true, at(-24*10))
		e.acct.Authorise(pi, at(-24*10).Add(time.Minute))
		e.deliver(func(int, webhooksim.Delivery) bool { return true })
		e.acct.Cancel(pi, at(-24*9))
		// The cancel event is outside tonight's window: only the janitor finds it.
		res := e.run(func(o *reconcile.Options) { o.StuckLimit = 10 })
		p := e.payment(pi)
		require.Equal(t, models.StateCanceled, p.State)
		require.True(t, p.SourceUpdatedAt.Equal(at(-24*9)), "time from canceled_at, got %v", p.SourceUpdatedAt)
		items := e.items(res.Run.ID)
		require.Equal(t, []string{"behind/repaired"}, itemKinds(items))
		require.Contains(t, string(items[0].Detail), "time_inferred")
		want := reconcile.SyntheticEventID(pi, models.StateCanceled, at(-24*9))
		require.Equal(t, []string{want}, syntheticIDs(t, e.db.DB))
		res2 := e.run(func(o *reconcile.Options) { o.StuckLimit = 10 })
		require.Zero(t, res2.Run.SyntheticEvents, "the deterministic id makes reruns insert nothing")
		e.verifyEvery()
	})
}

func TestExaminedCountsEachPaymentOnceAcrossBatches(t *testing.T) {
	stores(t, func(t *testing.T, e *env) {
		e.acct.Generate(stripefake.GenOptions{Payments: 200, Start: at(-20), End: at(-1), Seed: 17})
		e.deliver(func(i int, _ webhooksim.Delivery) bool { return i%5 != 0 })
		res := e.run(func(o *reconcile.Options) { o.BatchSize = 7 })
		require.Equal(t, int64(len(e.acct.ExpectedAt(now))), res.Run.Examined)
		var drifted int64
		require.NoError(t, e.db.Raw(`SELECT count(DISTINCT provider_id) FROM drift_items WHERE run_id = ?`, res.Run.ID).Scan(&drifted).Error)
		require.Equal(t, res.Run.Examined-drifted, res.Run.InSync)
		e.verifyEvery()
	})
}

func TestWindowBeyondRetentionIsClampedAndSaysSo(t *testing.T) {
	stores(t, func(t *testing.T, e *env) {
		res := e.run(func(o *reconcile.Options) { o.Since, o.Mode = now.Add(-45*24*time.Hour), reconcile.ModeEvents })
		require.True(t, res.Run.WindowStart.Equal(now.Add(-stripe.EventRetention)), "clamped to the horizon, got %v", res.Run.WindowStart)
		require.Contains(t, string(res.Run.Notes), "clamped_from")
		require.Contains(t, string(res.Run.Notes), "retention")
	})
}

// Mode auto (the default) lists the part of the window older than the
// event log instead of clamping it, and says so; mode listing lists it all.
func TestWindowBeyondRetentionIsListed(t *testing.T) {
	stores(t, func(t *testing.T, e *env) {
		old := e.acct.CreatePayment(1000, "gbp", false, now.Add(-40*24*time.Hour))
		e.acct.Capture(old, now.Add(-40*24*time.Hour).Add(time.Minute))
		since := now.Add(-45 * 24 * time.Hour)
		res := e.run(func(o *reconcile.Options) { o.Since = since })
		require.True(t, res.Run.WindowStart.Equal(since), "not clamped, got %v", res.Run.WindowStart)
		var notes map[string]any
		require.NoError(t, json.Unmarshal(res.Run.Notes, &notes))
		require.NotContains(t, notes, "clamped_from")
		require.Equal(t, map[string]any{"since": since.Format(time.RFC3339), "until": now.Add(-stripe.EventRetention).Format(time.RFC3339),
			"reason":       "older than the provider's event log, which begins at " + now.Add(-stripe.EventRetention).Format(time.RFC3339),
			"api_requests": notes["listing"].(map[string]any)["api_requests"], "synthetic_events": notes["listing"].(map[string]any)["synthetic_events"]}, notes["listing"])
		// The payment found by listing recorded synthetic events that are
		// no missed webhooks: the miss ratio leaves them out.
		listed := int64(notes["listing"].(map[string]any)["synthetic_events"].(float64))
		require.Positive(t, listed)
		if res.Run.EventsRead > 0 {
			require.InDelta(t, float64(res.Run.SyntheticEvents-listed)/float64(res.Run.EventsRead), reconcile.MissRatio(res.Run), 1e-12)
		}
		require.Equal(t, map[string]any{"since": now.Add(-stripe.EventRetention).Format(time.RFC3339), "until": now.Format(time.RFC3339)}, notes["events"])
		require.Equal(t, models.StateCaptured, e.payment(old).State, "the payment created 40 days ago was found by listing")

		res = e.run(func(o *reconcile.Options) { o.Since, o.Mode = since, reconcile.ModeListing })
		notes = nil
		require.NoError(t, json.Unmarshal(res.Run.Notes, &notes))
		require.Equal(t, now.Format(time.RFC3339), notes["listing"].(map[string]any)["until"])
		require.NotContains(t, notes, "events")
		require.Zero(t, res.Run.Repaired, "listing again repairs nothing")
	})
}

// On the embedded store the run lock is an OS file lock and its row only
// says who holds it: a live holder locks the run out; a row left by a holder
// that no longer holds the file is taken over, whether it names this very
// pid (as a restarted container, pid 1 again, finds its dead predecessor's),
// another machine or a dead process.
func TestSQLiteLockRow(t *testing.T) {
	e := newEnvOn(t, "sqlite")
	ctx := context.Background()
	run := func() error {
		_, err := reconcile.Run(ctx, reconcile.Options{DB: e.db.DB, Provider: e.provider(), Now: func() time.Time { return now }, StuckLimit: -1})
		return err
	}
	held, err := dbopen.Store(e.db.DB, nil).TryLock(ctx, "stripe/")
	require.NoError(t, err)
	require.ErrorIs(t, run(), reconcile.ErrLocked, "a live holder")
	require.NoError(t, held.Release(ctx))
	host, _ := os.Hostname()
	dead := exec.Command("true")
	require.NoError(t, dead.Run())
	for _, c := range []struct {
		host string
		pid  int
	}{{host, os.Getpid()}, {"another-machine", 1}, {host, dead.Process.Pid}} {
		require.NoError(t, e.db.Exec(`DELETE FROM run_locks`).Error)
		require.NoError(t, e.db.Exec(`INSERT INTO run_locks (key, host, pid) VALUES (?, ?, ?)`, "stripe/", c.host, c.pid).Error)
		require.NoError(t, run(), "the row of holder %s/%d, which holds no file lock, is taken over", c.host, c.pid)
	}
	var n int64
	require.NoError(t, e.db.Raw(`SELECT count(*) FROM run_locks`).Scan(&n).Error)
	require.Zero(t, n, "the run released its lock")
}

// A run interrupted at about 80% is resumed by the next: it reads only what
// is left, and the result is the one an uninterrupted run gives.
func TestResumeAfterInterruptionReadsOnlyTheRest(t *testing.T) {
	t.Parallel()
	build := func(t *testing.T) *env {
		e := newEnvSerial(t, "postgres")
		e.acct.CreatePayment(100, "gbp", false, at(-40)) // an anchor before the window
		e.acct.Generate(stripefake.GenOptions{Payments: 600, Start: at(-20), End: at(-1), Seed: 23})
		e.deliver(func(i int, _ webhooksim.Delivery) bool { return i%5 != 0 })
		return e
	}
	type row struct {
		State    models.State
		Refunded int64
		At       time.Time
	}
	snapshot := func(e *env) (map[string]row, []string) {
		var ps []models.Payment
		require.NoError(t, e.db.Find(&ps).Error)
		out := map[string]row{}
		for _, p := range ps {
			out[p.ProviderID] = row{p.State, p.AmountRefunded, p.SourceUpdatedAt.UTC()}
		}
		return out, syntheticIDs(t, e.db.DB)
	}

	var want map[string]row
	var wantEvents []string
	var fullRequests int64
	{ // uninterrupted
		e := build(t)
		res := e.run(func(o *reconcile.Options) { o.BatchSize = 40 })
		fullRequests = res.Run.APIRequests
		want, wantEvents = snapshot(e)
		e.verifyEvery()
	}
	{ // interrupted at 80%, then resumed
		e := build(t)
		total := int64(0)
		for _, d := range e.acct.Deliveries() {
			if !d.At.Before(now.Add(-25*time.Hour)) && slices.Contains(stripe.EventTypes, d.EventType) {
				total++
			}
		}
		ctx, cancel := context.WithCancel(context.Background())
		first, err := reconcile.Run(ctx, reconcile.Options{DB: e.db.DB, Provider: e.provider(), Now: func() time.Time { return now },
			BatchSize: 40, StuckLimit: -1, Progress: func(p reconcile.Progress) {
				if p.EventsRead >= total*8/10 {
					cancel()
				}
			}})
		require.ErrorIs(t, err, reconcile.ErrInterrupted)
		require.NotNil(t, first.Run.ProgressCursor)
		second := e.run(func(o *reconcile.Options) { o.BatchSize = 40 })
		require.Contains(t, string(second.Run.Notes), "resumed_from_run")
		require.Less(t, second.Run.APIRequests, fullRequests*4/10, "the rerun read only what was left (%d of %d requests)", second.Run.APIRequests, fullRequests)
		require.Less(t, second.Run.EventsRead, total*4/10)
		got, gotEvents := snapshot(e)
		require.Equal(t, want, got, "the same rows as an uninterrupted run")
		require.Equal(t, wantEvents, gotEvents, "the same synthetic events")
		e.verifyEvery()
	}
}

// A state a fact showed in an earlier batch stays shown when the payment
// is carried from a later batch on (here: settled by a payout read in one
// batch, in sync; a dispute notice in a later batch makes it carried, and
// the dispute's close comes in a third): the
// local-ahead rule at the window's end must not call the settled row ahead
// of a log that showed it.
func TestStateShownInAnEarlierBatchStaysShown(t *testing.T) {
	stores(t, func(t *testing.T, e *env) {
		pi := e.acct.CreatePayment(1000, "gbp", false, at(-20))
		e.acct.Capture(pi, at(-20).Add(time.Minute))
		var fillers []string
		for i := range 5 {
			f := e.acct.CreatePayment(500, "gbp", false, at(-19).Add(time.Duration(i)*time.Minute))
			e.acct.Capture(f, at(-19).Add(time.Duration(i)*time.Minute+time.Second))
			fillers = append(fillers, f)
		}
		e.acct.Payout(at(-10), append([]string{pi}, fillers...)...)
		for i := range 5 { // events between the payout and the dispute: another batch
			f := e.acct.CreatePayment(700, "gbp", false, at(-8).Add(time.Duration(i)*time.Minute))
			e.acct.Capture(f, at(-8).Add(time.Duration(i)*time.Minute+time.Second))
		}
		dp := e.acct.Dispute(pi, at(-5))
		for i := range 5 { // and between the dispute and its close
			f := e.acct.CreatePayment(900, "gbp", false, at(-4).Add(time.Duration(i)*time.Minute))
			e.acct.Capture(f, at(-4).Add(time.Duration(i)*time.Minute+time.Second))
		}
		e.acct.CloseDispute(dp, "won", at(-3))
		e.deliver(func(_ int, d webhooksim.Delivery) bool { return d.At.Before(at(-9)) })
		require.Equal(t, models.StateSettled, e.payment(pi).State)
		res := e.run(func(o *reconcile.Options) { o.BatchSize = 2 })
		for _, it := range e.items(res.Run.ID) {
			if it.ProviderID == pi {
				require.NotEqual(t, models.KindConflict, it.Kind, "the settled row is not ahead of the log: %s", it.Detail)
			}
		}
	})
}
