package runner

import (
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/reconciler/reconciler/config"
	"github.com/reconciler/reconciler/providers/gocardless"
	"github.com/reconciler/reconciler/providers/stripe"
	"github.com/reconciler/reconciler/providers/transport"
	"github.com/reconciler/reconciler/reconcile"
	"github.com/reconciler/reconciler/workdays"
)

// Providers are the provider names a job may name.
var Providers = []string{stripe.Name, gocardless.Name}

// Job is one provider and account to reconcile; Account "" is the Stripe
// platform (and GoCardless, which has no connected accounts).
type Job struct {
	Provider string
	Account  string
}

// String names the job as messages do: stripe/acct_…, stripe/platform.
func (j Job) String() string { return j.Provider + "/" + j.AccountName() }

// AccountName is the account as messages name it: its id, or "platform".
func (j Job) AccountName() string {
	if j.Account == "" {
		return "platform"
	}
	return j.Account
}

// UsageError is a request the caller got wrong (a flag's value, a file it
// names): the command line exits 2 on it. Nothing was touched.
type UsageError struct{ Err error }

func (e UsageError) Error() string { return e.Err.Error() }
func (e UsageError) Unwrap() error { return e.Err }

func usagef(format string, a ...any) error { return UsageError{Err: fmt.Errorf(format, a...)} }

// Plan turns the configuration and the caller's providers and accounts
// (--provider, --account; empty: every configured provider, the configured
// accounts) into jobs. It builds each job's provider once, so that an
// unknown provider, a missing key or a bad holiday file is an error before
// anything is touched.
func Plan(cfg config.Config, providers, accounts []string) ([]Job, error) {
	for _, p := range providers {
		if !slices.Contains(Providers, p) {
			return nil, usagef("--provider: unknown provider %s (known: %s)", config.Quote(p), strings.Join(Providers, ", "))
		}
	}
	if len(providers) == 0 {
		if cfg.Providers.Stripe.On() {
			providers = append(providers, stripe.Name)
		}
		if cfg.Providers.GoCardless.On() {
			providers = append(providers, gocardless.Name)
		}
		if len(providers) == 0 {
			return nil, &config.Error{Key: "providers", Msg: "no provider is configured", Hint: "set STRIPE_API_KEY or GOCARDLESS_ACCESS_TOKEN (or their *_file keys), or pass --provider"}
		}
	}
	var jobs []Job
	for _, p := range providers {
		accounts := accounts
		switch {
		case p == gocardless.Name && len(accounts) > 0:
			return nil, usagef("--account: gocardless has no connected accounts; run it without --account")
		case p == gocardless.Name:
			accounts = []string{""}
		case len(accounts) == 0:
			accounts = cfg.Providers.Stripe.Accounts
			for i, a := range accounts {
				if a != "" && !ValidAccountID(a) {
					return nil, &config.Error{Key: fmt.Sprintf("providers.stripe.accounts[%d]", i), Msg: "is not a connected account id",
						Hint: fmt.Sprintf(`use acct_ and 1 to %d letters and digits, or "" for the platform`, MaxAccountIDLen)}
				}
			}
		}
		for _, a := range accounts {
			if a != "" && !ValidAccountID(a) {
				return nil, usagef("--account: %s is not a connected account id (use acct_ and 1 to %d letters and digits)", config.Quote(a), MaxAccountIDLen)
			}
			jobs = append(jobs, Job{Provider: p, Account: a})
		}
	}
	for _, j := range jobs {
		if _, err := NewProvider(cfg, j.Provider, nil); err != nil {
			return nil, err
		}
		if j.Provider == gocardless.Name {
			if _, err := calendar(cfg); err != nil {
				return nil, err
			}
		}
	}
	return jobs, nil
}

// NewProvider builds the client of provider name from the configuration, on
// a paced transport of its own. It makes no request.
func NewProvider(cfg config.Config, name string, log *slog.Logger) (reconcile.Provider, error) {
	return newProvider(cfg, name, nil, log)
}

// newProvider is NewProvider with Stripe clients on the shared transport tr
// when it is not nil.
func newProvider(cfg config.Config, name string, tr *transport.Transport, log *slog.Logger) (reconcile.Provider, error) {
	switch name {
	case stripe.Name:
		p, err := stripeClient(cfg, tr, log)
		if err != nil {
			return nil, err
		}
		return p, nil
	case gocardless.Name:
		g := cfg.Providers.GoCardless
		if g.AccessToken() == "" {
			return nil, &config.Error{Key: "GOCARDLESS_ACCESS_TOKEN", Msg: "is not set", Hint: "export GOCARDLESS_ACCESS_TOKEN=sandbox_… or mount it and set providers.gocardless.access_token_file"}
		}
		return gocardless.New(gocardless.Config{AccessToken: g.AccessToken(), BaseURL: g.APIBase, RequestsPerSecond: g.RequestsPerSecond,
			MaxRetries: g.MaxRetries, Timeout: g.Timeout.D(), RequestDeadline: g.RequestDeadline.D(), Retention: g.EventRetention.D(), Logger: log})
	}
	return nil, usagef("unknown provider %q", name)
}

// stripeClient is the one way a Stripe client is built: paced by the
// configuration, or on the shared transport tr (which then paces it).
func stripeClient(cfg config.Config, tr *transport.Transport, log *slog.Logger) (*stripe.Provider, error) {
	s := cfg.Providers.Stripe
	if s.APIKey() == "" {
		return nil, &config.Error{Key: "STRIPE_API_KEY", Msg: "is not set", Hint: "export STRIPE_API_KEY=sk_test_… or mount it and set providers.stripe.api_key_file"}
	}
	return stripe.New(stripe.Config{APIKey: s.APIKey(), BaseURL: s.APIBase, RequestsPerSecond: s.RequestsPerSecond,
		MaxRetries: s.MaxRetries, Timeout: s.Timeout.D(), RequestDeadline: s.RequestDeadline.D(), Logger: log, Transport: tr})
}

// calendar is the UK working-day calendar for Direct Debit thresholds.
func calendar(cfg config.Config) (*workdays.Calendar, error) {
	f := cfg.Providers.GoCardless.HolidaysFile
	if f == "" {
		return workdays.EnglandAndWales(), nil
	}
	cal, err := workdays.Load(f)
	if err != nil {
		return nil, &config.Error{Key: "providers.gocardless.holidays_file", Msg: err.Error(), Hint: "one ISO date (2026-12-25) a line; or remove the key to use the computed England and Wales holidays"}
	}
	return cal, nil
}

// engineOptions are the engine's options for provider p from the
// configuration.
func engineOptions(cfg config.Config, p reconcile.Provider) reconcile.Options {
	r := cfg.Run
	o := reconcile.Options{Provider: p, Window: r.Window.D(), Overlap: r.Overlap.D(), BatchSize: r.BatchSize,
		StuckAfter: r.StuckAfter.D(), StuckLimit: r.StuckLimit, LockWait: r.LockWait.D(), Repair: r.Repair}
	if p.Name() == gocardless.Name {
		cal, _ := calendar(cfg) // Plan checked it before anything ran
		n := cfg.Providers.GoCardless.StuckAfterWorkingDays
		o.StuckBefore = func(now time.Time) time.Time { return cal.Before(now, n) }
	}
	return o
}

// CurrentReader is provider p's reader of current objects, fresh for one
// verification (it caches payouts).
func CurrentReader(p reconcile.Provider) (reconcile.CurrentReader, error) {
	switch p := p.(type) {
	case *stripe.Provider:
		return p.Verifier(), nil
	case *gocardless.Provider:
		return p.Verifier(), nil
	}
	return nil, fmt.Errorf("verify: provider %s cannot read current objects", p.Name())
}
