package report

import (
	"bytes"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/reconciler/reconciler/models"
)

// TextWidth is the line width, in runes, the text format lays out for.
const TextWidth = 100

// TextOptions says how RenderText writes a report.
type TextOptions struct {
	// Color paints headings and actions with ANSI escape codes, for a
	// terminal; without it the output is plain text.
	Color bool
	// MoreIn names where the items needing a human that a run does not list
	// can be read ("the HTML report"); "" names the CSV and JSON reports.
	MoreIn string
}

// How many items a run lists: those needing a human up to textMaxHuman,
// each with its explanation; the repaired ones only as a few examples.
const (
	textMaxHuman = 25
	textExamples = 3
)

// RenderText writes rep for a person at a terminal. Each run is a title
// line (provider, account, run id, mode, status, duration), its window and
// counts, a table of the items needing a human with their explanations, and
// the repaired items counted by kind with a few examples. Lines are laid out
// for TextWidth runes. Control characters in the report's strings are
// replaced, so a report cannot drive the terminal; the only escape codes
// written are the colours opts.Color asks for. A failing writer gets
// nothing or everything: the text is built first, then written at once.
func RenderText(w io.Writer, rep Report, opts TextOptions) error {
	rep = withLinks(rep)
	t := &textWriter{color: opts.Color, moreIn: opts.MoreIn}
	if t.moreIn == "" {
		t.moreIn = "the CSV and JSON reports"
	}
	if len(rep.Runs) == 0 {
		t.printf("No runs.\n")
	}
	for _, r := range rep.Runs {
		t.run(r)
	}
	_, err := w.Write(t.buf.Bytes())
	return err
}

// textWriter accumulates the text of one report.
type textWriter struct {
	buf    bytes.Buffer
	color  bool
	moreIn string
}

func (t *textWriter) printf(format string, a ...any) { fmt.Fprintf(&t.buf, format, a...) }

func (t *textWriter) paint(code, s string) string {
	if !t.color || s == "" {
		return s
	}
	return "\033[" + code + "m" + s + "\033[0m"
}

func (t *textWriter) bold(s string) string { return t.paint("1", s) }
func (t *textWriter) dim(s string) string  { return t.paint("2", s) }

// action colours an action: refused red, reported yellow, repaired (or a
// dry run's "would repair") green.
func (t *textWriter) action(a string) string {
	switch a {
	case models.ActionRefused:
		return t.paint("1;31", a)
	case models.ActionReported:
		return t.paint("33", a)
	case models.ActionRepaired, WouldRepair:
		return t.paint("32", a)
	}
	return a
}

// run writes one run: a header, what needs a human as a table, then the
// repaired items in brief.
func (t *textWriter) run(r RunReport) {
	parts := []string{providerTitle(r.Provider)}
	if r.Account != "" {
		parts = append(parts, plain(r.Account))
	}
	parts = append(parts, fmt.Sprintf("run %d", r.ID))
	if r.Mode != "" {
		parts = append(parts, plain(r.Mode)+" mode")
	}
	if r.DryRun {
		parts = append(parts, "dry run")
	}
	status := orDash(plain(r.Status))
	if r.DurationSeconds > 0 {
		status += " in " + seconds(r.DurationSeconds)
	}
	title := strings.Join(append(parts, status), " · ")
	rule := TextWidth - utf8.RuneCountInString(title) - 4
	t.printf("%s %s\n", t.bold("── "+title), t.dim(strings.Repeat("─", max(rule, 3))))
	t.printf("  window %s → %s\n", r.WindowStart.UTC().Format("2006-01-02 15:04"), r.WindowEnd.UTC().Format("2006-01-02 15:04 MST"))
	t.printf("  examined %s   %s %s   %s %s   %s %s\n", Thousands(r.Examined),
		t.action(actionLabel(models.ActionRepaired, r.DryRun)), Thousands(r.Repaired), t.action(models.ActionRefused), Thousands(r.Refused),
		t.action(models.ActionReported), Thousands(r.Reported))
	t.printf("  events read %s   synthetic events %s   webhook miss ratio %s\n",
		Thousands(r.EventsRead), Thousands(r.SyntheticEvents), percent(r.WebhookMissRatio))
	if r.Error != nil {
		t.printf("  %s %s\n", t.paint("1;31", "error:"), plain(*r.Error))
	}
	if rb := ReadBy(r.Notes); rb != "" {
		for i, l := range Wrap("read "+plain(rb), TextWidth-4, 0) {
			if i > 0 {
				l = "  " + l
			}
			t.printf("  %s\n", l)
		}
	}
	if wn, ok := r.Notes["warning"].(string); ok {
		t.printf("  %s %s\n", t.paint("33", "warning:"), plain(wn))
	}
	t.totals(r.Totals)
	var human, repaired []Item
	for _, it := range r.Items {
		if it.NeedsHuman() {
			human = append(human, it)
		} else {
			repaired = append(repaired, it)
		}
	}
	sort.SliceStable(human, func(i, j int) bool { return priority(human[i]) < priority(human[j]) })
	t.printf("\n")
	if len(human) == 0 {
		t.printf("  Nothing needs a human.\n\n")
	} else {
		t.printf("  %s\n", t.bold(fmt.Sprintf("Needs a human (%d):", len(human))))
		shown := human[:min(len(human), textMaxHuman)]
		t.table(shown, true)
		if n := len(human) - len(shown); n > 0 {
			t.printf("    …and %d more in %s\n", n, t.moreIn)
		}
		t.printf("\n")
	}
	if len(repaired) > 0 {
		ex := examples(repaired, textExamples)
		heading, more := "Repaired", "repaired"
		if r.DryRun {
			heading, more = "Would repair", "to repair"
		}
		count := fmt.Sprintf("%s (%d):", heading, len(repaired))
		if r.DryRun {
			count = fmt.Sprintf("%s (%d; dry run, nothing was changed):", heading, len(repaired))
		}
		t.printf("  %s %s\n", t.bold(count), t.dim(kindCounts(repaired)+"; for example:"))
		t.table(ex, false)
		if n := len(repaired) - len(ex); n > 0 {
			t.printf("    …and %d more %s\n", n, more)
		}
		t.printf("\n")
	}
	if r.ItemsOmitted > 0 {
		t.printf("  …and %s more items; the CSV and JSON reports list every item.\n\n", Thousands(r.ItemsOmitted))
	}
}

// table writes items as aligned columns; with explain, a header comes
// first and each row is followed by its explanation, wrapped.
func (t *textWriter) table(items []Item, explain bool) {
	rows := [][]string{}
	if explain {
		rows = append(rows, []string{"PAYMENT", "KIND", "ACTION", "LOCAL → PROVIDER", "AMOUNT"})
	}
	for _, it := range items {
		amount := "—"
		if it.Amount != 0 || it.Currency != "" {
			amount = money(it.Amount, plain(it.Currency))
		}
		states := orDash(plain(str(it.LocalState))) + " → " + orDash(plain(str(it.ProviderState)))
		rows = append(rows, []string{plain(it.ProviderID), plain(it.Kind), plain(it.ActionLabel()), cut(states, 32), amount})
	}
	width := make([]int, 5)
	for _, r := range rows {
		for i, c := range r {
			width[i] = max(width[i], utf8.RuneCountInString(c))
		}
	}
	for i, r := range rows {
		header := explain && i == 0
		var b strings.Builder
		b.WriteString("    ")
		for j, c := range r {
			pad := strings.Repeat(" ", width[j]-utf8.RuneCountInString(c))
			switch {
			case header:
				c = t.dim(c)
			case j == 2:
				c = t.action(c)
			}
			if j == 4 {
				b.WriteString(pad + c) // amounts align right
			} else {
				b.WriteString(c + pad + "  ")
			}
		}
		t.printf("%s\n", strings.TrimRight(b.String(), " "))
		if explain && !header {
			for _, l := range Wrap(plain(items[i-1].Explanation), TextWidth-8, 3) {
				t.printf("        %s\n", t.dim(l))
			}
		}
	}
}

// totals writes a run's money totals: the flag first (before any item),
// then one line per currency as the rows have it, then the provider's side.
func (t *textWriter) totals(tt *Totals) {
	if tt == nil {
		return
	}
	t.printf("\n")
	if tt.Flagged {
		for _, l := range Wrap(plain(tt.Flag), TextWidth-4, 0) {
			t.printf("  %s\n", t.paint("1;31", l))
		}
		t.printf("\n")
	}
	title := "Money in the window, as the rows have it:"
	if tt.Measured {
		title = "Money in the window:"
	}
	t.printf("  %s\n", t.bold(title))
	if len(tt.Rows) == 0 {
		t.printf("    no payments in the window\n")
	} else {
		rows := [][]string{{"CURRENCY", "AS", "PAYMENTS", "CAPTURED", "REFUNDED", "DISPUTED", "SETTLED"}}
		for _, c := range tt.Lines() {
			cur := plain(c.Currency)
			m, side := c.format(), c.Side
			switch side {
			case "difference":
				side = "provider-rows"
			case "":
				side = "rows"
			}
			rows = append(rows, []string{strings.ToUpper(cur), side, Thousands(c.Payments), m(c.Captured, cur), m(c.Refunded, cur),
				m(c.Disputed, cur), m(c.Settled, cur)})
		}
		width := make([]int, 7)
		for _, r := range rows {
			for i, c := range r {
				width[i] = max(width[i], utf8.RuneCountInString(c))
			}
		}
		for i, r := range rows {
			var b strings.Builder
			b.WriteString("    ")
			for j, c := range r {
				pad := strings.Repeat(" ", width[j]-utf8.RuneCountInString(c))
				if j <= 1 {
					if j == 1 {
						b.WriteString("  ")
					}
					b.WriteString(c + pad)
				} else {
					b.WriteString("  " + pad + c)
				}
			}
			line := b.String()
			if i == 0 {
				line = "    " + t.dim(strings.TrimPrefix(line, "    "))
			}
			t.printf("%s\n", line)
		}
	}
	for _, l := range Wrap(plain(tt.Scope)+".", TextWidth-6, 0) {
		t.printf("    %s\n", t.dim(l))
	}
	if !tt.Measured {
		for _, l := range Wrap("As the provider has it: "+plain(tt.ProviderNote)+".", TextWidth-4, 0) {
			t.printf("  %s\n", l)
		}
	}
}

// seconds is a run's duration: to the hundredth under ten seconds (a demo's
// runs take a fraction of one), else to the second.
func seconds(s float64) string {
	if s < 10 {
		return fmt.Sprintf("%.2fs", s)
	}
	return time.Duration(s * float64(time.Second)).Round(time.Second).String()
}

// providerTitle is a provider's name as people write it.
func providerTitle(p string) string {
	switch p {
	case "stripe":
		return "Stripe"
	case "gocardless":
		return "GoCardless"
	}
	return orDash(plain(p))
}

// examples picks up to n items, one of each kind first.
func examples(items []Item, n int) []Item {
	var out []Item
	seen := map[string]bool{}
	for _, it := range items {
		if len(out) < n && !seen[it.Kind] {
			seen[it.Kind] = true
			out = append(out, it)
		}
	}
	for _, it := range items {
		if len(out) >= n {
			break
		}
		dup := false
		for _, o := range out {
			dup = dup || (o.ProviderID == it.ProviderID && o.Kind == it.Kind)
		}
		if !dup {
			out = append(out, it)
		}
	}
	return out
}

// kindCounts is "behind 52, missing_local 9": kinds in order of first
// appearance.
func kindCounts(items []Item) string {
	var order []string
	n := map[string]int{}
	for _, it := range items {
		if n[it.Kind] == 0 {
			order = append(order, it.Kind)
		}
		n[it.Kind]++
	}
	parts := make([]string, len(order))
	for i, k := range order {
		parts[i] = fmt.Sprintf("%s %d", plain(k), n[k])
	}
	return strings.Join(parts, ", ")
}

// Wrap breaks s at spaces into lines of at most width runes (3 or more),
// and at most maxLines of them (0: no limit): when s does not fit, the last
// line ends in " …". A word longer than width is cut, ending in "…". The
// text format wraps explanations with it; callers writing around a text
// report use it to match.
func Wrap(s string, width, maxLines int) []string {
	width = max(width, 3)
	var lines []string
	var cur []string
	curLen := 0
	for _, w := range strings.Fields(s) {
		wl := utf8.RuneCountInString(w)
		if curLen > 0 && curLen+1+wl > width {
			lines = append(lines, strings.Join(cur, " "))
			cur, curLen = nil, 0
			if len(lines) == maxLines {
				// Make room for " …", dropping whole words where there are
				// several.
				last := lines[maxLines-1]
				for utf8.RuneCountInString(last) > width-2 {
					i := strings.LastIndexByte(last, ' ')
					if i < 0 {
						last = string([]rune(last)[:width-2])
						break
					}
					last = last[:i]
				}
				lines[maxLines-1] = strings.TrimRight(last, " ") + " …"
				return lines
			}
		}
		if wl > width { // one very long word
			w = string([]rune(w)[:width-1]) + "…"
			wl = width
		}
		if curLen > 0 {
			curLen++
		}
		cur = append(cur, w)
		curLen += wl
	}
	if len(cur) > 0 {
		lines = append(lines, strings.Join(cur, " "))
	}
	return lines
}

// Thousands formats n with comma thousands separators, as the text format
// writes counts: 12,345.
func Thousands(n int64) string {
	s := fmt.Sprint(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	if neg {
		s = "-" + s
	}
	return s
}

// cut shortens s to at most n runes, ending in "…" when cut.
func cut(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

// plain makes s safe to print on a terminal: line breaks and tabs become
// spaces and other control characters (an escape sequence's ESC among them)
// become U+FFFD, so text from a provider cannot move the cursor or recolour
// the screen.
func plain(s string) string {
	if !strings.ContainsFunc(s, unicode.IsControl) {
		return s
	}
	return strings.Map(func(r rune) rune {
		switch {
		case r == '\n' || r == '\r' || r == '\t':
			return ' '
		case unicode.IsControl(r):
			return utf8.RuneError
		}
		return r
	}, s)
}
