// Package report renders runs and their drift items for people (Markdown),
// spreadsheets (CSV) and programs (JSON). Reports carry ids, states, amounts
// and times, never customer data or raw payloads.
package report

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/reconciler/reconciler/models"
)

// Formats lists the formats Render accepts.
var Formats = []string{"json", "csv", "md"}

// ValidFormat reports whether f is one of Formats.
func ValidFormat(f string) bool {
	for _, v := range Formats {
		if v == f {
			return true
		}
	}
	return false
}

// Report is one or more runs with their drift items. Its JSON form is
// stable: fields are added, never renamed.
type Report struct {
	Runs []RunReport `json:"runs"`
}

// RunReport is one run.
type RunReport struct {
	ID              int64      `json:"id"`
	Provider        string     `json:"provider"`
	Account         string     `json:"account"`
	WindowStart     time.Time  `json:"window_start"`
	WindowEnd       time.Time  `json:"window_end"`
	StartedAt       time.Time  `json:"started_at"`
	FinishedAt      *time.Time `json:"finished_at"`
	Status          string     `json:"status"`
	Trigger         string     `json:"trigger"`
	TriggeredBy     string     `json:"triggered_by"`
	DryRun          bool       `json:"dry_run"`
	Examined        int64      `json:"examined"`
	InSync          int64      `json:"in_sync"`
	Repaired        int64      `json:"repaired"`
	Refused         int64      `json:"refused"`
	Reported        int64      `json:"reported"`
	SyntheticEvents int64      `json:"synthetic_events"`
	EventsRead      int64      `json:"events_read"`
	APIRequests     int64      `json:"api_requests"`
	// WebhookMissRatio is synthetic events over events read in the window.
	WebhookMissRatio float64 `json:"webhook_miss_ratio"`
	Error            *string `json:"error"`
	// Notes says how the window was adjusted (caught up to a checkpoint,
	// clamped to the provider's retention).
	Notes map[string]any `json:"notes,omitempty"`
	Items []Item         `json:"items"`
}

// Item is one drift item.
type Item struct {
	ProviderID    string         `json:"provider_id"`
	Kind          string         `json:"kind"`
	Action        string         `json:"action"`
	LocalState    *string        `json:"local_state"`
	ProviderState *string        `json:"provider_state"`
	Explanation   string         `json:"explanation"`
	Detail        map[string]any `json:"detail"`
}

// Load reads runs by id with their items; items needing a human come first.
func Load(ctx context.Context, db *gorm.DB, runIDs ...int64) (Report, error) {
	var rep Report
	for _, id := range runIDs {
		var r models.Run
		if err := db.WithContext(ctx).First(&r, id).Error; err != nil {
			return rep, fmt.Errorf("read run %d: %w", id, err)
		}
		var items []models.DriftItem
		if err := db.WithContext(ctx).Where("run_id = ?", id).Order("id").Find(&items).Error; err != nil {
			return rep, fmt.Errorf("read drift items of run %d: %w", id, err)
		}
		rr := Summary(r)
		for _, it := range items {
			d := map[string]any{}
			_ = json.Unmarshal(it.Detail, &d)
			expl, _ := d["explanation"].(string)
			delete(d, "explanation")
			rr.Items = append(rr.Items, Item{ProviderID: it.ProviderID, Kind: it.Kind, Action: it.Action,
				LocalState: it.LocalState, ProviderState: it.ProviderState, Explanation: expl, Detail: d})
		}
		sort.SliceStable(rr.Items, func(i, j int) bool { return priority(rr.Items[i]) < priority(rr.Items[j]) })
		rep.Runs = append(rep.Runs, rr)
	}
	return rep, nil
}

// Summary is a run without its items.
func Summary(r models.Run) RunReport {
	rr := RunReport{ID: r.ID, Provider: r.Provider, Account: r.Account, WindowStart: r.WindowStart.UTC(), WindowEnd: r.WindowEnd.UTC(),
		StartedAt: r.StartedAt.UTC(), FinishedAt: r.FinishedAt, Status: r.Status, Trigger: r.Trigger, TriggeredBy: r.TriggeredBy,
		DryRun: r.DryRun, Examined: r.Examined, InSync: r.InSync, Repaired: r.Repaired, Refused: r.Refused, Reported: r.Reported,
		SyntheticEvents: r.SyntheticEvents, EventsRead: r.EventsRead, APIRequests: r.APIRequests, Error: r.Error, Items: []Item{}}
	if r.EventsRead > 0 {
		rr.WebhookMissRatio = float64(r.SyntheticEvents) / float64(r.EventsRead)
	}
	if len(r.Notes) > 0 {
		var n map[string]any
		if json.Unmarshal(r.Notes, &n) == nil && len(n) > 0 {
			rr.Notes = n
		}
	}
	return rr
}

func priority(it Item) int {
	switch it.Action {
	case models.ActionRefused:
		return 0
	case models.ActionReported:
		return 1
	}
	return 2
}

// Render writes rep in format.
func Render(w io.Writer, rep Report, format string) error {
	switch format {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	case "csv":
		return renderCSV(w, rep)
	case "md":
		return renderMD(w, rep)
	}
	return fmt.Errorf("unknown report format %q (use %s)", format, strings.Join(Formats, ", "))
}

func str(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

func renderCSV(w io.Writer, rep Report) error {
	cw := csv.NewWriter(w)
	_ = cw.Write([]string{"run_id", "provider", "account", "provider_id", "kind", "action", "local_state", "provider_state", "provider_time", "explanation"})
	for _, r := range rep.Runs {
		for _, it := range r.Items {
			pt, _ := it.Detail["provider_time"].(string)
			_ = cw.Write([]string{fmt.Sprint(r.ID), r.Provider, r.Account, it.ProviderID, it.Kind, it.Action, str(it.LocalState), str(it.ProviderState), pt, it.Explanation})
		}
	}
	cw.Flush()
	return cw.Error()
}

func renderMD(w io.Writer, rep Report) error {
	for _, r := range rep.Runs {
		acct := r.Account
		if acct == "" {
			acct = "platform"
		}
		dry := ""
		if r.DryRun {
			dry = " (dry run: nothing was written but this report)"
		}
		fmt.Fprintf(w, "## Run %d: %s, %s%s\n\n", r.ID, r.Provider, acct, dry)
		fmt.Fprintf(w, "| | |\n|---|---|\n")
		fmt.Fprintf(w, "| window | %s → %s |\n", r.WindowStart.Format(time.RFC3339), r.WindowEnd.Format(time.RFC3339))
		fmt.Fprintf(w, "| status | %s |\n| trigger | %s %s |\n", r.Status, r.Trigger, r.TriggeredBy)
		fmt.Fprintf(w, "| examined | %d |\n| in sync | %d |\n| repaired | %d |\n| refused | %d |\n| reported | %d |\n", r.Examined, r.InSync, r.Repaired, r.Refused, r.Reported)
		fmt.Fprintf(w, "| events read | %d |\n| synthetic events | %d |\n| webhook miss ratio | %.2f%% |\n| API requests | %d |\n", r.EventsRead, r.SyntheticEvents, 100*r.WebhookMissRatio, r.APIRequests)
		if r.Error != nil {
			fmt.Fprintf(w, "| error | %s |\n", mdCell(*r.Error))
		}
		if wn, ok := r.Notes["warning"].(string); ok {
			fmt.Fprintf(w, "| warning | %s |\n", mdCell(wn))
		}
		fmt.Fprintln(w)
		if len(r.Items) == 0 {
			fmt.Fprint(w, "No drift.\n\n")
			continue
		}
		fmt.Fprintf(w, "| payment | kind | action | local → provider | explanation |\n|---|---|---|---|---|\n")
		for _, it := range r.Items {
			fmt.Fprintf(w, "| %s | %s | %s | %s → %s | %s |\n", mdCell(it.ProviderID), mdCell(it.Kind), mdCell(it.Action),
				mdCell(orDash(str(it.LocalState))), mdCell(orDash(str(it.ProviderState))), mdCell(it.Explanation))
		}
		fmt.Fprintln(w)
	}
	return nil
}

// mdCell makes s safe inside a Markdown table cell: a pipe would split the
// cell and a newline would end the table.
func mdCell(s string) string {
	s = strings.ReplaceAll(s, "|", "\\|")
	s = strings.ReplaceAll(s, "\r\n", "<br>")
	return strings.ReplaceAll(s, "\n", "<br>")
}

func orDash(s string) string {
	if s == "" {
		return "—"
	}
	return s
}
