package reconcile

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"time"

	"github.com/reconciler/reconciler/models"
)

// Local is the part of a payments row the decision reads.
type Local struct {
	Exists         bool
	State          models.State
	At             *time.Time // source_updated_at
	Amount         int64
	Currency       string
	AmountRefunded int64
	SettledAt      *time.Time
	PayoutID       string
	AmountCaptured int64 // 0 when not recorded
}

// Step is one guarded transition: move to To, established at At.
type Step struct {
	To             models.State
	At             time.Time
	AmountRefunded int64 // raise amount_refunded to this with the move; 0 for none
	EventID        string
	Inferred       bool
}

// Settlement is the payout that paid a payment out (DESIGN section 2:
// recorded whatever the state).
type Settlement struct {
	At       time.Time
	PayoutID string
	EventID  string
}

// View is the provider's view of a payment's refunds at At (a charge
// object): whether it is fully refunded and how much of the captured money
// was refunded. Current views (a charge a payout's balance transactions
// expand, a re-fetch) show the provider as it is now.
type View struct {
	At             time.Time
	Current        bool
	Refunded       bool
	AmountRefunded int64
	EventID        string
}

// newer reports whether v supersedes w as the latest view.
func (v View) newer(w *View) bool {
	if w == nil {
		return true
	}
	if v.Current != w.Current {
		return v.Current
	}
	return !v.At.Before(w.At)
}

// Plan is what the provider's facts ask of one payment, independent of the
// local row's current state except where the row is missing.
type Plan struct {
	ProviderID string
	// Steps is the provider's own chain of states, oldest first: every
	// stateful fact that is an allowed edge from the one before it.
	Steps []Step
	// Latest is the provider's latest state in the facts seen (the last step).
	Latest   *Step
	RawState string
	// RefundTo is the largest amount_refunded the facts show (0 for none).
	RefundTo int64
	// Amount and Currency are the provider's, from the newest fact carrying them.
	Amount   int64
	Currency string
	// AmountCaptured is the captured amount when the provider's records
	// show less than Amount captured (a partial capture); 0 otherwise.
	AmountCaptured int64
	// Settlement is the newest payout that paid the payment out, if any.
	Settlement *Settlement
	// View is the newest view of the payment's refunds, if any.
	View *View
	// Lifecycle is the newest snapshot of the whole payment (a
	// PaymentIntent), if any: its state and time.
	Lifecycle *Step
	// Shown is, per state, the latest provider time a fact showed it (zero:
	// never), intermediate facts included: the window's log "shows" the state.
	Shown [numRanks]time.Time
	// Superseded lists terminal facts a later fact overtook (a Direct Debit
	// failure that was retried and collected): never applied as final.
	Superseded []string
	// Items are drift items that do not depend on the write outcome:
	// unknown statuses, reverts and amount mismatches.
	Items []Item
	// Events lists every event id the facts came from, for the report.
	Events []string
	// RefundNote is what the provider's amount_refunded counts, when a fact
	// said (Change.RefundNote).
	RefundNote string
}

// Item is a drift item before it is written.
type Item struct {
	Kind          string
	Action        string
	LocalState    models.State
	ProviderState string
	Detail        map[string]any
	// OnlyFrom limits a revert to rows in these states (a won dispute
	// matters only to a payment recorded as a chargeback).
	OnlyFrom []models.State
	// OnlyIfRefunded limits a revert to rows whose amount_refunded is at
	// least this much (a failed refund matters only to a row that counted it).
	OnlyIfRefunded int64
}

// numRanks is the number of states plus StateNone.
const numRanks = 9

// rankOrder is the state machine's rank order; index 0 is StateNone.
var rankOrder = append([]models.State{models.StateNone}, models.States...)

// rank orders same-time facts along the state machine so that equal
// timestamps resolve by rank, not by arrival order.
func rank(s models.State) int {
	for i, v := range rankOrder {
		if v == s {
			return i
		}
	}
	return 0
}

// ShownAt is the latest time a fact showed s, and whether one did.
func (p *Plan) ShownAt(s models.State) (time.Time, bool) {
	t := p.Shown[rank(s)]
	return t, !t.IsZero()
}

// SortChanges orders one payment's changes by provider time, then rank.
func SortChanges(cs []Change) {
	sort.SliceStable(cs, func(i, j int) bool {
		if !cs[i].At.Equal(cs[j].At) {
			return cs[i].At.Before(cs[j].At)
		}
		return rank(cs[i].State) < rank(cs[j].State)
	})
}

// hasEvent says whether events holds id: a scan while it is short, a set
// (*seen, made once it is needed and kept up to date) past that.
func hasEvent(events []string, seen *map[string]bool, id string) bool {
	if len(events) < 16 {
		return slices.Contains(events, id)
	}
	if *seen == nil {
		*seen = make(map[string]bool, 2*len(events))
		for _, e := range events {
			(*seen)[e] = true
		}
	}
	if (*seen)[id] {
		return true
	}
	(*seen)[id] = true // the caller adds it
	return false
}

// Decide builds the plan for one payment from its local row and all of its
// facts in the run so far (in any order). It is pure.
func Decide(local Local, changes []Change) Plan {
	var d decider
	return decideInto(local, nil, changes, &d)
}

// decider is what decideInto reuses from one payment to the next: the
// buffer of its sorted copy of the facts, kept for the next call, and the
// arrays the plans' Steps and Events are cut from. The arrays are a
// batch's own (newArrays), never written again once a plan holds part of
// them: a plan is copied wherever it outlives its batch, its slices with
// it. Each plan's part is capped at its length, so an append to it makes a
// copy instead of writing into the next plan's part. A slice each grown by
// appends was a fiftieth of a month's rerun (issue 16).
type decider struct {
	facts  []Change
	steps  []Step
	events []string
}

// newArrays gives the plans of a batch of n facts arrays of their own.
func (d *decider) newArrays(n int) {
	d.steps, d.events = make([]Step, 0, n), make([]string, 0, n)
}

// cut returns an empty slice of *a with room for n, reserved for one plan
// until done is called with it (nil when n is 0).
func cut[T any](a *[]T, n int) []T {
	if n == 0 {
		return nil
	}
	if cap(*a)-len(*a) < n {
		*a = make([]T, 0, max(n, 2*cap(*a)))
	}
	return (*a)[len(*a) : len(*a) : len(*a)+n]
}

// done takes a plan's part s, cut from *a (never grown past the room cut
// gave it: at most one step and one event a fact), out of *a's room and
// caps it at its length.
func done[T any](a *[]T, s []T) []T {
	if len(s) == 0 {
		return nil
	}
	*a = (*a)[:len(*a)+len(s)]
	return s[:len(s):len(s)]
}

// decideInto is Decide of earlier's facts and changes', with a buffer for
// its sorted copy of them, kept for the next call (the engine decides a
// batch's payments one after another: a copy each was the largest of a
// rerun's allocations after the pages). Nothing of the plan points into
// the copy; it is cleared after.
func decideInto(local Local, earlier, changes []Change, d *decider) (p Plan) {
	cs := append(append(d.facts[:0], earlier...), changes...)
	defer func() {
		clear(cs)
		d.facts = cs[:0]
	}()
	SortChanges(cs)
	p = Plan{ProviderID: firstID(cs)}
	// At most one step and one event a fact.
	p.Steps, p.Events = cut(&d.steps, len(cs)), cut(&d.events, len(cs))
	defer func() { p.Steps, p.Events = done(&d.steps, p.Steps), done(&d.events, p.Events) }()
	cur := models.StateNone
	var seenEvent map[string]bool // past a few events; a scan of p.Events before
	var notices map[string]*Item
	// A state an event shows is dated by the event: the same state inferred
	// from an object (a re-fetch) keeps its amounts and view but does not
	// establish the state, since its time is the provider's nearest field,
	// not the provider's time of the change.
	var evented [numRanks]bool
	for _, c := range cs {
		if c.State.Valid() && !c.Inferred {
			evented[rank(c.State)] = true
		}
	}
	discountFailedRefunds(cs)
	for _, c := range cs {
		if c.Inferred && c.State.Valid() && evented[rank(c.State)] {
			c.State = models.StateNone
		}
		if c.EventID != "" && !hasEvent(p.Events, &seenEvent, c.EventID) {
			p.Events = append(p.Events, c.EventID)
		}
		if c.Amount > 0 && c.Currency != "" {
			p.Amount, p.Currency = c.Amount, c.Currency
		}
		if c.AmountCaptured > 0 {
			p.AmountCaptured = c.AmountCaptured
		}
		if c.AmountRefunded > p.RefundTo {
			p.RefundTo = c.AmountRefunded
		}
		if c.RefundNote != "" {
			p.RefundNote = c.RefundNote
		}
		if c.View {
			v := View{At: c.At, Current: c.ViewCurrent, Refunded: c.Refunded, AmountRefunded: c.AmountRefunded, EventID: c.EventID}
			if v.newer(p.View) {
				p.View = &v
			}
		}
		shownBefore := c.State.Valid() && !p.Shown[rank(c.State)].IsZero()
		if r := rank(c.State); c.State.Valid() && c.At.After(p.Shown[r]) {
			p.Shown[r] = c.At
		}
		if c.Snapshot && c.State.Valid() && (p.Lifecycle == nil || !c.At.Before(p.Lifecycle.At)) {
			p.Lifecycle = &Step{To: c.State, At: c.At, EventID: c.EventID}
		}
		if c.State == models.StateSettled {
			// The newest payout stands; a payout's own settlement is dated by
			// its first fact (payout.paid, not a later relisting of it).
			switch s := p.Settlement; {
			case s == nil, s.PayoutID != c.PayoutID && !c.At.Before(s.At):
				p.Settlement = &Settlement{At: c.At, PayoutID: c.PayoutID, EventID: c.EventID}
			case s.PayoutID == c.PayoutID && c.At.Before(s.At):
				s.At, s.EventID = c.At, c.EventID
			}
		}
		if c.NoticeKind != "" && !c.Unknown {
			// The newest notice of a kind stands; an empty one withdraws it.
			if notices == nil {
				notices = map[string]*Item{}
			}
			if c.Notice == "" {
				delete(notices, c.NoticeKind)
			} else {
				notices[c.NoticeKind] = &Item{Kind: c.NoticeKind, Action: models.ActionReported,
					LocalState: local.State, ProviderState: c.RawStatus, Detail: detail(c, c.Notice)}
			}
		}
		switch {
		case c.Unknown:
			expl := fmt.Sprintf("The provider reported status %q, which reconciler does not map to a state; nothing was changed.", c.RawStatus)
			if c.Notice != "" {
				expl = c.Notice
			}
			p.Items = append(p.Items, Item{
				Kind: models.KindUnknownStatus, Action: models.ActionReported,
				LocalState: local.State, ProviderState: c.RawStatus,
				Detail: detail(c, expl),
			})
			continue
		case c.Revert != "":
			p.Items = append(p.Items, Item{
				Kind: models.KindConflict, Action: models.ActionRefused,
				LocalState: local.State, ProviderState: c.RawStatus, OnlyFrom: c.RevertOnlyFrom, OnlyIfRefunded: c.RevertIfRefunded,
				Detail: detail(c, c.Revert+" The state machine never moves backwards, so a person must decide."),
			})
			continue
		case c.State == models.StateNone:
			continue
		case c.Fallback && shownBefore:
			continue // an earlier fact established the state
		}
		if cur == models.StateFailed && c.State != models.StateFailed && !c.State.Terminal() && c.At.After(p.Latest.At) {
			// A later fact overtook a failure: it was retried, so it was never
			// final. The chain continues from before the failure.
			p.Superseded = append(p.Superseded, fmt.Sprintf("failed at %s, then %s at %s",
				p.Latest.At.UTC().Format(time.RFC3339Nano), c.State, c.At.UTC().Format(time.RFC3339Nano)))
			p.Steps = p.Steps[:len(p.Steps)-1]
			cur, p.Latest = models.StateNone, nil
			if n := len(p.Steps); n > 0 {
				cur, p.Latest = p.Steps[n-1].To, &p.Steps[n-1]
			}
		}
		if cur == c.State || !models.CanMove(cur, c.State) {
			// Not a forward edge on the provider's own chain. An intermediate
			// fact (a payout of a charge already refunded) changes nothing; a
			// later fact that cannot follow the chain at all is for a human.
			if cur != c.State && !models.CanReach(c.State, cur) {
				p.Items = append(p.Items, Item{
					Kind: models.KindConflict, Action: models.ActionRefused,
					LocalState: local.State, ProviderState: string(c.State),
					Detail: detail(c, fmt.Sprintf("The provider reported %s after %s, which the state machine cannot follow; nothing was changed.", c.State, cur)),
				})
			}
			continue
		}
		cur = c.State
		refund := int64(0)
		if c.State == models.StateRefunded {
			refund = c.AmountRefunded
		}
		p.Steps = append(p.Steps, Step{To: c.State, At: c.At, AmountRefunded: refund, EventID: c.EventID, Inferred: c.Inferred})
		p.Latest = &p.Steps[len(p.Steps)-1]
		p.RawState = c.RawStatus
	}
	for _, k := range slices.Sorted(maps.Keys(notices)) {
		p.Items = append(p.Items, *notices[k])
	}
	if p.Latest != nil {
		l := *p.Latest // keep Latest valid if Steps is appended to later
		p.Latest = &l
	}
	if p.Latest != nil && p.Latest.To == models.StateCanceled {
		// Canceling an authorisation releases the hold, which Stripe reports
		// as a refund of the whole amount: no captured money was refunded.
		p.RefundTo = 0
	}
	if local.Exists && p.Amount > 0 && (p.Amount != local.Amount || (p.Currency != "" && p.Currency != local.Currency)) {
		p.Items = append(p.Items, Item{
			Kind: models.KindMismatch, Action: models.ActionReported,
			LocalState: local.State, ProviderState: string(cur),
			Detail: map[string]any{
				"local_amount": local.Amount, "local_currency": local.Currency,
				"provider_amount": p.Amount, "provider_currency": p.Currency,
				"explanation": "The amount or currency recorded locally differs from the provider's; the amount was not changed.",
			},
		})
	}
	return p
}

// Creatable reports whether a row unknown locally can be made from the
// plan: it needs a state and a usable amount and currency from the
// provider's own records. No row is ever made up.
func (p *Plan) Creatable() bool {
	return p.Latest != nil && p.Amount > 0 && p.Currency != ""
}

func firstID(cs []Change) string {
	if len(cs) == 0 {
		return ""
	}
	return cs[0].ProviderID
}

func detail(c Change, explanation string) map[string]any {
	d := map[string]any{"explanation": explanation}
	if c.EventID != "" {
		d["event_id"] = c.EventID
	}
	if !c.At.IsZero() {
		d["provider_time"] = c.At.UTC().Format(time.RFC3339Nano)
	}
	if c.Inferred {
		d["time_inferred"] = true
	}
	return d
}

// discountFailedRefunds reads the refunds that facts show without those
// that failed (or were canceled) after them: a fact between a refund's
// creation and its failure counted money that never moved. A full refund so
// discounted is no longer a refund. cs is sorted; it is changed in place.
func discountFailedRefunds(cs []Change) {
	var failed []Change
	for _, c := range cs {
		if c.RevertIfRefunded > 0 && !c.RefundSince.IsZero() {
			failed = append(failed, c)
		}
	}
	if len(failed) == 0 {
		return
	}
	for i := range cs {
		c := &cs[i]
		if c.AmountRefunded <= 0 {
			continue
		}
		var off int64
		for _, f := range failed {
			if !c.At.Before(f.RefundSince) && c.At.Before(f.At) {
				off += f.RevertIfRefunded
			}
		}
		if off == 0 {
			continue
		}
		c.AmountRefunded = max(c.AmountRefunded-off, 0)
		c.Refunded = false
		if c.State == models.StateRefunded {
			c.State = models.StateNone
		}
	}
}

// Simulate applies a plan to a local row in memory under the same guard the
// database applies, and returns the resulting row, the steps that applied and
// whether the row was created. Dry runs use it; tests compare it with the
// database's outcome.
func Simulate(local Local, p Plan) (after Local, applied []Step, inserted bool) {
	after = local
	if !after.Exists {
		if !p.Creatable() {
			return after, nil, false
		}
		at := p.Latest.At
		after = Local{Exists: true, State: p.Latest.To, At: &at, Amount: p.Amount, Currency: p.Currency, AmountRefunded: p.RefundTo,
			AmountCaptured: p.AmountCaptured}
		if s := p.Settlement; s != nil {
			st := s.At
			after.SettledAt, after.PayoutID = &st, s.PayoutID
		}
		return after, []Step{*p.Latest}, true
	}
	for _, s := range p.Steps {
		if models.Guard(after.State, after.At, s.To, s.At) {
			at := s.At
			after.State, after.At = s.To, &at
			if s.AmountRefunded > after.AmountRefunded && s.To != models.StateCanceled {
				after.AmountRefunded = s.AmountRefunded
			}
			applied = append(applied, s)
		}
	}
	if p.RefundTo > after.AmountRefunded && after.State != models.StateCanceled {
		after.AmountRefunded = p.RefundTo
	}
	if s := p.Settlement; s != nil && s.PayoutID != after.PayoutID && (after.SettledAt == nil || !after.SettledAt.After(s.At)) {
		st := s.At
		after.SettledAt, after.PayoutID = &st, s.PayoutID
	}
	if p.AmountCaptured > 0 && after.AmountCaptured != p.AmountCaptured {
		after.AmountCaptured = p.AmountCaptured
	}
	return after, applied, false
}

// Check is what Classify knows of the window: the local-ahead rule (DESIGN
// section 2) needs to know whether the window's log has been read up to a
// local fact's time.
type Check struct {
	Since, Until time.Time
	// LogDone is the provider time up to which the window's log has been
	// read completely (facts strictly before it are all seen); Complete is
	// set once the whole window has been read.
	LogDone  time.Time
	Complete bool
}

// Classify compares the row before the run and after the write with the
// provider's facts and returns the drift items of DESIGN section 2, at most
// one per kind, and whether the local-ahead rule must be checked again once
// more of the window's log has been read. It is pure.
func Classify(before, after Local, p Plan, applied []Step, inserted bool, w Check) (items []Item, recheck bool) {
	for _, it := range p.Items {
		if len(it.OnlyFrom) > 0 && !slices.Contains(it.OnlyFrom, after.State) {
			continue
		}
		if it.OnlyIfRefunded > 0 && after.AmountRefunded < it.OnlyIfRefunded {
			continue
		}
		items = append(items, it)
	}
	refundRaised := after.AmountRefunded > before.AmountRefunded
	if before.Exists && p.AmountCaptured > 0 && before.AmountCaptured != p.AmountCaptured && p.AmountCaptured < before.Amount {
		// A partial capture the row did not record: the released remainder
		// is not a refund, and the row's amount stays the authorised one.
		items = append(items, Item{
			Kind: models.KindMismatch, Action: models.ActionReported,
			LocalState: before.State, ProviderState: string(latestState(p)),
			Detail: map[string]any{
				"local_amount": before.Amount, "amount_captured": p.AmountCaptured, "released": before.Amount - p.AmountCaptured,
				"explanation": fmt.Sprintf("The provider captured %s of the %s authorised (a partial capture); the %s released went back to the customer and is not a refund. amount_captured was recorded; amount was not changed.",
					models.Money(p.AmountCaptured, before.Currency), models.Money(before.Amount, before.Currency), models.Money(before.Amount-p.AmountCaptured, before.Currency)),
			},
		})
	}
	if !after.Exists {
		if p.Latest != nil || p.RefundTo > 0 {
			items = append(items, Item{
				Kind: models.KindMismatch, Action: models.ActionRefused,
				LocalState: models.StateNone, ProviderState: string(latestState(p)),
				Detail: map[string]any{
					"explanation": "The payment is unknown locally and the provider's records, fetched by id as well, carry no usable amount or currency; it was not created, a person must look.",
				},
			})
		}
		return dedupe(items), false
	}
	base := func(expl string) map[string]any {
		d := map[string]any{"explanation": expl}
		if l := p.Latest; l != nil {
			d["provider_time"] = l.At.UTC().Format(time.RFC3339Nano)
			if l.EventID != "" {
				d["event_id"] = l.EventID
			}
			if l.Inferred {
				d["time_inferred"] = true
			}
		}
		if refundRaised {
			d["amount_refunded_from"], d["amount_refunded_to"] = before.AmountRefunded, after.AmountRefunded
			if p.RefundNote != "" {
				d["amount_refunded_counts"] = p.RefundNote
				d["explanation"] = expl + " " + p.RefundNote
			}
		}
		if len(applied) > 0 {
			var path []string
			for _, s := range applied {
				path = append(path, string(s.To))
			}
			d["applied"] = path
		}
		if len(p.Superseded) > 0 {
			d["superseded"] = p.Superseded
		}
		if s := p.Settlement; s != nil && s.PayoutID != "" {
			d["payout_id"] = s.PayoutID
		}
		return d
	}
	ahead := func() {
		reason, wait := contradicted(after, &p, w)
		switch {
		case wait:
			recheck = true
		case reason != "":
			d := base(fmt.Sprintf("The local state %s is ahead of the provider: %s; nothing was changed.", after.State, reason))
			if after.At != nil {
				d["local_time"] = after.At.UTC().Format(time.RFC3339Nano)
			}
			d["local_amount_refunded"] = after.AmountRefunded
			items = append(items, Item{
				Kind: models.KindConflict, Action: models.ActionRefused,
				LocalState: after.State, ProviderState: string(latestState(p)), Detail: d,
			})
		}
	}
	if p.Latest == nil {
		if refundRaised {
			items = append(items, Item{
				Kind: models.KindBehind, Action: models.ActionRepaired,
				LocalState: before.State, ProviderState: string(after.State),
				Detail: base("A partial refund webhook was missed; amount_refunded was raised from the provider's record."),
			})
		}
		ahead()
		return dedupe(items), recheck
	}
	latest := *p.Latest
	switch {
	case inserted:
		items = append(items, Item{
			Kind: models.KindMissingLocal, Action: models.ActionRepaired,
			LocalState: models.StateNone, ProviderState: string(latest.To),
			Detail: base(fmt.Sprintf("The payment was unknown locally (its webhooks never arrived); it was created as a payment in state %s from the provider's record.", latest.To)),
		})
	case after.State == latest.To:
		if len(applied) > 0 || refundRaised {
			expl := fmt.Sprintf("The %s webhook was never received; the payment was marked %s from the provider's record.", latest.To, latest.To)
			if len(applied) == 0 {
				expl = "A refund webhook was missed; amount_refunded was raised from the provider's record."
			}
			items = append(items, Item{
				Kind: models.KindBehind, Action: models.ActionRepaired,
				LocalState: before.State, ProviderState: string(latest.To), Detail: base(expl),
			})
		}
		ahead() // the refund dimension can still contradict the row
	case models.CanMove(after.State, latest.To):
		d := base(fmt.Sprintf("The provider shows %s, but the local state %s was set by a later fact; the older change was refused.", latest.To, after.State))
		if after.At != nil {
			d["local_time"] = after.At.UTC().Format(time.RFC3339Nano)
		}
		items = append(items, Item{
			Kind: models.KindStale, Action: models.ActionRefused,
			LocalState: after.State, ProviderState: string(latest.To), Detail: d,
		})
	case models.CanReach(latest.To, after.State):
		if len(applied) > 0 || refundRaised {
			items = append(items, Item{
				Kind: models.KindBehind, Action: models.ActionRepaired,
				LocalState: before.State, ProviderState: string(after.State),
				Detail: base(fmt.Sprintf("The %s webhook was never received; the payment was marked %s from the provider's record.", after.State, after.State)),
			})
		}
		ahead()
	default:
		items = append(items, Item{
			Kind: models.KindConflict, Action: models.ActionRefused,
			LocalState: after.State, ProviderState: string(latest.To),
			Detail: base(fmt.Sprintf("The provider shows %s, which cannot follow the local state %s; nothing was changed.", latest.To, after.State)),
		})
	}
	return dedupe(items), recheck
}

func latestState(p Plan) models.State {
	if p.Latest != nil {
		return p.Latest.To
	}
	return models.StateNone
}

// contradicted applies the local-ahead rule of DESIGN section 2 to a row at
// or ahead of the provider's chain: it returns why the provider's records
// contradict the row, "" when they do not, or wait when the window's log has
// not yet been read past the row's fact.
func contradicted(row Local, p *Plan, w Check) (reason string, wait bool) {
	if row.At != nil && !w.Until.IsZero() && !row.At.Before(w.Until) {
		return "", false // the live worker moved it after the window: not ours to judge
	}
	rowAt := func() time.Time {
		if row.At == nil {
			return time.Time{}
		}
		return *row.At
	}()
	// shownSince: the log shows the row's state at or after t.
	shownSince := func(t time.Time) bool {
		at, ok := p.ShownAt(row.State)
		return ok && !at.Before(t)
	}
	// (b) A current or later view of the charge says otherwise. Equal times
	// do not excuse the row; the log showing the row's state at or after
	// the view does.
	// A refunded row contradicted by a current view is excused by the log
	// showing its refund (a refund the log shows and the charge no longer
	// does was reversed, which the log says too: a revert item), by an
	// event's view by the log showing the refund after it. An amount is
	// excused by a fact of the window showing at least as much.
	excused := func(v *View) bool {
		if v.Current {
			return shownSince(rowAt)
		}
		return shownSince(v.At)
	}
	if v := p.View; v != nil && (v.Current || row.At == nil || !v.At.Before(rowAt)) {
		switch {
		case row.State == models.StateRefunded && !v.Refunded && !excused(v):
			return fmt.Sprintf("the provider's charge is not fully refunded (amount_refunded %d)", v.AmountRefunded), false
		case row.AmountRefunded > v.AmountRefunded && row.AmountRefunded > p.RefundTo && (v.Current || row.State == models.StateRefunded):
			// A partial refund carries no time of its own on the row, so only
			// a current view, or a refunded row's own time, can judge it.
			return fmt.Sprintf("the provider's charge shows amount_refunded %d, less than the %d recorded", v.AmountRefunded, row.AmountRefunded), false
		}
	}
	// (b) A later snapshot of the whole payment shows an earlier state
	// (a PaymentIntent still requires_capture after the row says captured).
	if l := p.Lifecycle; l != nil && l.To != row.State && models.CanReach(l.To, row.State) &&
		(row.At == nil || !l.At.Before(rowAt)) && !shownSince(l.At) {
		return fmt.Sprintf("its own record shows %s at %s, at or after the local fact", l.To, l.At.UTC().Format(time.RFC3339)), false
	}
	// (a) The local fact lies inside the window and the window's complete
	// log never shows that state for the payment. A row without a provider
	// time has no fact to place, and a created row is the application's own
	// act, never ahead of the provider.
	if _, ok := p.ShownAt(row.State); ok || row.At == nil || row.State == models.StateCreated || row.At.Before(w.Since) {
		return "", false
	}
	if !w.Complete && !row.At.Before(w.LogDone) {
		return "", true
	}
	return fmt.Sprintf("the local fact at %s lies inside the window, whose event log never shows %s for this payment",
		row.At.UTC().Format(time.RFC3339), row.State), false
}

// dedupe keeps at most one item per kind: later items of a kind are folded
// into the first one's detail.
func dedupe(items []Item) []Item {
	var out []Item
	for _, it := range items {
		i := slices.IndexFunc(out, func(o Item) bool { return o.Kind == it.Kind })
		if i < 0 {
			out = append(out, it)
			continue
		}
		if out[i].Detail == nil {
			out[i].Detail = map[string]any{}
		}
		also, _ := out[i].Detail["also"].([]string)
		if e, ok := it.Detail["explanation"].(string); ok {
			out[i].Detail["also"] = append(also, e)
		}
	}
	return out
}
