package gocardless

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"time"
)

// prefetch is the next slice that must be asked of GoCardless, listed in a
// goroutine of its own while the slice before it is handed on. A slice is
// handed on while the next is read (ListChanges), but at most two are held:
// once the next is read, its reading waits for the engine to write the
// one before, and a provider's rate limit goes unused. That wait grew once
// the slices through a stretch given up were read back from the spill
// (they make no request): at the default 10 requests/s a 100,000-event
// window took 0.85 of the time its requests allow. The prefetch lists the
// next slice's payment events as listType would, up to the page that
// passes the hold, into a spill file of its own, holding a page at a time;
// listType reads them from there, as if listed then, and lists the rest,
// if any.
type prefetch struct {
	from, end time.Time
	sp        *spill // its own file
	r         *spillRegion
	// next is the cursor after its last page when it stopped past the
	// hold; "" when it listed the slice to its end. n is how many
	// events it listed.
	next string
	n    int
	err  error
	// following is the slice listed after this one (nil: none), set
	// once done is closed; cancel stops the whole chain.
	following *prefetch
	done      chan struct{}
	cancel    context.CancelFunc
}

// aheadDepth is how many slices are listed ahead at most, one after
// another: enough to keep requests going while the engine writes the
// slices read back from a stretch given up (about a hold's events).
const aheadDepth = 2

// aheadMax bounds each slice listed ahead on disk: a window's files hold
// at most 52 MiB with DefaultSpillMax, and every window of the process
// together at most ProcessSpillMax.
const aheadMax = 10 << 20

// prefetchNext starts listing ahead the slices from f that GoCardless must
// be asked for, when nothing is listed ahead: they are planned as
// readWindow will plan them, passing over the slices read back from the
// spill and the instants the window knows of (their pages are marked, not
// held), neither of which changes the window's span. A slice listed ahead
// to its end gives the span after it, and the next is listed in turn, up
// to aheadDepth; one that passes the hold (the window will learn from it)
// ends the chain.
func (p *Provider) prefetchNext(ctx context.Context, w *window, f, to time.Time, span time.Duration) {
	if p.noPrefetch || w.unfit || w.ahead != nil || w.sp == nil {
		return
	}
	peek := *w
	peek.known, peek.sp = slices.Clone(w.known), nil // planning ahead lets nothing go
	// next plans the next slice to ask for from f: ok false when there is
	// none, or one the chain cannot plan (an instant that changes the span).
	next := func() (from, end time.Time, profiled, ok bool) {
		for f.Before(to) {
			e, prof := peek.plan(f, to, span, p.hold*3/4)
			switch {
			case e.Sub(f) <= time.Millisecond && !prof:
				return f, e, prof, false
			case e.Sub(f) > time.Millisecond && peek.spilled(f, e) == nil:
				return f, e, prof, true
			}
			f = e
		}
		return f, f, false, false
	}
	from, end, profiled, ok := next()
	if !ok {
		return
	}
	ctx, cancel := context.WithCancel(ctx)
	pf := p.newPrefetch(from, end, cancel)
	if pf == nil {
		cancel()
		return
	}
	w.ahead = pf
	go func() {
		for depth := 1; ; depth++ {
			p.listAhead(ctx, pf)
			var following *prefetch
			// A slice whose last page passed the hold is given up by the
			// reader too: the window will learn from it, and plan anew.
			if pf.err == nil && pf.next == "" && pf.n <= p.hold && depth < aheadDepth {
				if !profiled {
					span = longer(pf.end.Sub(pf.from), pf.n, p.hold)
				}
				f = pf.end
				var ok bool
				if from, end, profiled, ok = next(); ok {
					following = p.newPrefetch(from, end, cancel)
				}
			}
			pf.following = following
			close(pf.done)
			if following == nil {
				return
			}
			pf = following
		}
	}()
}

// newPrefetch opens a slice to list ahead, in a spill file of its own (nil
// when none can be opened: the slice is listed when it comes).
func (p *Provider) newPrefetch(from, end time.Time, cancel context.CancelFunc) *prefetch {
	sp, err := openSpill(p.spillDir, min(cmp.Or(p.spillMax, DefaultSpillMax), aheadMax), cmp.Or(p.spills, processSpills))
	if err != nil {
		return nil
	}
	return &prefetch{from: from, end: end, sp: sp, r: sp.begin(), done: make(chan struct{}), cancel: cancel}
}

// listAhead lists pf's payment events, page by page, into its spill, up to
// the page that passes the hold.
func (p *Provider) listAhead(ctx context.Context, pf *prefetch) {
	q, _ := p.query(stretch{rt: "payments", from: pf.from, end: pf.end, capN: p.hold, past: giveUp})
	for {
		body, err := p.getBody(ctx, "/events", q)
		if err != nil {
			pf.err = err
			return
		}
		// Only the count and the cursor: the page is decoded whole when
		// it is read from the spill.
		var pg struct {
			Events []struct{} `json:"events"`
			Meta   listMeta   `json:"meta"`
		}
		if err := json.Unmarshal(body, &pg); err != nil {
			pf.err = err
			return
		}
		if pf.sp.add(pf.r, body, p.now(), pf.from, pf.from); pf.r.full {
			// Past the spill's bound: the pages that fit are read from
			// it, the rest is listed when the slice comes.
			if len(pf.r.pages) == 0 {
				pf.err = errUnfit
			}
			pf.next = q.Get("after")
			return
		}
		pf.n += len(pg.Events)
		after := pg.Meta.next(len(pg.Events))
		if after == "" {
			return // the slice's end
		}
		if pf.n > p.hold {
			pf.next = after
			return
		}
		q.Set("after", after)
	}
}

// errUnfit: not one page of a slice listed ahead fit the spill's bound;
// the window lists no more ahead.
var errUnfit = errors.New("gocardless: the slice listed ahead did not fit the spill")

// takePrefetch returns the slice [from, end) listed ahead, once listed, or
// nil: nothing listed ahead, another slice (the plan changed: the chain
// is stopped and let go) or a listing that failed (the slice is listed
// again; a failure that lasts fails that listing).
func (p *Provider) takePrefetch(w *window, from, end time.Time) *prefetch {
	pf := w.ahead
	if pf == nil {
		return nil
	}
	if !pf.from.Equal(from) || !pf.end.Equal(end) {
		w.ahead = nil
		pf.stop()
		return nil
	}
	<-pf.done
	w.ahead = pf.following
	if pf.err != nil {
		w.unfit = w.unfit || errors.Is(pf.err, errUnfit)
		p.log.Debug("gocardless slice listed ahead failed; listing it again", "from", from, "until", end, "error", pf.err)
		pf.free()
		return nil
	}
	p.listedAhead++
	return pf
}

// stop cancels the chain from pf and lets its pages go.
func (pf *prefetch) stop() {
	if pf == nil {
		return
	}
	pf.cancel()
	for ; pf != nil; pf = pf.following {
		<-pf.done
		pf.free()
	}
}

// free lets the slice's pages go, once read.
func (pf *prefetch) free() {
	if pf != nil {
		pf.sp.close()
	}
}
