package stripefake

import (
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/reconciler/reconciler/internal/fakekit"
)

var kindObject = [kindCount]string{"payment_intent", "charge", "refund", "dispute", "payout", "balance_transaction", "event", "customer"}

func horizonCutoff(now time.Time) int64 {
	t := now.Add(-Horizon)
	c := t.Unix()
	if t.Nanosecond() > 0 {
		c++
	}
	return c
}

// lookup decodes an id of kind k, or returns a 404.
func (a *Account) lookup(k kind, id string, count int) (int32, *apiError) {
	i := a.ids.decode(k, id, count)
	if i < 0 {
		return -1, notFound(kindObject[k], id, "id")
	}
	return int32(i), nil
}

// resolveCursor turns starting_after / ending_before into a cursor.
func (a *Account) resolveCursor(p *listParams, k kind, count int, createdOf func(int32) int64, minCreated int64) (*cursor, bool, *apiError) {
	id, param, before := p.cursorID()
	if id == "" {
		return nil, false, nil
	}
	i := a.ids.decode(k, id, count)
	if i < 0 || createdOf(int32(i)) < minCreated {
		e := notFound(kindObject[k], id, param)
		e.status = 400
		return nil, false, e
	}
	return &cursor{created: createdOf(int32(i)), idx: int32(i)}, before, nil
}

func (a *Account) renderList(url string, items []int32, hasMore bool, render func([]byte, int32) []byte) []byte {
	b := make([]byte, 0, 64+len(items)*1024)
	b = append(b, `{"object":"list","data":[`...)
	for k, i := range items {
		if k > 0 {
			b = append(b, ',')
		}
		b = render(b, i)
	}
	b = append(b, `],"has_more":`...)
	b = strconv.AppendBool(b, hasMore)
	b = appendStrField(b, "url", url)
	return append(b, "}\n"...)
}

func typeMatcher(pattern string) func(string) bool {
	if prefix, ok := strings.CutSuffix(pattern, "*"); ok {
		return func(t string) bool { return strings.HasPrefix(t, prefix) }
	}
	return func(t string) bool { return t == pattern }
}

func listEvents(a *Account, _ string, q url.Values, now time.Time) ([]byte, *apiError) {
	p, e := parseList(q)
	if e != nil {
		return nil, e
	}
	types := arrayParam(q, "types")
	typ := q.Get("type")
	if len(types) > 20 {
		return nil, badRequest("", "types", "You may pass at most 20 types (got %d).", len(types))
	}
	if len(types) > 0 && typ != "" {
		return nil, badRequest("parameters_exclusive", "types", "You may pass either `type` or `types`, but not both.")
	}
	if typ != "" {
		types = []string{typ}
	}
	cutoff := horizonCutoff(now)
	a.rlock()
	defer a.mu.RUnlock()
	var match func(int32) bool
	if len(types) > 0 {
		allowed := make([]bool, len(a.types))
		for _, t := range types {
			m := typeMatcher(t)
			for c, name := range a.types {
				if m(name) {
					allowed[c] = true
				}
			}
		}
		match = func(i int32) bool { return allowed[a.events[i].typ] }
	}
	cur, before, e := a.resolveCursor(&p, kEvent, len(a.events), a.eventCreated, cutoff)
	if e != nil {
		return nil, e
	}
	items, more := paginate(view{a.eventOrder.Idx, a.eventCreated, match}, max(p.gte, cutoff), p.lte, cur, before, p.limit)
	return a.renderList("/v1/events", items, more, a.appendEvent), nil
}

func getEvent(a *Account, id string, q url.Values, now time.Time) ([]byte, *apiError) {
	if _, e := expandSet(q); e != nil {
		return nil, e
	}
	a.mu.RLock()
	defer a.mu.RUnlock()
	i, e := a.lookup(kEvent, id, len(a.events))
	if e != nil {
		return nil, e
	}
	if a.events[i].created < horizonCutoff(now) {
		return nil, notFound("event", id, "id")
	}
	return append(a.appendEvent(nil, i), '\n'), nil
}

func piExpand(set map[string]bool, prefix string) int {
	switch {
	case set[prefix+"latest_charge.refunds"]:
		return expandChargeRefunds
	case set[prefix+"latest_charge"]:
		return expandCharge
	}
	return expandNone
}

func listPaymentIntents(a *Account, _ string, q url.Values, _ time.Time) ([]byte, *apiError) {
	p, e := parseList(q)
	if e != nil {
		return nil, e
	}
	set, e := expandSet(q, "data.latest_charge", "data.latest_charge.refunds")
	if e != nil {
		return nil, e
	}
	exp := piExpand(set, "data.")
	a.rlock()
	defer a.mu.RUnlock()
	cur, before, e := a.resolveCursor(&p, kPI, len(a.pis), a.piCreated, -1<<63)
	if e != nil {
		return nil, e
	}
	items, more := paginate(view{a.piOrder.Idx, a.piCreated, nil}, p.gte, p.lte, cur, before, p.limit)
	return a.renderList("/v1/payment_intents", items, more, func(b []byte, i int32) []byte { return a.appendPI(b, i, exp) }), nil
}

func getPaymentIntent(a *Account, id string, q url.Values, _ time.Time) ([]byte, *apiError) {
	set, e := expandSet(q, "latest_charge", "latest_charge.refunds")
	if e != nil {
		return nil, e
	}
	a.mu.RLock()
	defer a.mu.RUnlock()
	i, e := a.lookup(kPI, id, len(a.pis))
	if e != nil {
		return nil, e
	}
	return append(a.appendPI(nil, i, piExpand(set, "")), '\n'), nil
}

func getCharge(a *Account, id string, q url.Values, _ time.Time) ([]byte, *apiError) {
	set, e := expandSet(q, "refunds")
	if e != nil {
		return nil, e
	}
	a.mu.RLock()
	defer a.mu.RUnlock()
	i, e := a.lookup(kCharge, id, len(a.charges))
	if e != nil {
		return nil, e
	}
	return append(a.appendCharge(nil, i, set["refunds"]), '\n'), nil
}

func listRefunds(a *Account, _ string, q url.Values, _ time.Time) ([]byte, *apiError) {
	p, e := parseList(q)
	if e != nil {
		return nil, e
	}
	if _, e := expandSet(q); e != nil {
		return nil, e
	}
	a.rlock()
	defer a.mu.RUnlock()
	items := a.refundOrder.Idx
	if id := q.Get("charge"); id != "" {
		ch, e := a.lookup(kCharge, id, len(a.charges))
		if e != nil {
			e.param = "charge"
			return nil, e
		}
		items = append([]int32(nil), a.charges[ch].refunds...)
		fakekit.Ascending(items, a.refundCreated)
	}
	var match func(int32) bool
	if id := q.Get("payment_intent"); id != "" {
		pi, e := a.lookup(kPI, id, len(a.pis))
		if e != nil {
			e.param = "payment_intent"
			return nil, e
		}
		match = func(i int32) bool { return a.charges[a.refunds[i].charge].pi == pi }
	}
	cur, before, e := a.resolveCursor(&p, kRefund, len(a.refunds), a.refundCreated, -1<<63)
	if e != nil {
		return nil, e
	}
	out, more := paginate(view{items, a.refundCreated, match}, p.gte, p.lte, cur, before, p.limit)
	return a.renderList("/v1/refunds", out, more, a.appendRefund), nil
}

func getRefund(a *Account, id string, q url.Values, _ time.Time) ([]byte, *apiError) {
	if _, e := expandSet(q); e != nil {
		return nil, e
	}
	a.mu.RLock()
	defer a.mu.RUnlock()
	i, e := a.lookup(kRefund, id, len(a.refunds))
	if e != nil {
		return nil, e
	}
	return append(a.appendRefund(nil, i), '\n'), nil
}

func getDispute(a *Account, id string, q url.Values, _ time.Time) ([]byte, *apiError) {
	if _, e := expandSet(q); e != nil {
		return nil, e
	}
	a.mu.RLock()
	defer a.mu.RUnlock()
	i, e := a.lookup(kDispute, id, len(a.disputes))
	if e != nil {
		return nil, e
	}
	return append(a.appendDispute(nil, i), '\n'), nil
}

func listPayouts(a *Account, _ string, q url.Values, _ time.Time) ([]byte, *apiError) {
	p, e := parseList(q)
	if e != nil {
		return nil, e
	}
	if _, e := expandSet(q); e != nil {
		return nil, e
	}
	var match func(int32) bool
	if st, ok := q["status"]; ok && len(st) > 0 {
		switch want := st[0]; want {
		case "paid", "pending", "in_transit", "canceled", "failed":
			match = func(i int32) bool { return a.payoutStatus(i) == want }
		default:
			return nil, badRequest("", "status",
				"Invalid status: must be one of pending, paid, failed, in_transit, or canceled")
		}
	}
	a.rlock()
	defer a.mu.RUnlock()
	cur, before, e := a.resolveCursor(&p, kPayout, len(a.payouts), a.payoutCreated, -1<<63)
	if e != nil {
		return nil, e
	}
	out, more := paginate(view{a.payoutOrder.Idx, a.payoutCreated, match}, p.gte, p.lte, cur, before, p.limit)
	return a.renderList("/v1/payouts", out, more, a.appendPayout), nil
}

func getPayout(a *Account, id string, q url.Values, _ time.Time) ([]byte, *apiError) {
	if _, e := expandSet(q); e != nil {
		return nil, e
	}
	a.mu.RLock()
	defer a.mu.RUnlock()
	i, e := a.lookup(kPayout, id, len(a.payouts))
	if e != nil {
		return nil, e
	}
	return append(a.appendPayout(nil, i), '\n'), nil
}

func listBalanceTransactions(a *Account, _ string, q url.Values, _ time.Time) ([]byte, *apiError) {
	p, e := parseList(q)
	if e != nil {
		return nil, e
	}
	set, e := expandSet(q, "data.source")
	if e != nil {
		return nil, e
	}
	a.rlock()
	defer a.mu.RUnlock()
	items := a.btOrder.Idx
	if id := q.Get("payout"); id != "" {
		po, e := a.lookup(kPayout, id, len(a.payouts))
		if e != nil {
			e.param = "payout"
			return nil, e
		}
		items = append([]int32(nil), a.payouts[po].bts...)
		fakekit.Ascending(items, a.btCreated)
	}
	var match func(int32) bool
	if t := q.Get("type"); t != "" {
		match = func(i int32) bool { return btTypeName[a.bts[i].typ] == t }
	}
	cur, before, e := a.resolveCursor(&p, kTxn, len(a.bts), a.btCreated, -1<<63)
	if e != nil {
		return nil, e
	}
	out, more := paginate(view{items, a.btCreated, match}, p.gte, p.lte, cur, before, p.limit)
	exp := set["data.source"]
	return a.renderList("/v1/balance_transactions", out, more, func(b []byte, i int32) []byte { return a.appendBT(b, i, exp) }), nil
}

func getBalanceTransaction(a *Account, id string, q url.Values, _ time.Time) ([]byte, *apiError) {
	set, e := expandSet(q, "source")
	if e != nil {
		return nil, e
	}
	a.mu.RLock()
	defer a.mu.RUnlock()
	i, e := a.lookup(kTxn, id, len(a.bts))
	if e != nil {
		return nil, e
	}
	return append(a.appendBT(nil, i, set["source"]), '\n'), nil
}
