package serve

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/reconciler/reconciler/acks"
	"github.com/reconciler/reconciler/clock"
	"github.com/reconciler/reconciler/internal/dbopen"
	"github.com/reconciler/reconciler/internal/pgtest"
	"github.com/reconciler/reconciler/metrics"
	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/runner"
)

// POST /items/{fingerprint}/ack records who (the token's caller) and why,
// refuses what it cannot record with the field named, and writes nothing
// then.
func TestAckAPI(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t).DB
	st := dbopen.Store(db, nil)
	at := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	run := models.Run{Provider: "stripe", Status: models.RunSucceeded, Trigger: models.TriggerSchedule, WindowStart: at, WindowEnd: at.Add(time.Hour),
		StartedAt: at, FinishedAt: new(at.Add(time.Minute)), Notes: models.JSON("{}")}
	require.NoError(t, st.CreateRun(ctx, &run))
	state := "captured"
	require.NoError(t, db.Create(&models.DriftItem{RunID: run.ID, Provider: "stripe", ProviderID: "pi_1", Kind: models.KindConflict,
		Action: models.ActionRefused, LocalState: new("canceled"), ProviderState: &state, Detail: models.JSON("{}")}).Error)
	fp := acks.Fingerprint("stripe", "pi_1", models.KindConflict, &state)

	acked := 0
	now := at.Add(48 * time.Hour)
	s := &Server{Runner: &runner.Service{DB: db, Store: st}, Log: slog.New(slog.DiscardHandler), Metrics: metrics.New(),
		Tokens: map[string]string{"support-desk": token}, Providers: []string{"stripe"}, Clock: clock.Func(func() time.Time { return now }),
		OnAck: func(context.Context) { acked++ }}
	srv := httptest.NewServer(s.Handler(ctx))
	t.Cleanup(srv.Close)
	post := func(path, body, tok string) (int, map[string]any) {
		t.Helper()
		req, err := http.NewRequest("POST", srv.URL+path, strings.NewReader(body))
		require.NoError(t, err)
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		var m map[string]any
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&m))
		return resp.StatusCode, m
	}
	for _, c := range []struct {
		path, body, tok string
		code            int
		field           string
	}{
		{"/items/" + fp + "/ack", `{"note":"x"}`, "", 401, ""},
		{"/items/" + fp + "/ack", `{"note":"x"}`, "wrong-token-0123456789", 401, ""},
		{"/items/PI_1/ack", `{"note":"x"}`, token, 400, "fingerprint"},
		{"/items/0123456789abcdef/ack", `{"note":"x"}`, token, 404, "fingerprint"},
		{"/items/" + fp + "/ack", `{}`, token, 400, "note"},
		{"/items/" + fp + "/ack", `{"note":"  "}`, token, 400, "note"},
		{"/items/" + fp + "/ack", `{"note":"x","by":"mallory"}`, token, 400, ""},
		{"/items/" + fp + "/ack", `{"note":"x"} {"note":"y"}`, token, 400, ""},
	} {
		code, body := post(c.path, c.body, c.tok)
		require.Equal(t, c.code, code, "%s %s: %v", c.path, c.body, body)
		if c.field != "" {
			require.Equal(t, c.field, body["field"], body)
		}
	}
	var n int64
	require.NoError(t, db.Model(&acks.Ack{}).Count(&n).Error)
	require.Zero(t, n, "nothing written by refused requests")
	require.Zero(t, acked)

	code, body := post("/items/"+fp+"/ack", `{"note":"refunded by hand, ticket 4411"}`, token)
	require.Equal(t, 200, code, body)
	require.Equal(t, acks.StatusAcknowledged, body["status"])
	require.Equal(t, "support-desk", body["acknowledged"].(map[string]any)["by"], "who is the caller, never the body")
	require.Equal(t, "pi_1", body["item"].(map[string]any)["provider_id"])
	require.Equal(t, 1, acked, "the metrics refresh")
	tri, err := acks.Load(ctx, db, run)
	require.NoError(t, err)
	require.Equal(t, acks.StatusAcknowledged, tri.Status[fp])
	require.True(t, tri.Acks[fp].AcknowledgedAt.Equal(now), "the server's clock: %v", tri.Acks[fp].AcknowledgedAt)

	code, body = post("/items/"+fp+"/ack", `{"note":"the refund bounced","reopen":true}`, token)
	require.Equal(t, 200, code, body)
	tri, err = acks.Load(ctx, db, run)
	require.NoError(t, err)
	require.Equal(t, acks.StatusNew, tri.Status[fp], "reopened; no previous run to be still open from")
}
