// Package stripefake is a fake Stripe API server that the real stripe-go v76
// client cannot tell from Stripe, for the GET endpoints the reconciler uses:
// events, payment intents, charges, refunds, disputes, payouts, balance
// transactions and the account (its payout schedule), with Stripe's list
// semantics, error shapes, Connect accounts (Stripe-Account header), a
// 30-day event horizon and fault injection. Fetched objects are rendered in
// the request's Stripe-Version (default APIVersion), events in the API
// version their account had when they were emitted (Account.SetAPIVersion). Accounts are built with explicit, event-emitting builder
// methods (or a realistic generator), and every account knows the ground
// truth its events imply (Deliveries, ExpectedAt).
package stripefake

import (
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/reconciler/reconciler/internal/fakekit"
)

// Options configures a Server.
type Options struct {
	// Now is the clock for the 30-day event horizon, balance transaction
	// statuses (pending until available_on) and manual-payout settlement;
	// nil = time.Now.
	Now  func() time.Time
	Seed int64 // for deterministic ids and failure injection
	// FullObjects renders every payment intent and charge with the rest of
	// the fields Stripe's API returns (fullobjects.go), so that payloads
	// have Stripe's sizes; the fields the fake models are the same.
	FullObjects bool
}

// Horizon is how far back events are listed and retrievable, as on Stripe.
const Horizon = 30 * 24 * time.Hour

// Server is the fake Stripe API. Create it with New.
type Server struct {
	opts Options
	now  func() time.Time

	accMu    sync.Mutex
	accounts map[string]*Account

	http   fakekit.Loopback
	faults *fakekit.Faults

	retryMu     sync.Mutex
	shouldRetry string
	acctFaults  accountFaults // FailAccount (accounts.go)

	reqSeq atomic.Int64
	counts fakekit.Counter

	corrupt corruptor // malformed.go
}

// New returns a server; call Start to serve it over HTTP or use Handler.
func New(opts Options) *Server {
	s := &Server{
		opts:     opts,
		now:      opts.Now,
		accounts: map[string]*Account{},
		faults:   fakekit.NewFaults(rand.New(rand.NewPCG(uint64(opts.Seed), 0x5712_1FE_FA4E))),
	}
	if s.now == nil {
		s.now = time.Now
	}
	return s
}

// Start serves the fake on 127.0.0.1 with a random port and returns its base
// URL, e.g. "http://127.0.0.1:41234". Calling it again returns the same URL.
func (s *Server) Start() string { return s.http.Start("stripefake", s.Handler()) }

// Close stops the HTTP server started by Start.
func (s *Server) Close() { s.http.Close() }

// Handler returns the fake's http.Handler.
func (s *Server) Handler() http.Handler { return http.HandlerFunc(s.serve) }

// Account returns the account with the given id, creating it on first use.
// "" is the platform account; requests carrying the header
// Stripe-Account: acct_x read account acct_x.
func (s *Server) Account(id string) *Account {
	s.accMu.Lock()
	defer s.accMu.Unlock()
	a, ok := s.accounts[id]
	if !ok {
		a = newAccount(id, s.opts.Seed, s.now)
		a.full = s.opts.FullObjects
		s.accounts[id] = a
	}
	return a
}

// SetLatency delays every response by d.
func (s *Server) SetLatency(d time.Duration) { s.faults.SetLatency(d) }

// FailNext makes the next n requests fail with status (429, 500 or 503) and
// Stripe's error JSON.
func (s *Server) FailNext(status int, n int) { s.faults.FailNext(status, n) }

// SetFailureRate makes each request fail with status with probability p,
// drawn from a PRNG seeded with Options.Seed; p = 0 turns it off.
func (s *Server) SetFailureRate(status int, p float64) { s.faults.SetFailureRate(status, p) }

// SetShouldRetryHeader sets the Stripe-Should-Retry header value sent with
// injected failures ("" = header absent).
func (s *Server) SetShouldRetryHeader(v string) {
	s.retryMu.Lock()
	s.shouldRetry = v
	s.retryMu.Unlock()
}

// Requests returns the number of HTTP requests received.
func (s *Server) Requests() int64 { return s.counts.Requests() }

// RequestsByStatus returns the number of responses per HTTP status.
func (s *Server) RequestsByStatus() map[int]int64 {
	return s.counts.ByStatus()
}

// RequestsByPath returns the number of requests per path pattern, such as
// "/v1/events" or "/v1/payment_intents/{id}"; unknown paths count under
// "unknown".
func (s *Server) RequestsByPath() map[string]int64 {
	return s.counts.ByPattern()
}

// retryHeader is the Stripe-Should-Retry value injected failures carry.
func (s *Server) retryHeader() string {
	s.retryMu.Lock()
	defer s.retryMu.Unlock()
	return s.shouldRetry
}

// request is what a handler needs of the request besides its id and query.
type request struct {
	now time.Time
	rv  render // the request's Stripe-Version (default APIVersion), judged at now
}

// handler serves one endpoint for account a.
type handler = func(a *Account, id string, q url.Values, rq request) ([]byte, *apiError)

type route struct {
	pattern string
	id      string
	handle  handler
}

func (s *Server) route(method, path string) route {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	if method != http.MethodGet || len(parts) < 2 || len(parts) > 3 || parts[0] != "v1" {
		return route{pattern: "unknown"}
	}
	var list, get handler
	switch parts[1] {
	case "events":
		list, get = listEvents, getEvent
	case "payment_intents":
		list, get = listPaymentIntents, getPaymentIntent
	case "charges":
		get = getCharge
	case "refunds":
		list, get = listRefunds, getRefund
	case "disputes":
		list, get = listDisputes, getDispute // disputes.go
	case "payouts":
		list, get = listPayouts, getPayout
	case "balance_transactions":
		list, get = listBalanceTransactions, getBalanceTransaction
	case "accounts":
		list, get = s.listAccounts, s.getAccountByID // accounts.go
	case "account":
		list = getAccount // accounts.go: GET /v1/account
	}
	list = listExpansions(parts[1], list) // listing.go: data.payment_intent on refunds and disputes
	base := "/v1/" + parts[1]
	switch {
	case len(parts) == 2 && list != nil:
		return route{pattern: base, handle: list}
	case len(parts) == 3 && get != nil && parts[2] != "":
		return route{pattern: base + "/{id}", id: parts[2], handle: get}
	}
	return route{pattern: "unknown"}
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	s.counts.Received()
	rt := s.route(r.Method, r.URL.Path)
	reqID := "req_" + strconv.FormatUint(fakekit.SplitMix64(uint64(s.opts.Seed)^uint64(s.reqSeq.Add(1)))%(1<<62), 36)
	h := w.Header()
	h.Set("Request-Id", reqID)
	h.Set("Content-Type", "application/json")
	version := strings.TrimSpace(r.Header.Get("Stripe-Version"))
	if version == "" {
		version = APIVersion
	}
	h.Set("Stripe-Version", version)
	h.Set("Cache-Control", "no-cache, no-store")

	status, body := s.respond(rt, r, h, version)
	body = s.corruptBody(rt.pattern, status, body)
	s.counts.Answered(status, rt.pattern)
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	w.Write(body)
}

func (s *Server) respond(rt route, r *http.Request, h http.Header, version string) (int, []byte) {
	// Every request, authenticated or not, consumes an injected failure
	// (or a draw of the failure rate's coin).
	latency, failStatus, retry := s.faults.Latency(), s.faults.Fail(), s.retryHeader()
	if failStatus == 0 {
		failStatus = s.accountFailure(r) // FailAccount (accounts.go)
	}
	fakekit.Wait(r.Context(), latency)
	if e := checkAuth(r.Header.Get("Authorization")); e != nil {
		h.Set("Www-Authenticate", `Bearer realm="Stripe"`)
		return e.status, errorJSON(e)
	}
	if failStatus != 0 {
		if retry != "" {
			h.Set("Stripe-Should-Retry", retry)
		}
		e := &apiError{status: failStatus, typ: "api_error",
			message: "An unknown error occurred while processing your request. Please retry."}
		if failStatus == http.StatusTooManyRequests {
			e.typ, e.code = "invalid_request_error", "rate_limit"
			e.message = "Too many requests hit the API too quickly. We recommend an exponential backoff of your requests."
		}
		return failStatus, errorJSON(e)
	}
	if rt.handle == nil {
		return 404, errorJSON(&apiError{status: 404, typ: "invalid_request_error",
			message: "Unrecognized request URL (" + r.Method + ": " + r.URL.Path +
				"). Please see https://stripe.com/docs or we can help at https://support.stripe.com/."})
	}
	acct := strings.TrimSpace(r.Header.Get("Stripe-Account"))
	a := s.Account(acct)
	now := s.now()
	body, e := rt.handle(a, rt.id, r.URL.Query(), request{now: now, rv: render{rules: rulesOf(version), now: now.Unix()}})
	if e != nil {
		return e.status, errorJSON(e)
	}
	return 200, body
}

func checkAuth(v string) *apiError {
	if v == "" {
		return &apiError{status: 401, typ: "invalid_request_error",
			message: "You did not provide an API key. You need to provide your API key in the Authorization header, using Bearer auth (e.g. 'Authorization: Bearer YOUR_SECRET_KEY')."}
	}
	key, ok := strings.CutPrefix(v, "Bearer ")
	key = strings.TrimSpace(key)
	if !ok || key == "" || !(strings.HasPrefix(key, "sk_test_") || strings.HasPrefix(key, "sk_live_") || strings.HasPrefix(key, "rk_")) {
		return &apiError{status: 401, typ: "invalid_request_error", code: "api_key_invalid",
			message: "Invalid API Key provided."}
	}
	return nil
}

func errorJSON(e *apiError) []byte {
	b := []byte(`{"error":{`)
	if e.code != "" {
		b = appendStr(append(b, `"code":`...), e.code)
		b = append(b, ',')
		b = appendStr(append(b, `"doc_url":`...), "https://stripe.com/docs/error-codes/"+strings.ReplaceAll(e.code, "_", "-"))
		b = append(b, ',')
	}
	b = appendStr(append(b, `"message":`...), e.message)
	if e.param != "" {
		b = appendStrField(b, "param", e.param)
	}
	b = appendStrField(b, "type", e.typ)
	return append(b, "}}\n"...)
}
