package runner

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/reconciler/reconciler/clock"
	"github.com/reconciler/reconciler/config"
	"github.com/reconciler/reconciler/internal/signedlink"
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
	s := Summaries{Config: cfg, DB: db, Store: st, Log: log}
	return func(ctx context.Context, runID int64) {
		d := s.Post(ctx, runID)
		switch d.Status {
		case DeliveryUnreadable:
			log.Warn("summary not posted: run not readable", "run_id", runID, "error", d.Err)
			m.Notified("slack", "failed")
		case DeliveryFailed:
			log.Warn("summary not posted to slack", "run_id", runID, "error", d.Err)
			m.Notified("slack", "failed")
		case DeliverySent:
			if d.Err != nil { // posted, but not recorded as posted
				log.Warn("summary not posted to slack", "run_id", runID, "error", d.Err)
				m.Notified("slack", "failed")
				return
			}
			log.Info("summary posted to slack", "run_id", runID)
			m.Notified("slack", "sent")
		case DeliveryAlreadySent:
			m.Notified("slack", "already_sent")
		}
	}
}

// Delivery statuses: what posting one run's summary came to.
const (
	DeliverySent        = "sent"
	DeliveryAlreadySent = "already_sent"
	DeliveryDryRun      = "dry_run" // dry runs are never posted
	DeliveryFailed      = "failed"
	DeliveryUnreadable  = "unreadable" // the run's report could not be read
)

// Delivery is what posting one run's summary came to.
type Delivery struct {
	RunID  int64
	Status string // a Delivery… constant
	// SentAt is when an earlier delivery posted it (DeliveryAlreadySent),
	// zero when unknown.
	SentAt time.Time
	// Err is why it failed (DeliveryFailed, DeliveryUnreadable), or, with
	// DeliverySent, that the post was not recorded. It names no secret.
	Err error
}

// Summaries posts run summaries to the configured chat, with a signed link
// to the report when a report link key is configured (ReportLink).
type Summaries struct {
	Config config.Config
	// DB is where the run's report is read from; Store records deliveries.
	DB    *gorm.DB
	Store store.Notifications
	Log   *slog.Logger
	// Clock dates the links' expiry; nil is the wall clock.
	Clock clock.Clock
}

// Post delivers run runID's summary once (notify.Slack.Post) unless it is
// a dry run's, and says what came of it. The chat must be configured.
func (s Summaries) Post(ctx context.Context, runID int64) Delivery {
	ctx = context.WithoutCancel(ctx)
	d := Delivery{RunID: runID}
	rep, err := report.Load(ctx, s.DB, runID)
	if err != nil {
		d.Status, d.Err = DeliveryUnreadable, err
		return d
	}
	if rep.Runs[0].DryRun {
		d.Status = DeliveryDryRun
		return d
	}
	sl := &notify.Slack{URL: s.Config.Notify.SlackURL(), Log: s.Log, ReportLink: s.ReportLink}
	o, err := sl.Post(ctx, s.Store, rep.Runs[0])
	switch {
	case o.Sent:
		d.Status, d.Err = DeliverySent, err
	case err != nil:
		d.Status, d.Err = DeliveryFailed, err
	case o.AlreadySent:
		d.Status = DeliveryAlreadySent
		d.SentAt, _ = notify.SentAt(ctx, s.DB, runID, "")
	}
	return d
}

// ReportLink is the link to run id's report the message carries:
// notify.report_url with {id} replaced, and, when a report link key is
// configured, the signed query (signedlink.Query) that opens it without a
// token for notify.report_link_ttl. "" when no report_url is set.
func (s Summaries) ReportLink(id int64) string {
	u := s.Config.Notify.ReportURL
	if u == "" {
		return ""
	}
	u = strings.ReplaceAll(u, "{id}", strconv.FormatInt(id, 10))
	key := s.Config.Notify.ReportLinkKey()
	if key == nil {
		return u
	}
	c := s.Clock
	if c == nil {
		c = clock.System
	}
	sep := "?"
	if strings.Contains(u, "?") {
		sep = "&"
	}
	return u + sep + signedlink.Query(key, id, c.Now().Add(s.Config.Notify.ReportLinkTTL.D()))
}

// NotifyExplicit is `reconciler report --run ID --notify`: it posts the
// run's summary unless it was posted already or is a dry run's, and says
// on w when it did not post. Unlike the hooks of run and serve, which log
// and count, it returns the delivery's failure (exit 1), and a config
// error when no chat is configured.
func NotifyExplicit(ctx context.Context, cfg config.Config, db *gorm.DB, st store.Notifications, log *slog.Logger, w io.Writer, runID int64) error {
	if cfg.Notify.SlackURL() == "" {
		return &config.Error{Key: "RECONCILER_SLACK_WEBHOOK_URL", Msg: "is not set", Hint: "--notify needs a chat webhook (or notify.slack_webhook_url_file)"}
	}
	d := Summaries{Config: cfg, DB: db, Store: st, Log: log}.Post(ctx, runID)
	switch d.Status {
	case DeliveryDryRun:
		fmt.Fprintf(w, "not posted: run %d is a dry run (dry runs are never posted)\n", runID)
	case DeliveryAlreadySent:
		on := ""
		if !d.SentAt.IsZero() {
			on = " on " + d.SentAt.UTC().Format("2006-01-02 15:04:05 UTC")
		}
		fmt.Fprintf(w, "already posted to slack%s; not posted again\n", on)
	case DeliverySent:
		if d.Err == nil {
			fmt.Fprintf(w, "posted run %d's summary to slack\n", runID)
		}
	}
	if d.Err != nil {
		return fmt.Errorf("--notify: %w", d.Err)
	}
	return nil
}

// PrintReportLink is `reconciler report --run ID --link`: it writes a
// fresh signed link to run id's report (Summaries.ReportLink), for
// whoever holds an expired one. Without notify.report_url or a report link
// key there is no such link: a config error.
func PrintReportLink(cfg config.Config, w io.Writer, id int64) error {
	switch {
	case cfg.Notify.ReportURL == "":
		return &config.Error{Key: "notify.report_url", Msg: "is not set", Hint: "--link needs it: e.g. https://reconciler.internal/runs/{id}/report.html"}
	case cfg.Notify.ReportLinkKey() == nil:
		return &config.Error{Key: "RECONCILER_REPORT_LINK_KEY", Msg: "is not set", Hint: "--link signs with the key serve checks (or notify.report_link_key_file)"}
	}
	_, err := fmt.Fprintln(w, Summaries{Config: cfg}.ReportLink(id))
	return err
}
