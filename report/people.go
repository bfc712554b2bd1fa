package report

import (
	"fmt"
	"sort"
	"strings"

	"github.com/reconciler/reconciler/acks"
	"github.com/reconciler/reconciler/models"
)

// What the reports meant for people (Markdown, HTML, text) share: how a
// run that did not finish says so, which ratios it could not measure, and
// how its items are grouped.

// AckHint is how a person acknowledges an item; the reports for people
// show it once.
const AckHint = "reconciler ack FINGERPRINT... --note TEXT"

// incomplete says why a failed or interrupted run's report is not a full
// account of its window; "" for any other run. It stands where "No drift."
// would, so that a run that stopped early never reads as a clean one.
func incomplete(r RunReport) string {
	var how string
	switch r.Status {
	case models.RunFailed:
		how = "failed"
	case models.RunInterrupted:
		how = "was interrupted"
	default:
		return ""
	}
	s := "The run " + how + " before it finished, so this is not a full account of the window"
	if r.Error != nil && strings.TrimSpace(*r.Error) != "" {
		return s + ": " + strings.TrimSpace(*r.Error)
	}
	return s + "."
}

// measured reports whether a run read its whole window, so that its
// webhook miss ratio means something: a failed or interrupted run stopped
// part-way, and its ratio is of an unknown part.
func measured(r RunReport) bool {
	return r.Status != models.RunFailed && r.Status != models.RunInterrupted
}

// missRatio is a run's webhook miss ratio as a percentage, or "—" when the
// run could not measure it.
func missRatio(r RunReport) string {
	if !measured(r) {
		return "—"
	}
	return percent(r.WebhookMissRatio)
}

// triageLine is "1 new, 2 still open, 1 acknowledged", or "" without
// triage data.
func triageLine(t *Triage) string {
	if t == nil {
		return ""
	}
	return fmt.Sprintf("%d new, %d still open, %d acknowledged", t.New, t.Open, t.Acknowledged)
}

// itemGroup is one section of a run's items: those needing a human split
// by status, then the repaired ones.
type itemGroup struct {
	// Key is acks.StatusNew, acks.StatusOpen, acks.StatusAcknowledged,
	// "human" (needing a human, not triaged: a hand-built report) or
	// "repaired".
	Key, Title string
	// Intro is one sentence about the group; "" when there is nothing to
	// say.
	Intro string
	Items []Item
}

// Human reports whether the group's items need a human.
func (g itemGroup) Human() bool { return g.Key != "repaired" }

// groupItems splits a run's items into the sections every report for
// people shows, in this order: new since the last run, still open,
// acknowledged, needing a human but not triaged, repaired. Empty groups
// are left out; within a group refused items come before reported ones,
// in the order given otherwise. r.Items is not reordered.
func groupItems(r RunReport) []itemGroup {
	prev := ""
	if r.Triage != nil && r.Triage.PreviousRunID != nil {
		prev = fmt.Sprintf("run %d", *r.Triage.PreviousRunID)
	}
	newIntro := ""
	switch {
	case prev != "":
		newIntro = "The previous run (" + prev + ") did not have them."
	case r.Triage != nil:
		newIntro = "There is no earlier succeeded run of this provider and account to compare with."
	}
	openIntro := "The previous run had them too, and nobody has acknowledged them."
	if prev != "" {
		openIntro = "The previous run (" + prev + ") had them too, and nobody has acknowledged them."
	}
	repaired := itemGroup{Key: "repaired", Title: "Repaired"}
	if r.DryRun {
		repaired = itemGroup{Key: "repaired", Title: "Would repair", Intro: "A dry run: nothing was changed."}
	}
	groups := []itemGroup{
		{Key: acks.StatusNew, Title: "New since the last run", Intro: newIntro},
		{Key: acks.StatusOpen, Title: "Still open", Intro: openIntro},
		{Key: acks.StatusAcknowledged, Title: "Acknowledged",
			Intro: "Someone looked at them and left them alone; each comes back as new if the provider's state changes."},
		{Key: "human", Title: "Needs a human", Intro: "Refused or reported: nothing was changed for them."},
		repaired,
	}
	index := map[string]int{}
	for i, g := range groups {
		index[g.Key] = i
	}
	for _, it := range r.Items {
		key := "repaired"
		if it.NeedsHuman() {
			key = it.Status
			if _, ok := index[key]; !ok || key == "repaired" {
				key = "human"
			}
		}
		g := &groups[index[key]]
		g.Items = append(g.Items, it)
	}
	out := groups[:0]
	for _, g := range groups {
		// Refused before reported; the order given otherwise.
		sort.SliceStable(g.Items, func(i, j int) bool { return priority(g.Items[i]) < priority(g.Items[j]) })
		if len(g.Items) > 0 {
			out = append(out, g)
		}
	}
	return out
}

// mismatchAmounts is "local 10.00 EUR, provider 12.00 EUR" for a mismatch
// item whose detail has both sides, "" otherwise.
func mismatchAmounts(it Item) string {
	if it.Kind != models.KindMismatch {
		return ""
	}
	l, p := detailAmount(it.Detail, "local"), detailAmount(it.Detail, "provider")
	if l == "" || p == "" {
		return ""
	}
	return "local " + l + ", provider " + p
}

// ackLine is "Acknowledged by alice at 2026-11-01T09:00:00Z: a note.", or
// "" for an item nobody acknowledged.
func ackLine(it Item) string {
	a := it.Acknowledged
	if a == nil {
		return ""
	}
	s := "Acknowledged by " + orDash(a.By)
	if !a.At.IsZero() {
		s += " at " + isoTime(a.At)
	}
	if n := strings.TrimSpace(a.Note); n != "" {
		return s + ": " + n
	}
	return s + "."
}
