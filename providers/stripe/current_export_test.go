package stripe

import "context"

// NewestDisputeID exposes the dispute lookup of Verifier to the external
// tests (stripe-mock's fixture charge is not disputed, so Current never
// lists disputes there).
func (v *Verifier) NewestDisputeID(ctx context.Context, account, pi string) (string, error) {
	d, err := v.newestDispute(ctx, account, pi)
	if err != nil || d == nil {
		return "", err
	}
	return d.ID, nil
}
