package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"
	"unicode/utf8"

	"gorm.io/gorm"

	"github.com/reconciler/reconciler/internal/dbopen"
	"github.com/reconciler/reconciler/internal/scenario"
	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/providers/gocardless"
	"github.com/reconciler/reconciler/providers/gocardless/gcfake"
	"github.com/reconciler/reconciler/providers/stripe"
	"github.com/reconciler/reconciler/providers/stripe/stripefake"
	"github.com/reconciler/reconciler/reconcile"
	"github.com/reconciler/reconciler/report"
)

// demoTrigger names the demo's runs (triggered_by), so that a kept database
// knows it holds a demo.
const demoTrigger = "demo"

// maxDemoPayments keeps the demo a matter of seconds.
const maxDemoPayments = 100_000

// cmdDemo runs the whole job on a machine with only Go: fake Stripe and
// GoCardless in-process on loopback, accounts with every drift kind, a local
// database seeded as the webhooks left it, a reconciliation of each, the
// report on the terminal and in an HTML file.
func cmdDemo(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	started := time.Now()
	fs := newFlagSet("demo", stderr)
	payments := fs.Int("payments", 500, "generated payments per provider, besides the crafted ones (0 to 100000)")
	seed := fs.Int64("seed", 1, "generator seed: the same seed builds the same accounts (0 or more)")
	dbFile := fs.String("db", "", "keep the local database in this file (default: a fresh throwaway file)")
	htmlFile := fs.String("html", "reconciler-demo.html", "write the HTML report to this file")
	verbose := fs.Bool("v", false, "log at info level (default: warnings only)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *payments < 0 || *payments > maxDemoPayments {
		return usagef("--payments: %d is out of range (0 to %d)", *payments, maxDemoPayments)
	}
	if *seed < 0 {
		return usagef("--seed: %d is negative (use 0 or more)", *seed)
	}
	if *htmlFile == "" {
		return usagef("--html: needs a file name")
	}
	if *dbFile != "" {
		if fi, err := os.Stat(*dbFile); err == nil && fi.IsDir() {
			return usagef("--db: %s is a directory, not a database file", *dbFile)
		}
		if _, err := os.Stat(filepath.Dir(*dbFile)); err != nil {
			return usagef("--db: %v", err)
		}
	}
	htmlPath, err := filepath.Abs(*htmlFile)
	if err != nil {
		return usagef("--html: %v", err)
	}
	hf, err := os.Create(htmlPath)
	if err != nil {
		return usagef("--html: %v", err)
	}
	written := false
	defer func() {
		hf.Close()
		if !written {
			os.Remove(htmlPath) // no empty page left behind by a failed demo
		}
	}()

	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelInfo
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	out := newDemoTerm(stdout, isTerminal(stdout))

	// A fresh database each time, unless --db keeps one.
	dbPath, throwaway := *dbFile, *dbFile == ""
	if throwaway {
		dir, err := os.MkdirTemp("", "reconciler-demo-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		dbPath = filepath.Join(dir, "reconciler-demo.db")
	}
	if abs, err := filepath.Abs(dbPath); err == nil {
		dbPath = abs
	}
	db, err := demoDB(ctx, dbPath)
	if err != nil {
		return fmt.Errorf("open the demo database: %w", err)
	}
	if sqlDB, err := db.DB(); err == nil {
		defer sqlDB.Close()
	}
	log.Info("demo database", "path", dbPath, "throwaway", throwaway)

	// A kept database that already holds the demo: rebuild the same accounts
	// as of the same instant, so the runs are reruns of the same window.
	now := time.Now().UTC().Truncate(time.Second)
	var first models.Run
	if err := db.WithContext(ctx).Where("triggered_by = ?", demoTrigger).Order("id").Limit(1).Find(&first).Error; err != nil {
		return fmt.Errorf("read the demo database: %w", err)
	}
	rerun := first.ID != 0
	if rerun {
		now = first.WindowEnd.UTC()
	} else {
		var n int64
		if err := db.WithContext(ctx).Model(&models.Payment{}).Count(&n).Error; err != nil {
			return fmt.Errorf("read the demo database: %w", err)
		}
		if n > 0 {
			return usagef("--db: %s holds %d payments the demo did not make; give a new file", dbPath, n)
		}
	}

	// The fake providers, on loopback, with clocks at the real now.
	opts := scenario.Options{Payments: *payments, Seed: *seed, MissEvery: 10}
	sf := stripefake.New(stripefake.Options{Seed: *seed})
	stripeURL := sf.Start()
	defer sf.Close()
	ss := scenario.NewStripe(sf.Account(""), now, opts)
	gf := gcfake.New(gcfake.Options{Seed: *seed})
	gcURL := gf.Start()
	defer gf.Close()
	gs := scenario.NewGoCardless(gf, now, opts)
	log.Info("fake providers", "stripe", stripeURL, "gocardless", gcURL)

	if rerun {
		ok, err := demoMatches(ctx, db, sf.Account("").PaymentIDs(), gf.PaymentIDs(), ss, gs)
		if err != nil {
			return fmt.Errorf("read the demo database: %w", err)
		}
		if !ok {
			return usagef("--db: %s holds a demo made with other --payments or --seed values (or one that did not finish); pass the same values or give a new file", dbPath)
		}
	} else {
		if err := ss.SeedLocal(ctx, db, now); err != nil {
			return fmt.Errorf("seed the Stripe payments: %w", err)
		}
		if err := gs.SeedLocal(ctx, db, now); err != nil {
			return fmt.Errorf("seed the GoCardless payments: %w", err)
		}
	}

	// One reconciliation per provider, through the real clients.
	since := gs.Start.Add(-time.Hour).Truncate(time.Hour)
	if s := now.Add(-72 * time.Hour); s.Before(since) {
		since = s
	}
	sp, err := stripe.New(stripe.Config{APIKey: "sk_test_demo", BaseURL: stripeURL, Logger: log})
	if err != nil {
		return err
	}
	gp, err := gocardless.New(gocardless.Config{AccessToken: "sandbox_demo", BaseURL: gcURL, Logger: log})
	if err != nil {
		return err
	}
	var ids []int64
	var failed []string
	for _, p := range []reconcile.Provider{sp, gp} {
		res, err := reconcile.Run(ctx, reconcile.Options{DB: db, Provider: p, Since: since, Until: now,
			Trigger: models.TriggerManual, TriggeredBy: demoTrigger, StuckLimit: -1, Logger: log})
		if res.Run.ID != 0 {
			ids = append(ids, res.Run.ID)
		}
		if err != nil {
			log.Error("run failed", "provider", p.Name(), "run_id", res.Run.ID, "error", err)
			failed = append(failed, p.Name())
		}
		if ctx.Err() != nil {
			break
		}
	}
	if len(ids) == 0 {
		return fmt.Errorf("demo: no run was recorded (%s failed)", strings.Join(failed, ", "))
	}
	rep, err := report.Load(context.WithoutCancel(ctx), db, ids...)
	if err != nil {
		return err
	}

	out.intro(*payments, *seed, dbPath, throwaway, rerun)
	for _, r := range rep.Runs {
		out.run(r)
	}
	if err := report.RenderHTML(hf, rep); err != nil {
		return fmt.Errorf("write %s: %w", htmlPath, err)
	}
	if err := hf.Close(); err != nil {
		return fmt.Errorf("write %s: %w", htmlPath, err)
	}
	written = true
	out.printf("%s %s\n\n", out.bold("HTML report:"), htmlPath)
	out.explain(rep, demoStory{payments: *payments, missed: ss.Missed + gs.Missed,
		delivered: len(ss.Deliveries) + len(gs.Deliveries), rerun: rerun, htmlPath: htmlPath})
	out.printf("%s\n", out.dim(fmt.Sprintf("Finished in %.1fs.", time.Since(started).Seconds())))
	if len(failed) > 0 {
		return fmt.Errorf("demo: the run failed for %s", strings.Join(failed, ", "))
	}
	return nil
}

// demoMatches reports whether a kept database holds the demo these fakes
// describe: every payment of both providers, the crafted ones included.
func demoMatches(ctx context.Context, db *gorm.DB, stripeIDs, gcIDs []string, ss *scenario.Stripe, gs *scenario.GoCardless) (bool, error) {
	for _, c := range []struct {
		provider string
		all      int
		crafted  []string
	}{
		{stripe.Name, len(stripeIDs), []string{ss.MissingLocal, ss.Behind, ss.Conflict, ss.Stale, ss.Mismatch, ss.UnknownStatus, ss.OutOfOrder, ss.LocalAhead}},
		{gocardless.Name, len(gcIDs), []string{gs.MissingLocal, gs.Submitted, gs.Confirmed, gs.PaidOut, gs.LateFailure, gs.FailedAfterPayout,
			gs.ChargedBack, gs.ChargebackCancelled, gs.Refunded, gs.Stale, gs.Mismatch, gs.UnknownStatus, gs.OutOfOrder}},
	} {
		var all, crafted int64
		q := db.WithContext(ctx).Model(&models.Payment{})
		if err := q.Where("provider = ?", c.provider).Count(&all).Error; err != nil {
			return false, err
		}
		q = db.WithContext(ctx).Model(&models.Payment{})
		if err := q.Where("provider = ? AND provider_id IN ?", c.provider, c.crafted).Count(&crafted).Error; err != nil {
			return false, err
		}
		if all != int64(c.all) || crafted != int64(len(c.crafted)) {
			return false, nil
		}
	}
	return true, nil
}

// ---- terminal output -------------------------------------------------------

// demoWidth is the width the demo lays its output out for.
const demoWidth = 100

// demoTerm writes the demo's output, in colour on a terminal.
type demoTerm struct {
	w     io.Writer
	color bool
}

func newDemoTerm(w io.Writer, color bool) *demoTerm { return &demoTerm{w: w, color: color} }

func (t *demoTerm) printf(format string, a ...any) { fmt.Fprintf(t.w, format, a...) }

func (t *demoTerm) paint(code, s string) string {
	if !t.color || s == "" {
		return s
	}
	return "\033[" + code + "m" + s + "\033[0m"
}

func (t *demoTerm) bold(s string) string  { return t.paint("1", s) }
func (t *demoTerm) dim(s string) string   { return t.paint("2", s) }
func (t *demoTerm) green(s string) string { return t.paint("32", s) }

// action colours an action: refused red, reported yellow, repaired green.
func (t *demoTerm) action(a string) string {
	switch a {
	case models.ActionRefused:
		return t.paint("1;31", a)
	case models.ActionReported:
		return t.paint("33", a)
	case models.ActionRepaired:
		return t.paint("32", a)
	}
	return a
}

func (t *demoTerm) intro(payments int, seed int64, dbPath string, throwaway, rerun bool) {
	t.printf("%s\n", t.bold(fmt.Sprintf("reconciler demo: a fake Stripe and a fake GoCardless on 127.0.0.1, %s generated payments each (seed %d)", demoThousands(int64(payments)), seed)))
	switch {
	case throwaway:
		t.printf("%s\n\n", t.dim("Local database: a fresh throwaway file, deleted on exit (--db FILE keeps one)."))
	case rerun:
		t.printf("%s\n\n", t.dim("Local database: "+dbPath+", which already held this demo: the runs below are reruns of the same window."))
	default:
		t.printf("%s\n\n", t.dim("Local database: "+dbPath+" (new; kept)."))
	}
}

// providerTitle is a provider's name as people write it.
func demoProviderTitle(p string) string {
	switch p {
	case stripe.Name:
		return "Stripe"
	case gocardless.Name:
		return "GoCardless"
	}
	return p
}

// run prints one run: a header, what needs a human as a table, then the
// repaired items in brief.
func (t *demoTerm) run(r report.RunReport) {
	title := fmt.Sprintf("%s · run %d · %s mode · %s", demoProviderTitle(r.Provider), r.ID, demoDash(r.Mode), r.Status)
	if r.DurationSeconds > 0 {
		title += fmt.Sprintf(" in %.2fs", r.DurationSeconds)
	}
	rule := demoWidth - utf8.RuneCountInString(title) - 4
	t.printf("%s %s\n", t.bold("── "+title), t.dim(strings.Repeat("─", max(rule, 3))))
	t.printf("  window %s → %s\n", r.WindowStart.Format("2006-01-02 15:04"), r.WindowEnd.Format("2006-01-02 15:04 MST"))
	t.printf("  examined %s   %s %s   %s %s   %s %s   synthetic events %s   webhook miss ratio %.1f%%\n",
		demoThousands(r.Examined), t.green("repaired"), demoThousands(r.Repaired), t.action(models.ActionRefused), demoThousands(r.Refused),
		t.action(models.ActionReported), demoThousands(r.Reported), demoThousands(r.SyntheticEvents), 100*r.WebhookMissRatio)
	if r.Error != nil {
		t.printf("  %s %s\n", t.paint("1;31", "error:"), *r.Error)
	}
	var human, repaired []report.Item
	for _, it := range r.Items {
		if it.NeedsHuman() {
			human = append(human, it)
		} else {
			repaired = append(repaired, it)
		}
	}
	t.printf("\n")
	if len(human) == 0 {
		t.printf("  Nothing needs a human.\n\n")
	} else {
		const maxRows = 25
		t.printf("  %s\n", t.bold(fmt.Sprintf("Needs a human (%d):", len(human))))
		shown := human[:min(len(human), maxRows)]
		t.table(shown, true)
		if n := len(human) - len(shown); n > 0 {
			t.printf("    …and %d more in the HTML report\n", n)
		}
		t.printf("\n")
	}
	if len(repaired) > 0 {
		ex := demoExamples(repaired, 3)
		t.printf("  %s %s\n", t.bold(fmt.Sprintf("Repaired (%d):", len(repaired))), t.dim(demoKindCounts(repaired)+"; for example:"))
		t.table(ex, false)
		if n := len(repaired) - len(ex); n > 0 {
			t.printf("    …and %d more repaired\n", n)
		}
		t.printf("\n")
	}
}

// table prints items as aligned columns; with explain, each row is followed
// by its explanation, wrapped.
func (t *demoTerm) table(items []report.Item, explain bool) {
	rows := [][]string{}
	if explain {
		rows = append(rows, []string{"PAYMENT", "KIND", "ACTION", "LOCAL → PROVIDER", "AMOUNT"})
	}
	for _, it := range items {
		rows = append(rows, []string{it.ProviderID, it.Kind, it.Action,
			demoCut(demoDash(demoStr(it.LocalState))+" → "+demoDash(demoStr(it.ProviderState)), 32), demoAmount(it)})
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
			for _, l := range demoWrap(items[i-1].Explanation, demoWidth-8, 3) {
				t.printf("        %s\n", t.dim(l))
			}
		}
	}
}

func demoStr(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

func demoAmount(it report.Item) string {
	if it.Amount == 0 && it.Currency == "" {
		return "—"
	}
	return report.MajorUnits(it.Amount, it.Currency) + " " + strings.ToUpper(it.Currency)
}

// examples picks up to n items, one of each kind first.
func demoExamples(items []report.Item, n int) []report.Item {
	var out []report.Item
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

// kindCounts is "behind 52, missing_local 9".
func demoKindCounts(items []report.Item) string {
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
		parts[i] = fmt.Sprintf("%s %d", k, n[k])
	}
	return strings.Join(parts, ", ")
}

// wrap breaks s into lines of at most width runes, at most maxLines of them
// (the last ending in "…" when s was cut).
func demoWrap(s string, width, maxLines int) []string {
	var lines []string
	var cur []string
	curLen := 0
	words := strings.Fields(s)
	for _, w := range words {
		wl := utf8.RuneCountInString(w)
		if curLen > 0 && curLen+1+wl > width {
			lines = append(lines, strings.Join(cur, " "))
			cur, curLen = nil, 0
			if len(lines) == maxLines {
				last := []rune(lines[maxLines-1])
				if len(last) > width-2 {
					last = last[:width-2]
				}
				lines[maxLines-1] = strings.TrimRight(string(last), " ") + " …"
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

// thousands formats n with thousands separators: 12,345.
func demoThousands(n int64) string {
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

// demoStory is what the closing words need to know.
type demoStory struct {
	payments, missed, delivered int
	rerun                       bool
	htmlPath                    string
}

// explain prints "What just happened" and "What to try next".
func (t *demoTerm) explain(rep report.Report, s demoStory) {
	var repaired, refused, reported, synthetic int64
	for _, r := range rep.Runs {
		repaired += r.Repaired
		refused += r.Refused
		reported += r.Reported
		synthetic += r.SyntheticEvents
	}
	lines := []string{fmt.Sprintf("Fake Stripe and GoCardless servers ran in this process, with %s generated payments each.", demoThousands(int64(s.payments)))}
	if s.rerun {
		lines = append(lines,
			"This database already held the demo, so both runs were reruns of the same window.",
			fmt.Sprintf("It repaired %s and recorded %s: every write is guarded, reruns are harmless.",
				demoPlural(repaired, "payment", "payments"), demoPlural(synthetic, "missed webhook", "missed webhooks")))
	} else {
		lines = append(lines,
			fmt.Sprintf("Their webhooks fed a fresh local database: %s of %s lost, one out of order, a few rows edited.",
				demoThousands(int64(s.missed)), demoThousands(int64(s.missed+s.delivered))),
			fmt.Sprintf("reconciler read both event logs, repaired %s and recorded the %s.",
				demoPlural(repaired, "payment", "payments"), demoPlural(synthetic, "missed webhook", "missed webhooks")))
	}
	lines = append(lines, fmt.Sprintf("It refused %d and reported %d: it never moves a payment backwards or guesses; a human decides.", refused, reported))
	t.printf("%s\n", t.bold("What just happened"))
	for _, l := range lines {
		for _, w := range demoWrap(l, demoWidth-2, 3) {
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

func demoPlural(n int64, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return demoThousands(n) + " " + many
}

func demoDash(s string) string {
	if s == "" {
		return "—"
	}
	return s
}

// demoCut shortens s to at most n runes, ending in "…" when cut.
func demoCut(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

// demoDB opens (creating) the embedded store at path and migrates it.
func demoDB(ctx context.Context, path string) (*gorm.DB, error) {
	db, err := dbopen.SQLite(path)
	if err != nil {
		return nil, err
	}
	if _, err := models.Migrate(ctx, db); err != nil {
		return nil, fmt.Errorf("migrate %s: %w", path, err)
	}
	return db, nil
}
