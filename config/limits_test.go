package config

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// yamlAt writes value at the dotted key.
func yamlAt(key, value string) string {
	parts := strings.Split(key, ".")
	var b strings.Builder
	for i, p := range parts {
		b.WriteString(strings.Repeat("  ", i) + p + ":")
		if i == len(parts)-1 {
			b.WriteString(" " + value)
		}
		b.WriteString("\n")
	}
	return b.String()
}

func (l Limit) render(v float64) string {
	switch {
	case l.Duration:
		return time.Duration(v).String()
	case l.Integer:
		return strconv.FormatInt(int64(v), 10)
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

func loadYAML(t *testing.T, body string, env map[string]string) (Config, error) {
	t.Helper()
	c, err := Load("c.yaml", true, fakeEnv(env), fakeFS(map[string]string{"c.yaml": body}))
	if err != nil {
		return c, err
	}
	return c, c.Validate()
}

// Every row of Limits is enforced on its config key: its bounds are
// accepted, one step outside each is an error naming the key and the fix.
func TestLimitsEveryConfigKeyEnforced(t *testing.T) {
	for _, l := range Limits {
		if l.Key == "" {
			continue
		}
		t.Run(l.Key, func(t *testing.T) {
			step := 1.0
			if l.Duration {
				step = 1
			} else if !l.Integer {
				step = l.Min / 2
			}
			for _, ok := range []float64{l.Min, l.Max} {
				_, err := loadYAML(t, yamlAt(l.Key, l.render(ok)), nil)
				require.NoError(t, err, "%s at %s", l.Key, l.render(ok))
			}
			for _, bad := range []float64{l.Min - step, l.Max + step*1000} {
				_, err := loadYAML(t, yamlAt(l.Key, l.render(bad)), nil)
				var ce *Error
				require.True(t, errors.As(err, &ce), "%s at %s: %v", l.Key, l.render(bad), err)
				assert.Equal(t, l.Key, ce.Key)
				assert.Equal(t, l.Hint, ce.Hint)
				if l.Duration && bad < 0 {
					assert.Contains(t, ce.Msg, "must not be negative")
				} else {
					assert.Contains(t, ce.Msg, "out of range")
				}
			}
		})
	}
}

func TestLimitsNaNAndInfinityAreErrors(t *testing.T) {
	for _, key := range []string{"providers.stripe.requests_per_second", "providers.gocardless.requests_per_second"} {
		for _, v := range []string{".nan", ".inf", "-.inf", ".NaN"} {
			_, err := loadYAML(t, yamlAt(key, v), nil)
			var ce *Error
			require.True(t, errors.As(err, &ce), "%s: %s", key, v)
			assert.Equal(t, key, ce.Key)
		}
	}
	l := mustLimit("run.batch_size")
	for _, v := range []float64{math.NaN(), math.Inf(1), math.Inf(-1), 1.5} {
		require.Error(t, l.Check("run.batch_size", v, ""), "%v", v)
	}
}

func TestLimitsTableIsSane(t *testing.T) {
	seen := map[string]bool{}
	for _, l := range Limits {
		require.True(t, l.Key != "" || l.Flag != "", "a row names a key or a flag")
		for _, n := range []string{l.Key, l.Flag} {
			if n != "" {
				require.False(t, seen[n], "%s twice", n)
				seen[n] = true
			}
		}
		require.LessOrEqual(t, l.Min, l.Max, l.Key+l.Flag)
		require.NotEmpty(t, l.Hint, l.Key+l.Flag)
		if l.Flag != "" {
			require.True(t, strings.HasPrefix(l.Flag, "--"), l.Flag)
		}
	}
	// Defaults are within their limits.
	require.NoError(t, Default().Validate())
}

func TestLimitsFlags(t *testing.T) {
	require.NoError(t, CheckFlagInt("--batch-size", 1000))
	for flag, v := range map[string]int64{"--batch-size": 0, "--concurrency": 65, "--history": 1001, "--payments": -1, "--sample": 0} {
		err := CheckFlagInt(flag, v)
		var ce *Error
		require.True(t, errors.As(err, &ce), flag)
		assert.Equal(t, flag, ce.Key)
	}
	err := CheckFlagInt("--batch-size", 999999999999)
	require.ErrorContains(t, err, "--batch-size: 999999999999 is out of range (use 1 to 100000")
	d, err := ParseFlagDuration("--window", "90m")
	require.NoError(t, err)
	assert.Equal(t, 90*time.Minute, d)
	_, err = ParseFlagDuration("--lock-wait", "-5s")
	require.EqualError(t, err, "--lock-wait: -5s must not be negative (use 0s (give up at once) to 24h; e.g. 30s)")
	_, err = ParseFlagDuration("--window", "-5s")
	require.EqualError(t, err, "--window: -5s must not be negative (use 1m to 8784h (a year); for an older start pass --since)")
	_, err = loadYAML(t, yamlAt("run.lock_wait", "-5s"), nil)
	require.ErrorContains(t, err, "run.lock_wait: -5s must not be negative")
	for _, s := range []string{"0s", "-5s", "100000h", "soon", "NaN"} {
		_, err := ParseFlagDuration("--window", s)
		require.ErrorContains(t, err, "--window: ", s)
	}
	_, err = ParseFlagDuration("--lock-wait", "-1s")
	require.ErrorContains(t, err, "--lock-wait")
	require.Panics(t, func() { _ = CheckFlagInt("--no-such-flag", 1) })
}

const envSecret = "SECRET-MARKER-7Q"

// A value that came from the environment is never printed in an error:
// only its source.
func TestErrorsNeverPrintEnvironmentValues(t *testing.T) {
	env := map[string]string{"DATABASE_URL": "postgres://u:" + envSecret + "@db/x", "STRIPE_API_KEY": "sk_test_" + envSecret,
		"STRIPE_API_BASE": "ftp://" + envSecret, "RECONCILER_HTTP_ADDR": envSecret}
	for _, tc := range []struct{ body, key string }{
		{"run:\n  window: ${DATABASE_URL}\n", "run.window"},
		{"run:\n  shutdown_grace: ${STRIPE_API_KEY}\n", "run.shutdown_grace"},
		{"run:\n  batch_size: ${STRIPE_API_KEY}\n", "run.batch_size"},
		{"log:\n  level: ${STRIPE_API_KEY}\n", "log.level"},
		{"log:\n  format: ${DATABASE_URL}\n", "log.format"},
		{"providers:\n  stripe:\n    requests_per_second: ${STRIPE_API_KEY}\n", "providers.stripe.requests_per_second"},
		{"providers:\n  stripe:\n    enabled: ${STRIPE_API_KEY}\n", "providers.stripe.enabled"},
		{"providers:\n  stripe:\n    accounts: [\"${STRIPE_API_KEY}\"]\n", "providers.stripe.accounts[0]"},
		{"serve:\n  schedule: ${STRIPE_API_KEY}\n", "serve.schedule"},
		{"serve:\n  time_zone: ${STRIPE_API_KEY}\n", "serve.time_zone"},
		{"metrics:\n  pushgateway_url: ${STRIPE_API_KEY}\n", "metrics.pushgateway_url"},
		{"", "providers.stripe.api_base"},
	} {
		if tc.key == "serve.http_addr" {
			continue
		}
		e := env
		if tc.key == "providers.stripe.api_base" {
			e = map[string]string{"STRIPE_API_BASE": "ftp://" + envSecret}
		} else {
			e = map[string]string{"DATABASE_URL": env["DATABASE_URL"], "STRIPE_API_KEY": env["STRIPE_API_KEY"]}
		}
		_, err := loadYAML(t, tc.body, e)
		var ce *Error
		require.True(t, errors.As(err, &ce), "%s: %v", tc.key, err)
		assert.Equal(t, tc.key, ce.Key)
		assert.NotContains(t, err.Error(), envSecret)
		assert.Contains(t, err.Error(), "the value from ", tc.key)
	}
	_, err := loadYAML(t, "run:\n  window: ${DATABASE_URL}\n", env)
	assert.Equal(t, `run.window: the value from ${DATABASE_URL} is not a duration (c.yaml line 2) (write e.g. 24h, 90m or 30s)`, err.Error())
}

func TestUnsetVariableIsAnErrorNamingKeyAndVariable(t *testing.T) {
	_, err := loadYAML(t, "run:\n  window: ${UNSET}\n", nil)
	var ce *Error
	require.True(t, errors.As(err, &ce))
	assert.Equal(t, "run.window", ce.Key)
	assert.Contains(t, err.Error(), "${UNSET} is not set")
	c, err := loadYAML(t, "run:\n  window: ${UNSET:-2h}\n", nil)
	require.NoError(t, err)
	assert.Equal(t, 2*time.Hour, c.Run.Window.D())
}

func TestTypeErrorsNameTheKey(t *testing.T) {
	for body, key := range map[string]string{
		"run:\n  batch_size: 1.5\n":                          "run.batch_size",
		"run:\n  batch_size: [1]\n":                          "run.batch_size",
		"# c\n\nproviders:\n  stripe:\n    max_retries: x\n": "providers.stripe.max_retries",
		"providers:\n  stripe:\n    enabled: maybe\n":        "providers.stripe.enabled",
		"providers:\n  stripe:\n    accounts: acct_1\n":      "providers.stripe.accounts",
		"run: 5\n":                       "run",
		"database:\n  auto_migrate: 2\n": "database.auto_migrate",
	} {
		_, err := loadYAML(t, body, nil)
		var ce *Error
		require.True(t, errors.As(err, &ce), "%q: %v", body, err)
		assert.Equal(t, key, ce.Key, body)
		assert.NotContains(t, err.Error(), "\n")
	}
}

func TestParseTimeBounds(t *testing.T) {
	for _, s := range []string{"0001-01-01", "1999-12-31T23:59:59Z", "1970-01-01"} {
		_, err := ParseTime(s)
		require.ErrorContains(t, err, "out of range", s)
	}
	for _, s := range []string{"2000-01-01", "9999-12-31", "2026-11-01T10:00:00+01:00"} {
		_, err := ParseTime(s)
		require.NoError(t, err, s)
	}
	_, err := ParseTime("10000-01-01")
	require.Error(t, err)
}

func TestOneLineAndQuote(t *testing.T) {
	assert.Equal(t, `a\nb\u202ec\x00`, OneLine("a\nb\u202ec\x00"))
	assert.Equal(t, "plain €", OneLine("plain €"))
	q := Quote(strings.Repeat("a", 100000))
	assert.Less(t, len(q), 120)
	assert.Contains(t, q, "(100000 characters)")
	assert.Equal(t, `"acct_1\nFAKE"`, Quote("acct_1\nFAKE"))
	assert.Equal(t, fmt.Sprintf("%q", "x"), Quote("x"))
}
