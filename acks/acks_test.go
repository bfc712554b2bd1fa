package acks_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/reconciler/reconciler/acks"
	"github.com/reconciler/reconciler/internal/pgtest"
	"github.com/reconciler/reconciler/models"
)

func ptr[T any](v T) *T { return &v }

func TestFingerprintNamesProviderPaymentKindAndProviderState(t *testing.T) {
	base := acks.Fingerprint("stripe", "pi_1", models.KindConflict, ptr("refunded"))
	require.True(t, acks.Valid(base), base)
	require.Equal(t, base, acks.Fingerprint("stripe", "pi_1", models.KindConflict, ptr("refunded")), "stable")
	for name, other := range map[string]string{
		"provider":         acks.Fingerprint("gocardless", "pi_1", models.KindConflict, ptr("refunded")),
		"payment":          acks.Fingerprint("stripe", "pi_2", models.KindConflict, ptr("refunded")),
		"kind":             acks.Fingerprint("stripe", "pi_1", models.KindStale, ptr("refunded")),
		"provider state":   acks.Fingerprint("stripe", "pi_1", models.KindConflict, ptr("chargeback")),
		"no state":         acks.Fingerprint("stripe", "pi_1", models.KindConflict, nil),
		"empty state":      acks.Fingerprint("stripe", "pi_1", models.KindConflict, ptr("")),
		"shifted boundary": acks.Fingerprint("stripe", "pi_1c", "onflict", ptr("refunded")),
	} {
		require.NotEqual(t, base, other, name)
	}
	require.NotEqual(t, acks.Fingerprint("stripe", "pi_1", models.KindConflict, nil), acks.Fingerprint("stripe", "pi_1", models.KindConflict, ptr("")))
	require.False(t, acks.Valid("ABCDEF0123456789"), "upper case is not what reports print")
	require.False(t, acks.Valid(base[:15]))
}

// Both stores keep acknowledgements and triage items the same way.
func TestTriageOnBothStores(t *testing.T) {
	for name, open := range map[string]func(testing.TB) *pgtest.DB{"postgres": pgtest.New, "sqlite": pgtest.NewSQLite} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			testTriage(t, open(t).DB)
		})
	}
}

type item struct {
	id, kind, action string
	state            *string
}

func addRun(t *testing.T, db *gorm.DB, at time.Time, status string, dry bool, items ...item) models.Run {
	t.Helper()
	r := models.Run{Provider: "stripe", Account: "", WindowStart: at.Add(-time.Hour), WindowEnd: at, StartedAt: at, FinishedAt: ptr(at.Add(time.Minute)),
		Status: status, Trigger: models.TriggerManual, DryRun: dry, Notes: models.JSON("{}")}
	require.NoError(t, db.Create(&r).Error)
	for _, it := range items {
		require.NoError(t, db.Create(&models.DriftItem{RunID: r.ID, Provider: "stripe", ProviderID: it.id, Kind: it.kind, Action: it.action,
			LocalState: ptr("canceled"), ProviderState: it.state, Detail: models.JSON("{}")}).Error)
	}
	return r
}

func testTriage(t *testing.T, db *gorm.DB) {
	ctx := context.Background()
	now := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	conflict := func(id, state string) item { return item{id, models.KindConflict, models.ActionRefused, ptr(state)} }
	mismatch := item{"pi_m", models.KindMismatch, models.ActionReported, ptr("captured")}
	repaired := item{"pi_r", models.KindBehind, models.ActionRepaired, ptr("captured")}

	first := addRun(t, db, now, models.RunSucceeded, false, conflict("pi_a", "captured"), conflict("pi_b", "captured"), conflict("pi_c", "captured"), mismatch, repaired)
	tri, err := acks.Load(ctx, db, first)
	require.NoError(t, err)
	require.Zero(t, tri.Previous, "nothing to compare the first run with")
	require.Equal(t, acks.Counts{New: 3}, tri.ByAction[models.ActionRefused])
	require.Equal(t, acks.Counts{New: 1}, tri.ByAction[models.ActionReported])
	require.NotContains(t, tri.Status, acks.Fingerprint("stripe", "pi_r", models.KindBehind, ptr("captured")), "repaired items need nobody")

	fpA := acks.Fingerprint("stripe", "pi_a", models.KindConflict, ptr("captured"))
	fpB := acks.Fingerprint("stripe", "pi_b", models.KindConflict, ptr("captured"))
	fpR := acks.Fingerprint("stripe", "pi_r", models.KindBehind, ptr("captured"))

	// Unknown, malformed and repaired fingerprints are refused, and nothing is written.
	for _, fps := range [][]string{{fpA, "0123456789abcdef"}, {"not-a-fingerprint"}, {fpR}} {
		_, err := acks.Resolve(ctx, db, fps)
		require.True(t, errors.Is(err, acks.ErrUnknown), "%v: %v", fps, err)
	}
	targets, err := acks.Resolve(ctx, db, []string{fpA, fpB, fpA})
	require.NoError(t, err)
	require.Len(t, targets, 2, "a fingerprint given twice is one item")
	require.Equal(t, "pi_a", targets[0].ProviderID)
	require.Equal(t, first.ID, targets[0].RunID)
	_, err = acks.Record(ctx, db, targets, "alice", "", now, false)
	require.Error(t, err, "a note is required")
	_, err = acks.Record(ctx, db, targets, " ", "why", now, false)
	require.Error(t, err, "who is required")
	var n int64
	require.NoError(t, db.Model(&acks.Ack{}).Count(&n).Error)
	require.Zero(t, n, "nothing written by refused acknowledgements")

	_, err = acks.Record(ctx, db, targets, "alice", "refunded by hand, ticket 4411", now, false)
	require.NoError(t, err)

	// A dry run and a failed run in between are not what "the previous run" means.
	addRun(t, db, now.Add(time.Hour), models.RunSucceeded, true, conflict("pi_z", "captured"))
	addRun(t, db, now.Add(2*time.Hour), models.RunFailed, false)
	// The next run: pi_a unchanged (acknowledged), pi_b's provider state
	// changed (opens again, as new), pi_c still there (still open), pi_d new.
	second := addRun(t, db, now.Add(3*time.Hour), models.RunSucceeded, false,
		conflict("pi_a", "captured"), conflict("pi_b", "chargeback"), conflict("pi_c", "captured"), conflict("pi_d", "captured"), mismatch)
	tri, err = acks.Load(ctx, db, second)
	require.NoError(t, err)
	require.Equal(t, first.ID, tri.Previous)
	require.Equal(t, acks.StatusAcknowledged, tri.Status[fpA])
	require.Equal(t, "alice", tri.Acks[fpA].AcknowledgedBy)
	require.Equal(t, "refunded by hand, ticket 4411", tri.Acks[fpA].Note)
	require.Equal(t, acks.StatusNew, tri.Status[acks.Fingerprint("stripe", "pi_b", models.KindConflict, ptr("chargeback"))], "a changed provider state opens the item again")
	require.Equal(t, acks.StatusOpen, tri.Status[acks.Fingerprint("stripe", "pi_c", models.KindConflict, ptr("captured"))])
	require.Equal(t, acks.StatusNew, tri.Status[acks.Fingerprint("stripe", "pi_d", models.KindConflict, ptr("captured"))])
	require.Equal(t, acks.Counts{New: 2, Open: 1, Acknowledged: 1}, tri.ByAction[models.ActionRefused])
	require.Equal(t, int64(3), tri.ByAction[models.ActionRefused].Unacknowledged())
	require.Equal(t, acks.Counts{Open: 1}, tri.ByAction[models.ActionReported])
	require.Equal(t, acks.Counts{New: 2, Open: 2, Acknowledged: 1}, tri.Total())

	// Found in the newest run now; reopening takes the acknowledgement back
	// and keeps the history.
	targets, err = acks.Resolve(ctx, db, []string{fpA})
	require.NoError(t, err)
	require.Equal(t, second.ID, targets[0].RunID)
	_, err = acks.Record(ctx, db, targets, "bob", "the refund bounced", now.Add(4*time.Hour), true)
	require.NoError(t, err)
	tri, err = acks.Load(ctx, db, second)
	require.NoError(t, err)
	require.Equal(t, acks.StatusOpen, tri.Status[fpA])
	hist, err := acks.History(ctx, db, fpA)
	require.NoError(t, err)
	require.Len(t, hist, 2)
	require.Equal(t, []string{"alice", "bob"}, []string{hist[0].AcknowledgedBy, hist[1].AcknowledgedBy})
	require.True(t, hist[1].Reopened)
	require.True(t, hist[0].AcknowledgedAt.Equal(now), "%v", hist[0].AcknowledgedAt)
}
