package demo

import (
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/reconciler/reconciler/reconcile"
	"github.com/reconciler/reconciler/report"
)

// Progress says what the demo is doing while it runs: a line as each phase
// begins (generating the fakes, seeding the database, each
// reconciliation, the report). Live, on a terminal, the current phase's
// line is rewritten with its counts as it goes and closed with the phase's
// time; otherwise the lines are plain, one per phase, for a log or a test.
//
// Progress is also an io.Writer for the logs that share its terminal: a
// log line first ends the progress line, so that the two never share one.
// It is safe for concurrent use.
type Progress struct {
	mu     sync.Mutex
	w      io.Writer
	live   bool
	now    func() time.Time
	start  time.Time // of the demo
	began  time.Time // of the current phase
	title  string    // the current phase; "" when none
	detail string    // its latest counts, on a live line
	open   bool      // a live line without its newline is on the terminal
	drawn  time.Time // when the live line was last rewritten
	phases []Phase
}

// Phase is one finished phase of the demo and how long it took.
type Phase struct {
	Name string
	Took time.Duration
}

// NewProgress returns a Progress writing to w; live rewrites the current
// phase's line in place (w is a terminal).
func NewProgress(w io.Writer, live bool) *Progress {
	return &Progress{w: w, live: live, now: time.Now}
}

// Phases are the phases the demo finished, in order, with their times.
func (p *Progress) Phases() []Phase {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Phase(nil), p.phases...)
}

// Write writes a log record, ending the live line first.
func (p *Progress) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.endLine()
	return p.w.Write(b)
}

// begin starts the demo's clock.
func (p *Progress) begin(now func() time.Time) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.now = now
	p.start = now()
}

// phase ends the current phase and starts the one named by format.
func (p *Progress) phase(format string, a ...any) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.finish()
	now := p.now()
	p.title, p.detail, p.began = fmt.Sprintf(format, a...), "", now
	line := fmt.Sprintf("[%5.1fs] %s", now.Sub(p.start).Seconds(), p.title)
	if p.live {
		fmt.Fprint(p.w, "\r\033[K"+line)
		p.open, p.drawn = true, now
		return
	}
	fmt.Fprintln(p.w, line)
}

// update rewrites the live line with the current phase's counts, at most
// ten times a second; plain lines ignore it.
func (p *Progress) update(format string, a ...any) {
	if p == nil || !p.live {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.title == "" {
		return
	}
	p.detail = ": " + fmt.Sprintf(format, a...)
	now := p.now()
	if now.Sub(p.drawn) < 100*time.Millisecond {
		return
	}
	fmt.Fprintf(p.w, "\r\033[K[%5.1fs] %s%s", p.began.Sub(p.start).Seconds(), p.title, p.detail)
	p.open, p.drawn = true, now
}

// run is a reconcile.Options.Progress that updates the line.
func (p *Progress) run(r reconcile.Progress) {
	p.update("%s events read, %s payments examined", report.Thousands(r.EventsRead), report.Thousands(r.Examined))
}

// done ends the last phase: the terminal is left at the start of a line.
func (p *Progress) done() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.finish()
}

// finish records the current phase and closes its live line with its
// last counts and its time.
func (p *Progress) finish() {
	if p.title == "" {
		return
	}
	took := p.now().Sub(p.began)
	p.phases = append(p.phases, Phase{Name: p.title, Took: took})
	if p.live {
		fmt.Fprintf(p.w, "\r\033[K[%5.1fs] %s%s (%.1fs)\n", p.began.Sub(p.start).Seconds(), p.title, p.detail, took.Seconds())
		p.open = false
	}
	p.title = ""
}

// endLine ends an open live line, so that what follows starts a line.
func (p *Progress) endLine() {
	if p.open {
		fmt.Fprintln(p.w)
		p.open = false
	}
}
