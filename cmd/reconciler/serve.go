package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/reconciler/reconciler/config"
	"github.com/reconciler/reconciler/metrics"
	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/reconcile"
	"github.com/reconciler/reconciler/serve"
)

func cmdServe(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	fs := newFlagSet("serve", stderr)
	cfgPath := fs.String("config", "", "config file (default $RECONCILER_CONFIG, else ./config.yaml)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	cfg, err := loadConfig(*cfgPath, getenv)
	if err != nil {
		return err
	}
	tokens, err := apiTokens(getenv)
	if err != nil {
		return err
	}
	sched, err := cron.ParseStandard(cfg.Serve.CronSpec())
	if err != nil {
		return &config.Error{Key: "serve.schedule", Msg: err.Error()}
	}
	jobs, err := plan(cfg, runFlags{})
	if err != nil {
		return err
	}
	if err := checkProviders(cfg, jobs); err != nil {
		return err
	}
	log := newLogger(cfg, stderr)
	if len(tokens) == 0 {
		log.Warn("no API tokens configured (RECONCILER_API_TOKENS or RECONCILER_API_TOKENS_FILE): POST /runs refuses everyone")
	}
	db, err := openDB(ctx, cfg, log)
	if err != nil {
		return err
	}
	if sqlDB, err := db.DB(); err == nil {
		defer sqlDB.Close()
	}
	if cfg.Database.AutoMigrate {
		if _, err := models.Migrate(ctx, db); err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
	}

	var providers []string
	var sjobs []serve.Job
	seen := map[string]bool{}
	for _, j := range jobs {
		sjobs = append(sjobs, serve.Job{Provider: j.provider, Account: j.account})
		if !seen[j.provider] {
			seen[j.provider] = true
			providers = append(providers, j.provider)
		}
	}
	m := metrics.New()
	srv := &serve.Server{
		DB: db, Log: log, Metrics: m, Tokens: tokens, Jobs: sjobs, Schedule: sched, Providers: providers,
		AfterRun: notifier(cfg, db, m, log),
		Options: func(r serve.Request) (reconcile.Options, error) {
			p, err := newProvider(cfg, r.Provider, log)
			if err != nil {
				return reconcile.Options{}, err
			}
			return engineOptions(cfg, db, p, log), nil
		},
	}

	// SIGTERM: stop the schedule and the API, interrupt runs (each finishes
	// its batch and records itself interrupted), then exit.
	runCtx, cancelRuns := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelRuns()
	ln, err := net.Listen("tcp", cfg.Serve.HTTPAddr)
	if err != nil {
		return &config.Error{Key: "serve.http_addr", Msg: err.Error(), Hint: "pick a free address, or set RECONCILER_HTTP_ADDR"}
	}
	hs := &http.Server{Handler: srv.Handler(runCtx), ReadHeaderTimeout: 10 * time.Second}
	log.Info("serving", "addr", ln.Addr().String(), "schedule", cfg.Serve.CronSpec(), "jobs", len(sjobs))
	fmt.Fprintf(stdout, "listening on %s\n", ln.Addr().String())
	go srv.RunSchedule(runCtx)
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		cancelRuns()
		return fmt.Errorf("http server: %w", err)
	case <-ctx.Done():
	}
	log.Info("shutting down", "grace", cfg.Run.ShutdownGrace.D())
	grace, cancel := context.WithTimeout(context.Background(), cfg.Run.ShutdownGrace.D())
	defer cancel()
	cancelRuns()
	_ = hs.Shutdown(grace)
	done := make(chan struct{})
	go func() { srv.Wait(); close(done) }()
	select {
	case <-done:
		log.Info("stopped")
		return nil
	case <-grace.Done():
		return errors.New("shutdown grace period exceeded with runs still writing")
	}
}

// apiTokens reads RECONCILER_API_TOKENS, else RECONCILER_API_TOKENS_FILE.
func apiTokens(getenv func(string) string) (map[string]string, error) {
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
	tokens, err := serve.ParseTokens(src)
	if err != nil {
		return nil, &config.Error{Key: key, Msg: err.Error(), Hint: "write name:token pairs (tokens of 16+ characters), comma- or newline-separated"}
	}
	return tokens, nil
}
