// Package notify posts a reconciliation run's summary to chat, at most once
// per run and channel however often the job is retried or rerun.
//
// A message carries run metadata, counts and, for each item that needs a
// human, the payment id, kind, states, amount and explanation: never an
// item's Detail, customer data or raw provider payloads.
package notify

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/report"
)

// MaxListed is how many refused or reported items a message lists; the rest
// are counted as "and N more".
const MaxListed = 20

// Field limits (in runes, before escaping) keep every Slack text object well
// under its 3000-character limit even when every character is escaped.
const (
	maxIDLen          = 80
	maxShortLen       = 40
	maxExplanationLen = 300
	maxLinkLen        = 500
)

// block is the subset of Slack's Block Kit used here. Only these fields
// exist, so nothing else can reach the payload.
type block struct {
	Type   string    `json:"type"`
	Text   *textObj  `json:"text,omitempty"`
	Fields []textObj `json:"fields,omitempty"`
}

type textObj struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

type payload struct {
	Text   string  `json:"text"`
	Blocks []block `json:"blocks"`
}

func mrkdwn(s string) textObj { return textObj{Type: "mrkdwn", Text: s} }

func section(s string) block { t := mrkdwn(s); return block{Type: "section", Text: &t} }

// Message builds the Slack payload (Slack's incoming-webhook format:
// {"text": fallback, "blocks": [...]}) for a run: a header with run id,
// provider, account, window and status (a failed or interrupted run says
// so in its first line and in the fallback text, and that its counts are
// partial); the counts (examined, repaired, refused, reported, synthetic
// events, webhook miss ratio, "—" when it was not measured: the run did not
// succeed or read no events); the refused and reported items (payment id,
// kind, local → provider state, amount in major units and currency,
// explanation), refused first, at most MaxListed then "and N more"; and
// link when it is not "". Every text is Slack mrkdwn with &, < and >
// escaped; an item's Detail is never read.
func Message(r report.RunReport, link string) ([]byte, error) {
	acct := r.Account
	if acct == "" {
		acct = "platform"
	}
	verb := ""
	switch r.Status {
	case models.RunFailed:
		verb = " FAILED"
	case models.RunInterrupted:
		verb = " was INTERRUPTED"
	}
	title := fmt.Sprintf("Reconciliation run %d%s: %s, %s", r.ID, verb, clip(r.Provider, maxShortLen), clip(acct, maxIDLen))
	if r.DryRun {
		title += " (dry run)"
	}
	header := fmt.Sprintf("*%s*\nwindow %s → %s · status %s", esc(title),
		r.WindowStart.UTC().Format(time.RFC3339), r.WindowEnd.UTC().Format(time.RFC3339), esc(clip(r.Status, maxShortLen)))
	if verb != "" {
		header += "\nThe run did not finish: its counts cover only what it reached, and the rest of the window was not checked."
		if r.Error != nil && *r.Error != "" {
			header += "\nError: " + esc(clip(*r.Error, maxExplanationLen))
		}
	}
	ratio := "—" // not measured: the run stopped early, or read no events
	if r.Status == models.RunSucceeded && r.EventsRead > 0 {
		ratio = fmt.Sprintf("%.2f%%", 100*r.WebhookMissRatio)
	}

	counts := block{Type: "section", Fields: []textObj{
		mrkdwn(fmt.Sprintf("*Examined*\n%d", r.Examined)),
		mrkdwn(fmt.Sprintf("*Repaired*\n%d", r.Repaired)),
		mrkdwn(fmt.Sprintf("*Refused*\n%d", r.Refused)),
		mrkdwn(fmt.Sprintf("*Reported*\n%d", r.Reported)),
		mrkdwn(fmt.Sprintf("*Synthetic events*\n%d", r.SyntheticEvents)),
		mrkdwn("*Webhook miss ratio*\n" + ratio),
	}}
	p := payload{
		Text: esc(fmt.Sprintf("%s: examined %d, repaired %d, refused %d, reported %d", title,
			r.Examined, r.Repaired, r.Refused, r.Reported)),
		Blocks: []block{section(header), counts},
	}

	var human []report.Item
	for _, it := range r.Items {
		if it.NeedsHuman() && it.Action == models.ActionRefused {
			human = append(human, it)
		}
	}
	for _, it := range r.Items {
		if it.NeedsHuman() && it.Action != models.ActionRefused {
			human = append(human, it)
		}
	}
	switch {
	case len(human) == 0 && verb != "":
		p.Blocks = append(p.Blocks, section("No item needing a human was found before the run stopped; the rest of the window was not checked."))
	case len(human) == 0:
		p.Blocks = append(p.Blocks, section("Nothing needs a human."))
	default:
		p.Blocks = append(p.Blocks, section(fmt.Sprintf("*%d item(s) need a human:*", len(human))))
	}
	for i, it := range human {
		if i == MaxListed {
			p.Blocks = append(p.Blocks, section(fmt.Sprintf("and %d more", len(human)-MaxListed)))
			break
		}
		p.Blocks = append(p.Blocks, section(itemText(it)))
	}
	if link != "" {
		p.Blocks = append(p.Blocks, section(linkText(link)))
	}
	return json.Marshal(p)
}

func itemText(it report.Item) string {
	amount := "—"
	if it.Currency != "" {
		amount = report.MajorUnits(it.Amount, it.Currency) + " " + strings.ToUpper(clip(it.Currency, maxShortLen))
	}
	expl := it.Explanation
	if expl == "" {
		expl = "—"
	}
	return fmt.Sprintf("*%s* `%s` %s: %s → %s, %s\n%s",
		esc(clip(it.Action, maxShortLen)), esc(clip(it.ProviderID, maxIDLen)), esc(clip(it.Kind, maxShortLen)),
		esc(clip(state(it.LocalState), maxShortLen)), esc(clip(state(it.ProviderState), maxShortLen)),
		esc(amount), esc(clip(expl, maxExplanationLen)))
}

// linkText makes an http(s) link clickable (<url|Full report>) and shows
// anything else, such as a file path, as text.
func linkText(link string) string {
	link = clip(link, maxLinkLen)
	if strings.HasPrefix(link, "https://") || strings.HasPrefix(link, "http://") {
		u := strings.ReplaceAll(esc(link), "|", "%7C")
		return "<" + u + "|Full report>"
	}
	return "Full report: " + esc(link)
}

func state(p *string) string {
	if p == nil || *p == "" {
		return "—"
	}
	return *p
}

// esc escapes the three characters Slack mrkdwn gives meaning to (links,
// mentions), as Slack's documentation asks.
func esc(s string) string {
	s = strings.ReplaceAll(s, "&", "&amp;")
	s = strings.ReplaceAll(s, "<", "&lt;")
	return strings.ReplaceAll(s, ">", "&gt;")
}

// clip cuts s to at most n runes, marking the cut with "…".
func clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
