package main_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/reconciler/reconciler/internal/pgtest"
	"github.com/reconciler/reconciler/models"
)

// scripts/demo.sh seeds fake payments: with DATABASE_URL (and a chat
// webhook) set in the caller's shell it still runs on a throwaway database
// of its own, and the caller's database is left as it was.
func TestDemoScriptLeavesTheCallersDatabase(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the whole demo script")
	}
	t.Parallel()
	db := pgtest.New(t)
	script, err := filepath.Abs(filepath.Join("..", "..", "scripts", "demo.sh"))
	require.NoError(t, err)
	cmd := exec.Command("bash", script)
	cmd.Env = append(os.Environ(), "DATABASE_URL="+db.URL, "DEMO_PAYMENTS=30", "DEMO_DATABASE_URL=",
		"RECONCILER_SLACK_WEBHOOK_URL=http://127.0.0.1:1/hooks/caller", "STRIPE_API_KEY=sk_live_callers_own")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Run(), out.String())
	require.Contains(t, out.String(), "reconciler run against the fake Stripe")
	require.Contains(t, out.String(), "## Run 1: stripe")
	for _, m := range []any{&models.Payment{}, &models.Run{}, &models.WebhookEvent{}} {
		var n int64
		require.NoError(t, db.Model(m).Count(&n).Error)
		require.Zero(t, n, "%T rows in the caller's database", m)
	}
}
