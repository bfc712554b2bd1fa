package gocardless

// Fuzz targets for the GoCardless decoders: arbitrary bytes as an events
// page (decoded as ListChanges decodes it, then mapped by
// paymentEventChanges and the refund path) and as a re-fetched payment
// (fetchedChange), served by an in-memory transport.

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/providers/gocardless/gcfake"
	"github.com/reconciler/reconciler/reconcile"
)

type rtFunc func(*http.Request) (*http.Response, error)

func (f rtFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// fuzzProvider answers the first events request of each resource type with
// page (later ones, after a cursor, with an empty page, so that a forged
// cursor cannot loop) and every payment with payment.
func fuzzProvider(t *testing.T, page, payment []byte) *Provider {
	p, err := New(Config{AccessToken: "sandbox_fuzz", BaseURL: "http://gocardless.invalid"})
	if err != nil {
		t.Fatal(err)
	}
	rt := rtFunc(func(r *http.Request) (*http.Response, error) {
		body := []byte(`{"error":{"type":"invalid_api_usage","message":"no"}}`)
		status := 404
		switch {
		case r.URL.Path == "/events" && r.URL.Query().Get("after") == "":
			body, status = page, 200
		case r.URL.Path == "/events":
			body, status = []byte(`{"events":[],"linked":{},"meta":{"cursors":{"after":null}}}`), 200
		case strings.HasPrefix(r.URL.Path, "/payments/"):
			body, status = append(append([]byte(`{"payments":`), payment...), '}'), 200
		}
		return &http.Response{StatusCode: status, Request: r, Header: http.Header{"Content-Type": {"application/json"}},
			Body: io.NopCloser(bytes.NewReader(body))}, nil
	})
	p.c = &http.Client{Transport: rt}
	return p
}

func checkChanges(t *testing.T, cs []reconcile.Change) { checkChangesOf(t, cs, true) }

// checkChangesOf is checkChanges; needID false waives "a change with a
// state has a provider id" (see TestFetchAnswerForAnotherPayment).
func checkChangesOf(t *testing.T, cs []reconcile.Change, needID bool) {
	t.Helper()
	for _, c := range cs {
		if c.State != models.StateNone {
			if c.ProviderID == "" && needID {
				t.Fatalf("a change with state %s has no provider id: %+v", c.State, c)
			}
			if !slices.Contains(models.States, c.State) {
				t.Fatalf("invalid state %q: %+v", c.State, c)
			}
			if c.Unknown {
				t.Fatalf("an unknown status with a state: %+v", c)
			}
		}
		if c.Unknown && c.State != models.StateNone {
			t.Fatalf("unknown with a state: %+v", c)
		}
	}
}

// seeds are real pages and payments from the fake GoCardless.
func seeds(t testing.TB) (pages [][]byte, payments [][]byte) {
	now := time.Date(2026, 11, 20, 6, 0, 0, 0, time.UTC)
	fake := gcfake.New(gcfake.Options{Now: func() time.Time { return now }, Seed: 5})
	fake.Generate(gcfake.GenOptions{Payments: 40, Start: now.Add(-10 * 24 * time.Hour), End: now.Add(-time.Hour), Seed: 5})
	pm := fake.CreatePayment(2500, "GBP", now.Add(-5*time.Hour))
	fake.Submit(pm, now.Add(-4*time.Hour))
	fake.Confirm(pm, now.Add(-3*time.Hour))
	fake.Refund(pm, 2500, now.Add(-2*time.Hour))
	odd := fake.CreatePayment(900, "EUR", now.Add(-5*time.Hour))
	fake.ChargeBack(odd, now.Add(-90*time.Minute))
	fake.CancelChargeback(odd, now.Add(-80*time.Minute))
	fake.SetRawStatus(odd, "some_new_status", "some_new_action", now.Add(-70*time.Minute))
	get := func(path string) []byte {
		req := httptest.NewRequest(http.MethodGet, path, nil)
		req.Header.Set("Authorization", "Bearer sandbox_seed")
		req.Header.Set("GoCardless-Version", Version)
		rec := httptest.NewRecorder()
		fake.Handler().ServeHTTP(rec, req)
		if rec.Code != 200 {
			t.Fatalf("seed %s: %d %s", path, rec.Code, rec.Body)
		}
		return rec.Body.Bytes()
	}
	pages = append(pages,
		get("/events?resource_type=payments&include=payment&limit=8"),
		get("/events?resource_type=refunds&include=refund&limit=4"))
	for _, id := range []string{pm, odd} {
		var r struct {
			Payments json.RawMessage `json:"payments"`
		}
		if err := json.Unmarshal(get("/payments/"+id), &r); err != nil {
			t.Fatal(err)
		}
		payments = append(payments, r.Payments)
	}
	return pages, payments
}

// FuzzEventsPage: any bytes as an events page (and as the payment read for
// a refund's total) never panic ListChanges, and its changes hold the
// mapping's invariants.
func FuzzEventsPage(f *testing.F) {
	pages, payments := seeds(f)
	for _, pg := range pages {
		for _, pm := range payments {
			f.Add(pg, pm)
		}
	}
	f.Add([]byte(`{"events":[{"id":"EV1","created_at":"2026-11-19T10:00:00.000Z","action":"confirmed","resource_type":"payments","links":{"payment":"PM1"}}],"linked":{"payments":[{"id":"PM1","amount":-5,"currency":"GBP","status":"weird"}]},"meta":{"cursors":{"after":"EV1"}}}`), []byte(`{"id":"PM1","amount":0,"amount_refunded":0}`))
	f.Add([]byte(`{"events":[{"id":"EV2","action":"paid","resource_type":"refunds","links":{"refund":"RF1","payment":"PM1"}}]}`), []byte(`{"id":"PM1","amount":100,"amount_refunded":9223372036854775807,"status":"paid_out"}`))
	f.Add([]byte(`{"events":null}`), []byte(`null`))
	f.Add([]byte(`{"events":[{"id":"EV4","created_at":"2026-11-19T10:00:00.000Z","action":"resubmission_requested","resource_type":"payments","links":{"payment":"PM1"},"details":{"origin":"gocardless","cause":"payment_autoretried"}},`+
		`{"id":"EV3","created_at":"2026-11-19T09:00:00.000Z","action":"failed","resource_type":"payments","links":{"payment":"PM1"},"details":{"origin":"bank","cause":"refer_to_payer","reason_code":"ARUDD-0","will_attempt_retry":true}},`+
		`{"id":"EV5","created_at":"2026-11-19T11:00:00.000Z","action":"late_failure_settled","resource_type":"payments","links":{"payment":"PM1"},"details":{"will_attempt_retry":"yes"}}]}`),
		[]byte(`{"id":"PM1","amount":100,"status":"failed","retry_if_possible":true}`))
	f.Fuzz(func(t *testing.T, page, payment []byte) {
		// Read whole, and with a hold of two events: sliced, and an
		// instant split into chunks (splitInstant).
		for _, hold := range []int{DefaultHold, 2} {
			p := fuzzProvider(t, page, payment)
			p.hold = hold
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			var got []reconcile.Change
			err := p.ListChanges(ctx, reconcile.ListParams{Since: time.Unix(0, 0), Until: time.Unix(1900000000, 0)}, func(pg reconcile.Page) error {
				got = append(got, pg.Changes...)
				return nil
			})
			if ctx.Err() != nil {
				cancel()
				t.Fatalf("hold %d: ListChanges did not return: %v", hold, err)
			}
			cancel()
			checkChanges(t, got)
		}
		// The decode and mapping the page goes through, called directly too.
		var pg eventsPage
		if json.Unmarshal(page, &pg) != nil {
			return
		}
		linked := map[string]Payment{}
		for _, pm := range pg.Linked.Payments {
			linked[pm.ID] = pm
		}
		flagged := map[string]bool{}
		for _, raw := range pg.Events {
			var ev Event
			if json.Unmarshal(raw, &ev) != nil {
				continue
			}
			pm, ok := linked[ev.Links.Payment]
			checkChanges(t, paymentEventChanges(ev, pm, ok, flagged))
		}
	})
}

// FuzzFetchedPayment: any bytes answered for a re-fetched payment never
// panic, and a change that moves a state has a deterministic event id.
func FuzzFetchedPayment(f *testing.F) {
	_, payments := seeds(f)
	for _, pm := range payments {
		f.Add(pm)
	}
	f.Add([]byte(`{"id":"PM1","created_at":"2026-11-01T00:00:00Z","charge_date":"2026-11-05","amount":100,"amount_refunded":100,"currency":"GBP","status":"paid_out"}`))
	f.Add([]byte(`{"id":"PM1","charge_date":"not a date","amount":-1,"status":"confirmed"}`))
	f.Add([]byte(`{"id":"PM1","created_at":"2026-11-01T00:00:00Z","amount":100,"currency":"GBP","status":"failed","retry_if_possible":true}`))
	f.Fuzz(func(t *testing.T, payment []byte) {
		p := fuzzProvider(t, nil, payment)
		got, _ := p.Fetch(context.Background(), reconcile.FetchParams{ProviderIDs: []string{"PM1"}})
		// An answer without an id yields a stateful change with no provider
		// id today (the engine drops it): TestFetchAnswerForAnotherPayment.
		checkChangesOf(t, got, false)
		for _, c := range got {
			if c.State != models.StateNone && !strings.HasPrefix(c.EventID, "recon:") {
				t.Fatalf("a fetched change without a deterministic event id: %+v", c)
			}
		}
		var pm Payment
		if json.Unmarshal(payment, &pm) == nil {
			checkChangesOf(t, []reconcile.Change{fetchedChange(pm, payment)}, false)
		}
	})
}

// The stuck-payment path reads one payment by id; an answer that is not that
// payment must not become a change for another payment, nor a stateful
// change for no payment that the engine silently drops.
func TestFetchAnswerForAnotherPayment(t *testing.T) {
	for _, body := range []string{`{"status":"paid_out"}`, `{"id":"PM2","created_at":"2026-11-01T00:00:00Z","status":"paid_out"}`} {
		p := fuzzProvider(t, nil, []byte(body))
		got, err := p.Fetch(context.Background(), reconcile.FetchParams{ProviderIDs: []string{"PM1"}})
		for _, c := range got {
			if c.ProviderID != "PM1" {
				t.Errorf("%s: a change for %q from the answer for PM1 (err %v)", body, c.ProviderID, err)
			}
		}
		if err == nil {
			t.Errorf("%s: no error for an answer that is not PM1", body)
		}
	}
}
