package serve

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/reconciler/reconciler/acks"
	"github.com/reconciler/reconciler/config"
	"github.com/reconciler/reconciler/internal/dbopen"
	"github.com/reconciler/reconciler/internal/pgtest"
	"github.com/reconciler/reconciler/internal/signedlink"
	"github.com/reconciler/reconciler/metrics"
	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/report"
	"github.com/reconciler/reconciler/runner"
)

// doc is the part of an OpenAPI document the checks read.
type doc struct {
	OpenAPI    string                              `json:"openapi"`
	Paths      map[string]map[string]operation     `json:"paths"`
	Components struct{ Schemas map[string]schema } `json:"components"`
	Security   []map[string][]string               `json:"security"`
}

type operation struct {
	Parameters []struct {
		Name string `json:"name"`
		In   string `json:"in"`
	} `json:"parameters"`
	RequestBody *struct {
		Content map[string]struct{ Schema schema } `json:"content"`
	} `json:"requestBody"`
	Responses map[string]struct {
		Content map[string]struct{ Schema schema } `json:"content"`
	} `json:"responses"`
	Security *[]map[string][]string `json:"security"`
}

type schema struct {
	Ref                  string            `json:"$ref"`
	Properties           map[string]schema `json:"properties"`
	Required             []string          `json:"required"`
	AdditionalProperties *bool             `json:"additionalProperties"`
	Items                *schema           `json:"items"`
}

func loadDoc(t *testing.T) doc {
	t.Helper()
	var d doc
	require.NoError(t, json.Unmarshal(openAPI, &d))
	require.Equal(t, "3.1.0", d.OpenAPI)
	return d
}

// ops are the document's operations as mux patterns ("GET /runs/{id}").
func (d doc) ops() map[string]operation {
	out := map[string]operation{}
	for path, methods := range d.Paths {
		for m, op := range methods {
			out[strings.ToUpper(m)+" "+path] = op
		}
	}
	return out
}

func (d doc) resolve(t *testing.T, s schema) schema {
	t.Helper()
	if s.Ref == "" {
		return s
	}
	name, ok := strings.CutPrefix(s.Ref, "#/components/schemas/")
	require.True(t, ok, s.Ref)
	r, ok := d.Components.Schemas[name]
	require.True(t, ok, "%s resolves to no schema", s.Ref)
	return r
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// jsonFields are the JSON keys encoding/json writes for a struct type:
// exported fields by tag name, those of embedded structs included.
func jsonFields(t reflect.Type) []string {
	seen := map[string]bool{}
	var walk func(reflect.Type)
	walk = func(t reflect.Type) {
		for f := range t.Fields() {
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "-" {
				continue
			}
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if f.Anonymous && name == "" && ft.Kind() == reflect.Struct {
				walk(ft)
				continue
			}
			if !f.IsExported() {
				continue
			}
			if name == "" {
				name = f.Name
			}
			seen[name] = true
		}
	}
	walk(t)
	return keys(seen)
}

// The document names every route Handler serves and no other: Routes is
// the one list Handler registers, so a route added there fails here until
// it is documented.
func TestOpenAPIDocumentsEveryRoute(t *testing.T) {
	t.Parallel()
	d := loadDoc(t)
	s := &Server{Metrics: metrics.New()}
	var served []string
	for _, rt := range s.routes(context.Background()) {
		served = append(served, rt.pattern)
	}
	sort.Strings(served)
	require.Equal(t, served, keys(d.ops()), "openapi.json's operations must be routes' patterns")

	// Path parameters are declared as the pattern names them.
	for pattern, op := range d.ops() {
		var want, got []string
		for _, seg := range strings.Split(pattern, "/") {
			if strings.HasPrefix(seg, "{") {
				want = append(want, strings.Trim(seg, "{}"))
			}
		}
		for _, p := range op.Parameters {
			if p.In == "path" {
				got = append(got, p.Name)
			}
		}
		require.Equal(t, want, got, "%s: path parameters", pattern)
		require.NotEmpty(t, op.Responses, pattern)
	}

	// GET /runs's query parameters are the handler's filters and limit.
	want := append(keys(filters(&runner.Filter{})), "limit")
	var got []string
	for _, p := range d.ops()["GET /runs"].Parameters {
		require.Equal(t, "query", p.In)
		got = append(got, p.Name)
	}
	require.ElementsMatch(t, want, got, "GET /runs query parameters")

	// The report routes take the signed link's parameters and accept it
	// instead of a bearer token.
	for _, p := range []string{"GET /runs/{id}/report.html", "GET /runs/{id}/report.csv"} {
		op := d.ops()[p]
		var q []string
		for _, prm := range op.Parameters {
			if prm.In == "query" {
				q = append(q, prm.Name)
			}
		}
		require.ElementsMatch(t, []string{signedlink.ParamExpires, signedlink.ParamSig}, q, p)
		require.NotNil(t, op.Security, p)
		require.Len(t, *op.Security, 2, "%s: bearer or the signed link", p)
	}
}

// Every schema the document defines is a Go type's JSON fields exactly
// (by reflection), or one of the few answers written as a map; request
// bodies reject unknown keys.
func TestOpenAPISchemasAreTheGoTypes(t *testing.T) {
	t.Parallel()
	d := loadDoc(t)
	typed := map[string]reflect.Type{
		"ApiError":       reflect.TypeFor[apiError](),
		"RunBody":        reflect.TypeFor[runBody](),
		"AckBody":        reflect.TypeFor[ackBody](),
		"RunStarted":     reflect.TypeFor[runStarted](),
		"RunEntry":       reflect.TypeFor[runEntry](),
		"RunReport":      reflect.TypeFor[report.RunReport](),
		"Item":           reflect.TypeFor[report.Item](),
		"ItemAck":        reflect.TypeFor[report.ItemAck](),
		"Triage":         reflect.TypeFor[report.Triage](),
		"Totals":         reflect.TypeFor[report.Totals](),
		"CurrencyTotals": reflect.TypeFor[report.CurrencyTotals](),
		"CurrencyAmount": reflect.TypeFor[report.CurrencyAmount](),
		"AckTarget":      reflect.TypeFor[acks.Target](),
		"AckAnswer":      reflect.TypeFor[ackAnswer](),
		"AckRecord":      reflect.TypeFor[ackRecord](),
	}
	// Answers written as maps (healthz, readyz, the list's envelope);
	// TestOpenAPIAnswers checks them against real answers.
	untyped := []string{"Health", "Readiness", "RunList"}
	// hidden are fields a type has that never reach its JSON: runEntry's
	// Items only hides RunReport's.
	hidden := map[string][]string{"RunEntry": {"items"}}
	for _, name := range keys(d.Components.Schemas) {
		if slices.Contains(untyped, name) {
			continue
		}
		typ, ok := typed[name]
		require.True(t, ok, "schema %s: add its Go type to this test", name)
		want := slices.DeleteFunc(jsonFields(typ), func(f string) bool { return slices.Contains(hidden[name], f) })
		require.Equal(t, want, keys(d.Components.Schemas[name].Properties), "schema %s: properties must be %s's JSON fields", name, typ)
	}
	for name := range typed {
		require.Contains(t, d.Components.Schemas, name)
	}
	// Every $ref resolves.
	var walk func(schema)
	walk = func(s schema) {
		d.resolve(t, s)
		for _, p := range s.Properties {
			walk(p)
		}
		if s.Items != nil {
			walk(*s.Items)
		}
	}
	for _, s := range d.Components.Schemas {
		walk(s)
	}

	bodies := map[string]string{"POST /runs": "RunBody", "POST /items/{fingerprint}/ack": "AckBody"}
	for pattern, op := range d.ops() {
		name, ok := bodies[pattern]
		if op.RequestBody == nil {
			require.False(t, ok, "%s: its body is undocumented", pattern)
			continue
		}
		require.True(t, ok, "%s: a documented body this test does not know", pattern)
		s := op.RequestBody.Content["application/json"].Schema
		require.Equal(t, "#/components/schemas/"+name, s.Ref, pattern)
		closed := d.resolve(t, s).AdditionalProperties
		require.True(t, closed != nil && !*closed, "%s: decodeBody refuses unknown keys: additionalProperties false", pattern)
	}

	// A list entry has no items key, and says how many items it has.
	raw, err := json.Marshal(listEntry(models.Run{ID: 7, Repaired: 3, Delivered: 1, Refused: 2, Reported: 1}))
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(raw, &m))
	require.NotContains(t, m, "items")
	require.Equal(t, float64(7), m["item_count"])
	require.Equal(t, float64(3), m["needs_human"])
	require.Equal(t, "/runs/7", m["items_url"])
}

// Real requests answer the status codes the document gives them, with
// bodies of the documented schema; for the routes below every documented
// code but 500 (and POST /runs's 202, which the binary's test starts) is
// caused here.
func TestOpenAPIAnswers(t *testing.T) {
	t.Parallel()
	d := loadDoc(t)
	ctx := context.Background()
	db := pgtest.NewSQLite(t).DB
	st := dbopen.Store(db, nil)
	getenv := func(k string) string {
		return map[string]string{"STRIPE_API_KEY": "sk_test_serve", "STRIPE_API_BASE": "http://127.0.0.1:1"}[k]
	}
	cfg, err := config.Load(filepath.Join(t.TempDir(), "none.yaml"), false, getenv, os.ReadFile)
	require.NoError(t, err)
	at := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	done := at.Add(time.Hour)
	run := models.Run{Provider: "stripe", Status: models.RunSucceeded, Trigger: models.TriggerSchedule, WindowStart: at,
		WindowEnd: done, StartedAt: at, FinishedAt: &done, Repaired: 3, Refused: 2, Reported: 1, Notes: models.JSON("[]")}
	require.NoError(t, st.CreateRun(ctx, &run))
	state := "captured"
	require.NoError(t, db.Create(&models.DriftItem{RunID: run.ID, Provider: "stripe", ProviderID: "pi_1", Kind: models.KindConflict,
		Action: models.ActionRefused, LocalState: new("canceled"), ProviderState: &state, Detail: models.JSON("{}")}).Error)
	fp := acks.Fingerprint("stripe", "pi_1", models.KindConflict, &state)
	s := &Server{Runner: &runner.Service{Config: cfg, DB: db, Store: st}, Log: slog.New(slog.DiscardHandler), Metrics: metrics.New(),
		Tokens: map[string]string{"finance": token}, Providers: []string{"stripe"}, MaxRuns: 1}
	srv := httptest.NewServer(s.Handler(ctx))
	t.Cleanup(srv.Close)
	id := strconv.FormatInt(run.ID, 10)
	ops := d.ops()
	caused := map[string][]string{}

	// call sends a request for the operation pattern and checks that the
	// code is documented and a JSON answer has the documented keys.
	call := func(pattern, path, tok, body string, want int) map[string]any {
		t.Helper()
		method, _, _ := strings.Cut(pattern, " ")
		op, ok := ops[pattern]
		require.True(t, ok, pattern)
		req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		require.NoError(t, err)
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		raw, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.Equal(t, want, resp.StatusCode, "%s %s: %s", method, path, raw)
		code := strconv.Itoa(want)
		caused[pattern] = append(caused[pattern], code)
		doc, ok := op.Responses[code]
		require.True(t, ok, "%s answers %s, undocumented", pattern, code)
		ctype, _, _ := strings.Cut(resp.Header.Get("Content-Type"), ";")
		content, ok := doc.Content[ctype]
		require.True(t, ok, "%s %s: Content-Type %s undocumented", pattern, code, ctype)
		if ctype != "application/json" || content.Schema.Ref == "" {
			return nil
		}
		var m map[string]any
		require.NoError(t, json.Unmarshal(raw, &m), "%s", raw)
		sch := d.resolve(t, content.Schema)
		for k := range m {
			require.Contains(t, sch.Properties, k, "%s %s: key %q undocumented", pattern, code, k)
		}
		for _, k := range sch.Required {
			require.Contains(t, m, k, "%s %s: required key %q missing", pattern, code, k)
		}
		return m
	}

	resp, err := http.Get(srv.URL + "/openapi.json")
	require.NoError(t, err)
	served, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)
	require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	require.Equal(t, openAPI, served)

	call("GET /healthz", "/healthz", "", "", 200)
	call("GET /readyz", "/readyz", "", "", 200)
	call("GET /metrics", "/metrics", "", "", 200)

	pr := "POST /runs"
	require.Equal(t, "provider", call(pr, "/runs", token, `{"provider":"nope"}`, 400)["field"])
	require.Equal(t, "bogus", call(pr, "/runs", token, `{"provider":"stripe","bogus":1}`, 400)["field"])
	require.Equal(t, "since", call(pr, "/runs", token, `{"provider":"stripe","since":"yesterday"}`, 400)["field"])
	call(pr, "/runs", "", `{"provider":"stripe"}`, 401)
	call(pr, "/runs", token, `{"provider":"`+strings.Repeat("x", maxBody)+`"}`, 413)

	lr := "GET /runs"
	list := call(lr, "/runs?provider=stripe&account=&status=succeeded&trigger=schedule&limit=5", token, "", 200)
	require.Len(t, list["runs"], 1)
	entry := list["runs"].([]any)[0].(map[string]any)
	for k := range entry {
		require.Contains(t, d.Components.Schemas["RunEntry"].Properties, k)
	}
	require.NotContains(t, entry, "items", "a list entry must not claim no items")
	require.Equal(t, float64(6), entry["item_count"])
	require.Equal(t, float64(3), entry["needs_human"])
	require.Equal(t, "/runs/"+id, entry["items_url"])
	require.Equal(t, "limit", call(lr, "/runs?limit=0", token, "", 400)["field"])
	call(lr, "/runs", "", "", 401)

	gr := "GET /runs/{id}"
	require.Equal(t, float64(run.ID), call(gr, "/runs/"+id, token, "", 200)["id"])
	require.Equal(t, "id", call(gr, "/runs/x", token, "", 400)["field"])
	call(gr, "/runs/"+id, "", "", 401)
	call(gr, "/runs/999", token, "", 404)

	ack := "POST /items/{fingerprint}/ack"
	require.Equal(t, "fingerprint", call(ack, "/items/zz/ack", token, `{"note":"x"}`, 400)["field"])
	require.Equal(t, "note", call(ack, "/items/0123456789abcdef/ack", token, `{}`, 400)["field"])
	call(ack, "/items/0123456789abcdef/ack", "", `{"note":"x"}`, 401)
	require.Equal(t, "fingerprint", call(ack, "/items/0123456789abcdef/ack", token, `{"note":"x"}`, 404)["field"])
	call(ack, "/items/0123456789abcdef/ack", token, `{"note":"`+strings.Repeat("x", maxBody)+`"}`, 413)
	answer := call(ack, "/items/"+fp+"/ack", token, `{"note":"refunded by hand"}`, 200)
	require.Equal(t, acks.StatusAcknowledged, answer["status"])
	require.Equal(t, "finance", answer["acknowledged"].(map[string]any)["by"])

	for _, f := range []string{"html", "csv"} {
		rp := "GET /runs/{id}/report." + f
		call(rp, "/runs/"+id+"/report."+f, token, "", 200)
		call(rp, "/runs/x/report."+f, token, "", 400)
		call(rp, "/runs/"+id+"/report."+f, "", "", 401)
		call(rp, "/runs/"+id+"/report."+f+"?expires=1&sig=bad", "", "", 403)
		call(rp, "/runs/999/report."+f, token, "", 404)
	}

	// 409: another holder has the run lock.
	lock, err := st.TryLock(ctx, "stripe/")
	require.NoError(t, err)
	call(pr, "/runs", token, `{"provider":"stripe"}`, 409) // api_test checks its run_id
	require.NoError(t, lock.Release(ctx))
	// 429: every run slot taken.
	s.slots <- struct{}{}
	call(pr, "/runs", token, `{"provider":"stripe"}`, 429)
	<-s.slots
	// 503: shutting down.
	s.stopStarting()
	call(pr, "/runs", token, `{"provider":"stripe"}`, 503)

	// Every operation documented with a 401 refuses a request without a
	// token; every public one answers it.
	for pattern, op := range ops {
		method, path, _ := strings.Cut(pattern, " ")
		path = strings.NewReplacer("{id}", id, "{fingerprint}", "0123456789abcdef").Replace(path)
		req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(`{"note":"x"}`))
		require.NoError(t, err)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		if _, ok := op.Responses["401"]; ok {
			require.Equal(t, 401, resp.StatusCode, pattern)
		} else {
			require.NotNil(t, op.Security, "%s: answers without a token, so security: []", pattern)
			require.Empty(t, *op.Security, pattern)
			require.NotEqual(t, 401, resp.StatusCode, pattern)
		}
	}

	// Every documented code of these routes was caused above.
	for pattern, skip := range map[string][]string{pr: {"202", "500"}, lr: {"500"}, gr: {"500"}, ack: {"500"},
		"GET /runs/{id}/report.html": {"500"}, "GET /runs/{id}/report.csv": {"500"}} {
		for _, code := range keys(ops[pattern].Responses) {
			if !slices.Contains(skip, code) {
				require.Contains(t, caused[pattern], code, "%s: documented %s never caused", pattern, code)
			}
		}
	}
}
