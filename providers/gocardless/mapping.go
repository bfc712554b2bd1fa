package gocardless

import (
	"encoding/json"
	"sort"
	"strings"
	"time"

	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/reconcile"
)

// StatusState maps a payment status to a state (DESIGN section 4). ok is
// false for a status the mapping does not know: it is reported, never
// guessed.
func StatusState(status string) (s models.State, ok bool) {
	switch status {
	case "pending_customer_approval", "pending_submission":
		return models.StateCreated, true
	case "submitted":
		return models.StateAuthorised, true
	case "confirmed":
		return models.StateCaptured, true
	case "paid_out":
		return models.StateSettled, true
	case "cancelled", "customer_approval_denied":
		return models.StateCanceled, true
	case "failed":
		return models.StateFailed, true
	case "charged_back":
		return models.StateChargeback, true
	}
	return models.StateNone, false
}

// Raw statuses of GoCardless facts that move no state.
const (
	// RawFailedWillRetry is a payments.failed event with
	// details.will_attempt_retry true, or a re-fetched failed payment whose
	// latest failure says so: GoCardless will retry it, so it is not final.
	RawFailedWillRetry = "failed_will_retry"
	// RawRetried is a resubmission_requested that follows a failure
	// GoCardless said it would retry: the normal Success+ flow.
	RawRetried = "resubmission_requested"
	// RawLateFailureSettledWillRetry is a late_failure_settled (the clawback
	// of a late failure from a payout) of a failure GoCardless retries.
	RawLateFailureSettledWillRetry = "late_failure_settled_will_retry"
)

// Explanations of the drift items the retry mapping makes.
const (
	revertResubmitted             = "GoCardless was asked to resubmit the payment after a failure it does not retry itself (will_attempt_retry false, or a merchant's retry through the API): the later collection cannot follow failed."
	revertRetriedButFailedLocally = "GoCardless is retrying the payment after a failure it said it would retry (will_attempt_retry true), but the local row records it failed, a terminal state: the retry's collection cannot be applied."
)

// actionState maps a payment event's action to the state it establishes at
// the event's time. A failed event GoCardless will retry and the
// resubmission after it are mapped by retryFacts instead.
var actionState = map[string]models.State{
	"created":                   models.StateCreated,
	"customer_approval_granted": models.StateCreated,
	"submitted":                 models.StateAuthorised,
	"confirmed":                 models.StateCaptured,
	"paid_out":                  models.StateSettled,
	"cancelled":                 models.StateCanceled,
	"customer_approval_denied":  models.StateCanceled,
	"failed":                    models.StateFailed,
	"late_failure_settled":      models.StateFailed,
	"charged_back":              models.StateChargeback,
}

// reverts are actions that undo something the state machine cannot undo.
var reverts = map[string]string{
	"chargeback_cancelled": "The chargeback was cancelled at GoCardless (the money came back).",
}

// informational actions change no state.
var informational = map[string]bool{
	"chargeback_settled":     true,
	"surcharge_fee_debited":  true,
	"surcharge_fee_credited": true,
}

// paymentEventChanges maps one payment event. The linked payment (current,
// not a snapshot) gives amounts, and an unknown current status is reported
// once per payment.
func paymentEventChanges(ev Event, pm Payment, linked bool, flagged map[string]bool) []reconcile.Change {
	pid := ev.Links.Payment
	if pid == "" {
		return nil
	}
	base := reconcile.Change{ProviderID: pid, At: ev.CreatedAt.UTC(), EventID: ev.ID, EventType: ev.ResourceType + "." + ev.Action, RawStatus: ev.Action}
	if linked {
		base.Amount, base.Currency = pm.Amount, strings.ToLower(pm.Currency)
	}
	var out []reconcile.Change
	switch st, ok := actionState[ev.Action]; {
	case ev.Action == "failed" && ev.Details.willRetry():
		// Not final: GoCardless resubmits it (Success+), and the retry's
		// submitted, confirmed and paid_out must still apply.
		c := base
		c.RawStatus = RawFailedWillRetry
		out = append(out, c)
	case ev.Action == "resubmission_requested":
		out = append(out, resubmission(base, ev.Details.Cause == "payment_autoretried"))
	case ok:
		c := base
		c.State = st
		if ev.Action == "paid_out" {
			// links.payout names the payout the payment appears in; the
			// linked payment's own links.payout when the event has none.
			c.PayoutID = ev.Links.Payout
			if c.PayoutID == "" && linked {
				c.PayoutID = pm.Links.Payout
			}
		}
		// late_failure_settled is the payout debit of a late failure whose
		// own failed event established it; it stands in only when that
		// event is outside the window (docs/providers/gocardless.md).
		c.Fallback = ev.Action == "late_failure_settled"
		out = append(out, c)
	case reverts[ev.Action] != "":
		c := base
		c.Revert = reverts[ev.Action]
		out = append(out, c)
	case informational[ev.Action]:
	default:
		c := base
		c.Unknown = true
		c.RawStatus = "action " + ev.Action
		out = append(out, c)
	}
	if linked && !flagged[pid] {
		if _, ok := StatusState(pm.Status); !ok {
			flagged[pid] = true
			c := base
			c.State, c.Revert, c.Unknown, c.RawStatus = models.StateNone, "", true, pm.Status
			out = append(out, c)
		}
	}
	return out
}

// resubmission maps a payments.resubmission_requested. After a failure
// GoCardless retries (retried: details.cause payment_autoretried, or the
// window's preceding failure had will_attempt_retry true) it is the normal
// flow: no state change, and the retry's later facts apply. It is a drift
// item only for a local row already recorded failed, which the state
// machine cannot leave. After a final failure (a merchant's retry through
// the API) it is a drift item whatever the local state.
func resubmission(base reconcile.Change, retried bool) reconcile.Change {
	c := base
	c.State = models.StateNone
	if retried {
		c.RawStatus = RawRetried
		c.Revert, c.RevertOnlyFrom = revertRetriedButFailedLocally, []models.State{models.StateFailed}
		return c
	}
	c.RawStatus = "resubmission_requested"
	c.Revert, c.RevertOnlyFrom = revertResubmitted, nil
	return c
}

// retryFacts revises, per payment in provider-time order, the facts whose
// meaning depends on the payment's latest failure in the window: a
// resubmission after a failure GoCardless retries is normal, one after a
// final failure is drift; a late failure's settlement against a payout is
// final (failed) unless GoCardless retries that failure. Facts with no
// failure before them in the window keep their own mapping (a
// resubmission by its details.cause; late_failure_settled → failed).
// items are sorted (sortItems) and are the whole window; ListChanges,
// which reads a window in slices, runs the two passes itself.
func retryFacts(items []item) {
	retryFailures(items, map[string]int{})
	judgeResubmissions(items)
}

// sortItems sorts items in the order they are delivered: created_at, then
// id.
func sortItems(items []item) {
	sort.SliceStable(items, func(i, j int) bool {
		if !items[i].ev.At.Equal(items[j].ev.At) {
			return items[i].ev.At.Before(items[j].ev.At)
		}
		return items[i].ev.ID < items[j].ev.ID
	})
}

// factAt is a change by position: items[i].changes[k].
type factAt struct{ i, k int }

// judgeResubmissions is retryFacts's backward pass. A normal resubmission
// reports a local failed row only when nothing later in the window fails
// the payment again: a retry that failed finally ends failed rightly
// (whether the engine reads RevertOnlyFrom before or after its write). It
// clears the report of those that something later in items fails, and
// returns the others, whose answer lies after items.
func judgeResubmissions(items []item) []factAt {
	failedLater := map[string]bool{}
	var open []factAt
	for i := len(items) - 1; i >= 0; i-- {
		for k := len(items[i].changes) - 1; k >= 0; k-- {
			c := &items[i].changes[k]
			switch {
			case c.Unknown || c.ProviderID == "":
			case c.State == models.StateFailed:
				failedLater[c.ProviderID] = true
			case c.RawStatus == RawRetried && len(c.RevertOnlyFrom) > 0:
				if failedLater[c.ProviderID] {
					c.Revert, c.RevertOnlyFrom = "", nil
				} else {
					open = append(open, factAt{i, k})
				}
			}
		}
	}
	return open
}

// The kinds of a payment's latest failure (retryFailures).
const (
	noFailure = iota
	failedWillRetry
	failedFinally
)

// retryFailures is retryFacts's forward pass. last holds each payment's
// latest failure before items (noFailure when absent) and is updated
// through them, so that a window read in slices carries it from one slice
// to the next.
func retryFailures(items []item, last map[string]int) {
	for i := range items {
		for k := range items[i].changes {
			c := &items[i].changes[k]
			if c.Unknown || c.ProviderID == "" {
				continue
			}
			switch c.EventType {
			case "payments.failed":
				last[c.ProviderID] = failedFinally
				if c.RawStatus == RawFailedWillRetry {
					last[c.ProviderID] = failedWillRetry
				}
			case "payments.resubmission_requested":
				switch last[c.ProviderID] {
				case failedWillRetry:
					*c = resubmission(*c, true)
				case failedFinally:
					*c = resubmission(*c, false)
				}
			case "payments.late_failure_settled":
				if last[c.ProviderID] == failedWillRetry {
					c.State, c.RawStatus = models.StateNone, RawLateFailureSettledWillRetry
				}
			}
		}
	}
}

// fetchedChange maps a re-fetched payment (stuck path) whose events are not
// known: see fetchedChanges.
func fetchedChange(pm Payment, raw json.RawMessage) reconcile.Change {
	return fetchedChanges(pm, raw, nil, nil)
}

// fetchedChanges maps a re-fetched payment (stuck path) to a change with a
// deterministic event id and the most specific time GoCardless gives: the
// newest of the payment's own events that establishes its status (evs,
// GET /events?payment=), the newest refund's creation for a payment whose
// refunds reach its amount (refunds), and only when no event is found (older
// than the event log) the charge date, a day. A failed payment with
// retry_if_possible whose latest failure says will_attempt_retry is not
// final and moves no state.
func fetchedChanges(pm Payment, raw json.RawMessage, evs []Event, refunds []Refund) reconcile.Change {
	c := reconcile.Change{ProviderID: pm.ID, At: pm.CreatedAt.UTC(), Amount: pm.Amount, Currency: strings.ToLower(pm.Currency),
		AmountRefunded: pm.AmountRefunded, RawStatus: pm.Status, Inferred: true, Payload: raw, PayoutID: pm.Links.Payout}
	st, ok := StatusState(pm.Status)
	if !ok {
		c.Unknown = true
		c.PayoutID = ""
		return c
	}
	if st != models.StateSettled {
		c.PayoutID = ""
	}
	newer := func(a, b *Event) bool {
		return b == nil || a.CreatedAt.After(b.CreatedAt) || a.CreatedAt.Equal(b.CreatedAt) && a.ID > b.ID
	}
	var newest, lastFailed *Event
	for i := range evs {
		ev := &evs[i]
		if ev.Links.Payment != pm.ID {
			continue
		}
		if actionState[ev.Action] == st && newer(ev, newest) {
			newest = ev
		}
		if ev.Action == "failed" && newer(ev, lastFailed) {
			lastFailed = ev
		}
	}
	// Whether a retry is coming is said by the latest failed event, even
	// when a late_failure_settled debit followed it.
	if st == models.StateFailed && lastFailed != nil && pm.RetryIfPossible && lastFailed.Details.willRetry() {
		c.RawStatus, c.Payload, c.PayoutID = RawFailedWillRetry, nil, ""
		return c
	}
	c.State = st
	switch {
	case newest != nil:
		c.At = newest.CreatedAt.UTC()
	case st == models.StateCaptured || st == models.StateSettled:
		// No event left in the log: the charge date, when Bacs collected the
		// money, is the best time GoCardless gives.
		if d, err := time.Parse(time.DateOnly, pm.ChargeDate); err == nil && d.After(c.At) {
			c.At = d.UTC()
		}
	}
	if pm.Amount > 0 && pm.AmountRefunded >= pm.Amount && (st == models.StateSettled || st == models.StateCaptured) {
		c.State = models.StateRefunded
		for _, r := range refunds {
			if r.Links.Payment == pm.ID && r.CreatedAt.After(c.At) {
				c.At = r.CreatedAt.UTC() // GoCardless counts a refund from its creation
			}
		}
		c.RefundNote = refundMeaning
	}
	return stamped(c)
}

// stamped gives a change found without an event (its State set) the
// deterministic event id and type of DESIGN section 5.
func stamped(c reconcile.Change) reconcile.Change {
	c.EventType = "reconciler.payment." + string(c.State)
	c.EventID = reconcile.SyntheticEventID(c.ProviderID, c.State, c.At)
	return c
}
