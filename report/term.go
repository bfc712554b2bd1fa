package report

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/reconciler/reconciler/acks"
	"github.com/reconciler/reconciler/models"
)

// TextWidth is the line width, in runes, the text format lays out for: an
// 80-column terminal. What does not fit is wrapped, never cut.
const TextWidth = 80

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
// each with its explanation in full; the repaired ones only as a few
// examples.
const (
	textMaxHuman = 25
	textExamples = 3
)

// RenderText writes rep for a person at a terminal. Each run is a title
// line (provider, account, run id, mode, status, duration), its window and
// counts, the items needing a human (new since the last run, still open,
// acknowledged) each with its fingerprint and explanation, and the
// repaired items counted by kind with a few examples. Lines are laid out
// for TextWidth runes: long states, ids and explanations wrap. Control characters in the report's strings are
// replaced, so a report cannot drive the terminal; the only escape codes
// written are the colours opts.Color asks for. A failing writer gets
// nothing or everything: the text is built first, then written at once.
func RenderText(w io.Writer, rep Report, opts TextOptions) error {
	rep = withLinks(rep)
	t := &textWriter{color: opts.Color, moreIn: opts.MoreIn}
	for _, r := range rep.Runs {
		for _, it := range r.Items {
			t.hint = t.hint || (it.NeedsHuman() && it.Status != acks.StatusAcknowledged)
		}
	}
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
	// hint says AckHint is still to be shown: once per report, with the
	// first items needing a human.
	hint bool
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
		Thousands(r.EventsRead), Thousands(r.SyntheticEvents), missRatio(r))
	if tl := triageLine(r.Triage); tl != "" {
		t.printf("  needing a human: %s\n", tl)
	}
	if r.Error != nil {
		t.wrapped("  ", "    ", "error:", func(s string) string { return t.paint("1;31", s) }, plain(*r.Error))
	}
	if rb := ReadBy(r.Notes); rb != "" {
		t.wrapped("  ", "    ", "read", nil, plain(rb))
	}
	if wn, ok := r.Notes["warning"].(string); ok {
		t.wrapped("  ", "    ", "warning:", func(s string) string { return t.paint("33", s) }, plain(wn))
	}
	inc := incomplete(r)
	if inc != "" {
		t.printf("\n")
		for _, l := range Wrap(plain(inc), TextWidth-2, 0) {
			t.printf("  %s\n", t.paint("1;31", l))
		}
	}
	t.totals(r.Totals)
	groups := groupItems(r)
	human := 0
	for _, g := range groups {
		if g.Human() {
			human += len(g.Items)
		}
	}
	t.printf("\n")
	if human == 0 {
		if inc != "" {
			t.printf("  Nothing needing a human was found before the run stopped.\n\n")
		} else {
			t.printf("  Nothing needs a human.\n\n")
		}
	} else {
		head := fmt.Sprintf("Needs a human (%d):", human)
		if tl := triageLine(r.Triage); tl != "" {
			head = fmt.Sprintf("Needs a human (%d): %s", human, tl)
		}
		t.printf("  %s\n", t.bold(head))
		if t.hint {
			t.hint = false
			t.printf("  %s\n    %s\n", "Looked at one and want it left alone? Acknowledge it by its fingerprint:", AckHint)
		}
		left := textMaxHuman
		for _, g := range groups {
			if !g.Human() {
				continue
			}
			shown := g.Items[:min(len(g.Items), left)]
			left -= len(shown)
			if len(shown) == 0 {
				continue
			}
			t.printf("\n  %s\n", t.bold(fmt.Sprintf("%s (%d):", g.Title, len(g.Items))))
			if g.Intro != "" {
				for _, l := range Wrap(g.Intro, TextWidth-4, 0) {
					t.printf("    %s\n", t.dim(l))
				}
			}
			t.table(shown, true)
		}
		if n := human - textMaxHuman; n > 0 {
			t.printf("    …and %d more in %s\n", n, t.moreIn)
		}
		t.printf("\n")
	}
	var repaired []Item
	for _, g := range groups {
		if !g.Human() {
			repaired = g.Items
		}
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
		t.wrapped("  ", "    ", count, t.bold, kindCounts(repaired)+"; for example:")
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

// wrapped writes label and text wrapped at TextWidth, the first line
// after indent, the others after cont; the label, on the first line, is
// painted by paint (nil: as it is).
func (t *textWriter) wrapped(indent, cont, label string, paint func(string) string, text string) {
	full := strings.TrimSpace(label + " " + text)
	for i, l := range Wrap(full, TextWidth-max(utf8.RuneCountInString(indent), utf8.RuneCountInString(cont)), 0) {
		if i > 0 {
			t.printf("%s%s\n", cont, l)
			continue
		}
		if rest, ok := strings.CutPrefix(l, label); ok && label != "" && paint != nil {
			l = paint(label) + rest
		}
		t.printf("%s%s\n", indent, l)
	}
}

// table writes items: when every row fits in TextWidth, as aligned
// columns (with explain, under a header); else each item's facts wrapped
// over as many lines as they need. With explain each item is followed by
// its explanation, its fingerprint and its acknowledgement, wrapped, never
// cut.
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
		if m := mismatchAmounts(it); m != "" {
			amount = plain(m)
		}
		states := orDash(plain(str(it.LocalState))) + " → " + orDash(plain(str(it.ProviderState)))
		rows = append(rows, []string{plain(it.ProviderID), plain(it.Kind), plain(it.ActionLabel()), states, amount})
	}
	width := make([]int, 5)
	for _, r := range rows {
		for i, c := range r {
			width[i] = max(width[i], utf8.RuneCountInString(c))
		}
	}
	aligned := 4+width[0]+width[1]+width[2]+width[3]+width[4]+2*4 <= TextWidth
	for i, r := range rows {
		header := explain && i == 0
		if header && !aligned {
			continue
		}
		if aligned {
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
		} else {
			t.facts(r)
		}
		if !explain || header {
			continue
		}
		it := items[i-1]
		for _, l := range Wrap(plain(it.Explanation), TextWidth-8, 0) {
			t.printf("        %s\n", t.dim(l))
		}
		if it.Fingerprint != "" {
			t.printf("        %s %s\n", t.dim("fingerprint"), plain(it.Fingerprint))
		}
		if a := ackLine(it); a != "" {
			for _, l := range Wrap(plain(a), TextWidth-8, 0) {
				t.printf("        %s\n", l)
			}
		}
	}
}

// facts writes one item's columns when they do not fit on a line: as many
// to a line as fit, two spaces apart, the rest on lines indented further;
// a column longer than a line is broken, not cut.
func (t *textWriter) facts(cols []string) {
	const first, cont = "    ", "      "
	var b strings.Builder
	b.WriteString(first)
	n, empty := len(first), true
	for j, c := range cols {
		for _, part := range breakLong(c, TextWidth-len(cont)) {
			l := utf8.RuneCountInString(part)
			if !empty && n+2+l > TextWidth {
				t.printf("%s\n", b.String())
				b.Reset()
				b.WriteString(cont)
				n, empty = len(cont), true
			}
			if !empty {
				b.WriteString("  ")
				n += 2
			}
			if j == 2 {
				part = t.action(part)
			}
			b.WriteString(part)
			n, empty = n+l, false
		}
	}
	t.printf("%s\n", b.String())
}

// breakLong splits s into pieces of at most width runes, at spaces where
// it can and mid-word where a word is longer than width.
func breakLong(s string, width int) []string {
	if utf8.RuneCountInString(s) <= width {
		return []string{s}
	}
	var out []string
	cur := ""
	for _, w := range strings.Fields(s) {
		for utf8.RuneCountInString(w) > width {
			if cur != "" {
				out, cur = append(out, cur), ""
			}
			r := []rune(w)
			out, w = append(out, string(r[:width])), string(r[width:])
		}
		switch {
		case cur == "":
			cur = w
		case utf8.RuneCountInString(cur)+1+utf8.RuneCountInString(w) <= width:
			cur += " " + w
		default:
			out, cur = append(out, cur), w
		}
	}
	if cur != "" {
		out = append(out, cur)
	}
	return out
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
