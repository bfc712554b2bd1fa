package config

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The report link key comes from RECONCILER_REPORT_LINK_KEY, else from
// notify.report_link_key_file; a bad one is a configuration error naming
// where it came from and the fix, and never showing the key.
func TestReportLinkKey(t *testing.T) {
	const good = "0123456789abcdef0123456789abcdef-good-key"
	const short = "tooshort-s3cr3t"
	const fileYAML = "notify:\n  report_link_key_file: /run/secrets/link-key\n"
	tests := []struct {
		name    string
		yaml    string
		env     map[string]string
		files   map[string]string
		want    string // the key Load resolves ("" with errKey)
		errKey  string
		errHas  []string
		secrets []string // never in the error
	}{
		{name: "none", yaml: "log:\n  level: info\n"},
		{name: "from the environment", yaml: "log:\n  level: info\n", env: map[string]string{"RECONCILER_REPORT_LINK_KEY": good}, want: good},
		{name: "from the file, trimmed", yaml: fileYAML, files: map[string]string{"/run/secrets/link-key": good + "\n"}, want: good},
		{name: "the environment wins over the file", yaml: fileYAML, env: map[string]string{"RECONCILER_REPORT_LINK_KEY": good},
			files: map[string]string{"/run/secrets/link-key": "\x00unreadable"}, want: good},
		{name: "short in the environment", yaml: "log:\n  level: info\n", env: map[string]string{"RECONCILER_REPORT_LINK_KEY": short},
			errKey: "RECONCILER_REPORT_LINK_KEY", errHas: []string{"at least 32", "openssl rand -hex 32"}, secrets: []string{short}},
		{name: "short in the file", yaml: fileYAML, files: map[string]string{"/run/secrets/link-key": short},
			errKey: "notify.report_link_key_file", errHas: []string{"at least 32"}, secrets: []string{short}},
		{name: "empty file", yaml: fileYAML, files: map[string]string{"/run/secrets/link-key": "\n"},
			errKey: "notify.report_link_key_file", errHas: []string{"0 bytes"}},
		{name: "unreadable file", yaml: fileYAML, files: map[string]string{"/run/secrets/link-key": "\x00unreadable"},
			errKey: "notify.report_link_key_file", errHas: []string{"cannot read", "RECONCILER_REPORT_LINK_KEY"}},
		{name: "missing file", yaml: fileYAML, errKey: "notify.report_link_key_file"},
		{name: "ttl too long", yaml: "notify:\n  report_link_ttl: 9000h\n", errKey: "notify.report_link_ttl", errHas: []string{"8784h"}},
		{name: "ttl too short", yaml: "notify:\n  report_link_ttl: 1m\n", errKey: "notify.report_link_ttl", errHas: []string{"1h to"}},
		{name: "ttl not a duration, a secret pasted there", yaml: "notify:\n  report_link_ttl: " + good + "\n",
			errKey: "notify.report_link_ttl", errHas: []string{"not a duration"}, secrets: []string{good}},
		{name: "report_url without {id} with a key", yaml: "notify:\n  report_url: https://r.example/runs/report.html\n",
			env: map[string]string{"RECONCILER_REPORT_LINK_KEY": good}, errKey: "notify.report_url", errHas: []string{"{id}", "/runs/{id}/report.html"}},
		{name: "report_url holding a secret by mistake", yaml: "notify:\n  report_url: " + good + "\n",
			env: map[string]string{"RECONCILER_REPORT_LINK_KEY": good}, errKey: "notify.report_url", secrets: []string{good}},
		{name: "report_url as a path without a key is as before", yaml: "notify:\n  report_url: reports/{id}.html\n"},
		{name: "report_url and key", yaml: "notify:\n  report_url: https://r.example/runs/{id}/report.html\n  report_link_ttl: 24h\n",
			env: map[string]string{"RECONCILER_REPORT_LINK_KEY": good}, want: good},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			files := map[string]string{"c.yaml": tc.yaml}
			for k, v := range tc.files {
				files[k] = v
			}
			c, err := Load("c.yaml", true, fakeEnv(tc.env), fakeFS(files))
			if err == nil {
				err = c.Validate()
			}
			if tc.errKey == "" {
				require.NoError(t, err)
				assert.Equal(t, tc.want, string(c.Notify.ReportLinkKey()))
				assert.Equal(t, tc.want == "", c.Notify.ReportLinkKey() == nil)
				return
			}
			ce := asConfigError(t, err)
			assert.Equal(t, tc.errKey, ce.Key)
			assert.NotEmpty(t, ce.Hint)
			assert.NotContains(t, err.Error(), "\n", "one line")
			for _, h := range tc.errHas {
				assert.Contains(t, err.Error(), h)
			}
			for _, sec := range append(tc.secrets, good) {
				assert.NotContains(t, err.Error(), sec, "the key never appears in the error")
				assert.NotContains(t, err.Error(), sec[:12])
			}
			assert.False(t, strings.Contains(err.Error(), short[:8]))
		})
	}
}
