package scenario_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
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
	"github.com/reconciler/reconciler/providers/stripe"
	"github.com/reconciler/reconciler/providers/stripe/stripefake"
	"github.com/reconciler/reconciler/reconcile"
	"github.com/reconciler/reconciler/verify"
)

// The behaviour scenario's accounts: the platform (""), one paying out by
// hand and one whose events are rendered in newer API versions.
const (
	manualAcct = "acct_1ManualPayouts"
	newerAcct  = "acct_1NewerVersions"
)

var behaviourNow = time.Date(2026, 11, 20, 6, 0, 0, 0, time.UTC)

// behaviourWorld is the fake Stripe with the behaviour scenario built in,
// and the deliveries of its background payments.
type behaviourWorld struct {
	now        time.Time
	fake       *stripefake.Server
	url        string
	s          *scenario.StripeBehaviour
	background map[string][]webhooksim.Delivery // every delivery of the background payments, by account
}

// newBehaviourWorld builds the scenario with background generated
// payments per account (before the crafted ones on the platform and Newer,
// whose payouts would otherwise sweep crafted charges; after them on
// Manual, which must pay out by hand first).
func newBehaviourWorld(t *testing.T, background int) *behaviourWorld {
	t.Helper()
	now := behaviourNow
	fake := stripefake.New(stripefake.Options{Now: func() time.Time { return now }, Seed: 7})
	url := fake.Start()
	t.Cleanup(fake.Close)
	platform, manual, newer := fake.Account(""), fake.Account(manualAcct), fake.Account(newerAcct)
	gen := func(a *stripefake.Account, seed int64) {
		if background > 0 {
			a.Generate(stripefake.GenOptions{Payments: background, Start: now.Add(-20 * time.Hour), End: now.Add(-30 * time.Minute), Seed: seed})
		}
	}
	gen(platform, 11)
	gen(newer, 13)
	s := scenario.NewStripeBehaviour(platform, manual, newer, now)
	gen(manual, 12)
	w := &behaviourWorld{now: now, fake: fake, url: url, s: s, background: map[string][]webhooksim.Delivery{}}
	accts := map[string]*stripefake.Account{"": platform, manualAcct: manual, newerAcct: newer}
	for _, a := range s.Accounts() {
		sent := map[string]bool{}
		for _, d := range s.Sent[a] {
			sent[d.EventID] = true
		}
		for _, d := range webhooksim.Stripe(accts[a].Deliveries()) {
			if !sent[d.EventID] {
				w.background[a] = append(w.background[a], d)
			}
		}
	}
	return w
}

// crafted maps each crafted payment to its behaviour's name.
func (w *behaviourWorld) crafted() map[string]string { return w.s.Names() }

// provider is a fresh Stripe provider (each run reads the account's
// payout schedule afresh), retrying without sleeping.
func behaviourProvider(t *testing.T, url string) *stripe.Provider {
	t.Helper()
	p, err := stripe.New(stripe.Config{APIKey: "sk_test_behaviour", BaseURL: url, MaxRetries: 8,
		Sleep: func(ctx context.Context, _ time.Duration) error { return ctx.Err() }})
	require.NoError(t, err)
	return p
}

// run reconciles one account once: the default window, the stuck path on
// with a threshold StuckCaptured and ManualSettled pass.
func (w *behaviourWorld) run(t *testing.T, db *gorm.DB, url, account string, batch int, skipLock bool) reconcile.Result {
	t.Helper()
	res, err := reconcile.Run(context.Background(), reconcile.Options{DB: db, Provider: behaviourProvider(t, url), Account: account,
		Now: func() time.Time { return w.now }, StuckAfter: 72 * time.Hour, BatchSize: batch, SkipLock: skipLock})
	require.NoError(t, err, "run of account %q", account)
	require.Equal(t, models.RunSucceeded, res.Run.Status)
	require.Equal(t, account, res.Run.Account)
	return res
}

// runAll runs every account once and returns the runs' ids.
func (w *behaviourWorld) runAll(t *testing.T, db *gorm.DB, batch int) map[string]reconcile.Result {
	t.Helper()
	out := map[string]reconcile.Result{}
	for _, a := range w.s.Accounts() {
		out[a] = w.run(t, db, w.url, a, batch, false)
	}
	return out
}

// row is what the tests compare of a payments row.
type row struct {
	Account                     string
	State                       models.State
	Amount                      int64
	Currency                    string
	AmountRefunded              int64
	AmountCaptured              int64 // 0: null
	SourceUpdatedAt, SettledAt  string
	PayoutID                    string
	hasSettledAt, hasAmountCapt bool
	settledAtTime               time.Time
}

func rowsOf(t *testing.T, db *gorm.DB) map[string]row {
	t.Helper()
	var ps []models.Payment
	require.NoError(t, db.Where("provider = 'stripe'").Find(&ps).Error)
	out := make(map[string]row, len(ps))
	ts := func(t *time.Time) string {
		if t == nil {
			return ""
		}
		return t.UTC().Format(time.RFC3339Nano)
	}
	for _, p := range ps {
		r := row{Account: p.Account, State: p.State, Amount: p.Amount, Currency: p.Currency, AmountRefunded: p.AmountRefunded,
			SourceUpdatedAt: ts(p.SourceUpdatedAt), SettledAt: ts(p.SettledAt), hasSettledAt: p.SettledAt != nil}
		if p.AmountCaptured != nil {
			r.AmountCaptured, r.hasAmountCapt = *p.AmountCaptured, true
		}
		if p.PayoutID != nil {
			r.PayoutID = *p.PayoutID
		}
		if p.SettledAt != nil {
			r.settledAtTime = p.SettledAt.UTC()
		}
		out[p.ProviderID] = r
	}
	return out
}

// itemsOf returns the runs' drift items by payment.
func itemsOf(t *testing.T, db *gorm.DB, runs map[string]reconcile.Result) map[string][]models.DriftItem {
	t.Helper()
	var ids []int64
	for _, r := range runs {
		ids = append(ids, r.Run.ID)
	}
	var items []models.DriftItem
	require.NoError(t, db.Where("run_id IN ?", ids).Order("provider_id, kind, action").Find(&items).Error)
	out := map[string][]models.DriftItem{}
	for _, it := range items {
		out[it.ProviderID] = append(out[it.ProviderID], it)
	}
	return out
}

func kindsOf(items []models.DriftItem) []string {
	var out []string
	for _, it := range items {
		out = append(out, it.Kind+"/"+it.Action)
	}
	slices.Sort(out)
	return out
}

// itemKeys are the items' (provider_id, kind, action), sorted.
func itemKeys(byID map[string][]models.DriftItem) []string {
	var out []string
	for id, its := range byID {
		for _, k := range kindsOf(its) {
			out = append(out, id+" "+k)
		}
	}
	slices.Sort(out)
	return out
}

func detailOf(t *testing.T, it models.DriftItem) map[string]any {
	t.Helper()
	d := map[string]any{}
	require.NoError(t, json.Unmarshal(it.Detail, &d), "item detail: %s", it.Detail)
	return d
}

// explanations are every explanation of the items, with the ones folded
// into them ("also").
func explanations(t *testing.T, items []models.DriftItem) string {
	t.Helper()
	var b strings.Builder
	for _, it := range items {
		d := detailOf(t, it)
		if e, ok := d["explanation"].(string); ok {
			b.WriteString(e + "\n")
		}
		if also, ok := d["also"].([]any); ok {
			for _, a := range also {
				fmt.Fprintf(&b, "%v\n", a)
			}
		}
	}
	return b.String()
}

// verifyClean runs verify --all for each account: every row of the
// account is compared with Stripe's own objects (through the provider's
// verifier, never the fake's truth) and every difference is explained by
// a drift item. It returns the explained differences by payment.
func (w *behaviourWorld) verifyClean(t *testing.T, db *gorm.DB) map[string][]verify.Difference {
	t.Helper()
	explained := map[string][]verify.Difference{}
	for _, a := range w.s.Accounts() {
		p := behaviourProvider(t, w.url)
		rep, err := verify.Run(context.Background(), verify.Options{DB: db, Provider: stripe.Name, Account: a, Reader: p.Verifier(),
			Since: w.now.Add(-10 * 24 * time.Hour), Until: w.now.Add(time.Hour), All: true, Now: func() time.Time { return w.now }})
		require.NoError(t, err)
		var rows int64
		require.NoError(t, db.Model(&models.Payment{}).Where("provider = 'stripe' AND account = ?", a).Count(&rows).Error)
		require.Positive(t, rows, "account %q has rows", a)
		// verify lists what Stripe holds: a crafted payment whose facts lie
		// before every run's window on purpose, and whose webhooks were all
		// lost, has no row ("no row is made up"), and verify says so.
		outside := map[string]bool{w.s.ManualSettled: true, w.s.StuckCaptured: true}
		missing := 0
		rep.Unexplained = slices.DeleteFunc(rep.Unexplained, func(d verify.Difference) bool {
			if d.Field == verify.FieldFound && d.Local == "missing" {
				require.True(t, outside[d.ProviderID], "account %q: %s is missing locally", a, d.ProviderID)
				missing++
				return true
			}
			return false
		})
		require.Equal(t, int(rows)+missing, rep.InWindow, "account %q: the window holds every row, and what Stripe lists with no row", a)
		require.Equal(t, rep.InWindow, rep.Checked)
		require.Empty(t, rep.Unexplained, "verify --all of account %q: differences no drift item explains", a)
		for _, d := range rep.ExplainedDifferences {
			explained[d.ProviderID] = append(explained[d.ProviderID], d)
		}
	}
	return explained
}

// seedBackground delivers the background payments' webhooks but every
// seventh (lost), so the background has drift of its own.
func (w *behaviourWorld) seedBackground(t *testing.T, db *gorm.DB) {
	t.Helper()
	for _, a := range w.s.Accounts() {
		var ds []webhooksim.Delivery
		for i, d := range w.background[a] {
			if i%7 != 3 {
				ds = append(ds, d)
			}
		}
		require.NoError(t, scenario.SeedStripeAccount(context.Background(), db, a, ds, w.now))
	}
}

// checkExpect asserts the scenario's Expect exactly: each crafted
// payment's items by kind and action, its row, and what its items say.
func (w *behaviourWorld) checkExpect(t *testing.T, rows map[string]row, items map[string][]models.DriftItem) {
	t.Helper()
	names := w.crafted()
	require.Len(t, w.s.Expect, len(names), "one expectation per crafted payment")
	for id, want := range w.s.Expect {
		name := names[id]
		require.NotEmpty(t, name, "%s is a crafted payment", id)
		assert.Equal(t, want.Kinds, kindsOf(items[id]), "%s (%s): the run's items", name, id)
		r, ok := rows[id]
		if want.State == models.StateNone {
			require.False(t, ok, "%s: no row", name)
			continue
		}
		require.True(t, ok, "%s: a row", name)
		assert.Equal(t, want.Account, r.Account, "%s: account", name)
		assert.Equal(t, want.State, r.State, "%s: state", name)
		assert.Equal(t, want.AmountRefunded, r.AmountRefunded, "%s: amount_refunded", name)
		assert.Equal(t, want.AmountCaptured, r.AmountCaptured, "%s: amount_captured", name)
		assert.Equal(t, want.AmountCaptured != 0, r.hasAmountCapt, "%s: amount_captured recorded", name)
		assert.Equal(t, want.Settled, r.hasSettledAt, "%s: settled_at set", name)
		if want.Settled {
			assert.Equal(t, want.SettledAt.UTC().Format(time.RFC3339), r.settledAtTime.Format(time.RFC3339), "%s: settled_at", name)
		}
		assert.Equal(t, want.PayoutID, r.PayoutID, "%s: payout_id", name)
		if want.ExplanationHas != "" {
			assert.Contains(t, explanations(t, items[id]), want.ExplanationHas, "%s: what the items say", name)
		}
	}
}

func TestStripeBehaviourOneRun(t *testing.T) {
	t.Parallel()
	w := newBehaviourWorld(t, 30)
	s := w.s
	db := pgtest.New(t)
	ctx := context.Background()
	require.Positive(t, s.Missed)
	for _, a := range s.Accounts() {
		for _, d := range s.Sent[a] {
			require.False(t, d.At.After(w.now), "every event is in the past")
		}
	}
	require.NoError(t, s.SeedLocal(ctx, db.DB, w.now))
	w.seedBackground(t, db.DB)

	// The rows as the webhooks left them: what each behaviour starts from.
	before := rowsOf(t, db.DB)
	for id, want := range map[string]models.State{
		s.PartialCapture: models.StateCaptured, s.PayoutFailed: models.StateSettled, s.OpenDispute: models.StateCaptured,
		s.RefundFailed: models.StateCaptured, s.RefundFailedCounted: models.StateCaptured, s.ReconciledLate: models.StateCaptured,
		s.StuckCaptured: models.StateCaptured, s.ManualSettled: models.StateCaptured, s.ManualPending: models.StateCreated,
		s.NewerPartial: models.StateAuthorised,
	} {
		require.Equal(t, want, before[id].State, "seeded %s", w.crafted()[id])
	}
	require.NotContains(t, before, s.UnknownVersion, "none of its webhooks arrived")
	require.Equal(t, int64(0), before[s.RefundFailed].AmountRefunded, "its refund was never counted")
	require.Equal(t, int64(400), before[s.RefundFailedCounted].AmountRefunded, "its refund was counted")
	require.Equal(t, manualAcct, before[s.ManualSettled].Account)
	require.Equal(t, newerAcct, before[s.NewerPartial].Account)

	runs := w.runAll(t, db.DB, 0)
	rows := rowsOf(t, db.DB)
	items := itemsOf(t, db.DB, runs)
	w.checkExpect(t, rows, items)

	// What support reads: each sentence names the objects and amounts a
	// person needs to answer the customer.
	for id, needs := range map[string][]string{
		s.PartialCapture:      {"captured 70.00 GBP of the 100.00 GBP authorised", "is not a refund"},
		s.PayoutFailed:        {s.FailedPayout, "failed"},
		s.OpenDispute:         {s.Dispute, "40.00 GBP", "withdrew", "needs_response"},
		s.RefundFailedCounted: {s.CountedRefund, "4.00 GBP", "failed"},
		s.NewerPartial:        {"captured 60.00 GBP of the 90.00 GBP authorised", "is not a refund"},
		s.UnknownVersion:      {scenario.UnknownAPIVersion, "not read"},
	} {
		ex := explanations(t, items[id])
		for _, n := range needs {
			require.Contains(t, ex, n, "%s: the report says %q", w.crafted()[id], n)
		}
	}
	// The open dispute changed nothing and says so.
	require.Contains(t, explanations(t, items[s.OpenDispute]), "state stays")
	// A settlement names its payout in the item; one found by the stuck
	// path or by availability says its time was inferred.
	for id, po := range map[string]string{s.ReconciledLate: s.ReconciledPayout, s.StuckCaptured: s.StuckPayout, s.ManualSettled: ""} {
		require.NotEmpty(t, items[id], w.crafted()[id])
		d := detailOf(t, items[id][0])
		if po != "" {
			require.Equal(t, po, d["payout_id"], "%s: the item names the payout", w.crafted()[id])
		} else {
			require.NotContains(t, d, "payout_id", "%s: no payout", w.crafted()[id])
		}
	}
	for _, id := range []string{s.StuckCaptured, s.ManualSettled} {
		require.NotEmpty(t, items[id], w.crafted()[id])
		require.Equal(t, true, detailOf(t, items[id][0])["time_inferred"], "%s: the time was inferred", w.crafted()[id])
	}
	// The stuck path did the work and reported what it cost.
	notes := map[string]any{}
	require.NoError(t, json.Unmarshal(runs[""].Run.Notes, &notes))
	require.GreaterOrEqual(t, notes["stuck_checked"], float64(1), "platform run notes: %s", runs[""].Run.Notes)
	require.Greater(t, notes["stuck_api_requests"], float64(0))

	// The events in a version no one read are not recorded: the
	// application's own delivery of them must be processed, not dropped as
	// a duplicate. Those of the same account in a known version are.
	var unread, read int64
	for _, d := range s.Sent[s.Newer.ID()] {
		var n int64
		require.NoError(t, db.DB.Model(&models.WebhookEvent{}).Where("source = 'stripe' AND event_id = ?", d.EventID).Count(&n).Error)
		for _, f := range d.Facts {
			switch f.PaymentID {
			case s.UnknownVersion:
				unread += n
			case s.NewerPartial:
				read += n
			}
		}
	}
	require.Zero(t, unread, "no webhook_events row for an event in %s", scenario.UnknownAPIVersion)
	require.Positive(t, read, "the basil events are recorded")

	// verify --all: nothing unexplained; the crafted contradictions left
	// for a person are explained by their items.
	explained := w.verifyClean(t, db.DB)
	require.NotEmpty(t, explained[s.PayoutFailed], "the failed payout differs from the row, explained")
	require.NotEmpty(t, explained[s.RefundFailedCounted], "the refund counted and failed differs, explained")
	for _, id := range []string{s.PartialCapture, s.NewerPartial, s.ReconciledLate, s.StuckCaptured, s.ManualSettled, s.ManualPending, s.UnknownVersion, s.RefundFailed} {
		require.Empty(t, explained[id], "%s: the run left the row as Stripe has it", w.crafted()[id])
	}
}

// hardDeliveries loses each webhook of the crafted payments with
// probability 1/2, delivers a quarter of the rest twice, adds the
// background's webhooks and shuffles them all.
func (w *behaviourWorld) hardDeliveries(seed uint64) (map[string][]webhooksim.Delivery, int) {
	rng := rand.New(rand.NewPCG(seed, 0xB1A5))
	out := map[string][]webhooksim.Delivery{}
	lost := 0
	for _, a := range w.s.Accounts() {
		var ds []webhooksim.Delivery
		for _, d := range w.s.Sent[a] {
			if rng.IntN(2) == 0 {
				lost++
				continue
			}
			ds = append(ds, d)
			if rng.IntN(4) == 0 {
				ds = append(ds, d)
			}
		}
		ds = append(ds, w.background[a]...)
		rng.Shuffle(len(ds), func(i, j int) { ds[i], ds[j] = ds[j], ds[i] })
		out[a] = ds
	}
	return out, lost
}

func seedAll(t *testing.T, db *gorm.DB, w *behaviourWorld, ds map[string][]webhooksim.Delivery) {
	t.Helper()
	for _, a := range w.s.Accounts() {
		require.NoError(t, scenario.SeedStripeAccount(context.Background(), db, a, ds[a], w.now))
	}
}

// checkTruth asserts what Stripe's documented behaviour makes of each
// crafted payment whatever webhooks were lost, from the row the webhooks
// left (before) and the row after the run.
func (w *behaviourWorld) checkTruth(t *testing.T, before, after map[string]row, items map[string][]models.DriftItem) {
	t.Helper()
	s := w.s
	for id, want := range s.Expect {
		name := w.crafted()[id]
		b, had := before[id]
		r, ok := after[id]
		kinds := kindsOf(items[id])
		switch id {
		case s.StuckCaptured, s.ManualSettled:
			// Every fact is before the window: only a row the stuck path
			// can re-fetch is settled; with no webhook at all nothing
			// knows of it, and a row the worker already settled (without
			// settled_at: the worker does not record it) has nothing left
			// for a run to see.
			if !had {
				require.False(t, ok, "%s: no row is made up", name)
				continue
			}
			if b.State == models.StateSettled {
				require.Equal(t, b, r, "%s: settled by its webhook, out of every window: unchanged", name)
				require.Empty(t, kinds, name)
				continue
			}
		case s.UnknownVersion:
			// Its events are never read: a row the webhooks made stays as
			// it was; with no row it is created from the fetch by id.
			require.Contains(t, kinds, "unknown_status/reported", name)
			require.True(t, ok, name)
			if had {
				require.Equal(t, b.State, r.State, "%s: unchanged", name)
			} else {
				require.Equal(t, want.State, r.State, name)
			}
			continue
		case s.RefundFailed, s.RefundFailedCounted:
			// A failed refund is never counted by the run and never taken
			// back from a row that counted it; only that row gets an item.
			require.True(t, ok, name)
			require.Equal(t, models.StateCaptured, r.State, name)
			require.Equal(t, b.AmountRefunded, r.AmountRefunded, "%s: amount_refunded neither raised nor lowered", name)
			if b.AmountRefunded > 0 {
				require.Contains(t, kinds, "conflict/refused", name)
			} else {
				require.NotContains(t, kinds, "conflict/refused", name)
			}
			continue
		}
		require.True(t, ok, "%s: a row", name)
		require.Equal(t, want.State, r.State, "%s: state", name)
		require.Equal(t, want.AmountRefunded, r.AmountRefunded, "%s: amount_refunded", name)
		require.Equal(t, want.AmountCaptured, r.AmountCaptured, "%s: amount_captured", name)
		require.Equal(t, want.Settled, r.hasSettledAt, "%s: settled", name)
		require.Equal(t, want.PayoutID, r.PayoutID, "%s: payout_id", name)
		require.Equal(t, want.Account, r.Account, "%s: account", name)
		for _, k := range want.Kinds {
			if k == "conflict/refused" || k == "dispute/reported" || k == "unknown_status/reported" {
				require.Contains(t, kinds, k, "%s: reported whatever the webhooks did", name)
			}
		}
	}
}

type hardOutcome struct {
	rows      map[string]row
	items     []string
	synthetic int64
}

func TestStripeBehaviourHard(t *testing.T) {
	t.Parallel()
	for _, seed := range []uint64{1, 2, 3} {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			t.Parallel()
			w := newBehaviourWorld(t, 8)
			ds, lost := w.hardDeliveries(seed)
			require.Positive(t, lost)
			var ref *hardOutcome
			var refDB *gorm.DB
			for _, batch := range []int{1, 7, 500} {
				db := pgtest.New(t)
				seedAll(t, db.DB, w, ds)
				pgtest.ForbidBackwards(t, db.DB)
				before := rowsOf(t, db.DB)
				if ref == nil {
					for id, name := range w.crafted() {
						t.Logf("seeded %s: %q refunded %d", name, before[id].State, before[id].AmountRefunded)
					}
				}
				runs := w.runAll(t, db.DB, batch)
				items := itemsOf(t, db.DB, runs)
				o := &hardOutcome{rows: rowsOf(t, db.DB), items: itemKeys(items)}
				require.NoError(t, db.Model(&models.WebhookEvent{}).Where("synthetic").Count(&o.synthetic).Error)
				w.checkTruth(t, before, o.rows, items)
				w.verifyClean(t, db.DB)
				if ref == nil {
					ref, refDB = o, db.DB
					continue
				}
				require.Equal(t, ref.rows, o.rows, "batch size %d: the same rows as batch size 1", batch)
				require.Equal(t, ref.items, o.items, "batch size %d: the same items as batch size 1", batch)
				require.Equal(t, ref.synthetic, o.synthetic, "batch size %d: the same synthetic events", batch)
			}

			// A second run of each account repairs nothing and records no
			// event: the first left nothing to do.
			var events int64
			require.NoError(t, refDB.Model(&models.WebhookEvent{}).Count(&events).Error)
			for _, a := range w.s.Accounts() {
				res := w.run(t, refDB, w.url, a, 500, false)
				require.Zero(t, res.Run.Repaired, "account %q: the second run repairs nothing", a)
				require.Zero(t, res.Run.SyntheticEvents, "account %q: the second run inserts no synthetic event", a)
				require.Zero(t, res.Run.SettlementsRecorded, "account %q: nor any settlement", a)
			}
			var again int64
			require.NoError(t, refDB.Model(&models.WebhookEvent{}).Count(&again).Error)
			require.Equal(t, events, again)
			require.Equal(t, ref.rows, rowsOf(t, refDB), "the second run changed no row")
			w.verifyClean(t, refDB)

			// 20 concurrent runs of the platform (the lock bypassed, so they
			// really race under the guard), then the other accounts once:
			// the same rows, each event recorded once.
			db := pgtest.New(t)
			seedAll(t, db.DB, w, ds)
			pgtest.ForbidBackwards(t, db.DB)
			var wg sync.WaitGroup
			errs := make(chan error, 20)
			for range 20 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					p, err := stripe.New(stripe.Config{APIKey: "sk_test_behaviour", BaseURL: w.url})
					if err == nil {
						_, err = reconcile.Run(context.Background(), reconcile.Options{DB: db.DB, Provider: p, SkipLock: true,
							Now: func() time.Time { return w.now }, StuckAfter: 72 * time.Hour, BatchSize: 7})
					}
					errs <- err
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				require.NoError(t, err)
			}
			for _, a := range w.s.Accounts()[1:] {
				w.run(t, db.DB, w.url, a, 500, false)
			}
			require.Equal(t, ref.rows, rowsOf(t, db.DB), "20 concurrent runs converge to the same rows")
			var dup int64
			require.NoError(t, db.Raw(`SELECT count(*) FROM (SELECT source, event_id FROM webhook_events GROUP BY source, event_id HAVING count(*) > 1) d`).Scan(&dup).Error)
			require.Zero(t, dup, "no event recorded twice")
			var synthetic int64
			require.NoError(t, db.Model(&models.WebhookEvent{}).Where("synthetic").Count(&synthetic).Error)
			require.Equal(t, ref.synthetic, synthetic, "each missed event recorded once")
			w.verifyClean(t, db.DB)
		})
	}
}

// A 429 storm and bursts of 500s while the manual account is reconciled:
// the run retries through them and ends with the rows of an undisturbed
// run.
func TestStripeBehaviourRateLimitedManualAccount(t *testing.T) {
	t.Parallel()
	w := newBehaviourWorld(t, 20)
	clean := pgtest.New(t)
	require.NoError(t, w.s.SeedLocal(context.Background(), clean.DB, w.now))
	w.seedBackground(t, clean.DB)
	w.run(t, clean.DB, w.url, manualAcct, 0, false)
	want := rowsOf(t, clean.DB)

	// A proxy in front of the fake starts the faults with the run's first
	// request: four 429s in a row, then 429s at random (3 in 10) for the
	// rest of the run, and a burst of three 500s at the seventh request.
	var n atomic.Int64
	proxy := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		switch n.Add(1) {
		case 1:
			w.fake.FailNext(http.StatusTooManyRequests, 4)
			w.fake.SetFailureRate(http.StatusTooManyRequests, 0.3)
		case 7:
			w.fake.FailNext(http.StatusInternalServerError, 3)
		}
		w.fake.Handler().ServeHTTP(rw, r)
	}))
	t.Cleanup(proxy.Close)
	t.Cleanup(func() { w.fake.SetFailureRate(http.StatusTooManyRequests, 0) })
	stormy := pgtest.New(t)
	require.NoError(t, w.s.SeedLocal(context.Background(), stormy.DB, w.now))
	w.seedBackground(t, stormy.DB)
	before := w.fake.RequestsByStatus()
	res := w.run(t, stormy.DB, proxy.URL, manualAcct, 3, false)
	w.fake.SetFailureRate(http.StatusTooManyRequests, 0)
	by := w.fake.RequestsByStatus()
	require.GreaterOrEqual(t, by[429]-before[429], int64(4), "the storm happened: %v", by)
	require.Equal(t, int64(3), by[500]-before[500], "the burst of 500s happened: %v", by)
	require.Greater(t, res.Run.APIRequests, by[200]-before[200], "the retries are counted")

	got := rowsOf(t, stormy.DB)
	for _, id := range w.s.Payments(manualAcct) {
		require.Equal(t, want[id], got[id], "%s: the same row as without faults", w.crafted()[id])
	}
	manualRows := func(rs map[string]row) map[string]row {
		out := map[string]row{}
		for id, r := range rs {
			if r.Account == manualAcct {
				out[id] = r
			}
		}
		return out
	}
	require.Equal(t, manualRows(want), manualRows(got), "every row of the account as without faults")
	require.Equal(t, models.StateSettled, got[w.s.ManualSettled].State)
	require.Equal(t, models.StateCaptured, got[w.s.ManualPending].State)
	w.fake.SetFailureRate(http.StatusTooManyRequests, 0)
	p := behaviourProvider(t, w.url)
	rep, err := verify.Run(context.Background(), verify.Options{DB: stormy.DB, Provider: stripe.Name, Account: manualAcct, Reader: p.Verifier(),
		Since: w.now.Add(-10 * 24 * time.Hour), Until: w.now.Add(time.Hour), All: true, Now: func() time.Time { return w.now }})
	require.NoError(t, err)
	require.Positive(t, rep.Checked)
	require.Empty(t, rep.Unexplained)
}
