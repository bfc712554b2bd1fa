package scenario_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/reconciler/reconciler/internal/pgtest"
	"github.com/reconciler/reconciler/internal/scenario"
	"github.com/reconciler/reconciler/internal/webhooksim"
	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/providers/gocardless"
	"github.com/reconciler/reconciler/providers/gocardless/gcfake"
	"github.com/reconciler/reconciler/reconcile"
	"github.com/reconciler/reconciler/verify"
)

// A Friday morning: the last working day before it is Thursday.
var gcBehaviourNow = time.Date(2026, 11, 20, 6, 0, 0, 0, time.UTC)

// gcWorld is the fake GoCardless with the behaviour scenario built in, and
// the deliveries of its background payments.
type gcWorld struct {
	now        time.Time
	fake       *gcfake.Server
	url        string
	s          *scenario.GoCardlessBehaviour
	background []webhooksim.Delivery
}

func newGCWorld(t *testing.T, background int) *gcWorld {
	t.Helper()
	now := gcBehaviourNow
	fake := gcfake.New(gcfake.Options{Now: func() time.Time { return now }, Seed: 5})
	url := fake.Start()
	t.Cleanup(fake.Close)
	s := scenario.NewGoCardlessBehaviour(fake, now)
	if background > 0 {
		fake.Generate(gcfake.GenOptions{Payments: background, Start: s.Start, End: now.Add(-30 * time.Minute), Seed: 17})
	}
	w := &gcWorld{now: now, fake: fake, url: url, s: s}
	sent := map[string]bool{}
	for _, d := range s.Sent {
		sent[d.EventID] = true
	}
	for _, d := range webhooksim.GoCardless(fake.Deliveries()) {
		if !sent[d.EventID] {
			w.background = append(w.background, d)
		}
	}
	return w
}

func gcBehaviourProvider(t *testing.T, url string) *gocardless.Provider {
	t.Helper()
	p, err := gocardless.New(gocardless.Config{AccessToken: "sandbox_behaviour", BaseURL: url, MaxRetries: 8,
		Sleep: func(ctx context.Context, _ time.Duration) error { return ctx.Err() }})
	require.NoError(t, err)
	return p
}

// run reconciles once: the window [Start-1h, now), the stuck path on with
// the scenario's cutoff.
func (w *gcWorld) run(t *testing.T, db *gorm.DB, url string, batch int) reconcile.Result {
	t.Helper()
	res, err := reconcile.Run(context.Background(), reconcile.Options{DB: db, Provider: gcBehaviourProvider(t, url),
		Since: w.s.Start.Add(-time.Hour), Until: w.now, Now: func() time.Time { return w.now },
		StuckBefore: func(time.Time) time.Time { return w.s.StuckBefore }, BatchSize: batch})
	require.NoError(t, err)
	require.Equal(t, models.RunSucceeded, res.Run.Status)
	return res
}

// gcRow is what the tests compare of a payments row.
type gcRow struct {
	State                   models.State
	Amount                  int64
	Currency                string
	AmountRefunded          int64
	SourceUpdatedAt         string
	SettledAt               string
	PayoutID                string
	AmountCaptured          int64
	hasSettled, hasCaptured bool
}

func gcRowsOf(t *testing.T, db *gorm.DB) map[string]gcRow {
	t.Helper()
	var ps []models.Payment
	require.NoError(t, db.Where("provider = 'gocardless'").Find(&ps).Error)
	ts := func(t *time.Time) string {
		if t == nil {
			return ""
		}
		return t.UTC().Format(time.RFC3339Nano)
	}
	out := make(map[string]gcRow, len(ps))
	for _, p := range ps {
		r := gcRow{State: p.State, Amount: p.Amount, Currency: p.Currency, AmountRefunded: p.AmountRefunded,
			SourceUpdatedAt: ts(p.SourceUpdatedAt), SettledAt: ts(p.SettledAt), hasSettled: p.SettledAt != nil}
		if p.PayoutID != nil {
			r.PayoutID = *p.PayoutID
		}
		if p.AmountCaptured != nil {
			r.AmountCaptured, r.hasCaptured = *p.AmountCaptured, true
		}
		out[p.ProviderID] = r
	}
	return out
}

func gcItemsOf(t *testing.T, db *gorm.DB, runID int64) map[string][]models.DriftItem {
	t.Helper()
	var items []models.DriftItem
	require.NoError(t, db.Where("run_id = ?", runID).Order("provider_id, kind, action").Find(&items).Error)
	out := map[string][]models.DriftItem{}
	for _, it := range items {
		out[it.ProviderID] = append(out[it.ProviderID], it)
	}
	return out
}

func tsOf(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// verifyClean runs verify --all over every row: each is compared with
// GoCardless's own objects (through the provider's verifier) and every
// difference must be explained by a drift item. It returns the explained
// differences by payment.
func (w *gcWorld) verifyClean(t *testing.T, db *gorm.DB) map[string][]verify.Difference {
	t.Helper()
	p := gcBehaviourProvider(t, w.url)
	rep, err := verify.Run(context.Background(), verify.Options{DB: db, Provider: gocardless.Name, Reader: p.Verifier(),
		Since: w.now.Add(-30 * 24 * time.Hour), Until: w.now.Add(time.Hour), All: true, Now: func() time.Time { return w.now }})
	require.NoError(t, err)
	var rows int64
	require.NoError(t, db.Model(&models.Payment{}).Where("provider = 'gocardless'").Count(&rows).Error)
	require.Positive(t, rows)
	require.Equal(t, int(rows), rep.InWindow, "the window holds every row")
	require.Equal(t, rep.InWindow, rep.Checked)
	require.Empty(t, rep.Unexplained, "verify --all: differences no drift item explains")
	explained := map[string][]verify.Difference{}
	for _, d := range rep.ExplainedDifferences {
		explained[d.ProviderID] = append(explained[d.ProviderID], d)
	}
	return explained
}

// checkGCExpect asserts the scenario's Expect and StateAt exactly.
func (w *gcWorld) checkGCExpect(t *testing.T, rows map[string]gcRow, items map[string][]models.DriftItem) {
	t.Helper()
	names := w.s.Names()
	require.Len(t, w.s.Expect, len(names), "one expectation per crafted payment")
	require.Len(t, w.s.StateAt, len(names))
	for id, want := range w.s.Expect {
		name := names[id]
		require.NotEmpty(t, name, "%s is a crafted payment", id)
		assert.Equal(t, want.Kinds, kindsOf(items[id]), "%s (%s): the run's items", name, id)
		r, ok := rows[id]
		require.True(t, ok, "%s: a row", name)
		assert.Equal(t, want.State, r.State, "%s: state", name)
		assert.Equal(t, tsOf(w.s.StateAt[id]), r.SourceUpdatedAt, "%s: source_updated_at", name)
		assert.Equal(t, want.AmountRefunded, r.AmountRefunded, "%s: amount_refunded", name)
		assert.Equal(t, want.Settled, r.hasSettled, "%s: settled_at set", name)
		if want.Settled {
			assert.Equal(t, tsOf(want.SettledAt), r.SettledAt, "%s: settled_at", name)
		}
		assert.Equal(t, want.PayoutID, r.PayoutID, "%s: payout_id", name)
		if want.ExplanationHas != "" {
			assert.Contains(t, explanations(t, items[id]), want.ExplanationHas, "%s: what the items say", name)
		}
	}
}

func TestGoCardlessBehaviourOneRun(t *testing.T) {
	t.Parallel()
	w := newGCWorld(t, 40)
	s := w.s
	db := pgtest.New(t)
	ctx := context.Background()
	require.Positive(t, s.Missed)
	for _, d := range s.Sent {
		require.False(t, d.At.After(w.now), "every event is in the past")
		require.False(t, d.At.Before(s.Start.Add(-30*24*time.Hour)), "within the last weeks")
	}
	// Only the stuck payments' events lie before the window.
	for _, d := range s.Sent {
		before := d.At.Before(s.Start)
		stuck := d.Facts[0].PaymentID == s.StuckConfirmed || d.Facts[0].PaymentID == s.StuckPaidOut
		require.Equal(t, stuck, before, "%s %s at %s", d.Facts[0].PaymentID, d.EventType, d.At)
	}
	require.NoError(t, s.SeedLocal(ctx, db.DB, w.now))
	require.NoError(t, scenario.SeedGoCardlessDeliveries(ctx, db.DB, w.background, w.now))

	// The rows as the webhooks left them: what each behaviour starts from.
	before := gcRowsOf(t, db.DB)
	for id, want := range map[string]models.State{
		s.SuccessPlusRetried: models.StateAuthorised, s.LateFailureRecorded: models.StateFailed, s.LateFailureLost: models.StateSettled,
		s.RefundCreatedLost: models.StateSettled, s.RefundFailedCounted: models.StateSettled, s.RefundFailedUncounted: models.StateSettled,
		s.RefundUnknownAction: models.StateSettled, s.PayoutBounced: models.StateSettled, s.PayoutIDRecorded: models.StateCaptured,
		s.StuckConfirmed: models.StateAuthorised, s.StuckPaidOut: models.StateCaptured,
	} {
		require.Equal(t, want, before[id].State, "seeded %s", s.Names()[id])
		require.Empty(t, before[id].PayoutID, "the worker records no payout")
	}
	require.Equal(t, int64(1000), before[s.RefundFailedCounted].AmountRefunded, "its refund was counted")
	require.Zero(t, before[s.RefundFailedUncounted].AmountRefunded, "its refund was never counted")
	require.Equal(t, int64(500), before[s.RefundUnknownAction].AmountRefunded)
	for _, id := range []string{s.StuckConfirmed, s.StuckPaidOut} {
		require.Less(t, before[id].SourceUpdatedAt, tsOf(s.StuckBefore), "the stuck path may take %s", s.Names()[id])
	}

	res := w.run(t, db.DB, w.url, 0)
	rows := gcRowsOf(t, db.DB)
	items := gcItemsOf(t, db.DB, res.Run.ID)
	w.checkGCExpect(t, rows, items)

	// What support reads: each sentence names the objects and amounts a
	// person needs to answer the customer.
	for id, needs := range map[string][]string{
		s.SuccessPlusRetried:    {"settled webhook was never received"},
		s.LateFailureLost:       {"failed webhook was never received"},
		s.RefundCreatedLost:     {"refunded webhook was never received", "GoCardless counts a refund in amount_refunded from its creation"},
		s.RefundFailedCounted:   {s.CountedRefund, "10.00 GBP", "failed at GoCardless", "the funds were credited in a payout", "never lowers"},
		s.RefundFailedUncounted: {s.UncountedRefund, "15.00 GBP", "failed at GoCardless", "amount_refunded was raised", "from its creation"},
		s.RefundUnknownAction:   {s.UnknownRefund, `"` + scenario.GoCardlessUnknownRefundAction + `"`, "nothing was changed"},
		s.PayoutBounced:         {s.BouncedPayout, "bounced at GoCardless after it was paid", "payout_id still name it"},
		s.PayoutIDRecorded:      {"settled webhook was never received"},
		s.StuckConfirmed:        {"captured webhook was never received"},
		s.StuckPaidOut:          {"settled webhook was never received"},
	} {
		ex := explanations(t, items[id])
		for _, n := range needs {
			require.Contains(t, ex, n, "%s: the report says %q", s.Names()[id], n)
		}
	}
	detailByKind := func(id, kind string) map[string]any {
		for _, it := range items[id] {
			if it.Kind == kind {
				return detailOf(t, it)
			}
		}
		t.Fatalf("%s: no %s item", s.Names()[id], kind)
		return nil
	}
	// The refund fact: the detail says which amount_refunded GoCardless
	// keeps, and how far the row was raised.
	for id, to := range map[string]float64{s.RefundCreatedLost: 2000, s.RefundFailedUncounted: 1500} {
		d := detailByKind(id, models.KindBehind)
		require.Contains(t, d["amount_refunded_counts"], "from its creation", s.Names()[id])
		require.Equal(t, to, d["amount_refunded_to"], s.Names()[id])
		require.Equal(t, float64(0), d["amount_refunded_from"], s.Names()[id])
	}
	// A settlement names its payout in the item.
	for id, po := range map[string]string{s.SuccessPlusRetried: s.RetriedPayout, s.PayoutIDRecorded: s.RecordedPayout, s.LateFailureLost: s.DayPayout,
		s.StuckPaidOut: s.StuckPayout} {
		require.Equal(t, po, detailByKind(id, models.KindBehind)["payout_id"], s.Names()[id])
	}
	// The retried failure never counted as final.
	require.NotContains(t, explanations(t, items[s.SuccessPlusRetried]), "failed")
	// The stuck path dated the confirmation by its event, not charge_date
	// 00:00, and reported what it cost.
	require.Equal(t, tsOf(s.ConfirmedAt), detailByKind(s.StuckConfirmed, models.KindBehind)["provider_time"])
	require.Equal(t, tsOf(s.StuckPaidOutAt), detailByKind(s.StuckPaidOut, models.KindBehind)["provider_time"])
	notes := map[string]any{}
	require.NoError(t, json.Unmarshal(res.Run.Notes, &notes))
	require.Equal(t, float64(2), notes["stuck_checked"], "the two stuck payments, nothing else: %s", res.Run.Notes)

	// verify --all: nothing unexplained; only the bounced payout differs
	// from GoCardless (the row names a payout GoCardless says bounced).
	explained := w.verifyClean(t, db.DB)
	require.NotEmpty(t, explained[s.PayoutBounced], "the bounced payout differs from the row, explained")
	for _, id := range s.Payments() {
		if id != s.PayoutBounced {
			require.Empty(t, explained[id], "%s: the run left the row as GoCardless has it", s.Names()[id])
		}
	}

	// A second run (the stuck path on, StuckConfirmed still qualifying)
	// repairs nothing and adds no stale item: the re-fetch dates the
	// confirmation as the first run did.
	again := w.run(t, db.DB, w.url, 0)
	require.Zero(t, again.Run.Repaired, "the second run repairs nothing")
	require.Zero(t, again.Run.SyntheticEvents)
	require.Equal(t, rows, gcRowsOf(t, db.DB), "the second run changed no row")
	items2 := gcItemsOf(t, db.DB, again.Run.ID)
	require.Empty(t, items2[s.StuckConfirmed], "the stuck payment is in sync now")
	require.Empty(t, items2[s.StuckPaidOut], "the stuck payment is settled now")
	for id, its := range items2 {
		for _, it := range its {
			require.NotEqual(t, models.KindStale, it.Kind, "%s: a stale item on the second run", id)
		}
	}
	notes = map[string]any{}
	require.NoError(t, json.Unmarshal(again.Run.Notes, &notes))
	require.Equal(t, float64(1), notes["stuck_checked"], "the second run re-fetched the confirmed one again, not the settled one: %s", again.Run.Notes)
	w.verifyClean(t, db.DB)
}

// hardDeliveries loses each webhook of the crafted payments with
// probability 1/2, delivers a quarter of the rest twice, adds the
// background's webhooks and shuffles them all.
func (w *gcWorld) hardDeliveries(seed uint64) ([]webhooksim.Delivery, int) {
	rng := rand.New(rand.NewPCG(seed, 0x6C0C))
	var ds []webhooksim.Delivery
	lost := 0
	for _, d := range w.s.Sent {
		if rng.IntN(2) == 0 {
			lost++
			continue
		}
		ds = append(ds, d)
		if rng.IntN(4) == 0 {
			ds = append(ds, d)
		}
	}
	ds = append(ds, w.background...)
	rng.Shuffle(len(ds), func(i, j int) { ds[i], ds[j] = ds[j], ds[i] })
	return ds, lost
}

// checkGCTruth asserts what GoCardless's documented behaviour makes of each
// crafted payment whatever webhooks were lost, from the row the webhooks
// left (before) and the row after the run.
func (w *gcWorld) checkGCTruth(t *testing.T, before, after map[string]gcRow, items map[string][]models.DriftItem) {
	t.Helper()
	s := w.s
	for id, want := range s.Expect {
		name := s.Names()[id]
		b, had := before[id]
		r, ok := after[id]
		kinds := kindsOf(items[id])
		require.NotContains(t, kinds, models.KindStale+"/"+models.ActionRefused, name)
		if id == s.StuckPaidOut {
			// As StuckConfirmed, but a row the worker settled is no longer
			// stuck and nothing in the window names it: left as it was.
			if !had {
				require.False(t, ok, "%s: no row is made up", name)
				continue
			}
			if b.State == models.StateSettled {
				require.Equal(t, b, r, "%s: settled by its webhook, out of every window: unchanged", name)
				require.Empty(t, kinds, name)
				continue
			}
			require.Equal(t, []string{"behind/repaired"}, kinds, name)
		}
		if id == s.StuckConfirmed {
			// Every fact is before the window: with no webhook nothing knows
			// of it; any row is re-fetched and captured at its confirmation.
			if !had {
				require.False(t, ok, "%s: no row is made up", name)
				continue
			}
			require.Equal(t, models.StateCaptured, r.State, name)
			require.Equal(t, tsOf(s.ConfirmedAt), r.SourceUpdatedAt, name)
			if b.State == models.StateCaptured && b.SourceUpdatedAt == r.SourceUpdatedAt {
				require.Empty(t, kinds, name)
			} else {
				require.Equal(t, []string{"behind/repaired"}, kinds, name)
			}
			continue
		}
		require.True(t, ok, "%s: a row", name)
		require.Equal(t, want.State, r.State, "%s: state", name)
		require.Equal(t, tsOf(s.StateAt[id]), r.SourceUpdatedAt, "%s: source_updated_at", name)
		require.Equal(t, want.AmountRefunded, r.AmountRefunded, "%s: amount_refunded", name)
		require.Equal(t, want.Settled, r.hasSettled, "%s: settled", name)
		require.Equal(t, tsOf(want.SettledAt), r.SettledAt, "%s: settled_at", name)
		require.Equal(t, want.PayoutID, r.PayoutID, "%s: payout_id", name)
		for _, k := range []string{"conflict/refused", "unknown_status/reported"} {
			if containsStr(want.Kinds, k) {
				require.Contains(t, kinds, k, "%s: reported whatever the webhooks did", name)
			} else {
				require.NotContains(t, kinds, k, "%s: never reported", name)
			}
		}
		if !had {
			require.Contains(t, kinds, "missing_local/repaired", name)
		}
		if had && b == r {
			require.NotContains(t, kinds, "behind/repaired", "%s: nothing was repaired", name)
		}
	}
}

func containsStr(xs []string, x string) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

func TestGoCardlessBehaviourHard(t *testing.T) {
	t.Parallel()
	for _, seed := range []uint64{1, 2, 3, 4} {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			t.Parallel()
			w := newGCWorld(t, 12)
			ds, lost := w.hardDeliveries(seed)
			require.Positive(t, lost)
			type outcome struct {
				rows      map[string]gcRow
				items     []string
				synthetic int64
			}
			var ref *outcome
			var refDB *gorm.DB
			for _, batch := range []int{1, 7, 500} {
				db := pgtest.New(t)
				require.NoError(t, scenario.SeedGoCardlessDeliveries(context.Background(), db.DB, ds, w.now))
				pgtest.ForbidBackwards(t, db.DB)
				before := gcRowsOf(t, db.DB)
				if ref == nil {
					for _, id := range w.s.Payments() {
						t.Logf("seeded %s: %q refunded %d", w.s.Names()[id], before[id].State, before[id].AmountRefunded)
					}
				}
				res := w.run(t, db.DB, w.url, batch)
				items := gcItemsOf(t, db.DB, res.Run.ID)
				o := &outcome{rows: gcRowsOf(t, db.DB), items: itemKeys(items)}
				require.NoError(t, db.Model(&models.WebhookEvent{}).Where("synthetic").Count(&o.synthetic).Error)
				w.checkGCTruth(t, before, o.rows, items)
				w.verifyClean(t, db.DB)
				if ref == nil {
					ref, refDB = o, db.DB
					continue
				}
				require.Equal(t, ref.rows, o.rows, "batch size %d: the same rows as batch size 1", batch)
				require.Equal(t, ref.items, o.items, "batch size %d: the same items as batch size 1", batch)
				require.Equal(t, ref.synthetic, o.synthetic, "batch size %d: the same synthetic events", batch)
			}

			// A second run repairs nothing, records no event and, with the
			// stuck path on, adds no stale item.
			var events int64
			require.NoError(t, refDB.Model(&models.WebhookEvent{}).Count(&events).Error)
			again := w.run(t, refDB, w.url, 500)
			require.Zero(t, again.Run.Repaired, "the second run repairs nothing")
			require.Zero(t, again.Run.SyntheticEvents)
			require.Zero(t, again.Run.SettlementsRecorded)
			for id, its := range gcItemsOf(t, refDB, again.Run.ID) {
				for _, it := range its {
					require.NotEqual(t, models.KindStale, it.Kind, "%s: a stale item on the second run", id)
					require.NotEqual(t, models.ActionRepaired, it.Action, "%s: repaired on the second run", id)
				}
			}
			var n int64
			require.NoError(t, refDB.Model(&models.WebhookEvent{}).Count(&n).Error)
			require.Equal(t, events, n)
			require.Equal(t, ref.rows, gcRowsOf(t, refDB), "the second run changed no row")
			w.verifyClean(t, refDB)
		})
	}
}

// A 429 storm (four in a row, then 3 in 10 at random) and a burst of 500s
// through the run: it retries through them and ends with the rows of an
// undisturbed run.
func TestGoCardlessBehaviourRateLimited(t *testing.T) {
	t.Parallel()
	w := newGCWorld(t, 20)
	seed := func(db *gorm.DB) {
		require.NoError(t, w.s.SeedLocal(context.Background(), db, w.now))
		require.NoError(t, scenario.SeedGoCardlessDeliveries(context.Background(), db, w.background, w.now))
	}
	clean := pgtest.New(t)
	seed(clean.DB)
	cleanRes := w.run(t, clean.DB, w.url, 0)
	want := gcRowsOf(t, clean.DB)

	var n atomic.Int64
	proxy := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		switch n.Add(1) {
		case 1:
			w.fake.FailNext(http.StatusTooManyRequests, 4)
			w.fake.SetFailureRate(http.StatusTooManyRequests, 0.3)
		case 9:
			w.fake.FailNext(http.StatusInternalServerError, 3)
		}
		w.fake.Handler().ServeHTTP(rw, r)
	}))
	t.Cleanup(proxy.Close)
	stormy := pgtest.New(t)
	seed(stormy.DB)
	before := w.fake.RequestsByStatus()
	res := w.run(t, stormy.DB, proxy.URL, 3)
	w.fake.SetFailureRate(http.StatusTooManyRequests, 0)
	by := w.fake.RequestsByStatus()
	require.GreaterOrEqual(t, by[429]-before[429], int64(4), "the storm happened: %v", by)
	require.Equal(t, int64(3), by[500]-before[500], "the burst of 500s happened: %v", by)
	require.Greater(t, res.Run.APIRequests, by[200]-before[200], "the retries are counted")
	require.Equal(t, want, gcRowsOf(t, stormy.DB), "the same rows as without faults")
	require.Equal(t, itemKeys(gcItemsOf(t, clean.DB, cleanRes.Run.ID)), itemKeys(gcItemsOf(t, stormy.DB, res.Run.ID)), "the same items")
	w.checkGCExpect(t, want, gcItemsOf(t, stormy.DB, res.Run.ID))
	w.verifyClean(t, stormy.DB)
}
