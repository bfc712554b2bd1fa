package stripe

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	stripego "github.com/stripe/stripe-go/v76"

	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/reconcile"
)

// payoutEventEach maps a payout event (docs/providers/stripe.md, sections 4, 5,
// 15 and 16). payout.paid settles every charge the payout's balance
// transactions name; while Stripe is still assigning transactions to it
// (reconciliation_status in_progress) that list may be short, so
// payout.reconciliation_completed lists it again once it is complete. A
// payout requested by hand cannot be listed at all: its account settles by
// balance availability (settleAvailable). payout.failed and payout.canceled
// after paid make each payment it paid out a conflict naming it.
//
// Each change goes to emit as its balance transaction is read, so that a
// payout of 70,000 charges is never held whole (the event stream and the
// object listing both stream it).
func (p *Provider) payoutEventEach(ctx context.Context, account string, base reconcile.Change, typ string, po leanPayout, ahead *btAheads, emit func(reconcile.Change) error) error {
	if po.Manual {
		p.log.Debug("manual payout: Stripe lists no balance transactions for it", "payout_id", po.ID, "event_id", base.EventID)
		return nil
	}
	switch typ {
	case "payout.paid", "payout.reconciliation_completed":
		if typ == "payout.paid" && po.Reconciliation == string(stripego.PayoutReconciliationStatusInProgress) {
			p.log.Info("payout still being reconciled at Stripe: its list is read now and again at payout.reconciliation_completed", "payout_id", po.ID)
		}
		if typ == "payout.paid" {
			return p.payoutChangesEach(ctx, account, base, po.ID, ahead, emit)
		}
		// The settlement happened when the payout was paid, which this
		// event does not say: its arrival_date is the nearest time the
		// payout carries (inferred). A payout.paid of the run dates it
		// instead (reconcile.Decide).
		t := base.At
		if po.ArrivalDate > 0 && po.ArrivalDate <= base.At.Unix() {
			t = at(po.ArrivalDate)
		}
		return p.payoutChangesEach(ctx, account, base, po.ID, ahead, func(c reconcile.Change) error {
			c.At, c.Inferred = t, true
			return emit(c)
		})
	case "payout.failed", "payout.canceled":
		status := strings.TrimPrefix(typ, "payout.")
		return p.payoutChangesEach(ctx, account, base, po.ID, ahead, func(c reconcile.Change) error {
			c.State, c.PayoutID, c.View, c.ViewCurrent = models.StateNone, "", false, false
			c.RawStatus = "payout_" + status
			c.Revert = fmt.Sprintf("Payout %s that paid this payment out %s at Stripe after it was paid; settled_at and payout_id still name it.", po.ID, status)
			return emit(c)
		})
	}
	return nil
}

// manualPayoutMessage is the error Stripe answers when a balance
// transaction list is filtered on a manual payout (docs/providers/stripe.md,
// section 15).
const manualPayoutMessage = "can only be filtered on automatic"

func isManualPayoutRefusal(err error) bool {
	var se *stripego.Error
	return errors.As(err, &se) && se.HTTPStatusCode == http.StatusBadRequest && strings.Contains(se.Msg, manualPayoutMessage)
}

// schedule is how an account pays out: GET /v1/account,
// settings.payouts.schedule.
type schedule struct {
	manual    bool
	delayDays int64
}

// leanAccount is what payoutSchedule reads of GET /v1/account. stripe-go's
// Account is hundreds of types deep: encoding/json building their decoders
// was 15 ms of every run's CPU, a tenth of a small run's.
type leanAccount struct {
	stripego.APIResource
	Settings struct {
		Payouts struct {
			Schedule *struct {
				Interval  stripego.AccountSettingsPayoutsScheduleInterval `json:"interval"`
				DelayDays int64                                           `json:"delay_days"`
			} `json:"schedule"`
		} `json:"payouts"`
	} `json:"settings"`
}

// payoutSchedule reads the account's payout schedule once per provider. An
// account Stripe will not describe to this key (a restricted key, a fake
// without the endpoint) is read as paying out automatically, with a warning:
// that is Stripe's default schedule.
func (p *Provider) payoutSchedule(ctx context.Context, account string) (schedule, error) {
	p.schedMu.Lock()
	defer p.schedMu.Unlock()
	if s, ok := p.schedules[account]; ok {
		return s, nil
	}
	params := &stripego.AccountParams{Params: stripego.Params{Context: ctx}}
	if account != "" {
		params.SetStripeAccount(account)
	}
	var acct leanAccount
	err := p.api.Accounts.B.Call(http.MethodGet, "/v1/account", p.api.Accounts.Key, params, &acct)
	var s schedule
	var se *stripego.Error
	switch {
	case errors.As(err, &se) && se.HTTPStatusCode >= 400 && se.HTTPStatusCode < 500 && se.HTTPStatusCode != http.StatusTooManyRequests:
		p.log.Warn("stripe did not describe the account's payout schedule; read as automatic payouts", "account", account, "error", translate(err))
	case err != nil:
		return s, fmt.Errorf("get stripe account: %w", translate(err))
	case acct.Settings.Payouts.Schedule != nil:
		s.manual = acct.Settings.Payouts.Schedule.Interval == stripego.AccountSettingsPayoutsScheduleIntervalManual
		s.delayDays = acct.Settings.Payouts.Schedule.DelayDays
	}
	if p.schedules == nil {
		p.schedules = map[string]schedule{}
	}
	p.schedules[account] = s
	return s, nil
}

// availabilityLookback is how long before the window a charge's balance
// transaction may have been created and still become available inside it,
// beyond the account's delay_days (weekends and holidays push availability
// out; Stripe documents no bound).
const availabilityLookback = 7 * 24 * time.Hour

// settleAvailable finds, on an account that pays out by hand, the charges
// whose balance transaction became available in [since, until): DESIGN
// section 3 makes those settled, at available_on, with no payout.
func (p *Provider) settleAvailable(ctx context.Context, account string, since, until time.Time, delayDays int64, fn func([]reconcile.Change) error) error {
	from := since.Add(-time.Duration(delayDays)*24*time.Hour - availabilityLookback)
	params := &stripego.BalanceTransactionListParams{
		ListParams:   listParams(ctx, account, 100),
		CreatedRange: &stripego.RangeQueryParams{GreaterThanOrEqual: from.Unix(), LesserThan: until.Unix()},
	}
	params.AddExpand("data.source")
	it := p.btIter(params)
	var out []reconcile.Change
	for it.Next() {
		bt := it.Current().(*leanBT)
		if c, ok := availableChange(bt, since, until); ok {
			out = append(out, c)
		}
		if len(out) >= maxChangesPerPage {
			if err := fn(out); err != nil {
				return err
			}
			out = nil
		}
	}
	if err := it.Err(); err != nil {
		if !unsupported(err) {
			return fmt.Errorf("list stripe balance transactions: %w", translate(err))
		}
		p.log.Warn("stripe did not list the balance transactions of the window; charges of this manual-payout account are settled by the stuck path", "account", account, "error", translate(err))
	}
	if len(out) > 0 {
		return fn(out)
	}
	return nil
}

// availableChange is the settlement a charge's available balance
// transaction establishes on a manual-payout account.
func availableChange(bt *leanBT, since, until time.Time) (reconcile.Change, bool) {
	if bt.Source.Object != "charge" || bt.Source.PaymentIntent == "" || !bt.Source.Captured ||
		bt.Status != string(stripego.BalanceTransactionStatusAvailable) || bt.AvailableOn == 0 {
		return reconcile.Change{}, false
	}
	t := at(bt.AvailableOn)
	if t.Before(since) || !t.Before(until) {
		return reconcile.Change{}, false
	}
	id := string(bt.Source.PaymentIntent)
	c := reconcile.Change{ProviderID: id, State: models.StateSettled, At: t, RawStatus: "available",
		Amount: bt.Source.Amount, Currency: bt.Source.Currency, Inferred: true,
		EventType: "reconciler.balance_transaction.available"}
	c.EventID = reconcile.SyntheticEventID(id, models.StateSettled, t)
	c.View, c.ViewCurrent = true, true
	c.Refunded, c.AmountRefunded = bt.Source.Refunded, capturedRefunds(&bt.Source.leanCharge, pinnedDate)
	c.AmountCaptured = partialCapture(&bt.Source.leanCharge)
	c.Payload, _ = json.Marshal(map[string]any{"object": "balance_transaction", "id": bt.ID, "type": bt.Type,
		"status": bt.Status, "available_on": bt.AvailableOn, "created": bt.Created, "source": bt.Source.ID, "payment_intent": id})
	return c, true
}
