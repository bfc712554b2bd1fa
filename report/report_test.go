package report

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/reconciler/reconciler/models"
)

var update = flag.Bool("update", false, "rewrite golden files")

func ptr[T any](v T) *T { return &v }

const trickyExplanation = `Local says "captured" | provider says "refunded", so nothing was changed`

// sample is a hand-built report: run 7 has one item of every kind, run 8 has
// none and failed.
func sample() Report {
	at := func(h, m int) time.Time { return time.Date(2026, 11, 1, h, m, 0, 0, time.UTC) }
	return Report{Runs: []RunReport{
		{
			ID: 7, Provider: "stripe", Account: "", WindowStart: time.Date(2026, 10, 30, 23, 0, 0, 0, time.UTC), WindowEnd: at(0, 0),
			StartedAt: at(0, 0), FinishedAt: ptr(at(0, 3)), Status: "succeeded", Trigger: "schedule", TriggeredBy: "cron",
			Examined: 1200, InSync: 1194, Repaired: 2, Refused: 2, Reported: 2, SyntheticEvents: 3, EventsRead: 400, APIRequests: 17,
			WebhookMissRatio: 0.0075,
			Items: []Item{
				{ProviderID: "pi_1", Kind: models.KindConflict, Action: models.ActionRefused, LocalState: ptr("captured"), ProviderState: ptr("refunded"),
					Explanation: trickyExplanation, Detail: map[string]any{"provider_time": "2026-10-31T10:00:00.5Z"}},
				{ProviderID: "pi_2", Kind: models.KindStale, Action: models.ActionRefused, LocalState: ptr("authorised"), ProviderState: ptr("captured"),
					Explanation: "Local state changed after the provider's; left alone, a human should look.", Detail: map[string]any{"provider_time": "2026-10-31T11:00:00Z", "local_time": "2026-10-31T11:00:01Z"}},
				{ProviderID: "pi_3", Kind: models.KindMismatch, Action: models.ActionReported, LocalState: ptr("captured"), ProviderState: ptr("captured"),
					Explanation: "The amount or currency recorded locally differs from the provider's; the amount was not changed.", Detail: map[string]any{"local_amount": "1000 EUR", "provider_amount": "1200 EUR"}},
				{ProviderID: "pi_4", Kind: models.KindUnknownStatus, Action: models.ActionReported, LocalState: ptr("created"), ProviderState: nil,
					Explanation: `Provider status "requires_capture_v2" is not known.`, Detail: map[string]any{}},
				{ProviderID: "pi_5", Kind: models.KindMissingLocal, Action: models.ActionRepaired, LocalState: nil, ProviderState: ptr("captured"),
					Explanation: "Not known locally; created from the provider's record.", Detail: map[string]any{"provider_time": "2026-10-31T12:00:00Z"}},
				{ProviderID: "pi_6", Kind: models.KindBehind, Action: models.ActionRepaired, LocalState: ptr("authorised"), ProviderState: ptr("captured"),
					Explanation: "A capture webhook was missed, the state was advanced.", Detail: nil},
			},
		},
		{
			ID: 8, Provider: "stripe", Account: "acct_123", WindowStart: at(0, 0), WindowEnd: at(1, 0),
			StartedAt: at(1, 0), FinishedAt: nil, Status: "failed", Trigger: "api", TriggeredBy: "ops",
			DryRun: true, Error: ptr("stripe: 401 | invalid API key"), Items: []Item{},
		},
	}}
}

func render(t *testing.T, format string) []byte {
	t.Helper()
	var buf bytes.Buffer
	require.NoError(t, Render(&buf, sample(), format))
	return buf.Bytes()
}

func golden(t *testing.T, format string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", format+".golden")
	if *update {
		require.NoError(t, os.MkdirAll("testdata", 0o755))
		require.NoError(t, os.WriteFile(path, got, 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run go test ./report/ -update to create it")
	assert.Equal(t, string(want), string(got), "%s differs; rerun with -update if the change is intended", path)
}

func TestRenderGolden(t *testing.T) {
	for _, f := range Formats {
		t.Run(f, func(t *testing.T) {
			got := render(t, f)
			golden(t, f, got)
			assert.Equal(t, string(got), string(render(t, f)), "rendering is deterministic")
		})
	}
}

func TestRenderJSONRoundTrip(t *testing.T) {
	var back Report
	require.NoError(t, json.Unmarshal(render(t, "json"), &back))
	want := sample()
	// A nil Detail encodes as null and decodes back to nil; {} stays {}.
	require.Nil(t, back.Runs[0].Items[5].Detail)
	assert.Equal(t, want, back)

	// Stable field names programs rely on.
	var raw map[string][]map[string]any
	require.NoError(t, json.Unmarshal(render(t, "json"), &raw))
	run := raw["runs"][1]
	for _, k := range []string{"id", "provider", "account", "window_start", "window_end", "started_at", "finished_at", "status",
		"trigger", "triggered_by", "dry_run", "examined", "in_sync", "repaired", "refused", "reported", "synthetic_events",
		"events_read", "api_requests", "webhook_miss_ratio", "error", "items"} {
		assert.Contains(t, run, k)
	}
	assert.Nil(t, run["finished_at"])
	assert.Equal(t, []any{}, run["items"], "a run without drift has items: [], not null")
	assert.Equal(t, "acct_123", run["account"])
	assert.Equal(t, true, run["dry_run"])
	item := raw["runs"][0]["items"].([]any)[4].(map[string]any)
	assert.Nil(t, item["local_state"])
	assert.Equal(t, "captured", item["provider_state"])
}

func TestRenderCSV(t *testing.T) {
	rows, err := csv.NewReader(bytes.NewReader(render(t, "csv"))).ReadAll()
	require.NoError(t, err)
	s := sample()
	require.Len(t, rows, 1+len(s.Runs[0].Items)+len(s.Runs[1].Items), "header plus one row per item")
	header := []string{"run_id", "provider", "account", "provider_id", "kind", "action", "local_state", "provider_state", "provider_time", "explanation"}
	assert.Equal(t, header, rows[0])
	for _, r := range rows {
		assert.Len(t, r, len(header))
	}
	assert.Equal(t, []string{"7", "stripe", "", "pi_1", "conflict", "refused", "captured", "refunded", "2026-10-31T10:00:00.5Z", trickyExplanation}, rows[1])
	// nil states are empty cells; no provider_time is an empty cell.
	assert.Equal(t, "", rows[4][7], "nil provider_state")
	assert.Equal(t, "", rows[4][8], "no provider_time")
	assert.Equal(t, "", rows[5][6], "nil local_state")
	assert.Equal(t, "2026-10-31T12:00:00Z", rows[5][8])
	assert.Equal(t, "", rows[6][8], "nil Detail")
	for i, it := range s.Runs[0].Items {
		assert.Equal(t, it.ProviderID, rows[i+1][3])
		assert.Equal(t, it.Kind, rows[i+1][4])
		assert.Equal(t, it.Action, rows[i+1][5])
		assert.Equal(t, it.Explanation, rows[i+1][9])
	}
}

// cells splits a Markdown table row on unescaped pipes.
func cells(row string) []string {
	row = strings.TrimSpace(row)
	row = strings.TrimPrefix(row, "|")
	row = strings.TrimSuffix(row, "|")
	var out []string
	var cur strings.Builder
	for i := 0; i < len(row); i++ {
		if row[i] == '\\' && i+1 < len(row) && row[i+1] == '|' {
			cur.WriteByte('|')
			i++
			continue
		}
		if row[i] == '|' {
			out = append(out, strings.TrimSpace(cur.String()))
			cur.Reset()
			continue
		}
		cur.WriteByte(row[i])
	}
	return append(out, strings.TrimSpace(cur.String()))
}

func TestRenderMarkdown(t *testing.T) {
	md := string(render(t, "md"))
	assert.Contains(t, md, "## Run 7: stripe, platform\n")
	assert.Contains(t, md, "## Run 8: stripe, acct_123 (dry run: nothing was written but this report)\n")
	assert.Contains(t, md, "No drift.")
	assert.Equal(t, 1, strings.Count(md, "No drift."))

	// Every table row has the cell count of its header.
	var want int
	var items [][]string
	var errorRow []string
	for _, line := range strings.Split(md, "\n") {
		if !strings.HasPrefix(line, "|") {
			want = 0
			continue
		}
		c := cells(line)
		if want == 0 {
			want = len(c)
			continue
		}
		assert.Len(t, c, want, "row %q", line)
		if want == 5 && c[0] != "---" {
			items = append(items, c)
		}
		if c[0] == "error" {
			errorRow = c
		}
	}
	s := sample()
	require.Len(t, items, len(s.Runs[0].Items))
	for i, it := range s.Runs[0].Items {
		assert.Equal(t, it.ProviderID, items[i][0])
		assert.Equal(t, it.Explanation, items[i][4], "explanation survives escaping")
	}
	assert.Equal(t, "created → —", items[3][3], "nil provider state is a dash")
	assert.Equal(t, "— → captured", items[4][3], "nil local state is a dash")
	assert.Equal(t, []string{"error", "stripe: 401 | invalid API key"}, errorRow)
	assert.Contains(t, md, "| webhook miss ratio | 0.75% |")
	assert.Contains(t, md, "| window | 2026-10-30T23:00:00Z → 2026-11-01T00:00:00Z |")
}

func TestRenderEmpty(t *testing.T) {
	for _, f := range Formats {
		var buf bytes.Buffer
		require.NoError(t, Render(&buf, Report{}, f), f)
	}
	var buf bytes.Buffer
	require.NoError(t, Render(&buf, Report{}, "csv"))
	rows, err := csv.NewReader(&buf).ReadAll()
	require.NoError(t, err)
	assert.Len(t, rows, 1, "header only")
}

func TestRenderUnknownFormat(t *testing.T) {
	for _, f := range []string{"html", "xml", "", "JSON", "markdown"} {
		var buf bytes.Buffer
		err := Render(&buf, sample(), f)
		require.Error(t, err, f)
		assert.Contains(t, err.Error(), "json, csv, md")
		assert.Contains(t, err.Error(), `"`+f+`"`)
		assert.Zero(t, buf.Len(), "nothing written")
	}
}

func TestValidFormat(t *testing.T) {
	for _, f := range []string{"json", "csv", "md"} {
		assert.True(t, ValidFormat(f), f)
	}
	for _, f := range []string{"", "html", "JSON", "markdown", " md"} {
		assert.False(t, ValidFormat(f), f)
	}
}

func TestPriority(t *testing.T) {
	assert.Less(t, priority(Item{Action: models.ActionRefused}), priority(Item{Action: models.ActionReported}))
	assert.Less(t, priority(Item{Action: models.ActionReported}), priority(Item{Action: models.ActionRepaired}))
}

func TestMarkdownCellsSurviveNewlinesAndPipes(t *testing.T) {
	e := "first\nsecond | third\r\nfourth"
	rep := Report{Runs: []RunReport{{ID: 1, Provider: "stripe", Error: &e, Items: []Item{{ProviderID: "pi_|x", Kind: "conflict", Action: "refused", Explanation: "a\nb"}}}}}
	var b strings.Builder
	if err := Render(&b, rep, "md"); err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(b.String(), "\n") {
		if strings.HasPrefix(line, "| error") && !strings.HasSuffix(line, "|") {
			t.Fatalf("error row broken: %q", line)
		}
		if strings.HasPrefix(line, "| pi_") && !strings.Contains(line, "a<br>b |") {
			t.Fatalf("item row broken: %q", line)
		}
	}
	if !strings.Contains(b.String(), "first<br>second \\| third<br>fourth") {
		t.Fatalf("error not escaped:\n%s", b.String())
	}
}
