package stripe

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	stripego "github.com/stripe/stripe-go/v76"
	"github.com/stripe/stripe-go/v76/form"
	"github.com/valyala/fastjson"
)

// The event path decodes only the fields the mapping reads, straight from
// each event's raw JSON, which it also keeps as the webhook_events payload.
// stripe-go's own Event type decodes every event twice (into a map and the
// raw bytes) and its typed objects carry hundreds of fields; at a million
// events a night that decoding was most of the job's CPU. The requests still
// go through stripe-go's backend (authentication, headers, errors) and its
// list iterator (cursors, has_more). The mapping takes these lean types as
// they are; nothing is rebuilt into stripe-go's.

// leanEvent is an event with only what the engine needs: its id, type and
// time, the parsed data.object, and the event's JSON for webhook_events.
type leanEvent struct {
	ID      string
	Type    string
	Created int64
	// APIVersion is the version Stripe rendered data.object in (the
	// event's own, not the request's): it decides what amount_refunded
	// counts after a partial capture.
	APIVersion string
	o          leanObject // what the mapping reads of data.object
	raw        json.RawMessage
}

// objKind is which lean form of data.object an event's type is mapped
// from (mapOne, payoutEach).
type objKind uint8

const (
	objNone objKind = iota
	objPI
	objCharge
	objRefund
	objDispute
	objPayout
)

// objectKind is the lean form mapOne (or, for a payout, payoutEach) reads
// of an event of type typ.
func objectKind(typ string) objKind {
	switch {
	case strings.HasPrefix(typ, "payment_intent."):
		return objPI
	case typ == "charge.captured" || typ == "charge.refunded":
		return objCharge
	case typ == "charge.refund.updated" || typ == "refund.updated" || typ == "refund.failed":
		return objRefund
	case strings.HasPrefix(typ, "charge.dispute."):
		return objDispute
	case strings.HasPrefix(typ, "payout."):
		return objPayout
	}
	return objNone
}

// leanObject is what the mapping reads of an event's data.object, decoded
// while the event's parse lives (decodeObject) instead of the parse kept
// until the mapping: a page's parse trees, kept whole, were the largest
// thing a run held (with Stripe-sized objects 8 MB for the events' parser
// and as much for the balance transactions', its value cache grown to the
// widest page seen), scanned by every collection (issue 16).
type leanObject struct {
	present bool    // the event had a data.object
	kind    objKind // which of pi, ch, re, di, po was decoded
	err     error   // fill's error for kind
	pi      leanPI
	ch      leanCharge
	re      leanRefund
	di      leanDispute
	po      leanPayout
	// payment is the PaymentIntent the object is about (paymentOf), read
	// only for an event in a version the mapping does not know (mapOne
	// reports it instead of reading the object).
	payment    string
	paymentErr error
}

// decodeObject decodes what the mapping reads of obj, an event of type typ
// rendered in API version version.
func decodeObject(o *leanObject, obj *fastjson.Value, typ, version string) {
	*o = leanObject{present: true, kind: objectKind(typ)}
	switch o.kind {
	case objPI:
		o.err = fill(obj, &o.pi)
	case objCharge:
		o.err = fill(obj, &o.ch)
	case objRefund:
		o.err = fill(obj, &o.re)
	case objDispute:
		o.err = fill(obj, &o.di)
	case objPayout:
		o.err = fill(obj, &o.po)
	}
	if _, known := versionDate(version); !known {
		o.payment, o.paymentErr = paymentOf(obj, typ)
	}
}

// leanEventList is a page of /v1/events, read once (rawPage) and parsed
// once with fastjson; encoding/json's several passes per event, and
// stripe-go's own pass over every body, were most of the job's CPU.
type leanEventList struct {
	stripego.APIResource
	stripego.ListMeta
	events []*leanEvent
	// evs, when set, holds the events of the previous page, done with
	// (eventIter's reuse): this page's are decoded into it.
	evs *[]leanEvent
}

// eventsFor returns room for n events: the reused array when there is one.
func (l *leanEventList) eventsFor(n int) []leanEvent {
	if l.evs == nil {
		return make([]leanEvent, n)
	}
	if cap(*l.evs) < n {
		*l.evs = make([]leanEvent, n)
	}
	*l.evs = (*l.evs)[:n]
	return *l.evs
}

// UnmarshalJSON parses the page. A field of the wrong type is an error, never
// a silent zero.
func (l *leanEventList) UnmarshalJSON(b []byte) error {
	return l.parse(new(fastjson.Parser), b)
}

// listData parses a list page's envelope with p: has_more into more, and
// the data array.
func listData(p *fastjson.Parser, b []byte, more *bool) ([]*fastjson.Value, error) {
	v, err := p.ParseBytes(b)
	if err != nil {
		return nil, err
	}
	if hm := v.Get("has_more"); hm != nil {
		if *more, err = hm.Bool(); err != nil {
			return nil, fmt.Errorf("has_more: %w", err)
		}
	}
	data := v.Get("data")
	if data == nil {
		return nil, errors.New("list without data")
	}
	arr, err := data.Array()
	if err != nil {
		return nil, fmt.Errorf("data: %w", err)
	}
	return arr, nil
}

// parse reads the page with p. Each event is parsed on its own (its data
// array's elements found by listSpans) and decoded at once (parseEvent):
// p's value cache holds one event, not the page, and nothing of the parse
// outlives the event's decode. The events' JSON are the page's own bytes,
// as the provider sent them (a slice of b each, capped so that no append
// can reach the next): b is the page's alone and outlives the events.
// Re-encoding every event (fastjson's MarshalTo) into a second buffer the
// size of the page was a tenth of a rerun's allocations. A page listSpans
// cannot place for sure (never Stripe's) is parsed whole, as before, and
// its events re-encoded.
//
// Each event is decoded as listSpans finds it (scanEventAt, one pass over
// the page for both); an event scanEventAt leaves to fastjson is parsed
// with p once the page's structure is known.
func (l *leanEventList) parse(p *fastjson.Parser, b []byte) error {
	evs := l.eventsFor(0)
	var scanned []bool
	spans, env, ok := listSpansWith(b, func(b []byte, i int) (int, bool) {
		evs = append(evs, leanEvent{})
		end, ok := scanEventAt(b, i, &evs[len(evs)-1])
		scanned = append(scanned, ok)
		return end, ok
	})
	if l.evs != nil {
		*l.evs = evs // grown, for the next page
	}
	if !ok {
		return l.parseWhole(p, b)
	}
	// The envelope, its data emptied, is fastjson's to check and read.
	if _, err := listData(p, env, &l.HasMore); err != nil {
		return err
	}
	l.events = make([]*leanEvent, len(spans))
	for i, sp := range spans {
		ev := &evs[i]
		if !scanned[i] {
			e, err := p.ParseBytes(b[sp[0]:sp[1]])
			if err != nil {
				return fmt.Errorf("data[%d]: %w", i, err)
			}
			*ev = leanEvent{}
			if err := parseEvent(e, ev); err != nil {
				return err
			}
		}
		ev.raw = b[sp[0]:sp[1]:sp[1]]
		l.events[i] = ev
	}
	return nil
}

// decodeEvent decodes the event b into ev: in one pass over b (scanEvent)
// when b is plain JSON of the fields' expected types, else parsed with p
// (parseEvent), which decides what is accepted and every error. syntax
// says the error is fastjson's parse's, not the event's.
func decodeEvent(p *fastjson.Parser, b []byte, ev *leanEvent) (syntax bool, err error) {
	if scanEvent(b, ev) {
		return false, nil
	}
	*ev = leanEvent{}
	e, err := p.ParseBytes(b)
	if err != nil {
		return true, err
	}
	return false, parseEvent(e, ev)
}

// parseWhole parses the page in one piece, its events re-encoded.
func (l *leanEventList) parseWhole(p *fastjson.Parser, b []byte) error {
	arr, err := listData(p, b, &l.HasMore)
	if err != nil {
		return err
	}
	l.events = make([]*leanEvent, len(arr))
	evs := l.eventsFor(len(arr))
	raw := make([]byte, 0, len(b))
	for i, e := range arr {
		ev := &evs[i]
		if err := parseEvent(e, ev); err != nil {
			return err
		}
		start := len(raw)
		raw = e.MarshalTo(raw)
		ev.raw = raw[start:len(raw):len(raw)]
		l.events[i] = ev
	}
	return nil
}

// listSpans finds, without parsing, where each element of the top-level
// "data" array of b, a list page, lies in b, and returns the page with that
// array emptied (env) for fastjson to check and read. ok is false when it
// cannot say for sure: a key written with escapes (which fastjson would
// unescape), no data array, or anything but JSON's structure around the
// elements (each element is fastjson's to check). Like fastjson's Get, it
// takes the first "data" key.
func listSpans(b []byte) (spans [][2]int, env []byte, ok bool) {
	return listSpansWith(b, nil)
}

// elemScanner reads the element at b[i] (an object) of a list page's data
// array itself and returns the index past it, or false to leave it to
// skipValue. It must end an element it reads where skipValue would.
type elemScanner func(b []byte, i int) (int, bool)

// listSpansWith is listSpans with each element of the data array offered
// to elem first (nil: none is).
func listSpansWith(b []byte, elem elemScanner) (spans [][2]int, env []byte, ok bool) {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return nil, nil, false
	}
	i++
	arr := [2]int{-1, -1} // the data array, brackets included
	for first := true; ; first = false {
		i = skipSpace(b, i)
		if i < len(b) && b[i] == '}' && first {
			break // {}: no data
		}
		if i >= len(b) || b[i] != '"' {
			return nil, nil, false
		}
		end := skipString(b, i)
		if end < 0 {
			return nil, nil, false
		}
		key := b[i+1 : end-1]
		if bytes.IndexByte(key, '\\') >= 0 {
			return nil, nil, false
		}
		i = skipSpace(b, end)
		if i >= len(b) || b[i] != ':' {
			return nil, nil, false
		}
		i = skipSpace(b, i+1)
		if string(key) == "data" && arr[0] < 0 {
			if spans, end = arrayElems(b, i, elem); end < 0 {
				return nil, nil, false
			}
			arr = [2]int{i, end}
			i = end
		} else if i = skipValue(b, i); i < 0 {
			return nil, nil, false
		}
		i = skipSpace(b, i)
		if i < len(b) && b[i] == '}' {
			break
		}
		if i >= len(b) || b[i] != ',' {
			return nil, nil, false
		}
		i++
	}
	if arr[0] < 0 || skipSpace(b, i+1) != len(b) {
		return nil, nil, false
	}
	env = make([]byte, 0, len(b)-(arr[1]-arr[0])+2)
	env = append(append(append(env, b[:arr[0]]...), "[]"...), b[arr[1]:]...)
	return spans, env, true
}

// arrayElems returns the spans of the elements of the array at b[i] and
// the index just past it, or -1. Every element must be an object, as a
// list page's are: fastjson, alone on a bare value, accepts some it
// refuses inside an array (a lone "+"), and the page must be accepted in
// parts exactly when it is whole (FuzzListSpans found it).
func arrayElems(b []byte, i int, elem elemScanner) ([][2]int, int) {
	if i >= len(b) || b[i] != '[' {
		return nil, -1
	}
	var spans [][2]int
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == ']' {
		return spans, i + 1
	}
	for {
		start := skipSpace(b, i)
		if start >= len(b) || b[start] != '{' {
			return nil, -1
		}
		end, read := -1, false
		if elem != nil {
			end, read = elem(b, start)
		}
		if !read {
			end = skipValue(b, start)
		}
		if end < 0 {
			return nil, -1
		}
		spans = append(spans, [2]int{start, end})
		i = skipSpace(b, end)
		if i >= len(b) {
			return nil, -1
		}
		switch b[i] {
		case ',':
			i++
		case ']':
			return spans, i + 1
		default:
			return nil, -1
		}
	}
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\n' || b[i] == '\r' || b[i] == '\t') {
		i++
	}
	return i
}

// skipString returns the index just past the string starting at b[i] (a
// quote), or -1.
func skipString(b []byte, i int) int {
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			j++
		case '"':
			return j + 1
		}
	}
	return -1
}

// skipValue returns the index just past the value starting at b[i], or -1.
func skipValue(b []byte, i int) int {
	if i >= len(b) {
		return -1
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				if j = skipString(b, j); j < 0 {
					return -1
				}
				j--
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return j + 1
				}
			}
		}
		return -1
	}
	j := i // a number, true, false or null
	for j < len(b) && b[j] != ',' && b[j] != '}' && b[j] != ']' && b[j] != ' ' && b[j] != '\n' && b[j] != '\r' && b[j] != '\t' {
		j++
	}
	if j == i {
		return -1
	}
	return j
}

func parseEvent(e *fastjson.Value, ev *leanEvent) error {
	var err error
	if ev.ID, err = str(e, "id", true); err != nil {
		return fmt.Errorf("stripe event: %w", err)
	}
	if ev.Type, err = str(e, "type", true); err != nil {
		return fmt.Errorf("stripe event %s: %w", ev.ID, err)
	}
	if ev.Created, err = num(e, "created", true); err != nil {
		return fmt.Errorf("stripe event %s: %w", ev.ID, err)
	}
	if ev.APIVersion, err = str(e, "api_version", false); err != nil {
		return fmt.Errorf("stripe event %s: %w", ev.ID, err)
	}
	obj := e.Get("data", "object")
	if obj == nil || obj.Type() != fastjson.TypeObject {
		return fmt.Errorf("stripe event %s: data.object is not an object", ev.ID)
	}
	decodeObject(&ev.o, obj, ev.Type, ev.APIVersion)
	return nil
}

// str reads a string field; absent is "" unless required.
func str(v *fastjson.Value, key string, required bool) (string, error) {
	f := v.Get(key)
	if f == nil || f.Type() == fastjson.TypeNull {
		if required {
			return "", fmt.Errorf("%s is missing", key)
		}
		return "", nil
	}
	b, err := f.StringBytes()
	if err != nil {
		return "", fmt.Errorf("%s is not a string", key)
	}
	return stringOf(key, b), nil
}

// stringOf is the string b of the field key, a field of a few values
// interned (the lookup does not allocate): a copy of each was a fifth of a
// rerun's allocations.
func stringOf(key string, b []byte) string {
	switch key {
	case "type", "status", "currency", "object", "api_version", "reason", "reconciliation_status":
		if s, ok := vocabulary[string(b)]; ok {
			return s
		}
	}
	return string(b)
}

// vocabulary is the common values of the few-valued fields the mapping
// reads; any other value is copied as read (it only saves allocations).
var vocabulary = func() map[string]string {
	m := map[string]string{}
	for _, list := range [][]string{
		EventTypes,
		// objects, and balance transaction types
		{"event", "list", "payment_intent", "charge", "refund", "dispute", "payout", "balance_transaction",
			"payment", "payment_refund", "adjustment", "stripe_fee", "application_fee", "transfer", "payout_cancel", "payout_failure"},
		// statuses: payment intent, charge, refund, dispute, payout, balance transaction
		{"requires_payment_method", "requires_confirmation", "requires_action", "processing", "requires_capture", "canceled", "succeeded",
			"pending", "failed", "warning_needs_response", "warning_under_review", "warning_closed", "needs_response", "under_review",
			"won", "lost", "prevented", "paid", "in_transit", "available", "completed", "in_progress", "not_applicable"},
		// dispute reasons
		{"bank_cannot_process", "check_returned", "credit_not_processed", "customer_initiated", "debit_not_authorized", "duplicate",
			"fraudulent", "general", "incorrect_account_details", "insufficient_funds", "product_not_received", "product_unacceptable",
			"subscription_canceled", "unrecognized"},
		// the currencies most accounts settle in
		{"usd", "eur", "gbp", "cad", "aud", "jpy", "chf", "sek", "nok", "dkk", "nzd", "sgd", "hkd", "mxn", "brl", "pln", "czk", "inr"},
		// API versions an account is commonly pinned to
		{"2020-08-27", "2022-08-01", "2022-11-15", "2023-08-16", "2023-10-16", "2024-04-10", "2024-06-20", "2024-09-30.acacia",
			"2024-10-28.acacia", "2024-11-20.acacia", "2024-12-18.acacia", "2025-01-27.acacia", "2025-02-24.acacia", "2025-03-31.basil"},
	} {
		for _, v := range list {
			m[v] = v
		}
	}
	return m
}()

// num reads an integer field; absent is 0 unless required.
func num(v *fastjson.Value, key string, required bool) (int64, error) {
	f := v.Get(key)
	if f == nil || f.Type() == fastjson.TypeNull {
		if required {
			return 0, fmt.Errorf("%s is missing", key)
		}
		return 0, nil
	}
	n, err := f.Int64()
	if err != nil {
		return 0, fmt.Errorf("%s is not an integer", key)
	}
	return n, nil
}

func boolean(v *fastjson.Value, key string) (bool, error) {
	f := v.Get(key)
	if f == nil || f.Type() == fastjson.TypeNull {
		return false, nil
	}
	b, err := f.Bool()
	if err != nil {
		return false, fmt.Errorf("%s is not a boolean", key)
	}
	return b, nil
}

// ref reads an expandable id: a string, or an object with an id.
func ref(v *fastjson.Value, key string) (expandable, error) {
	f := v.Get(key)
	if f == nil || f.Type() == fastjson.TypeNull {
		return "", nil
	}
	if f.Type() == fastjson.TypeObject {
		id, err := str(f, "id", true)
		return expandable(id), err
	}
	b, err := f.StringBytes()
	if err != nil {
		return "", fmt.Errorf("%s is neither an id nor an object", key)
	}
	return expandable(b), nil
}

// fill decodes the lean fields of obj into v, failing on a field of the
// wrong type.
func fill(obj *fastjson.Value, v any) error {
	var errs []error
	s := func(k string) string { x, err := str(obj, k, false); errs = append(errs, err); return x }
	n := func(k string) int64 { x, err := num(obj, k, false); errs = append(errs, err); return x }
	b := func(k string) bool { x, err := boolean(obj, k); errs = append(errs, err); return x }
	r := func(k string) expandable { x, err := ref(obj, k); errs = append(errs, err); return x }
	switch o := v.(type) {
	case *leanPI:
		*o = leanPI{ID: s("id"), Amount: n("amount"), Currency: s("currency"), Status: s("status")}
	case *leanCharge:
		*o = leanCharge{ID: s("id"), Amount: n("amount"), AmountCaptured: n("amount_captured"), AmountRefunded: n("amount_refunded"), Captured: b("captured"),
			Refunded: b("refunded"), Currency: s("currency"), PaymentIntent: r("payment_intent")}
	case *leanRefund:
		*o = leanRefund{ID: s("id"), Amount: n("amount"), Currency: s("currency"), Status: s("status"), Created: n("created"), PaymentIntent: r("payment_intent")}
	case *leanDispute:
		*o = leanDispute{ID: s("id"), Status: s("status"), Amount: n("amount"), Currency: s("currency"), Reason: s("reason"), PaymentIntent: r("payment_intent")}
	case *leanPayout:
		*o = leanPayout{ID: s("id"), Reconciliation: s("reconciliation_status"), Status: s("status"), ArrivalDate: n("arrival_date")}
		// A payout requested by hand says automatic: false, and Stripe
		// cannot list its balance transactions (reconciliation_status
		// not_applicable); a payout that does not say is read as automatic.
		o.Manual = (obj.Get("automatic") != nil && !b("automatic")) || o.Reconciliation == string(stripego.PayoutReconciliationStatusNotApplicable)
	default:
		return fmt.Errorf("fill: %T", v)
	}
	return errors.Join(errs...)
}

// leanPayout is what the mapping reads of a payout: whether it was
// requested by hand (Stripe cannot list a manual payout's balance
// transactions) and reconciliation_status (the listing is complete once it
// is completed).
type leanPayout struct {
	ID             string
	Manual         bool
	Reconciliation string
	Status         string
	ArrivalDate    int64
}

// expandable is an id that may come expanded into an object.
type expandable string

func (e *expandable) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) == 0 || b[0] == 'n' {
		*e = ""
		return nil
	}
	if b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*e = expandable(s)
		return nil
	}
	var o struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(b, &o); err != nil {
		return err
	}
	*e = expandable(o.ID)
	return nil
}

type leanPI struct {
	ID       string `json:"id"`
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
	Status   string `json:"status"`
}

type leanCharge struct {
	ID             string     `json:"id"`
	Amount         int64      `json:"amount"`
	AmountCaptured int64      `json:"amount_captured"`
	AmountRefunded int64      `json:"amount_refunded"`
	Captured       bool       `json:"captured"`
	Refunded       bool       `json:"refunded"`
	Currency       string     `json:"currency"`
	PaymentIntent  expandable `json:"payment_intent"`
}

// captured is the amount the charge captured: amount_captured, or the
// whole amount for a captured charge rendered without it.
func (ch *leanCharge) captured() int64 {
	if ch.AmountCaptured > 0 {
		return ch.AmountCaptured
	}
	return ch.Amount
}

// chargeOf is the lean form of a charge that stripe-go decoded: the
// stuck-payment path reads a payment intent through stripe-go (its payload
// is stripe-go's encoding), and the charge arithmetic is the event path's.
func chargeOf(ch *stripego.Charge) leanCharge {
	l := leanCharge{ID: ch.ID, Amount: ch.Amount, AmountCaptured: ch.AmountCaptured, AmountRefunded: ch.AmountRefunded,
		Captured: ch.Captured, Refunded: ch.Refunded, Currency: string(ch.Currency)}
	if ch.PaymentIntent != nil {
		l.PaymentIntent = expandable(ch.PaymentIntent.ID)
	}
	return l
}

type leanRefund struct {
	ID            string     `json:"id"`
	Amount        int64      `json:"amount"`
	Currency      string     `json:"currency"`
	Status        string     `json:"status"`
	Created       int64      `json:"created"`
	PaymentIntent expandable `json:"payment_intent"`
}

type leanDispute struct {
	ID            string     `json:"id"`
	Status        string     `json:"status"`
	Amount        int64      `json:"amount"`
	Currency      string     `json:"currency"`
	Reason        string     `json:"reason"`
	PaymentIntent expandable `json:"payment_intent"`
}

// leanBT is a balance transaction with its source expanded.
type leanBT struct {
	ID          string `json:"id"`
	Type        string `json:"type"`
	Status      string `json:"status"`
	AvailableOn int64  `json:"available_on"`
	Created     int64  `json:"created"`
	Source      struct {
		Object string `json:"object"`
		leanCharge
	} `json:"source"`
}

type leanBTList struct {
	stripego.APIResource
	stripego.ListMeta
	Data []*leanBT `json:"data"`
}

// eventIter lists events through stripe-go's backend and list iterator,
// decoding each event leanly from the page's body, read once (rawPage).
//
// With reuse, one parser, one body buffer and one array of events serve
// every page: the next page's events are decoded over a page's, so the
// caller must be done with each event (mapped it, copied what it keeps)
// before it asks the iterator for the next one past a page's end (an
// event's JSON is the page's own copy of the body, and stays). ListChanges is; a caller
// that holds an event across pages (oldestIn) must not reuse. A fresh
// parser per page grew its value cache from nothing each time: two thirds
// of the decoding's time and 1.3 MB of garbage a page.
func (p *Provider) eventIter(params *stripego.EventListParams, reuse bool) *stripego.Iter {
	var parser *fastjson.Parser
	var buf *bytes.Buffer
	var evs *[]leanEvent
	if reuse {
		parser, buf, evs = new(fastjson.Parser), new(bytes.Buffer), new([]leanEvent)
	}
	return stripego.GetIter(params, func(sp *stripego.Params, b *form.Values) ([]interface{}, stripego.ListContainer, error) {
		list := &leanEventList{evs: evs}
		pp, bb := parser, buf
		if !reuse {
			pp, bb = new(fastjson.Parser), new(bytes.Buffer)
		}
		bb.Reset()
		if err := p.rawPage("/v1/events", p.api.Events.Key, sp, b, bb, func(body []byte) error {
			// The events' JSON are slices of the page (parse), which is
			// theirs alone: a copy of the body the size it is. Bodies come
			// gzipped, without a length, into a buffer grown by doubling
			// and reused.
			return list.parse(pp, bytes.Clone(body))
		}); err != nil {
			return nil, list, err
		}
		out := make([]interface{}, len(list.events))
		for i, ev := range list.events {
			out[i] = ev
		}
		return out, list, nil
	})
}

// btIter lists a payout's balance transactions with their sources.
func (p *Provider) btIter(params *stripego.BalanceTransactionListParams) *stripego.Iter {
	return stripego.GetIter(params, func(sp *stripego.Params, b *form.Values) ([]interface{}, stripego.ListContainer, error) {
		list := &leanBTList{}
		// Nothing of a page of balance transactions outlives its parse (they
		// are copied out), so its body's buffer is reused too.
		r := getBTReader()
		err := p.rawPage("/v1/balance_transactions", p.api.BalanceTransactions.Key, sp, b, &r.body, func(b []byte) error { return list.parse(&r.parser, b) })
		if err == nil {
			putBTReader(r) // an error's LastResponse keeps the body
		}
		out := make([]interface{}, len(list.Data))
		for i, v := range list.Data {
			out[i] = v
		}
		return out, list, err
	})
}

// rawPage GETs one list page: the request is stripe-go's (NewRequest sets
// the key, the version and Stripe-Account from the params), an error status
// becomes stripe-go's *stripego.Error (ResponseToError), and the body, read
// once, goes to parse. stripe-go's own Call runs encoding/json over every
// body before the value's UnmarshalJSON sees it (a validating scan, then a
// skip of each value): two full passes over a page the lean decoder then
// parses a third time, two thirds of the job's CPU on a rerun (issue 16).
// Its DoStreaming, which hands over the body, dereferences a nil response
// when the transport fails (a canceled context), so the client is called
// here; the transport below it paces and retries.
func (p *Provider) rawPage(path, key string, sp *stripego.Params, q *form.Values, buf *bytes.Buffer, parse func([]byte) error) error {
	if q != nil && !q.Empty() {
		path += "?" + q.Encode()
	}
	req, err := p.be.NewRequest(http.MethodGet, path, key, "application/x-www-form-urlencoded", sp)
	if err != nil {
		return err
	}
	res, err := p.be.HTTPClient.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	if n := res.ContentLength; n > 0 && n < 64<<20 {
		buf.Grow(int(n) + bytes.MinRead)
	}
	if _, err := buf.ReadFrom(res.Body); err != nil {
		return fmt.Errorf("read %s: %w", req.URL.Path, err)
	}
	if res.StatusCode >= 400 {
		return p.be.ResponseToError(res, buf.Bytes())
	}
	if err := parse(buf.Bytes()); err != nil {
		return fmt.Errorf("decode %s: %w", req.URL.Path, err)
	}
	return nil
}

// btReader is a body's buffer and a parser for pages of balance
// transactions, which are copied out whole (no value of the parser, and
// nothing of the body, outlives the page): a fresh parser grows its value
// cache from nothing for every page. A few are kept for the next pages;
// not in a sync.Pool, which the collector empties about as often as a page
// is read.
type btReader struct {
	body   bytes.Buffer
	parser fastjson.Parser
}

var btReaders = make(chan *btReader, 2)

func getBTReader() *btReader {
	select {
	case r := <-btReaders:
		r.body.Reset()
		return r
	default:
		return new(btReader)
	}
}

func putBTReader(r *btReader) {
	select {
	case btReaders <- r:
	default:
	}
}

// parse reads a page of balance transactions with fastjson, like the
// events: a field of the wrong type is an error, never a silent zero.
//
// Like an events page, each element is parsed on its own when listSpans
// places them (p's cache then holds one balance transaction and its
// charge, not a page of them).
func (l *leanBTList) parse(p *fastjson.Parser, b []byte) error {
	var scanned []*leanBT // nil: left to fastjson
	spans, env, ok := listSpansWith(b, func(b []byte, i int) (int, bool) {
		bt, end, ok := scanBTAt(b, i)
		scanned = append(scanned, bt)
		return end, ok
	})
	if !ok {
		arr, err := listData(p, b, &l.HasMore)
		if err != nil {
			return err
		}
		l.Data = make([]*leanBT, len(arr))
		for i, o := range arr {
			if l.Data[i], err = parseBT(o); err != nil {
				return err
			}
		}
		return nil
	}
	if _, err := listData(p, env, &l.HasMore); err != nil {
		return err
	}
	l.Data = make([]*leanBT, len(spans))
	for i, sp := range spans {
		if scanned[i] != nil {
			l.Data[i] = scanned[i]
			continue
		}
		o, err := p.ParseBytes(b[sp[0]:sp[1]])
		if err != nil {
			return fmt.Errorf("data[%d]: %w", i, err)
		}
		if l.Data[i], err = parseBT(o); err != nil {
			return err
		}
	}
	return nil
}

// parseBT reads one balance transaction with its source.
func parseBT(o *fastjson.Value) (*leanBT, error) {
	bt := &leanBT{}
	var errs []error
	s := func(k string) string { x, err := str(o, k, false); errs = append(errs, err); return x }
	n := func(k string) int64 { x, err := num(o, k, false); errs = append(errs, err); return x }
	bt.ID, bt.Type, bt.Status, bt.AvailableOn, bt.Created = s("id"), s("type"), s("status"), n("available_on"), n("created")
	if src := o.Get("source"); src != nil && src.Type() == fastjson.TypeObject {
		bt.Source.Object = s2(src, "object", &errs)
		if bt.Source.Object == "charge" {
			errs = append(errs, fill(src, &bt.Source.leanCharge))
		} else {
			bt.Source.ID = s2(src, "id", &errs)
		}
	} else if src != nil && src.Type() == fastjson.TypeString {
		bt.Source.ID = string(src.GetStringBytes())
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("balance transaction %s: %w", bt.ID, err)
	}
	return bt, nil
}

func s2(v *fastjson.Value, key string, errs *[]error) string {
	x, err := str(v, key, false)
	*errs = append(*errs, err)
	return x
}
