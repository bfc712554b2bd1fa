package report

import (
	"bytes"
	"fmt"
	"html/template"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/reconciler/reconciler/models"
)

// RenderHTML writes rep as one self-contained HTML page (no external assets,
// no scripts): inline CSS, a summary per run, an inline-SVG chart of the
// drift by kind (stacked by action), and the items as lists: those needing
// a human first (new since the last run, still open, acknowledged), each
// with its fingerprint, then the repaired ones. Each item's explanation is
// a paragraph of its own under its facts, so that nothing scrolls sideways
// at 1280 px or on a phone (the Chromium test measures it).
//
// Everything goes through html/template, so explanations, ids and errors are
// escaped, and a Content-Security-Policy meta tag forbids scripts and any
// fetch (only the inline style is allowed). Detail values are never shown except the amounts and currencies
// of mismatch items (local_amount, local_currency, provider_amount,
// provider_currency). Nothing on the page depends on the time of rendering.
func RenderHTML(w io.Writer, rep Report) error {
	rep = withLinks(rep)
	p := htmlPage{Title: reportTitle(rep), Kinds: kindGlossary, AckHint: AckHint}
	for _, r := range rep.Runs {
		v := runView(r)
		p.Hint = p.Hint || v.NeedHuman > 0
		p.Runs = append(p.Runs, v)
	}
	return execute(w, "report", p)
}

// RenderHistoryHTML writes runs as one page: inline-SVG charts of repaired
// and refused items per run and of the webhook miss ratio per run (oldest
// run first, by start time then id), and a table of the runs (newest first).
// Items are not shown.
func RenderHistoryHTML(w io.Writer, runs []RunReport) error {
	sorted := append([]RunReport(nil), runs...)
	sort.SliceStable(sorted, func(i, j int) bool {
		a, b := sorted[i], sorted[j]
		if !a.StartedAt.Equal(b.StartedAt) {
			return a.StartedAt.Before(b.StartedAt)
		}
		return a.ID < b.ID
	})
	h := historyPage{Title: "Reconciliation history", Count: len(sorted)}
	if len(sorted) > 0 {
		h.Title = fmt.Sprintf("Reconciliation history: %d %s", len(sorted), plural(len(sorted), "run", "runs"))
		h.From = isoTime(sorted[0].StartedAt)
		h.To = isoTime(sorted[len(sorted)-1].StartedAt)
		h.Actions = actionsChart(sorted)
		h.Miss = missChart(sorted)
	}
	for i := len(sorted) - 1; i >= 0; i-- {
		h.Rows = append(h.Rows, runView(sorted[i]))
	}
	return execute(w, "history", h)
}

// execute renders into a buffer first so that a failing template writes
// nothing.
func execute(w io.Writer, name string, data any) error {
	var buf bytes.Buffer
	if err := pages.ExecuteTemplate(&buf, name, data); err != nil {
		return fmt.Errorf("render html %s: %w", name, err)
	}
	_, err := w.Write(buf.Bytes())
	return err
}

func reportTitle(rep Report) string {
	switch len(rep.Runs) {
	case 0:
		return "Reconciliation report"
	case 1:
		return fmt.Sprintf("Reconciliation report: run %d", rep.Runs[0].ID)
	}
	ids := make([]string, len(rep.Runs))
	for i, r := range rep.Runs {
		ids[i] = strconv.FormatInt(r.ID, 10)
	}
	return "Reconciliation report: runs " + strings.Join(ids, ", ")
}

// kindOrder is the order of drift kinds in charts; kinds not listed follow,
// sorted by name.
var kindOrder = []string{models.KindConflict, models.KindStale, models.KindMismatch, models.KindUnknownStatus,
	models.KindDispute, models.KindMissingLocal, models.KindBehind}

// actionOrder is the stacking order of actions: those needing a human first.
var actionOrder = []string{models.ActionRefused, models.ActionReported, models.ActionRepaired, models.ActionDelivered}

type glossaryEntry struct{ Kind, Action, Meaning string }

var kindGlossary = []glossaryEntry{
	{models.KindMissingLocal, models.ActionRepaired, "the provider has the payment, we had no row; it was created at the provider's latest state"},
	{models.KindBehind, models.ActionRepaired, "our row was behind the provider (a webhook was missed); the state or refunded amount was moved forward"},
	{models.KindConflict, models.ActionRefused, "the provider's state cannot follow ours, or the provider reverted something; nothing was changed"},
	{models.KindStale, models.ActionRefused, "our row was set by a newer fact than the provider's; nothing was changed"},
	{models.KindMismatch, models.ActionReported, "amount or currency differ; the amount was never changed"},
	{models.KindUnknownStatus, models.ActionReported, "a provider status we do not know; never guessed"},
	{models.KindDispute, models.ActionReported, "the customer's bank disputes the payment (funds may be withdrawn); the state changes only if the dispute is lost"},
}

type htmlPage struct {
	Title string
	Runs  []htmlRun
	Kinds []glossaryEntry
	// Hint says to show AckHint: some run has an item needing a human.
	Hint    bool
	AckHint string
}

type historyPage struct {
	Title, From, To string
	Count           int
	Actions, Miss   *svgChart
	Rows            []htmlRun
}

type htmlRun struct {
	ID                                     int64
	Anchor                                 string
	Provider, Account, Window, Started     string
	Trigger, Status, StatusClass, Duration string
	Mode, Error, Warning, MissRatio        string
	ReadBy                                 string
	// Incomplete is the sentence of a failed or interrupted run.
	Incomplete                           string
	DryRun                               bool
	Examined, InSync, Repaired, Refused  int64
	Reported, Synthetic, EventsRead, API int64
	NeedHuman                            int
	Triage                               *Triage
	TriageLine                           string
	Omitted                              int64
	RepairedLabel, OmittedPhrase         string
	Groups                               []htmlGroup
	Chart                                *svgChart
	Totals                               *htmlTotals
}

// htmlGroup is one section of a run's items (groupItems).
type htmlGroup struct {
	Anchor, Key, Title, Intro string
	Human                     bool
	Items                     []htmlItem
}

// htmlTotals are a run's money totals, formatted.
type htmlTotals struct {
	Flag, Scope, ProviderNote string
	Rows                      []htmlCurrency
}

type htmlCurrency struct {
	Currency, Side, Captured, Refunded, Disputed, Settled string
	Payments                                              int64
}

func totalsView(t *Totals) *htmlTotals {
	if t == nil {
		return nil
	}
	v := &htmlTotals{Flag: t.Flag, Scope: t.Scope, ProviderNote: t.ProviderNote}
	if t.Measured {
		v.ProviderNote = ""
	}
	for _, c := range t.Lines() {
		m := c.format()
		v.Rows = append(v.Rows, htmlCurrency{Currency: strings.ToUpper(c.Currency), Side: sideLabel(c.Side), Payments: c.Payments, Captured: m(c.Captured, c.Currency),
			Refunded: m(c.Refunded, c.Currency), Disputed: m(c.Disputed, c.Currency), Settled: m(c.Settled, c.Currency)})
	}
	return v
}

type htmlItem struct {
	ID, URL, Kind, Action, ActionClass string
	Local, Provider                    string
	Amount, Refunded                   string
	// Mismatch is both amounts of a mismatch item (mismatchAmounts).
	Mismatch             string
	Time                 string
	Inferred, NeedsHuman bool
	Explanation          string
	Fingerprint, Ack     string
}

func runView(r RunReport) htmlRun {
	v := htmlRun{
		ID: r.ID, Anchor: fmt.Sprintf("run-%d", r.ID), Provider: orDash(r.Provider), Account: r.Account, Omitted: r.ItemsOmitted,
		Window:  isoTime(r.WindowStart) + " → " + isoTime(r.WindowEnd),
		Started: isoTime(r.StartedAt), Status: orDash(r.Status), StatusClass: statusClass(r.Status),
		Duration: duration(r), Mode: r.Mode, DryRun: r.DryRun,
		Examined: r.Examined, InSync: r.InSync, Repaired: r.Repaired, Refused: r.Refused, Reported: r.Reported,
		Synthetic: r.SyntheticEvents, EventsRead: r.EventsRead, API: r.APIRequests,
		MissRatio:     missRatio(r),
		RepairedLabel: actionLabel(models.ActionRepaired, r.DryRun), OmittedPhrase: repairedPhrase(r.DryRun),
		Totals: totalsView(r.Totals), Incomplete: incomplete(r), Triage: r.Triage, TriageLine: triageLine(r.Triage),
	}
	if v.Account == "" {
		v.Account = "platform"
	}
	if v.Mode == "" {
		v.Mode = "unknown"
	}
	v.Trigger = strings.TrimSpace(r.Trigger)
	if r.TriggeredBy != "" {
		v.Trigger = strings.TrimSpace(v.Trigger + " by " + r.TriggeredBy)
	}
	v.Trigger = orDash(v.Trigger)
	if r.Error != nil {
		v.Error = *r.Error
	}
	if wn, ok := r.Notes["warning"].(string); ok {
		v.Warning = wn
	}
	v.ReadBy = ReadBy(r.Notes)
	for _, g := range groupItems(r) {
		hg := htmlGroup{Anchor: fmt.Sprintf("run-%d-%s", r.ID, g.Key), Key: g.Key, Title: g.Title, Intro: g.Intro, Human: g.Human()}
		for _, it := range g.Items {
			hg.Items = append(hg.Items, itemView(r, it))
		}
		if hg.Human {
			v.NeedHuman += len(hg.Items)
		}
		v.Groups = append(v.Groups, hg)
	}
	if len(r.Items) > 0 {
		v.Chart = kindChart(r.ID, r.Items)
	}
	return v
}

func itemView(r RunReport, it Item) htmlItem {
	v := htmlItem{ID: it.ProviderID, Kind: orDash(it.Kind), Action: orDash(it.ActionLabel()), ActionClass: actionClass(it.Action),
		Local: orDash(str(it.LocalState)), Provider: orDash(str(it.ProviderState)), Explanation: it.Explanation,
		NeedsHuman: it.NeedsHuman(), Inferred: it.TimeInferred, Amount: "—", Time: "—", Mismatch: mismatchAmounts(it)}
	if v.NeedsHuman {
		v.Fingerprint, v.Ack = it.Fingerprint, ackLine(it)
	}
	v.URL = it.DashboardURL
	if v.URL == "" {
		v.URL = DashboardURL(r.Provider, r.Mode, r.Account, it.ProviderID)
	}
	if !strings.HasPrefix(v.URL, "https://") {
		v.URL = ""
	}
	if it.Amount != 0 || it.Currency != "" {
		v.Amount = money(it.Amount, it.Currency)
	}
	if it.AmountRefunded > 0 {
		v.Refunded = money(it.AmountRefunded, it.Currency)
	}
	if it.ProviderTime != nil {
		v.Time = isoTime(*it.ProviderTime)
	}
	return v
}

// detailAmount reads only <side>_amount and <side>_currency from a
// mismatch item's detail: a number is minor units, a string is shown as is.
func detailAmount(d map[string]any, side string) string {
	cur, _ := d[side+"_currency"].(string)
	var amt string
	switch a := d[side+"_amount"].(type) {
	case string:
		amt = a
	case float64:
		if a == math.Trunc(a) && math.Abs(a) < 1<<53 {
			amt = MajorUnits(int64(a), cur)
		}
	case int64:
		amt = MajorUnits(a, cur)
	case int:
		amt = MajorUnits(int64(a), cur)
	}
	return strings.TrimSpace(amt + " " + strings.ToUpper(cur))
}

func money(minor int64, currency string) string {
	return strings.TrimSpace(MajorUnits(minor, currency) + " " + strings.ToUpper(currency))
}

func isoTime(t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	return t.UTC().Format(time.RFC3339)
}

func percent(ratio float64) string { return fmt.Sprintf("%.2f%%", 100*ratio) }

func duration(r RunReport) string {
	if r.FinishedAt == nil {
		if r.Status == "running" {
			return "running"
		}
		return "—"
	}
	d := time.Duration(r.DurationSeconds * float64(time.Second))
	if r.DurationSeconds == 0 {
		d = r.FinishedAt.Sub(r.StartedAt)
	}
	if d < 10*time.Second {
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

func statusClass(s string) string {
	switch s {
	case "succeeded":
		return "ok"
	case "failed":
		return "bad"
	}
	return "neutral"
}

func actionClass(a string) string {
	switch a {
	case models.ActionRefused, models.ActionReported, models.ActionRepaired:
		return "a-" + a
	}
	return "a-other"
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// svgChart is a chart laid out in Go; the template only places elements.
// All coordinates are preformatted so output is byte-for-byte stable.
type svgChart struct {
	ID, Label, Caption string
	W, H               int
	Legend             []svgLegend
	Axes               []svgLine
	Ticks              []svgText
	Texts              []svgText
	Bars               []svgBar
	Groups             []svgGroup
	Lines              []string // polyline points
	Points             []svgPoint
}

type svgLegend struct {
	X, TX, Y, TY, Class, Label string
}

type svgLine struct{ X1, Y1, X2, Y2, Class string }

type svgText struct {
	X, Y, Anchor, Class, Text, Transform, Title string
}

type svgRect struct {
	X, Y, W, H, Class, Title string
}

// svgBar is one bar of the kind chart: one per drift kind, its segments one
// per action.
type svgBar struct {
	Kind, Title string
	Label       svgText
	Segs        []svgRect
	Value       svgText
}

// svgGroup is one run of a history chart: a hover area and its bars.
type svgGroup struct {
	Hit  svgRect
	Bars []svgRect
	Text []svgText
}

type svgPoint struct{ CX, CY, Title string }

func f1(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }

// niceMax rounds v up to 1, 2 or 5 times a power of ten (at least lo) and
// returns it with a tick step giving at most 6 ticks.
func niceMax(v, lo float64, integer bool) (max, step float64) {
	if v < lo {
		v = lo
	}
	e := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*e >= v*(1-1e-12) {
			max = m * e
			break
		}
	}
	if integer && max <= 5 {
		return max, 1
	}
	return max, max / 5
}

func tickLabel(v, step float64, suffix string) string {
	dec := 0
	if step < 1 {
		dec = int(math.Ceil(-math.Log10(step) - 1e-9))
	}
	return strconv.FormatFloat(v, 'f', dec, 64) + suffix
}

// kindChart draws one horizontal bar per drift kind present, its segments
// stacked by action (refused, reported, repaired, then any other, by name).
func kindChart(runID int64, items []Item) *svgChart {
	counts := map[string]map[string]int{}
	var actions []string
	seenAction := map[string]bool{}
	for _, it := range items {
		if counts[it.Kind] == nil {
			counts[it.Kind] = map[string]int{}
		}
		counts[it.Kind][it.Action]++
		if !seenAction[it.Action] {
			seenAction[it.Action] = true
			actions = append(actions, it.Action)
		}
	}
	kinds := make([]string, 0, len(counts))
	for k := range counts {
		kinds = append(kinds, k)
	}
	sortBy(kinds, kindOrder)
	sortBy(actions, actionOrder)

	const (
		W, L, R, T, BH, gap, B = 640, 140, 48, 44, 22, 10, 44
	)
	maxTotal := 0
	for _, k := range kinds {
		n := 0
		for _, c := range counts[k] {
			n += c
		}
		maxTotal = max(maxTotal, n)
	}
	top, step := niceMax(float64(maxTotal), 1, true)
	plotW := float64(W - L - R)
	scale := plotW / top
	H := T + len(kinds)*(BH+gap) - gap + B
	c := &svgChart{ID: fmt.Sprintf("kinds-%d", runID), W: W, H: H, Caption: "Drift by kind"}
	var desc []string
	for i, k := range kinds {
		y := float64(T + i*(BH+gap))
		x := float64(L)
		bar := svgBar{Kind: k, Label: svgText{X: strconv.Itoa(L - 8), Y: f1(y + BH/2 + 4), Anchor: "end", Class: "lbl", Text: k}}
		var parts []string
		total := 0
		for _, a := range actions {
			n := counts[k][a]
			if n == 0 {
				continue
			}
			total += n
			w := float64(n) * scale
			bar.Segs = append(bar.Segs, svgRect{X: f1(x), Y: f1(y), W: f1(w), H: strconv.Itoa(BH), Class: actionClass(a),
				Title: fmt.Sprintf("%s, %s: %d", k, orDash(a), n)})
			x += w
			parts = append(parts, fmt.Sprintf("%d %s", n, orDash(a)))
		}
		bar.Title = fmt.Sprintf("%s: %d (%s)", k, total, strings.Join(parts, ", "))
		bar.Value = svgText{X: f1(x + 6), Y: f1(y + BH/2 + 4), Anchor: "start", Class: "val", Text: strconv.Itoa(total)}
		c.Bars = append(c.Bars, bar)
		desc = append(desc, bar.Title)
	}
	c.Label = fmt.Sprintf("Drift by kind for run %d, stacked by action: %s.", runID, strings.Join(desc, "; "))
	// x axis with ticks and its label; the kind names are the y axis.
	base := float64(H - B + 6)
	c.Axes = append(c.Axes, svgLine{X1: strconv.Itoa(L), Y1: f1(float64(T) - 4), X2: strconv.Itoa(L), Y2: f1(base), Class: "axis"},
		svgLine{X1: strconv.Itoa(L), Y1: f1(base), X2: strconv.Itoa(W - R), Y2: f1(base), Class: "axis"})
	for v := 0.0; v <= top+step/2; v += step {
		x := float64(L) + v*scale
		c.Axes = append(c.Axes, svgLine{X1: f1(x), Y1: f1(base), X2: f1(x), Y2: f1(base + 4), Class: "axis"})
		c.Ticks = append(c.Ticks, svgText{X: f1(x), Y: f1(base + 16), Anchor: "middle", Class: "tick", Text: tickLabel(v, step, "")})
	}
	c.Texts = append(c.Texts,
		svgText{X: f1(float64(L) + plotW/2), Y: strconv.Itoa(H - 4), Anchor: "middle", Class: "axlbl", Text: "items"},
		svgText{X: strconv.Itoa(L - 8), Y: "16", Anchor: "end", Class: "axlbl", Text: "drift kind"})
	c.Legend = legend(actions, L, 16)
	return c
}

// legend lays out one swatch per action in a row starting at x.
func legend(actions []string, x, y int) []svgLegend {
	var out []svgLegend
	for _, a := range actions {
		label := orDash(a)
		out = append(out, svgLegend{X: strconv.Itoa(x), Y: strconv.Itoa(y - 10), TX: strconv.Itoa(x + 16), TY: strconv.Itoa(y),
			Class: actionClass(a), Label: label})
		x += 16 + 8*len([]rune(label)) + 18
	}
	return out
}

// sortBy sorts s by its index in order; values not in order follow, by name.
func sortBy(s []string, order []string) {
	rank := func(v string) int {
		for i, o := range order {
			if o == v {
				return i
			}
		}
		return len(order)
	}
	sort.SliceStable(s, func(i, j int) bool {
		ri, rj := rank(s[i]), rank(s[j])
		if ri != rj {
			return ri < rj
		}
		return s[i] < s[j]
	})
}

// history chart layout: plot area inside margins.
const (
	hW, hL, hR, hT, hPH, hB = 640, 56, 16, 40, 170, 62
)

func runDate(r RunReport) string {
	if r.StartedAt.IsZero() {
		return "—"
	}
	return r.StartedAt.UTC().Format("01-02")
}

func runName(r RunReport) string {
	return fmt.Sprintf("run %d (%s %s, %s)", r.ID, orDash(r.Provider), isoTime(r.StartedAt), orDash(r.Status))
}

// historyFrame draws axes, y ticks and labels and x labels (every k-th run
// when there are many) shared by the history charts; it returns the x
// centre of each run and the scale.
func historyFrame(c *svgChart, runs []RunReport, top, step float64, suffix, yLabel string) (centres []float64, y func(float64) float64) {
	plotW := float64(hW - hL - hR)
	base := float64(hT + hPH)
	y = func(v float64) float64 { return base - v/top*hPH }
	c.Axes = append(c.Axes, svgLine{X1: strconv.Itoa(hL), Y1: strconv.Itoa(hT - 6), X2: strconv.Itoa(hL), Y2: f1(base), Class: "axis"},
		svgLine{X1: strconv.Itoa(hL), Y1: f1(base), X2: strconv.Itoa(hW - hR), Y2: f1(base), Class: "axis"})
	for v := 0.0; v <= top+step/2; v += step {
		c.Axes = append(c.Axes, svgLine{X1: strconv.Itoa(hL), Y1: f1(y(v)), X2: strconv.Itoa(hW - hR), Y2: f1(y(v)), Class: "grid"})
		c.Ticks = append(c.Ticks, svgText{X: strconv.Itoa(hL - 6), Y: f1(y(v) + 4), Anchor: "end", Class: "tick", Text: tickLabel(v, step, suffix)})
	}
	every := (len(runs) + 11) / 12
	gw := plotW / float64(len(runs))
	for i, r := range runs {
		cx := float64(hL) + gw*(float64(i)+0.5)
		centres = append(centres, cx)
		if i%every != 0 && i != len(runs)-1 {
			continue
		}
		cls := "tick"
		if !measured(r) {
			cls = "tick failed"
		}
		c.Texts = append(c.Texts,
			svgText{X: f1(cx), Y: f1(base + 16), Anchor: "middle", Class: cls, Text: "#" + strconv.FormatInt(r.ID, 10), Title: runName(r)},
			svgText{X: f1(cx), Y: f1(base + 30), Anchor: "middle", Class: "tick", Text: runDate(r), Title: runName(r)})
	}
	c.Texts = append(c.Texts,
		svgText{X: f1(float64(hL) + plotW/2), Y: strconv.Itoa(hT + hPH + hB - 6), Anchor: "middle", Class: "axlbl", Text: "run (id, start date UTC), oldest first"},
		svgText{X: "14", Y: f1(float64(hT) + hPH/2), Anchor: "middle", Class: "axlbl", Text: yLabel,
			Transform: fmt.Sprintf("rotate(-90 14 %s)", f1(float64(hT)+hPH/2))})
	return centres, y
}

// actionsChart draws repaired and refused items per run, grouped.
func actionsChart(runs []RunReport) *svgChart {
	var most int64
	for _, r := range runs {
		most = max(most, r.Repaired, r.Refused)
	}
	top, step := niceMax(float64(most), 1, true)
	c := &svgChart{ID: "history-actions", W: hW, H: hT + hPH + hB, Caption: "Repaired and refused items per run"}
	centres, y := historyFrame(c, runs, top, step, "", "items")
	gw := float64(hW-hL-hR) / float64(len(runs))
	bw := math.Min(18, gw*0.36)
	labels := len(runs) <= 16
	var desc []string
	for i, r := range runs {
		cx := centres[i]
		g := svgGroup{Hit: svgRect{X: f1(cx - gw/2), Y: strconv.Itoa(hT), W: f1(gw), H: strconv.Itoa(hPH), Class: "hit",
			Title: fmt.Sprintf("%s: %d repaired, %d refused, %d reported", runName(r), r.Repaired, r.Refused, r.Reported)}}
		for j, s := range []struct {
			n      int64
			action string
		}{{r.Repaired, models.ActionRepaired}, {r.Refused, models.ActionRefused}} {
			x := cx - bw + float64(j)*bw
			if s.n > 0 {
				g.Bars = append(g.Bars, svgRect{X: f1(x), Y: f1(y(float64(s.n))), W: f1(bw - 1), H: f1(y(0) - y(float64(s.n))),
					Class: actionClass(s.action), Title: fmt.Sprintf("run %d: %d %s", r.ID, s.n, s.action)})
				if labels {
					g.Text = append(g.Text, svgText{X: f1(x + bw/2 - 0.5), Y: f1(y(float64(s.n)) - 3), Anchor: "middle", Class: "val small", Text: strconv.FormatInt(s.n, 10)})
				}
			}
		}
		if !measured(r) {
			g.Text = append(g.Text, svgText{X: f1(cx), Y: f1(y(0) - 4), Anchor: "middle", Class: "val failed", Text: "✕", Title: fmt.Sprintf("run %d %s", r.ID, r.Status)})
		}
		c.Groups = append(c.Groups, g)
		desc = append(desc, fmt.Sprintf("run %d: %d repaired, %d refused", r.ID, r.Repaired, r.Refused))
	}
	c.Label = fmt.Sprintf("Repaired and refused items per run, oldest first: %s.", strings.Join(desc, "; "))
	c.Legend = legend([]string{models.ActionRepaired, models.ActionRefused}, hL, 18)
	return c
}

// missChart draws the webhook miss ratio per run as a line; runs that read
// no events, or did not finish, have no ratio and break the line.
func missChart(runs []RunReport) *svgChart {
	most := 0.0
	for _, r := range runs {
		if measured(r) {
			most = math.Max(most, 100*r.WebhookMissRatio)
		}
	}
	top, step := niceMax(most, 0.1, false)
	c := &svgChart{ID: "history-miss", W: hW, H: hT + hPH + hB, Caption: "Webhook miss ratio per run"}
	centres, y := historyFrame(c, runs, top, step, "%", "webhook miss ratio")
	labels := len(runs) <= 16
	var seg, desc []string
	flush := func() {
		if len(seg) > 1 {
			c.Lines = append(c.Lines, strings.Join(seg, " "))
		}
		seg = nil
	}
	for i, r := range runs {
		if r.EventsRead == 0 || !measured(r) {
			why := "no events read"
			if !measured(r) {
				why = "not measured, the run did not finish"
			}
			flush()
			desc = append(desc, fmt.Sprintf("run %d: %s", r.ID, why))
			c.Texts = append(c.Texts, svgText{X: f1(centres[i]), Y: f1(y(0) - 4), Anchor: "middle", Class: "val small muted", Text: "n/a",
				Title: fmt.Sprintf("%s: %s, no ratio", runName(r), why)})
			continue
		}
		v := 100 * r.WebhookMissRatio
		px, py := f1(centres[i]), f1(y(v))
		seg = append(seg, px+","+py)
		c.Points = append(c.Points, svgPoint{CX: px, CY: py, Title: fmt.Sprintf("%s: %s (%d synthetic of %d events read)",
			runName(r), percent(r.WebhookMissRatio), r.SyntheticEvents, r.EventsRead)})
		if labels {
			c.Texts = append(c.Texts, svgText{X: px, Y: f1(y(v) - 8), Anchor: "middle", Class: "val small", Text: percent(r.WebhookMissRatio)})
		}
		desc = append(desc, fmt.Sprintf("run %d: %s", r.ID, percent(r.WebhookMissRatio)))
	}
	flush()
	c.Label = fmt.Sprintf("Webhook miss ratio per run, oldest first: %s.", strings.Join(desc, "; "))
	return c
}

var pages = template.Must(template.New("pages").Parse(pageTemplates))

const pageTemplates = `
{{- define "head" -}}
<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="color-scheme" content="light dark">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'">
<meta name="referrer" content="no-referrer">
<title>{{.Title}}</title>
<style>
:root {
  --bg: #ffffff; --fg: #1b1f24; --muted: #57606a; --line: #d0d7de; --panel: #f6f8fa;
  --refused: #c62828; --refused-bg: #fdecea; --reported: #a15c00; --reported-bg: #fff4e0;
  --repaired: #2e7d32; --repaired-bg: #e8f5e9; --other: #6e7781; --link: #0b5cad; --line-chart: #0b5cad;
}
@media (prefers-color-scheme: dark) {
  :root {
    --bg: #0d1117; --fg: #e6edf3; --muted: #9198a1; --line: #30363d; --panel: #161b22;
    --refused: #ff7b72; --refused-bg: #3d1414; --reported: #e3b341; --reported-bg: #3a2a06;
    --repaired: #56d364; --repaired-bg: #0f2e17; --other: #9198a1; --link: #58a6ff; --line-chart: #58a6ff;
  }
}
* { box-sizing: border-box; }
body { margin: 0 auto; padding: 1rem; max-width: 90rem; background: var(--bg); color: var(--fg);
  font: 15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; }
h1 { font-size: 1.5rem; margin: 0.5rem 0 1rem; }
h2 { font-size: 1.2rem; margin: 2rem 0 0.5rem; padding-top: 1rem; border-top: 1px solid var(--line); }
h3 { font-size: 1rem; margin: 1.25rem 0 0.5rem; }
a { color: var(--link); }
code, .mono { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 0.9em; }
.muted { color: var(--muted); }
.banner { border: 1px solid; border-left-width: 6px; border-radius: 6px; padding: 0.5rem 0.75rem; margin: 0.5rem 0; white-space: pre-wrap; overflow-wrap: anywhere; }
.banner.dry { border-color: var(--reported); background: var(--reported-bg); }
.banner.error { border-color: var(--refused); background: var(--refused-bg); }
.banner.warning { border-color: var(--reported); background: var(--reported-bg); }
.banner.human { border-color: var(--refused); background: var(--refused-bg); }
.banner.hint { border-color: var(--line); background: var(--panel); }
.facts { display: grid; grid-template-columns: max-content 1fr; gap: 0.15rem 1rem; margin: 0.5rem 0; }
.facts dt { color: var(--muted); }
.facts dd { margin: 0; overflow-wrap: anywhere; }
.stats { display: grid; grid-template-columns: repeat(auto-fill, minmax(8.5rem, 1fr)); gap: 0.5rem; margin: 0.75rem 0; padding: 0; list-style: none; }
.stats li { background: var(--panel); border: 1px solid var(--line); border-radius: 6px; padding: 0.4rem 0.6rem; }
.stats .n { display: block; font-size: 1.25rem; font-weight: 600; font-variant-numeric: tabular-nums; }
.stats .k { color: var(--muted); font-size: 0.85rem; }
.stats li.refused .n { color: var(--refused); }
.stats li.reported .n { color: var(--reported); }
.stats li.repaired .n { color: var(--repaired); }
.stats li.new .n { color: var(--refused); }
.badge { display: inline-block; padding: 0.05rem 0.5rem; border-radius: 999px; font-size: 0.85em; font-weight: 600; border: 1px solid; white-space: nowrap; }
.badge.a-refused { color: #fff; background: var(--refused); border-color: var(--refused); text-transform: uppercase; letter-spacing: 0.03em; }
.badge.a-reported { color: #000; background: var(--reported); border-color: var(--reported); text-transform: uppercase; letter-spacing: 0.03em; }
.badge.a-repaired { color: var(--repaired); background: transparent; border-color: var(--repaired); font-weight: 500; }
.badge.a-other { color: var(--other); border-color: var(--other); }
.badge.ok { color: var(--repaired); border-color: var(--repaired); }
.badge.bad { color: #fff; background: var(--refused); border-color: var(--refused); }
.badge.neutral { color: var(--muted); border-color: var(--line); }
.badge.mode-live { color: var(--fg); border-color: var(--fg); }
.badge.mode-test, .badge.mode-unknown { color: var(--muted); border-color: var(--line); }
.table-wrap { overflow-x: auto; -webkit-overflow-scrolling: touch; border: 1px solid var(--line); border-radius: 6px; }
table { border-collapse: collapse; width: 100%; }
th, td { text-align: left; vertical-align: top; padding: 0.4rem 0.6rem; border-bottom: 1px solid var(--line); }
th { background: var(--panel); font-weight: 600; white-space: nowrap; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.nowrap, span.nowrap { white-space: nowrap; }
.incomplete { color: var(--refused); }
td.notes { overflow-wrap: anywhere; }
td.wrap { overflow-wrap: anywhere; }
tr.human td:first-child { box-shadow: inset 4px 0 0 var(--refused); }
.group { margin: 1rem 0; }
.group h3 .count { color: var(--muted); font-weight: 400; }
.group > p { margin: 0.25rem 0 0.5rem; }
ol.items { list-style: none; margin: 0.5rem 0; padding: 0; border: 1px solid var(--line); border-radius: 6px; }
li.item { padding: 0.6rem 0.75rem; border-bottom: 1px solid var(--line); min-width: 0; }
li.item:last-child { border-bottom: 0; }
li.item.human { box-shadow: inset 4px 0 0 var(--refused); }
.g-acknowledged li.item.human { box-shadow: inset 4px 0 0 var(--repaired); }
.item-head { display: flex; flex-wrap: wrap; gap: 0.25rem 0.75rem; align-items: baseline; margin: 0; font-size: 1rem; font-weight: 400; }
.item-head .pay { font-weight: 600; overflow-wrap: anywhere; min-width: 0; }
dl.item-facts { display: flex; flex-wrap: wrap; gap: 0.1rem 1.5rem; margin: 0.3rem 0 0; }
dl.item-facts > div { min-width: 0; max-width: 100%; }
dl.item-facts dt { display: inline; color: var(--muted); font-size: 0.85em; }
dl.item-facts dt::after { content: ":"; }
dl.item-facts dd { display: inline; margin: 0 0 0 0.3rem; overflow-wrap: anywhere; font-variant-numeric: tabular-nums; }
code.fp { user-select: all; -webkit-user-select: all; padding: 0 0.25rem; border: 1px solid var(--line); border-radius: 4px; background: var(--panel); }
p.expl { margin: 0.4rem 0 0; max-width: 80ch; overflow-wrap: anywhere; }
p.ack { margin: 0.3rem 0 0; padding-left: 0.6rem; border-left: 3px solid var(--repaired); color: var(--muted); overflow-wrap: anywhere; }
tbody tr:last-child td { border-bottom: 0; }
.sub { display: block; color: var(--muted); font-size: 0.85em; }
figure { margin: 0.75rem 0; overflow-x: auto; }
figcaption { font-weight: 600; margin-bottom: 0.25rem; }
svg.chart { width: 100%; min-width: 21rem; max-width: 640px; height: auto; display: block; }
svg.chart text { fill: var(--fg); font: 12px system-ui, -apple-system, "Segoe UI", Roboto, Arial, sans-serif; }
svg.chart text.tick, svg.chart text.muted { fill: var(--muted); font-size: 11px; }
svg.chart text.small { font-size: 10px; }
svg.chart text.axlbl { fill: var(--muted); font-style: italic; }
svg.chart text.val { font-weight: 600; }
svg.chart text.failed { fill: var(--refused); font-weight: 700; }
svg.chart .axis { stroke: var(--muted); stroke-width: 1; }
svg.chart .grid { stroke: var(--line); stroke-width: 1; stroke-dasharray: 2 3; }
svg.chart rect.a-refused { fill: var(--refused); }
svg.chart rect.a-reported { fill: var(--reported); }
svg.chart rect.a-repaired { fill: var(--repaired); }
svg.chart rect.a-other { fill: var(--other); }
svg.chart rect.hit { fill: transparent; }
svg.chart rect.hit:hover { fill: var(--panel); }
svg.chart polyline { fill: none; stroke: var(--line-chart); stroke-width: 2; }
svg.chart circle { fill: var(--bg); stroke: var(--line-chart); stroke-width: 2; }
details { margin: 1rem 0; }
summary { cursor: pointer; color: var(--muted); }
footer { margin-top: 2rem; color: var(--muted); font-size: 0.85rem; }
@media (max-width: 48rem) {
  body { padding: 0.5rem; font-size: 14px; }
  .facts { grid-template-columns: 1fr; }
  .facts dd { margin-bottom: 0.3rem; }
  dl.item-facts { display: block; }
  /* A table of many columns becomes one block a row, each cell led by
     its column's name. */
  table.stack thead { position: absolute; width: 1px; height: 1px; overflow: hidden; clip: rect(0 0 0 0); white-space: nowrap; }
  table.stack, table.stack tbody, table.stack tr, table.stack td { display: block; width: 100%; }
  table.stack tr { border-bottom: 1px solid var(--line); padding: 0.3rem 0; }
  table.stack tbody tr:last-child { border-bottom: 0; }
  table.stack td, table.stack td.num, table.stack td.nowrap { position: relative; border: 0; padding: 0.1rem 0.6rem 0.1rem 9.5rem;
    text-align: left; white-space: normal; overflow-wrap: anywhere; }
  table.stack td::before { content: attr(data-label); color: var(--muted); position: absolute; left: 0.6rem; width: 8.5rem; }
  table.stack td { min-height: 1.6em; }
  table.stack td:empty { display: none; }
  table.stack tr.human td:first-child { box-shadow: none; }
  table.stack tr.human { box-shadow: inset 4px 0 0 var(--refused); }
}
@media print {
  :root { --bg: #fff; --fg: #000; --muted: #444; --panel: #f2f2f2; --line: #bbb; }
  * { -webkit-print-color-adjust: exact; print-color-adjust: exact; }
  body { max-width: none; padding: 0; font-size: 10pt; }
  a { color: inherit; text-decoration: none; }
  .table-wrap, figure { overflow: visible; border: 0; }
  table { font-size: 9pt; }
  tr, figure, .stats li, .banner { break-inside: avoid; }
  h2 { break-after: avoid; }
  details > :not(summary) { display: block; }
  svg.chart rect.hit:hover { fill: transparent; }
}
</style>
</head>
{{- end}}

{{- define "chart" -}}
<figure>
<figcaption>{{.Caption}}</figcaption>
<svg class="chart" id="{{.ID}}" viewBox="0 0 {{.W}} {{.H}}" width="{{.W}}" height="{{.H}}" role="img" aria-label="{{.Label}}">
<title>{{.Label}}</title>
{{- range .Axes}}
<line class="{{.Class}}" x1="{{.X1}}" y1="{{.Y1}}" x2="{{.X2}}" y2="{{.Y2}}"/>
{{- end}}
{{- range .Ticks}}
{{template "text" .}}
{{- end}}
{{- range .Legend}}
<rect class="{{.Class}}" x="{{.X}}" y="{{.Y}}" width="12" height="12"/><text x="{{.TX}}" y="{{.TY}}">{{.Label}}</text>
{{- end}}
{{- range .Groups}}
<g class="run">
<rect class="{{.Hit.Class}}" x="{{.Hit.X}}" y="{{.Hit.Y}}" width="{{.Hit.W}}" height="{{.Hit.H}}"><title>{{.Hit.Title}}</title></rect>
{{- range .Bars}}
<rect class="{{.Class}}" x="{{.X}}" y="{{.Y}}" width="{{.W}}" height="{{.H}}"><title>{{.Title}}</title></rect>
{{- end}}
{{- range .Text}}
{{template "text" .}}
{{- end}}
</g>
{{- end}}
{{- range .Bars}}
<g class="bar" data-kind="{{.Kind}}">
<title>{{.Title}}</title>
{{template "text" .Label}}
{{- range .Segs}}
<rect class="{{.Class}}" x="{{.X}}" y="{{.Y}}" width="{{.W}}" height="{{.H}}"><title>{{.Title}}</title></rect>
{{- end}}
{{template "text" .Value}}
</g>
{{- end}}
{{- range .Lines}}
<polyline points="{{.}}"/>
{{- end}}
{{- range .Points}}
<circle cx="{{.CX}}" cy="{{.CY}}" r="4"><title>{{.Title}}</title></circle>
{{- end}}
{{- range .Texts}}
{{template "text" .}}
{{- end}}
</svg>
</figure>
{{- end}}

{{- define "text" -}}
<text x="{{.X}}" y="{{.Y}}" text-anchor="{{.Anchor}}"{{if .Class}} class="{{.Class}}"{{end}}{{if .Transform}} transform="{{.Transform}}"{{end}}>{{if .Title}}<title>{{.Title}}</title>{{end}}{{.Text}}</text>
{{- end}}

{{- define "facts" -}}
<dl class="facts">
<dt>provider</dt><dd>{{.Provider}}</dd>
<dt>account</dt><dd>{{.Account}}</dd>
<dt>window (UTC)</dt><dd class="mono">{{.Window}}</dd>
<dt>trigger</dt><dd>{{.Trigger}}</dd>
<dt>status</dt><dd><span class="badge {{.StatusClass}}">{{.Status}}</span></dd>
<dt>duration</dt><dd>{{.Duration}}</dd>
<dt>mode</dt><dd><span class="badge mode-{{.Mode}}">{{.Mode}}</span></dd>
{{- if .ReadBy}}
<dt>read</dt><dd>{{.ReadBy}}</dd>
{{- end}}
</dl>
<ul class="stats">
<li><span class="n">{{.Examined}}</span><span class="k">examined</span></li>
<li><span class="n">{{.InSync}}</span><span class="k">in sync</span></li>
<li class="repaired"><span class="n">{{.Repaired}}</span><span class="k">{{.RepairedLabel}}</span></li>
<li class="refused"><span class="n">{{.Refused}}</span><span class="k">refused</span></li>
<li class="reported"><span class="n">{{.Reported}}</span><span class="k">reported</span></li>
<li><span class="n">{{.Synthetic}}</span><span class="k">synthetic events</span></li>
<li><span class="n">{{.EventsRead}}</span><span class="k">events read</span></li>
<li><span class="n">{{.API}}</span><span class="k">API requests</span></li>
<li><span class="n">{{.MissRatio}}</span><span class="k">webhook miss ratio</span></li>
{{- with .Triage}}
<li class="new"><span class="n">{{.New}}</span><span class="k">new since the last run</span></li>
<li><span class="n">{{.Open}}</span><span class="k">still open</span></li>
<li class="repaired"><span class="n">{{.Acknowledged}}</span><span class="k">acknowledged</span></li>
{{- end}}
</ul>
{{- end}}

{{- define "report" -}}
{{template "head" .}}
<body>
<header>
<h1>{{.Title}}</h1>
<p class="muted">Drift between the payment providers and our database, per run. Items that need a human (refused or reported) come first: new since the last run, still open, then acknowledged; the repaired ones follow. Times are UTC.</p>
{{- if .Hint}}
<div class="banner hint" role="note">Looked at an item and want it left alone? Acknowledge it by its fingerprint: <code>{{.AckHint}}</code></div>
{{- end}}
</header>
<main>
{{- range .Runs}}
<section id="{{.Anchor}}" aria-labelledby="{{.Anchor}}-h">
<h2 id="{{.Anchor}}-h">Run {{.ID}}: {{.Provider}}, {{.Account}}</h2>
{{- if .DryRun}}
<div class="banner dry" role="note"><strong>Dry run:</strong> nothing was written but this report; items marked “would repair” were not applied.</div>
{{- end}}
{{- if .Incomplete}}
<div class="banner error" role="alert"><strong>{{.Incomplete}}</strong></div>
{{- else if .Error}}
<div class="banner error" role="alert"><strong>Error:</strong> {{.Error}}</div>
{{- end}}
{{- if .Warning}}
<div class="banner warning" role="note"><strong>Warning:</strong> {{.Warning}}</div>
{{- end}}
{{- with .Totals}}
{{- if .Flag}}
<div class="banner error totals" role="alert"><strong>{{.Flag}}</strong></div>
{{- end}}
{{- end}}
{{template "facts" .}}
{{- with .Totals}}
<h3>Money in the window</h3>
<p class="muted">{{.Scope}}.</p>
{{- if .Rows}}
<div class="table-wrap">
<table class="totals stack">
<thead><tr><th scope="col">currency</th><th scope="col">as</th><th scope="col" class="num">payments</th><th scope="col" class="num">captured</th><th scope="col" class="num">refunded</th><th scope="col" class="num">disputed</th><th scope="col" class="num">settled</th></tr></thead>
<tbody>
{{- range .Rows}}
<tr><td data-label="currency">{{.Currency}}</td><td data-label="as">{{.Side}}</td><td class="num" data-label="payments">{{.Payments}}</td><td class="num" data-label="captured">{{.Captured}}</td><td class="num" data-label="refunded">{{.Refunded}}</td><td class="num" data-label="disputed">{{.Disputed}}</td><td class="num" data-label="settled">{{.Settled}}</td></tr>
{{- end}}
</tbody>
</table>
</div>
{{- else}}
<p class="empty">No payments in the window.</p>
{{- end}}
{{- if .ProviderNote}}
<p><strong>As the provider has it:</strong> {{.ProviderNote}}.</p>
{{- end}}
{{- end}}
{{- if .Groups}}
{{- if .NeedHuman}}
<div class="banner human" role="note"><strong>{{.NeedHuman}} {{if eq .NeedHuman 1}}item needs{{else}}items need{{end}} a human</strong>{{if .TriageLine}} ({{.TriageLine}}){{end}}: refused or reported, nothing was changed for them.</div>
{{- end}}
{{template "chart" .Chart}}
{{- range .Groups}}
<div class="group g-{{.Key}}" id="{{.Anchor}}">
<h3 id="{{.Anchor}}-h">{{.Title}} <span class="count">({{len .Items}})</span></h3>
{{- if .Intro}}
<p class="muted">{{.Intro}}</p>
{{- end}}
<ol class="items" aria-labelledby="{{.Anchor}}-h">
{{- range .Items}}
<li class="item{{if .NeedsHuman}} human{{end}}">
<p class="item-head"><span class="pay mono">{{if .URL}}<a href="{{.URL}}" rel="noreferrer" target="_blank">{{.ID}}</a>{{else}}{{.ID}}{{end}}</span> <code class="kind">{{.Kind}}</code> <span class="badge {{.ActionClass}}">{{.Action}}</span></p>
<dl class="item-facts">
<div><dt>local → provider</dt><dd class="states">{{.Local}} → {{.Provider}}</dd></div>
<div><dt>amount</dt><dd class="amount">{{.Amount}}{{if .Refunded}}, refunded {{.Refunded}}{{end}}</dd></div>
{{- if .Mismatch}}
<div><dt>amounts differ</dt><dd class="mismatch">{{.Mismatch}}</dd></div>
{{- end}}
<div><dt>provider time (UTC)</dt><dd class="time mono">{{.Time}}{{if .Inferred}} <span class="muted">(inferred)</span>{{end}}</dd></div>
{{- if .Fingerprint}}
<div><dt>fingerprint</dt><dd><code class="fp">{{.Fingerprint}}</code></dd></div>
{{- end}}
</dl>
<p class="expl">{{.Explanation}}</p>
{{- if .Ack}}
<p class="ack">{{.Ack}}</p>
{{- end}}
</li>
{{- end}}
</ol>
</div>
{{- end}}
{{- if .Omitted}}
<p class="muted">…and {{.Omitted}} more items that {{.OmittedPhrase}}; the CSV and JSON reports list every item.</p>
{{- end}}
{{- else if .Incomplete}}
<p class="empty">No drift was found before the run stopped; the rest of the window was not compared.</p>
{{- else}}
<p class="empty">No drift.</p>
{{- end}}
</section>
{{- else}}
<p class="empty">No runs.</p>
{{- end}}
<details>
<summary>What the kinds and actions mean</summary>
<div class="table-wrap">
<table>
<thead><tr><th scope="col">kind</th><th scope="col">action</th><th scope="col">meaning</th></tr></thead>
<tbody>
{{- range .Kinds}}
<tr><td><code>{{.Kind}}</code></td><td>{{.Action}}</td><td>{{.Meaning}}</td></tr>
{{- end}}
</tbody>
</table>
</div>
<p class="muted"><strong>repaired</strong>: our database was changed to match the provider. <strong>refused</strong>: a change was needed but was not safe; nothing was changed. <strong>reported</strong>: shown for a human; nothing was changed.</p>
</details>
</main>
<footer>Generated by reconciler. The page holds payment ids, states, amounts and times only.</footer>
</body>
</html>
{{end}}

{{- define "history" -}}
{{template "head" .}}
<body>
<header>
<h1>{{.Title}}</h1>
{{- if .Count}}
<p class="muted">Runs started from <span class="mono">{{.From}}</span> to <span class="mono">{{.To}}</span> (UTC). Charts show the oldest run first; the table shows the newest first.</p>
{{- end}}
</header>
<main>
{{- if .Count}}
{{template "chart" .Actions}}
{{template "chart" .Miss}}
<h2 id="runs-h">Runs</h2>
<div class="table-wrap">
<table class="runs stack" aria-labelledby="runs-h">
<thead><tr><th scope="col" class="num">run</th><th scope="col">started (UTC)</th><th scope="col">provider</th><th scope="col">status</th><th scope="col" class="num">repaired</th><th scope="col" class="num">refused</th><th scope="col" class="num">reported</th><th scope="col" class="num">miss ratio</th><th scope="col" class="num">read</th><th scope="col">notes</th></tr></thead>
<tbody>
{{- range .Rows}}
<tr{{if or .Error .Refused .Incomplete}} class="human"{{end}}>
<td class="num" data-label="run">{{.ID}}</td>
<td data-label="started (UTC)"><span class="mono nowrap">{{.Started}}</span><span class="sub">{{.Duration}} · {{.Trigger}}</span></td>
<td class="wrap" data-label="provider">{{.Provider}}<span class="sub">{{.Account}} · {{.Mode}}</span></td>
<td data-label="status"><span class="badge {{.StatusClass}}">{{.Status}}</span></td>
<td class="num" data-label="{{.RepairedLabel}}">{{.Repaired}}</td>
<td class="num" data-label="refused">{{.Refused}}</td>
<td class="num" data-label="reported">{{.Reported}}</td>
<td class="num" data-label="miss ratio">{{.MissRatio}}</td>
<td class="num" data-label="read">{{.Examined}} examined<span class="sub">{{.EventsRead}} events, {{.Synthetic}} synthetic</span><span class="sub">{{.API}} API requests</span></td>
<td class="notes" data-label="notes">{{if .DryRun}}<span class="badge a-reported">dry run</span> {{end}}{{if .Incomplete}}<span class="incomplete">{{.Incomplete}}</span>{{else if .Error}}<strong>error:</strong> {{.Error}}{{end}}{{if .Warning}}<span class="sub">warning: {{.Warning}}</span>{{end}}</td>
</tr>
{{- end}}
</tbody>
</table>
</div>
{{- else}}
<p class="empty">No runs.</p>
{{- end}}
</main>
<footer>Generated by reconciler. The page holds run counts and times only.</footer>
</body>
</html>
{{end}}
`
