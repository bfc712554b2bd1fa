package reconcile

import (
	"bytes"
	"context"
	"maps"
	"slices"
	"time"

	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/store"
)

// applier carries out a batch's plans. The engine decides (plan), hands the
// plans to its applier (apply) and records what happened (record); the two
// appliers are the only place a dry run differs from a real one.
//
// The SQL applier writes the rows under the guard and keeps what it carries
// between batches in the carry table. The dry applier writes nothing but
// the run and its items: it simulates the guard (Simulate) on rows it keeps
// in memory, and carries in memory.
type applier interface {
	// load reads the batch's rows as this run sees them into into (empty),
	// and returns it.
	load(ctx context.Context, tx store.Tx, ids []string, into map[string]Local) (map[string]Local, error)
	// apply carries out the plans and returns each payment's outcome and
	// how many settlements it recorded.
	apply(ctx context.Context, tx store.Tx, b *batch) ([]outcome, int64, error) // by position in b.order
	// events records the batch's events and returns how many
	// webhook_events lacked.
	events(ctx context.Context, tx store.Tx, evs []store.Event) (int64, error)
	// loadCarry returns what the run carries about ids (those it marked
	// carried).
	loadCarry(ctx context.Context, tx store.Tx, ids []string) (map[string]*carried, error)
	// packCarry takes the batch's carried state (nil: forget the payment)
	// and plans what of it the transaction records; it sends nothing.
	packCarry(order []string, next []*carried, prev map[string]*carried)
	// saveCarry records what packCarry planned in the batch's transaction.
	saveCarry(ctx context.Context, tx store.Tx) error
	// committed is called once the batch's transaction committed.
	committed(b *batch)
	// state is the state the run sees for a row the database holds in st.
	state(id string, st models.State) models.State
	// finish removes what the run carried, at its end.
	finish(ctx context.Context) error
	// writes says whether the run writes payments (and so may resume a
	// crashed run's window).
	writes() bool
}

// outcome is what the applier did to one payment in a batch.
type outcome struct {
	after    Local
	applied  []Step // this batch's
	inserted bool
}

// sqlApplier writes to the store.
type sqlApplier struct {
	st        store.Store
	runID     int64
	provider  string
	account   string
	mem       *carryMem   // what the run carries, in memory up to a budget
	eventsNew newEvents   // whether the last batch's events were all new
	pending   carryChange // what the batch being written does to mem
	scratch   []byte
}

func (a *sqlApplier) load(ctx context.Context, tx store.Tx, ids []string, into map[string]Local) (map[string]Local, error) {
	return loadLocal(ctx, tx, a.provider, ids, into)
}

// loadLocal reads the rows of ids into into (a new map when nil).
func loadLocal(ctx context.Context, tx store.Tx, provider string, ids []string, into map[string]Local) (map[string]Local, error) {
	rows, err := tx.LoadPayments(ctx, provider, ids)
	if err != nil {
		return nil, err
	}
	out := orMake(into, len(rows))
	for _, r := range rows {
		out[r.ProviderID] = localOf(r)
	}
	return out, nil
}

// localOf is a row as the engine sees it.
func localOf(r store.Payment) Local {
	return Local{Exists: true, State: r.State, At: r.At, Amount: r.Amount, Currency: r.Currency,
		AmountRefunded: r.AmountRefunded, SettledAt: r.SettledAt, PayoutID: r.PayoutID, AmountCaptured: r.AmountCaptured}
}

func (a *sqlApplier) apply(ctx context.Context, tx store.Tx, b *batch) ([]outcome, int64, error) {
	var inserts []store.NewPayment
	for i, id := range b.order {
		if pl := &b.planBuf[i]; !b.rows[id].Exists && pl.Creatable() {
			r := store.NewPayment{ProviderID: id, State: pl.Latest.To, At: pl.Latest.At,
				Amount: pl.Amount, Currency: pl.Currency, AmountRefunded: pl.RefundTo}
			if s := pl.Settlement; s != nil {
				r.SettledAt, r.PayoutID = &s.At, s.PayoutID
			}
			if pl.AmountCaptured > 0 {
				// A copy: the address of pl's own field would move every
				// payment's plan to the heap (a twentieth of a rerun's
				// allocations).
				captured := pl.AmountCaptured
				r.AmountCaptured = &captured
			}
			inserts = append(inserts, r)
		}
	}
	created, err := tx.InsertPayments(ctx, a.provider, a.account, inserts)
	if err != nil {
		return nil, 0, err
	}
	inserted := make(map[string]bool, len(created))
	for _, r := range created {
		inserted[r.ProviderID] = true
	}
	// A row the insert did not create exists already (the live worker made
	// it meanwhile): the guarded steps apply to it. Steps an earlier batch
	// of this run already sent are not sent again: the guard's refusals are
	// permanent (rows only move forward), so only the new part of the chain
	// can move a row.
	todo := make(map[string][]Step, len(b.order))
	for i, id := range b.order {
		if inserted[id] {
			continue
		}
		row := b.rows[id]
		for _, st := range b.planBuf[i].Steps {
			// A step to a state the row as loaded cannot reach is not sent:
			// the guard refuses it now, and rows only move forward, so no
			// writer racing this batch can make it pass (a rerun sent every
			// payment's whole chain for the guard to refuse; issue 16). A
			// reachable step is sent and the guard, with the times, decides.
			if row.Exists && (row.State == st.To || !models.CanReach(row.State, st.To)) {
				continue
			}
			if prev := b.prev[id]; prev == nil || !prev.sent(st) {
				todo[id] = append(todo[id], st)
			}
		}
	}
	applied := map[string][]Step{}
	var settledByStep int64 // settlements the steps recorded (store.Step.Settled)
	// touched are the payments a statement of this batch may have changed;
	// changed holds each row a statement did change as the last such
	// statement returned it (the transaction holds its lock: no one else
	// moves it before the commit). Only the rows touched and not changed
	// are read again afterwards (a webhook may have moved them); the others
	// are as loaded, and the rows the insert created as it returned them
	// (no later statement of the batch touches those).
	touched := make(map[string]bool, len(inserts))
	changed := map[string]store.Payment{}
	keep := func(rows []store.Payment) {
		for _, r := range rows {
			changed[r.ProviderID] = r
		}
	}
	for _, r := range inserts {
		if !inserted[r.ProviderID] {
			touched[r.ProviderID] = true
		}
	}
	for id := range todo {
		touched[id] = true
	}
	for round := 0; ; round++ {
		var steps []store.Step
		sent := map[string]*store.Settlement{} // the settlements this round's steps carry
		for i, id := range b.order {
			if round < len(todo[id]) {
				s := todo[id][round]
				st := store.Step{ProviderID: id, To: s.To, At: s.At, Refund: s.AmountRefunded}
				if round == len(todo[id])-1 {
					// The payment's last step records its settlement too:
					// a payout that settles a captured payment moved the
					// row twice, a new row version each (16,583 on an
					// empty schema's month; issue 16). Below, the row the
					// step returns says whether the settlement is left.
					if s := b.planBuf[i].Settlement; s != nil && settlementChanges(b.rows[id], s.At, s.PayoutID) {
						st.Settled = &store.Settlement{ProviderID: id, At: s.At, PayoutID: s.PayoutID}
						sent[id] = st.Settled
					}
				}
				steps = append(steps, st)
			}
		}
		if len(steps) == 0 {
			break
		}
		moved, err := tx.ApplySteps(ctx, a.provider, steps)
		if err != nil {
			return nil, 0, err
		}
		for _, r := range moved {
			applied[r.ProviderID] = append(applied[r.ProviderID], todo[r.ProviderID][round])
			// The row lacked this settlement as loaded (Settled is sent
			// only then) and has it now: the step recorded it. (A writer
			// that recorded the same payout between the load and the step
			// would be counted here too; the row is right either way.)
			if s := sent[r.ProviderID]; s != nil && hasSettlement(localOf(r), s.At, s.PayoutID) {
				settledByStep++
			}
		}
		keep(moved)
	}
	var refunds []store.Refund
	var settles []store.Settlement
	var captures []store.Capture
	for i, id := range b.order {
		pl := &b.planBuf[i]
		if inserted[id] {
			continue
		}
		// A statement whose guard the row as loaded already fails is not
		// sent (a rerun would send every payment's refund, settlement and
		// capture again, for PostgreSQL to find nothing to do); a row a
		// step of this batch moved is past what was loaded, and the
		// statement's own guard decides.
		row, moved := b.rows[id], len(applied[id]) > 0
		if pl.RefundTo > 0 && (moved || row.AmountRefunded < pl.RefundTo && row.State != models.StateCanceled) {
			refunds = append(refunds, store.Refund{ProviderID: id, Amount: pl.RefundTo})
			touched[id] = true
		}
		settleFrom := row
		if r, ok := changed[id]; ok {
			// Moved by a step: the row as the step left it (locked until
			// the commit), its settlement recorded with the last step
			// unless the store keeps none or the step was refused.
			settleFrom = localOf(r)
		}
		if s := pl.Settlement; s != nil && settlementChanges(settleFrom, s.At, s.PayoutID) {
			settles = append(settles, store.Settlement{ProviderID: id, At: s.At, PayoutID: s.PayoutID})
			touched[id] = true
		}
		if pl.AmountCaptured > 0 && (moved || row.AmountCaptured != pl.AmountCaptured) {
			captures = append(captures, store.Capture{ProviderID: id, Amount: pl.AmountCaptured})
			touched[id] = true
		}
	}
	raised, err := tx.RaiseRefunds(ctx, a.provider, refunds)
	if err != nil {
		return nil, 0, err
	}
	keep(raised)
	settledRows, err := tx.RecordSettlements(ctx, a.provider, settles)
	if err != nil {
		return nil, 0, err
	}
	keep(settledRows)
	capturedRows, err := tx.RecordCaptured(ctx, a.provider, captures)
	if err != nil {
		return nil, 0, err
	}
	keep(capturedRows)
	var again []string
	for _, id := range b.order {
		if _, ok := changed[id]; touched[id] && !ok {
			again = append(again, id)
		}
	}
	after, err := a.load(ctx, tx, again, make(map[string]Local, len(again)+len(changed)+len(created)))
	if err != nil {
		return nil, 0, err
	}
	for id, r := range changed {
		after[id] = localOf(r)
	}
	for _, r := range created {
		after[r.ProviderID] = localOf(r)
	}
	settled := settledByStep + int64(len(settledRows))
	out := sized(b.out, len(b.order))
	for i, id := range b.order {
		o := outcome{after: b.rows[id], applied: applied[id], inserted: inserted[id]}
		if touched[id] || inserted[id] {
			o.after = after[id]
		}
		if o.inserted {
			o.applied = []Step{*b.planBuf[i].Latest}
		}
		out[i] = o
	}
	return out, settled, nil
}

func (a *sqlApplier) events(ctx context.Context, tx store.Tx, evs []store.Event) (int64, error) {
	return a.eventsNew.insert(ctx, tx, a.runID, a.provider, evs)
}

// newEvents picks how a batch's events are inserted from what the batches
// before found: while every event was new (an empty schema, a first run),
// all are sent at once; once a batch finds one recorded (the webhooks
// came), the store is asked first which are, so that their payloads are
// not sent for nothing. Either is correct (the insert's unique key decides);
// a wrong guess costs one batch its speed.
type newEvents struct{ allNew bool }

func (n *newEvents) insert(ctx context.Context, tx store.Tx, runID int64, source string, evs []store.Event) (int64, error) {
	insert := tx.InsertEvents
	if n.allNew {
		insert = tx.InsertEventsDirect
	}
	added, err := insert(ctx, runID, source, evs)
	if err == nil && len(evs) > 0 {
		n.allNew = added == int64(len(evs))
	}
	return added, err
}

func (a *sqlApplier) loadCarry(ctx context.Context, tx store.Tx, ids []string) (map[string]*carried, error) {
	out := make(map[string]*carried, len(ids))
	var spilled []string
	for _, id := range ids {
		b, ok := a.mem.get(id)
		if !ok {
			spilled = append(spilled, id)
			continue
		}
		cr, err := unpackCarried(id, b, a.mem.tab)
		if err != nil {
			return nil, err
		}
		out[id] = cr
	}
	if len(spilled) == 0 {
		return out, nil
	}
	rows, err := tx.LoadCarry(ctx, a.runID, spilled)
	if err != nil {
		return nil, err
	}
	for _, r := range rows {
		cr, err := unspill(r, a.mem.tab)
		if err != nil {
			return nil, err
		}
		out[r.ProviderID] = cr
	}
	return out, nil
}

// packCarry packs the batch's carried state for memory and plans what
// does not fit the budget, which saveCarry spills to the carry table in the
// batch's transaction. Memory changes only once the batch committed.
func (a *sqlApplier) packCarry(order []string, next []*carried, prev map[string]*carried) {
	put := make(map[string][]byte)
	for i, cr := range next {
		id := order[i]
		switch {
		case cr != nil:
			// Packed into the scratch buffer, kept at its exact size.
			a.scratch = cr.pack(id, a.scratch[:0], a.mem.tab)
			put[id] = bytes.Clone(a.scratch)
		case prev[id] != nil:
			put[id] = nil // forgotten; a spilled row of it is stale now
		}
	}
	a.pending = carryChange{put: put, evict: a.mem.plan(put)}
}

// saveCarry spills what packCarry found beyond the budget.
func (a *sqlApplier) saveCarry(ctx context.Context, tx store.Tx) error {
	evict, put := a.pending.evict, a.pending.put
	// Spilled a chunk at a time, each encoded just before it is sent: a
	// batch that spilled thousands of payments at once held their JSON
	// four times over (the rows, the argument, pgx's copy and its message)
	// and set the million-event listing's peak RSS (issue 16), where a
	// carried payment holds its objects' payloads.
	order := slices.Sorted(slices.Values(evict))
	var rows []store.Carry
	size := 0
	flush := func() error {
		err := tx.SaveCarry(ctx, a.runID, rows, nil)
		clear(rows) // collectable while the next chunk is encoded
		rows, size = rows[:0], 0
		return err
	}
	for _, id := range order {
		// This batch's own packed state, or what memory holds of an
		// earlier batch's: plan never evicts a payment the batch forgets.
		b, ok := put[id]
		if !ok {
			b, _ = a.mem.get(id)
		}
		r := store.Carry{ProviderID: id, State: spillJSON(b)}
		rows, size = append(rows, r), size+len(r.State)
		if size >= a.mem.spillChunk() {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	if len(rows) == 0 {
		return nil
	}
	return flush()
}

func (a *sqlApplier) committed(*batch) {
	a.mem.commit(a.pending)
	a.pending = carryChange{}
}

func (a *sqlApplier) state(_ string, st models.State) models.State { return st }
func (a *sqlApplier) finish(ctx context.Context) error             { return a.st.ForgetCarry(ctx, a.runID) }
func (a *sqlApplier) writes() bool                                 { return true }

// dryApplier simulates the guard on rows kept in memory.
type dryApplier struct {
	provider string
	sim      map[string]Local    // rows as the simulation left them
	carry    map[string]*carried // what the run carries
}

func newDryApplier(provider string) *dryApplier {
	return &dryApplier{provider: provider, sim: map[string]Local{}, carry: map[string]*carried{}}
}

func (a *dryApplier) load(ctx context.Context, tx store.Tx, ids []string, into map[string]Local) (map[string]Local, error) {
	rows, err := loadLocal(ctx, tx, a.provider, ids, into)
	if err != nil {
		return nil, err
	}
	for _, id := range ids {
		if l, ok := a.sim[id]; ok {
			rows[id] = l
		}
	}
	return rows, nil
}

func (a *dryApplier) apply(_ context.Context, _ store.Tx, b *batch) ([]outcome, int64, error) {
	out := sized(b.out, len(b.order))
	var settled int64
	b.sim = map[string]Local{}
	for i, id := range b.order {
		before := b.rows[id]
		after, applied, ins := Simulate(before, b.planBuf[i])
		out[i] = outcome{after, applied, ins}
		if after != before {
			b.sim[id] = after
		}
		if !ins && after.SettledAt != before.SettledAt {
			settled++
		}
	}
	return out, settled, nil
}

func (a *dryApplier) events(ctx context.Context, tx store.Tx, evs []store.Event) (int64, error) {
	ids := make([]string, len(evs))
	for i, ev := range evs {
		ids[i] = ev.EventID
	}
	return tx.MissingEvents(ctx, a.provider, ids)
}

func (a *dryApplier) loadCarry(_ context.Context, _ store.Tx, ids []string) (map[string]*carried, error) {
	out := map[string]*carried{}
	for _, id := range ids {
		if cr := a.carry[id]; cr != nil {
			out[id] = cr
		}
	}
	return out, nil
}

// packCarry keeps nothing: the dry applier carries in memory once the batch
// committed.
func (a *dryApplier) packCarry([]string, []*carried, map[string]*carried) {}
func (a *dryApplier) saveCarry(context.Context, store.Tx) error           { return nil }

func (a *dryApplier) committed(b *batch) {
	for i, cr := range b.next {
		id := b.order[i]
		if cr == nil {
			delete(a.carry, id)
		} else {
			a.carry[id] = cr
		}
	}
	maps.Copy(a.sim, b.sim)
}

func (a *dryApplier) state(id string, st models.State) models.State {
	if l, ok := a.sim[id]; ok {
		return l.State // a dry run judges the rows it simulated
	}
	return st
}

func (a *dryApplier) finish(context.Context) error { return nil }
func (a *dryApplier) writes() bool                 { return false }

func setOf(ids []string) map[string]bool {
	m := make(map[string]bool, len(ids))
	for _, id := range ids {
		m[id] = true
	}
	return m
}

// hasSettlement reports whether row records the payout at (payout "":
// unknown, any).
func hasSettlement(row Local, at time.Time, payout string) bool {
	return row.SettledAt != nil && row.SettledAt.Equal(at) && (payout == "" || row.PayoutID == payout)
}

// settlementChanges mirrors the guard of store.Tx.RecordSettlements: a row
// not yet settled, or settled earlier by another payout than the one named.
func settlementChanges(row Local, at time.Time, payout string) bool {
	if row.SettledAt == nil {
		return true
	}
	return payout != "" && row.PayoutID != payout && !row.SettledAt.After(at)
}
