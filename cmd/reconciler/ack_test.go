package main_test

import (
	"encoding/csv"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/reconciler/reconciler/acks"
	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/report"
)

// ackWorld is a Stripe account with three payments the provider captured
// and the rows say canceled (refused conflicts: canceled is terminal), one
// run over them, and its report.
type ackWorld struct {
	*world
	pis   []string // pi_a, pi_b, pi_c in the fake's ids
	since string
}

func newAckWorld(t *testing.T) *ackWorld {
	t.Helper()
	w := &ackWorld{world: newWorld(t), since: time.Now().UTC().Add(-8 * time.Hour).Format(time.RFC3339)}
	for i := range 3 {
		at := w.now.Add(-time.Duration(5-i) * time.Hour)
		pi := w.acct.CreatePayment(1000+int64(i), "gbp", false, at)
		w.acct.Capture(pi, at.Add(30*time.Second))
		w.pis = append(w.pis, pi)
		require.NoError(t, w.db.Create(&models.Payment{Provider: "stripe", ProviderID: pi, State: models.StateCanceled, Amount: 1000 + int64(i),
			Currency: "gbp", SourceUpdatedAt: new(at.Add(time.Minute))}).Error)
	}
	return w
}

func (w *ackWorld) run(t *testing.T) report.RunReport {
	t.Helper()
	r := cli(t, w.env, "run", "--since", w.since, "--format", "json")
	require.Equal(t, 0, r.code, r.stderr)
	var rep report.Report
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep))
	return rep.Runs[0]
}

// byPayment is the run's items needing a human, by payment id.
func byPayment(t *testing.T, r report.RunReport) map[string]report.Item {
	t.Helper()
	out := map[string]report.Item{}
	for _, it := range r.Items {
		if it.NeedsHuman() {
			require.NotContains(t, out, it.ProviderID, "one item needing a human per payment here")
			out[it.ProviderID] = it
		}
	}
	return out
}

// The scenario: an acknowledged item, an acknowledged item whose
// provider state changed, an item still open and a new one, each in its
// place in every format; the counts the alerts read count only the
// unacknowledged.
func TestAckScenarioEveryFormat(t *testing.T) {
	t.Parallel()
	w := newAckWorld(t)
	first := w.run(t)
	items := byPayment(t, first)
	require.Len(t, items, 3, "%+v", first.Items)
	for _, pi := range w.pis {
		it := items[pi]
		require.Equal(t, models.ActionRefused, it.Action, "%+v", it)
		require.Equal(t, acks.StatusNew, it.Status, "nothing to compare the first run with")
		require.Equal(t, acks.Fingerprint("stripe", pi, it.Kind, it.ProviderState), it.Fingerprint)
	}
	require.Equal(t, acks.Counts{New: 3}, first.Triage.Counts)

	kept, changed := items[w.pis[0]], items[w.pis[1]]
	r := cli(t, w.env, "ack", kept.Fingerprint, changed.Fingerprint, "--note", "refunded by hand, ticket 4411", "--by", "alice")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, 2, strings.Count(r.stdout, "acknowledged "), r.stdout)
	require.Contains(t, r.stdout, kept.Fingerprint+": "+w.pis[0])
	require.Contains(t, r.stdout, "by alice")

	// The provider refunds the second payment (its state changes), and a
	// fourth payment appears with the same conflict.
	w.acct.Refund(w.pis[1], 1001, w.now.Add(-30*time.Minute))
	fresh := w.acct.CreatePayment(4000, "gbp", false, w.now.Add(-20*time.Minute))
	w.acct.Capture(fresh, w.now.Add(-20*time.Minute+30*time.Second))
	require.NoError(t, w.db.Create(&models.Payment{Provider: "stripe", ProviderID: fresh, State: models.StateCanceled, Amount: 4000,
		Currency: "gbp", SourceUpdatedAt: new(w.now.Add(-19 * time.Minute))}).Error)

	second := w.run(t)
	items = byPayment(t, second)
	require.Len(t, items, 4, "%+v", second.Items)
	require.Equal(t, acks.StatusAcknowledged, items[w.pis[0]].Status)
	require.Equal(t, &report.ItemAck{By: "alice", Note: "refunded by hand, ticket 4411", At: items[w.pis[0]].Acknowledged.At}, items[w.pis[0]].Acknowledged)
	require.NotEqual(t, changed.Fingerprint, items[w.pis[1]].Fingerprint, "the provider state is part of the fingerprint")
	require.Equal(t, acks.StatusNew, items[w.pis[1]].Status, "an acknowledged item whose provider state changed opens again")
	require.Nil(t, items[w.pis[1]].Acknowledged)
	require.Equal(t, acks.StatusOpen, items[w.pis[2]].Status, "the previous run had it and nobody acknowledged it")
	require.Equal(t, acks.StatusNew, items[fresh].Status)
	require.Equal(t, acks.Counts{New: 2, Open: 1, Acknowledged: 1}, second.Triage.Counts)
	require.Equal(t, int64(3), second.Triage.RefusedUnacknowledged)
	require.Equal(t, first.ID, *second.Triage.PreviousRunID)

	want := map[string]string{w.pis[0]: acks.StatusAcknowledged, w.pis[1]: acks.StatusNew, w.pis[2]: acks.StatusOpen, fresh: acks.StatusNew}
	// CSV: a status column, and who acknowledged and why.
	r = cli(t, w.env, "report", "--run", itoa(second.ID), "--format", "csv")
	require.Equal(t, 0, r.code, r.stderr)
	rows, err := csv.NewReader(strings.NewReader(r.stdout)).ReadAll()
	require.NoError(t, err)
	col := map[string]int{}
	for i, h := range rows[0] {
		col[h] = i
	}
	seen := 0
	for _, row := range rows[1:] {
		st, ok := want[row[col["provider_id"]]]
		if !ok || row[col["needs_human"]] != "true" {
			continue
		}
		seen++
		require.Equal(t, st, row[col["status"]], row)
		if st == acks.StatusAcknowledged {
			require.Equal(t, []string{"alice", "refunded by hand, ticket 4411"}, []string{row[col["acknowledged_by"]], row[col["acknowledged_note"]]})
		} else {
			require.Empty(t, row[col["acknowledged_by"]])
		}
	}
	require.Equal(t, 4, seen)
	// The formats for people put each item in its section.
	for _, format := range []string{"md", "html", "text"} {
		r := cli(t, w.env, "report", "--run", itoa(second.ID), "--format", format)
		require.Equal(t, 0, r.code, r.stderr)
		sections := sectionsOf(t, r.stdout, format)
		for pi, st := range want {
			require.Equal(t, st, sections[pi], "%s: the section of %s\n%s", format, pi, r.stdout)
		}
	}
}

// sectionsOf says, for each payment id in a report for people, the section
// it is listed under: the last of the section headings before it.
func sectionsOf(t *testing.T, out, format string) map[string]string {
	t.Helper()
	heads := []struct{ status, text string }{
		{acks.StatusNew, "New since the last run"}, {acks.StatusOpen, "Still open"}, {acks.StatusAcknowledged, "Acknowledged"},
	}
	found := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		for _, h := range heads {
			if strings.Contains(line, h.text) && !strings.Contains(line, "pi_") {
				found["_section"] = h.status
			}
		}
		for _, f := range strings.FieldsFunc(line, func(r rune) bool {
			return !(r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9')
		}) {
			if strings.HasPrefix(f, "pi_") && found[f] == "" && found["_section"] != "" {
				found[f] = found["_section"]
			}
		}
	}
	require.NotEmpty(t, found["_section"], "%s: no section headings", format)
	return found
}

// Bad input is exit 2 with one line naming the flag or the fingerprint,
// and writes nothing.
func TestAckBadInput(t *testing.T) {
	t.Parallel()
	w := newAckWorld(t)
	items := byPayment(t, w.run(t))
	fp := items[w.pis[0]].Fingerprint
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"ack", "--note", "x"}, "give the fingerprints"},
		{[]string{"ack", fp}, "--note"},
		{[]string{"ack", fp, "--note", "  "}, "--note"},
		{[]string{"ack", fp, "--note", "x", "--by", ""}, "--by"},
		{[]string{"ack", fp, "0123456789abcdef", "--note", "x", "--by", "alice"}, "0123456789abcdef"},
		{[]string{"ack", "pi_123", "--note", "x", "--by", "alice"}, "16 hex digits"},
		{[]string{"ack", fp, "--note", "x", "--by", "alice", "--bogus"}, "-bogus"},
	} {
		r := cli(t, w.env, c.args...)
		require.Equal(t, 2, r.code, "%v: %s", c.args, r.stderr)
		require.Equal(t, 1, strings.Count(strings.TrimSpace(r.stderr), "\n")+1, "one line: %q", r.stderr)
		require.Contains(t, r.stderr, c.want, c.args)
	}
	var n int64
	require.NoError(t, w.db.Model(&acks.Ack{}).Count(&n).Error)
	require.Zero(t, n, "nothing written")

	// $USER is who by default; --reopen takes it back.
	r := cli(t, w.with("USER", "carol"), "ack", fp, "--note", "looked")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "by carol")
	r = cli(t, w.with("USER", "carol"), "ack", "--reopen", fp, "--note", "not fixed after all")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "reopened "+fp)
	require.NoError(t, w.db.Model(&acks.Ack{}).Count(&n).Error)
	require.Equal(t, int64(2), n)
}
