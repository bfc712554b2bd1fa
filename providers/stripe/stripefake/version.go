package stripefake

import "time"

// rules are the version-dependent rendering rules of an API version.
type rules uint8

const (
	// ruleAcacia (2024-10-28.acacia and later): refund.created,
	// refund.updated and refund.failed are sent for every refund.
	ruleAcacia rules = 1 << iota
	// ruleBasil (2025-03-31.basil and later): partially capturing or
	// canceling a payment creates no Refund; amount_refunded excludes the
	// released remainder and no charge.refunded is sent.
	ruleBasil
)

// rulesOf returns the rules of version v ("YYYY-MM-DD[.name]"), comparing
// its date. A string that is not of that form is rendered like the newest
// version the fake knows, as a future version would be.
func rulesOf(v string) rules {
	if len(v) < 10 || (len(v) > 10 && v[10] != '.') {
		return ruleAcacia | ruleBasil
	}
	d := v[:10]
	if _, err := time.Parse(time.DateOnly, d); err != nil {
		return ruleAcacia | ruleBasil
	}
	var r rules
	if d >= "2024-10-28" {
		r |= ruleAcacia
	}
	if d >= "2025-03-31" {
		r |= ruleBasil
	}
	return r
}

// render is how one response or event object is rendered: the rules of its
// API version and the time balance transaction statuses are judged at (the
// server's clock for fetched objects, the event's created for event data).
type render struct {
	rules rules
	now   int64
}

func (r render) basil() bool { return r.rules&ruleBasil != 0 }

// SetAPIVersion sets the API version of the account's events from now on:
// events emitted after the call carry "api_version": v and their
// data.object is rendered as v renders it (2025-03-31.basil and later: a
// partial capture or a cancellation creates no Refund, amount_refunded
// excludes the released remainder and no charge.refunded is sent;
// 2024-10-28.acacia and later: every refund also emits refund.created,
// refund.updated and refund.failed). Any string is accepted; one that is
// not a date, or a future date, gets the newest rules the fake knows.
// Objects fetched through the API are rendered in the request's
// Stripe-Version (default APIVersion), never in v. The default is
// APIVersion. It emits nothing and implies nothing.
func (a *Account) SetAPIVersion(v string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	c, ok := a.verIdx[v]
	if !ok {
		c = uint16(len(a.vers))
		a.vers = append(a.vers, v)
		a.verRules = append(a.verRules, rulesOf(v))
		a.verIdx[v] = c
	}
	a.ver = c
}

// rulesNow are the rules of the events the account emits now.
func (a *Account) rulesNow() rules { return a.verRules[a.ver] }
