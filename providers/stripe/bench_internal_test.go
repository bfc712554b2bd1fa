package stripe

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fastjson"

	"github.com/reconciler/reconciler/providers/stripe/stripefake"
)

// BenchmarkMapEvents measures the mapping alone: 100 realistic events
// (payouts excluded: they make requests), decoded once beforehand.
func BenchmarkMapEvents(b *testing.B) {
	body := eventsPage(func(typ string) bool { return !strings.HasPrefix(typ, "payout.") })
	var l leanEventList
	if err := l.UnmarshalJSON(body); err != nil {
		b.Fatal(err)
	}
	p := &Provider{}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		for _, ev := range l.events {
			if _, err := p.mapEvent(ctx, "", ev); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkDecodePage measures the lean decoding of one page of 100
// realistic events (what rawPage hands UnmarshalJSON), per event.
func BenchmarkDecodePage(b *testing.B) {
	body := eventsPage(func(string) bool { return true })
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	var parser fastjson.Parser // reused, as ListChanges does
	for b.Loop() {
		var l leanEventList
		if err := l.parse(&parser, body); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/100/1000, "us/event")
}

// eventsPage is a /v1/events page of 100 realistic events of the wanted
// types that keep accepts.
func eventsPage(keep func(typ string) bool) []byte {
	now := time.Date(2026, 11, 20, 6, 0, 0, 0, time.UTC)
	fake := stripefake.New(stripefake.Options{Now: func() time.Time { return now }, Seed: 5})
	a := fake.Account("")
	a.Generate(stripefake.GenOptions{Payments: 200, Start: now.Add(-48 * time.Hour), End: now.Add(-time.Hour), Seed: 5})
	body := []byte(`{"object":"list","has_more":false,"url":"/v1/events","data":[`)
	n := 0
	for _, d := range a.Deliveries() {
		if !wanted[d.EventType] || !keep(d.EventType) {
			continue
		}
		if n > 0 {
			body = append(body, ',')
		}
		body = append(body, d.Payload...)
		if n++; n == 100 {
			break
		}
	}
	return append(body, "]}"...)
}

// BenchmarkDecodeBTPage measures a page of 100 balance transactions whose
// sources are Stripe-sized charges (a payout's listing with
// expand[]=data.source), per transaction: read as listSpans finds them
// (scanBTAt), and each found by listSpans and parsed by fastjson with a
// reused parser (parseBT), as before, side by side.
func BenchmarkDecodeBTPage(b *testing.B) {
	charges := fakeCharges(b, 2500) // Stripe-sized, compact
	charges = charges[:min(100, len(charges))]
	if len(charges) < 100 {
		b.Fatalf("%d charges", len(charges))
	}
	body := []byte(`{"object":"list","has_more":false,"url":"/v1/balance_transactions","data":[`)
	for i, ch := range charges {
		if i > 0 {
			body = append(body, ',')
		}
		body = fmt.Appendf(body, `{"id":"txn_%d","object":"balance_transaction","amount":5,"available_on":1700100000,"created":1700000000,"fee":0,"net":5,"reporting_category":"charge","status":"available","type":"charge","source":%s}`, i, ch)
	}
	body = append(body, "]}"...)
	for _, fast := range []bool{true, false} {
		name := "scanned"
		if !fast {
			name = "fastjson"
		}
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			var parser fastjson.Parser
			for b.Loop() {
				if fast {
					var l leanBTList
					if err := l.parse(&parser, body); err != nil {
						b.Fatal(err)
					}
				} else {
					// The parse before scanBTAt: each element found by
					// listSpans, then parsed with the reused parser.
					spans, _, ok := listSpans(body)
					if !ok {
						b.Fatal("listSpans")
					}
					for _, sp := range spans {
						o, err := parser.ParseBytes(body[sp[0]:sp[1]])
						if err != nil {
							b.Fatal(err)
						}
						if _, err := parseBT(o); err != nil {
							b.Fatal(err)
						}
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/100/1000, "us/txn")
		})
	}
}
