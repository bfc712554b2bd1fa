package stripe

import (
	"context"
	"strings"

	"github.com/reconciler/reconciler/reconcile"
)

// mapEvent is every change one event maps to, as ListChanges hands them on
// (payoutEach for a payout's, mapOne for a payment's), collected: the
// mapping's tests and benchmarks read it one event at a time.
func (p *Provider) mapEvent(ctx context.Context, account string, ev *leanEvent) ([]reconcile.Change, error) {
	if strings.HasPrefix(ev.Type, "payout.") {
		var out []reconcile.Change
		err := p.payoutEach(ctx, account, ev, nil, func(c reconcile.Change) error {
			out = append(out, c)
			return nil
		})
		return out, err
	}
	c, ok, err := mapOne(ev)
	if !ok || err != nil {
		return nil, err
	}
	return []reconcile.Change{c}, nil
}
