// Package logging builds the command line's logger: log/slog, JSON unless
// stderr is a terminal (DESIGN section 7), passed in, never a global.
package logging

import (
	"io"
	"log/slog"
	"os"
)

// New returns a logger writing to w at level (debug, info, warn, error;
// anything else is info) in format: json, text, or auto (JSON unless w is
// a terminal).
func New(level, format string, w io.Writer) *slog.Logger {
	var l slog.Level
	_ = l.UnmarshalText([]byte(level))
	opts := &slog.HandlerOptions{Level: l, ReplaceAttr: durationsAsText}
	if format == "auto" {
		format = "json"
		if IsTerminal(w) {
			format = "text"
		}
	}
	if format == "text" {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}

// durationsAsText renders a time.Duration as Go writes it ("1.5s") in both
// formats: JSON would otherwise write integer nanoseconds.
func durationsAsText(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		a.Value = slog.StringValue(a.Value.Duration().String())
	}
	return a
}

// IsTerminal reports whether w is a terminal.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
