package stripe

import (
	"context"
	"fmt"

	stripego "github.com/stripe/stripe-go/v76"
)

// ConnectedAccounts lists the ids (acct_…) of the platform's connected
// accounts, GET /v1/accounts, 100 a page, in Stripe's order (newest first).
// The platform itself is not among them. Each page is one request through
// the provider's transport, so it counts against the same budget as the
// runs that follow.
func (p *Provider) ConnectedAccounts(ctx context.Context) ([]string, error) {
	params := &stripego.AccountListParams{ListParams: stripego.ListParams{Context: ctx, Limit: stripego.Int64(100)}}
	it := p.api.Accounts.List(params)
	var ids []string
	for it.Next() {
		if a := it.Account(); a != nil && a.ID != "" {
			ids = append(ids, a.ID)
		}
	}
	if err := it.Err(); err != nil {
		return ids, fmt.Errorf("list stripe connected accounts: %w", translate(err))
	}
	return ids, nil
}
