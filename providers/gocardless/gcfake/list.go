package gcfake

import (
	"math"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"
)

// cursor is the (created, index) key of an after / before object.
type cursor struct {
	created int64
	idx     int32
}

// view is a collection in ascending (created, index) order.
type view struct {
	items     []int32
	createdOf func(int32) int64
	match     func(int32) bool // nil: every item
}

// page is one page of a list, in list order (newest first).
type page struct {
	items []int32
	older bool // matching items older than the page's last item remain
}

// paginate returns one page of the items with gte <= created <= lte that
// match: the newest `limit` ones, or those older than the cursor (after), or
// the `limit` ones immediately newer than the cursor (before). Positions are
// found by binary search; only the page and the item past it are scanned
// (plus skipped non-matching items).
func paginate(v view, gte, lte int64, cur *cursor, before bool, limit int) page {
	n := len(v.items)
	created := func(p int) int64 { return v.createdOf(v.items[p]) }
	lo := sort.Search(n, func(p int) bool { return created(p) >= gte })
	hi := sort.Search(n, func(p int) bool { return created(p) > lte })
	ok := func(p int) bool { return v.match == nil || v.match(v.items[p]) }
	var out []int32
	if cur != nil {
		// first position whose key is >= the cursor's
		ge := sort.Search(n, func(p int) bool {
			c := created(p)
			return c > cur.created || c == cur.created && v.items[p] >= cur.idx
		})
		if before {
			gt := ge
			if gt < n && v.items[gt] == cur.idx && created(gt) == cur.created {
				gt++
			}
			start := max(lo, gt)
			for p := start; p < hi && len(out) < limit; p++ {
				if ok(p) {
					out = append(out, v.items[p])
				}
			}
			for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
				out[i], out[j] = out[j], out[i]
			}
			// anything matching at or below the cursor is older
			pg := page{items: out}
			for p := min(start, hi) - 1; p >= lo; p-- {
				if ok(p) {
					pg.older = true
					break
				}
			}
			return pg
		}
		hi = min(hi, ge)
	}
	out = make([]int32, 0, min(limit, max(hi-lo, 0)))
	p := hi - 1
	for ; p >= lo && len(out) < limit; p-- {
		if ok(p) {
			out = append(out, v.items[p])
		}
	}
	pg := page{items: out}
	for ; p >= lo; p-- {
		if ok(p) {
			pg.older = true
			break
		}
	}
	return pg
}

func badRequest(typ, reason, msg string) *apiError {
	return &apiError{status: 400, typ: typ, reason: reason, message: msg}
}

func notFound(what, id string) *apiError {
	return &apiError{status: 404, typ: "invalid_api_usage", reason: "resource_not_found",
		message: "Resource not found: " + what + " " + strconv.Quote(id)}
}

// listParams are the common list parameters.
type listParams struct {
	gte, lte      int64 // inclusive created_at bounds, Unix ms
	limit         int
	after, before string
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

func parseList(q url.Values) (listParams, *apiError) {
	p := listParams{gte: math.MinInt64, lte: math.MaxInt64, limit: 50}
	for _, op := range []string{"gte", "gt", "lte", "lt"} {
		name := "created_at[" + op + "]"
		vs, ok := q[name]
		if !ok || len(vs) == 0 {
			continue
		}
		t, err := time.Parse(time.RFC3339Nano, strings.TrimSpace(vs[0]))
		if err != nil {
			return p, badRequest("invalid_api_usage", "invalid_filter",
				name+" must be an ISO 8601 timestamp, e.g. 2014-01-01T12:00:00.000Z")
		}
		ns := t.UnixNano()
		if t.Year() < 1700 || t.Year() > 2200 {
			return p, badRequest("invalid_api_usage", "invalid_filter", name+" is out of range")
		}
		fl := floorDiv(ns, 1e6) // largest ms <= t
		ce := fl                // smallest ms >= t
		if fl*1e6 != ns {
			ce = fl + 1
		}
		switch op {
		case "gte":
			p.gte = max(p.gte, ce)
		case "gt":
			p.gte = max(p.gte, fl+1)
		case "lte":
			p.lte = min(p.lte, fl)
		case "lt":
			p.lte = min(p.lte, ce-1)
		}
	}
	if vs, ok := q["limit"]; ok && len(vs) > 0 {
		v, err := strconv.Atoi(strings.TrimSpace(vs[0]))
		switch {
		case err != nil || v < 1:
			return p, badRequest("invalid_api_usage", "invalid_filter", "limit must be an integer between 1 and 500")
		case v > 500:
			return p, badRequest("invalid_api_usage", "limit_too_high", "limit must not exceed 500")
		}
		p.limit = v
	}
	p.after, p.before = q.Get("after"), q.Get("before")
	if p.after != "" && p.before != "" {
		return p, badRequest("invalid_api_usage", "invalid_filter", "you may not use both after and before")
	}
	return p, nil
}

// resolveCursor decodes the after / before id of kind k.
func (s *Server) resolveCursor(p listParams, k kind, limit int, createdOf func(int32) int64) (*cursor, bool, *apiError) {
	id, before := p.after, false
	if p.before != "" {
		id, before = p.before, true
	}
	if id == "" {
		return nil, false, nil
	}
	i := s.ids.decode(k, id, limit)
	if i < 0 {
		param := "after"
		if before {
			param = "before"
		}
		return nil, false, badRequest("invalid_api_usage", "cursor_not_found",
			"The cursor given in '"+param+"' ("+id+") does not exist")
	}
	return &cursor{created: createdOf(int32(i)), idx: int32(i)}, before, nil
}

// appendMeta appends the meta object of a list page.
func (s *Server) appendMeta(b []byte, k kind, pg page, limit int) []byte {
	b = append(appendKey(b, "meta"), '{')
	b = append(appendKey(b, "cursors"), '{')
	if len(pg.items) > 0 {
		b = s.appendIDField(b, "before", k, pg.items[0])
	} else {
		b = appendNull(b, "before")
	}
	if len(pg.items) > 0 && pg.older {
		b = s.appendIDField(b, "after", k, pg.items[len(pg.items)-1])
	} else {
		b = appendNull(b, "after")
	}
	b = append(b, '}')
	b = appendIntField(b, "limit", int64(limit))
	return append(b, '}')
}

var knownResourceTypes = map[string]bool{
	"payments": true, "refunds": true, "payouts": true, "mandates": true, "subscriptions": true,
	"instalment_schedules": true, "creditors": true, "billing_requests": true, "customers": true,
}

func listEvents(s *Server, id string, q url.Values) ([]byte, *apiError) {
	p, e := parseList(q)
	if e != nil {
		return nil, e
	}
	rtype := q.Get("resource_type")
	if rtype != "" && !knownResourceTypes[rtype] {
		return nil, badRequest("validation_failed", "invalid_resource_type", "resource_type is not a valid resource type")
	}
	// "Cannot be used together with the … payment, payout, refund …
	// parameters".
	for _, by := range []string{"payment", "refund", "payout"} {
		if rtype != "" && q.Get(by) != "" {
			return nil, badRequest("invalid_api_usage", "invalid_filter", "resource_type cannot be used together with "+by)
		}
	}
	include := q.Get("include")
	switch {
	case include == "":
	case include == "payment" && rtype == "payments", include == "refund" && rtype == "refunds":
	default:
		return nil, badRequest("validation_failed", "invalid_include",
			"include must be the singular of resource_type (payment with resource_type=payments, refund with resource_type=refunds)")
	}
	s.rlock()
	defer s.mu.RUnlock()
	cur, before, e := s.resolveCursor(p, kEvent, len(s.events), s.eventCreated)
	if e != nil {
		return nil, e
	}
	v := view{items: s.eventOrder.Idx, createdOf: s.eventCreated}
	switch rtype {
	case "":
	case "payments":
		v.items = s.typeOrder[rtPayments].Idx
	case "refunds":
		v.items = s.typeOrder[rtRefunds].Idx
	case "creditors":
		v.items = s.typeOrder[rtCreditors].Idx
	default:
		v.items = nil
	}
	// payment (every event of one payment, its refunds' included), refund
	// (every event of one refund), payout (every event whose links.payout
	// is the payout: payments paid_out, late_failure_settled and
	// chargeback_settled, creditors bounced_payout) and action filters; an
	// unknown id matches nothing.
	var matches []func(int32) bool
	if pmID := q.Get("payment"); pmID != "" {
		pm := int32(s.ids.decode(kPayment, pmID, len(s.pms)))
		matches = append(matches, func(i int32) bool { return pm >= 0 && s.eventPM(&s.events[i]) == pm })
	}
	if rfID := q.Get("refund"); rfID != "" {
		rf := int32(s.ids.decode(kRefund, rfID, len(s.refunds)))
		matches = append(matches, func(i int32) bool {
			e := &s.events[i]
			return rf >= 0 && e.rtype() == rtRefunds && e.obj == rf
		})
	}
	if poID := q.Get("payout"); poID != "" {
		po := int32(s.ids.decode(kPayout, poID, len(s.payouts)))
		matches = append(matches, func(i int32) bool { return po >= 0 && s.linkedPayout(i) == po })
	}
	if action := q.Get("action"); action != "" {
		code, ok := s.actionIdx[action]
		matches = append(matches, func(i int32) bool { return ok && s.events[i].action == code })
	}
	if len(matches) > 0 {
		v.match = func(i int32) bool {
			for _, m := range matches {
				if !m(i) {
					return false
				}
			}
			return true
		}
	}
	pg := paginate(v, p.gte, p.lte, cur, before, p.limit)
	b := make([]byte, 0, 64+len(pg.items)*600)
	b = append(b, `{"events":[`...)
	for i, seq := range pg.items {
		if i > 0 {
			b = append(b, ',')
		}
		b = s.appendEvent(b, seq)
	}
	b = append(b, ']')
	if include != "" {
		seen := make(map[int32]bool, len(pg.items))
		if include == "payment" {
			b = append(b, `,"linked":{"payments":[`...)
		} else {
			b = append(b, `,"linked":{"refunds":[`...)
		}
		first := true
		for _, seq := range pg.items {
			o := s.events[seq].obj
			if seen[o] {
				continue
			}
			seen[o] = true
			if !first {
				b = append(b, ',')
			}
			first = false
			if include == "payment" {
				b = s.appendPayment(b, o)
			} else {
				b = s.appendRefund(b, o)
			}
		}
		b = append(b, "]}"...)
	}
	b = s.appendMeta(b, kEvent, pg, p.limit)
	return append(b, "}\n"...), nil
}

func getEvent(s *Server, id string, _ url.Values) ([]byte, *apiError) {
	s.rlock()
	defer s.mu.RUnlock()
	i := s.ids.decode(kEvent, id, len(s.events))
	if i < 0 {
		return nil, notFound("event", id)
	}
	b := append([]byte(`{"events":`), s.appendEvent(nil, int32(i))...)
	return append(b, "}\n"...), nil
}

func listPayments(s *Server, id string, q url.Values) ([]byte, *apiError) {
	p, e := parseList(q)
	if e != nil {
		return nil, e
	}
	s.rlock()
	defer s.mu.RUnlock()
	cur, before, e := s.resolveCursor(p, kPayment, len(s.pms), s.pmCreated)
	if e != nil {
		return nil, e
	}
	v := view{items: s.pmOrder.Idx, createdOf: s.pmCreated}
	if st := q.Get("status"); st != "" {
		want := map[uint16]bool{}
		for _, x := range strings.Split(st, ",") {
			if c, ok := s.statusIdx[strings.TrimSpace(x)]; ok {
				want[c] = true
			}
		}
		v.match = func(i int32) bool { return want[s.pms[i].status] }
	}
	pg := paginate(v, p.gte, p.lte, cur, before, p.limit)
	b := make([]byte, 0, 64+len(pg.items)*600)
	b = append(b, `{"payments":[`...)
	for i, pm := range pg.items {
		if i > 0 {
			b = append(b, ',')
		}
		b = s.appendPayment(b, pm)
	}
	b = append(b, ']')
	b = s.appendMeta(b, kPayment, pg, p.limit)
	return append(b, "}\n"...), nil
}

func getPayment(s *Server, id string, _ url.Values) ([]byte, *apiError) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	i := s.ids.decode(kPayment, id, len(s.pms))
	if i < 0 {
		return nil, notFound("payment", id)
	}
	b := append([]byte(`{"payments":`), s.appendPayment(nil, int32(i))...)
	return append(b, "}\n"...), nil
}

func listRefunds(s *Server, id string, q url.Values) ([]byte, *apiError) {
	p, e := parseList(q)
	if e != nil {
		return nil, e
	}
	s.rlock()
	defer s.mu.RUnlock()
	cur, before, e := s.resolveCursor(p, kRefund, len(s.refunds), s.refundCreated)
	if e != nil {
		return nil, e
	}
	v := view{items: s.refundOrder.Idx, createdOf: s.refundCreated}
	if pmID := q.Get("payment"); pmID != "" {
		pm := int32(s.ids.decode(kPayment, pmID, len(s.pms)))
		v.match = func(i int32) bool { return s.refunds[i].pm == pm }
	}
	pg := paginate(v, p.gte, p.lte, cur, before, p.limit)
	b := make([]byte, 0, 64+len(pg.items)*300)
	b = append(b, `{"refunds":[`...)
	for i, rf := range pg.items {
		if i > 0 {
			b = append(b, ',')
		}
		b = s.appendRefund(b, rf)
	}
	b = append(b, ']')
	b = s.appendMeta(b, kRefund, pg, p.limit)
	return append(b, "}\n"...), nil
}

func getRefund(s *Server, id string, _ url.Values) ([]byte, *apiError) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	i := s.ids.decode(kRefund, id, len(s.refunds))
	if i < 0 {
		return nil, notFound("refund", id)
	}
	b := append([]byte(`{"refunds":`), s.appendRefund(nil, int32(i))...)
	return append(b, "}\n"...), nil
}

func getPayout(s *Server, id string, _ url.Values) ([]byte, *apiError) {
	s.rlock()
	defer s.mu.RUnlock()
	i := s.ids.decode(kPayout, id, len(s.payouts))
	if i < 0 {
		return nil, notFound("payout", id)
	}
	b := append([]byte(`{"payouts":`), s.appendPayout(nil, int32(i))...)
	return append(b, "}\n"...), nil
}
