package stripefake

import (
	"fmt"
	"math"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// cursor is the (created, index) key of a starting_after / ending_before
// object.
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

// paginate returns one page in list order (newest first) of the items with
// gte <= created <= lte that match, after (older than) or before (newer
// than) the cursor, and whether more items exist in the paging direction.
func paginate(v view, gte, lte int64, cur *cursor, before bool, limit int) (out []int32, hasMore bool) {
	n := len(v.items)
	created := func(p int) int64 { return v.createdOf(v.items[p]) }
	lo := sort.Search(n, func(p int) bool { return created(p) >= gte })
	hi := sort.Search(n, func(p int) bool { return created(p) > lte })
	if cur != nil {
		// first position whose key is >= cursor
		ge := sort.Search(n, func(p int) bool {
			c := created(p)
			return c > cur.created || c == cur.created && v.items[p] >= cur.idx
		})
		if before {
			gt := ge
			if gt < n && v.items[gt] == cur.idx && created(gt) == cur.created {
				gt++
			}
			lo = max(lo, gt)
		} else {
			hi = min(hi, ge)
		}
	}
	out = make([]int32, 0, min(limit, max(hi-lo, 0)))
	if cur != nil && before {
		for p := lo; p < hi; p++ {
			i := v.items[p]
			if v.match != nil && !v.match(i) {
				continue
			}
			if len(out) == limit {
				hasMore = true
				break
			}
			out = append(out, i)
		}
		slices.Reverse(out)
		return out, hasMore
	}
	for p := hi - 1; p >= lo; p-- {
		i := v.items[p]
		if v.match != nil && !v.match(i) {
			continue
		}
		if len(out) == limit {
			hasMore = true
			break
		}
		out = append(out, i)
	}
	return out, hasMore
}

// apiError is a Stripe error response.
type apiError struct {
	status  int
	typ     string
	code    string
	message string
	param   string
}

func badRequest(code, param, format string, args ...any) *apiError {
	return &apiError{status: 400, typ: "invalid_request_error", code: code, param: param, message: fmt.Sprintf(format, args...)}
}

func notFound(object, id, param string) *apiError {
	return &apiError{status: 404, typ: "invalid_request_error", code: "resource_missing", param: param,
		message: fmt.Sprintf("No such %s: '%s'", object, id)}
}

// arrayParam collects the values of a Stripe array parameter given as
// name[]=…, as stripe-go's indexed name[0]=…&name[1]=… or as plain name=….
func arrayParam(q url.Values, name string) []string {
	type iv struct {
		i int
		v string
	}
	var idx []iv
	var out []string
	out = append(out, q[name]...)
	out = append(out, q[name+"[]"]...)
	for k, vs := range q {
		if len(k) > len(name)+2 && strings.HasPrefix(k, name+"[") && strings.HasSuffix(k, "]") {
			if i, err := strconv.Atoi(k[len(name)+1 : len(k)-1]); err == nil {
				for _, v := range vs {
					idx = append(idx, iv{i, v})
				}
			}
		}
	}
	slices.SortStableFunc(idx, func(x, y iv) int { return x.i - y.i })
	for _, e := range idx {
		out = append(out, e.v)
	}
	return out
}

// listParams are the common list parameters.
type listParams struct {
	gte, lte      int64 // inclusive created bounds
	limit         int
	startingAfter string
	endingBefore  string
}

func parseInt(q url.Values, name string) (int64, bool, *apiError) {
	s, ok := q[name]
	if !ok || len(s) == 0 {
		return 0, false, nil
	}
	v, err := strconv.ParseInt(strings.TrimSpace(s[0]), 10, 64)
	if err != nil {
		return 0, false, badRequest("parameter_invalid_integer", name, "Invalid integer: %s", s[0])
	}
	return v, true, nil
}

// parseRange parses a timestamp filter given as name=t or
// name[gte|gt|lte|lt]=t into inclusive bounds (MinInt64, MaxInt64 when
// absent).
func parseRange(q url.Values, name string) (gte, lte int64, e *apiError) {
	gte, lte = math.MinInt64, math.MaxInt64
	if v, ok, err := parseInt(q, name); err != nil {
		return gte, lte, err
	} else if ok {
		gte, lte = v, v
	}
	for _, op := range []string{"gte", "gt", "lte", "lt"} {
		v, ok, err := parseInt(q, name+"["+op+"]")
		if err != nil {
			return gte, lte, err
		}
		if !ok {
			continue
		}
		switch op {
		case "gte":
			gte = max(gte, v)
		case "gt":
			if v == math.MaxInt64 {
				gte, lte = 1, 0
			} else {
				gte = max(gte, v+1)
			}
		case "lte":
			lte = min(lte, v)
		case "lt":
			if v == math.MinInt64 {
				gte, lte = 1, 0
			} else {
				lte = min(lte, v-1)
			}
		}
	}
	return gte, lte, nil
}

func parseList(q url.Values) (listParams, *apiError) {
	p := listParams{gte: math.MinInt64, lte: math.MaxInt64, limit: 10}
	var err *apiError
	if p.gte, p.lte, err = parseRange(q, "created"); err != nil {
		return p, err
	}
	if v, ok, err := parseInt(q, "limit"); err != nil {
		return p, err
	} else if ok {
		if v < 1 || v > 100 {
			return p, badRequest("parameter_invalid_integer", "limit",
				"Invalid limit: %d. The limit must be an integer between 1 and 100.", v)
		}
		p.limit = int(v)
	}
	p.startingAfter = q.Get("starting_after")
	p.endingBefore = q.Get("ending_before")
	if p.startingAfter != "" && p.endingBefore != "" {
		return p, badRequest("parameters_exclusive", "ending_before",
			"You may only specify one of these parameters: starting_after, ending_before.")
	}
	return p, nil
}

// cursorID returns the cursor id and parameter name, if any.
func (p *listParams) cursorID() (id, param string, before bool) {
	if p.endingBefore != "" {
		return p.endingBefore, "ending_before", true
	}
	return p.startingAfter, "starting_after", false
}

// expandSet parses expand[] and reports an error for anything not allowed.
func expandSet(q url.Values, allowed ...string) (map[string]bool, *apiError) {
	set := map[string]bool{}
	for _, e := range arrayParam(q, "expand") {
		if !slices.Contains(allowed, e) {
			return nil, badRequest("", "expand", "This property cannot be expanded (%s).", e)
		}
		set[e] = true
	}
	return set, nil
}
