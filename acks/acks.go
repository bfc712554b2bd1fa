// Package acks records that a person has looked at a drift item and why
// ("looked at, leave it"), and sorts a run's items needing a human into new
// since the previous run, still open, and acknowledged.
//
// An item is named by its fingerprint: the provider, the payment, the kind
// and the provider's state. The same problem found again by the next run
// has the same fingerprint, so an acknowledgement outlives the run it was
// made on; when the provider's state changes the fingerprint does too, and
// the item opens again. Acknowledgements are appended to drift_acks, never
// updated: the newest row of a fingerprint decides, and the rows before it
// are who looked at it and why.
package acks

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/reconciler/reconciler/models"
)

// Statuses of an item needing a human (refused or reported). Repaired
// items have none: nobody has to look at them.
const (
	// StatusNew: the previous run of the provider and account did not
	// have it (or there is no previous run).
	StatusNew = "new"
	// StatusOpen: the previous run had it too, and nobody acknowledged it.
	StatusOpen = "open"
	// StatusAcknowledged: a person acknowledged it (reconciler ack).
	StatusAcknowledged = "acknowledged"
)

// Fingerprint names a drift item across runs: 16 hex digits of the
// SHA-256 of provider, payment id, kind and provider state.
func Fingerprint(provider, providerID, kind string, providerState *string) string {
	h := sha256.New()
	for _, s := range []string{provider, providerID, kind} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	if providerState != nil {
		h.Write([]byte{1})
		h.Write([]byte(*providerState))
	}
	return hex.EncodeToString(h.Sum(nil)[:8])
}

var fingerprintRE = regexp.MustCompile(`^[0-9a-f]{16}$`)

// Valid reports whether s has a fingerprint's form.
func Valid(s string) bool { return fingerprintRE.MatchString(s) }

// Ack is one row of drift_acks.
type Ack struct {
	ID             int64 `gorm:"primaryKey"`
	Fingerprint    string
	Provider       string
	Account        string
	ProviderID     string
	Kind           string
	ProviderState  *string
	RunID          *int64
	Note           string
	AcknowledgedBy string
	AcknowledgedAt time.Time
	// Reopened: the row takes an acknowledgement back.
	Reopened bool
}

// TableName pins the table's name.
func (Ack) TableName() string { return "drift_acks" }

// Target is the item a fingerprint names, as the newest run that has it
// found it.
type Target struct {
	Fingerprint   string  `json:"fingerprint"`
	RunID         int64   `json:"run_id"`
	Provider      string  `json:"provider"`
	Account       string  `json:"account"`
	ProviderID    string  `json:"provider_id"`
	Kind          string  `json:"kind"`
	Action        string  `json:"action"`
	LocalState    *string `json:"local_state"`
	ProviderState *string `json:"provider_state"`
}

// String is the target for a person: "pi_1 conflict (local captured,
// provider refunded) of stripe, run 7".
func (t Target) String() string {
	s := func(p *string) string {
		if p == nil {
			return "none"
		}
		return *p
	}
	return fmt.Sprintf("%s: %s %s (local %s, provider %s) of %s, run %d", t.Fingerprint, t.ProviderID, t.Kind, s(t.LocalState), s(t.ProviderState), t.Provider, t.RunID)
}

// needsHuman are the actions an acknowledgement applies to.
var needsHuman = []string{models.ActionRefused, models.ActionReported}

// ErrUnknown is wrapped by Resolve's error for fingerprints that name no item
// needing a human in the runs reports show.
var ErrUnknown = errors.New("unknown fingerprint")

// Resolve resolves fingerprints to the items they name. It looks among the
// items needing a human of the newest finished run, and of the newest
// succeeded run, of every provider and account (dry runs left out): the
// items the reports and the alerts show. Every fingerprint must be found;
// the error names those that were not.
func Resolve(ctx context.Context, db *gorm.DB, fps []string) ([]Target, error) {
	var bad []string
	for _, fp := range fps {
		if !Valid(fp) {
			bad = append(bad, fp)
		}
	}
	if len(bad) > 0 {
		return nil, fmt.Errorf("%w %s: a fingerprint is 16 hex digits, as the report's fingerprint column shows", ErrUnknown, strings.Join(bad, ", "))
	}
	var runIDs []int64
	for _, q := range []*gorm.DB{
		db.WithContext(ctx).Model(&models.Run{}).Where("status <> ? AND dry_run = ?", models.RunRunning, false),
		db.WithContext(ctx).Model(&models.Run{}).Where("status = ? AND dry_run = ?", models.RunSucceeded, false),
	} {
		var ids []int64
		if err := q.Group("provider, account").Pluck("max(id)", &ids).Error; err != nil {
			return nil, fmt.Errorf("find the latest runs: %w", err)
		}
		runIDs = append(runIDs, ids...)
	}
	slices.Sort(runIDs)
	runIDs = slices.Compact(runIDs)
	want := map[string]bool{}
	for _, fp := range fps {
		want[fp] = true
	}
	found := map[string]Target{}
	// Newest run first: a fingerprint names the item as the newest run found it.
	for _, id := range slices.Backward(runIDs) {
		var run models.Run
		if err := db.WithContext(ctx).First(&run, id).Error; err != nil {
			return nil, fmt.Errorf("read run %d: %w", id, err)
		}
		err := eachNeedsHuman(ctx, db, id, func(it models.DriftItem) {
			fp := Fingerprint(it.Provider, it.ProviderID, it.Kind, it.ProviderState)
			if _, done := found[fp]; want[fp] && !done {
				found[fp] = Target{Fingerprint: fp, RunID: id, Provider: it.Provider, Account: run.Account, ProviderID: it.ProviderID,
					Kind: it.Kind, Action: it.Action, LocalState: it.LocalState, ProviderState: it.ProviderState}
			}
		})
		if err != nil {
			return nil, err
		}
	}
	var out []Target
	var missing []string
	for _, fp := range fps {
		t, ok := found[fp]
		if !ok {
			missing = append(missing, fp)
			continue
		}
		if !slices.ContainsFunc(out, func(o Target) bool { return o.Fingerprint == fp }) {
			out = append(out, t)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%w %s: it names no refused or reported item of the latest runs (reconciler report --last lists their fingerprints)",
			ErrUnknown, strings.Join(missing, ", "))
	}
	return out, nil
}

// Record appends one row per target: acknowledged by by, because of note,
// at at; reopen takes the acknowledgements back instead.
func Record(ctx context.Context, db *gorm.DB, targets []Target, by, note string, at time.Time, reopen bool) ([]Ack, error) {
	if strings.TrimSpace(by) == "" {
		return nil, errors.New("an acknowledgement needs who made it")
	}
	if strings.TrimSpace(note) == "" {
		return nil, errors.New("an acknowledgement needs a note saying why")
	}
	rows := make([]Ack, 0, len(targets))
	for _, t := range targets {
		run := t.RunID
		rows = append(rows, Ack{Fingerprint: t.Fingerprint, Provider: t.Provider, Account: t.Account, ProviderID: t.ProviderID,
			Kind: t.Kind, ProviderState: t.ProviderState, RunID: &run, Note: note, AcknowledgedBy: by, AcknowledgedAt: at.UTC(), Reopened: reopen})
	}
	if len(rows) == 0 {
		return rows, nil
	}
	if err := db.WithContext(ctx).Create(&rows).Error; err != nil {
		return nil, fmt.Errorf("record acknowledgements: %w", err)
	}
	return rows, nil
}

// Lookup returns the standing acknowledgement of each of fps that has one:
// the newest row of the fingerprint, unless that row reopened it.
func Lookup(ctx context.Context, db *gorm.DB, fps []string) (map[string]Ack, error) {
	out := map[string]Ack{}
	for chunk := range slices.Chunk(fps, 500) {
		var rows []Ack
		err := db.WithContext(ctx).Where("id IN (?)",
			db.Model(&Ack{}).Select("max(id)").Where("fingerprint IN ?", chunk).Group("fingerprint")).Find(&rows).Error
		if err != nil {
			return nil, fmt.Errorf("read acknowledgements: %w", err)
		}
		for _, a := range rows {
			if !a.Reopened {
				out[a.Fingerprint] = a
			}
		}
	}
	return out, nil
}

// History returns every row of a fingerprint, oldest first.
func History(ctx context.Context, db *gorm.DB, fp string) ([]Ack, error) {
	var rows []Ack
	if err := db.WithContext(ctx).Where("fingerprint = ?", fp).Order("id").Find(&rows).Error; err != nil {
		return nil, fmt.Errorf("read acknowledgements: %w", err)
	}
	return rows, nil
}

// Counts are a run's items of one action needing a human, by status.
type Counts struct {
	New          int64 `json:"new"`
	Open         int64 `json:"still_open"`
	Acknowledged int64 `json:"acknowledged"`
}

// Unacknowledged is what still needs a person: new and still open.
func (c Counts) Unacknowledged() int64 { return c.New + c.Open }

// Triage is a run's items needing a human sorted by status.
type Triage struct {
	// Previous is the run compared with: the newest succeeded, non-dry run
	// of the same provider and account before this one (0: none).
	Previous int64
	// Status and Acks are keyed by fingerprint.
	Status map[string]string
	Acks   map[string]Ack
	// ByAction counts the items by action (refused, reported).
	ByAction map[string]Counts
}

// Total sums the counts of every action.
func (t Triage) Total() Counts {
	var c Counts
	for _, a := range t.ByAction {
		c.New += a.New
		c.Open += a.Open
		c.Acknowledged += a.Acknowledged
	}
	return c
}

// Load sorts run's items needing a human: acknowledged when an
// acknowledgement stands for its fingerprint, else still open when the
// previous run had the same fingerprint, else new.
func Load(ctx context.Context, db *gorm.DB, run models.Run) (Triage, error) {
	t := Triage{Status: map[string]string{}, ByAction: map[string]Counts{}}
	action := map[string]string{}
	var fps []string
	err := eachNeedsHuman(ctx, db, run.ID, func(it models.DriftItem) {
		fp := Fingerprint(it.Provider, it.ProviderID, it.Kind, it.ProviderState)
		if _, ok := action[fp]; !ok {
			fps = append(fps, fp)
		}
		action[fp] = it.Action
	})
	if err != nil {
		return t, err
	}
	if len(fps) == 0 {
		return t, nil
	}
	var prev []int64
	err = db.WithContext(ctx).Model(&models.Run{}).
		Where("provider = ? AND account = ? AND status = ? AND dry_run = ? AND id < ?", run.Provider, run.Account, models.RunSucceeded, false, run.ID).
		Order("id DESC").Limit(1).Pluck("id", &prev).Error
	if err != nil {
		return t, fmt.Errorf("find the run before run %d: %w", run.ID, err)
	}
	before := map[string]bool{}
	if len(prev) == 1 {
		t.Previous = prev[0]
		if err := eachNeedsHuman(ctx, db, t.Previous, func(it models.DriftItem) {
			before[Fingerprint(it.Provider, it.ProviderID, it.Kind, it.ProviderState)] = true
		}); err != nil {
			return t, err
		}
	}
	if t.Acks, err = Lookup(ctx, db, fps); err != nil {
		return t, err
	}
	for _, fp := range fps {
		st := StatusNew
		switch {
		case t.Acks[fp].ID != 0:
			st = StatusAcknowledged
		case before[fp]:
			st = StatusOpen
		}
		t.Status[fp] = st
		c := t.ByAction[action[fp]]
		switch st {
		case StatusNew:
			c.New++
		case StatusOpen:
			c.Open++
		default:
			c.Acknowledged++
		}
		t.ByAction[action[fp]] = c
	}
	return t, nil
}

// eachNeedsHuman calls fn with every refused or reported item of a run,
// 5000 rows at a time.
func eachNeedsHuman(ctx context.Context, db *gorm.DB, runID int64, fn func(models.DriftItem)) error {
	var last int64
	for {
		var batch []models.DriftItem
		if err := db.WithContext(ctx).Select("id, provider, provider_id, kind, action, local_state, provider_state").
			Where("run_id = ? AND action IN ? AND id > ?", runID, needsHuman, last).Order("id").Limit(5000).Find(&batch).Error; err != nil {
			return fmt.Errorf("read drift items of run %d: %w", runID, err)
		}
		for _, it := range batch {
			fn(it)
		}
		if len(batch) < 5000 {
			return nil
		}
		last = batch[len(batch)-1].ID
	}
}
