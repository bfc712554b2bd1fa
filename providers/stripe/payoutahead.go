package stripe

import (
	"context"
	"slices"
	"sync"

	stripego "github.com/stripe/stripe-go/v76"

	"github.com/reconciler/reconciler/internal/tmpfile"
)

// A payout's balance transactions listed ahead of the events stream.
//
// A payout event (payout.paid and the three after it, mapping.go) settles
// the charges its balance transactions name: one list of their own
// (GET /v1/balance_transactions?payout=po_…), read through its cursor
// where the payout's event falls in the stream. While Stripe answers
// slower than the pacing allows (latencyBound), the read-aheads (ahead.go)
// list the stretches above the stream, and the stream, reaching a payout's
// event, listed its balance transactions one page after another while the
// read-aheads, their stretches listed, waited: at 300 ms an answer, 48 of
// a week's 252 requests, seconds of a run with one or two requests in
// flight (docs/benchmarks.md, session 18). So once the read-aheads start,
// the window's payout events are listed from where the stream is
// (discover: one request, the four types, newest first, about two a day),
// and their balance transactions are listed ahead, oldest payout first,
// aheadDepthMin at a time, each holding its place until the mapping took
// it, kept decoded in memory (btKeep a stream: a page of Stripe's, 100
// transactions with their charges, is about 250 kB as sent and 25 kB
// decoded, and the read-aheads' bound on disk is the events'). When the
// stream hands the event on, the mapping reads the pages
// listed (btAheads.take, btAhead.each), waiting for those still coming,
// and lists the rest itself from the last one's id (starting_after) if the
// listing stopped short (the bound) or failed (the error comes again, from
// its own request, as it would have). The list is Stripe's one order of
// the payout's transactions either way, so the changes, and the pages they
// are handed on in, are the same; the list is read seconds earlier. A
// listing not started when the stream reaches its event is taken back
// (the mapping lists it itself, at once). Each event has a listing of its
// own: payout.paid and payout.reconciliation_completed list the same
// payout twice, as they did.
type btAheads struct {
	p       *Provider
	ctx     context.Context // ended by close
	cancel  context.CancelFunc
	wg      sync.WaitGroup // discover's goroutine
	account string
	slots   chan struct{}   // a slot per listing, held until the mapping took it
	share   *tmpfile.Budget // what the listings may keep (btKeep)

	mu         sync.Mutex
	byID       map[string]*btAhead // by the payout event's id
	discovered bool
	closed     bool
}

// btAhead is one payout event's listing.
type btAhead struct {
	payout string
	cancel context.CancelFunc
	done   chan struct{} // closed when the listing ended, or never started

	share *tmpfile.Budget // the stream's bound on what its listings keep
	slots chan struct{}
	ctx   context.Context // the listing's; cancel ends it

	mu      sync.Mutex
	changed *sync.Cond  // a page kept, or the listing ended
	pages   [][]*leanBT // as listed, decoded
	last    string      // the id of the newest-listed transaction kept
	bytes   int64       // taken from share
	slot    bool        // holds a slot
	started bool        // the listing is the mapping's to wait for
	taken   bool        // the mapping took it back before it started
	ended   bool
	all     bool // every page was kept
}

// btAheadTypes are the payout events whose balance transactions the
// mapping lists (payoutEventEach).
var btAheadTypes = []string{"payout.paid", "payout.reconciliation_completed", "payout.failed", "payout.canceled"}

// btKeep bounds the memory a stream's payouts listed ahead keep: about
// 7,000 balance transactions in their decoded form (btSize each), against
// a page's body of Stripe's 100 transactions with their charges of about
// 250 kB, which the events' bound on disk could not spare.
const btKeep = 2 << 20

// btSize is what a decoded balance transaction is counted as keeping: the
// struct and its strings.
func btSize(bt *leanBT) int64 {
	return 160 + int64(len(bt.ID)+len(bt.Type)+len(bt.Status)+len(bt.Source.Object)+len(bt.Source.ID)+len(bt.Source.Currency)+len(bt.Source.PaymentIntent))
}

func (p *Provider) newBTAheads(ctx context.Context, account string) *btAheads {
	ctx, cancel := context.WithCancel(ctx)
	return &btAheads{p: p, ctx: ctx, cancel: cancel, account: account, slots: make(chan struct{}, aheadDepthMin),
		share: tmpfile.NewBudget(p.btKeep), byID: map[string]*btAhead{}}
}

// discover lists, once, the payout events of [lo, until) and their
// balance transactions ahead, oldest payout first, in a goroutine.
func (s *btAheads) discover(lo, until int64) {
	if s == nil {
		return
	}
	s.mu.Lock()
	if s.discovered || s.closed {
		s.mu.Unlock()
		return
	}
	s.discovered = true
	s.wg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.wg.Done()
		typ := make([]*string, len(btAheadTypes))
		for i := range btAheadTypes {
			typ[i] = &btAheadTypes[i]
		}
		it := s.p.eventIter(&stripego.EventListParams{
			ListParams:   listParams(s.ctx, s.account, s.p.page),
			CreatedRange: &stripego.RangeQueryParams{GreaterThanOrEqual: lo, LesserThan: until},
			Types:        typ,
		}, false)
		var evs []*leanEvent // newest first
		for it.Next() {
			evs = append(evs, it.Current().(*leanEvent))
		}
		if err := it.Err(); err != nil {
			s.p.log.Debug("stripe payouts of the window not listed ahead; the mapping lists each itself", "error", translate(err))
			return
		}
		var queued []*btAhead // oldest first
		for i := len(evs) - 1; i >= 0; i-- {
			if a := s.add(evs[i]); a != nil {
				queued = append(queued, a)
			}
		}
		for _, a := range queued {
			if !s.start(a) {
				return
			}
		}
	}()
}

// start waits for a slot and starts a's listing, unless the mapping took
// it back meanwhile; false when the run's context ended.
func (s *btAheads) start(a *btAhead) bool {
	select {
	case s.slots <- struct{}{}:
	case <-s.ctx.Done():
		return false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.taken {
		<-s.slots
		return true
	}
	a.slot, a.started = true, true
	go s.list(a)
	return true
}

// add registers the listing of ev's payout, when ev is a payout event
// whose mapping lists its balance transactions; nil when not.
func (s *btAheads) add(ev *leanEvent) *btAhead {
	if !slices.Contains(btAheadTypes, ev.Type) || !ev.o.present || ev.o.want(objPayout) != nil || ev.o.po.Manual || ev.o.po.ID == "" {
		return nil // the mapping reports it, or lists nothing
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.byID[ev.ID] != nil {
		return nil
	}
	ctx, cancel := context.WithCancel(s.ctx)
	a := &btAhead{payout: ev.o.po.ID, ctx: ctx, cancel: cancel, done: make(chan struct{}), share: s.share, slots: s.slots}
	a.changed = sync.NewCond(&a.mu)
	s.byID[ev.ID] = a
	return a
}

// list is a's goroutine, started holding a slot: the payout's pages, each
// kept, decoded, while the bound allows.
func (s *btAheads) list(a *btAhead) {
	defer func() {
		a.mu.Lock()
		a.ended = true
		a.mu.Unlock()
		a.changed.Broadcast()
		close(a.done)
	}()
	params := &stripego.BalanceTransactionListParams{ListParams: listParams(a.ctx, s.account, 100), Payout: stripego.String(a.payout)}
	params.AddExpand("data.source")
	var page []*leanBT
	var size int64 // the page's
	it := s.p.btIter(params)
	for it.Next() {
		bt := it.Current().(*leanBT)
		page = append(page, bt)
		size += btSize(bt)
		if !lastBT(it, bt) {
			continue
		}
		if !a.share.Take(size) {
			return // not kept: the mapping lists it, from the last page kept
		}
		a.mu.Lock()
		a.pages = append(a.pages, page)
		a.last = bt.ID
		a.bytes += size
		a.mu.Unlock()
		a.changed.Broadcast()
		if it.Meta().HasMore && a.share.Left() < size {
			return // the next page would not fit: the mapping lists from here
		}
		page, size = nil, 0
	}
	if it.Err() == nil {
		a.mu.Lock()
		a.all = true
		a.mu.Unlock()
	}
	// An error ends the listing: the mapping lists from the last page
	// kept, and meets the error itself.
}

// lastBT reports whether bt is the last of the page the iterator read it
// in.
func lastBT(it *stripego.Iter, bt *leanBT) bool {
	l, ok := it.List().(*leanBTList)
	return ok && isLast(l.Data, bt)
}

// take returns the listing of the payout event eventID, if one was
// started, and forgets it: nil when there is none, or when it had not
// started (taken back: the caller lists the payout itself).
func (s *btAheads) take(eventID string) *btAhead {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	a := s.byID[eventID]
	delete(s.byID, eventID)
	s.mu.Unlock()
	if a == nil {
		return nil
	}
	if !a.takeBack() {
		return a
	}
	a.close()
	return nil
}

// takeBack marks a taken back if its listing has not started, and
// reports whether it was.
func (a *btAhead) takeBack() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.started {
		a.taken = true
	}
	return a.taken
}

// each hands fn, in the list's order, the balance transactions of the
// pages kept, waiting for each as it is listed, and returns the id of the
// last one (where the caller's own listing goes on) and whether that was
// the whole list.
func (a *btAhead) each(fn func(*leanBT) error) (last string, all bool, err error) {
	for i := 0; ; i++ {
		a.mu.Lock()
		for i >= len(a.pages) && !a.ended {
			a.changed.Wait()
		}
		if i >= len(a.pages) {
			last, all = a.last, a.all
			a.mu.Unlock()
			return last, all, nil
		}
		pg := a.pages[i]
		a.pages[i] = nil // handed on: the collector may have it
		a.mu.Unlock()
		for _, bt := range pg {
			if err := fn(bt); err != nil {
				return "", false, err
			}
		}
	}
}

// close stops a's listing (started, or taken back), waits for it, and
// gives its slot and what it kept back.
func (a *btAhead) close() {
	a.cancel()
	a.mu.Lock()
	started := a.started
	a.mu.Unlock()
	if started {
		<-a.done
	}
	a.mu.Lock()
	a.share.Give(a.bytes)
	a.bytes, a.pages = 0, nil
	if a.slot {
		a.slot = false
		<-a.slots
	}
	a.mu.Unlock()
}

// close ends the discovery and every listing still held (their events
// were not handed on: the stream ended, or failed), and waits for them.
func (s *btAheads) close() {
	if s == nil {
		return
	}
	s.mu.Lock()
	s.closed = true
	held := s.byID
	s.byID = nil
	s.mu.Unlock()
	s.cancel()
	for _, a := range held {
		a.takeBack()
		a.close()
	}
	s.wg.Wait()
}
