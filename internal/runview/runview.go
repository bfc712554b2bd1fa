// Package runview shows the run record on the command line (reconciler
// runs list, runs show): kubectl-like aligned columns for people, and for
// programs the JSON serve's GET /runs and GET /runs/{id} answer, field for
// field (serve.RunEntry, report.RunReport).
package runview

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/report"
	"github.com/reconciler/reconciler/serve"
)

// Formats are the outputs List and Show write.
var Formats = []string{"table", "json"}

// List writes runs: as {"runs": [...]} with GET /runs's entries
// (serve.ListEntry), or a table, one run a line.
func List(w io.Writer, format string, runs []models.Run) error {
	if format == "json" {
		entries := make([]serve.RunEntry, 0, len(runs))
		for _, r := range runs {
			entries = append(entries, serve.ListEntry(r))
		}
		return writeJSON(w, map[string]any{"runs": entries})
	}
	t := newTable(w, runHeader...)
	for _, r := range runs {
		t.row(runRow(report.Summary(r))...)
	}
	return t.flush()
}

// Show writes one run with its items: as GET /runs/{id}'s JSON, or the
// run's line of List followed by a table of its items.
func Show(w io.Writer, format string, run report.RunReport) error {
	if format == "json" {
		return writeJSON(w, run)
	}
	t := newTable(w, runHeader...)
	t.row(runRow(run)...)
	if err := t.flush(); err != nil {
		return err
	}
	if run.Error != nil {
		fmt.Fprintf(w, "\nERROR: %s\n", oneLine(*run.Error))
	}
	if len(run.Items) == 0 {
		_, err := fmt.Fprintln(w, "\nNo drift items.")
		return err
	}
	fmt.Fprintln(w)
	t = newTable(w, "FINGERPRINT", "KIND", "ACTION", "PAYMENT", "LOCAL", "PROVIDER", "AMOUNT", "STATUS")
	for _, it := range run.Items {
		t.row(it.Fingerprint, it.Kind, it.ActionLabel(), it.ProviderID, orNone(it.LocalState), orNone(it.ProviderState),
			report.MajorUnits(it.Amount, it.Currency)+" "+strings.ToUpper(it.Currency), dash(it.Status))
	}
	return t.flush()
}

var runHeader = []string{"ID", "PROVIDER", "ACCOUNT", "STATUS", "TRIGGER", "DRY-RUN", "WINDOW", "STARTED", "DURATION",
	"EXAMINED", "REPAIRED", "REFUSED", "REPORTED"}

func runRow(r report.RunReport) []string {
	account := r.Account
	if account == "" {
		account = "platform"
	}
	duration := "-"
	if r.FinishedAt != nil {
		duration = time.Duration(r.DurationSeconds * float64(time.Second)).Round(time.Millisecond).String()
	}
	n := func(v int64) string { return strconv.FormatInt(v, 10) }
	return []string{n(r.ID), r.Provider, account, r.Status, r.Trigger, strconv.FormatBool(r.DryRun),
		stamp(r.WindowStart) + ".." + stamp(r.WindowEnd), stamp(r.StartedAt), duration,
		n(r.Examined), n(r.Repaired), n(r.Refused), n(r.Reported)}
}

func stamp(t time.Time) string { return t.UTC().Format("2006-01-02T15:04Z") }

func orNone(s *string) string {
	if s == nil {
		return "-"
	}
	return dash(*s)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// table is a text/tabwriter with kubectl's spacing: columns three spaces
// apart, cells made one line so no value can break the alignment.
type table struct{ tw *tabwriter.Writer }

func newTable(w io.Writer, header ...string) *table {
	t := &table{tabwriter.NewWriter(w, 0, 8, 3, ' ', 0)}
	t.row(header...)
	return t
}

func (t *table) row(cells ...string) {
	for i, c := range cells {
		cells[i] = oneLine(c)
	}
	fmt.Fprintln(t.tw, strings.Join(cells, "\t"))
}

// oneLine replaces control characters (newlines, tabs, escapes) with
// spaces: a value from a run record cannot break a line or a column.
func oneLine(s string) string {
	return strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return ' '
		}
		return r
	}, s)
}

func (t *table) flush() error { return t.tw.Flush() }

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
