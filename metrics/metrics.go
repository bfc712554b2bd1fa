// Package metrics exports what runs did to Prometheus: scraped from serve's
// /metrics, or pushed to a Pushgateway by a CronJob's run (which has no
// scrape target). Labels carry provider, account, kind, action, statuses
// and the build's version only: never a secret, an id of a payment or a
// customer. The gauges the alert rules read are read back from the
// database (Watch), so that a restarted serve shows them before any run
// and an acknowledgement shows without one.
package metrics

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"runtime"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/push"
	"gorm.io/gorm"

	"github.com/reconciler/reconciler/acks"
	"github.com/reconciler/reconciler/internal/retry"
	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/reconcile"
	"github.com/reconciler/reconciler/store"
)

// Metrics is a registry of reconciler_ metrics.
//
// Dry runs are for whoever started them: they count in
// reconciler_dry_runs_total (and their provider requests, which are real,
// in reconciler_provider_requests_total) and change nothing an alert rule
// reads.
type Metrics struct {
	reg *prometheus.Registry
	o   Options

	runDuration     *prometheus.HistogramVec
	runs            *prometheus.CounterVec
	lastSuccess     *prometheus.GaugeVec
	examined        *prometheus.CounterVec
	drift           *prometheus.CounterVec
	lastRunRefused  *prometheus.GaugeVec
	synthetic       *prometheus.CounterVec
	eventsRead      *prometheus.CounterVec
	requests        *prometheus.CounterVec
	missRatio       *prometheus.GaugeVec
	running         *prometheus.GaugeVec
	lastRunFinished *prometheus.GaugeVec
	notifications   *prometheus.CounterVec
	dryRuns         *prometheus.CounterVec
	lastRunItems    *prometheus.GaugeVec
	buildInfo       *prometheus.GaugeVec

	// alerting: a non-dry run was observed (Push replaces the group).
	alerting atomic.Bool
	mu       sync.Mutex
	shown    map[Key]shown // what the run-end gauges of each job show
}

// Options are what NewWith builds a registry for; every field is optional.
type Options struct {
	// Version is the binary's version (main.version), exposed in
	// reconciler_build_info; "" is "unknown".
	Version string
	// DB and Runs are the database the alert gauges are read back from:
	// the acknowledgements after every finished run (so that
	// reconciler_last_run_refused counts only unacknowledged items), and
	// the run record for Watch and Refresh. Without them
	// reconciler_last_run_refused counts every refused item and Watch and
	// Refresh do nothing.
	DB   *gorm.DB
	Runs store.RunRecord
	// Log receives the warnings of failed reads; nil discards them.
	Log *slog.Logger
	// RefreshEvery is how often Watch reads the gauges again (0: a minute).
	RefreshEvery time.Duration
}

// New returns a registry with every metric and the Go runtime's, reading
// no database.
func New() *Metrics { return NewWith(Options{}) }

// NewWith returns a registry with every metric and the Go runtime's, with
// reconciler_build_info set, reading o's database.
func NewWith(o Options) *Metrics {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	pa := []string{"provider", "account"}
	m := &Metrics{
		reg: prometheus.NewRegistry(), o: o, shown: map[Key]shown{},
		runDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "reconciler_run_duration_seconds", Help: "Duration of finished non-dry runs.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 16),
		}, []string{"provider", "account", "status"}),
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "reconciler_runs_total", Help: "Non-dry runs finished, by status (succeeded, failed, interrupted).",
		}, []string{"provider", "account", "status"}),
		lastSuccess: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "reconciler_last_success_timestamp_seconds", Help: "Unix time the last succeeded non-dry run finished (read from the database at start).",
		}, pa),
		examined: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "reconciler_payments_examined_total", Help: "Payments examined by non-dry runs.",
		}, pa),
		drift: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "reconciler_drift_items_total", Help: "Drift items of non-dry runs, by kind and action (repaired, refused, reported).",
		}, []string{"provider", "account", "kind", "action"}),
		lastRunRefused: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "reconciler_last_run_refused", Help: "Refused drift items of the last finished non-dry run that nobody has acknowledged (reconciler ack): each needs a human.",
		}, pa),
		synthetic: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "reconciler_synthetic_events_total", Help: "Missed webhook events inserted as synthetic webhook_events rows by non-dry runs.",
		}, pa),
		eventsRead: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "reconciler_events_read_total", Help: "Provider events read in the windows of non-dry runs.",
		}, pa),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "reconciler_provider_requests_total", Help: "HTTP requests to providers, by status code (0: no response).",
		}, []string{"provider", "code"}),
		missRatio: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "reconciler_webhook_miss_ratio", Help: "Missed webhook events over events read, in the last finished non-dry run.",
		}, pa),
		running: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "reconciler_runs_in_progress", Help: "Runs in progress in this process.",
		}, pa),
		lastRunFinished: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "reconciler_last_run_finished_timestamp_seconds", Help: "Unix time the last non-dry run finished, by status.",
		}, []string{"provider", "account", "status"}),
		notifications: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "reconciler_notifications_total", Help: "Run summaries posted to chat, by channel and result (sent, already_sent, failed).",
		}, []string{"channel", "result"}),
		dryRuns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "reconciler_dry_runs_total", Help: "Dry runs finished, by status; they change no other reconciler_ metric but the provider requests.",
		}, []string{"provider", "account", "status"}),
		lastRunItems: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "reconciler_last_run_items", Help: "Items needing a human in the last finished non-dry run, by action (refused, reported) and status: new (not in the run before), open (still there, not acknowledged) or acknowledged.",
		}, []string{"provider", "account", "action", "status"}),
		buildInfo: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "reconciler_build_info", Help: "Always 1: the binary's version, VCS revision and Go version.",
		}, []string{"version", "revision", "goversion"}),
	}
	m.reg.MustRegister(m.notifications, m.runDuration, m.runs, m.lastSuccess, m.examined, m.drift, m.lastRunRefused, m.synthetic,
		m.eventsRead, m.requests, m.missRatio, m.running, m.lastRunFinished, m.dryRuns, m.lastRunItems, m.buildInfo,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.buildInfo.WithLabelValues(build(o.Version)).Set(1)
	return m
}

// build is reconciler_build_info's labels: version, the VCS revision the
// binary was built from ("unknown" when not stamped) and the Go version.
func build(version string) (string, string, string) {
	if version == "" {
		version = "unknown"
	}
	rev, gover := "unknown", runtime.Version()
	if bi, ok := debug.ReadBuildInfo(); ok {
		gover = bi.GoVersion
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && s.Value != "" {
				rev = s.Value
			}
		}
	}
	return version, rev, gover
}

// Registry is the underlying registry, for tests.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Started marks a run in progress; call the returned func when it ends.
func (m *Metrics) Started(provider, account string) func() {
	g := m.running.WithLabelValues(provider, account)
	g.Inc()
	return g.Dec
}

// Observe records a finished (or failed) run. byStatus is the provider
// client's requests by HTTP status during the run. A dry run counts in
// reconciler_dry_runs_total and its requests; nothing else. A non-dry
// run's items needing a human are triaged against the acknowledgements
// when Options.DB is set (a failed read counts every refused item as
// unacknowledged, so that a read error never clears an alert, and logs a
// warning).
func (m *Metrics) Observe(ctx context.Context, res reconcile.Result, byStatus map[int]int64) {
	r := res.Run
	if r.ID == 0 {
		return
	}
	p, a := r.Provider, r.Account
	for code, n := range byStatus {
		m.requests.WithLabelValues(p, strconv.Itoa(code)).Add(float64(n))
	}
	if r.DryRun {
		m.dryRuns.WithLabelValues(p, a, r.Status).Inc()
		return
	}
	m.alerting.Store(true)
	if r.FinishedAt != nil {
		m.runDuration.WithLabelValues(p, a, r.Status).Observe(r.FinishedAt.Sub(r.StartedAt).Seconds())
	}
	m.runs.WithLabelValues(p, a, r.Status).Inc()
	m.examined.WithLabelValues(p, a).Add(float64(r.Examined))
	m.synthetic.WithLabelValues(p, a).Add(float64(r.SyntheticEvents))
	m.eventsRead.WithLabelValues(p, a).Add(float64(r.EventsRead))
	for k, n := range res.Drift {
		m.drift.WithLabelValues(p, a, k.Kind, k.Action).Add(float64(n))
	}
	v := view{run: r, found: true, refused: r.Refused, lastSuccess: res.LastSuccess}
	if m.o.DB != nil {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ReadTimeout)
		defer cancel()
		if tri, err := acks.Load(ctx, m.o.DB, r); err != nil {
			m.o.Log.Warn("metrics: acknowledgements not read; every refused item counted", "run_id", r.ID, "error", err)
		} else {
			v.items, v.refused = &tri, tri.ByAction[models.ActionRefused].Unacknowledged()
		}
	}
	m.show(Key{Provider: p, Account: a}, v)
}

// Notified counts one delivery attempt of a run summary.
func (m *Metrics) Notified(channel, result string) {
	m.notifications.WithLabelValues(channel, result).Inc()
}

// Handler serves the registry for scraping.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// The Pushgateway push's retry policy (internal/retry, the one every
// outbound call follows): each PUT or POST bounded by PushAttemptTimeout,
// retried on 5xx, 429 and network errors with backoff and jitter (at least
// a Retry-After), all of it within PushDeadline, which leaves room in the
// shutdown grace of a CronJob's run.
const (
	PushMaxRetries     = 3
	PushAttemptTimeout = 5 * time.Second
	PushDeadline       = 15 * time.Second
)

// Push replaces this job's metrics on a Pushgateway (job "reconciler",
// grouped by instance so several CronJob pods do not overwrite each other
// when given distinct instances). A process that observed no non-dry run
// (only dry runs, or none: every lock held) adds its metrics instead of
// replacing the group, so that the gauges the alerts read, pushed by the
// last real run, stay as they were. Both are idempotent (the same body
// pushed twice leaves the group as once), so both are retried.
func (m *Metrics) Push(ctx context.Context, url, instance string) error {
	return m.push(ctx, url, instance, retry.Policy{MaxRetries: PushMaxRetries, AttemptTimeout: PushAttemptTimeout, Deadline: PushDeadline})
}

func (m *Metrics) push(ctx context.Context, url, instance string, policy retry.Policy) error {
	client := &http.Client{Transport: &retry.Transport{Policy: policy, Methods: []string{http.MethodPut, http.MethodPost}}}
	p := push.New(url, "reconciler").Gatherer(m.reg).Client(client)
	if instance != "" {
		p = p.Grouping("instance", instance)
	}
	do := p.PushContext
	if !m.alerting.Load() {
		do = p.AddContext
	}
	if err := do(ctx); err != nil {
		return fmt.Errorf("push metrics: %w", err)
	}
	return nil
}
