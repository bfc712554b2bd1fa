package prometheusoperator_test

// The Prometheus Operator objects: decoded strictly (into the subset of the
// CRDs' fields they use, so a misspelt field fails), checked against what
// they point at (the rules file, serve's Service), and built with kubectl
// kustomize when it is installed.
//
// prometheusrule.yaml is generated from ../prometheus/alerts.yaml:
//
//	go test ./deploy/prometheus-operator -run TestPrometheusRule -update

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite prometheusrule.yaml from ../prometheus/alerts.yaml")

const (
	alertsFile = "../prometheus/alerts.yaml"
	ruleFile   = "prometheusrule.yaml"
	serveDir   = "../kubernetes/serve"
	serveSvc   = "reconciler-serve"
	monitoring = "monitoring.coreos.com/v1"
)

// releasePatch is the overlay docs/operations.md shows for the label
// kube-prometheus-stack's default selectors want; TestReleaseOverlay builds
// it.
const releasePatch = `patches:
  - target:
      group: monitoring.coreos.com
    patch: |-
      - op: add
        path: /metadata/labels/release
        value: kube-prometheus-stack
`

// --- decoding ---------------------------------------------------------------

// strictJSON converts YAML to JSON and decodes it, rejecting unknown fields.
func strictJSON(doc []byte, into any) error {
	j, err := yaml.YAMLToJSON(doc)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.DisallowUnknownFields()
	if err := dec.Decode(into); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data after the document")
	}
	return nil
}

type objectMeta struct {
	Name      string            `json:"name"`
	Namespace string            `json:"namespace,omitempty"`
	Labels    map[string]string `json:"labels,omitempty"`
}

// rulesFile is the Prometheus rules file format (as in
// ../prometheus/alerts_test.go).
type rulesFile struct {
	Groups []group `json:"groups"`
}

type group struct {
	Name     string `json:"name"`
	Interval string `json:"interval,omitempty"`
	Rules    []rule `json:"rules"`
}

type rule struct {
	Alert       string            `json:"alert,omitempty"`
	Record      string            `json:"record,omitempty"`
	Expr        string            `json:"expr"`
	For         string            `json:"for,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

type prometheusRule struct {
	APIVersion string     `json:"apiVersion"`
	Kind       string     `json:"kind"`
	Metadata   objectMeta `json:"metadata"`
	Spec       rulesFile  `json:"spec"`
}

// serviceMonitor is the subset of monitoring.coreos.com/v1 ServiceMonitor
// used here; a selector with matchExpressions fails to decode on purpose
// (matches below only understands matchLabels).
type serviceMonitor struct {
	APIVersion string     `json:"apiVersion"`
	Kind       string     `json:"kind"`
	Metadata   objectMeta `json:"metadata"`
	Spec       struct {
		NamespaceSelector *struct {
			Any        bool     `json:"any,omitempty"`
			MatchNames []string `json:"matchNames,omitempty"`
		} `json:"namespaceSelector,omitempty"`
		Selector struct {
			MatchLabels map[string]string `json:"matchLabels"`
		} `json:"selector"`
		Endpoints []struct {
			Port          string `json:"port"`
			Path          string `json:"path"`
			Interval      string `json:"interval"`
			ScrapeTimeout string `json:"scrapeTimeout,omitempty"`
			HonorLabels   bool   `json:"honorLabels,omitempty"`
		} `json:"endpoints"`
	} `json:"spec"`
}

// kustomization is the subset of kustomize's Kustomization these
// directories and serve's use, decoded strictly.
type kustomization struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Namespace  string `json:"namespace,omitempty"`
	Labels     []struct {
		Pairs            map[string]string `json:"pairs"`
		IncludeSelectors bool              `json:"includeSelectors,omitempty"`
		IncludeTemplates bool              `json:"includeTemplates,omitempty"`
	} `json:"labels,omitempty"`
	Resources []string        `json:"resources"`
	Images    json.RawMessage `json:"images,omitempty"` // serve's; no image here
}

// --- building a kustomization by reading it -----------------------------------

// object is one built document: its kind, name, and its JSON after the
// kustomization's namespace and labels are applied.
type object struct {
	file      string
	kind      string
	name      string
	namespace string
	labels    map[string]string
	json      []byte
}

func (o object) String() string { return fmt.Sprintf("%s %s/%s", o.file, o.kind, o.name) }

var docSep = regexp.MustCompile(`(?m)^---[ \t]*$`)

// build does what kustomize does with the fields kustomization declares:
// resources (files and directories, recursively), namespace, and labels on
// metadata.labels (the includeTemplates part is left out: no test here
// reads a pod template). TestKustomizeBuild checks it against kubectl.
func build(t *testing.T, dir string) []object {
	t.Helper()
	kf := filepath.Join(dir, "kustomization.yaml")
	b, err := os.ReadFile(kf)
	if err != nil {
		t.Fatal(err)
	}
	var k kustomization
	if err := strictJSON(b, &k); err != nil {
		t.Fatalf("%s: strict decode: %v", kf, err)
	}
	if k.APIVersion != "kustomize.config.k8s.io/v1beta1" || k.Kind != "Kustomization" || len(k.Resources) == 0 {
		t.Fatalf("%s: apiVersion/kind %s/%s, resources %v", kf, k.APIVersion, k.Kind, k.Resources)
	}
	var out []object
	for _, r := range k.Resources {
		p := filepath.Join(dir, r)
		if st, err := os.Stat(p); err != nil {
			t.Fatalf("%s: resource %s: %v", kf, r, err)
		} else if st.IsDir() {
			out = append(out, build(t, p)...)
			continue
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for i, d := range docSep.Split(string(b), -1) {
			var m map[string]any
			if err := yaml.Unmarshal([]byte(d), &m); err != nil {
				t.Fatalf("%s document %d: %v", p, i, err)
			}
			if m == nil {
				continue // comments only
			}
			out = append(out, object{file: filepath.ToSlash(p), json: mustJSON(t, m)})
		}
	}
	for i := range out {
		var m map[string]any
		if err := json.Unmarshal(out[i].json, &m); err != nil {
			t.Fatal(err)
		}
		md, _ := m["metadata"].(map[string]any)
		if md == nil {
			t.Fatalf("%s: no metadata", out[i].file)
		}
		if k.Namespace != "" {
			md["namespace"] = k.Namespace
		}
		for _, l := range k.Labels {
			labels, _ := md["labels"].(map[string]any)
			if labels == nil {
				labels = map[string]any{}
			}
			for key, v := range l.Pairs {
				labels[key] = v
			}
			md["labels"] = labels
		}
		out[i].json = mustJSON(t, m)
		var meta struct {
			Kind     string     `json:"kind"`
			Metadata objectMeta `json:"metadata"`
		}
		if err := json.Unmarshal(out[i].json, &meta); err != nil {
			t.Fatal(err)
		}
		out[i].kind, out[i].name = meta.Kind, meta.Metadata.Name
		out[i].namespace, out[i].labels = meta.Metadata.Namespace, meta.Metadata.Labels
	}
	return out
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func decode[T any](t *testing.T, o object) T {
	t.Helper()
	var v T
	if err := strictJSON(o.json, &v); err != nil {
		t.Fatalf("%s: strict decode: %v", o, err)
	}
	return v
}

func only(t *testing.T, objs []object, kind, name string) object {
	t.Helper()
	var found []object
	for _, o := range objs {
		if o.kind == kind && o.name == name {
			found = append(found, o)
		}
	}
	if len(found) != 1 {
		t.Fatalf("want one %s/%s, have %d", kind, name, len(found))
	}
	return found[0]
}

func names(objs []object) []string {
	var s []string
	for _, o := range objs {
		s = append(s, o.kind+"/"+o.name)
	}
	slices.Sort(s)
	return s
}

// --- the PrometheusRule is alerts.yaml ----------------------------------------

const ruleHeader = `# GENERATED from deploy/prometheus/alerts.yaml (its comments included);
# edit that file, then
#
#   go test ./deploy/prometheus-operator -run TestPrometheusRule -update
#
# The test fails when the two drift.
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: reconciler
spec:
`

// generate wraps alerts.yaml's groups in a PrometheusRule: the lines from
// `groups:` on, indented under spec (block scalars keep their meaning).
func generate(alerts []byte) ([]byte, error) {
	s := string(alerts)
	i := strings.Index(s, "\ngroups:")
	if i < 0 {
		return nil, errors.New(alertsFile + ": no top-level groups:")
	}
	var b strings.Builder
	b.WriteString(ruleHeader)
	for l := range strings.Lines(s[i+1:]) {
		if strings.TrimSpace(l) != "" {
			b.WriteString("  ")
		}
		b.WriteString(l)
	}
	return []byte(b.String()), nil
}

// ruleDiff names every difference between two rule sets, group by group and
// rule by rule; empty when they are equal.
func ruleDiff(want, got []group) []string {
	var d []string
	if len(want) != len(got) {
		d = append(d, fmt.Sprintf("%d groups, want %d", len(got), len(want)))
	}
	for gi := range min(len(want), len(got)) {
		w, g := want[gi], got[gi]
		if w.Name != g.Name || w.Interval != g.Interval {
			d = append(d, fmt.Sprintf("group %d: name/interval %q/%q, want %q/%q", gi, g.Name, g.Interval, w.Name, w.Interval))
		}
		if len(w.Rules) != len(g.Rules) {
			d = append(d, fmt.Sprintf("group %s: %d rules, want %d", w.Name, len(g.Rules), len(w.Rules)))
		}
		for ri := range min(len(w.Rules), len(g.Rules)) {
			wr, gr := w.Rules[ri], g.Rules[ri]
			at := fmt.Sprintf("group %s rule %d (%s)", w.Name, ri, wr.Alert+wr.Record)
			for _, f := range []struct {
				field     string
				want, got any
			}{
				{"alert", wr.Alert, gr.Alert},
				{"record", wr.Record, gr.Record},
				{"expr", wr.Expr, gr.Expr},
				{"for", wr.For, gr.For},
				{"labels", wr.Labels, gr.Labels},
				{"annotations", wr.Annotations, gr.Annotations},
			} {
				if !reflect.DeepEqual(f.want, f.got) {
					d = append(d, fmt.Sprintf("%s: %s %q, want %q", at, f.field, f.got, f.want))
				}
			}
		}
	}
	return d
}

// TestPrometheusRule: the PrometheusRule's groups are exactly alerts.yaml's
// (groups, rules, expr, for, labels, annotations), and the file is what
// generate makes of alerts.yaml.
func TestPrometheusRule(t *testing.T) {
	alerts, err := os.ReadFile(alertsFile)
	if err != nil {
		t.Fatal(err)
	}
	gen, err := generate(alerts)
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile(ruleFile, gen, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var want rulesFile
	if err := strictJSON(alerts, &want); err != nil {
		t.Fatalf("%s: strict decode: %v", alertsFile, err)
	}
	if len(want.Groups) == 0 {
		t.Fatalf("%s: no groups", alertsFile)
	}
	pr := decode[prometheusRule](t, only(t, build(t, "."), "PrometheusRule", "reconciler"))
	if pr.APIVersion != monitoring {
		t.Errorf("PrometheusRule apiVersion %q, want %q", pr.APIVersion, monitoring)
	}
	for _, d := range ruleDiff(want.Groups, pr.Spec.Groups) {
		t.Errorf("%s differs from %s: %s (regenerate: go test ./deploy/prometheus-operator -run TestPrometheusRule -update)", ruleFile, alertsFile, d)
	}
	have, err := os.ReadFile(ruleFile)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(have, gen) {
		t.Errorf("%s is not what -update generates from %s (comments or layout changed): regenerate with go test ./deploy/prometheus-operator -run TestPrometheusRule -update", ruleFile, alertsFile)
	}
}

// TestRuleDiffCatchesDrift guards the guard: every compared field of a rule
// that changes is reported.
func TestRuleDiffCatchesDrift(t *testing.T) {
	alerts, err := os.ReadFile(alertsFile)
	if err != nil {
		t.Fatal(err)
	}
	var base rulesFile
	if err := strictJSON(alerts, &base); err != nil {
		t.Fatal(err)
	}
	fresh := func() []group {
		var f rulesFile
		if err := strictJSON(alerts, &f); err != nil {
			t.Fatal(err)
		}
		return f.Groups
	}
	for name, mutate := range map[string]func(g []group){
		"expr":        func(g []group) { g[0].Rules[0].Expr += " or vector(1)" },
		"for":         func(g []group) { g[0].Rules[0].For = "1h" },
		"labels":      func(g []group) { g[0].Rules[0].Labels["severity"] = "info" },
		"annotations": func(g []group) { delete(g[0].Rules[0].Annotations, "runbook_url") },
		"alert":       func(g []group) { g[0].Rules[0].Alert += "X" },
		"rules":       func(g []group) { g[0].Rules = g[0].Rules[1:] },
		"name":        func(g []group) { g[0].Name = "other" },
	} {
		g := fresh()
		mutate(g)
		if d := ruleDiff(base.Groups, g); len(d) == 0 || !strings.Contains(strings.Join(d, "\n"), name) {
			t.Errorf("a changed %s: diff %q", name, d)
		}
	}
	if d := ruleDiff(base.Groups, fresh()); len(d) != 0 {
		t.Errorf("identical rules: diff %q", d)
	}
}

// --- the ServiceMonitors --------------------------------------------------------

// TestObjects: each kustomization holds exactly its objects, all of the
// operator's group and version, namespaced by the kustomization alone.
func TestObjects(t *testing.T) {
	for dir, want := range map[string][]string{
		".":           {"PrometheusRule/reconciler", "ServiceMonitor/reconciler-serve"},
		"pushgateway": {"ServiceMonitor/reconciler-pushgateway"},
	} {
		objs := build(t, dir)
		if got := names(objs); !slices.Equal(got, want) {
			t.Errorf("%s: objects %v, want %v", dir, got, want)
		}
		for _, o := range objs {
			var m struct {
				APIVersion string `json:"apiVersion"`
			}
			if err := json.Unmarshal(o.json, &m); err != nil {
				t.Fatal(err)
			}
			if m.APIVersion != monitoring {
				t.Errorf("%s: apiVersion %q, want %q", o, m.APIVersion, monitoring)
			}
			if o.labels["app.kubernetes.io/name"] != "reconciler" {
				t.Errorf("%s: labels %v, want app.kubernetes.io/name: reconciler", o, o.labels)
			}
			if _, ok := o.labels["release"]; ok {
				t.Errorf("%s: has a release label: it is install-specific, set it in an overlay", o)
			}
		}
	}
	// No file sets metadata.namespace itself.
	files, _ := filepath.Glob("*.yaml")
	more, _ := filepath.Glob("pushgateway/*.yaml")
	for _, f := range append(files, more...) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if regexp.MustCompile(`(?m)^  namespace:`).Match(b) {
			t.Errorf("%s sets metadata.namespace; the kustomization does", f)
		}
	}
}

// TestServeServiceMonitor: the ServiceMonitor selects serve's Service as the
// serve kustomization builds it (its labels, its namespace) and scrapes a
// port name the Service has, at /metrics.
func TestServeServiceMonitor(t *testing.T) {
	mine := build(t, ".")
	sm := decode[serviceMonitor](t, only(t, mine, "ServiceMonitor", "reconciler-serve"))
	serve := build(t, serveDir)
	so := only(t, serve, "Service", serveSvc)
	svc := decode[corev1.Service](t, so)

	if sm.Spec.NamespaceSelector != nil {
		t.Errorf("namespaceSelector %+v: want none (the Service is in the ServiceMonitor's own namespace)", *sm.Spec.NamespaceSelector)
	}
	if ns := only(t, mine, "ServiceMonitor", "reconciler-serve").namespace; ns != so.namespace || ns == "" {
		t.Errorf("ServiceMonitor namespace %q, serve's Service %q: want the same", ns, so.namespace)
	}
	if len(sm.Spec.Selector.MatchLabels) == 0 {
		t.Fatal("selector.matchLabels is empty: it would select every Service")
	}
	if !matches(sm.Spec.Selector.MatchLabels, so.labels) {
		t.Errorf("selector %v does not match serve's Service labels %v", sm.Spec.Selector.MatchLabels, so.labels)
	}
	// It must select no other Service of serve's kustomization.
	for _, o := range serve {
		if o.kind == "Service" && o.name != serveSvc && matches(sm.Spec.Selector.MatchLabels, o.labels) {
			t.Errorf("selector %v also matches %s", sm.Spec.Selector.MatchLabels, o)
		}
	}
	ports := map[string]bool{}
	for _, p := range svc.Spec.Ports {
		ports[p.Name] = true
	}
	if len(sm.Spec.Endpoints) != 1 {
		t.Fatalf("endpoints %+v: want one", sm.Spec.Endpoints)
	}
	ep := sm.Spec.Endpoints[0]
	if !ports[ep.Port] {
		t.Errorf("endpoint port %q: serve's Service has ports %v", ep.Port, slices.Sorted(maps.Keys(ports)))
	}
	if ep.Path != "/metrics" || ep.Interval == "" || ep.HonorLabels {
		t.Errorf("endpoint %+v: want path /metrics, an interval, honorLabels off (serve's series carry no job or instance of their own)", ep)
	}
}

// matches reports whether a matchLabels selector selects labels.
func matches(selector, labels map[string]string) bool {
	for k, v := range selector {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

func TestMatches(t *testing.T) {
	sel := map[string]string{"a": "1", "b": "2"}
	for _, c := range []struct {
		labels map[string]string
		want   bool
	}{
		{map[string]string{"a": "1", "b": "2", "c": "3"}, true},
		{map[string]string{"a": "1"}, false},
		{map[string]string{"a": "1", "b": "3"}, false},
		{nil, false},
	} {
		if got := matches(sel, c.labels); got != c.want {
			t.Errorf("matches(%v, %v) = %v, want %v", sel, c.labels, got, c.want)
		}
	}
}

// TestPushgatewayServiceMonitor: honorLabels, so the pushed job and instance
// survive; one endpoint at /metrics; an explicit namespace for the gateway.
func TestPushgatewayServiceMonitor(t *testing.T) {
	o := only(t, build(t, "pushgateway"), "ServiceMonitor", "reconciler-pushgateway")
	sm := decode[serviceMonitor](t, o)
	if len(sm.Spec.Endpoints) != 1 {
		t.Fatalf("endpoints %+v: want one", sm.Spec.Endpoints)
	}
	if ep := sm.Spec.Endpoints[0]; !ep.HonorLabels || ep.Path != "/metrics" || ep.Port == "" || ep.Interval == "" {
		t.Errorf("endpoint %+v: want honorLabels: true, path /metrics, a port and an interval", ep)
	}
	if ns := sm.Spec.NamespaceSelector; ns == nil || !slices.Equal(ns.MatchNames, []string{o.namespace}) {
		t.Errorf("namespaceSelector %+v: want matchNames [%s], the kustomization's namespace", ns, o.namespace)
	}
	if len(sm.Spec.Selector.MatchLabels) == 0 {
		t.Error("selector.matchLabels is empty: it would select every Service")
	}
}

// TestStrictDecodeRejectsTypos guards the guard.
func TestStrictDecodeRejectsTypos(t *testing.T) {
	doc := []byte("apiVersion: monitoring.coreos.com/v1\nkind: ServiceMonitor\nmetadata:\n  name: x\nspec:\n  endpoints:\n    - port: http\n      honourLabels: true\n")
	if err := strictJSON(doc, &serviceMonitor{}); err == nil || !strings.Contains(err.Error(), "honourLabels") {
		t.Fatalf("strict decode of a misspelt field: err = %v, want an unknown-field error", err)
	}
}

// --- kustomize ---------------------------------------------------------------

// kubectlKustomize builds dir with kubectl kustomize, or skips.
func kubectlKustomize(t *testing.T, dir string) []object {
	t.Helper()
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Skip("kubectl not installed; the tests above build the kustomizations by reading them")
	}
	out, err := exec.Command(kubectl, "kustomize", dir).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl kustomize %s: %v\n%s", dir, err, out)
	}
	var objs []object
	for _, d := range docSep.Split(string(out), -1) {
		var m map[string]any
		if err := yaml.Unmarshal([]byte(d), &m); err != nil {
			t.Fatalf("kubectl kustomize %s: %v", dir, err)
		}
		if m == nil {
			continue
		}
		j := mustJSON(t, m)
		var meta struct {
			Kind     string     `json:"kind"`
			Metadata objectMeta `json:"metadata"`
		}
		if err := json.Unmarshal(j, &meta); err != nil {
			t.Fatal(err)
		}
		objs = append(objs, object{file: "kustomize " + dir, kind: meta.Kind, name: meta.Metadata.Name,
			namespace: meta.Metadata.Namespace, labels: meta.Metadata.Labels, json: j})
	}
	return objs
}

// TestKustomizeBuild: kubectl kustomize builds both directories, and to
// what build (the reader the other tests use) makes of them.
func TestKustomizeBuild(t *testing.T) {
	for _, dir := range []string{".", "pushgateway"} {
		got := kubectlKustomize(t, dir)
		want := build(t, dir)
		if !slices.Equal(names(got), names(want)) {
			t.Errorf("%s: kustomize built %v, the reader %v", dir, names(got), names(want))
			continue
		}
		for _, w := range want {
			g := only(t, got, w.kind, w.name)
			var gm, wm any
			if err := json.Unmarshal(g.json, &gm); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(w.json, &wm); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(gm, wm) {
				t.Errorf("%s %s/%s: kustomize\n%s\nthe reader\n%s", dir, w.kind, w.name, g.json, w.json)
			}
		}
	}
}

// TestReleaseOverlay: the overlay docs/operations.md shows adds release: to
// every object of both kustomizations and changes nothing else.
func TestReleaseOverlay(t *testing.T) {
	md, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(md), releasePatch) {
		t.Errorf("docs/operations.md does not show the release patch this test builds:\n%s", releasePatch)
	}
	for _, dir := range []string{".", "pushgateway"} {
		plain := kubectlKustomize(t, dir)
		abs, err := filepath.Abs(dir)
		if err != nil {
			t.Fatal(err)
		}
		overlay := t.TempDir()
		rel, err := filepath.Rel(overlay, abs)
		if err != nil {
			t.Fatal(err)
		}
		k := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - " + filepath.ToSlash(rel) + "\n" + releasePatch
		if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(k), 0o644); err != nil {
			t.Fatal(err)
		}
		patched := kubectlKustomize(t, overlay)
		if !slices.Equal(names(plain), names(patched)) {
			t.Fatalf("%s: overlay built %v, want %v", dir, names(patched), names(plain))
		}
		for _, p := range plain {
			o := only(t, patched, p.kind, p.name)
			want := maps.Clone(p.labels)
			want["release"] = "kube-prometheus-stack"
			if !maps.Equal(o.labels, want) {
				t.Errorf("%s %s/%s: labels %v, want %v", dir, p.kind, p.name, o.labels, want)
			}
		}
	}
}
