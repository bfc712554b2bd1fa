package models_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/reconciler/reconciler/models"
)

func mapped() models.AppSchema {
	m := models.DefaultAppSchema()
	m.Payments.Schema, m.Payments.Name = "app", "orders"
	m.Payments.Columns["provider_id"] = "ext_id"
	m.Payments.Columns["amount"] = "Total"
	m.Payments.Columns["settled_at"] = ""
	m.States[models.StateCaptured] = "paid"
	return m
}

func TestSQLWritesTheApplicationsNames(t *testing.T) {
	d := models.DefaultAppSchema()
	require.False(t, d.Mapped())
	require.Equal(t, `UPDATE payments p SET state = 'captured', amount = 1 WHERE p.provider_id = ? AND p.settled_at IS NULL, '{}'`,
		d.SQL(`UPDATE {payments} p SET {state} = {'captured'}, {amount} = 1 WHERE {p.provider_id} = ? AND {p.settled_at|NULL} IS NULL[[updated_at:, '{}']]`),
		"the contract's names: the statements read as they always did")
	m := mapped()
	require.True(t, m.Mapped())
	require.Equal(t, `UPDATE app.orders p SET state = 'paid', "Total" = 1 WHERE p.ext_id = ? AND NULL IS NULL`,
		m.SQL(`UPDATE {payments} p SET {state} = {'captured'}, {amount} = 1 WHERE {p.provider_id} = ? AND {p.settled_at|NULL} IS NULL[[settled_at:, x]]`))
	require.Panics(t, func() { m.SQL(`SELECT {settled_at} FROM {payments}`) }, "an absent column without |NULL is the caller's bug")
	require.Equal(t, `SELECT {nope}, p.state FROM payments p WHERE x`, d.SQL(`SELECT {nope}, {p.state} FROM {payments} p WHERE x[[nope:, y]]`),
		"a brace that names nothing of ours stays as written, as does the text around every match")
	require.Equal(t, `SELECT 1`, d.SQL(`SELECT 1`))
	require.Equal(t, `"order"`, models.QuoteIdent("order"))
	require.Equal(t, `"a""b"`, models.QuoteIdent(`a"b`))
	require.Equal(t, []string{"payments.settled_at"}, m.Absent()[:1])

	st, err := m.OurState("paid")
	require.NoError(t, err)
	require.Equal(t, models.StateCaptured, st)
	_, err = m.OurState("on_hold")
	require.ErrorContains(t, err, `state "on_hold" in app.orders.state is not mapped`)
}

// TestSQLIsBuiltPerSchema holds the statement cache to the schema a
// statement is for: one template written alternately for two schemas, and
// for a schema whose maps changed after its first statement, reads as
// each schema names it.
func TestSQLIsBuiltPerSchema(t *testing.T) {
	const tmpl = `SELECT {p.state}, {'captured'} FROM {payments} p[[settled_at:, {settled_at}]]`
	d, m := models.DefaultAppSchema(), mapped()
	for range 2 {
		require.Equal(t, `SELECT p.state, 'captured' FROM payments p, settled_at`, d.SQL(tmpl))
		require.Equal(t, `SELECT p.state, 'paid' FROM app.orders p`, m.SQL(tmpl))
	}
	m.States[models.StateCaptured] = "taken"
	m.Payments.Columns["state"] = "status"
	require.Equal(t, `SELECT p.status, 'taken' FROM app.orders p`, m.SQL(tmpl), "the cache keeps a copy of the schema it was built for")
	d.Own = "elsewhere"
	d.Payments.Columns["settled_at"] = ""
	require.Equal(t, `SELECT p.state, 'captured' FROM payments p`, d.SQL(tmpl))
}

func TestValidateNamesTheKey(t *testing.T) {
	m := mapped()
	m.States[models.StateSettled] = "paid"
	err := m.Validate()
	require.ErrorContains(t, err, "schema.states.")
	require.ErrorContains(t, err, `"paid" is also the value of schema.states.`)
	m = mapped()
	m.Payments.Columns["state"] = ""
	require.ErrorContains(t, m.Validate(), "schema.payments.columns.state: is empty")
}

// TestNoStatementNamesTheContractsTables holds the stores, the guard and
// the readers of the application's tables to the mapping: a statement
// naming payments or webhook_events outside a template ({payments}) would
// pass the mapped tests only where the tests' contract-named views stand in
// (internal/pgtest), so it fails here.
func TestNoStatementNamesTheContractsTables(t *testing.T) {
	bare := regexp.MustCompile(`\b(FROM|INTO|UPDATE|JOIN|TABLE|ON)\s+(payments|webhook_events)\b|Model\(&models\.(Payment|WebhookEvent)\{\}\)`)
	for _, dir := range []string{"../store/pgstore", "../store/sqlitestore", "../store/internal/sqlbase", "../guard", "../payouts", "../internal/webhooksim", "../internal/scenario",
		"../verify", "../report", "../reconcile", "../runner", "../serve", "../notify", "../acks", "../metrics"} {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		require.NoError(t, err)
		require.NotEmpty(t, files, dir)
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") || strings.HasSuffix(f, "worker.go") {
				continue // tests read through the views; the deliver worker runs on the contract's tables only
			}
			b, err := os.ReadFile(f)
			require.NoError(t, err)
			for i, line := range strings.Split(string(b), "\n") {
				if strings.HasPrefix(strings.TrimSpace(line), "//") {
					continue
				}
				if m := bare.FindString(line); m != "" {
					t.Errorf("%s:%d: %q names the contract's table: write it {payments} through models.AppSchema.SQL", f, i+1, m)
				}
			}
		}
	}
}
