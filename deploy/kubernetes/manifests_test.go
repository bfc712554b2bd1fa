package kubernetes_test

// The manifests are decoded strictly into the Kubernetes API types, so a
// misspelt or misplaced field fails here rather than being silently dropped
// by the API server (or by kubectl's client-side apply).

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/reconciler/reconciler/config"
)

const (
	// The Secret the manifests read but do not define: created from a secret
	// manager; secret.example.yaml documents its keys.
	documentedSecret = "reconciler"
	exampleSecret    = "secret.example.yaml"
	configPath       = "/etc/reconciler/config.yaml"
	uid              = int64(65532)
	// run.shutdown_grace: the pod's grace period must exceed it.
	shutdownGraceSeconds = 25
)

// object is one decoded YAML document.
type object struct {
	file string // relative to deploy/kubernetes
	kind string
	name string
	obj  any // *corev1.ConfigMap, *batchv1.CronJob, ...
}

func (o object) String() string { return fmt.Sprintf("%s %s/%s", o.file, o.kind, o.name) }

// kinds maps each kind the manifests may contain to its apiVersion and a
// constructor of the typed object; an unknown kind fails.
var kinds = map[string]struct {
	apiVersion string
	new        func() any
}{
	"ConfigMap":      {"v1", func() any { return &corev1.ConfigMap{} }},
	"Secret":         {"v1", func() any { return &corev1.Secret{} }},
	"Service":        {"v1", func() any { return &corev1.Service{} }},
	"ServiceAccount": {"v1", func() any { return &corev1.ServiceAccount{} }},
	"Job":            {"batch/v1", func() any { return &batchv1.Job{} }},
	"CronJob":        {"batch/v1", func() any { return &batchv1.CronJob{} }},
	"Deployment":     {"apps/v1", func() any { return &appsv1.Deployment{} }},
}

// kustomization is the subset of kustomize's Kustomization these files use,
// decoded strictly too.
type kustomization struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Namespace  string `json:"namespace,omitempty"`
	Labels     []struct {
		Pairs            map[string]string `json:"pairs"`
		IncludeSelectors bool              `json:"includeSelectors,omitempty"`
		IncludeTemplates bool              `json:"includeTemplates,omitempty"`
	} `json:"labels,omitempty"`
	Resources []string `json:"resources,omitempty"`
	Images    []image  `json:"images,omitempty"`
}

type image struct {
	Name    string `json:"name"`
	NewName string `json:"newName,omitempty"`
	NewTag  string `json:"newTag,omitempty"`
	Digest  string `json:"digest,omitempty"`
}

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

var docSep = regexp.MustCompile(`(?m)^---[ \t]*$`)

// splitDocs returns the non-empty YAML documents of a file.
func splitDocs(b []byte) [][]byte {
	var docs [][]byte
	for _, d := range docSep.Split(string(b), -1) {
		empty := true
		for _, l := range strings.Split(d, "\n") {
			if t := strings.TrimSpace(l); t != "" && !strings.HasPrefix(t, "#") {
				empty = false
				break
			}
		}
		if !empty {
			docs = append(docs, []byte(d))
		}
	}
	return docs
}

// yamlFiles lists every .yaml/.yml file under deploy/kubernetes, relative.
func yamlFiles(t *testing.T) (manifests, kustomizations []string) {
	t.Helper()
	err := filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		ext := filepath.Ext(p)
		if ext != ".yaml" && ext != ".yml" {
			return nil
		}
		if filepath.Base(p) == "kustomization.yaml" || filepath.Base(p) == "kustomization.yml" {
			kustomizations = append(kustomizations, p)
		} else {
			manifests = append(manifests, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(manifests)
	sort.Strings(kustomizations)
	if len(manifests) == 0 || len(kustomizations) == 0 {
		t.Fatalf("no manifests (%v) or kustomizations (%v) found", manifests, kustomizations)
	}
	return manifests, kustomizations
}

// loadObjects decodes every document of every manifest file strictly.
func loadObjects(t *testing.T) []object {
	t.Helper()
	manifests, _ := yamlFiles(t)
	var objs []object
	for _, f := range manifests {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		docs := splitDocs(b)
		if len(docs) == 0 {
			t.Errorf("%s: no YAML document", f)
		}
		for i, doc := range docs {
			var meta struct {
				APIVersion string `json:"apiVersion"`
				Kind       string `json:"kind"`
				Metadata   struct {
					Name      string `json:"name"`
					Namespace string `json:"namespace"`
				} `json:"metadata"`
			}
			if err := yaml.Unmarshal(doc, &meta); err != nil {
				t.Errorf("%s document %d: not YAML: %v", f, i, err)
				continue
			}
			k, ok := kinds[meta.Kind]
			if !ok {
				t.Errorf("%s document %d: unknown kind %q (add it to the test's kinds)", f, i, meta.Kind)
				continue
			}
			if meta.APIVersion != k.apiVersion {
				t.Errorf("%s %s: apiVersion %q, want %q", f, meta.Kind, meta.APIVersion, k.apiVersion)
			}
			if meta.Metadata.Name == "" {
				t.Errorf("%s document %d: %s without metadata.name", f, i, meta.Kind)
			}
			if meta.Metadata.Namespace != "" {
				t.Errorf("%s %s/%s: has metadata.namespace %q; keep resources namespace-agnostic (kustomization sets it)", f, meta.Kind, meta.Metadata.Name, meta.Metadata.Namespace)
			}
			obj := k.new()
			if err := strictJSON(doc, obj); err != nil {
				t.Errorf("%s %s/%s: strict decode: %v", f, meta.Kind, meta.Metadata.Name, err)
				continue
			}
			objs = append(objs, object{file: filepath.ToSlash(f), kind: meta.Kind, name: meta.Metadata.Name, obj: obj})
		}
	}
	seen := map[string]string{}
	for _, o := range objs {
		key := o.kind + "/" + o.name
		if prev, dup := seen[key]; dup {
			t.Errorf("%s defined twice: %s and %s", key, prev, o.file)
		}
		seen[key] = o.file
	}
	return objs
}

func find[T any](objs []object, kind, name string) (T, bool) {
	var zero T
	for _, o := range objs {
		if o.kind == kind && o.name == name {
			if v, ok := o.obj.(T); ok {
				return v, true
			}
		}
	}
	return zero, false
}

// deployed returns the objects a kustomization applies (everything except
// the example Secret).
func deployed(objs []object) []object {
	var out []object
	for _, o := range objs {
		if filepath.Base(o.file) != exampleSecret {
			out = append(out, o)
		}
	}
	return out
}

// TestManifestsDecodeStrictly: every document of every manifest decodes
// into the type named by its kind with no unknown field.
func TestManifestsDecodeStrictly(t *testing.T) {
	objs := loadObjects(t)
	var got []string
	for _, o := range objs {
		got = append(got, o.kind+"/"+o.name)
	}
	sort.Strings(got)
	want := []string{
		"ConfigMap/reconciler-config",
		"CronJob/reconciler",
		"CronJob/reconciler-sharded",
		"Deployment/reconciler-serve",
		"Job/reconciler-migrate",
		"Secret/reconciler",
		"Service/reconciler-serve",
		"ServiceAccount/reconciler",
	}
	if !slices.Equal(got, want) {
		t.Errorf("objects:\n got %v\nwant %v", got, want)
	}
}

// TestStrictDecodeRejectsTypos guards the guard: the decoder used above
// rejects a misspelt field.
func TestStrictDecodeRejectsTypos(t *testing.T) {
	doc := []byte("apiVersion: batch/v1\nkind: CronJob\nmetadata:\n  name: x\nspec:\n  concurencyPolicy: Forbid\n")
	if err := strictJSON(doc, &batchv1.CronJob{}); err == nil || !strings.Contains(err.Error(), "concurencyPolicy") {
		t.Fatalf("strict decode of a misspelt field: err = %v, want an unknown-field error", err)
	}
}

// TestKustomizations: every kustomization decodes strictly, every resource
// it lists exists, every manifest (but the example Secret) is listed by
// some kustomization, and the base and serve agree on namespace, labels and
// images.
func TestKustomizations(t *testing.T) {
	manifests, kfiles := yamlFiles(t)
	listed := map[string]string{} // manifest file -> kustomization listing it
	byDir := map[string]kustomization{}
	for _, kf := range kfiles {
		b, err := os.ReadFile(kf)
		if err != nil {
			t.Fatal(err)
		}
		var k kustomization
		if err := strictJSON(b, &k); err != nil {
			t.Errorf("%s: strict decode: %v", kf, err)
			continue
		}
		if k.APIVersion != "kustomize.config.k8s.io/v1beta1" || k.Kind != "Kustomization" {
			t.Errorf("%s: apiVersion/kind %s/%s", kf, k.APIVersion, k.Kind)
		}
		dir := filepath.Dir(kf)
		byDir[filepath.ToSlash(dir)] = k
		if len(k.Resources) == 0 {
			t.Errorf("%s: no resources", kf)
		}
		for _, r := range k.Resources {
			p := filepath.Join(dir, r)
			st, err := os.Stat(p)
			if err != nil {
				t.Errorf("%s: resource %q: %v", kf, r, err)
				continue
			}
			if st.IsDir() {
				if _, err := os.Stat(filepath.Join(p, "kustomization.yaml")); err != nil {
					t.Errorf("%s: resource directory %q has no kustomization.yaml", kf, r)
				}
				continue
			}
			if filepath.Base(p) == exampleSecret {
				t.Errorf("%s: lists %s: the real Secret comes from a secret manager", kf, exampleSecret)
			}
			listed[filepath.Clean(p)] = kf
		}
	}
	for _, m := range manifests {
		if filepath.Base(m) == exampleSecret {
			continue
		}
		if _, ok := listed[filepath.Clean(m)]; !ok {
			t.Errorf("%s is listed in no kustomization.yaml", m)
		}
	}

	base, ok1 := byDir["."]
	serve, ok2 := byDir["serve"]
	sharded, ok3 := byDir["sharded"]
	if !ok1 || !ok2 || !ok3 {
		t.Fatalf("want kustomization.yaml in ., serve/ and sharded/, have %v", kfiles)
	}
	// sharded/ is another alternative to the base: it must agree with it
	// and never include the base CronJob.
	shl, _ := json.Marshal(sharded.Labels)
	shi, _ := json.Marshal(sharded.Images)
	if sharded.Namespace != base.Namespace || !bytes.Equal(shl, mustJSON(base.Labels)) || !bytes.Equal(shi, mustJSON(base.Images)) {
		t.Errorf("sharded: namespace %q labels %s images %s; want the base's", sharded.Namespace, shl, shi)
	}
	if !slices.Contains(sharded.Resources, "../common") {
		t.Errorf("sharded resources %v: want ../common (the same ConfigMap)", sharded.Resources)
	}
	for _, r := range sharded.Resources {
		if r == ".." || r == "../cronjob.yaml" || r == "../serve" {
			t.Errorf("sharded lists %q: sharded is an alternative to the CronJob and serve, never both", r)
		}
	}
	if base.Namespace != "payments" || serve.Namespace != base.Namespace {
		t.Errorf("namespace: base %q, serve %q; want payments in both", base.Namespace, serve.Namespace)
	}
	bl, _ := json.Marshal(base.Labels)
	sl, _ := json.Marshal(serve.Labels)
	if !bytes.Equal(bl, sl) || !strings.Contains(string(bl), `"app.kubernetes.io/name":"reconciler"`) {
		t.Errorf("labels: base %s, serve %s; want equal, with app.kubernetes.io/name: reconciler", bl, sl)
	}
	bi, _ := json.Marshal(base.Images)
	si, _ := json.Marshal(serve.Images)
	if !bytes.Equal(bi, si) {
		t.Errorf("images: base %s, serve %s; want equal", bi, si)
	}
	if !slices.Contains(base.Resources, "cronjob.yaml") || !slices.Contains(base.Resources, "common") {
		t.Errorf("base resources %v: want common and cronjob.yaml", base.Resources)
	}
	if !slices.Contains(serve.Resources, "../common") {
		t.Errorf("serve resources %v: want ../common (the same ConfigMap)", serve.Resources)
	}
	for _, r := range serve.Resources {
		if r == ".." || r == "../cronjob.yaml" {
			t.Errorf("serve lists %q: serve is the alternative to the CronJob, never both", r)
		}
	}
	// Every container image is the name the kustomizations rewrite.
	for _, o := range deployed(loadObjects(t)) {
		for _, c := range podSpecOf(o).containers() {
			if !slices.ContainsFunc(base.Images, func(i image) bool { return i.Name == c.Image }) {
				t.Errorf("%s container %s: image %q is not rewritten by the kustomization images", o, c.Name, c.Image)
			}
		}
	}
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// TestKustomizeBuild runs `kubectl kustomize` on both entry points when
// kubectl is installed.
func TestKustomizeBuild(t *testing.T) {
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Skip("kubectl not installed")
	}
	for _, dir := range []string{".", "serve", "sharded"} {
		out, err := exec.Command(kubectl, "kustomize", dir).CombinedOutput()
		if err != nil {
			t.Errorf("kubectl kustomize %s: %v\n%s", dir, err, out)
			continue
		}
		s := string(out)
		hasCron := strings.Contains(s, "\nkind: CronJob\n")
		hasServe := strings.Contains(s, "\nkind: Deployment\n")
		if dir == "." && (!hasCron || hasServe) {
			t.Errorf("base: CronJob %v, Deployment %v; want only the CronJob", hasCron, hasServe)
		}
		if dir == "serve" && (hasCron || !hasServe) {
			t.Errorf("serve: CronJob %v, Deployment %v; want only the Deployment", hasCron, hasServe)
		}
		if dir == "sharded" && (!hasCron || hasServe || !strings.Contains(s, "name: reconciler-sharded\n") || strings.Count(s, "\nkind: CronJob\n") != 1) {
			t.Errorf("sharded: want only the CronJob reconciler-sharded, got:\n%s", s)
		}
		for _, want := range []string{"namespace: payments", "kind: ConfigMap", "name: reconciler-migrate", "app.kubernetes.io/name: reconciler"} {
			if !strings.Contains(s, want) {
				t.Errorf("kubectl kustomize %s: output lacks %q", dir, want)
			}
		}
	}
}

// TestConfigMap: config.yaml is valid YAML, turns auto_migrate off, logs
// JSON, carries the serve schedule, and loads with the project's loader.
func TestConfigMap(t *testing.T) {
	objs := loadObjects(t)
	cm, ok := find[*corev1.ConfigMap](objs, "ConfigMap", "reconciler-config")
	if !ok {
		t.Fatal("ConfigMap reconciler-config not found")
	}
	text, ok := cm.Data["config.yaml"]
	if !ok {
		t.Fatal("ConfigMap reconciler-config has no config.yaml key")
	}
	var doc struct {
		Database struct {
			AutoMigrate *bool  `json:"auto_migrate"`
			URL         string `json:"url"`
		} `json:"database"`
		Log struct {
			Format string `json:"format"`
		} `json:"log"`
		Serve struct {
			Schedule string `json:"schedule"`
		} `json:"serve"`
	}
	if err := yaml.Unmarshal([]byte(text), &doc); err != nil {
		t.Fatalf("config.yaml is not valid YAML: %v", err)
	}
	if !strings.Contains(text, "auto_migrate: false") || doc.Database.AutoMigrate == nil || *doc.Database.AutoMigrate {
		t.Errorf("config.yaml: want database.auto_migrate: false (the migrate Job owns the schema)")
	}
	if doc.Log.Format != "json" {
		t.Errorf("config.yaml: log.format %q, want json", doc.Log.Format)
	}
	if doc.Database.URL != "${DATABASE_URL}" {
		t.Errorf("config.yaml: database.url %q, want ${DATABASE_URL} (no secret in a ConfigMap)", doc.Database.URL)
	}
	if doc.Serve.Schedule == "" {
		t.Errorf("config.yaml: serve.schedule is empty")
	}

	// The project's loader, exactly as the pod runs it.
	env := map[string]string{
		"RECONCILER_CONFIG": configPath,
		"DATABASE_URL":      "postgres://reconciler@db.internal:5432/payments",
		"STRIPE_API_KEY":    "sk_test_x",
	}
	getenv := func(k string) string { return env[k] }
	readFile := func(p string) ([]byte, error) {
		if p == configPath {
			return []byte(text), nil
		}
		return nil, fs.ErrNotExist
	}
	path, explicit := config.Path("", getenv)
	if path != configPath || !explicit {
		t.Errorf("config.Path with RECONCILER_CONFIG: %q %v", path, explicit)
	}
	cfg, err := config.Load(configPath, true, getenv, readFile)
	if err != nil {
		t.Fatalf("config.Load of the ConfigMap's config.yaml: %v", err)
	}
	if err := cfg.Validate(); err != nil {
		t.Errorf("config.Validate: %v", err)
	}
	if cfg.Database.AutoMigrate {
		t.Errorf("loaded config: AutoMigrate is on")
	}
	if cfg.Log.Format != "json" {
		t.Errorf("loaded config: log format %q", cfg.Log.Format)
	}
	if g := cfg.Run.ShutdownGrace.D().Seconds(); g != shutdownGraceSeconds {
		t.Errorf("run.shutdown_grace %vs: the test's grace check assumes %ds", g, shutdownGraceSeconds)
	}
}

// TestConfigMapMatchesRepositoryConfig: the ConfigMap's config.yaml is the
// repository's config.yaml with only the Kubernetes values changed, so a key
// added to one is added to the other.
func TestConfigMapMatchesRepositoryConfig(t *testing.T) {
	cm, ok := find[*corev1.ConfigMap](loadObjects(t), "ConfigMap", "reconciler-config")
	if !ok {
		t.Fatal("ConfigMap reconciler-config not found")
	}
	repo, err := os.ReadFile(filepath.Join("..", "..", "config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	want, got := flatten(t, repo), flatten(t, []byte(cm.Data["config.yaml"]))
	// The values the Kubernetes deployment changes on purpose.
	overrides := map[string]string{
		"database.auto_migrate": "false",
		"log.format":            `"json"`,
		"serve.schedule":        `"CRON_TZ=Europe/London 30 2 * * *"`,
		"serve.time_zone":       `"Europe/London"`,
		// In a pod DATABASE_URL must be set: an unset variable is a
		// configuration error there, where the repository's config.yaml
		// falls back to the embedded store on a laptop (${DATABASE_URL:-}).
		"database.url": `"${DATABASE_URL}"`,
	}
	for k, v := range overrides {
		if _, ok := want[k]; ok {
			want[k] = v
		}
		if _, ok := got[k]; ok && got[k] != v {
			t.Errorf("ConfigMap config.yaml %s = %s, want %s", k, got[k], v)
		}
	}
	// Added by the ConfigMap when the repository's config.yaml lacks them.
	for _, k := range []string{"serve.schedule", "metrics.pushgateway_url"} {
		if _, ok := want[k]; !ok {
			t.Logf("repository config.yaml has no %s", k)
			want[k] = got[k]
		}
	}
	keys := map[string]bool{}
	for k := range want {
		keys[k] = true
	}
	for k := range got {
		keys[k] = true
	}
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		w, inRepo := want[k]
		g, inCM := got[k]
		switch {
		case !inCM:
			t.Errorf("config.yaml has %s = %s, the ConfigMap does not: copy it", k, w)
		case !inRepo:
			t.Errorf("the ConfigMap has %s = %s, config.yaml does not", k, g)
		case w != g:
			t.Errorf("%s: ConfigMap %s, config.yaml %s: only %v may differ", k, g, w, slices.Sorted(maps.Keys(overrides)))
		}
	}
}

// flatten maps each leaf of a YAML document to its JSON value.
func flatten(t *testing.T, b []byte) map[string]string {
	t.Helper()
	var doc map[string]any
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatalf("not YAML: %v", err)
	}
	out := map[string]string{}
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		if m, ok := v.(map[string]any); ok && len(m) > 0 {
			for k, c := range m {
				walk(strings.TrimPrefix(prefix+"."+k, "."), c)
			}
			return
		}
		j, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		out[prefix] = string(j)
	}
	walk("", doc)
	return out
}

// unknownOnly reports whether msg is a yaml.v3 strict-decoding error whose

// podSpec is a pod template found in a workload.
type podSpec struct{ spec *corev1.PodSpec }

func (p podSpec) containers() []corev1.Container {
	if p.spec == nil {
		return nil
	}
	return append(slices.Clone(p.spec.InitContainers), p.spec.Containers...)
}

func podSpecOf(o object) podSpec {
	switch v := o.obj.(type) {
	case *batchv1.CronJob:
		return podSpec{&v.Spec.JobTemplate.Spec.Template.Spec}
	case *batchv1.Job:
		return podSpec{&v.Spec.Template.Spec}
	case *appsv1.Deployment:
		return podSpec{&v.Spec.Template.Spec}
	}
	return podSpec{}
}

// TestPodSecurityAndResources: every workload's pod and container settings.
func TestPodSecurityAndResources(t *testing.T) {
	objs := deployed(loadObjects(t))
	n := 0
	for _, o := range objs {
		ps := podSpecOf(o)
		if ps.spec == nil {
			continue
		}
		n++
		s := ps.spec
		if s.TerminationGracePeriodSeconds == nil || *s.TerminationGracePeriodSeconds <= shutdownGraceSeconds {
			t.Errorf("%s: terminationGracePeriodSeconds must exceed run.shutdown_grace (%ds)", o, shutdownGraceSeconds)
		}
		if s.AutomountServiceAccountToken == nil || *s.AutomountServiceAccountToken {
			t.Errorf("%s: want automountServiceAccountToken: false", o)
		}
		if s.ServiceAccountName != "reconciler" {
			t.Errorf("%s: serviceAccountName %q, want reconciler", o, s.ServiceAccountName)
		}
		if o.kind != "Deployment" && s.RestartPolicy != corev1.RestartPolicyNever {
			t.Errorf("%s: restartPolicy %q, want Never", o, s.RestartPolicy)
		}
		sc := s.SecurityContext
		switch {
		case sc == nil:
			t.Errorf("%s: no pod securityContext", o)
		default:
			if sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
				t.Errorf("%s: want runAsNonRoot: true", o)
			}
			if sc.RunAsUser == nil || *sc.RunAsUser != uid || sc.RunAsGroup == nil || *sc.RunAsGroup != uid {
				t.Errorf("%s: want runAsUser and runAsGroup %d", o, uid)
			}
			if sc.FSGroup == nil {
				t.Errorf("%s: want fsGroup", o)
			}
			if sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
				t.Errorf("%s: want seccompProfile RuntimeDefault", o)
			}
		}
		if len(s.Containers) == 0 {
			t.Errorf("%s: no containers", o)
		}
		volumes := map[string]corev1.Volume{}
		for _, v := range s.Volumes {
			volumes[v.Name] = v
		}
		for _, c := range ps.containers() {
			where := fmt.Sprintf("%s container %s", o, c.Name)
			csc := c.SecurityContext
			if csc == nil {
				t.Errorf("%s: no securityContext", where)
			} else {
				if csc.AllowPrivilegeEscalation == nil || *csc.AllowPrivilegeEscalation {
					t.Errorf("%s: want allowPrivilegeEscalation: false", where)
				}
				if csc.ReadOnlyRootFilesystem == nil || !*csc.ReadOnlyRootFilesystem {
					t.Errorf("%s: want readOnlyRootFilesystem: true", where)
				}
				if csc.Privileged != nil && *csc.Privileged {
					t.Errorf("%s: privileged", where)
				}
				if csc.Capabilities == nil || !slices.Equal(csc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(csc.Capabilities.Add) != 0 {
					t.Errorf("%s: want capabilities drop [ALL], add none", where)
				}
			}
			for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
				req, okReq := c.Resources.Requests[r]
				lim, okLim := c.Resources.Limits[r]
				if !okReq || !okLim {
					t.Errorf("%s: want requests and limits for %s", where, r)
					continue
				}
				if req.Cmp(lim) > 0 {
					t.Errorf("%s: %s request %s above limit %s", where, r, req.String(), lim.String())
				}
			}
			// Mounts: /tmp is an emptyDir (read-only root), the config is
			// mounted where RECONCILER_CONFIG points.
			mounts := map[string]corev1.VolumeMount{}
			for _, m := range c.VolumeMounts {
				if _, ok := volumes[m.Name]; !ok {
					t.Errorf("%s: mount %q names no volume of the pod", where, m.Name)
				}
				mounts[m.MountPath] = m
			}
			if m, ok := mounts["/tmp"]; !ok || volumes[m.Name].EmptyDir == nil {
				t.Errorf("%s: want an emptyDir mounted at /tmp", where)
			}
			envs := map[string]corev1.EnvVar{}
			for _, e := range c.Env {
				if _, dup := envs[e.Name]; dup {
					t.Errorf("%s: env %s twice", where, e.Name)
				}
				envs[e.Name] = e
			}
			if envs["RECONCILER_CONFIG"].Value != configPath {
				t.Errorf("%s: RECONCILER_CONFIG %q, want %s", where, envs["RECONCILER_CONFIG"].Value, configPath)
			}
			m, ok := mounts[filepath.Dir(configPath)]
			if !ok || volumes[m.Name].ConfigMap == nil || volumes[m.Name].ConfigMap.Name != "reconciler-config" {
				t.Errorf("%s: want ConfigMap reconciler-config mounted at %s", where, filepath.Dir(configPath))
			}
			if ref := envs["DATABASE_URL"].ValueFrom; ref == nil || ref.SecretKeyRef == nil || ref.SecretKeyRef.Key != "database-url" {
				t.Errorf("%s: want DATABASE_URL from the Secret key database-url", where)
			}
		}
	}
	if n != 4 {
		t.Errorf("found %d workloads, want 4 (CronJob, sharded CronJob, migrate Job, serve Deployment)", n)
	}
}

// TestReferences: every Secret, ConfigMap, ServiceAccount and key a pod
// names exists in the manifests, or is the documented Secret `reconciler`
// with a key secret.example.yaml documents.
func TestReferences(t *testing.T) {
	all := loadObjects(t)
	objs := deployed(all)
	example, ok := find[*corev1.Secret](all, "Secret", documentedSecret)
	if !ok {
		t.Fatalf("%s does not define Secret %s", exampleSecret, documentedSecret)
	}
	for _, o := range objs {
		if o.kind == "Secret" {
			t.Errorf("%s: Secrets come from a secret manager, not the manifests", o)
		}
	}
	secretHas := func(name, key string) error {
		if name != documentedSecret {
			return fmt.Errorf("Secret %q is neither defined nor the documented %q", name, documentedSecret)
		}
		if _, ok := example.StringData[key]; !ok {
			if _, ok := example.Data[key]; !ok {
				return fmt.Errorf("Secret %s key %q is not documented in %s", name, key, exampleSecret)
			}
		}
		return nil
	}
	configMapHas := func(name, key string) error {
		cm, ok := find[*corev1.ConfigMap](objs, "ConfigMap", name)
		if !ok {
			return fmt.Errorf("ConfigMap %q is not defined", name)
		}
		if key == "" {
			return nil
		}
		if _, ok := cm.Data[key]; !ok {
			return fmt.Errorf("ConfigMap %s has no key %q", name, key)
		}
		return nil
	}
	for _, o := range objs {
		ps := podSpecOf(o)
		if ps.spec == nil {
			continue
		}
		if _, ok := find[*corev1.ServiceAccount](objs, "ServiceAccount", ps.spec.ServiceAccountName); !ok {
			t.Errorf("%s: ServiceAccount %q is not defined", o, ps.spec.ServiceAccountName)
		}
		for _, v := range ps.spec.Volumes {
			switch {
			case v.ConfigMap != nil:
				if err := configMapHas(v.ConfigMap.Name, ""); err != nil {
					t.Errorf("%s volume %s: %v", o, v.Name, err)
				}
				for _, it := range v.ConfigMap.Items {
					if err := configMapHas(v.ConfigMap.Name, it.Key); err != nil {
						t.Errorf("%s volume %s: %v", o, v.Name, err)
					}
				}
			case v.Secret != nil:
				if err := secretHas(v.Secret.SecretName, ""); err != nil && v.Secret.SecretName != documentedSecret {
					t.Errorf("%s volume %s: %v", o, v.Name, err)
				}
				for _, it := range v.Secret.Items {
					if err := secretHas(v.Secret.SecretName, it.Key); err != nil {
						t.Errorf("%s volume %s: %v", o, v.Name, err)
					}
				}
			case v.EmptyDir != nil:
			default:
				t.Errorf("%s volume %s: only configMap, secret and emptyDir volumes are expected", o, v.Name)
			}
		}
		for _, c := range ps.containers() {
			for _, e := range c.Env {
				if e.ValueFrom == nil {
					continue
				}
				if r := e.ValueFrom.SecretKeyRef; r != nil {
					if err := secretHas(r.Name, r.Key); err != nil {
						t.Errorf("%s env %s: %v", o, e.Name, err)
					}
				}
				if r := e.ValueFrom.ConfigMapKeyRef; r != nil {
					if err := configMapHas(r.Name, r.Key); err != nil {
						t.Errorf("%s env %s: %v", o, e.Name, err)
					}
				}
			}
			for _, ef := range c.EnvFrom {
				if ef.SecretRef != nil {
					if err := secretHas(ef.SecretRef.Name, ""); err != nil && ef.SecretRef.Name != documentedSecret {
						t.Errorf("%s envFrom: %v", o, err)
					}
				}
				if ef.ConfigMapRef != nil {
					if err := configMapHas(ef.ConfigMapRef.Name, ""); err != nil {
						t.Errorf("%s envFrom: %v", o, err)
					}
				}
			}
		}
	}
}

// TestCronJob: the nightly schedule and the Job's failure handling.
func TestCronJob(t *testing.T) {
	cj, ok := find[*batchv1.CronJob](loadObjects(t), "CronJob", "reconciler")
	if !ok {
		t.Fatal("CronJob reconciler not found")
	}
	s := cj.Spec
	if s.ConcurrencyPolicy != batchv1.ForbidConcurrent {
		t.Errorf("concurrencyPolicy %q, want Forbid", s.ConcurrencyPolicy)
	}
	if s.Schedule != "30 2 * * *" || s.TimeZone == nil || *s.TimeZone != "Europe/London" {
		t.Errorf("schedule %q timeZone %v, want 30 2 * * * Europe/London", s.Schedule, s.TimeZone)
	}
	if s.StartingDeadlineSeconds == nil || *s.StartingDeadlineSeconds != 3600 {
		t.Errorf("want startingDeadlineSeconds 3600")
	}
	if s.SuccessfulJobsHistoryLimit == nil || *s.SuccessfulJobsHistoryLimit != 3 || s.FailedJobsHistoryLimit == nil || *s.FailedJobsHistoryLimit != 5 {
		t.Errorf("want history limits 3 successful, 5 failed")
	}
	j := s.JobTemplate.Spec
	if j.BackoffLimit == nil || *j.BackoffLimit > 3 {
		t.Errorf("backoffLimit %v: keep it small (exit 3 means another run holds the lock)", j.BackoffLimit)
	}
	if j.ActiveDeadlineSeconds == nil || *j.ActiveDeadlineSeconds != 10800 {
		t.Errorf("want activeDeadlineSeconds 10800")
	}
	if j.TTLSecondsAfterFinished == nil {
		t.Errorf("want ttlSecondsAfterFinished")
	}
	if j.Template.Spec.Hostname == "" {
		t.Errorf("want a stable pod hostname: the Pushgateway groups run metrics by it")
	}
	c := j.Template.Spec.Containers
	if len(c) != 1 || !slices.Equal(c[0].Args, []string{"run", "--trigger", "schedule"}) {
		t.Fatalf("containers %+v: want one with args run --trigger schedule", c)
	}
	env := map[string]string{}
	for _, e := range c[0].Env {
		env[e.Name] = e.Value
	}
	if env["RECONCILER_TRIGGERED_BY"] != "cronjob" {
		t.Errorf("want RECONCILER_TRIGGERED_BY=cronjob")
	}
	if _, ok := env["STRIPE_API_KEY"]; !ok {
		t.Errorf("want STRIPE_API_KEY")
	}
	// Exit 2 (configuration) and 3 (lock held) must not be retried.
	pfp := j.PodFailurePolicy
	failsJob := map[int32]bool{}
	if pfp != nil {
		for _, r := range pfp.Rules {
			if r.Action == batchv1.PodFailurePolicyActionFailJob && r.OnExitCodes != nil && r.OnExitCodes.Operator == batchv1.PodFailurePolicyOnExitCodesOpIn {
				if r.OnExitCodes.ContainerName != nil && *r.OnExitCodes.ContainerName != c[0].Name {
					t.Errorf("podFailurePolicy names container %q, the container is %q", *r.OnExitCodes.ContainerName, c[0].Name)
				}
				for _, v := range r.OnExitCodes.Values {
					failsJob[v] = true
				}
			}
		}
	}
	if !failsJob[2] || !failsJob[3] {
		t.Errorf("podFailurePolicy: want FailJob on exit codes 2 and 3, got %v", failsJob)
	}
}

// TestMigrateJob: `reconciler migrate` with the database only.
func TestMigrateJob(t *testing.T) {
	j, ok := find[*batchv1.Job](loadObjects(t), "Job", "reconciler-migrate")
	if !ok {
		t.Fatal("Job reconciler-migrate not found")
	}
	c := j.Spec.Template.Spec.Containers
	if len(c) != 1 || !slices.Equal(c[0].Args, []string{"migrate"}) {
		t.Fatalf("want one container with args [migrate], got %+v", c)
	}
	for _, e := range c[0].Env {
		if e.Name == "STRIPE_API_KEY" || strings.Contains(e.Name, "TOKEN") {
			t.Errorf("migrate needs the database only, has env %s", e.Name)
		}
	}
	if j.Spec.BackoffLimit == nil || j.Spec.ActiveDeadlineSeconds == nil {
		t.Errorf("want backoffLimit and activeDeadlineSeconds")
	}
}

// TestServe: the serve Deployment and its Service.
func TestServe(t *testing.T) {
	objs := loadObjects(t)
	d, ok := find[*appsv1.Deployment](objs, "Deployment", "reconciler-serve")
	if !ok {
		t.Fatal("Deployment reconciler-serve not found")
	}
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 1 {
		t.Errorf("want replicas 1 (one scheduler)")
	}
	if d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
		t.Errorf("strategy %q, want Recreate", d.Spec.Strategy.Type)
	}
	tl := d.Spec.Template.Labels
	if d.Spec.Selector == nil || len(d.Spec.Selector.MatchLabels) == 0 {
		t.Fatal("Deployment without selector matchLabels")
	}
	for k, v := range d.Spec.Selector.MatchLabels {
		if tl[k] != v {
			t.Errorf("selector %s=%s does not match the pod template labels %v", k, v, tl)
		}
	}
	a := d.Spec.Template.Annotations
	if a["prometheus.io/scrape"] != "true" || a["prometheus.io/port"] != "8080" || a["prometheus.io/path"] != "/metrics" {
		t.Errorf("prometheus annotations %v", a)
	}
	c := d.Spec.Template.Spec.Containers
	if len(c) != 1 || !slices.Equal(c[0].Args, []string{"serve"}) {
		t.Fatalf("want one container with args [serve], got %+v", c)
	}
	if len(c[0].Ports) != 1 || c[0].Ports[0].Name != "http" || c[0].Ports[0].ContainerPort != 8080 {
		t.Errorf("ports %+v: want http 8080", c[0].Ports)
	}
	probe := func(name string, p *corev1.Probe, path string) {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != path || p.HTTPGet.Port.String() != "http" {
			t.Errorf("%s: want httpGet %s on port http", name, path)
		}
	}
	probe("livenessProbe", c[0].LivenessProbe, "/healthz")
	probe("readinessProbe", c[0].ReadinessProbe, "/readyz")
	env := map[string]string{}
	for _, e := range c[0].Env {
		env[e.Name] = e.Value
	}
	tokens := env["RECONCILER_API_TOKENS_FILE"]
	if tokens != "/var/run/secrets/reconciler/api-tokens" {
		t.Errorf("RECONCILER_API_TOKENS_FILE %q", tokens)
	}
	var mounted bool
	for _, m := range c[0].VolumeMounts {
		if m.MountPath != filepath.Dir(tokens) {
			continue
		}
		for _, v := range d.Spec.Template.Spec.Volumes {
			if v.Name == m.Name && v.Secret != nil && v.Secret.SecretName == documentedSecret {
				for _, it := range v.Secret.Items {
					mounted = mounted || (it.Key == "api-tokens" && it.Path == filepath.Base(tokens))
				}
			}
		}
	}
	if !mounted {
		t.Errorf("want Secret %s key api-tokens mounted at %s", documentedSecret, tokens)
	}
	if _, ok := env["RECONCILER_API_TOKENS"]; ok {
		t.Errorf("tokens belong in the mounted file, not in RECONCILER_API_TOKENS")
	}

	svc, ok := find[*corev1.Service](objs, "Service", "reconciler-serve")
	if !ok {
		t.Fatal("Service reconciler-serve not found")
	}
	for k, v := range svc.Spec.Selector {
		if tl[k] != v {
			t.Errorf("Service selector %s=%s does not select the serve pods %v", k, v, tl)
		}
	}
	if len(svc.Spec.Selector) == 0 {
		t.Errorf("Service without selector")
	}
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 8080 || svc.Spec.Ports[0].TargetPort.String() != "http" {
		t.Errorf("Service ports %+v: want 8080 -> http", svc.Spec.Ports)
	}
}

// TestShardedCronJob: the Indexed Job variant splits the connected accounts
// across its pods: completions, parallelism and RECONCILER_SHARD_COUNT
// agree, the pods list the accounts from Stripe and shard from the
// environment, and a lock held by another run fails only its shard.
func TestShardedCronJob(t *testing.T) {
	objs := loadObjects(t)
	cj, ok := find[*batchv1.CronJob](objs, "CronJob", "reconciler-sharded")
	if !ok {
		t.Fatal("CronJob reconciler-sharded not found")
	}
	base, ok := find[*batchv1.CronJob](objs, "CronJob", "reconciler")
	if !ok {
		t.Fatal("CronJob reconciler not found")
	}
	s := cj.Spec
	if s.ConcurrencyPolicy != batchv1.ForbidConcurrent {
		t.Errorf("concurrencyPolicy %q, want Forbid", s.ConcurrencyPolicy)
	}
	if s.Schedule != base.Spec.Schedule || s.TimeZone == nil || base.Spec.TimeZone == nil || *s.TimeZone != *base.Spec.TimeZone {
		t.Errorf("schedule %q %v: want the base CronJob's night", s.Schedule, s.TimeZone)
	}
	j := s.JobTemplate.Spec
	if j.CompletionMode == nil || *j.CompletionMode != batchv1.IndexedCompletion {
		t.Fatalf("completionMode %v, want Indexed (each pod gets JOB_COMPLETION_INDEX)", j.CompletionMode)
	}
	if j.Completions == nil || j.Parallelism == nil || *j.Completions < 2 || *j.Parallelism != *j.Completions {
		t.Fatalf("completions %v parallelism %v: want equal, at least 2", j.Completions, j.Parallelism)
	}
	if j.BackoffLimitPerIndex == nil || *j.BackoffLimitPerIndex > 3 {
		t.Errorf("backoffLimitPerIndex %v: want a small per-shard retry budget", j.BackoffLimitPerIndex)
	}
	if j.ActiveDeadlineSeconds == nil || j.TTLSecondsAfterFinished == nil {
		t.Errorf("want activeDeadlineSeconds and ttlSecondsAfterFinished")
	}
	if j.Template.Spec.Hostname == "" {
		t.Errorf("want a stable pod hostname: the Pushgateway groups run metrics by it (and the shard)")
	}
	c := j.Template.Spec.Containers
	if len(c) != 1 {
		t.Fatalf("want one container, got %d", len(c))
	}
	args := strings.Join(c[0].Args, " ")
	if !strings.HasPrefix(args, "run --trigger schedule") || !strings.Contains(args, "--accounts-from stripe") || strings.Contains(args, "--shard") || strings.Contains(args, "--account ") {
		t.Errorf("args %q: want run --trigger schedule --accounts-from stripe, the shard from the environment", args)
	}
	env := map[string]string{}
	for _, e := range c[0].Env {
		env[e.Name] = e.Value
	}
	if want := fmt.Sprint(*j.Completions); env["RECONCILER_SHARD_COUNT"] != want {
		t.Errorf("RECONCILER_SHARD_COUNT %q, want %s (the completions)", env["RECONCILER_SHARD_COUNT"], want)
	}
	if _, ok := env["JOB_COMPLETION_INDEX"]; ok {
		t.Errorf("JOB_COMPLETION_INDEX is set by Kubernetes for Indexed Jobs; do not set it")
	}
	if _, ok := env["STRIPE_API_KEY"]; !ok {
		t.Errorf("want STRIPE_API_KEY")
	}
	actions := map[int32]batchv1.PodFailurePolicyAction{}
	if j.PodFailurePolicy != nil {
		for _, r := range j.PodFailurePolicy.Rules {
			if r.OnExitCodes != nil && r.OnExitCodes.Operator == batchv1.PodFailurePolicyOnExitCodesOpIn {
				for _, v := range r.OnExitCodes.Values {
					actions[v] = r.Action
				}
			}
		}
	}
	if actions[2] != batchv1.PodFailurePolicyActionFailJob || actions[3] != batchv1.PodFailurePolicyActionFailIndex {
		t.Errorf("podFailurePolicy: want FailJob on exit 2 and FailIndex on exit 3, got %v", actions)
	}
}
