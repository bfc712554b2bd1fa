package stripefake

// SetPayoutAmount sets payout's amount to amount (minor units) without
// touching its balance transactions, so that it no longer equals the sum of
// their net: a payout that does not reconcile, for the payout
// reconciliation tests (reconciler payouts). It emits no event and panics
// on an unknown payout.
func (a *Account) SetPayoutAmount(payout string, amount int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.payouts[a.mustPayout(payout)].amount = amount
}
