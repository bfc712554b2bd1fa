// Package report renders runs and their drift items for people (Markdown),
// spreadsheets (CSV) and programs (JSON). Reports carry ids, states, amounts
// and times, never customer data or raw payloads.
package report

import (
	"bufio"
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/valyala/fastjson"
	"gorm.io/gorm"

	"github.com/reconciler/reconciler/acks"
	"github.com/reconciler/reconciler/internal/dbopen"
	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/reconcile"
)

// Formats lists the formats Render accepts.
var Formats = []string{"json", "csv", "md", "html", "text"}

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
	ID          int64      `json:"id"`
	Provider    string     `json:"provider"`
	Account     string     `json:"account"`
	WindowStart time.Time  `json:"window_start"`
	WindowEnd   time.Time  `json:"window_end"`
	StartedAt   time.Time  `json:"started_at"`
	FinishedAt  *time.Time `json:"finished_at"`
	Status      string     `json:"status"`
	Trigger     string     `json:"trigger"`
	TriggeredBy string     `json:"triggered_by"`
	DryRun      bool       `json:"dry_run"`
	// Mode is "test" or "live" (the provider key's mode), "" when unknown.
	Mode string `json:"mode"`
	// DurationSeconds is finished_at - started_at; 0 while running.
	DurationSeconds float64 `json:"duration_seconds"`
	Examined        int64   `json:"examined"`
	InSync          int64   `json:"in_sync"`
	Repaired        int64   `json:"repaired"`
	Refused         int64   `json:"refused"`
	Reported        int64   `json:"reported"`
	SyntheticEvents int64   `json:"synthetic_events"`
	EventsRead      int64   `json:"events_read"`
	APIRequests     int64   `json:"api_requests"`
	// WebhookMissRatio is synthetic events over events read in the window.
	WebhookMissRatio float64 `json:"webhook_miss_ratio"`
	Error            *string `json:"error"`
	// Notes says how the window was adjusted (caught up to a checkpoint,
	// clamped to the provider's retention).
	Notes map[string]any `json:"notes,omitempty"`
	// Totals are the window's money per currency (Totals); a report of one
	// run has them, a list of runs does not.
	Totals *Totals `json:"totals,omitempty"`
	// ItemsOmitted counts items left out of a report meant for reading
	// (Markdown, HTML): the CSV and JSON reports list every item.
	ItemsOmitted int64 `json:"items_omitted,omitempty"`
	// Triage sorts the items needing a human (refused and reported) into
	// new since the previous run, still open, and acknowledged; nil in a
	// list of runs.
	Triage *Triage `json:"triage,omitempty"`
	Items  []Item  `json:"items"`
}

// Triage counts a run's items needing a human by status (acks.Status*).
type Triage struct {
	// PreviousRunID is the run compared with: the newest succeeded,
	// non-dry run of the same provider and account before this one.
	PreviousRunID *int64 `json:"previous_run_id"`
	acks.Counts
	// RefusedUnacknowledged is what the refused-drift alert counts.
	RefusedUnacknowledged int64 `json:"refused_unacknowledged"`
}

// ItemAck is the acknowledgement standing for an item.
type ItemAck struct {
	By   string    `json:"by"`
	Note string    `json:"note"`
	At   time.Time `json:"at"`
}

// Item is one drift item.
type Item struct {
	ProviderID    string  `json:"provider_id"`
	Kind          string  `json:"kind"`
	Action        string  `json:"action"`
	LocalState    *string `json:"local_state"`
	ProviderState *string `json:"provider_state"`
	// Amount and Currency are the payment's (minor units, lower-case ISO
	// 4217); AmountRefunded its refunded total after the run.
	Amount         int64  `json:"amount"`
	Currency       string `json:"currency"`
	AmountRefunded int64  `json:"amount_refunded"`
	// ProviderTime is the provider's time of the change; TimeInferred says
	// it came from an object, not an event.
	ProviderTime *time.Time `json:"provider_time"`
	TimeInferred bool       `json:"time_inferred"`
	EventID      string     `json:"event_id,omitempty"`
	// Explanation is one sentence for support staff.
	Explanation string `json:"explanation"`
	// DashboardURL opens the payment in the provider's dashboard.
	DashboardURL string         `json:"dashboard_url"`
	Detail       map[string]any `json:"detail"`
	// DryRun says the item is a dry run's: an action of repaired means
	// "would repair", and nothing was changed.
	DryRun bool `json:"dry_run"`
	// Fingerprint names the item across runs (provider, payment, kind,
	// provider state): reconciler ack takes it.
	Fingerprint string `json:"fingerprint"`
	// Status is new, open (still open: the previous run had it too) or
	// acknowledged for an item needing a human; "" for a repaired one.
	Status string `json:"status,omitempty"`
	// Acknowledged is who acknowledged the item, when and why.
	Acknowledged *ItemAck `json:"acknowledged,omitempty"`
}

// NeedsHuman reports whether the item was refused or only reported (not
// repaired, nor delivered to the application's worker).
func (it Item) NeedsHuman() bool {
	return it.Action != models.ActionRepaired && it.Action != models.ActionDelivered
}

// WouldRepair is what a dry run's reports call its repaired items.
const WouldRepair = "would repair"

// ActionLabel is how reports for people name an item's action: a dry run's
// repaired items say WouldRepair.
func (it Item) ActionLabel() string { return actionLabel(it.Action, it.DryRun) }

func actionLabel(action string, dry bool) string {
	if dry && action == models.ActionRepaired {
		return WouldRepair
	}
	return action
}

// dryTense puts a dry run's explanation in the conditional: the engine
// writes what it did ("the payment was marked captured"), and a dry run
// did none of it.
var dryTense = strings.NewReplacer(
	"the payment was marked ", "the payment would be marked ",
	"amount_refunded was raised", "amount_refunded would be raised",
	"it was created as ", "it would be created as ",
	"amount_captured was recorded", "amount_captured would be recorded",
	" was marked ", " would be marked ",
)

// WouldRepairPrefix starts the explanation of a dry run's repaired item, so
// that it says what the run would have done in every format, the CSV and
// JSON too, whose action stays the enum value repaired.
const WouldRepairPrefix = "Would repair (dry run, nothing was changed): "

// asDry marks an item as a dry run's and rewrites its explanation in the
// conditional; it is idempotent.
func asDry(it Item) Item {
	it.DryRun = true
	it.Explanation = dryTense.Replace(it.Explanation)
	if it.Action == models.ActionRepaired && !strings.HasPrefix(it.Explanation, WouldRepairPrefix) {
		it.Explanation = WouldRepairPrefix + it.Explanation
	}
	return it
}

// DashboardURL links a payment in its provider's dashboard, in test or live
// mode; "" for an unknown provider.
func DashboardURL(provider, mode, account, id string) string {
	switch provider {
	case "stripe":
		u := "https://dashboard.stripe.com/"
		if account != "" {
			u += account + "/"
		}
		if mode == "test" {
			u += "test/"
		}
		return u + "payments/" + id
	case "gocardless":
		if mode == "test" {
			return "https://manage-sandbox.gocardless.com/payments/" + id
		}
		return "https://manage.gocardless.com/payments/" + id
	}
	return ""
}

// MajorUnits formats minor units as a decimal number in major units
// ("12.34" for 1234 gbp, "1234" for 1234 jpy): models.MajorUnits.
func MajorUnits(minor int64, currency string) string { return models.MajorUnits(minor, currency) }

// Load reads runs by id with all their items; items needing a human come
// first. For large runs use Write, which streams.
func Load(ctx context.Context, db *gorm.DB, runIDs ...int64) (Report, error) {
	return LoadLimited(ctx, db, 0, runIDs...)
}

// byPriority orders items needing a human first, then by id.
const byPriority = "CASE action WHEN 'refused' THEN 0 WHEN 'reported' THEN 1 ELSE 2 END, id"

// LoadLimited reads runs with at most limit items each (0: all), those
// needing a human first; the rest are counted in ItemsOmitted.
func LoadLimited(ctx context.Context, db *gorm.DB, limit int, runIDs ...int64) (Report, error) {
	var rep Report
	runs := dbopen.Store(db, nil)
	for _, id := range runIDs {
		r, err := runs.GetRun(ctx, id)
		if err != nil {
			return rep, err
		}
		q := db.WithContext(ctx).Where("run_id = ?", id).Order(byPriority)
		if limit > 0 {
			q = q.Limit(limit)
		}
		var items []models.DriftItem
		if err := q.Find(&items).Error; err != nil {
			return rep, fmt.Errorf("read drift items of run %d: %w", id, err)
		}
		rr := Summary(r)
		if rr.Totals, err = LoadTotals(ctx, db, r); err != nil {
			return rep, fmt.Errorf("totals of run %d: %w", id, err)
		}
		tri, err := acks.Load(ctx, db, r)
		if err != nil {
			return rep, err
		}
		rr.Triage = triageOf(tri)
		for _, it := range items {
			rr.Items = append(rr.Items, triaged(itemOf(r, it), tri))
		}
		if limit > 0 && len(items) == limit {
			var total int64
			if err := db.WithContext(ctx).Model(&models.DriftItem{}).Where("run_id = ?", id).Count(&total).Error; err != nil {
				return rep, err
			}
			rr.ItemsOmitted = total - int64(len(items))
		}
		rep.Runs = append(rep.Runs, rr)
	}
	return rep, nil
}

// ReadableLimit is how many items a Markdown, HTML or text report lists per run.
const ReadableLimit = 2000

// Write renders runs from the database in format with bounded memory: JSON
// and CSV stream every item in batches; Markdown, HTML and text, meant for
// people, list at most ReadableLimit items per run (those needing a human
// first) and say how many more there are.
func Write(ctx context.Context, w io.Writer, db *gorm.DB, format string, runIDs ...int64) error {
	switch format {
	case "md", "html", "text":
		rep, err := LoadLimited(ctx, db, ReadableLimit, runIDs...)
		if err != nil {
			return err
		}
		return Render(w, rep, format)
	case "json", "csv":
	default:
		return fmt.Errorf("unknown report format %q (use %s)", format, strings.Join(Formats, ", "))
	}
	bw := bufio.NewWriterSize(w, 1<<16)
	var cw *csv.Writer
	if format == "csv" {
		cw = csv.NewWriter(bw)
		_ = cw.Write(CSVHeader)
	} else {
		bw.WriteString("{\n  \"runs\": [")
	}
	runs := dbopen.Store(db, nil)
	for i, id := range runIDs {
		r, err := runs.GetRun(ctx, id)
		if err != nil {
			return err
		}
		rr := Summary(r)
		if rr.Totals, err = LoadTotals(ctx, db, r); err != nil {
			return fmt.Errorf("totals of run %d: %w", id, err)
		}
		tri, err := acks.Load(ctx, db, r)
		if err != nil {
			return err
		}
		rr.Triage = triageOf(tri)
		if cw == nil {
			head, err := json.Marshal(rr)
			if err != nil {
				return err
			}
			// The summary ends with its (empty) items: stream them there.
			head, ok := bytes.CutSuffix(head, []byte(`"items":[]}`))
			if !ok {
				return errors.New("report: items must be the last field of a run")
			}
			if i > 0 {
				bw.WriteString(",")
			}
			bw.WriteString("\n    ")
			bw.Write(head)
			bw.WriteString(`"items":[`)
		}
		if cw != nil {
			writeCSVTotals(cw, rr)
		}
		n := 0
		// Each item appended by hand into one buffer (appendItem), its
		// detail's fields parsed into one scratch slice.
		p := parsers.Get()
		var buf []byte
		var scratch []field
		// Keyset pages per action, those needing a human first: memory
		// stays flat however many items a run has.
		err = eachItem(ctx, db, id, func(it models.DriftItem) error {
			item, rest := newItem(r, it, p, scratch)
			item = triaged(item, tri)
			scratch = rest[:0]
			if cw != nil {
				writeCSVRow(cw, rr, item)
				return nil
			}
			if n > 0 {
				bw.WriteString(",")
			}
			bw.WriteString("\n      ")
			buf = appendItem(buf[:0], item, rest)
			bw.Write(buf)
			n++
			return nil
		})
		parsers.Put(p)
		if err != nil {
			return fmt.Errorf("read drift items of run %d: %w", id, err)
		}
		if cw == nil {
			if n > 0 {
				bw.WriteString("\n    ")
			}
			bw.WriteString("]}")
		}
	}
	if cw != nil {
		cw.Flush()
		if err := cw.Error(); err != nil {
			return err
		}
	} else {
		bw.WriteString("\n  ]\n}\n")
	}
	return bw.Flush()
}

// eachItem calls fn with every drift item of a run, refused first, then
// reported, then repaired, then delivered, each by id, reading 5000 at a time.
func eachItem(ctx context.Context, db *gorm.DB, runID int64, fn func(models.DriftItem) error) error {
	// The next page is read while this one is rendered: on a month's
	// report of 20,000 items the reads were a third of its time, after the
	// run, with nothing else to do (issue 16).
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type page struct {
		items []models.DriftItem
		err   error
	}
	pages := make(chan page, 1)
	go func() {
		defer close(pages)
		for _, action := range []string{models.ActionRefused, models.ActionReported, models.ActionRepaired, models.ActionDelivered} {
			var last int64
			for {
				batch, err := itemsPage(ctx, db, runID, action, last)
				if err == nil && len(batch) == 0 {
					break
				}
				select {
				case pages <- page{batch, err}:
				case <-ctx.Done():
					return
				}
				if err != nil {
					return
				}
				if len(batch) < itemPage {
					break
				}
				last = batch[len(batch)-1].ID
			}
		}
	}()
	for p := range pages {
		if p.err != nil {
			return p.err
		}
		for _, it := range p.items {
			if err := fn(it); err != nil {
				return err
			}
		}
	}
	return ctx.Err()
}

// itemsPage reads the next page of a run's items of one action after id
// last: the columns itemOf reads, scanned into their fields, where gorm's
// Find scanned each row by reflection into the whole model. With the
// buffer above, the JSON report of a month's 20,000 items took 0.33 s
// instead of 0.37 (0.27 CPU-s instead of 0.31; five runs each, medians),
// the same bytes (issue 16).
func itemsPage(ctx context.Context, db *gorm.DB, runID int64, action string, last int64) ([]models.DriftItem, error) {
	rows, err := db.WithContext(ctx).Raw(itemsPageSQL, runID, action, last, itemPage).Rows()
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	batch := make([]models.DriftItem, 0, itemPage)
	for rows.Next() {
		var it models.DriftItem
		if err := rows.Scan(&it.ID, &it.RunID, &it.Provider, &it.ProviderID, &it.Kind, &it.Action, &it.LocalState, &it.ProviderState, &it.Detail); err != nil {
			return nil, err
		}
		batch = append(batch, it)
	}
	return batch, rows.Err()
}

// itemPage is how many drift items eachItem reads at a time.
const itemPage = 5000

// itemsPageSQL reads one page of a run's items of one action: a walk of
// drift_items_run_action_idx (migration 0013) in id order, stopped at the
// page's end, whatever the table's statistics say (TestItemPagesWalkTheIndex).
const itemsPageSQL = `SELECT id, run_id, provider, provider_id, kind, action, local_state, provider_state, detail
	FROM drift_items WHERE run_id = ? AND action = ? AND id > ? ORDER BY id LIMIT ?`

// withLinks fills the dashboard links a hand-built report lacks.
func withLinks(rep Report) Report {
	runs := make([]RunReport, len(rep.Runs))
	for i, r := range rep.Runs {
		items := make([]Item, len(r.Items))
		for j, it := range r.Items {
			if it.DashboardURL == "" {
				it.DashboardURL = DashboardURL(r.Provider, r.Mode, r.Account, it.ProviderID)
			}
			if it.Fingerprint == "" {
				it.Fingerprint = acks.Fingerprint(r.Provider, it.ProviderID, it.Kind, it.ProviderState)
			}
			if r.DryRun {
				it = asDry(it)
			}
			items[j] = it
		}
		r.Items = items
		runs[i] = r
	}
	return Report{Runs: runs}
}

// itemOf lifts the well-known detail keys into fields.
func itemOf(r models.Run, it models.DriftItem) Item {
	p := parsers.Get()
	defer parsers.Put(p)
	out, rest := newItem(r, it, p, nil)
	out.Detail = detailMap(rest)
	return out
}

// newItem is itemOf with the item's detail left as its fields (rest), as
// parsed by p: valid until p parses again, and sharing scratch's array.
func newItem(r models.Run, it models.DriftItem, p *fastjson.Parser, scratch []field) (out Item, rest []field) {
	out = Item{ProviderID: it.ProviderID, Kind: it.Kind, Action: it.Action, LocalState: it.LocalState, ProviderState: it.ProviderState,
		DashboardURL: DashboardURL(r.Provider, r.Mode, r.Account, it.ProviderID),
		Fingerprint:  acks.Fingerprint(it.Provider, it.ProviderID, it.Kind, it.ProviderState)}
	rest = lift(&out, parseFields(p, it.Detail, scratch))
	if r.DryRun {
		out = asDry(out)
	}
	return out, rest
}

// parseFields is the object b holds as its fields (fieldsOf), none when b
// is not a JSON object.
func parseFields(p *fastjson.Parser, b []byte, scratch []field) []field {
	v, err := p.ParseBytes(b)
	if err != nil {
		return scratch[:0]
	}
	o, err := v.Object()
	if err != nil {
		return scratch[:0]
	}
	return fieldsOf(o, scratch)
}

// detailMap is fs as a map of what encoding/json decodes each value into.
func detailMap(fs []field) map[string]any {
	d := make(map[string]any, len(fs))
	for _, f := range fs {
		d[f.key] = anyOf(f.v)
	}
	return d
}

// parsers are reused: a parser keeps its buffers between documents.
var parsers fastjson.ParserPool

// anyOf is v as encoding/json would decode it into an any.
func anyOf(v *fastjson.Value) any {
	switch v.Type() {
	case fastjson.TypeObject:
		m := map[string]any{}
		o, _ := v.Object()
		o.Visit(func(k []byte, v *fastjson.Value) { m[string(k)] = anyOf(v) })
		return m
	case fastjson.TypeArray:
		a, _ := v.Array()
		out := make([]any, len(a))
		for i, e := range a {
			out[i] = anyOf(e)
		}
		return out
	case fastjson.TypeString:
		return string(v.GetStringBytes())
	case fastjson.TypeNumber:
		if f, ok := number(v); ok {
			return f
		}
		return nil
	case fastjson.TypeTrue:
		return true
	case fastjson.TypeFalse:
		return false
	}
	return nil
}

// triageOf is what a report says of a run's triage.
func triageOf(t acks.Triage) *Triage {
	out := &Triage{Counts: t.Total(), RefusedUnacknowledged: t.ByAction[models.ActionRefused].Unacknowledged()}
	if t.Previous != 0 {
		out.PreviousRunID = &t.Previous
	}
	return out
}

// triaged sets an item's status and acknowledgement from the run's triage.
func triaged(it Item, t acks.Triage) Item {
	if !it.NeedsHuman() {
		return it
	}
	it.Status = t.Status[it.Fingerprint]
	if it.Status == "" {
		it.Status = acks.StatusNew
	}
	if a, ok := t.Acks[it.Fingerprint]; ok && it.Status == acks.StatusAcknowledged {
		it.Acknowledged = &ItemAck{By: a.AcknowledgedBy, Note: a.Note, At: a.AcknowledgedAt.UTC()}
	}
	return it
}

// Summary is a run without its items.
func Summary(r models.Run) RunReport {
	rr := RunReport{ID: r.ID, Provider: r.Provider, Account: r.Account, WindowStart: r.WindowStart.UTC(), WindowEnd: r.WindowEnd.UTC(),
		StartedAt: r.StartedAt.UTC(), FinishedAt: r.FinishedAt, Status: r.Status, Trigger: r.Trigger, TriggeredBy: r.TriggeredBy,
		DryRun: r.DryRun, Examined: r.Examined, InSync: r.InSync, Repaired: r.Repaired, Refused: r.Refused, Reported: r.Reported,
		SyntheticEvents: r.SyntheticEvents, EventsRead: r.EventsRead, APIRequests: r.APIRequests, Error: r.Error, Items: []Item{},
		Mode: r.Mode}
	if r.FinishedAt != nil {
		rr.DurationSeconds = r.FinishedAt.Sub(r.StartedAt).Seconds()
	}
	rr.WebhookMissRatio = reconcile.MissRatio(r)
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
	rep = withLinks(rep)
	switch format {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	case "csv":
		return renderCSV(w, rep)
	case "md":
		return renderMD(w, rep)
	case "html":
		return RenderHTML(w, rep)
	case "text":
		return RenderText(w, rep, TextOptions{})
	}
	return fmt.Errorf("unknown report format %q (use %s)", format, strings.Join(Formats, ", "))
}

func str(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// CSVHeader is the CSV report's header row: one row per drift item.
var CSVHeader = []string{"run_id", "provider", "account", "mode", "provider_id", "kind", "action", "needs_human", "local_state", "provider_state",
	"amount", "currency", "amount_refunded", "provider_time", "time_inferred", "explanation", "dashboard_url", "dry_run",
	"fingerprint", "status", "acknowledged_by", "acknowledged_note"}

func renderCSV(w io.Writer, rep Report) error {
	cw := csv.NewWriter(w)
	_ = cw.Write(CSVHeader)
	for _, r := range rep.Runs {
		writeCSVTotals(cw, r)
		for _, it := range r.Items {
			writeCSVRow(cw, r, it)
		}
	}
	cw.Flush()
	return cw.Error()
}

func writeCSVRow(cw *csv.Writer, r RunReport, it Item) {
	var ackBy, ackNote string
	if a := it.Acknowledged; a != nil {
		ackBy, ackNote = a.By, a.Note
	}
	pt := ""
	if it.ProviderTime != nil {
		pt = it.ProviderTime.UTC().Format(time.RFC3339Nano)
	}
	_ = cw.Write([]string{fmt.Sprint(r.ID), r.Provider, r.Account, r.Mode, it.ProviderID, it.Kind, it.Action, fmt.Sprint(it.NeedsHuman()),
		str(it.LocalState), str(it.ProviderState), MajorUnits(it.Amount, it.Currency), strings.ToUpper(it.Currency),
		MajorUnits(it.AmountRefunded, it.Currency), pt, fmt.Sprint(it.TimeInferred), it.Explanation, it.DashboardURL,
		fmt.Sprint(it.DryRun || r.DryRun), it.Fingerprint, it.Status, ackBy, ackNote})
}

// CSVTotalKinds are the kinds of the CSV rows that carry a run's totals
// rather than a drift item: they come before the run's items, with no
// provider_id. totals_differ, first, is the flag.
var CSVTotalKinds = []string{"totals_differ", "total_captured", "total_refunded", "total_disputed", "total_settled"}

// writeCSVTotals writes a run's totals as rows before its items: the flag
// when the totals differ, then per currency one row per total, its amount
// as the rows have it; the explanation says the provider's side was not
// measured.
func writeCSVTotals(cw *csv.Writer, r RunReport) {
	t := r.Totals
	if t == nil {
		return
	}
	if t.Flagged {
		_ = cw.Write([]string{fmt.Sprint(r.ID), r.Provider, r.Account, r.Mode, "", CSVTotalKinds[0], "", "true", "", "",
			"", "", "", "", "false", t.Flag, "", fmt.Sprint(r.DryRun), "", "", "", ""})
	}
	for _, c := range t.Lines() {
		cur := strings.ToUpper(c.Currency)
		side := c.Side
		if side == "" {
			side = "rows"
		}
		for i, v := range []int64{c.Captured, c.Refunded, c.Disputed, c.Settled} {
			kind := CSVTotalKinds[i+1]
			expl := fmt.Sprintf("%s as the %s have it (%d %s payments); as the provider has it: %s.",
				strings.ReplaceAll(kind, "_", " "), side, c.Payments, cur, t.ProviderNote)
			if t.Measured {
				expl = fmt.Sprintf("%s, %s (%d %s payments: %s).", strings.ReplaceAll(kind, "_", " "), sideLabel(side), c.Payments, cur, t.Scope)
			}
			_ = cw.Write([]string{fmt.Sprint(r.ID), r.Provider, r.Account, r.Mode, "", kind, side, fmt.Sprint(t.Flagged), "", "",
				MajorUnits(v, c.Currency), cur, "", "", "false", expl, "", fmt.Sprint(r.DryRun), "", "", "", ""})
		}
	}
}

// ReadBy says how a run read its window when part of it was listed (the
// notes "listing" and "events"); "" when the event log read it all.
func ReadBy(notes map[string]any) string {
	l, ok := notes["listing"].(map[string]any)
	if !ok {
		return ""
	}
	str := func(m map[string]any, k string) string { v, _ := m[k].(string); return v }
	out := fmt.Sprintf("object listing for %s → %s", str(l, "since"), str(l, "until"))
	if r := str(l, "reason"); r != "" {
		out += " (" + r + ")"
	}
	if sk := str(l, "skipped"); sk != "" {
		out += ", skipped: " + sk
	}
	if e, ok := notes["events"].(map[string]any); ok {
		out += fmt.Sprintf("; the event log for %s → %s", str(e, "since"), str(e, "until"))
	}
	return out
}

// sideLabel says what a totals line is.
func sideLabel(side string) string {
	switch side {
	case "provider":
		return "as the provider has it"
	case "difference":
		return "the provider's minus the rows'"
	}
	return "as the rows have it"
}

func renderMD(out io.Writer, rep Report) error {
	w := &stickyWriter{w: out}
	hinted := false
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
		fmt.Fprintf(w, "| status | %s |\n| trigger | %s %s |\n", r.Status, r.Trigger, mdCell(r.TriggeredBy))
		if r.Mode != "" {
			fmt.Fprintf(w, "| mode | %s |\n", r.Mode)
		}
		fmt.Fprintf(w, "| duration | %s |\n", time.Duration(r.DurationSeconds*float64(time.Second)).Round(time.Millisecond))
		fmt.Fprintf(w, "| examined | %d |\n| in sync | %d |\n| %s | %d |\n| refused | %d |\n| reported | %d |\n", r.Examined, r.InSync,
			actionLabel(models.ActionRepaired, r.DryRun), r.Repaired, r.Refused, r.Reported)
		if tl := triageLine(r.Triage); tl != "" {
			fmt.Fprintf(w, "| needing a human | %s |\n", tl)
		}
		fmt.Fprintf(w, "| events read | %d |\n| synthetic events | %d |\n| webhook miss ratio | %s |\n| API requests | %d |\n", r.EventsRead, r.SyntheticEvents, missRatio(r), r.APIRequests)
		if r.Error != nil {
			fmt.Fprintf(w, "| error | %s |\n", mdCell(*r.Error))
		}
		if rb := ReadBy(r.Notes); rb != "" {
			fmt.Fprintf(w, "| read | %s |\n", mdCell(rb))
		}
		if wn, ok := r.Notes["warning"].(string); ok {
			fmt.Fprintf(w, "| warning | %s |\n", mdCell(wn))
		}
		fmt.Fprintln(w)
		inc := incomplete(r)
		if inc != "" {
			fmt.Fprintf(w, "**%s**\n\n", mdCell(inc))
		}
		mdTotals(w, r.Totals)
		if len(r.Items) == 0 {
			if inc != "" {
				fmt.Fprint(w, "No drift was found before the run stopped; the rest of the window was not compared.\n\n")
			} else {
				fmt.Fprint(w, "No drift.\n\n")
			}
			continue
		}
		for _, g := range groupItems(r) {
			fmt.Fprintf(w, "### %s (%d)\n\n", g.Title, len(g.Items))
			if g.Intro != "" {
				fmt.Fprintf(w, "%s\n\n", g.Intro)
			}
			if g.Human() && !hinted {
				hinted = true
				fmt.Fprintf(w, "To leave an item alone once you have looked at it, acknowledge it by its fingerprint: `%s`\n\n", AckHint)
			}
			for _, it := range g.Items {
				mdItem(w, it)
			}
			fmt.Fprintln(w)
		}
		if r.ItemsOmitted > 0 {
			fmt.Fprintf(w, "…and %d more items that %s; the CSV and JSON reports list every item.\n\n", r.ItemsOmitted, repairedPhrase(r.DryRun))
		}
	}
	return w.err
}

// mdItem writes one item as a list entry: its facts on the first line,
// the explanation on its own line, then, for an item needing a human, its
// fingerprint and who acknowledged it. Lines end in a backslash, a hard
// line break.
func mdItem(w io.Writer, it Item) {
	id := "**" + mdCell(it.ProviderID) + "**"
	if it.DashboardURL != "" {
		id = "[" + mdCell(it.ProviderID) + "](" + it.DashboardURL + ")"
	}
	action := mdCell(it.ActionLabel())
	if it.NeedsHuman() {
		action = "**" + action + "**"
	}
	amount := strings.TrimSpace(MajorUnits(it.Amount, it.Currency) + " " + mdCell(strings.ToUpper(it.Currency)))
	if it.Amount == 0 && it.Currency == "" {
		amount = "—"
	}
	if it.AmountRefunded > 0 {
		amount += ", refunded " + money(it.AmountRefunded, mdCell(it.Currency))
	}
	if m := mismatchAmounts(it); m != "" {
		amount = mdCell(m)
	}
	pt := "—"
	if it.ProviderTime != nil {
		pt = it.ProviderTime.UTC().Format(time.RFC3339)
		if it.TimeInferred {
			pt += " (inferred)"
		}
	}
	lines := []string{fmt.Sprintf("- %s · `%s` · %s · %s → %s · %s · provider time %s", id, mdCell(orDash(it.Kind)), action,
		mdCell(orDash(str(it.LocalState))), mdCell(orDash(str(it.ProviderState))), amount, pt)}
	if e := strings.TrimSpace(it.Explanation); e != "" {
		lines = append(lines, "  "+mdCell(e))
	}
	if it.NeedsHuman() && it.Fingerprint != "" {
		lines = append(lines, "  fingerprint `"+mdCell(it.Fingerprint)+"`")
	}
	if a := ackLine(it); a != "" {
		lines = append(lines, "  *"+mdCell(a)+"*")
	}
	fmt.Fprintln(w, strings.Join(lines, "\\\n"))
}

// repairedPhrase is how the omitted-items note names repaired items.
func repairedPhrase(dry bool) string {
	if dry {
		return "would be repaired (dry run)"
	}
	return "were repaired"
}

// mdTotals writes a run's totals: the flag first, then a table per
// currency, then what the provider's side is.
func mdTotals(w io.Writer, t *Totals) {
	if t == nil {
		return
	}
	if t.Flagged {
		fmt.Fprintf(w, "**%s**\n\n", mdCell(t.Flag))
	}
	if t.Measured {
		fmt.Fprintf(w, "Money in the window (%s):\n\n", mdCell(t.Scope))
	} else {
		fmt.Fprintf(w, "Money in the window, as the rows have it (%s):\n\n", RowsScope)
	}
	if len(t.Rows) == 0 {
		fmt.Fprint(w, "No payments in the window.\n\n")
	} else {
		fmt.Fprint(w, "| currency | as | payments | captured | refunded | disputed | settled |\n|---|---|---:|---:|---:|---:|---:|\n")
		for _, c := range t.Lines() {
			m := c.format()
			fmt.Fprintf(w, "| %s | %s | %d | %s | %s | %s | %s |\n", mdCell(strings.ToUpper(c.Currency)), sideLabel(c.Side), c.Payments, mdCell(m(c.Captured, c.Currency)),
				mdCell(m(c.Refunded, c.Currency)), mdCell(m(c.Disputed, c.Currency)), mdCell(m(c.Settled, c.Currency)))
		}
		fmt.Fprintln(w)
	}
	if !t.Measured {
		fmt.Fprintf(w, "As the provider has it: %s.\n\n", mdCell(t.ProviderNote))
	}
}

// stickyWriter keeps the first write error, so that a renderer of many
// small writes reports a full disk or a closed pipe once, at its end, and
// writes nothing more after it.
type stickyWriter struct {
	w   io.Writer
	err error
}

func (s *stickyWriter) Write(p []byte) (int, error) {
	if s.err != nil {
		return 0, s.err
	}
	n, err := s.w.Write(p)
	if err == nil && n < len(p) {
		err = io.ErrShortWrite
	}
	s.err = err
	return n, err
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
