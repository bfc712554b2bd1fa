package stripefake

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"sync"
	"time"
)

// Kinds of corruption CorruptNext applies to event list responses.
const (
	// CorruptTruncated cuts the JSON body in half.
	CorruptTruncated = "truncated"
	// CorruptWrongTypes makes the first event's created a string
	// ("yesterday") and every amount a quoted number ("12"): the whole page
	// fails to decode.
	CorruptWrongTypes = "wrong_types"
	// CorruptWrongObjectTypes leaves every envelope valid and quotes every
	// amount inside the event objects ("amount":"12"): the page decodes,
	// its objects do not.
	CorruptWrongObjectTypes = "wrong_object_types"
	// CorruptUnknownFields adds fields Stripe never sent to every object, at
	// every depth (a newer API version does this): they must be ignored.
	CorruptUnknownFields = "unknown_fields"
	// CorruptAbsurdAmount sets the amount of every payment_intent object to
	// 9e18 (just under the int64 limit).
	CorruptAbsurdAmount = "absurd_amount"
	// CorruptNegativeAmount sets the amount of every payment_intent object
	// to a negative number.
	CorruptNegativeAmount = "negative_amount"
	// CorruptFuture sets every event's created to a year after the fake's now.
	CorruptFuture = "future"
)

// AbsurdAmount is the amount CorruptAbsurdAmount writes.
const AbsurdAmount int64 = 9_000_000_000_000_000_000

// NegativeAmount is the amount CorruptNegativeAmount writes.
const NegativeAmount int64 = -4200

// CorruptedPage is one event list response as served before it was
// corrupted: the ids of its events and their (true) created times.
type CorruptedPage struct {
	Kind    string
	Events  []string
	Created []time.Time
}

type corruptor struct {
	mu        sync.Mutex
	kind      string
	skip, n   int
	corrupted []CorruptedPage
}

// CorruptNext corrupts the next n successful (HTTP 200) responses of the
// event list (GET /v1/events) with kind (one of the Corrupt… constants);
// n = 0 turns it off. Other endpoints are never corrupted.
func (s *Server) CorruptNext(kind string, n int) { s.CorruptAfter(kind, 0, n) }

// CorruptAfter is CorruptNext after skip successful event list responses
// have been served untouched (to hit a page in the middle of a stream: the
// reconciler's first list request finds its anchor event).
func (s *Server) CorruptAfter(kind string, skip, n int) {
	switch kind {
	case CorruptTruncated, CorruptWrongTypes, CorruptWrongObjectTypes, CorruptUnknownFields,
		CorruptAbsurdAmount, CorruptNegativeAmount, CorruptFuture:
	default:
		panic(fmt.Sprintf("stripefake: unknown corruption %q", kind))
	}
	c := &s.corrupt
	c.mu.Lock()
	c.kind, c.skip, c.n = kind, skip, n
	c.mu.Unlock()
}

// Corrupted returns the responses corrupted so far, in order.
func (s *Server) Corrupted() []CorruptedPage {
	c := &s.corrupt
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]CorruptedPage(nil), c.corrupted...)
}

// corruptBody is the hook in serve: it returns the body to send.
func (s *Server) corruptBody(pattern string, status int, body []byte) []byte {
	if pattern != "/v1/events" || status != 200 {
		return body
	}
	c := &s.corrupt
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n <= 0 {
		return body
	}
	if c.skip > 0 {
		c.skip--
		return body
	}
	c.n--
	page := CorruptedPage{Kind: c.kind}
	var list struct {
		Data []struct {
			ID      string `json:"id"`
			Created int64  `json:"created"`
		} `json:"data"`
	}
	if json.Unmarshal(body, &list) == nil {
		for _, e := range list.Data {
			page.Events = append(page.Events, e.ID)
			page.Created = append(page.Created, time.Unix(e.Created, 0).UTC())
		}
	}
	c.corrupted = append(c.corrupted, page)
	return corrupt(c.kind, body, s.now())
}

var (
	amountRe  = regexp.MustCompile(`"amount":(-?[0-9]+)`)
	createdRe = regexp.MustCompile(`"created":[0-9]+`)
)

func corrupt(kind string, body []byte, now time.Time) []byte {
	switch kind {
	case CorruptTruncated:
		return append([]byte(nil), body[:len(body)/2]...)
	case CorruptWrongTypes:
		out := amountRe.ReplaceAll(body, []byte(`"amount":"$1"`))
		// The envelope's created is the first one after "object":"event".
		if i := bytes.Index(out, []byte(`"object":"event"`)); i >= 0 {
			if loc := createdRe.FindIndex(out[i:]); loc != nil {
				s, e := i+loc[0], i+loc[1]
				out = append(out[:s:s], append([]byte(`"created":"yesterday"`), out[e:]...)...)
			}
		}
		return out
	case CorruptWrongObjectTypes:
		return amountRe.ReplaceAll(body, []byte(`"amount":"$1"`))
	}
	v, err := decode(body)
	if err != nil {
		return body
	}
	m, ok := v.(map[string]any)
	if !ok {
		return body
	}
	data, _ := m["data"].([]any)
	switch kind {
	case CorruptUnknownFields:
		addUnknown(v, 0)
	case CorruptAbsurdAmount, CorruptNegativeAmount:
		amount := AbsurdAmount
		if kind == CorruptNegativeAmount {
			amount = NegativeAmount
		}
		for _, e := range data {
			if obj := eventObject(e); obj != nil && obj["object"] == "payment_intent" {
				obj["amount"] = json.Number(strconv.FormatInt(amount, 10))
			}
		}
	case CorruptFuture:
		future := now.AddDate(1, 0, 0).Unix()
		for _, e := range data {
			if ev, ok := e.(map[string]any); ok {
				ev["created"] = json.Number(strconv.FormatInt(future, 10))
			}
		}
	}
	out, err := json.Marshal(v)
	if err != nil {
		return body
	}
	return append(out, '\n')
}

func decode(b []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	err := d.Decode(&v)
	return v, err
}

func eventObject(e any) map[string]any {
	ev, ok := e.(map[string]any)
	if !ok {
		return nil
	}
	data, ok := ev["data"].(map[string]any)
	if !ok {
		return nil
	}
	obj, _ := data["object"].(map[string]any)
	return obj
}

// addUnknown adds fields of every JSON kind to every object under v.
func addUnknown(v any, depth int) {
	switch x := v.(type) {
	case map[string]any:
		for _, child := range x {
			addUnknown(child, depth+1)
		}
		x["x_future_field"] = map[string]any{"nested": []any{json.Number("1"), "two", nil, true}, "depth": json.Number(strconv.Itoa(depth))}
		x["x_future_flag"] = true
		x["x_future_list"] = []any{map[string]any{"id": "xf_1", "object": "unknown_thing"}}
		x["x_future_amount"] = json.Number("123456789012")
		x["x_future_null"] = nil
	case []any:
		for _, child := range x {
			addUnknown(child, depth+1)
		}
	}
}
