package payouts

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/reconciler/reconciler/models"
)

// Outcome is a payout's result.
type Outcome string

// The outcomes. Only OutcomeMismatch makes the command exit 4.
const (
	// OutcomeMismatch: the amount differs from the lines, or a row says
	// otherwise than the lines; the explanation says which.
	OutcomeMismatch Outcome = "mismatch"
	// OutcomeReconciled: the amount equals the lines and the rows agree.
	OutcomeReconciled Outcome = "reconciled"
	// OutcomeInProgress: the provider is still assigning lines to the
	// payout; nothing is judged yet.
	OutcomeInProgress Outcome = "in_progress"
	// OutcomeItemsUnavailable: the provider serves no lines for the payout
	// (too old, or made by hand); only its rows are counted.
	OutcomeItemsUnavailable Outcome = "items_unavailable"
)

// Problem is one way a payment's row disagrees with the payout's lines.
type Problem string

// The problems, in the order a payout's explanation names them.
const (
	// PaidElsewhere: the payout pays the payment out, its row names
	// another payout.
	PaidElsewhere Problem = "paid_elsewhere"
	// PaidUnrecorded: the payout (paid) pays the payment out, its row names
	// no payout.
	PaidUnrecorded Problem = "paid_unrecorded"
	// PaidNoRow: the payout pays out a payment that has no local row.
	PaidNoRow Problem = "paid_no_row"
	// NotInPayout: a row names the payout, whose lines do not pay it out.
	NotInPayout Problem = "not_in_payout"
	// AmountDiffers: the row names the payout, but its amount (or currency)
	// is not what the payout paid out for it.
	AmountDiffers Problem = "amount_differs"
)

// Problems lists every problem in explanation order.
var Problems = []Problem{PaidElsewhere, PaidUnrecorded, PaidNoRow, NotInPayout, AmountDiffers}

// MaxFindings bounds the findings a Result lists (the counts are exact).
const MaxFindings = 100

// Finding is one payment's problem.
type Finding struct {
	Problem    Problem `json:"problem"`
	ProviderID string  `json:"provider_id"`
	// LocalPayoutID is the payout the row names instead (PaidElsewhere).
	LocalPayoutID string `json:"local_payout_id,omitempty"`
	// Local and PaidOut are the row's amount and what the payout paid out
	// for the payment, formatted ("30.00 GBP"; AmountDiffers).
	Local   string `json:"local,omitempty"`
	PaidOut string `json:"paid_out,omitempty"`
}

// Result is one payout reconciled. Amounts are in minor units of Currency.
type Result struct {
	Provider    string    `json:"provider"`
	Account     string    `json:"account"`
	PayoutID    string    `json:"payout_id"`
	Outcome     Outcome   `json:"result"`
	Mismatch    bool      `json:"mismatch"`
	Status      string    `json:"status"`
	Currency    string    `json:"currency"`
	Created     time.Time `json:"created"`
	ArrivalDate string    `json:"arrival_date"` // YYYY-MM-DD, "" when not known yet
	Amount      int64     `json:"amount"`
	// Lines counts the payout's lines (the payout's own Stripe balance
	// transaction excluded); LinesNet is their net sum, Difference Amount -
	// LinesNet (0 when they agree, also when GoCardless's rounding of a
	// half-unit sum could go either way, and when the payout is not judged:
	// in progress or items unavailable).
	Lines      int   `json:"lines"`
	LinesNet   int64 `json:"lines_net"`
	Difference int64 `json:"difference"`
	// The breakdown of LinesNet: each line's gross amount in its kind, every
	// line's fee in Fees (negative: money kept). Rounded per kind for
	// GoCardless, so the five may miss LinesNet by a unit there.
	Charges  int64 `json:"charges"`
	Refunds  int64 `json:"refunds"`
	Fees     int64 `json:"fees"`
	Disputes int64 `json:"disputes"`
	Other    int64 `json:"other"`
	// Payments counts the payments the payout's lines pay out and
	// PaymentsAmount what it paid out for them; RowsNaming and RowsAmount
	// the local rows that name the payout and what they collected.
	Payments       int   `json:"payments"`
	PaymentsAmount int64 `json:"payments_amount"`
	RowsNaming     int   `json:"rows_naming"`
	RowsAmount     int64 `json:"rows_amount"`
	// Counts counts the payments of each problem; Findings lists the first
	// MaxFindings of them.
	Counts   map[Problem]int `json:"counts"`
	Findings []Finding       `json:"findings"`
	// Explanation is one plain sentence for finance.
	Explanation string `json:"explanation"`
}

// lines counts n lines in the words of provider.
func lines(n int, provider string) string {
	switch provider {
	case "gocardless":
		return count(n, "payout item", "payout items")
	case "stripe":
		return count(n, "balance transaction", "balance transactions")
	}
	return count(n, "line", "lines")
}

// Check reconciles one payout against its rows: a pure function. provider
// and account only label the result.
func Check(provider, account string, po Payout, local Local) Result {
	scale := po.Scale
	if scale <= 0 {
		scale = 1
	}
	r := Result{Provider: provider, Account: account, PayoutID: po.ID, Status: po.Status, Currency: strings.ToLower(po.Currency),
		Created: po.Created.UTC(), Amount: po.Amount, Lines: len(po.Lines), Counts: map[Problem]int{}, Findings: []Finding{}}
	if !po.ArrivalDate.IsZero() {
		r.ArrivalDate = po.ArrivalDate.UTC().Format(time.DateOnly)
	}
	money := func(minor int64) string { return models.Money(minor, r.Currency) }

	var net, fees int64
	var kinds [5]int64 // charge, refund, fee, dispute, other, in line units
	paid := map[string]int64{}
	var paidOrder []string
	for _, l := range po.Lines {
		net += l.Net
		fees -= l.Fee
		kinds[kindIndex(l.Kind)] += l.Net + l.Fee
		if l.Pays() {
			if _, seen := paid[l.PaymentID]; !seen {
				paidOrder = append(paidOrder, l.PaymentID)
			}
			paid[l.PaymentID] += l.PaymentAmount
		}
	}
	kinds[kindIndex(KindFee)] += fees
	r.LinesNet = roundDiv(net, scale)
	r.Charges, r.Refunds, r.Fees, r.Disputes, r.Other = roundDiv(kinds[0], scale), roundDiv(kinds[1], scale), roundDiv(kinds[2], scale),
		roundDiv(kinds[3], scale), roundDiv(kinds[4], scale)
	// GoCardless: "we sum all of the items and then round to the nearest
	// currency unit"; a sum exactly half-way may round either way.
	diff := po.Amount*scale - net
	amountOK := 2*abs(diff) <= scale
	if !amountOK && po.Listing == ListingComplete {
		r.Difference = po.Amount - r.LinesNet
	}

	r.RowsNaming = len(local.Naming)
	naming := map[string]bool{}
	for _, row := range local.Naming {
		naming[row.ProviderID] = true
		r.RowsAmount += row.Collected()
	}
	r.Payments = len(paid)
	var paidSum int64
	for _, v := range paid {
		paidSum += v
	}
	r.PaymentsAmount = roundDiv(paidSum, scale)

	add := func(f Finding) {
		r.Counts[f.Problem]++
		r.Findings = append(r.Findings, f)
	}
	sort.Strings(paidOrder)
	for _, id := range paidOrder {
		row, ok := local.Paid[id]
		switch {
		case !ok:
			add(Finding{Problem: PaidNoRow, ProviderID: id})
		case row.PayoutID == "":
			add(Finding{Problem: PaidUnrecorded, ProviderID: id})
		case row.PayoutID != po.ID:
			add(Finding{Problem: PaidElsewhere, ProviderID: id, LocalPayoutID: row.PayoutID})
		case row.Collected()*scale != paid[id] || !strings.EqualFold(row.Currency, r.Currency):
			add(Finding{Problem: AmountDiffers, ProviderID: id, Local: models.Money(row.Collected(), row.Currency),
				PaidOut: money(roundDiv(paid[id], scale))})
		}
	}
	var extra []string
	for id := range naming {
		if _, ok := paid[id]; !ok {
			extra = append(extra, id)
		}
	}
	sort.Strings(extra)
	for _, id := range extra {
		add(Finding{Problem: NotInPayout, ProviderID: id})
	}
	slices.SortStableFunc(r.Findings, func(a, b Finding) int { return slices.Index(Problems, a.Problem) - slices.Index(Problems, b.Problem) })
	all := r.Findings
	if len(r.Findings) > MaxFindings {
		r.Findings = r.Findings[:MaxFindings:MaxFindings]
	}

	what := fmt.Sprintf("Payout %s of %s", po.ID, money(po.Amount))
	rowsSaid := fmt.Sprintf("%s (%s)", count(r.RowsNaming, "row names it", "rows name it"), money(r.RowsAmount))
	nLines := lines(r.Lines, provider)
	switch po.Listing {
	case ListingUnavailable:
		r.Outcome = OutcomeItemsUnavailable
		r.Counts, r.Findings = map[Problem]int{}, []Finding{}
		r.Explanation = fmt.Sprintf("%s cannot be checked: %s; %s.", what, po.Note, rowsSaid)
		return r
	case ListingInProgress:
		r.Outcome = OutcomeInProgress
		r.Counts, r.Findings = map[Problem]int{}, []Finding{}
		r.Explanation = fmt.Sprintf("%s cannot be checked yet: %s, and lists %s so far; %s; run this again once it is complete.",
			what, po.Note, nLines, rowsSaid)
		return r
	}

	unrecordedOK := !po.Paid // before the payout is paid, no row names it yet
	var clauses []string
	if !amountOK {
		more := "more"
		if r.Difference < 0 {
			more = "less"
		}
		clauses = append(clauses, fmt.Sprintf("its amount is %s %s than its %s add up to (%s)",
			money(abs(r.Difference)), more, nLines, money(r.LinesNet)))
	}
	for _, p := range Problems {
		n := r.Counts[p]
		if n == 0 || p == PaidUnrecorded && unrecordedOK {
			continue
		}
		clauses = append(clauses, problemClause(p, n, examples(all, p)))
	}
	if len(clauses) == 0 {
		r.Outcome = OutcomeReconciled
		r.Explanation = fmt.Sprintf("%s matches its %s and the %s.", what, nLines,
			count(r.RowsNaming, "row that names it", "rows that name it"))
		if unrecordedOK && r.Counts[PaidUnrecorded] > 0 {
			r.Explanation = fmt.Sprintf("%s matches its %s; it is %s, so %s not name it yet.", what, nLines, po.Status,
				count(r.Counts[PaidUnrecorded], "row of a payment it pays out does", "rows of payments it pays out do"))
		}
		return r
	}
	r.Outcome, r.Mismatch = OutcomeMismatch, true
	r.Explanation = what + " does not reconcile: " + strings.Join(clauses, "; ") + "."
	return r
}

// problemClause says what n payments of problem p are, naming the first.
func problemClause(p Problem, n int, ex string) string {
	switch p {
	case PaidElsewhere:
		return fmt.Sprintf("%s it paid out %s recorded against another payout (%s)", count(n, "payment", "payments"), isAre(n), ex)
	case PaidUnrecorded:
		return fmt.Sprintf("%s it paid out %s recorded against no payout (%s)", count(n, "payment", "payments"), isAre(n), ex)
	case PaidNoRow:
		return fmt.Sprintf("%s it paid out %s no local row (%s)", count(n, "payment", "payments"), hasHave(n), ex)
	case NotInPayout:
		return fmt.Sprintf("%s this payout but %s not paid out in it (%s)", count(n, "row names", "rows name"), isAre(n), ex)
	default:
		return fmt.Sprintf("%s recorded with an amount other than it paid out (%s)", count(n, "payment is", "payments are"), ex)
	}
}

// examples names the first findings of problem p, at most three.
func examples(all []Finding, p Problem) string {
	var names []string
	n := 0
	for _, f := range all {
		if f.Problem != p {
			continue
		}
		n++
		if len(names) == 3 {
			continue
		}
		switch p {
		case PaidElsewhere:
			names = append(names, f.ProviderID+" names "+f.LocalPayoutID)
		case AmountDiffers:
			names = append(names, fmt.Sprintf("%s: %s locally, %s paid out", f.ProviderID, f.Local, f.PaidOut))
		default:
			names = append(names, f.ProviderID)
		}
	}
	s := strings.Join(names, ", ")
	if n > len(names) {
		s += fmt.Sprintf(" and %d more", n-len(names))
	}
	return s
}

func count(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

func isAre(n int) string {
	if n == 1 {
		return "is"
	}
	return "are"
}

func hasHave(n int) string {
	if n == 1 {
		return "has"
	}
	return "have"
}

func kindIndex(k Kind) int {
	switch k {
	case KindCharge:
		return 0
	case KindRefund:
		return 1
	case KindFee:
		return 2
	case KindDispute:
		return 3
	}
	return 4
}

// roundDiv is x / d rounded to the nearest integer, halves away from zero.
func roundDiv(x, d int64) int64 {
	if d == 1 {
		return x
	}
	if x < 0 {
		return -((-x + d/2) / d)
	}
	return (x + d/2) / d
}

func abs(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}

// Sort orders results as the reports list them: mismatches first, then by
// arrival date (payouts with none yet last), creation, provider, account
// and id.
func Sort(rs []Result) {
	sort.SliceStable(rs, func(i, j int) bool {
		a, b := rs[i], rs[j]
		if a.Mismatch != b.Mismatch {
			return a.Mismatch
		}
		if a.ArrivalDate != b.ArrivalDate {
			switch {
			case a.ArrivalDate == "":
				return false
			case b.ArrivalDate == "":
				return true
			}
			return a.ArrivalDate < b.ArrivalDate
		}
		if !a.Created.Equal(b.Created) {
			return a.Created.Before(b.Created)
		}
		if a.Provider != b.Provider {
			return a.Provider < b.Provider
		}
		if a.Account != b.Account {
			return a.Account < b.Account
		}
		return a.PayoutID < b.PayoutID
	})
}
