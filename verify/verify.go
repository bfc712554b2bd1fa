// Package verify re-reads payments from the provider and compares each with
// its local row (`reconciler verify`, DESIGN sections 7 and 9). The oracle
// is the provider's own current objects, read through a
// reconcile.CurrentReader; a difference is explained when a drift item
// says a run saw it and left it for a human (refused, reported or
// delivered) — by a reconciliation run, not by an earlier verify.
//
// Verify repairs nothing. With Options.Record it leaves an audit trail and
// nothing else: one reconciliation_runs row (trigger manual, dry run, the
// window, examined = checked, refused = unexplained payments) and one drift
// item per unexplained difference (kind conflict, action reported, detail
// found_by "verify"). It never writes a payment or a webhook event.
package verify

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/reconciler/reconciler/internal/dbopen"
	"github.com/reconciler/reconciler/internal/fanin"
	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/reconcile"
	"github.com/reconciler/reconciler/store"
)

// DefaultSample is how many payments are checked when neither All nor
// Sample is set.
const DefaultSample = 100

// DefaultLookback is the window when Since is not set: a nightly run's 24
// hours and its hour of overlap.
const DefaultLookback = 25 * time.Hour

// DefaultPageSize is how many payments are read from the database and
// asked of the provider at once.
const DefaultPageSize = 200

// ExplainingActions are the drift actions that explain a difference: a run
// saw it and left it for a human (or for the application's worker).
var ExplainingActions = []string{models.ActionRefused, models.ActionReported, models.ActionDelivered}

// Fields a Difference names.
const (
	FieldFound          = "found"
	FieldState          = "state"
	FieldAmount         = "amount"
	FieldCurrency       = "currency"
	FieldAmountRefunded = "amount_refunded"
	FieldAmountCaptured = "amount_captured"
	FieldPayout         = "payout"
)

// Options configures one verification of one provider and account.
type Options struct {
	// DB is the database; the drift items that explain a difference are
	// read from it.
	DB *gorm.DB
	// Store, when set, is DB's store, through which the window's payments
	// are read; nil means dbopen.Store(DB, nil). The store is the one that
	// knows its dialect's SQL.
	Store    store.Store
	Provider string // the provider's name in the database ("stripe")
	Account  string // "" for the platform
	// Reader reads the provider's current objects. Use a fresh one per
	// verification (stripe.Provider.Verifier, gocardless.Provider.Verifier):
	// it caches payouts.
	Reader reconcile.CurrentReader
	// Since and Until bound the window [Since, Until): the payments whose
	// source_updated_at or settled_at lies in it. Defaults: Until = Now(),
	// Since = Until - DefaultLookback.
	Since, Until time.Time
	// All checks every payment of the window; otherwise Sample payments
	// (DefaultSample when 0) drawn uniformly at random with Rand.
	All    bool
	Sample int
	// Seed seeds the sample's draw (NewRand), so that the same seed over
	// the same rows checks the same payments; nil draws one from the
	// clock. Either way the seed used is in Report.Seed.
	Seed *uint64
	// Rand, when set, draws the sample instead (Seed is then ignored and
	// Report.Seed is nil).
	Rand *rand.Rand
	// Record writes the run record and its items (see the package doc).
	Record bool
	// Source, when set, is the provider Reader reads through: the run
	// record takes its mode (reconcile.ModeReporter) and API requests.
	Source reconcile.Provider
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// PageSize is how many payments are handled at once (default
	// DefaultPageSize): memory stays flat however large the window.
	PageSize int
	// NoListing reads every payment by id even when Reader can list the
	// window's payments (reconcile.CurrentLister).
	NoListing bool
	// StreamRows is how many of the window's local rows each stretch of
	// the window listed at once is given at least (default streamRows;
	// see listed).
	StreamRows int
}

// Report is the outcome of one verification. Its JSON is stable: fields
// are added, never renamed.
type Report struct {
	Provider string    `json:"provider"`
	Account  string    `json:"account"`
	Since    time.Time `json:"since"`
	Until    time.Time `json:"until"`
	// All is true for --all; otherwise Sample is the sample size asked for.
	All    bool `json:"all"`
	Sample int  `json:"sample,omitempty"`
	// Seed is the sample's seed (null for --all): --seed repeats the draw.
	Seed *uint64 `json:"seed"`
	// RunID is the run record verify wrote (0 when it wrote none).
	RunID int64 `json:"run_id,omitempty"`
	// InWindow (and Population, the same number under the name a
	// statistician looks for) is the number of payments in the window;
	// Checked how many of them were compared with the provider.
	InWindow   int `json:"in_window"`
	Population int `json:"population"`
	Checked    int `json:"checked"`
	// Differing counts the payments with at least one difference; Explained
	// those of them that a drift item explains.
	Differing int `json:"differing"`
	Explained int `json:"explained"`
	// Unexplained lists every difference of the payments no drift item
	// explains, by provider_id then field.
	Unexplained []Difference `json:"unexplained"`
	// ExplainedDifferences lists the differences a drift item explains.
	ExplainedDifferences []Difference `json:"explained_differences"`
	// UpperBound, for a sample that found no difference, is the largest
	// share of the window's payments that may be wrong at 95% confidence
	// (see UpperBound); null for --all and whenever a difference was found.
	UpperBound *float64 `json:"upper_bound"`
	// BoundOn says what UpperBound bounds: BoundWrong (payments that
	// differ) or BoundUnexplained (payments with a difference no drift
	// item explains, when the sample's differences are all explained).
	BoundOn string `json:"bound_on,omitempty"`
	// Statement says it in one sentence (see Statement).
	Statement string `json:"statement"`

	items []store.Item // the unexplained differences as drift items
}

// What an upper bound is on (Report.BoundOn).
const (
	BoundWrong       = "wrong"
	BoundUnexplained = "unexplained"
)

// OK reports whether no difference is left unexplained.
func (r Report) OK() bool { return len(r.Unexplained) == 0 }

// Difference is one field in which a local row and the provider disagree.
type Difference struct {
	ProviderID string `json:"provider_id"`
	Field      string `json:"field"`
	Local      string `json:"local"`
	Provider   string `json:"provider"`
}

// Validate checks the options; it names the field at fault.
func (o Options) Validate() error {
	switch {
	case o.DB == nil:
		return errors.New("verify: Options.DB is nil")
	case o.Provider == "":
		return errors.New("verify: Options.Provider is empty")
	case o.Reader == nil:
		return errors.New("verify: Options.Reader is nil")
	case o.All && o.Sample != 0:
		return errors.New("verify: All and Sample are mutually exclusive")
	case o.Sample < 0:
		return fmt.Errorf("verify: Sample %d is negative", o.Sample)
	case o.PageSize < 0:
		return fmt.Errorf("verify: PageSize %d is negative", o.PageSize)
	case !o.Since.IsZero() && !o.Until.IsZero() && !o.Since.Before(o.Until):
		return fmt.Errorf("verify: Since %s is not before Until %s", o.Since.Format(time.RFC3339), o.Until.Format(time.RFC3339))
	}
	return nil
}

func (o *Options) defaults() {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Until.IsZero() {
		o.Until = o.Now()
	}
	if o.Since.IsZero() {
		o.Since = o.Until.Add(-DefaultLookback)
	}
	o.Since, o.Until = o.Since.UTC(), o.Until.UTC()
	if !o.All && o.Sample == 0 {
		o.Sample = DefaultSample
	}
	if o.Rand == nil && !o.All {
		if o.Seed == nil {
			s := NewSeed()
			o.Seed = &s
		}
		o.Rand = NewRand(*o.Seed)
	}
	if o.PageSize == 0 {
		o.PageSize = DefaultPageSize
	}
	if o.StreamRows <= 0 {
		o.StreamRows = streamRows
	}
	if o.Store == nil {
		o.Store = dbopen.Store(o.DB, nil)
	}
}

// Run verifies the window's payments of one provider and account. An error
// means the verification could not be completed (the database or the
// provider failed); differences are not errors: see Report.OK.
func Run(ctx context.Context, o Options) (Report, error) {
	if err := o.Validate(); err != nil {
		return Report{}, err
	}
	o.defaults()
	if o.Since.After(o.Until) || o.Since.Equal(o.Until) {
		return Report{}, fmt.Errorf("verify: the window [%s, %s) is empty", o.Since.Format(time.RFC3339), o.Until.Format(time.RFC3339))
	}
	v := &verifier{o: o,
		rep: Report{Provider: o.Provider, Account: o.Account, Since: o.Since, Until: o.Until, All: o.All, Sample: o.Sample,
			Unexplained: []Difference{}, ExplainedDifferences: []Difference{}}}
	if !o.All && o.Seed != nil {
		s := *o.Seed
		v.rep.Seed = &s
	}
	var run models.Run
	if o.Record {
		run = models.Run{Provider: o.Provider, Account: o.Account, WindowStart: o.Since, WindowEnd: o.Until,
			StartedAt: o.Now().UTC(), Status: models.RunRunning, Trigger: models.TriggerManual, DryRun: true,
			Notes: models.JSON(`{"command":"verify"}`)}
		if m, ok := o.Source.(reconcile.ModeReporter); ok {
			run.Mode = m.Mode()
		}
		if err := o.Store.CreateRun(ctx, &run); err != nil {
			return v.rep, fmt.Errorf("record the verify run: %w", err)
		}
		v.rep.RunID = run.ID
	}
	var err error
	v.lister, _ = o.Reader.(reconcile.CurrentLister)
	if o.NoListing {
		v.lister = nil
	}
	if o.All {
		err = v.all(ctx)
	} else {
		err = v.sample(ctx)
	}
	v.rep.Population = v.rep.InWindow
	// By provider_id, each payment's fields in Compare's order, whatever
	// order the pages came in.
	byID := func(a, b Difference) int { return strings.Compare(a.ProviderID, b.ProviderID) }
	slices.SortStableFunc(v.rep.Unexplained, byID)
	slices.SortStableFunc(v.rep.ExplainedDifferences, byID)
	slices.SortStableFunc(v.rep.items, func(a, b store.Item) int { return strings.Compare(a.ProviderID, b.ProviderID) })
	if err == nil && !o.All && v.rep.Differing == v.rep.Explained {
		// No unexplained difference in the sample: the bound is on the
		// share of payments that differ (none found), or, when every
		// difference found is explained by a drift item, on the share with
		// a difference no item explains.
		if b, _, ok := UpperBound(v.rep.Checked, v.rep.Population); ok {
			v.rep.UpperBound = &b
			v.rep.BoundOn = BoundWrong
			if v.rep.Differing > 0 {
				v.rep.BoundOn = BoundUnexplained
			}
		}
	}
	v.rep.Statement = Statement(v.rep)
	if o.Record {
		if rerr := v.record(ctx, run, err); rerr != nil && err == nil {
			err = rerr
		}
	}
	return v.rep, err
}

// NewSeed draws a seed from the clock, small enough to type and to survive
// a JSON reader that holds numbers as doubles.
func NewSeed() uint64 { return uint64(time.Now().UnixNano()) % 1_000_000_000 }

// NewRand is the sample's source for seed.
func NewRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, seed^0x9E3779B97F4A7C15)) }

// record writes what the verification found as a dry run's record: its
// counters and one drift item per unexplained difference in one
// transaction, then how it ended (failed with runErr's message, when set).
func (v *verifier) record(ctx context.Context, run models.Run, runErr error) error {
	unexplained := int64(v.rep.Differing - v.rep.Explained)
	if len(v.rep.items) > 0 || v.rep.Checked > 0 {
		err := v.o.Store.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
			if len(v.rep.items) > 0 {
				if err := tx.InsertItems(ctx, run.ID, v.o.Provider, v.rep.items); err != nil {
					return err
				}
			}
			return tx.AddCounts(ctx, run.ID, store.Progress{Counts: store.Counts{
				Examined: int64(v.rep.Checked), InSync: int64(v.rep.Checked - v.rep.Differing), Refused: unexplained}})
		})
		if err != nil {
			runErr = cmp.Or(runErr, fmt.Errorf("record the verify run's items: %w", err))
		}
	}
	notes, _ := json.Marshal(map[string]any{"command": "verify", "all": v.rep.All, "sample": v.rep.Sample, "seed": v.rep.Seed,
		"population": v.rep.Population, "checked": v.rep.Checked, "differing": v.rep.Differing, "explained": v.rep.Explained,
		"unexplained": unexplained, "upper_bound": v.rep.UpperBound, "statement": v.rep.Statement})
	end := v.o.Now().UTC()
	run.Status, run.FinishedAt, run.Notes = models.RunSucceeded, &end, notes
	if runErr != nil {
		msg := runErr.Error()
		run.Status, run.Error = models.RunFailed, &msg
	}
	if v.o.Source != nil {
		run.APIRequests = v.o.Source.Requests()
	}
	changed, err := v.o.Store.FinishRun(ctx, run)
	switch {
	case err != nil:
		return fmt.Errorf("record the verify run's end: %w", err)
	case !changed:
		return fmt.Errorf("record the verify run's end: run %d is no longer recorded running (another run marked it interrupted)", run.ID)
	}
	return runErr
}

type verifier struct {
	o      Options
	rep    Report
	lister reconcile.CurrentLister // nil: every payment is read by id
}

// listingWorthIt says whether listing the window's payments costs fewer
// requests than reading n of them by id: a list page holds 100 (Stripe)
// or 500 (GoCardless) payments, one request each.
func listingWorthIt(n, population int) bool { return n > population/100+population/200 }

// listStreams is how many stretches of its window verify lists at once at
// most, and streamRows how many of the window's local rows a stretch is
// given at least. A provider's list is read through its cursor, each
// page's request waiting for the answer before it: one list makes one
// request an answer's time, however many the pacing allows (Stripe's
// lists answer in hundreds of milliseconds where its pacing allows one
// every 50). Stretches of the window's time are lists of their own, read
// at once; each costs at most one partly filled page more than one list
// would.
const (
	listStreams = 4
	streamRows  = 2500
)

// listed lists the provider's payments created in the window and calls fn
// with each page, in the order the pages arrive. rows, the window's local
// rows, sizes the listing: the window is listed as up to listStreams
// stretches of its time at once, one for every Options.StreamRows rows. fn is
// called from this goroutine only, while the next pages are asked for.
//
// A lister whose provider answers late (lateLister) may ask for more
// stretches, as many as its latency needs, one for every two fifths of
// Options.StreamRows rows (1,000 by default) at most: at 300 ms an answer
// four lists make about 13 requests a second where Stripe's pacing allows
// 20.
func (v *verifier) listed(ctx context.Context, rows int, fn func([]reconcile.Current) error) error {
	k := min(listStreams, max(1, rows/v.o.StreamRows))
	if l, ok := v.lister.(lateLister); ok {
		k = max(k, min(l.ListStretches(ctx, v.o.Account), rows*5/(2*v.o.StreamRows)))
	}
	parts := stretches(v.o.Since, v.o.Until, k)
	return fanin.Run(ctx, parts, func(ctx context.Context, p stretch, send func([]reconcile.Current) error) error {
		if err := v.lister.ListCurrent(ctx, reconcile.ListParams{Account: v.o.Account, Since: p.since, Until: p.until}, send); err != nil {
			return fmt.Errorf("list %s payments: %w", v.o.Provider, err)
		}
		return nil
	}, func(_ context.Context, cs []reconcile.Current) error { return fn(cs) })
}

// lateLister is a CurrentLister that can tell how many stretches of an
// account's window it lists best at once, as many as its provider's
// latency needs (0: no more than the rows ask for). It may read what it
// needs to know that (Stripe reads the account's payout schedule, which
// its listing reads first anyway).
type lateLister interface {
	ListStretches(ctx context.Context, account string) int
}

// stretch is a part [since, until) of a window.
type stretch struct{ since, until time.Time }

// stretches cuts [since, until) into at most k consecutive stretches of
// about equal length, cut at whole seconds (Stripe's created filters take
// seconds), in order.
func stretches(since, until time.Time, k int) []stretch {
	var out []stretch
	lo := since
	for i := 1; i < k; i++ {
		b := since.Add(until.Sub(since) / time.Duration(k) * time.Duration(i)).Truncate(time.Second)
		if b.After(lo) && b.Before(until) {
			out = append(out, stretch{lo, b})
			lo = b
		}
	}
	return append(out, stretch{lo, until})
}

// rowsOf reads the local rows of ids.
func (v *verifier) rowsOf(ctx context.Context, ids []string) ([]models.Payment, error) {
	m := models.AppSchemaOf(v.o.DB) // the application's names (issue 18)
	var rows []models.Payment
	err := v.o.DB.WithContext(ctx).Table(m.SQL("{payments} AS p")).Select(m.SQL(models.PaymentSelect)).
		Where(m.SQL("{p.provider} = ? AND {p.account} = ? AND {p.provider_id} IN ?"), v.o.Provider, v.o.Account, ids).
		Order(m.SQL("{p.id}")).Find(&rows).Error
	if err != nil {
		return nil, fmt.Errorf("read payments: %w", err)
	}
	for i := range rows {
		if rows[i].State, err = m.OurState(string(rows[i].State)); err != nil {
			return nil, err
		}
	}
	return rows, nil
}

// allListed checks every payment the provider lists as created in the
// window (a page of the provider's at a time), including those with no
// local row, and returns the hashes of the ids it checked.
func (v *verifier) allListed(ctx context.Context, rows int) (map[uint64]struct{}, error) {
	done := map[uint64]struct{}{}
	err := v.listed(ctx, rows, func(cs []reconcile.Current) error {
		ids := make([]string, 0, len(cs))
		listed := make(map[string]reconcile.Current, len(cs))
		for _, c := range cs {
			if _, ok := listed[c.ProviderID]; ok || c.ProviderID == "" {
				continue
			}
			listed[c.ProviderID] = c
			ids = append(ids, c.ProviderID)
		}
		rows, err := v.rowsOf(ctx, ids)
		if err != nil {
			return err
		}
		// The rows of the window are checked here, with the listing; a row
		// outside the window is not this verification's; a payment with no
		// row at all is missing locally, unless it is still at created
		// (nothing authorised or paid: no money is missing).
		have := map[string]bool{}
		inWindow := rows[:0]
		for _, r := range rows {
			have[r.ProviderID] = true
			if v.inWindow(r) {
				inWindow = append(inWindow, r)
				done[reconcile.IDHash(r.ProviderID)] = struct{}{}
			}
		}
		rows = inWindow
		var missing []string
		for _, id := range ids {
			if c := listed[id]; !have[id] && !(c.Found && !c.Unknown && c.State == models.StateCreated) {
				missing = append(missing, id)
			}
		}
		v.rep.InWindow += len(rows) + len(missing)
		if err := v.missingLocally(ctx, missing, listed); err != nil {
			return err
		}
		return v.checkListed(ctx, rows, listed)
	})
	return done, err
}

// missingLocally records the listed payments with no local row: a
// difference in "found", explained when a run left an item for it (a
// status it could not map, a payment it could not create).
func (v *verifier) missingLocally(ctx context.Context, ids []string, listed map[string]reconcile.Current) error {
	if len(ids) == 0 {
		return nil
	}
	explained, err := v.explained(ctx, ids)
	if err != nil {
		return err
	}
	for _, id := range ids {
		c := listed[id]
		v.rep.Checked++
		v.rep.Differing++
		d := Difference{ProviderID: id, Field: FieldFound, Local: "missing", Provider: describeState(c)}
		if explained[id] {
			v.rep.Explained++
			v.rep.ExplainedDifferences = append(v.rep.ExplainedDifferences, d)
			continue
		}
		v.rep.Unexplained = append(v.rep.Unexplained, d)
		if v.o.Record {
			ps := describeState(c)
			v.rep.items = append(v.rep.items, store.Item{ProviderID: id, Kind: models.KindMissingLocal, Action: models.ActionReported, ProviderState: &ps,
				Detail: map[string]any{"field": d.Field, "local": d.Local, "provider": d.Provider, "found_by": FoundBy,
					"amount": c.Amount, "currency": c.Currency, "amount_refunded": c.AmountRefunded,
					"explanation": fmt.Sprintf("Found by verify: the provider lists this payment (%s) as created in the window, and there is no local row; nothing was changed.", d.Provider)}})
		}
	}
	return nil
}

// inWindow reports whether a row belongs to the window: its
// source_updated_at or settled_at lies in [Since, Until).
func (v *verifier) inWindow(r models.Payment) bool {
	in := func(t *time.Time) bool { return t != nil && !t.Before(v.o.Since) && t.Before(v.o.Until) }
	return in(r.SourceUpdatedAt) || in(r.SettledAt)
}

// page reads the window's next payments after id after, by id.
func (v *verifier) page(ctx context.Context, after int64, limit int) ([]models.Payment, error) {
	rows, err := v.o.Store.PaymentsInWindow(ctx, store.PaymentQuery{Provider: v.o.Provider, Account: v.o.Account,
		Since: v.o.Since, Until: v.o.Until, AfterID: after, Limit: limit})
	if err != nil {
		return nil, fmt.Errorf("read payments: %w", err)
	}
	return rows, nil
}

// payoutWarmer is a CurrentReader that can read payouts ahead of the
// payments that name them (stripe.Verifier.WarmPayouts).
type payoutWarmer interface {
	WarmPayouts(ctx context.Context, account string, ids []string)
}

// all checks every payment of the window, a page at a time: with a
// lister, every payment the provider lists as created in the window (rows
// missing locally included), then the window's other rows by id. The
// payouts the window's rows name are read beside it, when the reader can
// (payoutWarmer): each page then finds its payouts read or being read.
func (v *verifier) all(ctx context.Context) error {
	var done map[uint64]struct{}
	q := store.PaymentQuery{Provider: v.o.Provider, Account: v.o.Account, Since: v.o.Since, Until: v.o.Until}
	if w, ok := v.o.Reader.(payoutWarmer); ok {
		payouts, err := v.o.Store.PayoutsInWindow(ctx, q)
		if err != nil {
			return err
		}
		wctx, cancel := context.WithCancel(ctx)
		warmed := make(chan struct{})
		go func() { defer close(warmed); w.WarmPayouts(wctx, v.o.Account, payouts) }()
		defer func() { cancel(); <-warmed }()
	}
	if v.lister != nil {
		rows, err := v.o.Store.CountInWindow(ctx, q)
		if err != nil {
			return err
		}
		if done, err = v.allListed(ctx, rows); err != nil {
			return err
		}
	}
	var after int64
	for {
		rows, err := v.page(ctx, after, v.o.PageSize)
		if err != nil {
			return err
		}
		if len(rows) == 0 {
			return nil
		}
		after = rows[len(rows)-1].ID
		if done != nil {
			rows = slices.DeleteFunc(rows, func(r models.Payment) bool { _, ok := done[reconcile.IDHash(r.ProviderID)]; return ok })
		}
		v.rep.InWindow += len(rows)
		if err := v.check(ctx, rows); err != nil {
			return err
		}
	}
}

// sample draws Sample payments uniformly from the window (reservoir
// sampling over the window's rows, read a page at a time, so memory is the
// sample's and a page's), then checks them in id order.
func (v *verifier) sample(ctx context.Context) error {
	n := v.o.Sample
	res := make([]models.Payment, 0, min(n, 1<<16))
	seen := 0
	var after int64
	for {
		rows, err := v.page(ctx, after, max(v.o.PageSize, 1000))
		if err != nil {
			return err
		}
		if len(rows) == 0 {
			break
		}
		for _, r := range rows {
			if seen < n {
				res = append(res, r)
			} else if j := v.o.Rand.IntN(seen + 1); j < n {
				res[j] = r
			}
			seen++
		}
		after = rows[len(rows)-1].ID
	}
	v.rep.InWindow = seen
	slices.SortFunc(res, func(a, b models.Payment) int { return cmp.Compare(a.ID, b.ID) })
	if v.lister != nil && listingWorthIt(len(res), seen) {
		// One list request per page of the window's payments costs less
		// than one request per sampled payment: the sampled ones are
		// picked from the listing, the rest read by id.
		want := make(map[string]bool, len(res))
		for _, r := range res {
			want[r.ProviderID] = true
		}
		listed := map[string]reconcile.Current{}
		if err := v.listed(ctx, seen, func(cs []reconcile.Current) error {
			for _, c := range cs {
				if want[c.ProviderID] {
					listed[c.ProviderID] = c
				}
			}
			return nil
		}); err != nil {
			return err
		}
		for len(res) > 0 {
			page := res[:min(len(res), v.o.PageSize)]
			res = res[len(page):]
			if err := v.checkListed(ctx, page, listed); err != nil {
				return err
			}
		}
		return nil
	}
	for len(res) > 0 {
		page := res[:min(len(res), v.o.PageSize)]
		res = res[len(page):]
		if err := v.check(ctx, page); err != nil {
			return err
		}
	}
	return nil
}

// check compares one page of rows with the provider and classifies their
// differences.
func (v *verifier) check(ctx context.Context, rows []models.Payment) error {
	return v.checkListed(ctx, rows, nil)
}

// checkListed is check with the payments listed already: the reader
// completes them (CurrentParams.Listed).
func (v *verifier) checkListed(ctx context.Context, rows []models.Payment, listed map[string]reconcile.Current) error {
	if len(rows) == 0 {
		return nil
	}
	p := reconcile.CurrentParams{Account: v.o.Account, IDs: make([]string, len(rows)), Payouts: map[string]string{}}
	if len(listed) > 0 {
		p.Listed = map[string]reconcile.Current{}
		for _, r := range rows {
			if c, ok := listed[r.ProviderID]; ok {
				p.Listed[r.ProviderID] = c
			}
		}
	}
	for i, r := range rows {
		p.IDs[i] = r.ProviderID
		if r.PayoutID != nil && *r.PayoutID != "" {
			p.Payouts[r.ProviderID] = *r.PayoutID
		}
	}
	cur, err := v.o.Reader.Current(ctx, p)
	if err != nil {
		return fmt.Errorf("read %s payments: %w", v.o.Provider, err)
	}
	byID := make(map[string]reconcile.Current, len(cur))
	for _, c := range cur {
		byID[c.ProviderID] = c
	}
	diffs := map[string][]Difference{}
	local := map[string]rowAndCurrent{}
	var differing []string
	for _, r := range rows {
		c, ok := byID[r.ProviderID]
		if !ok {
			return fmt.Errorf("read %s payments: no answer for %s", v.o.Provider, r.ProviderID)
		}
		v.rep.Checked++
		if d := Compare(r, c); len(d) > 0 {
			diffs[r.ProviderID] = d
			differing = append(differing, r.ProviderID)
			local[r.ProviderID] = rowAndCurrent{r, c}
		}
	}
	if len(differing) == 0 {
		return nil
	}
	explained, err := v.explained(ctx, differing)
	if err != nil {
		return err
	}
	for _, id := range differing {
		v.rep.Differing++
		if explained[id] {
			v.rep.Explained++
			v.rep.ExplainedDifferences = append(v.rep.ExplainedDifferences, diffs[id]...)
		} else {
			v.rep.Unexplained = append(v.rep.Unexplained, diffs[id]...)
			if v.o.Record {
				for _, d := range diffs[id] {
					v.rep.items = append(v.rep.items, driftItem(local[id], d))
				}
			}
		}
	}
	return nil
}

type rowAndCurrent struct {
	row models.Payment
	cur reconcile.Current
}

// FoundBy is the detail key (and its value) of the drift items verify
// records; such items explain no later difference.
const FoundBy = "verify"

// driftItem is the record of one unexplained difference.
func driftItem(rc rowAndCurrent, d Difference) store.Item {
	local := string(rc.row.State)
	it := store.Item{ProviderID: d.ProviderID, Kind: models.KindConflict, Action: models.ActionReported, LocalState: &local,
		Detail: map[string]any{"field": d.Field, "local": d.Local, "provider": d.Provider, "found_by": FoundBy,
			"amount": rc.row.Amount, "currency": rc.row.Currency, "amount_refunded": rc.row.AmountRefunded,
			"explanation": fmt.Sprintf("Found by verify: %s is %s locally and %s at the provider, and no drift item explains it; nothing was changed.",
				d.Field, d.Local, d.Provider)}}
	if rc.cur.Found {
		ps := describeState(rc.cur)
		if rc.cur.Unknown {
			ps = "unknown status " + strconv.Quote(rc.cur.RawStatus)
		}
		it.ProviderState = &ps
	}
	return it
}

// explained returns the ids among ids that a drift item explains (any run:
// the item may predate the window). An item an earlier verify recorded
// explains nothing: it is the difference itself, still unexplained.
func (v *verifier) explained(ctx context.Context, ids []string) (map[string]bool, error) {
	var found []models.DriftItem
	err := v.o.DB.WithContext(ctx).Model(&models.DriftItem{}).Select("provider_id", "detail").
		Where("provider = ? AND provider_id IN ? AND action IN ?", v.o.Provider, ids, ExplainingActions).
		Find(&found).Error
	if err != nil {
		return nil, fmt.Errorf("read drift items: %w", err)
	}
	out := make(map[string]bool, len(found))
	for _, it := range found {
		var d struct {
			FoundBy string `json:"found_by"`
		}
		if len(it.Detail) > 0 {
			_ = json.Unmarshal(it.Detail, &d)
		}
		if d.FoundBy != FoundBy {
			out[it.ProviderID] = true
		}
	}
	return out, nil
}

// Compare lists the fields in which the local row and the provider's
// current objects disagree, in a fixed order (found, state, amount,
// currency, amount_refunded, amount_captured, payout):
//
//   - a payment the provider does not know differs in found alone;
//   - the states must be equal, except that a local settled row matches a
//     captured payment when the provider cannot tell settlement (Stripe
//     without a payout to look at); a status the mapping does not know
//     always differs;
//   - amount, currency (case-insensitive) and amount_refunded must be equal;
//   - a captured amount the provider shows must be the row's amount_captured,
//     or the row's amount when the row records none;
//   - a payout the row names must be the one the provider says paid the
//     payment out, and paid. A row naming no payout is not checked: filling
//     it in is a run's bookkeeping, not drift.
func Compare(local models.Payment, cur reconcile.Current) []Difference {
	var out []Difference
	add := func(field, l, p string) {
		out = append(out, Difference{ProviderID: local.ProviderID, Field: field, Local: l, Provider: p})
	}
	if !cur.Found {
		add(FieldFound, string(local.State), "not found")
		return out
	}
	switch {
	case cur.Unknown:
		add(FieldState, string(local.State), "unknown status "+strconv.Quote(cur.RawStatus))
	case local.State == cur.State:
	case local.State == models.StateSettled && cur.State == models.StateCaptured && !cur.SettlementKnown:
	default:
		add(FieldState, string(local.State), describeState(cur))
	}
	if local.Amount != cur.Amount {
		add(FieldAmount, strconv.FormatInt(local.Amount, 10), strconv.FormatInt(cur.Amount, 10))
	}
	if !strings.EqualFold(local.Currency, cur.Currency) {
		add(FieldCurrency, local.Currency, cur.Currency)
	}
	if local.AmountRefunded != cur.AmountRefunded {
		add(FieldAmountRefunded, strconv.FormatInt(local.AmountRefunded, 10), strconv.FormatInt(cur.AmountRefunded, 10))
	}
	if cur.AmountCaptured > 0 {
		want := local.Amount
		l := "null (amount " + strconv.FormatInt(local.Amount, 10) + ")"
		if local.AmountCaptured != nil {
			want, l = *local.AmountCaptured, strconv.FormatInt(*local.AmountCaptured, 10)
		}
		if want != cur.AmountCaptured {
			add(FieldAmountCaptured, l, strconv.FormatInt(cur.AmountCaptured, 10))
		}
	}
	if local.PayoutID != nil && *local.PayoutID != "" && cur.SettlementKnown {
		po := *local.PayoutID
		switch {
		case cur.PayoutID != po:
			add(FieldPayout, po, describePayout(cur, po))
		case cur.PayoutStatus != "" && cur.PayoutStatus != "paid":
			add(FieldPayout, po+" paid", po+" "+cur.PayoutStatus)
		}
	}
	return out
}

func describeState(c reconcile.Current) string {
	s := string(c.State)
	if c.RawStatus != "" && c.RawStatus != s {
		s += " (" + c.RawStatus + ")"
	}
	return s
}

func describePayout(c reconcile.Current, local string) string {
	switch {
	case c.PayoutID != "" && c.PayoutStatus != "":
		return c.PayoutID + " " + c.PayoutStatus
	case c.PayoutID != "":
		return c.PayoutID
	case c.PayoutStatus == "missing":
		return "no payout " + local
	case c.PayoutStatus != "":
		return "not in " + local + " (" + c.PayoutStatus + ")"
	}
	return "none"
}
