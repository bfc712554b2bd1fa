package stripe

import (
	"regexp"
	"sync/atomic"

	stripego "github.com/stripe/stripe-go/v76"
)

// Stripe renders each event's data.object in the API version the account had
// when the event was created (its api_version), not in the version a request
// pins (docs/providers/stripe.md, section 0). The boundaries below are the
// ones that change what the mapping reads; every other version renders those
// fields alike (docs/providers/stripe.md, section 12). 2024-10-28.acacia
// sends refund.updated and refund.failed for every refund (section 13): the
// mapping reads them in any version, so that boundary needs no rule.
const (
	// versionStatusRename renamed the PaymentIntent statuses requires_source
	// and requires_source_action to requires_payment_method and
	// requires_action.
	versionStatusRename = "2019-02-11"
	// versionBasil: partially capturing (or canceling) a payment no longer
	// creates a Refund, so amount_refunded no longer counts the released
	// remainder.
	versionBasil = "2025-03-31"
	// versionPrevented adds the dispute status prevented.
	versionPrevented = "2025-08-27"
	// newestKnownVersion is the newest version whose changes were read for
	// the fields the mapping uses: the last Dahlia release (2026-08-26;
	// stripe-go v86 pins 2026-07-29.dahlia). Endive (2026-09-30) is a major
	// release whose breaking changes no source here lists. An event
	// rendered in a later version may have changed those fields: it is
	// reported, never read.
	newestKnownVersion = "2026-08-26"
)

var versionPattern = regexp.MustCompile(`^(\d{4}-\d{2}-\d{2})(\.[a-z]+)?$`)

// pinnedDate is the date of the version stripe-go v76 sends on every
// request, in which every object the provider fetches itself is rendered.
var pinnedDate = versionPattern.FindStringSubmatch(stripego.APIVersion)[1]

// versionDate returns the date of an event's api_version and whether the
// mapping knows how that version renders what it reads. An event without an
// api_version (Stripe sets it on every event since 2014, beyond the 30 days
// the log keeps) is read as the pinned version.
func versionDate(v string) (string, bool) {
	if v == "" {
		return pinnedDate, true
	}
	// An account's events share one or two versions: the last answer is
	// kept, so the pattern runs once per version change, not per event.
	if last := lastVersion.Load(); last != nil && last.v == v {
		return last.date, last.ok
	}
	date, ok := parseVersionDate(v)
	lastVersion.Store(&versionMemo{v: v, date: date, ok: ok})
	return date, ok
}

type versionMemo struct {
	v, date string
	ok      bool
}

var lastVersion atomic.Pointer[versionMemo]

func parseVersionDate(v string) (string, bool) {
	m := versionPattern.FindStringSubmatch(v)
	// A preview version (2026-02-25.preview) renders unreleased shapes.
	if m == nil || m[2] == ".preview" || m[1] > newestKnownVersion || m[1] < "2011-01-01" {
		return "", false
	}
	return m[1], true
}
