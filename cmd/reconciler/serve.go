package main

import (
	"fmt"
	"slices"

	"github.com/robfig/cron/v3"
	"github.com/spf13/cobra"

	"github.com/reconciler/reconciler/config"
	"github.com/reconciler/reconciler/internal/buildinfo"
	"github.com/reconciler/reconciler/internal/cli"
	"github.com/reconciler/reconciler/metrics"
	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/runner"
	"github.com/reconciler/reconciler/serve"
)

func (e env) serveCmd() *cobra.Command {
	c := cli.Command(doc("serve"), nil)
	fs := c.Flags()
	cfgPath := fs.String("config", "", "config file (default $RECONCILER_CONFIG, else ./config.yaml)")
	c.RunE = func(c *cobra.Command, _ []string) error {
		ctx, stdout, stderr, getenv := c.Context(), e.stdout, e.stderr, e.getenv
		cfg, err := loadConfig(*cfgPath, getenv)
		if err != nil {
			return err
		}
		tokens, err := serve.TokensFromEnv(getenv)
		if err != nil {
			return err
		}
		sched, err := cron.ParseStandard(cfg.Serve.CronSpec())
		if err != nil {
			return &config.Error{Key: "serve.schedule", Msg: err.Error()}
		}
		jobs, err := runner.Plan(cfg, nil, nil)
		if err != nil {
			return err
		}
		log := newLogger(cfg, stderr)
		defer watchMemory(ctx, log)()
		if len(tokens) == 0 {
			log.Warn("no API tokens configured (RECONCILER_API_TOKENS or RECONCILER_API_TOKENS_FILE): POST /runs refuses everyone")
		}
		db, st, closeDB, err := openDB(ctx, cfg, log, false)
		if err != nil {
			return err
		}
		defer closeDB()
		if cfg.Database.AutoMigrate {
			if _, err := models.Migrate(ctx, db); err != nil {
				return fmt.Errorf("migrate: %w", err)
			}
		}

		var providers []string
		for _, j := range jobs {
			if !slices.Contains(providers, j.Provider) {
				providers = append(providers, j.Provider)
			}
		}
		m := metrics.NewWith(metrics.Options{Version: buildinfo.Version(version), DB: db, Runs: st, Log: log})
		m.Watch(ctx, runner.MetricKeys(jobs)) // the gauges the alerts read, from the database, before any run
		hooks := runner.Observe(m, runner.Notifier(cfg, db, st, m, log))
		hooks.OnStart = func(j runner.Job, _ int64) func() { return m.Started(j.Provider, j.Account) }
		srv := &serve.Server{
			Runner: &runner.Service{Config: cfg, DB: db, Store: st, Log: log, Hooks: hooks},
			Log:    log, Metrics: m, OnAck: m.Refresh, Tokens: tokens, Jobs: jobs, Schedule: sched, Providers: providers,
		}

		return srv.ListenAndServe(ctx, cfg.Serve.HTTPAddr, cfg.Run.ShutdownGrace.D(), func(addr string) {
			log.Info("serving", "addr", addr, "schedule", cfg.Serve.CronSpec(), "jobs", len(jobs))
			fmt.Fprintf(stdout, "listening on %s\n", addr)
		})
	}
	return c
}
