package gocardless

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"sort"
	"strings"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/reconcile"
)

// DefaultHold is how many of a window's events the event path holds at
// once: about 1 KiB each, so about 10 MiB.
const DefaultHold = 10_000

// totalsKept bounds the refunded payments whose totals a window keeps
// between its slices (refunds are rare; past it the kept totals are let go,
// and a refund whose payment's total is no longer kept reads the payment).
const totalsKept = 16384

// totalsSkew is how long before a payment was read a refund must have been
// created for that reading to count it: the clocks of GoCardless and of
// this process may differ. A refund nearer than that reads its payment.
const totalsSkew = time.Minute

// errOverflow stops a slice's reading once it holds more than the hold.
var errOverflow = errors.New("gocardless: the slice holds more events than the hold")

// pageError is the failure of a list request (eachPage), told apart from
// what the reader of its pages returned.
type pageError struct{ err error }

func (e pageError) Error() string { return e.err.Error() }
func (e pageError) Unwrap() error { return e.err }

// eachPage reads the cursor-paginated list of events q selects, handing
// each page to fn, until the last page or fn's error.
func (p *Provider) eachPage(ctx context.Context, q url.Values, fn func(*eventsPage) error) error {
	for {
		var pg eventsPage
		body, err := p.getBody(ctx, "/events", q)
		if err != nil {
			return pageError{err}
		}
		if err := json.Unmarshal(body, &pg); err != nil {
			return pageError{fmt.Errorf("gocardless: decode /events: %w", err)}
		}
		pg.body, pg.read = body, p.now()
		if err := fn(&pg); err != nil {
			return err
		}
		after := pg.Meta.next(len(pg.Events))
		if after == "" {
			return nil
		}
		q.Set("after", after)
	}
}

type item struct {
	ev      reconcile.Event
	changes []reconcile.Change
	// total: the item is a refund whose change takes its payment's
	// amount_refunded (refundTotals, when the item is delivered).
	total bool
}

// total is a refunded payment's amounts as GoCardless showed them, and
// when they were read (the provider's clock).
type total struct {
	amount, refunded int64
	currency         string
	read             time.Time
}

// position is where an event sits in the order the window is delivered in:
// created_at, then id.
type position struct {
	at time.Time
	id string
}

func (a position) after(b position) bool {
	if !a.at.Equal(b.at) {
		return a.at.After(b.at)
	}
	return a.id > b.id
}

// window is what the slices of one window share.
type window struct {
	// since is the window's start, as asked (a bounced payout is looked up
	// from it, whatever the slice).
	since time.Time
	// flagged are the payments whose unknown current status was reported
	// (once a window).
	flagged map[string]bool
	// last is each payment's latest failure so far (retryFailures).
	last map[string]int
	// totals are the amounts of refunded payments, as linked to the
	// payment events read so far or read one by one (refundTotals).
	totals     map[string]total
	totalsKept int // the most totals kept (totalsKept; tests lower it)
	// failedAfter is, for each payment that fails finally after the slice
	// that first needed to know, the position of its latest such failure
	// (failuresAfter); nil until then.
	failedAfter map[string]position
	// known are the stretches ahead whose payment events' times a slice
	// given up read (learn), in order.
	known []known
	// sides are the refunds' and creditors' streams (sideItems); to is the
	// window's end.
	sides []*side
	to    time.Time
	// sp keeps the pages of the slice being read, and of the slices given
	// up whose stretches are still to come (spill); nil without one.
	sp *spill
	// ahead is the next slice listed ahead (prefetch); unfit: a page did
	// not fit a slice's spill, and none is listed ahead any more.
	ahead *prefetch
	unfit bool
	// probed: the window's first slice was asked for (probeCap).
	probed bool
}

// ListChanges implements reconcile.Provider. GoCardless lists newest first
// and its events carry no snapshots. The window's events (payments,
// refunds and creditors) are read slice of time by slice of time, each
// slice whole, then delivered oldest first. A slice holds at most the
// provider's hold of events (DefaultHold): the whole window when it has no
// more than the probe's cap (probeCap, an eighth of the hold), else
// consecutive slices whose length follows the events' density; a slice
// that turns out to hold more is given up and read again in shorter
// slices, cut where what it read says (learn, plan). A millisecond cannot
// be shortened: one whose events pass the hold is read again in chunks of
// its pages (splitInstant). So memory stays flat however large the window
// (docs/providers/gocardless.md, "A large window, read in slices").
//
// What a payment's facts mean may depend on facts later in the window (a
// resubmission after a failure is judged by whether the payment fails
// again): when a slice has such a fact, the failures of the rest of the
// window are read once (failuresAfter), and the slices agree with one
// reading of the whole window.
func (p *Provider) ListChanges(ctx context.Context, lp reconcile.ListParams, fn func(reconcile.Page) error) error {
	// A slice is handed on while the next is read: emit gives the items of
	// a slice to a goroutine of their own, which pages them to fn, so that
	// reading (paced by the provider's rate limit) goes on while fn waits
	// for the engine to write them. At most two slices are held: the one
	// being handed on and the one being read.
	//
	// The slices waiting to be handed on hold at most the hold's events
	// together (a larger one waits alone), rather than one slice: a small
	// slice does not keep the next from being read while a large one is
	// written. So the events held are at most the hold's waiting and the
	// slice being read, as with one slice each.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	out := make(chan []item, 64)
	waiting := semaphore.NewWeighted(int64(p.hold))
	weight := func(items []item) int64 { return int64(max(min(len(items), p.hold), 1)) }
	handed := make(chan error, 1)
	go func() {
		pg := pager{lp: lp, size: p.page, fn: fn}
		var err error
		for items := range out {
			n := weight(items)
			if err == nil {
				if err = pg.add(ctx, items); err != nil {
					cancel(err)
				}
			}
			waiting.Release(n)
		}
		if err == nil {
			err = pg.flush()
		}
		handed <- err
	}()
	emit := func(items []item) error {
		if err := waiting.Acquire(ctx, weight(items)); err != nil {
			return context.Cause(ctx)
		}
		select {
		case out <- items:
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	err := p.readWindow(ctx, lp, emit)
	close(out)
	if herr := <-handed; herr != nil {
		return herr // the reading stopped because fn failed
	}
	return err
}

// pager fills the pages handed to ListChanges's callback.
type pager struct {
	lp   reconcile.ListParams
	size int
	fn   func(reconcile.Page) error
	page reconcile.Page
}

// add adds items to the page being filled, handing each full page on.
// Each item is let go once its page holds it (the page copies its
// changes), so that a slice's memory is freed as it is handed on.
func (pg *pager) add(ctx context.Context, items []item) error {
	for i, it := range items {
		items[i] = item{}
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		if pg.lp.After != "" && !after(it.ev, pg.lp.AfterAt, pg.lp.After) {
			continue // committed by the run this one resumes
		}
		pg.page.Events = append(pg.page.Events, it.ev)
		pg.page.Changes = append(pg.page.Changes, it.changes...)
		pg.page.Cursor, pg.page.CursorAt = it.ev.ID, it.ev.At
		if len(pg.page.Events) >= pg.size {
			if err := pg.flush(); err != nil {
				return err
			}
		}
	}
	return nil
}

// flush hands on the page being filled, if it holds anything.
func (pg *pager) flush() error {
	if len(pg.page.Events) == 0 {
		return nil
	}
	page := pg.page
	pg.page = reconcile.Page{}
	return pg.fn(page)
}

// readWindow reads the window slice by slice and hands each on (emit).
func (p *Provider) readWindow(ctx context.Context, lp reconcile.ListParams, emit func([]item) error) error {
	from, to := ceilMS(lp.Since), ceilMS(lp.Until)
	w := &window{since: lp.Since, to: to, flagged: map[string]bool{}, last: map[string]int{}, totals: map[string]total{}, totalsKept: cmp.Or(p.totalsKept, totalsKept),
		sides: []*side{{rt: "refunds", readTo: from, span: to.Sub(from)}, {rt: "creditors", readTo: from, span: to.Sub(from)}}}
	var spillErr error
	if most := cmp.Or(p.spillMax, DefaultSpillMax); most > 0 {
		w.sp, spillErr = openSpill(p.spillDir, most, cmp.Or(p.spills, processSpills))
		defer w.sp.close()
		defer func() { w.ahead.stop() }()
	}
	span := to.Sub(from)
	for from.Before(to) {
		end, profiled := w.plan(from, to, span, p.hold*3/4)
		probe := 0
		if !w.probed && end.Sub(from) > time.Millisecond {
			probe = probeCap(p.hold)
		}
		w.probed = true
		items, over, big, err := p.slice(ctx, from, end, w, probe)
		if err != nil {
			return err
		}
		if over != nil {
			if spillErr != nil {
				p.log.Warn("gocardless could not spill a slice's pages to disk; the slices given up are read again from GoCardless",
					"error", spillErr)
				spillErr = nil
			}
			span = w.learn(from, end, over, p.hold)
			p.log.Debug("gocardless window slice too large; reading it in shorter slices",
				"from", from, "until", end, "events", over.n, "next_span", span)
			continue
		}
		if big == nil && !profiled {
			// A slice cut by what a given-up slice read, an instant among
			// them, says nothing new of the density.
			span = longer(end.Sub(from), payments(items), p.hold)
		}
		// The next slice is listed while this one is handed on.
		p.prefetchNext(ctx, w, end, to, span)
		if big != nil {
			if err := p.splitInstant(ctx, from, end, big, w, emit); err != nil {
				return err
			}
			from = end
			continue
		}
		if err := p.deliver(ctx, from, end, items, w, w.rest(end), w.last, emit); err != nil {
			return err
		}
		from = end
	}
	return nil
}

// payments counts the payment events among items (a slice's; the side
// streams' events do not size the next slice, so that a slice listed ahead
// sizes the one after it as readWindow will).
func payments(items []item) int {
	n := 0
	for _, it := range items {
		if strings.HasPrefix(it.ev.Type, "payments.") {
			n++
		}
	}
	return n
}

// splitInstant delivers the instant [from, end) whose payment events
// passed the hold, marked page by page (big): when GoCardless listed them
// in the order the window is delivered in reversed, chunk by chunk (each
// read again after its first page's cursor, down to its oldest event),
// oldest first, each chunk with the side streams' events up to its newest;
// so an instant costs its pages twice and holds a chunk at a time. Listed
// in another order, it is read again and held whole, with a warning.
func (p *Provider) splitInstant(ctx context.Context, from, end time.Time, big *pageMarks, w *window, emit func([]item) error) error {
	side, err := p.sidesUpTo(ctx, nil, end, w)
	if err != nil {
		return err
	}
	if !big.ordered {
		p.log.Warn("gocardless listed one millisecond's events in no order reconciler can split; holding them whole",
			"at", from, "events", big.n)
		r, err := p.listType(ctx, stretch{rt: "payments", from: from, end: end, past: holdOn}, w, nil)
		if err != nil {
			return err
		}
		return p.deliver(ctx, from, end, append(r.items, side...), w, w.rest(end), w.last, emit)
	}
	sortItems(side)
	// A resubmission in one chunk may be answered by a failure in a later
	// chunk of the same instant: the failures after it are then read from
	// the instant's start, with what was known of the payments then.
	var lastThen map[string]int
	if w.failedAfter == nil {
		lastThen = maps.Clone(w.last)
	}
	cs := big.chunks(max(p.hold*3/4, 1))
	p.log.Debug("gocardless instant past the hold; reading it in chunks", "at", from, "events", big.n, "chunks", len(cs))
	for j, c := range cs {
		r, err := p.listType(ctx, stretch{rt: "payments", from: from, end: end, past: holdOn, after: c.after, downTo: c.downTo, limit: big.limit}, w, nil)
		if err != nil {
			return err
		}
		items := r.items
		final := j == len(cs)-1
		if len(items) > 0 {
			newest := items[0].ev // listed first
			n := sort.Search(len(side), func(i int) bool {
				return position{side[i].ev.At, side[i].ev.ID}.after(position{newest.At, newest.ID})
			})
			if final {
				n = len(side)
			}
			items = append(items, side[:n]...)
			side = side[n:]
		} else if final {
			items, side = side, nil
		}
		// A chunk that is not the instant's last is followed by the rest
		// of the instant: its resubmissions are judged by the failures
		// from the instant's start, with what was known before it.
		later, last := from, lastThen
		if final {
			later, last = w.rest(end), w.last
		}
		if err := p.deliver(ctx, from, end, items, w, later, last, emit); err != nil {
			return err
		}
	}
	return nil
}

// overflow is a slice that held more events than the hold: how many were
// read before it was given up, and the times they spanned; and, when it
// was given up while its payment events were read, their times in the
// order read.
type overflow struct {
	n        int
	lo, hi   time.Time
	payments []time.Time
	spilled  *spillRegion // its pages, when kept (spill)
}

// known is a stretch [from, to) of the window whose payment events'
// times are all known (ascending), learned from a slice given up: the next
// slices through it are cut where they hold what they should.
type known struct {
	from, to time.Time
	times    []time.Time
	// spill: the given-up slice's pages, every payment event of the
	// stretch among them, read from instead of GoCardless (nil: none).
	spill *spillRegion
	// instant: a millisecond read in part (how many events it holds is
	// not known), a slice of its own.
	instant bool
}

// plan is where the slice from `from` ends: from+span (at most to), cut
// short where a known stretch begins. Inside a known stretch it ends where
// the stretch's payment events reach target (an instant that holds more
// is a slice of its own) or where the stretch ends, whatever span says;
// profiled reports that case.
func (w *window) plan(from, to time.Time, span time.Duration, target int) (end time.Time, profiled bool) {
	for len(w.known) > 0 && !w.known[0].to.After(from) {
		w.sp.release(w.known[0].spill)
		w.known = w.known[1:]
	}
	end = to
	if span < to.Sub(from) {
		end = from.Add(span)
	}
	if len(w.known) == 0 {
		return end, false
	}
	if w.known[0].from.After(from) {
		return minTime(end, w.known[0].from), false
	}
	if w.known[0].instant {
		return w.known[0].to, true
	}
	// Through the known stretches that follow one another, until target
	// payment events, an instant or a gap.
	left := target
	for n, k := range w.known {
		if n > 0 && (k.instant || !k.from.Equal(w.known[n-1].to)) {
			return w.known[n-1].to, true
		}
		i := sort.Search(len(k.times), func(j int) bool { return !k.times[j].Before(from) })
		if i+left >= len(k.times) {
			left -= len(k.times) - i
			continue
		}
		if cut := k.times[i+left]; cut.After(from) {
			return cut, true
		}
		return from.Add(time.Millisecond), true
	}
	return w.known[len(w.known)-1].to, true
}

// probeCap is how many payment events the window's first slice (the
// whole window) reads before it judges, by their density, whether the
// window holds more than the hold (stretch.probe). GoCardless lists newest
// first, so what the first slice reads is the window's newest stretch:
// kept (spill) when the slice is given up, it is delivered last, after
// every request the window makes, while the engine writes it and the
// provider's rate limit goes unused. Given up at the hold, that was the
// hold's events and more (10,500 in pages of 500) written after the last
// answer; given up at the probe, three such pages. A window whose density
// says it fits the hold is read on as one slice, with the requests one
// reading of it takes.
func probeCap(hold int) int { return max(hold/8, 1) }

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// maxKnown bounds the known stretches a window keeps (each at most a
// hold's times).
const maxKnown = 64

// learn takes what a slice [from, end) given up read, and returns the
// length of the next slice from `from`. GoCardless lists newest first:
// when the payment events read came newest first, every payment event of
// (lo, end) was read, lo being the oldest time read. Those times become a
// known stretch; the instant lo (read in part) is one of its own; and the
// next slice is [from, lo) at most, as long as three quarters of the hold
// last at the density read. Otherwise (another order, or the refunds or
// creditors gave it up) the slice is shortened by the density alone.
func (w *window) learn(from, end time.Time, o *overflow, hold int) time.Duration {
	prev := end.Sub(from)
	desc := len(o.payments) > 0 && slices.IsSortedFunc(o.payments, func(a, b time.Time) int { return b.Compare(a) })
	if !desc || len(w.known) >= maxKnown {
		w.sp.release(o.spilled)
		return o.shorter(prev, hold)
	}
	lo := o.payments[len(o.payments)-1]
	var times []time.Time
	for i := len(o.payments) - 1; i >= 0; i-- {
		if o.payments[i].After(lo) {
			times = append(times, o.payments[i])
		}
	}
	// The instant lo may have been read in part: it is a slice of its own
	// (one that holds more than the hold is split, splitInstant), after the unknown
	// part [from, lo) and before the stretch.
	next := lo.Add(time.Millisecond)
	add := []known{{from: lo, to: next, instant: true}}
	if next.Before(end) {
		add = append(add, known{from: next, to: end, times: times, spill: o.spilled})
	} else {
		w.sp.release(o.spilled)
	}
	// Stretches that [from, end) runs into (it was planned through them,
	// yet its events passed the hold: they were not all there was) give
	// way to the new ones; what the last of them knew beyond end is kept.
	for len(w.known) > 0 && w.known[0].from.Before(end) {
		k := w.known[0]
		w.known = w.known[1:]
		if k.to.After(end) && !k.instant {
			rest := known{from: end, to: k.to, spill: k.spill}
			for _, t := range k.times {
				if !t.Before(end) {
					rest.times = append(rest.times, t)
				}
			}
			w.known = append([]known{rest}, w.known...)
		} else {
			w.sp.release(k.spill)
		}
	}
	w.known = append(add, w.known...)
	if !lo.After(from) {
		return time.Millisecond // the instant from comes next
	}
	seen := max(end.Sub(lo), time.Millisecond)
	return clampSpan(time.Duration(float64(seen)*float64(hold*3/4)/float64(max(len(times), 1))), lo.Sub(from))
}

// shorter is the length of the slice that replaces one of length prev that
// overflowed: what three quarters of the hold span at the density seen, at
// most half of prev, at least a millisecond.
func (o *overflow) shorter(prev time.Duration, hold int) time.Duration {
	seen := max(o.hi.Sub(o.lo), time.Millisecond)
	s := time.Duration(float64(seen) * float64(hold*3/4) / float64(o.n))
	return clampSpan(s, prev/2)
}

// longer is the length of the slice after one of length prev that held n
// events: what three quarters of the hold span at that density, at most
// eight times prev.
func longer(prev time.Duration, n, hold int) time.Duration {
	if n == 0 {
		return clampSpan(prev*8, prev*8)
	}
	return clampSpan(time.Duration(float64(prev)*float64(hold*3/4)/float64(n)), prev*8)
}

// clampSpan is s in whole milliseconds, between a millisecond and most.
func clampSpan(s, most time.Duration) time.Duration {
	s = min(s, most).Truncate(time.Millisecond)
	return max(s, time.Millisecond)
}

// slice reads the events of [from, end): payments (with the linked
// payment), then the refunds and creditors' events the window's side
// streams hold for it (sideItems). It gives up, with an overflow and no
// item, once its payment events pass the hold (or, with probe, once
// probe of them say the slice holds more: stretch.probe) and the slice can
// be shortened.
func (p *Provider) slice(ctx context.Context, from, end time.Time, w *window, probe int) ([]item, *overflow, *pageMarks, error) {
	var flaggedNow []string
	s := stretch{rt: "payments", from: from, end: end, capN: p.hold, probe: probe, past: giveUp}
	if end.Sub(from) <= time.Millisecond {
		s.past = markPages // an instant cannot be shortened, only split
	}
	r, err := p.listType(ctx, s, w, &flaggedNow)
	if err != nil {
		return nil, nil, nil, err
	}
	if r.over || r.big != nil {
		// The unknown statuses flagged here are reported by the shorter
		// slices, or the instant's chunks, instead.
		for _, pid := range flaggedNow {
			delete(w.flagged, pid)
		}
		if r.big != nil {
			return nil, nil, r.big, nil
		}
		return nil, &overflow{n: len(r.items), lo: r.lo, hi: r.hi, payments: r.times, spilled: r.spilled}, nil, nil
	}
	items, err := p.sidesUpTo(ctx, r.items, end, w)
	if err != nil {
		return nil, nil, nil, err
	}
	return items, nil, nil, nil
}

// sidesUpTo appends to items the side streams' events before end.
func (p *Provider) sidesUpTo(ctx context.Context, items []item, end time.Time, w *window) ([]item, error) {
	for _, sd := range w.sides {
		got, err := p.sideItems(ctx, sd, end, w)
		if err != nil {
			return nil, err
		}
		items = append(items, got...)
	}
	return items, nil
}

// side is one of the sparse resource types (refunds, creditors), read
// ahead of the slices in stretches of its own and held until the slice
// they belong to: a slice then costs one list request for its payments'
// last page rather than three.
type side struct {
	rt     string
	readTo time.Time // every event before it has been read
	span   time.Duration
	held   []item // read, not yet delivered
	off    bool   // GoCardless does not list it (creditors)
}

// sideHold is the share of the hold a side stream's stretch may hold.
func sideHold(hold int) int { return max(hold/4, 1) }

// sideItems returns sd's events before end, reading sd's stretches up to
// end first (each at most sideHold events, shortened when it passes it).
func (p *Provider) sideItems(ctx context.Context, sd *side, end time.Time, w *window) ([]item, error) {
	for !sd.off && sd.readTo.Before(end) {
		from := sd.readTo
		until := w.to
		if sd.span < until.Sub(from) {
			until = from.Add(sd.span)
		}
		// A stretch ends no sooner than the slice: the slice's events are
		// all read before it is delivered.
		until = maxTime(until, end)
		st := stretch{rt: sd.rt, from: from, end: until, capN: sideHold(p.hold), past: holdOn}
		if until.Sub(from) > time.Millisecond && until.After(end) {
			st.past = giveUp
		}
		r, err := p.listType(ctx, st, w, nil)
		if errors.Is(err, errUnlisted) {
			sd.off = true
			break
		}
		if err != nil {
			return nil, err
		}
		if r.over {
			o := overflow{n: len(r.items), lo: r.lo, hi: r.hi}
			sd.span = o.shorter(until.Sub(from), sideHold(p.hold))
			continue
		}
		sd.held = append(sd.held, r.items...)
		sd.span = longer(until.Sub(from), len(r.items), sideHold(p.hold))
		sd.readTo = until
	}
	var out []item
	kept := sd.held[:0]
	for _, it := range sd.held {
		if it.ev.At.Before(end) {
			out = append(out, it)
		} else {
			kept = append(kept, it)
		}
	}
	clear(sd.held[len(kept):])
	sd.held = kept
	return out, nil
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// errUnlisted: GoCardless refused to list creditor events (a 4xx).
var errUnlisted = errors.New("gocardless: creditor events not listed")

// typeRead is one resource type's events of a stretch (listType).
type typeRead struct {
	items  []item
	times  []time.Time // the payments' times, in the order read
	lo, hi time.Time   // the times read
	over   bool        // given up past the cap
	big    *pageMarks  // an instant past the cap, its pages marked (markPages)
	// spilled: the pages of a stretch given up, kept in the window's
	// spill (nil when there is none, or they did not fit).
	spilled *spillRegion
}

// past is what listType does once a stretch holds more than its cap.
type past int

const (
	// holdOn holds every event: a stretch of one millisecond, or a side
	// stream's (refunds and creditors are sparse).
	holdOn past = iota
	// giveUp stops, the stretch over (typeRead.over): it is read again
	// in shorter slices.
	giveUp
	// markPages lets the events go and marks the rest of the list's pages
	// (typeRead.big): the payment events of an instant past the hold,
	// read again in chunks (splitInstant).
	markPages
)

// stretch is what listType reads: resource type rt's events in [from,
// end), starting after the cursor after (none: the newest), and, when
// downTo is set, only down to that position (GoCardless lists newest
// first: a chunk of an instant, splitInstant). It holds at most capN
// events, then does as past says.
type stretch struct {
	rt        string
	from, end time.Time
	capN      int
	past      past
	after     string
	downTo    position
	limit     int // the pages' length (0: the provider's)
	// probe: with giveUp, once more than probe events are read, the
	// stretch is given up as soon as their density (GoCardless lists
	// newest first: every event of (lo, end) is read) says the stretch
	// holds more than capN (probeCap).
	probe int
}

// pageMarks are the pages of an instant's payment events as GoCardless
// listed them (newest first): where each page starts and the position of
// its oldest event, enough to read the instant again chunk by chunk.
type pageMarks struct {
	limit int // the pages' length, asked
	pages []pageMark
	n     int
	// ordered: each event was listed strictly before the one listed
	// before it in (created_at, id), the order the window is delivered in
	// reversed, so that consecutive pages are consecutive in that order.
	ordered bool
	prev    position
}

// pageMark is one page of an instant's events.
type pageMark struct {
	after  string // the cursor it was listed after ("": the first page)
	oldest position
	n      int
}

// page opens the page listed after the cursor after.
func (m *pageMarks) page(after string) { m.pages = append(m.pages, pageMark{after: after}) }

// event notes the next event of the page opened last.
func (m *pageMarks) event(pos position) {
	if m.n > 0 && !m.prev.after(pos) {
		m.ordered = false
	}
	m.prev, m.n = pos, m.n+1
	last := &m.pages[len(m.pages)-1]
	last.oldest, last.n = pos, last.n+1
}

// ids notes a page's events of the stretch s by their ids and times alone.
func (m *pageMarks) ids(events []json.RawMessage, s stretch) error {
	for _, raw := range events {
		var ev struct {
			ID        string    `json:"id"`
			CreatedAt time.Time `json:"created_at"`
		}
		if err := json.Unmarshal(raw, &ev); err != nil {
			return fmt.Errorf("decode gocardless event: %w", err)
		}
		if at := ev.CreatedAt.UTC(); s.holds(at) {
			m.event(position{at, ev.ID})
		}
	}
	return nil
}

// chunk is consecutive pages of an instant: its events are those listed
// after the cursor after, down to the position downTo.
type chunk struct {
	after  string
	downTo position
	n      int
}

// chunks cuts the pages into chunks of at most target events (at least a
// page each), oldest first: the order they are delivered in.
func (m *pageMarks) chunks(target int) []chunk {
	var out []chunk
	for b := len(m.pages) - 1; b >= 0; {
		if m.pages[b].n == 0 {
			b--
			continue
		}
		c := chunk{downTo: m.pages[b].oldest, n: m.pages[b].n}
		a := b
		for a > 0 && c.n+m.pages[a-1].n <= target {
			a--
			c.n += m.pages[a].n
		}
		c.after = m.pages[a].after
		out = append(out, c)
		b = a - 1
	}
	return out
}

// holds reports whether an event created at `at` lies in [from, end).
// GoCardless filters by created_at; a server that does not (a fake, a
// proxy) must not have the window's events delivered twice, or a slice
// never end.
func (s stretch) holds(at time.Time) bool { return !at.Before(s.from) && at.Before(s.end) }

// errChunkRead ends a chunk's reading at its oldest event.
var errChunkRead = errors.New("gocardless: the chunk was read")

// query is the list request of the stretch s, and its pages' length.
func (p *Provider) query(s stretch) (url.Values, int) {
	q := url.Values{}
	q.Set("resource_type", s.rt)
	if s.rt != "creditors" {
		q.Set("include", strings.TrimSuffix(s.rt, "s"))
	}
	q.Set("created_at[gte]", msFormat(s.from))
	q.Set("created_at[lt]", msFormat(s.end))
	limit := p.page
	switch {
	case s.limit > 0:
		limit = s.limit
	case s.past == markPages:
		// Pages no longer than a chunk, so that a chunk can be cut at
		// any page.
		limit = min(limit, max(s.capN*3/4, 1))
	}
	q.Set("limit", fmt.Sprint(limit))
	if s.after != "" {
		q.Set("after", s.after)
	}
	return q, limit
}

// listType reads the events of resource type rt in [from, end), mapped:
// payments with the linked payment (flagging unknown current statuses in
// w.flagged, the payments it flags appended to flaggedNow), refunds with
// the linked refund and each refunded payment's total, creditors' bounced
// payouts. Past s.capN events it does as s.past says. Creditor events
// GoCardless will not list give errUnlisted, with a warning.
func (p *Provider) listType(ctx context.Context, s stretch, w *window, flaggedNow *[]string) (typeRead, error) {
	var r typeRead
	rt := s.rt
	q, limit := p.query(s)
	var marks pageMarks
	if s.past == markPages {
		marks = pageMarks{limit: limit, ordered: true}
	}
	skipped := 0 // events outside [from, end): a server that ignores the filters
	defer func() {
		if skipped > 0 {
			p.log.Warn("gocardless listed events outside the created_at range asked for; skipped them",
				"resource_type", rt, "from", s.from, "until", s.end, "events", skipped)
		}
	}()
	// A slice's payment events are spilled as they are read, or, inside
	// stretches a slice given up read whole, read back from the spill.
	// A slice the window listed ahead (prefetch) is read from there.
	var region *spillRegion
	var replay []known
	var ahead *prefetch
	if rt == "payments" && s.past == giveUp && s.after == "" {
		if replay = w.spilled(s.from, s.end); replay == nil {
			region = w.sp.begin()
			ahead = p.takePrefetch(w, s.from, s.end)
			defer ahead.free()
		}
	}
	err := p.pages(ctx, q, replay, w.sp, ahead, func(pg *eventsPage) error {
		if s.past == markPages {
			marks.page(q.Get("after"))
			if r.big != nil {
				return marks.ids(pg.Events, s) // past the hold: only the pages' marks
			}
		}
		var plo, phi time.Time // the page's events in [from, end), for the spill
		linked := map[string]Payment{}
		read := pg.read
		for _, pm := range pg.Linked.Payments {
			linked[pm.ID] = pm
			if pm.AmountRefunded > 0 {
				// The payment as it is now: its total counts every refund
				// created before it was read, those of later slices
				// included.
				w.keepTotal(pm, read)
			}
		}
		refunds := map[string]Refund{}
		for _, rf := range pg.Linked.Refunds {
			refunds[rf.ID] = rf
		}
		for _, raw := range pg.Events {
			var ev Event
			if err := json.Unmarshal(raw, &ev); err != nil {
				return fmt.Errorf("decode gocardless event: %w", err)
			}
			it := item{ev: reconcile.Event{ID: ev.ID, Type: ev.ResourceType + "." + ev.Action, At: ev.CreatedAt.UTC(), Payload: raw}}
			if !s.holds(it.ev.At) || pg.within != nil && !pg.within.holds(it.ev.At) {
				if pg.within == nil {
					skipped++
				}
				continue
			}
			if plo.IsZero() || it.ev.At.Before(plo) {
				plo = it.ev.At
			}
			phi = maxTime(phi, it.ev.At)
			pos := position{it.ev.At, it.ev.ID}
			if s.downTo != (position{}) && s.downTo.after(pos) {
				return errChunkRead // the chunk's oldest event was read
			}
			if s.past == markPages {
				marks.event(pos)
			}
			last := pos == s.downTo
			switch rt {
			case "payments":
				r.times = append(r.times, it.ev.At)
				pm, ok := linked[ev.Links.Payment]
				was := w.flagged[ev.Links.Payment]
				it.changes = paymentEventChanges(ev, pm, ok, w.flagged)
				if !was && w.flagged[ev.Links.Payment] && flaggedNow != nil {
					*flaggedNow = append(*flaggedNow, ev.Links.Payment)
				}
			case "refunds":
				rf := refunds[ev.Links.Refund]
				pid := rf.Links.Payment
				if pid == "" {
					pid = ev.Links.Payment
				}
				c, total := refundEventChange(ev, rf, pid)
				if c.ProviderID != "" {
					it.changes = []reconcile.Change{c}
					it.total = total
				}
			case "creditors":
				cs, err := p.bouncedPayout(ctx, ev, w.since)
				if err != nil {
					return err
				}
				it.changes = cs
			}
			if r.lo.IsZero() || it.ev.At.Before(r.lo) {
				r.lo = it.ev.At
			}
			if it.ev.At.After(r.hi) {
				r.hi = it.ev.At
			}
			r.items = append(r.items, it)
			if last {
				return errChunkRead
			}
		}
		w.sp.add(region, pg.body, pg.read, plo, phi)
		if s.past == giveUp && s.probe > 0 && len(r.items) > s.probe && r.lo.After(s.from) &&
			float64(len(r.items))*float64(s.end.Sub(s.from)) > float64(s.capN)*float64(s.end.Sub(r.lo)) {
			return errOverflow
		}
		if len(r.items) > s.capN {
			switch s.past {
			case giveUp:
				return errOverflow
			case markPages:
				// Past the hold: what was read is let go, and the rest of
				// the instant is read for its pages' marks alone.
				r.big = &marks
				clear(r.items)
				r.items = nil
				q.Del("include")
			}
		}
		return nil
	})
	var pe pageError
	if errors.Is(err, errOverflow) && w.sp.keep(region) {
		r.spilled = region
	} else {
		w.sp.drop(region)
	}
	switch {
	case errors.Is(err, errOverflow):
		r.over = true
		return r, nil
	case errors.Is(err, errChunkRead):
		err = nil
	case errors.As(err, &pe) && rt == "creditors" && unsupported(pe.err):
		// Only payouts that bounce are read from creditor events.
		p.log.Warn("gocardless did not list creditor events; payouts that bounced are left to verify", "error", pe.err)
		return r, errUnlisted
	case errors.As(err, &pe):
		return r, fmt.Errorf("list gocardless %s events: %w", rt, pe.err)
	case err != nil:
		return r, err
	}
	return r, nil
}

// pages hands fn the pages of q (eachPage). When replay names the
// stretches, kept in sp, that hold every payment event q asks for, they
// are their pages as spilled, newest first, each limited to its stretch.
// When ahead listed q's first pages, they are those pages, then the rest
// of the list, if it stopped before its end.
func (p *Provider) pages(ctx context.Context, q url.Values, replay []known, sp *spill, ahead *prefetch, fn func(*eventsPage) error) error {
	if ahead != nil {
		err := ahead.sp.pages(ahead.r, ahead.from, ahead.end, func(pg *eventsPage) error {
			if err := ctx.Err(); err != nil {
				return err
			}
			return fn(pg)
		})
		if err != nil || ahead.next == "" {
			return err
		}
		q.Set("after", ahead.next)
	}
	if replay == nil {
		return p.eachPage(ctx, q, fn)
	}
	for i := len(replay) - 1; i >= 0; i-- {
		k := replay[i]
		err := sp.pages(k.spill, k.from, k.to, func(pg *eventsPage) error {
			if err := ctx.Err(); err != nil {
				return err
			}
			pg.within = &stretch{from: k.from, end: k.to}
			return fn(pg)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// spilled returns the known stretches, in order, that cover [from, end)
// one after another with their pages spilled; nil when they do not.
func (w *window) spilled(from, end time.Time) []known {
	var out []known
	at := from
	for _, k := range w.known {
		if !k.to.After(at) {
			continue
		}
		if k.instant || k.spill == nil || k.from.After(at) {
			return nil
		}
		out = append(out, k)
		if !k.to.Before(end) {
			return out
		}
		at = k.to
	}
	return nil
}

// keepTotal keeps pm's amounts, read at read, for the window's refunds.
// Past the window's bound the kept totals are let go.
func (w *window) keepTotal(pm Payment, read time.Time) {
	if _, ok := w.totals[pm.ID]; !ok && len(w.totals) >= w.totalsKept {
		clear(w.totals)
	}
	w.totals[pm.ID] = total{amount: pm.Amount, refunded: pm.AmountRefunded, currency: strings.ToLower(pm.Currency), read: read}
}

// counts reports whether t, read at t.read, counts a refund created at at.
func (t total) counts(at time.Time) bool { return at.Before(t.read.Add(-totalsSkew)) }

// refundTotals sets the refunds' changes among items to their payments'
// totals: refund events do not carry the payment's total refunded. A
// payment linked to a payment event of the window, read after the refund
// was created (by totalsSkew), gives it: the window's refunded payments
// mostly have payment events before their refunds. Any other refunded
// payment is read, once (GET /payments/{id}).
func (p *Provider) refundTotals(ctx context.Context, items []item, w *window) error {
	var got map[string]total // the items' payments' totals
	fresh := map[string]bool{}
	for _, it := range items {
		if !it.total {
			continue
		}
		if got == nil {
			got = map[string]total{}
		}
		for _, c := range it.changes {
			pid := c.ProviderID
			if t, ok := got[pid]; fresh[pid] || ok && t.counts(it.ev.At) {
				continue
			}
			if t, ok := w.totals[pid]; ok && t.counts(it.ev.At) {
				got[pid] = t
				continue
			}
			var r struct {
				Payments Payment `json:"payments"`
			}
			read := p.now()
			if err := p.get(ctx, "/payments/"+url.PathEscape(pid), nil, &r); err != nil {
				return fmt.Errorf("get gocardless payment %s: %w", pid, err)
			}
			r.Payments.ID = pid
			w.keepTotal(r.Payments, read)
			got[pid], fresh[pid] = w.totals[pid], true
		}
	}
	for i := range items {
		if !items[i].total {
			continue
		}
		for k, c := range items[i].changes {
			t := got[c.ProviderID]
			// GoCardless raises amount_refunded when a refund is created,
			// not when it is paid: the payment's total is GoCardless's own,
			// read as of now (a current view).
			c.AmountRefunded, c.Amount, c.Currency = t.refunded, t.amount, t.currency
			if t.amount > 0 && t.refunded >= t.amount {
				c.State = models.StateRefunded
			}
			items[i].changes[k] = c
		}
	}
	return nil
}

// rest is where the window's events after a slice ending at end begin:
// end, or the zero time when the slice is the window's last.
func (w *window) rest(end time.Time) time.Time {
	if end.Before(w.to) {
		return end
	}
	return time.Time{}
}

// deliver hands on a slice's (or a chunk's) items, sorted and judged:
// retryFacts's two passes, the slices before it carried in w.last. A
// normal resubmission whose answer lies after the items
// (judgeResubmissions) is judged by the window's failures from later on
// (failuresAfter, with each payment's latest failure before later, last),
// read the first time such a resubmission needs them; a zero later: the
// items end the window.
func (p *Provider) deliver(ctx context.Context, from, end time.Time, items []item, w *window, later time.Time, last map[string]int, emit func([]item) error) error {
	if p.held != nil {
		p.held(from, end, len(items))
	}
	if err := p.refundTotals(ctx, items, w); err != nil {
		return err
	}
	sortItems(items)
	retryFailures(items, w.last)
	if open := judgeResubmissions(items); len(open) > 0 && !later.IsZero() {
		if err := p.judgeLater(ctx, items, open, w, later, last); err != nil {
			return err
		}
	}
	return emit(items)
}

// judgeLater judges the open resubmissions of items by the window's
// failures from `from` on (with each payment's latest failure before it,
// last), unless they were read already.
func (p *Provider) judgeLater(ctx context.Context, items []item, open []factAt, w *window, from time.Time, last map[string]int) error {
	if w.failedAfter == nil {
		later, err := p.failuresAfter(ctx, from, w.to, last)
		if err != nil {
			return err
		}
		w.failedAfter = later
	}
	for _, f := range open {
		c := &items[f.i].changes[f.k]
		if at, ok := w.failedAfter[c.ProviderID]; ok && at.after(position{items[f.i].ev.At, items[f.i].ev.ID}) {
			c.Revert, c.RevertOnlyFrom = "", nil
		}
	}
	return nil
}

// failuresAfter reads the window's payment failures and late failures'
// settlements in [from, to) (GET /events?resource_type=payments&action=…,
// no linked payment: an event's details say whether it is final), maps
// them as the slices do, carrying each payment's latest failure before
// from (last), and returns, for each payment that fails finally in [from,
// to), the position of its latest such failure. It holds only those
// events, a small share of the window. Should GoCardless refuse action
// with resource_type (no source says it takes them together), it lists
// the payment events of [from, to) without action and keeps the two.
func (p *Provider) failuresAfter(ctx context.Context, from, to time.Time, last map[string]int) (map[string]position, error) {
	var items []item
	read := func(action string) error {
		q := url.Values{}
		q.Set("resource_type", "payments")
		if action != "" {
			q.Set("action", action)
		}
		q.Set("created_at[gte]", msFormat(from))
		q.Set("created_at[lt]", msFormat(to))
		q.Set("limit", fmt.Sprint(p.page))
		return p.eachPage(ctx, q, func(pg *eventsPage) error {
			for _, raw := range pg.Events {
				var ev Event
				if err := json.Unmarshal(raw, &ev); err != nil {
					return fmt.Errorf("decode gocardless event: %w", err)
				}
				if at := ev.CreatedAt.UTC(); ev.Action != "failed" && ev.Action != "late_failure_settled" || at.Before(from) || !at.Before(to) {
					continue
				}
				if cs := paymentEventChanges(ev, Payment{}, false, nil); len(cs) > 0 {
					items = append(items, item{ev: reconcile.Event{ID: ev.ID, At: ev.CreatedAt.UTC()}, changes: cs})
				}
			}
			return nil
		})
	}
	err := read("failed")
	if err == nil {
		err = read("late_failure_settled")
	}
	if pe := (pageError{}); errors.As(err, &pe) && unsupported(pe.err) {
		p.log.Warn("gocardless refused action with resource_type; reading the rest of the window's payment events to judge resubmissions",
			"error", pe.err)
		items = nil
		err = read("")
	}
	if pe := (pageError{}); errors.As(err, &pe) {
		return nil, fmt.Errorf("list gocardless payment failures: %w", pe.err)
	} else if err != nil {
		return nil, err
	}
	sortItems(items)
	retryFailures(items, maps.Clone(last))
	out := map[string]position{}
	for _, it := range items {
		for _, c := range it.changes {
			if !c.Unknown && c.ProviderID != "" && c.State == models.StateFailed {
				out[c.ProviderID] = position{it.ev.At, it.ev.ID}
			}
		}
	}
	return out, nil
}
