package config

import (
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"reflect"
	"regexp"
	"strings"

	"gopkg.in/yaml.v3"
)

// Setting is one value of the effective configuration.
type Setting struct {
	Key    string `json:"key"`    // dotted, as in config.yaml
	Value  any    `json:"value"`  // as it applies; secrets masked
	Source string `json:"source"` // "default", "c.yaml line 3", "${VAR} in c.yaml line 3", a variable, "flag --batch-size"
}

// secrets are the resolved secrets, which are no keys of the file: each
// with the variable that sets it and the key of the file that names a
// mounted file holding it.
func (c Config) secrets() []struct{ key, env, fileKey, value string } {
	return []struct{ key, env, fileKey, value string }{
		{"providers.stripe.api_key", "STRIPE_API_KEY", "providers.stripe.api_key_file", c.Providers.Stripe.apiKey},
		{"providers.gocardless.access_token", "GOCARDLESS_ACCESS_TOKEN", "providers.gocardless.access_token_file", c.Providers.GoCardless.accessToken},
		{"notify.slack_webhook_url", "RECONCILER_SLACK_WEBHOOK_URL", "notify.slack_webhook_url_file", c.Notify.slackURL},
		{"notify.report_link_key", "RECONCILER_REPORT_LINK_KEY", "notify.report_link_key_file", string(c.Notify.linkKey)},
	}
}

// secretOrigins records where each resolved secret came from: its
// variable when that is set, else the mounted file.
func (c *Config) secretOrigins(getenv func(string) string) {
	for _, s := range c.secrets() {
		switch {
		case s.value == "" && !(s.key == "notify.report_link_key" && c.Notify.linkKey != nil):
		case getenv(s.env) != "":
			c.origin(s.key, s.env)
		default:
			c.origin(s.key, "the file named by "+s.fileKey)
		}
	}
}

// FromFlag records that a flag set key's value (after the caller set it),
// for Describe.
func (c *Config) FromFlag(key, flag string) { c.origin(key, "flag "+flag) }

// Describe lists every key of the configuration with its effective value
// and where that came from, then each secret that is set (masked) with
// its source. No secret is in it: the secrets' own values, a password in
// a database or other URL, and anything that looks like an API key, a
// token or a webhook URL are masked wherever they were written, so a
// secret pasted into the wrong key stays secret.
func (c Config) Describe() []Setting {
	known := c.knownSecrets()
	root := reflect.ValueOf(c)
	var out []Setting
	for _, f := range Fields() {
		out = append(out, Setting{Key: f.Key, Value: describeValue(root.FieldByIndex(f.index), known), Source: c.sourceOf(f.Key)})
	}
	for _, s := range c.secrets() {
		if src, ok := c.origins[s.key]; ok {
			out = append(out, Setting{Key: s.key, Value: maskSecret(s.value), Source: src})
		}
	}
	return out
}

func (c Config) sourceOf(key string) string {
	src, ok := c.origins[key]
	switch {
	case !ok:
		return "default"
	case strings.Contains(src, " line ") && strings.HasPrefix(c.sources[key], "${"):
		return c.sources[key] + " in " + src
	}
	return src
}

func describeValue(v reflect.Value, known []string) any {
	switch x := v.Interface().(type) {
	case Duration:
		return shortDuration(x)
	case *bool:
		if x == nil {
			return nil
		}
		return *x
	case string:
		return mask(x, known)
	case []string:
		out := make([]string, len(x))
		for i, s := range x {
			out[i] = mask(s, known)
		}
		return out
	}
	if v.Kind() == reflect.String { // a named string type
		return mask(v.String(), known)
	}
	return v.Interface()
}

// shortDuration writes 24h for 24h0m0s.
func shortDuration(d Duration) string {
	s := d.D().String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// secretish matches what an API key, a token or a webhook URL looks like.
var secretish = regexp.MustCompile(`(?i)\b[spr]k_(live|test)_|\bwhsec_|\b(sandbox|live)_[a-z0-9_-]{8,}|hooks\.slack\.com/|\bxox[abprs]-|\bBearer\s`)

// dsnPassword matches a password in a key=value DSN or a URL's query.
var dsnPassword = regexp.MustCompile(`(?i)(password\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s&]+)`)

// mask hides the secrets in a value: one of the known secrets or what looks
// like one makes the whole value ****; a URL's password becomes ****.
func mask(s string, known []string) string {
	for _, k := range known {
		if strings.Contains(s, k) {
			return "****"
		}
	}
	if secretish.MatchString(s) {
		return "****"
	}
	if strings.Contains(s, "://") && strings.Contains(s, "@") {
		u, err := url.Parse(s)
		if err != nil || u.User == nil {
			return "****" // a password may be in it, and it cannot be told apart
		}
		if _, ok := u.User.Password(); ok {
			u.User = url.UserPassword(u.User.Username(), "****")
			s = strings.Replace(u.String(), "%2A%2A%2A%2A", "****", 1)
		}
	}
	return dsnPassword.ReplaceAllString(s, "${1}****")
}

// maskSecret shows what kind of secret is set, never the secret: the prefix
// of a Stripe key (sk_live_) or a GoCardless token (sandbox_), and the
// length.
func maskSecret(s string) string {
	prefix := regexp.MustCompile(`^([spr]k_(live|test)_|sandbox_|live_)`).FindString(s)
	return fmt.Sprintf("%s**** (%d characters)", prefix, len(s))
}

// Write prints the effective configuration: YAML, each value followed by a
// comment naming its source ("# from RECONCILER_RUN_BATCH_SIZE"), or, for
// format "json", the list of settings ({key, value, source}).
func (c Config) Write(w io.Writer, format string) error {
	settings := c.Describe()
	if format == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(settings)
	}
	store := "PostgreSQL"
	if reason, ok := c.EmbeddedStore(); ok {
		store = fmt.Sprintf("the embedded SQLite file %s (%s)", OneLine(c.Database.SQLitePath), reason)
	}
	root := &yaml.Node{Kind: yaml.MappingNode,
		HeadComment: "The effective configuration, secrets masked; each value's source follows it.\nStore: " + store}
	for _, s := range settings {
		parent, parts := root, strings.Split(s.Key, ".")
		for _, p := range parts[:len(parts)-1] {
			parent = child(parent, p)
		}
		k, v := &yaml.Node{Kind: yaml.ScalarNode, Value: parts[len(parts)-1]}, &yaml.Node{}
		if err := v.Encode(s.Value); err != nil {
			return err
		}
		comment := "from " + OneLine(s.Source)
		if s.Source == "default" {
			comment = "default"
		}
		if v.Kind == yaml.ScalarNode {
			v.LineComment = comment
		} else {
			k.LineComment = comment
		}
		parent.Content = append(parent.Content, k, v)
	}
	enc := yaml.NewEncoder(w)
	enc.SetIndent(2)
	if err := enc.Encode(&yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{root}}); err != nil {
		return err
	}
	return enc.Close()
}

// child returns the mapping under key in m, adding it when missing.
func child(m *yaml.Node, key string) *yaml.Node {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	c := &yaml.Node{Kind: yaml.MappingNode}
	m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: key}, c)
	return c
}

// masked reports whether v holds, or looks like, a secret (mask changes it).
func (c Config) masked(v string) bool { return mask(v, c.knownSecrets()) != v }

// knownSecrets are the resolved secrets long enough to look for in values.
func (c Config) knownSecrets() []string {
	var known []string
	for _, s := range c.secrets() {
		if len(s.value) >= 8 {
			known = append(known, s.value)
		}
	}
	return known
}
