package stripefake

import (
	"encoding/json"
	"net/url"
	"strings"
)

// What object listing (the provider's path 3) reads besides the lists the
// event and stuck paths read: GET /v1/refunds and GET /v1/disputes with
// expand[]=data.payment_intent, which Stripe allows on any list whose objects
// carry an expandable id ("Expansions on list requests start with the data
// property", API reference, Expanding Responses), so that a listing can tell
// the refunds and disputes of payments created before its window.

// listExpansions wraps the list handler of collection (a path segment after
// /v1/) with the expansions it supports beyond its own.
func listExpansions(collection string, h handler) handler {
	if h == nil || (collection != "refunds" && collection != "disputes") {
		return h
	}
	return func(a *Account, id string, q url.Values, rq request) ([]byte, *apiError) {
		exp := arrayParam(q, "expand")
		want := false
		for _, e := range exp {
			if e == "data.payment_intent" {
				want = true
			}
		}
		if !want {
			return h(a, id, q, rq)
		}
		for _, e := range exp {
			if e != "data.payment_intent" {
				return nil, badRequest("", "expand", "This property cannot be expanded (%s).", e)
			}
		}
		body, e := h(a, id, withoutExpand(q), rq)
		if e != nil {
			return nil, e
		}
		return a.expandPaymentIntents(body, rq)
	}
}

func withoutExpand(q url.Values) url.Values {
	out := url.Values{}
	for k, v := range q {
		if k != "expand" && !strings.HasPrefix(k, "expand[") {
			out[k] = v
		}
	}
	return out
}

// expandPaymentIntents replaces the payment_intent id of each object of a
// rendered list by the payment intent itself (its latest_charge an id).
func (a *Account) expandPaymentIntents(body []byte, rq request) ([]byte, *apiError) {
	var list struct {
		Object  string                       `json:"object"`
		Data    []map[string]json.RawMessage `json:"data"`
		HasMore bool                         `json:"has_more"`
		URL     string                       `json:"url"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		return nil, &apiError{status: 500, typ: "api_error", message: "stripefake: " + err.Error()}
	}
	a.mu.RLock()
	for _, obj := range list.Data {
		var id string
		if json.Unmarshal(obj["payment_intent"], &id) != nil || id == "" {
			continue
		}
		if i := a.ids.decode(kPI, id, len(a.pis)); i >= 0 {
			obj["payment_intent"] = a.appendPI(nil, int32(i), expandNone, rq.rv)
		}
	}
	a.mu.RUnlock()
	b, err := json.Marshal(list)
	if err != nil {
		return nil, &apiError{status: 500, typ: "api_error", message: "stripefake: " + err.Error()}
	}
	return append(b, '\n'), nil
}
