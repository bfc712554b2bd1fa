package stripe_test

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/providers/stripe"
	"github.com/reconciler/reconciler/providers/stripe/stripefake"
	"github.com/reconciler/reconciler/reconcile"
)

// listObjects runs ListObjects and returns its changes and its pages.
func listObjects(t *testing.T, p *stripe.Provider, lp reconcile.ListParams) ([]reconcile.Change, []reconcile.Page) {
	t.Helper()
	var cs []reconcile.Change
	var pages []reconcile.Page
	require.NoError(t, p.ListObjects(context.Background(), lp, func(pg reconcile.Page) error {
		require.Empty(t, pg.Events, "a listing carries no events")
		require.Empty(t, pg.Cursor, "nor a cursor")
		require.True(t, pg.CursorAt.IsZero())
		require.NotEmpty(t, pg.Changes, "no empty page")
		pages = append(pages, pg)
		cs = append(cs, pg.Changes...)
		return nil
	}))
	return cs, pages
}

// brief is a payment's changes without their payloads, for messages.
func brief(cs []reconcile.Change) []string {
	var out []string
	for _, c := range cs {
		out = append(out, fmt.Sprintf("%s@%s raw=%q refunded=%d/%v payout=%s notice=%q revert=%q",
			c.State, c.At.UTC().Format(time.RFC3339), c.RawStatus, c.AmountRefunded, c.Refunded, c.PayoutID, c.NoticeKind, c.Revert))
	}
	return out
}

func byPayment(cs []reconcile.Change) map[string][]reconcile.Change {
	out := map[string][]reconcile.Change{}
	for _, c := range cs {
		out[c.ProviderID] = append(out[c.ProviderID], c)
	}
	return out
}

// requireListed checks what every listed change must be: before the
// window's end, inferred, carrying the object it was read from, and, when it
// moves a state, under its deterministic id.
func requireListed(t *testing.T, cs []reconcile.Change, until time.Time) {
	t.Helper()
	for _, c := range cs {
		require.NotEmpty(t, c.ProviderID)
		require.True(t, c.At.Before(until), "%s %s at %v: at or after the window's end %v", c.ProviderID, c.State, c.At, until)
		require.True(t, c.Inferred, "%s %s", c.ProviderID, c.State)
		require.True(t, json.Valid(c.Payload) && len(c.Payload) > 2, "%s %s: payload %q", c.ProviderID, c.State, c.Payload)
		if c.State.Valid() {
			require.Equal(t, reconcile.SyntheticEventID(c.ProviderID, c.State, c.At), c.EventID)
		}
		// A view of the charge as it is now is kept only when it shows no
		// refund, which is true at the window's end too.
		require.False(t, c.ViewCurrent && (c.AmountRefunded > 0 || c.Refunded), "%s %s: a current view counting refunds", c.ProviderID, c.State)
	}
}

// TestListObjectsWindowBeforeNow lists a month of a generated 90-day account
// that ended a month ago and checks it against the fake's ground truth as of
// the window's end.
func TestListObjectsWindowBeforeNow(t *testing.T) {
	fake, p := setup(t)
	a := fake.Account("")
	start := now.Add(-90 * 24 * time.Hour)
	since, until := now.Add(-60*24*time.Hour), now.Add(-30*24*time.Hour)
	a.Generate(stripefake.GenOptions{Payments: 1500, Start: start, End: now, Seed: 15})

	// Crafted on top: an older payment refunded in the window, one disputed
	// in it; payments of the window that moved on after its end.
	older := a.CreatePayment(1200, "gbp", false, since.Add(-10*24*time.Hour))
	a.Capture(older, since.Add(-10*24*time.Hour+time.Minute))
	a.Refund(older, 300, since.Add(5*24*time.Hour))
	olderDisputed := a.CreatePayment(1300, "gbp", false, since.Add(-9*24*time.Hour))
	a.Capture(olderDisputed, since.Add(-9*24*time.Hour+time.Minute))
	a.Dispute(olderDisputed, since.Add(3*24*time.Hour))
	lateRefund := a.CreatePayment(1400, "gbp", false, since.Add(24*time.Hour))
	a.Capture(lateRefund, since.Add(24*time.Hour+time.Minute))
	a.Refund(lateRefund, 0, until.Add(2*24*time.Hour))
	partlyLate := a.CreatePayment(1500, "gbp", false, since.Add(25*time.Hour))
	a.Capture(partlyLate, since.Add(25*time.Hour+time.Minute))
	a.Refund(partlyLate, 500, until.Add(-time.Hour))
	a.Refund(partlyLate, 1000, until) // at the end: after it
	lateCapture := a.CreatePayment(1600, "gbp", true, since.Add(2*24*time.Hour))
	a.Authorise(lateCapture, since.Add(2*24*time.Hour+time.Minute))
	a.Capture(lateCapture, until.Add(time.Hour))
	lateAuto := a.CreatePayment(1700, "gbp", false, until.Add(-time.Minute))
	a.Capture(lateAuto, until.Add(time.Minute))
	lateCancel := a.CreatePayment(1800, "gbp", true, since.Add(3*24*time.Hour))
	a.Authorise(lateCancel, since.Add(3*24*time.Hour+time.Minute))
	a.Cancel(lateCancel, until.Add(5*time.Minute))

	// One payout of the window failed after it was paid.
	var failed string
	for _, d := range a.Deliveries() {
		if d.EventType == "payout.paid" && d.At.After(since.Add(10*24*time.Hour)) && len(d.Facts) > 0 {
			failed = d.Facts[0].PayoutID
			break
		}
	}
	require.NotEmpty(t, failed)
	a.FailPayout(failed, "failed", until.Add(-24*time.Hour))

	cs, pages := listObjects(t, p, reconcile.ListParams{Since: since, Until: until})
	require.Greater(t, len(pages), 5, "handed on a page at a time")
	requireListed(t, cs, until)
	got := byPayment(cs)

	// The ground truth: what the events before the window's end imply, and
	// which payments the window's payouts, refunds and disputes name.
	asOf := a.ExpectedAt(until.Add(-time.Second))
	today := a.ExpectedAt(now)
	created := map[string]time.Time{}
	inWindow := map[string]bool{}
	explained := map[string]bool{}
	disputed := map[string]bool{}
	type settled struct {
		payout string
		at     time.Time
	}
	paidOut := map[string]settled{}
	lateRefunds := map[string]bool{}
	for _, d := range a.Deliveries() {
		in := !d.At.Before(since) && d.At.Before(until)
		for _, f := range d.Facts {
			switch {
			case d.EventType == "payment_intent.created":
				created[f.PaymentID] = f.At
				inWindow[f.PaymentID] = in
			case d.EventType == "payout.paid" && in && f.PayoutID != failed:
				paidOut[f.PaymentID] = settled{f.PayoutID, d.At}
				explained[f.PaymentID] = true
			case d.EventType == "payout.paid" && in:
				explained[f.PaymentID] = true
			case (d.EventType == "charge.refunded" || d.EventType == "charge.dispute.created") && in:
				explained[f.PaymentID] = true
			case d.EventType == "charge.refunded" && !d.At.Before(until):
				lateRefunds[f.PaymentID] = true
			}
			if d.EventType == "charge.dispute.created" {
				disputed[f.PaymentID] = true
			}
		}
	}

	// Every payment created in the window appears, as of the window's end.
	checked, withLateRefund := 0, 0
	for id, in := range inWindow {
		if !in {
			continue
		}
		require.Contains(t, got, id, "payment %s created in the window", id)
		plan := reconcile.Decide(reconcile.Local{}, got[id])
		require.NotNil(t, plan.Latest, id)
		require.Equal(t, asOf[id].Amount, plan.Amount, id)
		require.Equal(t, asOf[id].Currency, plan.Currency, id)
		if disputed[id] || today[id].Reverted > 0 || slices.Contains([]string{lateRefund, partlyLate, lateCapture, lateAuto, lateCancel}, id) {
			continue // below, or unknowable as of the end (a dispute's close, a refund that failed later)
		}
		if s, ok := paidOut[id]; ok && plan.Settlement != nil {
			require.Equal(t, s.payout, plan.Settlement.PayoutID, id)
		}
		if _, ok := paidOut[id]; !ok && asOf[id].PayoutID == failed && failed != "" {
			continue // its payout failed: no settlement to list
		}
		require.Equal(t, asOf[id].State, plan.Latest.To, "payment %s: %v", id, brief(got[id]))
		require.True(t, asOf[id].At.Equal(plan.Latest.At), "payment %s %s at %v, want %v", id, plan.Latest.To, plan.Latest.At, asOf[id].At)
		require.Equal(t, asOf[id].AmountRefunded, plan.RefundTo, "payment %s: refunds before the end only", id)
		checked++
		if lateRefunds[id] {
			withLateRefund++
		}
	}
	require.Greater(t, checked, 300)
	require.Positive(t, withLateRefund, "generated payments refunded after the window's end are among them")

	// Payments created outside the window appear only for a fact of it.
	for id := range got {
		if !inWindow[id] {
			require.True(t, explained[id] || id == older || id == olderDisputed, "payment %s created %v: no payout, refund or dispute of the window names it", id, created[id])
		}
	}

	// The window's payouts settle every charge they paid out, at their
	// arrival, also payments created before the window.
	before := 0
	for id, s := range paidOut {
		var found bool
		for _, c := range got[id] {
			if c.State == models.StateSettled && c.PayoutID == s.payout {
				require.True(t, c.At.Equal(s.at), "%s settled by %s at %v, want %v", id, s.payout, c.At, s.at)
				require.Equal(t, "reconciler.payout.paid", c.EventType)
				found = true
			}
		}
		require.True(t, found, "payment %s settled by payout %s in the window", id, s.payout)
		if created[id].Before(since) {
			before++
		}
	}
	require.Positive(t, before, "a payout of the window settles payments created before it")

	// The failed payout settles nothing and names each payment it paid out.
	reverts := 0
	for _, c := range cs {
		require.False(t, c.State == models.StateSettled && c.PayoutID == failed, "%s settled by the failed payout", c.ProviderID)
		if c.RawStatus == "payout_failed" {
			require.Contains(t, c.Revert, failed)
			reverts++
		}
	}
	require.Positive(t, reverts)

	// The refund of an older payment in the window is found by re-reading
	// it, counted as of the end; so is an older payment's open dispute.
	plan := reconcile.Decide(reconcile.Local{}, got[older])
	require.Equal(t, int64(300), plan.RefundTo)
	require.Equal(t, models.StateCaptured, plan.Latest.To)
	var notice bool
	for _, c := range got[olderDisputed] {
		notice = notice || (c.NoticeKind == models.KindDispute && c.Notice != "")
	}
	require.True(t, notice, "the open dispute of an older payment: %v", brief(got[olderDisputed]))

	// Refunds after the end are not counted; states reached after it are
	// not shown, the one before them is.
	for id, want := range map[string]struct {
		state    models.State
		at       time.Time
		refunded int64
	}{
		lateRefund:  {models.StateCaptured, since.Add(24*time.Hour + time.Minute), 0},
		partlyLate:  {models.StateCaptured, since.Add(25*time.Hour + time.Minute), 500},
		lateCapture: {models.StateAuthorised, since.Add(2*24*time.Hour + time.Minute), 0},
		lateAuto:    {models.StateCreated, until.Add(-time.Minute), 0},
		lateCancel:  {models.StateAuthorised, since.Add(3*24*time.Hour + time.Minute), 0},
	} {
		plan := reconcile.Decide(reconcile.Local{}, got[id])
		require.NotNil(t, plan.Latest, id)
		require.Equal(t, want.state, plan.Latest.To, "%s: %v", id, brief(got[id]))
		require.True(t, want.at.Equal(plan.Latest.At), "%s at %v, want %v", id, plan.Latest.At, want.at)
		require.Equal(t, want.refunded, plan.RefundTo, id)
		for _, c := range got[id] {
			require.NotEqual(t, models.StateRefunded, c.State, id)
		}
	}
	// What it cost: a request per page of 100 payment intents, one for the
	// disputes of each disputed charge read, one list of the window's
	// payouts, refunds and disputes each, one page of balance transactions
	// per payout read (under 100 charges each here), one request per older
	// payment re-read, and the schedule.
	window, rereads, disputedRead, payoutsRead := 0, map[string]bool{}, 0, map[string]bool{}
	for id, in := range inWindow {
		if in {
			window++
		}
		if !in && (explained[id] || id == older || id == olderDisputed) {
			for _, c := range got[id] {
				if c.State.Valid() && c.State != models.StateSettled || c.NoticeKind != "" || c.Unknown {
					rereads[id] = true // read again, not only settled by a payout
				}
			}
		}
	}
	for id := range got {
		if (inWindow[id] || rereads[id]) && disputed[id] {
			disputedRead++
		}
	}
	for _, d := range a.Deliveries() {
		if d.EventType == "payout.paid" && !d.At.Before(since) && d.At.Before(until) {
			payoutsRead[d.Facts[0].PayoutID] = true
		}
	}
	by := fake.RequestsByPath()
	require.Equal(t, int64((window+99)/100), by["/v1/payment_intents"], "pages of payment intents")
	require.Equal(t, int64(1+disputedRead), by["/v1/disputes"], "the window's disputes and each disputed charge's")
	require.Equal(t, int64(1), by["/v1/payouts"])
	require.Equal(t, int64(1), by["/v1/refunds"])
	require.Equal(t, int64(len(payoutsRead)), by["/v1/balance_transactions"], "one page per payout")
	require.Equal(t, int64(len(rereads)), by["/v1/payment_intents/{id}"], "one read per older payment")
	require.Equal(t, int64(1), by["/v1/account"])
	require.Zero(t, by["/v1/payouts/{id}"], "no payout search per payment")
	t.Logf("requests: %v for %d payments of the window, %d re-read, %d payouts", by, window, len(rereads), len(payoutsRead))

	// The same payment read today shows what the listing left out.
	now, err := p.Fetch(context.Background(), reconcile.FetchParams{ProviderIDs: []string{lateRefund}})
	require.NoError(t, err)
	require.Equal(t, models.StateRefunded, reconcile.Decide(reconcile.Local{}, now).Latest.To)
}

// TestListObjectsAgreesWithFetch lists a whole generated account up to now:
// capped at now, each payment shows what the stuck path's re-fetch of it
// shows (states and their times, amounts, refunds, disputes, the payout
// that settled it).
func TestListObjectsAgreesWithFetch(t *testing.T) {
	fake, p := setup(t)
	a := fake.Account("")
	a.Generate(stripefake.GenOptions{Payments: 300, Start: now.Add(-90 * 24 * time.Hour), End: now, Seed: 16})
	cs, _ := listObjects(t, p, reconcile.ListParams{Since: now.Add(-90 * 24 * time.Hour), Until: now})
	requireListed(t, cs, now)
	listed := byPayment(cs)
	ids := a.PaymentIDs()
	require.Len(t, listed, len(ids))
	fetched, err := p.Fetch(context.Background(), reconcile.FetchParams{ProviderIDs: ids})
	require.NoError(t, err)
	want := byPayment(fetched)
	type fact struct {
		State                        models.State
		At                           int64
		Amount, Refunded, Captured   int64
		FullyRefunded, Unknown, View bool
		Raw, Payout, EventID, Notice string
		Revert                       string
	}
	// A settlement the payout listing finds carries the charge its balance
	// transaction expands (a current view when it shows no refund); the
	// stuck path's carries none.
	norm := func(cs []reconcile.Change) []fact {
		var out []fact
		for _, c := range cs {
			out = append(out, fact{State: c.State, At: c.At.Unix(), Amount: c.Amount, Refunded: c.AmountRefunded, Captured: c.AmountCaptured,
				FullyRefunded: c.Refunded, Unknown: c.Unknown, View: c.View && c.State != models.StateSettled, Raw: c.RawStatus, Payout: c.PayoutID, EventID: c.EventID,
				Notice: c.Notice, Revert: c.Revert})
		}
		sort.Slice(out, func(i, j int) bool {
			if out[i].At != out[j].At {
				return out[i].At < out[j].At
			}
			return out[i].State < out[j].State
		})
		return out
	}
	var settled, refunded, disputes int
	for _, id := range ids {
		require.Equal(t, norm(want[id]), norm(listed[id]), "payment %s", id)
		for _, c := range listed[id] {
			switch {
			case c.State == models.StateSettled:
				settled++
			case c.State == models.StateRefunded:
				refunded++
			case c.NoticeKind == models.KindDispute || c.State == models.StateChargeback:
				disputes++
			}
		}
	}
	require.Positive(t, settled)
	require.Positive(t, refunded)
	require.Positive(t, disputes)
}

// TestListObjectsStreamsPages: each page of payment intents is handed on
// before the next is requested, and an error from fn stops the listing.
func TestListObjectsStreamsPages(t *testing.T) {
	fake, p := setup(t)
	a := fake.Account("")
	since := now.Add(-40 * 24 * time.Hour)
	for i := range 250 {
		a.CreatePayment(int64(100+i), "gbp", false, since.Add(time.Duration(i)*time.Minute))
	}
	lp := reconcile.ListParams{Since: since, Until: since.Add(24 * time.Hour)}
	var sizes []int
	var listed []int64
	require.NoError(t, p.ListObjects(context.Background(), lp, func(pg reconcile.Page) error {
		sizes = append(sizes, len(pg.Changes))
		listed = append(listed, fake.RequestsByPath()["/v1/payment_intents"])
		return nil
	}))
	require.Equal(t, []int{100, 100, 50}, sizes)
	require.Equal(t, []int64{1, 2, 3}, listed, "one page requested per page handed on")
	by := fake.RequestsByPath()
	for _, path := range []string{"/v1/payouts", "/v1/refunds", "/v1/disputes"} {
		require.Equal(t, int64(1), by[path], "%s: one empty page", path)
	}
	require.Zero(t, by["/v1/payment_intents/{id}"], "nothing to re-read")
	require.Zero(t, by["/v1/balance_transactions"])

}

// TestListObjectsStopsOnError: an error from fn stops the listing before
// its next request, and is returned.
func TestListObjectsStopsOnError(t *testing.T) {
	fake, p := setup(t)
	a := fake.Account("")
	since := now.Add(-40 * 24 * time.Hour)
	for i := range 250 {
		a.CreatePayment(int64(100+i), "gbp", false, since.Add(time.Duration(i)*time.Minute))
	}
	stop := errors.New("stop")
	calls := 0
	err := p.ListObjects(context.Background(), reconcile.ListParams{Since: since, Until: since.Add(24 * time.Hour)},
		func(reconcile.Page) error { calls++; return stop })
	require.ErrorIs(t, err, stop)
	require.Equal(t, 1, calls)
	by := fake.RequestsByPath()
	require.Equal(t, int64(1), by["/v1/payment_intents"], "stopped before the next page")
	require.Zero(t, by["/v1/payouts"]+by["/v1/refunds"]+by["/v1/disputes"])
}

// TestListObjectsManualPayouts: on an account that pays out by hand a charge
// is settled at its funds' available_on when that is before the window's
// end, also a payment created before the window; no payout is listed.
func TestListObjectsManualPayouts(t *testing.T) {
	fake, p := setup(t)
	const acct = "acct_1ListManual"
	a := fake.Account(acct)
	a.SetManualPayouts(3)
	since, until := now.Add(-50*24*time.Hour), now.Add(-40*24*time.Hour)
	early := a.CreatePayment(1000, "eur", false, since.Add(time.Hour))
	a.Capture(early, since.Add(time.Hour))
	late := a.CreatePayment(2000, "eur", false, until.Add(-24*time.Hour))
	a.Capture(late, until.Add(-24*time.Hour)) // available 3 days later: after the end
	older := a.CreatePayment(3000, "eur", false, since.Add(-2*24*time.Hour))
	a.Capture(older, since.Add(-2*24*time.Hour)) // available in the window
	cs, _ := listObjects(t, p, reconcile.ListParams{Account: acct, Since: since, Until: until})
	requireListed(t, cs, until)
	got := byPayment(cs)
	settledAt := func(id string) *time.Time {
		for _, c := range got[id] {
			if c.State == models.StateSettled {
				require.Empty(t, c.PayoutID)
				return &c.At
			}
		}
		return nil
	}
	require.NotNil(t, settledAt(early))
	require.True(t, since.Add(time.Hour+3*24*time.Hour).Equal(*settledAt(early)), "at available_on")
	require.Nil(t, settledAt(late), "its funds became available after the end")
	require.NotNil(t, settledAt(older), "an older payment whose funds became available in the window")
	require.Equal(t, models.StateCaptured, reconcile.Decide(reconcile.Local{}, got[late]).Latest.To)
	require.Zero(t, fake.RequestsByPath()["/v1/payouts"], "a manual account's payouts are not listed")
}

// TestListCurrentAgreesWithCurrent: ListCurrent answers for every payment of
// the window what Current answers for it by id, a page of at most 100 at a
// time, on an automatic and on a manual-payout account.
func TestListCurrentAgreesWithCurrent(t *testing.T) {
	fake, p := setup(t)
	const manual = "acct_1CurrentManual"
	fake.Account(manual).SetManualPayouts(2)
	for i, acct := range []string{"", manual} {
		a := fake.Account(acct)
		a.Generate(stripefake.GenOptions{Payments: 260, Start: now.Add(-40 * 24 * time.Hour), End: now, Seed: int64(20 + i)})
		lp := reconcile.ListParams{Account: acct, Since: now.Add(-40 * 24 * time.Hour), Until: now}
		v := p.Verifier()
		var pages []int
		listed := map[string]reconcile.Current{}
		require.NoError(t, v.ListCurrent(context.Background(), lp, func(cs []reconcile.Current) error {
			pages = append(pages, len(cs))
			for _, c := range cs {
				require.NotContains(t, listed, c.ProviderID)
				listed[c.ProviderID] = c
			}
			return nil
		}))
		require.Equal(t, []int{100, 100, 60}, pages, "account %q", acct)
		ids := a.PaymentIDs()
		cur, err := v.Current(context.Background(), reconcile.CurrentParams{Account: acct, IDs: ids})
		require.NoError(t, err)
		states := map[models.State]int{}
		for i, id := range ids {
			require.Equal(t, cur[i], listed[id], "account %q payment %s", acct, id)
			states[cur[i].State]++
		}
		require.Positive(t, states[models.StateRefunded], "account %q: %v", acct, states)
		require.Positive(t, states[models.StateCanceled], "account %q: %v", acct, states)
		if acct == manual {
			require.Positive(t, states[models.StateSettled], "a manual account settles by availability: %v", states)
		}
		stop := errors.New("stop")
		require.ErrorIs(t, v.ListCurrent(context.Background(), lp, func([]reconcile.Current) error { return stop }), stop)
	}
}

// TestCurrentCompletesListed: Current given the payments ListCurrent read
// (CurrentParams.Listed) reads none of them again, checks only the local
// payouts named, and answers what it answers reading them by id.
func TestCurrentCompletesListed(t *testing.T) {
	fake, p := setup(t)
	a := fake.Account("")
	a.Generate(stripefake.GenOptions{Payments: 150, Start: now.Add(-20 * 24 * time.Hour), End: now, Seed: 31})
	v := p.Verifier()
	listed := map[string]reconcile.Current{}
	require.NoError(t, v.ListCurrent(context.Background(), reconcile.ListParams{Since: now.Add(-20 * 24 * time.Hour), Until: now},
		func(cs []reconcile.Current) error {
			for _, c := range cs {
				listed[c.ProviderID] = c
			}
			return nil
		}))
	ids := a.PaymentIDs()
	require.Len(t, listed, len(ids))
	payouts := map[string]string{}
	for id, x := range a.ExpectedAt(now) {
		if x.PayoutID != "" {
			payouts[id] = x.PayoutID
		}
	}
	require.NotEmpty(t, payouts)
	byID := func() int64 { return fake.RequestsByPath()["/v1/payment_intents/{id}"] }
	before := byID()
	got, err := p.Verifier().Current(context.Background(), reconcile.CurrentParams{IDs: ids, Payouts: payouts, Listed: listed})
	require.NoError(t, err)
	require.Equal(t, before, byID(), "no listed payment is read again")
	want, err := p.Verifier().Current(context.Background(), reconcile.CurrentParams{IDs: ids, Payouts: payouts})
	require.NoError(t, err)
	require.Equal(t, before+int64(len(ids)), byID())
	require.Equal(t, want, got)
	settled := 0
	for _, c := range got {
		if c.State == models.StateSettled {
			require.Equal(t, payouts[c.ProviderID], c.PayoutID)
			settled++
		}
	}
	require.Positive(t, settled, "the local payouts were checked")
}

// TestListObjectsInStretchesWhenStripeAnswersLate: when Stripe answers
// slower than the pacing allows (forced here: Config.ReadAhead), the
// window's PaymentIntents are listed as stretches of its time at once, and
// the listing hands on the same changes as one list does, each payment's in
// one page, at a cost of at most a partly filled page a stretch. A failing
// stretch fails the listing.
func TestListObjectsInStretchesWhenStripeAnswersLate(t *testing.T) {
	t.Parallel()
	fake := stripefake.New(stripefake.Options{Now: func() time.Time { return now }, Seed: 17})
	u := fake.Start()
	t.Cleanup(fake.Close)
	a := fake.Account("")
	since, until := now.Add(-60*24*time.Hour), now.Add(-30*24*time.Hour)
	a.Generate(stripefake.GenOptions{Payments: 1200, Start: now.Add(-90 * 24 * time.Hour), End: now, Seed: 21})
	provider := func(late bool) *stripe.Provider {
		p, err := stripe.New(stripe.Config{APIKey: "sk_test_x", BaseURL: u, MaxRetries: 2, ReadAhead: late,
			Sleep: func(ctx context.Context, _ time.Duration) error { return ctx.Err() }})
		require.NoError(t, err)
		return p
	}
	lp := reconcile.ListParams{Since: since, Until: until}
	sorted := func(cs []reconcile.Change) []reconcile.Change {
		slices.SortStableFunc(cs, func(a, b reconcile.Change) int {
			if c := strings.Compare(a.ProviderID, b.ProviderID); c != 0 {
				return c
			}
			return strings.Compare(a.EventID, b.EventID)
		})
		return cs
	}
	before := fake.RequestsByPath()["/v1/payment_intents"]
	one, onePages := listObjects(t, provider(false), lp)
	mid := fake.RequestsByPath()["/v1/payment_intents"]
	lateP := provider(true)
	late, latePages := listObjects(t, lateP, lp)
	after := fake.RequestsByPath()["/v1/payment_intents"]
	require.Greater(t, len(onePages), 5)
	requireListed(t, late, until)
	require.Equal(t, len(one), len(late))
	require.Equal(t, sorted(one), sorted(late), "the same changes")
	pageOf := map[string]int{}
	for i, pg := range latePages {
		for _, c := range pg.Changes {
			if j, ok := pageOf[c.ProviderID]; ok && j != i && c.PayoutID == "" {
				t.Fatalf("%s's intent changes in pages %d and %d", c.ProviderID, j, i)
			}
			if c.PayoutID == "" {
				pageOf[c.ProviderID] = i
			}
		}
	}
	oneList, stretched := mid-before, after-mid
	require.LessOrEqual(t, stretched, oneList+3, "at most a partly filled page more a stretch")
	require.Greater(t, stretched, oneList, "the window was listed in stretches")

	// An error from fn stops the listing and is returned.
	stop := errors.New("stop")
	calls := 0
	require.ErrorIs(t, lateP.ListObjects(context.Background(), lp, func(reconcile.Page) error { calls++; return stop }), stop)
	require.Equal(t, 1, calls)
	// A stretch whose list fails fails the listing (the account's payout
	// schedule is known by now); the window's payouts are listed beside
	// the stretches, and the refunds that name older payments, so whichever
	// fails first is the error.
	fake.SetFailureRate(http.StatusBadRequest, 1)
	err := lateP.ListObjects(context.Background(), lp, func(reconcile.Page) error { return nil })
	require.Error(t, err)
	require.Regexp(t, `^list stripe (payment intents|payouts|refunds): `, err.Error())
}

// TestListObjectsReadsPayoutsBesideTheIntentsWhenStripeAnswersLate: when
// Stripe answers late, the object listing reads several payouts' balance
// transactions at once, and beside the intents' stretches rather than
// after them, and the older payments the window's refunds and disputes
// name several at once (each a list read one page an answer's time: at 300 ms an
// answer the month of BenchmarkListingLatency spent 16 of its 29 s on 54
// such pages one after another). The changes are those of the listing one
// list at a time, with the same requests; a payout whose list fails fails
// the listing, naming it, and nothing is asked once it returned.
func TestListObjectsReadsPayoutsBesideTheIntentsWhenStripeAnswersLate(t *testing.T) {
	t.Parallel()
	fake := stripefake.New(stripefake.Options{Now: func() time.Time { return now }, Seed: 23})
	fake.SetLatency(3 * time.Millisecond)
	a := fake.Account("")
	a.Generate(stripefake.GenOptions{Payments: 1500, Start: now.Add(-90 * 24 * time.Hour), End: now, Seed: 5})
	var (
		mu                 sync.Mutex
		inFlight           = map[string]int{}
		mostBT, btBesidePI int
		reread, mostReread int // the older payments' re-reads by id
		failBT             bool
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		if failBT && r.URL.Path == "/v1/balance_transactions" {
			mu.Unlock()
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte(`{"error":{"type":"invalid_request_error","message":"No such payout"}}`))
			return
		}
		if strings.HasPrefix(r.URL.Path, "/v1/payment_intents/") {
			reread++
			inFlight["reread"]++
			mostReread = max(mostReread, inFlight["reread"])
			defer func() {
				mu.Lock()
				inFlight["reread"]--
				mu.Unlock()
			}()
		}
		inFlight[r.URL.Path]++
		if r.URL.Path == "/v1/balance_transactions" {
			mostBT = max(mostBT, inFlight[r.URL.Path])
			if inFlight["/v1/payment_intents"] > 0 {
				btBesidePI++
			}
		}
		mu.Unlock()
		defer func() {
			mu.Lock()
			inFlight[r.URL.Path]--
			mu.Unlock()
		}()
		fake.Handler().ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	provider := func(late bool) *stripe.Provider {
		p, err := stripe.New(stripe.Config{APIKey: "sk_test_x", BaseURL: srv.URL, MaxRetries: 2, ReadAhead: late,
			Sleep: func(ctx context.Context, _ time.Duration) error { return ctx.Err() }})
		require.NoError(t, err)
		return p
	}
	sorted := func(cs []reconcile.Change) []reconcile.Change {
		slices.SortStableFunc(cs, func(a, b reconcile.Change) int {
			return cmp.Or(strings.Compare(a.ProviderID, b.ProviderID), strings.Compare(a.EventID, b.EventID), strings.Compare(a.PayoutID, b.PayoutID))
		})
		return cs
	}
	lp := reconcile.ListParams{Since: now.Add(-60 * 24 * time.Hour), Until: now.Add(-20 * 24 * time.Hour)}
	byPath := func() map[string]int64 { return maps.Clone(fake.RequestsByPath()) }

	b0 := byPath()
	one, _ := listObjects(t, provider(false), lp)
	b1 := byPath()
	mu.Lock()
	mostOne, rereadOne := mostBT, reread
	mostBT, btBesidePI, reread, mostReread = 0, 0, 0, 0
	mu.Unlock()
	lateP := provider(true)
	late, pages := listObjects(t, lateP, lp)
	b2 := byPath()

	settled := 0
	for _, c := range late {
		if c.PayoutID != "" {
			settled++
		}
	}
	payouts := b1["/v1/payouts"] - b0["/v1/payouts"]
	t.Logf("%d changes (%d from payouts), %d pages; balance transaction lists at once: %d late, %d one at a time; %d asked beside an intents' page; %d older payments re-read (%d at once)",
		len(late), settled, len(pages), mostBT, mostOne, btBesidePI, reread, mostReread)
	require.Positive(t, payouts)
	require.Greater(t, settled, 100, "the window's payouts settle its payments")
	requireListed(t, late, lp.Until)
	require.Equal(t, sorted(one), sorted(late), "the same changes")
	for _, pg := range pages {
		require.LessOrEqual(t, len(pg.Changes), 1000, "a page of at most maxChangesPerPage changes")
	}
	for _, path := range []string{"/v1/balance_transactions", "/v1/payouts", "/v1/disputes", "/v1/refunds"} {
		require.Equal(t, b1[path]-b0[path], b2[path]-b1[path], "%s: the same requests", path)
	}
	require.Equal(t, 1, mostOne, "one list at a time on loopback")
	require.GreaterOrEqual(t, mostBT, 2, "payouts' lists read at once")
	require.Positive(t, btBesidePI, "payouts' lists read beside the intents' stretches")
	require.Greater(t, rereadOne, 5, "the window's refunds and disputes name older payments")
	require.Equal(t, rereadOne, reread, "the older payments re-read once each")
	require.GreaterOrEqual(t, mostReread, 2, "older payments re-read at once")

	// A payout whose list fails fails the listing, naming the payout, and
	// nothing is asked once ListObjects returned.
	mu.Lock()
	failBT = true
	mu.Unlock()
	err := lateP.ListObjects(context.Background(), lp, func(reconcile.Page) error { return nil })
	require.ErrorContains(t, err, "list balance transactions of payout po_")
	// (Counted as the client sends them: a request sent before the return
	// may reach the server after it.)
	n := lateP.Requests()
	time.Sleep(50 * time.Millisecond)
	require.Equal(t, n, lateP.Requests(), "a request sent after ListObjects returned")
}

// TestVerifierListStretchesFollowsTheLatency: the Verifier asks verify for
// twice as many stretches as the pacing intervals Stripe's answer takes
// (four at least, sixteen at most), and for none when Stripe answers
// within one and a half intervals (verify then sizes its listing by the
// rows alone).
func TestVerifierListStretchesFollowsTheLatency(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		latency time.Duration
		want    int
	}{
		{0, 0},                      // loopback: not late
		{120 * time.Millisecond, 6}, // 2 × ⌈120/50⌉
		{400 * time.Millisecond, 16},
		{time.Second, 16},
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			time.Sleep(c.latency)
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"id":"acct_1","object":"account","settings":{"payouts":{"schedule":{"interval":"daily","delay_days":2}}}}`))
		}))
		p, err := stripe.New(stripe.Config{APIKey: "sk_test_x", BaseURL: srv.URL, RequestsPerSecond: 20})
		require.NoError(t, err)
		require.Equal(t, c.want, p.Verifier().ListStretches(context.Background(), ""), "answers %v late at 20 requests/s", c.latency)
		srv.Close()
	}
}
