package storetest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/store"
)

// The reads outside a batch (store.Reads). Windows are [Since, Until):
// a row at Since is in, a row at Until is out, one tick of the dialect's
// precision decides.

var readTests = []test{
	{"WindowStates", testWindowStates},
	{"StuckPayments", testStuckPayments},
	{"PaymentsInWindow", testPaymentsInWindow},
}

func testWindowStates(t *testing.T, e *env) {
	since := e.t0()
	until := since.Add(24 * time.Hour)
	tick := e.o.Precision
	mid := since.Add(time.Hour)
	seed := func(id string, st models.State, at *time.Time, edit ...func(*payment)) {
		p := payment{ProviderID: id, State: st, Amount: 100, At: at}
		for _, f := range edit {
			f(&p)
		}
		e.seed(p)
	}
	seed("w_at_since", models.StateCaptured, ptr(since))
	seed("w_before_until", models.StateSettled, ptr(until.Add(-tick)))
	seed("w_at_until", models.StateRefunded, ptr(until))
	seed("w_before_since", models.StateCaptured, ptr(since.Add(-tick)))
	seed("w_created", models.StateCreated, ptr(mid))
	seed("w_null", models.StateAuthorised, nil)
	seed("w_canceled", models.StateCanceled, ptr(mid))
	seed("w_settled_in_window", models.StateCaptured, ptr(since.Add(-time.Hour)), func(p *payment) { p.SettledAt = ptr(mid) })
	seed("w_other_account", models.StateCaptured, ptr(mid), func(p *payment) { p.Account = "acct_1" })
	seed("w_other_provider", models.StateCaptured, ptr(mid), func(p *payment) { p.Provider = "gocardless" })
	// A row the batch statements wrote, in the dialect's own form.
	e.tx(e.st, func(tx store.Tx) {
		_, err := tx.InsertPayments(e.ctx, "stripe", "", []store.NewPayment{{ProviderID: "w_inserted", State: models.StateFailed, At: mid, Amount: 1, Currency: "gbp"}})
		require.NoError(t, err)
	})
	read := func(q store.WindowQuery) []store.PaymentState {
		t.Helper()
		q.Provider = "stripe"
		got, err := e.st.WindowStates(e.ctx, q)
		require.NoError(t, err)
		return got
	}
	all := []store.PaymentState{
		{ProviderID: "w_at_since", State: models.StateCaptured},
		{ProviderID: "w_before_until", State: models.StateSettled},
		{ProviderID: "w_canceled", State: models.StateCanceled},
		{ProviderID: "w_inserted", State: models.StateFailed},
	}
	require.Equal(t, all, read(store.WindowQuery{Since: since, Until: until, Limit: 100}))
	// The bounds in another zone are the same instants.
	z := time.FixedZone("UTC-3", -3*3600)
	require.Equal(t, all, read(store.WindowQuery{Since: since.In(z), Until: until.In(z), Limit: 100}))
	// Paging by provider_id.
	require.Equal(t, all[:2], read(store.WindowQuery{Since: since, Until: until, Limit: 2}))
	require.Equal(t, all[2:], read(store.WindowQuery{Since: since, Until: until, After: all[1].ProviderID, Limit: 2}))
	require.Empty(t, read(store.WindowQuery{Since: since, Until: until, After: all[3].ProviderID, Limit: 2}))
	// Another account's window.
	require.Equal(t, []store.PaymentState{{ProviderID: "w_other_account", State: models.StateCaptured}},
		read(store.WindowQuery{Account: "acct_1", Since: since, Until: until, Limit: 100}))
	// One tick either way.
	require.Equal(t, []store.PaymentState{{ProviderID: "w_at_until", State: models.StateRefunded}, {ProviderID: "w_before_until", State: models.StateSettled}},
		read(store.WindowQuery{Since: until.Add(-tick), Until: until.Add(tick), Limit: 100}))
	require.Equal(t, []store.PaymentState{{ProviderID: "w_at_since", State: models.StateCaptured}, {ProviderID: "w_before_since", State: models.StateCaptured}},
		read(store.WindowQuery{Since: since.Add(-tick), Until: since.Add(tick), Limit: 100}))
}

func testStuckPayments(t *testing.T, e *env) {
	before := e.t0()
	h := time.Hour
	seed := func(id string, st models.State, at *time.Time, edit ...func(*payment)) {
		p := payment{ProviderID: id, State: st, Amount: 100, At: at}
		for _, f := range edit {
			f(&p)
		}
		e.seed(p)
	}
	seed("k_created", models.StateCreated, ptr(before.Add(-3*h)))
	seed("k_captured", models.StateCaptured, ptr(before.Add(-e.o.Precision)))
	seed("k_authorised", models.StateAuthorised, ptr(before.Add(-2*h)))
	seed("k_at_before", models.StateCaptured, ptr(before))
	seed("k_settled", models.StateSettled, ptr(before.Add(-5*h)))
	seed("k_null", models.StateCreated, nil)
	seed("k_other_account", models.StateCreated, ptr(before.Add(-9*h)), func(p *payment) { p.Account = "acct_1" })
	seed("k_other_provider", models.StateCreated, ptr(before.Add(-9*h)), func(p *payment) { p.Provider = "gocardless" })
	e.tx(e.st, func(tx store.Tx) {
		_, err := tx.InsertPayments(e.ctx, "stripe", "", []store.NewPayment{{ProviderID: "k_inserted", State: models.StateAuthorised, At: before.Add(-150 * time.Minute), Amount: 1, Currency: "gbp"}})
		require.NoError(t, err)
	})
	states := []models.State{models.StateCreated, models.StateAuthorised, models.StateCaptured}
	read := func(q store.StuckQuery) []string {
		t.Helper()
		if q.Provider == "" {
			q.Provider = "stripe"
		}
		got, err := e.st.StuckPayments(e.ctx, q)
		require.NoError(t, err)
		return got
	}
	require.Equal(t, []string{"k_created", "k_inserted", "k_authorised", "k_captured"}, read(store.StuckQuery{States: states, Before: before, Limit: 100}),
		"oldest first; not at Before, not other states, not without a time")
	require.Equal(t, []string{"k_created", "k_inserted"}, read(store.StuckQuery{States: states, Before: before, Limit: 2}))
	require.Equal(t, []string{"k_inserted", "k_authorised"}, read(store.StuckQuery{States: []models.State{models.StateAuthorised}, Before: before, Limit: 100}))
	require.Equal(t, []string{"k_created", "k_inserted", "k_authorised", "k_captured", "k_at_before"},
		read(store.StuckQuery{States: states, Before: before.Add(e.o.Precision).In(time.FixedZone("UTC+1", 3600)), Limit: 100}))
	require.Equal(t, []string{"k_other_account"}, read(store.StuckQuery{Account: "acct_1", States: states, Before: before, Limit: 100}))
	require.Equal(t, []string{"k_other_provider"}, read(store.StuckQuery{Provider: "gocardless", States: states, Before: before, Limit: 100}))

	// Rotation: a payment re-fetched waits behind those never checked, and
	// those checked longest ago come first; checks are per provider.
	require.NoError(t, e.st.MarkChecked(e.ctx, "stripe", "", []string{"k_created", "k_inserted"}, before))
	require.Equal(t, []string{"k_authorised", "k_captured", "k_created", "k_inserted"}, read(store.StuckQuery{States: states, Before: before, Limit: 100}))
	require.Equal(t, []string{"k_authorised", "k_captured"}, read(store.StuckQuery{States: states, Before: before, Limit: 2}))
	require.NoError(t, e.st.MarkChecked(e.ctx, "stripe", "", []string{"k_authorised", "k_captured"}, before.Add(h)))
	require.NoError(t, e.st.MarkChecked(e.ctx, "stripe", "", []string{"k_created"}, before.Add(2*h)))
	require.Equal(t, []string{"k_inserted", "k_authorised", "k_captured", "k_created"}, read(store.StuckQuery{States: states, Before: before, Limit: 100}),
		"checked longest ago first; a second check moves a payment to the back")
	require.Equal(t, []string{"k_other_provider"}, read(store.StuckQuery{Provider: "gocardless", States: states, Before: before, Limit: 100}))
	require.NoError(t, e.st.MarkChecked(e.ctx, "stripe", "", nil, before), "nothing to record is no statement")
}

func testPaymentsInWindow(t *testing.T, e *env) {
	since := e.t0()
	until := since.Add(24 * time.Hour)
	tick := e.o.Precision
	mid := since.Add(time.Hour)
	old := since.Add(-48 * time.Hour)
	var want []payment
	seed := func(in bool, p payment) {
		if p.Amount == 0 {
			p.Amount = 100
		}
		s := e.seed(p)
		if in {
			want = append(want, s)
		}
	}
	seed(true, payment{ProviderID: "p_source_in", State: models.StateCaptured, At: ptr(mid)})
	seed(true, payment{ProviderID: "p_settled_in", State: models.StateRefunded, At: ptr(old), SettledAt: ptr(until.Add(-tick)), PayoutID: ptr("po_1"),
		AmountRefunded: 100, AmountCaptured: ptr(int64(90))})
	seed(false, payment{ProviderID: "p_both_out", State: models.StateSettled, At: ptr(old), SettledAt: ptr(since.Add(-tick)), PayoutID: ptr("po_out")})
	seed(false, payment{ProviderID: "p_at_until", State: models.StateCaptured, At: ptr(until)})
	seed(true, payment{ProviderID: "p_null_settled_at_since", State: models.StateSettled, SettledAt: ptr(since)})
	seed(true, payment{ProviderID: "p_created", State: models.StateCreated, At: ptr(since)})
	seed(false, payment{ProviderID: "p_null", State: models.StateCreated})
	seed(false, payment{ProviderID: "p_other_account", Account: "acct_1", State: models.StateSettled, At: ptr(mid), PayoutID: ptr("po_acct")})
	seed(false, payment{ProviderID: "p_other_provider", Provider: "gocardless", State: models.StateCaptured, At: ptr(mid)})
	seed(true, payment{ProviderID: "p_last", State: models.StateChargeback, At: ptr(mid), Currency: "eur"})

	read := func(q store.PaymentQuery) ([]payment, []int64) {
		t.Helper()
		q.Provider = "stripe"
		got, err := e.st.PaymentsInWindow(e.ctx, q)
		require.NoError(t, err)
		out := make([]payment, len(got))
		ids := make([]int64, len(got))
		for i, r := range got {
			out[i], ids[i] = fromModel(r), r.ID
		}
		return out, ids
	}
	got, ids := read(store.PaymentQuery{Since: since, Until: until, Limit: 100})
	require.Equal(t, want, got, "by id; rows whole")
	require.IsIncreasing(t, ids)
	z := time.FixedZone("UTC+10", 10*3600)
	got, _ = read(store.PaymentQuery{Since: since.In(z), Until: until.In(z), Limit: 100})
	require.Equal(t, want, got)

	// Paging by id.
	got, page1 := read(store.PaymentQuery{Since: since, Until: until, Limit: 3})
	require.Equal(t, want[:3], got)
	got, page2 := read(store.PaymentQuery{Since: since, Until: until, AfterID: page1[2], Limit: 3})
	require.Equal(t, want[3:], got)
	got, _ = read(store.PaymentQuery{Since: since, Until: until, AfterID: page2[len(page2)-1], Limit: 3})
	require.Empty(t, got)

	// The count is of the same rows, whatever the page.
	for _, q := range []store.PaymentQuery{{Since: since, Until: until}, {Since: since.In(z), Until: until.In(z), AfterID: page1[2], Limit: 1}} {
		q.Provider = "stripe"
		n, err := e.st.CountInWindow(e.ctx, q)
		require.NoError(t, err)
		require.Equal(t, len(want), n, "CountInWindow counts the rows PaymentsInWindow pages through")
	}
	n, err := e.st.CountInWindow(e.ctx, store.PaymentQuery{Provider: "stripe", Account: "acct_1", Since: since, Until: until})
	require.NoError(t, err)
	require.Equal(t, 1, n, "another account's rows")

	// The payouts those rows name, each once.
	seed(false, payment{ProviderID: "p_settled_in_too", State: models.StateSettled, At: ptr(mid), PayoutID: ptr("po_1")})
	seed(false, payment{ProviderID: "p_settled_in_empty", State: models.StateSettled, At: ptr(mid), PayoutID: ptr("")})
	pos, err := e.st.PayoutsInWindow(e.ctx, store.PaymentQuery{Provider: "stripe", Since: since, Until: until})
	require.NoError(t, err)
	require.Equal(t, []string{"po_1"}, pos)
	pos, err = e.st.PayoutsInWindow(e.ctx, store.PaymentQuery{Provider: "stripe", Account: "acct_1", Since: since, Until: until})
	require.NoError(t, err)
	require.Equal(t, []string{"po_acct"}, pos)
	pos, err = e.st.PayoutsInWindow(e.ctx, store.PaymentQuery{Provider: "stripe", Since: until, Until: until.Add(time.Hour)})
	require.NoError(t, err)
	require.Empty(t, pos)
}
