package reconcile_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/reconciler/reconciler/internal/webhooksim"
	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/providers/gocardless"
	"github.com/reconciler/reconciler/providers/stripe/stripefake"
	"github.com/reconciler/reconciler/reconcile"
	"github.com/reconciler/reconciler/verify"
)

// repair: deliver (issue 18) for GoCardless, beside the application's own
// webhook worker (webhooksim.Worker, the seeds' pattern: claim with
// reclaim, process with the published guard, side effects and
// processed_at in one transaction). The creditor is the metamorphic
// suite's (gcMetamorphicCreditor: eight weeks of generated Bacs histories
// with retries, late failures, chargebacks and refunds, and the crafted
// ones at the window's edges). Every webhook before the window arrived;
// inside it each one is lost on its own (one in eight), the rest arrived
// and were processed, in order.
//
// The run changes no payment (the rows, updated_at included, and a
// trigger that sees no write to payments), records every missed event
// unprocessed (the provider's own id and payload) and says delivered on
// its items. The worker crashes mid-event twice (a panic after its writes,
// a side effect that fails), the claims hold until the lease passes and
// are then reclaimed: every delivered event is processed once and its side
// effects counted once. A second run delivers nothing, verify --all
// (GoCardless's own current objects, every row) finds nothing unexplained,
// and the rows are those a repair: apply run leaves from the same losses.
//
// PostgreSQL only, as the Stripe test: the worker's claim and the audit
// trigger are PostgreSQL's.
func TestDeliverGoCardlessHandsMissedEventsToTheWorker(t *testing.T) {
	t.Parallel()
	const seed = 21
	g := newGCDeliver(t, seed)
	w := g.workerSetup()
	before := g.dumpRows()

	res := g.run(40)
	delivered := g.requireDeliveredOnly(before, res)
	g.requireTheLostDelivered(delivered)
	kinds := map[string]int{}
	for _, it := range g.items(res.Run.ID) {
		kinds[it.Kind+"/"+it.Action]++
	}
	t.Logf("items of the delivering run: %v", kinds)
	require.Positive(t, kinds[models.KindMissingLocal+"/"+models.ActionDelivered], "the payment never heard of is delivered, not created")
	require.Positive(t, kinds[models.KindBehind+"/"+models.ActionDelivered])
	require.Zero(t, g.count(`SELECT count(*) FROM payments WHERE provider_id = ?`, g.unheard))

	// The worker dies mid-event twice: one panics after an event's side
	// effect and payment writes, before the commit; another's side effect
	// fails (the receipts service is down) after it claimed its event.
	// Each leaves its claim behind; a third worker drains the rest and
	// leaves those two until the lease passes.
	ctx := context.Background()
	var crashed []string
	panicking := *w
	var n atomic.Int64
	panicking.Crash = func(id string) error {
		if n.Add(1) == 3 {
			crashed = append(crashed, id)
			panic("worker died mid-event " + id)
		}
		return nil
	}
	require.Panics(t, func() { _, _ = panicking.Drain(ctx) })
	errReceipts := errors.New("receipts service unavailable")
	failing := *w
	var m atomic.Int64
	failing.Effect = func(tx *gorm.DB, id string) error {
		if err := w.Effect(tx, id); err != nil {
			return err
		}
		if m.Add(1) == 4 {
			crashed = append(crashed, id)
			return fmt.Errorf("event %s: %w", id, errReceipts)
		}
		return nil
	}
	_, err := failing.Drain(ctx)
	require.ErrorIs(t, err, errReceipts)
	_, err = w.Drain(ctx)
	require.NoError(t, err)
	require.Len(t, crashed, 2)
	require.Equal(t, int64(2), g.count(`SELECT count(*) FROM webhook_events WHERE processed_at IS NULL AND claimed_at IS NOT NULL AND event_id IN ?`, crashed),
		"the crashed workers' claims hold until the lease passes")
	require.Equal(t, int64(2), g.count(`SELECT count(*) FROM webhook_events WHERE processed_at IS NULL`), "only the crashed events wait")
	g.advance(6 * time.Minute)
	_, err = w.Drain(ctx)
	require.NoError(t, err)
	g.requireProcessedOnce(delivered)
	require.Equal(t, int64(2), g.count(`SELECT count(*) FROM webhook_events WHERE attempts = 2 AND event_id IN ?`, crashed),
		"the two crashed events were claimed twice")
	require.Equal(t, int64(len(delivered)-2), g.count(`SELECT count(*) FROM webhook_events WHERE attempts = 1 AND run_id = ?`, res.Run.ID),
		"every other delivered event was claimed once")
	require.Positive(t, g.count(`SELECT count(*) FROM h18_payment_writes`), "the worker moved the payments")
	require.Zero(t, g.count(`SELECT count(*) FROM h18_payment_writes WHERE writer <> 'worker'`), "only the worker wrote to payments")
	t.Logf("the worker wrote %d payments", g.count(`SELECT count(DISTINCT provider_id) FROM h18_payment_writes`))
	var p models.Payment
	require.NoError(t, g.db.Where("provider = ? AND provider_id = ?", gocardless.Name, g.unheard).First(&p).Error)
	require.Equal(t, []any{models.StateSettled, int64(2500), "gbp", int64(500)}, []any{p.State, p.Amount, p.Currency, p.AmountRefunded},
		"the worker created the payment never heard of from its delivered events")

	g.requireConverged()
	require.Zero(t, g.count(`SELECT count(*) FROM h18_payment_writes WHERE writer <> 'worker'`), "the second run wrote to payments")
	g.requireApplyRows(seed)
}

// The run and the worker at the same time, as TestDeliverWhileTheWorkerClaims:
// three workers claim while the run records the missed events, each dying
// mid-event on every fifth attempt, whichever worker has it, and
// restarting, with the lease short enough to be reclaimed during the run.
func TestDeliverGoCardlessWhileTheWorkerClaims(t *testing.T) {
	t.Parallel()
	const seed = 22
	g := newGCDeliver(t, seed)
	base := g.workerSetup()

	stop := crashingWorkers(base, g.advance)
	res := g.run(7)
	delivered := g.deliveredEvents(res.Run.ID)
	require.Positive(t, len(delivered))
	require.Eventually(t, func() bool {
		return g.count(`SELECT count(*) FROM webhook_events WHERE processed_at IS NULL`) == 0
	}, time.Minute, 20*time.Millisecond)
	crashes, errs := stop()
	require.Empty(t, errs)
	require.Positive(t, crashes, "the worker crashed mid-event at least once")
	require.Positive(t, g.count(`SELECT count(*) FROM webhook_events WHERE attempts > 1 AND run_id = ?`, res.Run.ID), "a crashed event was reclaimed")
	require.Zero(t, g.count(`SELECT count(*) FROM h18_payment_writes WHERE writer <> 'worker'`), "only the worker wrote to payments")
	g.requireTheLostDelivered(delivered)
	g.requireProcessedOnce(delivered)
	g.requireConverged()
	g.requireApplyRows(seed)
}

// gcDeliver is a GoCardless deliver environment: the metamorphic suite's
// creditor (gc) and, over the same database, the store-level helpers of
// deliver_test.go (count, deliveredEvents, requireProcessedOnce, dumpRows,
// advance and the worker's clock), whose env has no Stripe account in use.
type gcDeliver struct {
	*env
	gc      *gcMetaEnv
	unheard string          // the payment none of whose webhooks came (gcUnheardOf)
	lost    map[string]bool // the event ids whose webhooks never came
}

// newGCDeliver is the creditor on PostgreSQL with its webhooks delivered
// but for a share lost in the window (gcLose).
func newGCDeliver(t *testing.T, seed uint64) *gcDeliver {
	t.Helper()
	gc := newGCMetaEnv(t, "postgres")
	e := &env{t: t, db: gc.db, acct: stripefake.New(stripefake.Options{Now: func() time.Time { return now }}).Account("")}
	unheard := gcUnheardOf(gc)
	return &gcDeliver{env: e, gc: gc, unheard: unheard, lost: gcLose(t, gc, seed, unheard)}
}

// gcUnheardOf adds a payment created, collected, paid out and partly
// refunded inside the window, none of whose webhooks came: the run finds
// it missing locally, and only the worker creates it.
func gcUnheardOf(gc *gcMetaEnv) string {
	d := func(day, h int) time.Time { return time.Date(2026, 11, day, h, 0, 0, 456_000_000, time.UTC) }
	pm := gc.srv.CreatePayment(2500, "GBP", d(9, 10))
	gc.srv.Submit(pm, d(10, 15))
	gc.srv.Confirm(pm, d(13, 6))
	gc.srv.PayOut(d(16, 7), pm)
	gc.srv.Refund(pm, 500, d(17, 11))
	return pm
}

// gcLose delivers the creditor's webhooks in order, each one inside the
// window lost on its own (one in eight), and every one of payment unheard,
// and returns the lost event ids. In order, as loseTenth does: a webhook
// the worker processed out of order could leave drift no missed event
// explains (docs/deliver.md, Limits).
func gcLose(t *testing.T, gc *gcMetaEnv, seed uint64, unheard string) map[string]bool {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 18))
	lost := map[string]bool{}
	for _, d := range webhooksim.GoCardless(gc.srv.Deliveries()) {
		if d.Facts[0].PaymentID == unheard || !d.At.Before(gcMetaSince) && rng.IntN(8) == 0 {
			lost[d.EventID] = true
			continue
		}
		require.NoError(t, webhooksim.Apply(context.Background(), gc.db.DB, gocardless.Name, d))
	}
	require.Positive(t, len(lost))
	return lost
}

// run is a repair: deliver run over the window.
func (g *gcDeliver) run(batchSize int) reconcile.Result {
	g.t.Helper()
	o := g.gc.options(batchSize)
	o.Repair = reconcile.RepairDeliver
	res, err := reconcile.Run(context.Background(), o)
	require.NoError(g.t, err)
	require.Equal(g.t, models.RunSucceeded, res.Run.Status)
	return res
}

// workerSetup is deliverSetup (the side-effect table, the audit of writes
// to payments, the worker and its effect) with the worker reading
// GoCardless: its facts are those the creditor's events imply (a
// paid_out's with its payout, so that the worker records the settlement
// with the guard, as docs/deliver.md asks), and for an event the run made
// up for a change found without one, gcReconFacts.
func (g *gcDeliver) workerSetup() *webhooksim.Worker {
	w := g.deliverSetup()
	facts := map[string][]webhooksim.Fact{}
	for _, d := range g.gc.srv.Deliveries() {
		for _, f := range d.Facts {
			wf := webhooksim.Fact{PaymentID: f.PaymentID, State: f.State, At: f.At, AmountRefunded: f.AmountRefunded, Amount: f.Amount, Currency: f.Currency}
			if f.State == models.StateSettled {
				wf.PayoutID = f.PayoutID
			}
			facts[d.EventID] = append(facts[d.EventID], wf)
		}
	}
	w.Source = gocardless.Name
	w.Facts = func(id, _ string, payload []byte) ([]webhooksim.Fact, error) {
		if fs, ok := facts[id]; ok {
			// A GoCardless event carries no snapshot: what it says of its
			// payment is the action on links.payment at created_at.
			var ev struct {
				Links struct {
					Payment string `json:"payment"`
				} `json:"links"`
			}
			if err := json.Unmarshal(payload, &ev); err != nil {
				return nil, err
			}
			if ev.Links.Payment != fs[0].PaymentID {
				return nil, fmt.Errorf("event %s links payment %q, its facts %q", id, ev.Links.Payment, fs[0].PaymentID)
			}
			return fs, nil
		}
		return gcReconFacts(id, payload)
	}
	return w
}

// gcReconFacts is what a worker reads from a deterministic event the run
// recorded for a change found without an event: its id names the payment,
// the state and the provider time, its payload is the GoCardless payment
// (amounts in it; the currency upper-case, as GoCardless gives it).
func gcReconFacts(id string, payload []byte) ([]webhooksim.Fact, error) {
	parts := strings.Split(id, ":")
	if len(parts) != 4 || parts[0] != "recon" {
		return nil, fmt.Errorf("unknown event %s", id)
	}
	ts, err := strconv.ParseInt(parts[3], 10, 64)
	if err != nil {
		return nil, err
	}
	var pm struct {
		ID             string `json:"id"`
		Amount         int64  `json:"amount"`
		AmountRefunded int64  `json:"amount_refunded"`
		Currency       string `json:"currency"`
	}
	if err := json.Unmarshal(payload, &pm); err != nil {
		return nil, err
	}
	if pm.ID != parts[1] {
		return nil, fmt.Errorf("event %s carries payment %q", id, pm.ID)
	}
	return []webhooksim.Fact{{PaymentID: parts[1], State: models.State(parts[2]), At: time.Unix(ts, 0).UTC(),
		Amount: pm.Amount, AmountRefunded: pm.AmountRefunded, Currency: strings.ToLower(pm.Currency)}}, nil
}

// requireTheLostDelivered: the events the run recorded are exactly the
// lost webhooks (and any it made up for changes found without an event),
// each under GoCardless's own id with the payload GoCardless lists.
func (g *gcDeliver) requireTheLostDelivered(delivered []string) {
	g.t.Helper()
	payloads := map[string][]byte{}
	for _, d := range g.gc.srv.Deliveries() {
		payloads[d.EventID] = d.Payload
	}
	var real []string
	for _, id := range delivered {
		if !strings.HasPrefix(id, "recon:") {
			real = append(real, id)
		}
	}
	lost := slices.Sorted(maps.Keys(g.lost))
	require.Equal(g.t, lost, real, "the run recorded the lost webhooks, and only they")
	var evs []models.WebhookEvent
	require.NoError(g.t, g.db.Where("event_id IN ?", real).Find(&evs).Error)
	require.Len(g.t, evs, len(real))
	for _, ev := range evs {
		require.Equal(g.t, gocardless.Name, ev.Source)
		require.JSONEq(g.t, string(payloads[ev.EventID]), string(ev.Payload), "%s: the payload as GoCardless lists it", ev.EventID)
	}
	g.t.Logf("%d webhooks lost in the window, %d events delivered (%d made up for changes found without an event)",
		len(g.lost), len(delivered), len(delivered)-len(real))
}

// requireConverged: a second run delivers nothing and repairs nothing, and
// verify --all (GoCardless's own current objects, for every row of the
// creditor) finds nothing no drift item explains.
func (g *gcDeliver) requireConverged() {
	g.t.Helper()
	again := g.run(1000)
	if again.Run.Delivered != 0 {
		for _, it := range g.items(again.Run.ID) {
			if it.Action != models.ActionDelivered {
				continue
			}
			var evs []models.WebhookEvent
			require.NoError(g.t, g.db.Where("payload::text LIKE ?", "%"+it.ProviderID+"%").Order("processed_at").Find(&evs).Error)
			var lines []string
			for _, ev := range evs {
				lines = append(lines, fmt.Sprintf("%s %s synthetic=%v processed=%s attempts=%d", ev.EventID, ev.EventType, ev.Synthetic, fmtTime(ev.ProcessedAt), ev.Attempts))
			}
			var p models.Payment
			require.NoError(g.t, g.db.Where("provider = ? AND provider_id = ?", gocardless.Name, it.ProviderID).First(&p).Error)
			g.t.Logf("%s %s/%s %s\n  %s\n  %s", it.ProviderID, it.Kind, it.Action, it.Detail, gcRowLine(p), strings.Join(lines, "\n  "))
		}
	}
	require.Zero(g.t, again.Run.Delivered, "a second run delivered again: %v", itemKinds(g.items(again.Run.ID)))
	require.Zero(g.t, again.Run.SyntheticEvents)
	require.Zero(g.t, again.Run.Repaired)

	rep, err := verify.Run(context.Background(), verify.Options{DB: g.db.DB, Provider: gocardless.Name, Reader: g.gc.provider(0).Verifier(),
		Since: gcMetaStart.Add(-time.Hour), Until: now.Add(time.Hour), All: true, Now: func() time.Time { return now }})
	require.NoError(g.t, err)
	var rows int64
	require.NoError(g.t, g.db.Model(&models.Payment{}).Where("provider = ?", gocardless.Name).Count(&rows).Error)
	require.Positive(g.t, rows)
	require.Equal(g.t, int(rows), rep.Checked, "verify checks every row")
	require.Empty(g.t, rep.Unexplained, "verify --all found differences no item explains:\n%s", gcDescribe(g.gc, rep.Unexplained))
}

// requireApplyRows: the rows are those a repair: apply run leaves from the
// same losses (states, times, amounts; not the settlements, which the
// seeded webhooks leave empty and either run fills in its own way). One
// difference is tolerated and logged, the metamorphic suite's known one
// (gcLateFailureTime): a late failure whose failed and
// late_failure_settled webhooks were both lost is failed at the failure's
// time by the run, and at whichever of the two times the worker claimed
// first (a run records a batch's events in id order).
func (g *gcDeliver) requireApplyRows(seed uint64) {
	g.t.Helper()
	a := newGCMetaEnv(g.t, "postgres")
	require.Equal(g.t, g.unheard, gcUnheardOf(a))
	gcLose(g.t, a, seed, g.unheard)
	res, err := reconcile.Run(context.Background(), a.options(40))
	require.NoError(g.t, err)
	require.Equal(g.t, models.RunSucceeded, res.Run.Status)

	rows := func(db *gorm.DB) map[string]models.Payment {
		var ps []models.Payment
		require.NoError(g.t, db.Where("provider = ?", gocardless.Name).Find(&ps).Error)
		out := map[string]models.Payment{}
		for _, p := range ps {
			out[p.ProviderID] = p
		}
		return out
	}
	line := func(p models.Payment) string {
		return fmt.Sprintf("%s %s at=%s refunded=%d amount=%d %s", p.ProviderID, p.State, gcFmtTime(p.SourceUpdatedAt), p.AmountRefunded, p.Amount, p.Currency)
	}
	ds := webhooksim.GoCardless(g.gc.srv.Deliveries())
	want, got := rows(a.db.DB), rows(g.db.DB)
	var w, gl, known []string
	for id, ap := range want {
		dp, ok := got[id]
		switch {
		case ok && line(ap) == line(dp):
		case ok && gcLateFailureTime(ap, dp, ds):
			known = append(known, fmt.Sprintf("%s failed at %s (apply), %s (deliver)", id, gcFmtTime(ap.SourceUpdatedAt), gcFmtTime(dp.SourceUpdatedAt)))
		default:
			w = append(w, line(ap))
			if ok {
				gl = append(gl, line(dp))
			}
		}
	}
	for id, dp := range got {
		if _, ok := want[id]; !ok {
			gl = append(gl, line(dp))
		}
	}
	slices.Sort(w)
	slices.Sort(gl)
	if d := lineDiff(w, gl); d != "" {
		g.t.Fatalf("the worker left rows other than a repair: apply run (-apply +deliver):\n%s", d)
	}
	if len(known) > 0 {
		slices.Sort(known)
		g.t.Logf("the known late-failure time difference (gcLateFailureTime):\n  %s", strings.Join(known, "\n  "))
	}
}
