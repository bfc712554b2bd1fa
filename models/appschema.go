package models

import (
	"errors"
	"fmt"
	"maps"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"

	"gorm.io/gorm"
)

// AppSchema names the application's own tables as reconciler reads and
// writes them (issue 18): the payments table and the webhook-events table,
// each column the job uses, and the application's word for each state of
// the state machine. DefaultAppSchema is the contract of DESIGN section 6;
// a team whose tables already exist maps theirs instead, and every
// statement that touches them (the stores, the published Go guard) is
// written from one AppSchema value, translating the job's states into the
// application's on write and back on read.
//
// Own places reconciler's own tables (runs, drift items, acks, carry,
// checks, locks, notifications) in a PostgreSQL schema of their own; ""
// keeps them where the connection's search_path puts them.
type AppSchema struct {
	Payments AppTable
	Events   AppTable
	// States maps each of States to the application's value. A state
	// missing from the map is the application's own word too.
	States map[State]string
	Own    string
}

// AppTable is one application table: an optional schema (PostgreSQL
// namespace), its name, and our column name → the application's. A column
// mapped to "" is absent (only the optional ones may be).
type AppTable struct {
	Schema, Name string
	Columns      map[string]string
}

// ColumnKind is what a column must hold, for the schema check.
type ColumnKind string

// The kinds the schema check accepts a column's type for.
const (
	KindText    ColumnKind = "text"      // text, varchar, char
	KindInteger ColumnKind = "integer"   // smallint, integer, bigint
	KindTime    ColumnKind = "timestamp" // timestamptz, timestamp
	KindJSON    ColumnKind = "json"      // jsonb, json
	KindBool    ColumnKind = "boolean"
)

// AppColumn is one column the job uses of an application table.
type AppColumn struct {
	Name     string // ours
	Kind     ColumnKind
	Optional bool
}

// PaymentColumns are the payments table's columns the job uses, in the
// order of DESIGN section 6. settled_at, payout_id and amount_captured are
// optional: without them the job records no settlement or partial capture
// (and says so in each run's notes); created_at and updated_at are
// optional too, then the job stamps nothing.
var PaymentColumns = []AppColumn{
	{"id", KindInteger, false},
	{"provider", KindText, false},
	{"account", KindText, false},
	{"provider_id", KindText, false},
	{"state", KindText, false},
	{"amount", KindInteger, false},
	{"currency", KindText, false},
	{"amount_refunded", KindInteger, false},
	{"source_updated_at", KindTime, false},
	{"settled_at", KindTime, true},
	{"payout_id", KindText, true},
	{"amount_captured", KindInteger, true},
	{"created_at", KindTime, true},
	{"updated_at", KindTime, true},
}

// EventColumns are the webhook-events table's columns the job writes (it
// never reads the worker's claimed_at, attempts or last_error: they are
// the application's, and may be absent).
var EventColumns = []AppColumn{
	{"source", KindText, false},
	{"event_id", KindText, false},
	{"event_type", KindText, false},
	{"payload", KindJSON, false},
	{"processed_at", KindTime, false},
	{"synthetic", KindBool, true},
	{"run_id", KindInteger, true},
	// The application's worker's own columns: checked when mapped, created
	// by migrate --app-tables, never written by the job.
	{"received_at", KindTime, true},
	{"claimed_at", KindTime, true},
	{"attempts", KindInteger, true},
	{"last_error", KindText, true},
}

// PaymentSelect is the select list (a template of AppSchema.SQL, over
// {payments} AS p) of a payments row as Payment names its columns, whatever
// the application calls them; its state is the application's value
// (OurState translates it).
const PaymentSelect = `{p.id} AS id, {p.provider} AS provider, {p.account} AS account, {p.provider_id} AS provider_id,
	{p.state} AS state, {p.amount} AS amount, {p.currency} AS currency, {p.amount_refunded} AS amount_refunded,
	{p.source_updated_at} AS source_updated_at, {p.settled_at|NULL} AS settled_at, {p.payout_id|NULL} AS payout_id,
	{p.amount_captured|NULL} AS amount_captured[[created_at:, {p.created_at} AS created_at]][[updated_at:, {p.updated_at} AS updated_at]]`

// DefaultAppSchema is the contract of DESIGN section 6: payments and
// webhook_events with our column and state names, where the connection's
// search_path finds them.
func DefaultAppSchema() AppSchema {
	cols := func(cs []AppColumn) map[string]string {
		m := make(map[string]string, len(cs))
		for _, c := range cs {
			m[c.Name] = c.Name
		}
		return m
	}
	states := make(map[State]string, len(States))
	for _, s := range States {
		states[s] = string(s)
	}
	return AppSchema{
		Payments: AppTable{Name: "payments", Columns: cols(PaymentColumns)},
		Events:   AppTable{Name: "webhook_events", Columns: cols(EventColumns)},
		States:   states,
	}
}

// Mapped reports whether s names anything other than the contract's
// tables, columns and states: the application's tables are then the
// application's, and migrations never create or alter them.
func (s AppSchema) Mapped() bool {
	d := DefaultAppSchema()
	return !s.Payments.equal(d.Payments) || !s.Events.equal(d.Events) || !maps.Equal(s.States, d.States)
}

// Validate checks s on its own (the live schema is CheckSchema's): every
// required column named, every state mapped to one value and no two
// states to the same one. The error names the configuration key.
func (s AppSchema) Validate() error {
	for _, t := range []struct {
		key  string
		t    AppTable
		cols []AppColumn
	}{{"schema.payments", s.Payments, PaymentColumns}, {"schema.webhook_events", s.Events, EventColumns}} {
		if t.t.Name == "" {
			return &AppSchemaError{Key: t.key + ".table", Msg: "is empty", Hint: "name the application's table"}
		}
		for _, c := range t.cols {
			if t.t.Columns[c.Name] == "" && !c.Optional {
				return &AppSchemaError{Key: t.key + ".columns." + c.Name, Msg: "is empty", Hint: "the job needs the column: name the application's"}
			}
		}
	}
	seen := map[string]State{}
	for _, st := range States {
		v := s.States[st]
		if v == "" {
			return &AppSchemaError{Key: "schema.states." + string(st), Msg: "is empty", Hint: "map it to the application's value for " + string(st)}
		}
		if strings.ContainsAny(v, ",'") {
			return &AppSchemaError{Key: "schema.states." + string(st), Msg: fmt.Sprintf("%q holds a comma or a quote", v), Hint: "use the application's plain value"}
		}
		if o, dup := seen[v]; dup {
			return &AppSchemaError{Key: "schema.states." + string(st), Msg: fmt.Sprintf("%q is also the value of schema.states.%s", v, o), Hint: "each state needs a value of its own: the job never guesses which one a row means"}
		}
		seen[v] = st
	}
	return nil
}

// AppSchemaError is an AppSchema that cannot be right whatever the
// database holds: Key is the configuration key.
type AppSchemaError struct{ Key, Msg, Hint string }

func (e *AppSchemaError) Error() string { return e.Key + ": " + e.Msg + " (" + e.Hint + ")" }

// Has reports whether the application's table has our column col.
func (s AppSchema) Has(col string) bool { return s.column(col) != "" }

func (s AppSchema) column(col string) string {
	if v, ok := s.Payments.Columns[col]; ok {
		return v
	}
	return s.Events.Columns[col]
}

// AppState is the application's value for st.
func (s AppSchema) AppState(st State) string {
	if v := s.States[st]; v != "" {
		return v
	}
	return string(st)
}

// AppStates maps each of sts to the application's value.
func (s AppSchema) AppStates(sts []State) []string {
	out := make([]string, len(sts))
	for i, st := range sts {
		out[i] = s.AppState(st)
	}
	return out
}

// OurState is the state the application's value v stands for. On a mapped
// install a value the mapping does not name is an *UnmappedStateError:
// never guessed.
func (s AppSchema) OurState(v string) (State, error) {
	for st, a := range s.States {
		if a == v {
			return st, nil
		}
	}
	if !s.Mapped() {
		// The contract's names translate nothing: a value that is none of
		// States reaches the engine as it always did (it is no allowed
		// predecessor of anything, so the guard never moves it).
		return State(v), nil
	}
	return "", &UnmappedStateError{Table: s.Payments.Qualified(), Column: s.Payments.Columns["state"], Value: v}
}

// UnmappedStateError is a state value in the application's table that the
// mapping does not name: never guessed.
type UnmappedStateError struct{ Table, Column, Value string }

func (e *UnmappedStateError) Error() string {
	return fmt.Sprintf("schema: state %q in %s.%s is not mapped; map it with schema.states.<state>: %s or change the row",
		e.Value, e.Table, e.Column, e.Value)
}

// Qualified is the table's name as a message prints it: schema.name.
func (t AppTable) Qualified() string {
	if t.Schema == "" {
		return t.Name
	}
	return t.Schema + "." + t.Name
}

// Ident is the table as SQL names it, each part quoted when it needs to be.
func (t AppTable) Ident() string {
	if t.Schema == "" {
		return QuoteIdent(t.Name)
	}
	return QuoteIdent(t.Schema) + "." + QuoteIdent(t.Name)
}

var bareIdent = regexp.MustCompile(`^[a-z_][a-z0-9_]*$`)

// reserved are the key words neither dialect takes as a bare column or
// table name.
var reserved = map[string]bool{}

func init() {
	for _, w := range strings.Fields(`all analyse analyze and any array as asc asymmetric both case cast check collate
		column constraint create current_date current_role current_time current_timestamp current_user default
		deferrable desc distinct do else end except false fetch for foreign from grant group having in index
		initially intersect into key lateral leading limit localtime localtimestamp not null offset on only or
		order placing primary references returning select session_user some symmetric table then to trailing
		trigger true union unique user using values variadic when where window with`) {
		reserved[w] = true
	}
}

// QuoteIdent quotes an identifier for PostgreSQL and SQLite alike (double
// quotes, a double quote doubled, as pgx.Identifier.Sanitize does); a plain
// lower-case name that is no key word stays bare, so that the contract's
// statements read as they always did.
func QuoteIdent(s string) string {
	if bareIdent.MatchString(s) && !reserved[s] {
		return s
	}
	return `"` + strings.ReplaceAll(strings.ReplaceAll(s, "\x00", ""), `"`, `""`) + `"`
}

// QuoteLiteral is s as an SQL string literal.
func QuoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

var (
	optionalPart = regexp.MustCompile(`(?s)\[\[([a-z_]+):(.*?)\]\]`)
	placeholder  = regexp.MustCompile(`\{([a-z_]+\.)?([a-z_]+|'[a-z]+')(\|NULL)?\}`)
)

// SQL writes a statement template in the application's names:
//
//	{payments}, {webhook_events}  the table, schema-qualified and quoted
//	{col}, {p.col}                the column (with its alias)
//	{col|NULL}                    the column, or NULL when it is absent
//	{'settled'}                   the application's value for the state, as a literal
//	[[col: text]]                 text, only when the column is present
//
// A template naming an absent column without |NULL is a bug in the caller
// (it must ask Has first), and panics.
//
// The statement is built once per template and schema: the last schema a
// template was written for is kept with its statement (sqlCache), and a
// call for an equal schema returns it. The simulated webhooks of the demo
// and the tests build two to four statements a delivery.
func (s AppSchema) SQL(tmpl string) string {
	if e, ok := sqlCache.Load(tmpl); ok {
		if e := e.(*sqlEntry); e.schema.equal(s) {
			return e.out
		}
	}
	out := s.build(tmpl)
	if sqlCacheSize.Load() < maxSQLCache {
		if _, loaded := sqlCache.Swap(tmpl, &sqlEntry{schema: s.clone(), out: out}); !loaded {
			sqlCacheSize.Add(1)
		}
	}
	return out
}

// sqlCache maps a template to its last sqlEntry. Templates are the
// program's constants, a few hundred at most; maxSQLCache bounds it all the
// same (a caller building templates from data would only lose the cache).
var (
	sqlCache     sync.Map
	sqlCacheSize atomic.Int64
)

const maxSQLCache = 4096

type sqlEntry struct {
	schema AppSchema // a copy: the caller's maps may change later
	out    string
}

func (s AppSchema) equal(o AppSchema) bool {
	return s.Own == o.Own && s.Payments.equal(o.Payments) && s.Events.equal(o.Events) && maps.Equal(s.States, o.States)
}

func (t AppTable) equal(o AppTable) bool {
	return t.Schema == o.Schema && t.Name == o.Name && maps.Equal(t.Columns, o.Columns)
}

func (s AppSchema) clone() AppSchema {
	s.Payments.Columns = maps.Clone(s.Payments.Columns)
	s.Events.Columns = maps.Clone(s.Events.Columns)
	s.States = maps.Clone(s.States)
	return s
}

// build is SQL without the cache.
func (s AppSchema) build(tmpl string) string {
	out := tmpl
	if strings.Contains(tmpl, "[[") {
		out = replaceSubmatches(optionalPart, tmpl, func(g []string) string {
			if !s.Has(g[1]) {
				return ""
			}
			return g[2]
		})
	}
	return replaceSubmatches(placeholder, out, func(g []string) string {
		m, alias, name, orNull := g[0], g[1], g[2], g[3] != ""
		switch {
		case strings.HasPrefix(name, "'"):
			return QuoteLiteral(s.AppState(State(strings.Trim(name, "'"))))
		case name == "payments" && alias == "":
			return s.Payments.Ident()
		case name == "webhook_events" && alias == "":
			return s.Events.Ident()
		}
		col := s.column(name)
		if col == "" {
			if orNull {
				return "NULL"
			}
			if _, known := s.Payments.Columns[name]; !known {
				if _, known := s.Events.Columns[name]; !known {
					return m // not a placeholder of ours
				}
			}
			panic(fmt.Sprintf("models: statement uses absent column %s", name))
		}
		return alias + QuoteIdent(col)
	})
}

// replaceSubmatches is regexp's ReplaceAllStringFunc with each match's
// groups (g[0] the match), found in one pass: matching each match again for
// its groups was a fifth of the demo's CPU (its simulated webhooks build a
// statement a delivery).
func replaceSubmatches(re *regexp.Regexp, src string, f func(g []string) string) string {
	idx := re.FindAllStringSubmatchIndex(src, -1)
	if len(idx) == 0 {
		return src
	}
	var b strings.Builder
	b.Grow(len(src) + len(src)/4)
	last := 0
	g := make([]string, re.NumSubexp()+1)
	for _, m := range idx {
		for i := range g {
			g[i] = ""
			if m[2*i] >= 0 {
				g[i] = src[m[2*i]:m[2*i+1]]
			}
		}
		b.WriteString(src[last:m[0]])
		b.WriteString(f(g))
		last = m[1]
	}
	b.WriteString(src[last:])
	return b.String()
}

// Absent lists the optional columns the application's tables lack that
// the job would write, as table.column in our names: what it does not
// record (a run's notes say so, as "not_recorded").
func (s AppSchema) Absent() []string {
	var out []string
	for _, c := range PaymentColumns {
		if c.Optional && !s.Has(c.Name) {
			out = append(out, "payments."+c.Name)
		}
	}
	for _, c := range EventColumns {
		if (c.Name == "synthetic" || c.Name == "run_id") && !s.Has(c.Name) { // the worker's own columns the job never writes
			out = append(out, "webhook_events."+c.Name)
		}
	}
	return out
}

// appSchemaPlugin carries a connection's AppSchema: a gorm plugin, so that
// every session derived from the connection (gorm shares its Config) and
// every store opened over it sees the same mapping.
type appSchemaPlugin struct{ s AppSchema }

const appSchemaPluginName = "reconciler:app-schema"

func (appSchemaPlugin) Name() string              { return appSchemaPluginName }
func (appSchemaPlugin) Initialize(*gorm.DB) error { return nil }

// WithAppSchema attaches s to db: the stores opened over db (and the
// readers that take db) read and write the application's tables by it.
// It may be called once per connection.
func WithAppSchema(db *gorm.DB, s AppSchema) error {
	if err := s.Validate(); err != nil {
		return err
	}
	if _, ok := db.Config.Plugins[appSchemaPluginName]; ok {
		return errors.New("models: the connection has an application schema already")
	}
	return db.Use(appSchemaPlugin{s})
}

// AppSchemaOf is the AppSchema attached to db, or DefaultAppSchema.
func AppSchemaOf(db *gorm.DB) AppSchema {
	if db != nil && db.Config != nil {
		if p, ok := db.Config.Plugins[appSchemaPluginName].(appSchemaPlugin); ok {
			return p.s
		}
	}
	return DefaultAppSchema()
}
