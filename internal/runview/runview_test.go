package runview

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/report"
)

func TestListEmptyIsAnEmptyList(t *testing.T) {
	var b bytes.Buffer
	require.NoError(t, List(&b, "json", nil))
	require.JSONEq(t, `{"runs": []}`, b.String())
	b.Reset()
	require.NoError(t, List(&b, "table", nil))
	require.Equal(t, []string{"ID", "PROVIDER", "ACCOUNT", "STATUS", "TRIGGER", "DRY-RUN", "WINDOW", "STARTED", "DURATION",
		"EXAMINED", "REPAIRED", "REFUSED", "REPORTED"}, strings.Fields(b.String()))
}

// No value of a run record can break a line or a column: a failed run's
// multi-line error and an item's odd state stay on their lines.
func TestShowKeepsValuesOnOneLine(t *testing.T) {
	start := time.Date(2026, 11, 1, 2, 30, 0, 0, time.UTC)
	end := start.Add(1500 * time.Millisecond)
	msg := "list stripe events: boom\nFAKE LOG LINE"
	run := report.Summary(models.Run{ID: 7, Provider: "stripe", Account: "acct_1X", Status: models.RunFailed, Trigger: "schedule",
		WindowStart: start.Add(-25 * time.Hour), WindowEnd: start, StartedAt: start, FinishedAt: &end, Error: &msg})
	state := "captured\tEVIL"
	run.Items = []report.Item{{Fingerprint: "0123456789abcdef", Kind: "conflict", Action: models.ActionRefused, ProviderID: "pi_1",
		ProviderState: &state, Amount: 1250, Currency: "gbp"}}
	var b bytes.Buffer
	require.NoError(t, Show(&b, "table", run))
	lines := strings.Split(strings.TrimRight(b.String(), "\n"), "\n")
	require.Len(t, lines, 7, b.String()) // run header, run, blank, error, blank, item header, item
	require.Equal(t, []string{"7", "stripe", "acct_1X", "failed", "schedule", "false", "2026-10-31T01:30Z..2026-11-01T02:30Z",
		"2026-11-01T02:30Z", "1.5s", "0", "0", "0", "0"}, strings.Fields(lines[1]))
	require.Equal(t, "ERROR: list stripe events: boom FAKE LOG LINE", lines[3])
	require.Equal(t, []string{"0123456789abcdef", "conflict", "refused", "pi_1", "-", "captured", "EVIL", "12.50", "GBP", "-"}, strings.Fields(lines[6]))
}
