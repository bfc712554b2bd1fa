package gcfake

// SetPayoutAmount sets payout po's amount to amount (minor units) without
// touching its items, so that it no longer equals the sum of its payout
// items: a payout that does not reconcile, for the payout reconciliation
// tests (reconciler payouts). It emits no event and panics on an unknown
// payout.
func (s *Server) SetPayoutAmount(po string, amount int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.payouts[s.mustPayout(po)].amount = amount
}
