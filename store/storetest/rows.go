package storetest

import (
	"encoding/json"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/store"
)

// The suite's direct access to the tables: seeding rows as someone else
// (the live webhook worker, an earlier run) left them, and reading back
// exactly what the statements wrote. Plain SQL and gorm only, the same in
// every dialect.

// payment is a payments row as the suite compares it: times in UTC.
type payment struct {
	Provider, Account, ProviderID string
	State                         models.State
	Amount                        int64
	Currency                      string
	AmountRefunded                int64
	At, SettledAt                 *time.Time // source_updated_at, settled_at
	PayoutID                      *string
	AmountCaptured                *int64
	CreatedAt, UpdatedAt          time.Time
}

// seedRow is a payments row written directly, every column set.
type seedRow struct {
	ID              int64 `gorm:"primaryKey"`
	Provider        string
	Account         string
	ProviderID      string
	State           string
	Amount          int64
	Currency        string
	AmountRefunded  int64
	SourceUpdatedAt *time.Time
	SettledAt       *time.Time
	PayoutID        *string
	AmountCaptured  *int64
	Created         time.Time `gorm:"column:created_at"`
	Updated         time.Time `gorm:"column:updated_at"`
}

func (seedRow) TableName() string { return "payments" }

func utc(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

// seeded is the time seeded rows were created and last updated: a day
// before the suite's provider times, never a stamp of the statements.
func (e *env) seeded() time.Time { return e.t0().Add(-24 * time.Hour) }

// seed inserts p as the live worker would have left it; an empty provider
// is "stripe", an empty currency "gbp", zero stamps e.seeded(). It returns
// the row as the suite expects to read it back.
func (e *env) seed(p payment) payment {
	e.t.Helper()
	if p.Provider == "" {
		p.Provider = "stripe"
	}
	if p.Currency == "" {
		p.Currency = "gbp"
	}
	if p.CreatedAt.IsZero() {
		p.CreatedAt = e.seeded()
	}
	if p.UpdatedAt.IsZero() {
		p.UpdatedAt = e.seeded()
	}
	r := seedRow{Provider: p.Provider, Account: p.Account, ProviderID: p.ProviderID, State: string(p.State), Amount: p.Amount,
		Currency: p.Currency, AmountRefunded: p.AmountRefunded, SourceUpdatedAt: p.At, SettledAt: p.SettledAt,
		PayoutID: p.PayoutID, AmountCaptured: p.AmountCaptured, Created: p.CreatedAt, Updated: p.UpdatedAt}
	require.NoError(e.t, e.db.Create(&r).Error, "seed %s", p.ProviderID)
	return p.normal()
}

func (p payment) normal() payment {
	p.At, p.SettledAt = utc(p.At), utc(p.SettledAt)
	p.CreatedAt, p.UpdatedAt = p.CreatedAt.UTC(), p.UpdatedAt.UTC()
	return p
}

// payments reads every payments row, by provider then provider_id.
func (e *env) payments() []payment {
	e.t.Helper()
	var rows []models.Payment
	require.NoError(e.t, e.db.Order("provider, provider_id").Find(&rows).Error)
	out := make([]payment, len(rows))
	for i, r := range rows {
		out[i] = fromModel(r)
	}
	return out
}

func fromModel(r models.Payment) payment {
	return payment{Provider: r.Provider, Account: r.Account, ProviderID: r.ProviderID, State: r.State, Amount: r.Amount,
		Currency: r.Currency, AmountRefunded: r.AmountRefunded, At: r.SourceUpdatedAt, SettledAt: r.SettledAt,
		PayoutID: r.PayoutID, AmountCaptured: r.AmountCaptured, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt}.normal()
}

// byID indexes the payments rows of provider by provider_id.
func (e *env) byID(provider string) map[string]payment {
	e.t.Helper()
	out := map[string]payment{}
	for _, p := range e.payments() {
		if p.Provider == provider {
			out[p.ProviderID] = p
		}
	}
	return out
}

// requirePayments requires the payments table to hold exactly want.
func (e *env) requirePayments(want ...payment) {
	e.t.Helper()
	for i := range want {
		want[i] = want[i].normal()
	}
	sort.Slice(want, func(i, j int) bool {
		if want[i].Provider != want[j].Provider {
			return want[i].Provider < want[j].Provider
		}
		return want[i].ProviderID < want[j].ProviderID
	})
	require.Equal(e.t, want, e.payments())
}

// event is a webhook_events row as the suite compares it.
type event struct {
	Source, EventID, EventType string
	Payload                    string // compared as JSON
	ProcessedAt                *time.Time
	Synthetic                  bool
	RunID                      *int64
}

func (e *env) events() []event {
	e.t.Helper()
	var rows []models.WebhookEvent
	require.NoError(e.t, e.db.Order("source, event_id").Find(&rows).Error)
	out := make([]event, len(rows))
	for i, r := range rows {
		out[i] = event{Source: r.Source, EventID: r.EventID, EventType: r.EventType, Payload: string(r.Payload),
			ProcessedAt: utc(r.ProcessedAt), Synthetic: r.Synthetic, RunID: r.RunID}
	}
	return out
}

// requireEvents requires webhook_events to hold exactly want, payloads
// compared as JSON documents.
func (e *env) requireEvents(want ...event) {
	e.t.Helper()
	got := e.events()
	require.Len(e.t, got, len(want), "webhook_events: %+v", got)
	for i := range want {
		requireJSON(e.t, want[i].Payload, got[i].Payload, "payload of %s", want[i].EventID)
		want[i].Payload, got[i].Payload = "", ""
		want[i].ProcessedAt = utc(want[i].ProcessedAt)
	}
	require.Equal(e.t, want, got)
}

func requireJSON(t *testing.T, want, got string, msg ...any) {
	t.Helper()
	var w, g any
	require.NoError(t, json.Unmarshal([]byte(want), &w), "want %s", want)
	require.NoError(t, json.Unmarshal([]byte(got), &g), "got %s", got)
	require.Equal(t, w, g, msg...)
}

// item is a drift_items row as the suite compares it.
type item struct {
	RunID                     int64
	Provider, ProviderID      string
	Kind, Action              string
	LocalState, ProviderState *string
	Detail                    string // compared as JSON
	CreatedAt                 time.Time
}

func (e *env) items() []item {
	e.t.Helper()
	var rows []models.DriftItem
	require.NoError(e.t, e.db.Order("run_id, provider, provider_id, kind").Find(&rows).Error)
	out := make([]item, len(rows))
	for i, r := range rows {
		out[i] = item{RunID: r.RunID, Provider: r.Provider, ProviderID: r.ProviderID, Kind: r.Kind, Action: r.Action,
			LocalState: r.LocalState, ProviderState: r.ProviderState, Detail: string(r.Detail), CreatedAt: r.CreatedAt.UTC()}
	}
	return out
}

func (e *env) requireItems(want ...item) {
	e.t.Helper()
	got := e.items()
	require.Len(e.t, got, len(want), "drift_items: %+v", got)
	for i := range want {
		requireJSON(e.t, want[i].Detail, got[i].Detail, "detail of %s", want[i].ProviderID)
		want[i].Detail, got[i].Detail = "", ""
		want[i].CreatedAt = want[i].CreatedAt.UTC()
	}
	require.Equal(e.t, want, got)
}

// carry is a reconciler_carry row.
type carry struct {
	RunID      int64
	ProviderID string
	State      string // compared as JSON
}

func (e *env) carries() []carry {
	e.t.Helper()
	var rows []struct {
		RunID      int64
		ProviderID string
		State      models.JSON
	}
	require.NoError(e.t, e.db.Raw(`SELECT run_id, provider_id, state FROM reconciler_carry ORDER BY run_id, provider_id`).Scan(&rows).Error)
	out := make([]carry, len(rows))
	for i, r := range rows {
		out[i] = carry{RunID: r.RunID, ProviderID: r.ProviderID, State: string(r.State)}
	}
	return out
}

func (e *env) requireCarries(want ...carry) {
	e.t.Helper()
	got := e.carries()
	require.Len(e.t, got, len(want), "reconciler_carry: %+v", got)
	for i := range want {
		requireJSON(e.t, want[i].State, got[i].State, "carried state of %s", want[i].ProviderID)
		want[i].State, got[i].State = "", ""
	}
	require.Equal(e.t, want, got)
}

// run inserts a run directly (not through CreateRun, which has tests of
// its own): provider stripe, account "", running, manual, unless r says
// otherwise.
func (e *env) run(r models.Run) models.Run {
	e.t.Helper()
	if r.Provider == "" {
		r.Provider = "stripe"
	}
	if r.Status == "" {
		r.Status = models.RunRunning
	}
	if r.Trigger == "" {
		r.Trigger = models.TriggerManual
	}
	if r.WindowEnd.IsZero() {
		r.WindowEnd = e.t0()
	}
	if r.WindowStart.IsZero() {
		r.WindowStart = r.WindowEnd.Add(-25 * time.Hour)
	}
	if r.StartedAt.IsZero() {
		r.StartedAt = r.WindowEnd.Add(time.Minute)
	}
	if r.Notes == nil {
		r.Notes = models.JSON(`{}`)
	}
	require.NoError(e.t, e.db.Create(&r).Error)
	return r
}

// getRun reads a run directly.
func (e *env) getRun(id int64) models.Run {
	e.t.Helper()
	var r models.Run
	require.NoError(e.t, e.db.Where("id = ?", id).Take(&r).Error)
	return normalRun(r)
}

// normalRun puts r's times in UTC, so that runs compare with Equal.
func normalRun(r models.Run) models.Run {
	r.WindowStart, r.WindowEnd, r.StartedAt = r.WindowStart.UTC(), r.WindowEnd.UTC(), r.StartedAt.UTC()
	r.FinishedAt, r.ProgressAt = utc(r.FinishedAt), utc(r.ProgressAt)
	if len(r.Notes) > 0 {
		var v any
		if json.Unmarshal(r.Notes, &v) == nil {
			b, _ := json.Marshal(v)
			r.Notes = b
		}
	}
	return r
}

func ids(runs []models.Run) []int64 {
	out := make([]int64, len(runs))
	for i, r := range runs {
		out[i] = r.ID
	}
	return out
}

// requireReturned requires rows, what a guarded statement returned, to be
// exactly what LoadPayments reads of their payments afterwards in the same
// transaction (the engine takes them for the rows as the batch leaves
// them), and returns their ids, sorted.
func (e *env) requireReturned(tx store.Tx, rows []store.Payment) []string {
	e.t.Helper()
	ids := make([]string, len(rows))
	for i, r := range rows {
		ids[i] = r.ProviderID
	}
	slices.Sort(ids)
	require.Len(e.t, slices.Compact(slices.Clone(ids)), len(ids), "a row returned twice")
	read, err := tx.LoadPayments(e.ctx, "stripe", ids)
	require.NoError(e.t, err)
	got := slices.Clone(rows)
	slices.SortFunc(got, func(a, b store.Payment) int { return strings.Compare(a.ProviderID, b.ProviderID) })
	require.Equal(e.t, len(read), len(got))
	for i := range read {
		require.True(e.t, samePayment(read[i], got[i]), "returned %+v, read %+v", got[i], read[i])
	}
	return ids
}

// samePayment compares two rows as the engine sees them (times by instant).
func samePayment(a, b store.Payment) bool {
	eq := func(x, y *time.Time) bool { return (x == nil) == (y == nil) && (x == nil || x.Equal(*y)) }
	return a.ProviderID == b.ProviderID && a.State == b.State && eq(a.At, b.At) && a.Amount == b.Amount &&
		a.Currency == b.Currency && a.AmountRefunded == b.AmountRefunded && eq(a.SettledAt, b.SettledAt) &&
		a.PayoutID == b.PayoutID && a.AmountCaptured == b.AmountCaptured
}
