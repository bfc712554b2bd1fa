package runner

import "github.com/reconciler/reconciler/metrics"

// MetricKeys names jobs as the metrics do (metrics.Metrics.Watch).
func MetricKeys(jobs []Job) []metrics.Key {
	keys := make([]metrics.Key, 0, len(jobs))
	for _, j := range jobs {
		keys = append(keys, metrics.Key{Provider: j.Provider, Account: j.Account})
	}
	return keys
}
