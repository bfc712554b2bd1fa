// Package gcfake is a fake GoCardless API (API version 2015-07-06, Direct
// Debit over Bacs) served over HTTP, for the GET endpoints the reconciler
// uses: events (with include=payment|refund, and the resource_type,
// payment, refund, payout and action filters), payments, refunds, payouts
// and payout items (410 Gone for payouts older than six months on the
// Options.Now clock), with GoCardless's cursor pagination, error shapes,
// required headers, rate-limit headers and fault injection. Its content is built
// with explicit, event-emitting builder methods (or a realistic generator),
// and the server knows the ground truth its events imply (Deliveries,
// ExpectedAt).
//
// Lists are newest first by (created_at, id) (payout items: in the order
// they were added to the payout, with opaque cursors); ids of a kind sort in
// creation order. meta.cursors.before is the first item's id (null only on
// an empty page) and meta.cursors.after the last item's id, null exactly
// when no older matching item remains. Checks run in this order: 401
// (Authorization), 400 (GoCardless-Version), 429 (SetRateLimit), injected
// failures, routing and parameters; every response carries the RateLimit-*
// headers.
package gcfake

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
	// Now is the clock for the rate-limit window and the six months of
	// payout items; nil = time.Now.
	Now  func() time.Time
	Seed int64 // for deterministic ids and failure injection
}

// Server is the fake GoCardless API. Create it with New. All methods are
// safe for concurrent use; builder methods panic on misuse (unknown ids), as
// befits a test helper.
type Server struct {
	opts Options
	now  func() time.Time
	ids  idCodec

	mu          sync.RWMutex
	pms         []pmObj
	refunds     []refundObj
	payouts     []payoutObj
	fees        []feeObj
	events      []eventRec
	evPayouts   []evPayout // by seq
	eventOrder  fakekit.Order
	typeOrder   [rtCount]fakekit.Order
	pmOrder     fakekit.Order
	refundOrder fakekit.Order
	payoutOrder fakekit.Order
	statuses    []string
	statusIdx   map[string]uint16
	actions     []string
	actionIdx   map[string]uint16
	currencies  []string

	http   fakekit.Loopback
	faults *fakekit.Faults

	rlMu      sync.Mutex
	rlLimit   int
	rlWindow  time.Duration
	rlStart   time.Time
	rlUsed    int
	rlStarted bool

	reqSeq atomic.Int64
	counts fakekit.Counter
}

// New returns a server; call Start to serve it over HTTP or use Handler.
func New(opts Options) *Server {
	s := &Server{
		opts:      opts,
		now:       opts.Now,
		ids:       newIDCodec(opts.Seed),
		statusIdx: map[string]uint16{},
		actionIdx: map[string]uint16{},
		faults:    fakekit.NewFaults(rand.New(rand.NewPCG(uint64(opts.Seed), 0x6C_FA4E_5EED))),
	}
	if s.now == nil {
		s.now = time.Now
	}
	s.currencyCode("GBP")
	return s
}

// Start serves the fake on 127.0.0.1 with a random port and returns its base
// URL, e.g. "http://127.0.0.1:41234". Calling it again returns the same URL.
func (s *Server) Start() string { return s.http.Start("gcfake", s.Handler()) }

// Close stops the HTTP server started by Start.
func (s *Server) Close() { s.http.Close() }

// Handler returns the fake's http.Handler.
func (s *Server) Handler() http.Handler { return http.HandlerFunc(s.serve) }

// SetLatency delays every response by d.
func (s *Server) SetLatency(d time.Duration) { s.faults.SetLatency(d) }

// FailNext makes the next n requests that pass authentication and the
// version check fail with status and GoCardless's error JSON (429: type
// invalid_api_usage, reason rate_limit_exceeded, RateLimit-Remaining 0 and
// RateLimit-Reset the current window's end, or one to two seconds away
// when no limit is set; 5xx: type gocardless, reason internal_server_error).
// Requests refused by the rate limit do not consume it.
func (s *Server) FailNext(status int, n int) { s.faults.FailNext(status, n) }

// SetFailureRate makes each request (past authentication and the version
// check) fail with status with probability p, drawn from a PRNG seeded with
// Options.Seed; p = 0 turns it off.
func (s *Server) SetFailureRate(status int, p float64) { s.faults.SetFailureRate(status, p) }

// SetRateLimit enforces a fixed-window budget of limit requests per window,
// on the Options.Now clock: a window opens at the first request after the
// previous one ended; past the budget requests answer 429 with
// RateLimit-Remaining 0 and RateLimit-Reset the window's end. limit <= 0
// turns it off (the headers then say 1000 of 1000 remaining).
func (s *Server) SetRateLimit(limit int, window time.Duration) {
	s.rlMu.Lock()
	s.rlLimit, s.rlWindow = max(limit, 0), window
	if s.rlWindow <= 0 {
		s.rlWindow = time.Minute
	}
	s.rlStarted, s.rlUsed = false, 0
	s.rlMu.Unlock()
}

// Requests returns the number of HTTP requests received.
func (s *Server) Requests() int64 { return s.counts.Requests() }

// RequestsByStatus returns the number of responses per HTTP status.
func (s *Server) RequestsByStatus() map[int]int64 {
	return s.counts.ByStatus()
}

// RequestsByPath returns the number of requests per path pattern, such as
// "/events" or "/payments/{id}"; unknown paths count under "unknown".
func (s *Server) RequestsByPath() map[string]int64 {
	return s.counts.ByPattern()
}

// defaultLimit is what the rate-limit headers report when no limit is set.
const defaultLimit = 1000

// rate reports the rate-limit state, consuming one request of the budget
// when consume is set; ok is false when the budget is exhausted.
func (s *Server) rate(consume bool) (limit, remaining int, reset time.Time, ok bool) {
	now := s.now()
	s.rlMu.Lock()
	defer s.rlMu.Unlock()
	if s.rlLimit == 0 {
		return defaultLimit, defaultLimit, now.Add(time.Minute), true
	}
	if !s.rlStarted || !now.Before(s.rlStart.Add(s.rlWindow)) {
		if !consume {
			return s.rlLimit, s.rlLimit, now.Add(s.rlWindow), true
		}
		s.rlStarted, s.rlStart, s.rlUsed = true, now, 0
	}
	ok = true
	if consume {
		if s.rlUsed >= s.rlLimit {
			ok = false
		} else {
			s.rlUsed++
		}
	}
	return s.rlLimit, s.rlLimit - s.rlUsed, s.rlStart.Add(s.rlWindow), ok
}

func setRateHeaders(h http.Header, limit, remaining int, reset time.Time) {
	// An HTTP date has whole seconds: round up, so that a client waiting
	// until Reset is never early.
	r := reset.Truncate(time.Second)
	if r.Before(reset) {
		r = r.Add(time.Second)
	}
	h.Set("RateLimit-Limit", strconv.Itoa(limit))
	h.Set("RateLimit-Remaining", strconv.Itoa(remaining))
	h.Set("RateLimit-Reset", r.UTC().Format(http.TimeFormat))
}

// handler serves one endpoint.
type handler = func(s *Server, id string, q url.Values) ([]byte, *apiError)

type route struct {
	pattern string
	id      string
	handle  handler
}

func (s *Server) route(path string) route {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	if len(parts) < 1 || len(parts) > 2 {
		return route{pattern: "unknown"}
	}
	var list, get handler
	switch parts[0] {
	case "events":
		list, get = listEvents, getEvent
	case "payments":
		list, get = listPayments, getPayment
	case "refunds":
		list, get = listRefunds, getRefund
	case "payouts":
		list, get = listPayouts, getPayout
	case "payout_items":
		list = listPayoutItems
	}
	base := "/" + parts[0]
	switch {
	case len(parts) == 1 && list != nil:
		return route{pattern: base, handle: list}
	case len(parts) == 2 && get != nil && parts[1] != "":
		return route{pattern: base + "/{id}", id: parts[1], handle: get}
	}
	return route{pattern: "unknown"}
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	s.counts.Received()
	rt := s.route(r.URL.Path)
	reqID := s.ids.id(kRequest, int(s.reqSeq.Add(1)))
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Request-Id", reqID)

	status, body := s.respond(rt, r, h, reqID)
	s.counts.Answered(status, rt.pattern)
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	w.Write(body)
}

func (s *Server) respond(rt route, r *http.Request, h http.Header, reqID string) (int, []byte) {
	fakekit.Wait(r.Context(), s.faults.Latency())
	fail := func(e *apiError) (int, []byte) { return e.status, errorJSON(e, reqID) }
	if e := checkAuth(r.Header.Get("Authorization")); e != nil {
		s.peekHeaders(h)
		return fail(e)
	}
	if e := checkVersion(r.Header); e != nil {
		s.peekHeaders(h)
		return fail(e)
	}
	limit, remaining, reset, ok := s.rate(true)
	if !ok {
		setRateHeaders(h, limit, 0, reset)
		return fail(rateLimited())
	}
	if st := s.faults.Fail(); st != 0 {
		if st == http.StatusTooManyRequests {
			if s.noLimit() {
				reset = s.now().Add(time.Second)
			}
			setRateHeaders(h, limit, 0, reset)
			return fail(rateLimited())
		}
		setRateHeaders(h, limit, remaining, reset)
		return fail(serverError(st))
	}
	setRateHeaders(h, limit, remaining, reset)
	if rt.handle == nil {
		return fail(&apiError{status: 404, typ: "invalid_api_usage", reason: "path_not_found",
			message: "Path not found"})
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return fail(&apiError{status: 405, typ: "invalid_api_usage", reason: "method_not_allowed",
			message: "Method not allowed: the fake serves only GET " + rt.pattern})
	}
	body, e := rt.handle(s, rt.id, r.URL.Query())
	if e != nil {
		return fail(e)
	}
	return 200, body
}

// peekHeaders sets the rate-limit headers without consuming the budget.
func (s *Server) peekHeaders(h http.Header) {
	limit, remaining, reset, _ := s.rate(false)
	setRateHeaders(h, limit, remaining, reset)
}

func (s *Server) noLimit() bool {
	s.rlMu.Lock()
	defer s.rlMu.Unlock()
	return s.rlLimit == 0
}

func checkAuth(v string) *apiError {
	if v == "" {
		return &apiError{status: 401, typ: "invalid_api_usage", reason: "missing_authorization_header",
			message: "Authorization header is missing. Provide your access token as 'Authorization: Bearer <token>'."}
	}
	tok, ok := strings.CutPrefix(v, "Bearer ")
	tok = strings.TrimSpace(tok)
	valid := func(p string) bool { return strings.HasPrefix(tok, p) && len(tok) > len(p) }
	if !ok || !(valid("sandbox_") || valid("live_")) {
		return &apiError{status: 401, typ: "invalid_api_usage", reason: "access_token_not_found",
			message: "Access token not found"}
	}
	return nil
}

func checkVersion(h http.Header) *apiError {
	v, ok := h["Gocardless-Version"]
	if !ok || len(v) == 0 || strings.TrimSpace(v[0]) == "" {
		return &apiError{status: 400, typ: "invalid_api_usage", reason: "missing_version_header",
			message: "GoCardless-Version header is required"}
	}
	if strings.TrimSpace(v[0]) != APIVersion {
		return &apiError{status: 400, typ: "invalid_api_usage", reason: "version_not_found",
			message: "Version not found: use GoCardless-Version " + APIVersion}
	}
	return nil
}

func rateLimited() *apiError {
	return &apiError{status: 429, typ: "invalid_api_usage", reason: "rate_limit_exceeded",
		message: "You have exceeded the rate limit. See the RateLimit-Reset header for when you can make requests again."}
}

func serverError(status int) *apiError {
	return &apiError{status: status, typ: "gocardless", reason: "internal_server_error",
		message: "Uh-oh! There was an internal server error. Please retry."}
}

// apiError is a GoCardless error response.
type apiError struct {
	status  int
	typ     string
	reason  string
	message string
}

func errorJSON(e *apiError, reqID string) []byte {
	b := []byte(`{"error":{`)
	b = appendStrField(b, "message", e.message)
	b = appendStrField(b, "documentation_url", "https://developer.gocardless.com/api-reference#"+e.typ+"-"+e.reason)
	b = appendStrField(b, "type", e.typ)
	b = appendStrField(b, "request_id", reqID)
	b = appendIntField(b, "code", int64(e.status))
	b = append(appendKey(b, "errors"), '[', '{')
	b = appendStrField(b, "reason", e.reason)
	b = appendStrField(b, "message", e.message)
	return append(b, "}]}}\n"...)
}
