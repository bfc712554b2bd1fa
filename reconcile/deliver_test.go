package reconcile_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/reconciler/reconciler/internal/webhooksim"
	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/providers/stripe/stripefake"
	"github.com/reconciler/reconciler/reconcile"
)

// repair: deliver (issue 18) beside the application's own webhook worker,
// the seeds' pattern (webhooksim.Worker: claim with reclaim, process with
// the published guard, side effects and processed_at in one transaction):
// a tenth of the webhooks are lost at random;
// the run changes no payment and records the missed events unprocessed;
// the worker, crashing mid-event twice, processes every one exactly once
// with its side effects counted once; a second run finds nothing to
// deliver and verify --all nothing unexplained; and the rows are those a
// repair: apply run leaves.
func TestDeliverHandsMissedEventsToTheWorker(t *testing.T) {
	t.Parallel()
	e, since := deliverEnv(t, 11)
	w := e.deliverSetup()
	before := e.dumpRows()

	res := e.run(func(o *reconcile.Options) { o.Since, o.Repair, o.BatchSize = since, reconcile.RepairDeliver, 40 })
	delivered := e.requireDeliveredOnly(before, res)

	// The worker crashes twice mid-event: a panic, then a cancelled
	// context, each after its payment writes and side effect, before the
	// commit. The claims stay until the lease passes; then they are
	// reclaimed and processed.
	var n atomic.Int64
	w.Crash = func(id string) error {
		switch n.Add(1) {
		case 3:
			panic("worker died mid-event " + id)
		case 7:
			return fmt.Errorf("worker stopped mid-event %s: %w", id, context.Canceled)
		}
		return nil
	}
	require.Panics(t, func() { _, _ = w.Drain(context.Background()) })
	_, err := w.Drain(context.Background())
	require.ErrorIs(t, err, context.Canceled)
	w.Crash = nil
	_, err = w.Drain(context.Background())
	require.NoError(t, err)
	require.Equal(t, int64(2), e.count(`SELECT count(*) FROM webhook_events WHERE processed_at IS NULL AND claimed_at IS NOT NULL`),
		"the crashed workers' claims hold until the lease passes")
	e.advance(6 * time.Minute)
	_, err = w.Drain(context.Background())
	require.NoError(t, err)
	e.requireProcessedOnce(delivered)
	require.Equal(t, int64(2), e.count(`SELECT count(*) FROM webhook_events WHERE attempts = 2`), "the two crashed events were claimed twice")

	e.requireConverged(since)
	e.requireApplyRows(11)
}

// The run and the worker at the same time: three workers claim while the
// run records events, dying mid-event on every fifth attempt (and
// restarting), with the lease short enough to be reclaimed during the run.
func TestDeliverWhileTheWorkerClaims(t *testing.T) {
	t.Parallel()
	e, since := deliverEnv(t, 12)
	base := e.deliverSetup()

	stop := crashingWorkers(base, e.advance)
	res := e.run(func(o *reconcile.Options) { o.Since, o.Repair, o.BatchSize = since, reconcile.RepairDeliver, 7 })
	delivered := e.deliveredEvents(res.Run.ID)
	require.Positive(t, len(delivered))
	// Drain what is left, then stop the workers.
	require.Eventually(t, func() bool {
		return e.count(`SELECT count(*) FROM webhook_events WHERE processed_at IS NULL`) == 0
	}, time.Minute, 20*time.Millisecond)
	crashes, errs := stop()
	require.Empty(t, errs)
	require.Positive(t, crashes, "the worker crashed mid-event at least once")
	require.Zero(t, e.count(`SELECT count(*) FROM h18_payment_writes WHERE writer <> 'worker'`), "only the worker wrote to payments")
	e.requireProcessedOnce(delivered)
	e.requireConverged(since)
	e.requireApplyRows(12)
}

// A dry run with repair: deliver stays dry: no event is recorded; its
// items say what it would repair, as a dry run's do.
func TestDeliverDryRunStaysDry(t *testing.T) {
	t.Parallel()
	e, since := deliverEnv(t, 13)
	events := e.count(`SELECT count(*) FROM webhook_events`)
	res := e.run(func(o *reconcile.Options) { o.Since, o.Repair, o.DryRun = since, reconcile.RepairDeliver, true })
	require.Equal(t, events, e.count(`SELECT count(*) FROM webhook_events`))
	require.Positive(t, res.Run.Repaired)
	require.Zero(t, res.Run.Delivered)
}

func TestDeliverUnknownRepairIsABadWindow(t *testing.T) {
	e := newEnv(t)
	_, err := reconcile.Run(context.Background(), reconcile.Options{DB: e.db.DB, Provider: e.provider(), Now: func() time.Time { return now }, Repair: "later"})
	require.ErrorIs(t, err, reconcile.ErrBadWindow)
	require.ErrorContains(t, err, `repair "later" is not one of apply, deliver`)
	require.Zero(t, e.count(`SELECT count(*) FROM reconciliation_runs`))
}

// deliverEnv is a PostgreSQL environment whose account has six days of
// histories, a tenth of whose webhooks were lost in the window, at random.
func deliverEnv(t *testing.T, seed uint64) (*env, time.Time) {
	e := newEnvSerial(t, "postgres")
	loseTenth(e, seed)
	return e, at(-24*6 - 1)
}

func loseTenth(e *env, seed uint64) {
	e.acct.CreatePayment(100, "gbp", false, at(-24*8))
	e.acct.Generate(stripefake.GenOptions{Payments: 150, Start: at(-24 * 6), End: at(-1), Seed: int64(seed)})
	rng := rand.New(rand.NewPCG(seed, 7))
	since := at(-24*6 - 1)
	var kept []webhooksim.Delivery
	for _, d := range webhooksim.Stripe(e.acct.Deliveries()) {
		if rng.IntN(10) == 0 && !d.At.Before(since) {
			continue
		}
		kept = append(kept, d)
	}
	// The webhooks that came were processed in order: a refund the seeding
	// worker processed before its payment existed would leave drift no
	// missed event explains, which repair: deliver cannot hand to anyone
	// (docs/deliver.md). The missed ones reach the workers in whatever
	// order their claims take.
	for _, d := range kept {
		require.NoError(e.t, webhooksim.Apply(context.Background(), e.db.DB, "stripe", d))
	}
}

// workerClock is the workers' clock, moved on by advance.
var workerClocks sync.Map // *env → *atomic.Int64 (offset in ns)

func (e *env) advance(d time.Duration) {
	v, _ := workerClocks.LoadOrStore(e, new(atomic.Int64))
	v.(*atomic.Int64).Add(int64(d))
}

func (e *env) workerNow() time.Time {
	v, _ := workerClocks.LoadOrStore(e, new(atomic.Int64))
	return now.Add(time.Duration(v.(*atomic.Int64).Load()))
}

// deliverSetup makes the worker's side-effect table (one row per side
// effect run, no key: a second run of an event's side effects shows) and an
// audit of every write to payments naming the writer, and returns the
// worker.
func (e *env) deliverSetup() *webhooksim.Worker {
	for _, q := range []string{
		`CREATE TABLE h18_side_effects (event_id text NOT NULL)`,
		`CREATE TABLE h18_payment_writes (provider_id text NOT NULL, writer text NOT NULL)`,
		`CREATE FUNCTION h18_log_write() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			INSERT INTO h18_payment_writes VALUES (NEW.provider_id, coalesce(current_setting('h18.writer', true), ''));
			RETURN NEW;
		END $$`,
		`CREATE TRIGGER h18_log_write AFTER INSERT OR UPDATE ON payments FOR EACH ROW EXECUTE FUNCTION h18_log_write()`,
	} {
		require.NoError(e.t, e.db.Exec(q).Error)
	}
	facts := map[string][]webhooksim.Fact{}
	for _, d := range webhooksim.Stripe(e.acct.Deliveries()) {
		var ev struct {
			Data struct {
				Object struct {
					ID string `json:"id"`
				} `json:"object"`
			} `json:"data"`
		}
		_ = json.Unmarshal(d.Payload, &ev)
		for _, f := range d.Facts {
			if d.EventType == "payout.paid" && f.State == models.StateSettled {
				f.PayoutID = ev.Data.Object.ID
			}
			facts[d.EventID] = append(facts[d.EventID], f)
		}
	}
	return &webhooksim.Worker{DB: e.db.DB, Source: "stripe", Lease: 5 * time.Minute, Now: e.workerNow,
		Facts: func(id, _ string, payload []byte) ([]webhooksim.Fact, error) {
			if fs, ok := facts[id]; ok {
				return fs, nil
			}
			return reconFacts(id, payload)
		},
		Effect: func(tx *gorm.DB, id string) error {
			if err := tx.Exec(`SELECT set_config('h18.writer', 'worker', true)`).Error; err != nil {
				return err
			}
			return tx.Exec(`INSERT INTO h18_side_effects VALUES (?)`, id).Error
		}}
}

// reconFacts is what a worker reads from a deterministic event the run
// recorded for a change found without an event: its id names the payment,
// the state and the provider time, its payload is the provider's object.
func reconFacts(id string, payload []byte) ([]webhooksim.Fact, error) {
	parts := strings.Split(id, ":")
	if len(parts) != 4 || parts[0] != "recon" {
		return nil, fmt.Errorf("unknown event %s", id)
	}
	ts, err := strconv.ParseInt(parts[3], 10, 64)
	if err != nil {
		return nil, err
	}
	var obj struct {
		Amount   int64  `json:"amount"`
		Currency string `json:"currency"`
	}
	_ = json.Unmarshal(payload, &obj)
	return []webhooksim.Fact{{PaymentID: parts[1], State: models.State(parts[2]), At: time.Unix(ts, 0).UTC(), Amount: obj.Amount, Currency: obj.Currency}}, nil
}

func (e *env) count(q string, args ...any) int64 {
	e.t.Helper()
	var n int64
	require.NoError(e.t, e.db.Raw(q, args...).Scan(&n).Error)
	return n
}

// deliveredEvents are the events run runID recorded: every one unprocessed
// and synthetic.
func (e *env) deliveredEvents(runID int64) []string {
	e.t.Helper()
	var evs []models.WebhookEvent
	require.NoError(e.t, e.db.Where("run_id = ?", runID).Order("event_id").Find(&evs).Error)
	ids := make([]string, len(evs))
	for i, ev := range evs {
		require.True(e.t, ev.Synthetic, ev.EventID)
		ids[i] = ev.EventID
	}
	return ids
}

// requireProcessedOnce: every delivered event is processed and its side
// effects ran exactly once (the crashed attempts' rolled back).
func (e *env) requireProcessedOnce(delivered []string) {
	e.t.Helper()
	require.Zero(e.t, e.count(`SELECT count(*) FROM webhook_events WHERE processed_at IS NULL`))
	var rows []struct {
		EventID string
		N       int64
	}
	require.NoError(e.t, e.db.Raw(`SELECT event_id, count(*) AS n FROM h18_side_effects GROUP BY event_id ORDER BY event_id`).Scan(&rows).Error)
	got := make([]string, 0, len(rows))
	for _, r := range rows {
		require.Equal(e.t, int64(1), r.N, "the side effects of %s ran %d times", r.EventID, r.N)
		got = append(got, r.EventID)
	}
	require.Equal(e.t, delivered, got, "the side effects ran for exactly the delivered events")
}

// requireConverged: a second run finds nothing to deliver, and verify
// --all nothing unexplained.
func (e *env) requireConverged(since time.Time) {
	e.t.Helper()
	again := e.run(func(o *reconcile.Options) { o.Since, o.Repair = since, reconcile.RepairDeliver })
	if again.Run.Delivered != 0 {
		for _, it := range e.items(again.Run.ID) {
			var evs []models.WebhookEvent
			require.NoError(e.t, e.db.Where("payload::text LIKE ?", "%"+it.ProviderID+"%").Order("processed_at").Find(&evs).Error)
			var lines []string
			for _, ev := range evs {
				lines = append(lines, fmt.Sprintf("%s %s synthetic=%v processed=%s attempts=%d", ev.EventID, ev.EventType, ev.Synthetic, fmtTime(ev.ProcessedAt), ev.Attempts))
			}
			e.t.Logf("%s %s/%s %s\n%s\n  %s", it.ProviderID, it.Kind, it.Action, it.Detail, e.dumpRow(it.ProviderID), strings.Join(lines, "\n  "))
		}
	}
	require.Zero(e.t, again.Run.Delivered, "a second run delivered again: %v", itemKinds(e.items(again.Run.ID)))
	require.Zero(e.t, again.Run.SyntheticEvents)
	require.Zero(e.t, again.Run.Repaired)
	e.verifyEvery()
}

func (e *env) dumpRow(id string) string {
	p := e.payment(id)
	return fmt.Sprintf("%s at=%s refunded=%d settled=%s", p.State, fmtTime(p.SourceUpdatedAt), p.AmountRefunded, fmtTime(p.SettledAt))
}

// dumpRows is every payment row, updated_at included (a write that changed
// nothing else still shows).
func (e *env) dumpRows() []string {
	e.t.Helper()
	var ps []models.Payment
	require.NoError(e.t, e.db.Order("provider, provider_id").Find(&ps).Error)
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = fmt.Sprintf("%s %s at=%s refunded=%d settled=%s payout=%s amount=%d %s captured=%v updated=%s", p.ProviderID, p.State,
			fmtTime(p.SourceUpdatedAt), p.AmountRefunded, fmtTime(p.SettledAt), deref(p.PayoutID), p.Amount, p.Currency, p.AmountCaptured,
			p.UpdatedAt.UTC().Format(time.RFC3339Nano))
	}
	return out
}

// dumpStates is the payment rows without their write times and their
// settlements: the seeded webhooks (webhooksim.Apply) leave settled_at
// empty, which a repair: apply run fills in as bookkeeping.
func (e *env) dumpStates() []string {
	e.t.Helper()
	var ps []models.Payment
	require.NoError(e.t, e.db.Order("provider, provider_id").Find(&ps).Error)
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = fmt.Sprintf("%s %s at=%s refunded=%d amount=%d %s", p.ProviderID, p.State,
			fmtTime(p.SourceUpdatedAt), p.AmountRefunded, p.Amount, p.Currency)
	}
	return out
}

// requireApplyRows: the rows are those a repair: apply run leaves from
// the same losses.
func (e *env) requireApplyRows(seed uint64) {
	e.t.Helper()
	a := newEnvSerial(e.t, "postgres")
	loseTenth(a, seed)
	a.run(func(o *reconcile.Options) { o.Since = at(-24*6 - 1) })
	if d := lineDiff(a.dumpStates(), e.dumpStates()); d != "" {
		e.t.Fatalf("the worker left rows other than a repair: apply run (-apply +deliver):\n%s", d)
	}
}

// crashingWorkers starts three copies of base claiming and processing
// events, each dying mid-event on every fifth attempt, whichever worker has
// it, and restarting, while advance moves the workers' clock a minute a
// round so that leases run out meanwhile. stop ends them and returns how
// many times a worker died and the errors their drains returned.
func crashingWorkers(base *webhooksim.Worker, advance func(time.Duration)) (stop func() (crashes int64, errs []error)) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var died atomic.Int64
	var mu sync.Mutex
	var errors []error
	var k atomic.Int64 // every fifth event attempted, whichever worker has it
	for range 3 {
		w := *base
		w.Crash = func(id string) error {
			if k.Add(1)%5 == 0 {
				died.Add(1)
				panic("worker died mid-event " + id)
			}
			return nil
		}
		wg.Go(func() {
			for ctx.Err() == nil {
				func() {
					defer func() { _ = recover() }() // the worker restarts
					if _, err := w.Drain(context.Background()); err != nil {
						mu.Lock()
						errors = append(errors, err)
						mu.Unlock()
					}
				}()
				advance(time.Minute) // the leases run out meanwhile
				time.Sleep(2 * time.Millisecond)
			}
		})
	}
	return func() (int64, []error) {
		cancel()
		wg.Wait()
		return died.Load(), errors
	}
}

// requireDeliveredOnly checks what a repair: deliver run did: no payment
// row changed (before is dumpRows before it) or written, its items say
// delivered, never repaired, and every event it recorded, and only they,
// wait unprocessed for the worker. It returns those events.
func (e *env) requireDeliveredOnly(before []string, res reconcile.Result) []string {
	t := e.t
	t.Helper()
	require.Equal(t, before, e.dumpRows(), "a repair: deliver run changed a payment row")
	require.Zero(t, e.count(`SELECT count(*) FROM h18_payment_writes`), "a repair: deliver run wrote to payments")
	require.Positive(t, res.Run.Delivered)
	require.Zero(t, res.Run.Repaired, "delivered items are not repaired")
	require.Zero(t, res.Run.SettlementsRecorded)
	require.Contains(t, strings.ReplaceAll(string(res.Run.Notes), " ", ""), `"repair":"deliver"`)
	require.Zero(t, e.count(`SELECT count(*) FROM drift_items WHERE run_id = ? AND action = 'repaired'`, res.Run.ID))
	require.Equal(t, res.Run.Delivered, e.count(`SELECT count(*) FROM drift_items WHERE run_id = ? AND action = 'delivered'`, res.Run.ID))
	delivered := e.deliveredEvents(res.Run.ID)
	require.Equal(t, res.Run.SyntheticEvents, int64(len(delivered)))
	require.Equal(t, int64(len(delivered)), e.count(`SELECT count(*) FROM webhook_events WHERE processed_at IS NULL`),
		"every missed event waits for the worker, and only they")
	return delivered
}
