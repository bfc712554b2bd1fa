package config

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/reconciler/reconciler/models"
)

func TestSchemaMapping(t *testing.T) {
	c := Default()
	require.False(t, c.Schema.Mapping().Mapped(), "the defaults are the contract's names")
	require.Equal(t, models.DefaultAppSchema(), c.Schema.Mapping())

	files := map[string]string{"config.yaml": `
database: {url: "postgres://u@h/db"}
schema:
  app_schema: app
  payments:
    table: orders
    columns: {provider_id: ext_id, amount_captured: "-"}
  webhook_events:
    table: billing.inbox
  states: {captured: paid}
`}
	env := map[string]string{"RECONCILER_SCHEMA_STATES_SETTLED": "paid_out", "RECONCILER_SCHEMA_PAYMENTS_COLUMNS_STATE": "status"}
	c, err := Load("config.yaml", true, fakeEnv(env), fakeFS(files))
	require.NoError(t, err)
	require.NoError(t, c.Validate())
	m := c.Schema.Mapping()
	require.True(t, m.Mapped())
	require.Equal(t, "app.orders", m.Payments.Qualified())
	require.Equal(t, "billing.inbox", m.Events.Qualified(), "a qualified table name wins over app_schema")
	require.Equal(t, "ext_id", m.Payments.Columns["provider_id"])
	require.Equal(t, "status", m.Payments.Columns["state"], "every key has its variable")
	require.False(t, m.Has("amount_captured"), `"-" leaves an optional column out`)
	require.Equal(t, "paid", m.AppState(models.StateCaptured))
	require.Equal(t, "paid_out", m.AppState(models.StateSettled))
	require.Equal(t, "refunded", m.AppState(models.StateRefunded))

	env["RECONCILER_SCHEMA_STATES_SETTLED"] = "paid"
	c, err = Load("config.yaml", true, fakeEnv(env), fakeFS(files))
	require.NoError(t, err)
	e := asConfigError(t, c.Validate())
	require.Equal(t, "schema.states.settled", e.Key)
	require.Contains(t, e.Msg, `"paid" is also the value of schema.states.captured`)

	env["RECONCILER_SCHEMA_STATES_SETTLED"] = ""
	files["config.yaml"] += "  bogus: 1\n"
	_, err = Load("config.yaml", true, fakeEnv(env), fakeFS(files))
	require.Error(t, err, "an unknown key is an error")
}
