package reconcile

import (
	"fmt"
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
}

// Step is one guarded transition: move to To, established at At.
type Step struct {
	To             models.State
	At             time.Time
	AmountRefunded int64 // raise amount_refunded to this with the move; 0 for none
	EventID        string
	Inferred       bool
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
	Snapshot bool // Latest came from a snapshot of the whole payment
	RawState string
	// RefundTo is the largest amount_refunded the facts show (0 for none).
	RefundTo int64
	// Amount and Currency are the provider's, from the newest fact carrying them.
	Amount   int64
	Currency string
	// Items are drift items that do not depend on the write outcome:
	// unknown statuses, reverts and amount mismatches.
	Items []Item
	// Events lists every event id the facts came from, for the report.
	Events []string
}

// Item is a drift item before it is written.
type Item struct {
	Kind          string
	Action        string
	LocalState    models.State
	ProviderState string
	Detail        map[string]any
}

// rank orders same-time facts along the state machine so that equal
// timestamps resolve by rank, not by arrival order.
func rank(s models.State) int {
	for i, v := range models.States {
		if v == s {
			return i + 1
		}
	}
	return 0
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

// Decide builds the plan for one payment from its local row and its facts
// (in any order). It is pure.
func Decide(local Local, changes []Change) Plan {
	cs := append([]Change(nil), changes...)
	SortChanges(cs)
	p := Plan{ProviderID: firstID(cs)}
	cur := models.StateNone
	seenEvent := map[string]bool{}
	for _, c := range cs {
		if c.EventID != "" && !seenEvent[c.EventID] {
			seenEvent[c.EventID] = true
			p.Events = append(p.Events, c.EventID)
		}
		if c.Amount > 0 && c.Currency != "" {
			p.Amount, p.Currency = c.Amount, c.Currency
		}
		if c.AmountRefunded > p.RefundTo {
			p.RefundTo = c.AmountRefunded
		}
		switch {
		case c.Unknown:
			p.Items = append(p.Items, Item{
				Kind: models.KindUnknownStatus, Action: models.ActionReported,
				LocalState: local.State, ProviderState: c.RawStatus,
				Detail: detail(c, fmt.Sprintf("The provider reported status %q, which reconciler does not map to a state; nothing was changed.", c.RawStatus)),
			})
			continue
		case c.Revert != "":
			if len(c.RevertOnlyFrom) > 0 && !slices.Contains(c.RevertOnlyFrom, local.State) {
				continue
			}
			p.Items = append(p.Items, Item{
				Kind: models.KindConflict, Action: models.ActionRefused,
				LocalState: local.State, ProviderState: c.RawStatus,
				Detail: detail(c, c.Revert+" The state machine never moves backwards, so a person must decide."),
			})
			continue
		case c.State == models.StateNone:
			continue
		}
		if cur == c.State || !models.CanMove(cur, c.State) {
			// Not a forward edge on the provider's own chain. An intermediate
			// fact (a payout of a charge already refunded) changes nothing; a
			// later fact that cannot follow the chain at all (a Direct Debit
			// failing after it was paid out) is for a human.
			if cur == c.State && p.Latest != nil && c.Snapshot {
				p.Snapshot = true
			}
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
		p.Snapshot = c.Snapshot
		p.RawState = c.RawStatus
	}
	if p.Latest != nil {
		l := *p.Latest // keep Latest valid if Steps is appended to later
		p.Latest = &l
	}
	if !local.Exists && p.Latest != nil && (p.Amount <= 0 || p.Currency == "") {
		// No row is made up: a payment is created only from a provider
		// record with a usable amount and currency.
		p.Items = append(p.Items, Item{
			Kind: models.KindMismatch, Action: models.ActionRefused,
			LocalState: models.StateNone, ProviderState: string(p.Latest.To),
			Detail: map[string]any{
				"explanation":   "The payment is unknown locally and the provider's record carries no usable amount or currency; it was not created, a person must look.",
				"provider_time": p.Latest.At.UTC().Format(time.RFC3339Nano),
			},
		})
		p.Latest, p.Steps = nil, nil
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

// Simulate applies a plan to a local row in memory under the same guard the
// database applies, and returns the resulting row, the steps that applied and
// whether the row was created. Dry runs use it; tests compare it with the
// database's outcome.
func Simulate(local Local, p Plan) (after Local, applied []Step, inserted bool) {
	after = local
	if p.Latest == nil {
		if after.Exists && p.RefundTo > after.AmountRefunded && after.State != models.StateCanceled {
			after.AmountRefunded = p.RefundTo
		}
		return after, nil, false
	}
	if !after.Exists {
		at := p.Latest.At
		after = Local{Exists: true, State: p.Latest.To, At: &at, Amount: p.Amount, Currency: p.Currency, AmountRefunded: insertRefund(p)}
		return after, []Step{*p.Latest}, true
	}
	for _, s := range p.Steps {
		if models.Guard(after.State, after.At, s.To, s.At) {
			at := s.At
			after.State, after.At = s.To, &at
			if s.AmountRefunded > after.AmountRefunded {
				after.AmountRefunded = s.AmountRefunded
			}
			applied = append(applied, s)
		}
	}
	if p.RefundTo > after.AmountRefunded && after.State != models.StateCanceled {
		after.AmountRefunded = p.RefundTo
	}
	return after, applied, false
}

// insertRefund is the amount_refunded of a row created from a plan.
func insertRefund(p Plan) int64 {
	if p.Latest != nil && p.Latest.To == models.StateCanceled {
		return 0
	}
	return p.RefundTo
}

// Classify compares the row before and after the write with the provider's
// latest state and returns the drift items of DESIGN section 2 (in addition
// to the plan's own Items). It is pure.
func Classify(before, after Local, p Plan, applied []Step, inserted bool) []Item {
	items := append([]Item(nil), p.Items...)
	refundRaised := after.AmountRefunded > before.AmountRefunded
	if p.Latest == nil {
		if refundRaised && before.Exists {
			items = append(items, Item{
				Kind: models.KindBehind, Action: models.ActionRepaired,
				LocalState: before.State, ProviderState: string(after.State),
				Detail: map[string]any{
					"amount_refunded_from": before.AmountRefunded, "amount_refunded_to": after.AmountRefunded,
					"explanation": "A partial refund webhook was missed; amount_refunded was raised from the provider's record.",
				},
			})
		}
		return items
	}
	latest := *p.Latest
	base := func(expl string) map[string]any {
		d := map[string]any{"explanation": expl, "provider_time": latest.At.UTC().Format(time.RFC3339Nano)}
		if latest.EventID != "" {
			d["event_id"] = latest.EventID
		}
		if latest.Inferred {
			d["time_inferred"] = true
		}
		if refundRaised {
			d["amount_refunded_from"], d["amount_refunded_to"] = before.AmountRefunded, after.AmountRefunded
		}
		if len(applied) > 0 {
			var path []string
			for _, s := range applied {
				path = append(path, string(s.To))
			}
			d["applied"] = path
		}
		return d
	}
	switch {
	case inserted:
		items = append(items, Item{
			Kind: models.KindMissingLocal, Action: models.ActionRepaired,
			LocalState: models.StateNone, ProviderState: string(latest.To),
			Detail: base(fmt.Sprintf("The payment was unknown locally (its webhooks never arrived); it was created as %s from the provider's record.", latest.To)),
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
		// Ours is ahead along the chain. That is drift only when the provider
		// showed its whole view of the payment after our fact.
		if p.Snapshot && (after.At == nil || after.At.Before(latest.At)) {
			items = append(items, Item{
				Kind: models.KindConflict, Action: models.ActionRefused,
				LocalState: after.State, ProviderState: string(latest.To),
				Detail: base(fmt.Sprintf("The local state %s is ahead of the provider, which still shows %s; nothing was changed.", after.State, latest.To)),
			})
		}
	default:
		items = append(items, Item{
			Kind: models.KindConflict, Action: models.ActionRefused,
			LocalState: after.State, ProviderState: string(latest.To),
			Detail: base(fmt.Sprintf("The provider shows %s, which cannot follow the local state %s; nothing was changed.", latest.To, after.State)),
		})
	}
	return items
}
