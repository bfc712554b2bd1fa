package stripefake

import (
	"math"
	"net/url"
	"slices"
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

func listEvents(a *Account, _ string, q url.Values, rq request) ([]byte, *apiError) {
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
	cutoff := horizonCutoff(rq.now)
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

func getEvent(a *Account, id string, q url.Values, rq request) ([]byte, *apiError) {
	if _, e := expandSet(q); e != nil {
		return nil, e
	}
	a.mu.RLock()
	defer a.mu.RUnlock()
	i, e := a.lookup(kEvent, id, len(a.events))
	if e != nil {
		return nil, e
	}
	if a.events[i].created < horizonCutoff(rq.now) {
		return nil, notFound("event", id, "id")
	}
	return append(a.appendEvent(nil, i), '\n'), nil
}

// piExpands are the expansions of a payment intent (after the prefix
// "data." in a list).
var piExpands = []string{"latest_charge", "latest_charge.refunds", "latest_charge.balance_transaction"}

func piExpand(set map[string]bool, prefix string) int {
	e := expandNone
	if set[prefix+"latest_charge"] {
		e |= expandCharge
	}
	if set[prefix+"latest_charge.refunds"] {
		e |= expandCharge | expandRefunds
	}
	if set[prefix+"latest_charge.balance_transaction"] {
		e |= expandCharge | expandBT
	}
	return e
}

func prefixed(prefix string, names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = prefix + n
	}
	return out
}

func listPaymentIntents(a *Account, _ string, q url.Values, rq request) ([]byte, *apiError) {
	p, e := parseList(q)
	if e != nil {
		return nil, e
	}
	set, e := expandSet(q, prefixed("data.", piExpands)...)
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
	return a.renderList("/v1/payment_intents", items, more, func(b []byte, i int32) []byte { return a.appendPI(b, i, exp, rq.rv) }), nil
}

func getPaymentIntent(a *Account, id string, q url.Values, rq request) ([]byte, *apiError) {
	set, e := expandSet(q, piExpands...)
	if e != nil {
		return nil, e
	}
	a.mu.RLock()
	defer a.mu.RUnlock()
	i, e := a.lookup(kPI, id, len(a.pis))
	if e != nil {
		return nil, e
	}
	return append(a.appendPI(nil, i, piExpand(set, ""), rq.rv), '\n'), nil
}

func getCharge(a *Account, id string, q url.Values, rq request) ([]byte, *apiError) {
	set, e := expandSet(q, "refunds", "balance_transaction")
	if e != nil {
		return nil, e
	}
	a.mu.RLock()
	defer a.mu.RUnlock()
	i, e := a.lookup(kCharge, id, len(a.charges))
	if e != nil {
		return nil, e
	}
	exp := expandNone
	if set["refunds"] {
		exp |= expandRefunds
	}
	if set["balance_transaction"] {
		exp |= expandBT
	}
	return append(a.appendCharge(nil, i, exp, rq.rv), '\n'), nil
}

func listRefunds(a *Account, _ string, q url.Values, rq request) ([]byte, *apiError) {
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
	if rq.rv.basil() {
		match = func(i int32) bool { return !a.refunds[i].release }
	}
	if id := q.Get("payment_intent"); id != "" {
		pi, e := a.lookup(kPI, id, len(a.pis))
		if e != nil {
			e.param = "payment_intent"
			return nil, e
		}
		match = func(i int32) bool { return a.charges[a.refunds[i].charge].pi == pi && !a.refundHidden(i, rq.rv) }
	}
	cur, before, e := a.resolveCursor(&p, kRefund, len(a.refunds), a.refundCreated, -1<<63)
	if e != nil {
		return nil, e
	}
	out, more := paginate(view{items, a.refundCreated, match}, p.gte, p.lte, cur, before, p.limit)
	return a.renderList("/v1/refunds", out, more, a.appendRefund), nil
}

func getRefund(a *Account, id string, q url.Values, rq request) ([]byte, *apiError) {
	if _, e := expandSet(q); e != nil {
		return nil, e
	}
	a.mu.RLock()
	defer a.mu.RUnlock()
	i, e := a.lookup(kRefund, id, len(a.refunds))
	if e != nil {
		return nil, e
	}
	if a.refundHidden(i, rq.rv) {
		return nil, notFound("refund", id, "id")
	}
	return append(a.appendRefund(nil, i), '\n'), nil
}

func getDispute(a *Account, id string, q url.Values, rq request) ([]byte, *apiError) {
	if _, e := expandSet(q); e != nil {
		return nil, e
	}
	a.mu.RLock()
	defer a.mu.RUnlock()
	i, e := a.lookup(kDispute, id, len(a.disputes))
	if e != nil {
		return nil, e
	}
	return append(a.appendDispute(nil, i, rq.rv), '\n'), nil
}

func listPayouts(a *Account, _ string, q url.Values, rq request) ([]byte, *apiError) {
	p, e := parseList(q)
	if e != nil {
		return nil, e
	}
	if _, e := expandSet(q); e != nil {
		return nil, e
	}
	arrGTE, arrLTE, e := parseRange(q, "arrival_date")
	if e != nil {
		return nil, e
	}
	want := ""
	if st, ok := q["status"]; ok && len(st) > 0 {
		switch want = st[0]; want {
		case "paid", "pending", "in_transit", "canceled", "failed":
		default:
			return nil, badRequest("", "status",
				"Invalid status: must be one of pending, paid, failed, in_transit, or canceled")
		}
	}
	var match func(int32) bool
	if want != "" || arrGTE != math.MinInt64 || arrLTE != math.MaxInt64 {
		match = func(i int32) bool {
			arr := a.payouts[i].arrival
			return (want == "" || a.payoutStatus(i) == want) && arr >= arrGTE && arr <= arrLTE
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

func getPayout(a *Account, id string, q url.Values, rq request) ([]byte, *apiError) {
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

func listBalanceTransactions(a *Account, _ string, q url.Values, rq request) ([]byte, *apiError) {
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
		switch a.payouts[po].recon {
		case reconNotApplicable:
			return nil, badRequest("", "payout", "Balance transaction history can only be filtered on automatic transfers, not manual.")
		case reconInProgress:
			// Still being reconciled: only the older half is listed yet.
			items = a.payouts[po].bts[:len(a.payouts[po].bts)/2]
		default:
			items = a.payouts[po].bts
		}
		items = slices.Clone(items) // payout kept them ascending
		fakekit.Ascending(items, a.btCreated)
	}
	var preds []func(int32) bool
	if t := q.Get("type"); t != "" {
		preds = append(preds, func(i int32) bool { return btTypeName[a.bts[i].typ] == t })
	}
	if id := q.Get("source"); id != "" {
		k, n := a.decodeSource(id)
		preds = append(preds, func(i int32) bool { return a.bts[i].src == n && a.btSourceKind(i) == k })
	}
	if rq.rv.basil() {
		preds = append(preds, func(i int32) bool { return !a.btHidden(i, rq.rv) })
	}
	cur, before, e := a.resolveCursor(&p, kTxn, len(a.bts), a.btCreated, -1<<63)
	if e != nil {
		return nil, e
	}
	out, more := paginate(view{items, a.btCreated, all(preds)}, p.gte, p.lte, cur, before, p.limit)
	exp := set["data.source"]
	return a.renderList("/v1/balance_transactions", out, more, func(b []byte, i int32) []byte { return a.appendBT(b, i, exp, rq.rv) }), nil
}

// decodeSource decodes a balance transaction source id (a charge, refund or
// dispute of the account); n is -1 for anything else, which matches
// nothing.
func (a *Account) decodeSource(id string) (kind, int32) {
	for _, k := range []kind{kCharge, kRefund, kDispute} {
		var count int
		switch k {
		case kCharge:
			count = len(a.charges)
		case kRefund:
			count = len(a.refunds)
		default:
			count = len(a.disputes)
		}
		if n := a.ids.decode(k, id, count); n >= 0 {
			return k, int32(n)
		}
	}
	return kCharge, -1
}

// all is the conjunction of the predicates (nil when there are none).
func all(preds []func(int32) bool) func(int32) bool {
	switch len(preds) {
	case 0:
		return nil
	case 1:
		return preds[0]
	}
	return func(i int32) bool {
		for _, p := range preds {
			if !p(i) {
				return false
			}
		}
		return true
	}
}

func getBalanceTransaction(a *Account, id string, q url.Values, rq request) ([]byte, *apiError) {
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
	if a.btHidden(i, rq.rv) {
		return nil, notFound("balance_transaction", id, "id")
	}
	return append(a.appendBT(nil, i, set["source"], rq.rv), '\n'), nil
}
