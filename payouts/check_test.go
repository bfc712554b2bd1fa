package payouts_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/reconciler/reconciler/payouts"
)

var created = time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)

// stripePayout is a paid Stripe payout of two charges (with Stripe's
// processing fees), a refund, a Stripe fee line and a dispute withdrawal:
// 941 + 470 - 200 - 100 - 300 = 811.
func stripePayout() payouts.Payout {
	return payouts.Payout{ID: "po_1", Status: "paid", Amount: 811, Currency: "gbp", Created: created,
		ArrivalDate: created.Truncate(24*time.Hour).AddDate(0, 0, 2), Paid: true, Scale: 1, Listing: payouts.ListingComplete,
		Lines: []payouts.Line{
			{ID: "txn_a", Type: "charge", Kind: payouts.KindCharge, Amount: 1000, Fee: 59, Net: 941, PaymentID: "pi_a", PaymentAmount: 1000},
			{ID: "txn_b", Type: "charge", Kind: payouts.KindCharge, Amount: 500, Fee: 30, Net: 470, PaymentID: "pi_b", PaymentAmount: 500},
			{ID: "txn_r", Type: "refund", Kind: payouts.KindRefund, Amount: -200, Net: -200, PaymentID: "pi_old"},
			{ID: "txn_f", Type: "stripe_fee", Kind: payouts.KindFee, Amount: -100, Net: -100},
			{ID: "txn_d", Type: "adjustment", Kind: payouts.KindDispute, Amount: -300, Net: -300, PaymentID: "pi_disputed"},
		}}
}

func row(id string, amount int64, payout string) payouts.Row {
	return payouts.Row{ProviderID: id, Amount: amount, Currency: "gbp", PayoutID: payout}
}

// agreeing is the local side of stripePayout as the run leaves it: both
// payments name it; the refunded and the disputed payment were paid out by
// an earlier payout, and their rows say so.
func agreeing() payouts.Local {
	a, b := row("pi_a", 1000, "po_1"), row("pi_b", 500, "po_1")
	return payouts.Local{Naming: []payouts.Row{a, b}, Paid: map[string]payouts.Row{"pi_a": a, "pi_b": b}}
}

func TestCheckReconciled(t *testing.T) {
	r := payouts.Check("stripe", "", stripePayout(), agreeing())
	require.Equal(t, payouts.OutcomeReconciled, r.Outcome)
	require.False(t, r.Mismatch)
	require.Equal(t, "2026-11-04", r.ArrivalDate)
	require.EqualValues(t, 811, r.LinesNet)
	require.Zero(t, r.Difference)
	require.Equal(t, 5, r.Lines)
	// Charges gross, every fee (the charges' and the fee line) in fees.
	require.Equal(t, []int64{1500, -200, -189, -300, 0}, []int64{r.Charges, r.Refunds, r.Fees, r.Disputes, r.Other})
	require.Equal(t, r.LinesNet, r.Charges+r.Refunds+r.Fees+r.Disputes+r.Other)
	require.Equal(t, 2, r.Payments)
	require.EqualValues(t, 1500, r.PaymentsAmount)
	require.Equal(t, 2, r.RowsNaming)
	require.EqualValues(t, 1500, r.RowsAmount)
	require.Empty(t, r.Findings)
	require.Equal(t, "Payout po_1 of 8.11 GBP matches its 5 balance transactions and the 2 rows that name it.", r.Explanation)
}

func TestCheckMismatches(t *testing.T) {
	for name, c := range map[string]struct {
		edit    func(*payouts.Payout, *payouts.Local)
		counts  map[payouts.Problem]int
		diff    int64
		explain string
	}{
		"amount above its transactions": {
			edit:    func(po *payouts.Payout, _ *payouts.Local) { po.Amount = 1311 },
			diff:    500,
			explain: "Payout po_1 of 13.11 GBP does not reconcile: its amount is 5.00 GBP more than its 5 balance transactions add up to (8.11 GBP).",
		},
		"amount below its transactions": {
			edit:    func(po *payouts.Payout, _ *payouts.Local) { po.Amount = 810 },
			diff:    -1,
			explain: "Payout po_1 of 8.10 GBP does not reconcile: its amount is 0.01 GBP less than its 5 balance transactions add up to (8.11 GBP).",
		},
		"a row names another payout": {
			edit: func(_ *payouts.Payout, l *payouts.Local) {
				l.Naming = l.Naming[:1]
				l.Paid["pi_b"] = row("pi_b", 500, "po_0")
			},
			counts:  map[payouts.Problem]int{payouts.PaidElsewhere: 1},
			explain: "Payout po_1 of 8.11 GBP does not reconcile: 1 payment it paid out is recorded against another payout (pi_b names po_0).",
		},
		"a row names no payout": {
			edit: func(_ *payouts.Payout, l *payouts.Local) {
				l.Naming = l.Naming[:1]
				l.Paid["pi_b"] = row("pi_b", 500, "")
			},
			counts:  map[payouts.Problem]int{payouts.PaidUnrecorded: 1},
			explain: "Payout po_1 of 8.11 GBP does not reconcile: 1 payment it paid out is recorded against no payout (pi_b).",
		},
		"a payment has no row": {
			edit: func(_ *payouts.Payout, l *payouts.Local) {
				l.Naming = l.Naming[1:]
				delete(l.Paid, "pi_a")
			},
			counts:  map[payouts.Problem]int{payouts.PaidNoRow: 1},
			explain: "Payout po_1 of 8.11 GBP does not reconcile: 1 payment it paid out has no local row (pi_a).",
		},
		"rows name it that it did not pay": {
			edit: func(_ *payouts.Payout, l *payouts.Local) {
				l.Naming = append(l.Naming, row("pi_x", 700, "po_1"), row("pi_y", 800, "po_1"))
			},
			counts:  map[payouts.Problem]int{payouts.NotInPayout: 2},
			explain: "Payout po_1 of 8.11 GBP does not reconcile: 2 rows name this payout but are not paid out in it (pi_x, pi_y).",
		},
		"a row's amount differs": {
			edit: func(_ *payouts.Payout, l *payouts.Local) {
				l.Naming[1] = row("pi_b", 450, "po_1")
				l.Paid["pi_b"] = l.Naming[1]
			},
			counts:  map[payouts.Problem]int{payouts.AmountDiffers: 1},
			explain: "Payout po_1 of 8.11 GBP does not reconcile: 1 payment is recorded with an amount other than it paid out (pi_b: 4.50 GBP locally, 5.00 GBP paid out).",
		},
		"a row's currency differs": {
			edit: func(_ *payouts.Payout, l *payouts.Local) {
				l.Naming[1].Currency = "eur"
				l.Paid["pi_b"] = l.Naming[1]
			},
			counts:  map[payouts.Problem]int{payouts.AmountDiffers: 1},
			explain: "Payout po_1 of 8.11 GBP does not reconcile: 1 payment is recorded with an amount other than it paid out (pi_b: 5.00 EUR locally, 5.00 GBP paid out).",
		},
		"both at once, each said": {
			edit: func(po *payouts.Payout, l *payouts.Local) {
				po.Amount = 812
				l.Naming = l.Naming[:1]
				l.Paid["pi_b"] = row("pi_b", 500, "po_0")
			},
			diff:    1,
			counts:  map[payouts.Problem]int{payouts.PaidElsewhere: 1},
			explain: "Payout po_1 of 8.12 GBP does not reconcile: its amount is 0.01 GBP more than its 5 balance transactions add up to (8.11 GBP); 1 payment it paid out is recorded against another payout (pi_b names po_0).",
		},
	} {
		t.Run(name, func(t *testing.T) {
			po, local := stripePayout(), agreeing()
			c.edit(&po, &local)
			r := payouts.Check("stripe", "", po, local)
			require.Equal(t, payouts.OutcomeMismatch, r.Outcome)
			require.True(t, r.Mismatch)
			require.Equal(t, c.diff, r.Difference)
			for _, p := range payouts.Problems {
				require.Equal(t, c.counts[p], r.Counts[p], p)
			}
			require.Equal(t, c.explain, r.Explanation)
			require.NotContains(t, r.Explanation[:len(r.Explanation)-1], ".\n")
		})
	}
}

// A refund or dispute line names a payment paid out by an earlier payout:
// its row rightly names that one, and that is no mismatch. Only charge
// lines are expected to be named by their rows.
func TestCheckRefundOfAnEarlierPayout(t *testing.T) {
	po, local := stripePayout(), agreeing()
	local.Paid["pi_old"] = row("pi_old", 2000, "po_0")
	r := payouts.Check("stripe", "", po, local)
	require.Equal(t, payouts.OutcomeReconciled, r.Outcome, r.Explanation)
	require.Equal(t, 2, r.Payments, "the refund's payment is not one it paid out")
}

// A partial capture: the row's amount is the authorisation, its
// amount_captured what Stripe paid out.
func TestCheckPartialCapture(t *testing.T) {
	po, local := stripePayout(), agreeing()
	po.Lines[1].PaymentAmount = 300
	a := local.Naming[0]
	b := payouts.Row{ProviderID: "pi_b", Amount: 500, AmountCaptured: 300, Currency: "gbp", PayoutID: "po_1"}
	local = payouts.Local{Naming: []payouts.Row{a, b}, Paid: map[string]payouts.Row{"pi_a": a, "pi_b": b}}
	r := payouts.Check("stripe", "", po, local)
	require.Equal(t, payouts.OutcomeReconciled, r.Outcome, r.Explanation)
	require.EqualValues(t, 1300, r.RowsAmount)
	require.EqualValues(t, 1300, r.PaymentsAmount)
}

// Before a payout is paid the run has not recorded it on its payments'
// rows: that is expected, not a mismatch; a row naming another payout still
// is.
func TestCheckPendingPayout(t *testing.T) {
	po := stripePayout()
	po.Status, po.Paid = "in_transit", false
	a, b := row("pi_a", 1000, ""), row("pi_b", 500, "")
	r := payouts.Check("stripe", "", po, payouts.Local{Paid: map[string]payouts.Row{"pi_a": a, "pi_b": b}})
	require.Equal(t, payouts.OutcomeReconciled, r.Outcome, r.Explanation)
	require.Equal(t, 2, r.Counts[payouts.PaidUnrecorded])
	require.Equal(t, "Payout po_1 of 8.11 GBP matches its 5 balance transactions; it is in_transit, so 2 rows of payments it pays out do not name it yet.", r.Explanation)

	b.PayoutID = "po_0"
	r = payouts.Check("stripe", "", po, payouts.Local{Paid: map[string]payouts.Row{"pi_a": a, "pi_b": b}})
	require.Equal(t, payouts.OutcomeMismatch, r.Outcome)
	require.Equal(t, "Payout po_1 of 8.11 GBP does not reconcile: 1 payment it paid out is recorded against another payout (pi_b names po_0).", r.Explanation)
}

// GoCardless items are tenths of a minor unit; the payout is their sum
// rounded to the nearest unit, and a sum half-way may round either way.
func TestCheckGoCardlessRounding(t *testing.T) {
	po := payouts.Payout{ID: "PO1", Status: "paid", Currency: "gbp", Created: created, Paid: true, Scale: 10, Listing: payouts.ListingComplete,
		Lines: []payouts.Line{
			{Type: "payment_paid_out", Kind: payouts.KindCharge, Amount: 10000, Net: 10000, PaymentID: "PM1", PaymentAmount: 10000},
			{Type: "gocardless_fee", Kind: payouts.KindFee, Amount: -125, Net: -125, PaymentID: "PM1"},
		}}
	pm := row("PM1", 1000, "PO1")
	local := payouts.Local{Naming: []payouts.Row{pm}, Paid: map[string]payouts.Row{"PM1": pm}}
	for amount, want := range map[int64]payouts.Outcome{987: payouts.OutcomeReconciled, 988: payouts.OutcomeReconciled,
		986: payouts.OutcomeMismatch, 989: payouts.OutcomeMismatch} {
		po.Amount = amount
		r := payouts.Check("gocardless", "", po, local)
		require.Equal(t, want, r.Outcome, "%d: %s", amount, r.Explanation)
		require.EqualValues(t, 988, r.LinesNet, "987.5 rounds half away from zero")
		require.EqualValues(t, 1000, r.Charges)
		require.EqualValues(t, -13, r.Fees)
		if want == payouts.OutcomeMismatch {
			require.Equal(t, amount-988, r.Difference)
			require.Contains(t, r.Explanation, "than its 2 payout items add up to (9.88 GBP)")
		} else {
			require.Zero(t, r.Difference)
		}
	}
	pm.Amount = 999
	local = payouts.Local{Naming: []payouts.Row{pm}, Paid: map[string]payouts.Row{"PM1": pm}}
	po.Amount = 988
	r := payouts.Check("gocardless", "", po, local)
	require.Equal(t, payouts.OutcomeMismatch, r.Outcome)
	require.Equal(t, []payouts.Finding{{Problem: payouts.AmountDiffers, ProviderID: "PM1", Local: "9.99 GBP", PaidOut: "10.00 GBP"}}, r.Findings)
}

func TestCheckUnjudged(t *testing.T) {
	po := stripePayout()
	po.Listing, po.Note, po.Lines = payouts.ListingUnavailable, "GoCardless serves payout items only for payouts created in the last six months (410 Gone)", nil
	r := payouts.Check("gocardless", "", po, agreeing())
	require.Equal(t, payouts.OutcomeItemsUnavailable, r.Outcome)
	require.False(t, r.Mismatch)
	require.Empty(t, r.Findings)
	require.Equal(t, "Payout po_1 of 8.11 GBP cannot be checked: GoCardless serves payout items only for payouts created in the last six months (410 Gone); 2 rows name it (15.00 GBP).", r.Explanation)

	po = stripePayout()
	po.Amount = 99999 // the listing is short: not judged
	po.Listing, po.Note, po.Lines = payouts.ListingInProgress, "Stripe is still assigning balance transactions to it (reconciliation_status in_progress)", po.Lines[:1]
	r = payouts.Check("stripe", "", po, agreeing())
	require.Equal(t, payouts.OutcomeInProgress, r.Outcome)
	require.False(t, r.Mismatch)
	require.Zero(t, r.Difference, "not judged")
	require.Empty(t, r.Findings)
	require.Equal(t, "Payout po_1 of 999.99 GBP cannot be checked yet: Stripe is still assigning balance transactions to it (reconciliation_status in_progress), and lists 1 balance transaction so far; 2 rows name it (15.00 GBP); run this again once it is complete.", r.Explanation)
}

func TestCheckFindingsAreBounded(t *testing.T) {
	po := payouts.Payout{ID: "po_big", Status: "paid", Currency: "usd", Paid: true, Scale: 1, Listing: payouts.ListingComplete}
	local := payouts.Local{Paid: map[string]payouts.Row{}}
	for i := range 250 {
		id := fmt.Sprintf("pi_%03d", i)
		po.Lines = append(po.Lines, payouts.Line{Kind: payouts.KindCharge, Amount: 100, Net: 100, PaymentID: id, PaymentAmount: 100})
		po.Amount += 100
		local.Paid[id] = row(id, 100, "po_other")
	}
	r := payouts.Check("stripe", "", po, local)
	require.Equal(t, 250, r.Counts[payouts.PaidElsewhere])
	require.Len(t, r.Findings, payouts.MaxFindings)
	require.Equal(t, "pi_000", r.Findings[0].ProviderID)
	require.Contains(t, r.Explanation, "250 payments it paid out are recorded against another payout (pi_000 names po_other, pi_001 names po_other, pi_002 names po_other and 247 more)")
}

func TestSortMismatchesFirst(t *testing.T) {
	rs := []payouts.Result{
		{PayoutID: "po_late", ArrivalDate: "2026-11-09"},
		{PayoutID: "po_pending"},
		{PayoutID: "po_wrong_late", ArrivalDate: "2026-11-08", Mismatch: true},
		{PayoutID: "po_early", ArrivalDate: "2026-11-01"},
		{PayoutID: "po_wrong_early", ArrivalDate: "2026-11-03", Mismatch: true},
	}
	payouts.Sort(rs)
	var ids []string
	for _, r := range rs {
		ids = append(ids, r.PayoutID)
	}
	require.Equal(t, []string{"po_wrong_early", "po_wrong_late", "po_early", "po_late", "po_pending"}, ids)
}

// FuzzCheck holds Check to its invariants for any lines and rows: the
// breakdown adds up to the lines' net (Stripe scale), a mismatch always
// says why in one sentence, and only a complete listing is ever judged.
func FuzzCheck(f *testing.F) {
	f.Add(int64(811), int64(1000), int64(59), int64(-200), uint8(0), uint8(3), true)
	f.Add(int64(0), int64(0), int64(0), int64(0), uint8(1), uint8(0), false)
	f.Fuzz(func(t *testing.T, amount, charge, fee, refund int64, listing, edits uint8, paid bool) {
		const lim = 1 << 40
		if abs(amount) > lim || abs(charge) > lim || abs(fee) > lim || abs(refund) > lim {
			t.Skip()
		}
		po := payouts.Payout{ID: "po_f", Status: "paid", Amount: amount, Currency: "gbp", Paid: paid, Scale: 1,
			Listing: []payouts.Listing{payouts.ListingComplete, payouts.ListingInProgress, payouts.ListingUnavailable}[listing%3],
			Lines: []payouts.Line{
				{Kind: payouts.KindCharge, Amount: charge, Fee: fee, Net: charge - fee, PaymentID: "pi_1", PaymentAmount: charge},
				{Kind: payouts.KindRefund, Amount: refund, Net: refund, PaymentID: "pi_1"},
			}}
		r1 := row("pi_1", charge, "po_f")
		local := payouts.Local{Naming: []payouts.Row{r1}, Paid: map[string]payouts.Row{"pi_1": r1}}
		if edits&1 != 0 {
			local.Paid["pi_1"] = row("pi_1", charge, "po_x")
			local.Naming = nil
		}
		if edits&2 != 0 {
			local.Naming = append(local.Naming, row("pi_2", 5, "po_f"))
		}
		r := payouts.Check("stripe", "", po, local)
		require.Equal(t, r.LinesNet, r.Charges+r.Refunds+r.Fees+r.Disputes+r.Other)
		require.Equal(t, r.Outcome == payouts.OutcomeMismatch, r.Mismatch)
		if po.Listing != payouts.ListingComplete {
			require.False(t, r.Mismatch)
			return
		}
		want := amount != charge-fee+refund || edits&3 != 0
		require.Equal(t, want, r.Mismatch, r.Explanation)
		require.True(t, strings.HasSuffix(r.Explanation, "."))
		require.Equal(t, 1, strings.Count(r.Explanation, ". ")+1, "one sentence: %s", r.Explanation)
	})
}

func abs(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}
