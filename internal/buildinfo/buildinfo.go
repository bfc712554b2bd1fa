// Package buildinfo says which build of reconciler is running, for
// `reconciler version` and the reconciler_build_info metric.
package buildinfo

import (
	"regexp"
	"runtime/debug"
	"strings"
)

// Version is the version to report. stamped is the version the build
// stamped with -ldflags "-X main.version=…" (the Dockerfile, the Makefile,
// scripts/build.sh); "" or "dev" (main.version's default) means none was
// stamped. Then it is the main module's version from the build info when
// that is a release (a `go install …@v1.2.3` build says v1.2.3), else
// "devel (REVISION, dirty, GOVERSION)" from the version control stamp of a
// `go build` in a checkout (the first 12 characters of the commit; "dirty"
// only when the tree had uncommitted changes), else the module's
// pseudo-version (`go install …@COMMIT`), else "devel (GOVERSION)".
func Version(stamped string) string {
	return version(stamped, debug.ReadBuildInfo)
}

// pseudo matches a Go pseudo-version (v0.0.0-20260101120000-a1b2c3d4e5f6,
// v1.2.4-0.20260101120000-a1b2c3d4e5f6), with the +dirty a build in a
// modified checkout adds: a commit, not a release.
var pseudo = regexp.MustCompile(`^v\d+\.\d+\.\d+-(?:[0-9A-Za-z.-]*\.)?\d{14}-[0-9a-f]{12}(?:\+dirty)?$`)

func version(stamped string, read func() (*debug.BuildInfo, bool)) string {
	if stamped != "" && stamped != "dev" {
		return stamped
	}
	bi, ok := read()
	if !ok {
		return "devel"
	}
	mod := bi.Main.Version
	if mod != "" && mod != "(devel)" && !pseudo.MatchString(mod) {
		return mod
	}
	var rev string
	var dirty bool
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" && pseudo.MatchString(mod) {
		return mod
	}
	var parts []string
	if rev != "" {
		parts = append(parts, rev[:min(len(rev), 12)])
		if dirty {
			parts = append(parts, "dirty")
		}
	}
	if bi.GoVersion != "" {
		parts = append(parts, bi.GoVersion)
	}
	if len(parts) == 0 {
		return "devel"
	}
	return "devel (" + strings.Join(parts, ", ") + ")"
}
