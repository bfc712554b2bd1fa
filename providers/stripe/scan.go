package stripe

import (
	"strconv"
)

// The fast path of a page's decoding (issue 16). fastjson parsed each
// event whole into its value tree to read a dozen fields: on Stripe-sized
// events (a payment intent or charge of 3 kB) that parse was an eighth of a
// rerun's job CPU. scanEventAt reads the same fields in the pass that finds
// where the event ends in its page (listSpansWith), and scanBTAt a balance
// transaction's and its source's, accepting no more than fastjson accepts (its strings end
// where fastjson's end, its numbers take the bytes fastjson's take, its
// nesting stops at scanMaxDepth), and gives up on whatever it would read
// differently from fastjson: an escaped key or read value, a field of an
// unexpected type, an integer that is not plain digits or leaves int64's
// range, a NaN or an Inf, or an event version whose object the mapping
// reads more of (paymentOf). The caller then parses the event with
// fastjson, as before, so what is accepted, what is read and every error
// message stay fastjson's (TestScanEventAgreesWithFastjson,
// TestPageScannedAsFound, TestBTPageScannedAsFound, FuzzScanEvent,
// FuzzListSpansScanned).

// scanMaxDepth bounds the nesting scanEvent follows (fastjson's is 300).
const scanMaxDepth = 64

// fieldSpan is where a field's value lies in the page, and what it is.
type fieldSpan struct {
	start, end int
	// kind: 0 absent, '"' a string without escapes, '\\' one with, 'n'
	// null, 't'/'f' a boolean, '0' an integer in plain digits, '.' another
	// number, '{' an object, '[' an array.
	kind byte
}

// objectFields are the fields the lean forms read: of data.object (fill),
// of a balance transaction and of its source (parseBT); each is found at
// its first occurrence, as fastjson's Get finds it.
var objectFields = [...]string{"id", "amount", "currency", "status", "amount_captured", "amount_refunded", "captured",
	"refunded", "payment_intent", "created", "reason", "reconciliation_status", "arrival_date", "automatic", "object",
	"type", "available_on", "source"}

const (
	fID = iota
	fAmount
	fCurrency
	fStatus
	fAmountCaptured
	fAmountRefunded
	fCaptured
	fRefunded
	fPaymentIntent
	fCreated
	fReason
	fReconciliation
	fArrivalDate
	fAutomatic
	fObject
	fType        // a balance transaction's
	fAvailableOn // a balance transaction's
	fSource      // a balance transaction's
	numFields
)

// eventScan is what one element's scan found.
type eventScan struct {
	b                              []byte
	id, typ, created, version, obj fieldSpan
	fields                         [numFields]fieldSpan
	expandedID                     fieldSpan // payment_intent's id, when expanded
	seenData, seenObject           bool
	bt                             [numFields]fieldSpan // a balance transaction's fields (fields: its source's)
}

// scanEvent decodes the event b into ev, or reports false when fastjson
// must (see above); ev is then to be decoded again.
func scanEvent(b []byte, ev *leanEvent) bool {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return false
	}
	end, ok := scanEventAt(b, i, ev)
	return ok && skipSpace(b, end) == len(b)
}

// scanEventAt decodes the event object at b[i] (a brace) into ev and
// returns the index past it; false as scanEvent's.
func scanEventAt(b []byte, i int, ev *leanEvent) (int, bool) {
	s := eventScan{b: b}
	end, ok := s.object(i, 1, lvEvent)
	if !ok {
		return -1, false
	}
	if s.id.kind != '"' || s.typ.kind != '"' || s.created.kind != '0' || s.obj.kind != '{' {
		return -1, false
	}
	if s.version.kind != 0 && s.version.kind != 'n' && s.version.kind != '"' {
		return -1, false
	}
	created, ok := s.int(s.created)
	if !ok {
		return -1, false
	}
	version := ""
	if s.version.kind == '"' {
		version = s.str("api_version", s.version)
	}
	if _, known := versionDate(version); !known {
		return -1, false // paymentOf reads the object by fastjson
	}
	typ := s.str("type", s.typ)
	o := leanObject{present: true, kind: objectKind(typ)}
	if !s.fill(&o) {
		return -1, false
	}
	ev.ID, ev.Type, ev.Created, ev.APIVersion, ev.o = s.str("id", s.id), typ, created, version, o
	return end, true
}

// scanBTAt decodes the balance transaction at b[i] (a brace) as parseBT
// does and returns the index past it; false when parseBT must (as
// scanEventAt's).
func scanBTAt(b []byte, i int) (*leanBT, int, bool) {
	s := eventScan{b: b}
	end, ok := s.object(i, 1, lvBT)
	if !ok {
		return nil, -1, false
	}
	bt := &leanBT{}
	bt.ID, ok = s.strOf(s.bt[fID], "id")
	typ, ok2 := s.strOf(s.bt[fType], "type")
	status, ok3 := s.strOf(s.bt[fStatus], "status")
	availableOn, ok4 := s.numOf(s.bt[fAvailableOn])
	created, ok5 := s.numOf(s.bt[fCreated])
	if !(ok && ok2 && ok3 && ok4 && ok5) {
		return nil, -1, false
	}
	bt.Type, bt.Status, bt.AvailableOn, bt.Created = typ, status, availableOn, created
	switch src := s.bt[fSource]; src.kind {
	case '{':
		if bt.Source.Object, ok = s.strOf(s.fields[fObject], "object"); !ok {
			return nil, -1, false
		}
		if bt.Source.Object == "charge" {
			o := leanObject{kind: objCharge}
			if !s.fill(&o) {
				return nil, -1, false
			}
			bt.Source.leanCharge = o.ch
		} else if bt.Source.ID, ok = s.strOf(s.fields[fID], "id"); !ok {
			return nil, -1, false
		}
	case '"':
		bt.Source.ID = string(b[src.start+1 : src.end-1])
	case '\\':
		return nil, -1, false // fastjson unescapes it
	}
	return bt, end, true
}

// strOf reads a string field as str does (absent or null: ""); false
// when str would fail or unescape.
func (s *eventScan) strOf(sp fieldSpan, key string) (string, bool) {
	switch sp.kind {
	case 0, 'n':
		return "", true
	case '"':
		return s.str(key, sp), true
	}
	return "", false
}

// numOf reads an integer field as num does (absent or null: 0); false
// when num would fail.
func (s *eventScan) numOf(sp fieldSpan) (int64, bool) {
	switch sp.kind {
	case 0, 'n':
		return 0, true
	case '0':
		return s.int(sp)
	}
	return 0, false
}

// fill decodes the object's lean form for its kind, as fill does; false
// when a field is of another type than fill reads without an error.
func (s *eventScan) fill(o *leanObject) bool {
	ok := true
	str := func(f int) string {
		v, good := s.strOf(s.fields[f], objectFields[f])
		ok = ok && good
		return v
	}
	num := func(f int) int64 {
		v, good := s.numOf(s.fields[f])
		ok = ok && good
		return v
	}
	boolean := func(f int) bool {
		switch s.fields[f].kind {
		case 0, 'n', 'f':
			return false
		case 't':
			return true
		}
		ok = false
		return false
	}
	ref := func(f int) expandable {
		switch sp := s.fields[f]; sp.kind {
		case 0, 'n':
			return ""
		case '"':
			return expandable(s.b[sp.start+1 : sp.end-1])
		case '{':
			if s.expandedID.kind != '"' {
				ok = false // no id, or one fastjson must read
				return ""
			}
			return expandable(s.b[s.expandedID.start+1 : s.expandedID.end-1])
		}
		ok = false
		return ""
	}
	switch o.kind {
	case objPI:
		o.pi = leanPI{ID: str(fID), Amount: num(fAmount), Currency: str(fCurrency), Status: str(fStatus)}
	case objCharge:
		o.ch = leanCharge{ID: str(fID), Amount: num(fAmount), AmountCaptured: num(fAmountCaptured), AmountRefunded: num(fAmountRefunded),
			Captured: boolean(fCaptured), Refunded: boolean(fRefunded), Currency: str(fCurrency), PaymentIntent: ref(fPaymentIntent)}
	case objRefund:
		o.re = leanRefund{ID: str(fID), Amount: num(fAmount), Currency: str(fCurrency), Status: str(fStatus), Created: num(fCreated),
			PaymentIntent: ref(fPaymentIntent)}
	case objDispute:
		o.di = leanDispute{ID: str(fID), Status: str(fStatus), Amount: num(fAmount), Currency: str(fCurrency), Reason: str(fReason),
			PaymentIntent: ref(fPaymentIntent)}
	case objPayout:
		o.po = leanPayout{ID: str(fID), Reconciliation: str(fReconciliation), Status: str(fStatus), ArrivalDate: num(fArrivalDate)}
		o.po.Manual = (s.fields[fAutomatic].kind != 0 && !boolean(fAutomatic)) ||
			o.po.Reconciliation == "not_applicable"
	}
	return ok
}

// str is the string at sp (no escapes, by span's kind), the few-valued
// fields interned as str interns them.
func (s *eventScan) str(key string, sp fieldSpan) string {
	return stringOf(key, s.b[sp.start+1:sp.end-1])
}

// int is the integer at sp; false past int64's range or with a sign
// fastjson's Int64 reads differently (a lone "-").
func (s *eventScan) int(sp fieldSpan) (int64, bool) {
	n, err := strconv.ParseInt(string(s.b[sp.start:sp.end]), 10, 64)
	return n, err == nil
}

// What an object's keys mean to scanEvent, by where the object lies.
const (
	lvOther    = iota // nothing is read
	lvEvent           // the event: id, type, created, api_version, data
	lvData            // the event's data: object
	lvObject          // data.object, or a balance transaction's source: the fields of objectFields
	lvExpanded        // an expanded object: its id
	lvBT              // a balance transaction: the fields of objectFields (into bt)
)

// first is sp while nothing was recorded there, else nil.
func first(sp *fieldSpan) *fieldSpan {
	if sp.kind != 0 {
		return nil
	}
	return sp
}

// fieldOf is the index of key in objectFields, or -1.
func fieldOf(key []byte) int {
	switch string(key) {
	case "id":
		return fID
	case "amount":
		return fAmount
	case "currency":
		return fCurrency
	case "status":
		return fStatus
	case "amount_captured":
		return fAmountCaptured
	case "amount_refunded":
		return fAmountRefunded
	case "captured":
		return fCaptured
	case "refunded":
		return fRefunded
	case "payment_intent":
		return fPaymentIntent
	case "created":
		return fCreated
	case "reason":
		return fReason
	case "reconciliation_status":
		return fReconciliation
	case "arrival_date":
		return fArrivalDate
	case "automatic":
		return fAutomatic
	case "object":
		return fObject
	case "type":
		return fType
	case "available_on":
		return fAvailableOn
	case "source":
		return fSource
	}
	return -1
}

// object scans the object at b[i] (a brace), its keys read as level says,
// and returns the index past it.
func (s *eventScan) object(i, depth, level int) (int, bool) {
	b := s.b
	if depth > scanMaxDepth {
		return -1, false
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return i + 1, true
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return -1, false
		}
		end, plain := scanString(b, i)
		if end < 0 || !plain {
			return -1, false // an escaped key: fastjson unescapes it
		}
		key := b[i+1 : end-1]
		i = skipSpace(b, end)
		if i >= len(b) || b[i] != ':' {
			return -1, false
		}
		i = skipSpace(b, i+1)
		if i >= len(b) {
			return -1, false
		}
		var sp *fieldSpan
		next := lvOther
		switch level {
		case lvEvent:
			switch string(key) {
			case "id":
				sp = first(&s.id)
			case "type":
				sp = first(&s.typ)
			case "created":
				sp = first(&s.created)
			case "api_version":
				sp = first(&s.version)
			case "data":
				if !s.seenData {
					s.seenData = true
					if b[i] != '{' {
						return -1, false // no data.object: fastjson's error
					}
					next = lvData
				}
			}
		case lvData:
			if string(key) == "object" && !s.seenObject {
				s.seenObject = true
				if b[i] != '{' {
					return -1, false // fastjson's error
				}
				sp, next = &s.obj, lvObject
			}
		case lvObject:
			if f := fieldOf(key); f >= 0 {
				sp = first(&s.fields[f])
				if f == fPaymentIntent && sp != nil {
					next = lvExpanded
				}
			}
		case lvExpanded:
			if string(key) == "id" {
				sp = first(&s.expandedID)
			}
		case lvBT:
			if f := fieldOf(key); f >= 0 {
				sp = first(&s.bt[f])
				if f == fSource && sp != nil {
					next = lvObject // its fields are read as data.object's
				}
			}
		}
		var ok bool
		if i, ok = s.value(i, depth, next, sp); !ok {
			return -1, false
		}
		i = skipSpace(b, i)
		if i >= len(b) {
			return -1, false
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case '}':
			return i + 1, true
		default:
			return -1, false
		}
	}
}

// value scans the value at b[i], an object's keys read as level says, and
// when sp is not nil records it.
func (s *eventScan) value(i, depth, level int, sp *fieldSpan) (int, bool) {
	b := s.b
	depth++
	if depth > scanMaxDepth || i >= len(b) {
		return -1, false
	}
	var end int
	kind := b[i]
	switch c := b[i]; {
	case c == '"':
		var plain bool
		if end, plain = scanString(b, i); end < 0 {
			return -1, false
		}
		if !plain {
			kind = '\\' // read by fastjson only
		}
	case c == '{':
		var ok bool
		if end, ok = s.object(i, depth, level); !ok {
			return -1, false
		}
	case c == '[':
		end = skipSpace(b, i+1)
		if end < len(b) && b[end] == ']' {
			end++
			break
		}
		for {
			var ok bool
			if end, ok = s.value(end, depth, lvOther, nil); !ok {
				return -1, false
			}
			end = skipSpace(b, end)
			if end >= len(b) {
				return -1, false
			}
			if b[end] == ']' {
				end++
				break
			}
			if b[end] != ',' {
				return -1, false
			}
			end = skipSpace(b, end+1)
		}
	case c == 't':
		end = literal(b, i, "true")
	case c == 'f':
		end = literal(b, i, "false")
	case c == 'n':
		end = literal(b, i, "null")
	case c == '-' || c >= '0' && c <= '9':
		var integer bool
		end, integer = scanNumber(b, i)
		kind = '0'
		if !integer {
			kind = '.' // read by fastjson only
		}
	default:
		return -1, false
	}
	if end < 0 {
		return -1, false
	}
	if sp != nil {
		*sp = fieldSpan{start: i, end: end, kind: kind}
	}
	return end, true
}

// literal returns the index past word at b[i], or -1.
func literal(b []byte, i int, word string) int {
	if len(b)-i < len(word) || string(b[i:i+len(word)]) != word {
		return -1
	}
	return i + len(word)
}

// scanString returns the index past the string at b[i] (a quote), or -1,
// and whether it holds no backslash. It ends the string where fastjson
// does (at the first quote not escaped by a backslash) and, like fastjson,
// leaves its escapes and bytes unchecked: a value scanEvent reads is read
// only when it holds no backslash (plain).
func scanString(b []byte, i int) (int, bool) {
	plain := true
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '"':
			return j + 1, plain
		case '\\':
			plain = false
			j++
		}
	}
	return -1, false
}

// scanNumber returns the index past the number at b[i] (a digit or a
// minus), taking the bytes fastjson takes for one, and whether they are an
// integer as strconv reads it: digits after an optional minus.
func scanNumber(b []byte, i int) (int, bool) {
	j := i
	for j < len(b) && (b[j] >= '0' && b[j] <= '9' || b[j] == '.' || b[j] == '-' || b[j] == 'e' || b[j] == 'E' || b[j] == '+') {
		j++
	}
	if j == i+1 && b[i] == '-' {
		return -1, false // fastjson's error (or its -Inf, -NaN)
	}
	k := i
	if b[k] == '-' {
		k++
	}
	integer := k < j
	for ; k < j; k++ {
		if b[k] < '0' || b[k] > '9' {
			integer = false
		}
	}
	return j, integer
}
