// Package logging builds the command line's logger: log/slog, JSON unless
// stderr is a terminal (DESIGN section 7), passed in, never a global.
package logging

import (
	"io"
	"log/slog"
	"os"
	"sync"
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

// IsTerminal reports whether w is a terminal (or a Terminal over one).
func IsTerminal(w io.Writer) bool {
	if t, ok := w.(*Terminal); ok {
		w = t.w
	}
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// Terminal is a stream (the command line's stderr) that a live progress
// line shares with the log and the error messages: any other write ends
// the progress line first, so that no log line is written into it.
type Terminal struct {
	mu   sync.Mutex
	w    io.Writer
	open bool // a progress line is on the screen and not ended
}

// NewTerminal returns the Terminal over w.
func NewTerminal(w io.Writer) *Terminal { return &Terminal{w: w} }

// Write ends the progress line, if one is open, and writes p.
func (t *Terminal) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.end()
	return t.w.Write(p)
}

// Progress replaces the progress line with line (no newline: the next
// write, or End, ends it).
func (t *Terminal) Progress(line string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, _ = io.WriteString(t.w, "\r\033[K"+line)
	t.open = true
}

// End ends the progress line with a newline, if one is open, keeping it on
// the screen.
func (t *Terminal) End() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.end()
}

func (t *Terminal) end() {
	if t.open {
		_, _ = io.WriteString(t.w, "\n")
		t.open = false
	}
}
