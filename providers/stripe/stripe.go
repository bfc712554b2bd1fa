// Package stripe reads what changed on a Stripe account through stripe-go
// and maps it to the engine's changes (DESIGN sections 3 and 4).
package stripe

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	stripego "github.com/stripe/stripe-go/v76"
	"github.com/stripe/stripe-go/v76/client"

	"github.com/reconciler/reconciler/internal/retry"
	"github.com/reconciler/reconciler/internal/tmpfile"
	"github.com/reconciler/reconciler/providers/transport"
	"github.com/reconciler/reconciler/reconcile"
)

// Name is the provider's name in the database.
const Name = "stripe"

// maxChangesPerPage bounds the changes of one page (a payout's settlements).
const maxChangesPerPage = 1000

// EventRetention is how long Stripe's event log keeps events.
const EventRetention = 30 * 24 * time.Hour

// The defaults: New applies DefaultBaseURL and DefaultTimeout to a zero
// field. DefaultRequestsPerSecond and DefaultMaxRetries are the
// configuration's (config.Default); in Config a zero still means unpaced
// and never retried.
const (
	// DefaultBaseURL is Stripe's API.
	DefaultBaseURL = "https://api.stripe.com"
	// DefaultRequestsPerSecond stays below Stripe's default limit of 25
	// requests a second per endpoint (which counts against the account's
	// global limit: 100 a second live, 25 in a sandbox); see
	// docs/providers/stripe.md, section 14.
	DefaultRequestsPerSecond = 20
	// DefaultMaxRetries is how often one request is retried on 429 or 5xx.
	DefaultMaxRetries = 8
	// DefaultTimeout bounds one attempt of an HTTP request (connecting,
	// the answer's headers, reading its body).
	DefaultTimeout = transport.DefaultTimeout
	// DefaultRequestDeadline bounds one request: all its attempts and the
	// waits between them.
	DefaultRequestDeadline = transport.DefaultDeadline
)

// EventTypes are the event types the mapping reads: at most 20, so one
// request covers them (DESIGN section 3; docs/providers/stripe.md, section
// 7). payment_intent.partially_funded (customer balance transfers) and
// charge.dispute.updated (evidence submitted) are left out for room: the
// first shows a state the next event shows too, the second no state.
// refund.updated and refund.failed are sent for card refunds only by
// accounts on 2024-10-28.acacia or later; older accounts send
// charge.refund.updated.
var EventTypes = []string{
	"payment_intent.created",
	"payment_intent.requires_action",
	"payment_intent.processing",
	"payment_intent.amount_capturable_updated",
	"payment_intent.succeeded",
	"payment_intent.payment_failed",
	"payment_intent.canceled",
	"charge.captured",
	"charge.refunded",
	"charge.refund.updated",
	"refund.updated",
	"refund.failed",
	"charge.dispute.created",
	"charge.dispute.funds_withdrawn",
	"charge.dispute.funds_reinstated",
	"charge.dispute.closed",
	"payout.paid",
	"payout.failed",
	"payout.canceled",
	"payout.reconciliation_completed",
}

// Config configures the Stripe provider.
type Config struct {
	APIKey            string        // secret or restricted key; never logged
	BaseURL           string        // DefaultBaseURL when empty; STRIPE_API_BASE
	RequestsPerSecond float64       // pacing budget; 0 = unpaced (config: DefaultRequestsPerSecond)
	MaxRetries        int           // retries of one request on 429/5xx/network errors; 0 = none (config: DefaultMaxRetries)
	Timeout           time.Duration // per attempt of an HTTP request; DefaultTimeout when 0
	RequestDeadline   time.Duration // per request, all attempts and waits; DefaultRequestDeadline when 0
	PageSize          int64         // events per list request, at most 100
	Logger            *slog.Logger
	// Sleep and Now are injected into the transport by tests.
	Sleep func(ctx context.Context, d time.Duration) error
	Now   func() time.Time
	// Transport, when set, is shared with other providers (connected
	// accounts read concurrently share one request budget); pacing and
	// retry options above are then ignored.
	Transport *transport.Transport
	// ReadAhead, set by tests, reads ahead of the events stream (ahead.go)
	// whatever Stripe's latency: each read-ahead aims at ReadAheadEvents
	// events (0: 5,000), its file in ReadAheadDir ("": TMPDIR); its
	// read-aheads bounded by ReadAheadMax bytes of their own (0: the
	// process's AheadMax, shared).
	ReadAhead       bool
	ReadAheadEvents int
	ReadAheadDir    string
	ReadAheadMax    int64
	// ReadAheadPayoutsMax, set by tests, bounds what the payouts listed
	// ahead of a stream keep in memory (payoutahead.go; 0: 2 MiB).
	ReadAheadPayoutsMax int64
}

// Provider reads one Stripe platform (and its connected accounts).
type Provider struct {
	mode string
	api  *client.API
	be   *stripego.BackendImplementation // the API backend, for rawPage
	tr   *transport.Transport
	// shared is set when tr is shared: it counts this provider's requests
	// (each logical request once; the shared transport counts retries).
	shared *transport.Counter
	page   int64
	log    *slog.Logger

	schedMu   sync.Mutex
	schedules map[string]schedule // by account, read once (payoutSchedule)

	// The read-ahead (ahead.go): Config's ReadAhead fields; aheadTaken
	// counts the read-aheads the stream went on from, aheadSplit the
	// stretches split while it waited.
	aheadAlways bool
	aheadN      int
	aheadDir    string
	aheadBudget *tmpfile.Budget // the process's (aheadBudget), or its own with ReadAheadMax
	aheadTaken  atomic.Int64
	aheadSplit  atomic.Int64
	// payoutsAhead counts the payout events whose balance transactions
	// the mapping read from a listing ahead (payoutahead.go); btKeep
	// bounds what a stream's listings keep.
	payoutsAhead atomic.Int64
	btKeep       int64
}

var (
	_ reconcile.Provider      = (*Provider)(nil)
	_ reconcile.ModeReporter  = (*Provider)(nil)
	_ reconcile.StatusCounter = (*Provider)(nil)
)

// New returns a provider over stripe-go. It makes no request.
func New(cfg Config) (*Provider, error) {
	if cfg.APIKey == "" {
		return nil, errors.New("stripe: no API key (set STRIPE_API_KEY)")
	}
	if cfg.BaseURL == "" {
		cfg.BaseURL = DefaultBaseURL
	}
	if cfg.PageSize <= 0 || cfg.PageSize > 100 {
		cfg.PageSize = 100
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	tr := cfg.Transport
	var rt http.RoundTripper = tr
	var shared *transport.Counter
	if tr == nil {
		tr = NewTransportFor(cfg)
		rt = tr
	} else {
		shared = &transport.Counter{Base: tr}
		rt = shared
	}
	// stripe-go retries network errors and 5xx but not rate-limit 429s, with
	// sleeps that ignore the context; our transport does all retrying, so
	// there is one policy and it honours cancellation. The client has no
	// Timeout: it would bound every attempt and wait together, cut the
	// retries short and hide their cause; the transport bounds each attempt
	// and the request.
	backend := stripego.GetBackendWithConfig(stripego.APIBackend, &stripego.BackendConfig{
		URL:               stripego.String(cfg.BaseURL),
		HTTPClient:        &http.Client{Transport: rt},
		LeveledLogger:     &stripego.LeveledLogger{Level: stripego.LevelNull},
		MaxNetworkRetries: stripego.Int64(0),
	})
	api := client.New(cfg.APIKey, &stripego.Backends{API: backend, Connect: backend, Uploads: backend})
	budget := aheadBudget
	if cfg.ReadAheadMax > 0 {
		budget = tmpfile.NewBudget(cfg.ReadAheadMax) // a bound of its own (tests)
	}
	if cfg.ReadAheadPayoutsMax <= 0 {
		cfg.ReadAheadPayoutsMax = btKeep
	}
	mode := "live"
	if strings.Contains(cfg.APIKey, "_test_") {
		mode = "test"
	}
	return &Provider{mode: mode, api: api, be: backend.(*stripego.BackendImplementation), tr: tr, shared: shared, page: cfg.PageSize, log: cfg.Logger,
		aheadAlways: cfg.ReadAhead, aheadN: cfg.ReadAheadEvents, aheadDir: cfg.ReadAheadDir, aheadBudget: budget, btKeep: cfg.ReadAheadPayoutsMax}, nil
}

// ReadAheadsTaken is how many read-aheads the events stream went on from
// (ahead.go).
func (p *Provider) ReadAheadsTaken() int64 { return p.aheadTaken.Load() }

// ReadAheadsSplit is how many stretches the events stream split while it
// waited for the next (ahead.go, split).
func (p *Provider) ReadAheadsSplit() int64 { return p.aheadSplit.Load() }

// PayoutsListedAhead is how many payout events' balance transactions the
// mapping read, in part or whole, from a listing ahead (payoutahead.go).
func (p *Provider) PayoutsListedAhead() int64 { return p.payoutsAhead.Load() }

// Mode is "test" or "live", from the key.
func (p *Provider) Mode() string { return p.mode }

// NewTransport is the paced, retrying transport Stripe clients use, with
// the default attempt timeout and request deadline; one can be shared by
// several providers through Config.Transport.
func NewTransport(rps float64, maxRetries int, sleep func(ctx context.Context, d time.Duration) error) *transport.Transport {
	return NewTransportFor(Config{RequestsPerSecond: rps, MaxRetries: maxRetries, Sleep: sleep})
}

// NewTransportFor is NewTransport with cfg's pacing, retries, attempt
// timeout, request deadline and clock. Stripe-Should-Retry is honoured:
// "false" stops retrying, "true" retries whatever the status (stripe-go
// v76.25.0 reads it the same way, stripe.go L903-911;
// docs/providers/stripe.md, section 14).
func NewTransportFor(cfg Config) *transport.Transport {
	return transport.New(transport.Options{
		RequestsPerSecond: cfg.RequestsPerSecond,
		MaxRetries:        cfg.MaxRetries,
		Timeout:           cfg.Timeout,
		Deadline:          cfg.RequestDeadline,
		ShouldRetryHeader: "Stripe-Should-Retry",
		Sleep:             cfg.Sleep,
		Now:               cfg.Now,
		Describe:          describe,
	})
}

// describe words an error answer the transport gave up on as Stripe's
// error object says it (type, code, message) and its Request-Id, as
// APIError does.
func describe(resp *http.Response) string {
	var e struct {
		Error struct {
			Type    string `json:"type"`
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	s := ""
	if json.Unmarshal(body, &e) == nil && e.Error.Type != "" {
		s = (&APIError{Status: resp.StatusCode, Type: e.Error.Type, Code: e.Error.Code, Message: e.Error.Message}).detail()
	}
	if id := resp.Header.Get("Request-Id"); id != "" {
		s = strings.TrimSpace(s + " [request " + id + "]")
	}
	return s
}

// Name implements reconcile.Provider.
func (p *Provider) Name() string { return Name }

// Horizon implements reconcile.Provider: Stripe lists 30 days of events.
func (p *Provider) Horizon(now time.Time) time.Time { return now.Add(-EventRetention) }

// Requests implements reconcile.Provider: this provider's requests, retries
// included unless the transport is shared.
func (p *Provider) Requests() int64 {
	if p.shared != nil {
		return p.shared.Requests()
	}
	return p.tr.Requests()
}

// RequestsByStatus returns the HTTP requests made by status code (of the
// whole shared transport when it is shared).
func (p *Provider) RequestsByStatus() map[int]int64 { return p.tr.ByStatus() }

func listParams(ctx context.Context, account string, limit int64) stripego.ListParams {
	lp := stripego.ListParams{Context: ctx, Limit: stripego.Int64(limit)}
	if account != "" {
		lp.SetStripeAccount(account)
	}
	return lp
}

var wanted = func() map[string]bool {
	m := map[string]bool{}
	for _, t := range EventTypes {
		m[t] = true
	}
	return m
}()

func types() []*string {
	out := make([]*string, len(EventTypes))
	for i := range EventTypes {
		out[i] = &EventTypes[i]
	}
	return out
}

// ListChanges implements reconcile.Provider. It streams the window's events
// oldest first with constant memory: it finds an anchor event just before
// the window and pages forward with ending_before from it. When no event
// precedes the window inside the retention horizon, it first walks the
// window newest first to find its oldest event (twice the requests, only on
// young accounts or windows at the horizon).
func (p *Provider) ListChanges(ctx context.Context, lp reconcile.ListParams, fn func(reconcile.Page) error) error {
	since, until := lp.Since.Unix(), lp.Until.Unix()
	if lp.Until.Nanosecond() != 0 {
		until++ // [since, until) in whole seconds covers the sub-second end
	}
	anchor := lp.After // resuming: the last event a crashed run committed
	var first *leanEvent
	var err error
	if anchor == "" {
		if anchor, err = p.anchor(ctx, lp.Account, since); err != nil {
			return err
		}
	}
	// The account's payout schedule, read only once the window's events
	// were handed on, is asked for beside them: a run's first requests
	// wait for one answer less (session 19: 0.3 s of every run where
	// Stripe answers in 300 ms). It is asked for once the anchor answered,
	// so that a provider that fails the run's first request is asked
	// nothing else, as before.
	schedOf, stopSched := p.scheduleBeside(ctx, lp.Account)
	defer stopSched()
	if anchor == "" {
		if first, err = p.oldestIn(ctx, lp.Account, since, until); err != nil {
			return err
		}
		if first != nil {
			anchor = first.ID
		}
	}
	params := &stripego.EventListParams{
		ListParams:   listParams(ctx, lp.Account, p.page),
		CreatedRange: &stripego.RangeQueryParams{GreaterThanOrEqual: since, LesserThan: until},
		Types:        types(),
	}

	// Payouts' balance transactions listed ahead, while read-aheads list.
	ahead := p.newBTAheads(ctx, lp.Account)
	defer ahead.close()
	var page reconcile.Page
	flush := func() error {
		if len(page.Events) == 0 && len(page.Changes) == 0 {
			return nil
		}
		err := fn(page)
		// The next page reuses this one's slices: fn keeps none of them
		// (reconcile.Provider.ListChanges), and a page's slices fresh each
		// time were a twelfth of a rerun's allocations.
		page = page.Reuse()
		return err
	}
	add := func(ev *leanEvent) error {
		if ev.Created < since || !wanted[ev.Type] {
			// Stripe filters by created and types[]; an event outside them
			// (stripe-mock lists its fixtures whatever is asked) is not the
			// window's and is neither recorded nor mapped.
			p.log.Warn("stripe listed an event the request excluded; skipped", "event_id", ev.ID, "type", ev.Type)
			return nil
		}
		at := time.Unix(ev.Created, 0).UTC()
		if strings.HasPrefix(ev.Type, "payout.") {
			// A payout can settle tens of thousands of charges: they are
			// delivered as its balance transactions are read, in pages of
			// their own so that a batch stays small. The payout's event goes
			// with the first; the cursor moves past it with the last, and a
			// page is handed on only when another change follows it. Held
			// whole (a month's payout of 73,000 charges is 24 MB of changes),
			// they took the heap past the soft limit at a million events
			// (peak RSS 105-106 MiB; issue 16).
			page.Events = append(page.Events, reconcile.Event{ID: ev.ID, Type: ev.Type, At: at, Payload: ev.raw})
			n := 0
			if err := p.payoutEach(ctx, lp.Account, ev, ahead, func(c reconcile.Change) error {
				if n == maxChangesPerPage {
					if err := flush(); err != nil {
						return err
					}
					n = 0
				}
				page.Changes = append(page.Changes, c)
				n++
				return nil
			}); err != nil {
				return err
			}
		} else {
			c, ok, err := mapOne(ev)
			if err != nil {
				return err
			}
			_, known := versionDate(ev.APIVersion)
			page.Events = append(page.Events, reconcile.Event{ID: ev.ID, Type: ev.Type, At: at, Payload: ev.raw, Unread: !known})
			if ok {
				page.Changes = append(page.Changes, c)
			}
		}
		page.Cursor, page.CursorAt = ev.ID, at
		if int64(len(page.Events)) >= p.page {
			return flush()
		}
		return nil
	}
	if first != nil {
		if err := add(first); err != nil {
			return err
		}
	}
	// No anchor: the window holds no event (a charge may still become
	// available in it, below).
	if anchor != "" {
		if err := p.stream(ctx, lp.Account, params, anchor, since, until, ahead, add); err != nil {
			return err
		}
	}
	if err := flush(); err != nil {
		return err
	}
	sched, err := schedOf()
	if err != nil {
		return err
	}
	if !sched.manual {
		return nil
	}
	// An account that pays out by hand has no payout to list: a charge is
	// settled when its balance transaction becomes available.
	return p.settleAvailable(ctx, lp.Account, lp.Since, lp.Until, sched.delayDays, func(cs []reconcile.Change) error {
		return fn(reconcile.Page{Changes: cs})
	})
}

// scheduleBeside asks for the account's payout schedule (payoutSchedule)
// in a goroutine: wait returns the answer; stop, once wait is no longer
// needed, ends the request and waits for it, so that none outlives the
// caller.
func (p *Provider) scheduleBeside(ctx context.Context, account string) (wait func() (schedule, error), stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	var s schedule
	var err error
	done := make(chan struct{})
	go func() {
		defer close(done)
		s, err = p.payoutSchedule(ctx, account)
	}()
	wait = func() (schedule, error) {
		<-done
		return s, err
	}
	stop = func() {
		cancel()
		<-done
	}
	return wait, stop
}

// anchor returns the id of the newest event before since, of any type, or
// "" when the log holds none.
func (p *Provider) anchor(ctx context.Context, account string, since int64) (string, error) {
	params := &stripego.EventListParams{
		ListParams:   listParams(ctx, account, 1),
		CreatedRange: &stripego.RangeQueryParams{LesserThan: since},
	}
	params.Single = true
	it := p.eventIter(params, false)
	if it.Next() {
		return it.Current().(*leanEvent).ID, nil
	}
	if err := it.Err(); err != nil {
		return "", fmt.Errorf("find stripe anchor event: %w", translate(err))
	}
	return "", nil
}

// oldestIn walks the window newest first and returns its oldest event.
func (p *Provider) oldestIn(ctx context.Context, account string, since, until int64) (*leanEvent, error) {
	params := &stripego.EventListParams{
		ListParams:   listParams(ctx, account, 100),
		CreatedRange: &stripego.RangeQueryParams{GreaterThanOrEqual: since, LesserThan: until},
		Types:        types(),
	}
	it := p.eventIter(params, false)
	var last *leanEvent
	for it.Next() {
		last = it.Current().(*leanEvent)
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("list stripe events: %w", translate(err))
	}
	return last, nil
}

// translate turns stripe-go errors into errors that name the status and
// Stripe's own message, never the request's credentials.
func translate(err error) error {
	var se *stripego.Error
	if errors.As(err, &se) {
		return &APIError{Status: se.HTTPStatusCode, Type: string(se.Type), Code: string(se.Code), Message: se.Msg, RequestID: se.RequestID}
	}
	// The retry policy gave up: its error names the request, the attempts,
	// the last answer or error (http.Client's wrapper would quote the URL
	// before it a second time).
	var re *retry.Error
	if errors.As(err, &re) {
		return fmt.Errorf("stripe: %w", re)
	}
	// stripe-go quotes part of an undecodable body, which may carry
	// customer data: never let it reach logs or the run record.
	if msg := err.Error(); strings.Contains(msg, "body sample:") {
		cause := ""
		if i := strings.LastIndex(msg, "): "); i >= 0 {
			cause = ": " + msg[i+3:]
		}
		return fmt.Errorf("stripe: the response body is not the JSON expected%s", cause)
	}
	return err
}

// APIError is an error answered by Stripe's API.
type APIError struct {
	Status    int
	Type      string
	Code      string
	Message   string
	RequestID string
}

func (e *APIError) Error() string {
	s := fmt.Sprintf("stripe: HTTP %d %s", e.Status, e.detail())
	if e.RequestID != "" {
		s += " [request " + e.RequestID + "]"
	}
	return s
}

// detail is the error's type, code and message.
func (e *APIError) detail() string {
	s := e.Type
	if e.Code != "" {
		s += " (" + e.Code + ")"
	}
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}
