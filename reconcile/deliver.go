package reconcile

import (
	"context"
	"fmt"

	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/store"
)

// How a run repairs what it finds (Options.Repair, DESIGN section 5).
const (
	// RepairApply (the default) applies the transitions under the guard
	// and records the missed events processed, in the same transaction.
	RepairApply = "apply"
	// RepairDeliver changes no payment: it records each missed event
	// unprocessed (processed_at NULL, synthetic, the run's id), so that the
	// application's own webhook worker claims it and runs its side effects
	// as for a late webhook; the items it would have repaired say
	// delivered, and the next run confirms the rows converged.
	RepairDeliver = "deliver"
)

// RepairModes are the values Options.Repair accepts ("" is RepairApply).
var RepairModes = []string{RepairApply, RepairDeliver}

// deliverApplier is a repair: deliver run's applier. It decides each
// payment exactly as a real run does, from all of its facts, but as a dry
// run applies them: on rows it simulates in memory (the carry between
// batches is kept in memory too), so no payment row is written. What
// differs from a dry run is the events: the window's missed events are
// recorded, unprocessed, for the application's worker.
type deliverApplier struct {
	*dryApplier
	runID     int64
	eventsNew newEvents
}

func newDeliverApplier(provider string, runID int64) *deliverApplier {
	return &deliverApplier{dryApplier: newDryApplier(provider), runID: runID}
}

func (a *deliverApplier) apply(ctx context.Context, tx store.Tx, b *batch) ([]outcome, int64, error) {
	out, _, err := a.dryApplier.apply(ctx, tx, b)
	return out, 0, err // no settlement is recorded: the worker records it
}

func (a *deliverApplier) events(ctx context.Context, tx store.Tx, evs []store.Event) (int64, error) {
	for i := range evs {
		evs[i].Deliver = true
	}
	return a.eventsNew.insert(ctx, tx, a.runID, a.provider, evs)
}

// delivers says whether the run hands its repairs to the application's
// worker (repair: deliver, not a dry run).
func (o *Options) delivers() bool { return o.Repair == RepairDeliver && !o.DryRun }

// deliverItem turns an item the run would have repaired into one it
// delivered: the row is left to the application's worker.
func deliverItem(it *Item) {
	if it.Action != models.ActionRepaired {
		return
	}
	it.Action = models.ActionDelivered
	if it.Detail == nil {
		it.Detail = map[string]any{}
	}
	expl := fmt.Sprintf("A webhook was missed; its events were handed to the application's webhook worker unprocessed (repair: deliver), "+
		"which moves the payment to %s; the row was not changed.", it.ProviderState)
	if it.Kind == models.KindMissingLocal {
		expl = fmt.Sprintf("The payment was unknown locally (its webhooks never arrived); its events were handed to the application's webhook worker "+
			"unprocessed (repair: deliver), which creates it in state %s; no row was created.", it.ProviderState)
	}
	it.Detail["explanation"] = expl
}
