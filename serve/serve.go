// Package serve is `reconciler serve`: every configured provider and account
// on a cron schedule, and an HTTP API for health, readiness, metrics and
// ad-hoc runs.
package serve

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
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

	wg sync.WaitGroup
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

// ErrBusy means a run for that provider and account is in progress.
var ErrBusy = errors.New("a run for this provider and account is in progress")

// Start begins a run and returns its id once it is recorded; the work goes
// on in the background under ctx (cancel it to interrupt every run). With
// ErrBusy it returns the id of the run in progress, when it can tell.
func (s *Server) Start(ctx context.Context, req runner.Request) (int64, error) {
	run, err := s.Runner.Start(ctx, req)
	if errors.Is(err, reconcile.ErrLocked) {
		running, _, _ := s.Runner.Runs().Running(ctx, req.Provider, req.Account)
		return running.ID, ErrBusy
	}
	if err != nil {
		return 0, err
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		_, _ = run.Execute(ctx)
	}()
	return run.ID(), nil
}

// Wait blocks until every run started here has ended.
func (s *Server) Wait() { s.wg.Wait() }

// RunSchedule starts every job at each tick of the schedule until ctx ends.
// A job still running from the previous tick is skipped, not doubled.
func (s *Server) RunSchedule(ctx context.Context) {
	c := s.clock()
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
		for _, j := range s.Jobs {
			id, err := s.Start(ctx, runner.Request{Job: j, Trigger: models.TriggerSchedule, TriggeredBy: "schedule"})
			switch {
			case errors.Is(err, ErrBusy):
				s.Log.Warn("skipping scheduled run: the previous one is still in progress", "provider", j.Provider, "account", j.Account, "run_id", id)
			case err != nil:
				s.Log.Error("scheduled run did not start", "provider", j.Provider, "account", j.Account, "error", err)
			}
		}
	}
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
	hs := &http.Server{Handler: s.Handler(runCtx), ReadHeaderTimeout: 10 * time.Second}
	listening(ln.Addr().String())
	go s.RunSchedule(runCtx)
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		cancelRuns()
		return fmt.Errorf("http server: %w", err)
	case <-ctx.Done():
	}
	s.Log.Info("shutting down", "grace", grace)
	gctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
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

// Handler is the HTTP API. Runs it starts live under base (the server's
// lifetime), not the request's.
func (s *Server) Handler(base context.Context) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", s.readyz)
	mux.Handle("GET /metrics", s.Metrics.Handler())
	mux.HandleFunc("POST /runs", s.auth(func(w http.ResponseWriter, r *http.Request, caller string) { s.postRun(base, w, r, caller) }))
	mux.HandleFunc("GET /runs", s.auth(s.listRuns))
	mux.HandleFunc("GET /runs/{id}", s.auth(s.getRun))
	return mux
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
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

// auth checks the bearer token against every configured token in constant
// time and passes the caller's name on.
func (s *Server) auth(next func(http.ResponseWriter, *http.Request, string)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		h := r.Header.Get("Authorization")
		token, ok := strings.CutPrefix(h, "Bearer ")
		caller := ""
		if ok && token != "" {
			for name, t := range s.Tokens {
				if subtle.ConstantTimeCompare([]byte(token), []byte(t)) == 1 {
					caller = name
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
}

func (s *Server) postRun(base context.Context, w http.ResponseWriter, r *http.Request, caller string) {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16))
	dec.DisallowUnknownFields()
	var b runBody
	if err := dec.Decode(&b); err != nil {
		field := ""
		if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			field = strings.Trim(f, `"`)
		}
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			field = te.Field
		}
		writeJSON(w, http.StatusBadRequest, apiError{Error: "invalid JSON body: " + err.Error(), Field: field})
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
	if b.Account != "" && !strings.HasPrefix(b.Account, "acct_") {
		bad("account", fmt.Sprintf("%q is not a connected account id (acct_…); omit it for the platform", b.Account))
		return
	}
	req := runner.Request{Job: runner.Job{Provider: *b.Provider, Account: b.Account}, DryRun: b.DryRun, Trigger: models.TriggerAPI, TriggeredBy: caller}
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
	case err != nil:
		s.Log.Error("ad-hoc run did not start", "error", err, "caller", caller)
		writeJSON(w, http.StatusInternalServerError, apiError{Error: "the run could not start; see the server's log"})
		return
	}
	w.Header().Set("Location", "/runs/"+strconv.FormatInt(id, 10))
	writeJSON(w, http.StatusAccepted, map[string]any{"id": id, "status": models.RunRunning, "url": "/runs/" + strconv.FormatInt(id, 10)})
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
	for name, field := range map[string]**string{"provider": &f.Provider, "account": &f.Account, "status": &f.Status, "trigger": &f.Trigger} {
		if v, ok := q[name]; ok {
			*field = &v[0]
		}
	}
	runs, err := s.Runner.Runs().List(r.Context(), f)
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, apiError{Error: "could not read runs"})
		return
	}
	out := make([]report.RunReport, 0, len(runs))
	for _, r := range runs {
		out = append(out, report.Summary(r))
	}
	writeJSON(w, http.StatusOK, map[string]any{"runs": out})
}

func (s *Server) getRun(w http.ResponseWriter, r *http.Request, _ string) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id < 1 {
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
		out[name] = token
	}
	return out, nil
}
