package sqlbase

import (
	"encoding/json"
	"slices"
	"strconv"
	"time"

	"github.com/reconciler/reconciler/internal/jsonw"
	"github.com/reconciler/reconciler/store"
)

// stringsJSON is json.Marshal(ids): an array of strings, null for nil.
func stringsJSON(ids []string) []byte {
	n := 2
	for _, id := range ids {
		n += len(id) + 3
	}
	return appendArray(make([]byte, 0, n+n/8), ids, jsonw.String)
}

// itemsJSON is json.Marshal(rows) for store.Item's tags, the same JSON
// value (jsonw does not escape <, > and & as encoding/json does; both
// are valid JSON of the same strings). A detail value of a type it does
// not write itself is left to encoding/json.
func itemsJSON(rows []store.Item) ([]byte, error) {
	// Sized without walking each detail twice: its explanation is most of
	// an item, the rest a few short fields.
	n := 2
	for _, r := range rows {
		expl, _ := r.Detail["explanation"].(string)
		n += len(r.ProviderID) + len(expl) + 320
	}
	var keys []string
	var err error
	b := appendArray(make([]byte, 0, n), rows, func(b []byte, r store.Item) []byte {
		b = append(b, `{"provider_id":`...)
		b = jsonw.String(b, r.ProviderID)
		b = append(b, `,"kind":`...)
		b = jsonw.String(b, r.Kind)
		b = append(b, `,"action":`...)
		b = jsonw.String(b, r.Action)
		b = append(b, `,"local_state":`...)
		b = optString(b, r.LocalState)
		b = append(b, `,"provider_state":`...)
		b = optString(b, r.ProviderState)
		b = append(b, `,"detail":`...)
		if err == nil {
			b, keys, err = appendDetail(b, r.Detail, keys)
		}
		return append(b, '}')
	})
	if err != nil {
		return nil, err
	}
	return b, nil
}

func optString(b []byte, s *string) []byte {
	if s == nil {
		return append(b, "null"...)
	}
	return jsonw.String(b, *s)
}

// appendDetail appends d as encoding/json writes a map: keys sorted. keys
// is scratch space, returned for the next call.
func appendDetail(b []byte, d map[string]any, keys []string) ([]byte, []string, error) {
	if d == nil {
		return append(b, "null"...), keys, nil
	}
	keys = keys[:0]
	for k := range d {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	b = append(b, '{')
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = jsonw.String(b, k)
		b = append(b, ':')
		switch v := d[k].(type) {
		case string:
			b = jsonw.String(b, v)
		case int64:
			b = strconv.AppendInt(b, v, 10)
		case int:
			b = strconv.AppendInt(b, int64(v), 10)
		case bool:
			b = strconv.AppendBool(b, v)
		case []string:
			b = append(b, stringsJSON(v)...)
		default:
			j, err := json.Marshal(v)
			if err != nil {
				return nil, keys, err
			}
			b = append(b, j...)
		}
	}
	return append(b, '}'), keys, nil
}

// newPaymentsJSON is json.Marshal(rows) for store.NewPayment's tags: the
// insert of a batch's missing payments, 18,000 of an empty schema's month.
func newPaymentsJSON(rows []store.NewPayment) []byte {
	return appendArray(make([]byte, 0, len(rows)*256+2), rows, func(b []byte, r store.NewPayment) []byte {
		b = append(b, `{"provider_id":`...)
		b = jsonw.String(b, r.ProviderID)
		b = append(b, `,"state":`...)
		b = jsonw.String(b, string(r.State))
		b = append(b, `,"at":`...)
		b = jsonw.Time(b, r.At)
		b = append(b, `,"amount":`...)
		b = strconv.AppendInt(b, r.Amount, 10)
		b = append(b, `,"currency":`...)
		b = jsonw.String(b, r.Currency)
		b = append(b, `,"amount_refunded":`...)
		b = strconv.AppendInt(b, r.AmountRefunded, 10)
		b = append(b, `,"settled_at":`...)
		if r.SettledAt == nil {
			b = append(b, "null"...)
		} else {
			b = jsonw.Time(b, *r.SettledAt)
		}
		b = append(b, `,"payout_id":`...)
		b = jsonw.String(b, r.PayoutID)
		b = append(b, `,"amount_captured":`...)
		if r.AmountCaptured == nil {
			b = append(b, "null"...)
		} else {
			b = strconv.AppendInt(b, *r.AmountCaptured, 10)
		}
		return append(b, '}')
	})
}

// stepRow is a guarded step as StepsJSON sends it.
type stepRow struct {
	ProviderID string     `json:"provider_id"`
	To         string     `json:"to_state"`
	Preds      string     `json:"preds"`
	At         time.Time  `json:"at"`
	Refund     int64      `json:"refund"`
	SettleAt   *time.Time `json:"settle_at,omitempty"`
	PayoutID   string     `json:"payout_id,omitempty"`
}

// stepsJSON is json.Marshal(rows) for stepRow's tags.
func stepsJSON(rows []stepRow) []byte {
	return appendArray(make([]byte, 0, len(rows)*192+2), rows, func(b []byte, r stepRow) []byte {
		b = append(b, `{"provider_id":`...)
		b = jsonw.String(b, r.ProviderID)
		b = append(b, `,"to_state":`...)
		b = jsonw.String(b, r.To)
		b = append(b, `,"preds":`...)
		b = jsonw.String(b, r.Preds)
		b = append(b, `,"at":`...)
		b = jsonw.Time(b, r.At)
		b = append(b, `,"refund":`...)
		b = strconv.AppendInt(b, r.Refund, 10)
		if r.SettleAt != nil {
			b = append(b, `,"settle_at":`...)
			b = jsonw.Time(b, *r.SettleAt)
		}
		if r.PayoutID != "" {
			b = append(b, `,"payout_id":`...)
			b = jsonw.String(b, r.PayoutID)
		}
		return append(b, '}')
	})
}

// appendArray appends rows as encoding/json writes a slice (null for a
// nil one), each row written by one.
func appendArray[T any](b []byte, rows []T, one func([]byte, T) []byte) []byte {
	if rows == nil {
		return append(b, "null"...)
	}
	b = append(b, '[')
	for i, r := range rows {
		if i > 0 {
			b = append(b, ',')
		}
		b = one(b, r)
	}
	return append(b, ']')
}
