package demo

import (
	"fmt"
	"io"
	"path/filepath"

	"github.com/reconciler/reconciler/report"
)

// terminal writes what the demo says around the report: where the data
// came from before it, what happened and what to try next after it. The
// report itself is report's text format.
type terminal struct {
	w     io.Writer
	color bool
}

func (t *terminal) printf(format string, a ...any) { fmt.Fprintf(t.w, format, a...) }

func (t *terminal) paint(code, s string) string {
	if !t.color || s == "" {
		return s
	}
	return "\033[" + code + "m" + s + "\033[0m"
}

func (t *terminal) bold(s string) string { return t.paint("1", s) }
func (t *terminal) dim(s string) string  { return t.paint("2", s) }

// intro says what the fakes hold and which database the runs used.
func (t *terminal) intro(payments int, seed int64, dbPath string, throwaway, rerun bool) {
	t.printf("%s\n", t.bold(fmt.Sprintf("reconciler demo: a fake Stripe and a fake GoCardless on 127.0.0.1, %s generated payments each (seed %d)", report.Thousands(int64(payments)), seed)))
	switch {
	case throwaway:
		t.printf("%s\n\n", t.dim("Local database: a fresh throwaway file, deleted on exit (--db FILE keeps one)."))
	case rerun:
		t.printf("%s\n\n", t.dim("Local database: "+dbPath+", which already held this demo: the runs below are reruns of the same window."))
	default:
		t.printf("%s\n\n", t.dim("Local database: "+dbPath+" (new; kept)."))
	}
}

// story is what the closing words need to know.
type story struct {
	payments, missed, delivered int
	rerun                       bool
	htmlPath                    string
}

// explain writes "What just happened" and "What to try next".
func (t *terminal) explain(rep report.Report, s story) {
	var repaired, refused, reported, synthetic int64
	for _, r := range rep.Runs {
		repaired += r.Repaired
		refused += r.Refused
		reported += r.Reported
		synthetic += r.SyntheticEvents
	}
	lines := []string{fmt.Sprintf("Fake Stripe and GoCardless servers ran in this process, with %s generated payments each.", report.Thousands(int64(s.payments)))}
	if s.rerun {
		lines = append(lines,
			"This database already held the demo, so every run was a rerun of the same window.",
			fmt.Sprintf("It repaired %s and recorded %s: every write is guarded, reruns are harmless.",
				count(repaired, "payment", "payments"), count(synthetic, "missed webhook", "missed webhooks")))
	} else {
		lines = append(lines,
			fmt.Sprintf("Their webhooks fed a fresh local database: %s of %s lost, one out of order, a few rows edited.",
				report.Thousands(int64(s.missed)), report.Thousands(int64(s.missed+s.delivered))),
			fmt.Sprintf("reconciler read both event logs, repaired %s and recorded the %s.",
				count(repaired, "payment", "payments"), count(synthetic, "missed webhook", "missed webhooks")))
	}
	lines = append(lines, fmt.Sprintf("It refused %d and reported %d: it never moves a payment backwards or guesses; a human decides.", refused, reported))
	t.printf("%s\n", t.bold("What just happened"))
	for _, l := range lines {
		for _, w := range report.Wrap(l, report.TextWidth-2, 3) {
			t.printf("  %s\n", w)
		}
	}
	t.printf("\n%s\n", t.bold("What to try next"))
	t.printf("  Open the report in a browser: file://%s\n", filepath.ToSlash(s.htmlPath))
	t.printf("  Build the command once (go build -o reconciler ./cmd/reconciler), then try:\n")
	t.printf("  Your own Stripe test-mode account (it only reads from Stripe) and your PostgreSQL:\n")
	t.printf("      export STRIPE_API_KEY=sk_test_…\n")
	t.printf("      export DATABASE_URL=postgres://user@host:5432/payments\n")
	t.printf("      reconciler run --dry-run\n")
	t.printf("  Keep the demo's database (the embedded store's default file), rerun it, chart the runs:\n")
	t.printf("      reconciler demo --db reconciler.db     # twice: the second run repairs nothing\n")
	t.printf("      reconciler report --history 10 --format html --output history.html   # DATABASE_URL unset\n\n")
}

// count is "1 payment", "12,345 payments".
func count(n int64, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return report.Thousands(n) + " " + many
}
