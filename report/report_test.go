package report

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"context"
	"fmt"
	"github.com/reconciler/reconciler/internal/pgtest"
	"github.com/reconciler/reconciler/models"
)

var update = flag.Bool("update", false, "rewrite golden files")

func ptr[T any](v T) *T { return &v }

const trickyExplanation = `Local says "captured" | provider says "refunded", so nothing was changed`

// sample is a hand-built report: run 7 has one item of every kind, run 8 has
// none and failed.
func sample() Report {
	at := func(h, m int) time.Time { return time.Date(2026, 11, 1, h, m, 0, 0, time.UTC) }
	rep := Report{Runs: []RunReport{
		{
			ID: 7, Provider: "stripe", Account: "", WindowStart: time.Date(2026, 10, 30, 23, 0, 0, 0, time.UTC), WindowEnd: at(0, 0),
			StartedAt: at(0, 0), FinishedAt: ptr(at(0, 3)), Status: "succeeded", Trigger: "schedule", TriggeredBy: "cron",
			Mode: "test", DurationSeconds: 180,
			Examined: 1200, InSync: 1194, Repaired: 2, Refused: 2, Reported: 2, SyntheticEvents: 3, EventsRead: 400, APIRequests: 17,
			WebhookMissRatio: 0.0075,
			Items: []Item{
				{ProviderID: "pi_1", Kind: models.KindConflict, Action: models.ActionRefused, LocalState: ptr("captured"), ProviderState: ptr("refunded"),
					Explanation: trickyExplanation, Amount: 1999, Currency: "gbp", AmountRefunded: 1999, ProviderTime: ptr(time.Date(2026, 10, 31, 10, 0, 0, 5e8, time.UTC)), EventID: "evt_1", Detail: map[string]any{}},
				{ProviderID: "pi_2", Kind: models.KindStale, Action: models.ActionRefused, LocalState: ptr("authorised"), ProviderState: ptr("captured"),
					Explanation: "Local state changed after the provider's; left alone, a human should look.", Amount: 500, Currency: "jpy", ProviderTime: ptr(time.Date(2026, 10, 31, 11, 0, 0, 0, time.UTC)), Detail: map[string]any{"local_time": "2026-10-31T11:00:01Z"}},
				{ProviderID: "pi_3", Kind: models.KindMismatch, Action: models.ActionReported, LocalState: ptr("captured"), ProviderState: ptr("captured"),
					Explanation: "The amount or currency recorded locally differs from the provider's; the amount was not changed.", Amount: 1000, Currency: "eur", Detail: map[string]any{"local_amount": 1000.0, "local_currency": "eur", "provider_amount": 1200.0, "provider_currency": "eur"}},
				{ProviderID: "pi_4", Kind: models.KindUnknownStatus, Action: models.ActionReported, LocalState: ptr("created"), ProviderState: nil,
					Explanation: `Provider status "requires_capture_v2" is not known.`, Detail: map[string]any{}},
				{ProviderID: "pi_5", Kind: models.KindMissingLocal, Action: models.ActionRepaired, LocalState: nil, ProviderState: ptr("captured"),
					Explanation: "Not known locally; created from the provider's record.", Amount: 4200, Currency: "gbp", ProviderTime: ptr(time.Date(2026, 10, 31, 12, 0, 0, 0, time.UTC)), TimeInferred: true, Detail: map[string]any{}},
				{ProviderID: "pi_6", Kind: models.KindBehind, Action: models.ActionRepaired, LocalState: ptr("authorised"), ProviderState: ptr("captured"),
					Explanation: "A capture webhook was missed, the state was advanced.", Detail: nil},
			},
		},
		{
			ID: 8, Provider: "stripe", Account: "acct_123", WindowStart: at(0, 0), WindowEnd: at(1, 0),
			StartedAt: at(1, 0), FinishedAt: nil, Status: "failed", Trigger: "api", TriggeredBy: "ops",
			DryRun: true, Error: ptr("stripe: 401 | invalid API key"), Items: []Item{},
		},
		dryRunSample(),
	}}
	// Run 7 was triaged against run 6: pi_1 and pi_4 are new, pi_2 still
	// open, pi_3 acknowledged.
	r7 := &rep.Runs[0]
	r7.Triage = &Triage{PreviousRunID: ptr(int64(6)), RefusedUnacknowledged: 2}
	r7.Triage.New, r7.Triage.Open, r7.Triage.Acknowledged = 2, 1, 1
	for i, st := range []string{"new", "open", "acknowledged", "new"} {
		r7.Items[i].Status = st
	}
	r7.Items[2].Acknowledged = &ItemAck{By: "maria", Note: "the customer paid 2.00 EUR by bank transfer; leave it", At: at(9, 30)}
	rep.Runs[0].Totals = TotalsFromItems(rep.Runs[0], []CurrencyTotals{
		{Currency: "eur", Payments: 40, Captured: 120000, Refunded: 1500, Settled: 90000},
		{Currency: "gbp", Payments: 1100, Captured: 2199900, Refunded: 34000, Disputed: 4200, Settled: 1800000},
		{Currency: "jpy", Payments: 60, Captured: 300000},
	})
	return rep
}

// dryRunSample is run 9, a dry run that would repair three payments:
// its explanations are the engine's own sentences.
func dryRunSample() RunReport {
	at := func(h, m int) time.Time { return time.Date(2026, 11, 2, h, m, 0, 0, time.UTC) }
	r := RunReport{
		ID: 9, Provider: "stripe", WindowStart: at(0, 0), WindowEnd: at(1, 0), StartedAt: at(1, 0), FinishedAt: ptr(at(1, 1)),
		Status: "succeeded", Trigger: "manual", TriggeredBy: "cli", DryRun: true, Mode: "test", DurationSeconds: 60,
		Examined: 30, InSync: 27, Repaired: 3, EventsRead: 90, SyntheticEvents: 3, WebhookMissRatio: 3.0 / 90, APIRequests: 4,
		Items: []Item{
			{ProviderID: "pi_91", Kind: models.KindBehind, Action: models.ActionRepaired, LocalState: ptr("authorised"), ProviderState: ptr("captured"),
				Explanation: "The captured webhook was never received; the payment was marked captured from the provider's record.",
				Amount:      2500, Currency: "gbp", ProviderTime: ptr(at(0, 10)), EventID: "evt_91", Detail: map[string]any{}},
			{ProviderID: "pi_92", Kind: models.KindMissingLocal, Action: models.ActionRepaired, ProviderState: ptr("settled"),
				Explanation: "The payment was unknown locally (its webhooks never arrived); it was created as a payment in state settled from the provider's record.",
				Amount:      1000, Currency: "gbp", ProviderTime: ptr(at(0, 20)), Detail: map[string]any{}},
			{ProviderID: "pi_93", Kind: models.KindBehind, Action: models.ActionRepaired, LocalState: ptr("captured"), ProviderState: ptr("captured"),
				Explanation: "A partial refund webhook was missed; amount_refunded was raised from the provider's record.",
				Amount:      4000, Currency: "gbp", AmountRefunded: 1000, ProviderTime: ptr(at(0, 30)), Detail: map[string]any{}},
		},
	}
	r.Totals = TotalsFromItems(r, []CurrencyTotals{{Currency: "gbp", Payments: 27, Captured: 81000, Refunded: 2000, Settled: 50000}})
	return r
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
	want := withLinks(sample()) // rendering fills the dashboard links
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
	all, err := csv.NewReader(bytes.NewReader(render(t, "csv"))).ReadAll()
	require.NoError(t, err)
	s := sample()
	assert.Equal(t, CSVHeader, all[0])
	col := map[string]int{}
	for i, h := range all[0] {
		col[h] = i
	}
	for _, r := range all {
		assert.Len(t, r, len(CSVHeader))
	}
	// Totals rows (no provider_id, a total_ kind) come before each run's
	// items; the rest is one row per item.
	rows := [][]string{all[0]}
	for _, r := range all[1:] {
		if r[col["provider_id"]] != "" {
			assert.NotContains(t, CSVTotalKinds, r[col["kind"]])
			rows = append(rows, r)
		} else {
			assert.Contains(t, CSVTotalKinds, r[col["kind"]])
		}
	}
	require.Len(t, rows, 1+len(s.Runs[0].Items)+len(s.Runs[1].Items)+len(s.Runs[2].Items), "header plus one row per item")
	first := rows[1]
	assert.Equal(t, "pi_1", first[col["provider_id"]])
	assert.Equal(t, "19.99", first[col["amount"]], "major units")
	assert.Equal(t, "GBP", first[col["currency"]])
	assert.Equal(t, "19.99", first[col["amount_refunded"]])
	assert.Equal(t, "2026-10-31T10:00:00.5Z", first[col["provider_time"]], "UTC ISO 8601")
	assert.Equal(t, "true", first[col["needs_human"]])
	assert.Equal(t, trickyExplanation, first[col["explanation"]])
	assert.Equal(t, "https://dashboard.stripe.com/test/payments/pi_1", first[col["dashboard_url"]])
	assert.Equal(t, "500", rows[2][col["amount"]], "zero-decimal currency")
	assert.Equal(t, "", rows[4][col["provider_state"]], "nil provider_state")
	assert.Equal(t, "", rows[4][col["provider_time"]], "no provider_time")
	assert.Equal(t, "", rows[5][col["local_state"]], "nil local_state")
	assert.Equal(t, "true", rows[5][col["time_inferred"]])
	for i, it := range s.Runs[0].Items {
		assert.Equal(t, it.ProviderID, rows[i+1][col["provider_id"]])
		assert.Equal(t, it.Kind, rows[i+1][col["kind"]])
		assert.Equal(t, it.Action, rows[i+1][col["action"]])
		assert.Equal(t, it.Explanation, rows[i+1][col["explanation"]])
	}
}

func TestMajorUnits(t *testing.T) {
	for _, c := range []struct {
		minor int64
		cur   string
		want  string
	}{{1234, "gbp", "12.34"}, {5, "eur", "0.05"}, {0, "usd", "0.00"}, {-150, "gbp", "-1.50"}, {1234, "jpy", "1234"}, {1234, "kwd", "1.234"}, {7, "GBP", "0.07"}} {
		assert.Equal(t, c.want, MajorUnits(c.minor, c.cur), "%d %s", c.minor, c.cur)
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
	assert.NotContains(t, md, "No drift.", "run 8 failed: it does not say No drift")
	assert.Contains(t, md, "**The run failed before it finished, so this is not a full account of the window: stripe: 401 \\| invalid API key**")
	assert.Contains(t, md, "No drift was found before the run stopped; the rest of the window was not compared.")

	// Every table row has the cell count of its header.
	var want int
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
		if c[0] == "error" {
			errorRow = c
		}
	}
	assert.Equal(t, []string{"error", "stripe: 401 | invalid API key"}, errorRow)
	assert.Contains(t, md, "| webhook miss ratio | 0.75% |")
	assert.Contains(t, md, "| webhook miss ratio | — |", "the failed run's ratio was not measured")
	assert.Contains(t, md, "| needing a human | 2 new, 1 still open, 1 acknowledged |")
	assert.Contains(t, md, "| window | 2026-10-30T23:00:00Z → 2026-11-01T00:00:00Z |")

	// Sections in order, each item in its own: its facts, then the
	// explanation on its own line, the fingerprint, the acknowledgement.
	run7, _, _ := strings.Cut(md, "## Run 8")
	var sections []string
	for _, l := range strings.Split(run7, "\n") {
		if h, ok := strings.CutPrefix(l, "### "); ok {
			sections = append(sections, h)
		}
		if id, ok := strings.CutPrefix(l, "- ["); ok {
			sections[len(sections)-1] += " " + id[:strings.Index(id, "]")]
		}
	}
	assert.Equal(t, []string{"New since the last run (2) pi_1 pi_4", "Still open (1) pi_2", "Acknowledged (1) pi_3", "Repaired (2) pi_5 pi_6"}, sections)
	s := withLinks(sample())
	for _, it := range s.Runs[0].Items {
		entry := md[strings.Index(md, "- ["+it.ProviderID+"](https://dashboard.stripe.com/test/payments/"+it.ProviderID+")"):]
		entry, _, _ = strings.Cut(entry, "\n\n")
		entry, _, _ = strings.Cut(entry, "\n- ")
		lines := strings.Split(entry, "\\\n")
		assert.Equal(t, "  "+strings.ReplaceAll(it.Explanation, "|", "\\|"), lines[1], "%s: the explanation on its own line", it.ProviderID)
		if it.NeedsHuman() {
			assert.Equal(t, "  fingerprint `"+it.Fingerprint+"`", lines[2], it.ProviderID)
		}
	}
	assert.Contains(t, md, "  *Acknowledged by maria at 2026-11-01T09:30:00Z: the customer paid 2.00 EUR by bank transfer; leave it*")
	assert.Contains(t, md, "· created → — ·", "nil provider state is a dash")
	assert.Contains(t, md, "· — → captured ·", "nil local state is a dash")
	assert.Contains(t, md, "· local 10.00 EUR, provider 12.00 EUR ·", "both amounts of a mismatch")
	assert.Equal(t, 1, strings.Count(md, AckHint), "the ack hint once")
}

// A hand-built report without triage lists its items needing a human in
// one section.
func TestRenderMarkdownWithoutTriage(t *testing.T) {
	rep := sample()
	rep.Runs[0].Triage = nil
	for i := range rep.Runs[0].Items {
		rep.Runs[0].Items[i].Status, rep.Runs[0].Items[i].Acknowledged = "", nil
	}
	var b bytes.Buffer
	require.NoError(t, Render(&b, rep, "md"))
	md := b.String()
	assert.Contains(t, md, "### Needs a human (4)\n")
	assert.NotContains(t, md, "Still open")
	assert.NotContains(t, md, "needing a human |")
}

// An interrupted run says so in every format for people, with a dash for
// its miss ratio, and never "No drift.".
func TestInterruptedRun(t *testing.T) {
	r := RunReport{ID: 5, Provider: "stripe", Status: "interrupted", Error: ptr("context canceled"), EventsRead: 100, SyntheticEvents: 1,
		WebhookMissRatio: 0.01, Items: []Item{}}
	for _, f := range []string{"md", "html", "text"} {
		var b bytes.Buffer
		require.NoError(t, Render(&b, Report{Runs: []RunReport{r}}, f))
		out := strings.Join(strings.Fields(b.String()), " ")
		assert.Contains(t, out, "The run was interrupted before it finished, so this is not a full account of the window: context canceled", f)
		assert.NotContains(t, out, "No drift.", f)
		assert.NotContains(t, out, "1.00%", "%s: the ratio was not measured", f)
		assert.NotContains(t, out, "Nothing needs a human.", f)
	}
	for _, f := range []string{"md", "html", "text", "csv", "json"} {
		var b bytes.Buffer
		require.NoError(t, RenderHistory(&b, []RunReport{r}, f))
		out := strings.Join(strings.Fields(b.String()), " ")
		switch f {
		case "csv":
			rows, err := csv.NewReader(strings.NewReader(b.String())).ReadAll()
			require.NoError(t, err)
			assert.Equal(t, "webhook_miss_ratio", rows[0][15])
			assert.Equal(t, "", rows[1][15], "csv: an empty cell for a ratio not measured")
		case "json":
			assert.Contains(t, out, `"webhook_miss_ratio": 0.01`, "json keeps the number")
		default:
			assert.Contains(t, out, "The run was interrupted before it finished", f)
			assert.NotContains(t, out, "1.00%", f)
			assert.Contains(t, out, "—", f)
		}
	}
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
	for _, f := range []string{"pdf", "xml", "", "JSON", "markdown"} {
		var buf bytes.Buffer
		err := Render(&buf, sample(), f)
		require.Error(t, err, f)
		assert.Contains(t, err.Error(), "json, csv, md, html")
		assert.Contains(t, err.Error(), `"`+f+`"`)
		assert.Zero(t, buf.Len(), "nothing written")
	}
}

func TestValidFormat(t *testing.T) {
	for _, f := range []string{"json", "csv", "md", "html"} {
		assert.True(t, ValidFormat(f), f)
	}
	for _, f := range []string{"", "pdf", "JSON", "markdown", " md"} {
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

// Streamed reports list every item exactly once, those needing a human
// first, across many keyset pages.
func TestWriteStreamsEveryItemOnce(t *testing.T) {
	db := pgtest.New(t)
	now := time.Date(2026, 11, 20, 0, 0, 0, 0, time.UTC)
	run := models.Run{Provider: "stripe", WindowStart: now, WindowEnd: now, StartedAt: now, Status: "succeeded", Trigger: "manual", Notes: models.JSON(`{}`)}
	require.NoError(t, db.Create(&run).Error)
	actions := []string{models.ActionRepaired, models.ActionRefused, models.ActionRepaired, models.ActionReported}
	var items []models.DriftItem
	for i := range 12003 {
		a := actions[i%len(actions)]
		kind := map[string]string{models.ActionRepaired: "behind", models.ActionRefused: "stale", models.ActionReported: "mismatch"}[a]
		items = append(items, models.DriftItem{RunID: run.ID, Provider: "stripe", ProviderID: fmt.Sprintf("pi_%05d", i), Kind: kind, Action: a, Detail: models.JSON(`{}`)})
	}
	require.NoError(t, db.CreateInBatches(items, 2000).Error)
	for _, format := range []string{"json", "csv"} {
		var buf bytes.Buffer
		require.NoError(t, Write(context.Background(), &buf, db.DB, format, run.ID))
		var ids []string
		var acts []string
		if format == "json" {
			var rep Report
			require.NoError(t, json.Unmarshal(buf.Bytes(), &rep))
			for _, it := range rep.Runs[0].Items {
				ids, acts = append(ids, it.ProviderID), append(acts, it.Action)
			}
		} else {
			rows, err := csv.NewReader(&buf).ReadAll()
			require.NoError(t, err)
			for _, r := range rows[1:] {
				if r[4] == "" {
					continue // a totals row, before the items
				}
				ids, acts = append(ids, r[4]), append(acts, r[6])
			}
		}
		require.Len(t, ids, len(items), format)
		seen := map[string]bool{}
		for _, id := range ids {
			require.False(t, seen[id], "%s: %s twice", format, id)
			seen[id] = true
		}
		for i := 1; i < len(acts); i++ {
			require.LessOrEqual(t, priority(Item{Action: acts[i-1]}), priority(Item{Action: acts[i]}), "%s: needing a human first", format)
		}
	}
	rep, err := LoadLimited(context.Background(), db.DB, 100, run.ID)
	require.NoError(t, err)
	require.Len(t, rep.Runs[0].Items, 100)
	require.Equal(t, int64(len(items)-100), rep.Runs[0].ItemsOmitted)
}

// A renderer that fails stops the read ahead: eachItem returns its error
// at once, not after reading the rest, and leaves no reader behind.
func TestEachItemStopsOnError(t *testing.T) {
	db := pgtest.New(t)
	now := time.Date(2026, 11, 20, 0, 0, 0, 0, time.UTC)
	run := models.Run{Provider: "stripe", WindowStart: now, WindowEnd: now, StartedAt: now, Status: "succeeded", Trigger: "manual", Notes: models.JSON(`{}`)}
	require.NoError(t, db.Create(&run).Error)
	var items []models.DriftItem
	for i := range 2*itemPage + 1 {
		items = append(items, models.DriftItem{RunID: run.ID, Provider: "stripe", ProviderID: fmt.Sprintf("pi_%05d", i), Kind: "behind", Action: models.ActionRepaired, Detail: models.JSON(`{}`)})
	}
	require.NoError(t, db.CreateInBatches(items, 2000).Error)
	stop := errors.New("disk full")
	n := 0
	err := eachItem(context.Background(), db.DB, run.ID, func(models.DriftItem) error {
		if n++; n == 3 {
			return stop
		}
		return nil
	})
	require.ErrorIs(t, err, stop)
	require.Equal(t, 3, n)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err = eachItem(ctx, db.DB, run.ID, func(models.DriftItem) error { return nil })
	require.ErrorIs(t, err, context.Canceled, "a canceled read is an error, never a short report")
}

// detailOf is an item's detail as the report reads it (parseFields,
// detailMap), empty when it is not an object.
func detailOf(b []byte) map[string]any {
	p := parsers.Get()
	defer parsers.Put(p)
	return detailMap(parseFields(p, b, nil))
}

// detailOf decodes a detail as encoding/json decodes into map[string]any:
// the report's items render the same whichever decoder read them.
func TestDetailOfMatchesEncodingJSON(t *testing.T) {
	for _, doc := range []string{
		`{}`,
		`{"amount": 26836, "applied": ["authorised", "captured"], "currency": "gbp", "explanation": "The payment was unknown locally"}`,
		`{"big": 12345678901234567890, "neg": -0.5, "exp": 1e21, "small": 1.5E-7, "zero": 0}`,
		`{"s": "quote \" backslash \\ tab \t unicode \u00e9 \ud83d\ude00 <>&", "t": true, "f": false, "n": null}`,
		`{"nested": {"a": [1, {"b": [null, "x"]}], "c": {}}, "empty": []}`,
		`{"dup": 1, "dup": 2}`,
	} {
		want := map[string]any{}
		require.NoError(t, json.Unmarshal([]byte(doc), &want), doc)
		require.Equal(t, want, detailOf([]byte(doc)), doc)
	}
	for _, doc := range []string{``, `[1]`, `"x"`, `{"a":`, `{"a": 1} trailing`} {
		require.Equal(t, map[string]any{}, detailOf([]byte(doc)), "not an object: %q", doc)
	}
}

// The streamed JSON report's items are, byte for byte, json.Marshal of
// the items Load reads through gorm: the page read (itemsPage) scans every
// column itemOf uses into its field, and each item is encoded as Marshal
// encodes it.
func TestWriteItemsAsLoadReadsThem(t *testing.T) {
	db := pgtest.New(t)
	now := time.Date(2026, 11, 20, 0, 0, 0, 0, time.UTC)
	run := models.Run{Provider: "stripe", Account: "acct_1", Mode: "test", WindowStart: now, WindowEnd: now, StartedAt: now, Status: "succeeded",
		Trigger: "manual", Notes: models.JSON(`{}`)}
	require.NoError(t, db.Create(&run).Error)
	local, provider := "captured", "settled"
	details := []string{`{}`, `{"explanation": "The payment was <unknown> & \"late\"", "amount": 1250, "currency": "gbp", "amount_refunded": 50}`,
		`{"provider_time": "2026-11-19T10:00:00Z", "time_inferred": true, "event_id": "evt_1", "also": ["a", "b"], "ratio": 0.25}`}
	var items []models.DriftItem
	for i := range 30 {
		it := models.DriftItem{RunID: run.ID, Provider: "stripe", ProviderID: fmt.Sprintf("pi_%02d", i), Kind: "behind",
			Action: []string{models.ActionRepaired, models.ActionRefused, models.ActionReported}[i%3], Detail: models.JSON(details[i%len(details)])}
		if i%2 == 0 {
			it.LocalState = &local
		}
		if i%5 != 0 {
			it.ProviderState = &provider
		}
		items = append(items, it)
	}
	require.NoError(t, db.Create(&items).Error)
	var buf bytes.Buffer
	require.NoError(t, Write(context.Background(), &buf, db.DB, "json", run.ID))
	var streamed struct {
		Runs []struct {
			Items []json.RawMessage `json:"items"`
		} `json:"runs"`
	}
	require.NoError(t, json.Unmarshal(buf.Bytes(), &streamed))
	rep, err := Load(context.Background(), db.DB, run.ID)
	require.NoError(t, err)
	require.Len(t, streamed.Runs[0].Items, len(items))
	require.Len(t, rep.Runs[0].Items, len(items))
	for i, it := range rep.Runs[0].Items {
		want, err := json.Marshal(it)
		require.NoError(t, err)
		require.Equal(t, string(want), string(streamed.Runs[0].Items[i]), "item %d", i)
	}
}
