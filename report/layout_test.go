package report

import (
	"fmt"
	"strings"
	"time"

	"github.com/reconciler/reconciler/models"
)

// layoutSample is a run with an item in every section (new since the last
// run, still open, acknowledged, repaired), long explanations, a long
// payment id and a mismatch: what a page must lay out without horizontal
// scrolling.
func layoutSample() Report {
	at := time.Date(2026, 11, 3, 2, 0, 0, 0, time.UTC)
	long := "The provider says this payment was refunded after it was settled and paid out, but our row was moved to chargeback " +
		"by a webhook that arrived later with an older timestamp; the state machine cannot go from chargeback to refunded, " +
		"so nothing was changed and a person must decide which of the two is right before the next payout is reconciled."
	r := RunReport{ID: 41, Provider: "stripe", Account: "acct_1NabcdefghijklmnopqrstUV", Mode: "live", Status: "succeeded",
		WindowStart: at.Add(-25 * time.Hour), WindowEnd: at, StartedAt: at, FinishedAt: ptr(at.Add(90 * time.Second)), DurationSeconds: 90,
		Trigger: "schedule", TriggeredBy: "cron", Examined: 48210, InSync: 48180, Repaired: 24, Refused: 3, Reported: 3,
		EventsRead: 5120, SyntheticEvents: 24, WebhookMissRatio: 24.0 / 5120, APIRequests: 61,
		Triage: &Triage{PreviousRunID: ptr(int64(40))}}
	r.Triage.New, r.Triage.Open, r.Triage.Acknowledged, r.Triage.RefusedUnacknowledged = 2, 2, 2, 2
	add := func(it Item) { it.Detail = map[string]any{}; r.Items = append(r.Items, it) }
	add(Item{ProviderID: "pi_3QxYzAbCdEfGhIjKlMnOpQrStUvWxYz0123456789", Kind: models.KindConflict, Action: models.ActionRefused,
		LocalState: ptr("chargeback"), ProviderState: ptr("refunded"), Amount: 123456, Currency: "gbp", AmountRefunded: 123456,
		ProviderTime: ptr(at.Add(-3 * time.Hour)), Explanation: long, Status: "new"})
	add(Item{ProviderID: "pi_mismatch_0001", Kind: models.KindMismatch, Action: models.ActionReported, LocalState: ptr("captured"),
		ProviderState: ptr("captured"), Amount: 1000, Currency: "eur", Status: "new",
		Explanation: "The amount or currency recorded locally (10.00 EUR) differs from the provider's (12.00 EUR); the amount was never changed, because an amount is the customer's contract and only a person may correct it."})
	r.Items[1].Detail = map[string]any{"local_amount": 1000.0, "local_currency": "eur", "provider_amount": 1200.0, "provider_currency": "eur"}
	add(Item{ProviderID: "PM01HQZX8Y7W6V5T4S3R2Q1P0N", Kind: models.KindUnknownStatus, Action: models.ActionReported, LocalState: ptr("pending_submission"),
		ProviderState: ptr("requires_reauthorization_by_the_customer_bank"), Status: "open",
		Explanation: `Provider status "requires_reauthorization_by_the_customer_bank" is not one this job knows, so it was never guessed; ` + long})
	add(Item{ProviderID: "pi_stale_0002", Kind: models.KindStale, Action: models.ActionRefused, LocalState: ptr("settled"), ProviderState: ptr("captured"),
		Amount: 5000, Currency: "usd", Status: "open", ProviderTime: ptr(at.Add(-5 * time.Hour)), TimeInferred: true,
		Explanation: "Our row was set by a newer fact (settled at 01:10) than the provider's (captured at 00:55); it was left alone. " + long})
	add(Item{ProviderID: "pi_ack_0003", Kind: models.KindConflict, Action: models.ActionRefused, LocalState: ptr("refunded"), ProviderState: ptr("captured"),
		Amount: 700, Currency: "gbp", Status: "acknowledged", Explanation: long,
		Acknowledged: &ItemAck{By: "maria.gonzalez@support.example.com", At: at.Add(-20 * time.Hour),
			Note: "Refunded by hand through the bank on 2026-11-01 after the customer called; Stripe will keep saying captured, leave it. Ticket SUP-48213."}})
	add(Item{ProviderID: "pi_ack_dispute_0004", Kind: models.KindDispute, Action: models.ActionReported, LocalState: ptr("captured"), ProviderState: ptr("captured"),
		Amount: 4000, Currency: "gbp", Status: "acknowledged", Explanation: "The customer's bank disputes the payment; Stripe withdrew 40.00 GBP. " + long,
		Acknowledged: &ItemAck{By: "ops", At: at.Add(-2 * time.Hour), Note: "evidence submitted"}})
	for i := range 3 {
		add(Item{ProviderID: fmt.Sprintf("pi_repaired_%04d_%s", i, strings.Repeat("x", 12*i)), Kind: models.KindBehind, Action: models.ActionRepaired,
			LocalState: ptr("authorised"), ProviderState: ptr("captured"), Amount: 2500, Currency: "gbp", ProviderTime: ptr(at.Add(-time.Hour)),
			Explanation: "The captured webhook was never received; the payment was marked captured from the provider's record. " + long[:150*i]})
	}
	add(Item{ProviderID: "pi_created_0005", Kind: models.KindMissingLocal, Action: models.ActionRepaired, ProviderState: ptr("created"),
		Amount: 1999, Currency: "gbp", Explanation: "The payment was unknown locally (its webhooks never arrived); it was created as a payment in state created from the provider's record."})
	r.Totals = TotalsFromItems(r, []CurrencyTotals{
		{Currency: "eur", Payments: 400, Captured: 12000000, Refunded: 150000, Settled: 9000000},
		{Currency: "gbp", Payments: 47000, Captured: 219990000, Refunded: 3400000, Disputed: 420000, Settled: 180000000},
		{Currency: "usd", Payments: 810, Captured: 30000000},
	})
	return Report{Runs: []RunReport{r}}
}

// layoutHistory is historyRuns with an interrupted run and long notes.
func layoutHistory() []RunReport {
	runs := historyRuns()
	runs[6].Status, runs[6].Error = "interrupted", ptr("context canceled: the job received SIGTERM during a Kubernetes node drain and stopped after the batch in flight")
	runs[6].Account = "acct_1NabcdefghijklmnopqrstUV"
	runs[7].Notes = map[string]any{"warning": "the window starts before the provider's event retention (30 days): the part before 2026-10-01T00:00:00Z was read by listing objects, which sees no intermediate states"}
	return runs
}
