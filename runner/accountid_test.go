package runner

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/reconciler/reconciler/config"
)

func TestValidAccountID(t *testing.T) {
	for _, ok := range []string{"acct_1", "acct_1032D82eZvKYlo2C", "acct_" + strings.Repeat("a", MaxAccountIDLen)} {
		require.True(t, ValidAccountID(ok), ok)
	}
	for _, bad := range []string{"", "acct_", "acct", "cus_1", "ACCT_1", " acct_1", "acct_1 ", "acct_1\nFAKE LOG LINE", "acct_1\r",
		"acct_1'; DROP TABLE payments; --", "acct_1\u202e", "acct_é", "acct_1-2", "acct_1_2", "acct_" + strings.Repeat("a", MaxAccountIDLen+1),
		"acct_" + strings.Repeat("a", 100000), "acct_1\x00"} {
		require.False(t, ValidAccountID(bad), "%q", bad)
	}
}

func TestPlanRejectsAccountsNotOfTheProvidersSyntax(t *testing.T) {
	cfg, err := config.Load("/nonexistent", false, func(k string) string {
		if k == "STRIPE_API_KEY" {
			return "sk_test_x"
		}
		return ""
	}, func(string) ([]byte, error) { return nil, os.ErrNotExist })
	require.NoError(t, err)
	_, err = Plan(cfg, nil, []string{"acct_1\nFAKE LOG LINE"})
	require.ErrorContains(t, err, "--account")
	require.NotContains(t, err.Error(), "\n")
	_, err = Plan(cfg, nil, []string{"acct_" + strings.Repeat("x", 100000)})
	require.Less(t, len(err.Error()), 300)
	cfg.Providers.Stripe.Accounts = []string{"", "acct_ok", "acct_1'; --"}
	_, err = Plan(cfg, nil, nil)
	var ce *config.Error
	require.ErrorAs(t, err, &ce)
	require.Equal(t, "providers.stripe.accounts[2]", ce.Key)
	jobs, err := Plan(cfg, nil, []string{"acct_1"})
	require.NoError(t, err)
	require.Len(t, jobs, 1)
}
