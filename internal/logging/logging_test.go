package logging

import (
	"bytes"
	"strings"
	"testing"
)

func TestNew(t *testing.T) {
	for _, tc := range []struct {
		level, format string
		wantJSON      bool
		debugShown    bool
	}{
		{"info", "auto", true, false}, // a buffer is no terminal
		{"debug", "json", true, true},
		{"warn", "text", false, false},
	} {
		var b bytes.Buffer
		log := New(tc.level, tc.format, &b)
		log.Debug("d")
		log.Warn("w", "k", "v")
		out := b.String()
		if got := strings.HasPrefix(out, "{"); got != tc.wantJSON {
			t.Errorf("%s/%s: JSON %v, want %v: %q", tc.level, tc.format, got, tc.wantJSON, out)
		}
		if got := strings.Contains(out, `"d"`) || strings.Contains(out, "msg=d"); got != tc.debugShown {
			t.Errorf("%s/%s: debug shown %v: %q", tc.level, tc.format, got, out)
		}
	}
	if IsTerminal(&bytes.Buffer{}) {
		t.Error("a buffer is a terminal")
	}
}
