package config

import (
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"
)

// lookupOf is a map-backed Lookup: a key in the map is set, even to "".
func lookupOf(m map[string]string) Lookup {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestEnvNameRule(t *testing.T) {
	for key, want := range map[string]string{
		"run.batch_size":                     "RECONCILER_RUN_BATCH_SIZE",
		"notify.report_link_ttl":             "RECONCILER_NOTIFY_REPORT_LINK_TTL",
		"database.url":                       "RECONCILER_DATABASE_URL",
		"providers.stripe.api_key_file":      "RECONCILER_PROVIDERS_STRIPE_API_KEY_FILE",
		"providers.gocardless.holidays-file": "RECONCILER_PROVIDERS_GOCARDLESS_HOLIDAYS_FILE",
	} {
		assert.Equal(t, want, EnvName(key))
	}
}

// Every key of the structs is in Fields, each name overrides exactly one
// key, and none is a secret's variable.
func TestFieldsCoverEveryKey(t *testing.T) {
	keys := map[string]bool{}
	names := map[string]string{}
	for _, f := range Fields() {
		keys[f.Key] = true
		for _, n := range append([]string{f.Env}, f.Aliases...) {
			if other, dup := names[n]; dup {
				t.Errorf("%s overrides both %s and %s", n, other, f.Key)
			}
			names[n] = f.Key
		}
	}
	for _, k := range []string{"database.url", "database.embedded", "run.batch_size", "log.level", "providers.stripe.accounts",
		"providers.gocardless.event_retention", "serve.http_addr", "metrics.pushgateway_url", "notify.report_link_ttl"} {
		assert.True(t, keys[k], "Fields lacks %s", k)
	}
	for _, s := range (Config{}).secrets() {
		assert.NotContains(t, names, s.env, "a secret's variable is no key's")
		assert.False(t, keys[s.key], "a secret is no key of the file")
	}
	// Every key of the repository's config.yaml is a field.
	b, err := os.ReadFile("../config.yaml")
	require.NoError(t, err)
	var doc yaml.Node
	require.NoError(t, yaml.Unmarshal(b, &doc))
	lines := map[string]int{}
	require.NoError(t, expand(&doc, "", lookupOf(nil), &Config{}, lines))
	for k := range lines {
		if strings.Contains(k, "[") {
			continue
		}
		if _, ok := Fields0(k); !ok && !isSection(k) {
			t.Errorf("config.yaml key %s is not in Fields", k)
		}
	}
}

func Fields0(key string) (Field, bool) {
	for _, f := range Fields() {
		if f.Key == key {
			return f, true
		}
	}
	return Field{}, false
}

func isSection(key string) bool {
	for _, f := range Fields() {
		if strings.HasPrefix(f.Key, key+".") {
			return true
		}
	}
	return false
}

// sample is a value for a key of type t that differs from d (the default),
// written as its variable would be, and the value it must load as.
func sample(t *testing.T, f Field, d reflect.Value) (string, any) {
	switch {
	case f.typ == durationType:
		v := Duration(3*time.Hour + 7*time.Minute)
		return "3h7m", v
	case f.typ.Kind() == reflect.Int:
		n := int(d.Int()) + 7
		return strconv.Itoa(n), n
	case f.typ.Kind() == reflect.Float64:
		return "3.25", 3.25
	case f.typ.Kind() == reflect.Bool:
		return map[bool]string{true: "false", false: "true"}[d.Bool()], !d.Bool()
	case f.typ.Kind() == reflect.Pointer && f.typ.Elem().Kind() == reflect.Bool:
		v := true
		return "true", &v
	case f.typ.Kind() == reflect.Slice && f.typ.Elem().Kind() == reflect.String:
		return ",acct_1", []string{"", "acct_1"}
	case f.typ.Kind() == reflect.String && !reflect.PointerTo(f.typ).Implements(unmarshaler):
		v := reflect.New(f.typ).Elem()
		v.SetString("h18c-" + f.Key)
		return v.String(), v.Interface()
	}
	t.Logf("%s: type %s has no sample value here; add one", f.Key, f.typ)
	return "", nil
}

// Each key's variable, and each of its aliases, overrides the file's
// value; the value is then recorded as the variable's, for errors and for
// Describe.
func TestEveryKeyHasItsVariable(t *testing.T) {
	def := reflect.ValueOf(Default())
	for _, f := range Fields() {
		text, want := sample(t, f, def.FieldByIndex(f.index))
		if want == nil {
			continue
		}
		for _, name := range append([]string{f.Env}, f.Aliases...) {
			t.Run(name, func(t *testing.T) {
				// The file sets the key too: the environment wins over it.
				file := yamlAt(f.Key, "null")
				// A key naming a mounted file (h18c-…) finds one there.
				readFile := func(p string) ([]byte, error) {
					if strings.HasPrefix(p, "h18c-") {
						return []byte("h18c-a-secret-of-at-least-32-bytes"), nil
					}
					return fakeFS(map[string]string{"c.yaml": file})(p)
				}
				c, err := LoadEnv("c.yaml", true, lookupOf(map[string]string{name: text}), readFile)
				require.NoError(t, err)
				assert.Equal(t, want, reflect.ValueOf(c).FieldByIndex(f.index).Interface())
				assert.Equal(t, name, c.sourceOf(f.Key))
				assert.Equal(t, name, c.sources[f.Key], "errors name the variable, not the value")
			})
		}
	}
}

func TestEnvironmentLayerOrderAndErrors(t *testing.T) {
	files := fakeFS(map[string]string{"c.yaml": "run:\n  batch_size: 50\n  window: 2h\n"})
	c, err := LoadEnv("c.yaml", true, lookupOf(map[string]string{"RECONCILER_RUN_BATCH_SIZE": "70"}), files)
	require.NoError(t, err)
	assert.Equal(t, 70, c.Run.BatchSize, "the environment wins over the file")
	assert.Equal(t, 2*time.Hour, c.Run.Window.D(), "the file wins over the default")
	assert.Equal(t, "c.yaml line 3", c.sourceOf("run.window"))
	assert.Equal(t, "default", c.sourceOf("run.overlap"))

	// An empty variable is unset (except the database URL's).
	c, err = LoadEnv("c.yaml", true, lookupOf(map[string]string{"RECONCILER_RUN_BATCH_SIZE": ""}), files)
	require.NoError(t, err)
	assert.Equal(t, 50, c.Run.BatchSize)

	const secret = "sk_live_h18csecretvalue"
	for _, tc := range []struct {
		env     map[string]string
		key     string
		has     string
		viaLoad bool
	}{
		{map[string]string{"RECONCILER_RUN_BATCH_SIZE": secret}, "RECONCILER_RUN_BATCH_SIZE", "is not a whole number (it sets run.batch_size)", true},
		{map[string]string{"RECONCILER_RUN_BATCH_SIZE": "1.5"}, "RECONCILER_RUN_BATCH_SIZE", "is not a whole number", true},
		{map[string]string{"RECONCILER_RUN_WINDOW": secret}, "RECONCILER_RUN_WINDOW", "is not a duration", true},
		{map[string]string{"RECONCILER_PROVIDERS_STRIPE_ENABLED": secret}, "RECONCILER_PROVIDERS_STRIPE_ENABLED", "is not true or false", true},
		{map[string]string{"RECONCILER_PROVIDERS_STRIPE_REQUESTS_PER_SECOND": secret}, "RECONCILER_PROVIDERS_STRIPE_REQUESTS_PER_SECOND", "is not a number", true},
		{map[string]string{"RECONCILER_HTTP_ADDR": ":1", "RECONCILER_SERVE_HTTP_ADDR": ":2"}, "RECONCILER_SERVE_HTTP_ADDR", "and RECONCILER_HTTP_ADDR are both set, to different values", true},
		{map[string]string{"RECONCILER_RUN_BATCH_SIZE": "0"}, "run.batch_size", "the value from RECONCILER_RUN_BATCH_SIZE is out of range", false},
		{map[string]string{"RECONCILER_LOG_LEVEL": secret}, "log.level", "unknown level the value from RECONCILER_LOG_LEVEL", false},
	} {
		c, err := LoadEnv("c.yaml", true, lookupOf(tc.env), files)
		if tc.viaLoad {
			require.Error(t, err, "%v", tc.env)
		} else {
			require.NoError(t, err)
			err = c.Validate()
		}
		ce := asConfigError(t, err)
		assert.Equal(t, tc.key, ce.Key, "%v", tc.env)
		assert.Contains(t, err.Error(), tc.has)
		assert.NotContains(t, err.Error(), secret)
	}
	// The same value under both names is no conflict.
	c, err = LoadEnv("c.yaml", true, lookupOf(map[string]string{"RECONCILER_HTTP_ADDR": ":9", "RECONCILER_SERVE_HTTP_ADDR": ":9"}), files)
	require.NoError(t, err)
	assert.Equal(t, ":9", c.Serve.HTTPAddr)
}

// A secret pasted into the wrong key of the file is never echoed.
func TestSecretInTheWrongKeyIsNotEchoed(t *testing.T) {
	for _, body := range []string{
		"log:\n  level: sk_live_h18cpastedkey1234\n",
		"log:\n  format: https://hooks.slack.com/services/T0/B0/h18cpasted\n",
		"serve:\n  schedule: sk_live_h18cpastedkey1234\n",
		"serve:\n  time_zone: postgres://u:h18cpasted@db/x\n",
		"providers:\n  stripe:\n    api_base: sandbox_h18cpastedtoken\n",
		"providers:\n  stripe:\n    accounts: [sk_live_h18cpastedkey1234]\n",
		"run:\n  window: sk_live_h18cpastedkey1234\n",
	} {
		_, err := loadYAML(t, body, nil)
		require.Error(t, err, body)
		assert.NotContains(t, err.Error(), "h18cpasted", body)
	}
}

// EnvOf(os.Getenv) tells an empty variable from an unset one; a test's
// getenv cannot, and says "" is unset.
func TestEnvOf(t *testing.T) {
	t.Setenv("H18C_EMPTY", "")
	v, ok := EnvOf(os.Getenv)("H18C_EMPTY")
	assert.True(t, ok)
	assert.Equal(t, "", v)
	_, ok = EnvOf(os.Getenv)("H18C_NEVER_SET")
	assert.False(t, ok)
	_, ok = EnvOf(fakeEnv(map[string]string{"H18C_EMPTY": ""}))("H18C_EMPTY")
	assert.False(t, ok)
}
