package stripe

import (
	"context"
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
