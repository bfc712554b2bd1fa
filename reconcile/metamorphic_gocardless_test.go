package reconcile_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/reconciler/reconciler/internal/pgtest"
	"github.com/reconciler/reconciler/internal/webhooksim"
	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/providers/gocardless"
	"github.com/reconciler/reconciler/providers/gocardless/gcfake"
	"github.com/reconciler/reconciler/reconcile"
	"github.com/reconciler/reconciler/verify"
)

// The metamorphic suite for GoCardless (see metamorphic_test.go): one
// generated creditor (Bacs cycles on working days, Success+ failures that
// GoCardless retries, late failures before and after the payout with their
// late_failure_settled, chargebacks and cancelled chargebacks, partial and
// full refunds), reconciled from databases the webhooks left in different
// ways, at different batch sizes, interrupted and resumed, raced by the
// live worker. Whatever the path, the final rows are identical and
// `verify --all` (GoCardless's own current objects, for every row) finds
// nothing that no drift item explains; a rerun repairs nothing; every
// refused item is one GoCardless's own records cannot settle (gcRefusable).
//
// The run's window is the creditor's last four weeks; webhooks before it
// were handled long ago and are always delivered, in order. A batch is made
// of whole pages of events, so the provider's page shrinks with the batch
// size (options). One difference is known and left to the engine (the
// failure's time of a late failure, gcCompare): when it is the only one,
// the test ends skipped, naming each payment; any other difference fails.

var gcMetamorphicVariants = []variant{
	{name: "all delivered, in order", loss: 0, batchSize: 1000},
	{name: "30% lost, batch 1000", lossSeed: 1, loss: 30, batchSize: 1000},
	{name: "30% lost, batch 7", lossSeed: 2, loss: 30, batchSize: 7},
	{name: "30% lost, batch 1", lossSeed: 3, loss: 30, batchSize: 1},
	{name: "30% lost, interrupted and resumed", lossSeed: 4, loss: 30, batchSize: 25, interrupt: true},
	{name: "30% lost, webhooks racing the job", lossSeed: 5, loss: 30, batchSize: 50, race: true},
	{name: "every webhook lost", lossSeed: 6, loss: 100, batchSize: 100},
}

// The creditor's span and the run's window: payments are generated over
// eight weeks; the window is the last four, so that refunds, chargebacks,
// late failures and retries of payments created before it fall inside it.
var (
	gcMetaStart = now.AddDate(0, 0, -56)
	gcMetaSince = now.AddDate(0, 0, -28)
)

// gcRefusable are the provider_state values of the refused items a run may
// leave in this suite: facts GoCardless's own records cannot settle,
// because they undo something the state machine cannot undo.
var gcRefusable = []string{
	// The chargeback was cancelled (payments.chargeback_cancelled: the
	// money came back, the payment is paid_out again). chargeback is
	// terminal: whether the payment is settled again, and what the customer
	// was told, is for a person.
	"chargeback_cancelled",
	// A refund that failed, bounced or was cancelled after it was recorded:
	// amount_refunded is never lowered, so the local refund stays until a
	// person decides (the generator makes none; listed for completeness).
	"refund_failed", "refund_bounced", "refund_cancelled",
	// A resubmission the local row cannot follow: after a final failure (a
	// merchant's retry through the API), or a GoCardless retry of a payment
	// recorded failed locally. failed is terminal; the retry's collection
	// cannot be applied. (The generator makes no merchant retries and the
	// live worker never records a failure GoCardless retries as failed, so
	// none is expected here.)
	"resubmission_requested",
}

func TestMetamorphicGoCardless(t *testing.T) {
	for _, store := range []string{"postgres", "sqlite"} {
		t.Run(store, func(t *testing.T) {
			t.Parallel()
			var want *gcOutcome
			var known []gcKnown
			for _, v := range gcMetamorphicVariants {
				if store == "sqlite" && v.race {
					continue // concurrency is a PostgreSQL guarantee
				}
				got := runGoCardlessVariant(t, store, v)
				if want == nil {
					want = &got
					continue
				}
				known = append(known, gcCompare(t, *want, got)...)
			}
			if len(known) > 0 {
				t.Fatalf("a failed row's source_updated_at depends on the order the live worker saw payments.failed and "+
					"payments.late_failure_settled (the failure is established by failed; late_failure_settled stands in only "+
					"when failed is outside the window). Differences:\n%s", gcDescribeKnown(known))
			}
		})
	}
}

// gcOutcome is what one variant leaves: its final rows and what happened to
// each webhook.
type gcOutcome struct {
	name  string
	lines map[string]string // provider_id → the row as compared
	rows  map[string]models.Payment
	// fate says, per event id, whether its webhook was "lost", delivered
	// before the run ("delivered #n", in delivery order) or "raced" the job.
	fate map[string]string
	ds   []webhooksim.Delivery
}

// gcCompare fails the test for every payment whose final row differs
// between want and got, but one kind of difference, which it returns
// described: a failed row identical but for source_updated_at, whose two
// times are those of the payment's payments.failed and its
// late_failure_settled. Both facts imply failed (the mapping and the live
// worker agree, docs/providers/gocardless.md); settled → failed is an
// allowed edge, failed is terminal. A worker that sees the settlement
// first (the failure's webhook lost or late) records failed at the
// settlement's time; the run then finds the row in its chain's state and,
// under the guard (never to an older fact), cannot move source_updated_at
// back to the failure's time, which is what a run that created or
// repaired the row itself records (all delivered in order, every webhook
// lost). Expected: the same source_updated_at whatever the webhooks did.
func gcCompare(t *testing.T, want, got gcOutcome) (known []gcKnown) {
	t.Helper()
	var w, g []string
	for id, wl := range want.lines {
		gl, ok := got.lines[id]
		switch {
		case ok && gl == wl:
		case ok && gcLateFailureTime(want.rows[id], got.rows[id], want.ds):
			known = append(known, gcKnown{id: id, want: want, got: got})
		default:
			w = append(w, wl)
			if ok {
				g = append(g, gl)
			}
		}
	}
	for id, gl := range got.lines {
		if _, ok := want.lines[id]; !ok {
			g = append(g, gl)
		}
	}
	slices.Sort(w)
	slices.Sort(g)
	if d := lineDiff(w, g); d != "" {
		t.Errorf("final rows of %q differ from %q:\n%s", got.name, want.name, d)
	}
	return known
}

// gcLateFailureTime reports whether w and g are the same failed row but for
// source_updated_at, and their two times are those of the payment's failure
// facts, one of them a late_failure_settled.
func gcLateFailureTime(w, g models.Payment, ds []webhooksim.Delivery) bool {
	if w.State != models.StateFailed || g.State != models.StateFailed || w.SourceUpdatedAt == nil || g.SourceUpdatedAt == nil {
		return false
	}
	same := w
	same.SourceUpdatedAt, same.UpdatedAt, same.CreatedAt = g.SourceUpdatedAt, g.UpdatedAt, g.CreatedAt
	if gcRowLine(same) != gcRowLine(g) {
		return false
	}
	var wAt, gAt, settled bool
	for _, d := range ds {
		f := d.Facts[0]
		if f.PaymentID != w.ProviderID || f.State != models.StateFailed {
			continue
		}
		wAt = wAt || f.At.Equal(*w.SourceUpdatedAt)
		gAt = gAt || f.At.Equal(*g.SourceUpdatedAt)
		settled = settled || d.EventType == "payments.late_failure_settled"
	}
	return wAt && gAt && settled
}

// gcKnown is one payment whose row differs between two variants in the
// failure's time alone (gcCompare).
type gcKnown struct {
	id        string
	want, got gcOutcome
}

// gcDescribeKnown lists each payment once: its failure facts, its row in
// the first variant, and per other variant its row's time and what
// happened to the failure's webhook there.
func gcDescribeKnown(known []gcKnown) string {
	var ids []string
	by := map[string][]gcKnown{}
	for _, k := range known {
		if by[k.id] == nil {
			ids = append(ids, k.id)
		}
		by[k.id] = append(by[k.id], k)
	}
	slices.Sort(ids)
	var b strings.Builder
	for _, id := range ids {
		ks := by[id]
		var failedID string
		fmt.Fprintf(&b, "  %s:", id)
		for _, d := range ks[0].want.ds {
			if f := d.Facts[0]; f.PaymentID == id && (f.State == models.StateFailed || d.EventType == "payments.paid_out") {
				fmt.Fprintf(&b, " %s %s;", strings.TrimPrefix(d.EventType, "payments."), gcFmtTime(&d.At))
				if d.EventType == "payments.failed" {
					failedID = d.EventID
				}
			}
		}
		fmt.Fprintf(&b, " expected failed at %s (%q), got", gcFmtTime(ks[0].want.rows[id].SourceUpdatedAt), ks[0].want.name)
		for i, k := range ks {
			if i > 0 {
				b.WriteString(",")
			}
			fmt.Fprintf(&b, " %s in %q (failed webhook %s)", gcFmtTime(k.got.rows[id].SourceUpdatedAt), k.got.name, orLost(k.got.fate[failedID]))
		}
		b.WriteString("\n")
	}
	return strings.TrimSuffix(b.String(), "\n")
}

func orLost(s string) string {
	if s == "" {
		return "lost"
	}
	return s
}

func gcRowLine(p models.Payment) string {
	return fmt.Sprintf("%s %s at=%s refunded=%d settled=%s payout=%s amount=%d %s", p.ProviderID, p.State, gcFmtTime(p.SourceUpdatedAt),
		p.AmountRefunded, gcFmtTime(p.SettledAt), deref(p.PayoutID), p.Amount, p.Currency)
}

type gcMetaEnv struct {
	t       *testing.T
	db      *pgtest.DB
	srv     *gcfake.Server
	url     string
	crafted []gcCrafted
}

func newGCMetaEnv(t *testing.T, store string) *gcMetaEnv {
	t.Helper()
	var db *pgtest.DB
	if store == "sqlite" {
		db = pgtest.NewSQLite(t)
	} else {
		db = pgtest.New(t)
	}
	srv := gcfake.New(gcfake.Options{Now: func() time.Time { return now }, Seed: 7})
	url := srv.Start()
	t.Cleanup(srv.Close)
	return &gcMetaEnv{t: t, db: db, srv: srv, url: url, crafted: gcMetamorphicCreditor(t, srv)}
}

// gcCrafted are histories added to the generated ones so that the cases
// the suite is about are there whatever the generator's draw, with the
// state each must end in.
type gcCrafted struct {
	id    string
	what  string
	state models.State
}

// gcMetamorphicCreditor is the provider's side, the same for every
// variant: 300 generated payments over eight weeks (seed 2: Success+
// failures retried and failed again, late failures before and after the
// payout, chargebacks, a cancelled chargeback, refunds, cancellations and
// denied approvals in the window), crafted histories at the window's edges,
// and a check that the window holds each kind of history.
func gcMetamorphicCreditor(t *testing.T, srv *gcfake.Server) []gcCrafted {
	t.Helper()
	srv.Generate(gcfake.GenOptions{Payments: 300, Start: gcMetaStart, End: now.Add(-time.Hour), Seed: 2})
	d := func(month time.Month, day, h, m int) time.Time {
		return time.Date(2026, month, day, h, m, 0, 321_000_000, time.UTC)
	}
	var out []gcCrafted
	add := func(id, what string, st models.State) { out = append(out, gcCrafted{id, what, st}) }

	// Failed on the charge date, GoCardless will retry it, not resubmitted
	// by the window's end: status failed, the row stays authorised.
	pm := srv.CreatePayment(2100, "GBP", d(11, 10, 9, 0))
	srv.SetRetryIfPossible(pm, true)
	srv.Submit(pm, d(11, 11, 15, 0))
	srv.FailWillRetry(pm, d(11, 17, 6, 10))
	add(pm, "failure GoCardless will retry, pending", models.StateAuthorised)
	// Resubmitted by GoCardless, not submitted again yet: status
	// pending_submission, the row stays authorised.
	pm = srv.CreatePayment(2200, "GBP", d(11, 10, 9, 30))
	srv.Submit(pm, d(11, 11, 15, 5))
	srv.FailWillRetry(pm, d(11, 17, 6, 12))
	srv.AutoRetry(pm, d(11, 17, 7, 40))
	add(pm, "resubmitted by GoCardless, pending submission", models.StateAuthorised)
	// Failed before the window (GoCardless will retry), resubmitted, collected
	// and paid out inside it: the resubmission's failure is outside the
	// window (its cause, payment_autoretried, says it is normal).
	pm = srv.CreatePayment(2300, "GBP", d(10, 14, 9, 0))
	srv.Submit(pm, d(10, 15, 15, 0))
	srv.FailWillRetry(pm, d(10, 21, 6, 0))
	srv.AutoRetry(pm, d(10, 23, 7, 30))
	srv.Submit(pm, d(10, 26, 15, 0))
	srv.Confirm(pm, d(10, 29, 6, 0))
	srv.PayOut(d(10, 30, 7, 0), pm)
	add(pm, "retried across the window's start, paid out", models.StateSettled)
	// A late failure of a confirmed payment that GoCardless retries, then
	// collected and paid out.
	pm = srv.CreatePayment(2400, "GBP", d(11, 2, 9, 0))
	srv.Submit(pm, d(11, 3, 15, 0))
	srv.Confirm(pm, d(11, 6, 6, 0))
	srv.FailWillRetry(pm, d(11, 9, 5, 0))
	srv.AutoRetry(pm, d(11, 9, 6, 0))
	srv.Submit(pm, d(11, 10, 15, 0))
	srv.Confirm(pm, d(11, 13, 6, 0))
	srv.PayOut(d(11, 16, 7, 0), pm)
	add(pm, "late failure GoCardless retried, paid out", models.StateSettled)
	// Paid out before the window, charged back and the chargeback
	// cancelled inside it: a conflict for a person, the row stays
	// chargeback.
	pm = srv.CreatePayment(2500, "GBP", d(9, 28, 9, 0))
	srv.Submit(pm, d(9, 29, 15, 0))
	srv.Confirm(pm, d(10, 2, 6, 0))
	srv.PayOut(d(10, 5, 7, 0), pm)
	srv.ChargeBack(pm, d(11, 4, 8, 0))
	srv.CancelChargeback(pm, d(11, 11, 8, 0))
	add(pm, "paid out before the window, chargeback cancelled", models.StateChargeback)
	// Paid out before the window, refunded in full inside it.
	pm = srv.CreatePayment(2600, "GBP", d(10, 7, 9, 0))
	srv.Submit(pm, d(10, 8, 15, 0))
	srv.Confirm(pm, d(10, 13, 6, 0))
	srv.PayOut(d(10, 14, 7, 0), pm)
	srv.Refund(pm, 0, d(10, 26, 11, 0))
	add(pm, "paid out before the window, refunded inside it", models.StateRefunded)
	// Paid out before the window, partly refunded twice inside it.
	pm = srv.CreatePayment(2700, "GBP", d(10, 7, 9, 30))
	srv.Submit(pm, d(10, 8, 15, 30))
	srv.Confirm(pm, d(10, 13, 6, 30))
	srv.PayOut(d(10, 14, 7, 0), pm)
	srv.Refund(pm, 700, d(10, 27, 11, 0))
	srv.Refund(pm, 900, d(11, 3, 11, 0))
	add(pm, "partly refunded twice", models.StateSettled)
	// A late failure after the payout, settled against the next payout.
	pm = srv.CreatePayment(2800, "GBP", d(10, 26, 9, 0))
	srv.Submit(pm, d(10, 27, 15, 0))
	srv.Confirm(pm, d(10, 30, 6, 0))
	srv.PayOut(d(11, 2, 7, 0), pm)
	srv.Fail(pm, d(11, 3, 8, 0))
	srv.LateFailureSettled(pm, d(11, 4, 7, 0))
	add(pm, "late failure after the payout", models.StateFailed)

	seen := map[string]int{}
	for _, d := range srv.Deliveries() {
		if d.At.Before(gcMetaSince) {
			continue
		}
		k := d.EventType
		if k == "payments.failed" && bytes.Contains(d.Payload, []byte(`"will_attempt_retry":true`)) {
			k += " (will retry)"
		}
		seen[k]++
	}
	for _, k := range []string{"payments.failed (will retry)", "payments.resubmission_requested", "payments.failed",
		"payments.late_failure_settled", "payments.charged_back", "payments.chargeback_cancelled", "refunds.paid",
		"payments.cancelled", "payments.customer_approval_denied"} {
		require.Positive(t, seen[k], "the window holds no %s: %v", k, seen)
	}
	return out
}

// provider reads the creditor pageSize events a page (0: GoCardless's 500).
// Below 50 events a page it holds few of the window's events at once
// (gocardless.Config.Hold: 12, 28 and 4 events at batch sizes 25, 7 and
// 1), so the variants with small batches read the window in slices of its
// time and split each day's paid_out instant (up to 41 events) into
// chunks, the interrupted variant among them; those with larger batches,
// the first among them, read it whole: the variants also compare slices
// and chunks with the whole. Sliced, the window's slices given up are read
// back from disk and its next slices listed ahead.
func (e *gcMetaEnv) provider(pageSize int) *gocardless.Provider {
	hold := 1 << 20
	switch {
	case pageSize == 0 || pageSize >= 50:
	case pageSize >= 25:
		hold = 12
	default:
		hold = 4 * pageSize
	}
	// Paced (at a rate no test waits for), as a run is by default: a
	// sliced window lists its next slices ahead only at a pacing.
	p, err := gocardless.New(gocardless.Config{AccessToken: "sandbox_metamorphic", BaseURL: e.url, MaxRetries: 10, PageSize: pageSize,
		Hold: hold, RequestsPerSecond: 1e6, Sleep: func(ctx context.Context, _ time.Duration) error { return ctx.Err() }})
	require.NoError(e.t, err)
	return p
}

// options is a run over the window. A batch is made of whole pages of
// events, so the provider's page is no larger than the batch (at most 50
// events): at batch size 1 each page of one event is a batch of one
// payment.
func (e *gcMetaEnv) options(batchSize int) reconcile.Options {
	return reconcile.Options{DB: e.db.DB, Provider: e.provider(min(batchSize, 50)), Now: func() time.Time { return now }, StuckLimit: -1,
		Since: gcMetaSince, BatchSize: batchSize}
}

func (e *gcMetaEnv) run(batchSize int) reconcile.Result {
	e.t.Helper()
	res, err := reconcile.Run(context.Background(), e.options(batchSize))
	require.NoError(e.t, err)
	require.Equal(e.t, models.RunSucceeded, res.Run.Status)
	return res
}

// gcFmtTime is fmtTime to the millisecond: GoCardless times carry them.
func gcFmtTime(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.UTC().Format("2006-01-02T15:04:05.000Z07:00")
}

func runGoCardlessVariant(t *testing.T, store string, v variant) gcOutcome {
	t.Helper()
	e := newGCMetaEnv(t, store)
	ds := webhooksim.GoCardless(e.srv.Deliveries())
	rng := rand.New(rand.NewPCG(v.lossSeed, 99))
	var handled, kept, late []webhooksim.Delivery
	for _, d := range ds {
		if d.At.Before(gcMetaSince) {
			// Webhooks before the window were handled long ago, in order.
			handled = append(handled, d)
			continue
		}
		// Inside it, each one is lost on its own.
		if rng.IntN(100) < v.loss {
			continue
		}
		kept = append(kept, d)
		if rng.IntN(8) == 0 {
			kept = append(kept, d) // delivered twice
		}
	}
	if v.loss > 0 {
		rng.Shuffle(len(kept), func(i, j int) { kept[i], kept[j] = kept[j], kept[i] })
	}
	if v.race {
		kept, late = kept[:len(kept)/2], kept[len(kept)/2:]
	}
	ctx := context.Background()
	fate := map[string]string{}
	for i, d := range append(handled, kept...) {
		require.NoError(t, webhooksim.Apply(ctx, e.db.DB, gocardless.Name, d))
		if fate[d.EventID] == "" {
			fate[d.EventID] = fmt.Sprintf("delivered #%d", i+1)
		}
	}
	for _, d := range late {
		if fate[d.EventID] == "" {
			fate[d.EventID] = "raced"
		}
	}

	var runIDs []int64
	switch {
	case v.interrupt:
		ctx, cancel := context.WithCancel(ctx)
		batches := 0
		o := e.options(v.batchSize)
		o.Progress = func(reconcile.Progress) {
			if batches++; batches == 3 {
				cancel()
			}
		}
		first, err := reconcile.Run(ctx, o)
		require.ErrorIs(t, err, reconcile.ErrInterrupted)
		require.Equal(t, models.RunInterrupted, first.Run.Status)
		// The rerun resumes after the crashed run's last committed event.
		res := e.run(v.batchSize)
		require.Contains(t, string(res.Run.Notes), "resumed_from_run")
		runIDs = append(runIDs, first.Run.ID, res.Run.ID)
		// A full run over the whole window afterwards finds the rest.
		runIDs = append(runIDs, e.run(v.batchSize).Run.ID)
	case v.race:
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, d := range late {
				if err := webhooksim.Apply(ctx, e.db.DB, gocardless.Name, d); err != nil {
					t.Error(err)
					return
				}
			}
		}()
		runIDs = append(runIDs, e.run(v.batchSize).Run.ID)
		wg.Wait()
		runIDs = append(runIDs, e.run(v.batchSize).Run.ID) // what the race left behind
	default:
		runIDs = append(runIDs, e.run(v.batchSize).Run.ID)
	}

	// The oracle: GoCardless's own current objects, for every row of the
	// creditor (those whose facts all lie before the window included).
	rep, err := verify.Run(ctx, verify.Options{DB: e.db.DB, Provider: gocardless.Name, Reader: e.provider(0).Verifier(),
		Since: gcMetaStart.Add(-time.Hour), Until: now.Add(time.Hour), All: true, Now: func() time.Time { return now }})
	require.NoError(t, err)
	require.Positive(t, rep.Checked, v.name)
	var nrows int64
	require.NoError(t, e.db.Model(&models.Payment{}).Where("provider = ?", gocardless.Name).Count(&nrows).Error)
	require.Equal(t, int(nrows), rep.Checked, "%s: verify checks every row", v.name)
	require.Empty(t, rep.Unexplained, "%s: verify --all found differences no item explains:\n%s", v.name, gcDescribe(e, rep.Unexplained))

	// A rerun repairs nothing.
	again := e.run(v.batchSize)
	require.Zero(t, again.Run.Repaired, "%s: a rerun repaired", v.name)
	require.Zero(t, again.Run.SyntheticEvents, "%s: a rerun inserted events", v.name)

	// No payment the provider settles is left for a human.
	var refused []models.DriftItem
	require.NoError(t, e.db.Where("run_id IN ? AND action = 'refused'", runIDs).Find(&refused).Error)
	for _, it := range refused {
		require.Contains(t, gcRefusable, deref(it.ProviderState),
			"%s: payment %s left for a human: %s→%s %s", v.name, it.ProviderID, deref(it.LocalState), deref(it.ProviderState), string(it.Detail))
	}

	var ps []models.Payment
	require.NoError(t, e.db.Where("provider = ?", gocardless.Name).Order("provider_id").Find(&ps).Error)
	out := gcOutcome{name: v.name, lines: map[string]string{}, rows: map[string]models.Payment{}, fate: fate, ds: ds}
	states := map[models.State]int{}
	for _, p := range ps {
		out.lines[p.ProviderID], out.rows[p.ProviderID] = gcRowLine(p), p
		states[p.State]++
	}
	for _, c := range e.crafted {
		require.Equal(t, c.state, out.rows[c.id].State, "%s: %s (%s)", v.name, c.id, c.what)
	}
	var explained []string
	for _, d := range rep.ExplainedDifferences {
		explained = append(explained, fmt.Sprintf("%s %s %s→%s", d.ProviderID, d.Field, d.Local, d.Provider))
	}
	refusedStates := map[string]int{}
	for _, it := range refused {
		refusedStates[deref(it.ProviderState)]++
	}
	t.Logf("%s: %d rows %v; %d checked by verify, %d differing, all explained %v; %d refused items %v",
		v.name, len(ps), states, rep.Checked, rep.Differing, explained, len(refused), refusedStates)
	return out
}

// gcDescribe lists differences with the payment's drift items and events.
func gcDescribe(e *gcMetaEnv, diffs []verify.Difference) string {
	var b strings.Builder
	for _, d := range diffs {
		fmt.Fprintf(&b, "  %s %s: local %s, provider %s\n", d.ProviderID, d.Field, d.Local, d.Provider)
		var items []models.DriftItem
		e.db.Where("provider_id = ?", d.ProviderID).Order("id").Find(&items)
		for _, it := range items {
			fmt.Fprintf(&b, "    run %d %s/%s %s→%s %s\n", it.RunID, it.Kind, it.Action, deref(it.LocalState), deref(it.ProviderState), string(it.Detail))
		}
		for _, dl := range e.srv.Deliveries() {
			if dl.Facts[0].PaymentID == d.ProviderID {
				fmt.Fprintf(&b, "    %s %s %s implies %q\n", gcFmtTime(&dl.At), dl.EventID, dl.EventType, dl.Facts[0].State)
			}
		}
	}
	return b.String()
}
