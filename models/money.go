package models

import (
	"fmt"
	"strings"
)

// decimals is how many minor-unit digits a currency has (ISO 4217); 2 for
// any currency not listed.
var decimals = map[string]int{
	"bif": 0, "clp": 0, "djf": 0, "gnf": 0, "isk": 0, "jpy": 0, "kmf": 0, "krw": 0, "pyg": 0, "rwf": 0,
	"ugx": 0, "vnd": 0, "vuv": 0, "xaf": 0, "xof": 0, "xpf": 0,
	"bhd": 3, "iqd": 3, "jod": 3, "kwd": 3, "lyd": 3, "omr": 3, "tnd": 3,
}

// MajorUnits formats minor units as a decimal number in major units
// ("12.34" for 1234 gbp, "1234" for 1234 jpy).
func MajorUnits(minor int64, currency string) string {
	d, ok := decimals[strings.ToLower(currency)]
	if !ok {
		d = 2
	}
	neg := minor < 0
	if neg {
		minor = -minor
	}
	s := fmt.Sprint(minor)
	if d > 0 {
		for len(s) <= d {
			s = "0" + s
		}
		s = s[:len(s)-d] + "." + s[len(s)-d:]
	}
	if neg {
		s = "-" + s
	}
	return s
}

// Money formats minor units for a person: "70.00 GBP", "1234 JPY".
func Money(minor int64, currency string) string {
	return strings.TrimSpace(MajorUnits(minor, currency) + " " + strings.ToUpper(currency))
}
