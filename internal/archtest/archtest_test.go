// Package archtest checks the house rules of docs/architecture.md: which
// package may import which, and that the front rooms hold no SQL. It reads
// the import graph with go list, so a rule broken anywhere fails here.
package archtest

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const mod = "github.com/reconciler/reconciler"

type pkg struct {
	ImportPath string
	Dir        string
	Imports    []string
	GoFiles    []string
}

func load(t *testing.T) map[string]pkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-json", mod+"/...")
	cmd.Dir = "../.."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	pkgs := map[string]pkg{}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for dec.More() {
		var p pkg
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		pkgs[strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, mod), "/")] = p
	}
	return pkgs
}

func ours(imp string) (string, bool) {
	if imp == mod {
		return "", true
	}
	rest, ok := strings.CutPrefix(imp, mod+"/")
	return rest, ok
}

// rule: packages matching from may not import packages matching to.
type rule struct {
	from, to string // path prefixes inside the module ("" = any)
	except   []string
	why      string
}

func under(p, prefix string) bool { return p == prefix || strings.HasPrefix(p, prefix+"/") }

func TestImports(t *testing.T) {
	pkgs := load(t)
	rules := []rule{
		{from: "models", to: "", why: "models is the leaf: rows, states, the pure transition rules"},
		{from: "store", to: "reconcile", why: "the store is below the engine"},
		{from: "store", to: "providers", why: "the store knows no provider"},
		{from: "reconcile", to: "providers", why: "the engine declares the Provider seam; providers implement it"},
		{from: "reconcile", to: "runner", why: "the run service calls the engine, not the reverse"},
		{from: "reconcile", to: "cmd", why: "nothing imports a command"},
		{from: "reconcile", to: "store/pgstore", why: "the engine knows no dialect (internal/dbopen picks it)"},
		{from: "reconcile", to: "store/sqlitestore", why: "the engine knows no dialect (internal/dbopen picks it)"},
		{from: "providers", to: "store", why: "providers read providers; they never touch the database"},
		{from: "providers", to: "runner", why: "providers are below the run service"},
		{from: "runner", to: "serve", why: "serve is a front room over the run service"},
		{from: "runner", to: "cmd", why: "nothing imports a command"},
		{from: "serve", to: "cmd", why: "nothing imports a command"},
	}
	for path, p := range pkgs {
		for _, imp := range p.Imports {
			dep, ok := ours(imp)
			if !ok {
				continue
			}
			for _, r := range rules {
				if !under(path, r.from) || (r.to != "" && !under(dep, r.to)) || slices.Contains(r.except, path) {
					continue
				}
				if r.from == "store" && under(dep, "store") || r.from == "providers" && under(dep, "providers") {
					continue // a room's own packages
				}
				t.Errorf("%s imports %s: %s", path, dep, r.why)
			}
		}
	}
	// Only the opener and the dialects' own tests name a dialect package.
	for path, p := range pkgs {
		for _, imp := range p.Imports {
			dep, _ := ours(imp)
			// internal/webhooksim plays the application's own webhook worker,
			// which runs its own PostgreSQL transactions and retries them
			// on pgstore.IsConflict as an application would.
			if (dep == "store/pgstore" || dep == "store/sqlitestore") && path != "internal/dbopen" && path != "internal/webhooksim" && !under(path, "store") {
				t.Errorf("%s imports %s: only internal/dbopen picks a dialect", path, dep)
			}
			if imp == "github.com/jackc/pgx/v5/pgconn" && !under(path, "store") {
				t.Errorf("%s imports pgconn: driver errors are translated in the store", path)
			}
		}
	}
}

// sqlish matches a gorm query or a SQL statement in Go source.
var sqlish = regexp.MustCompile(`\.(Raw|Exec|Where|Model|Find|First|Count|Pluck|Order)\(|\b(SELECT|INSERT INTO|UPDATE \w+ SET|DELETE FROM)\b|models\.SQLite\(|julianday`)

func TestNoSQLInFrontRooms(t *testing.T) {
	pkgs := load(t)
	for _, room := range []string{"cmd/reconciler", "runner", "serve", "reconcile"} {
		p, ok := pkgs[room]
		if !ok {
			t.Fatalf("package %s not found", room)
		}
		for _, f := range p.GoFiles {
			b, err := os.ReadFile(filepath.Join(p.Dir, f))
			if err != nil {
				t.Fatal(err)
			}
			for i, line := range strings.Split(string(b), "\n") {
				if strings.HasPrefix(strings.TrimSpace(line), "//") {
					continue
				}
				if m := sqlish.FindString(line); m != "" {
					t.Errorf("%s/%s:%d: %q: SQL belongs in the store", room, f, i+1, m)
				}
			}
		}
	}
}

func TestCommandIsThin(t *testing.T) {
	p := load(t)["cmd/reconciler"]
	n := 0
	for _, f := range p.GoFiles {
		b, err := os.ReadFile(filepath.Join(p.Dir, f))
		if err != nil {
			t.Fatal(err)
		}
		n += strings.Count(string(b), "\n")
	}
	t.Logf("cmd/reconciler: %d lines in %d files", n, len(p.GoFiles))
	if n >= 1000 {
		t.Errorf("cmd/reconciler has %d lines; it parses, wires and calls (under 1000)", n)
	}
}
