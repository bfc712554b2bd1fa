package stripe_test

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/reconciler/reconciler/providers/stripe"
	"github.com/reconciler/reconciler/providers/stripe/stripefake"
	"github.com/reconciler/reconciler/providers/transport"
	"github.com/reconciler/reconciler/reconcile"
)

// benchPage returns a /v1/events page of 100 realistic events: the fake's,
// of the types the provider reads, payouts excluded so that the page is
// one request.
func benchPage(b *testing.B) []byte { return benchPageOf(b, false) }

// benchPageOf is benchPage, its payment intents and charges Stripe-sized
// (stripefake.Options.FullObjects) when full.
func benchPageOf(b *testing.B, full bool) []byte {
	now := time.Date(2026, 11, 20, 6, 0, 0, 0, time.UTC)
	fake := stripefake.New(stripefake.Options{Now: func() time.Time { return now }, Seed: 5, FullObjects: full})
	a := fake.Account("")
	a.Generate(stripefake.GenOptions{Payments: 200, Start: now.Add(-48 * time.Hour), End: now.Add(-time.Hour), Seed: 5})
	var items [][]byte
	for _, d := range a.Deliveries() {
		if contains(stripe.EventTypes, d.EventType) && !strings.HasPrefix(d.EventType, "payout.") {
			items = append(items, d.Payload)
		}
		if len(items) == 100 {
			break
		}
	}
	if len(items) < 100 {
		b.Fatalf("the fake rendered %d events, want 100", len(items))
	}
	return list("/v1/events", items...)
}

// benchProvider is a provider over an in-memory transport that answers the
// anchor's question with one old event and every page of events with
// next(), and the window its benchmarks list.
func benchProvider(b *testing.B, next func() []byte) (*stripe.Provider, reconcile.ListParams) {
	rt := rtFunc(func(r *http.Request) (*http.Response, error) {
		if r.URL.Query().Get("limit") == "1" && r.URL.Query().Get("ending_before") == "" {
			return respond(r, list("/v1/events", []byte(anchorEvent))), nil
		}
		return respond(r, next()), nil
	})
	p, err := stripe.New(stripe.Config{APIKey: "sk_test_bench", BaseURL: "http://stripe.invalid",
		Transport: transport.New(transport.Options{Base: rt})})
	if err != nil {
		b.Fatal(err)
	}
	return p, reconcile.ListParams{Since: time.Unix(1700000001, 0), Until: time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)}
}

// BenchmarkListChangesPage measures the event path for one page of 100
// events: stripe-go's backend and iterator, the event decode and the
// mapping, over an in-memory transport.
func BenchmarkListChangesPage(b *testing.B) {
	page := benchPage(b)
	p, lp := benchProvider(b, func() []byte { return page })
	changes := 0
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		changes = 0
		if err := p.ListChanges(context.Background(), lp, func(pg reconcile.Page) error {
			changes += len(pg.Changes)
			return nil
		}); err != nil {
			b.Fatal(err)
		}
	}
	if changes == 0 {
		b.Fatal("no changes mapped")
	}
}

// BenchmarkListChangesPages measures the event path as a run takes it: 50
// pages of 100 events through one ListChanges (its parser, body buffer and
// page reused from page to page), per page; the fake's events, and the same
// Stripe-sized.
func BenchmarkListChangesPages(b *testing.B) {
	for _, full := range []bool{false, true} {
		name := "fake"
		if full {
			name = "stripe_sized"
		}
		b.Run(name, func(b *testing.B) {
			const pages = 50
			page := benchPageOf(b, full)
			more := bytes.Replace(page, []byte(`"has_more":false`), []byte(`"has_more":true`), 1)
			served := 0
			p, lp := benchProvider(b, func() []byte {
				if served++; served%pages != 0 {
					return more
				}
				return page
			})
			changes := 0
			b.ReportAllocs()
			b.SetBytes(int64(len(page)) * pages)
			b.ResetTimer()
			for b.Loop() {
				served, changes = 0, 0
				if err := p.ListChanges(context.Background(), lp, func(pg reconcile.Page) error {
					changes += len(pg.Changes)
					return nil
				}); err != nil {
					b.Fatal(err)
				}
			}
			if changes < pages*90 {
				b.Fatalf("%d changes mapped from %d pages", changes, pages)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/pages/1000, "us/page")
		})
	}
}
