// Package metrics exports what runs did to Prometheus: scraped from serve's
// /metrics, or pushed to a Pushgateway by a CronJob's run (which has no
// scrape target). Labels carry provider, account, kind, action and status
// codes only: never a secret, an id of a payment or a customer.
package metrics

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/push"

	"github.com/reconciler/reconciler/reconcile"
)

// Metrics is a registry of reconciler_ metrics.
type Metrics struct {
	reg *prometheus.Registry

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
}

// New returns a registry with every metric and the Go runtime's.
func New() *Metrics {
	pa := []string{"provider", "account"}
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		runDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "reconciler_run_duration_seconds", Help: "Duration of finished runs.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 16),
		}, []string{"provider", "account", "status"}),
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "reconciler_runs_total", Help: "Runs finished, by status (succeeded, failed, interrupted).",
		}, []string{"provider", "account", "status"}),
		lastSuccess: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "reconciler_last_success_timestamp_seconds", Help: "Unix time the last succeeded (non-dry) run finished.",
		}, pa),
		examined: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "reconciler_payments_examined_total", Help: "Payments examined.",
		}, pa),
		drift: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "reconciler_drift_items_total", Help: "Drift items, by kind and action (repaired, refused, reported).",
		}, []string{"provider", "account", "kind", "action"}),
		lastRunRefused: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "reconciler_last_run_refused", Help: "Refused drift items in the last finished run: each needs a human.",
		}, pa),
		synthetic: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "reconciler_synthetic_events_total", Help: "Missed webhook events inserted as synthetic webhook_events rows.",
		}, pa),
		eventsRead: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "reconciler_events_read_total", Help: "Provider events read in run windows.",
		}, pa),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "reconciler_provider_requests_total", Help: "HTTP requests to providers, by status code (0: no response).",
		}, []string{"provider", "code"}),
		missRatio: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "reconciler_webhook_miss_ratio", Help: "Synthetic events over events read, in the last finished run.",
		}, pa),
		running: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "reconciler_runs_in_progress", Help: "Runs in progress in this process.",
		}, pa),
		lastRunFinished: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "reconciler_last_run_finished_timestamp_seconds", Help: "Unix time the last run finished, by status.",
		}, []string{"provider", "account", "status"}),
		notifications: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "reconciler_notifications_total", Help: "Run summaries posted to chat, by channel and result (sent, already_sent, failed).",
		}, []string{"channel", "result"}),
	}
	m.reg.MustRegister(m.notifications, m.runDuration, m.runs, m.lastSuccess, m.examined, m.drift, m.lastRunRefused, m.synthetic,
		m.eventsRead, m.requests, m.missRatio, m.running, m.lastRunFinished,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
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
// client's requests by HTTP status during the run.
func (m *Metrics) Observe(res reconcile.Result, byStatus map[int]int64) {
	r := res.Run
	if r.ID == 0 {
		return
	}
	p, a := r.Provider, r.Account
	if r.FinishedAt != nil {
		m.runDuration.WithLabelValues(p, a, r.Status).Observe(r.FinishedAt.Sub(r.StartedAt).Seconds())
		m.lastRunFinished.WithLabelValues(p, a, r.Status).Set(float64(r.FinishedAt.Unix()))
	}
	m.runs.WithLabelValues(p, a, r.Status).Inc()
	if !res.LastSuccess.IsZero() {
		m.lastSuccess.WithLabelValues(p, a).Set(float64(res.LastSuccess.Unix()))
	}
	m.examined.WithLabelValues(p, a).Add(float64(r.Examined))
	m.synthetic.WithLabelValues(p, a).Add(float64(r.SyntheticEvents))
	m.eventsRead.WithLabelValues(p, a).Add(float64(r.EventsRead))
	for k, n := range res.Drift {
		m.drift.WithLabelValues(p, a, k.Kind, k.Action).Add(float64(n))
	}
	m.lastRunRefused.WithLabelValues(p, a).Set(float64(r.Refused))
	m.missRatio.WithLabelValues(p, a).Set(reconcile.MissRatio(r))
	for code, n := range byStatus {
		m.requests.WithLabelValues(p, strconv.Itoa(code)).Add(float64(n))
	}
}

// Notified counts one delivery attempt of a run summary.
func (m *Metrics) Notified(channel, result string) {
	m.notifications.WithLabelValues(channel, result).Inc()
}

// Handler serves the registry for scraping.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// Push replaces this job's metrics on a Pushgateway (job "reconciler",
// grouped by instance so several CronJob pods do not overwrite each other
// when given distinct instances).
func (m *Metrics) Push(ctx context.Context, url, instance string) error {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	p := push.New(url, "reconciler").Gatherer(m.reg)
	if instance != "" {
		p = p.Grouping("instance", instance)
	}
	if err := p.PushContext(ctx); err != nil {
		return fmt.Errorf("push metrics: %w", err)
	}
	return nil
}
