package config

import (
	"errors"
	"os"
	"reflect"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

// Lookup reads one environment variable and reports whether it is set, as
// os.LookupEnv does: a variable set to "" is not an unset one.
type Lookup func(string) (string, bool)

// EnvOf is getenv as a Lookup. os.Getenv becomes os.LookupEnv, which
// tells an empty variable from an unset one (an empty DATABASE_URL is an
// error, an unset one no database); any other getenv (a test's map) says
// a variable is set when it is not empty.
func EnvOf(getenv func(string) string) Lookup {
	if reflect.ValueOf(getenv).Pointer() == reflect.ValueOf(os.Getenv).Pointer() {
		return os.LookupEnv
	}
	return func(k string) (string, bool) {
		v := getenv(k)
		return v, v != ""
	}
}

// Field is one key of the configuration and the environment variables
// that override it.
type Field struct {
	Key string // dotted, as in config.yaml: "run.batch_size"
	// Env is the variable of the one naming rule: RECONCILER_ and the key
	// upper-cased, dots and dashes as underscores (EnvName).
	Env string
	// Aliases are the older documented names that override the key too
	// (DATABASE_URL for database.url).
	Aliases []string

	index []int
	typ   reflect.Type
}

// aliases are the documented variables kept beside the rule's names. The
// secrets (STRIPE_API_KEY, GOCARDLESS_ACCESS_TOKEN,
// RECONCILER_SLACK_WEBHOOK_URL, RECONCILER_REPORT_LINK_KEY) are no keys of
// the file, so they have no rule's name: they stay what they are.
var aliases = map[string][]string{
	"database.url":                  {"DATABASE_URL"},
	"providers.stripe.api_base":     {"STRIPE_API_BASE"},
	"providers.gocardless.api_base": {"GOCARDLESS_API_BASE"},
	"serve.http_addr":               {"RECONCILER_HTTP_ADDR"},
	"metrics.pushgateway_url":       {"RECONCILER_PUSHGATEWAY_URL"},
}

// EnvName is the environment variable that overrides key:
// run.batch_size is RECONCILER_RUN_BATCH_SIZE.
func EnvName(key string) string {
	return "RECONCILER_" + strings.ToUpper(strings.NewReplacer(".", "_", "-", "_").Replace(key))
}

// Fields lists every key of Config, derived from the structs' yaml tags,
// in their order: a key added to a struct has its variable at once.
func Fields() []Field { return fields(reflect.TypeOf(Config{}), "", nil) }

var unmarshaler = reflect.TypeOf((*yaml.Unmarshaler)(nil)).Elem()

func fields(t reflect.Type, prefix string, index []int) []Field {
	var out []Field
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if !f.IsExported() || name == "" || name == "-" {
			continue
		}
		key, idx := join(prefix, name), append(slices.Clone(index), i)
		if f.Type.Kind() == reflect.Struct && !reflect.PointerTo(f.Type).Implements(unmarshaler) {
			out = append(out, fields(f.Type, key, idx)...)
			continue
		}
		out = append(out, Field{Key: key, Env: EnvName(key), Aliases: aliases[key], index: idx, typ: f.Type})
	}
	return out
}

// applyEnv is the environment layer: each key's variable (or an alias)
// replaces the file's value. A variable set to "" counts as unset, except
// the database URL's: an empty one is an error in Validate, never the
// embedded store. Two of a key's names set to different values, or a value
// that does not parse, is an error naming the variable, never the value.
func applyEnv(cfg *Config, lookup Lookup) error {
	root := reflect.ValueOf(cfg).Elem()
	for _, f := range Fields() {
		var name, val string
		for _, n := range append([]string{f.Env}, f.Aliases...) {
			v, set := lookup(n)
			if !set || v == "" && f.Key != "database.url" {
				continue
			}
			if name != "" && v != val {
				return &Error{Key: name, Msg: "and " + n + " are both set, to different values", Hint: "unset one: both set " + f.Key}
			}
			if name == "" {
				name, val = n, v
			}
		}
		if name == "" {
			continue
		}
		if err := setScalar(root.FieldByIndex(f.index), val); err != nil {
			return &Error{Key: name, Msg: typeMsg(f.typ) + " (it sets " + f.Key + ")", Hint: typeHint(f.typ)}
		}
		cfg.fromEnv(f.Key, name)
		cfg.origin(f.Key, name)
		if f.Key == "database.url" {
			cfg.db = dbSource{urlFrom: name, urlVar: true}
		}
	}
	return nil
}

// setScalar decodes s into v as the file's decoder would decode the same
// text written for that key; a list is comma-separated ("" is an item).
func setScalar(v reflect.Value, s string) error {
	n := &yaml.Node{Kind: yaml.ScalarNode, Value: s}
	switch v.Kind() {
	case reflect.String:
		n.Tag = "!!str"
	case reflect.Slice:
		n = &yaml.Node{Kind: yaml.SequenceNode}
		for _, p := range strings.Split(s, ",") {
			n.Content = append(n.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: strings.TrimSpace(p)})
		}
	}
	if v.Kind() == reflect.Int && n.ShortTag() == "!!float" {
		return errors.New("not a whole number") // the decoder would truncate it
	}
	fresh := reflect.New(v.Type())
	if err := n.Decode(fresh.Interface()); err != nil {
		return err
	}
	v.Set(fresh.Elem())
	return nil
}

var durationType = reflect.TypeOf(Duration(0))

func typeMsg(t reflect.Type) string {
	switch {
	case t == durationType:
		return "is not a duration"
	case t.Kind() == reflect.Int || t.Kind() == reflect.Int64:
		return "is not a whole number"
	case t.Kind() == reflect.Float64:
		return "is not a number"
	case t.Kind() == reflect.Bool || t.Kind() == reflect.Pointer && t.Elem().Kind() == reflect.Bool:
		return "is not true or false"
	}
	return "is not a valid value"
}

func typeHint(t reflect.Type) string {
	switch typeMsg(t) {
	case "is not a duration":
		return "write e.g. 24h, 90m or 30s"
	case "is not a whole number":
		return "write e.g. 100, without a decimal point"
	case "is not a number":
		return "write e.g. 25 or 7.5"
	case "is not true or false":
		return "write true or false"
	}
	return "see the commented config.yaml in the repository"
}
