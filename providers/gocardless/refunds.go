package gocardless

import (
	"context"
	"fmt"
	"net/url"
	"time"

	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/reconcile"
)

// refundEventChange maps one refunds event (docs/providers/gocardless.md,
// "Refunds"). GoCardless raises the payment's amount_refunded when a refund
// is created, so `created` is the refund fact (total: the payment's total is
// read once, after the listing); paid and refund_settled move no money
// the payment's total does not already count; failed and funds_returned say
// the refund never reached the customer: a conflict for a row that counted
// it. Any other action is reported, never guessed.
func refundEventChange(ev Event, r Refund, pid string) (c reconcile.Change, total bool) {
	if pid == "" {
		return c, false
	}
	c = reconcile.Change{ProviderID: pid, At: ev.CreatedAt.UTC(), EventID: ev.ID, EventType: ev.ResourceType + "." + ev.Action, RawStatus: "refund_" + ev.Action}
	id := ev.Links.Refund
	switch ev.Action {
	case "created":
		c.RefundNote = refundMeaning
		return c, true
	case "paid", "refund_settled":
		return reconcile.Change{}, false
	case "failed", "funds_returned", "bounced", "cancelled":
		what := map[string]string{
			"failed":         "failed at GoCardless: the customer was not refunded, and the funds come back to you in a payout",
			"funds_returned": "was returned at GoCardless: the customer was not refunded, and the funds were credited in a payout",
			"bounced":        "bounced at GoCardless: the customer was not refunded",
			"cancelled":      "was cancelled at GoCardless: the customer was not refunded",
		}[ev.Action]
		amount := ""
		if r.Amount > 0 {
			amount = " of " + models.Money(r.Amount, r.Currency)
		}
		c.Revert = fmt.Sprintf("Refund %s%s %s; amount_refunded still counts it (GoCardless never lowers it).", id, amount, what)
		c.RevertIfRefunded = max(r.Amount, 1)
		return c, false
	}
	c.Unknown = true
	c.RawStatus = "refund action " + ev.Action
	c.Notice = fmt.Sprintf("GoCardless reported refund %s with action %q, which reconciler does not map; nothing was changed.", id, ev.Action)
	return c, false
}

// refundMeaning says which amount_refunded GoCardless keeps.
const refundMeaning = "GoCardless counts a refund in amount_refunded from its creation, before it is paid to the customer."

// payoutBounceLookback is how far before the window a payout that bounced
// may have been created: a bounce follows the payout by days.
const payoutBounceLookback = 30 * 24 * time.Hour

// bouncedPayout maps a creditors event. GoCardless announces a payout that
// bounced after it was paid as the creditor's bounced_payout event
// (docs/providers/gocardless.md, "Payouts"); its payments are never moved
// back: each is a conflict naming the payout, read from the payout's items.
// The event's links.payout names the payout when present; otherwise the
// creditor's bounced payouts of the last 30 days are read.
func (p *Provider) bouncedPayout(ctx context.Context, ev Event, since time.Time) ([]reconcile.Change, error) {
	if ev.Action != "bounced_payout" {
		return nil, nil
	}
	ids := []string{}
	if ev.Links.Payout != "" {
		ids = append(ids, ev.Links.Payout)
	} else {
		q := url.Values{}
		q.Set("status", "bounced")
		q.Set("created_at[gte]", msCeil(since.Add(-payoutBounceLookback)))
		q.Set("limit", "500")
		var pg struct {
			Payouts []struct {
				ID string `json:"id"`
			} `json:"payouts"`
		}
		if err := p.get(ctx, "/payouts", q, &pg); err != nil {
			if unsupported(err) {
				p.log.Warn("gocardless did not list bounced payouts; they are left to verify", "error", err)
				return nil, nil
			}
			return nil, fmt.Errorf("list gocardless bounced payouts: %w", err)
		}
		for _, po := range pg.Payouts {
			ids = append(ids, po.ID)
		}
	}
	var out []reconcile.Change
	for _, po := range ids {
		pms, err := p.payoutPayments(ctx, po)
		if err != nil {
			return nil, err
		}
		for _, pid := range pms {
			out = append(out, reconcile.Change{ProviderID: pid, At: ev.CreatedAt.UTC(), EventID: ev.ID, EventType: ev.ResourceType + "." + ev.Action,
				RawStatus: "payout_bounced",
				Revert:    fmt.Sprintf("Payout %s that paid this payment out bounced at GoCardless after it was paid (the bank returned it; GoCardless can retry it); settled_at and payout_id still name it.", po)})
		}
	}
	return out, nil
}

// payoutPayments lists the payments a payout paid out (GET /payout_items,
// type payment_paid_out). GoCardless serves payout items only for payouts
// created in the last six months (410 Gone otherwise): such a payout names
// no payment, with a warning.
func (p *Provider) payoutPayments(ctx context.Context, po string) ([]string, error) {
	q := url.Values{}
	q.Set("payout", po)
	q.Set("limit", "500")
	var out []string
	for {
		var pg struct {
			Items []struct {
				Type  string `json:"type"`
				Links struct {
					Payment string `json:"payment"`
				} `json:"links"`
			} `json:"payout_items"`
			Meta listMeta `json:"meta"`
		}
		if err := p.get(ctx, "/payout_items", q, &pg); err != nil {
			if unsupported(err) {
				// 410 Gone: payout items exist for six months only.
				p.log.Warn("gocardless serves no items for this payout (items exist for payouts of the last six months); its bounce is left to verify", "payout_id", po, "error", err)
				return nil, nil
			}
			return nil, fmt.Errorf("list gocardless payout items of %s: %w", po, err)
		}
		for _, it := range pg.Items {
			if it.Type == "payment_paid_out" && it.Links.Payment != "" {
				out = append(out, it.Links.Payment)
			}
		}
		after := pg.Meta.next(len(pg.Items))
		if after == "" {
			return out, nil
		}
		q.Set("after", after)
	}
}
