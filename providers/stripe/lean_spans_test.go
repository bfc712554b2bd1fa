package stripe

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/valyala/fastjson"
)

// An event's payload is its bytes in the page as the provider sent them,
// compact (the fakes) or pretty-printed (Stripe's API), found by listSpans
// without copying; whatever listSpans cannot place for sure is re-encoded.

const trickyEvent = `{"id":"evt_%d","object":"event","api_version":"2023-10-16","created":1700000000,` +
	`"data":{"object":{"id":"pi_%d","object":"payment_intent","amount":1234,"currency":"gbp","status":"succeeded",` +
	`"description":"brackets ]}[{ and a quote \" and a backslash \\ and \u00e9 and \\\" end",` +
	`"metadata":{"k]":"v}","nested":[[],[{}],{"a":[1,2.5e3,-0.1]}],"n":null,"t":true,"f":false}}},` +
	`"livemode":false,"pending_webhooks":0,"request":{"id":null,"idempotency_key":null},"type":"payment_intent.succeeded"}`

func page(n int, indent bool) []byte {
	var evs []json.RawMessage
	for i := range n {
		evs = append(evs, json.RawMessage(fmt.Sprintf(trickyEvent, i, i)))
	}
	v := map[string]any{"object": "list", "url": "/v1/events", "has_more": true, "data": evs}
	var b []byte
	if indent {
		b, _ = json.MarshalIndent(v, "", "  ")
	} else {
		b, _ = json.Marshal(v)
	}
	return b
}

func compact(t *testing.T, b []byte) string {
	t.Helper()
	var out bytes.Buffer
	if err := json.Compact(&out, b); err != nil {
		t.Fatalf("not JSON: %v: %.200s", err, b)
	}
	return out.String()
}

// within reports whether s lies inside b's array (no copy was made).
func within(s, b []byte) bool {
	if len(s) == 0 || len(b) == 0 {
		return false
	}
	p, lo := uintptr(unsafe.Pointer(&s[0])), uintptr(unsafe.Pointer(&b[0]))
	return p >= lo && p+uintptr(len(s)) <= lo+uintptr(len(b))
}

func TestEventPayloadIsThePagesOwnBytes(t *testing.T) {
	for _, indent := range []bool{false, true} {
		t.Run(fmt.Sprintf("indent=%v", indent), func(t *testing.T) {
			b := page(3, indent)
			var l leanEventList
			if err := l.parse(new(fastjson.Parser), b); err != nil {
				t.Fatal(err)
			}
			if len(l.events) != 3 || !l.HasMore {
				t.Fatalf("%d events, has_more %v", len(l.events), l.HasMore)
			}
			for i, ev := range l.events {
				want := compact(t, []byte(fmt.Sprintf(trickyEvent, i, i)))
				if got := compact(t, ev.raw); got != want {
					t.Fatalf("event %d: payload\n%s\nwant\n%s", i, got, want)
				}
				if !within(ev.raw, b) {
					t.Fatalf("event %d: the payload was copied out of the page", i)
				}
				if cap(ev.raw) != len(ev.raw) {
					t.Fatalf("event %d: cap %d > len %d: an append would overwrite the next", i, cap(ev.raw), len(ev.raw))
				}
				if indent && !bytes.Contains(ev.raw, []byte("\n")) {
					t.Fatalf("event %d: not the page's pretty-printed bytes", i)
				}
			}
		})
	}
}

func TestEventPayloadReencodedWhenNotPlaced(t *testing.T) {
	ev := fmt.Sprintf(trickyEvent, 7, 7)
	for name, b := range map[string]string{
		// fastjson unescapes keys; listSpans does not, and gives up.
		"escaped key": `{"d\u0061ta":[` + ev + `],"has_more":false}`,
		// fastjson's Get takes the first of two keys, as listSpans does.
		"two data keys": `{"data":[` + ev + `],"data":[],"has_more":false}`,
		"data last":     `{"has_more":false,"url":"/v1/events","data":[` + ev + `]}`,
		"no spaces":     `{"data":[` + ev + `,` + ev + `]}`,
		"spaces":        " {\n\t\"data\" :\r\n [ " + ev + " ,\n" + ev + " ] , \"has_more\" : false } ",
	} {
		t.Run(name, func(t *testing.T) {
			var l leanEventList
			if err := l.parse(new(fastjson.Parser), []byte(b)); err != nil {
				t.Fatal(err)
			}
			if len(l.events) == 0 {
				t.Fatal("no events")
			}
			for _, e := range l.events {
				if got, want := compact(t, e.raw), compact(t, []byte(ev)); got != want {
					t.Fatalf("payload\n%s\nwant\n%s", got, want)
				}
			}
		})
	}
	if _, _, ok := listSpans([]byte(`{"d\u0061ta":[1]}`)); ok {
		t.Fatal("an escaped key was placed")
	}
	if s, env, ok := listSpans([]byte(`{"data":[],"has_more":false}`)); !ok || len(s) != 0 || string(env) != `{"data":[],"has_more":false}` {
		t.Fatalf("empty data: %v %s %v", s, env, ok)
	}
	for _, b := range []string{`{"data":[{}]} x`, `{"data":[{}] "x":2}`, `{"data":[{} {}]}`, `{"has_more":true}`, `[]`, `{"data":[{}]`,
		`{"data":[1]}`, `{"data":[+],"00":0}`, `{"data":[{},"x"]}`} {
		if _, _, ok := listSpans([]byte(b)); ok {
			t.Fatalf("%s was placed", b)
		}
	}
}

// randomValue builds an arbitrary JSON value with the characters that
// trouble a scanner: brackets and quotes inside strings, escapes, nesting.
func randomValue(r *rand.Rand, depth int) any {
	k := r.IntN(7)
	if depth > 3 {
		k = r.IntN(4)
	}
	switch k {
	case 0:
		return nil
	case 1:
		return r.IntN(2) == 0
	case 2:
		return r.NormFloat64() * 1e6
	case 3:
		const alphabet = `ab"\]}[{,: é` + "\n\t\u2028"
		rs := []rune(alphabet)
		s := make([]rune, r.IntN(12))
		for i := range s {
			s[i] = rs[r.IntN(len(rs))]
		}
		return string(s)
	case 4, 5:
		m := map[string]any{}
		for range r.IntN(5) {
			m[fmt.Sprint(randomValue(r, 9))] = randomValue(r, depth+1)
		}
		return m
	}
	a := make([]any, r.IntN(4))
	for i := range a {
		a[i] = randomValue(r, depth+1)
	}
	return a
}

func TestListSpansAgreeWithFastjson(t *testing.T) {
	r := rand.New(rand.NewPCG(16, 2026))
	var p fastjson.Parser
	for i := range 2000 {
		data := make([]any, r.IntN(6))
		for j := range data {
			data[j] = map[string]any{"v": randomValue(r, 0)} // a list's elements are objects
		}
		v := map[string]any{"data": data, "has_more": r.IntN(2) == 0, "x": randomValue(r, 0)}
		var b []byte
		if i%2 == 0 {
			b, _ = json.Marshal(v)
		} else {
			b, _ = json.MarshalIndent(v, " ", "\t")
		}
		var more bool
		arr, err := listData(&p, b, &more)
		if err != nil {
			t.Fatal(err)
		}
		spans, env, ok := listSpans(b)
		if !ok || len(spans) != len(arr) {
			t.Fatalf("not placed (%v, %d spans for %d): %s", ok, len(spans), len(arr), b)
		}
		var envMore bool
		if _, err := listData(&p, env, &envMore); err != nil || envMore != more {
			t.Fatalf("the envelope %s: %v, has_more %v want %v", env, err, envMore, more)
		}
		arr, _ = listData(&p, b, &more) // again: p parsed env since
		for j, s := range spans {
			if got, want := compact(t, b[s[0]:s[1]]), compact(t, arr[j].MarshalTo(nil)); got != want {
				t.Fatalf("element %d of %s:\n%s\nwant\n%s", j, b, got, want)
			}
		}
	}
}

// FuzzListSpans: whatever page listSpans places is read as fastjson reads
// it whole: the envelope (its data emptied) and every element parse if and
// only if the page does, with the same has_more and the same elements.
func FuzzListSpans(f *testing.F) {
	f.Add([]byte(`{"data":[{"a":"]}\""},[1,{"b":[]}],"x\\",null,-1.5e3,true]}`))
	f.Add([]byte(" {\"has_more\":false , \"data\" :\n[ {\"id\":\"evt_1\"} ]\t} "))
	f.Add([]byte(`{"d\u0061ta":[1],"data":[2]}`))
	f.Add([]byte(`{"data":[tru],"has_more":false}`))
	f.Add([]byte(`{"data":[1],"has_more":flase}`))
	f.Add([]byte(`{"data":[+],"00":0}`))
	f.Add([]byte(`{"data":[{"a":+}],"has_more":false}`))
	f.Add(page(2, true))
	f.Fuzz(func(t *testing.T, b []byte) {
		spans, env, ok := listSpans(b)
		if !ok {
			return
		}
		var p, pw fastjson.Parser // pw's values live while p parses
		var whole bool
		arr, werr := listData(&pw, b, &whole)
		var ours bool
		_, err := listData(&p, env, &ours)
		var vals []string
		for _, s := range spans {
			if err != nil {
				break
			}
			var v *fastjson.Value
			if v, err = p.ParseBytes(b[s[0]:s[1]]); err == nil {
				vals = append(vals, string(v.MarshalTo(nil)))
			}
		}
		if (werr == nil) != (err == nil) {
			t.Fatalf("whole: %v; in parts: %v: %q", werr, err, b)
		}
		if werr != nil {
			return
		}
		if whole != ours || len(vals) != len(arr) {
			t.Fatalf("has_more %v/%v, %d/%d elements: %q", ours, whole, len(vals), len(arr), b)
		}
		for i, a := range arr {
			if want := string(a.MarshalTo(nil)); vals[i] != want {
				t.Fatalf("element %d:\n%s\nwant\n%s", i, vals[i], want)
			}
		}
	})
}
