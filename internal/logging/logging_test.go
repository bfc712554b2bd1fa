package logging

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
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

// Durations read as Go writes them in both formats, in groups too: JSON
// would otherwise write integer nanoseconds.
func TestDurationsAsText(t *testing.T) {
	for format, want := range map[string][]string{
		"json": {`"took":"1.5s"`, `"run":{"wait":"2m0s"}`, `"n":3`},
		"text": {`took=1.5s`, `run.wait=2m0s`, `n=3`},
	} {
		var b bytes.Buffer
		New("info", format, &b).Info("done", "took", 1500*time.Millisecond, slog.Group("run", "wait", 2*time.Minute), "n", 3)
		for _, w := range want {
			if !strings.Contains(b.String(), w) {
				t.Errorf("%s: no %s in %q", format, w, b.String())
			}
		}
	}
}

// A log line through the Terminal never lands on the progress line: the
// line is ended first, and End ends it once.
func TestTerminalEndsTheProgressLine(t *testing.T) {
	var b bytes.Buffer
	term := NewTerminal(&b)
	log := New("info", "text", term)
	term.Progress("run 1: 10 events")
	term.Progress("run 1: 20 events")
	log.Info("batch")
	term.Progress("run 1: 30 events")
	term.End()
	term.End()
	log.Info("done")
	lines := strings.Split(b.String(), "\n")
	if len(lines) != 5 || lines[0] != "\r\033[Krun 1: 10 events\r\033[Krun 1: 20 events" || !strings.Contains(lines[1], "msg=batch") ||
		lines[2] != "\r\033[Krun 1: 30 events" || !strings.Contains(lines[3], "msg=done") || lines[4] != "" {
		t.Errorf("%q", b.String())
	}
	if IsTerminal(term) {
		t.Error("a Terminal over a buffer is no terminal")
	}
}
