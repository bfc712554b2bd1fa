// Package gocardless reads what changed on a GoCardless creditor (UK Direct
// Debit over Bacs) through its HTTP API and maps it to the engine's changes
// (DESIGN sections 3 and 4). No official Go client is available here; the
// HTTP code is small and typed.
package gocardless

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/reconciler/reconciler/internal/retry"
	"github.com/reconciler/reconciler/internal/tmpfile"
	"github.com/reconciler/reconciler/providers/transport"
	"github.com/reconciler/reconciler/reconcile"
)

// Name is the provider's name in the database.
const Name = "gocardless"

// Version is the API version every request names.
const Version = "2015-07-06"

// Base URLs.
const (
	LiveURL    = "https://api.gocardless.com"
	SandboxURL = "https://api-sandbox.gocardless.com"
)

// The defaults: New applies DefaultTimeout to a zero field, and LiveURL or
// SandboxURL (from the token) to an empty base URL. DefaultRequestsPerSecond
// and DefaultMaxRetries are the configuration's (config.Default); in Config
// a zero still means unpaced and never retried.
const (
	// DefaultRequestsPerSecond stays below GoCardless's limit of 1000
	// requests a minute per token.
	DefaultRequestsPerSecond = 10
	// DefaultMaxRetries is how often one request is retried on 429 or 5xx.
	DefaultMaxRetries = 8
	// DefaultTimeout bounds one attempt of an HTTP request (connecting,
	// the answer's headers, reading its body).
	DefaultTimeout = transport.DefaultTimeout
	// DefaultRequestDeadline bounds one request: all its attempts and the
	// waits between them.
	DefaultRequestDeadline = transport.DefaultDeadline
)

// Config configures the GoCardless provider.
type Config struct {
	AccessToken       string        // GOCARDLESS_ACCESS_TOKEN; never logged
	BaseURL           string        // GOCARDLESS_API_BASE; default from the token (sandbox_… → sandbox)
	RequestsPerSecond float64       // pacing budget; 0 = unpaced (config: DefaultRequestsPerSecond)
	MaxRetries        int           // retries of one request on 429/5xx/network errors; 0 = none (config: DefaultMaxRetries)
	Timeout           time.Duration // per attempt of an HTTP request; DefaultTimeout when 0
	RequestDeadline   time.Duration // per request, all attempts and waits; DefaultRequestDeadline when 0
	PageSize          int           // events per list request, at most 500
	// Hold is how many of a window's events the event path holds at once
	// (ListChanges); 0 = DefaultHold. A window with more is read in slices
	// of its time.
	Hold int
	// Retention is how long the event log is kept; 0 when unknown, so no
	// window is clamped.
	Retention time.Duration
	Logger    *slog.Logger
	// Sleep and Now are the transport's clock; tests inject them.
	Sleep func(ctx context.Context, d time.Duration) error
	Now   func() time.Time
}

// Provider reads one GoCardless creditor.
type Provider struct {
	c     *http.Client
	tr    *transport.Transport
	base  string
	token string
	page  int
	hold  int
	// held, when set (tests), is told of each slice of a window the event
	// path delivered: its bounds and how many events it held.
	held func(from, end time.Time, n int)
	// totalsKept, when set (tests), bounds the refunded payments' totals a
	// window keeps, in place of totalsKept.
	totalsKept int
	// spillDir and spillMax, when set (tests), are where the event path
	// spills a slice's pages (os.TempDir when empty) and the most it
	// spills (DefaultSpillMax when 0; below 0, no spill).
	spillDir string
	spillMax int64
	// spills, when set (tests), is the budget of disk the provider's
	// spills share in place of the process's (processSpills).
	spills *tmpfile.Budget
	// noPrefetch: no slice is listed ahead (prefetch). Unpaced, the
	// reading outruns the engine's writing anyway, and listing ahead would
	// only cost CPU; tests set it either way. listedAhead counts the
	// slices read from a listing ahead.
	noPrefetch  bool
	listedAhead int
	retention   time.Duration
	log         *slog.Logger
	now         func() time.Time // the transport's clock (Config.Now)
}

var (
	_ reconcile.Provider      = (*Provider)(nil)
	_ reconcile.ModeReporter  = (*Provider)(nil)
	_ reconcile.StatusCounter = (*Provider)(nil)
)

// New returns a provider. It makes no request.
func New(cfg Config) (*Provider, error) {
	if cfg.AccessToken == "" {
		return nil, errors.New("gocardless: no access token (set GOCARDLESS_ACCESS_TOKEN)")
	}
	if cfg.BaseURL == "" {
		cfg.BaseURL = LiveURL
		if strings.HasPrefix(cfg.AccessToken, "sandbox_") {
			cfg.BaseURL = SandboxURL
		}
	}
	if cfg.PageSize <= 0 || cfg.PageSize > 500 {
		cfg.PageSize = 500
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Hold <= 0 {
		cfg.Hold = DefaultHold
	}
	tr := transport.New(transport.Options{
		RequestsPerSecond:  cfg.RequestsPerSecond,
		MaxRetries:         cfg.MaxRetries,
		Timeout:            cfg.Timeout,
		Deadline:           cfg.RequestDeadline,
		RateLimitRemaining: "RateLimit-Remaining",
		RateLimitReset:     "RateLimit-Reset",
		Sleep:              cfg.Sleep,
		Now:                cfg.Now,
		Describe:           describe,
	})
	// No http.Client.Timeout: it would bound every attempt and wait
	// together and hide why they failed; the transport bounds each attempt
	// (Timeout) and the request (RequestDeadline).
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Provider{c: &http.Client{Transport: tr}, tr: tr, base: strings.TrimRight(cfg.BaseURL, "/"),
		token: cfg.AccessToken, page: cfg.PageSize, hold: cfg.Hold, retention: cfg.Retention, log: cfg.Logger, now: cfg.Now,
		noPrefetch: cfg.RequestsPerSecond <= 0}, nil
}

// Name implements reconcile.Provider.
func (p *Provider) Name() string { return Name }

// Mode is "test" for sandbox tokens, else "live".
func (p *Provider) Mode() string {
	if strings.HasPrefix(p.token, "sandbox_") {
		return "test"
	}
	return "live"
}

// Horizon implements reconcile.Provider.
func (p *Provider) Horizon(now time.Time) time.Time {
	if p.retention <= 0 {
		return time.Time{}
	}
	return now.Add(-p.retention)
}

// Requests implements reconcile.Provider.
func (p *Provider) Requests() int64 { return p.tr.Requests() }

// RequestsByStatus returns the HTTP requests made by status code.
func (p *Provider) RequestsByStatus() map[int]int64 { return p.tr.ByStatus() }

// APIError is an error answered by the GoCardless API.
type APIError struct {
	Status    int
	Type      string
	Message   string
	Reasons   []string
	RequestID string
}

// unsupported reports an answer that says the request itself is not
// served (400, 404, 405, 410, 422): a look-up the job can do without
// (creditor events, a payment's events) is then skipped with a warning
// rather than failing the run. Authentication, rate limits and server
// errors are never "unsupported".
func unsupported(err error) bool {
	var ae *APIError
	if !errors.As(err, &ae) {
		return false
	}
	switch ae.Status {
	case http.StatusBadRequest, http.StatusNotFound, http.StatusMethodNotAllowed, http.StatusGone, http.StatusUnprocessableEntity:
		return true
	}
	return false
}

func (e *APIError) Error() string {
	s := fmt.Sprintf("gocardless: HTTP %d %s", e.Status, e.Type)
	if e.Message != "" {
		s += ": " + e.Message
	}
	if len(e.Reasons) > 0 {
		s += " (" + strings.Join(e.Reasons, ", ") + ")"
	}
	if e.RequestID != "" {
		s += " [request " + e.RequestID + "]"
	}
	return s
}

// get fetches path with query into v.
func (p *Provider) get(ctx context.Context, path string, q url.Values, v any) error {
	body, err := p.getBody(ctx, path, q)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("gocardless: decode %s: %w", path, err)
	}
	return nil
}

// getBody is get's answer, undecoded.
func (p *Provider) getBody(ctx context.Context, path string, q url.Values) ([]byte, error) {
	u := p.base + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+p.token)
	req.Header.Set("GoCardless-Version", Version)
	req.Header.Set("Accept", "application/json")
	resp, err := p.c.Do(req)
	var re *retry.Error
	if errors.As(err, &re) {
		// The retry policy gave up: its error names the request, the
		// attempts and the last answer or error.
		return nil, fmt.Errorf("gocardless: %w", re)
	}
	if err != nil {
		return nil, fmt.Errorf("gocardless: GET %s: %w", path, redact(err, p.token))
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("gocardless: read %s: %w", path, err)
	}
	if resp.StatusCode >= 300 {
		return nil, apiError(resp.StatusCode, body)
	}
	return body, nil
}

// describe words an error answer the transport gave up on as GoCardless's
// error object says it (type, message, reasons, request id).
func describe(resp *http.Response) string {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	ae := apiError(resp.StatusCode, body)
	if ae.Type == "" && ae.Message == "" && ae.RequestID == "" {
		return ""
	}
	return strings.TrimPrefix(ae.Error(), fmt.Sprintf("gocardless: HTTP %d ", ae.Status))
}

// apiError is the APIError an error answer's body describes.
func apiError(status int, body []byte) *APIError {
	var e struct {
		Error struct {
			Message   string `json:"message"`
			Type      string `json:"type"`
			RequestID string `json:"request_id"`
			Errors    []struct {
				Reason string `json:"reason"`
			} `json:"errors"`
		} `json:"error"`
	}
	ae := &APIError{Status: status}
	if json.Unmarshal(body, &e) == nil {
		ae.Type, ae.Message, ae.RequestID = e.Error.Type, e.Error.Message, e.Error.RequestID
		for _, r := range e.Error.Errors {
			ae.Reasons = append(ae.Reasons, r.Reason)
		}
	}
	return ae
}

func redact(err error, token string) error {
	if token != "" && strings.Contains(err.Error(), token) {
		return errors.New(strings.ReplaceAll(err.Error(), token, "[token]"))
	}
	return err
}

// Event is a GoCardless event as listed.
type Event struct {
	ID           string    `json:"id"`
	CreatedAt    time.Time `json:"created_at"`
	Action       string    `json:"action"`
	ResourceType string    `json:"resource_type"`
	Links        struct {
		Payment  string `json:"payment"`
		Refund   string `json:"refund"`
		Payout   string `json:"payout"`
		Creditor string `json:"creditor"`
	} `json:"links"`
	Details EventDetails `json:"details"`
}

// EventDetails is an event's details object (why the event happened).
type EventDetails struct {
	Origin      string `json:"origin"` // bank, gocardless, api, customer, payer
	Cause       string `json:"cause"`  // e.g. refer_to_payer, payment_autoretried
	Description string `json:"description"`
	Scheme      string `json:"scheme"`
	ReasonCode  string `json:"reason_code"` // the bank's reason code, e.g. ARUDD-0
	// WillAttemptRetry is set on a payment's failed event: true when
	// GoCardless will retry the payment itself (Success+ intelligent
	// retries), so the failure is not final. Absent counts as false.
	WillAttemptRetry *bool `json:"will_attempt_retry"`
	// NotRetriedReason says why a failure is not retried
	// (failure_filter_applied, other) when WillAttemptRetry is false.
	NotRetriedReason string `json:"not_retried_reason"`
}

// willRetry reports whether a payments.failed event says GoCardless will
// retry the payment.
func (d EventDetails) willRetry() bool { return d.WillAttemptRetry != nil && *d.WillAttemptRetry }

// Payment is a GoCardless payment.
type Payment struct {
	ID             string    `json:"id"`
	CreatedAt      time.Time `json:"created_at"`
	ChargeDate     string    `json:"charge_date"`
	Amount         int64     `json:"amount"`
	AmountRefunded int64     `json:"amount_refunded"`
	Currency       string    `json:"currency"`
	Status         string    `json:"status"`
	// RetryIfPossible: on failure, GoCardless may retry the payment itself
	// (Success+). Only then can a failed payment still be collected without
	// the merchant asking.
	RetryIfPossible bool `json:"retry_if_possible"`
	Links           struct {
		// Payout is the payout that paid the payment out, once collected.
		Payout string `json:"payout"`
	} `json:"links"`
}

// Refund is a GoCardless refund.
type Refund struct {
	ID        string    `json:"id"`
	Amount    int64     `json:"amount"`
	Currency  string    `json:"currency"`
	Status    string    `json:"status"`
	CreatedAt time.Time `json:"created_at"`
	Links     struct {
		Payment string `json:"payment"`
	} `json:"links"`
}

type eventsPage struct {
	Events []json.RawMessage `json:"events"`
	Linked struct {
		Payments []Payment `json:"payments"`
		Refunds  []Refund  `json:"refunds"`
	} `json:"linked"`
	Meta listMeta `json:"meta"`
	// body is the page as GoCardless answered it, and read when (the
	// provider's clock).
	body []byte
	read time.Time
	// within is set on a page read back from a spill (a slice given up
	// listed it): its events outside that stretch are not its to give.
	within *stretch
}

// listMeta is a list page's meta: the cursor after its last item.
type listMeta struct {
	Cursors struct {
		After *string `json:"after"`
	} `json:"cursors"`
}

// next is the cursor of the page after one of n items; "" at the list's
// end.
func (m listMeta) next(n int) string {
	if m.Cursors.After == nil || n == 0 {
		return ""
	}
	return *m.Cursors.After
}

// msCeil rounds t up to the millisecond: GoCardless times are milliseconds,
// so [since, until) in milliseconds is [ceil(since), ceil(until)).
func msCeil(t time.Time) string { return msFormat(ceilMS(t)) }

// ceilMS is t rounded up to the millisecond, in UTC.
func ceilMS(t time.Time) time.Time {
	tr := t.Truncate(time.Millisecond)
	if tr.Before(t) {
		tr = tr.Add(time.Millisecond)
	}
	return tr.UTC()
}

// msFormat writes a time as GoCardless's filters take it, in milliseconds.
func msFormat(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z") }

// after reports whether ev comes after (at, id) in the delivery order.
func after(ev reconcile.Event, at time.Time, id string) bool {
	if !ev.At.Equal(at) {
		return ev.At.After(at)
	}
	return ev.ID > id
}

// Fetch implements reconcile.Provider: the stuck-payment path.
func (p *Provider) Fetch(ctx context.Context, fp reconcile.FetchParams) ([]reconcile.Change, error) {
	var out []reconcile.Change
	for _, id := range fp.ProviderIDs {
		pm, raw, found, err := p.getPayment(ctx, id)
		if err != nil {
			return out, err
		}
		if !found {
			p.log.Warn("payment not found at gocardless", "provider_id", id)
			continue
		}
		// The payment's own events date each state (the charge date is a
		// day, earlier than the confirmation or payout it stands for), and
		// its latest failure says whether a retry is coming.
		evs, err := p.paymentEvents(ctx, id)
		if unsupported(err) {
			p.log.Warn("gocardless did not list the payment's events; its state is dated by its charge date", "provider_id", id, "error", err)
			evs, err = nil, nil
		}
		if err != nil {
			return out, err
		}
		var refunds []Refund
		if pm.AmountRefunded > 0 {
			if refunds, err = p.paymentRefunds(ctx, id); unsupported(err) {
				p.log.Warn("gocardless did not list the payment's refunds", "provider_id", id, "error", err)
				refunds, err = nil, nil
			}
			if err != nil {
				return out, err
			}
		}
		out = append(out, fetchedChanges(pm, raw, evs, refunds))
	}
	return out, nil
}

// getPayment reads one payment (GET /payments/{id}) and its JSON; found is
// false when GoCardless does not know it (404). An answer for another
// payment is an error.
func (p *Provider) getPayment(ctx context.Context, id string) (pm Payment, raw json.RawMessage, found bool, err error) {
	var r struct {
		Payments json.RawMessage `json:"payments"`
	}
	if err := p.get(ctx, "/payments/"+url.PathEscape(id), nil, &r); err != nil {
		var ae *APIError
		if errors.As(err, &ae) && ae.Status == http.StatusNotFound {
			return Payment{}, nil, false, nil
		}
		return Payment{}, nil, false, err
	}
	if err := json.Unmarshal(r.Payments, &pm); err != nil {
		return Payment{}, nil, false, fmt.Errorf("decode gocardless payment %s: %w", id, err)
	}
	if pm.ID != id {
		return Payment{}, nil, false, fmt.Errorf("get gocardless payment %s: the answer is for %q", id, pm.ID)
	}
	return pm, r.Payments, true, nil
}

// paymentEvents lists the payment's events (GET /events?payment=, which
// cannot be combined with resource_type), 500 a page, newest first.
func (p *Provider) paymentEvents(ctx context.Context, id string) ([]Event, error) {
	q := url.Values{}
	q.Set("payment", id)
	q.Set("limit", "500")
	var out []Event
	for {
		var pg struct {
			Events []Event  `json:"events"`
			Meta   listMeta `json:"meta"`
		}
		if err := p.get(ctx, "/events", q, &pg); err != nil {
			return nil, fmt.Errorf("list gocardless events of %s: %w", id, err)
		}
		for _, ev := range pg.Events {
			if ev.ResourceType == "payments" && ev.Links.Payment == id {
				out = append(out, ev)
			}
		}
		after := pg.Meta.next(len(pg.Events))
		if after == "" {
			return out, nil
		}
		q.Set("after", after)
	}
}

// paymentRefunds lists the payment's refunds (GET /refunds?payment=).
func (p *Provider) paymentRefunds(ctx context.Context, id string) ([]Refund, error) {
	q := url.Values{}
	q.Set("payment", id)
	q.Set("limit", "500")
	var pg struct {
		Refunds []Refund `json:"refunds"`
	}
	if err := p.get(ctx, "/refunds", q, &pg); err != nil {
		return nil, fmt.Errorf("list gocardless refunds of %s: %w", id, err)
	}
	return pg.Refunds, nil
}

// lastFailed returns the payment's newest payments.failed event, or nil
// when the event log holds none. Events are filtered by payment and action
// (resource_type cannot be combined with payment); a refund's failed event
// of the same payment is skipped.
func (p *Provider) lastFailed(ctx context.Context, id string) (*Event, error) {
	q := url.Values{}
	q.Set("payment", id)
	q.Set("action", "failed")
	q.Set("limit", "20")
	var pg struct {
		Events []Event `json:"events"`
	}
	if err := p.get(ctx, "/events", q, &pg); err != nil {
		return nil, fmt.Errorf("list gocardless failed events of %s: %w", id, err)
	}
	var last *Event
	for i := range pg.Events {
		ev := &pg.Events[i]
		if ev.Action != "failed" || ev.ResourceType != "payments" || ev.Links.Payment != id {
			continue
		}
		if last == nil || ev.CreatedAt.After(last.CreatedAt) || ev.CreatedAt.Equal(last.CreatedAt) && ev.ID > last.ID {
			last = ev
		}
	}
	return last, nil
}
