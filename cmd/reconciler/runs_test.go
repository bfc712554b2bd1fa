package main_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/reconciler/reconciler/internal/scenario"
	"github.com/reconciler/reconciler/report"
	"github.com/reconciler/reconciler/serve"
)

// jsonOf is v as JSON read back into plain values, to compare two
// encodings of the same thing whatever their indentation.
func jsonOf(t *testing.T, v any) any {
	t.Helper()
	b, ok := v.([]byte)
	if !ok {
		var err error
		b, err = json.Marshal(v)
		require.NoError(t, err)
	}
	var out any
	require.NoError(t, json.Unmarshal(b, &out), string(b))
	return out
}

// runs list and runs show read the run record as GET /runs and
// GET /runs/{id} answer it: the same JSON, or aligned columns.
func TestRunsListAndShow(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	s := scenario.NewStripe(w.acct, w.now, scenario.Options{Payments: 40, Seed: 4, MissEvery: 5})
	require.NoError(t, s.SeedLocal(context.Background(), w.db.DB, w.now))
	require.Equal(t, 0, cli(t, w.env, "run", "--dry-run").code)
	r := cli(t, w.env, "run")
	require.Equal(t, 0, r.code, r.stderr)
	runs := w.runs(t)
	require.Len(t, runs, 2)
	last := runs[1]

	// -o json: GET /runs's entries, newest first.
	r = cli(t, w.env, "runs", "list", "-o", "json")
	require.Equal(t, 0, r.code, r.stderr)
	want := map[string]any{"runs": []any{jsonOf(t, serve.ListEntry(last)), jsonOf(t, serve.ListEntry(runs[0]))}}
	require.Equal(t, jsonOf(t, want), jsonOf(t, []byte(r.stdout)))
	var listed struct {
		Runs []map[string]any `json:"runs"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &listed))
	for _, k := range []string{"id", "provider", "account", "status", "item_count", "needs_human", "items_url"} {
		require.Contains(t, listed.Runs[0], k)
	}
	require.NotContains(t, listed.Runs[0], "items", "a list entry has no items, as GET /runs")

	// The table: a header and one aligned line per run.
	r = cli(t, w.env, "runs", "list")
	require.Equal(t, 0, r.code, r.stderr)
	lines := strings.Split(strings.TrimRight(r.stdout, "\n"), "\n")
	require.Len(t, lines, 3, r.stdout)
	require.Equal(t, []string{"ID", "PROVIDER", "ACCOUNT", "STATUS", "TRIGGER", "DRY-RUN", "WINDOW", "STARTED", "DURATION",
		"EXAMINED", "REPAIRED", "REFUSED", "REPORTED"}, strings.Fields(lines[0]))
	row := strings.Fields(lines[1])
	require.Equal(t, []string{itoa(last.ID), "stripe", "platform", "succeeded", "manual", "false"}, row[:6])
	require.Equal(t, []string{itoa(last.Examined), itoa(last.Repaired), itoa(last.Refused), itoa(last.Reported)}, row[9:])
	require.Equal(t, "true", strings.Fields(lines[2])[5], "the dry run")
	require.Equal(t, strings.Index(lines[0], "STATUS"), strings.Index(lines[1], "succeeded"), "columns are aligned")

	// Filters and the limit.
	r = cli(t, w.env, "runs", "list", "--limit", "1", "-o", "json")
	require.Equal(t, 0, r.code, r.stderr)
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &listed))
	require.Len(t, listed.Runs, 1)
	r = cli(t, w.env, "runs", "list", "--provider", "gocardless", "-o", "json")
	require.Equal(t, 0, r.code, r.stderr)
	require.JSONEq(t, `{"runs": []}`, r.stdout)
	r = cli(t, w.env, "runs", "list", "--account", "acct_1Other")
	require.Equal(t, 0, r.code, r.stderr)
	require.Len(t, strings.Split(strings.TrimSpace(r.stdout), "\n"), 1, "the header only")

	// runs show: GET /runs/{id}, items included.
	r = cli(t, w.env, "runs", "show", itoa(last.ID), "-o", "json")
	require.Equal(t, 0, r.code, r.stderr)
	rep, err := report.Load(context.Background(), w.db.DB, last.ID)
	require.NoError(t, err)
	require.NotEmpty(t, rep.Runs[0].Items)
	require.Equal(t, jsonOf(t, rep.Runs[0]), jsonOf(t, []byte(r.stdout)))
	r = cli(t, w.env, "runs", "show", itoa(last.ID))
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "FINGERPRINT")
	for _, it := range rep.Runs[0].Items {
		require.Contains(t, r.stdout, it.Fingerprint)
	}

	// A run that does not exist, bad ids, bad flags: one line, exit 2.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"runs", "show", "999999"}, "runs show: no run 999999"},
		{[]string{"runs", "show", "abc"}, `runs show: "abc" is not a run id`},
		{[]string{"runs", "show", "-5"}, "runs show: unknown flag -5"},
		{[]string{"runs", "show"}, "runs show: give one run id"},
		{[]string{"runs", "show", "1", "2"}, `unexpected argument "2"`},
		{[]string{"runs", "list", "--limit", "0"}, "--limit: 0 is out of range"},
		{[]string{"runs", "list", "--limit", "lots"}, `--limit: "lots" is not a whole number`},
		{[]string{"runs", "list", "-o", "yaml"}, `-o: unknown output "yaml" (use table or json)`},
		{[]string{"runs", "list", "--provider", "paypal"}, `--provider: unknown provider "paypal"`},
		{[]string{"runs", "lst"}, "unknown command \"lst\" for reconciler runs (did you mean list?"},
		{[]string{"runs"}, "Usage:"},
	} {
		r := cli(t, w.env, c.args...)
		require.Equal(t, 2, r.code, "%v: %s", c.args, r.stderr)
		require.Contains(t, r.stderr, c.want, c.args)
		require.Empty(t, r.stdout, c.args)
		if c.args[len(c.args)-1] != "runs" {
			require.Equal(t, 1, strings.Count(strings.TrimSpace(r.stderr), "\n")+1, "one line: %q", r.stderr)
		}
	}
	require.Len(t, w.runs(t), 2, "reading runs writes none")
}
