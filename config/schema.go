package config

import (
	"reflect"
	"strings"

	"github.com/reconciler/reconciler/models"
)

// Schema maps the application's own tables (issue 18): a team whose
// payments table and webhook worker exist already names them here instead
// of adopting the contract's (DESIGN section 6). Every value is optional:
// an empty one is the contract's name, so a default install changes
// nothing. A column mapped to "-" is absent (only the optional ones may
// be: settled_at, payout_id, amount_captured, created_at, updated_at, and
// the webhook-events table's synthetic, run_id and the worker's own
// columns); the job then does not record it, and its run notes say so.
type Schema struct {
	// AppSchema is the PostgreSQL schema (namespace) of the application's
	// tables; "" finds them on the connection's search_path. A table name
	// may also be qualified itself ("app.orders").
	AppSchema string `yaml:"app_schema"`
	// OwnSchema is the PostgreSQL schema for reconciler's own tables
	// (runs, drift items, acks, carry, checks, notifications), created by
	// migrate; "" keeps them where the search_path puts them (the default:
	// checks outside the project read them there).
	OwnSchema     string      `yaml:"own_schema"`
	Payments      AppPayments `yaml:"payments"`
	WebhookEvents AppEvents   `yaml:"webhook_events"`
	// States are the application's values of the job's states; each must
	// be the value of one state only.
	States AppStates `yaml:"states"`
}

// AppPayments names the application's payments table and its columns.
type AppPayments struct {
	Table   string         `yaml:"table"`
	Columns PaymentColumns `yaml:"columns"`
}

// PaymentColumns are the application's names of the payments columns the
// job uses ("" the contract's, "-" absent).
type PaymentColumns struct {
	ID              string `yaml:"id"`
	Provider        string `yaml:"provider"`
	Account         string `yaml:"account"`
	ProviderID      string `yaml:"provider_id"`
	State           string `yaml:"state"`
	Amount          string `yaml:"amount"`
	Currency        string `yaml:"currency"`
	AmountRefunded  string `yaml:"amount_refunded"`
	SourceUpdatedAt string `yaml:"source_updated_at"`
	SettledAt       string `yaml:"settled_at"`
	PayoutID        string `yaml:"payout_id"`
	AmountCaptured  string `yaml:"amount_captured"`
	CreatedAt       string `yaml:"created_at"`
	UpdatedAt       string `yaml:"updated_at"`
}

// AppEvents names the application's webhook-events table and its columns.
type AppEvents struct {
	Table   string       `yaml:"table"`
	Columns EventColumns `yaml:"columns"`
}

// EventColumns are the application's names of the webhook-events columns.
type EventColumns struct {
	Source      string `yaml:"source"`
	EventID     string `yaml:"event_id"`
	EventType   string `yaml:"event_type"`
	Payload     string `yaml:"payload"`
	ProcessedAt string `yaml:"processed_at"`
	Synthetic   string `yaml:"synthetic"`
	RunID       string `yaml:"run_id"`
	ReceivedAt  string `yaml:"received_at"`
	ClaimedAt   string `yaml:"claimed_at"`
	Attempts    string `yaml:"attempts"`
	LastError   string `yaml:"last_error"`
}

// AppStates are the application's values of the job's states.
type AppStates struct {
	Created    string `yaml:"created"`
	Authorised string `yaml:"authorised"`
	Captured   string `yaml:"captured"`
	Settled    string `yaml:"settled"`
	Refunded   string `yaml:"refunded"`
	Canceled   string `yaml:"canceled"`
	Failed     string `yaml:"failed"`
	Chargeback string `yaml:"chargeback"`
}

// DefaultSchema is the contract's names (DESIGN section 6), what
// `reconciler config` shows for a default install: each column and state
// is its own name.
func DefaultSchema() Schema {
	s := Schema{Payments: AppPayments{Table: "payments"}, WebhookEvents: AppEvents{Table: "webhook_events"}}
	for _, v := range []any{&s.Payments.Columns, &s.WebhookEvents.Columns, &s.States} {
		rv := reflect.ValueOf(v).Elem()
		for i := range rv.NumField() {
			tag, _, _ := strings.Cut(rv.Type().Field(i).Tag.Get("yaml"), ",")
			rv.Field(i).SetString(tag)
		}
	}
	return s
}

// Absent is the column value that maps an optional column to nothing.
const Absent = "-"

// Mapping is the mapping as the stores and the guard take it.
func (s Schema) Mapping() models.AppSchema {
	m := models.DefaultAppSchema()
	m.Own = s.OwnSchema
	table := func(t *models.AppTable, name string, cols any) {
		if name != "" {
			t.Name = name
		}
		if sch, n, ok := strings.Cut(t.Name, "."); ok {
			t.Schema, t.Name = sch, n
		} else if s.AppSchema != "" {
			t.Schema = s.AppSchema
		}
		t.Columns = byTag(cols, t.Columns)
	}
	table(&m.Payments, s.Payments.Table, s.Payments.Columns)
	table(&m.Events, s.WebhookEvents.Table, s.WebhookEvents.Columns)
	for k, v := range byTag(s.States, nil) {
		if v != "" {
			m.States[models.State(k)] = v
		}
	}
	return m
}

// byTag overlays a struct's non-empty string fields, keyed by their yaml
// tags, on base ("-" becomes "", absent).
func byTag(v any, base map[string]string) map[string]string {
	out := make(map[string]string, len(base))
	for k, x := range base {
		out[k] = x
	}
	rv := reflect.ValueOf(v)
	for i := range rv.NumField() {
		tag, _, _ := strings.Cut(rv.Type().Field(i).Tag.Get("yaml"), ",")
		switch val := rv.Field(i).String(); val {
		case "":
			if _, ok := out[tag]; !ok {
				out[tag] = ""
			}
		case Absent:
			out[tag] = ""
		default:
			out[tag] = val
		}
	}
	return out
}

// validateSchema checks the mapping on its own; the live tables are
// checked when a command opens the database.
func (c Config) validateSchema() error {
	if err := c.Schema.Mapping().Validate(); err != nil {
		if e, ok := err.(*models.AppSchemaError); ok {
			return &Error{Key: e.Key, Msg: e.Msg, Hint: e.Hint}
		}
		return err
	}
	if _, embedded := c.EmbeddedStore(); embedded && (c.Schema.OwnSchema != "" || c.Schema.AppSchema != "") {
		key := "schema.own_schema"
		if c.Schema.AppSchema != "" {
			key = "schema.app_schema"
		}
		return &Error{Key: key, Msg: "is set, but the embedded SQLite store has no schemas", Hint: "leave it empty, or configure a PostgreSQL database.url"}
	}
	return nil
}
