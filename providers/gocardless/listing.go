package gocardless

// Object listing (DESIGN section 3, path 3): a window older than the event
// log, or any window on demand, read from GoCardless's payments, payouts
// and refunds as they are now (docs/providers/gocardless.md, "Object
// listing (path 3)").

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/reconciler/reconciler/internal/fanin"
	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/reconcile"
)

var (
	_ reconcile.ObjectLister  = (*Provider)(nil)
	_ reconcile.CurrentLister = (*Verifier)(nil)
)

// payoutCacheSize bounds the payouts one listing keeps (a few hundred bytes
// each): about four years of daily payouts, so that a payment's payout is
// rarely read twice, and memory stays flat however long the window.
const payoutCacheSize = 1024

// ListObjects implements reconcile.ObjectLister. For the window [Since,
// Until) it lists, as GoCardless shows them now and capped at Until:
//
//   - the payments created in the window (GET /payments?created_at…), each
//     mapped as Fetch maps a payment whose events are not read, plus the
//     facts its fields date: created at created_at, collected at its charge
//     date, settled when its payout (links.payout, read with the window's
//     payouts or by id) was created;
//   - the payments created before the window that its refunds name (GET
//     /refunds?created_at…) or its payouts paid out (GET /payouts?created_at…
//     and their payment_paid_out items, GET /payout_items?payout=…), re-read
//     by id (GET /payments/{id}) and mapped the same way.
//
// A fact dated at or after Until is left out, and amount_refunded counts
// only the refunds created before Until. A payment's own events are not
// read (a request a payment): its states are dated by its fields (inferred),
// except that the newest failure of a failed Success+ payment is read, as
// the stuck path and verify read it, to tell a failure GoCardless will retry.
// Pages carry no events and no cursor; each is handed to fn before the next
// is read. Memory stays flat: a payout cache and a filter of the window's
// payment ids of fixed size. lp.Account, lp.After and lp.AfterAt are ignored.
func (p *Provider) ListObjects(ctx context.Context, lp reconcile.ListParams, fn func(reconcile.Page) error) error {
	if !lp.Since.Before(lp.Until) {
		return nil
	}
	l := &lister{p: p, since: lp.Since.UTC(), until: lp.Until.UTC(), payouts: payoutCache{max: payoutCacheSize}}
	// The window's payments come first: they fill the filter by which the
	// payouts' items tell the payments created before the window.
	if err := l.cachePayouts(ctx); err != nil {
		return err
	}
	if err := l.listPayments(ctx, fn); err != nil {
		return err
	}
	if err := l.listRefunds(ctx, fn); err != nil {
		return err
	}
	if err := l.listPaidOutEarlier(ctx, fn); err != nil {
		return err
	}
	return l.listPayouts(ctx, fn)
}

// ListCurrent implements reconcile.CurrentLister: the payments created in
// [Since, Until) (GET /payments?created_at…, the provider's page size, 500
// by default), each mapped exactly as Current maps it (with its payout's
// status, and the failure of a Success+ payment read as Current reads it),
// one page to fn at a time. lp.Account, lp.After and lp.AfterAt are ignored.
func (v *Verifier) ListCurrent(ctx context.Context, lp reconcile.ListParams, fn func([]reconcile.Current) error) error {
	if !lp.Since.Before(lp.Until) {
		return nil
	}
	return v.p.list(ctx, "/payments", "payments", windowQuery(lp.Since, lp.Until, v.p.page), func(items []json.RawMessage) error {
		out := make([]reconcile.Current, 0, len(items))
		for _, raw := range items {
			var pm currentPayment
			if err := json.Unmarshal(raw, &pm); err != nil {
				return fmt.Errorf("decode gocardless payment: %w", err)
			}
			c, err := v.current(ctx, pm)
			if err != nil {
				return err
			}
			out = append(out, c)
		}
		if len(out) == 0 {
			return nil
		}
		return fn(out)
	})
}

// lister is one ListObjects call.
type lister struct {
	p            *Provider
	since, until time.Time
	payouts      payoutCache
	// mapped holds the payments listed so far: those created in the
	// window, and those created shortly before it that its payouts paid.
	mapped idFilter
	// windowPayouts is set when the cache holds every payout created in
	// the window (cachePayouts read them all).
	windowPayouts bool
}

// idFilter is a Bloom filter of payment ids in a fixed megabyte, so that
// memory stays flat however many payments a window holds: has never misses
// an id added, and wrongly answers yes for about one id in 10^7 after
// 100,000 ids, one in 50 after a million (idFilterBits, idFilterHashes). Its
// hash is fixed (FNV-1a), so a rerun answers alike.
type idFilter struct {
	bits []uint64
}

const (
	idFilterBits   = 1 << 23
	idFilterHashes = 6
)

func (f *idFilter) positions(id string, each func(word int, bit uint64)) {
	h := uint64(14695981039346656037) // FNV-1a, 64 bits
	for i := 0; i < len(id); i++ {
		h = (h ^ uint64(id[i])) * 1099511628211
	}
	h1, h2 := uint32(h), uint32(h>>32)|1
	for i := range uint32(idFilterHashes) {
		p := (h1 + i*h2) % idFilterBits
		each(int(p/64), 1<<(p%64))
	}
}

func (f *idFilter) add(id string) {
	if f.bits == nil {
		f.bits = make([]uint64, idFilterBits/64)
	}
	f.positions(id, func(w int, b uint64) { f.bits[w] |= b })
}

func (f *idFilter) has(id string) bool {
	if f.bits == nil {
		return false
	}
	in := true
	f.positions(id, func(w int, b uint64) { in = in && f.bits[w]&b != 0 })
	return in
}

// listedPayout is the part of a payout the listing reads.
type listedPayout struct {
	ID        string    `json:"id"`
	CreatedAt time.Time `json:"created_at"`
	Currency  string    `json:"currency"`
	Status    string    `json:"status"` // pending, paid, bounced
	raw       json.RawMessage
}

func decodePayout(raw json.RawMessage) (*listedPayout, error) {
	var po listedPayout
	if err := json.Unmarshal(raw, &po); err != nil {
		return nil, fmt.Errorf("decode gocardless payout: %w", err)
	}
	po.raw = raw
	return &po, nil
}

// payoutCache keeps the payouts read last, at most max of them (nil for a
// payout GoCardless does not know).
type payoutCache struct {
	max  int
	m    map[string]*listedPayout
	ring []string // insertion order, for eviction
	next int
}

func (c *payoutCache) get(id string) (*listedPayout, bool) {
	po, ok := c.m[id]
	return po, ok
}

func (c *payoutCache) put(id string, po *listedPayout) {
	if c.m == nil {
		c.m = map[string]*listedPayout{}
	}
	if _, ok := c.m[id]; !ok {
		if len(c.ring) < c.max {
			c.ring = append(c.ring, id)
		} else {
			delete(c.m, c.ring[c.next])
			c.ring[c.next] = id
			c.next = (c.next + 1) % len(c.ring)
		}
	}
	c.m[id] = po
}

// windowQuery selects the objects created in [since, until), limit a page.
func windowQuery(since, until time.Time, limit int) url.Values {
	q := url.Values{}
	q.Set("created_at[gte]", msCeil(since))
	q.Set("created_at[lt]", msCeil(until))
	q.Set("limit", strconv.Itoa(limit))
	return q
}

// list pages through a GoCardless list (GET path with q; cursor after, null
// on the last page) and calls each with the items under key of every page.
// An error each returns is returned as it is.
func (p *Provider) list(ctx context.Context, path, key string, q url.Values, each func([]json.RawMessage) error) error {
	for {
		var pg map[string]json.RawMessage
		if err := p.get(ctx, path, q, &pg); err != nil {
			return fmt.Errorf("list gocardless %s: %w", strings.TrimPrefix(path, "/"), err)
		}
		var items []json.RawMessage
		if raw, ok := pg[key]; ok {
			if err := json.Unmarshal(raw, &items); err != nil {
				return fmt.Errorf("decode gocardless %s: %w", key, err)
			}
		}
		var meta listMeta
		if raw, ok := pg["meta"]; ok {
			if err := json.Unmarshal(raw, &meta); err != nil {
				return fmt.Errorf("decode gocardless %s meta: %w", key, err)
			}
		}
		if err := each(items); err != nil {
			return err
		}
		after := meta.next(len(items))
		if after == "" {
			return nil
		}
		q.Set("after", after)
	}
}

// emit hands a non-empty page to fn, its changes in provider-time order.
func emit(page reconcile.Page, fn func(reconcile.Page) error) error {
	if len(page.Changes) == 0 {
		return nil
	}
	reconcile.SortChanges(page.Changes)
	return fn(page)
}

// errCacheFull ends cachePayouts's list early.
var errCacheFull = errors.New("payout cache full")

// cachePayouts reads the window's payouts (newest first, as many as the
// cache keeps), so that the payments' payouts are rarely read one by one.
func (l *lister) cachePayouts(ctx context.Context) error {
	err := l.p.list(ctx, "/payouts", "payouts", windowQuery(l.since, l.until, l.p.page), func(items []json.RawMessage) error {
		for _, raw := range items {
			po, err := decodePayout(raw)
			if err != nil {
				return err
			}
			if len(l.payouts.m) >= l.payouts.max {
				return errCacheFull
			}
			l.payouts.put(po.ID, po)
		}
		return nil
	})
	if errors.Is(err, errCacheFull) {
		return nil
	}
	l.windowPayouts = err == nil
	return err
}

// earlierLookback is how long before the window listPaidOutEarlier lists
// the payments the window's payouts may have paid out: a Bacs payment is
// collected within about five working days of its submission and paid out
// soon after, so two weeks cover nearly all; listPayouts re-reads the rest
// one by one.
const earlierLookback = 14 * 24 * time.Hour

// listPaidOutEarlier lists the payments created in the two weeks before the
// window (a page of 500 costs one request, where listPayouts would read
// each by id) and maps those a payout created in the window paid out.
func (l *lister) listPaidOutEarlier(ctx context.Context, fn func(reconcile.Page) error) error {
	return l.p.list(ctx, "/payments", "payments", windowQuery(l.since.Add(-earlierLookback), l.since, l.p.page), func(items []json.RawMessage) error {
		var pms []listedPayment
		for _, raw := range items {
			var pm Payment
			if err := json.Unmarshal(raw, &pm); err != nil {
				return fmt.Errorf("decode gocardless payment: %w", err)
			}
			if pm.Links.Payout == "" || !pm.CreatedAt.Before(l.since) {
				continue
			}
			in, err := l.windowPayout(ctx, pm.Links.Payout)
			if err != nil {
				return err
			}
			if !in {
				continue
			}
			l.mapped.add(pm.ID)
			pms = append(pms, listedPayment{pm, raw})
		}
		cs, err := l.mapAll(ctx, pms)
		if err != nil {
			return err
		}
		return emit(reconcile.Page{Changes: cs}, fn)
	})
}

// windowPayout reports whether payout id was created in the window: from
// the cache, which holds every such payout unless the window had more than
// it keeps (then the payout is read by id).
func (l *lister) windowPayout(ctx context.Context, id string) (bool, error) {
	po, ok := l.payouts.get(id)
	if !ok {
		if l.windowPayouts {
			return false, nil
		}
		var err error
		if po, err = l.payout(ctx, id); err != nil {
			return false, err
		}
	}
	return po != nil && !po.CreatedAt.Before(l.since) && po.CreatedAt.Before(l.until), nil
}

// listPayouts finds the payments created before the window that the
// window's payouts paid out (GET /payout_items?payout=…, the items of type
// payment_paid_out) and re-reads by id those not listed already (l.mapped:
// the window's own payments, which the payouts mostly paid, and the ones
// listPaidOutEarlier found), one page of a payout's items at a time.
// Payout items exist for payouts of the last six months only (410 Gone):
// the list is newest first, so after the first payout answered 410, the
// older ones' items are not asked for.
//
// The payouts are listed by one part of a fan-in and their items read by
// listReaders others (one unless GoCardless answers late), each taking the
// next payout listed (newest first); the payments they name are filtered
// and re-read (older) on this goroutine, as their pages arrive. Once a
// payout's items answered 410 Gone (documented to mean a payout older than
// six months), the payouts listed after it, no newer, are not asked for;
// readers that asked before the 410 answered get 410 too and are skipped
// the same way. Any other refusal fails the listing rather than drop
// payouts.
func (l *lister) listPayouts(ctx context.Context, fn func(reconcile.Page) error) error {
	listed := make(chan *listedPayout)
	var (
		mu     sync.Mutex
		goneAt time.Time // the created_at of the first payout whose items are gone
	)
	lister := func(ctx context.Context, _ func(paidOut) error) error {
		defer close(listed)
		return l.p.list(ctx, "/payouts", "payouts", windowQuery(l.since, l.until, l.p.page), func(items []json.RawMessage) error {
			for _, raw := range items {
				po, err := decodePayout(raw)
				if err != nil {
					return err
				}
				if po.CreatedAt.Before(l.since) || !po.CreatedAt.Before(l.until) {
					continue
				}
				select {
				case listed <- po:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			return nil
		})
	}
	reader := func(ctx context.Context, send func(paidOut) error) error {
		for po := range listed {
			mu.Lock()
			skip := !goneAt.IsZero() && !po.CreatedAt.After(goneAt)
			mu.Unlock()
			if skip {
				continue
			}
			q := url.Values{}
			q.Set("payout", po.ID)
			q.Set("limit", strconv.Itoa(l.p.page))
			err := l.p.list(ctx, "/payout_items", "payout_items", q, func(items []json.RawMessage) error {
				ids, err := paidOutIDs(po.ID, items)
				if err != nil {
					return err
				}
				return send(paidOut{po.ID, ids})
			})
			var ae *APIError
			switch {
			case errors.As(err, &ae) && ae.Status == http.StatusGone:
				mu.Lock()
				first := goneAt.IsZero()
				if first || po.CreatedAt.After(goneAt) {
					goneAt = po.CreatedAt
				}
				mu.Unlock()
				if first {
					l.p.log.Warn("gocardless serves no items for this payout (items exist for payouts of the last six months): the payments created before the window that it and older payouts paid out are not listed",
						"payout_id", po.ID, "error", err)
				}
			case err != nil:
				return err
			}
		}
		return nil
	}
	parts := []func(context.Context, func(paidOut) error) error{lister}
	for range l.p.listReaders() {
		parts = append(parts, reader)
	}
	return fanin.Run(ctx, parts, func(ctx context.Context, part func(context.Context, func(paidOut) error) error, send func(paidOut) error) error {
		return part(ctx, send)
	}, func(ctx context.Context, p paidOut) error {
		var ids []string
		for _, id := range p.ids {
			if !l.mapped.has(id) {
				ids = append(ids, id)
			}
		}
		page, err := l.older(ctx, ids, "payout "+p.payout)
		if err != nil {
			return err
		}
		return emit(page, fn)
	})
}

// paidOut is the payments a page of a payout's items paid out.
type paidOut struct {
	payout string
	ids    []string
}

// paidOutIDs returns the payments a page of payout po's items paid out
// (the items of type payment_paid_out).
func paidOutIDs(po string, items []json.RawMessage) ([]string, error) {
	var ids []string
	for _, raw := range items {
		var it struct {
			Type  string `json:"type"`
			Links struct {
				Payment string `json:"payment"`
			} `json:"links"`
		}
		if err := json.Unmarshal(raw, &it); err != nil {
			return nil, fmt.Errorf("decode gocardless payout item of %s: %w", po, err)
		}
		if it.Type == "payment_paid_out" && it.Links.Payment != "" {
			ids = append(ids, it.Links.Payment)
		}
	}
	return ids, nil
}

// older re-reads payments the window's refunds or payouts (what, for the
// messages) name and maps those created before the window; an id named
// twice is read once.
func (l *lister) older(ctx context.Context, ids []string, what string) (reconcile.Page, error) {
	seen := make(map[string]bool, len(ids))
	uniq := ids[:0:0]
	for _, pid := range ids {
		if !seen[pid] {
			seen[pid] = true
			uniq = append(uniq, pid)
		}
	}
	type read struct {
		lp    listedPayment
		found bool
	}
	got := make([]read, len(uniq))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(l.p.listReaders())
	for i, pid := range uniq {
		g.Go(func() error {
			pm, raw, found, err := l.p.getPayment(gctx, pid)
			if err != nil {
				return fmt.Errorf("read a payment of gocardless %s: %w", what, err)
			}
			got[i] = read{listedPayment{pm, raw}, found}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return reconcile.Page{}, err
	}
	var pms []listedPayment
	for i, r := range got {
		switch {
		case !r.found:
			l.p.log.Warn("a payment the listing found is not found at gocardless", "found_by", what, "provider_id", uniq[i])
		case r.lp.pm.CreatedAt.Before(l.since): // else listed with the window's payments
			pms = append(pms, r.lp)
		}
	}
	cs, err := l.mapAll(ctx, pms)
	return reconcile.Page{Changes: cs}, err
}

// listPayments maps the payments created in the window, a page at a time.
// When GoCardless answers slower than the pacing allows (latencyBound), the
// window is listed as listStretches stretches of its time at once, each a
// list read through its own cursor, their pages mapped here one at a time
// as they arrive (internal/fanin): a payment is in one stretch, so the
// changes are those of one list, in another order of pages, for at most a
// partly filled page more a stretch. The mapping (the payout cache, the
// filter of mapped payments, the few reads it makes) stays on this
// goroutine.
func (l *lister) listPayments(ctx context.Context, fn func(reconcile.Page) error) error {
	mapPage := func(ctx context.Context, items []json.RawMessage) error {
		pms := make([]listedPayment, 0, len(items))
		for _, raw := range items {
			var pm Payment
			if err := json.Unmarshal(raw, &pm); err != nil {
				return fmt.Errorf("decode gocardless payment: %w", err)
			}
			l.mapped.add(pm.ID)
			pms = append(pms, listedPayment{pm, raw})
		}
		cs, err := l.mapAll(ctx, pms)
		if err != nil {
			return err
		}
		return emit(reconcile.Page{Changes: cs}, fn)
	}
	if !l.p.latencyBound() {
		return l.p.list(ctx, "/payments", "payments", windowQuery(l.since, l.until, l.p.page), func(items []json.RawMessage) error {
			return mapPage(ctx, items)
		})
	}
	return fanin.Run(ctx, msStretches(l.since, l.until, l.p.listStretches()), func(ctx context.Context, s [2]time.Time, send func([]json.RawMessage) error) error {
		return l.p.list(ctx, "/payments", "payments", windowQuery(s[0], s[1], l.p.page), send)
	}, mapPage)
}

// latencyFloor is the latency below which a list is never read in
// stretches: an answer on loopback.
const latencyFloor = 20 * time.Millisecond

// latencyBound reports whether GoCardless answers slower than one and a half
// pacing intervals (and latencyFloor): one list, a request an answer's time,
// then cannot use the pacing, and stretches listed at once can (Stripe's
// test, providers/stripe).
func (p *Provider) latencyBound() bool {
	iv := p.tr.Interval()
	return iv > 0 && p.tr.Latency() > max(iv*3/2, latencyFloor)
}

// listStretches is how many stretches of its window a list is read in when
// GoCardless answers late: one more than the pacing intervals an answer
// takes, three at least and six at most.
func (p *Provider) listStretches() int {
	iv, l := p.tr.Interval(), p.tr.Latency()
	if iv <= 0 {
		return 3
	}
	return min(max(int((l+iv-1)/iv)+1, 3), 6)
}

// listReaders is how many of a page's payments the listing reads at once
// (their refunds, a failure, a payment by id): listStretches when
// GoCardless answers late, else one.
func (p *Provider) listReaders() int {
	if p.latencyBound() {
		return p.listStretches()
	}
	return 1
}

// msStretches cuts [since, until) into at most k consecutive stretches of
// whole milliseconds (the precision of GoCardless's created_at filters),
// the first from since and the last to until.
func msStretches(since, until time.Time, k int) [][2]time.Time {
	lo := since
	var out [][2]time.Time
	for i := 1; i < k; i++ {
		b := since.Add(until.Sub(since) * time.Duration(i) / time.Duration(k)).Truncate(time.Millisecond)
		if b.After(lo) && b.Before(until) {
			out = append(out, [2]time.Time{lo, b})
			lo = b
		}
	}
	return append(out, [2]time.Time{lo, until})
}

// listRefunds re-reads the payments created before the window whose refunds
// were created in it (the window's own payments, listed already, are told
// by l.mapped), a page of refunds at a time; a payment refunded twice in one
// page is read once (in two pages, twice: the changes are the same).
func (l *lister) listRefunds(ctx context.Context, fn func(reconcile.Page) error) error {
	return l.p.list(ctx, "/refunds", "refunds", windowQuery(l.since, l.until, l.p.page), func(items []json.RawMessage) error {
		var ids []string
		for _, raw := range items {
			var r Refund
			if err := json.Unmarshal(raw, &r); err != nil {
				return fmt.Errorf("decode gocardless refund: %w", err)
			}
			if r.Links.Payment != "" && !l.mapped.has(r.Links.Payment) {
				ids = append(ids, r.Links.Payment)
			}
		}
		page, err := l.older(ctx, ids, "refunds")
		if err != nil {
			return err
		}
		return emit(page, fn)
	})
}

// paymentReads is what a payment's mapping reads beside the payment: its
// refunds, when it was refunded (to count those created before the
// window's end), and the newest failure of a failed Success+ payment. Its
// payout comes from the cache (changesWith).
type paymentReads struct {
	refunds     []Refund
	refundsRead bool
	lastFailed  *Event
}

// reads reads what pm's mapping needs beside it (nothing for most
// payments). It keeps no state of the lister's, so that payments' reads
// can run at once (readAll).
func (l *lister) reads(ctx context.Context, pm Payment) (paymentReads, error) {
	r := paymentReads{refundsRead: true}
	if pm.AmountRefunded > 0 {
		var err error
		r.refunds, err = l.p.paymentRefunds(ctx, pm.ID)
		if unsupported(err) {
			l.p.log.Warn("gocardless did not list the payment's refunds; the listing says nothing of its amount_refunded", "provider_id", pm.ID, "error", err)
			r.refunds, r.refundsRead, err = nil, false, nil
		}
		if err != nil {
			return r, err
		}
	}
	if pm.Status == "failed" && pm.RetryIfPossible {
		var err error
		r.lastFailed, err = l.p.lastFailed(ctx, pm.ID)
		if unsupported(err) {
			l.p.log.Warn("gocardless did not list the payment's failed events; its failure counts as final", "provider_id", pm.ID, "error", err)
			r.lastFailed, err = nil, nil
		}
		if err != nil {
			return r, err
		}
	}
	return r, nil
}

// needsReads reports whether reads makes a request for pm.
func needsReads(pm Payment) bool {
	return pm.AmountRefunded > 0 || pm.Status == "failed" && pm.RetryIfPossible
}

// changesWith maps pm with what reads read, its payout from the cache (or
// read by id): on the lister's goroutine alone.
func (l *lister) changesWith(ctx context.Context, pm Payment, raw json.RawMessage, r paymentReads) ([]reconcile.Change, error) {
	var po *listedPayout
	if pm.Links.Payout != "" {
		var err error
		if po, err = l.payout(ctx, pm.Links.Payout); err != nil {
			return nil, err
		}
	}
	return listedChanges(pm, raw, r.refunds, r.refundsRead, r.lastFailed, po, l.until), nil
}

// listedPayment is a payment read from a list or by id, as sent.
type listedPayment struct {
	pm  Payment
	raw json.RawMessage
}

// mapAll maps pms, in order: their reads first, listReaders at once (one
// at a time unless GoCardless answers late: each is a request an answer's
// time), then each payment on this goroutine.
func (l *lister) mapAll(ctx context.Context, pms []listedPayment) ([]reconcile.Change, error) {
	reads := make([]paymentReads, len(pms))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(l.p.listReaders())
	for i, lp := range pms {
		if !needsReads(lp.pm) {
			reads[i] = paymentReads{refundsRead: true}
			continue
		}
		g.Go(func() error {
			r, err := l.reads(gctx, lp.pm)
			reads[i] = r
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	var out []reconcile.Change
	for i, lp := range pms {
		cs, err := l.changesWith(ctx, lp.pm, lp.raw, reads[i])
		if err != nil {
			return nil, err
		}
		out = append(out, cs...)
	}
	return out, nil
}

// payout reads a payout once per listing (as long as the cache keeps it);
// nil when GoCardless does not know it.
func (l *lister) payout(ctx context.Context, id string) (*listedPayout, error) {
	if po, ok := l.payouts.get(id); ok {
		return po, nil
	}
	var r struct {
		Payouts json.RawMessage `json:"payouts"`
	}
	if err := l.p.get(ctx, "/payouts/"+url.PathEscape(id), nil, &r); err != nil {
		var ae *APIError
		if !errors.As(err, &ae) || ae.Status != http.StatusNotFound {
			return nil, fmt.Errorf("get gocardless payout %s: %w", id, err)
		}
		l.p.log.Warn("payout not found at gocardless; its payments' settlement is dated by their charge date", "payout_id", id)
		l.payouts.put(id, nil)
		return nil, nil
	}
	po, err := decodePayout(r.Payouts)
	if err != nil {
		return nil, err
	}
	if po.ID != id {
		return nil, fmt.Errorf("get gocardless payout %s: the answer is for %q", id, po.ID)
	}
	l.payouts.put(id, po)
	return po, nil
}

// settlement is the fact that payout po paid payment pid out: settled when
// GoCardless created the payout (a payment is paid_out once "included in a
// payout"; the paid_out event the event path dates it by is emitted with
// it), and, for a payout that bounced, a conflict naming it, as the event
// path reports a bounced_payout (the bounce's own time is not known).
func settlement(pid string, po *listedPayout) []reconcile.Change {
	c := stamped(reconcile.Change{ProviderID: pid, State: models.StateSettled, At: po.CreatedAt.UTC(), PayoutID: po.ID,
		Currency: strings.ToLower(po.Currency), RawStatus: "paid_out", Inferred: true, Payload: po.raw})
	out := []reconcile.Change{c}
	if po.Status == "bounced" {
		out = append(out, reconcile.Change{ProviderID: pid, At: c.At, RawStatus: "payout_bounced", Inferred: true, Payload: po.raw,
			EventType: "reconciler.payout.bounced",
			Revert:    fmt.Sprintf("Payout %s that paid this payment out shows status bounced at GoCardless (found by object listing, which cannot tell when it bounced; GoCardless can retry it); settled_at and payout_id still name it.", po.ID)})
	}
	return out
}

// listedChanges maps a payment the listing read, as of until. The payment's
// status is mapped as Fetch maps it without its events (fetchedChanges),
// with amount_refunded counting only the refunds created before until
// (refunds, when refundsRead; otherwise nothing is said of it) and the
// newest failure of a Success+ payment (lastFailed) telling whether
// GoCardless retries it. Beside it, the facts its fields date: created at
// created_at; collected (captured) at its charge date when it shows it was
// collected (confirmed, paid_out, charged_back, or a payout); settled when
// its payout po was created. A failure or chargeback of a collected payment
// is dated no earlier than the collection and the payout, which it follows.
// Every fact dated at or after until is left out; when that leaves out the
// status's own fact, the latest fact kept carries amount_refunded.
func listedChanges(pm Payment, raw json.RawMessage, refunds []Refund, refundsRead bool, lastFailed *Event, po *listedPayout, until time.Time) []reconcile.Change {
	capped := pm
	var before []Refund
	var sum int64
	later := false
	for _, r := range refunds {
		switch {
		case r.Links.Payment != pm.ID:
		case r.CreatedAt.Before(until):
			before, sum = append(before, r), sum+r.Amount
		default:
			later = true
		}
	}
	switch {
	case !refundsRead:
		capped.AmountRefunded = 0
	case later:
		capped.AmountRefunded = min(sum, pm.AmountRefunded)
	}
	var evs []Event
	if lastFailed != nil {
		evs = []Event{*lastFailed}
	}
	st := fetchedChanges(capped, raw, evs, before)

	collected := pm.Links.Payout != "" || pm.Status == "confirmed" || pm.Status == "paid_out" || pm.Status == "charged_back"
	collectedAt := pm.CreatedAt.UTC()
	if d, err := time.Parse(time.DateOnly, pm.ChargeDate); err == nil && d.After(collectedAt) {
		collectedAt = d.UTC()
	}
	latest := func(a, b time.Time) time.Time {
		if b.After(a) {
			return b
		}
		return a
	}
	switch {
	case st.RawStatus == RawFailedWillRetry:
		st.At = lastFailed.CreatedAt.UTC() // the failure's own time
	case st.State == models.StateSettled && po != nil:
		st.At = po.CreatedAt.UTC()
		st = stamped(st)
	case collected && ((st.State == models.StateFailed && lastFailed == nil) || st.State == models.StateChargeback):
		st.At = latest(st.At, collectedAt)
		if po != nil {
			st.At = latest(st.At, po.CreatedAt.UTC())
		}
		st = stamped(st)
	}
	if st.AmountRefunded > 0 && st.RefundNote == "" {
		st.RefundNote = refundMeaning
	}

	var out []reconcile.Change
	add := func(c reconcile.Change) bool {
		if !c.At.Before(until) {
			return false
		}
		for _, o := range out {
			if c.EventID != "" && o.EventID == c.EventID {
				return true
			}
		}
		out = append(out, c)
		return true
	}
	kept := add(st)
	base := reconcile.Change{ProviderID: pm.ID, Amount: pm.Amount, Currency: strings.ToLower(pm.Currency), Inferred: true, Payload: raw}
	c := base
	c.State, c.At, c.RawStatus = models.StateCreated, pm.CreatedAt.UTC(), "created"
	add(stamped(c))
	if collected {
		c := base
		c.State, c.At, c.RawStatus = models.StateCaptured, collectedAt, "confirmed"
		add(stamped(c))
	}
	if po != nil {
		for _, c := range settlement(pm.ID, po) {
			c.Amount, c.Currency = base.Amount, base.Currency
			add(c)
		}
	}
	if !kept && st.AmountRefunded > 0 {
		last := -1
		for i, c := range out {
			if c.State.Valid() && (last < 0 || !c.At.Before(out[last].At)) {
				last = i
			}
		}
		if last >= 0 {
			out[last].AmountRefunded, out[last].RefundNote = st.AmountRefunded, refundMeaning
		}
	}
	return out
}
