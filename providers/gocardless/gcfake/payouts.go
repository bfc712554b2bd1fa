package gcfake

import (
	"net/url"
	"strconv"
	"strings"
)

// payoutItemsMonths is how far back payout items are served: "Payout items
// can only be retrieved for payouts created in the last 6 months. Requests
// for older payouts will return an HTTP status 410 Gone."
const payoutItemsMonths = 6

func listPayouts(s *Server, id string, q url.Values) ([]byte, *apiError) {
	p, e := parseList(q)
	if e != nil {
		return nil, e
	}
	s.rlock()
	defer s.mu.RUnlock()
	cur, before, e := s.resolveCursor(p, kPayout, len(s.payouts), s.payoutCreated)
	if e != nil {
		return nil, e
	}
	v := view{items: s.payoutOrder.Idx, createdOf: s.payoutCreated}
	if st := q.Get("status"); st != "" {
		want := map[uint16]bool{}
		for _, x := range strings.Split(st, ",") {
			if c, ok := s.statusIdx[strings.TrimSpace(x)]; ok {
				want[c] = true
			}
		}
		v.match = func(i int32) bool { return want[s.payouts[i].status] }
	}
	pg := paginate(v, p.gte, p.lte, cur, before, p.limit)
	b := make([]byte, 0, 64+len(pg.items)*300)
	b = append(b, `{"payouts":[`...)
	for i, po := range pg.items {
		if i > 0 {
			b = append(b, ',')
		}
		b = s.appendPayout(b, po)
	}
	b = append(b, ']')
	b = s.appendMeta(b, kPayout, pg, p.limit)
	return append(b, "}\n"...), nil
}

// listPayoutItems serves GET /payout_items?payout=PO…: the payout's items
// in the order they were added, `limit` (up to 500, default 50) a page,
// with opaque after / before cursors.
func listPayoutItems(s *Server, id string, q url.Values) ([]byte, *apiError) {
	poID := q.Get("payout")
	if poID == "" {
		return nil, badRequest("validation_failed", "missing_parameter", "payout is required")
	}
	p, e := parseList(q)
	if e != nil {
		return nil, e
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	po := s.ids.decode(kPayout, poID, len(s.payouts))
	if po < 0 {
		return nil, notFound("payout", poID)
	}
	o := &s.payouts[po]
	if msTime(o.created).Before(s.now().AddDate(0, -payoutItemsMonths, 0)) {
		// The status is documented; the error's type and reason are not.
		return nil, &apiError{status: 410, typ: "invalid_api_usage", reason: "gone",
			message: "Payout items are only available for payouts created in the last 6 months"}
	}
	n := len(o.items)
	lo, hi := 0, n // the page is items[lo:hi]
	if c := p.after + p.before; c != "" {
		pos := s.ids.decode(kItemCursor, c, n)
		if pos < 0 {
			param := "after"
			if p.before != "" {
				param = "before"
			}
			return nil, badRequest("invalid_api_usage", "cursor_not_found",
				"The cursor given in '"+param+"' ("+c+") does not exist")
		}
		if p.after != "" {
			lo = pos + 1
		} else {
			hi, lo = pos, max(pos-p.limit, 0)
		}
	}
	hi = min(hi, lo+p.limit)
	b := make([]byte, 0, 64+(hi-lo)*200)
	b = append(b, `{"payout_items":[`...)
	for i := lo; i < hi; i++ {
		if i > lo {
			b = append(b, ',')
		}
		b = s.appendPayoutItem(b, o.items[i])
	}
	b = append(b, ']')
	b = append(appendKey(b, "meta"), '{')
	b = append(appendKey(b, "cursors"), '{')
	if hi > lo {
		b = s.appendIDField(b, "before", kItemCursor, int32(lo))
	} else {
		b = appendNull(b, "before")
	}
	if hi > lo && hi < n {
		b = s.appendIDField(b, "after", kItemCursor, int32(hi-1))
	} else {
		b = appendNull(b, "after")
	}
	b = append(b, '}')
	b = appendIntField(b, "limit", int64(p.limit))
	b = append(b, '}')
	return append(b, "}\n"...), nil
}

// appendPayoutItem renders item it of a payout (an event seq, or -1-i for
// fee i). Amounts are strings in minor units "to one decimal place",
// negative for debits; links.refund and links.mandate only for the refund
// types, as documented.
func (s *Server) appendPayoutItem(b []byte, it int32) []byte {
	var typ string
	var amount int64
	pm, rf := int32(-1), int32(-1)
	if it < 0 {
		f := &s.fees[-1-it]
		typ, amount, pm = "gocardless_fee", -f.amount, f.pm
	} else {
		e := &s.events[it]
		action := s.actions[e.action]
		if e.rtype() == rtRefunds {
			rf = e.obj
			pm = s.refunds[rf].pm
			amount = s.refunds[rf].amount
			if action == "funds_returned" {
				typ = "refund_funds_returned"
			} else {
				typ, amount = "payment_refunded", -amount
			}
		} else {
			pm = e.obj
			amount = s.pms[pm].amount
			switch action {
			case "paid_out":
				typ = "payment_paid_out"
			case "late_failure_settled":
				typ, amount = "payment_failed", -amount
			default: // chargeback_settled
				typ, amount = "payment_charged_back", -amount
			}
		}
	}
	b = append(b, '{')
	b = appendStrField(b, "type", typ)
	b = append(appendKey(b, "amount"), '"')
	b = strconv.AppendInt(b, amount, 10)
	b = append(b, `.0"`...)
	b = append(appendKey(b, "taxes"), "[]"...)
	b = append(appendKey(b, "links"), '{')
	b = s.appendIDField(b, "payment", kPayment, pm)
	if rf >= 0 {
		b = s.appendIDField(b, "refund", kRefund, rf)
		b = s.appendIDField(b, "mandate", kMandate, pm)
	}
	b = append(b, '}')
	return append(b, '}')
}
