package reconcile

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/store"
)

// batch is one transaction's worth of a run: the payments of whole pages,
// planned, applied and recorded together.
type batch struct {
	page  Page
	check Check
	byID  map[string][]Change
	order []string // payment ids, sorted: a fixed lock order

	// plan
	rows map[string]Local    // the rows as loaded
	prev map[string]*carried // what earlier batches carried

	// By position in order, for the loops over it (issue 16: a rerun's
	// batch looked each payment up in the run's seen set five times, and
	// hashed its id as often): its id's hash, whether the run had seen it
	// before this batch and the bits it had then (e.seen changes only in
	// committed), and the row as the run first saw it.
	hashes  []uint64
	wasSeen []bool
	seenAt  []uint16
	befores []Local

	// apply
	out []outcome        // by position in order
	sim map[string]Local // the dry applier's rows after the batch

	// record
	next   []*carried // the carried state after the batch, by position in order (nil: none)
	counts counts

	sizes   map[string]int // newBatch's count of each payment's facts
	planBuf []Plan         // each payment's plan, by position in order
}

// spare is what a committed batch leaves the next: its maps, cleared but
// keeping their tables, and its plans' array. A month's batches made them
// afresh, a few thousand entries each: the maps and the plans were a fifth
// of a rerun's allocations (issue 16). Nothing holds them once the batch
// committed: the appliers copy what they keep (the dry applier's carried
// values are pointers of their own, not the maps), and a Plan is copied
// wherever it outlives its batch.
func (b *batch) spare() *batch {
	clear(b.byID)
	clear(b.rows)
	clear(b.out)  // drops what the old outcomes point to
	clear(b.next) // drops what the old carried states point to
	clear(b.sizes)
	clear(b.planBuf) // drops what the old plans point to
	clear(b.befores) // drops what the old rows point to
	return &batch{byID: b.byID, rows: b.rows, out: b.out[:0], next: b.next[:0],
		sizes: b.sizes, planBuf: b.planBuf[:0], order: b.order[:0],
		hashes: b.hashes[:0], wasSeen: b.wasSeen[:0], seenAt: b.seenAt[:0], befores: b.befores[:0]}
}

// sized returns s resliced to n elements, grown when its capacity is less:
// a batch's per-position slices reuse the last batch's arrays (spare).
func sized[T any](s []T, n int) []T { return slices.Grow(s[:0], n)[:n] }

// orMake returns m, or a new map for n entries when m is nil.
func orMake[V any](m map[string]V, n int) map[string]V {
	if m == nil {
		return make(map[string]V, n)
	}
	return m
}

// newBatch groups a page's changes by payment. force names payments to
// decide again with no new facts (the window's end).
// spare, when not nil, is a committed batch's (batch.spare): its maps are
// filled instead of new ones.
func newBatch(p Page, w Check, force []string, spare *batch) *batch {
	b := spare
	if b == nil {
		b = &batch{}
	}
	b.page, b.check = p, w
	// Each payment's facts, in the page's order, are a slice of one array
	// (a slice of its own per payment grew by appends: a tenth of the
	// job's allocations). The array itself is never reused: what a run
	// carries keeps slices of it.
	b.sizes = orMake(b.sizes, len(p.Changes))
	n := b.sizes
	for _, c := range p.Changes {
		if c.ProviderID != "" {
			n[c.ProviderID]++
		}
	}
	b.byID = orMake(b.byID, len(n)+len(force))
	all := make([]Change, 0, len(p.Changes))
	for _, c := range p.Changes {
		id := c.ProviderID
		if id == "" {
			continue
		}
		if c.Payload == nil || !strings.HasPrefix(c.EventID, "recon:") {
			c.Payload = nil // events listed by the provider carry theirs in Event
		}
		cs, ok := b.byID[id]
		if !ok {
			start := len(all)
			all = all[:start+n[id]]
			cs = all[start : start : start+n[id]]
		}
		b.byID[id] = append(cs, c)
	}
	for _, id := range force {
		if _, ok := b.byID[id]; !ok {
			b.byID[id] = nil
		}
	}
	// A fixed lock order (payments by id, events by id) keeps concurrent runs
	// and the live worker from deadlocking in most cases; the rest retry.
	b.order = slices.AppendSeq(b.order[:0], maps.Keys(b.byID))
	slices.Sort(b.order)
	return b
}

// write decides and writes one batch in one transaction. It runs on a
// context detached from cancellation, so that SIGTERM lets it finish.
func (e *engine) write(ctx context.Context, p Page, w Check, force ...string) error {
	wctx := context.WithoutCancel(ctx)
	b, attempts := newBatch(p, w, force, e.spare), 0
	e.spare = nil
	err := e.st.InTx(wctx, func(ctx context.Context, tx store.Tx) error {
		if attempts++; attempts > 1 {
			b = newBatch(p, w, force, b.spare()) // afresh on a retry
		}
		if err := e.plan(ctx, tx, b); err != nil {
			return err
		}
		out, settled, err := e.ap.apply(ctx, tx, b)
		if err != nil {
			return err
		}
		b.out, b.counts.Settlements = out, settled
		if err := e.record(ctx, tx, b); err != nil {
			return err
		}
		// Last before the commit: a batch never commits once the run's
		// lock was lost, since another run may hold it now.
		if e.lock != nil {
			return e.lock.Held(ctx)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("write batch of %d payments: %w", len(b.order), err)
	}
	e.committed(b)
	e.spare = b.spare()
	return nil
}

// plan loads the batch's rows and what the run carries about them, and
// decides each payment from all of its facts so far.
func (e *engine) plan(ctx context.Context, tx store.Tx, b *batch) error {
	var err error
	if b.rows, err = e.ap.load(ctx, tx, b.order, orMake(b.rows, len(b.order))); err != nil {
		return err
	}
	n := len(b.order)
	b.hashes = sized(b.hashes, n)
	b.wasSeen = sized(b.wasSeen, n)
	b.seenAt = sized(b.seenAt, n)
	var want []string
	for i, id := range b.order {
		h := IDHash(id)
		bits, ok := e.seen[h]
		b.hashes[i], b.wasSeen[i], b.seenAt[i] = h, ok, bits
		if bits&carriedBit != 0 {
			want = append(want, id)
		}
	}
	if b.prev, err = e.ap.loadCarry(ctx, tx, want); err != nil {
		return err
	}
	b.befores = sized(b.befores, n)
	b.planBuf = sized(b.planBuf, len(b.order))
	plans := b.planBuf
	e.dec.newArrays(len(b.page.Changes) + len(b.page.Changes)/4)
	for i, id := range b.order {
		// The facts carried from earlier batches and this batch's, joined
		// in decideInto's own buffer (joined here, a slice each was a
		// twentieth of an empty month's allocations).
		before, earlier := b.rows[id], []Change(nil)
		if cr := b.prev[id]; cr != nil {
			before, earlier = cr.before, cr.facts
		}
		pl := decideInto(before, earlier, b.byID[id], &e.dec)
		if bits := b.seenAt[i]; b.wasSeen[i] {
			// The states earlier batches showed are still shown by the
			// window's log, whether or not the payment is carried: what it
			// carries are the facts from the batch it was first carried in
			// on, not those of the batches before (a payout that settled it
			// while it was in sync).
			for r := range numRanks {
				if bits&(1<<r) != 0 && pl.Shown[r].IsZero() {
					pl.Shown[r] = time.Unix(1, 0)
				}
			}
		}
		plans[i] = pl
		b.befores[i] = before
	}
	return nil
}

// record classifies what the batch did into drift items, records the
// events, what the run carries and the run's counters.
func (e *engine) record(ctx context.Context, tx store.Tx, b *batch) error {
	c := &b.counts
	c.Events = int64(len(b.page.Events))
	b.next = sized(b.next, len(b.order))
	var items, replace []store.Item
	var rewrite []string // payments whose earlier items this batch deletes
	// The events' insert, the batch's largest statement whenever webhooks
	// were missed, is sent first and runs in PostgreSQL while the job
	// classifies the batch and packs what it carries (nothing of which
	// touches the transaction); the rest waits for it. Every return below
	// waits for it first: the transaction is not the job's again before.
	inserted := e.insertEvents(ctx, tx, b)
	for i, id := range b.order {
		o, pl, prev := b.out[i], b.planBuf[i], b.prev[id]
		// A value until it is carried: most payments of a night are not
		// (a rerun's none), and each was an allocation with its steps'
		// copy (issue 16).
		cr := carried{before: b.befores[i], applied: o.applied, inserted: o.inserted}
		if prev != nil {
			cr.applied = append(slices.Clip(prev.applied), o.applied...)
			cr.inserted = cr.inserted || prev.inserted
		}
		var its []Item
		var rows []store.Item
		if !o.after.Exists && !b.check.Complete {
			cr.pending = true // decided once it has been fetched by id
		} else {
			// A row that waits for the rest of the log gets no item yet:
			// the window's end judges it (unshown).
			its, _ = Classify(cr.before, o.after, pl, cr.applied, cr.inserted, b.check)
		}
		for _, it := range its {
			describe(&it, o.after, pl)
			if e.o.delivers() {
				deliverItem(&it)
			}
			switch it.Action {
			case models.ActionDelivered:
				cr.items.Delivered++
			case models.ActionRepaired:
				cr.items.Repaired++
			case models.ActionRefused:
				cr.items.Refused++
			case models.ActionReported:
				cr.items.Reported++
			}
			rows = append(rows, toItem(id, it))
		}
		switch {
		case prev != nil && prev.drifted && itemTotal(prev.items) == 1 && len(rows) == 1:
			// One item before and after (a payment's usual case): rewritten
			// in place.
			replace = append(replace, rows[0])
		default:
			if prev != nil && prev.drifted {
				rewrite = append(rewrite, id)
			}
			items = append(items, rows...)
		}
		cr.drifted = len(its) > 0
		c.Repaired += cr.items.Repaired
		c.Refused += cr.items.Refused
		c.Reported += cr.items.Reported
		c.Delivered += cr.items.Delivered
		if prev != nil {
			c.Delivered -= prev.items.Delivered
			c.Repaired -= prev.items.Repaired
			c.Refused -= prev.items.Refused
			c.Reported -= prev.items.Reported
		}
		// A row waiting only for the rest of the log (the local-ahead rule)
		// is not carried: the window's end finds it from its row and the
		// states the log showed.
		if len(cr.applied) > 0 || cr.inserted || cr.drifted || cr.pending {
			cr.facts = b.byID[id]
			if prev != nil {
				cr.facts = append(slices.Clip(prev.facts), b.byID[id]...)
			}
			for _, st := range pl.Steps {
				cr.tried = append(cr.tried, triedOf(st))
			}
			kept := new(carried)
			*kept = cr
			b.next[i] = kept
		} else {
			b.next[i] = nil
		}
	}
	examined, drifted := int64(len(e.seen)), e.drifted
	for i, id := range b.order {
		if !b.wasSeen[i] {
			examined++
		}
		if prev := b.prev[id]; prev != nil && prev.drifted {
			drifted--
		}
		if cr := b.next[i]; cr != nil && cr.drifted {
			drifted++
		}
	}
	c.Examined, c.InSync = examined, examined-drifted
	e.ap.packCarry(b.order, b.next, b.prev)
	var err error
	if c.Synthetic, err = inserted(); err != nil {
		return err
	}
	if err := tx.DeleteItems(ctx, e.run.ID, e.provider, rewrite); err != nil {
		return err
	}
	if err := tx.InsertItems(ctx, e.run.ID, e.provider, items); err != nil {
		return err
	}
	if err := tx.ReplaceItems(ctx, e.run.ID, e.provider, replace); err != nil {
		return err
	}
	if err := e.ap.saveCarry(ctx, tx); err != nil {
		return err
	}
	cursor := b.page.Cursor
	if e.o.delivers() {
		// No resume point: the rows do not hold what the batches decided,
		// so a run resuming after this one's cursor would lose the facts
		// before it.
		cursor = ""
	}
	return tx.AddCounts(ctx, e.run.ID, store.Progress{Counts: *c, APIRequests: e.o.Provider.Requests(),
		Cursor: cursor, CursorAt: b.page.CursorAt})
}

// insertEvents sends the batch's events to the applier from a goroutine of
// its own and returns what waits for it: how many webhook_events lacked.
// The page's events are inserted with the changes found without an event
// (paths 2 and 3), each recorded only when it justified a transition of
// this batch (DESIGN section 5: in the same transaction). Until the wait
// returns, the caller sends nothing on tx.
func (e *engine) insertEvents(ctx context.Context, tx store.Tx, b *batch) func() (int64, error) {
	recon := map[string]store.Event{}
	for i, id := range b.order {
		for _, s := range b.out[i].applied {
			for _, ch := range b.byID[id] {
				if ch.EventID == s.EventID && ch.Payload != nil {
					recon[ch.EventID] = store.Event{EventID: ch.EventID, EventType: ch.EventType, Payload: ch.Payload}
				}
			}
		}
	}
	events := slices.Clone(b.page.Events)
	slices.SortFunc(events, func(a, b Event) int { return strings.Compare(a.ID, b.ID) })
	evs := make([]store.Event, 0, len(events)+len(recon))
	for _, ev := range events {
		if !ev.Unread {
			evs = append(evs, store.Event{EventID: ev.ID, EventType: ev.Type, Payload: ev.Payload})
		}
	}
	for _, id := range slices.Sorted(maps.Keys(recon)) {
		evs = append(evs, recon[id])
	}
	if len(evs) == 0 {
		return func() (int64, error) { return 0, nil }
	}
	var n int64
	var err error
	done := make(chan struct{})
	go func() {
		defer close(done)
		n, err = e.ap.events(ctx, tx, evs)
	}()
	return func() (int64, error) {
		<-done
		return n, err
	}
}

// committed updates what the run holds in memory once a batch committed:
// the states the log showed each payment, which payments it carries, which
// wait for their fetch by id, and the run's totals.
func (e *engine) committed(b *batch) {
	e.count(b)
	if b.page.listed {
		e.listSynthetic += b.counts.Synthetic
	}
	// record gave every payment of the batch its entry in b.next (nil when
	// nothing is carried).
	for i, id := range b.order {
		cr := b.next[i]
		if prev := b.prev[id]; prev != nil && prev.drifted {
			e.drifted--
		}
		bits := b.seenAt[i]
		for r, t := range b.planBuf[i].Shown {
			if !t.IsZero() {
				bits |= 1 << r
			}
		}
		if len(e.pending) > 0 {
			delete(e.pending, id)
		}
		if cr == nil {
			e.seen[b.hashes[i]] = bits &^ carriedBit
			continue
		}
		if cr.drifted {
			e.drifted++
		}
		if cr.pending {
			e.pending[id] = true
		}
		e.seen[b.hashes[i]] = bits | carriedBit
	}
	e.ap.committed(b)
	e.total.Add(b.counts)
	e.total.Examined, e.total.InSync = b.counts.Examined, b.counts.InSync
	if e.o.Progress != nil {
		e.o.Progress(Progress{RunID: e.run.ID, EventsRead: e.total.Events, Examined: e.total.Examined,
			Repaired: e.total.Repaired, Refused: e.total.Refused, Requests: e.o.Provider.Requests(), Elapsed: e.clock.Now().Sub(e.start)})
	}
	// The run's totals so far: a batch's own counts are changes to them,
	// negative when a payment's earlier item moved from refused to repaired.
	e.log.Debug("batch written", "payments", len(b.order), "events", len(b.page.Events),
		"repaired_so_far", e.total.Repaired, "refused_so_far", e.total.Refused)
}

// describe adds the payment's amounts to an item, for the report.
func describe(it *Item, row Local, p Plan) {
	if it.Detail == nil {
		it.Detail = map[string]any{}
	}
	amount, currency := row.Amount, row.Currency
	if !row.Exists {
		amount, currency = p.Amount, p.Currency
	}
	if _, ok := it.Detail["amount"]; !ok {
		it.Detail["amount"] = amount
	}
	if _, ok := it.Detail["currency"]; !ok {
		it.Detail["currency"] = currency
	}
	if _, ok := it.Detail["amount_refunded"]; !ok {
		it.Detail["amount_refunded"] = row.AmountRefunded
	}
}

// itemTotal is how many items c stands for.
func itemTotal(c counts) int64 { return c.Delivered + c.Repaired + c.Refused + c.Reported }

func toItem(id string, it Item) store.Item {
	r := store.Item{ProviderID: id, Kind: it.Kind, Action: it.Action, Detail: it.Detail}
	if it.LocalState != models.StateNone {
		s := string(it.LocalState)
		r.LocalState = &s
	}
	if it.ProviderState != "" {
		s := it.ProviderState
		r.ProviderState = &s
	}
	return r
}
