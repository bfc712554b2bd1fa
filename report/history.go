package report

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"gorm.io/gorm"

	"github.com/reconciler/reconciler/internal/dbopen"
	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/store"
)

// LoadHistory reads the last n finished runs (newest first in the
// database, returned oldest first), optionally of one provider and account.
func LoadHistory(ctx context.Context, db *gorm.DB, n int, provider, account string) ([]RunReport, error) {
	runs, err := dbopen.Store(db, nil).FindRuns(ctx, store.RunQuery{NotStatus: models.RunRunning, Provider: provider, Account: account, Limit: n})
	if err != nil {
		return nil, err
	}
	out := make([]RunReport, 0, len(runs))
	for i := len(runs) - 1; i >= 0; i-- {
		out = append(out, Summary(runs[i]))
	}
	return out, nil
}

// RenderHistory writes runs (oldest first) in format: a trend for finance.
// A failed or interrupted run says so in every format for people, and its
// webhook miss ratio, which it could not measure, is "—" there and empty
// in the CSV; the JSON keeps the number.
func RenderHistory(w io.Writer, runs []RunReport, format string) error {
	switch format {
	case "html":
		return RenderHistoryHTML(w, runs)
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if runs == nil {
			runs = []RunReport{}
		}
		return enc.Encode(map[string]any{"runs": runs})
	case "csv":
		cw := csv.NewWriter(w)
		_ = cw.Write([]string{"run_id", "provider", "account", "window_start", "window_end", "status", "trigger", "dry_run",
			"examined", "in_sync", "repaired", "refused", "reported", "synthetic_events", "events_read", "webhook_miss_ratio", "duration_seconds"})
		for _, r := range runs {
			// A run that did not finish measured no ratio: the cell is
			// empty, not 0.
			ratio := ""
			if measured(r) {
				ratio = fmt.Sprintf("%.6f", r.WebhookMissRatio)
			}
			_ = cw.Write([]string{fmt.Sprint(r.ID), r.Provider, r.Account, r.WindowStart.Format(time.RFC3339), r.WindowEnd.Format(time.RFC3339),
				r.Status, r.Trigger, fmt.Sprint(r.DryRun), fmt.Sprint(r.Examined), fmt.Sprint(r.InSync), fmt.Sprint(r.Repaired),
				fmt.Sprint(r.Refused), fmt.Sprint(r.Reported), fmt.Sprint(r.SyntheticEvents), fmt.Sprint(r.EventsRead),
				ratio, fmt.Sprintf("%.3f", r.DurationSeconds)})
		}
		cw.Flush()
		return cw.Error()
	case "text":
		sw := &stickyWriter{w: w}
		tw := tabwriter.NewWriter(sw, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "run\tprovider\taccount\twindow start\tstatus\texamined\trepaired\trefused\treported\tmiss ratio\t")
		for _, r := range runs {
			acct := r.Account
			if acct == "" {
				acct = "platform"
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", r.ID, plain(r.Provider), plain(acct),
				r.WindowStart.Format(time.RFC3339), plain(r.Status), Thousands(r.Examined), Thousands(r.Repaired), Thousands(r.Refused),
				Thousands(r.Reported), missRatio(r))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		// The runs that did not finish say so below the table, wrapped.
		first := true
		for _, r := range runs {
			inc := incomplete(r)
			if inc == "" {
				continue
			}
			if first {
				fmt.Fprintln(sw)
				first = false
			}
			for i, l := range Wrap(fmt.Sprintf("run %d: %s", r.ID, plain(inc)), TextWidth-2, 0) {
				if i > 0 {
					l = "  " + l
				}
				fmt.Fprintln(sw, l)
			}
		}
		return sw.err
	case "md":
		w := &stickyWriter{w: w}
		fmt.Fprintf(w, "| run | provider | account | window start | status | examined | repaired | refused | reported | miss ratio | notes |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
		for _, r := range runs {
			acct := r.Account
			if acct == "" {
				acct = "platform"
			}
			notes := incomplete(r)
			if r.DryRun {
				notes = strings.TrimSpace("dry run. " + notes)
			}
			fmt.Fprintf(w, "| %d | %s | %s | %s | %s | %d | %d | %d | %d | %s | %s |\n", r.ID, r.Provider, mdCell(acct),
				r.WindowStart.Format(time.RFC3339), r.Status, r.Examined, r.Repaired, r.Refused, r.Reported, missRatio(r), mdCell(notes))
		}
		return w.err
	}
	return fmt.Errorf("unknown report format %q", format)
}
