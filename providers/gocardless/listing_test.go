package gocardless_test

// Object listing (path 3) against the fake over real HTTP: what a window
// lists, the cap at its end, settlements and refunds, agreement with the
// stuck path (Fetch) and with verify (Current), and stopping.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/reconciler/reconciler/internal/pgtest"
	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/providers/gocardless"
	"github.com/reconciler/reconciler/providers/gocardless/gcfake"
	"github.com/reconciler/reconciler/reconcile"
	"github.com/reconciler/reconciler/verify"
)

// listNow is the fake's clock for the listing tests: Monday 30 November
// 2026, 10:00 London.
var listNow = time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)

// listWorld is a generated 90-day account served by the fake.
type listWorld struct {
	t *testing.T
	s *gcfake.Server
	p *gocardless.Provider
	// created is every payment's created_at, from the fake's own events.
	created map[string]time.Time
}

func newListWorld(t *testing.T, payments int, pageSize int) *listWorld {
	t.Helper()
	f := newFake(t, listNow)
	f.s.Generate(gcfake.GenOptions{Payments: payments, Start: listNow.AddDate(0, 0, -90), End: listNow, Seed: 15})
	p, err := gocardless.New(gocardless.Config{AccessToken: "sandbox_listing", BaseURL: f.url, PageSize: pageSize,
		Sleep: func(ctx context.Context, _ time.Duration) error { return ctx.Err() }})
	require.NoError(t, err)
	w := &listWorld{t: t, s: f.s, p: p, created: map[string]time.Time{}}
	for _, d := range f.s.Deliveries() {
		if d.EventType == "payments.created" {
			w.created[d.Facts[0].PaymentID] = d.At
		}
	}
	require.Len(t, w.created, payments)
	return w
}

// list runs ListObjects over [since, until) and returns each payment's
// changes, checking what every page and change must be.
func (w *listWorld) list(since, until time.Time) map[string][]reconcile.Change {
	w.t.Helper()
	out := map[string][]reconcile.Change{}
	err := w.p.ListObjects(context.Background(), reconcile.ListParams{Since: since, Until: until}, func(pg reconcile.Page) error {
		require.Empty(w.t, pg.Events, "a listing carries no events")
		require.Empty(w.t, pg.Cursor, "a listing is never resumed")
		require.NotEmpty(w.t, pg.Changes)
		for _, c := range pg.Changes {
			require.NotEmpty(w.t, c.ProviderID)
			require.True(w.t, c.At.Before(until), "%s %s dated %s, at or after the window's end %s", c.ProviderID, c.State, c.At, until)
			require.True(w.t, c.Inferred, "%+v", c)
			require.NotEmpty(w.t, c.Payload, "%+v", c)
			if c.State.Valid() {
				require.Equal(w.t, reconcile.SyntheticEventID(c.ProviderID, c.State, c.At), c.EventID)
			}
			if c.State == models.StateSettled {
				require.NotEmpty(w.t, c.PayoutID, "%+v", c)
			}
			at, ok := w.created[c.ProviderID]
			require.True(w.t, ok, "listed an unknown payment %s", c.ProviderID)
			require.True(w.t, at.Before(until), "listed %s, created at %s, after the window", c.ProviderID, at)
			out[c.ProviderID] = append(out[c.ProviderID], c)
		}
		return nil
	})
	require.NoError(w.t, err)
	return out
}

func plan(cs []reconcile.Change) reconcile.Plan { return reconcile.Decide(reconcile.Local{}, cs) }

// brief prints changes without their payloads.
func brief(cs []reconcile.Change) string {
	var b strings.Builder
	for _, c := range cs {
		fmt.Fprintf(&b, "\n  %s %q at %s po=%s ref=%d ev=%s revert=%t unknown=%t", c.State, c.RawStatus, c.At.Format(time.RFC3339Nano), c.PayoutID, c.AmountRefunded, c.EventID, c.Revert != "", c.Unknown)
	}
	return b.String()
}

func latest(p reconcile.Plan) models.State {
	if p.Latest == nil {
		return models.StateNone
	}
	return p.Latest.To
}

// A window ending before now: every payment created in it is listed, with
// nothing dated at or after its end; payments paid out before the end are
// settled by their payout, payments created before the window by the
// window's payouts; a refund in the window of an older payment is found;
// amount_refunded counts the refunds created before the end; and a payment
// whose state did not change after the end is listed in that state.
func TestListObjectsWindowBeforeNow(t *testing.T) {
	t.Parallel()
	w := newListWorld(t, 3000, 100)
	since := listNow.AddDate(0, 0, -60).Add(3*time.Hour + 17*time.Minute + 500*time.Microsecond)
	// Thursday 5 November, 07:00 UTC: the instant of that day's payout,
	// which the window does not include.
	until := listNow.AddDate(0, 0, -25).Truncate(24 * time.Hour).Add(7 * time.Hour)
	byPath := w.s.RequestsByPath()
	got := w.list(since, until)
	gets := w.s.RequestsByPath()["/payments/{id}"] - byPath["/payments/{id}"]
	atUntil, atNow := w.s.ExpectedAt(until.Add(-time.Millisecond)), w.s.ExpectedAt(listNow)
	// A chargeback GoCardless cancelled shows paid_out again: the object
	// says settled where the webhooks left the chargeback (a revert).
	cbCancelled := map[string]bool{}
	for _, d := range w.s.Deliveries() {
		if d.EventType == "payments.chargeback_cancelled" {
			cbCancelled[d.Facts[0].PaymentID] = true
		}
	}

	inWindow := 0
	for pid, at := range w.created {
		if at.Before(since) || !at.Before(until) {
			continue
		}
		inWindow++
		cs := got[pid]
		require.NotEmpty(t, cs, "payment %s created in the window is not listed", pid)
		pl := plan(cs)
		truth := atUntil[pid]
		require.Equal(t, truth.Amount, pl.Amount, pid)
		require.Equal(t, truth.Currency, pl.Currency, pid)
		if latest(pl) != models.StateCanceled {
			require.Equal(t, truth.AmountRefunded, pl.RefundTo, "%s: amount_refunded as of the window's end", pid)
		}
		if truth.PayoutID != "" {
			require.NotNil(t, pl.Settlement, "%s was paid out before the window's end", pid)
			require.Equal(t, truth.PayoutID, pl.Settlement.PayoutID, pid)
		} else if atNow[pid].PayoutID != "" {
			require.Nil(t, pl.Settlement, "%s was paid out after the window's end: %+v", pid, pl.Settlement)
		}
		switch now := atNow[pid]; {
		case cbCancelled[pid]:
			require.Equal(t, models.StateSettled, latest(pl), "%s: %s", pid, brief(cs))
		case now.State == truth.State && now.At.Equal(truth.At):
			require.Equal(t, truth.State, latest(pl), "%s did not change after the window: %s", pid, brief(cs))
		}
	}
	require.Greater(t, inWindow, 900)

	// The window's payouts settle payments created before it, and the
	// window's refunds of older payments are found, counted as of the end.
	olderPaidOut, olderRefunded := 0, 0
	refundedTo := map[string]int64{}
	concerned := map[string]bool{} // the older payments the window has a payout or refund of
	for _, d := range w.s.Deliveries() {
		f := d.Facts[0]
		if d.At.Before(since) || !d.At.Before(until) {
			continue
		}
		if d.EventType == "refunds.created" || d.EventType == "payments.paid_out" {
			concerned[f.PaymentID] = true
		}
		if !w.created[f.PaymentID].Before(since) {
			continue
		}
		switch d.EventType {
		case "payments.paid_out":
			olderPaidOut++
			pl := plan(got[f.PaymentID])
			require.NotNil(t, pl.Settlement, "%s, created before the window, was paid out in it", f.PaymentID)
			require.Equal(t, f.PayoutID, pl.Settlement.PayoutID)
			require.Equal(t, f.At, pl.Settlement.At)
			require.Equal(t, f.Amount, pl.Amount, "%s is re-read, amounts and all", f.PaymentID)
			if then, now := atUntil[f.PaymentID], atNow[f.PaymentID]; then.State == now.State && then.At.Equal(now.At) {
				require.Equal(t, then.State, latest(pl), "%s did not change after the window: %s", f.PaymentID, brief(got[f.PaymentID]))
			}
		case "refunds.created":
			olderRefunded++
			refundedTo[f.PaymentID] = max(refundedTo[f.PaymentID], f.AmountRefunded)
		}
	}
	for pid := range got {
		if w.created[pid].Before(since) {
			require.True(t, concerned[pid], "%s, created before the window, was neither paid out nor refunded in it: %s", pid, brief(got[pid]))
		}
	}
	for pid, want := range refundedTo {
		pl := plan(got[pid])
		require.Equal(t, want, pl.RefundTo, "%s, created before the window, refunded in it", pid)
		require.Equal(t, atUntil[pid].State, latest(pl), pid)
	}
	require.Positive(t, olderPaidOut)
	require.Positive(t, olderRefunded)
	// Payments are read by id only to re-read the older payments the
	// window's refunds name and those its payouts paid out that no list
	// found (most are listed by page); the window's own are never read
	// again.
	require.GreaterOrEqual(t, gets, int64(len(refundedTo)))
	require.LessOrEqual(t, gets, int64(olderRefunded+olderPaidOut/4), "%d payments read by id", gets)
}

// A window ending now lists every payment of the window as the stuck path
// (Fetch, which reads each payment's events) sees it: the same state,
// amounts and payout.
func TestListObjectsAgreesWithFetch(t *testing.T) {
	t.Parallel()
	w := newListWorld(t, 1500, 500)
	since := listNow.AddDate(0, 0, -45)
	got := w.list(since, listNow)
	checked := map[models.State]int{}
	for pid, at := range w.created {
		if at.Before(since) {
			continue
		}
		fetched, err := w.p.Fetch(context.Background(), reconcile.FetchParams{ProviderIDs: []string{pid}})
		require.NoError(t, err)
		require.Len(t, fetched, 1)
		f := fetched[0]
		cs := got[pid]
		pl := plan(cs)
		require.Equal(t, f.Amount, pl.Amount, pid)
		require.Equal(t, f.Currency, pl.Currency, pid)
		require.Equal(t, f.AmountRefunded, pl.RefundTo, pid)
		if !f.State.Valid() {
			require.Equal(t, gocardless.RawFailedWillRetry, f.RawStatus, pid)
			found := false
			for _, c := range cs {
				found = found || c.RawStatus == gocardless.RawFailedWillRetry && !c.State.Valid()
			}
			require.True(t, found, "%s: a failure GoCardless retries moves no state: %s", pid, brief(cs))
			checked[models.StateNone]++
			continue
		}
		require.Equal(t, f.State, latest(pl), "%s: %s", pid, brief(cs))
		if f.PayoutID != "" {
			require.NotNil(t, pl.Settlement, pid)
			require.Equal(t, f.PayoutID, pl.Settlement.PayoutID, pid)
		}
		checked[f.State]++
	}
	for _, s := range []models.State{models.StateCreated, models.StateAuthorised, models.StateCaptured, models.StateSettled,
		models.StateRefunded, models.StateCanceled, models.StateFailed, models.StateChargeback} {
		require.Positive(t, checked[s], "no %s payment compared: %v", s, checked)
	}
}

// The facts the listing dates by a payment's fields, and the cap.
func TestListObjectsFacts(t *testing.T) {
	t.Parallel()
	f := newFake(t, listNow)
	s := f.s
	p, err := gocardless.New(gocardless.Config{AccessToken: "sandbox_listing", BaseURL: f.url})
	require.NoError(t, err)
	d := func(days, h int) time.Time { return day(days, h) }
	until := d(5, 12)
	cycle := func(created time.Time) string {
		pm := s.CreatePayment(2500, "GBP", created)
		s.Submit(pm, created.Add(30*time.Hour))
		s.Confirm(pm, created.Add(4*24*time.Hour))
		return pm
	}
	// Paid out before the window's end, then refunded in part before it and
	// in part after it.
	refunded := cycle(d(20, 9))
	po1 := s.PayOut(d(14, 7), refunded)
	s.Refund(refunded, 1000, d(10, 9))
	s.Refund(refunded, 1500, d(2, 9))
	// Paid out after the window's end: collected before it, not settled.
	lateSettled := cycle(d(12, 9))
	po2 := s.PayOut(d(3, 7), lateSettled)
	// Failed after its payout, which then bounced: settled, then failed no
	// earlier than the payout; the bounce is reported.
	lateFailed := cycle(d(20, 9))
	po3 := s.PayOut(d(14, 7), lateFailed)
	s.Fail(lateFailed, d(13, 9))
	s.BouncePayout(po3, d(12, 9))
	// A Success+ failure GoCardless will retry: no state.
	willRetry := s.CreatePayment(1000, "GBP", d(20, 9))
	s.Submit(willRetry, d(19, 15))
	s.FailWillRetry(willRetry, d(16, 6))
	// A status the mapping does not know.
	odd := s.CreatePayment(1000, "GBP", d(20, 9))
	s.SetRawStatus(odd, "some_new_status", "some_new_action", d(19, 9))
	// Created long before the window (a charge date far ahead), paid out and
	// charged back in it: found from the window's payout, re-read whole.
	straggler := s.CreatePayment(3000, "GBP", d(60, 9))
	s.Submit(straggler, d(29, 15))
	s.Confirm(straggler, d(26, 6))
	po4 := s.PayOut(d(25, 7), straggler)
	s.ChargeBack(straggler, d(8, 9))

	got := map[string][]reconcile.Change{}
	require.NoError(t, p.ListObjects(context.Background(), reconcile.ListParams{Since: d(30, 0), Until: until}, func(pg reconcile.Page) error {
		for _, c := range pg.Changes {
			require.True(t, c.At.Before(until), "%+v", c)
			got[c.ProviderID] = append(got[c.ProviderID], c)
		}
		return nil
	}))

	pl := plan(got[refunded])
	require.Equal(t, models.StateSettled, latest(pl))
	require.Equal(t, int64(1000), pl.RefundTo, "only the refund created before the window's end counts")
	require.Equal(t, po1, pl.Settlement.PayoutID)
	require.Equal(t, d(14, 7), pl.Settlement.At, "settled when the payout was created")

	pl = plan(got[lateSettled])
	require.Equal(t, models.StateCaptured, latest(pl))
	require.Nil(t, pl.Settlement, "paid out after the window's end")
	for _, c := range got[lateSettled] {
		require.NotEqual(t, po2, c.PayoutID)
	}

	pl = plan(got[lateFailed])
	require.Equal(t, models.StateFailed, latest(pl))
	require.Equal(t, po3, pl.Settlement.PayoutID)
	require.False(t, pl.Latest.At.Before(d(14, 7)), "a failure after the payout is dated no earlier than the payout")
	bounced := false
	for _, c := range got[lateFailed] {
		bounced = bounced || c.RawStatus == "payout_bounced" && c.Revert != "" && !c.State.Valid()
	}
	require.True(t, bounced, "%s", brief(got[lateFailed]))

	pl = plan(got[willRetry])
	require.Equal(t, models.StateCreated, latest(pl), "a failure GoCardless retries is not final")
	retry := false
	for _, c := range got[willRetry] {
		retry = retry || c.RawStatus == gocardless.RawFailedWillRetry && c.At.Equal(d(16, 6))
	}
	require.True(t, retry, "%s", brief(got[willRetry]))

	pl = plan(got[straggler])
	require.Equal(t, models.StateChargeback, latest(pl), "%s", brief(got[straggler]))
	require.Equal(t, po4, pl.Settlement.PayoutID)
	require.Equal(t, int64(3000), pl.Amount)

	unknown := false
	for _, c := range got[odd] {
		require.NotEqual(t, models.StateFailed, c.State)
		unknown = unknown || c.Unknown && c.RawStatus == "some_new_status" && !c.State.Valid()
	}
	require.True(t, unknown, "%s", brief(got[odd]))
}

// fn's error stops the listing: it is returned, fn is not called again and
// nothing more is read; a canceled context stops it too.
func TestListObjectsStops(t *testing.T) {
	t.Parallel()
	w := newListWorld(t, 1000, 50)
	lp := reconcile.ListParams{Since: listNow.AddDate(0, 0, -80), Until: listNow}
	before := w.p.Requests()
	require.NoError(t, w.p.ListObjects(context.Background(), lp, func(reconcile.Page) error { return nil }))
	full := w.p.Requests() - before

	stop := errors.New("stop")
	calls := 0
	before = w.p.Requests()
	err := w.p.ListObjects(context.Background(), lp, func(reconcile.Page) error {
		calls++
		return stop
	})
	require.Same(t, stop, err)
	require.Equal(t, 1, calls)
	require.Less(t, w.p.Requests()-before, full/4, "the listing went on reading after fn's error")

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err = w.p.ListObjects(ctx, lp, func(reconcile.Page) error { t.Fatal("called after the context was canceled"); return nil })
	require.ErrorIs(t, err, context.Canceled)

	calls = 0
	err = w.p.Verifier().ListCurrent(context.Background(), lp, func([]reconcile.Current) error {
		calls++
		return stop
	})
	require.Same(t, stop, err)
	require.Equal(t, 1, calls)
}

// ListCurrent lists every payment created in the window once, a page at a
// time, each exactly as Current answers for it.
func TestListCurrentAgreesWithCurrent(t *testing.T) {
	t.Parallel()
	w := newListWorld(t, 1500, 100)
	since, until := listNow.AddDate(0, 0, -50), listNow.AddDate(0, 0, -3)
	v := w.p.Verifier()
	seen := map[string]bool{}
	states := map[models.State]int{}
	require.NoError(t, v.ListCurrent(context.Background(), reconcile.ListParams{Since: since, Until: until}, func(cs []reconcile.Current) error {
		require.NotEmpty(t, cs)
		require.LessOrEqual(t, len(cs), 100)
		ids := make([]string, len(cs))
		for i, c := range cs {
			require.False(t, seen[c.ProviderID], "%s listed twice", c.ProviderID)
			seen[c.ProviderID] = true
			ids[i] = c.ProviderID
			states[c.State]++
		}
		want, err := w.p.Verifier().Current(context.Background(), reconcile.CurrentParams{IDs: ids})
		require.NoError(t, err)
		require.Equal(t, want, cs)
		return nil
	}))
	n := 0
	for pid, at := range w.created {
		if !at.Before(since) && at.Before(until) {
			n++
			require.True(t, seen[pid], "%s created in the window is not listed", pid)
		}
	}
	require.Len(t, seen, n)
	require.Greater(t, len(states), 5, "%v", states)
}

// A window older than six months: GoCardless serves no payout items for
// its payouts (410 Gone), so only the first is asked for; each payment of
// the window is still settled by the payout it names (links.payout).
func TestListObjectsWithoutPayoutItems(t *testing.T) {
	t.Parallel()
	f := newFake(t, listNow)
	f.s.Generate(gcfake.GenOptions{Payments: 600, Start: listNow.AddDate(0, 0, -320), End: listNow.AddDate(0, 0, -200), Seed: 7})
	f.s.SetLatency(25 * time.Millisecond) // late for the paced provider below: its payouts' items are read at once
	for _, rps := range []float64{0, 400} {
		p, err := gocardless.New(gocardless.Config{AccessToken: "sandbox_listing", BaseURL: f.url, PageSize: 100, RequestsPerSecond: rps})
		require.NoError(t, err)
		w := &listWorld{t: t, s: f.s, p: p, created: map[string]time.Time{}}
		for _, d := range f.s.Deliveries() {
			if d.EventType == "payments.created" {
				w.created[d.Facts[0].PaymentID] = d.At
			}
		}
		since, until := listNow.AddDate(0, 0, -300), listNow.AddDate(0, 0, -230)
		before, gone := f.s.RequestsByPath(), f.s.RequestsByStatus()[410]
		got := w.list(since, until)
		after := f.s.RequestsByPath()
		items, gone := after["/payout_items"]-before["/payout_items"], f.s.RequestsByStatus()[410]-gone
		if rps == 0 {
			require.Equal(t, int64(1), items, "payout items are asked for once, then no more")
		} else {
			// Read at once: those asked before the first 410 answered
			// answer 410 too; none is asked after it.
			require.True(t, items >= 1 && items <= 6, "payout items asked for %d times", items)
		}
		require.Equal(t, items, gone, "every payout's items gone")
		truth := f.s.ExpectedAt(until.Add(-time.Millisecond))
		settled := 0
		for pid, at := range w.created {
			if at.Before(since) || !at.Before(until) || truth[pid].PayoutID == "" {
				continue
			}
			settled++
			pl := plan(got[pid])
			require.NotNil(t, pl.Settlement, "%s: %s", pid, brief(got[pid]))
			require.Equal(t, truth[pid].PayoutID, pl.Settlement.PayoutID)
		}
		require.Greater(t, settled, 100)
	}
}

// The engine in mode listing over a window ending now, on an empty
// database: every payment of the window gets its row, a second run repairs
// and refuses nothing (the payments created before the window that its
// payouts paid out are re-read whole, so no row they moved inside the
// window looks ahead of the listing), and verify --all, whose oracle is
// GoCardless's current objects read by ListCurrent, finds no difference.
func TestListingRunConverges(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	w := newListWorld(t, 1500, 500)
	since := listNow.AddDate(0, 0, -45)
	run := func() reconcile.Result {
		res, err := reconcile.Run(context.Background(), reconcile.Options{DB: db.DB, Provider: w.p, Since: since, Until: listNow,
			Mode: reconcile.ModeListing, Now: func() time.Time { return listNow }, StuckLimit: -1, BatchSize: 200})
		require.NoError(t, err)
		require.Equal(t, models.RunSucceeded, res.Run.Status)
		return res
	}
	first := run()
	inWindow := 0
	for _, at := range w.created {
		if !at.Before(since) {
			inWindow++
		}
	}
	require.Greater(t, first.Run.Examined, int64(inWindow), "the window's payments and the older ones its payouts paid out")
	require.Equal(t, first.Run.Examined, first.Run.Repaired)

	again := run()
	require.Zero(t, again.Run.Repaired, "a second run repairs nothing")
	require.Zero(t, again.Run.Refused, "a second run refuses nothing")
	require.Zero(t, again.Run.SyntheticEvents)

	rep, err := verify.Run(context.Background(), verify.Options{DB: db.DB, Provider: gocardless.Name, Reader: w.p.Verifier(),
		Since: since, Until: listNow, All: true, Now: func() time.Time { return listNow }})
	require.NoError(t, err)
	require.GreaterOrEqual(t, rep.Checked, inWindow, "the window's payments, and the older rows the run moved inside it")
	require.Empty(t, rep.Unexplained, "verify --all after the listing")
}

// TestListObjectsInStretchesWhenGoCardlessAnswersLate: when GoCardless
// answers slower than the pacing allows, the window's payments are listed
// as stretches of its time at once (a list read through its cursor makes
// one request an answer's time), and a page's payments' own reads (a
// refunded payment's refunds, a failed Success+ payment's failure, a
// payment created before the window read by id) are made several at
// once; the listing's changes are those of one list: each payment's the
// same, in another order of pages, for at most a partly filled page more a
// stretch, and the payments' own reads are the same. The window's payouts'
// items are read several at once. A stretch whose list fails fails the
// listing.
func TestListObjectsInStretchesWhenGoCardlessAnswersLate(t *testing.T) {
	t.Parallel()
	f := newFake(t, listNow)
	f.s.Generate(gcfake.GenOptions{Payments: 900, Start: listNow.AddDate(0, 0, -90), End: listNow, Seed: 15})
	type counts struct {
		lists gauge // the payment lists
		own   gauge // a payment's own reads: its refunds, its failures, itself by id
		items gauge // the payouts' items
	}
	var (
		mu   sync.Mutex
		c    counts
		fail bool
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		failing := fail && r.URL.Path == "/payments" && r.URL.Query().Get("after") != ""
		mu.Unlock()
		if failing {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte(`{"error":{"message":"Invalid cursor","type":"invalid_api_usage","code":400,"errors":[{"reason":"invalid_cursor","message":"Invalid cursor"}],"request_id":"RQ1"}}`))
			return
		}
		q := r.URL.Query()
		switch {
		case r.URL.Path == "/payments":
			defer c.lists.enter(&mu)()
		case r.URL.Path == "/payout_items":
			defer c.items.enter(&mu)()
		case q.Get("payment") != "" || q.Get("links[payment]") != "" || strings.HasPrefix(r.URL.Path, "/payments/"):
			defer c.own.enter(&mu)()
		}
		f.s.Handler().ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	f.s.SetLatency(25 * time.Millisecond) // above the 20 ms floor, and 1.5 intervals at 400/s
	lp := reconcile.ListParams{Since: listNow.AddDate(0, 0, -60), Until: listNow.AddDate(0, 0, -20)}
	read := func(rps float64) (map[string][]reconcile.Change, counts) {
		p, err := gocardless.New(gocardless.Config{AccessToken: "sandbox_stretches", BaseURL: srv.URL, PageSize: 20, RequestsPerSecond: rps,
			Sleep: func(ctx context.Context, _ time.Duration) error { return ctx.Err() }})
		require.NoError(t, err)
		mu.Lock()
		c = counts{}
		mu.Unlock()
		out := map[string][]reconcile.Change{}
		require.NoError(t, p.ListObjects(context.Background(), lp, func(pg reconcile.Page) error {
			for _, c := range pg.Changes {
				out[c.ProviderID] = append(out[c.ProviderID], c)
			}
			return nil
		}))
		mu.Lock()
		defer mu.Unlock()
		return out, c
	}
	one, oc := read(0)    // unpaced: one list
	late, lc := read(400) // an interval of 2.5 ms against answers of 25
	t.Logf("payment lists: %d requests, %d at once, one list; %d requests, %d at once, in stretches (%d payments); a payment's own reads: %d (%d at once), %d (%d at once); payouts' items: %d (%d at once), %d (%d at once)",
		oc.lists.all, oc.lists.most, lc.lists.all, lc.lists.most, len(late), oc.own.all, oc.own.most, lc.own.all, lc.own.most, oc.items.all, oc.items.most, lc.items.all, lc.items.most)
	require.Greater(t, len(one), 100)
	require.Equal(t, len(one), len(late))
	for id, cs := range one {
		require.Equal(t, cs, late[id], "payment %s", id)
	}
	require.Equal(t, 1, oc.lists.most)
	require.GreaterOrEqual(t, lc.lists.most, 3, "stretches listed at once")
	require.LessOrEqual(t, lc.lists.all, oc.lists.all+6, "at most a partly filled page more a stretch")
	require.Greater(t, oc.own.all, 10, "refunded and failed payments read their refunds and failures")
	require.Equal(t, oc.own.all, lc.own.all, "a payment's own reads, the same")
	require.Equal(t, 1, oc.own.most)
	require.GreaterOrEqual(t, lc.own.most, 2, "payments' own reads at once")
	require.Greater(t, oc.items.all, 3, "the window's payouts' items")
	require.Equal(t, oc.items.all, lc.items.all, "payouts' items, the same requests")
	require.Equal(t, 1, oc.items.most)
	require.GreaterOrEqual(t, lc.items.most, 2, "payouts' items read at once")

	// A stretch whose list fails on a later page fails the listing.
	mu.Lock()
	fail = true
	mu.Unlock()
	p, err := gocardless.New(gocardless.Config{AccessToken: "sandbox_stretches", BaseURL: srv.URL, PageSize: 20, RequestsPerSecond: 400,
		Sleep: func(ctx context.Context, _ time.Duration) error { return ctx.Err() }})
	require.NoError(t, err)
	require.ErrorContains(t, p.ListObjects(context.Background(), lp, func(reconcile.Page) error { return nil }), "list gocardless payments")
}

// gauge counts requests, and the most answered at once.
type gauge struct{ all, now, most int }

// enter counts a request under mu; the func it returns ends it.
func (g *gauge) enter(mu *sync.Mutex) func() {
	mu.Lock()
	g.all, g.now = g.all+1, g.now+1
	g.most = max(g.most, g.now)
	mu.Unlock()
	return func() {
		mu.Lock()
		g.now--
		mu.Unlock()
	}
}
