package reconcile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"gorm.io/gorm"

	"github.com/reconciler/reconciler/clock"
	"github.com/reconciler/reconciler/internal/dbopen"
	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/store"
)

// Options configures one run for one provider and account.
type Options struct {
	// Store is the database the run reads and writes; when nil, the store
	// of DB's dialect is opened (dbopen.Store) on the run's clock.
	Store    store.Store
	DB       *gorm.DB
	Provider Provider
	Account  string

	// Since and Until bound the window [Since, Until). Zero Until means now;
	// zero Since means Until-Window, widened by Overlap and back to the last
	// successful run's window end when that is older.
	Since, Until time.Time
	Window       time.Duration // default 24h
	Overlap      time.Duration // default 1h; applies to default windows only

	// Mode is how the window is read: ModeAuto (the default) reads the
	// event log and lists objects for the part of the window older than
	// it, ModeListing lists objects for the whole window, ModeEvents reads
	// the event log only (a window older than it is clamped). Listing needs
	// a provider that implements ObjectLister.
	Mode string

	DryRun bool
	// Repair is how the run repairs what it finds: RepairApply (the
	// default) applies the transitions; RepairDeliver writes no payment and
	// records the missed events unprocessed for the application's worker.
	// A dry run writes neither.
	Repair      string
	Trigger     string // models.Trigger*; default manual
	TriggeredBy string

	// BatchSize is how many payments one write transaction covers.
	BatchSize int // default 1000
	// CarryMemory is how many bytes of what a run carries between batches
	// it keeps in memory before spilling the oldest to the carry table:
	// 0 is DefaultCarryMemory(), negative keeps nothing in memory.
	CarryMemory int

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

	// Clock is the run's one clock (the store's too when Store is nil);
	// when nil, Now (if set) stubs the wall clock's time.
	Clock  clock.Clock
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
	// Totals are the window's money per currency as the provider's facts
	// and the rows have it, over the payments the run examined (also in
	// the run's notes, "totals").
	Totals []CurrencyTotals
	// LastSuccess is when the last succeeded (non-dry) run of this provider
	// and account finished, this one included; zero when none has.
	LastSuccess time.Time
}

// DriftKey is a drift kind and action.
type DriftKey struct{ Kind, Action string }

func (o *Options) defaults() {
	if o.Window == 0 {
		o.Window = DefaultWindow
	}
	if o.Overlap == 0 {
		o.Overlap = DefaultOverlap
	}
	if o.Trigger == "" {
		o.Trigger = models.TriggerManual
	}
	if o.Mode == "" {
		o.Mode = ModeAuto
	}
	if o.Repair == "" {
		o.Repair = RepairApply
	}
	if o.BatchSize <= 0 {
		o.BatchSize = DefaultBatchSize
	}
	if o.StuckAfter == 0 {
		o.StuckAfter = DefaultStuckAfter
	}
	if o.StuckLimit == 0 {
		o.StuckLimit = DefaultStuckLimit
	}
	if o.Clock == nil {
		o.Clock = clock.System
		if o.Now != nil {
			o.Clock = clock.Func(o.Now)
		}
	}
	o.Now = o.Clock.Now
	if o.Store == nil {
		o.Store = dbopen.Store(o.DB, o.Clock)
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
	st    store.Store
	run   models.Run
	w     window
	lock  store.Lock
	log   *slog.Logger
	start time.Time
	ap    applier
	trips atomic.Int64 // the run's batch statements (store.CountTrips)
}

// RunID is the id of the recorded run.
func (h *Handle) RunID() int64 { return h.run.ID }

// lockPoll is how often a run waiting for the lock (LockWait) tries again.
const lockPoll = 200 * time.Millisecond

// Start takes the lock, plans the window and records the run as running,
// so that a caller (the HTTP API) can answer with the run's id before the
// work begins. It returns ErrLocked when another run holds the lock.
func Start(ctx context.Context, o Options) (h *Handle, err error) {
	o.defaults()
	provider := o.Provider.Name()
	log := o.Logger.With("provider", provider, "account", o.Account)
	h = &Handle{o: o, st: o.Store, log: log, start: o.Clock.Now()}
	held := h // the named result is nil on the error paths below
	if !o.SkipLock {
		// Waited time is counted in polls, not read from the clock, so a
		// stubbed clock that stands still cannot make the wait endless.
		for waited := time.Duration(0); ; waited += lockPoll {
			h.lock, err = o.Store.TryLock(ctx, provider+"/"+o.Account)
			if !errors.Is(err, ErrLocked) || waited >= o.LockWait {
				break
			}
			if serr := o.Clock.Sleep(ctx, lockPoll); serr != nil {
				return nil, err
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

	now := o.Clock.Now().UTC()
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
	if m, ok := o.Provider.(ModeReporter); ok {
		h.run.Mode = m.Mode()
	}
	if s, ok := o.Store.(interface{ AppSchema() models.AppSchema }); ok && len(s.AppSchema().Absent()) > 0 {
		notes["not_recorded"] = s.AppSchema().Absent() // issue 18: the application's table lacks these optional columns
	}
	h.run.Notes, _ = json.Marshal(notes)
	if err := o.Store.CreateRun(ctx, &h.run); err != nil {
		return nil, err
	}
	h.log = log.With("run_id", h.run.ID)
	if len(notes) > 0 {
		h.log.Warn("window adjusted", "notes", notes)
	}
	switch {
	case o.DryRun:
		h.ap = newDryApplier(provider)
	case o.delivers():
		h.ap = newDeliverApplier(provider, h.run.ID)
	default:
		h.ap = &sqlApplier{st: o.Store, runID: h.run.ID, provider: provider, account: o.Account, mem: newCarryMem(o.CarryMemory)}
	}
	if !o.SkipLock {
		// We hold the lock, so any other running run of this account died.
		n, err := o.Store.InterruptOthers(ctx, provider, o.Account, h.run.ID, now, fmt.Sprintf("did not finish; found by run %d", h.run.ID))
		if err != nil {
			return nil, err
		}
		if n > 0 {
			h.log.Warn("marked earlier runs interrupted", "count", n)
		}
		// What dead runs of this account carried is of no use to anyone.
		if err := o.Store.ForgetDeadCarry(ctx, provider, o.Account, h.run.ID); err != nil {
			return nil, err
		}
	}
	h.log.Info("run started", "window_start", w.since, "window_end", w.until, "dry_run", o.DryRun, "repair", o.Repair,
		"trigger", o.Trigger, "triggered_by", o.TriggeredBy)
	return h, nil
}

func (h *Handle) releaseLock(ctx context.Context) {
	if h.lock == nil {
		return
	}
	if err := h.lock.Release(context.WithoutCancel(ctx)); err != nil {
		h.log.Warn("release run lock", "error", err)
	}
	h.lock = nil
}

// Execute does the run's work, records how it ended and releases the lock.
func (h *Handle) Execute(ctx context.Context) (Result, error) {
	defer h.releaseLock(ctx)
	ctx = store.CountTrips(ctx, &h.trips)
	o, run, log := h.o, &h.run, h.log
	e := &engine{o: o, st: h.st, lock: h.lock, ap: h.ap, clock: o.Clock, provider: run.Provider, run: run, log: log, start: h.start,
		seen: map[uint64]uint16{}, pending: map[string]bool{}, tot: newTotals(h.w.since, h.w.until), totDiff: map[uint64]Local{}}
	e.refreshStats(ctx)
	runErr := e.stream(ctx, h.w)
	if runErr == nil {
		runErr = e.windowEnd(ctx, h.w)
	}
	if runErr == nil && o.StuckLimit > 0 {
		runErr = e.stuck(ctx, run.StartedAt)
	}
	wctx := context.WithoutCancel(ctx)
	if err := h.ap.finish(wctx); err != nil {
		runErr = errors.Join(runErr, err)
	}
	// stopped: the run stopped because a batch found its lock lost.
	stopped := errors.Is(runErr, store.ErrLockLost)
	if h.lock != nil && !stopped {
		// The run's last writes (stuck, finish) are behind it; the record
		// below claims the window only if the lock held to the end.
		if err := h.lock.Held(wctx); errors.Is(err, store.ErrLockLost) {
			if runErr == nil {
				runErr, stopped = err, true
			} else {
				// It failed (or was stopped) for another reason first; that
				// stays its status, and the error says the lock went too.
				runErr = errors.Join(runErr, fmt.Errorf("lost the run lock: %w", err))
			}
		}
	}
	fin := o.Clock.Now().UTC()
	run.FinishedAt = &fin
	switch {
	case stopped:
		// Another run may hold the lock and be writing: this one stops, and
		// its record (if that run has not marked it already) says why.
		run.Status = models.RunInterrupted
		runErr = fmt.Errorf("lost the run lock: %w", runErr)
		msg := runErr.Error()
		run.Error = &msg
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
	drift, derr := h.st.DriftCounts(wctx, run.ID)
	if derr != nil {
		runErr = errors.Join(runErr, derr)
	}
	{
		notes := map[string]any{}
		_ = json.Unmarshal(run.Notes, &notes)
		notes["totals"] = map[string]any{"scope": TotalsScope, "currencies": e.tot.Sorted()}
		if e.stuckChecked > 0 {
			notes["stuck_checked"], notes["stuck_api_requests"] = e.stuckChecked, e.stuckRequests
		}
		if l, ok := notes["listing"].(map[string]any); ok && e.listRequests > 0 {
			l["api_requests"] = e.listRequests
			l["synthetic_events"] = e.listSynthetic
		}
		if derr == nil {
			// The run's items by kind and action, as written: a finished
			// run's items never change, so its report reads them here
			// instead of counting them again (report.LoadTotals).
			notes[DriftCountsNote] = append([]store.DriftCount{}, drift...) // [] when none
		}
		run.Notes, _ = json.Marshal(notes)
	}
	res := Result{Run: *run, DBRoundTrips: h.trips.Load(), Drift: map[DriftKey]int64{}, Totals: e.tot.Sorted()}
	var err error
	for _, d := range drift {
		res.Drift[DriftKey{Kind: d.Kind, Action: d.Action}] = d.N
	}
	// The final record is written while the lock is held, so that no run
	// starting in between can mark this one interrupted after its work was
	// done; FinishRun changes only a run still recorded running, so a run
	// that lost its lock and was marked interrupted by its successor keeps
	// that record. (A caller that sees the record and starts the next run
	// at once may find the lock held for the one statement that releases
	// it: LockWait covers that.)
	changed, ferr := h.st.FinishRun(wctx, *run)
	h.releaseLock(ctx)
	if ferr != nil {
		return res, errors.Join(runErr, ferr)
	}
	if res.Run, err = h.st.GetRun(wctx, run.ID); err != nil {
		return res, errors.Join(runErr, fmt.Errorf("reread run: %w", err))
	}
	if !changed {
		// Another run ended this one's record (it took the lock and marked
		// this run interrupted): the record stands, and this run did not
		// succeed whatever it did.
		msg := ""
		if res.Run.Error != nil {
			msg = ": " + *res.Run.Error
		}
		runErr = errors.Join(runErr, fmt.Errorf("run %d is recorded %s by another run, not %s%s", run.ID, res.Run.Status, run.Status, msg))
	}
	last, _, err := store.LastSucceeded(wctx, h.st, run.Provider, run.Account)
	if err != nil {
		runErr = errors.Join(runErr, fmt.Errorf("read last success: %w", err))
	}
	if last.FinishedAt != nil {
		res.LastSuccess = *last.FinishedAt
	}
	if res.Run.Status == models.RunSucceeded && !run.DryRun {
		res.LastSuccess = fin
	}
	log.Info("run finished", "status", res.Run.Status, "examined", res.Run.Examined, "repaired", res.Run.Repaired,
		"delivered", res.Run.Delivered, "refused", res.Run.Refused, "synthetic_events", res.Run.SyntheticEvents, "api_requests", res.Run.APIRequests,
		"db_round_trips", res.DBRoundTrips, "duration", fin.Sub(run.StartedAt))
	return res, runErr
}

// DriftCountsNote is the key of a finished run's notes that holds its
// drift items' counts by kind and action (store.DriftCount, as JSON).
const DriftCountsNote = "drift_counts"

type window struct {
	since, until time.Time
	// listUntil, when after since, ends the part [since, listUntil) read
	// by listing objects (path 3); the event log is read from listUntil.
	listUntil time.Time
	// after and afterAt resume the read after a crashed run's last
	// committed event.
	after   string
	afterAt time.Time
}

// MaxClockSkew is how far in the future an explicit Until may lie: the
// provider's clock and ours may disagree by a little, and an Until a few
// minutes ahead (a caller rounding "now" up) reads nothing that is not
// there. Anything further is a mistake (a date typed wrong, "2099-01-01"):
// such a run would end before its window and, recorded succeeded, would
// vouch for a window end in the future.
const MaxClockSkew = 5 * time.Minute

// minExplicitTime is the earliest Since or Until a caller may ask for: no
// provider's log reaches back before it, so an earlier time is a sentinel
// or a typo (the zero time itself means "not set").
var minExplicitTime = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// planWindow returns the window actually read and notes on how it was
// widened or clamped. The window is validated once, after every clamp: a
// window that cannot be read as asked (an Until in the future, an explicit
// window wholly before the provider's horizon, an empty or inverted one) is
// an error wrapping ErrBadWindow, returned before any run row is written.
func planWindow(ctx context.Context, o Options, now time.Time) (window, map[string]any, error) {
	notes := map[string]any{}
	provider := o.Provider.Name()
	for _, t := range []struct {
		name string
		at   time.Time
	}{{"since", o.Since}, {"until", o.Until}} {
		if !t.at.IsZero() && t.at.Before(minExplicitTime) {
			return window{}, nil, fmt.Errorf("%w: %s %s is before %s", ErrBadWindow, t.name, t.at.UTC().Format(time.RFC3339), minExplicitTime.Format(time.RFC3339))
		}
	}
	if o.Until.After(now.Add(MaxClockSkew)) {
		return window{}, nil, fmt.Errorf("%w: until %s is in the future (now is %s; at most %s ahead is allowed)",
			ErrBadWindow, o.Until.UTC().Format(time.RFC3339), now.Format(time.RFC3339), MaxClockSkew)
	}
	until := o.Until
	if until.IsZero() {
		until = now
	}
	since := o.Since
	if since.IsZero() {
		since = until.Add(-o.Window)
		last, ok, err := store.Checkpoint(ctx, o.Store, provider, o.Account)
		if err != nil {
			return window{}, nil, fmt.Errorf("read checkpoint: %w", err)
		}
		if ok && last.WindowEnd.Before(since) {
			notes["caught_up_from"] = last.WindowEnd.UTC().Format(time.RFC3339)
			since = last.WindowEnd
		}
		since = since.Add(-o.Overlap)
	}
	if !since.Before(until) {
		return window{}, nil, fmt.Errorf("%w: empty window: since %s is not before until %s", ErrBadWindow, since.UTC().Format(time.RFC3339), until.UTC().Format(time.RFC3339))
	}
	_, canList := o.Provider.(ObjectLister)
	var listUntil time.Time
	switch h := o.Provider.Horizon(now); {
	case o.Mode != ModeAuto && o.Mode != ModeListing && o.Mode != ModeEvents:
		return window{}, nil, fmt.Errorf("%w: mode %q is not one of %s, %s, %s", ErrBadWindow, o.Mode, ModeAuto, ModeListing, ModeEvents)
	case !slices.Contains(RepairModes, o.Repair):
		return window{}, nil, fmt.Errorf("%w: repair %q is not one of %s, %s", ErrBadWindow, o.Repair, RepairApply, RepairDeliver)
	case o.Mode == ModeListing && !canList:
		return window{}, nil, fmt.Errorf("%w: mode %s: provider %s cannot list its objects", ErrBadWindow, ModeListing, provider)
	case o.Mode == ModeListing:
		listUntil = until
		notes["listing"] = map[string]any{"since": since.UTC().Format(time.RFC3339), "until": until.UTC().Format(time.RFC3339),
			"reason": "mode listing: the whole window was read by listing the provider's objects"}
	case h.IsZero() || !since.Before(h):
	case canList && o.Mode == ModeAuto:
		// Path 3: the part of the window the event log no longer holds is
		// read by listing objects, the rest from the log.
		listUntil = minTime(h, until).UTC()
		notes["listing"] = map[string]any{"since": since.UTC().Format(time.RFC3339), "until": listUntil.Format(time.RFC3339),
			"reason": fmt.Sprintf("older than the provider's event log, which begins at %s", h.UTC().Format(time.RFC3339))}
	case !until.After(h):
		// Clamping would invert the window: nothing of it is in the
		// provider's log any more.
		return window{}, nil, fmt.Errorf("%w: the window [%s, %s) lies wholly before the provider's event log begins (%s)",
			ErrBadWindow, since.UTC().Format(time.RFC3339), until.UTC().Format(time.RFC3339), h.UTC().Format(time.RFC3339))
	default:
		notes["clamped_from"] = since.UTC().Format(time.RFC3339)
		notes["warning"] = "the window starts before the provider's event retention; changes older than the horizon were not read"
		if !canList {
			notes["warning"] = notes["warning"].(string) + " (this provider cannot list its objects)"
		} else {
			notes["warning"] = notes["warning"].(string) + " (mode events; mode auto lists objects for that part)"
		}
		since = h
	}
	if listUntil.Before(until) && !listUntil.IsZero() {
		notes["events"] = map[string]any{"since": listUntil.UTC().Format(time.RFC3339), "until": until.UTC().Format(time.RFC3339)}
	}
	w := window{since: since.UTC(), until: until.UTC(), listUntil: listUntil.UTC()}
	if o.delivers() {
		// A run that delivers keeps what it carries in memory and writes no
		// payment, so it reads its whole window again (its events are
		// recorded once whatever it reads twice).
		notes["repair"] = RepairDeliver
	}
	if !o.DryRun && !o.SkipLock && !o.delivers() {
		// Resume after a crash: the last run of this account did not
		// succeed but committed batches up to a cursor inside this window.
		// Everything before the cursor is written, so only the rest is read.
		prev, ok, err := store.LastWriting(ctx, o.Store, provider, o.Account)
		if err != nil {
			return window{}, nil, fmt.Errorf("read the last run: %w", err)
		}
		if ok && prev.Status != models.RunSucceeded && prev.ProgressCursor != nil && prev.ProgressAt != nil &&
			!prev.WindowStart.After(w.since) && !prev.ProgressAt.Before(w.since) && prev.ProgressAt.Before(w.until) &&
			!prev.ProgressAt.Before(w.listUntil) {
			// (A cursor is an event's: the listed part before the log, read
			// again whole, is skipped only when the cursor lies after it; a
			// cursor the horizon has since passed is not resumed.)
			w.after, w.afterAt = *prev.ProgressCursor, prev.ProgressAt.UTC()
			notes["resumed_from_run"] = prev.ID
			notes["resumed_after_event"] = w.after
			notes["resumed_at"] = w.afterAt.Format(time.RFC3339Nano)
			if l, ok := notes["listing"].(map[string]any); ok {
				l["skipped"] = fmt.Sprintf("run %d listed it before it was interrupted", prev.ID)
			}
		}
	}
	return w, notes, nil
}

type engine struct {
	dec      decider // decideInto's buffers (the writer's)
	spare    *batch  // the last committed batch's maps and plans, for the next (batch.spare)
	o        Options
	st       store.Store
	lock     store.Lock // nil with SkipLock
	ap       applier
	clock    clock.Clock
	provider string
	run      *models.Run
	log      *slog.Logger
	total    counts
	start    time.Time
	// seen holds a 64-bit hash of each payment examined so far, so that a
	// payment whose facts span batches counts once, with the states the
	// window's log showed for it (a bit per rank; about 16 bytes a payment)
	// and whether the run carries it (carriedBit).
	seen map[uint64]uint16
	// pending are the payments unknown locally whose facts could not make
	// a row: fetched by id at the window's end.
	pending map[string]bool
	drifted int64 // payments with items
	// tot is the window's money, both sides, over the payments examined.
	tot *totals
	// totDiff holds the provider's side of each payment whose money
	// differs from its row's, so that deciding it again replaces it.
	totDiff map[uint64]Local
	// listRequests are the requests the listed part cost, listSynthetic
	// the synthetic events its facts recorded.
	listRequests, listSynthetic int64
	// stuckChecked and stuckRequests are what the stuck-payment path
	// re-fetched and the requests it cost (bounded by StuckLimit).
	stuckChecked, stuckRequests int64
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
	pending := slices.Sorted(maps.Keys(e.pending))
	recheck, err := e.unshown(ctx, w, e.pending)
	if err != nil {
		return err
	}
	if len(pending) == 0 && len(recheck) == 0 {
		return nil
	}
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
		in := setOf(ids)
		var cs []Change
		for _, c := range changes {
			if in[c.ProviderID] {
				cs = append(cs, c)
			}
		}
		if err := e.write(ctx, Page{Changes: cs}, e.check(w, w.until, true), ids...); err != nil {
			return err
		}
	}
	return nil
}

// unshownPage is how many of the window's rows one read returns.
const unshownPage = 5000

// unshown lists the payments examined in this run whose row's state was
// set inside the window and never shown by the window's log: the rows the
// local-ahead rule judges once the whole log has been read. It reads the
// window's rows in keyset pages; only their hashes are held.
func (e *engine) unshown(ctx context.Context, w window, skip map[string]bool) ([]string, error) {
	since := w.since
	if w.after != "" && w.afterAt.After(since) {
		since = w.afterAt
	}
	var out []string
	q := store.WindowQuery{Provider: e.provider, Account: e.o.Account, Since: since, Until: w.until, Limit: unshownPage}
	for {
		page, err := e.st.WindowStates(ctx, q)
		if err != nil {
			return nil, err
		}
		for _, r := range page {
			st := e.ap.state(r.ProviderID, r.State)
			bits, seen := e.seen[IDHash(r.ProviderID)]
			if seen && bits&(1<<rank(st)) == 0 && !skip[r.ProviderID] {
				out = append(out, r.ProviderID)
			}
		}
		if len(page) < unshownPage {
			return out, nil
		}
		q.After = page[len(page)-1].ProviderID
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

// IDHash is the 64-bit FNV-1a hash by which a run (and verify) remembers
// which payments it has seen, about 16 bytes a payment instead of the id.
// Computed over the string itself: hash/fnv's hasher and the []byte copy
// of the id were 4 % of a rerun's job CPU (issue 16); TestIDHashIsFNV1a
// checks it against hash/fnv.
func IDHash(id string) uint64 {
	const offset, prime = 14695981039346656037, 1099511628211
	h := uint64(offset)
	for i := 0; i < len(id); i++ {
		h ^= uint64(id[i])
		h *= prime
	}
	return h
}

// stream reads the window and writes it in batches of whole pages.
func (e *engine) stream(ctx context.Context, w window) error {
	// Reading and writing overlap: the provider's pages are fetched and
	// decoded while the previous batch is written, by one writer, in order.
	rctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	batches := make(chan Page, 1)
	free := make(chan Page, 2) // pages the writer is done with, for the reader
	var werr error
	written := make(chan struct{})
	go func() {
		defer close(written)
		n := 0
		for p := range batches {
			if werr != nil {
				continue
			}
			if err := e.write(ctx, p, e.check(w, p.CursorAt, false)); err != nil {
				werr = err
				cancel(err)
				continue
			}
			recycle(p, free)
			// The run's own batches grow the tables it joins: an empty
			// schema's are analyzed once they hold enough rows for the
			// planner's estimates to matter (after batches 1, 2, 4, 8, …;
			// a table analyzed once is skipped in a query).
			if n++; n&(n-1) == 0 && e.ap.writes() && rctx.Err() == nil {
				e.refreshStats(rctx)
			}
		}
	}()
	var pending Page
	ids := map[string]bool{}
	flush := func() error {
		select {
		case batches <- pending:
		case <-rctx.Done():
			return context.Cause(rctx)
		}
		pending, ids = pending.nextFrom(free), make(map[string]bool, len(ids))
		return rctx.Err()
	}
	add := func(p Page) error {
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
		// A page naming more payments than a batch holds (a payout that
		// paid 70,000 charges) is split, between payments: all of a
		// payment's facts of the page stay in one batch (a refund and its
		// failure are decided together). The earlier parts carry no cursor
		// and no events, so a run stopped between them reads the page again.
		if len(ids)+len(p.Changes) <= e.o.BatchSize {
			// The page fits whatever its payments: no split to find.
			for _, c := range p.Changes {
				ids[c.ProviderID] = true
			}
			pending.Changes = append(pending.Changes, p.Changes...)
		} else {
			var order []string
			byID := map[string][]Change{}
			for _, c := range p.Changes {
				if _, ok := byID[c.ProviderID]; !ok {
					order = append(order, c.ProviderID)
				}
				byID[c.ProviderID] = append(byID[c.ProviderID], c)
			}
			for _, id := range order {
				if !ids[id] && len(ids) >= e.o.BatchSize {
					if err := flush(); err != nil {
						return err
					}
				}
				ids[id] = true
				pending.Changes = append(pending.Changes, byID[id]...)
			}
		}
		pending.Events = append(pending.Events, p.Events...)
		if p.Cursor != "" {
			pending.Cursor, pending.CursorAt = p.Cursor, p.CursorAt
		}
		if len(ids) < e.o.BatchSize && rctx.Err() == nil {
			return nil
		}
		return flush()
	}
	var err error
	eventsSince := w.since
	if w.listUntil.After(w.since) {
		eventsSince = w.listUntil
		if w.after == "" {
			// Path 3 first: the listed part's facts are older than the log's.
			e.log.Info("listing objects", "since", w.since, "until", w.listUntil)
			before := e.o.Provider.Requests()
			pending.listed = true
			err = e.o.Provider.(ObjectLister).ListObjects(rctx, ListParams{Account: e.o.Account, Since: w.since, Until: w.listUntil}, add)
			e.listRequests = e.o.Provider.Requests() - before
			if err == nil && (len(pending.Changes) > 0 || len(pending.Events) > 0) {
				// The listed part's last batch is its own: the log's pages
				// that follow are not listed facts.
				err = flush()
			}
			pending.listed = false
		}
	}
	if err == nil && w.until.After(eventsSince) {
		err = e.o.Provider.ListChanges(rctx, ListParams{Account: e.o.Account, Since: eventsSince, Until: w.until, After: w.after, AfterAt: w.afterAt}, add)
	}
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

// statsRefresher is a store that can give the database's planner the
// statistics of the application's tables before a run reads them in
// batches (pgstore.Store.RefreshStats).
type statsRefresher interface {
	RefreshStats(ctx context.Context) ([]string, error)
}

// refreshStats analyzes the tables the run's batch statements join when
// the store says they have no planner statistics. A failure costs speed,
// not correctness: it is logged and the run goes on.
func (e *engine) refreshStats(ctx context.Context) {
	r, ok := e.st.(statsRefresher)
	if !ok {
		return
	}
	start := e.clock.Now()
	tables, err := r.RefreshStats(ctx)
	if err != nil {
		e.log.Warn("could not analyze the application's tables; batch statements may be slow", "error", err)
	}
	if len(tables) > 0 {
		e.log.Info("analyzed tables that had no planner statistics", "tables", strings.Join(tables, ", "), "took", e.clock.Now().Sub(start).Round(time.Millisecond))
	}
}

// stuck re-fetches non-terminal payments that have not moved for a while.
func (e *engine) stuck(ctx context.Context, now time.Time) error {
	cutoff := now.Add(-e.o.StuckAfter)
	if e.o.StuckBefore != nil {
		cutoff = e.o.StuckBefore(now)
	}
	ids, err := e.st.StuckPayments(ctx, store.StuckQuery{Provider: e.provider, Account: e.o.Account,
		States: []models.State{models.StateCreated, models.StateAuthorised, models.StateCaptured}, Before: cutoff, Limit: e.o.StuckLimit})
	if err != nil || len(ids) == 0 {
		return err
	}
	e.log.Info("re-fetching stuck payments", "count", len(ids))
	before := e.o.Provider.Requests()
	changes, err := e.fetch(ctx, ids, now)
	e.stuckChecked, e.stuckRequests = int64(len(ids)), e.o.Provider.Requests()-before
	e.log.Info("re-fetched stuck payments", "count", len(ids), "api_requests", e.stuckRequests)
	if len(changes) > 0 {
		if berr := e.write(ctx, Page{Changes: changes}, Check{Since: e.run.WindowStart, Until: e.run.WindowEnd, LogDone: e.run.WindowEnd, Complete: true}); berr != nil {
			return errors.Join(err, berr)
		}
	}
	if err == nil && !e.o.DryRun {
		// Each payment re-fetched waits its turn behind the others next run
		// (a dry run writes only its record and items, so it rotates nothing).
		err = e.st.MarkChecked(ctx, e.provider, e.o.Account, ids, now)
	}
	return err
}

// MissRatio is a run's webhook miss ratio: the synthetic events recorded
// for missed webhooks over the events read from the log. The facts a run
// found by listing objects (its notes' listing.synthetic_events) are no
// missed webhooks and are not counted. 0 when no event was read.
func MissRatio(r models.Run) float64 {
	if r.EventsRead <= 0 {
		return 0
	}
	var notes struct {
		Listing struct {
			Synthetic int64 `json:"synthetic_events"`
		} `json:"listing"`
	}
	_ = json.Unmarshal(r.Notes, &notes)
	return float64(max(r.SyntheticEvents-notes.Listing.Synthetic, 0)) / float64(r.EventsRead)
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func orNone(s string) string {
	if s == "" {
		return "a change"
	}
	return "event " + s
}
