package verify

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Confidence is the confidence level of UpperBound.
const Confidence = 0.95

// UpperBound is the largest share of wrong payments among a population of
// population that is consistent, at 95% confidence, with finding none
// wrong in a uniform sample of n drawn without replacement: K/population
// for the largest K whose chance of showing 0 wrong in n draws is still
// at least 5% (so that every larger K would have shown one with 95%
// probability). It is exact — the hypergeometric P(0 of n | K of N) =
// C(N-K, n)/C(N, n) — so it is 0 when the sample is (nearly) the whole
// population, and 1 - 0.05^(1/n) (≈ 3/n, the rule of three) when n is
// small beside it. ok is false when there is no sample (n < 1 or
// population < 1).
func UpperBound(n, population int) (bound float64, wrong int, ok bool) {
	if n < 1 || population < 1 {
		return 0, 0, false
	}
	n = min(n, population)
	alpha := math.Log(1 - Confidence)
	// p0 is log P(0 wrong in n draws | k wrong of population); it falls
	// as k grows and is -Inf once k > population - n.
	p0 := func(k int) float64 {
		if k > population-n {
			return math.Inf(-1)
		}
		s := 0.0
		for i := range n {
			s += math.Log1p(-float64(k) / float64(population-i))
		}
		return s
	}
	// The smallest k with p0(k) < alpha lies in [1, population-n+1].
	lo, hi := 1, population-n+1
	for lo < hi {
		mid := lo + (hi-lo)/2
		if p0(mid) < alpha {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	wrong = lo - 1
	return float64(wrong) / float64(population), wrong, true
}

// Statement is the one sentence a finance reviewer reads: what was
// checked and what it shows, e.g. "0 of 1,000 sampled differ: fewer than
// 0.3% of the 48,213 payments of the window are wrong (95% confidence)".
func Statement(r Report) string {
	unexplained := r.Differing - r.Explained
	found := fmt.Sprintf("%s of %s payments differ", Count(r.Differing), Count(r.Checked))
	if !r.All {
		found = fmt.Sprintf("%s of %s sampled differ", Count(r.Differing), Count(r.Checked))
	}
	switch {
	case r.Population == 0:
		return "no payments in the window: nothing to check"
	case r.Differing > 0 && unexplained == 0 && r.UpperBound != nil && !r.All:
		return fmt.Sprintf("%s, each explained by a drift item: %s of the %s payments of the window have a difference no drift item explains (95%% confidence)",
			found, Percent(*r.UpperBound), Count(r.Population))
	case r.Differing > 0:
		return fmt.Sprintf("%s (%s explained by a drift item, %s unexplained) among the %s payments of the window",
			found, Count(r.Explained), Count(unexplained), Count(r.Population))
	case r.All || r.Checked >= r.Population:
		return fmt.Sprintf("%s: none of the %s payments of the window is wrong", found, Count(r.Population))
	case r.UpperBound == nil:
		return found
	case *r.UpperBound == 0:
		return fmt.Sprintf("%s: none of the %s payments of the window is wrong (95%% confidence)", found, Count(r.Population))
	}
	return fmt.Sprintf("%s: %s of the %s payments of the window are wrong (95%% confidence)", found, Percent(*r.UpperBound), Count(r.Population))
}

// Percent writes an upper bound for a reader: rounded up to two
// significant digits, "fewer than 0.3%" when that is above the bound and
// "at most 25%" when it is the bound itself.
func Percent(bound float64) string {
	// 12 significant digits: 6/60 is 10%, not 10.000000000000002%.
	p, _ := strconv.ParseFloat(strconv.FormatFloat(bound*100, 'g', 12, 64), 64)
	if p <= 0 {
		return "at most 0%"
	}
	decimals := max(0, 1-int(math.Floor(math.Log10(p))))
	scale := math.Pow(10, float64(decimals))
	up := math.Ceil(p*scale) / scale
	s := strconv.FormatFloat(up, 'f', decimals, 64)
	if strings.Contains(s, ".") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	if up > p {
		return "fewer than " + s + "%"
	}
	return "at most " + s + "%"
}

// Count writes n with thousands separators: 48,213.
func Count(n int) string {
	s := strconv.Itoa(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}
