package runner

import (
	"context"
	"log/slog"
	"strconv"
	"strings"

	"gorm.io/gorm"

	"github.com/reconciler/reconciler/config"
	"github.com/reconciler/reconciler/metrics"
	"github.com/reconciler/reconciler/notify"
	"github.com/reconciler/reconciler/report"
	"github.com/reconciler/reconciler/store"
)

// Notifier returns what posts a finished run's summary to support's chat
// when one is configured (a no-op otherwise), at most once per run (st
// records the delivery; the report is read from db). A failure is logged
// and counted in m; it never fails the run. Dry runs are not posted: they
// are for whoever started them.
func Notifier(cfg config.Config, db *gorm.DB, st store.Notifications, m *metrics.Metrics, log *slog.Logger) func(ctx context.Context, runID int64) {
	if cfg.Notify.SlackURL() == "" {
		return func(context.Context, int64) {}
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &notify.Slack{URL: cfg.Notify.SlackURL(), Log: log}
	if u := cfg.Notify.ReportURL; u != "" {
		s.ReportLink = func(id int64) string { return strings.ReplaceAll(u, "{id}", strconv.FormatInt(id, 10)) }
	}
	return func(ctx context.Context, runID int64) {
		ctx = context.WithoutCancel(ctx)
		rep, err := report.Load(ctx, db, runID)
		if err != nil {
			log.Warn("summary not posted: run not readable", "run_id", runID, "error", err)
			m.Notified("slack", "failed")
			return
		}
		if rep.Runs[0].DryRun {
			return
		}
		sent, err := s.DeliverOn(ctx, st, rep.Runs[0])
		switch {
		case err != nil:
			log.Warn("summary not posted to slack", "run_id", runID, "error", err)
			m.Notified("slack", "failed")
		case sent:
			log.Info("summary posted to slack", "run_id", runID)
			m.Notified("slack", "sent")
		default:
			m.Notified("slack", "already_sent")
		}
	}
}
