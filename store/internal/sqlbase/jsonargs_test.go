package sqlbase

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/reconciler/reconciler/models"
	"github.com/reconciler/reconciler/store"
)

// randText is a string with what JSON must escape: quotes, backslashes,
// control characters, invalid UTF-8, U+2028, and (escaped by encoding/json
// only) <, > and &.
func randText(r *rand.Rand) string {
	parts := []string{"pi_3", `"`, `\`, "\n", "\t", "\x01", "\x1f", "\xff", "é", "£", "\u2028", "<", ">", "&", " ", "captured", "\u00e9t\u00e9"}
	var sb strings.Builder
	for range r.IntN(6) {
		sb.WriteString(parts[r.IntN(len(parts))])
	}
	return sb.String()
}

func randItem(r *rand.Rand) store.Item {
	it := store.Item{ProviderID: randText(r), Kind: randText(r), Action: randText(r)}
	if r.IntN(2) == 0 {
		s := randText(r)
		it.LocalState = &s
	}
	if r.IntN(2) == 0 {
		s := randText(r)
		it.ProviderState = &s
	}
	if r.IntN(5) > 0 {
		it.Detail = map[string]any{}
		for range r.IntN(7) {
			var v any
			switch r.IntN(9) {
			case 0:
				v = randText(r)
			case 1:
				v = r.Int64() - r.Int64()
			case 2:
				v = r.IntN(1000)
			case 3:
				v = r.IntN(2) == 0
			case 4:
				v = []string{randText(r), randText(r)}
			case 5:
				v = []string(nil)
			case 6:
				v = 1.5 // left to encoding/json
			case 7:
				v = time.Unix(r.Int64N(2e9), 0).UTC()
			case 8:
				v = map[string]any{"nested": randText(r)}
			}
			it.Detail[randText(r)] = v
		}
	}
	return it
}

// The batch arguments written by hand are the JSON value json.Marshal
// writes (the same bytes unless a string holds <, > or &, which only
// encoding/json escapes), for any ids and items.
func TestJSONArgsAgreeWithEncodingJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	same := func(t *testing.T, v any) {
		t.Helper()
		got, err := JSON(v)
		if err != nil {
			t.Fatal(err)
		}
		want, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		var g, w any
		if err := json.Unmarshal([]byte(got), &g); err != nil {
			t.Fatalf("invalid JSON %q: %v", got, err)
		}
		if err := json.Unmarshal(want, &w); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(g, w) {
			t.Fatalf("got %s\nwant %s", got, want)
		}
		if !strings.ContainsAny(string(want), "<>&") && !bytes.Contains(want, []byte(`\u003c`)) && !bytes.Contains(want, []byte(`\u003e`)) && !bytes.Contains(want, []byte(`\u0026`)) && got != string(want) {
			t.Fatalf("bytes differ:\ngot  %s\nwant %s", got, want)
		}
	}
	for range 2000 {
		ids := make([]string, r.IntN(5))
		for i := range ids {
			ids[i] = randText(r)
		}
		same(t, ids)
		items := make([]store.Item, r.IntN(4))
		for i := range items {
			items[i] = randItem(r)
		}
		same(t, items)
	}
	// The new payments and the steps, at every precision of time and in
	// any zone, their optional fields set or not.
	when := func() time.Time {
		t := time.Unix(r.Int64N(4e9), r.Int64N(1e9)*int64(r.IntN(2)))
		if r.IntN(2) == 0 {
			t = t.In(time.FixedZone("", 3600*(r.IntN(25)-12)))
		}
		return t
	}
	for range 2000 {
		pays := make([]store.NewPayment, r.IntN(4))
		for i := range pays {
			p := store.NewPayment{ProviderID: randText(r), State: models.State(randText(r)), At: when(), Amount: r.Int64N(1e9) - 5e8,
				Currency: randText(r), AmountRefunded: r.Int64N(1e6), PayoutID: randText(r)}
			if r.IntN(2) == 0 {
				at, n := when(), r.Int64N(1e6)
				p.SettledAt, p.AmountCaptured = &at, &n
			}
			pays[i] = p
		}
		same(t, pays)
		steps := make([]stepRow, r.IntN(4))
		for i := range steps {
			s := stepRow{ProviderID: randText(r), To: randText(r), Preds: randText(r), At: when(), Refund: r.Int64N(1e6)}
			if r.IntN(2) == 0 {
				at := when()
				s.SettleAt, s.PayoutID = &at, randText(r)
			}
			steps[i] = s
		}
		got := stepsJSON(steps)
		want, err := json.Marshal(steps)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.ContainsAny(string(want), "<>&") && !bytes.Contains(want, []byte(`\u003c`)) && !bytes.Contains(want, []byte(`\u003e`)) && !bytes.Contains(want, []byte(`\u0026`)) && string(got) != string(want) {
			t.Fatalf("steps differ:\ngot  %s\nwant %s", got, want)
		}
		var g, w any
		if json.Unmarshal(got, &g) != nil || json.Unmarshal(want, &w) != nil || !reflect.DeepEqual(g, w) {
			t.Fatalf("steps differ:\ngot  %s\nwant %s", got, want)
		}
	}
	same(t, []store.NewPayment(nil))
	same(t, []store.NewPayment{})
	if got := stepsJSON(nil); string(got) != "null" {
		t.Fatalf("nil steps: %s", got)
	}
	same(t, []string(nil))
	same(t, []store.Item(nil))
	same(t, []string{})
	same(t, []store.Item{})
}
