package stripe

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"

	stripego "github.com/stripe/stripe-go/v76"
	"github.com/valyala/fastjson"

	"github.com/reconciler/reconciler/internal/tmpfile"
)

// A read-ahead lists a stretch of the window ahead of the events stream,
// at the same time, when Stripe answers slower than the pacing allows.
//
// The events stream (ListChanges) is one list read through its cursor:
// each page's request needs the cursor the page before answered with, so
// it makes at most one request per answer's latency, whatever the pacing
// allows. At 100 ms an answer and 20 requests/s, a month's 252 requests
// took 26 s where the pacing allows 12.6 (docs/benchmarks.md, "A provider
// that answers late"). A read-ahead is another stream, on a list that does
// not depend on the first: the events of a stretch [lo, hi) of the window
// (created[gte], created[lt], newest first, no cursor to start from),
// their JSON kept in an unlinked temp file. Up to aheadDepth list the
// stretches above the stream one after another (stream). Once the stream
// reaches an event created after the oldest second the first one listed
// (every event after that second, up to hi, was listed), that read-ahead
// stops; the rest of the stream's second and everything after it are
// handed on from the file, oldest first, then each next stretch listed
// whole, and the stream goes on from the newest (ending_before). Both
// lists are Stripe's one order of the window's events ("in reverse
// chronological order"; docs/providers/stripe.md, sections 7 and 23),
// read from two ends; where they meet, the stream's event must be one the
// read-ahead listed, in the same order as the rest of the stream's page,
// or the read-ahead is let go and the stream reads on by itself (a
// warning). A second's events are handed on once each, whatever order each
// list gives them (second).
type ahead struct {
	// The stretch listed: created[gte], created[lt]. lo is raised under mu
	// when the stretch is split (split), hi never changes.
	lo, hi int64
	// top: hi is the window's end, so the newest event listed is the
	// window's newest.
	top    bool
	cancel context.CancelFunc
	done   chan struct{} // closed when the listing ended

	f   *os.File // the events' JSON, one after another
	off int64

	mu  sync.Mutex
	evs []aheadEvent // as listed, newest first
	pos map[string]int
	// all: listed to lo (every event of [lo, hi)); err: the listing
	// failed (the stream reads on by itself).
	all    bool
	err    error
	bytes  int64           // taken from budget
	budget *tmpfile.Budget // the read-aheads' bound
}

// aheadEvent is one event a read-ahead listed: where its JSON lies.
type aheadEvent struct {
	id      string
	created int64
	off     int64
	n       int
}

// aheadEvents is how many events the stretch a read-ahead lists is planned
// to hold, at the density last seen; it lists twice as many at most (the
// stream lists the rest).
const aheadEvents = 2000

// AheadMax bounds the disk every read-ahead of the process holds together;
// past it a read-ahead lists no further (the stream reads the rest). With
// the GoCardless provider's spills (48 MiB) it stays within the 64 MiB
// /tmp of the deployment's manifests.
const AheadMax = 12 << 20

// aheadBudget is what the process's read-aheads may still write.
var aheadBudget = tmpfile.NewBudget(AheadMax)

// aheadFloor is the latency below which no read-ahead starts: an answer on
// loopback, where the engine, not the stream, is what a run waits for.
const aheadFloor = 20 * time.Millisecond

// latencyBound reports whether the events stream waits for Stripe's
// answers longer than the pacing between two requests: one stream cannot
// use the budget, a second can.
func (p *Provider) latencyBound() bool {
	if p.aheadAlways {
		return true
	}
	iv := p.tr.Interval()
	return iv > 0 && p.tr.Latency() > max(iv*3/2, aheadFloor)
}

// startAhead lists [lo, hi) of the account's window newest first into a
// temp file, in a goroutine, until it holds want events (at a page's end);
// an error when no file can be had.
// gate, when set, bounds the read-aheads listing at once: a read-ahead
// queued beyond them waits for one to end before its first request, and
// makes none once one failed.
func (p *Provider) startAhead(ctx context.Context, account string, lo, hi int64, top bool, want int, payouts *btAheads, gate *aheadGate) (*ahead, error) {
	f, err := tmpfile.Unlinked(p.aheadDir, "reconciler-stripe-ahead-*")
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	a := &ahead{lo: lo, hi: hi, top: top, cancel: cancel, done: make(chan struct{}), f: f, pos: map[string]int{}, budget: p.aheadBudget}
	go func() {
		defer close(a.done)
		if gate != nil {
			select {
			case gate.slots <- struct{}{}:
				defer func() { <-gate.slots }()
			case <-ctx.Done():
				return // stopped before it listed: all is false, nothing kept
			}
			if gate.failed() != nil {
				a.mu.Lock()
				a.err = errAheadGaveUp
				a.mu.Unlock()
				return
			}
		}
		params := &stripego.EventListParams{
			ListParams:   listParams(ctx, account, p.page),
			CreatedRange: &stripego.RangeQueryParams{GreaterThanOrEqual: lo, LesserThan: hi},
			Types:        types(),
		}
		it := p.eventIter(params, true)
		for it.Next() {
			ev := it.Current().(*leanEvent)
			n := int64(len(ev.raw))
			if !a.budget.Take(n) {
				return // past the bound: listed as far as it holds
			}
			if _, err := a.f.Write(ev.raw); err != nil {
				a.budget.Give(n)
				return
			}
			a.mu.Lock()
			if ev.Created < a.lo {
				// Split (split): the stretch below lo is another's. Every
				// event of [lo, hi) was listed.
				a.all = true
				a.mu.Unlock()
				a.budget.Give(n)
				return
			}
			a.bytes += n
			a.pos[ev.ID] = len(a.evs)
			a.evs = append(a.evs, aheadEvent{id: ev.ID, created: ev.Created, off: a.off, n: len(ev.raw)})
			a.mu.Unlock()
			a.off += n
			if len(a.evs) >= want && lastOfPage(it, ev) && it.Meta().HasMore {
				return // as many as it may hold: the stream lists the rest
			}
		}
		a.mu.Lock()
		defer a.mu.Unlock()
		switch err := it.Err(); {
		case err == nil:
			a.all = true
		case ctx.Err() == nil:
			a.err = err
			if gate != nil {
				gate.fail(err)
			}
		}
	}()
	return a, nil
}

// aheadGate is what a stream's read-aheads share: a slot each while it
// lists, and the first one's error.
type aheadGate struct {
	slots chan struct{}
	mu    sync.Mutex
	err   error
}

func (g *aheadGate) fail(err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.err == nil {
		g.err = err
	}
}

func (g *aheadGate) failed() error {
	if g == nil {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.err
}

// errAheadGaveUp is the error of a read-ahead queued when another failed:
// it made no request.
var errAheadGaveUp = errors.New("another read-ahead failed")

// reached reports whether the stream's next event ev lies where the
// read-ahead listed every event (meet), or past the whole stretch (gone).
func (a *ahead) reached(ev *leanEvent) (meet, gone bool) {
	if ev.Created >= a.hi {
		return false, true
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case a.err != nil:
		return false, true // the listing failed: the stream reads on by itself
	case a.all:
		return ev.Created >= a.lo && len(a.evs) > 0, false
	case len(a.evs) > 0:
		return ev.Created > a.evs[len(a.evs)-1].created, false
	}
	return false, false
}

// splitAt is what splitting the stretch would hand another read-ahead: the
// events its unlisted rest [lo, oldest listed) holds at the density listed
// so far, and the second that halves that rest; 0 when it cannot be split
// (listed whole, failed, not listing yet, or a rest of a second or less).
func (a *ahead) splitAt() (rest float64, mid int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.all || a.err != nil || len(a.evs) < 2 {
		return 0, 0
	}
	newest, oldest := a.evs[0].created, a.evs[len(a.evs)-1].created
	if oldest-a.lo < 2 {
		return 0, 0
	}
	density := float64(len(a.evs)) / float64(newest-oldest+1)
	return float64(oldest-a.lo) * density, a.lo + (oldest-a.lo)/2
}

// raise ends the stretch's listing at mid, above its lo: the listing stops
// at the first event older than mid, every event of [mid, hi) listed.
// It returns the old lo, and false when the listing already passed mid or
// ended.
func (a *ahead) raise(mid int64) (lo int64, ok bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.all || a.err != nil || len(a.evs) == 0 || a.evs[len(a.evs)-1].created < mid || mid <= a.lo {
		return 0, false
	}
	lo, a.lo = a.lo, mid
	return lo, true
}

// stop ends the listing and waits for it.
func (a *ahead) stop() {
	a.cancel()
	<-a.done
}

// close stops the listing and lets its file go.
func (a *ahead) close() {
	if a == nil {
		return
	}
	a.stop()
	a.budget.Give(a.bytes)
	a.bytes = 0
	_ = a.f.Close()
}

// from returns, once the listing stopped, the index of the oldest event
// listed in ev's second or after: the stream's event ev must be among
// those listed, and the stream's page after it (rest, oldest first) what
// was listed after it; -1 when not (the two lists disagree, or the
// listing failed). Every event from ev's second on was listed, and the
// stream handed on every event before that second.
func (a *ahead) from(ev *leanEvent, rest []*leanEvent) int {
	if a.err != nil {
		return -1
	}
	k, ok := a.pos[ev.ID]
	if !ok {
		return -1
	}
	for i, r := range rest {
		j := k - 1 - i
		if j < 0 {
			break
		}
		if a.evs[j].id != r.ID {
			return -1
		}
	}
	for k+1 < len(a.evs) && a.evs[k+1].created >= ev.Created {
		k++
	}
	return k
}

// each hands fn the events listed from index k to the newest, oldest
// first, decoded from the file as from a page, but those handed on
// already (done: of the second the stream was in).
func (a *ahead) each(k int, done func(id string, created int64) bool, fn func(*leanEvent) error) error {
	var parser fastjson.Parser
	for j := k; j >= 0; j-- {
		e := a.evs[j]
		if done(e.id, e.created) {
			continue
		}
		raw := make([]byte, e.n)
		if _, err := a.f.ReadAt(raw, e.off); err != nil {
			return fmt.Errorf("stripe read-ahead: read back event %s: %w", e.id, err)
		}
		ev := new(leanEvent)
		if _, err := decodeEvent(&parser, raw, ev); err != nil {
			return fmt.Errorf("stripe read-ahead: decode event %s: %w", e.id, err)
		}
		if ev.ID != e.id {
			return errors.New("stripe read-ahead: an event read back is not the one listed")
		}
		ev.raw = raw
		if err := fn(ev); err != nil {
			return err
		}
	}
	return nil
}

// second is the ids handed on in the latest second the stream reached:
// where a read-ahead takes over in that second, it hands on the rest of
// the second's events, whatever order each list gives a second's events.
// The ids are a slice, made a set only when asked (a read-ahead met): a
// map written for every event was 4-5 % of a listing's CPU.
type second struct {
	at  int64
	ids []string
	set map[string]bool
	// ahead: some of the second's events came from a read-ahead, so the
	// stream, going on from the newest, may list them again.
	ahead bool
}

func (s *second) add(id string, at int64, ahead bool) {
	if at != s.at {
		s.at, s.ids, s.set, s.ahead = at, s.ids[:0], nil, false
	}
	s.ids = append(s.ids, id)
	if s.set != nil {
		s.set[id] = true
	}
	s.ahead = s.ahead || ahead
}

func (s *second) has(id string, at int64) bool {
	if at != s.at {
		return false
	}
	if s.set == nil {
		s.set = make(map[string]bool, len(s.ids))
		for _, x := range s.ids {
			s.set[x] = true
		}
	}
	return s.set[id]
}

// density is the events a second of the stretch listed, at least one
// event in the stretch's span.
func (a *ahead) density() float64 {
	if len(a.evs) < 2 {
		return 0
	}
	span := a.evs[0].created - a.evs[len(a.evs)-1].created + 1
	return float64(len(a.evs)) / float64(span)
}

// aheadSpan is the seconds that hold events at density (events a
// second), at least one; the whole rest of the window when density is
// unknown.
func aheadSpan(density float64, events int) int64 {
	if density <= 0 {
		return 1 << 40
	}
	return max(int64(float64(events)/density), 1)
}

// stream reads the window's events oldest first after anchor (params'
// filters), handing each to add. While Stripe answers slower than the
// pacing allows (latencyBound), up to aheadDepth read-aheads list the
// stretches above the stream, one after another, each of about n events
// at the density last seen: the stream meets the first, hands on the rest
// of it, then each next one listed whole, and goes on from the newest
// event handed on (or ends, past the window's newest).
func (p *Provider) stream(ctx context.Context, account string, params *stripego.EventListParams, anchor string, since, until int64, payouts *btAheads, add func(*leanEvent) error) error {
	var queue []*ahead // the stretches read ahead, in order, each from where the last ends
	defer func() {
		for _, a := range queue {
			a.close()
		}
	}()
	n := p.aheadN
	if n <= 0 {
		n = aheadEvents
	}
	var density float64 // the window's events a second, as last seen
	var sec second      // the events handed on in the latest second
	// The read-aheads listing at once (aheadDepth, at the latency when the
	// first starts); as many more may be queued while the bound on disk
	// holds them, so that the stream, waiting for a payout's balance
	// transactions or the engine, does not leave the pacing unused
	// (evBytes, evs: the JSON handed on, to size a stretch).
	var depth int
	var gate *aheadGate
	var evBytes, evs int64
	mean := func() int64 { return max(evBytes/evs, 1) } // evs > 0
	failed := false                                     // a read-ahead failed: none is started again
	hand := func(ev *leanEvent) error {
		sec.add(ev.ID, ev.Created, false)
		evBytes, evs = evBytes+int64(len(ev.raw)), evs+1
		return add(ev)
	}
	handAhead := func(ev *leanEvent) error {
		sec.add(ev.ID, ev.Created, true)
		evBytes, evs = evBytes+int64(len(ev.raw)), evs+1
		return add(ev)
	}
	// stretch is the events a read-ahead is planned to hold: n, or fewer,
	// no more pages than answers come in aheadTime, and few enough that
	// depth of them fit the bound on disk at the mean size handed on (one
	// that lists more than planned is cut short at the bound). Stripe's
	// events are 1.6-3.3 kB: at n, three stretches would outgrow the
	// bound, their rest read by the stream one page at a time (session
	// 18).
	stretch := func() int {
		m := n
		if l := p.tr.Latency(); l > 0 {
			m = min(m, int(aheadTime/l)*int(p.page))
		}
		if evs > 0 {
			m = min(m, int(p.aheadBudget.Max()/(int64(depth)*mean())))
		}
		return max(m, int(p.page))
	}
	// room reports whether another read-ahead may be queued: fewer than
	// depth are, or the bound holds what each queued may list.
	room := func() bool {
		if len(queue) < depth {
			return true
		}
		if len(queue) >= 2*depth || evs == 0 {
			return false
		}
		return p.aheadBudget.Left() >= int64(len(queue)+1)*int64(2*stretch())*mean()
	}
	pop := func() {
		a := queue[0]
		a.close()
		if a.err != nil && !failed {
			err := a.err
			if first := gate.failed(); first != nil {
				err = first // a read-ahead queued behind the one that failed
			}
			p.log.Warn("stripe read-ahead failed; the stream reads the rest of the window itself",
				"from", a.lo, "until", a.hi, "error", translate(err))
			failed = true // no further read-ahead: each would fail alike
		}
		queue = queue[1:]
	}
	// topUp starts read-aheads, the first from lo, each from where the
	// last ends, until aheadDepth list or one reaches the window's end.
	topUp := func(lo int64) {
		if gate == nil {
			depth = p.aheadDepth()
			gate = &aheadGate{slots: make(chan struct{}, depth)}
		}
		if !failed {
			// The payouts' balance transactions are listed ahead too
			// (payoutahead.go).
			payouts.discover(max(lo, since), until) // once
		}
		for !failed && room() {
			if len(queue) > 0 {
				last := queue[len(queue)-1]
				if last.top {
					return
				}
				lo = last.hi
			}
			a, err := p.nextAhead(ctx, account, max(lo, since), until, density, stretch(), max(depth-len(queue), 1), payouts, gate)
			if err != nil {
				p.log.Warn("stripe read-ahead has no temp file; the stream reads the window by itself", "error", err)
				failed = true
			}
			if a == nil {
				return
			}
			queue = append(queue, a)
		}
	}
	// split lists the older half of the unlisted rest of the stretch that
	// has most left, in a read-ahead of its own put before it in the queue,
	// when a slot is free and the window's end is queued (no stretch is
	// left to start). A stretch is a list read a page an answer: without
	// it the last stretches, planned at a density the window's end need
	// not have, ended one after another, the last alone, at one request in
	// flight (session 19: at 300 ms an answer, the last stretch listed its
	// last 1.4 s alone).
	split := func() {
		if failed || gate == nil || len(queue) == 0 || !queue[len(queue)-1].top || len(gate.slots) >= cap(gate.slots) {
			return
		}
		best, most, at := -1, float64(2*p.page), int64(0)
		for i, a := range queue {
			if rest, mid := a.splitAt(); rest >= most {
				best, most, at = i, rest, mid
			}
		}
		if best < 0 {
			return
		}
		lo, ok := queue[best].raise(at)
		if !ok {
			return
		}
		b, err := p.startAhead(ctx, account, lo, at, false, 2*stretch(), payouts, gate)
		if err != nil {
			// The stretch now lists [at, hi); the stream lists [lo, at) itself.
			p.log.Warn("stripe read-ahead has no temp file; the stream reads the window by itself", "error", err)
			failed = true
			return
		}
		queue = slices.Insert(queue, best, b)
		p.aheadSplit.Add(1)
		p.log.Debug("stripe read-ahead split", "from", lo, "at", at, "until", queue[best+1].hi, "events_left", int(most))
	}
	// waitNext waits for queue[0]'s listing to end, splitting stretches
	// while it waits (split): queue[0] may be one of them.
	waitNext := func() *ahead {
		var tick *time.Ticker
		defer func() {
			if tick != nil {
				tick.Stop()
			}
		}()
		for {
			next := queue[0]
			select {
			case <-next.done:
				return next
			default:
			}
			split()
			if queue[0] != next {
				continue
			}
			if tick == nil {
				tick = time.NewTicker(max(p.tr.Latency()/2, splitEvery))
			}
			select {
			case <-next.done:
				return next
			case <-tick.C:
			}
		}
	}
	// deliver hands on queue[0]'s events from index k, then those of each
	// next stretch listed whole, and returns the newest handed on, and
	// whether it was the window's newest.
	deliver := func(k int) (newest aheadEvent, top bool, err error) {
		for {
			a := queue[0]
			if err := a.each(k, sec.has, handAhead); err != nil {
				return newest, false, err
			}
			p.aheadTaken.Add(1)
			if len(a.evs) > 0 {
				newest = a.evs[0]
				density = cmpOr(a.density(), density)
			}
			top = a.top
			p.log.Debug("stripe events read ahead delivered", "events", k+1, "until", a.hi)
			pop()
			if top || len(queue) == 0 {
				return newest, top, nil
			}
			// The stretches after the next listed while it ends: the
			// read-aheads in flight stay aheadDepth.
			topUp(0)
			next := waitNext()
			if !next.all || next.err != nil || len(next.evs) == 0 {
				return newest, false, nil // the stream reads on to it
			}
			k = len(next.evs) - 1
		}
	}
outer:
	for {
		params.EndingBefore = stripego.String(anchor)
		it := p.eventIter(params, true) // each event is mapped before the next page
		seen, firstAt := 0, int64(0)    // the stream's events since it went on
		for it.Next() {
			ev := it.Current().(*leanEvent)
			if sec.ahead && sec.has(ev.ID, ev.Created) {
				// Handed on from a read-ahead: the stream went on from
				// its newest, whose second a list may order otherwise.
				continue
			}
			for len(queue) > 0 {
				meet, gone := queue[0].reached(ev)
				if gone {
					pop() // the stream listed the whole stretch itself
					continue
				}
				if !meet {
					break
				}
				queue[0].stop()
				k := queue[0].from(ev, restOfPage(it, ev))
				if k < 0 {
					if queue[0].err == nil {
						p.log.Warn("stripe read-ahead disagrees with the events stream; the stream reads on by itself",
							"event_id", ev.ID, "from", queue[0].lo, "until", queue[0].hi)
					}
					pop()
					continue
				}
				newest, top, err := deliver(k)
				if err != nil {
					return err
				}
				if top {
					return nil // the read-ahead listed the window's newest event
				}
				anchor = newest.id
				topUp(newest.created)
				continue outer
			}
			if err := hand(ev); err != nil {
				return err
			}
			if seen++; seen == 1 {
				firstAt = ev.Created
			}
			if len(queue) == 0 && !failed && seen%int(p.page) == 0 && p.latencyBound() {
				density = float64(seen) / float64(ev.Created-firstAt+1)
				topUp(ev.Created)
				seen, firstAt = 0, 0
			}
		}
		if err := it.Err(); err != nil {
			return fmt.Errorf("list stripe events: %w", translate(err))
		}
		return nil
	}
}

// aheadDepth is how many read-aheads list at once at most: with the stream,
// enough requests in flight to keep the pacing's rate at Stripe's latency
// (one per pacing interval an answer takes), at least aheadDepthMin and
// at most aheadDepthMax.
func (p *Provider) aheadDepth() int {
	iv, l := p.tr.Interval(), p.tr.Latency()
	if iv <= 0 {
		return aheadDepthMin
	}
	return min(max(int((l+iv-1)/iv), aheadDepthMin), aheadDepthMax)
}

// aheadTime is about how long a read-ahead's stretch takes to list, one
// page an answer: a stretch is planned to hold no more pages than answers
// come in that time, so that the stream, which waits for each next stretch
// listed whole, waits for a short list (session 18: at 300 ms an answer,
// stretches of 2,000 events took the month 1.6 s longer than of 1,000).
const aheadTime = 3 * time.Second

// splitEvery is how often at most a stream waiting for a stretch looks for
// one to split (split), half an answer's time at least.
const splitEvery = 10 * time.Millisecond

// aheadDepthMin and aheadDepthMax bound aheadDepth: three at 100 ms an
// answer and 20 requests/s (five did worse there: docs/benchmarks.md,
// session 14), six at 300 ms.
const (
	aheadDepthMin = 3
	aheadDepthMax = 8
)

// nextAhead starts the read-ahead of the stretch from lo: up to where
// density puts n events, at most the window's end; nil when the rest of
// the window is too short to be worth it. Once the rest of the window
// holds fewer than the free read-aheads' stretches of n events (free: the
// read-aheads that may still start), they share it (two pages each at
// least): a read-ahead is a list read one page at a time, and the last
// stretches, listed at once, then end together rather than the last
// alone, one request in flight, at the run's end.
func (p *Provider) nextAhead(ctx context.Context, account string, lo, until int64, density float64, n, free int, payouts *btAheads, gate *aheadGate) (*ahead, error) {
	rest := float64(until-lo) * density
	if lo >= until || density > 0 && rest < float64(2*p.page) {
		return nil, nil
	}
	if density > 0 && rest < float64(n*free) {
		n = max(int(rest)/free+1, 2*int(p.page))
	}
	hi, top := lo+aheadSpan(density, n), false
	if hi >= until {
		hi, top = until, true
	}
	return p.startAhead(ctx, account, lo, hi, top, 2*n, payouts, gate)
}

// lastOfPage reports whether ev is the last event of the page the
// iterator read it in (a read-ahead lists newest first: the oldest).
func lastOfPage(it *stripego.Iter, ev *leanEvent) bool {
	l, ok := it.List().(*leanEventList)
	return ok && isLast(l.events, ev)
}

// isLast reports whether x is the last of items.
func isLast[T comparable](items []T, x T) bool {
	return len(items) > 0 && items[len(items)-1] == x
}

// restOfPage is what the stream's page holds after ev, oldest first.
func restOfPage(it *stripego.Iter, ev *leanEvent) []*leanEvent {
	l, ok := it.List().(*leanEventList)
	if !ok {
		return nil
	}
	for j, e := range l.events {
		if e == ev {
			out := make([]*leanEvent, 0, j)
			for i := j - 1; i >= 0; i-- {
				out = append(out, l.events[i])
			}
			return out
		}
	}
	return nil
}

func cmpOr(a, b float64) float64 {
	if a > 0 {
		return a
	}
	return b
}
