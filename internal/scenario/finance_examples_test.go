package scenario_test

import (
	"bytes"
	"context"
	"flag"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/reconciler/reconciler/internal/pgtest"
	"github.com/reconciler/reconciler/internal/webhooksim"
	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/providers/stripe"
	"github.com/reconciler/reconciler/providers/stripe/stripefake"
	"github.com/reconciler/reconciler/reconcile"
	"github.com/reconciler/reconciler/report"
	"github.com/reconciler/reconciler/verify"
)

var updateExamples = flag.Bool("update-examples", false, "rewrite docs/examples/finance-*.{md,txt}")

// TestFinanceExamples makes the finance examples of the README: a quarter
// of Stripe payments (the first two months older than the event log) with
// lost webhooks and one payment canceled locally by hand; the run over the
// quarter (docs/examples/finance-run.md: which part was listed, the money
// per currency on both sides, the flag, the items) and a verify sample of
// it (docs/examples/finance-verify.txt). Under -update-examples it writes
// them; otherwise it checks what they must say.
func TestFinanceExamples(t *testing.T) {
	db := pgtest.New(t)
	ctx := context.Background()
	now := time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	fake := stripefake.New(stripefake.Options{Now: clock, Seed: 15})
	url := fake.Start()
	t.Cleanup(fake.Close)
	acct := fake.Account("")
	since := time.Date(2026, 7, 1, 0, 0, 0, 0, time.UTC)
	acct.Generate(stripefake.GenOptions{Payments: 600, Start: since, End: now.Add(-time.Hour), Seed: 15})
	ds := lose(webhooksim.Stripe(acct.Deliveries()), 15)
	_, _, err := webhooksim.Seed(ctx, db.DB, "stripe", ds, now, func(int, webhooksim.Delivery) bool { return true })
	require.NoError(t, err)
	// Someone canceled a captured payment by hand in August.
	var hand models.Payment
	require.NoError(t, db.Where("provider = 'stripe' AND state = 'captured'").Order("provider_id").First(&hand).Error)
	aug := time.Date(2026, 8, 20, 12, 0, 0, 0, time.UTC)
	require.NoError(t, db.Model(&hand).Updates(map[string]any{"state": "canceled", "source_updated_at": aug}).Error)

	p, err := stripe.New(stripe.Config{APIKey: "sk_test_finance", BaseURL: url})
	require.NoError(t, err)
	res, err := reconcile.Run(ctx, reconcile.Options{DB: db.DB, Provider: p, Since: since, Until: now, Now: clock, StuckLimit: -1})
	require.NoError(t, err)
	var md bytes.Buffer
	require.NoError(t, report.Write(ctx, &md, db.DB, "md", res.Run.ID))

	seed := uint64(20261001)
	rep, err := verify.Run(ctx, verify.Options{DB: db.DB, Provider: stripe.Name, Reader: p.Verifier(), Since: since, Until: now,
		Sample: 200, Seed: &seed, Now: clock})
	require.NoError(t, err)
	out := verify.NewOutput(false, 200, seed)
	out.Add(rep)
	var txt bytes.Buffer
	require.NoError(t, out.WriteTable(&txt, func(verify.Report) string { return "platform" }))

	for path, body := range map[string]string{"../../docs/examples/finance-run.md": md.String(), "../../docs/examples/finance-verify.txt": txt.String()} {
		if *updateExamples {
			require.NoError(t, os.WriteFile(path, []byte(body), 0o644))
			continue
		}
		_, err := os.Stat(path)
		require.NoError(t, err, "run go test ./internal/scenario -run TestFinanceExamples -update-examples")
	}
	page := md.String()
	require.Contains(t, page, "totals differ from the provider")
	require.Less(t, strings.Index(page, "totals differ from the provider"), strings.Index(page, hand.ProviderID), "flagged before any item")
	require.Contains(t, page, "as the provider has it")
	require.Contains(t, page, "| read | object listing for 2026-07-01T00:00:00Z → 2026-09-01T00:00:00Z (older than the provider's event log, which begins at 2026-09-01T00:00:00Z); the event log for 2026-09-01T00:00:00Z → 2026-10-01T00:00:00Z |")
	require.Contains(t, txt.String(), "200")
	require.Contains(t, txt.String(), "(95% confidence)")
}
