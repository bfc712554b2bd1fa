package report

import (
	"bytes"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/reconciler/reconciler/models"
)

// The sample's text is testdata/text.golden (TestRenderGolden); these
// tests pin what a golden file shows less plainly.

func renderText(t *testing.T, rep Report, opts TextOptions) string {
	t.Helper()
	var buf bytes.Buffer
	require.NoError(t, RenderText(&buf, rep, opts))
	return buf.String()
}

var sgr = regexp.MustCompile("\033\\[[0-9;]*m")

func TestTextIsAFormat(t *testing.T) {
	assert.True(t, ValidFormat("text"))
	assert.Equal(t, renderText(t, sample(), TextOptions{}), string(render(t, "text")), "Render's text is RenderText without colour")
}

func TestTextColor(t *testing.T) {
	plainText := renderText(t, sample(), TextOptions{})
	colored := renderText(t, sample(), TextOptions{Color: true})
	assert.NotContains(t, plainText, "\033", "no escape codes without Color")
	assert.Contains(t, colored, "\033[1;31mrefused\033[0m", "refused in red")
	assert.Contains(t, colored, "\033[33mreported\033[0m", "reported in yellow")
	assert.Contains(t, colored, "\033[32mrepaired\033[0m", "repaired in green")
	assert.Equal(t, plainText, sgr.ReplaceAllString(colored, ""), "colour adds escape codes and nothing else")
}

// Strings from a provider cannot drive the terminal: the only escape codes
// are the colours.
func TestTextControlCharacters(t *testing.T) {
	evil := "\033[2J\033]0;owned\007x\ny"
	rep := Report{Runs: []RunReport{{ID: 1, Provider: "stripe", Account: evil, Status: evil, Mode: evil, Error: &evil,
		Notes: map[string]any{"warning": evil},
		Items: []Item{
			{ProviderID: evil, Kind: evil, Action: models.ActionRefused, LocalState: &evil, ProviderState: &evil, Currency: evil, Explanation: evil},
			{ProviderID: evil, Kind: evil, Action: models.ActionRepaired, Explanation: evil},
		}}}}
	for _, color := range []bool{false, true} {
		out := sgr.ReplaceAllString(renderText(t, rep, TextOptions{Color: color}), "")
		assert.NotContains(t, out, "\033", "color %v", color)
		assert.NotContains(t, out, "\007", "color %v", color)
		for _, l := range strings.Split(out, "\n") {
			assert.NotContains(t, l, "\r")
		}
	}
}

// manyItems is a run with n items needing a human and m repaired ones
// (two kinds, alternating).
func manyItems(n, m int) RunReport {
	end := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	r := RunReport{ID: 3, Provider: "gocardless", Mode: "live", Status: "succeeded", WindowStart: end.Add(-24 * time.Hour), WindowEnd: end,
		StartedAt: end, FinishedAt: ptr(end.Add(1500 * time.Millisecond)), DurationSeconds: 1.5,
		Examined: 12345678, Repaired: int64(m), Refused: int64(n), EventsRead: 1000, SyntheticEvents: 106, WebhookMissRatio: 0.106}
	for i := range n {
		r.Items = append(r.Items, Item{ProviderID: fmt.Sprintf("PM%012d", i), Kind: models.KindConflict, Action: models.ActionRefused,
			LocalState: ptr("chargeback"), ProviderState: ptr("chargeback_cancelled_by_the_bank_after_review"), Amount: 5400, Currency: "gbp",
			Explanation: strings.Repeat("The chargeback was cancelled at GoCardless and the money came back. ", 5)})
	}
	for i := range m {
		kind := []string{models.KindBehind, models.KindMissingLocal}[min(i, 1)]
		r.Items = append(r.Items, Item{ProviderID: fmt.Sprintf("PR%012d", i), Kind: kind, Action: models.ActionRepaired,
			ProviderState: ptr("paid_out"), Amount: 123456789, Currency: "gbp"})
	}
	return r
}

func TestTextLongRun(t *testing.T) {
	r := manyItems(30, 5)
	r.ItemsOmitted = 1234
	out := renderText(t, Report{Runs: []RunReport{r}}, TextOptions{})
	for _, want := range []string{
		"── GoCardless · run 3 · live mode · succeeded in 1.50s ─",
		"  examined 12,345,678   repaired 5   refused 30   reported 0\n  events read 1,000   synthetic events 106   webhook miss ratio 10.60%\n",
		"  Needs a human (30):\n",
		"    …and 5 more in the CSV and JSON reports\n",
		"  Repaired (5): behind 1, missing_local 4; for example:\n",
		"    …and 2 more repaired\n",
		"  …and 1,234 more items; the CSV and JSON reports list every item.\n",
		"\n      chargeback → chargeback_cancelled_by_the_bank_after_review  54.00 GBP\n", // full states, on a line of their own
		"1234567.89 GBP",
	} {
		assert.Contains(t, out, want)
	}
	assert.Equal(t, 25, strings.Count(out, "    PM0"), "at most 25 items needing a human")
	assert.Equal(t, 3, strings.Count(out, "    PR0"), "three examples of the repaired")
	assert.Contains(t, out, "PR000000000000", "the first of a kind is an example")
	assert.Contains(t, out, "PR000000000001", "one of each kind first")
	lines := strings.Split(out, "\n")
	for i, l := range lines {
		if !strings.HasPrefix(l, "    PM0") {
			continue
		}
		// The facts wrap onto a second line; the explanation follows in
		// full, wrapped, then the fingerprint.
		var expl []string
		k := i + 2
		for ; strings.HasPrefix(lines[k], "        ") && !strings.HasPrefix(lines[k], "        fingerprint "); k++ {
			expl = append(expl, strings.TrimSpace(lines[k]))
		}
		assert.Equal(t, strings.TrimSpace(r.Items[0].Explanation), strings.Join(expl, " "), "the explanation of %q in full", l)
		assert.Regexp(t, `^        fingerprint [0-9a-f]{16}$`, lines[k])
	}
	for _, l := range lines {
		assert.LessOrEqual(t, utf8.RuneCountInString(l), TextWidth, "%q", l)
	}

	out = renderText(t, Report{Runs: []RunReport{r}}, TextOptions{MoreIn: "the HTML report"})
	assert.Contains(t, out, "    …and 5 more in the HTML report\n")
}

func TestTextTitle(t *testing.T) {
	for _, c := range []struct {
		run  RunReport
		want string
	}{
		{RunReport{ID: 1, Provider: "stripe", Status: "running"}, "── Stripe · run 1 · running ─"},
		{RunReport{ID: 2, Provider: "gocardless", Account: "OR123", Mode: "test", Status: "succeeded",
			StartedAt: time.Unix(0, 0), FinishedAt: ptr(time.Unix(42, 0)), DurationSeconds: 42}, "── GoCardless · OR123 · run 2 · test mode · succeeded in 42s ─"},
		{RunReport{ID: 3, Provider: "adyen", DryRun: true, Status: "failed"}, "── adyen · run 3 · dry run · failed ─"},
		{RunReport{ID: 4}, "── — · run 4 · — ─"},
	} {
		out := renderText(t, Report{Runs: []RunReport{c.run}}, TextOptions{})
		first, _, _ := strings.Cut(out, "\n")
		assert.True(t, strings.HasPrefix(first, c.want), "%q", first)
		assert.Equal(t, TextWidth, utf8.RuneCountInString(first), "the rule fills the line: %q", first)
		if c.run.Status == "failed" {
			assert.Contains(t, strings.Join(strings.Fields(out), " "), "The run failed before it finished, so this is not a full account of the window.")
			assert.Contains(t, out, "  Nothing needing a human was found before the run stopped.\n")
			assert.NotContains(t, out, "Nothing needs a human.")
		} else {
			assert.Contains(t, out, "  Nothing needs a human.\n")
		}
		assert.NotContains(t, out, "Repaired (")
	}
}

func TestTextEmpty(t *testing.T) {
	assert.Equal(t, "No runs.\n", renderText(t, Report{}, TextOptions{}))
}

func TestTextWrap(t *testing.T) {
	for _, c := range []struct {
		s        string
		width, n int
		want     []string
	}{
		{"", 10, 3, nil},
		{"one two three", 20, 3, []string{"one two three"}},
		{"one two three", 7, 3, []string{"one two", "three"}},
		{"  spaced\n\tout  ", 20, 3, []string{"spaced out"}},
		{"aaaa bbbb cccc dddd", 9, 1, []string{"aaaa …"}},
		{"aaaa bbbb cccc dddd eeee", 9, 2, []string{"aaaa bbbb", "cccc …"}},
		{"abcdefghijkl", 5, 3, []string{"abcd…"}},
	} {
		assert.Equal(t, c.want, Wrap(c.s, c.width, c.n), "%q in %d×%d", c.s, c.width, c.n)
		for _, l := range Wrap(c.s, c.width, c.n) {
			assert.LessOrEqual(t, utf8.RuneCountInString(l), c.width, "%q", l)
		}
	}
}

func TestTextThousands(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 7: "7", 999: "999", 1000: "1,000", 12345: "12,345", 1234567: "1,234,567",
		-1: "-1", -1000: "-1,000", -123456: "-123,456"} {
		assert.Equal(t, want, Thousands(n), "%d", n)
	}
}

// The history's text format is a right-aligned table, one line a run,
// oldest first, with control characters in an account id made harmless.
func TestRenderHistoryText(t *testing.T) {
	runs := historyRuns()
	runs[0].Account = "acct_\x1b[31mX"
	var buf bytes.Buffer
	require.NoError(t, RenderHistory(&buf, runs, "text"))
	table, notes, _ := strings.Cut(buf.String(), "\n\n")
	lines := strings.Split(table, "\n")
	require.Len(t, lines, len(runs)+1)
	require.Contains(t, lines[0], "miss ratio")
	for i, r := range runs {
		require.Contains(t, lines[i+1], r.Provider)
		require.Contains(t, lines[i+1], r.WindowStart.Format(time.RFC3339))
		if r.Status == "failed" {
			require.True(t, strings.HasSuffix(lines[i+1], "  —"), "a failed run measured no ratio: %q", lines[i+1])
		} else {
			require.Contains(t, lines[i+1], fmt.Sprintf("%.2f%%", 100*r.WebhookMissRatio))
		}
	}
	// The failed run says so under the table.
	require.Equal(t, "run 103: The run failed before it finished, so this is not a full account of\n  the window: stripe: 401 | invalid API key\n", notes)
	require.NotContains(t, buf.String(), "\x1b")
}

// A report's items needing a human are split into new, still open and
// acknowledged, each with its fingerprint; the ack hint comes once; a
// mismatch shows both amounts; states are never cut; no line is wider
// than TextWidth.
func TestTextTriage(t *testing.T) {
	rep := layoutTextReport()
	out := renderText(t, rep, TextOptions{})
	r := rep.Runs[0]
	iNew := strings.Index(out, "  New since the last run (2):\n")
	iOpen := strings.Index(out, "  Still open (2):\n")
	iAck := strings.Index(out, "  Acknowledged (2):\n")
	iRep := strings.Index(out, "  Repaired (4):")
	require.True(t, iNew > 0 && iNew < iOpen && iOpen < iAck && iAck < iRep, "sections in order:\n%s", out)
	assert.Contains(t, out, "  Needs a human (6): 2 new, 2 still open, 2 acknowledged\n")
	assert.Contains(t, out, "  needing a human: 2 new, 2 still open, 2 acknowledged\n")
	assert.Equal(t, 1, strings.Count(out, AckHint), "the hint once")
	for _, it := range r.Items {
		if !it.NeedsHuman() {
			continue
		}
		at := strings.Index(out, "fingerprint "+it.Fingerprint)
		require.Positive(t, at, "fingerprint of %s", it.ProviderID)
		section := map[string]int{"new": iNew, "open": iOpen, "acknowledged": iAck}[it.Status]
		assert.Greater(t, at, section, "%s in its section", it.ProviderID)
		assert.Contains(t, strings.Join(strings.Fields(out), " "), strings.Join(strings.Fields(it.Explanation), " "), "explanation in full")
	}
	assert.Contains(t, out, "local 10.00 EUR, provider 12.00 EUR", "both amounts of a mismatch")
	assert.Contains(t, out, "pending_submission → requires_reauthorization_by_the_customer_bank", "full state names")
	assert.Contains(t, strings.Join(strings.Fields(out), " "),
		"Acknowledged by maria.gonzalez@support.example.com at 2026-11-02T06:00:00Z: Refunded by hand")
	assert.NotContains(t, strings.ReplaceAll(out, "…and ", ""), "…", "nothing cut")
	assert.NotContains(t, out, "created as created")
	// The items (the title and the money table are as wide as their
	// figures).
	_, items, _ := strings.Cut(out, "  Needs a human (")
	for _, l := range strings.Split(items, "\n") {
		assert.LessOrEqual(t, utf8.RuneCountInString(l), TextWidth, "%q", l)
	}
}

// Without triage data (a hand-built report) the items needing a human are
// one section.
func TestTextWithoutTriage(t *testing.T) {
	rep := layoutTextReport()
	rep.Runs[0].Triage = nil
	for i := range rep.Runs[0].Items {
		rep.Runs[0].Items[i].Status, rep.Runs[0].Items[i].Acknowledged = "", nil
	}
	out := renderText(t, rep, TextOptions{})
	assert.Contains(t, out, "  Needs a human (6):\n")
	assert.NotContains(t, out, "still open")
	assert.NotContains(t, out, "New since")
	assert.Equal(t, 1, strings.Count(out, AckHint))
}

// layoutTextReport is the layout test's report (chromium_test.go builds
// it too, but only on unix).
func layoutTextReport() Report { return withLinks(layoutSample()) }
