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

// FuzzListSpansScanned: offering each element to scanEventAt or scanBTAt
// never moves where listSpans finds the elements, nor what it accepts; and
// the page reads as fastjson reads it whole, as events and as balance
// transactions.
func FuzzListSpansScanned(f *testing.F) {
	evs := fakeEvents(f)
	f.Add(pageOf(evs[0], evs[1]))
	f.Add(pageOf([]byte(`{"id":"evt_1","created":1,"type":"payment_intent.succeeded","data":{"object":{"id":"pi_1","x":"]}\""}}}`)))
	f.Add([]byte(`{"data":[{"a":"]}\""},{"b":[]}],"has_more":false}`))
	f.Add([]byte(`{"data":[{"id":"txn_1","source":{"object":"charge","id":"ch_1","amount":5,"payment_intent":{"id":"pi_1"}}},{"id":"txn_2","source":"ch_2"}],"has_more":false}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		spans, env, ok := listSpans(b)
		var ev leanEvent
		spans2, env2, ok2 := listSpansWith(b, func(b []byte, i int) (int, bool) { return scanEventAt(b, i, &ev) })
		if ok != ok2 || !reflect.DeepEqual(spans, spans2) || !bytes.Equal(env, env2) {
			t.Fatalf("listSpans %v %v, with the events scanned %v %v: %q", ok, spans, ok2, spans2, b)
		}
		spans3, env3, ok3 := listSpansWith(b, func(b []byte, i int) (int, bool) { _, end, ok := scanBTAt(b, i); return end, ok })
		if ok != ok3 || !reflect.DeepEqual(spans, spans3) || !bytes.Equal(env, env3) {
			t.Fatalf("listSpans %v %v, with the balance transactions scanned %v %v: %q", ok, spans, ok3, spans3, b)
		}
		pagesAgree(t, b)
		var l leanBTList
		err := l.parse(new(fastjson.Parser), b)
		want, wantErr := btViaFastjson(b)
		if (err == nil) != (wantErr == nil) || err == nil && !reflect.DeepEqual(l.Data, want) {
			t.Fatalf("balance transactions: %v %+v; fastjson: %v %+v: %q", err, l.Data, wantErr, want, b)
		}
	})
}

// fakeCharges are the charges of fakeEvents' charge.captured events longer
// than minLen bytes, in order.
func fakeCharges(t testing.TB, minLen int) [][]byte {
	var charges [][]byte
	for _, ev := range fakeEvents(t) {
		v, err := fastjson.ParseBytes(ev)
		if err != nil {
			t.Fatal(err)
		}
		if string(v.GetStringBytes("type")) == "charge.captured" && len(ev) > minLen {
			charges = append(charges, v.Get("data", "object").MarshalTo(nil))
		}
	}
	return charges
}

// btViaFastjson reads a page of balance transactions as parse did before
// scanBTAt: every element parsed by fastjson (parseBT).
func btViaFastjson(b []byte) ([]*leanBT, error) {
	var more bool
	arr, err := listData(new(fastjson.Parser), b, &more)
	if err != nil {
		return nil, err
	}
	out := make([]*leanBT, len(arr))
	for i, o := range arr {
		if out[i], err = parseBT(o); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// TestBTPageScannedAsFound: balance transactions whose sources are the
// fake's charges (compact and Stripe-sized), and odd ones, read as parseBT
// reads them.
func TestBTPageScannedAsFound(t *testing.T) {
	charges := fakeCharges(t, 0)
	if len(charges) < 50 {
		t.Fatalf("%d charges", len(charges))
	}
	bt := func(i int, source string) []byte {
		return []byte(fmt.Sprintf(`{"id":"txn_%d","object":"balance_transaction","amount":5,"available_on":1700100000,"created":1700000000,"status":"available","type":"charge","source":%s}`, i, source))
	}
	var elems [][]byte
	for i, ch := range charges {
		elems = append(elems, bt(i, string(ch)))
	}
	for i, src := range []string{
		`"ch_1"`, `null`, `{"object":"refund","id":"re_1"}`, `{"object":"charge","id":"ch_\u0031"}`, `"ch_\u0031"`,
		`{"object":"charge","id":"ch_2","amount":"5"}`, `{"object":"charge","id":"ch_3","payment_intent":{"id":"pi_3"}}`,
		`{"object":"payout","id":"po_1"}`, `5`, `[1,2]`, `{"object":1}`,
	} {
		elems = append(elems, bt(1000+i, src))
	}
	elems = append(elems, []byte(`{"id":"txn_x","created":"1","source":"ch_1"}`), []byte(`{"id":"txn_y","type":null,"status":5}`))
	check := func(t *testing.T, page []byte) {
		t.Helper()
		var l leanBTList
		err := l.parse(new(fastjson.Parser), page)
		want, wantErr := btViaFastjson(page)
		if (err == nil) != (wantErr == nil) {
			t.Fatalf("parse: %v; fastjson: %v", err, wantErr)
		}
		if err != nil {
			return
		}
		if !reflect.DeepEqual(l.Data, want) {
			for i := range want {
				if !reflect.DeepEqual(l.Data[i], want[i]) {
					t.Fatalf("element %d:\n%+v\nfastjson\n%+v", i, l.Data[i], want[i])
				}
			}
		}
	}
	for i := 0; i < len(elems); i += 25 {
		page := []byte(`{"object":"list","has_more":false,"data":[` + string(bytes.Join(elems[i:min(i+25, len(elems))], []byte(","))) + `]}`)
		check(t, page)
		var pretty bytes.Buffer
		if err := json.Indent(&pretty, page, "", "  "); err != nil {
			t.Fatal(err)
		}
		check(t, pretty.Bytes())
	}
	for _, e := range elems[len(charges):] {
		check(t, []byte(`{"data":[`+string(e)+`],"has_more":false}`))
	}
	var ok int
	for _, e := range elems[:len(charges)] {
		if _, _, read := scanBTAt(e, 0); read {
			ok++
		}
	}
	if ok != len(charges) {
		t.Fatalf("scanBTAt read %d of %d ordinary balance transactions itself", ok, len(charges))
	}
}
