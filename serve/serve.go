// Package serve is `reconciler serve`: every configured provider and account
// on a cron schedule, and an HTTP API for health, readiness, metrics and
// ad-hoc runs.
package serve

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/reconciler/reconciler/clock"
	"github.com/reconciler/reconciler/config"
	"github.com/reconciler/reconciler/metrics"
	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/reconcile"
	"github.com/reconciler/reconciler/report"
	"github.com/reconciler/reconciler/runner"
	"github.com/reconciler/reconciler/store"
)

// Schedule is what the scheduler needs of a cron schedule; robfig/cron's
// schedules satisfy it.
type Schedule interface{ Next(time.Time) time.Time }

// Server runs the schedule and the API.
type Server struct {
	// Runner starts every run (its hooks observe and notify them) and
	// reads the run record; its DB serves readiness and the run reports.
	Runner *runner.Service
	Log    *slog.Logger
	// Metrics is served at GET /metrics; the runner's hooks fill it.
	Metrics *metrics.Metrics
	// Tokens maps each API caller's name to its bearer token.
	Tokens map[string]string
	// Jobs are run on every tick of Schedule.
	Jobs     []runner.Job
	Schedule Schedule
	// Providers lists the provider names POST /runs accepts.
	Providers []string
	// Clock is the schedule's clock (nil: the runner's, else the wall
	// clock): it tells when the next tick is and waits for it.
	Clock clock.Clock
	// MaxRuns bounds the runs in flight, scheduled and ad-hoc together
	// (0: Runner.MaxRuns(), what the database pool has room for). Beyond
	// it POST /runs answers 429 and a scheduled job waits for a slot until
	// the next tick, then is skipped with a warning.
	MaxRuns int
	// Timeouts are the HTTP server's (zero fields: the defaults below).
	Timeouts Timeouts
	// OnAck, when set, is called after POST /items/{fingerprint}/ack
	// recorded an acknowledgement (the metrics the alerts read refresh).
	OnAck func(ctx context.Context)

	slotsOnce sync.Once
	slots     chan struct{} // one token per run in flight
	mu        sync.Mutex
	closing   bool // shutting down: no run starts
	wg        sync.WaitGroup
}

// Timeouts are the HTTP server's; a zero field takes the default.
type Timeouts struct {
	ReadHeader, Read, Write, Idle time.Duration
}

const (
	// DefaultReadHeaderTimeout: a request's headers are a few hundred
	// bytes; a client that cannot send them in 5 s is holding a connection
	// open (slowloris), not sending a request.
	DefaultReadHeaderTimeout = 5 * time.Second
	// DefaultReadTimeout bounds headers and body together: the largest
	// body accepted is 64 KiB of JSON (maxBody).
	DefaultReadTimeout = 15 * time.Second
	// DefaultWriteTimeout bounds the handler and its answer: the largest is
	// a run's report (GET /runs/{id}), a few database reads.
	DefaultWriteTimeout = 30 * time.Second
	// DefaultIdleTimeout closes idle keep-alive connections: reconnecting
	// is cheap for the few callers of this API, a held socket is not. A
	// load balancer in front should idle out sooner.
	DefaultIdleTimeout = 30 * time.Second

	// maxBody is the largest POST /runs body read.
	maxBody = 1 << 16
	// readyzTimeout bounds /readyz's database checks: a pool that cannot
	// hand out a connection in 2 s is not ready, and the probe must answer
	// before Kubernetes' default probe timeout gives up on it.
	readyzTimeout = 2 * time.Second
	// startTimeout bounds starting a run (the lock, the window, the run's
	// row) on top of run.lock_wait. Starting is not interrupted by
	// shutdown, so that a recorded run always reaches Execute, which
	// records it interrupted.
	startTimeout = 30 * time.Second
	// retryAfter is what a caller refused for want of a run slot is told
	// to wait, in seconds.
	retryAfter = "10"
)

func (t Timeouts) orDefaults() Timeouts {
	or := func(d, def time.Duration) time.Duration {
		if d > 0 {
			return d
		}
		return def
	}
	return Timeouts{ReadHeader: or(t.ReadHeader, DefaultReadHeaderTimeout), Read: or(t.Read, DefaultReadTimeout),
		Write: or(t.Write, DefaultWriteTimeout), Idle: or(t.Idle, DefaultIdleTimeout)}
}

// Bound is how many runs may be in flight at once.
func (s *Server) Bound() int {
	s.slotsOnce.Do(func() {
		n := s.MaxRuns
		if n <= 0 {
			n = s.Runner.MaxRuns()
		}
		s.Runner.MakeRoom(n)
		s.slots = make(chan struct{}, n)
	})
	return cap(s.slots)
}

func (s *Server) clock() clock.Clock {
	switch {
	case s.Clock != nil:
		return s.Clock
	case s.Runner != nil && s.Runner.Clock != nil:
		return s.Runner.Clock
	}
	return clock.System
}

var (
	// ErrBusy means a run for that provider and account is in progress.
	ErrBusy = errors.New("a run for this provider and account is in progress")
	// ErrTooManyRuns means every run slot (Server.MaxRuns) is taken.
	ErrTooManyRuns = errors.New("too many runs in progress; retry later")
	// ErrShuttingDown means the server is stopping and starts no run.
	ErrShuttingDown = errors.New("the server is shutting down")
)

// Start begins a run if a run slot is free (else ErrTooManyRuns) and returns
// its id once it is recorded; the work goes on in the background under ctx
// (cancel it to interrupt every run). With ErrBusy it returns the id of the
// run in progress, when it can tell.
func (s *Server) Start(ctx context.Context, req runner.Request) (int64, error) {
	s.Bound()
	select {
	case s.slots <- struct{}{}:
	default:
		return 0, ErrTooManyRuns
	}
	return s.launch(ctx, req)
}

// launch starts req in the run slot its caller holds, and gives the slot
// back once the run has ended or did not start.
func (s *Server) launch(ctx context.Context, req runner.Request) (int64, error) {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		<-s.slots
		return 0, ErrShuttingDown
	}
	s.wg.Add(1) // before Wait can be called: Wait follows closing
	s.mu.Unlock()
	end := func() { <-s.slots; s.wg.Done() }
	// Starting is short and not interrupted: once the run's row is
	// recorded, Execute must run to record how it ended (interrupted, when
	// ctx is already done), so that no row is left running.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), startTimeout+s.Runner.Config.Run.LockWait.D())
	defer cancel()
	run, err := s.Runner.Start(sctx, req)
	if errors.Is(err, reconcile.ErrLocked) {
		end()
		running, _, _ := s.Runner.Runs().Running(sctx, req.Provider, req.Account)
		return running.ID, ErrBusy
	}
	if err != nil {
		end()
		return 0, err
	}
	go func() {
		defer end()
		_, _ = run.Execute(ctx)
	}()
	return run.ID(), nil
}

// stopStarting refuses every later start (ErrShuttingDown).
func (s *Server) stopStarting() {
	s.mu.Lock()
	s.closing = true
	s.mu.Unlock()
}

// Wait blocks until every run started here has ended.
func (s *Server) Wait() { s.wg.Wait() }

// RunSchedule starts every job at each tick of the schedule until ctx ends.
// A job still running from the previous tick is skipped, not doubled. With
// every run slot taken, a job waits for one until the next tick; those still
// waiting then are skipped with a warning (never queued across ticks) and
// go first at the next tick.
func (s *Server) RunSchedule(ctx context.Context) {
	c := s.clock()
	first := 0
	for {
		now := c.Now()
		next := s.Schedule.Next(now)
		if next.IsZero() {
			s.Log.Warn("schedule never fires again")
			return
		}
		s.Log.Info("next scheduled run", "at", next)
		if err := c.Sleep(ctx, next.Sub(now)); err != nil {
			return
		}
		first = s.tick(ctx, first, s.Schedule.Next(next))
	}
}

// tick starts the jobs from first on, in turn, each once a run slot is
// free, until the next tick at until. It returns the first job skipped for
// want of a slot (first when none was).
func (s *Server) tick(ctx context.Context, first int, until time.Time) int {
	n := len(s.Jobs)
	if n == 0 {
		return 0
	}
	s.Bound()
	c := s.clock()
	tctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if !until.IsZero() {
		go func() { _ = c.Sleep(tctx, until.Sub(c.Now())); cancel() }()
	}
	for i := range n {
		k := (first + i) % n
		j := s.Jobs[k]
		select {
		case s.slots <- struct{}{}:
		case <-tctx.Done():
			if ctx.Err() == nil {
				s.Log.Warn("skipping scheduled runs: no free run slot before the next tick", "skipped", n-i,
					"max_runs", cap(s.slots), "first_skipped_provider", j.Provider, "first_skipped_account", j.Account)
			}
			return k
		}
		id, err := s.launch(ctx, runner.Request{Job: j, Trigger: models.TriggerSchedule, TriggeredBy: "schedule"})
		switch {
		case errors.Is(err, ErrBusy):
			s.Log.Warn("skipping scheduled run: the previous one is still in progress", "provider", j.Provider, "account", j.Account, "run_id", id)
		case errors.Is(err, ErrShuttingDown):
			return k
		case err != nil:
			s.Log.Error("scheduled run did not start", "provider", j.Provider, "account", j.Account, "error", err)
		}
	}
	return first
}

// ListenAndServe serves the API on addr and runs the schedule until ctx
// ends (SIGTERM) or the server fails. Once ctx ends it stops the schedule
// and the API, interrupts every run (each finishes its batch and records
// itself interrupted) and waits for them up to grace. listening is called
// with the address once connections are accepted.
func (s *Server) ListenAndServe(ctx context.Context, addr string, grace time.Duration, listening func(addr string)) error {
	runCtx, cancelRuns := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelRuns()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return &config.Error{Key: "serve.http_addr", Msg: err.Error(), Hint: "pick a free address, or set RECONCILER_HTTP_ADDR"}
	}
	t := s.Timeouts.orDefaults()
	hs := &http.Server{Handler: s.Handler(runCtx), ReadHeaderTimeout: t.ReadHeader, ReadTimeout: t.Read,
		WriteTimeout: t.Write, IdleTimeout: t.Idle, ErrorLog: slog.NewLogLogger(s.Log.Handler(), slog.LevelDebug)}
	s.Log.Info("run bound", "max_runs", s.Bound())
	listening(ln.Addr().String())
	go s.RunSchedule(runCtx)
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		s.stopStarting()
		cancelRuns()
		return fmt.Errorf("http server: %w", err)
	case <-ctx.Done():
	}
	s.Log.Info("shutting down", "grace", grace)
	gctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	s.stopStarting()
	cancelRuns()
	_ = hs.Shutdown(gctx)
	done := make(chan struct{})
	go func() { s.Wait(); close(done) }()
	select {
	case <-done:
		s.Log.Info("stopped")
		return nil
	case <-gctx.Done():
		return errors.New("shutdown grace period exceeded with runs still writing")
	}
}

// Handler is the HTTP API: every route of routes. Runs it starts live
// under base (the server's lifetime), not the request's.
func (s *Server) Handler(base context.Context) http.Handler {
	s.Bound()
	mux := http.NewServeMux()
	for _, rt := range s.routes(base) {
		mux.Handle(rt.pattern, rt.handler)
	}
	return mux
}

// route is one endpoint of the API.
type route struct {
	// pattern is the method and path as http.ServeMux reads them
	// ("GET /runs/{id}").
	pattern string
	handler http.Handler
}

// routes is the one list of the API's endpoints: Handler serves exactly
// these, and the OpenAPI document (openapi.json) is tested against them.
func (s *Server) routes(base context.Context) []route {
	callers := digests(s.Tokens)
	return []route{
		{"GET /healthz", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
		})},
		{"GET /readyz", http.HandlerFunc(s.readyz)},
		{"GET /metrics", s.Metrics.Handler()},
		{"GET /openapi.json", http.HandlerFunc(serveOpenAPI)},
		{"POST /runs", auth(callers, func(w http.ResponseWriter, r *http.Request, caller string) { s.postRun(base, w, r, caller) })},
		{"GET /runs", auth(callers, s.listRuns)},
		{"GET /runs/{id}", auth(callers, s.getRun)},
		{"POST /items/{fingerprint}/ack", auth(callers, s.postAck)},
		// A browser's report pages: a bearer token or the run's signed link (reports.go).
		{"GET /runs/{id}/report.html", s.reportPage(callers, "html")},
		{"GET /runs/{id}/report.csv", s.reportPage(callers, "csv")},
	}
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), readyzTimeout)
	defer cancel()
	sqlDB, err := s.Runner.DB.DB()
	if err == nil {
		err = sqlDB.PingContext(ctx)
	}
	if err != nil {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "not ready", "reason": "database unreachable"})
		return
	}
	pending, err := models.Pending(ctx, s.Runner.DB)
	if err != nil || len(pending) > 0 {
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"status": "not ready", "reason": "migrations not applied (run reconciler migrate)", "pending": pending})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

// caller is one API caller: its name and its token's SHA-256.
type caller struct {
	name   string
	digest [sha256.Size]byte
}

func digests(tokens map[string]string) []caller {
	out := make([]caller, 0, len(tokens))
	for name, t := range tokens {
		out = append(out, caller{name: name, digest: sha256.Sum256([]byte(t))})
	}
	return out
}

// auth checks the bearer token against every configured token and passes
// the caller's name on. It compares SHA-256 digests, which are of equal
// length whatever the tokens', in constant time, and checks every token,
// so that neither a token's length nor its place shows in the time taken.
func auth(callers []caller, next func(http.ResponseWriter, *http.Request, string)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		h := r.Header.Get("Authorization")
		token, ok := strings.CutPrefix(h, "Bearer ")
		caller := ""
		if ok && token != "" {
			d := sha256.Sum256([]byte(token))
			for _, c := range callers {
				if subtle.ConstantTimeCompare(d[:], c.digest[:]) == 1 {
					caller = c.name
				}
			}
		}
		if caller == "" {
			w.Header().Set("WWW-Authenticate", `Bearer realm="reconciler"`)
			writeJSON(w, http.StatusUnauthorized, apiError{Error: "missing or invalid bearer token"})
			return
		}
		next(w, r, caller)
	}
}

type apiError struct {
	Error string `json:"error"`
	Field string `json:"field,omitempty"`
	RunID int64  `json:"run_id,omitempty"`
}

type runBody struct {
	Provider *string `json:"provider"`
	Account  string  `json:"account"`
	Since    string  `json:"since"`
	Until    string  `json:"until"`
	DryRun   bool    `json:"dry_run"`
	// Mode is how the window is read: auto (default), listing or events.
	Mode string `json:"mode"`
	// Repair overrides run.repair: apply or deliver ("" keeps it).
	Repair string `json:"repair"`
}

func (s *Server) postRun(base context.Context, w http.ResponseWriter, r *http.Request, caller string) {
	var b runBody
	if !decodeBody(w, r, &b) {
		return
	}
	bad := func(field, msg string) { writeJSON(w, http.StatusBadRequest, apiError{Error: msg, Field: field}) }
	if b.Provider == nil || *b.Provider == "" {
		bad("provider", "provider is required (one of "+strings.Join(s.Providers, ", ")+")")
		return
	}
	known := false
	for _, p := range s.Providers {
		known = known || p == *b.Provider
	}
	if !known {
		bad("provider", fmt.Sprintf("unknown or unconfigured provider %q (configured: %s)", *b.Provider, strings.Join(s.Providers, ", ")))
		return
	}
	if b.Account != "" && !runner.ValidAccountID(b.Account) {
		shown := b.Account
		if len(shown) > 40 {
			shown = shown[:40] + "…"
		}
		bad("account", fmt.Sprintf("%q is not a connected account id (acct_ and 1 to %d letters or digits); omit it for the platform", shown, runner.MaxAccountIDLen))
		return
	}
	switch b.Mode {
	case "", reconcile.ModeAuto, reconcile.ModeListing, reconcile.ModeEvents:
	default:
		bad("mode", fmt.Sprintf("unknown mode %q (use auto, listing or events)", b.Mode))
		return
	}
	if b.Repair != "" && b.Repair != reconcile.RepairApply && b.Repair != reconcile.RepairDeliver {
		bad("repair", fmt.Sprintf("unknown repair %q (use apply or deliver)", b.Repair))
		return
	}
	req := runner.Request{Job: runner.Job{Provider: *b.Provider, Account: b.Account}, DryRun: b.DryRun, Mode: b.Mode, Repair: b.Repair,
		Trigger: models.TriggerAPI, TriggeredBy: caller}
	var err error
	if b.Since != "" {
		if req.Since, err = config.ParseTime(b.Since); err != nil {
			bad("since", err.Error())
			return
		}
	}
	if b.Until != "" {
		if req.Until, err = config.ParseTime(b.Until); err != nil {
			bad("until", err.Error())
			return
		}
	}
	if !req.Since.IsZero() && !req.Until.IsZero() && !req.Since.Before(req.Until) {
		bad("since", "since must be before until")
		return
	}
	id, err := s.Start(base, req)
	switch {
	case errors.Is(err, ErrBusy):
		writeJSON(w, http.StatusConflict, apiError{Error: err.Error(), RunID: id})
		return
	case errors.Is(err, ErrTooManyRuns):
		w.Header().Set("Retry-After", retryAfter)
		writeJSON(w, http.StatusTooManyRequests, apiError{Error: fmt.Sprintf("%v (at most %d at once)", err, s.Bound())})
		return
	case errors.Is(err, ErrShuttingDown):
		writeJSON(w, http.StatusServiceUnavailable, apiError{Error: err.Error()})
		return
	case err != nil:
		s.Log.Error("ad-hoc run did not start", "error", err, "caller", caller)
		writeJSON(w, http.StatusInternalServerError, apiError{Error: "the run could not start; see the server's log"})
		return
	}
	url := "/runs/" + strconv.FormatInt(id, 10)
	w.Header().Set("Location", url)
	writeJSON(w, http.StatusAccepted, runStarted{ID: id, RunID: id, Status: models.RunRunning, URL: url})
}

// runStarted is POST /runs's 202 answer.
type runStarted struct {
	// ID is the run's id, kept for the callers that read it; RunID is the
	// same value under the name a 409 (apiError.RunID) uses.
	ID     int64  `json:"id"`
	RunID  int64  `json:"run_id"`
	Status string `json:"status"`
	// URL is the run's GET /runs/{id}, also sent as Location.
	URL string `json:"url"`
}

// runEntry is one run of GET /runs: the run's summary without its items,
// which a list does not read (GET /runs/{id}, ItemsURL, lists them), and
// how many items it has, rather than an "items": [] that would claim none.
type runEntry struct {
	report.RunReport
	// Items hides RunReport.Items (encoding/json takes the shallower of
	// two fields of one name): never set, so a list entry has no "items".
	Items []report.Item `json:"items,omitempty"`
	// ItemCount is the run's drift items: repaired, delivered, refused and
	// reported (so far, while it runs).
	ItemCount int64 `json:"item_count"`
	// Delivered counts the items handed to the application's worker (a
	// repair: deliver run).
	Delivered int64 `json:"delivered"`
	// NeedsHuman counts the refused and reported items.
	NeedsHuman int64 `json:"needs_human"`
	// ItemsURL is where the items are listed: the run's GET /runs/{id}.
	ItemsURL string `json:"items_url"`
}

func listEntry(r models.Run) runEntry {
	return runEntry{RunReport: report.Summary(r), ItemCount: r.Repaired + r.Delivered + r.Refused + r.Reported,
		Delivered: r.Delivered, NeedsHuman: r.Refused + r.Reported, ItemsURL: "/runs/" + strconv.FormatInt(r.ID, 10)}
}

func (s *Server) listRuns(w http.ResponseWriter, r *http.Request, _ string) {
	q := r.URL.Query()
	limit := 50
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			writeJSON(w, http.StatusBadRequest, apiError{Error: "limit must be 1 to 1000", Field: "limit"})
			return
		}
		limit = n
	}
	f := runner.Filter{Limit: limit}
	for name, field := range filters(&f) {
		if v, ok := q[name]; ok {
			*field = &v[0]
		}
	}
	runs, err := s.Runner.Runs().List(r.Context(), f)
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, apiError{Error: "could not read runs"})
		return
	}
	out := make([]runEntry, 0, len(runs))
	for _, r := range runs {
		out = append(out, listEntry(r))
	}
	writeJSON(w, http.StatusOK, map[string]any{"runs": out})
}

// filters are GET /runs's query filters besides limit, by name, and the
// field of f each sets (given empty, it matches the empty value).
func filters(f *runner.Filter) map[string]**string {
	return map[string]**string{"provider": &f.Provider, "account": &f.Account, "status": &f.Status, "trigger": &f.Trigger}
}

func (s *Server) getRun(w http.ResponseWriter, r *http.Request, _ string) {
	id, err := parseRunID(r.PathValue("id"))
	if err != nil {
		writeJSON(w, http.StatusBadRequest, apiError{Error: "run id must be a positive integer", Field: "id"})
		return
	}
	_, err = s.Runner.Runs().Get(r.Context(), id)
	if errors.Is(err, store.ErrNotFound) {
		writeJSON(w, http.StatusNotFound, apiError{Error: fmt.Sprintf("no run %d", id)})
		return
	}
	var rep report.Report
	if err == nil {
		rep, err = report.Load(r.Context(), s.Runner.DB, id)
	}
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, apiError{Error: "could not read the run"})
		return
	}
	writeJSON(w, http.StatusOK, rep.Runs[0])
}

// decodeBody reads a request's body, at most maxBody bytes, as one JSON
// object into v, no unknown field allowed. When it cannot, it answers
// 413 or 400 naming the field where it can, and returns false.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) bool {
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		var mb *http.MaxBytesError
		if errors.As(err, &mb) {
			writeJSON(w, http.StatusRequestEntityTooLarge, apiError{Error: fmt.Sprintf("the body is larger than %d bytes", maxBody)})
			return false
		}
		writeJSON(w, http.StatusBadRequest, apiError{Error: "could not read the body"})
		return false
	}
	if key, err := oneObject(raw); err != nil {
		writeJSON(w, http.StatusBadRequest, apiError{Error: "invalid JSON body: " + err.Error(), Field: key})
		return false
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		field := ""
		if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			field = strings.Trim(f, `"`)
		}
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			field = te.Field
		}
		writeJSON(w, http.StatusBadRequest, apiError{Error: "invalid JSON body: " + err.Error(), Field: field})
		return false
	}
	return true
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// TokensFromEnv reads the API callers' tokens from RECONCILER_API_TOKENS,
// else from the file RECONCILER_API_TOKENS_FILE names (ParseTokens).
func TokensFromEnv(getenv func(string) string) (map[string]string, error) {
	src, key := getenv("RECONCILER_API_TOKENS"), "RECONCILER_API_TOKENS"
	if src == "" {
		if f := getenv("RECONCILER_API_TOKENS_FILE"); f != "" {
			b, err := os.ReadFile(f)
			if err != nil {
				return nil, &config.Error{Key: "RECONCILER_API_TOKENS_FILE", Msg: "cannot read the file", Hint: "mount the Secret there"}
			}
			src, key = string(b), "RECONCILER_API_TOKENS_FILE"
		}
	}
	tokens, err := ParseTokens(src)
	if err != nil {
		return nil, &config.Error{Key: key, Msg: err.Error(), Hint: "write name:token pairs (tokens of 16+ characters), comma- or newline-separated"}
	}
	return tokens, nil
}

// ParseTokens reads name:token pairs, comma- or newline-separated. Blank
// lines and # comments are ignored. The error never contains a token.
func ParseTokens(s string) (map[string]string, error) {
	out := map[string]string{}
	owner := map[string]string{} // token → its name
	fields := strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == '\n' })
	for i, f := range fields {
		f = strings.TrimSpace(f)
		if f == "" || strings.HasPrefix(f, "#") {
			continue
		}
		name, token, ok := strings.Cut(f, ":")
		name, token = strings.TrimSpace(name), strings.TrimSpace(token)
		if !ok || name == "" || token == "" {
			return nil, fmt.Errorf("API token entry %d is not name:token", i+1)
		}
		if len(token) < 16 {
			return nil, fmt.Errorf("API token of %q is shorter than 16 characters", name)
		}
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("API token name %q appears twice", name)
		}
		if other, dup := owner[token]; dup {
			return nil, fmt.Errorf("API token names %q and %q share a token: give each caller its own", other, name)
		}
		out[name] = token
		owner[token] = name
	}
	return out, nil
}
