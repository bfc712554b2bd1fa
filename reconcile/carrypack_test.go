package reconcile

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/reconciler/reconciler/store"
)

// fill sets every field reachable from v to a random value that is not
// the zero value (pointers, slices and maps included), so that a field
// pack forgets cannot round-trip.
func fill(t *testing.T, r *rand.Rand, v reflect.Value, path string) {
	t.Helper()
	if v.Type() == reflect.TypeFor[time.Time]() {
		v.Set(reflect.ValueOf(time.Unix(r.Int64N(4e9), r.Int64N(1e9)).UTC()))
		return
	}
	if v.Type() == reflect.TypeFor[json.RawMessage]() {
		v.SetBytes(fmt.Appendf(nil, `{"n":%d}`, r.Int()))
		return
	}
	switch v.Kind() {
	case reflect.Struct:
		for i := range v.NumField() {
			f := v.Type().Field(i)
			if !v.Field(i).CanSet() {
				// unexported fields of carried are set through
				// reflect.NewAt below.
				fv := reflect.NewAt(f.Type, v.Field(i).Addr().UnsafePointer()).Elem()
				fill(t, r, fv, path+"."+f.Name)
				continue
			}
			fill(t, r, v.Field(i), path+"."+f.Name)
		}
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(t, r, v.Elem(), path)
	case reflect.Slice:
		n := 1 + r.IntN(3)
		v.Set(reflect.MakeSlice(v.Type(), n, n))
		for i := range n {
			fill(t, r, v.Index(i), fmt.Sprintf("%s[%d]", path, i))
		}
	case reflect.String:
		v.SetString(fmt.Sprintf("s%d", r.IntN(1e6)))
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int64, reflect.Int32:
		v.SetInt(r.Int64N(1<<40) - 1<<39 | 1)
	default:
		t.Fatalf("%s: fill does not know %s; teach it and pack", path, v.Kind())
	}
}

func TestCarryPackRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	tab := newStrtab()
	for i := range 2000 {
		var c carried
		fill(t, r, reflect.ValueOf(&c).Elem(), "carried")
		id := "pi_x"
		if i%2 == 0 {
			for j := range c.facts {
				c.facts[j].ProviderID = id // the common case: written once
			}
		}
		if i%3 == 0 {
			c.before.At, c.before.SettledAt = nil, &time.Time{}
			c.facts[0].RefundSince, c.facts[0].Payload = time.Time{}, nil
		}
		if i%4 == 0 {
			c.applied[0].EventID = c.facts[len(c.facts)-1].EventID // written as the fact's number
		}
		// With the string table (it fills up at strtabMax and then writes
		// strings whole) and without.
		tb := tab
		if i%5 == 0 {
			tb = nil
		}
		b := c.pack(id, nil, tb)
		got, err := unpackCarried(id, b, tb)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(*got, c) {
			t.Fatalf("round trip %d:\n got  %+v\n want %+v", i, *got, c)
		}
		// And as the carry table keeps it when it is spilled: valid JSON
		// (a jsonb column's), read back by the same string table.
		s := spillJSON(b)
		if !json.Valid(s) {
			t.Fatalf("round trip %d: spilled as invalid JSON %.60s", i, s)
		}
		if got, err = unspill(store.Carry{ProviderID: id, State: s}, tb); err != nil || !reflect.DeepEqual(*got, c) {
			t.Fatalf("round trip %d through the carry table: %v\n got  %+v\n want %+v", i, err, got, c)
		}
		if len(tab.strs) < strtabMax && i > 1500 {
			t.Fatalf("the string table never filled: %d strings", len(tab.strs))
		}
		// Every truncation is an error, never a panic or a silent value.
		for n := range len(b) {
			if _, err := unpackCarried(id, b[:n], tb); err == nil {
				t.Fatalf("round trip %d: %d of %d bytes unpacked without an error", i, n, len(b))
			}
		}
	}
}

func TestCarryMemSpillsOldestFirst(t *testing.T) {
	b := func(n int) []byte { return make([]byte, n) }
	m := newCarryMem(3 * entrySize("a", b(100)))
	m.commit(carryChange{put: map[string][]byte{"a": b(100), "b": b(100)}})
	m.commit(carryChange{put: map[string][]byte{"c": b(100)}})
	m.commit(carryChange{put: map[string][]byte{"a": b(100)}}) // a is now the newest
	if got := m.plan(map[string][]byte{"d": b(100)}); !reflect.DeepEqual(got, []string{"b"}) {
		t.Fatalf("evict = %v, want [b], the oldest", got)
	}
	m.commit(carryChange{put: map[string][]byte{"d": b(100)}, evict: []string{"b"}})
	if _, ok := m.get("b"); ok {
		t.Fatal("b still in memory after it was spilled")
	}
	m.commit(carryChange{put: map[string][]byte{"c": nil}})
	if _, ok := m.get("c"); ok || m.size != 2*entrySize("a", b(100)) {
		t.Fatalf("forgotten c: in memory %v, size %d", ok, m.size)
	}
	// A batch larger than the budget spills part of itself.
	big := map[string][]byte{}
	for i := range 10 {
		big[fmt.Sprint("z", i)] = b(100)
	}
	ev := m.plan(big)
	if len(ev) < 8 {
		t.Fatalf("evict %v: a batch of 10 in a budget of 3 spills at least 8", ev)
	}
	// No memory at all: everything spills.
	none := newCarryMem(-1)
	if ev := none.plan(map[string][]byte{"a": b(1)}); !reflect.DeepEqual(ev, []string{"a"}) {
		t.Fatalf("budget -1: evict %v", ev)
	}
}

// TestUnspillRefusesWhatItDidNotSpill: a carry row that is not a packed
// state (the JSON object the table held before, cut or bad base64) is an
// error naming the payment, never a zero value.
func TestUnspillRefusesWhatItDidNotSpill(t *testing.T) {
	for _, s := range []string{`{"before":{}}`, `"`, `""x`, `"!!notbase64"`, `"AAAA"`} {
		_, err := unspill(store.Carry{ProviderID: "pi_1", State: json.RawMessage(s)}, newStrtab())
		if err == nil || !strings.Contains(err.Error(), "pi_1") {
			t.Errorf("%s: %v", s, err)
		}
	}
}

// TestIDHashIsFNV1a: IDHash is hash/fnv's 64-bit FNV-1a of the id's bytes.
func TestIDHashIsFNV1a(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	ids := []string{"", "pi_3NabcDEF", "évé\x00\xff"}
	for range 1000 {
		b := make([]byte, r.IntN(40))
		for i := range b {
			b[i] = byte(r.IntN(256))
		}
		ids = append(ids, string(b))
	}
	for _, id := range ids {
		h := fnv.New64a()
		_, _ = h.Write([]byte(id))
		if got, want := IDHash(id), h.Sum64(); got != want {
			t.Fatalf("IDHash(%q) = %x, FNV-1a %x", id, got, want)
		}
	}
}
