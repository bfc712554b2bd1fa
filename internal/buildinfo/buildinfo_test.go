package buildinfo

import (
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/require"
)

func info(mod string, settings ...string) func() (*debug.BuildInfo, bool) {
	bi := &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: "github.com/reconciler/reconciler", Version: mod}}
	for i := 0; i+1 < len(settings); i += 2 {
		bi.Settings = append(bi.Settings, debug.BuildSetting{Key: settings[i], Value: settings[i+1]})
	}
	return func() (*debug.BuildInfo, bool) { return bi, true }
}

const rev = "a1b2c3d4e5f60718293a4b5c6d7e8f9012345678"

func TestVersion(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, stamped string
		read          func() (*debug.BuildInfo, bool)
		want          string
	}{
		{"stamped wins", "v1.4.0", info("v1.2.3", "vcs.revision", rev), "v1.4.0"},
		{"go install @v1.2.3", "dev", info("v1.2.3"), "v1.2.3"},
		{"go build in a clean checkout", "dev", info("v0.0.0-20260101120000-a1b2c3d4e5f6", "vcs.revision", rev, "vcs.modified", "false"),
			"devel (a1b2c3d4e5f6, go1.26.0)"},
		{"go build in a modified checkout", "", info("v0.0.0-20260101120000-a1b2c3d4e5f6+dirty", "vcs.revision", rev, "vcs.modified", "true"),
			"devel (a1b2c3d4e5f6, dirty, go1.26.0)"},
		{"go build with -buildvcs=false", "dev", info("(devel)"), "devel (go1.26.0)"},
		{"go install @commit", "dev", info("v1.2.4-0.20260101120000-a1b2c3d4e5f6"), "v1.2.4-0.20260101120000-a1b2c3d4e5f6"},
		{"a tagged checkout", "dev", info("v1.2.3", "vcs.revision", rev), "v1.2.3"},
		{"no build info", "dev", func() (*debug.BuildInfo, bool) { return nil, false }, "devel"},
	} {
		require.Equal(t, tc.want, version(tc.stamped, tc.read), tc.name)
	}
}

// The test binary has build info: never "dev".
func TestVersionOfThisBinary(t *testing.T) {
	t.Parallel()
	require.Equal(t, "v9.9.9", Version("v9.9.9"))
	require.Regexp(t, `^devel( \(.*go1\.\d+.*\))?$|^v\d`, Version("dev"))
}
