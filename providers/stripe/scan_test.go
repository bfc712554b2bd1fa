package stripe

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fastjson"

	"github.com/reconciler/reconciler/providers/stripe/stripefake"
)

// viaFastjson decodes an event as the provider did before scanEvent: parsed
// whole by fastjson, then read (parseEvent).
func viaFastjson(b []byte) (leanEvent, bool, error) {
	var ev leanEvent
	e, err := new(fastjson.Parser).ParseBytes(b)
	if err != nil {
		return ev, true, err
	}
	return ev, false, parseEvent(e, &ev)
}

// agree checks that decodeEvent reads b as fastjson does: the same event,
// or the same error.
func agree(t *testing.T, b []byte) {
	t.Helper()
	var got leanEvent
	gotSyntax, gotErr := decodeEvent(new(fastjson.Parser), b, &got)
	want, wantSyntax, wantErr := viaFastjson(b)
	if fmt.Sprint(gotErr) != fmt.Sprint(wantErr) || gotSyntax != wantSyntax {
		t.Fatalf("error %v (syntax %v), fastjson's %v (syntax %v): %q", gotErr, gotSyntax, wantErr, wantSyntax, b)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("decoded\n%+v\nfastjson\n%+v\nfrom %s", got, want, b)
	}
}

// fakeEvents are every event the project's fake renders for 1,000
// payments over twenty days (refunds, disputes and payouts among them), compact
// and Stripe-sized, each also pretty-printed.
func fakeEvents(t testing.TB) [][]byte {
	now := time.Date(2026, 11, 20, 6, 0, 0, 0, time.UTC)
	var out [][]byte
	for _, full := range []bool{false, true} {
		fake := stripefake.New(stripefake.Options{Now: func() time.Time { return now }, Seed: 9, FullObjects: full})
		a := fake.Account("")
		a.Generate(stripefake.GenOptions{Payments: 1000, Start: now.Add(-20 * 24 * time.Hour), End: now.Add(-time.Hour), Seed: 9})
		for _, d := range a.Deliveries() {
			out = append(out, d.Payload)
			var pretty bytes.Buffer
			if err := json.Indent(&pretty, d.Payload, "", "  "); err != nil {
				t.Fatalf("the fake rendered JSON that is not: %v", err)
			}
			out = append(out, pretty.Bytes())
		}
	}
	return out
}

// TestScanEventAgreesWithFastjson: every event of the fake (all types the
// provider reads, compact, Stripe-sized and pretty-printed) is read in one
// pass, to the same event as fastjson's; and events scanEvent leaves to
// fastjson (escapes, duplicates, other types, fractions, an unknown
// version, a malformed document) still read as fastjson reads them.
func TestScanEventAgreesWithFastjson(t *testing.T) {
	evs := fakeEvents(t)
	types := map[string]bool{}
	for _, b := range evs {
		var ev leanEvent
		if !scanEvent(b, &ev) {
			t.Fatalf("scanEvent left an ordinary event to fastjson: %s", b)
		}
		types[ev.Type] = true
		agree(t, b)
	}
	for _, typ := range []string{"payment_intent.succeeded", "charge.refunded", "charge.dispute.created", "payout.paid"} {
		if !types[typ] {
			t.Fatalf("the fake rendered no %s: the test covers less than it says (%v)", typ, types)
		}
	}

	base := `{"id":"evt_1","object":"event","api_version":"2023-10-16","created":1700000000,"type":"%s","data":{"object":%s}}`
	cases := []struct {
		name, typ, obj string
		fast           bool // scanEvent reads it itself
	}{
		{"payment intent", "payment_intent.succeeded", `{"id":"pi_1","amount":100,"currency":"gbp","status":"succeeded"}`, true},
		{"nulls", "payment_intent.succeeded", `{"id":"pi_1","amount":null,"currency":null,"status":null}`, true},
		{"absent fields", "charge.refunded", `{"id":"ch_1"}`, true},
		{"expanded payment intent", "charge.refunded", `{"id":"ch_1","payment_intent":{"object":"payment_intent","id":"pi_9","amount":5},"amount":5}`, true},
		{"expanded without id", "charge.refunded", `{"id":"ch_1","payment_intent":{"object":"payment_intent"}}`, false},
		{"duplicate field: the first", "payment_intent.succeeded", `{"id":"pi_1","status":"succeeded","status":"canceled"}`, true},
		{"escaped value", "payment_intent.succeeded", `{"id":"pi_\u0031","status":"succeeded"}`, false},
		{"escaped key", "payment_intent.succeeded", `{"i\u0064":"pi_1","status":"succeeded"}`, false},
		{"escapes elsewhere", "payment_intent.succeeded", `{"id":"pi_1","description":"a \"quoted\" \\ \u00e9 \n","status":"succeeded"}`, true},
		{"amount as a string", "payment_intent.succeeded", `{"id":"pi_1","amount":"100"}`, false},
		{"amount with a fraction", "payment_intent.succeeded", `{"id":"pi_1","amount":100.0}`, false},
		{"amount past int64", "payment_intent.succeeded", `{"id":"pi_1","amount":99999999999999999999}`, false},
		{"negative amount", "payment_intent.succeeded", `{"id":"pi_1","amount":-5}`, true},
		{"captured as a string", "charge.captured", `{"id":"ch_1","captured":"true"}`, false},
		{"payout automatic null", "payout.paid", `{"id":"po_1","automatic":null,"status":"paid","arrival_date":1700000000}`, true},
		{"payout manual", "payout.paid", `{"id":"po_1","automatic":false,"reconciliation_status":"completed"}`, true},
		{"payout not applicable", "payout.paid", `{"id":"po_1","automatic":true,"reconciliation_status":"not_applicable"}`, true},
		{"payout automatic a number", "payout.paid", `{"id":"po_1","automatic":1}`, false},
		{"refund", "charge.refund.updated", `{"id":"re_1","amount":5,"currency":"gbp","status":"failed","created":1700000001,"payment_intent":"pi_1"}`, true},
		{"dispute", "charge.dispute.created", `{"id":"dp_1","amount":5,"currency":"gbp","status":"needs_response","reason":"fraudulent","payment_intent":"pi_1"}`, true},
		{"object not an object", "payment_intent.succeeded", `"pi_1"`, false},
		{"deep nesting", "payment_intent.succeeded", `{"id":"pi_1","x":` + strings.Repeat("[", 80) + strings.Repeat("]", 80) + `}`, false},
		{"arrays and literals", "payment_intent.succeeded", `{"id":"pi_1","a":[1,-2.5e3,true,false,null,"s",{},[]],"b":{},"status":"succeeded"}`, true},
		{"a control character", "payment_intent.succeeded", "{\"id\":\"pi_1\",\"d\":\"a\tb\"}", true},
		{"an unknown escape elsewhere", "payment_intent.succeeded", `{"id":"pi_1","d":"a\qb"}`, true},
		{"a lone minus", "payment_intent.succeeded", `{"id":"pi_1","x":-}`, false},
		{"NaN", "payment_intent.succeeded", `{"id":"pi_1","x":NaN}`, false},
		{"a number fastjson takes", "payment_intent.succeeded", `{"id":"pi_1","x":1-2e+}`, true},
		{"a leading zero read", "payment_intent.succeeded", `{"id":"pi_1","amount":007}`, true},
		{"a bad literal", "payment_intent.succeeded", `{"id":"pi_1","x":nul}`, false},
		{"a trailing comma", "payment_intent.succeeded", `{"id":"pi_1",}`, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := []byte(fmt.Sprintf(base, c.typ, c.obj))
			var ev leanEvent
			if got := scanEvent(b, &ev); got != c.fast {
				t.Fatalf("scanEvent read it itself: %v, want %v: %s", got, c.fast, b)
			}
			agree(t, b)
		})
	}
	for _, b := range []string{
		`{"id":"evt_1","created":1,"type":"payment_intent.succeeded","api_version":"2099-01-01.future","data":{"object":{"id":"pi_1"}}}`,
		`{"id":"evt_1","created":1,"type":"payment_intent.succeeded","api_version":null,"data":{"object":{"id":"pi_1"}}}`,
		`{"id":"evt_1","created":1,"type":"payment_intent.succeeded","data":{"object":{"id":"pi_1"}},"data":{"object":{"id":"pi_2"}}}`,
		`{"id":"evt_1","created":1,"type":"payment_intent.succeeded","data":{"previous_attributes":{},"object":{"id":"pi_1"},"object":{"id":"pi_2"}}}`,
		`{"id":"evt_1","id":"evt_2","created":1,"type":"payment_intent.succeeded","data":{"object":{"id":"pi_1"}}}`,
		`{"id":"evt_1","created":"1","type":"payment_intent.succeeded","data":{"object":{"id":"pi_1"}}}`,
		`{"id":"evt_1","type":"payment_intent.succeeded","data":{"object":{"id":"pi_1"}}}`,
		`{"id":"evt_1","created":1,"type":"payment_intent.succeeded","data":[]}`,
		`{"id":"evt_1","created":1,"type":"payment_intent.succeeded","data":{"object":{"id":"pi_1"}}} x`,
		` {"id" : "evt_1" , "created" : 1 , "type" : "payment_intent.succeeded" , "data" : { "object" : { "id" : "pi_1" } } } `,
		`{"id":"evt_1","created":1,"type":"payment_intent.succeeded","data":{"object":{"id":"pi_1"}}`,
	} {
		agree(t, []byte(b))
	}
}

// FuzzScanEvent: whatever the bytes, decodeEvent reads them as fastjson
// does (the same event or the same error), and scanEvent reads only what
// fastjson accepts.
func FuzzScanEvent(f *testing.F) {
	for i, b := range fakeEvents(f) {
		if i%40 == 0 {
			f.Add(b)
		}
	}
	f.Add([]byte(`{"id":"evt_1","created":1,"type":"charge.refunded","data":{"object":{"id":"ch_1","payment_intent":{"id":"pi_1"},"amount":-0}}}`))
	f.Add([]byte(`{"id":"evt_1","created":1,"type":"payout.paid","data":{"object":{"automatic":null,"arrival_date":1e3}}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var ev leanEvent
		if scanEvent(b, &ev) {
			if _, err := new(fastjson.Parser).ParseBytes(b); err != nil {
				t.Fatalf("scanEvent read what fastjson refuses (%v): %q", err, b)
			}
		}
		agree(t, b)
	})
}

// pageOf is a list page of the events.
func pageOf(evs ...[]byte) []byte {
	b := []byte(`{"object":"list","url":"/v1/events","has_more":true,"data":[`)
	for i, ev := range evs {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, ev...)
	}
	return append(b, "]}"...)
}

// pagesAgree checks that a page read with its events scanned as they are
// found reads as the page parsed whole by fastjson: the same events or the
// same error.
func pagesAgree(t *testing.T, b []byte) {
	t.Helper()
	var got, want leanEventList
	gotErr := got.parse(new(fastjson.Parser), b)
	wantErr := want.parseWhole(new(fastjson.Parser), b)
	if (gotErr == nil) != (wantErr == nil) {
		t.Fatalf("page: %v, parsed whole: %v: %q", gotErr, wantErr, b)
	}
	if gotErr != nil {
		return
	}
	if got.HasMore != want.HasMore || len(got.events) != len(want.events) {
		t.Fatalf("has_more %v/%v, %d/%d events", got.HasMore, want.HasMore, len(got.events), len(want.events))
	}
	for i := range got.events {
		g, w := *got.events[i], *want.events[i]
		g.raw, w.raw = nil, nil
		if !reflect.DeepEqual(g, w) {
			t.Fatalf("event %d:\n%+v\nparsed whole\n%+v", i, g, w)
		}
	}
}

// TestPageScannedAsFound: pages of the fake's events, compact and
// pretty-printed, and pages holding the events scanEvent leaves to fastjson,
// read as fastjson reads them whole, with each event's bytes found where
// listSpans finds them.
func TestPageScannedAsFound(t *testing.T) {
	evs := fakeEvents(t)
	for i := 0; i+100 <= len(evs); i += 100 {
		b := pageOf(evs[i : i+100]...)
		pagesAgree(t, b)
		var pretty bytes.Buffer
		if err := json.Indent(&pretty, b, "", "  "); err != nil {
			t.Fatal(err)
		}
		pagesAgree(t, pretty.Bytes())
		var l leanEventList
		if err := l.parse(new(fastjson.Parser), pretty.Bytes()); err != nil {
			t.Fatal(err)
		}
		for j, ev := range l.events {
			if compact(t, ev.raw) != compact(t, evs[i+j]) {
				t.Fatalf("event %d's bytes: %s", j, ev.raw)
			}
		}
	}
	odd := []string{
		`{"id":"evt_1","created":1,"type":"payment_intent.succeeded","api_version":"2099-01-01.future","data":{"object":{"id":"pi_1"}}}`,
		`{"id":"evt_2","created":"1","type":"payment_intent.succeeded","data":{"object":{"id":"pi_1"}}}`,
		`{"id":"evt_3","created":1,"type":"charge.refunded","data":{"object":{"id":"ch_1","amount":1.5}}}`,
		`{"id":"evt_4","created":1,"type":"payment_intent.succeeded","data":{"object":{"id":"pi_\u0031"}}}`,
		`{"id":"evt_5","created":1,"type":"payment_intent.succeeded","data":{"object":{"id":"pi_5","x":[1,,2]}}}`,
		`{"id":"evt_6","created":1,"type":"payment_intent.succeeded","data":{"object":{"id":"pi_6","x":"]}\""}}}`,
	}
	for i := range odd {
		pagesAgree(t, pageOf([]byte(odd[i])))
		pagesAgree(t, pageOf(evs[0], []byte(odd[i]), evs[1]))
	}
}

// FuzzListSpansScanned: offering each element to scanEventAt never moves
// where listSpans finds the elements, nor what it accepts; and the page
// reads as fastjson reads it whole.
func FuzzListSpansScanned(f *testing.F) {
	evs := fakeEvents(f)
	f.Add(pageOf(evs[0], evs[1]))
	f.Add(pageOf([]byte(`{"id":"evt_1","created":1,"type":"payment_intent.succeeded","data":{"object":{"id":"pi_1","x":"]}\""}}}`)))
	f.Add([]byte(`{"data":[{"a":"]}\""},{"b":[]}],"has_more":false}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		spans, env, ok := listSpans(b)
		var ev leanEvent
		spans2, env2, ok2 := listSpansWith(b, func(b []byte, i int) (int, bool) { return scanEventAt(b, i, &ev) })
		if ok != ok2 || !reflect.DeepEqual(spans, spans2) || !bytes.Equal(env, env2) {
			t.Fatalf("listSpans %v %v, with the events scanned %v %v: %q", ok, spans, ok2, spans2, b)
		}
		pagesAgree(t, b)
	})
}
