package report

import (
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/valyala/fastjson"

	"github.com/reconciler/reconciler/internal/jsonw"
)

// The JSON report's items are appended by hand, byte for byte what
// encoding/json's Encoder (HTML escaping on, as json.Marshal) makes of an
// Item: the report of a month's 20,000 to 30,000 items was written after
// the run, with nothing else to do, and two thirds of its CPU were the
// detail decoded into a map[string]any and encoded again by reflection
// (issue 16). FuzzAppendItem holds the two to the same bytes.

// field is one key of a detail object and its value.
type field struct {
	key string
	v   *fastjson.Value
}

// fieldsOf is o's keys and values sorted by key (byte order, as
// encoding/json sorts a map's keys), each key once with its last value (as
// a map keeps it).
func fieldsOf(o *fastjson.Object, into []field) []field {
	fs := into[:0]
	o.Visit(func(k []byte, v *fastjson.Value) { fs = append(fs, field{string(k), v}) })
	slices.SortStableFunc(fs, func(a, b field) int { return strings.Compare(a.key, b.key) })
	out := fs[:0]
	for i, f := range fs {
		if i+1 < len(fs) && fs[i+1].key == f.key {
			continue // a later one of the same key wins
		}
		out = append(out, f)
	}
	return out
}

// lift sets out's fields from the detail's well-known keys (fs, sorted),
// each only when of the type the field reads (a string, a number, a
// boolean; a key of another type is dropped, as type assertions on
// encoding/json's decoding dropped it), and returns the other keys, in
// order: the item's detail, fs filtered in place.
func lift(out *Item, fs []field) []field {
	rest := fs[:0]
	for _, f := range fs {
		v := f.v
		switch f.key {
		case "explanation":
			if v.Type() == fastjson.TypeString {
				out.Explanation = string(v.GetStringBytes())
			}
		case "currency":
			if v.Type() == fastjson.TypeString {
				out.Currency = string(v.GetStringBytes())
			}
		case "event_id":
			if v.Type() == fastjson.TypeString {
				out.EventID = string(v.GetStringBytes())
			}
		case "amount":
			if n, ok := number(v); ok {
				out.Amount = int64(n)
			}
		case "amount_refunded":
			if n, ok := number(v); ok {
				out.AmountRefunded = int64(n)
			}
		case "provider_time":
			if v.Type() == fastjson.TypeString {
				if t, err := time.Parse(time.RFC3339Nano, string(v.GetStringBytes())); err == nil {
					t = t.UTC()
					out.ProviderTime = &t
				}
			}
		case "time_inferred":
			out.TimeInferred = v.Type() == fastjson.TypeTrue
		default:
			rest = append(rest, f)
		}
	}
	return rest
}

// number is a JSON number as encoding/json decodes it into an any.
func number(v *fastjson.Value) (float64, bool) {
	if v.Type() != fastjson.TypeNumber {
		return 0, false
	}
	f, err := strconv.ParseFloat(string(v.MarshalTo(nil)), 64)
	return f, err == nil
}

// appendItem appends it, with detail as its Detail, as encoding/json
// encodes an Item.
func appendItem(b []byte, it Item, detail []field) []byte {
	b = append(b, `{"provider_id":`...)
	b = jsonw.HTMLString(b, it.ProviderID)
	b = append(b, `,"kind":`...)
	b = jsonw.HTMLString(b, it.Kind)
	b = append(b, `,"action":`...)
	b = jsonw.HTMLString(b, it.Action)
	b = append(b, `,"local_state":`...)
	b = appendStringPtr(b, it.LocalState)
	b = append(b, `,"provider_state":`...)
	b = appendStringPtr(b, it.ProviderState)
	b = append(b, `,"amount":`...)
	b = strconv.AppendInt(b, it.Amount, 10)
	b = append(b, `,"currency":`...)
	b = jsonw.HTMLString(b, it.Currency)
	b = append(b, `,"amount_refunded":`...)
	b = strconv.AppendInt(b, it.AmountRefunded, 10)
	b = append(b, `,"provider_time":`...)
	if it.ProviderTime == nil {
		b = append(b, "null"...)
	} else {
		b = jsonw.Time(b, *it.ProviderTime)
	}
	b = append(b, `,"time_inferred":`...)
	b = strconv.AppendBool(b, it.TimeInferred)
	if it.EventID != "" {
		b = append(b, `,"event_id":`...)
		b = jsonw.HTMLString(b, it.EventID)
	}
	b = append(b, `,"explanation":`...)
	b = jsonw.HTMLString(b, it.Explanation)
	b = append(b, `,"dashboard_url":`...)
	b = jsonw.HTMLString(b, it.DashboardURL)
	b = append(b, `,"detail":`...)
	b = appendFields(b, detail)
	b = append(b, `,"dry_run":`...)
	b = strconv.AppendBool(b, it.DryRun)
	b = append(b, `,"fingerprint":`...)
	b = jsonw.HTMLString(b, it.Fingerprint)
	if it.Status != "" {
		b = append(b, `,"status":`...)
		b = jsonw.HTMLString(b, it.Status)
	}
	if a := it.Acknowledged; a != nil {
		b = append(b, `,"acknowledged":{"by":`...)
		b = jsonw.HTMLString(b, a.By)
		b = append(b, `,"note":`...)
		b = jsonw.HTMLString(b, a.Note)
		b = append(b, `,"at":`...)
		b = jsonw.Time(b, a.At)
		b = append(b, '}')
	}
	return append(b, '}')
}

// appendFields appends an object of fs, already sorted and each key once.
func appendFields(b []byte, fs []field) []byte {
	b = append(b, '{')
	for i, f := range fs {
		if i > 0 {
			b = append(b, ',')
		}
		b = jsonw.HTMLString(b, f.key)
		b = append(b, ':')
		b = appendValue(b, f.v)
	}
	return append(b, '}')
}

// appendValue appends v as encoding/json encodes what it decodes v into:
// objects with their keys sorted, numbers as float64.
func appendValue(b []byte, v *fastjson.Value) []byte {
	switch v.Type() {
	case fastjson.TypeObject:
		o, _ := v.Object()
		return appendFields(b, fieldsOf(o, nil))
	case fastjson.TypeArray:
		a, _ := v.Array()
		b = append(b, '[')
		for i, e := range a {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendValue(b, e)
		}
		return append(b, ']')
	case fastjson.TypeString:
		return jsonw.HTMLString(b, string(v.GetStringBytes()))
	case fastjson.TypeNumber:
		f, ok := number(v)
		if !ok {
			return append(b, "null"...)
		}
		return appendFloat(b, f)
	case fastjson.TypeTrue:
		return append(b, "true"...)
	case fastjson.TypeFalse:
		return append(b, "false"...)
	}
	return append(b, "null"...)
}

// appendFloat is encoding/json's float64 encoder (ES6 number formatting).
func appendFloat(b []byte, f float64) []byte {
	abs := math.Abs(f)
	format := byte('f')
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		// e-09 to e-9, as encoding/json writes it
		n := len(b)
		if n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b
}

func appendStringPtr(b []byte, s *string) []byte {
	if s == nil {
		return append(b, "null"...)
	}
	return jsonw.HTMLString(b, *s)
}
