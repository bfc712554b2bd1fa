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
	"regexp"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
	"gopkg.in/yaml.v3"

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
}

// Notify configures the run summary posted to support's chat.
type Notify struct {
	// SlackWebhookURLFile names a mounted file holding a Slack incoming
	// webhook URL (a secret); RECONCILER_SLACK_WEBHOOK_URL overrides it.
	SlackWebhookURLFile string `yaml:"slack_webhook_url_file"`
	// ReportURL links the full report in the message; {id} is replaced by
	// the run id (e.g. https://reconciler.internal/runs/{id}). Empty: no link.
	ReportURL string `yaml:"report_url"`

	slackURL string
}

// SlackURL returns the resolved webhook URL, "" when off.
func (n Notify) SlackURL() string { return n.slackURL }

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
	// SQLitePath is the embedded store's file, used when no URL is set.
	SQLitePath string `yaml:"sqlite_path"`
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
	Timeout           Duration `yaml:"timeout"`
	// StuckAfterWorkingDays is the stuck-payment threshold in UK working
	// days (weekends and England and Wales bank holidays excluded).
	StuckAfterWorkingDays int `yaml:"stuck_after_working_days"`
	// HolidaysFile replaces the embedded bank holiday list (one ISO date a line).
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
	Timeout           Duration `yaml:"timeout"`
	Accounts          []string `yaml:"accounts"` // connected accounts; "" is the platform

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

// UnmarshalYAML parses a Go duration.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: %q is not a duration (write e.g. 24h, 90m, 30s)", n.Line, n.Value)
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
		Log:   Log{Level: "info", Format: "auto"},
		Serve: Serve{Schedule: "30 2 * * *", TimeZone: "UTC", HTTPAddr: ":8080"},
		Providers: Providers{
			Stripe: Stripe{
				APIBase: stripe.DefaultBaseURL, RequestsPerSecond: stripe.DefaultRequestsPerSecond, MaxRetries: stripe.DefaultMaxRetries,
				Timeout: Duration(stripe.DefaultTimeout), Accounts: []string{""},
			},
			// APIBase stays empty: the provider picks live or sandbox from the token.
			GoCardless: GoCardless{
				RequestsPerSecond: gocardless.DefaultRequestsPerSecond, MaxRetries: gocardless.DefaultMaxRetries,
				Timeout: Duration(gocardless.DefaultTimeout), StuckAfterWorkingDays: 5,
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
// when it is missing and !mustExist) and the environment.
func Load(path string, mustExist bool, getenv func(string) string, readFile func(string) ([]byte, error)) (Config, error) {
	cfg := Default()
	b, err := readFile(path)
	switch {
	case err == nil:
		if err := decode(b, &cfg, getenv); err != nil {
			return cfg, &Error{Key: path, Msg: strings.TrimPrefix(err.Error(), "yaml: "), Hint: "see the commented config.yaml in the repository for every key"}
		}
	case errors.Is(err, os.ErrNotExist) && !mustExist:
	default:
		return cfg, &Error{Key: "--config", Msg: err.Error(), Hint: "pass an existing file or unset RECONCILER_CONFIG"}
	}

	if v := getenv("DATABASE_URL"); v != "" {
		cfg.Database.URL = v
	}
	if v := getenv("STRIPE_API_BASE"); v != "" {
		cfg.Providers.Stripe.APIBase = v
	}
	if v := getenv("RECONCILER_HTTP_ADDR"); v != "" {
		cfg.Serve.HTTPAddr = v
	}
	if v := getenv("RECONCILER_PUSHGATEWAY_URL"); v != "" {
		cfg.Metrics.PushgatewayURL = v
	}
	if v := getenv("GOCARDLESS_API_BASE"); v != "" {
		cfg.Providers.GoCardless.APIBase = v
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
	s := &cfg.Providers.Stripe
	s.apiKey = getenv("STRIPE_API_KEY")
	if s.apiKey == "" && s.APIKeyFile != "" {
		kb, err := readFile(s.APIKeyFile)
		if err != nil {
			return cfg, &Error{Key: "providers.stripe.api_key_file", Msg: "cannot read the key file", Hint: "mount the Secret there or set STRIPE_API_KEY"}
		}
		s.apiKey = strings.TrimSpace(string(kb))
	}
	return cfg, nil
}

// decode parses YAML, then expands ${VAR} inside each scalar value (never in
// the YAML text, so a password full of YAML syntax stays a plain string),
// then decodes strictly: an unknown key is an error.
func decode(b []byte, cfg *Config, getenv func(string) string) error {
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return err
	}
	if len(doc.Content) == 0 {
		return nil // empty or comments only
	}
	expand(&doc, getenv)
	out, err := yaml.Marshal(&doc)
	if err != nil {
		return err
	}
	dec := yaml.NewDecoder(bytes.NewReader(out))
	dec.KnownFields(true)
	if err := dec.Decode(cfg); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	return nil
}

func expand(n *yaml.Node, getenv func(string) string) {
	if n.Kind == yaml.ScalarNode && strings.Contains(n.Value, "${") {
		n.Value = envRef.ReplaceAllStringFunc(n.Value, func(m string) string {
			sub := envRef.FindStringSubmatch(m)
			if v := getenv(sub[1]); v != "" {
				return v
			}
			return sub[3]
		})
		// Re-resolve the type from the expanded value ("7.5" is a number);
		// the encoder quotes it when YAML syntax inside would change it.
		n.Tag = ""
	}
	for _, c := range n.Content {
		expand(c, getenv)
	}
}

// Validate checks the configuration and returns the first problem found.
func (c Config) Validate() error {
	if strings.Contains(c.Database.URL, "${") {
		return &Error{Key: "database.url", Msg: "refers to an unset environment variable", Hint: "set DATABASE_URL"}
	}
	if c.Database.URL == "" && c.Database.SQLitePath == "" {
		return &Error{Key: "database.sqlite_path", Msg: "is empty and no database URL is set", Hint: "set DATABASE_URL, or name a file for the embedded store"}
	}
	if c.Database.MaxOpenConns < 2 {
		return &Error{Key: "database.max_open_conns", Msg: fmt.Sprintf("%d is too small", c.Database.MaxOpenConns), Hint: "use at least 2: one connection holds the run lock"}
	}
	if c.Run.Window.D() <= 0 {
		return &Error{Key: "run.window", Msg: "must be positive", Hint: "e.g. 24h"}
	}
	if c.Run.Overlap.D() < 0 {
		return &Error{Key: "run.overlap", Msg: "must not be negative", Hint: "e.g. 1h"}
	}
	if c.Run.BatchSize < 1 || c.Run.BatchSize > 100000 {
		return &Error{Key: "run.batch_size", Msg: fmt.Sprintf("%d is out of range", c.Run.BatchSize), Hint: fmt.Sprintf("use 1 to 100000; %d is a good default", reconcile.DefaultBatchSize)}
	}
	if c.Run.StuckAfter.D() <= 0 {
		return &Error{Key: "run.stuck_after", Msg: "must be positive", Hint: "e.g. 72h"}
	}
	if c.Run.LockWait.D() < 0 {
		return &Error{Key: "run.lock_wait", Msg: "must not be negative", Hint: "e.g. 0s (give up at once) or 30s"}
	}
	if c.Run.StuckLimit < -1 {
		return &Error{Key: "run.stuck_limit", Msg: "must be -1 (off) or more", Hint: "e.g. 100"}
	}
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		return &Error{Key: "log.level", Msg: fmt.Sprintf("unknown level %q", c.Log.Level), Hint: "use debug, info, warn or error"}
	}
	switch c.Log.Format {
	case "auto", "json", "text":
	default:
		return &Error{Key: "log.format", Msg: fmt.Sprintf("unknown format %q", c.Log.Format), Hint: "use auto, json or text"}
	}
	s := c.Providers.Stripe
	if !strings.HasPrefix(s.APIBase, "http://") && !strings.HasPrefix(s.APIBase, "https://") {
		return &Error{Key: "providers.stripe.api_base", Msg: fmt.Sprintf("%q is not an http(s) URL", s.APIBase), Hint: "e.g. https://api.stripe.com, or set STRIPE_API_BASE"}
	}
	if s.RequestsPerSecond <= 0 || s.RequestsPerSecond > 1000 {
		return &Error{Key: "providers.stripe.requests_per_second", Msg: fmt.Sprintf("%g is out of range", s.RequestsPerSecond), Hint: "Stripe allows about 100 reads/s live and 25 in test mode; stay below"}
	}
	if s.MaxRetries < 0 {
		return &Error{Key: "providers.stripe.max_retries", Msg: "must not be negative", Hint: "e.g. 8"}
	}
	if s.Timeout.D() <= 0 {
		return &Error{Key: "providers.stripe.timeout", Msg: "must be positive", Hint: "e.g. 30s"}
	}
	for i, a := range s.Accounts {
		if a != "" && !strings.HasPrefix(a, "acct_") {
			return &Error{Key: fmt.Sprintf("providers.stripe.accounts[%d]", i), Msg: fmt.Sprintf("%q is not a connected account id", a), Hint: `use acct_… or "" for the platform`}
		}
	}
	g := c.Providers.GoCardless
	if g.APIBase != "" && !strings.HasPrefix(g.APIBase, "http://") && !strings.HasPrefix(g.APIBase, "https://") {
		return &Error{Key: "providers.gocardless.api_base", Msg: fmt.Sprintf("%q is not an http(s) URL", g.APIBase), Hint: "e.g. https://api-sandbox.gocardless.com, or set GOCARDLESS_API_BASE"}
	}
	if g.RequestsPerSecond <= 0 || g.RequestsPerSecond > 1000 {
		return &Error{Key: "providers.gocardless.requests_per_second", Msg: fmt.Sprintf("%g is out of range", g.RequestsPerSecond), Hint: "GoCardless allows 1000 requests a minute per token; stay below about 15"}
	}
	if g.MaxRetries < 0 {
		return &Error{Key: "providers.gocardless.max_retries", Msg: "must not be negative", Hint: "e.g. 8"}
	}
	if g.Timeout.D() <= 0 {
		return &Error{Key: "providers.gocardless.timeout", Msg: "must be positive", Hint: "e.g. 30s"}
	}
	if g.StuckAfterWorkingDays < 1 || g.StuckAfterWorkingDays > 60 {
		return &Error{Key: "providers.gocardless.stuck_after_working_days", Msg: fmt.Sprintf("%d is out of range", g.StuckAfterWorkingDays), Hint: "use 1 to 60; Bacs confirms about 3 working days after submission"}
	}
	if g.EventRetention.D() < 0 {
		return &Error{Key: "providers.gocardless.event_retention", Msg: "must not be negative", Hint: "0s when unknown"}
	}
	if c.Serve.TimeZone != "" {
		if _, err := time.LoadLocation(c.Serve.TimeZone); err != nil {
			return &Error{Key: "serve.time_zone", Msg: fmt.Sprintf("unknown time zone %q", c.Serve.TimeZone), Hint: "use an IANA name such as Europe/London or UTC"}
		}
	}
	if _, err := cron.ParseStandard(c.Serve.CronSpec()); err != nil {
		return &Error{Key: "serve.schedule", Msg: fmt.Sprintf("%q: %v", c.Serve.Schedule, err), Hint: `use five cron fields ("30 2 * * *"), a descriptor (@daily, @every 6h), optionally prefixed CRON_TZ=Europe/London`}
	}
	if c.Serve.HTTPAddr == "" || !strings.Contains(c.Serve.HTTPAddr, ":") {
		return &Error{Key: "serve.http_addr", Msg: fmt.Sprintf("%q is not host:port", c.Serve.HTTPAddr), Hint: "e.g. :8080 or 127.0.0.1:8080; RECONCILER_HTTP_ADDR overrides"}
	}
	if u := c.Metrics.PushgatewayURL; u != "" && !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
		return &Error{Key: "metrics.pushgateway_url", Msg: fmt.Sprintf("%q is not an http(s) URL", u), Hint: "e.g. http://pushgateway.monitoring:9091, or leave empty"}
	}
	if u := c.Notify.slackURL; u != "" && !strings.HasPrefix(u, "https://") && !strings.HasPrefix(u, "http://") {
		return &Error{Key: "RECONCILER_SLACK_WEBHOOK_URL", Msg: "is not an http(s) URL", Hint: "paste the incoming-webhook URL Slack gave you"}
	}
	if strings.HasPrefix(s.apiKey, "pk_") {
		return &Error{Key: "STRIPE_API_KEY", Msg: "is a publishable key", Hint: "use a secret (sk_…) or restricted (rk_…) key with read access"}
	}
	return nil
}

// ParseTime parses an RFC 3339 time or a date (UTC midnight).
func ParseTime(s string) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t.UTC(), nil
	}
	if t, err := time.Parse(time.DateOnly, s); err == nil {
		return t.UTC(), nil
	}
	return time.Time{}, fmt.Errorf("%q is neither RFC 3339 (2026-11-01T00:00:00Z) nor a date (2026-11-01)", s)
}
