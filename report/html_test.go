package report

import (
	"bytes"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/net/html"

	"github.com/reconciler/reconciler/models"
)

// htmlGolden compares got with testdata/<name>.golden; -update rewrites it.
func htmlGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		require.NoError(t, os.MkdirAll("testdata", 0o755))
		require.NoError(t, os.WriteFile(path, got, 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run go test ./report/ -update to create it")
	assert.Equal(t, string(want), string(got), "%s differs; rerun with -update if the change is intended", path)
}

func renderHTML(t *testing.T, rep Report) string {
	t.Helper()
	var buf bytes.Buffer
	require.NoError(t, RenderHTML(&buf, rep))
	return buf.String()
}

func renderHistory(t *testing.T, runs []RunReport) string {
	t.Helper()
	var buf bytes.Buffer
	require.NoError(t, RenderHistoryHTML(&buf, runs))
	return buf.String()
}

// historyRuns is eight nightly runs: a failed one, a dry run, one that read
// no events, a GoCardless one, counts of several sizes.
func historyRuns() []RunReport {
	night := func(d int) time.Time { return time.Date(2026, 10, 24+d, 2, 0, 0, 0, time.UTC) }
	run := func(d int, id int64, provider, status string, repaired, refused, reported, synthetic, read int64) RunReport {
		r := RunReport{ID: id, Provider: provider, WindowStart: night(d - 1), WindowEnd: night(d), StartedAt: night(d),
			FinishedAt: ptr(night(d).Add(95 * time.Second)), DurationSeconds: 95, Status: status, Trigger: "schedule",
			TriggeredBy: "cron", Mode: "live", Examined: 1000 + 10*id, Repaired: repaired, Refused: refused, Reported: reported,
			SyntheticEvents: synthetic, EventsRead: read, APIRequests: 10 + id, Items: []Item{}}
		r.InSync = r.Examined - repaired - refused - reported
		if read > 0 {
			r.WebhookMissRatio = float64(synthetic) / float64(read)
		}
		return r
	}
	runs := []RunReport{
		run(0, 101, "stripe", "succeeded", 3, 0, 1, 3, 400),
		run(1, 102, "stripe", "succeeded", 0, 1, 0, 0, 380),
		run(2, 103, "stripe", "failed", 0, 0, 0, 0, 0),
		run(3, 104, "stripe", "succeeded", 12, 2, 0, 9, 410),
		run(4, 105, "gocardless", "succeeded", 1, 0, 2, 1, 90),
		run(5, 106, "stripe", "succeeded", 0, 0, 0, 0, 0),
		run(6, 107, "stripe", "succeeded", 5, 4, 1, 20, 500),
		run(7, 108, "stripe", "succeeded", 2, 0, 0, 2, 420),
	}
	runs[2].Error = ptr("stripe: 401 | invalid API key")
	runs[2].FinishedAt = ptr(runs[2].StartedAt.Add(2 * time.Second))
	runs[2].DurationSeconds = 2
	runs[4].Account = "OR123"
	runs[4].Mode = "test"
	runs[5].DryRun = true
	runs[5].Trigger, runs[5].TriggeredBy = "api", "ops"
	runs[7].Notes = map[string]any{"warning": "the window starts before the provider's event retention"}
	return runs
}

func TestRenderHTMLGolden(t *testing.T) {
	got := renderHTML(t, sample())
	htmlGolden(t, "html", []byte(got))
	assert.Equal(t, got, renderHTML(t, sample()), "rendering is deterministic")
}

func TestRenderHistoryHTMLGolden(t *testing.T) {
	runs := historyRuns()
	got := renderHistory(t, runs)
	htmlGolden(t, "history", []byte(got))

	// The input order does not matter: charts are oldest first, the table
	// newest first.
	shuffled := append([]RunReport(nil), runs...)
	rand.New(rand.NewSource(1)).Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	assert.Equal(t, got, renderHistory(t, shuffled))
	assert.Equal(t, historyRuns(), runs, "input not modified")
}

// parse parses a page and fails the test on an error.
func parse(t *testing.T, page string) *html.Node {
	t.Helper()
	doc, err := html.Parse(strings.NewReader(page))
	require.NoError(t, err)
	return doc
}

// all returns the nodes under n (n included) for which match is true, in
// document order.
func all(n *html.Node, match func(*html.Node) bool) []*html.Node {
	var out []*html.Node
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if match(n) {
			out = append(out, n)
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(n)
	return out
}

func elem(tag string) func(*html.Node) bool {
	return func(n *html.Node) bool { return n.Type == html.ElementNode && n.Data == tag }
}

func withClass(tag, class string) func(*html.Node) bool {
	return func(n *html.Node) bool {
		return n.Type == html.ElementNode && n.Data == tag && strings.Contains(" "+attr(n, "class")+" ", " "+class+" ")
	}
}

func attr(n *html.Node, key string) string {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val
		}
	}
	return ""
}

func hasAttr(n *html.Node, key string) bool {
	for _, a := range n.Attr {
		if a.Key == key {
			return true
		}
	}
	return false
}

// text is the text content of n.
func text(n *html.Node) string {
	var b strings.Builder
	for _, t := range all(n, func(n *html.Node) bool { return n.Type == html.TextNode }) {
		b.WriteString(t.Data)
	}
	return b.String()
}

// assertSelfContained checks that a page loads nothing and runs nothing: no
// script, no element with src, no href except dashboard links on <a>, no
// event handler attributes, no url( or @import in CSS, a CSP forbidding
// everything but inline style.
func assertSelfContained(t *testing.T, page string) {
	t.Helper()
	assert.NotContains(t, strings.ToLower(page), "<script")
	assert.Contains(t, page, `<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'">`)
	assert.Contains(t, page, `<meta name="color-scheme" content="light dark">`)
	doc := parse(t, page)
	for _, tag := range []string{"script", "link", "img", "iframe", "object", "embed", "base", "form", "image", "use", "foreignObject", "video", "audio"} {
		assert.Empty(t, all(doc, elem(tag)), "<%s>", tag)
	}
	for _, n := range all(doc, func(n *html.Node) bool { return n.Type == html.ElementNode }) {
		for _, a := range n.Attr {
			assert.False(t, strings.HasPrefix(a.Key, "on"), "event handler %s on <%s>", a.Key, n.Data)
			assert.NotEqual(t, "src", a.Key, "<%s src>", n.Data)
			assert.NotEqual(t, "style", a.Key, "inline style attribute on <%s>", n.Data)
			if a.Key == "href" || strings.HasSuffix(a.Key, ":href") {
				assert.Equal(t, "a", n.Data, "href only on links")
				assert.True(t, strings.HasPrefix(a.Val, "https://dashboard.stripe.com/") || strings.HasPrefix(a.Val, "https://manage"),
					"href %q is not a dashboard link", a.Val)
				assert.Equal(t, "noreferrer", attr(n, "rel"), "link %q", a.Val)
			}
		}
	}
	styles := all(doc, elem("style"))
	require.Len(t, styles, 1)
	css := strings.ToLower(text(styles[0]))
	assert.NotContains(t, css, "url(")
	assert.NotContains(t, css, "@import")
	assert.Contains(t, text(styles[0]), "@media print")
	assert.Contains(t, text(styles[0]), "overflow-x: auto", "tables scroll sideways on a phone")
}

func TestRenderHTMLSelfContained(t *testing.T) {
	for _, page := range []string{renderHTML(t, sample()), renderHistory(t, historyRuns()), renderHTML(t, Report{}), renderHistory(t, nil)} {
		assertSelfContained(t, page)
		// With no injected text, plain string checks hold for the whole page.
		low := strings.ToLower(page)
		for _, bad := range []string{"<script", "src=", "url(", "@import", "javascript:", "http://"} {
			assert.Falsef(t, strings.Contains(low, bad), "page contains %q", bad)
		}
		for _, part := range strings.Split(page, `href="`)[1:] {
			assert.True(t, strings.HasPrefix(part, "https://dashboard.stripe.com/") || strings.HasPrefix(part, "https://manage"), part[:min(len(part), 60)])
		}
	}
}

func TestRenderHTMLEscapes(t *testing.T) {
	const (
		expl = `<script>alert(1)</script>`
		id   = `pi_"><script>alert(2)</script>`
		err  = "stripe: 500 <script>alert(3)</script>\nsecond line"
		warn = `<img src=x onerror=alert(4)>`
		acct = `acct_</title><script>alert(5)</script>`
	)
	rep := Report{Runs: []RunReport{{ID: 1, Provider: "stripe", Account: acct, Status: "failed", Error: ptr(err), Trigger: "<b>api</b>",
		TriggeredBy: `"ops"`, Mode: `live"><script>`, Notes: map[string]any{"warning": warn},
		Items: []Item{
			{ProviderID: id, Kind: `conflict<script>`, Action: "refused", LocalState: ptr("<i>captured</i>"), ProviderState: ptr("refunded"),
				Currency: `<x>`, Amount: 1, Explanation: expl},
			{ProviderID: "pi_js", Kind: "behind", Action: "repaired", Explanation: "a link that must not be followed",
				DashboardURL: "javascript:alert(6)"},
		}}}}
	page := renderHTML(t, rep)
	assertSelfContained(t, page)
	assert.Contains(t, page, "&lt;script&gt;alert(1)&lt;/script&gt;")
	for _, s := range []string{"alert(2)", "alert(3)", "alert(5)", "alert(6)"} {
		assert.NotContains(t, page, "<script>"+s, s)
	}
	assert.NotContains(t, page, "<img")

	// The escaped text reads back as what was given.
	doc := parse(t, page)
	var expls, ids []string
	for _, it := range items(doc) {
		expls, ids = append(expls, it["expl"]), append(ids, it["id"])
	}
	assert.Contains(t, expls, expl)
	assert.Equal(t, []string{id, "pi_js"}, ids)
	links := all(doc, elem("a"))
	require.Len(t, links, 1, "a javascript: dashboard url is not linked")
	assert.Equal(t, id, text(links[0]))
	assert.True(t, strings.HasPrefix(attr(links[0], "href"), "https://dashboard.stripe.com/acct_"), attr(links[0], "href"))
	assert.NotContains(t, attr(links[0], "href"), "<", "the url is escaped")
	assert.Contains(t, text(doc), err)
	assert.Contains(t, text(doc), warn)
	assert.Contains(t, text(doc), acct)
	assert.Equal(t, "Reconciliation report: run 1", text(all(doc, elem("title"))[0]))
	svgs := all(doc, elem("svg"))
	require.Len(t, svgs, 1)
	assert.Contains(t, attr(svgs[0], "aria-label"), "conflict<script>")
}

func TestRenderHTMLContent(t *testing.T) {
	s := sample()
	page := renderHTML(t, s)
	doc := parse(t, page)

	assert.Equal(t, "Reconciliation report: runs 7, 8, 9", text(all(doc, elem("title"))[0]))
	sections := all(doc, elem("section"))
	require.Len(t, sections, 3)
	run7, run8 := text(sections[0]), text(sections[1])
	for _, want := range []string{"Run 7: stripe, platform", "2026-10-30T23:00:00Z → 2026-11-01T00:00:00Z", "schedule by cron",
		"succeeded", "3m0s", "1200examined", "1194in sync", "2repaired", "2refused", "2reported", "3synthetic events",
		"400events read", "17API requests", "0.75%webhook miss ratio", "4 items need a human"} {
		assert.Contains(t, run7, want)
	}
	assert.NotContains(t, run7, "Dry run")
	assert.NotContains(t, run7, "Error")
	for _, want := range []string{"Run 8: stripe, acct_123", "Dry run", "api by ops", "failed",
		"The run failed before it finished, so this is not a full account of the window: stripe: 401 | invalid API key",
		"No drift was found before the run stopped", "—webhook miss ratio"} {
		assert.Contains(t, run8, want)
	}
	assert.NotContains(t, page, "No drift.", "run 8 failed: it does not say No drift")
	for _, want := range []string{"2new since the last run", "1still open", "1acknowledged", "(2 new, 1 still open, 1 acknowledged)"} {
		assert.Contains(t, run7, want)
	}

	// Every item, linked to its dashboard, in its section: new, still
	// open, acknowledged, repaired; refused before reported within one.
	order := []string{"pi_1", "pi_4", "pi_2", "pi_3", "pi_5", "pi_6"}
	links := all(sections[0], elem("a"))
	require.Len(t, links, len(s.Runs[0].Items))
	for i, id := range order {
		assert.Equal(t, id, text(links[i]))
		assert.Equal(t, DashboardURL("stripe", "test", "", id), attr(links[i], "href"))
		assert.Contains(t, page, ">"+id+"<")
	}
	var groups []string
	for _, g := range all(sections[0], withClass("div", "group")) {
		var ids []string
		for _, it := range items(g) {
			ids = append(ids, it["id"])
			if it["id"] != "pi_5" && it["id"] != "pi_6" {
				assert.Regexp(t, `^[0-9a-f]{16}$`, it["fingerprint"], "%s has its fingerprint", it["id"])
			} else {
				assert.Empty(t, it["fingerprint"], "a repaired item has none shown")
			}
		}
		groups = append(groups, text(all(g, elem("h3"))[0])+": "+strings.Join(ids, " "))
	}
	assert.Equal(t, []string{"New since the last run (2): pi_1 pi_4", "Still open (1): pi_2", "Acknowledged (1): pi_3", "Repaired (2): pi_5 pi_6"}, groups)
	assert.Contains(t, run7, "Acknowledged by maria at 2026-11-01T09:30:00Z: the customer paid 2.00 EUR by bank transfer; leave it")
	assert.Contains(t, run7, "The previous run (run 6) did not have them.")
	assert.Equal(t, 1, strings.Count(page, AckHint), "the ack hint once")
	var actions []string
	for _, b := range all(sections[0], withClass("span", "badge")) {
		if strings.HasPrefix(attr(b, "class"), "badge a-") {
			actions = append(actions, text(b))
		}
	}
	assert.Equal(t, []string{"refused", "reported", "refused", "reported", "repaired", "repaired"}, actions)

	// Mismatch amounts come from Detail; nothing else in Detail does.
	assert.Contains(t, run7, "local 10.00 EUR, provider 12.00 EUR")
	assert.NotContains(t, page, "2026-10-31T11:00:01Z", "detail local_time is not shown")

	// One bar per drift kind, in the chart's order.
	svgs := all(sections[0], elem("svg"))
	require.Len(t, svgs, 1)
	svg := svgs[0]
	assert.Equal(t, "img", attr(svg, "role"))
	assert.NotEmpty(t, attr(svg, "aria-label"))
	var kinds []string
	for _, g := range all(svg, withClass("g", "bar")) {
		kinds = append(kinds, attr(g, "data-kind"))
		assert.NotEmpty(t, all(g, elem("title")), "bar has a tooltip")
		assert.NotEmpty(t, all(g, elem("rect")))
		assert.NotEmpty(t, all(g, elem("text")), "bar has a label")
	}
	assert.Equal(t, []string{models.KindConflict, models.KindStale, models.KindMismatch, models.KindUnknownStatus,
		models.KindMissingLocal, models.KindBehind}, kinds)
	assert.Contains(t, text(svg), "items", "x axis label")
	assert.Contains(t, text(svg), "drift kind", "y axis label")
	assert.Empty(t, all(sections[1], elem("svg")), "no chart without drift")
}

func TestRenderHTMLItemsNeedingAHumanFirst(t *testing.T) {
	rep := Report{Runs: []RunReport{{ID: 3, Provider: "gocardless", Mode: "test", Items: []Item{
		{ProviderID: "PM1", Kind: models.KindBehind, Action: models.ActionRepaired},
		{ProviderID: "PM2", Kind: models.KindMismatch, Action: models.ActionReported},
		{ProviderID: "PM3", Kind: models.KindBehind, Action: models.ActionRepaired},
		{ProviderID: "PM4", Kind: models.KindConflict, Action: models.ActionRefused},
		{ProviderID: "PM5", Kind: models.KindConflict, Action: models.ActionRepaired},
	}}}}
	before := append([]Item(nil), rep.Runs[0].Items...)
	doc := parse(t, renderHTML(t, rep))
	assert.Equal(t, before, rep.Runs[0].Items, "input not reordered")
	var ids []string
	for _, a := range all(doc, elem("a")) {
		ids = append(ids, text(a))
		assert.True(t, strings.HasPrefix(attr(a, "href"), "https://manage-sandbox.gocardless.com/payments/"), attr(a, "href"))
	}
	assert.Equal(t, []string{"PM4", "PM2", "PM1", "PM3", "PM5"}, ids, "refused, reported, then repaired; stable otherwise")

	// Three kinds, so three bars; conflict is stacked refused then repaired.
	bars := all(doc, withClass("g", "bar"))
	require.Len(t, bars, 3)
	assert.Equal(t, "conflict", attr(bars[0], "data-kind"))
	var segs []string
	for _, r := range all(bars[0], elem("rect")) {
		segs = append(segs, attr(r, "class"))
	}
	assert.Equal(t, []string{"a-refused", "a-repaired"}, segs)
	assert.Equal(t, "mismatch", attr(bars[1], "data-kind"))
	assert.Equal(t, "behind", attr(bars[2], "data-kind"))
	assert.Len(t, all(bars[2], elem("rect")), 1, "two repaired items are one segment")
	assert.Contains(t, text(bars[2]), "behind: 2 (2 repaired)")
}

func TestRenderHTMLAmountsTimesAndDetail(t *testing.T) {
	at := time.Date(2026, 10, 31, 10, 0, 0, 500_000_000, time.FixedZone("CET", 3600))
	rep := Report{Runs: []RunReport{{ID: 9, Provider: "stripe", Account: "acct_9", Mode: "test", Items: []Item{
		{ProviderID: "pi_gbp", Kind: models.KindBehind, Action: models.ActionRepaired, Amount: 1234, Currency: "gbp", AmountRefunded: 500,
			ProviderTime: &at, TimeInferred: true,
			Detail: map[string]any{"email": "jane@example.com", "customer_name": "Jane Doe", "local_amount": 999999, "card_last4": "4242"}},
		{ProviderID: "pi_jpy", Kind: models.KindMismatch, Action: models.ActionReported, Amount: 123456, Currency: "jpy",
			Detail: map[string]any{"local_amount": float64(120000), "local_currency": "jpy", "provider_amount": float64(123456),
				"provider_currency": "jpy", "billing_address": "1 Main Street", "raw": map[string]any{"name": "Jane Doe"}}},
		{ProviderID: "pi_kwd", Kind: models.KindMismatch, Action: models.ActionReported, Amount: 1500, Currency: "kwd",
			Detail: map[string]any{"local_amount": int64(1500), "local_currency": "kwd", "provider_amount": 1500, "provider_currency": "usd"}},
	}}}}
	page := renderHTML(t, rep)
	doc := parse(t, page)
	rows := map[string]map[string]string{}
	for _, it := range items(doc) {
		rows[it["id"]] = it
	}
	require.Len(t, rows, 3)
	assert.Equal(t, "12.34 GBP, refunded 5.00 GBP", rows["pi_gbp"]["amount"])
	assert.Equal(t, "2026-10-31T09:00:00Z (inferred)", rows["pi_gbp"]["time"], "UTC, ISO 8601")
	assert.Equal(t, "123456 JPY", rows["pi_jpy"]["amount"])
	assert.Equal(t, "local 120000 JPY, provider 123456 JPY", rows["pi_jpy"]["mismatch"])
	assert.Equal(t, "—", rows["pi_jpy"]["time"], "no provider time")
	assert.Equal(t, "local 1.500 KWD, provider 15.00 USD", rows["pi_kwd"]["mismatch"])
	assert.NotContains(t, rows["pi_gbp"], "mismatch", "local_amount is shown for mismatch items only")
	assert.NotContains(t, page, "9999.99", "nor anywhere else")
	for _, pii := range []string{"jane", "Jane", "Doe", "Main Street", "4242", "email", "billing"} {
		assert.NotContains(t, page, pii)
	}
	for _, a := range all(doc, elem("a")) {
		assert.True(t, strings.HasPrefix(attr(a, "href"), "https://dashboard.stripe.com/acct_9/test/payments/pi_"), attr(a, "href"))
	}
	assert.Contains(t, text(doc), "modetest")
}

func TestRenderHTMLEmpty(t *testing.T) {
	page := renderHTML(t, Report{})
	assert.Contains(t, page, "<title>Reconciliation report</title>")
	assert.Contains(t, page, "No runs.")
	page = renderHistory(t, nil)
	assert.Contains(t, page, "<title>Reconciliation history</title>")
	assert.Contains(t, page, "No runs.")
	assert.NotContains(t, page, "<svg")
}

func TestRenderHTMLWarningAndDuration(t *testing.T) {
	start := time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC)
	rep := Report{Runs: []RunReport{
		{ID: 1, Provider: "stripe", StartedAt: start, FinishedAt: ptr(start.Add(1500 * time.Millisecond)), DurationSeconds: 1.5,
			Status: "succeeded", Notes: map[string]any{"warning": "clamped to retention", "caught_up_from": "2026-10-01"}},
		{ID: 2, Provider: "stripe", StartedAt: start, Status: "running"},
	}}
	doc := parse(t, renderHTML(t, rep))
	sections := all(doc, elem("section"))
	require.Len(t, sections, 2)
	assert.Contains(t, text(sections[0]), "Warning: clamped to retention")
	assert.NotContains(t, text(sections[0]), "caught_up_from", "only the warning note is shown")
	assert.Contains(t, text(sections[0]), "duration1.5s")
	assert.Contains(t, text(sections[1]), "durationrunning")
}

func TestRenderHistoryHTMLContent(t *testing.T) {
	runs := historyRuns()
	page := renderHistory(t, runs)
	doc := parse(t, page)
	assert.Equal(t, "Reconciliation history: 8 runs", text(all(doc, elem("title"))[0]))

	svgs := all(doc, elem("svg"))
	require.Len(t, svgs, 2)
	for _, svg := range svgs {
		assert.Equal(t, "img", attr(svg, "role"))
		assert.NotEmpty(t, attr(svg, "aria-label"))
		// x labels: run ids, oldest first.
		var ids []string
		for _, tx := range all(svg, elem("text")) {
			if s := text(tx); strings.Contains(s, "#") {
				ids = append(ids, s[strings.Index(s, "#"):])
			}
		}
		assert.Equal(t, []string{"#101", "#102", "#103", "#104", "#105", "#106", "#107", "#108"}, ids)
	}

	// Repaired and refused: one bar per non-zero count, each with a tooltip.
	actions := svgs[0]
	assert.Equal(t, "history-actions", attr(actions, "id"))
	var bars []string
	for _, r := range all(actions, elem("rect")) {
		c := attr(r, "class")
		if hasAttr(r, "class") && (c == "a-repaired" || c == "a-refused") && attr(r, "width") != "12" {
			bars = append(bars, c+":"+text(r))
		}
	}
	assert.Equal(t, []string{
		"a-repaired:run 101: 3 repaired",
		"a-refused:run 102: 1 refused",
		"a-repaired:run 104: 12 repaired", "a-refused:run 104: 2 refused",
		"a-repaired:run 105: 1 repaired",
		"a-repaired:run 107: 5 repaired", "a-refused:run 107: 4 refused",
		"a-repaired:run 108: 2 repaired",
	}, bars)
	assert.Len(t, all(actions, withClass("g", "run")), len(runs), "one hover group per run")
	assert.Contains(t, text(actions), "run 103 failed")
	assert.Contains(t, text(actions), "items")

	// Miss ratio: runs that read no events (103, 106) break the line.
	miss := svgs[1]
	lines := all(miss, elem("polyline"))
	require.Len(t, lines, 3, "101-102, 104-105, 107-108")
	for _, l := range lines {
		assert.Len(t, strings.Fields(attr(l, "points")), 2)
	}
	points := all(miss, elem("circle"))
	assert.Len(t, points, 6)
	assert.Contains(t, text(points[3]), "run 105 (gocardless 2026-10-28T02:00:00Z, succeeded): 1.11% (1 synthetic of 90 events read)")
	assert.Contains(t, text(miss), "no events read")
	assert.Contains(t, text(miss), "webhook miss ratio")
	assert.Contains(t, text(miss), "4.00%", "the highest ratio is labelled")

	// The table is newest first.
	var rowIDs []string
	for _, tr := range all(doc, elem("tr")) {
		if tds := all(tr, elem("td")); len(tds) > 0 {
			rowIDs = append(rowIDs, text(tds[0]))
		}
	}
	assert.Equal(t, []string{"108", "107", "106", "105", "104", "103", "102", "101"}, rowIDs)
	body := text(doc)
	for _, want := range []string{"The run failed before it finished, so this is not a full account of the window: stripe: 401 | invalid API key",
		"dry run", "warning: the window starts before", "OR123", "platform", "api by ops", "1m35s"} {
		assert.Contains(t, body, want)
	}
	// The failed run's ratio was not measured: a dash in the table, no
	// point in the chart.
	for _, tr := range all(doc, elem("tr")) {
		if tds := all(tr, elem("td")); len(tds) > 0 && text(tds[0]) == "103" {
			assert.Equal(t, "—", text(all(tr, func(n *html.Node) bool { return attr(n, "data-label") == "miss ratio" })[0]))
		}
	}
	assert.NotContains(t, text(miss), "run 103 (stripe 2026-10-26T02:00:00Z, failed): 0.00%")
}

// An interrupted run reads as one in the history: a dash for its ratio,
// no point in the chart, the sentence in its notes.
func TestRenderHistoryHTMLInterrupted(t *testing.T) {
	runs := historyRuns()
	runs[6].Status, runs[6].Error = "interrupted", ptr("context canceled")
	doc := parse(t, renderHistory(t, runs))
	assert.Contains(t, text(doc), "The run was interrupted before it finished, so this is not a full account of the window: context canceled")
	assert.Len(t, all(all(doc, elem("svg"))[1], elem("circle")), 5, "run 107 has no point")
	var ratios []string
	for _, td := range all(doc, func(n *html.Node) bool { return attr(n, "data-label") == "miss ratio" }) {
		ratios = append(ratios, text(td))
	}
	assert.Equal(t, []string{"0.48%", "—", "0.00%", "1.11%", "2.20%", "—", "0.00%", "0.75%"}, ratios)
}

func TestNiceMax(t *testing.T) {
	for _, c := range []struct{ v, lo, max, step float64 }{
		{0, 1, 1, 1}, {1, 1, 1, 1}, {3, 1, 5, 1}, {6, 1, 10, 2}, {12, 1, 20, 4}, {100, 1, 100, 20},
	} {
		m, s := niceMax(c.v, c.lo, true)
		assert.Equal(t, c.max, m, "%v", c.v)
		assert.Equal(t, c.step, s, "%v", c.v)
	}
	m, s := niceMax(0.75, 0.1, false)
	assert.Equal(t, 1.0, m)
	assert.InDelta(t, 0.2, s, 1e-12)
	assert.Equal(t, "0.4%", tickLabel(2*s, s, "%"))
	m, _ = niceMax(0, 0.1, false)
	assert.InDelta(t, 0.1, m, 1e-12)
	m, _ = niceMax(4.0, 0.1, false)
	assert.Equal(t, 5.0, m)
}

func TestRenderHTMLOddInputs(t *testing.T) {
	// One run, many runs (x labels thinned), runs with zero times.
	one := renderHistory(t, historyRuns()[:1])
	assert.Equal(t, 1, strings.Count(one, "<circle"))
	assert.NotContains(t, one, "<polyline", "one point is no line")
	var many []RunReport
	for i := 0; i < 40; i++ {
		r := historyRuns()[i%8]
		r.ID = int64(1000 + i)
		r.StartedAt = r.StartedAt.AddDate(0, 0, 8*(i/8))
		many = append(many, r)
	}
	many = append(many, RunReport{ID: 2000, Provider: "stripe", Status: "running"})
	page := renderHistory(t, many)
	assertSelfContained(t, page)
	doc := parse(t, page)
	labels := 0
	for _, tx := range all(all(doc, elem("svg"))[0], elem("text")) {
		if strings.Contains(text(tx), "#") {
			labels++
		}
	}
	assert.LessOrEqual(t, labels, 15, "x labels are thinned")
	rows := all(doc, elem("tr"))
	assert.Equal(t, "1039", text(all(rows[1], elem("td"))[0]), "newest first in the table")
	assert.Equal(t, "2000", text(all(rows[len(rows)-1], elem("td"))[0]), "a run without a start time counts as the oldest")

	// Unknown kinds and actions get a neutral bar and badge.
	rep := Report{Runs: []RunReport{{ID: 1, Items: []Item{{ProviderID: "x1", Kind: "new_kind", Action: "", Explanation: ""}}}}}
	doc = parse(t, renderHTML(t, rep))
	bars := all(doc, withClass("g", "bar"))
	require.Len(t, bars, 1)
	assert.Equal(t, "new_kind", attr(bars[0], "data-kind"))
	assert.Equal(t, "a-other", attr(all(bars[0], elem("rect"))[0], "class"))
	assert.Len(t, all(doc, withClass("span", "a-other")), 1)
	assert.Empty(t, all(doc, elem("a")), "no dashboard for an unknown provider")
}

// items returns the report items under n, each as its id, explanation,
// amount, mismatch, time and fingerprint texts.
func items(n *html.Node) []map[string]string {
	var out []map[string]string
	for _, li := range all(n, withClass("li", "item")) {
		m := map[string]string{"id": text(all(li, withClass("span", "pay"))[0])}
		for _, k := range []struct{ tag, class, key string }{{"p", "expl", "expl"}, {"dd", "amount", "amount"}, {"dd", "mismatch", "mismatch"},
			{"dd", "time", "time"}, {"code", "fp", "fingerprint"}, {"dd", "states", "states"}, {"p", "ack", "ack"}} {
			if found := all(li, withClass(k.tag, k.class)); len(found) > 0 {
				m[k.key] = text(found[0])
			}
		}
		out = append(out, m)
	}
	return out
}
