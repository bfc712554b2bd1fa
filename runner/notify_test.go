package runner

import (
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/reconciler/reconciler/clock"
	"github.com/reconciler/reconciler/config"
	"github.com/reconciler/reconciler/internal/signedlink"
)

// The message's link is report_url with {id} replaced, signed when a link
// key is configured (the query appended to one report_url already has),
// and as it is otherwise.
func TestReportLink(t *testing.T) {
	const key = "0123456789abcdef0123456789abcdef-runner"
	load := func(yaml string, env map[string]string) config.Config {
		t.Helper()
		p := filepath.Join(t.TempDir(), "c.yaml")
		require.NoError(t, os.WriteFile(p, []byte(yaml), 0o600))
		c, err := config.Load(p, true, func(k string) string { return env[k] }, os.ReadFile)
		require.NoError(t, err)
		require.NoError(t, c.Validate())
		return c
	}
	now := time.Date(2026, 11, 2, 3, 0, 0, 0, time.UTC)
	clk := clock.Func(func() time.Time { return now })
	withKey := map[string]string{"RECONCILER_REPORT_LINK_KEY": key}

	s := Summaries{Config: load("notify:\n  report_url: https://r.example/runs/{id}/report.html\n", withKey), Clock: clk}
	u, err := url.Parse(s.ReportLink(7))
	require.NoError(t, err)
	require.Equal(t, "/runs/7/report.html", u.Path)
	require.Equal(t, strconv.FormatInt(now.Add(30*24*time.Hour).Unix(), 10), u.Query().Get("expires"), "the default TTL, 30 days")
	require.NoError(t, signedlink.Verify([]byte(key), 7, u.Query(), now))
	require.Error(t, signedlink.Verify([]byte(key), 8, u.Query(), now))

	s.Config = load("notify:\n  report_url: https://r.example/runs/{id}/report.html?tenant=eu\n  report_link_ttl: 1h\n", withKey)
	u, err = url.Parse(s.ReportLink(7))
	require.NoError(t, err)
	require.Equal(t, "eu", u.Query().Get("tenant"))
	require.NoError(t, signedlink.Verify([]byte(key), 7, u.Query(), now.Add(59*time.Minute)))

	s.Config = load("notify:\n  report_url: https://r.example/runs/{id}\n", nil)
	require.Equal(t, "https://r.example/runs/7", s.ReportLink(7), "no key: the link as today")
	s.Config = load("log:\n  level: info\n", withKey)
	require.Equal(t, "", s.ReportLink(7), "no report_url: no link")
}
