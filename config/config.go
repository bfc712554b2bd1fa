// Package config loads reconciler's configuration in layers: defaults, then
// config.yaml (with ${VAR} expansion), then the environment; the command
// line applies flags on top. Validate names the key at fault and the fix.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
	"gopkg.in/yaml.v3"

	"github.com/reconciler/reconciler/internal/signedlink"
	"github.com/reconciler/reconciler/providers/gocardless"
	"github.com/reconciler/reconciler/providers/stripe"
	"github.com/reconciler/reconciler/reconcile"
)

// Config is the whole configuration. Secrets are never read from the file:
// they come from the environment or from files mounted beside it.
type Config struct {
	Database  Database  `yaml:"database"`
	Run       Run       `yaml:"run"`
	Log       Log       `yaml:"log"`
	Providers Providers `yaml:"providers"`
	Serve     Serve     `yaml:"serve"`
	Metrics   Metrics   `yaml:"metrics"`
	Notify    Notify    `yaml:"notify"`
	// Schema maps the application's own tables, columns and states
	// (issue 18); empty, the contract's.
	Schema Schema `yaml:"schema"`

	// sources names where a value came from when that was the environment
	// (dotted key → "${VAR}" or the variable's name): an error about such a
	// value names its source, never the value, which may be a secret.
	sources map[string]string

	// Configuration that never guesses (issue 18): origins names where a
	// key's value came from when it was not the default (the file and
	// line, or the variable), for Describe; db is how the store was
	// configured, for Validate and EmbeddedStore.
	origins map[string]string
	db      dbSource
}

// origin records that key's value came from src (a file line, a variable).
func (c *Config) origin(key, src string) {
	if c.origins == nil {
		c.origins = map[string]string{}
	}
	c.origins[key] = src
}

// fromEnv records that key's value came from src (the environment).
func (c *Config) fromEnv(key, src string) {
	if c.sources == nil {
		c.sources = map[string]string{}
	}
	c.sources[key] = src
}

// show is how an error may print key's value v: quoted, or, when it came
// from the environment, the name of its source instead. A value under
// notify. is never printed: that is where a webhook URL or a link key
// pasted into the wrong key would sit.
func (c Config) show(key, v string) string {
	if src, ok := c.sources[key]; ok {
		return "the value from " + src
	}
	if strings.HasPrefix(key, "notify.") {
		return "the value"
	}
	// A secret pasted into the wrong key (an API key in log.level, a URL
	// with a password): never echoed.
	if c.masked(v) {
		return "the value"
	}
	return Quote(v)
}

// Notify configures the run summary posted to support's chat.
type Notify struct {
	// SlackWebhookURLFile names a mounted file holding a Slack incoming
	// webhook URL (a secret); RECONCILER_SLACK_WEBHOOK_URL overrides it.
	SlackWebhookURLFile string `yaml:"slack_webhook_url_file"`
	// ReportURL links the full report in the message; {id} is replaced by
	// the run id. Point it at serve's report page,
	// https://host/runs/{id}/report.html: with a report link key the
	// message's link is signed (it opens that run's report without a token
	// until it expires); without one the link is posted as it is and needs
	// a bearer token (or is a path to a report file). Empty: no link.
	ReportURL string `yaml:"report_url"`
	// ReportLinkKeyFile names a mounted file holding the key (a secret, at
	// least 32 bytes) that signs the report links; RECONCILER_REPORT_LINK_KEY
	// overrides it. `run` (which posts the links) and `serve` (which checks
	// them) must read the same key. Rotating it revokes every link.
	ReportLinkKeyFile string `yaml:"report_link_key_file"`
	// ReportLinkTTL is how long a signed report link opens the report.
	ReportLinkTTL Duration `yaml:"report_link_ttl"`

	slackURL string
	// linkKey is the report link key; linkKeyFrom names where it came from
	// (the variable or the key of the file), for errors about it.
	linkKey     []byte
	linkKeyFrom string
}

// SlackURL returns the resolved webhook URL, "" when off.
func (n Notify) SlackURL() string { return n.slackURL }

// ReportLinkKey returns the key that signs report links, nil when none is
// configured (links are then unsigned, and serve opens reports only with
// a bearer token). It is a secret: never log it.
func (n Notify) ReportLinkKey() []byte { return n.linkKey }

// DefaultReportLinkTTL is how long a signed report link opens the report
// by default: a month, long enough for the item to be looked at after a
// weekend or a holiday, short enough that old messages stop working.
const DefaultReportLinkTTL = 30 * 24 * time.Hour

// Serve configures `reconciler serve`.
type Serve struct {
	// Schedule is a cron schedule: five standard fields or a descriptor
	// (@daily, @every 6h), with an optional CRON_TZ= prefix.
	Schedule string `yaml:"schedule"`
	// TimeZone applies to a schedule without CRON_TZ= (IANA name).
	TimeZone string `yaml:"time_zone"`
	// HTTPAddr is where the API listens; RECONCILER_HTTP_ADDR overrides.
	HTTPAddr string `yaml:"http_addr"`
}

// CronSpec is the schedule with the time zone applied.
func (s Serve) CronSpec() string {
	if s.TimeZone == "" || strings.HasPrefix(s.Schedule, "CRON_TZ=") || strings.HasPrefix(s.Schedule, "TZ=") {
		return s.Schedule
	}
	return "CRON_TZ=" + s.TimeZone + " " + s.Schedule
}

// Metrics configures metrics export.
type Metrics struct {
	// PushgatewayURL, when set, receives `run`'s metrics at its end;
	// RECONCILER_PUSHGATEWAY_URL overrides.
	PushgatewayURL string `yaml:"pushgateway_url"`
}

// Database configures the store.
type Database struct {
	// URL is a PostgreSQL URL or DSN; DATABASE_URL overrides it. Put only a
	// ${DATABASE_URL} reference here: a literal password belongs in a Secret.
	URL          string `yaml:"url"`
	MaxOpenConns int    `yaml:"max_open_conns"`
	// SQLitePath is the embedded store's file, used when Embedded is set or
	// no database is configured at all (no url key, no DATABASE_URL).
	SQLitePath string `yaml:"sqlite_path"`
	// Embedded picks the embedded SQLite file explicitly. A URL configured
	// beside it is an error, as is a configured URL that is empty: the
	// store is never picked by falling back.
	Embedded bool `yaml:"embedded"`
	// AutoMigrate applies pending migrations before every run.
	AutoMigrate bool `yaml:"auto_migrate"`
}

// Run configures reconciliation runs.
type Run struct {
	Window        Duration `yaml:"window"`         // default window length
	Overlap       Duration `yaml:"overlap"`        // how far back a default window reaches past its start
	BatchSize     int      `yaml:"batch_size"`     // payments per write transaction
	StuckAfter    Duration `yaml:"stuck_after"`    // age after which a non-terminal payment is re-fetched
	StuckLimit    int      `yaml:"stuck_limit"`    // at most this many re-fetches per run; -1 disables
	ShutdownGrace Duration `yaml:"shutdown_grace"` // SIGTERM to exit, at most
	LockWait      Duration `yaml:"lock_wait"`      // keep trying for a held lock this long before exit code 3
	// Repair is how a run repairs what it finds: apply (the default, also
	// when empty) or deliver (no payment is written; the missed events are
	// recorded unprocessed for the application's own webhook worker).
	Repair string `yaml:"repair"`
}

// Log configures logging.
type Log struct {
	Level  string `yaml:"level"`  // debug, info, warn, error
	Format string `yaml:"format"` // auto (JSON unless stderr is a terminal), json, text
}

// Providers configures each provider.
type Providers struct {
	Stripe     Stripe     `yaml:"stripe"`
	GoCardless GoCardless `yaml:"gocardless"`
}

// GoCardless configures the GoCardless provider. The access token comes
// from GOCARDLESS_ACCESS_TOKEN or from the file named by access_token_file.
type GoCardless struct {
	Enabled           *bool    `yaml:"enabled"` // default: on when a token is available
	AccessTokenFile   string   `yaml:"access_token_file"`
	APIBase           string   `yaml:"api_base"` // GOCARDLESS_API_BASE overrides; default from the token (sandbox_… → sandbox)
	RequestsPerSecond float64  `yaml:"requests_per_second"`
	MaxRetries        int      `yaml:"max_retries"`
	Timeout           Duration `yaml:"timeout"`          // one attempt of a request
	RequestDeadline   Duration `yaml:"request_deadline"` // a request: every attempt and wait
	// StuckAfterWorkingDays is the stuck-payment threshold in UK working
	// days (weekends and England and Wales bank holidays excluded).
	StuckAfterWorkingDays int `yaml:"stuck_after_working_days"`
	// HolidaysFile lists bank holidays (one ISO date a line) that replace the
	// computed England and Wales ones for the years it covers.
	HolidaysFile string `yaml:"holidays_file"`
	// EventRetention is how far back the event log reaches; 0 when unknown.
	EventRetention Duration `yaml:"event_retention"`

	accessToken string
}

// AccessToken returns the resolved token.
func (g GoCardless) AccessToken() string { return g.accessToken }

// On reports whether GoCardless runs when no --provider is given.
func (g GoCardless) On() bool {
	if g.Enabled != nil {
		return *g.Enabled
	}
	return g.accessToken != ""
}

// Stripe configures the Stripe provider. The key comes from STRIPE_API_KEY
// or from the file named by api_key_file (a mounted Secret).
type Stripe struct {
	Enabled           *bool    `yaml:"enabled"` // default: on when a key is available
	APIKeyFile        string   `yaml:"api_key_file"`
	APIBase           string   `yaml:"api_base"` // STRIPE_API_BASE overrides it
	RequestsPerSecond float64  `yaml:"requests_per_second"`
	MaxRetries        int      `yaml:"max_retries"`
	Timeout           Duration `yaml:"timeout"`          // one attempt of a request
	RequestDeadline   Duration `yaml:"request_deadline"` // a request: every attempt and wait
	Accounts          []string `yaml:"accounts"`         // connected accounts; "" is the platform

	apiKey string
}

// APIKey returns the resolved key (from the environment or api_key_file).
func (s Stripe) APIKey() string { return s.apiKey }

// On reports whether Stripe runs when no --provider is given.
func (s Stripe) On() bool {
	if s.Enabled != nil {
		return *s.Enabled
	}
	return s.apiKey != ""
}

// Duration is a time.Duration written as a Go duration ("24h", "90m").
type Duration time.Duration

// UnmarshalYAML parses a Go duration. Its error names only the line: the
// decoder maps the line to the key and never prints the value, which may
// have come from the environment.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: cannot unmarshal into duration", n.Line)}}
	}
	*d = Duration(v)
	return nil
}

// D returns the time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// Default returns the configuration used when nothing is set. The run's
// and the providers' defaults are the engine's and the provider packages'
// constants, so each is written once.
func Default() Config {
	return Config{
		Database: Database{MaxOpenConns: 10, AutoMigrate: true, SQLitePath: "reconciler.db"},
		Run: Run{
			Window: Duration(reconcile.DefaultWindow), Overlap: Duration(reconcile.DefaultOverlap), BatchSize: reconcile.DefaultBatchSize,
			StuckAfter: Duration(reconcile.DefaultStuckAfter), StuckLimit: reconcile.DefaultStuckLimit, ShutdownGrace: Duration(25 * time.Second),
		},
		Log:    Log{Level: "info", Format: "auto"},
		Schema: DefaultSchema(),
		Notify: Notify{ReportLinkTTL: Duration(DefaultReportLinkTTL)},
		Serve:  Serve{Schedule: "30 2 * * *", TimeZone: "UTC", HTTPAddr: ":8080"},
		Providers: Providers{
			Stripe: Stripe{
				APIBase: stripe.DefaultBaseURL, RequestsPerSecond: stripe.DefaultRequestsPerSecond, MaxRetries: stripe.DefaultMaxRetries,
				Timeout: Duration(stripe.DefaultTimeout), RequestDeadline: Duration(stripe.DefaultRequestDeadline), Accounts: []string{""},
			},
			// APIBase stays empty: the provider picks live or sandbox from the token.
			GoCardless: GoCardless{
				RequestsPerSecond: gocardless.DefaultRequestsPerSecond, MaxRetries: gocardless.DefaultMaxRetries,
				Timeout: Duration(gocardless.DefaultTimeout), RequestDeadline: Duration(gocardless.DefaultRequestDeadline), StuckAfterWorkingDays: 5,
			},
		},
	}
}

// Error is a configuration error: which key, what is wrong, how to fix it.
type Error struct {
	Key  string
	Msg  string
	Hint string
}

func (e *Error) Error() string {
	s := e.Key + ": " + e.Msg
	if e.Hint != "" {
		s += " (" + e.Hint + ")"
	}
	return s
}

// Path returns the config file to read: explicit, else RECONCILER_CONFIG,
// else ./config.yaml. explicit reports whether it must exist.
func Path(flag string, getenv func(string) string) (path string, explicit bool) {
	if flag != "" {
		return flag, true
	}
	if p := getenv("RECONCILER_CONFIG"); p != "" {
		return p, true
	}
	return "config.yaml", false
}

var envRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(:-([^}]*))?\}`)

// Load builds the configuration from defaults, the file at path (skipped
// when it is missing and !mustExist) and the environment (getenv; see
// EnvOf for how an empty variable is told from an unset one).
func Load(path string, mustExist bool, getenv func(string) string, readFile func(string) ([]byte, error)) (Config, error) {
	return LoadEnv(path, mustExist, EnvOf(getenv), readFile)
}

// LoadEnv is Load reading the environment through lookup.
func LoadEnv(path string, mustExist bool, lookup Lookup, readFile func(string) ([]byte, error)) (Config, error) {
	getenv := func(k string) string { v, _ := lookup(k); return v }
	cfg := Default()
	b, err := readFile(path)
	switch {
	case err == nil:
		if err := decode(b, path, &cfg, lookup); err != nil {
			return cfg, err
		}
	case errors.Is(err, os.ErrNotExist) && !mustExist:
	default:
		return cfg, &Error{Key: "--config", Msg: err.Error(), Hint: "pass an existing file or unset RECONCILER_CONFIG"}
	}
	// The environment layer: every key's RECONCILER_… variable, and the
	// documented aliases (DATABASE_URL, STRIPE_API_BASE, …).
	if err := applyEnv(&cfg, lookup); err != nil {
		return cfg, err
	}
	g := &cfg.Providers.GoCardless
	g.accessToken = getenv("GOCARDLESS_ACCESS_TOKEN")
	if g.accessToken == "" && g.AccessTokenFile != "" {
		kb, err := readFile(g.AccessTokenFile)
		if err != nil {
			return cfg, &Error{Key: "providers.gocardless.access_token_file", Msg: "cannot read the token file", Hint: "mount the Secret there or set GOCARDLESS_ACCESS_TOKEN"}
		}
		g.accessToken = strings.TrimSpace(string(kb))
	}
	cfg.Notify.slackURL = getenv("RECONCILER_SLACK_WEBHOOK_URL")
	if cfg.Notify.slackURL == "" && cfg.Notify.SlackWebhookURLFile != "" {
		b, err := readFile(cfg.Notify.SlackWebhookURLFile)
		if err != nil {
			return cfg, &Error{Key: "notify.slack_webhook_url_file", Msg: "cannot read the file", Hint: "mount the Secret there or set RECONCILER_SLACK_WEBHOOK_URL"}
		}
		cfg.Notify.slackURL = strings.TrimSpace(string(b))
	}
	if k := getenv("RECONCILER_REPORT_LINK_KEY"); k != "" {
		cfg.Notify.linkKey, cfg.Notify.linkKeyFrom = []byte(strings.TrimSpace(k)), "RECONCILER_REPORT_LINK_KEY"
	} else if f := cfg.Notify.ReportLinkKeyFile; f != "" {
		b, err := readFile(f)
		if err != nil {
			return cfg, &Error{Key: "notify.report_link_key_file", Msg: "cannot read the key file", Hint: "mount the Secret there or set RECONCILER_REPORT_LINK_KEY"}
		}
		// Never nil: an empty file is a key too short, not no key.
		cfg.Notify.linkKey, cfg.Notify.linkKeyFrom = append([]byte{}, bytes.TrimSpace(b)...), "notify.report_link_key_file"
	}
	s := &cfg.Providers.Stripe
	s.apiKey = getenv("STRIPE_API_KEY")
	if s.apiKey == "" && s.APIKeyFile != "" {
		kb, err := readFile(s.APIKeyFile)
		if err != nil {
			return cfg, &Error{Key: "providers.stripe.api_key_file", Msg: "cannot read the key file", Hint: "mount the Secret there or set STRIPE_API_KEY"}
		}
		s.apiKey = strings.TrimSpace(string(kb))
	}
	cfg.secretOrigins(getenv) // issue 18: for Describe, which masks them
	return cfg, nil
}

// decode parses YAML, then expands ${VAR} inside each scalar value (never in
// the YAML text, so a password full of YAML syntax stays a plain string),
// then decodes strictly: an unknown key is an error. Its errors name the
// dotted key and the file's line, and never print a value that came from
// the environment.
func decode(b []byte, path string, cfg *Config, lookup Lookup) error {
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return &Error{Key: path, Msg: scrub(strings.TrimPrefix(err.Error(), "yaml: ")), Hint: "fix the YAML syntax there"}
	}
	if len(doc.Content) == 0 {
		return nil // empty or comments only
	}
	lines := map[string]int{}
	if err := expand(&doc, "", lookup, cfg, lines); err != nil {
		return err
	}
	if err := wholeNumbers(doc.Content[0], reflect.TypeOf(*cfg), "", path, cfg, lines); err != nil {
		return err
	}
	out, err := yaml.Marshal(&doc)
	if err != nil {
		return &Error{Key: path, Msg: scrub(err.Error()), Hint: "fix the YAML there"}
	}
	dec := yaml.NewDecoder(bytes.NewReader(out))
	dec.KnownFields(true)
	if err := dec.Decode(cfg); err != nil && !errors.Is(err, io.EOF) {
		return decodeError(err, out, path, cfg, lines)
	}
	// Where each value came from (Describe), and whether the file
	// configures a database: a url key does, unless its value is only
	// ${VAR:-} references to unset variables (written to allow it unset).
	for k, l := range lines {
		cfg.origin(k, fmt.Sprintf("%s line %d", path, l))
	}
	if l, ok := lines["database.url"]; ok && cfg.db.unsetRef == "" {
		cfg.db.urlFrom = fmt.Sprintf("%s line %d", path, l)
	}
	return nil
}

var errLine = regexp.MustCompile(`^line (\d+): (.*)$`)

// decodeError turns the decoder's first complaint about the re-encoded
// document out into an *Error naming the dotted key, the line of the
// original file and the fix.
func decodeError(err error, out []byte, path string, cfg *Config, lines map[string]int) error {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	var te *yaml.TypeError
	if errors.As(err, &te) && len(te.Errors) > 0 {
		msg = te.Errors[0]
	}
	m := errLine.FindStringSubmatch(strings.TrimSpace(msg))
	if m == nil {
		return &Error{Key: path, Msg: scrub(msg), Hint: "see the commented config.yaml in the repository for every key"}
	}
	var tree yaml.Node
	_ = yaml.Unmarshal(out, &tree)
	keys, values := map[int]string{}, map[int]string{}
	index(&tree, "", keys, values)
	n, _ := strconv.Atoi(m[1])
	key, ok := keys[n]
	if !ok {
		return &Error{Key: path, Msg: scrub(msg), Hint: "see the commented config.yaml in the repository for every key"}
	}
	at := ""
	if l, ok := lines[key]; ok {
		at = fmt.Sprintf(" (%s line %d)", path, l)
	}
	what := cfg.show(key, values[n])
	switch {
	case strings.Contains(m[2], "not found in type"):
		return &Error{Key: key, Msg: "is not a known key" + at, Hint: "check the spelling; the commented config.yaml in the repository lists every key"}
	case strings.HasSuffix(m[2], "into duration"):
		return &Error{Key: key, Msg: what + " is not a duration" + at, Hint: "write e.g. 24h, 90m or 30s"}
	case strings.HasSuffix(m[2], "into int"):
		return &Error{Key: key, Msg: what + " is not a whole number" + at, Hint: "write e.g. 100, without quotes or a decimal point"}
	case strings.HasSuffix(m[2], "into float64"):
		return &Error{Key: key, Msg: what + " is not a number" + at, Hint: "write e.g. 25 or 7.5"}
	case strings.HasSuffix(m[2], "into bool"), strings.HasSuffix(m[2], "into *bool"):
		return &Error{Key: key, Msg: what + " is not true or false" + at, Hint: "write true or false"}
	case strings.Contains(m[2], "into []"):
		return &Error{Key: key, Msg: "is not a list" + at, Hint: `write a YAML list, e.g. ["", acct_1]`}
	case strings.Contains(m[2], "into config."):
		return &Error{Key: key, Msg: "is not a mapping of keys" + at, Hint: "indent its keys under it"}
	}
	return &Error{Key: key, Msg: "has the wrong type" + at, Hint: "see the commented config.yaml in the repository"}
}

// wholeNumbers rejects a fraction written for an integer key: the decoder
// would truncate 1.5 to 1 silently.
func wholeNumbers(n *yaml.Node, t reflect.Type, path, file string, cfg *Config, lines map[string]int) error {
	switch {
	case t.Kind() == reflect.Struct && n.Kind == yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			for j := 0; j < t.NumField(); j++ {
				f := t.Field(j)
				if name, _, _ := strings.Cut(f.Tag.Get("yaml"), ","); name != "" && name == n.Content[i].Value {
					if err := wholeNumbers(n.Content[i+1], f.Type, join(path, name), file, cfg, lines); err != nil {
						return err
					}
				}
			}
		}
	case t.Kind() == reflect.Int && n.Kind == yaml.ScalarNode && n.ShortTag() == "!!float":
		return &Error{Key: path, Msg: cfg.show(path, n.Value) + fmt.Sprintf(" is not a whole number (%s line %d)", file, lines[path]), Hint: "write e.g. 100, without a decimal point"}
	}
	return nil
}

// scrub drops the values a YAML message quotes in backticks.
func scrub(s string) string {
	return regexp.MustCompile("`[^`]*`").ReplaceAllString(s, "a value")
}

// index maps each line of n's tree to the dotted key written there, and to
// the scalar value on it.
func index(n *yaml.Node, path string, keys, values map[int]string) {
	mark := func(line int, key string) {
		if _, ok := keys[line]; !ok {
			keys[line] = key
		}
	}
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			index(c, path, keys, values)
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			p := join(path, k.Value)
			mark(k.Line, p)
			if v.Kind == yaml.ScalarNode {
				if _, ok := values[v.Line]; !ok {
					values[v.Line] = v.Value
				}
			}
			index(v, p, keys, values)
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			p := fmt.Sprintf("%s[%d]", path, i)
			mark(c.Line, p)
			if c.Kind == yaml.ScalarNode {
				if _, ok := values[c.Line]; !ok {
					values[c.Line] = c.Value
				}
			}
			index(c, p, keys, values)
		}
	case yaml.ScalarNode:
		mark(n.Line, path)
	}
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// expand replaces each ${VAR} and ${VAR:-default} in the scalars under n
// (at dotted key path), records which keys took a value from the
// environment, and the original line of every key. An unset ${VAR} without
// a default is an error naming the key and the variable.
func expand(n *yaml.Node, path string, lookup Lookup, cfg *Config, lines map[string]int) error {
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			p := join(path, n.Content[i].Value)
			lines[p] = n.Content[i].Line
			if err := expand(n.Content[i+1], p, lookup, cfg, lines); err != nil {
				return err
			}
		}
		return nil
	case yaml.SequenceNode:
		for i, c := range n.Content {
			p := fmt.Sprintf("%s[%d]", path, i)
			lines[p] = c.Line
			if err := expand(c, p, lookup, cfg, lines); err != nil {
				return err
			}
		}
		return nil
	case yaml.DocumentNode, yaml.AliasNode:
		for _, c := range n.Content {
			if err := expand(c, path, lookup, cfg, lines); err != nil {
				return err
			}
		}
		return nil
	}
	if n.Kind != yaml.ScalarNode || !strings.Contains(n.Value, "${") {
		return nil
	}
	var refs []string
	var unset string
	raw, unsetSet, optional := n.Value, false, envRef.ReplaceAllString(n.Value, "") == ""
	n.Value = envRef.ReplaceAllStringFunc(n.Value, func(m string) string {
		sub := envRef.FindStringSubmatch(m)
		refs = append(refs, "${"+sub[1]+"}")
		v, set := lookup(sub[1])
		if v != "" {
			optional = false
			return v
		}
		// optional: every reference is ${VAR:-} to an unset variable.
		optional = optional && !set && sub[2] != "" && sub[3] == ""
		if sub[2] == "" && unset == "" {
			unset, unsetSet = sub[1], set
		}
		return sub[3]
	})
	if unset != "" && unsetSet {
		return &Error{Key: path, Msg: fmt.Sprintf("${%s} is set but empty", unset), Hint: fmt.Sprintf("give %s a value, or unset it and write ${%s:-default}", unset, unset)}
	}
	if unset != "" {
		return &Error{Key: path, Msg: fmt.Sprintf("${%s} is not set", unset), Hint: fmt.Sprintf("export %s, or write ${%s:-default} to allow it unset", unset, unset)}
	}
	if optional && path == "database.url" {
		cfg.db.unsetRef = raw
	}
	if len(refs) > 0 {
		cfg.fromEnv(path, strings.Join(refs, ", "))
	}
	// Re-resolve the type from the expanded value ("7.5" is a number);
	// the encoder quotes it when YAML syntax inside would change it.
	n.Tag = ""
	return nil
}

// Validate checks the configuration and returns the first problem found.
// Every numeric and duration key is checked against its row of Limits.
func (c Config) Validate() error {
	if strings.Contains(c.Database.URL, "${") {
		return &Error{Key: "database.url", Msg: "refers to an unset environment variable", Hint: "set DATABASE_URL"}
	}
	if err := c.checkStore(); err != nil { // issue 18: the store is never picked by falling back
		return err
	}
	if err := c.validateSchema(); err != nil { // issue 18: the application's tables
		return err
	}
	s, g := c.Providers.Stripe, c.Providers.GoCardless
	for _, v := range []struct {
		key string
		v   float64
	}{
		{"database.max_open_conns", float64(c.Database.MaxOpenConns)},
		{"run.window", float64(c.Run.Window)},
		{"run.overlap", float64(c.Run.Overlap)},
		{"run.batch_size", float64(c.Run.BatchSize)},
		{"run.stuck_after", float64(c.Run.StuckAfter)},
		{"run.stuck_limit", float64(c.Run.StuckLimit)},
		{"run.shutdown_grace", float64(c.Run.ShutdownGrace)},
		{"run.lock_wait", float64(c.Run.LockWait)},
		{"providers.stripe.requests_per_second", s.RequestsPerSecond},
		{"providers.stripe.max_retries", float64(s.MaxRetries)},
		{"providers.stripe.timeout", float64(s.Timeout)},
		{"providers.stripe.request_deadline", float64(s.RequestDeadline)},
		{"providers.gocardless.requests_per_second", g.RequestsPerSecond},
		{"providers.gocardless.max_retries", float64(g.MaxRetries)},
		{"providers.gocardless.timeout", float64(g.Timeout)},
		{"providers.gocardless.request_deadline", float64(g.RequestDeadline)},
		{"providers.gocardless.stuck_after_working_days", float64(g.StuckAfterWorkingDays)},
		{"providers.gocardless.event_retention", float64(g.EventRetention)},
		{"notify.report_link_ttl", float64(c.Notify.ReportLinkTTL)},
	} {
		if err := mustLimit(v.key).Check(v.key, v.v, c.sources[v.key]); err != nil {
			return err
		}
	}
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		return &Error{Key: "log.level", Msg: "unknown level " + c.show("log.level", c.Log.Level), Hint: "use debug, info, warn or error"}
	}
	switch c.Run.Repair {
	case "", reconcile.RepairApply, reconcile.RepairDeliver:
	default:
		return &Error{Key: "run.repair", Msg: "unknown repair " + c.show("run.repair", c.Run.Repair), Hint: "use apply or deliver"}
	}
	switch c.Log.Format {
	case "auto", "json", "text":
	default:
		return &Error{Key: "log.format", Msg: "unknown format " + c.show("log.format", c.Log.Format), Hint: "use auto, json or text"}
	}
	if !strings.HasPrefix(s.APIBase, "http://") && !strings.HasPrefix(s.APIBase, "https://") {
		return &Error{Key: "providers.stripe.api_base", Msg: c.show("providers.stripe.api_base", s.APIBase) + " is not an http(s) URL", Hint: "e.g. https://api.stripe.com, or set STRIPE_API_BASE"}
	}
	for i, a := range s.Accounts {
		if a != "" && !strings.HasPrefix(a, "acct_") {
			return &Error{Key: fmt.Sprintf("providers.stripe.accounts[%d]", i), Msg: c.show(fmt.Sprintf("providers.stripe.accounts[%d]", i), a) + " is not a connected account id", Hint: `use acct_… or "" for the platform`}
		}
	}
	if g.APIBase != "" && !strings.HasPrefix(g.APIBase, "http://") && !strings.HasPrefix(g.APIBase, "https://") {
		return &Error{Key: "providers.gocardless.api_base", Msg: c.show("providers.gocardless.api_base", g.APIBase) + " is not an http(s) URL", Hint: "e.g. https://api-sandbox.gocardless.com, or set GOCARDLESS_API_BASE"}
	}
	if c.Serve.TimeZone != "" {
		if _, err := time.LoadLocation(c.Serve.TimeZone); err != nil {
			return &Error{Key: "serve.time_zone", Msg: "unknown time zone " + c.show("serve.time_zone", c.Serve.TimeZone), Hint: "use an IANA name such as Europe/London or UTC"}
		}
	}
	if _, err := cron.ParseStandard(c.Serve.CronSpec()); err != nil {
		msg := c.show("serve.schedule", c.Serve.Schedule) + " is not a schedule"
		if _, env := c.sources["serve.schedule"]; !env && !c.masked(c.Serve.Schedule) {
			msg += ": " + scrub(err.Error())
		}
		return &Error{Key: "serve.schedule", Msg: msg, Hint: `use five cron fields ("30 2 * * *"), a descriptor (@daily, @every 6h), optionally prefixed CRON_TZ=Europe/London`}
	}
	if c.Serve.HTTPAddr == "" || !strings.Contains(c.Serve.HTTPAddr, ":") {
		return &Error{Key: "serve.http_addr", Msg: c.show("serve.http_addr", c.Serve.HTTPAddr) + " is not host:port", Hint: "e.g. :8080 or 127.0.0.1:8080; RECONCILER_HTTP_ADDR overrides"}
	}
	if u := c.Metrics.PushgatewayURL; u != "" && !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
		return &Error{Key: "metrics.pushgateway_url", Msg: c.show("metrics.pushgateway_url", u) + " is not an http(s) URL", Hint: "e.g. http://pushgateway.monitoring:9091, or leave empty"}
	}
	if u := c.Notify.slackURL; u != "" && !strings.HasPrefix(u, "https://") && !strings.HasPrefix(u, "http://") {
		return &Error{Key: "RECONCILER_SLACK_WEBHOOK_URL", Msg: "is not an http(s) URL", Hint: "paste the incoming-webhook URL Slack gave you"}
	}
	if err := c.Notify.validateLinks(); err != nil {
		return err
	}
	if strings.HasPrefix(s.apiKey, "pk_") {
		return &Error{Key: "STRIPE_API_KEY", Msg: "is a publishable key", Hint: "use a secret (sk_…) or restricted (rk_…) key with read access"}
	}
	return nil
}

// Earliest and Latest bound the times ParseTime accepts: no payment
// provider we read has events before 2000, and a later year than 9999 is
// a typo; the zero time must never stand for a time the caller wrote.
var (
	Earliest = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	Latest   = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)
)

// ParseTime parses an RFC 3339 time or a date (UTC midnight), from
// Earliest to before Latest.
func ParseTime(s string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t, err = time.Parse(time.DateOnly, s)
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("%s is neither RFC 3339 (2026-11-01T00:00:00Z) nor a date (2026-11-01)", Quote(s))
	}
	if t.Before(Earliest) || !t.Before(Latest) {
		return time.Time{}, fmt.Errorf("%s is out of range (use a time from 2000-01-01 to 9999-12-31)", Quote(s))
	}
	return t.UTC(), nil
}

// validateLinks checks the report link key and the report URL. No message
// prints either value: a secret pasted into the wrong key stays secret.
func (n Notify) validateLinks() error {
	if n.linkKey != nil && len(n.linkKey) < signedlink.MinKeyLen {
		hint := "generate one with: openssl rand -hex 32"
		if n.linkKeyFrom != "RECONCILER_REPORT_LINK_KEY" {
			hint += "; put it in the file, or set RECONCILER_REPORT_LINK_KEY"
		}
		return &Error{Key: n.linkKeyFrom, Msg: fmt.Sprintf("the report link key is %d bytes; at least %d are needed", len(n.linkKey), signedlink.MinKeyLen), Hint: hint}
	}
	if n.linkKey == nil || n.ReportURL == "" {
		return nil
	}
	u := n.ReportURL
	if !strings.HasPrefix(u, "https://") && !strings.HasPrefix(u, "http://") || !strings.Contains(u, "{id}") || strings.Contains(u, "#") {
		return &Error{Key: "notify.report_url", Msg: "with a report link key it must be an http(s) URL with {id} and no #fragment",
			Hint: "point it at serve's report page, e.g. https://reconciler.internal/runs/{id}/report.html"}
	}
	return nil
}
