package reconcile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/reconciler/reconciler/models"
)

// Options configures one run for one provider and account.
type Options struct {
	DB       *gorm.DB
	Provider Provider
	Account  string

	// Since and Until bound the window [Since, Until). Zero Until means now;
	// zero Since means Until-Window, widened by Overlap and back to the last
	// successful run's window end when that is older.
	Since, Until time.Time
	Window       time.Duration // default 24h
	Overlap      time.Duration // default 1h; applies to default windows only

	DryRun      bool
	Trigger     string // models.Trigger*; default manual
	TriggeredBy string

	// BatchSize is how many payments one write transaction covers.
	BatchSize int // default 1000

	// The stuck-payment path: re-fetch up to StuckLimit non-terminal
	// payments whose source_updated_at is older than StuckAfter.
	StuckAfter time.Duration // default 72h
	StuckLimit int           // default 100; negative disables the path
	// StuckBefore, when set, replaces StuckAfter: payments last changed
	// before StuckBefore(now) are stuck (Direct Debit counts working days).
	StuckBefore func(now time.Time) time.Time

	// SkipLock runs without the advisory lock (tests of the guard only).
	SkipLock bool
	// LockWait is how long to keep trying for a lock another run holds
	// (a process that just died holds it until the server notices).
	LockWait time.Duration

	Now    func() time.Time
	Logger *slog.Logger
	// Progress, when set, is called after every batch.
	Progress func(Progress)
}

// Progress is what a run has done so far.
type Progress struct {
	RunID      int64
	EventsRead int64
	Examined   int64
	Repaired   int64
	Refused    int64
	Requests   int64
	Elapsed    time.Duration
}

// Result is a finished (or failed) run.
type Result struct {
	Run models.Run
	// DBRoundTrips counts the statements the run sent, BEGIN and COMMIT
	// included, lock and run bookkeeping excluded.
	DBRoundTrips int64
	// Drift counts the run's drift items by kind and action.
	Drift map[DriftKey]int64
	// LastSuccess is when the last succeeded (non-dry) run of this provider
	// and account finished, this one included; zero when none has.
	LastSuccess time.Time
}

// DriftKey is a drift kind and action.
type DriftKey struct{ Kind, Action string }

func (o *Options) defaults() {
	if o.Window == 0 {
		o.Window = 24 * time.Hour
	}
	if o.Overlap == 0 {
		o.Overlap = time.Hour
	}
	if o.Trigger == "" {
		o.Trigger = models.TriggerManual
	}
	if o.BatchSize <= 0 {
		o.BatchSize = 1000
	}
	if o.StuckAfter == 0 {
		o.StuckAfter = 72 * time.Hour
	}
	if o.StuckLimit == 0 {
		o.StuckLimit = 100
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// Run reconciles one provider account over one window. It returns ErrLocked
// when another run holds the lock (nothing was written), and otherwise the
// run as recorded: succeeded, failed (with the error) or interrupted (when
// ctx was canceled; the batch in flight is finished first).
func Run(ctx context.Context, o Options) (Result, error) {
	h, err := Start(ctx, o)
	if err != nil {
		return Result{}, err
	}
	return h.Execute(ctx)
}

// Handle is a run that has been started: it holds the lock and its row is
// recorded as running. Execute must be called exactly once.
type Handle struct {
	o     Options
	st    *store
	run   models.Run
	w     window
	lock  *lock
	log   *slog.Logger
	start time.Time
}

// RunID is the id of the recorded run.
func (h *Handle) RunID() int64 { return h.run.ID }

// Start takes the lock, plans the window and records the run as running,
// so that a caller (the HTTP API) can answer with the run's id before the
// work begins. It returns ErrLocked when another run holds the lock.
func Start(ctx context.Context, o Options) (h *Handle, err error) {
	o.defaults()
	provider := o.Provider.Name()
	log := o.Logger.With("provider", provider, "account", o.Account)
	h = &Handle{o: o, st: newStore(o.DB), log: log, start: time.Now()}
	held := h // the named result is nil on the error paths below
	if !o.SkipLock {
		deadline := time.Now().Add(o.LockWait)
		for {
			h.lock, err = tryLock(ctx, o.DB, provider, o.Account)
			if !errors.Is(err, ErrLocked) || !time.Now().Before(deadline) {
				break
			}
			select {
			case <-ctx.Done():
				return nil, err
			case <-time.After(200 * time.Millisecond):
			}
		}
		if err != nil {
			return nil, err
		}
		defer func() {
			if err != nil {
				held.releaseLock(ctx)
			}
		}()
	}

	now := o.Now().UTC()
	w, notes, err := planWindow(ctx, o, now)
	if err != nil {
		return nil, err
	}
	h.w = w
	h.run = models.Run{
		Provider: provider, Account: o.Account,
		WindowStart: w.since, WindowEnd: w.until, StartedAt: now,
		Status: models.RunRunning, Trigger: o.Trigger, TriggeredBy: o.TriggeredBy, DryRun: o.DryRun,
	}
	if m, ok := o.Provider.(interface{ Mode() string }); ok {
		h.run.Mode = m.Mode()
	}
	h.run.Notes, _ = json.Marshal(notes)
	if err := o.DB.WithContext(ctx).Create(&h.run).Error; err != nil {
		return nil, fmt.Errorf("record run: %w", err)
	}
	h.log = log.With("run_id", h.run.ID)
	if len(notes) > 0 {
		h.log.Warn("window adjusted", "notes", notes)
	}
	if !o.SkipLock {
		// We hold the lock, so any other running run of this account died.
		res := o.DB.WithContext(ctx).Model(&models.Run{}).
			Where("provider = ? AND account = ? AND status = ? AND id <> ?", provider, o.Account, models.RunRunning, h.run.ID).
			Updates(map[string]any{"status": models.RunInterrupted, "finished_at": now, "error": fmt.Sprintf("did not finish; found by run %d", h.run.ID)})
		if res.Error != nil {
			return nil, fmt.Errorf("mark dead runs interrupted: %w", res.Error)
		}
		if res.RowsAffected > 0 {
			h.log.Warn("marked earlier runs interrupted", "count", res.RowsAffected)
		}
		// What dead runs of this account carried is of no use to anyone.
		if err := o.DB.WithContext(ctx).Exec(`DELETE FROM reconciler_carry WHERE run_id IN
			(SELECT id FROM reconciliation_runs WHERE provider = ? AND account = ? AND status <> ? AND id <> ?)`,
			provider, o.Account, models.RunRunning, h.run.ID).Error; err != nil {
			return nil, fmt.Errorf("clear dead runs' carried payments: %w", err)
		}
	}
	h.log.Info("run started", "window_start", w.since, "window_end", w.until, "dry_run", o.DryRun,
		"trigger", o.Trigger, "triggered_by", o.TriggeredBy)
	return h, nil
}

func (h *Handle) releaseLock(ctx context.Context) {
	if h.lock == nil {
		return
	}
	if err := h.lock.release(context.WithoutCancel(ctx)); err != nil {
		h.log.Warn("release run lock", "error", err)
	}
	h.lock = nil
}

// Execute does the run's work, records how it ended and releases the lock.
func (h *Handle) Execute(ctx context.Context) (Result, error) {
	defer h.releaseLock(ctx)
	o, run, log := h.o, &h.run, h.log
	e := &engine{o: o, st: h.st, run: run, log: log, sim: map[string]Local{}, start: h.start,
		seen: map[uint64]uint16{}, carry: map[string]*carried{}}
	runErr := e.stream(ctx, h.w)
	if runErr == nil {
		runErr = e.windowEnd(ctx, h.w)
	}
	if runErr == nil && o.StuckLimit > 0 {
		runErr = e.stuck(ctx, run.StartedAt)
	}

	if !o.DryRun {
		if err := o.DB.WithContext(context.WithoutCancel(ctx)).Exec(`DELETE FROM reconciler_carry WHERE run_id = ?`, run.ID).Error; err != nil {
			runErr = errors.Join(runErr, fmt.Errorf("clear carried payments: %w", err))
		}
	}
	fin := o.Now().UTC()
	run.FinishedAt = &fin
	switch {
	case runErr == nil:
		run.Status = models.RunSucceeded
	case ctx.Err() != nil:
		run.Status = models.RunInterrupted
		msg := "interrupted: " + context.Cause(ctx).Error()
		run.Error = &msg
		runErr = fmt.Errorf("%w: %w", ErrInterrupted, context.Cause(ctx))
	default:
		run.Status = models.RunFailed
		msg := runErr.Error()
		run.Error = &msg
	}
	run.APIRequests = o.Provider.Requests()
	wctx := context.WithoutCancel(ctx)
	db := o.DB.WithContext(wctx)
	res := Result{Run: *run, DBRoundTrips: h.st.trips.Load(), Drift: map[DriftKey]int64{}}
	var drift []struct {
		Kind, Action string
		N            int64
	}
	if err := db.Raw(`SELECT kind, action, count(*) AS n FROM drift_items WHERE run_id = ? GROUP BY kind, action`, run.ID).Scan(&drift).Error; err != nil {
		runErr = errors.Join(runErr, fmt.Errorf("count drift: %w", err))
	}
	for _, d := range drift {
		res.Drift[DriftKey{Kind: d.Kind, Action: d.Action}] = d.N
	}
	var last models.Run
	if err := db.Where("provider = ? AND account = ? AND status = ? AND NOT dry_run", run.Provider, run.Account, models.RunSucceeded).
		Order("finished_at DESC").Limit(1).Find(&last).Error; err != nil {
		runErr = errors.Join(runErr, fmt.Errorf("read last success: %w", err))
	}
	if last.FinishedAt != nil {
		res.LastSuccess = *last.FinishedAt
	}
	if run.Status == models.RunSucceeded && !run.DryRun {
		res.LastSuccess = fin
	}
	// The lock goes before the final record, so that whoever sees the run
	// ended can start the next one at once. A run starting in between marks
	// this one interrupted; the update below then records the truth.
	h.releaseLock(ctx)
	if err := db.Model(&models.Run{}).Where("id = ?", run.ID).Updates(map[string]any{
		"status": run.Status, "finished_at": run.FinishedAt, "error": run.Error, "api_requests": run.APIRequests,
	}).Error; err != nil {
		return res, errors.Join(runErr, fmt.Errorf("record run end: %w", err))
	}
	if err := db.First(&res.Run, run.ID).Error; err != nil {
		return res, errors.Join(runErr, fmt.Errorf("reread run: %w", err))
	}
	log.Info("run finished", "status", res.Run.Status, "examined", res.Run.Examined, "repaired", res.Run.Repaired,
		"refused", res.Run.Refused, "synthetic_events", res.Run.SyntheticEvents, "api_requests", res.Run.APIRequests,
		"db_round_trips", res.DBRoundTrips, "duration", fin.Sub(run.StartedAt))
	return res, runErr
}

type window struct {
	since, until time.Time
	// after and afterAt resume the read after a crashed run's last
	// committed event.
	after   string
	afterAt time.Time
}

// planWindow returns the window actually read and notes on how it was
// widened or clamped.
func planWindow(ctx context.Context, o Options, now time.Time) (window, map[string]any, error) {
	notes := map[string]any{}
	until := o.Until
	if until.IsZero() {
		until = now
	}
	since := o.Since
	if since.IsZero() {
		since = until.Add(-o.Window)
		var last models.Run
		err := o.DB.WithContext(ctx).
			Where("provider = ? AND account = ? AND status = ? AND NOT dry_run", o.Provider.Name(), o.Account, models.RunSucceeded).
			Order("window_end DESC").Limit(1).Find(&last).Error
		if err != nil {
			return window{}, nil, fmt.Errorf("read checkpoint: %w", err)
		}
		if last.ID != 0 && last.WindowEnd.Before(since) {
			notes["caught_up_from"] = last.WindowEnd.UTC().Format(time.RFC3339)
			since = last.WindowEnd
		}
		since = since.Add(-o.Overlap)
	}
	if !since.Before(until) {
		return window{}, nil, fmt.Errorf("empty window: since %s is not before until %s", since.Format(time.RFC3339), until.Format(time.RFC3339))
	}
	if h := o.Provider.Horizon(now); !h.IsZero() && since.Before(h) {
		notes["clamped_from"] = since.UTC().Format(time.RFC3339)
		notes["warning"] = "the window starts before the provider's event retention; changes older than the horizon were not read (object listing is not implemented yet)"
		since = h
	}
	w := window{since: since.UTC(), until: until.UTC()}
	if !o.DryRun && !o.SkipLock {
		// Resume after a crash: the last run of this account did not
		// succeed but committed batches up to a cursor inside this window.
		// Everything before the cursor is written, so only the rest is read.
		var prev models.Run
		if err := o.DB.WithContext(ctx).Where("provider = ? AND account = ? AND NOT dry_run", o.Provider.Name(), o.Account).
			Order("id DESC").Limit(1).Find(&prev).Error; err != nil {
			return window{}, nil, fmt.Errorf("read the last run: %w", err)
		}
		if prev.ID != 0 && prev.Status != models.RunSucceeded && prev.ProgressCursor != nil && prev.ProgressAt != nil &&
			!prev.WindowStart.After(w.since) && !prev.ProgressAt.Before(w.since) && prev.ProgressAt.Before(w.until) {
			w.after, w.afterAt = *prev.ProgressCursor, prev.ProgressAt.UTC()
			notes["resumed_from_run"] = prev.ID
			notes["resumed_after_event"] = w.after
			notes["resumed_at"] = w.afterAt.Format(time.RFC3339Nano)
		}
	}
	return w, notes, nil
}

type engine struct {
	o     Options
	st    *store
	run   *models.Run
	log   *slog.Logger
	sim   map[string]Local // dry runs: rows as the simulation left them
	total counts
	start time.Time
	// seen holds a 64-bit hash of each payment examined so far, so that a
	// payment whose facts span batches counts once, with the states the
	// window's log showed for it (a bit per rank; about 16 bytes a payment).
	seen map[uint64]uint16
	// carry holds the payments whose outcome a later batch may change (see
	// carried); drifted counts those with items.
	carry   map[string]*carried
	drifted int64
}

// check is what the local-ahead rule knows of the window after a batch that
// ends at cursorAt.
func (e *engine) check(w window, cursorAt time.Time, complete bool) Check {
	c := Check{Since: w.since, Until: w.until, LogDone: cursorAt, Complete: complete}
	if w.after != "" && w.afterAt.After(c.Since) {
		// A resumed run reads only what the crashed one left: the log
		// before its cursor is not seen again.
		c.Since = w.afterAt
	}
	return c
}

// windowEnd finishes the window once its whole log has been read: payments
// unknown locally whose facts could not make a row are fetched by id and
// created from the provider's record, and the local-ahead rule is applied to
// the rows that waited for the complete log.
func (e *engine) windowEnd(ctx context.Context, w window) error {
	var pending []string
	for id, cr := range e.carry {
		if cr.pending {
			pending = append(pending, id)
		}
	}
	recheck, err := e.unshown(ctx, w, pending)
	if err != nil {
		return err
	}
	if len(pending) == 0 && len(recheck) == 0 {
		return nil
	}
	slices.Sort(pending)
	var changes []Change
	if len(pending) > 0 {
		e.log.Info("fetching payments unknown locally by id", "count", len(pending))
		changes, err = e.fetch(ctx, pending, e.run.StartedAt)
		if err != nil {
			return err
		}
	}
	all := append(pending, recheck...)
	for len(all) > 0 {
		n := min(len(all), e.o.BatchSize)
		ids := all[:n]
		all = all[n:]
		in := map[string]bool{}
		for _, id := range ids {
			in[id] = true
		}
		var cs []Change
		for _, c := range changes {
			if in[c.ProviderID] {
				cs = append(cs, c)
			}
		}
		if err := e.batch(ctx, Page{Changes: cs}, e.check(w, w.until, true), ids...); err != nil {
			return err
		}
	}
	return nil
}

// unshown lists the payments examined in this run whose row's state was
// set inside the window and never shown by the window's log: the rows the
// local-ahead rule judges once the whole log has been read. It reads the
// window's rows in keyset pages; only their hashes are held.
func (e *engine) unshown(ctx context.Context, w window, skip []string) ([]string, error) {
	since := w.since
	if w.after != "" && w.afterAt.After(since) {
		since = w.afterAt
	}
	skipped := map[string]bool{}
	for _, id := range skip {
		skipped[id] = true
	}
	older := "source_updated_at >= ? AND source_updated_at < ?"
	if e.st.sqlite {
		older = "julianday(source_updated_at) >= julianday(?) AND julianday(source_updated_at) < julianday(?)"
	}
	var out []string
	after := ""
	for {
		var page []struct {
			ProviderID string
			State      models.State
		}
		err := e.o.DB.WithContext(ctx).Model(&models.Payment{}).Select("provider_id, state").
			Where("provider = ? AND account = ? AND provider_id > ? AND state <> ? AND "+older,
				e.o.Provider.Name(), e.o.Account, after, models.StateCreated, since.UTC(), w.until.UTC()).
			Order("provider_id").Limit(5000).Find(&page).Error
		if err != nil {
			return nil, fmt.Errorf("read the window's rows: %w", err)
		}
		for _, r := range page {
			st := r.State
			if l, ok := e.sim[r.ProviderID]; ok {
				st = l.State // a dry run judges the rows it simulated
			}
			bits, seen := e.seen[idHash(r.ProviderID)]
			if seen && bits&(1<<rank(st)) == 0 && !skipped[r.ProviderID] {
				out = append(out, r.ProviderID)
			}
		}
		if len(page) < 5000 {
			return out, nil
		}
		after = page[len(page)-1].ProviderID
	}
}

// fetch re-reads payments by id and keeps the answers that are for them and
// not from the future.
func (e *engine) fetch(ctx context.Context, ids []string, now time.Time) ([]Change, error) {
	changes, err := e.o.Provider.Fetch(ctx, FetchParams{Account: e.o.Account, ProviderIDs: ids})
	asked := map[string]bool{}
	for _, id := range ids {
		asked[id] = true
	}
	kept := changes[:0]
	for _, c := range changes {
		switch {
		case !asked[c.ProviderID]:
			err = errors.Join(err, fmt.Errorf("re-fetch answered for payment %q, which was not asked for", c.ProviderID))
		case c.At.After(now.Add(time.Minute)):
			err = errors.Join(err, fmt.Errorf("re-fetched payment %s carries a time in the future (%s)", c.ProviderID, c.At.UTC().Format(time.RFC3339)))
		default:
			kept = append(kept, c)
		}
	}
	return kept, err
}

func idHash(id string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(id))
	return h.Sum64()
}

// stream reads the window and writes it in batches of whole pages.
func (e *engine) stream(ctx context.Context, w window) error {
	// Reading and writing overlap: the provider's pages are fetched and
	// decoded while the previous batch is written, by one writer, in order.
	rctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	batches := make(chan Page, 1)
	var werr error
	written := make(chan struct{})
	go func() {
		defer close(written)
		for p := range batches {
			if werr != nil {
				continue
			}
			if err := e.batch(ctx, p, e.check(w, p.CursorAt, false)); err != nil {
				werr = err
				cancel(err)
			}
		}
	}()
	var pending Page
	ids := map[string]bool{}
	err := e.o.Provider.ListChanges(rctx, ListParams{Account: e.o.Account, Since: w.since, Until: w.until, After: w.after, AfterAt: w.afterAt}, func(p Page) error {
		// A provider listing a fact after the window it was asked for is
		// broken: applying it would stamp rows with a future time that
		// refuses every real fact until then.
		limit := w.until.Add(time.Second) // Stripe's times are whole seconds
		for _, c := range p.Changes {
			if c.At.After(limit) {
				return fmt.Errorf("provider listed %s (payment %s) at %s, after the window's end %s: refusing the page",
					orNone(c.EventID), c.ProviderID, c.At.UTC().Format(time.RFC3339), w.until.Format(time.RFC3339))
			}
		}
		pending.Events = append(pending.Events, p.Events...)
		pending.Changes = append(pending.Changes, p.Changes...)
		if p.Cursor != "" {
			pending.Cursor, pending.CursorAt = p.Cursor, p.CursorAt
		}
		for _, c := range p.Changes {
			ids[c.ProviderID] = true
		}
		if len(ids) < e.o.BatchSize && rctx.Err() == nil {
			return nil
		}
		select {
		case batches <- pending:
		case <-rctx.Done():
			return context.Cause(rctx)
		}
		pending, ids = Page{}, map[string]bool{}
		return rctx.Err()
	})
	// Whatever was read is finished even when the read was cut short: each
	// batch is ordered and guarded, so a partial window is safe to write.
	if len(pending.Events) > 0 || len(pending.Changes) > 0 {
		batches <- pending // the writer drops it if an earlier batch failed
	}
	close(batches)
	<-written
	if werr != nil {
		return werr
	}
	if err != nil && ctx.Err() == nil && errors.Is(err, context.Canceled) {
		return err
	}
	return err
}

// stuck re-fetches non-terminal payments that have not moved for a while.
func (e *engine) stuck(ctx context.Context, now time.Time) error {
	cutoff := now.Add(-e.o.StuckAfter)
	if e.o.StuckBefore != nil {
		cutoff = e.o.StuckBefore(now)
	}
	var ids []string
	older := "source_updated_at < ?"
	if e.st.sqlite {
		older = "julianday(source_updated_at) < julianday(?)"
	}
	err := e.o.DB.WithContext(ctx).Model(&models.Payment{}).
		Where("provider = ? AND account = ? AND state IN ? AND "+older,
			e.o.Provider.Name(), e.o.Account, []string{"created", "authorised", "captured"}, cutoff.UTC()).
		Order("source_updated_at").Limit(e.o.StuckLimit).Pluck("provider_id", &ids).Error
	if err != nil || len(ids) == 0 {
		return err
	}
	e.log.Info("re-fetching stuck payments", "count", len(ids))
	changes, err := e.fetch(ctx, ids, now)
	if len(changes) > 0 {
		if berr := e.batch(ctx, Page{Changes: changes}, Check{Since: e.run.WindowStart, Until: e.run.WindowEnd, LogDone: e.run.WindowEnd, Complete: true}); berr != nil {
			return errors.Join(err, berr)
		}
	}
	return err
}

// carried is what a run keeps about a payment whose facts may continue in a
// later batch and whose outcome so far is not "in sync, nothing done": the
// row as the run first saw it, every fact so far, what the run applied and
// the items it wrote. A later batch decides the payment again from all of
// its facts and rewrites its items, so rows, events and items do not depend
// on where batches begin and end (DESIGN section 2).
type carried struct {
	before   Local
	facts    []Change
	applied  []Step
	inserted bool
	// pending: unknown locally and not creatable from the facts so far; it
	// is fetched by id once the window has been read.
	pending bool
	items   counts // the items written for it so far, by action
	drifted bool   // it has items
	tried   []string
}

// carriedJSON is carried as the carry table stores it.
type carriedJSON struct {
	Before   Local    `json:"before"`
	Facts    []Change `json:"facts"`
	Applied  []Step   `json:"applied"`
	Inserted bool     `json:"inserted,omitempty"`
	Pending  bool     `json:"pending,omitempty"`
	Items    counts   `json:"items"`
	Drifted  bool     `json:"drifted,omitempty"`
	Tried    []string `json:"tried"`
}

func (c *carried) encode(id string) (carryRow, error) {
	b, err := json.Marshal(carriedJSON{Before: c.before, Facts: c.facts, Applied: c.applied, Inserted: c.inserted, Pending: c.pending,
		Items: c.items, Drifted: c.drifted, Tried: c.tried})
	return carryRow{ProviderID: id, State: b}, err
}

func decodeCarried(b []byte) (*carried, error) {
	var j carriedJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return nil, err
	}
	return &carried{before: j.Before, facts: j.Facts, applied: j.Applied, inserted: j.Inserted, pending: j.Pending,
		items: j.Items, drifted: j.Drifted, tried: j.Tried}, nil
}

// carriedBit marks, in the seen set, a payment the run carries.
const carriedBit = 1 << 15

// loadCarried returns what the run carries about the payments of a batch:
// from the carry table, or from memory in a dry run (which writes no table
// but its own run and items).
func (e *engine) loadCarried(tx *gorm.DB, ids []string) (map[string]*carried, error) {
	out := map[string]*carried{}
	var want []string
	for _, id := range ids {
		if e.seen[idHash(id)]&carriedBit == 0 {
			continue
		}
		if e.o.DryRun {
			if cr := e.carry[id]; cr != nil {
				out[id] = cr
			}
			continue
		}
		want = append(want, id)
	}
	rows, err := e.st.loadCarry(tx, e.run.ID, want)
	if err != nil {
		return nil, err
	}
	for _, r := range rows {
		cr, err := decodeCarried(r.State)
		if err != nil {
			return nil, fmt.Errorf("decode carried payment %s: %w", r.ProviderID, err)
		}
		out[r.ProviderID] = cr
	}
	return out, nil
}

// saveCarried records the batch's carried state (nil: forget the payment).
func (e *engine) saveCarried(tx *gorm.DB, next, prev map[string]*carried) error {
	if e.o.DryRun {
		return nil // kept in memory after the commit
	}
	var rows []carryRow
	var drop []string
	for _, id := range slices.Sorted(maps.Keys(next)) {
		cr := next[id]
		if cr == nil {
			if prev[id] != nil {
				drop = append(drop, id)
			}
			continue
		}
		r, err := cr.encode(id)
		if err != nil {
			return err
		}
		rows = append(rows, r)
	}
	return e.st.saveCarry(tx, e.run.ID, rows, drop)
}

// stepKey names a step the run has sent (or, for a created row, made).
func stepKey(s Step) string { return string(s.To) + "@" + s.At.UTC().Format(time.RFC3339Nano) }

// batch decides and writes one batch in one transaction. It runs on a
// context detached from cancellation, so that SIGTERM lets it finish. force
// names payments to decide again with no new facts (the window's end).
func (e *engine) batch(ctx context.Context, p Page, w Check, force ...string) error {
	wctx := context.WithoutCancel(ctx)
	byID := map[string][]Change{}
	for _, c := range p.Changes {
		if c.ProviderID == "" {
			continue
		}
		if c.Payload == nil || !strings.HasPrefix(c.EventID, "recon:") {
			c.Payload = nil // events listed by the provider carry theirs in Event
		}
		byID[c.ProviderID] = append(byID[c.ProviderID], c)
	}
	for _, id := range force {
		if _, ok := byID[id]; !ok {
			byID[id] = nil
		}
	}
	// A fixed lock order (payments by id, events by id) keeps concurrent runs
	// and the live worker from deadlocking in most cases; the rest retry.
	order := slices.Sorted(maps.Keys(byID))
	events := slices.Clone(p.Events)
	slices.SortFunc(events, func(a, b Event) int { return strings.Compare(a.ID, b.ID) })
	provider := e.o.Provider.Name()

	var c counts
	var next map[string]*carried // the payments' carried state after this batch
	var simNext map[string]Local
	var committedPrev map[string]*carried
	var committedShown map[string][numRanks]time.Time
	err := e.st.retryTx(wctx, func(tx *gorm.DB) error {
		c = counts{Events: int64(len(p.Events))}
		next, simNext = make(map[string]*carried, len(order)), map[string]Local{}
		now, err := e.st.load(tx, provider, order)
		if err != nil {
			return err
		}
		if e.o.DryRun {
			for _, id := range order {
				if l, ok := e.sim[id]; ok {
					now[id] = l
				}
			}
		}
		prevCarry, err := e.loadCarried(tx, order)
		if err != nil {
			return err
		}
		plans := make(map[string]Plan, len(order))
		befores := make(map[string]Local, len(order))
		for _, id := range order {
			before, facts := now[id], byID[id]
			if cr := prevCarry[id]; cr != nil {
				before, facts = cr.before, append(slices.Clip(cr.facts), facts...)
			}
			pl := Decide(before, facts)
			if bits, ok := e.seen[idHash(id)]; ok && prevCarry[id] == nil {
				// The state the row was in sync with in an earlier batch is
				// still shown by the window's log.
				for r := range numRanks {
					if bits&(1<<r) != 0 && pl.Shown[r].IsZero() {
						pl.Shown[r] = time.Unix(1, 0)
					}
				}
			}
			plans[id], befores[id] = pl, before
		}

		type outcome struct {
			after    Local
			applied  []Step // this batch's
			inserted bool
		}
		out := make(map[string]outcome, len(order))
		if e.o.DryRun {
			for _, id := range order {
				after, applied, ins := Simulate(now[id], plans[id])
				out[id] = outcome{after, applied, ins}
				if after != now[id] {
					simNext[id] = after
				}
				if !ins && after.SettledAt != now[id].SettledAt {
					c.Settlements++
				}
			}
		} else {
			var inserts []insertRow
			for _, id := range order {
				if pl := plans[id]; !now[id].Exists && pl.Creatable() {
					r := insertRow{ProviderID: id, State: string(pl.Latest.To), At: pl.Latest.At,
						Amount: pl.Amount, Currency: pl.Currency, AmountRefunded: pl.RefundTo}
					if s := pl.Settlement; s != nil {
						r.SettledAt, r.PayoutID = &s.At, s.PayoutID
					}
					if pl.AmountCaptured > 0 {
						r.AmountCaptured = &pl.AmountCaptured
					}
					inserts = append(inserts, r)
				}
			}
			inserted, err := e.st.insertMissing(tx, provider, e.o.Account, inserts)
			if err != nil {
				return err
			}
			// A row the insert did not create exists already (the live worker
			// made it meanwhile): the guarded steps apply to it. Steps an
			// earlier batch of this run already sent are not sent again: the
			// guard's refusals are permanent (rows only move forward), so
			// only the new part of the chain can move a row.
			todo := make(map[string][]Step, len(order))
			for _, id := range order {
				if inserted[id] {
					continue
				}
				for _, st := range plans[id].Steps {
					if prev := prevCarry[id]; prev == nil || !slices.Contains(prev.tried, stepKey(st)) {
						todo[id] = append(todo[id], st)
					}
				}
			}
			applied := map[string][]Step{}
			for round := 0; ; round++ {
				var steps []stepRow
				for _, id := range order {
					if round >= len(todo[id]) {
						continue
					}
					s := todo[id][round]
					steps = append(steps, stepRow{ProviderID: id, To: string(s.To), Preds: predsCSV(s.To), At: s.At, Refund: s.AmountRefunded})
				}
				if len(steps) == 0 {
					break
				}
				moved, err := e.st.applySteps(tx, provider, steps)
				if err != nil {
					return err
				}
				for id := range moved {
					applied[id] = append(applied[id], todo[id][round])
				}
			}
			var refunds []refundRow
			var settles []settleRow
			var captures []captureRow
			for _, id := range order {
				pl := plans[id]
				if inserted[id] {
					continue
				}
				if pl.RefundTo > 0 {
					refunds = append(refunds, refundRow{ProviderID: id, Refund: pl.RefundTo})
				}
				if s := pl.Settlement; s != nil {
					settles = append(settles, settleRow{ProviderID: id, At: s.At, PayoutID: s.PayoutID})
				}
				if pl.AmountCaptured > 0 {
					captures = append(captures, captureRow{ProviderID: id, AmountCaptured: pl.AmountCaptured})
				}
			}
			if err := e.st.raiseRefunds(tx, provider, refunds); err != nil {
				return err
			}
			n, err := e.st.recordSettlements(tx, provider, settles)
			if err != nil {
				return err
			}
			c.Settlements = n
			if err := e.st.recordCaptured(tx, provider, captures); err != nil {
				return err
			}
			after, err := e.st.load(tx, provider, order)
			if err != nil {
				return err
			}
			for _, id := range order {
				o := outcome{after: after[id], applied: applied[id], inserted: inserted[id]}
				if o.inserted {
					o.applied = []Step{*plans[id].Latest}
				}
				out[id] = o
			}
		}

		var items []itemRow
		var rewrite []string // payments whose earlier items this batch replaces
		recon := map[string]eventRow{}
		for _, id := range order {
			o, pl, prev := out[id], plans[id], prevCarry[id]
			cr := &carried{before: befores[id], facts: byID[id], applied: o.applied, inserted: o.inserted}
			for _, st := range pl.Steps {
				cr.tried = append(cr.tried, stepKey(st))
			}
			if prev != nil {
				cr.facts = append(slices.Clip(prev.facts), byID[id]...)
				cr.applied = append(slices.Clip(prev.applied), o.applied...)
				cr.inserted = cr.inserted || prev.inserted
				if prev.drifted {
					rewrite = append(rewrite, id)
				}
			}
			var its []Item
			if !o.after.Exists && !w.Complete {
				cr.pending = true // decided once it has been fetched by id
			} else {
				// A row that waits for the rest of the log gets no item yet:
				// the window's end judges it (unshown).
				its, _ = Classify(cr.before, o.after, pl, cr.applied, cr.inserted, w)
			}
			for _, it := range its {
				describe(&it, o.after, pl)
				switch it.Action {
				case models.ActionRepaired:
					cr.items.Repaired++
				case models.ActionRefused:
					cr.items.Refused++
				case models.ActionReported:
					cr.items.Reported++
				}
				items = append(items, toItemRow(id, it))
			}
			cr.drifted = len(its) > 0
			c.Repaired += cr.items.Repaired
			c.Refused += cr.items.Refused
			c.Reported += cr.items.Reported
			if prev != nil {
				c.Repaired -= prev.items.Repaired
				c.Refused -= prev.items.Refused
				c.Reported -= prev.items.Reported
			}
			// A row waiting only for the rest of the log (the local-ahead
			// rule) is not carried: the window's end finds it from its row and
			// the states the log showed.
			if len(cr.applied) > 0 || cr.inserted || cr.drifted || cr.pending {
				next[id] = cr
			} else {
				next[id] = nil
			}
			// Changes found without an event get a deterministic event,
			// recorded only when it justified a transition.
			for _, s := range o.applied {
				for _, ch := range byID[id] {
					if ch.EventID == s.EventID && ch.Payload != nil {
						recon[ch.EventID] = eventRow{EventID: ch.EventID, EventType: ch.EventType, Payload: ch.Payload}
					}
				}
			}
		}
		evs := make([]eventRow, 0, len(events)+len(recon))
		evIDs := make([]string, 0, cap(evs))
		for _, ev := range events {
			evs = append(evs, eventRow{EventID: ev.ID, EventType: ev.Type, Payload: ev.Payload})
			evIDs = append(evIDs, ev.ID)
		}
		for _, id := range slices.Sorted(maps.Keys(recon)) {
			evs = append(evs, recon[id])
			evIDs = append(evIDs, id)
		}
		if e.o.DryRun {
			n, err := e.st.missingEvents(tx, provider, evIDs)
			if err != nil {
				return err
			}
			c.Synthetic = n
		} else {
			n, err := e.st.insertEvents(tx, provider, e.run.ID, evs)
			if err != nil {
				return err
			}
			c.Synthetic = n
		}
		if err := e.st.deleteItems(tx, e.run.ID, provider, rewrite); err != nil {
			return err
		}
		if err := e.st.insertItems(tx, provider, e.run.ID, items); err != nil {
			return err
		}
		examined, drifted := int64(len(e.seen)), e.drifted
		for _, id := range order {
			if _, ok := e.seen[idHash(id)]; !ok {
				examined++
			}
			if prev := prevCarry[id]; prev != nil && prev.drifted {
				drifted--
			}
			if cr := next[id]; cr != nil && cr.drifted {
				drifted++
			}
		}
		c.Examined, c.InSync = examined, examined-drifted
		committedPrev = prevCarry
		committedShown = make(map[string][numRanks]time.Time, len(order))
		for _, id := range order {
			committedShown[id] = plans[id].Shown
		}
		if err := e.saveCarried(tx, next, prevCarry); err != nil {
			return err
		}
		return e.st.addCounts(tx, e.run.ID, c, e.o.Provider.Requests(), p.Cursor, p.CursorAt)
	})
	if err != nil {
		return fmt.Errorf("write batch of %d payments: %w", len(order), err)
	}
	for id, cr := range next {
		h := idHash(id)
		if prev := committedPrev[id]; prev != nil && prev.drifted {
			e.drifted--
		}
		bits := e.seen[h]
		for r, t := range committedShown[id] {
			if !t.IsZero() {
				bits |= 1 << r
			}
		}
		e.seen[h] = bits
		if cr == nil {
			delete(e.carry, id)
			e.seen[h] &^= carriedBit
			continue
		}
		if cr.drifted {
			e.drifted++
		}
		if e.o.DryRun {
			e.carry[id] = cr
		} else if cr.pending {
			e.carry[id] = &carried{pending: true} // the window's end needs only the flag
		} else {
			delete(e.carry, id)
		}
		e.seen[h] |= carriedBit
	}
	maps.Copy(e.sim, simNext)
	e.total.add(c)
	e.total.Examined, e.total.InSync = c.Examined, c.InSync
	if e.o.Progress != nil {
		e.o.Progress(Progress{RunID: e.run.ID, EventsRead: e.total.Events, Examined: e.total.Examined,
			Repaired: e.total.Repaired, Refused: e.total.Refused, Requests: e.o.Provider.Requests(), Elapsed: time.Since(e.start)})
	}
	e.log.Debug("batch written", "payments", len(order), "events", len(p.Events), "repaired", c.Repaired, "refused", c.Refused)
	return nil
}

// describe adds the payment's amounts to an item, for the report.
func describe(it *Item, row Local, p Plan) {
	if it.Detail == nil {
		it.Detail = map[string]any{}
	}
	amount, currency := row.Amount, row.Currency
	if !row.Exists {
		amount, currency = p.Amount, p.Currency
	}
	if _, ok := it.Detail["amount"]; !ok {
		it.Detail["amount"] = amount
	}
	if _, ok := it.Detail["currency"]; !ok {
		it.Detail["currency"] = currency
	}
	if _, ok := it.Detail["amount_refunded"]; !ok {
		it.Detail["amount_refunded"] = row.AmountRefunded
	}
}

func orNone(s string) string {
	if s == "" {
		return "a change"
	}
	return "event " + s
}

func toItemRow(id string, it Item) itemRow {
	r := itemRow{ProviderID: id, Kind: it.Kind, Action: it.Action, Detail: it.Detail}
	if it.LocalState != models.StateNone {
		s := string(it.LocalState)
		r.LocalState = &s
	}
	if it.ProviderState != "" {
		s := it.ProviderState
		r.ProviderState = &s
	}
	return r
}
