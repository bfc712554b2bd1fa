package prometheus_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/reconciler/reconciler/metrics"
	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/reconcile"
)

// rulesFile is the Prometheus rules file format, decoded strictly: a
// misspelt key (expr, for, labels, annotations...) fails.
type rulesFile struct {
	Groups []struct {
		Name     string `json:"name"`
		Interval string `json:"interval,omitempty"`
		Rules    []rule `json:"rules"`
	} `json:"groups"`
}

type rule struct {
	Alert       string            `json:"alert,omitempty"`
	Record      string            `json:"record,omitempty"`
	Expr        string            `json:"expr"`
	For         string            `json:"for,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

var promDuration = regexp.MustCompile(`^([0-9]+(ms|s|m|h|d|w|y))+$`)

func load(t *testing.T) rulesFile {
	t.Helper()
	b, err := os.ReadFile("alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	j, err := yaml.YAMLToJSON(b)
	if err != nil {
		t.Fatalf("alerts.yaml is not YAML: %v", err)
	}
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.DisallowUnknownFields()
	var f rulesFile
	if err := dec.Decode(&f); err != nil {
		t.Fatalf("alerts.yaml: strict decode: %v", err)
	}
	return f
}

// TestAlertsStrict: the rules file's shape and every rule's fields.
func TestAlertsStrict(t *testing.T) {
	f := load(t)
	if len(f.Groups) == 0 {
		t.Fatal("no groups")
	}
	for _, g := range f.Groups {
		if g.Name == "" || len(g.Rules) == 0 {
			t.Errorf("group %q: want a name and rules", g.Name)
		}
		for _, r := range g.Rules {
			if r.Alert == "" {
				t.Errorf("group %s: rule without alert name (recording rules are not expected here): %q", g.Name, r.Expr)
				continue
			}
			if strings.TrimSpace(r.Expr) == "" {
				t.Errorf("%s: empty expr", r.Alert)
			}
			if !promDuration.MatchString(r.For) {
				t.Errorf("%s: for %q is not a Prometheus duration", r.Alert, r.For)
			}
			switch r.Labels["severity"] {
			case "critical", "warning", "info":
			default:
				t.Errorf("%s: labels.severity %q, want critical, warning or info", r.Alert, r.Labels["severity"])
			}
			for _, k := range []string{"summary", "description", "runbook_url"} {
				if strings.TrimSpace(r.Annotations[k]) == "" {
					t.Errorf("%s: annotations.%s is empty", r.Alert, k)
				}
			}
		}
	}
}

// TestAlertsCoverMetrics: the three alerts exist and watch the right metrics.
func TestAlertsCoverMetrics(t *testing.T) {
	want := map[string]string{
		"ReconcilerNoSuccessfulRun":      "reconciler_last_success_timestamp_seconds",
		"ReconcilerWebhookMissRatioHigh": "reconciler_webhook_miss_ratio",
		"ReconcilerRefusedDrift":         "reconciler_last_run_refused",
	}
	seen := map[string]int{}
	var absent bool
	for _, g := range load(t).Groups {
		for _, r := range g.Rules {
			metric, ok := want[r.Alert]
			if !ok {
				t.Errorf("unexpected alert %q (add it to this test and to docs/operations.md)", r.Alert)
				continue
			}
			seen[r.Alert]++
			if !regexp.MustCompile(`\b` + metric + `\b`).MatchString(r.Expr) {
				t.Errorf("%s: expr %q does not mention %s", r.Alert, r.Expr, metric)
			}
			if r.Alert == "ReconcilerNoSuccessfulRun" && strings.Contains(r.Expr, "absent") {
				absent = true
			}
		}
	}
	for a := range want {
		if seen[a] == 0 {
			t.Errorf("alert %s missing", a)
		}
	}
	if !absent {
		t.Errorf("ReconcilerNoSuccessfulRun: want an absent() variant (no metric at all)")
	}
}

// written is the reconciler_ series names m exposes.
func written(t *testing.T, m *metrics.Metrics) map[string]bool {
	t.Helper()
	mfs, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, mf := range mfs {
		if n := mf.GetName(); strings.HasPrefix(n, "reconciler_") {
			out[n] = true
		}
	}
	return out
}

var seriesName = regexp.MustCompile(`\breconciler_[a-z_]+\b`)

// TestRulesReadNothingDryRunsWrite: what a dry run writes (by the metrics
// package's own Observe) is no series a rule reads, so a dry run neither
// fires nor clears an alert; and every series a rule reads is one a real
// run writes (no misspelt name that would never fire).
func TestRulesReadNothingDryRunsWrite(t *testing.T) {
	ctx := context.Background()
	fin := time.Date(2026, 11, 20, 3, 0, 0, 0, time.UTC)
	run := reconcile.Result{
		Run: models.Run{ID: 1, Provider: "stripe", Status: models.RunSucceeded, StartedAt: fin.Add(-time.Minute), FinishedAt: &fin,
			Refused: 2, EventsRead: 10, SyntheticEvents: 1},
		Drift:       map[reconcile.DriftKey]int64{{Kind: models.KindStale, Action: models.ActionRefused}: 2},
		LastSuccess: fin,
	}
	dry := metrics.New()
	base := written(t, dry) // build information only
	dryRun := run
	dryRun.Run.DryRun = true
	dry.Observe(ctx, dryRun, map[int]int64{200: 3})
	real := metrics.New()
	real.Observe(ctx, run, map[int]int64{200: 3})
	byReal := written(t, real)
	for _, g := range load(t).Groups {
		for _, r := range g.Rules {
			for _, name := range seriesName.FindAllString(r.Expr, -1) {
				if written(t, dry)[name] && !base[name] {
					t.Errorf("%s reads %s, which a dry run writes", r.Alert, name)
				}
				if !byReal[name] {
					t.Errorf("%s reads %s, which no run writes", r.Alert, name)
				}
			}
		}
	}
}

// anchors returns the GitHub anchors of a Markdown file's headings.
func anchors(md string) map[string]bool {
	out := map[string]bool{}
	heading := regexp.MustCompile(`(?m)^#{1,6}\s+(.+?)\s*#*\s*$`)
	drop := regexp.MustCompile(`[^\p{L}\p{N}\- _]`)
	for _, m := range heading.FindAllStringSubmatch(md, -1) {
		a := strings.ToLower(drop.ReplaceAllString(m[1], ""))
		out[strings.ReplaceAll(a, " ", "-")] = true
	}
	return out
}

// TestRunbooksExist: every runbook_url points at a heading of
// docs/operations.md.
func TestRunbooksExist(t *testing.T) {
	md, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	have := anchors(string(md))
	const prefix = "https://github.com/reconciler/reconciler/blob/main/docs/operations.md#"
	for _, g := range load(t).Groups {
		for _, r := range g.Rules {
			u := r.Annotations["runbook_url"]
			anchor, ok := strings.CutPrefix(u, prefix)
			if !ok {
				t.Errorf("%s: runbook_url %q does not point into docs/operations.md", r.Alert, u)
				continue
			}
			if !have[anchor] {
				t.Errorf("%s: docs/operations.md has no heading with anchor #%s", r.Alert, anchor)
			}
		}
	}
}

// TestPromtool runs promtool's checks and unit tests when it is installed.
func TestPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not installed")
	}
	for _, args := range [][]string{{"check", "rules", "alerts.yaml"}, {"test", "rules", "alerts.test.yaml"}} {
		if out, err := exec.Command(promtool, args...).CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}
