package payouts

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/reconciler/reconciler/models"
)

// Formats are the output formats Write knows.
var Formats = []string{"csv", "json", "text"}

// ValidFormat reports whether Write knows format.
func ValidFormat(format string) bool {
	for _, f := range Formats {
		if f == format {
			return true
		}
	}
	return false
}

// CSVHeader is the payout CSV's header row, one row per payout
// (docs/payouts.md says what each column means). It only grows: columns are
// added at the end, never renamed or moved.
var CSVHeader = []string{"provider", "account", "payout_id", "result", "mismatch", "status", "currency", "created", "arrival_date",
	"amount", "lines_net", "difference", "charges", "refunds", "fees", "disputes", "other", "lines",
	"payments", "payments_amount", "rows_naming", "rows_amount",
	"paid_elsewhere", "paid_unrecorded", "paid_no_row", "not_in_payout", "amount_differs", "explanation"}

// Write renders rep in format (csv, json or text) to w. The text is built
// first and written at once, so a failing writer gets nothing or all of it.
func Write(w io.Writer, format string, rep Report) error {
	var buf bytes.Buffer
	switch format {
	case "csv":
		if err := WriteCSV(&buf, rep); err != nil {
			return err
		}
	case "json":
		enc := json.NewEncoder(&buf)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return err
		}
	case "text":
		writeText(&buf, rep)
	default:
		return fmt.Errorf("payouts: unknown format %q (use %s)", format, strings.Join(Formats, ", "))
	}
	_, err := w.Write(buf.Bytes())
	return err
}

// WriteCSV writes the header and one row per payout, each report's in its
// order. Amounts are in major units of the currency column
// (models.MajorUnits).
func WriteCSV(w io.Writer, reps ...Report) error {
	cw := csv.NewWriter(w)
	_ = cw.Write(CSVHeader)
	for _, rep := range reps {
		for _, r := range rep.Results {
			_ = cw.Write(csvRow(r))
		}
	}
	cw.Flush()
	return cw.Error()
}

// csvRow is one payout's row. A column that says nothing for the payout's
// outcome is empty rather than a misleading zero: the lines' columns when
// its items are unavailable, the difference and the row checks when it was
// not judged (in progress, items unavailable).
func csvRow(r Result) []string {
	judged := r.Outcome == OutcomeMismatch || r.Outcome == OutcomeReconciled
	lines := r.Outcome != OutcomeItemsUnavailable
	m := func(v int64, show bool) string {
		if !show {
			return ""
		}
		return models.MajorUnits(v, r.Currency)
	}
	n := func(v int, show bool) string {
		if !show {
			return ""
		}
		return fmt.Sprint(v)
	}
	return []string{cell(r.Provider), cell(r.Account), cell(r.PayoutID), string(r.Outcome), fmt.Sprint(r.Mismatch), cell(r.Status),
		strings.ToUpper(r.Currency), r.Created.UTC().Format(time.RFC3339), r.ArrivalDate,
		m(r.Amount, true), m(r.LinesNet, lines), m(r.Difference, judged), m(r.Charges, lines), m(r.Refunds, lines), m(r.Fees, lines),
		m(r.Disputes, lines), m(r.Other, lines), n(r.Lines, lines), n(r.Payments, lines), m(r.PaymentsAmount, lines),
		n(r.RowsNaming, true), m(r.RowsAmount, true),
		n(r.Counts[PaidElsewhere], judged), n(r.Counts[PaidUnrecorded], judged), n(r.Counts[PaidNoRow], judged),
		n(r.Counts[NotInPayout], judged), n(r.Counts[AmountDiffers], judged), cell(r.Explanation)}
}

// cell keeps a provider's text from being read as a spreadsheet formula
// and from breaking a line.
func cell(s string) string {
	s = oneLine(s)
	if s != "" && strings.ContainsRune("=+-@", rune(s[0])) {
		return "'" + s
	}
	return s
}

// writeText lays rep out for a person at a terminal: a summary line, a
// table of every payout, and the explanation of each that did not
// reconcile. Nothing the provider sent can drive the terminal.
func writeText(buf *bytes.Buffer, rep Report) {
	acct := rep.Account
	if acct == "" {
		acct = "platform"
	}
	fmt.Fprintf(buf, "Payouts of %s/%s created %s to %s: %d payouts, %d mismatching, %d in progress, %d with items unavailable.\n",
		rep.Provider, oneLine(acct), rep.Since.Format(time.RFC3339), rep.Until.Format(time.RFC3339),
		rep.Payouts, rep.Mismatches, rep.InProgress, rep.Unavailable)
	if len(rep.Results) == 0 {
		return
	}
	buf.WriteString("\n")
	tw := tabwriter.NewWriter(buf, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "PAYOUT\tRESULT\tARRIVAL\tAMOUNT\tLINES_NET\tDIFFERENCE\tLINES\tPAYMENTS\tROWS")
	for _, r := range rep.Results {
		arrival := r.ArrivalDate
		if arrival == "" {
			arrival = "-"
		}
		net, diff, nl, np := models.Money(r.LinesNet, r.Currency), models.Money(r.Difference, r.Currency), fmt.Sprint(r.Lines), fmt.Sprint(r.Payments)
		if r.Outcome == OutcomeItemsUnavailable {
			net, nl, np = "-", "-", "-"
		}
		if r.Outcome != OutcomeMismatch && r.Outcome != OutcomeReconciled {
			diff = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\n", oneLine(r.PayoutID), r.Outcome, arrival, models.Money(r.Amount, r.Currency),
			net, diff, nl, np, r.RowsNaming)
	}
	_ = tw.Flush()
	first := true
	for _, r := range rep.Results {
		if r.Outcome == OutcomeReconciled {
			continue
		}
		if first {
			buf.WriteString("\nTo look at:\n")
			first = false
		}
		fmt.Fprintf(buf, "  %s %s\n", r.Outcome, oneLine(r.Explanation))
	}
}

// oneLine makes s safe to print as one line of plain text: control
// characters, format characters (bidirectional overrides) and line
// separators are escaped as Go quotes them (as config.OneLine does; config
// imports the providers, which import this package).
func oneLine(s string) string {
	var b strings.Builder
	for _, r := range s {
		if r == utf8.RuneError || unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || r == '\u2028' || r == '\u2029' {
			q := strconv.QuoteRuneToASCII(r)
			b.WriteString(q[1 : len(q)-1])
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}
