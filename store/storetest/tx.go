package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/reconciler/reconciler/guard"
	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/store"
)

// The batch statements of store.Tx. Every test writes through e.st, whose
// clock stands still at e.now, so the stamps are exact too.

var txTests = []test{
	{"LoadPayments", testLoadPayments},
	{"InsertPayments", testInsertPayments},
	{"ApplyStepsEveryEdgeAndTime", testApplyStepsEveryCase},
	{"ApplyStepsNamedCases", testApplyStepsNamedCases},
	{"ApplyStepsRefundOnlyRises", testApplyStepsRefundOnlyRises},
	{"RaiseRefunds", testRaiseRefunds},
	{"RecordSettlements", testRecordSettlements},
	{"ApplyStepsRecordSettlements", testApplyStepsRecordSettlements},
	{"RecordCaptured", testRecordCaptured},
	{"Carry", testCarry},
	{"Items", testItems},
	{"InsertEvents", testInsertEvents},
	{"InsertEventsDirect", func(t *testing.T, e *env) { insertEvents(t, e, true) }},
	{"InsertEventsToDeliver", testInsertEventsToDeliver},
	{"MissingEvents", testMissingEvents},
	{"AddCounts", testAddCounts},
	{"TimesRoundTrip", testTimesRoundTrip},
	{"EmptyBatchesSendNothing", testEmptyBatches},
	{"RoundTrips", testRoundTrips},
}

// normalPayments puts store.Payment times in UTC.
func normalPayments(ps []store.Payment) []store.Payment {
	for i := range ps {
		ps[i].At, ps[i].SettledAt = utc(ps[i].At), utc(ps[i].SettledAt)
	}
	return ps
}

func testLoadPayments(t *testing.T, e *env) {
	t0 := e.t0()
	e.seed(payment{ProviderID: "pi_c", State: models.StateSettled, Amount: 1000, AmountRefunded: 250, At: ptr(t0),
		SettledAt: ptr(t0.Add(time.Hour)), PayoutID: ptr("po_1"), AmountCaptured: ptr(int64(900))})
	e.seed(payment{ProviderID: "pi_a", State: models.StateCreated, Amount: 10, Currency: "eur"})
	e.seed(payment{ProviderID: "pi_b", State: models.StateCaptured, Amount: 20, At: ptr(t0.Add(-time.Minute))})
	e.seed(payment{Provider: "gocardless", ProviderID: "pi_b", State: models.StateFailed, Amount: 30, At: ptr(t0)})

	var got, none, empty []store.Payment
	e.tx(e.st, func(tx store.Tx) {
		var err error
		got, err = tx.LoadPayments(e.ctx, "stripe", []string{"pi_c", "pi_missing", "pi_a", "pi_b"})
		require.NoError(t, err)
		none, err = tx.LoadPayments(e.ctx, "stripe", []string{"pi_missing"})
		require.NoError(t, err)
		empty, err = tx.LoadPayments(e.ctx, "stripe", nil)
		require.NoError(t, err)
	})
	require.Equal(t, []store.Payment{
		{ProviderID: "pi_a", State: models.StateCreated, Amount: 10, Currency: "eur"},
		{ProviderID: "pi_b", State: models.StateCaptured, At: ptr(t0.Add(-time.Minute)), Amount: 20, Currency: "gbp"},
		{ProviderID: "pi_c", State: models.StateSettled, At: ptr(t0), Amount: 1000, Currency: "gbp", AmountRefunded: 250,
			SettledAt: ptr(t0.Add(time.Hour)), PayoutID: "po_1", AmountCaptured: 900},
	}, normalPayments(got), "ordered by provider_id, missing ids skipped, other providers' rows not read")
	require.Empty(t, none)
	require.Empty(t, empty)
}

func testInsertPayments(t *testing.T, e *env) {
	t0 := e.t0()
	cet := time.FixedZone("CET", 3600)
	existing := e.seed(payment{ProviderID: "pi_exists", State: models.StateCaptured, Amount: 100, At: ptr(t0)})
	other := e.seed(payment{Provider: "gocardless", ProviderID: "pi_new1", State: models.StateFailed, Amount: 5, At: ptr(t0)})

	rows := []store.NewPayment{
		{ProviderID: "pi_new1", State: models.StateAuthorised, At: t0.In(cet), Amount: 500, Currency: "eur"},
		{ProviderID: "pi_exists", State: models.StateRefunded, At: t0.Add(time.Hour), Amount: 999, Currency: "usd", AmountRefunded: 999},
		{ProviderID: "pi_new2", State: models.StateSettled, At: t0.Add(time.Second), Amount: 400, Currency: "gbp", AmountRefunded: 50,
			SettledAt: ptr(t0.Add(2 * time.Hour).In(cet)), PayoutID: "po_1", AmountCaptured: ptr(int64(300))},
	}
	var created, again, loaded []store.Payment
	e.tx(e.st, func(tx store.Tx) {
		var err error
		created, err = tx.InsertPayments(e.ctx, "stripe", "acct_1", rows)
		require.NoError(t, err)
	})
	var ids []string
	for _, r := range created {
		ids = append(ids, r.ProviderID)
	}
	require.ElementsMatch(t, []string{"pi_new1", "pi_new2"}, ids, "the rows it created, not the existing row's")
	e.tx(e.st, func(tx store.Tx) {
		var err error
		loaded, err = tx.LoadPayments(e.ctx, "stripe", ids)
		require.NoError(t, err)
	})
	slices.SortFunc(created, func(a, b store.Payment) int { return strings.Compare(a.ProviderID, b.ProviderID) })
	require.Equal(t, loaded, created, "the created rows as LoadPayments reads them")
	want := []payment{existing, other,
		{Provider: "stripe", Account: "acct_1", ProviderID: "pi_new1", State: models.StateAuthorised, Amount: 500, Currency: "eur",
			At: ptr(t0), CreatedAt: e.now, UpdatedAt: e.now},
		{Provider: "stripe", Account: "acct_1", ProviderID: "pi_new2", State: models.StateSettled, Amount: 400, Currency: "gbp",
			AmountRefunded: 50, At: ptr(t0.Add(time.Second)), SettledAt: ptr(t0.Add(2 * time.Hour)), PayoutID: ptr("po_1"),
			AmountCaptured: ptr(int64(300)), CreatedAt: e.now, UpdatedAt: e.now},
	}
	e.requirePayments(want...)

	// Again: every row exists now and wins, untouched.
	later := e.now.Add(time.Hour)
	e.tx(e.withClock(later), func(tx store.Tx) {
		var err error
		again, err = tx.InsertPayments(e.ctx, "stripe", "acct_2", rows)
		require.NoError(t, err)
	})
	require.Empty(t, again)
	e.requirePayments(want...)
}

// stepCase is one (row, step) pair of the exhaustive guard table.
type stepCase struct {
	id    string
	from  models.State
	curAt *time.Time
	step  store.Step
}

func testApplyStepsEveryCase(t *testing.T, e *env) {
	t0 := e.t0()
	p := e.o.Precision
	ats := map[string]time.Time{"1h_earlier": t0.Add(-time.Hour), "tick_earlier": t0.Add(-p), "equal": t0, "tick_later": t0.Add(p), "1h_later": t0.Add(time.Hour)}
	curs := map[string]*time.Time{"null": nil, "t0": ptr(t0)}
	var cases []stepCase
	seeded := map[string]payment{}
	for _, from := range models.States {
		for curName, curAt := range curs {
			for _, to := range models.States {
				for atName, at := range ats {
					id := fmt.Sprintf("pi_%s_%s_%s_%s", from, curName, to, atName)
					seeded[id] = e.seed(payment{ProviderID: id, State: from, Amount: 1000, AmountRefunded: 100, At: curAt})
					cases = append(cases, stepCase{id: id, from: from, curAt: curAt, step: store.Step{ProviderID: id, To: to, At: at, Refund: 300}})
				}
			}
		}
	}
	sort.Slice(cases, func(i, j int) bool { return cases[i].id < cases[j].id })
	steps := make([]store.Step, len(cases))
	for i, c := range cases {
		steps[i] = c.step
	}
	var moved []string
	e.tx(e.st, func(tx store.Tx) {
		rows, err := tx.ApplySteps(e.ctx, "stripe", steps)
		require.NoError(t, err)
		moved = e.requireReturned(tx, rows)
	})
	got := e.byID("stripe")
	var wantMoved []string
	for _, c := range cases {
		want := seeded[c.id]
		if guard.Allowed(c.from, c.curAt, c.step.To, c.step.At) {
			wantMoved = append(wantMoved, c.id)
			want.State, want.At, want.UpdatedAt = c.step.To, utc(&c.step.At), e.now
			if c.step.To != models.StateCanceled { // never a refund on a canceled payment
				want.AmountRefunded = max(want.AmountRefunded, c.step.Refund)
			}
		}
		require.Equal(t, want, got[c.id], "%s: %s (at %v) → %s at %v", c.id, c.from, c.curAt, c.step.To, c.step.At)
	}
	slices.Sort(moved)
	require.Equal(t, wantMoved, moved, "the ids that moved")
	require.Len(t, got, len(cases))
}

func testApplyStepsNamedCases(t *testing.T, e *env) {
	t0 := e.t0()
	rows := map[string]payment{
		"settled_refund_earlier":     e.seed(payment{ProviderID: "settled_refund_earlier", State: models.StateSettled, Amount: 100, At: ptr(t0)}),
		"settled_chargeback_earlier": e.seed(payment{ProviderID: "settled_chargeback_earlier", State: models.StateSettled, Amount: 100, At: ptr(t0)}),
		"settled_failed_earlier":     e.seed(payment{ProviderID: "settled_failed_earlier", State: models.StateSettled, Amount: 100, At: ptr(t0)}),
		"captured_settled_equal":     e.seed(payment{ProviderID: "captured_settled_equal", State: models.StateCaptured, Amount: 100, At: ptr(t0)}),
		"captured_refund_earlier":    e.seed(payment{ProviderID: "captured_refund_earlier", State: models.StateCaptured, Amount: 100, At: ptr(t0)}),
		"refunded_captured":          e.seed(payment{ProviderID: "refunded_captured", State: models.StateRefunded, Amount: 100, At: ptr(t0)}),
		"canceled_captured":          e.seed(payment{ProviderID: "canceled_captured", State: models.StateCanceled, Amount: 100, At: ptr(t0)}),
		"null_time_captured":         e.seed(payment{ProviderID: "null_time_captured", State: models.StateAuthorised, Amount: 100}),
		"to_created":                 e.seed(payment{ProviderID: "to_created", State: models.StateCreated, Amount: 100}),
	}
	other := e.seed(payment{Provider: "gocardless", ProviderID: "captured_settled_equal", State: models.StateCaptured, Amount: 1, At: ptr(t0)})
	steps := []store.Step{
		{ProviderID: "settled_refund_earlier", To: models.StateRefunded, At: t0.Add(-time.Hour), Refund: 100},
		{ProviderID: "settled_chargeback_earlier", To: models.StateChargeback, At: t0.Add(-time.Hour)},
		{ProviderID: "settled_failed_earlier", To: models.StateFailed, At: t0.Add(-time.Hour)},
		{ProviderID: "captured_settled_equal", To: models.StateSettled, At: t0},
		{ProviderID: "captured_refund_earlier", To: models.StateRefunded, At: t0.Add(-time.Second), Refund: 100},
		{ProviderID: "refunded_captured", To: models.StateCaptured, At: t0.Add(time.Hour)},
		{ProviderID: "canceled_captured", To: models.StateCaptured, At: t0.Add(time.Hour)},
		{ProviderID: "null_time_captured", To: models.StateCaptured, At: t0},
		{ProviderID: "to_created", To: models.StateCreated, At: t0},
		{ProviderID: "missing", To: models.StateCaptured, At: t0},
	}
	var moved []string
	e.tx(e.st, func(tx store.Tx) {
		rows, err := tx.ApplySteps(e.ctx, "stripe", steps)
		require.NoError(t, err)
		moved = e.requireReturned(tx, rows)
	})
	require.ElementsMatch(t, []string{"settled_refund_earlier", "settled_chargeback_earlier", "captured_settled_equal", "null_time_captured"}, moved)
	move := func(id string, to models.State, at time.Time, refunded int64) payment {
		p := rows[id]
		p.State, p.At, p.UpdatedAt, p.AmountRefunded = to, ptr(at), e.now, refunded
		return p
	}
	e.requirePayments(other,
		// A refund or a lost dispute is never stale against a settlement, and
		// takes the row's time back to its own.
		move("settled_refund_earlier", models.StateRefunded, t0.Add(-time.Hour), 100),
		move("settled_chargeback_earlier", models.StateChargeback, t0.Add(-time.Hour), 0),
		// A late failure is not exempt: the payout's time guards it.
		rows["settled_failed_earlier"],
		move("captured_settled_equal", models.StateSettled, t0, 0),
		rows["captured_refund_earlier"],
		rows["refunded_captured"],
		rows["canceled_captured"],
		move("null_time_captured", models.StateCaptured, t0, 0),
		rows["to_created"],
	)
}

func testApplyStepsRefundOnlyRises(t *testing.T, e *env) {
	t0 := e.t0()
	lower := e.seed(payment{ProviderID: "pi_lower", State: models.StateCaptured, Amount: 1000, AmountRefunded: 400, At: ptr(t0)})
	higher := e.seed(payment{ProviderID: "pi_higher", State: models.StateCaptured, Amount: 1000, AmountRefunded: 400, At: ptr(t0)})
	cancel := e.seed(payment{ProviderID: "pi_cancel", State: models.StateAuthorised, Amount: 1000, At: ptr(t0)})
	e.tx(e.st, func(tx store.Tx) {
		moved, err := tx.ApplySteps(e.ctx, "stripe", []store.Step{
			{ProviderID: "pi_lower", To: models.StateRefunded, At: t0.Add(time.Hour), Refund: 100},
			{ProviderID: "pi_higher", To: models.StateRefunded, At: t0.Add(time.Hour), Refund: 1000},
			// A released authorisation is not a refund (DESIGN section 4).
			{ProviderID: "pi_cancel", To: models.StateCanceled, At: t0.Add(time.Hour), Refund: 1000},
		})
		require.NoError(t, err)
		require.ElementsMatch(t, []string{"pi_lower", "pi_higher", "pi_cancel"}, e.requireReturned(tx, moved))
	})
	for _, p := range []*payment{&lower, &higher, &cancel} {
		p.At, p.UpdatedAt = ptr(t0.Add(time.Hour)), e.now
	}
	lower.State, higher.State, cancel.State = models.StateRefunded, models.StateRefunded, models.StateCanceled
	higher.AmountRefunded = 1000
	e.requirePayments(lower, higher, cancel)
}

func testRaiseRefunds(t *testing.T, e *env) {
	t0 := e.t0()
	up := e.seed(payment{ProviderID: "pi_up", State: models.StateCaptured, Amount: 1000, AmountRefunded: 100, At: ptr(t0)})
	down := e.seed(payment{ProviderID: "pi_down", State: models.StateCaptured, Amount: 1000, AmountRefunded: 300, At: ptr(t0)})
	same := e.seed(payment{ProviderID: "pi_same", State: models.StateSettled, Amount: 1000, AmountRefunded: 200, At: ptr(t0)})
	canceled := e.seed(payment{ProviderID: "pi_canceled", State: models.StateCanceled, Amount: 1000, At: ptr(t0)})
	refunded := e.seed(payment{ProviderID: "pi_refunded", State: models.StateRefunded, Amount: 1000, AmountRefunded: 100, At: ptr(t0)})
	other := e.seed(payment{Provider: "gocardless", ProviderID: "pi_up", State: models.StateCaptured, Amount: 1000, At: ptr(t0)})
	e.tx(e.st, func(tx store.Tx) {
		raised, err := tx.RaiseRefunds(e.ctx, "stripe", []store.Refund{
			{ProviderID: "pi_up", Amount: 300}, {ProviderID: "pi_down", Amount: 100}, {ProviderID: "pi_same", Amount: 200},
			{ProviderID: "pi_canceled", Amount: 500}, {ProviderID: "pi_refunded", Amount: 1000}, {ProviderID: "pi_missing", Amount: 1},
		})
		require.NoError(t, err)
		require.ElementsMatch(t, []string{"pi_up", "pi_refunded"}, e.requireReturned(tx, raised), "the rows it raised")
	})
	up.AmountRefunded, up.UpdatedAt = 300, e.now
	refunded.AmountRefunded, refunded.UpdatedAt = 1000, e.now
	e.requirePayments(up, down, same, canceled, refunded, other)
}

func testRecordSettlements(t *testing.T, e *env) { settlementCases(t, e, false) }

// testApplyStepsRecordSettlements: a step's settlement (store.Step.Settled)
// is recorded with the move under RecordSettlements' guard, case for case,
// and not at all when the guard refuses the move.
func testApplyStepsRecordSettlements(t *testing.T, e *env) { settlementCases(t, e, true) }

// settlementCases runs RecordSettlements' guard cases through
// RecordSettlements or, viaSteps, through ApplySteps: each row, captured
// then, moves to settled and records its settlement with the move.
func settlementCases(t *testing.T, e *env, viaSteps bool) {
	t0 := e.t0()
	h := time.Hour
	at := ptr(t0)
	seed := func(id string, st models.State, settled *time.Time, payout *string) payment {
		if viaSteps && st != models.StateCanceled {
			st = models.StateCaptured
		}
		return e.seed(payment{ProviderID: id, State: st, Amount: 100, At: ptr(t0.Add(-48 * h)), SettledAt: settled, PayoutID: payout})
	}
	empty := seed("s_empty", models.StateCaptured, nil, nil)
	emptyNoPayout := seed("s_empty_nopayout", models.StateCaptured, nil, nil)
	same := seed("s_same", models.StateSettled, at, ptr("po_1"))
	later := seed("s_later", models.StateSettled, at, ptr("po_1"))
	equal := seed("s_equal", models.StateSettled, at, ptr("po_1"))
	earlier := seed("s_earlier", models.StateSettled, at, ptr("po_1"))
	lacks := seed("s_lacks", models.StateSettled, at, nil)
	lacksEarlier := seed("s_lacks_earlier", models.StateSettled, at, nil)
	unknown := seed("s_unknown_payout", models.StateSettled, at, ptr("po_1"))
	refunded := seed("s_refunded", models.StateRefunded, nil, nil)
	chargeback := seed("s_chargeback", models.StateChargeback, nil, nil)
	other := e.seed(payment{Provider: "gocardless", ProviderID: "s_empty", State: models.StateCaptured, Amount: 1, At: at})
	settles := []store.Settlement{
		{ProviderID: "s_empty", At: t0, PayoutID: "po_1"},
		{ProviderID: "s_empty_nopayout", At: t0},
		{ProviderID: "s_same", At: t0.Add(h), PayoutID: "po_1"},
		{ProviderID: "s_later", At: t0.Add(h), PayoutID: "po_2"},
		{ProviderID: "s_equal", At: t0, PayoutID: "po_2"},
		{ProviderID: "s_earlier", At: t0.Add(-e.o.Precision), PayoutID: "po_2"},
		{ProviderID: "s_lacks", At: t0.Add(h), PayoutID: "po_3"},
		{ProviderID: "s_lacks_earlier", At: t0.Add(-h), PayoutID: "po_3"},
		{ProviderID: "s_unknown_payout", At: t0.Add(h)},
		{ProviderID: "s_refunded", At: t0, PayoutID: "po_1"},
		{ProviderID: "s_chargeback", At: t0, PayoutID: "po_1"},
		{ProviderID: "s_missing", At: t0, PayoutID: "po_1"},
	}
	var refused payment
	if viaSteps {
		// A move the guard refuses records no settlement.
		refused = seed("s_refused", models.StateCanceled, nil, nil)
		settles = append(settles, store.Settlement{ProviderID: "s_refused", At: t0, PayoutID: "po_1"})
	}
	var filled []string
	e.tx(e.st, func(tx store.Tx) {
		var rows []store.Payment
		var err error
		if viaSteps {
			steps := make([]store.Step, len(settles))
			for i, s := range settles {
				steps[i] = store.Step{ProviderID: s.ProviderID, To: models.StateSettled, At: t0.Add(2 * h), Settled: &s}
			}
			rows, err = tx.ApplySteps(e.ctx, "stripe", steps)
		} else {
			rows, err = tx.RecordSettlements(e.ctx, "stripe", settles)
		}
		require.NoError(t, err)
		filled = e.requireReturned(tx, rows)
	})
	set := func(p *payment, at time.Time, payout *string) {
		p.SettledAt, p.PayoutID, p.UpdatedAt = ptr(at), payout, e.now
	}
	set(&empty, t0, ptr("po_1"))
	set(&emptyNoPayout, t0, nil)
	set(&later, t0.Add(h), ptr("po_2"))
	set(&equal, t0, ptr("po_2"))
	set(&lacks, t0.Add(h), ptr("po_3"))
	set(&refunded, t0, ptr("po_1"))
	set(&chargeback, t0, ptr("po_1"))
	all := []*payment{&empty, &emptyNoPayout, &same, &later, &equal, &earlier, &lacks, &lacksEarlier, &unknown, &refunded, &chargeback}
	if !viaSteps {
		require.ElementsMatch(t, []string{"s_empty", "s_empty_nopayout", "s_later", "s_equal", "s_lacks", "s_refunded", "s_chargeback"}, filled,
			"the rows it filled in")
		e.requirePayments(empty, emptyNoPayout, same, later, equal, earlier, lacks, lacksEarlier, unknown, refunded, chargeback, other)
		return
	}
	moved := make([]string, len(all))
	for i, p := range all {
		p.State, p.At, p.UpdatedAt, moved[i] = models.StateSettled, ptr(t0.Add(2*h)), e.now, p.ProviderID
	}
	require.ElementsMatch(t, moved, filled, "the rows it moved (s_refused: canceled is terminal)")
	e.requirePayments(empty, emptyNoPayout, same, later, equal, earlier, lacks, lacksEarlier, unknown, refunded, chargeback, refused, other)
}

func testRecordCaptured(t *testing.T, e *env) {
	t0 := e.t0()
	fresh := e.seed(payment{ProviderID: "c_new", State: models.StateCaptured, Amount: 1000, At: ptr(t0)})
	same := e.seed(payment{ProviderID: "c_same", State: models.StateCaptured, Amount: 1000, At: ptr(t0), AmountCaptured: ptr(int64(400))})
	diff := e.seed(payment{ProviderID: "c_diff", State: models.StateRefunded, Amount: 1000, At: ptr(t0), AmountCaptured: ptr(int64(400))})
	other := e.seed(payment{Provider: "gocardless", ProviderID: "c_new", State: models.StateCaptured, Amount: 1000, At: ptr(t0)})
	e.tx(e.st, func(tx store.Tx) {
		captured, err := tx.RecordCaptured(e.ctx, "stripe", []store.Capture{
			{ProviderID: "c_new", Amount: 400}, {ProviderID: "c_same", Amount: 400}, {ProviderID: "c_diff", Amount: 300}, {ProviderID: "c_missing", Amount: 1},
		})
		require.NoError(t, err)
		require.ElementsMatch(t, []string{"c_new", "c_diff"}, e.requireReturned(tx, captured), "the rows it changed")
	})
	fresh.AmountCaptured, fresh.UpdatedAt = ptr(int64(400)), e.now
	diff.AmountCaptured, diff.UpdatedAt = ptr(int64(300)), e.now
	e.requirePayments(fresh, same, diff, other)
}

func testCarry(t *testing.T, e *env) {
	r1, r2 := e.run(models.Run{}), e.run(models.Run{})
	load := func(runID int64, ids ...string) []carry {
		var got []store.Carry
		e.tx(e.st, func(tx store.Tx) {
			var err error
			got, err = tx.LoadCarry(e.ctx, runID, ids)
			require.NoError(t, err)
		})
		sort.Slice(got, func(i, j int) bool { return got[i].ProviderID < got[j].ProviderID })
		out := make([]carry, len(got))
		for i, c := range got {
			out[i] = carry{RunID: runID, ProviderID: c.ProviderID, State: string(c.State)}
		}
		return out
	}
	requireCarry := func(want, got []carry) {
		t.Helper()
		require.Len(t, got, len(want), "%+v", got)
		for i := range want {
			require.Equal(t, want[i].ProviderID, got[i].ProviderID)
			requireJSON(t, want[i].State, got[i].State)
		}
	}
	e.tx(e.st, func(tx store.Tx) {
		require.NoError(t, tx.SaveCarry(e.ctx, r1.ID, []store.Carry{
			{ProviderID: "pi_a", State: json.RawMessage(`{"x": 1, "s": "é\"\\"}`)},
			{ProviderID: "pi_b", State: json.RawMessage(`{"y": [1, 2, {"z": null}]}`)},
		}, nil))
		require.NoError(t, tx.SaveCarry(e.ctx, r2.ID, []store.Carry{{ProviderID: "pi_a", State: json.RawMessage(`{"z": true}`)}}, nil))
	})
	e.requireCarries(
		carry{r1.ID, "pi_a", `{"x": 1, "s": "é\"\\"}`}, carry{r1.ID, "pi_b", `{"y": [1, 2, {"z": null}]}`},
		carry{r2.ID, "pi_a", `{"z": true}`})
	requireCarry([]carry{{r1.ID, "pi_a", `{"x": 1, "s": "é\"\\"}`}, {r1.ID, "pi_b", `{"y": [1, 2, {"z": null}]}`}},
		load(r1.ID, "pi_b", "pi_missing", "pi_a"))
	requireCarry([]carry{{r2.ID, "pi_a", `{"z": true}`}}, load(r2.ID, "pi_a", "pi_b"))

	// Upsert pi_a, drop pi_b: run r2's rows are not touched.
	e.tx(e.st, func(tx store.Tx) {
		require.NoError(t, tx.SaveCarry(e.ctx, r1.ID, []store.Carry{{ProviderID: "pi_a", State: json.RawMessage(`{"x": 2}`)},
			{ProviderID: "pi_c", State: json.RawMessage(`{}`)}}, []string{"pi_b", "pi_missing"}))
	})
	e.requireCarries(carry{r1.ID, "pi_a", `{"x": 2}`}, carry{r1.ID, "pi_c", `{}`}, carry{r2.ID, "pi_a", `{"z": true}`})

	// Only a drop.
	e.tx(e.st, func(tx store.Tx) { require.NoError(t, tx.SaveCarry(e.ctx, r1.ID, nil, []string{"pi_a"})) })
	e.requireCarries(carry{r1.ID, "pi_c", `{}`}, carry{r2.ID, "pi_a", `{"z": true}`})
	require.Empty(t, load(r1.ID))
}

func testItems(t *testing.T, e *env) {
	r1, r2 := e.run(models.Run{}), e.run(models.Run{})
	i1 := store.Item{ProviderID: "pi_1", Kind: models.KindConflict, Action: models.ActionRefused, LocalState: ptr("captured"),
		ProviderState: ptr("refunded"), Detail: map[string]any{"amount": 5, "note": "é\"", "nested": map[string]any{"a": []any{1, "b"}}}}
	i2 := store.Item{ProviderID: "pi_2", Kind: models.KindMismatch, Action: models.ActionReported}
	i3 := store.Item{ProviderID: "pi_1", Kind: models.KindBehind, Action: models.ActionDelivered, LocalState: ptr("created"), ProviderState: ptr("captured")}
	e.tx(e.st, func(tx store.Tx) {
		require.NoError(t, tx.InsertItems(e.ctx, r1.ID, "stripe", []store.Item{i1, i2, i3}))
		require.NoError(t, tx.InsertItems(e.ctx, r2.ID, "stripe", []store.Item{i1}))
		require.NoError(t, tx.InsertItems(e.ctx, r1.ID, "gocardless", []store.Item{i1}))
	})
	detail := `{"amount": 5, "note": "é\"", "nested": {"a": [1, "b"]}}`
	row := func(runID int64, provider string, it store.Item, detail string) item {
		return item{RunID: runID, Provider: provider, ProviderID: it.ProviderID, Kind: it.Kind, Action: it.Action,
			LocalState: it.LocalState, ProviderState: it.ProviderState, Detail: detail, CreatedAt: e.now}
	}
	e.requireItems(
		row(r1.ID, "gocardless", i1, detail),
		row(r1.ID, "stripe", i3, `{}`), row(r1.ID, "stripe", i1, detail), row(r1.ID, "stripe", i2, `{}`),
		row(r2.ID, "stripe", i1, detail))

	// Deleting pi_1's items of run r1 and stripe leaves the other runs' and
	// providers' alone.
	e.tx(e.st, func(tx store.Tx) {
		require.NoError(t, tx.DeleteItems(e.ctx, r1.ID, "stripe", []string{"pi_1", "pi_missing"}))
	})
	e.requireItems(row(r1.ID, "gocardless", i1, detail), row(r1.ID, "stripe", i2, `{}`), row(r2.ID, "stripe", i1, detail))

	// Rewriting pi_2's item of run r1 and stripe in place keeps its id and
	// leaves the other runs' and providers' alone; a payment without an
	// item gets none.
	id := func() (n int64) {
		require.NoError(t, e.db.Raw(`SELECT id FROM drift_items WHERE run_id = ? AND provider = 'stripe' AND provider_id = 'pi_2'`, r1.ID).Scan(&n).Error)
		return n
	}
	before := id()
	i4 := store.Item{ProviderID: "pi_2", Kind: models.KindBehind, Action: models.ActionRepaired, LocalState: ptr("captured"),
		ProviderState: ptr("settled"), Detail: map[string]any{"amount": 7, "note": "é\""}}
	e.tx(e.st, func(tx store.Tx) {
		require.NoError(t, tx.ReplaceItems(e.ctx, r1.ID, "stripe", []store.Item{i4,
			{ProviderID: "pi_missing", Kind: models.KindBehind, Action: models.ActionRepaired}}))
	})
	e.requireItems(row(r1.ID, "gocardless", i1, detail), row(r1.ID, "stripe", i4, `{"amount": 7, "note": "é\""}`), row(r2.ID, "stripe", i1, detail))
	require.Equal(t, before, id(), "rewritten in place")
	i5 := store.Item{ProviderID: "pi_2", Kind: models.KindMismatch, Action: models.ActionReported}
	e.tx(e.st, func(tx store.Tx) { require.NoError(t, tx.ReplaceItems(e.ctx, r1.ID, "stripe", []store.Item{i5})) })
	e.requireItems(row(r1.ID, "gocardless", i1, detail), row(r1.ID, "stripe", i5, `{}`), row(r2.ID, "stripe", i1, detail))
}

func testInsertEvents(t *testing.T, e *env) { insertEvents(t, e, false) }

// insertEvents is InsertEvents' case, or with direct InsertEventsDirect's:
// the same rows whether or not the store asks first which are recorded.
func insertEvents(t *testing.T, e *env, direct bool) {
	insert := func(tx store.Tx) func(context.Context, int64, string, []store.Event) (int64, error) {
		if direct {
			return tx.InsertEventsDirect
		}
		return tx.InsertEvents
	}
	r1, r2 := e.run(models.Run{}), e.run(models.Run{})
	t0 := e.t0()
	// The live worker received evt_live and processed it.
	live := models.WebhookEvent{Source: "stripe", EventID: "evt_live", EventType: "charge.refunded", Payload: models.JSON(`{"live": true}`), ProcessedAt: ptr(t0)}
	require.NoError(t, e.db.Create(&live).Error)
	payload := `{"id": "evt_1", "data": {"object": {"amount": 1000, "metadata": {"k": "é\"\\n"}}}, "list": [1, 2.5, null]}`
	var n1, n2, n3 int64
	e.tx(e.st, func(tx store.Tx) {
		var err error
		n1, err = insert(tx)(e.ctx, r1.ID, "stripe", []store.Event{
			{EventID: "evt_1", EventType: "payment_intent.succeeded", Payload: json.RawMessage(payload)},
			{EventID: "evt_live", EventType: "charge.refunded", Payload: json.RawMessage(`{"replayed": true}`)},
			{EventID: "recon:pi_1:captured:1773480413", EventType: "recon.captured", Payload: json.RawMessage(`{}`)},
		})
		require.NoError(t, err)
	})
	later := e.now.Add(time.Hour)
	e.tx(e.withClock(later), func(tx store.Tx) {
		var err error
		n2, err = insert(tx)(e.ctx, r2.ID, "stripe", []store.Event{
			{EventID: "evt_1", EventType: "payment_intent.succeeded", Payload: json.RawMessage(`{"again": 1}`)},
			{EventID: "evt_2", EventType: "payout.paid", Payload: json.RawMessage(`{"n": 2}`)},
		})
		require.NoError(t, err)
		n3, err = insert(tx)(e.ctx, r2.ID, "gocardless", []store.Event{{EventID: "evt_1", EventType: "payments", Payload: json.RawMessage(`{"gc": 1}`)}})
		require.NoError(t, err)
	})
	require.Equal(t, int64(2), n1, "evt_live was there")
	require.Equal(t, int64(1), n2, "evt_1 was there")
	require.Equal(t, int64(1), n3, "(source, event_id) is the key")
	e.requireEvents(
		event{Source: "gocardless", EventID: "evt_1", EventType: "payments", Payload: `{"gc": 1}`, ProcessedAt: &later, Synthetic: true, RunID: &r2.ID},
		event{Source: "stripe", EventID: "evt_1", EventType: "payment_intent.succeeded", Payload: payload, ProcessedAt: &e.now, Synthetic: true, RunID: &r1.ID},
		event{Source: "stripe", EventID: "evt_2", EventType: "payout.paid", Payload: `{"n": 2}`, ProcessedAt: &later, Synthetic: true, RunID: &r2.ID},
		event{Source: "stripe", EventID: "evt_live", EventType: "charge.refunded", Payload: `{"live": true}`, ProcessedAt: &t0},
		event{Source: "stripe", EventID: "recon:pi_1:captured:1773480413", EventType: "recon.captured", Payload: `{}`, ProcessedAt: &e.now, Synthetic: true, RunID: &r1.ID},
	)
}

// Events a repair: deliver run hands to the application's worker are
// recorded unprocessed (processed_at NULL, still synthetic and the run's),
// beside processed ones in the same statement; an event recorded already,
// processed or not, is left as it is.
func testInsertEventsToDeliver(t *testing.T, e *env) {
	r1, r2 := e.run(models.Run{}), e.run(models.Run{})
	waiting := models.WebhookEvent{Source: "stripe", EventID: "evt_waiting", EventType: "charge.refunded", Payload: models.JSON(`{"w": 1}`)}
	require.NoError(t, e.db.Create(&waiting).Error)
	var n1, n2 int64
	e.tx(e.st, func(tx store.Tx) {
		var err error
		n1, err = tx.InsertEvents(e.ctx, r1.ID, "stripe", []store.Event{
			{EventID: "evt_1", EventType: "payment_intent.succeeded", Payload: json.RawMessage(`{"id": "evt_1"}`), Deliver: true},
			{EventID: "evt_2", EventType: "payout.paid", Payload: json.RawMessage(`{"id": "evt_2"}`)},
			{EventID: "evt_waiting", EventType: "charge.refunded", Payload: json.RawMessage(`{"again": 1}`), Deliver: true},
			{EventID: "recon:pi_1:canceled:1773480413", EventType: "reconciler.payment_intent.canceled", Payload: json.RawMessage(`{"object": "payment_intent"}`), Deliver: true},
		})
		require.NoError(t, err)
	})
	e.tx(e.st, func(tx store.Tx) {
		var err error
		n2, err = tx.InsertEvents(e.ctx, r2.ID, "stripe", []store.Event{
			{EventID: "evt_1", EventType: "payment_intent.succeeded", Payload: json.RawMessage(`{"id": "evt_1"}`), Deliver: true},
		})
		require.NoError(t, err)
	})
	require.Equal(t, int64(3), n1, "evt_waiting was there")
	require.Equal(t, int64(0), n2, "a rerun delivers nothing again")
	e.requireEvents(
		event{Source: "stripe", EventID: "evt_1", EventType: "payment_intent.succeeded", Payload: `{"id": "evt_1"}`, Synthetic: true, RunID: &r1.ID},
		event{Source: "stripe", EventID: "evt_2", EventType: "payout.paid", Payload: `{"id": "evt_2"}`, ProcessedAt: &e.now, Synthetic: true, RunID: &r1.ID},
		event{Source: "stripe", EventID: "evt_waiting", EventType: "charge.refunded", Payload: `{"w": 1}`},
		event{Source: "stripe", EventID: "recon:pi_1:canceled:1773480413", EventType: "reconciler.payment_intent.canceled", Payload: `{"object": "payment_intent"}`, Synthetic: true, RunID: &r1.ID},
	)
}

func testMissingEvents(t *testing.T, e *env) {
	for _, ev := range []models.WebhookEvent{
		{Source: "stripe", EventID: "evt_a", EventType: "x", Payload: models.JSON(`{}`)},
		{Source: "stripe", EventID: "evt_b", EventType: "x", Payload: models.JSON(`{}`), Synthetic: true},
		{Source: "gocardless", EventID: "evt_c", EventType: "x", Payload: models.JSON(`{}`)},
	} {
		require.NoError(t, e.db.Create(&ev).Error)
	}
	e.tx(e.st, func(tx store.Tx) {
		for _, c := range []struct {
			source string
			ids    []string
			want   int64
		}{
			{"stripe", []string{"evt_a", "evt_b"}, 0},
			{"stripe", []string{"evt_a", "evt_c", "evt_x", "evt_b"}, 2},
			{"gocardless", []string{"evt_a", "evt_c"}, 1},
			{"stripe", nil, 0},
		} {
			n, err := tx.MissingEvents(e.ctx, c.source, c.ids)
			require.NoError(t, err)
			require.Equal(t, c.want, n, "%s %v", c.source, c.ids)
		}
	})
	require.Len(t, e.events(), 3, "it writes nothing")
}

func testAddCounts(t *testing.T, e *env) {
	t0 := e.t0()
	r, other := e.run(models.Run{}), e.run(models.Run{})
	add := func(p store.Progress) {
		e.tx(e.st, func(tx store.Tx) { require.NoError(t, tx.AddCounts(e.ctx, r.ID, p)) })
	}
	add(store.Progress{Counts: store.Counts{Examined: 10, InSync: 7, Repaired: 2, Refused: 1, Reported: 3, Synthetic: 4, Events: 50, Settlements: 5, Delivered: 8},
		APIRequests: 6, Cursor: "evt_1", CursorAt: t0})
	want := e.getRun(r.ID)
	require.Equal(t, models.Run{ID: r.ID, Provider: r.Provider, WindowStart: r.WindowStart.UTC(), WindowEnd: r.WindowEnd.UTC(), StartedAt: r.StartedAt.UTC(),
		Status: r.Status, Trigger: r.Trigger, Notes: models.JSON(`{}`),
		Examined: 10, InSync: 7, Repaired: 2, Refused: 1, Reported: 3, SyntheticEvents: 4, EventsRead: 50, SettlementsRecorded: 5, Delivered: 8,
		APIRequests: 6, ProgressCursor: ptr("evt_1"), ProgressAt: ptr(t0)}, want)

	// Examined and InSync are totals and replace; the others add; an empty
	// cursor keeps the previous one.
	add(store.Progress{Counts: store.Counts{Examined: 15, InSync: 9, Repaired: 1, Reported: 1, Synthetic: 2, Events: 20, Settlements: 1, Delivered: 2}, APIRequests: 9})
	want.Examined, want.InSync, want.Repaired, want.Reported, want.SyntheticEvents, want.EventsRead, want.SettlementsRecorded, want.Delivered, want.APIRequests =
		15, 9, 3, 4, 6, 70, 6, 10, 9
	require.Equal(t, want, e.getRun(r.ID))

	add(store.Progress{APIRequests: 9, Cursor: "evt_2", CursorAt: t0.Add(time.Hour)})
	want.Examined, want.InSync = 0, 0
	want.ProgressCursor, want.ProgressAt = ptr("evt_2"), ptr(t0.Add(time.Hour))
	require.Equal(t, want, e.getRun(r.ID))
	require.Equal(t, normalRun(other), e.getRun(other.ID), "another run is not touched")
}

// testTimesRoundTrip writes provider times, at the dialect's precision and
// in other zones than UTC, through every statement that stores one, and
// requires them back exactly.
func testTimesRoundTrip(t *testing.T, e *env) {
	p := e.o.Precision
	zones := []*time.Location{time.UTC, time.FixedZone("UTC+5:45", 5*3600+45*60), time.FixedZone("UTC-9:30", -(9*3600 + 30*60))}
	var times []time.Time
	for i, z := range zones {
		base := e.t0().Add(time.Duration(i) * 37 * time.Hour)
		times = append(times, base.In(z), base.Add(p).In(z), base.Add(999*p).In(z), base.Truncate(time.Second).In(z))
	}
	var rows []store.NewPayment
	for i, at := range times {
		rows = append(rows, store.NewPayment{ProviderID: fmt.Sprintf("pi_%02d", i), State: models.StateCaptured, At: at, Amount: 1, Currency: "gbp",
			SettledAt: ptr(at.Add(time.Hour))})
	}
	var loaded []store.Payment
	e.tx(e.st, func(tx store.Tx) {
		_, err := tx.InsertPayments(e.ctx, "stripe", "", rows)
		require.NoError(t, err)
		ids := make([]string, len(rows))
		for i, r := range rows {
			ids[i] = r.ProviderID
		}
		loaded, err = tx.LoadPayments(e.ctx, "stripe", ids)
		require.NoError(t, err)
	})
	require.Len(t, loaded, len(rows))
	for i, l := range loaded {
		require.True(t, l.At.Equal(times[i]), "inserted %s, read %s", times[i].Format(time.RFC3339Nano), l.At.Format(time.RFC3339Nano))
		require.True(t, l.SettledAt.Equal(times[i].Add(time.Hour)), "settled %s, read %s", times[i].Add(time.Hour), l.SettledAt)
	}

	// Through the guard and the settlement statement.
	var steps []store.Step
	var settles []store.Settlement
	for i, at := range times {
		id := fmt.Sprintf("pi_%02d", i)
		steps = append(steps, store.Step{ProviderID: id, To: models.StateSettled, At: at.Add(2 * p)})
		settles = append(settles, store.Settlement{ProviderID: id, At: at.Add(time.Hour + 3*p), PayoutID: "po_" + id})
	}
	e.tx(e.st, func(tx store.Tx) {
		moved, err := tx.ApplySteps(e.ctx, "stripe", steps)
		require.NoError(t, err)
		require.Len(t, moved, len(steps))
		settled, err := tx.RecordSettlements(e.ctx, "stripe", settles)
		require.NoError(t, err)
		require.Len(t, settled, len(settles))
	})
	got := e.byID("stripe")
	for i, at := range times {
		r := got[fmt.Sprintf("pi_%02d", i)]
		require.True(t, r.At.Equal(at.Add(2*p)), "step at %s, read %s", at.Add(2*p), r.At)
		require.True(t, r.SettledAt.Equal(at.Add(time.Hour+3*p)), "settled at %s, read %s", at.Add(time.Hour+3*p), r.SettledAt)
	}

	// The run record.
	for _, at := range times {
		r := models.Run{Provider: "stripe", WindowStart: at, WindowEnd: at.Add(p), StartedAt: at.Add(2 * p), FinishedAt: ptr(at.Add(3 * p)),
			Status: models.RunSucceeded, Trigger: models.TriggerManual, Notes: models.JSON(`{}`)}
		require.NoError(t, e.st.CreateRun(e.ctx, &r))
		e.tx(e.st, func(tx store.Tx) {
			require.NoError(t, tx.AddCounts(e.ctx, r.ID, store.Progress{Cursor: "evt", CursorAt: at.Add(4 * p)}))
		})
		g, err := e.st.GetRun(e.ctx, r.ID)
		require.NoError(t, err)
		for _, c := range []struct {
			name      string
			want, got time.Time
		}{
			{"window_start", at, g.WindowStart}, {"window_end", at.Add(p), g.WindowEnd}, {"started_at", at.Add(2 * p), g.StartedAt},
			{"finished_at", at.Add(3 * p), *g.FinishedAt}, {"progress_at", at.Add(4 * p), *g.ProgressAt},
		} {
			require.True(t, c.want.Equal(c.got), "%s: wrote %s, read %s", c.name, c.want.Format(time.RFC3339Nano), c.got.Format(time.RFC3339Nano))
		}
	}
}

// testEmptyBatches: an empty batch is no statement at all.
func testEmptyBatches(t *testing.T, e *env) {
	r := e.run(models.Run{})
	before := e.st.RoundTrips()
	e.tx(e.st, func(tx store.Tx) {
		ps, err := tx.LoadPayments(e.ctx, "stripe", nil)
		require.NoError(t, err)
		require.Empty(t, ps)
		created, err := tx.InsertPayments(e.ctx, "stripe", "", nil)
		require.NoError(t, err)
		require.Empty(t, created)
		moved, err := tx.ApplySteps(e.ctx, "stripe", nil)
		require.NoError(t, err)
		require.Empty(t, moved)
		raised, err := tx.RaiseRefunds(e.ctx, "stripe", nil)
		require.NoError(t, err)
		require.Empty(t, raised)
		settled, err := tx.RecordSettlements(e.ctx, "stripe", nil)
		require.NoError(t, err)
		require.Empty(t, settled)
		captured, err := tx.RecordCaptured(e.ctx, "stripe", nil)
		require.NoError(t, err)
		require.Empty(t, captured)
		cs, err := tx.LoadCarry(e.ctx, r.ID, nil)
		require.NoError(t, err)
		require.Empty(t, cs)
		require.NoError(t, tx.SaveCarry(e.ctx, r.ID, nil, nil))
		require.NoError(t, tx.DeleteItems(e.ctx, r.ID, "stripe", nil))
		require.NoError(t, tx.InsertItems(e.ctx, r.ID, "stripe", nil))
		n, err := tx.InsertEvents(e.ctx, r.ID, "stripe", nil)
		require.NoError(t, err)
		require.Zero(t, n)
		n, err = tx.MissingEvents(e.ctx, "stripe", nil)
		require.NoError(t, err)
		require.Zero(t, n)
	})
	require.Equal(t, before+2, e.st.RoundTrips(), "BEGIN and COMMIT only")
}
