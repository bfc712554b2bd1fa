package gocardless

import (
	"encoding/json"
	"fmt"
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

// actionState maps a payment event's action to the state it establishes at
// the event's time.
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
	"chargeback_cancelled":   "The chargeback was cancelled at GoCardless (the money came back).",
	"resubmission_requested": "GoCardless was asked to resubmit the payment after it failed.",
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
	case ok:
		c := base
		c.State = st
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

// fetchedChange maps a re-fetched payment (stuck path) to a change with a
// deterministic event id and the most specific time the object carries.
func fetchedChange(pm Payment, raw json.RawMessage) reconcile.Change {
	c := reconcile.Change{ProviderID: pm.ID, At: pm.CreatedAt.UTC(), Amount: pm.Amount, Currency: strings.ToLower(pm.Currency),
		AmountRefunded: pm.AmountRefunded, RawStatus: pm.Status, Inferred: true, Payload: raw}
	st, ok := StatusState(pm.Status)
	if !ok {
		c.Unknown = true
		return c
	}
	c.State = st
	// The charge date is when Bacs collected the money: the best time GoCardless
	// gives for confirmed and later states.
	if d, err := time.Parse(time.DateOnly, pm.ChargeDate); err == nil && (st == models.StateCaptured || st == models.StateSettled) && d.After(c.At) {
		c.At = d.UTC()
	}
	if pm.Amount > 0 && pm.AmountRefunded >= pm.Amount && (st == models.StateSettled || st == models.StateCaptured) {
		c.State = models.StateRefunded
	}
	c.EventType = "reconciler.payment." + string(c.State)
	c.EventID = fmt.Sprintf("recon:%s:%s:%d", pm.ID, c.State, c.At.Unix())
	return c
}
