package reconcile

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/reconciler/reconciler/models"
)

var t0 = time.Date(2026, 11, 20, 12, 0, 0, 0, time.UTC)

func ts(sec int) time.Time { return t0.Add(time.Duration(sec) * time.Second) }
func tp(sec int) *time.Time {
	t := ts(sec)
	return &t
}

func ch(state models.State, sec int) Change {
	return Change{ProviderID: "pi_1", State: state, At: ts(sec), Snapshot: true, Amount: 1000, Currency: "gbp", EventID: "evt_" + string(state)}
}

func kinds(items []Item) []string {
	var out []string
	for _, it := range items {
		out = append(out, it.Kind+"/"+it.Action)
	}
	return out
}

func TestDecideAndClassify(t *testing.T) {
	row := func(s models.State, sec int) Local {
		return Local{Exists: true, State: s, At: tp(sec), Amount: 1000, Currency: "gbp"}
	}
	settled := func(sec int) Change {
		c := ch(models.StateSettled, sec)
		c.Snapshot = false
		return c
	}
	refunded := func(sec int, amt int64) Change {
		c := ch(models.StateRefunded, sec)
		c.Snapshot, c.AmountRefunded = false, amt
		return c
	}
	cases := []struct {
		name      string
		local     Local
		changes   []Change
		wantState models.State
		wantItems []string
		wantRef   int64
	}{
		{"missing local row is created at the provider's latest state", Local{}, []Change{ch(models.StateCreated, 0), ch(models.StateCaptured, 5)},
			models.StateCaptured, []string{"missing_local/repaired"}, 0},
		{"behind: forward transition applied", row(models.StateAuthorised, 0), []Change{ch(models.StateCaptured, 5)},
			models.StateCaptured, []string{"behind/repaired"}, 0},
		{"in sync: no item", row(models.StateCaptured, 5), []Change{ch(models.StateCaptured, 5)},
			models.StateCaptured, nil, 0},
		{"shuffled input applies oldest first", row(models.StateCreated, 0), []Change{settled(9), ch(models.StateCaptured, 5), ch(models.StateAuthorised, 2)},
			models.StateSettled, []string{"behind/repaired"}, 0},
		{"refund then payout ends refunded, not drift", row(models.StateCaptured, 0), []Change{settled(20), refunded(10, 1000)},
			models.StateRefunded, []string{"behind/repaired"}, 1000},
		{"payout of a payment refunded before the window is not drift", row(models.StateRefunded, -10), []Change{settled(20)},
			models.StateRefunded, nil, 0},
		{"replayed old event is not drift", row(models.StateSettled, -5), []Change{ch(models.StateCaptured, -10)},
			models.StateSettled, nil, 0},
		{"a refund before the payout still refunds (the guard's one exception)", row(models.StateSettled, 30), []Change{refunded(10, 1000)},
			models.StateRefunded, []string{"behind/repaired"}, 1000},
		{"stale: the guard refuses an older fact", row(models.StateSettled, 30), []Change{ch(models.StateFailed, 10)},
			models.StateSettled, []string{"stale/refused"}, 0},
		{"conflict: provider state cannot follow ours", row(models.StateCanceled, 3), []Change{ch(models.StateCaptured, 5)},
			models.StateCanceled, []string{"conflict/refused"}, 0},
		{"conflict: ours ahead of a later snapshot", row(models.StateCaptured, 3), []Change{ch(models.StateAuthorised, 5)},
			models.StateCaptured, []string{"conflict/refused"}, 0},
		{"same second resolves by rank", row(models.StateAuthorised, 5), []Change{ch(models.StateCaptured, 5)},
			models.StateCaptured, []string{"behind/repaired"}, 0},
		{"unknown status is reported, never guessed", row(models.StateAuthorised, -1), []Change{{ProviderID: "pi_1", At: ts(5), Unknown: true, RawStatus: "requires_reauthorization"}},
			models.StateAuthorised, []string{"unknown_status/reported"}, 0},
		{"mismatch is reported and the state still moves", Local{Exists: true, State: models.StateAuthorised, At: tp(0), Amount: 999, Currency: "gbp"}, []Change{ch(models.StateCaptured, 5)},
			models.StateCaptured, []string{"mismatch/reported", "behind/repaired"}, 0},
		{"won dispute after a chargeback is a conflict", row(models.StateChargeback, 5), []Change{{ProviderID: "pi_1", At: ts(9), Revert: "won.", RevertOnlyFrom: []models.State{models.StateChargeback}, RawStatus: "dispute_won"}},
			models.StateChargeback, []string{"conflict/refused"}, 0},
		{"won dispute on a captured payment is nothing", row(models.StateCaptured, -5), []Change{{ProviderID: "pi_1", At: ts(9), Revert: "won.", RevertOnlyFrom: []models.State{models.StateChargeback}}},
			models.StateCaptured, nil, 0},
		{"partial refund raises amount_refunded only", row(models.StateSettled, -5), []Change{{ProviderID: "pi_1", At: ts(9), AmountRefunded: 300}},
			models.StateSettled, []string{"behind/repaired"}, 300},
		{"canceled payments keep amount_refunded 0", Local{}, []Change{ch(models.StateAuthorised, 1), ch(models.StateCanceled, 5)},
			models.StateCanceled, []string{"missing_local/repaired"}, 0},
		{"chargeback after refund", row(models.StateRefunded, 5), []Change{ch(models.StateChargeback, 9)},
			models.StateChargeback, []string{"behind/repaired"}, 0},
		{"a Direct Debit failing after its payout fails (late_failure_settled)", row(models.StateSettled, 5), []Change{settled(5), ch(models.StateFailed, 9)},
			models.StateFailed, []string{"behind/repaired"}, 0},
		{"a late failure already recorded is in sync: no item", row(models.StateFailed, 9), []Change{settled(5), ch(models.StateFailed, 9)},
			models.StateFailed, nil, 0},
		{"a failure that was retried and collected is not final", row(models.StateAuthorised, 1),
			[]Change{ch(models.StateAuthorised, 1), ch(models.StateFailed, 2), ch(models.StateAuthorised, 3), ch(models.StateCaptured, 4)},
			models.StateCaptured, []string{"behind/repaired"}, 0},
		{"local refunded, provider's current charge not refunded: conflict", row(models.StateRefunded, 20),
			[]Change{ch(models.StateCaptured, 5), {ProviderID: "pi_1", State: models.StateSettled, At: ts(20), View: true, ViewCurrent: true, PayoutID: "po_1"}},
			models.StateRefunded, []string{"conflict/refused"}, 0},
		{"local refunded inside the window, the log never shows a refund: conflict", row(models.StateRefunded, 8), []Change{ch(models.StateCaptured, 5)},
			models.StateRefunded, []string{"conflict/refused"}, 0},
		{"local refunded at the same second as the capture, no refund in the log: conflict", row(models.StateRefunded, 5), []Change{ch(models.StateCaptured, 5)},
			models.StateRefunded, []string{"conflict/refused"}, 0},
		{"local refunded after the window's end: not ours to judge", row(models.StateRefunded, 2000), []Change{ch(models.StateCaptured, 5)},
			models.StateRefunded, nil, 0},
		{"local refunded before the window, the charge at a later event says so too", row(models.StateRefunded, -5),
			[]Change{{ProviderID: "pi_1", At: ts(9), View: true, Refunded: true, AmountRefunded: 0}},
			models.StateRefunded, nil, 0},
		{"a current view that lags a refund the log shows is not a contradiction", row(models.StateRefunded, 10),
			[]Change{refunded(10, 1000), {ProviderID: "pi_1", State: models.StateSettled, At: ts(5), View: true, ViewCurrent: true, PayoutID: "po_1"}},
			models.StateRefunded, []string{"behind/repaired"}, 1000}, // the amount raised, no conflict
		{"a failed refund the row counted is a conflict", Local{Exists: true, State: models.StateCaptured, At: tp(-5), Amount: 1000, Currency: "gbp", AmountRefunded: 300},
			[]Change{{ProviderID: "pi_1", At: ts(9), Revert: "failed.", RevertIfRefunded: 300, RawStatus: "refund_failed"}},
			models.StateCaptured, []string{"conflict/refused"}, 300},
		{"a failed refund the row never counted is nothing", row(models.StateCaptured, -5),
			[]Change{{ProviderID: "pi_1", At: ts(9), Revert: "failed.", RevertIfRefunded: 300, RawStatus: "refund_failed"}},
			models.StateCaptured, nil, 0},
		{"a refund shown before it failed, with no creation time, is counted and a conflict", row(models.StateCaptured, -5),
			[]Change{{ProviderID: "pi_1", At: ts(5), AmountRefunded: 300}, {ProviderID: "pi_1", At: ts(9), Revert: "failed.", RevertIfRefunded: 300, RawStatus: "refund_failed"}},
			models.StateCaptured, []string{"conflict/refused", "behind/repaired"}, 300},
		{"a refund shown between its creation and its failure is not counted", row(models.StateCaptured, -5),
			[]Change{{ProviderID: "pi_1", At: ts(5), AmountRefunded: 300, View: true},
				{ProviderID: "pi_1", At: ts(9), Revert: "failed.", RevertIfRefunded: 300, RefundSince: ts(5), RawStatus: "refund_failed"}},
			models.StateCaptured, nil, 0},
		{"a full refund that failed is no refund; a later partial one counts", row(models.StateCaptured, -5),
			[]Change{{ProviderID: "pi_1", State: models.StateRefunded, At: ts(5), AmountRefunded: 1000, View: true, Refunded: true},
				{ProviderID: "pi_1", At: ts(9), Revert: "failed.", RevertIfRefunded: 1000, RefundSince: ts(4), RawStatus: "refund_failed"},
				{ProviderID: "pi_1", At: ts(12), AmountRefunded: 200, View: true}},
			models.StateCaptured, []string{"behind/repaired"}, 200},
		{"a refund the worker counted, then failed, is a conflict", Local{Exists: true, State: models.StateCaptured, At: tp(-5), Amount: 1000, Currency: "gbp", AmountRefunded: 300},
			[]Change{{ProviderID: "pi_1", At: ts(5), AmountRefunded: 300, View: true},
				{ProviderID: "pi_1", At: ts(9), Revert: "failed.", RevertIfRefunded: 300, RefundSince: ts(5), RawStatus: "refund_failed"}},
			models.StateCaptured, []string{"conflict/refused"}, 300},
		{"an open dispute is reported, the state stays", row(models.StateCaptured, -5),
			[]Change{{ProviderID: "pi_1", At: ts(5), NoticeKind: models.KindDispute, Notice: "opened.", RawStatus: "dispute_needs_response"},
				{ProviderID: "pi_1", At: ts(7), NoticeKind: models.KindDispute, Notice: "funds withdrawn.", RawStatus: "dispute_needs_response"}},
			models.StateCaptured, []string{"dispute/reported"}, 0},
		{"a dispute opened and lost in the window is the chargeback alone", row(models.StateCaptured, -5),
			[]Change{{ProviderID: "pi_1", At: ts(5), NoticeKind: models.KindDispute, Notice: "opened.", RawStatus: "dispute_needs_response"},
				{ProviderID: "pi_1", At: ts(9), State: models.StateChargeback, NoticeKind: models.KindDispute, RawStatus: "dispute_lost"}},
			models.StateChargeback, []string{"behind/repaired"}, 0},
		{"an event in an unknown API version is reported with its own words", row(models.StateAuthorised, -1),
			[]Change{{ProviderID: "pi_1", At: ts(5), Unknown: true, RawStatus: "api_version 2031-01-01.zeta", Notice: "The event is rendered in API version 2031-01-01.zeta."}},
			models.StateAuthorised, []string{"unknown_status/reported"}, 0},
		{"a partial capture the row lacks is reported once", row(models.StateAuthorised, 0),
			[]Change{{ProviderID: "pi_1", State: models.StateCaptured, At: ts(5), Snapshot: true, Amount: 1000, Currency: "gbp", AmountCaptured: 700, View: true}},
			models.StateCaptured, []string{"mismatch/reported", "behind/repaired"}, 0},
		{"an event dates a state a re-fetch also infers", Local{},
			[]Change{ch(models.StateCaptured, 1), {ProviderID: "pi_1", State: models.StateChargeback, At: ts(2), Inferred: true, EventID: "recon:pi_1:chargeback:2"},
				{ProviderID: "pi_1", State: models.StateChargeback, At: ts(9), EventID: "evt_closed"}},
			models.StateChargeback, []string{"missing_local/repaired"}, 0},
		{"a payout relisted later keeps its first time", row(models.StateCaptured, 0),
			[]Change{{ProviderID: "pi_1", State: models.StateSettled, At: ts(10), PayoutID: "po_1", EventID: "evt_paid"},
				{ProviderID: "pi_1", State: models.StateSettled, At: ts(50), PayoutID: "po_1", EventID: "evt_reconciled"}},
			models.StateSettled, []string{"behind/repaired"}, 0},
		{"at most one item per kind", row(models.StateAuthorised, -1), []Change{
			{ProviderID: "pi_1", At: ts(5), Unknown: true, RawStatus: "a"}, {ProviderID: "pi_1", At: ts(6), Unknown: true, RawStatus: "b"}},
			models.StateAuthorised, []string{"unknown_status/reported"}, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := Decide(c.local, c.changes)
			after, applied, ins := Simulate(c.local, p)
			items, _ := Classify(c.local, after, p, applied, ins, Check{Since: ts(0), Until: ts(1000), Complete: true})
			if after.State != c.wantState {
				t.Errorf("state = %s, want %s", after.State, c.wantState)
			}
			if c.name == "a payout relisted later keeps its first time" && (after.SettledAt == nil || !after.SettledAt.Equal(ts(10)) || !after.At.Equal(ts(10))) {
				t.Errorf("settled_at = %v, source_updated_at = %v, want both at the payout.paid %s", after.SettledAt, after.At, ts(10))
			}
			if c.name == "an event dates a state a re-fetch also infers" && !after.At.Equal(ts(9)) {
				t.Errorf("source_updated_at = %s, want the event's %s", after.At, ts(9))
			}
			if after.AmountRefunded != c.wantRef {
				t.Errorf("amount_refunded = %d, want %d", after.AmountRefunded, c.wantRef)
			}
			got := kinds(items)
			if len(got) != len(c.wantItems) {
				t.Fatalf("items = %v, want %v", got, c.wantItems)
			}
			for i := range got {
				if got[i] != c.wantItems[i] {
					t.Fatalf("items = %v, want %v", got, c.wantItems)
				}
			}
			// Deciding again from the result changes nothing: a rerun is a no-op.
			p2 := Decide(after, c.changes)
			after2, applied2, _ := Simulate(after, p2)
			if len(applied2) != 0 || after2.State != after.State || after2.AmountRefunded != after.AmountRefunded {
				t.Errorf("rerun moved the row: %+v → %+v", after, after2)
			}
		})
	}
}

// FuzzDecide: for any local row and any facts, the decision never moves a
// row backwards, is independent of the order facts arrive in and of
// duplicates, and reaches a fixed point after one application.
func FuzzDecide(f *testing.F) {
	f.Add(uint8(2), uint8(3), []byte{1, 5, 4, 9, 2, 2}, uint64(1))
	f.Add(uint8(0), uint8(0), []byte{7, 1, 4, 1}, uint64(3))
	f.Fuzz(func(t *testing.T, ls uint8, lt uint8, data []byte, seed uint64) {
		var local Local
		if ls%9 != 0 {
			local = Local{Exists: true, State: models.States[int(ls%9)-1], At: tp(int(lt % 20)), Amount: 1000, Currency: "gbp"}
		}
		var cs []Change
		for i := 0; i+1 < len(data) && len(cs) < 12; i += 2 {
			c := Change{ProviderID: "pi_1", At: ts(int(data[i+1] % 20)), Amount: 1000, Currency: "gbp", Snapshot: data[i]&0x80 != 0}
			switch k := int(data[i] & 0x0f); {
			case k < len(models.States):
				c.State = models.States[k]
				if c.State == models.StateRefunded {
					c.AmountRefunded = 1000
				}
			case k == 9:
				c.AmountRefunded = 400
			case k == 10:
				c.Unknown, c.RawStatus = true, "weird"
			}
			cs = append(cs, c)
		}
		p := Decide(local, cs)
		after, applied, _ := Simulate(local, p)
		if local.Exists && after.State != local.State {
			if !models.CanReach(local.State, after.State) {
				t.Fatalf("moved backwards %s → %s", local.State, after.State)
			}
			if after.At.Before(*local.At) && !models.TimeExempt(local.State, after.State) && !(local.State == models.StateSettled) {
				t.Fatalf("moved back in time")
			}
		}
		if after.AmountRefunded < local.AmountRefunded {
			t.Fatalf("amount_refunded fell")
		}
		rng := rand.New(rand.NewPCG(seed, 7))
		shuffled := append([]Change(nil), cs...)
		rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		if len(shuffled) > 0 {
			shuffled = append(shuffled, shuffled[rng.IntN(len(shuffled))])
		}
		after2, _, _ := Simulate(local, Decide(local, shuffled))
		if after2.State != after.State || after2.AmountRefunded != after.AmountRefunded {
			t.Fatalf("order or duplicates changed the result: %s vs %s", after.State, after2.State)
		}
		after3, applied3, _ := Simulate(after, Decide(after, cs))
		if len(applied3) != 0 || after3.State != after.State {
			t.Fatalf("not a fixed point after %v: applied %v", applied, applied3)
		}
	})
}

// TestDecideIntoSharesArraysSafely: a batch's plans cut their Steps and
// Events from the decider's arrays. Each plan is what Decide makes alone,
// whatever was decided before it with the same decider (the arrays running
// out and replaced included), and appending to one plan's Steps or Events
// changes no other plan. It fails when a plan's part is not capped or two
// plans share a part.
func TestDecideIntoSharesArraysSafely(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 9))
	states := []models.State{models.StateCreated, models.StateAuthorised, models.StateCaptured, models.StateSettled,
		models.StateRefunded, models.StateCanceled, models.StateFailed, models.StateChargeback}
	var d decider
	d.newArrays(7) // small: most batches run out and get new arrays
	var plans []Plan
	var facts [][]Change
	for i := range 300 {
		var cs []Change
		for j := range rng.IntN(25) {
			c := ch(states[rng.IntN(len(states))], rng.IntN(100))
			c.ProviderID = fmt.Sprintf("pi_%d", i)
			c.EventID = fmt.Sprintf("evt_%d", rng.IntN(j+3)) // repeats: the events are deduplicated
			cs = append(cs, c)
		}
		facts = append(facts, cs)
		plans = append(plans, decideInto(Local{}, nil, cs, &d))
		if i%40 == 39 {
			d.newArrays(7) // the next batch
		}
	}
	for i, p := range plans {
		require.Equal(t, Decide(Local{}, facts[i]), p, "payment %d", i)
	}
	for i := range plans {
		plans[i].Steps = append(plans[i].Steps, Step{To: models.StateNone})
		plans[i].Events = append(plans[i].Events, "evt_appended")
	}
	for i, p := range plans {
		want := Decide(Local{}, facts[i])
		require.Len(t, p.Steps, len(want.Steps)+1, "payment %d", i)
		require.Len(t, p.Events, len(want.Events)+1, "payment %d", i)
		for j := range want.Steps {
			require.Equal(t, want.Steps[j], p.Steps[j], "payment %d's step %d after the appends", i, j)
		}
		for j := range want.Events {
			require.Equal(t, want.Events[j], p.Events[j], "payment %d's event %d after the appends", i, j)
		}
	}
}
