package stripe_test

// Fuzz targets for the Stripe decoders: arbitrary bytes go through exactly
// the path the provider uses (stripe-go's backend and list iterator, the
// event decode and the mapping), served by an in-memory transport, so the
// targets follow the provider whatever decoder it uses.

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
	"github.com/reconciler/reconciler/providers/stripe"
	"github.com/reconciler/reconciler/providers/stripe/stripefake"
	"github.com/reconciler/reconciler/providers/transport"
	"github.com/reconciler/reconciler/reconcile"
)

type rtFunc func(*http.Request) (*http.Response, error)

func (f rtFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func respond(r *http.Request, body []byte) *http.Response {
	return &http.Response{StatusCode: 200, Status: "200 OK", Request: r, ContentLength: int64(len(body)),
		Header: http.Header{"Content-Type": {"application/json"}, "Request-Id": {"req_fuzz"}}, Body: io.NopCloser(bytes.NewReader(body))}
}

func list(url string, items ...[]byte) []byte {
	b := []byte(`{"object":"list","data":[`)
	b = append(b, bytes.Join(items, []byte(","))...)
	return append(b, `],"has_more":false,"url":"`+url+`"}`...)
}

const anchorEvent = `{"id":"evt_anchor","object":"event","api_version":"2023-10-16","created":1700000000,"data":{"object":{"id":"pi_anchor","object":"payment_intent","amount":100,"currency":"gbp","status":"succeeded"}},"livemode":false,"pending_webhooks":0,"request":{"id":null,"idempotency_key":null},"type":"payment_intent.succeeded"}`

// fuzzProvider serves event as the only event of the window, bt as the only
// balance transaction of any payout and pi as every payment intent. An
// input that is not one JSON value is served as the whole body (garbage
// pages), and only the first request of each list gets it: an input that
// forges "has_more":true cannot loop the iterator.
func fuzzProvider(t *testing.T, event, bt, pi []byte) *stripe.Provider {
	served := map[string]int{}
	page := func(r *http.Request, item []byte) *http.Response {
		served[r.URL.Path]++
		if served[r.URL.Path] > 1 {
			return respond(r, list(r.URL.Path))
		}
		if !json.Valid(item) {
			return respond(r, item)
		}
		return respond(r, list(r.URL.Path, item))
	}
	rt := rtFunc(func(r *http.Request) (*http.Response, error) {
		switch {
		case r.URL.Path == "/v1/events" && r.URL.Query().Get("limit") == "1" && r.URL.Query().Get("ending_before") == "":
			return respond(r, list("/v1/events", []byte(anchorEvent))), nil
		case r.URL.Path == "/v1/events":
			return page(r, event), nil
		case r.URL.Path == "/v1/balance_transactions":
			return page(r, bt), nil
		case strings.HasPrefix(r.URL.Path, "/v1/payment_intents/"):
			return respond(r, pi), nil
		}
		return &http.Response{StatusCode: 404, Request: r, Header: http.Header{}, Body: io.NopCloser(strings.NewReader(`{"error":{"type":"invalid_request_error","message":"no"}}`))}, nil
	})
	p, err := stripe.New(stripe.Config{APIKey: "sk_test_fuzz", BaseURL: "http://stripe.invalid",
		Transport: transport.New(transport.Options{Base: rt, MaxRetries: 0})})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// checkChanges holds the mapping's invariants for any input.
func checkChanges(t *testing.T, cs []reconcile.Change) { checkChangesOf(t, cs, true) }

// checkChangesOf is checkChanges; needID false waives "a change with a
// state has a provider id" (see TestFetchAnswerForAnotherObject).
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
			continue
		}
		if !c.Unknown && c.Revert == "" && c.AmountRefunded <= 0 && c.NoticeKind == "" {
			t.Fatalf("a change that says nothing (no state, not unknown, no revert, no refund, no notice): %+v", c)
		}
		if c.Notice != "" && c.NoticeKind == "" && !c.Unknown {
			t.Fatalf("a notice without a kind: %+v", c)
		}
	}
}

// seeds returns realistic events (one of each type the fake emits) and a
// balance transaction with its charge expanded, all as the fake renders
// them for stripe-go.
func seeds(t testing.TB) (events [][]byte, bt, pi []byte) {
	now := time.Date(2026, 11, 20, 6, 0, 0, 0, time.UTC)
	fake := stripefake.New(stripefake.Options{Now: func() time.Time { return now }, Seed: 3})
	a := fake.Account("")
	a.Generate(stripefake.GenOptions{Payments: 120, Start: now.Add(-96 * time.Hour), End: now.Add(-time.Hour), Seed: 3})
	p := a.CreatePayment(5000, "eur", true, now.Add(-50*time.Hour))
	a.Authorise(p, now.Add(-49*time.Hour))
	a.Capture(p, now.Add(-48*time.Hour))
	re := a.Refund(p, 1000, now.Add(-47*time.Hour))
	a.FailRefund(re, now.Add(-46*time.Hour))
	dp := a.Dispute(p, now.Add(-45*time.Hour))
	a.CloseDispute(dp, "won", now.Add(-44*time.Hour))
	po := a.Payout(now.Add(-2*time.Hour), p)
	seen := map[string]bool{}
	for _, d := range a.Deliveries() {
		if !seen[d.EventType] {
			seen[d.EventType] = true
			events = append(events, d.Payload)
		}
	}
	get := func(path string) []byte {
		req := httptest.NewRequest(http.MethodGet, path, nil)
		req.Header.Set("Authorization", "Bearer sk_test_seed")
		rec := httptest.NewRecorder()
		fake.Handler().ServeHTTP(rec, req)
		if rec.Code != 200 {
			t.Fatalf("seed %s: %d %s", path, rec.Code, rec.Body)
		}
		return rec.Body.Bytes()
	}
	var l struct{ Data []json.RawMessage }
	if err := json.Unmarshal(get("/v1/balance_transactions?payout="+po+"&expand[]=data.source"), &l); err != nil || len(l.Data) == 0 {
		t.Fatalf("seed balance transactions: %v", err)
	}
	return events, l.Data[0], bytes.TrimSpace(get("/v1/payment_intents/" + p + "?expand[]=latest_charge.refunds"))
}

// FuzzEventDecode: any bytes listed as an event (and as a payout's balance
// transaction) never panic the provider, and every change it yields holds
// the mapping's invariants.
func FuzzEventDecode(f *testing.F) {
	events, bt, _ := seeds(f)
	for _, ev := range events {
		f.Add(ev, bt)
	}
	f.Add([]byte(`{"id":"evt_1","object":"event","created":1,"type":"payment_intent.succeeded","data":{"object":{"object":"payment_intent","status":"succeeded"}}}`), bt)
	f.Add([]byte(`{"id":"evt_1","object":"event","created":-1,"type":"charge.refunded","data":{"object":{"captured":true,"refunded":true,"amount_refunded":-5,"payment_intent":{"id":"pi_1"}}}}`), bt)
	f.Add([]byte(`{"id":"evt_1","type":"payout.paid","data":{"object":{"id":"po_1"}}}`), []byte(`{"id":"txn_1","source":{"object":"charge","id":"ch_1","payment_intent":null}}`))
	f.Add([]byte(`{"id":"evt_1","type":"charge.dispute.closed","data":{"object":{"status":"under_review","payment_intent":"pi_1"}}}`), bt)
	f.Add([]byte(`null`), []byte(`null`))
	f.Fuzz(func(t *testing.T, event, bt []byte) {
		p := fuzzProvider(t, event, bt, nil)
		var got []reconcile.Change
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		err := p.ListChanges(ctx, reconcile.ListParams{Since: time.Unix(1700000001, 0), Until: time.Unix(1800000000, 0)},
			func(pg reconcile.Page) error {
				got = append(got, pg.Changes...)
				return nil
			})
		if ctx.Err() != nil {
			t.Fatalf("ListChanges did not return: %v", err)
		}
		checkChanges(t, got)
	})
}

// FuzzFetchDecode: any bytes answered for a re-fetched payment intent (the
// stuck-payment path) never panic, and its changes hold the invariants and
// carry a deterministic event id when they move a state.
func FuzzFetchDecode(f *testing.F) {
	_, _, pi := seeds(f)
	f.Add(pi)
	f.Add([]byte(`{"id":"pi_1","object":"payment_intent","amount":100,"currency":"gbp","status":"canceled","canceled_at":1700000000,"created":1600000000}`))
	f.Add([]byte(`{"id":"pi_1","status":"succeeded","latest_charge":{"id":"ch_1","captured":true,"refunded":false,"amount_refunded":50,"created":5,"refunds":{"data":[{"status":"succeeded","created":9}]}}}`))
	f.Add([]byte(`{"id":"pi_1","status":"requires_reauthorization"}`))
	f.Fuzz(func(t *testing.T, pi []byte) {
		p := fuzzProvider(t, nil, nil, pi)
		got, _ := p.Fetch(context.Background(), reconcile.FetchParams{ProviderIDs: []string{"pi_1"}})
		// An answer without an id yields a stateful change with no provider
		// id today (the engine drops it): TestFetchAnswerForAnotherObject.
		checkChangesOf(t, got, false)
		for _, c := range got {
			if c.State != models.StateNone && !strings.HasPrefix(c.EventID, "recon:") {
				t.Fatalf("a fetched change without a deterministic event id: %+v", c)
			}
		}
	})
}

// The stuck-payment path asks for one payment intent by id; an answer that
// is not that object (no id, or another id: a misrouted or cached
// response) must not become a change for another payment, nor a stateful
// change for no payment that the engine silently drops.
func TestFetchAnswerForAnotherObject(t *testing.T) {
	for _, body := range []string{`{"status":"canceled","canceled_at":1700000000}`, `{"id":"pi_2","status":"canceled","canceled_at":1700000000}`} {
		p := fuzzProvider(t, nil, nil, []byte(body))
		got, err := p.Fetch(context.Background(), reconcile.FetchParams{ProviderIDs: []string{"pi_1"}})
		for _, c := range got {
			if c.ProviderID != "pi_1" {
				t.Errorf("%s: a change for %q from the answer for pi_1 (err %v)", body, c.ProviderID, err)
			}
		}
		if err == nil {
			t.Errorf("%s: no error for an answer that is not pi_1", body)
		}
	}
}
