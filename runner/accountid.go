package runner

import "strings"

// MaxAccountIDLen bounds the part of a connected account id after "acct_".
// Stripe's account ids are "acct_" and 16 alphanumerics today; Stripe
// reserves the right to lengthen ids, so four times that leaves room while
// keeping a pasted paragraph (or 100,000 characters) out of logs, advisory
// lock keys and run rows.
const MaxAccountIDLen = 64

// ValidAccountID reports whether s has the syntax of a Stripe connected
// account id: "acct_" and 1 to MaxAccountIDLen ASCII letters and digits.
// Anything else (SQL, control characters, bidirectional overrides, a
// newline that would forge a log line) is not an account.
func ValidAccountID(s string) bool {
	rest, ok := strings.CutPrefix(s, "acct_")
	if !ok || len(rest) == 0 || len(rest) > MaxAccountIDLen {
		return false
	}
	for i := 0; i < len(rest); i++ {
		c := rest[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}
