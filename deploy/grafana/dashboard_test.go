package grafana_test

// The Grafana dashboard: every expression reads only metrics and labels
// the binary exports (its metrics package's registry, exercised so that
// every family has a series), through the ${datasource} variable, with the
// provider and account variables applied; the layout is a valid grid; the
// thresholds are the alert rules'; and the sidecar ConfigMap is the JSON.
//
// configmap-dashboard.yaml is generated from reconciler.json:
//
//	go test ./deploy/grafana -run TestConfigMap -update

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/reconciler/reconciler/internal/dbopen"
	"github.com/reconciler/reconciler/metrics"
	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/reconcile"
)

var update = flag.Bool("update", false, "rewrite configmap-dashboard.yaml from reconciler.json")

const (
	dashboardFile = "reconciler.json"
	configMapFile = "configmap-dashboard.yaml"
	alertsFile    = "../prometheus/alerts.yaml"
	dsVar         = "${datasource}"
)

// --- the dashboard's shape ---------------------------------------------------

type datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type target struct {
	RefID        string      `json:"refId"`
	Expr         string      `json:"expr"`
	LegendFormat string      `json:"legendFormat"`
	Instant      bool        `json:"instant"`
	Format       string      `json:"format"`
	Datasource   *datasource `json:"datasource"`
}

type gridPos struct {
	X, Y, W, H int
}

type thresholds struct {
	Mode  string `json:"mode"`
	Steps []struct {
		Color string   `json:"color"`
		Value *float64 `json:"value"`
	} `json:"steps"`
}

type panel struct {
	ID          int         `json:"id"`
	Type        string      `json:"type"`
	Title       string      `json:"title"`
	Description string      `json:"description"`
	Datasource  *datasource `json:"datasource"`
	GridPos     gridPos     `json:"gridPos"`
	Targets     []target    `json:"targets"`
	FieldConfig struct {
		Defaults struct {
			Unit       string      `json:"unit"`
			Thresholds *thresholds `json:"thresholds"`
		} `json:"defaults"`
	} `json:"fieldConfig"`
}

type variable struct {
	Name       string      `json:"name"`
	Type       string      `json:"type"`
	Query      any         `json:"query"` // a string, or an object with query
	Definition string      `json:"definition"`
	Datasource *datasource `json:"datasource"`
	IncludeAll bool        `json:"includeAll"`
	AllValue   string      `json:"allValue"`
}

type dashboard struct {
	UID           string  `json:"uid"`
	Title         string  `json:"title"`
	SchemaVersion int     `json:"schemaVersion"`
	Panels        []panel `json:"panels"`
	Templating    struct {
		List []variable `json:"list"`
	} `json:"templating"`
}

func load(t *testing.T) dashboard {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	return d
}

// TestDashboardShape: uid, title and schema version; the three variables
// (a Prometheus data source, and provider and account from label_values
// whose All matches the platform account, which has no account label).
func TestDashboardShape(t *testing.T) {
	d := load(t)
	if d.UID != "reconciler" || d.Title == "" {
		t.Errorf("uid %q, title %q: want uid reconciler and a title (the ConfigMap and the docs name it)", d.UID, d.Title)
	}
	if d.SchemaVersion < 36 || d.SchemaVersion > 41 {
		t.Errorf("schemaVersion %d: want Grafana 9 to 11's (36 to 41)", d.SchemaVersion)
	}
	vars := map[string]variable{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v
	}
	if ds := vars["datasource"]; ds.Type != "datasource" || ds.Query != "prometheus" {
		t.Errorf("variable datasource %+v: want type datasource, query prometheus", ds)
	}
	for _, name := range []string{"provider", "account"} {
		v, ok := vars[name]
		if !ok {
			t.Errorf("no %s variable", name)
			continue
		}
		q := v.query()
		if v.Type != "query" || !strings.HasPrefix(q, "label_values(") || !strings.HasSuffix(q, ", "+name+")") || v.Definition != q {
			t.Errorf("variable %s: type %q, query %q, definition %q: want label_values(…, %s) in both", name, v.Type, q, v.Definition, name)
		}
		if v.Datasource == nil || *v.Datasource != (datasource{"prometheus", dsVar}) {
			t.Errorf("variable %s: datasource %+v, want the %s variable", name, v.Datasource, dsVar)
		}
		if !v.IncludeAll || v.AllValue != ".*" {
			t.Errorf("variable %s: includeAll %v, allValue %q: want All as .* (the platform account has no account label, so a list of values would leave it out)", name, v.IncludeAll, v.AllValue)
		}
	}
	if len(d.Panels) == 0 {
		t.Fatal("no panels")
	}
}

func (v variable) query() string {
	switch q := v.Query.(type) {
	case string:
		return q
	case map[string]any:
		s, _ := q["query"].(string)
		return s
	}
	return ""
}

// TestDatasourceIsTheVariable: every panel and every query names the
// ${datasource} variable, never a data source of one Grafana.
func TestDatasourceIsTheVariable(t *testing.T) {
	want := datasource{"prometheus", dsVar}
	for _, p := range load(t).Panels {
		if p.Datasource == nil || *p.Datasource != want {
			t.Errorf("panel %d %q: datasource %+v, want %+v", p.ID, p.Title, p.Datasource, want)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %d %q: no queries", p.ID, p.Title)
		}
		for _, q := range p.Targets {
			if q.Datasource == nil || *q.Datasource != want {
				t.Errorf("panel %d %q query %s: datasource %+v, want %+v", p.ID, p.Title, q.RefID, q.Datasource, want)
			}
		}
	}
}

// TestLayout: panel ids unique, refIds unique within a panel, every panel
// inside the 24 columns, no two panels overlapping.
func TestLayout(t *testing.T) {
	d := load(t)
	for _, e := range layoutErrors(d.Panels) {
		t.Error(e)
	}
}

func layoutErrors(ps []panel) []string {
	var errs []string
	ids := map[int]string{}
	for _, p := range ps {
		if p.ID <= 0 {
			errs = append(errs, fmt.Sprintf("panel %q: id %d, want a positive id", p.Title, p.ID))
		}
		if other, ok := ids[p.ID]; ok {
			errs = append(errs, fmt.Sprintf("panels %q and %q share id %d", other, p.Title, p.ID))
		}
		ids[p.ID] = p.Title
		refs := map[string]bool{}
		for _, q := range p.Targets {
			if q.RefID == "" || refs[q.RefID] {
				errs = append(errs, fmt.Sprintf("panel %d %q: refId %q empty or repeated", p.ID, p.Title, q.RefID))
			}
			refs[q.RefID] = true
		}
		g := p.GridPos
		if g.W < 1 || g.H < 1 || g.X < 0 || g.Y < 0 || g.X+g.W > 24 {
			errs = append(errs, fmt.Sprintf("panel %d %q: gridPos %+v outside the 24 columns", p.ID, p.Title, g))
		}
	}
	for i, a := range ps {
		for _, b := range ps[i+1:] {
			ga, gb := a.GridPos, b.GridPos
			if ga.X < gb.X+gb.W && gb.X < ga.X+ga.W && ga.Y < gb.Y+gb.H && gb.Y < ga.Y+ga.H {
				errs = append(errs, fmt.Sprintf("panels %d %q %+v and %d %q %+v overlap", a.ID, a.Title, ga, b.ID, b.Title, gb))
			}
		}
	}
	return errs
}

func TestLayoutCatchesOverlapAndIDs(t *testing.T) {
	ps := []panel{
		{ID: 1, Title: "a", GridPos: gridPos{0, 0, 12, 8}},
		{ID: 1, Title: "b", GridPos: gridPos{11, 7, 6, 4}},
		{ID: 3, Title: "c", GridPos: gridPos{20, 0, 6, 4}},
	}
	got := strings.Join(layoutErrors(ps), "\n")
	for _, want := range []string{"share id 1", `1 "a" {X:0 Y:0 W:12 H:8} and 1 "b"`, "outside the 24 columns"} {
		if !strings.Contains(got, want) {
			t.Errorf("errors %q: want %q", got, want)
		}
	}
}

// --- the metrics the binary exports ----------------------------------------------

// family is one metric family the registry exports: its type and every
// label its series carry.
type family struct {
	typ    dto.MetricType
	labels map[string]bool
}

// exported gathers the metrics package's registry after every method that
// makes a series has been called (a real run with drift and requests, a
// dry run, a run in progress, a notification; with a database, so that the
// items gauges are set), and returns the series names a query can select:
// a histogram's _bucket (with le), _sum and _count, a summary's
// quantile, _sum and _count.
func exported(t *testing.T) map[string]family {
	t.Helper()
	ctx := context.Background()
	db, err := dbopen.SQLite(filepath.Join(t.TempDir(), "metrics.db"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := models.Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	m := metrics.NewWith(metrics.Options{Version: "v0.0.0-test", DB: db})
	fin := time.Date(2026, 11, 20, 3, 0, 0, 0, time.UTC)
	run := reconcile.Result{
		Run: models.Run{ID: 1, Provider: "stripe", Account: "acct_1", Status: models.RunSucceeded, StartedAt: fin.Add(-time.Minute), FinishedAt: &fin,
			Examined: 10, Refused: 1, EventsRead: 10, SyntheticEvents: 1},
		Drift:       map[reconcile.DriftKey]int64{{Kind: models.KindStale, Action: models.ActionRefused}: 1},
		LastSuccess: fin,
	}
	m.Observe(ctx, run, map[int]int64{200: 3, 429: 1})
	dry := run
	dry.Run.ID, dry.Run.DryRun = 2, true
	m.Observe(ctx, dry, nil)
	defer m.Started("stripe", "acct_1")()
	m.Notified("slack", "sent")

	mfs, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]family{}
	for _, mf := range mfs {
		labels := map[string]bool{}
		for _, mt := range mf.GetMetric() {
			for _, l := range mt.GetLabel() {
				labels[l.GetName()] = true
			}
		}
		n := mf.GetName()
		switch mf.GetType() {
		case dto.MetricType_HISTOGRAM:
			out[n+"_bucket"] = family{mf.GetType(), with(labels, "le")}
			out[n+"_sum"] = family{mf.GetType(), labels}
			out[n+"_count"] = family{mf.GetType(), labels}
		case dto.MetricType_SUMMARY:
			out[n] = family{mf.GetType(), with(labels, "quantile")}
			out[n+"_sum"] = family{mf.GetType(), labels}
			out[n+"_count"] = family{mf.GetType(), labels}
		default:
			out[n] = family{mf.GetType(), labels}
		}
	}
	if len(out["reconciler_last_run_items"].labels) == 0 {
		t.Fatal("reconciler_last_run_items was not exported: the exercise above no longer sets it")
	}
	return out
}

func with(labels map[string]bool, more string) map[string]bool {
	out := map[string]bool{more: true}
	for l := range labels {
		out[l] = true
	}
	return out
}

// --- reading PromQL ------------------------------------------------------------------

// The dashboard's queries are read by a small PromQL scanner: enough to
// find every selector with its matchers and every by/without/on/ignoring/
// group_left/group_right label list, which is all this test checks.
// Syntax itself is promtool's to check (TestPromtool) and Prometheus's
// (scripts/dashboard-screenshot.sh runs every query).

type token struct {
	kind string // ident, string, number, duration, punct
	text string
}

var tokenRE = regexp.MustCompile(`\s+|"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|\[[^\]]*\]|[A-Za-z_:][A-Za-z0-9_:]*|(?:[0-9]+(?:ms|[smhdwy]))+\b|[0-9]+(?:\.[0-9]+)?(?:e[+-]?[0-9]+)?|=~|!~|!=|==|>=|<=|[-+*/%^(){}=,<>]`)

func tokenize(expr string) ([]token, error) {
	var out []token
	for rest := expr; rest != ""; {
		loc := tokenRE.FindStringIndex(rest)
		if loc == nil || loc[0] != 0 {
			return nil, fmt.Errorf("cannot read %q", rest)
		}
		s := rest[:loc[1]]
		rest = rest[loc[1]:]
		switch c := s[0]; {
		case strings.TrimSpace(s) == "":
			continue
		case c == '"' || c == '\'':
			u, err := strconv.Unquote(`"` + strings.ReplaceAll(s[1:len(s)-1], `"`, `\"`) + `"`)
			if err != nil {
				return nil, fmt.Errorf("string %s: %v", s, err)
			}
			out = append(out, token{"string", u})
		case c == '[':
			out = append(out, token{"duration", s})
		case c >= '0' && c <= '9' && strings.Trim(s, "0123456789") != "" && !strings.ContainsAny(s, ".e"):
			out = append(out, token{"duration", s}) // after offset
		case c >= '0' && c <= '9':
			out = append(out, token{"number", s})
		case c == '_' || c == ':' || (c|0x20 >= 'a' && c|0x20 <= 'z'):
			out = append(out, token{"ident", s})
		default:
			out = append(out, token{"punct", s})
		}
	}
	return out, nil
}

var (
	aggregations = map[string]bool{"sum": true, "min": true, "max": true, "avg": true, "count": true, "group": true, "stddev": true,
		"stdvar": true, "topk": true, "bottomk": true, "quantile": true, "count_values": true, "limitk": true, "limit_ratio": true}
	keywords = map[string]bool{"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
		"bool": true, "offset": true, "and": true, "or": true, "unless": true, "atan2": true, "inf": true, "nan": true}
)

// selector is one metric selector of a query: its name, the label names
// of its matchers and the matchers' values by label.
type selector struct {
	name     string
	at       int // token index
	matchers map[string][]string
}

// grouping is one by/without/on/ignoring/group_left/group_right list and
// the selectors it groups over: an aggregation's argument, or the whole
// query for a vector matching.
type grouping struct {
	clause string
	labels []string
	over   []selector
}

type query struct {
	selectors []selector
	groupings []grouping
	// result is the labels of the query's result when it starts with an
	// aggregation (its by list), or nil when unknown.
	result []string
}

func readQuery(expr string) (query, error) {
	toks, err := tokenize(expr)
	if err != nil {
		return query{}, err
	}
	var q query
	// closing returns the index of the parenthesis closing the one at i.
	closing := func(i int) (int, error) {
		depth := 0
		for j := i; j < len(toks); j++ {
			switch toks[j].text {
			case "(":
				depth++
			case ")":
				depth--
				if depth == 0 {
					return j, nil
				}
			}
		}
		return 0, fmt.Errorf("unbalanced parenthesis in %q", expr)
	}
	labelList := func(i int) ([]string, int, error) { // i at "("
		end, err := closing(i)
		if err != nil {
			return nil, 0, err
		}
		var ls []string
		for _, tk := range toks[i+1 : end] {
			if tk.kind == "ident" {
				ls = append(ls, tk.text)
			} else if tk.text != "," {
				return nil, 0, fmt.Errorf("label list: unexpected %q in %q", tk.text, expr)
			}
		}
		return ls, end, nil
	}
	type aggSpan struct {
		clause   string
		labels   []string
		from, to int
	}
	var aggs []aggSpan
	for i := 0; i < len(toks); i++ {
		tk := toks[i]
		if tk.kind != "ident" {
			if tk.text == "{" {
				return q, fmt.Errorf("a selector without a metric name in %q", expr)
			}
			continue
		}
		next := ""
		if i+1 < len(toks) {
			next = toks[i+1].text
		}
		switch {
		case aggregations[tk.text] && (next == "(" || next == "by" || next == "without"):
			a := aggSpan{}
			j := i + 1
			if next == "by" || next == "without" {
				ls, end, err := labelList(j + 1)
				if err != nil {
					return q, err
				}
				a.clause, a.labels, j = next, ls, end+1
			}
			end, err := closing(j)
			if err != nil {
				return q, err
			}
			a.from, a.to = j, end
			if end+1 < len(toks) && (toks[end+1].text == "by" || toks[end+1].text == "without") {
				ls, _, err := labelList(end + 2)
				if err != nil {
					return q, err
				}
				a.clause, a.labels = toks[end+1].text, ls
			}
			if len(aggs) == 0 && i == firstIdent(toks) {
				q.result = append([]string{}, a.labels...)
			}
			aggs = append(aggs, a)
			i = j // into the argument
		case tk.text == "by" || tk.text == "without":
			// after an aggregation's argument: read above; skip the list.
			_, end, err := labelList(i + 1)
			if err != nil {
				return q, err
			}
			i = end
		case tk.text == "on" || tk.text == "ignoring" || tk.text == "group_left" || tk.text == "group_right":
			if next != "(" {
				continue // group_left without labels
			}
			ls, end, err := labelList(i + 1)
			if err != nil {
				return q, err
			}
			aggs = append(aggs, aggSpan{clause: tk.text, labels: ls, from: 0, to: len(toks)})
			i = end
		case next == "(" || keywords[tk.text]:
			// a function or an operator keyword
		default:
			s := selector{name: tk.text, at: i, matchers: map[string][]string{}}
			if next == "{" {
				j := i + 2
				for ; j < len(toks) && toks[j].text != "}"; j++ {
					if toks[j].text == "," {
						continue
					}
					if j+2 >= len(toks) || toks[j].kind != "ident" || toks[j+1].kind != "punct" || toks[j+2].kind != "string" {
						return q, fmt.Errorf("matcher at %q in %q", toks[j].text, expr)
					}
					s.matchers[toks[j].text] = append(s.matchers[toks[j].text], toks[j+1].text+toks[j+2].text)
					j += 2
				}
				i = j
			}
			q.selectors = append(q.selectors, s)
		}
	}
	for _, a := range aggs {
		g := grouping{clause: a.clause, labels: a.labels}
		for _, s := range q.selectors {
			if s.at > a.from && s.at < a.to {
				g.over = append(g.over, s)
			}
		}
		if g.clause != "" {
			q.groupings = append(q.groupings, g)
		}
	}
	return q, nil
}

// firstIdent is the index of the first aggregation or selector, past the
// functions that keep their argument's labels (clamp_min, histogram_quantile,
// which drops le) and time(): `time() - max by (…) (…)` has max's labels.
func firstIdent(toks []token) int {
	for i, tk := range toks {
		if tk.kind != "ident" || keywords[tk.text] {
			continue
		}
		if i+1 < len(toks) && toks[i+1].text == "(" && !aggregations[tk.text] {
			continue // a function
		}
		return i
	}
	return -1
}

// substitute replaces the dashboard's variables as Grafana would with All
// selected and a 5m interval.
func substitute(expr string) string {
	return strings.NewReplacer("$__rate_interval", "5m", "$__interval", "5m", "$__range", "5m",
		"${provider}", ".*", "$provider", ".*", "${account}", ".*", "$account", ".*").Replace(expr)
}

var legendLabel = regexp.MustCompile(`\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}`)

// check returns what is wrong with expr against the exported families:
// an unknown metric, a matcher or grouping label the metric does not
// carry, a reconciler_ selector not filtered by the provider and account
// variables its labels allow, a legend label the result does not carry.
func check(expr, legend string, fams map[string]family) []string {
	q, err := readQuery(substitute(expr))
	if err != nil {
		return []string{err.Error()}
	}
	var errs []string
	if len(q.selectors) == 0 {
		errs = append(errs, fmt.Sprintf("%q selects no metric", expr))
	}
	raw, _ := readQuery(strings.NewReplacer("$__rate_interval", "5m", "$__interval", "5m", "$__range", "5m").Replace(expr))
	for i, s := range q.selectors {
		f, ok := fams[s.name]
		if !ok {
			errs = append(errs, fmt.Sprintf("%q reads %s, which the binary does not export", expr, s.name))
			continue
		}
		for l := range s.matchers {
			if !f.labels[l] {
				errs = append(errs, fmt.Sprintf("%q: %s has no label %s (it has %s)", expr, s.name, l, keys(f.labels)))
			}
		}
		if strings.HasPrefix(s.name, "reconciler_") && i < len(raw.selectors) {
			for _, v := range []string{"provider", "account"} {
				if f.labels[v] && !slices.Contains(raw.selectors[i].matchers[v], `=~$`+v) {
					errs = append(errs, fmt.Sprintf("%q: %s is not filtered by %s=~\"$%s\"", expr, s.name, v, v))
				}
			}
		}
	}
	for _, g := range q.groupings {
		for _, l := range g.labels {
			for _, s := range g.over {
				if f, ok := fams[s.name]; ok && !f.labels[l] {
					errs = append(errs, fmt.Sprintf("%q: %s (%s) has no label %s (it has %s)", expr, g.clause, s.name, l, keys(f.labels)))
				}
			}
		}
	}
	for _, m := range legendLabel.FindAllStringSubmatch(legend, -1) {
		l := m[1]
		if q.result != nil && !slices.Contains(q.result, l) {
			errs = append(errs, fmt.Sprintf("%q: legend {{%s}}, but the result is grouped by (%s)", expr, l, strings.Join(q.result, ", ")))
		}
		if q.result == nil {
			for _, s := range q.selectors {
				if f, ok := fams[s.name]; ok && !f.labels[l] {
					errs = append(errs, fmt.Sprintf("%q: legend {{%s}}, but %s has no such label", expr, l, s.name))
				}
			}
		}
	}
	return errs
}

func keys(m map[string]bool) string {
	var s []string
	for k := range m {
		s = append(s, k)
	}
	slices.Sort(s)
	return strings.Join(s, ", ")
}

// expressions is every query of the dashboard with where it is, its
// legend, and the variables' label_values queries.
func expressions(d dashboard) (where, exprs, legends []string) {
	for _, p := range d.Panels {
		for _, q := range p.Targets {
			where = append(where, fmt.Sprintf("panel %d %q query %s", p.ID, p.Title, q.RefID))
			exprs = append(exprs, q.Expr)
			legends = append(legends, q.LegendFormat)
		}
	}
	return where, exprs, legends
}

var labelValues = regexp.MustCompile(`^label_values\((.+),\s*([A-Za-z_][A-Za-z0-9_]*)\)$`)

// TestQueriesReadExportedMetrics: every metric a query reads is one the
// binary exports, with the labels the query uses.
func TestQueriesReadExportedMetrics(t *testing.T) {
	fams := exported(t)
	d := load(t)
	where, exprs, legends := expressions(d)
	for i, e := range exprs {
		for _, err := range check(e, legends[i], fams) {
			t.Errorf("%s: %s", where[i], err)
		}
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		m := labelValues.FindStringSubmatch(v.query())
		if m == nil {
			t.Errorf("variable %s: query %q is not label_values(SELECTOR, LABEL)", v.Name, v.query())
			continue
		}
		q, err := readQuery(substitute(m[1]))
		if err != nil || len(q.selectors) != 1 {
			t.Errorf("variable %s: selector %q: %v", v.Name, m[1], err)
			continue
		}
		f, ok := fams[q.selectors[0].name]
		if !ok || !f.labels[m[2]] {
			t.Errorf("variable %s: %s, exported %v, has no label %s", v.Name, q.selectors[0].name, ok, m[2])
		}
	}
}

// TestCheckCatchesMistakes guards the guard: a misspelt metric, a label
// the metric does not carry, a missing variable filter and a legend label
// the result drops each fail.
func TestCheckCatchesMistakes(t *testing.T) {
	fams := exported(t)
	for _, c := range []struct{ expr, legend, want string }{
		{`max by (provider, account) (reconciler_webhook_miss_ratios{provider=~"$provider", account=~"$account"})`, "", "does not export"},
		{`sum by (provider, code) (rate(reconciler_provider_requests_total{provider=~"$provider", account=~"$account"}[5m]))`, "", "has no label account"},
		{`sum by (account) (rate(reconciler_provider_requests_total{provider=~"$provider"}[5m]))`, "", "by (reconciler_provider_requests_total) has no label account"},
		{`max by (provider, account) (reconciler_webhook_miss_ratio{provider=~"$provider"})`, "", `not filtered by account`},
		{`sum by (action) (reconciler_last_run_items{provider=~"$provider", account=~"$account"})`, "{{status}}", "legend {{status}}"},
		{`histogram_quantile(0.9, sum by (le, status) (rate(reconciler_run_duration_seconds_bucket{provider=~"$provider", account=~"$account"}[5m])))`, "", ""},
		{`histogram_quantile(0.9, sum by (le, code) (rate(reconciler_run_duration_seconds_bucket{provider=~"$provider", account=~"$account"}[5m])))`, "", "has no label code"},
		{`clamp_min(sum by (status) (reconciler_runs_total{provider=~"$provider", account=~"$account"}) - (sum by (status) (reconciler_runs_total{provider=~"$provider", account=~"$account"} offset $__interval) or 0 * sum by (status) (reconciler_runs_total{provider=~"$provider", account=~"$account"})), 0)`, "{{status}}", ""},
		{`clamp_min(sum by (status) (reconciler_runs_total{provider=~"$provider", account=~"$account"}) - sum by (status) (reconciler_runs_total{provider=~"$provider", account=~"$account"} offset $__interval), 0)`, "{{account}}", "legend {{account}}"},
		{`sum(reconciler_runs_total{provider=~"$provider", account=~"$account"} offset 5m) - sum(reconciler_runs_totals{provider=~"$provider", account=~"$account"})`, "", "reconciler_runs_totals, which the binary does not export"},
	} {
		errs := strings.Join(check(c.expr, c.legend, fams), "\n")
		if c.want == "" && errs != "" || !strings.Contains(errs, c.want) {
			t.Errorf("check(%q): %q, want %q", c.expr, errs, c.want)
		}
	}
}

// TestPromtool checks every query's syntax with promtool (Prometheus's own
// parser), as recording rules of a throwaway rules file, when it is
// installed.
func TestPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not installed")
	}
	where, exprs, _ := expressions(load(t))
	var b strings.Builder
	b.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	for i, e := range exprs {
		j, _ := json.Marshal(substitute(e))
		fmt.Fprintf(&b, "      - record: dashboard:query_%d # %s\n        expr: %s\n", i, strings.ReplaceAll(where[i], "\n", " "), j)
	}
	f := filepath.Join(t.TempDir(), "dashboard-rules.yaml")
	if err := os.WriteFile(f, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "check", "rules", f).CombinedOutput(); err != nil {
		t.Errorf("promtool check rules (the dashboard's queries): %v\n%s\n%s", err, out, b.String())
	}
}

// --- the alert rules' thresholds ----------------------------------------------------

// alertThreshold is the number an alert's expression compares its metric
// with: the `> N` (or `> A * B`) after it.
func alertThreshold(t *testing.T, metric string) float64 {
	t.Helper()
	b, err := os.ReadFile(alertsFile)
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`\(` + metric + `\)\s*>\s*([0-9.]+)(?:\s*\*\s*([0-9.]+))?`)
	m := re.FindStringSubmatch(string(b))
	if m == nil {
		t.Fatalf("%s: no `(%s) > N` comparison", alertsFile, metric)
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatal(err)
	}
	if m[2] != "" {
		f, err := strconv.ParseFloat(m[2], 64)
		if err != nil {
			t.Fatal(err)
		}
		v *= f
	}
	return v
}

// TestThresholdsAreTheAlerts: each panel of an alerted metric turns red
// where its alert fires (after the alert's for:), so the dashboard and the
// pager agree.
func TestThresholdsAreTheAlerts(t *testing.T) {
	panels := map[string]panel{}
	for _, p := range load(t).Panels {
		panels[p.Title] = p
	}
	for _, c := range []struct {
		title, metric string
		red           func(alert float64) float64 // the first red value for the alert's threshold
	}{
		{"Time since last success", "reconciler_last_success_timestamp_seconds", func(a float64) float64 { return a }},
		{"Webhook miss ratio (last finished run)", "reconciler_webhook_miss_ratio", func(a float64) float64 { return a }},
		// > 0 on a count: red from 1.
		{"Refused, nobody acknowledged", "reconciler_last_run_refused", func(a float64) float64 { return a + 1 }},
	} {
		p, ok := panels[c.title]
		if !ok {
			t.Errorf("no panel %q", c.title)
			continue
		}
		want := c.red(alertThreshold(t, c.metric))
		th := p.FieldConfig.Defaults.Thresholds
		if th == nil || th.Mode != "absolute" || len(th.Steps) != 2 || th.Steps[0].Value != nil || th.Steps[1].Value == nil ||
			th.Steps[0].Color != "green" || th.Steps[1].Color != "red" || *th.Steps[1].Value != want {
			t.Errorf("panel %q: thresholds %s, want green then red at %v (%s's alert)", p.Title, mustJSON(t, th), want, c.metric)
		}
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// --- the sidecar ConfigMap -------------------------------------------------------------

const configMapHeader = `# GENERATED from deploy/grafana/reconciler.json; edit that file, then
#
#   go test ./deploy/grafana -run TestConfigMap -update
#
# The test fails when the two drift. Grafana's dashboard sidecar
# (kube-prometheus-stack, the grafana chart with sidecar.dashboards.enabled)
# loads every ConfigMap labelled grafana_dashboard: "1" in the namespaces it
# watches; grafana_folder names the folder (the chart's folderAnnotation).
apiVersion: v1
kind: ConfigMap
metadata:
  name: reconciler-dashboard
  labels:
    grafana_dashboard: "1"
  annotations:
    grafana_folder: Payments
data:
  reconciler.json: |
`

// generate is the ConfigMap holding dashboard as its reconciler.json key
// (a literal block scalar: the JSON byte for byte).
func generate(dashboard []byte) ([]byte, error) {
	if !bytes.HasSuffix(dashboard, []byte("\n")) || bytes.HasSuffix(dashboard, []byte("\n\n")) {
		return nil, fmt.Errorf("%s must end in exactly one newline (the block scalar keeps one)", dashboardFile)
	}
	var b bytes.Buffer
	b.WriteString(configMapHeader)
	for l := range strings.Lines(string(dashboard)) {
		if strings.TrimRight(l, " \t\n") != strings.TrimSuffix(l, "\n") {
			return nil, fmt.Errorf("%s: a line ends in blanks, which YAML would not keep: %q", dashboardFile, l)
		}
		if strings.TrimSpace(l) != "" {
			b.WriteString("    ")
		}
		b.WriteString(l)
	}
	return b.Bytes(), nil
}

// TestConfigMap: configmap-dashboard.yaml is what generate makes of
// reconciler.json, decodes strictly as a ConfigMap with the sidecar's label,
// and its data is the dashboard byte for byte; the kustomization applies it.
func TestConfigMap(t *testing.T) {
	dash, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	gen, err := generate(dash)
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile(configMapFile, gen, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	have, err := os.ReadFile(configMapFile)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(have, gen) {
		t.Errorf("%s is not what -update generates from %s: regenerate with go test ./deploy/grafana -run TestConfigMap -update", configMapFile, dashboardFile)
	}
	var cm corev1.ConfigMap
	if err := yaml.UnmarshalStrict(have, &cm); err != nil {
		t.Fatalf("%s: strict decode: %v", configMapFile, err)
	}
	if cm.APIVersion != "v1" || cm.Kind != "ConfigMap" || cm.Labels["grafana_dashboard"] != "1" {
		t.Errorf("%s: %s %s labels %v: want a v1 ConfigMap labelled grafana_dashboard: \"1\"", configMapFile, cm.APIVersion, cm.Kind, cm.Labels)
	}
	if len(cm.Data) != 1 || cm.Data[dashboardFile] != string(dash) {
		t.Errorf("%s: data keys %v; want only %s, equal to the file", configMapFile, keysOf(cm.Data), dashboardFile)
	}
	k, err := os.ReadFile("kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var kz struct {
		APIVersion string   `json:"apiVersion"`
		Kind       string   `json:"kind"`
		Namespace  string   `json:"namespace"`
		Labels     []any    `json:"labels"`
		Resources  []string `json:"resources"`
	}
	if err := yaml.UnmarshalStrict(k, &kz); err != nil {
		t.Fatalf("kustomization.yaml: strict decode: %v", err)
	}
	if kz.Kind != "Kustomization" || !slices.Equal(kz.Resources, []string{configMapFile}) || kz.Namespace == "" {
		t.Errorf("kustomization.yaml: kind %q, resources %v, namespace %q: want a Kustomization of %s with a namespace", kz.Kind, kz.Resources, kz.Namespace, configMapFile)
	}
}

func keysOf(m map[string]string) []string {
	var s []string
	for k := range m {
		s = append(s, k)
	}
	slices.Sort(s)
	return s
}

// TestKustomizeBuild builds the kustomization with kubectl when installed.
func TestKustomizeBuild(t *testing.T) {
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Skip("kubectl not installed; TestConfigMap reads the files")
	}
	out, err := exec.Command(kubectl, "kustomize", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl kustomize: %v\n%s", err, out)
	}
	var cm corev1.ConfigMap
	if err := yaml.Unmarshal(out, &cm); err != nil {
		t.Fatal(err)
	}
	dash, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	if cm.Labels["grafana_dashboard"] != "1" || cm.Data[dashboardFile] != string(dash) {
		t.Errorf("kustomize built labels %v and a dashboard of %d bytes, want grafana_dashboard: \"1\" and the file's %d", cm.Labels, len(cm.Data[dashboardFile]), len(dash))
	}
}
