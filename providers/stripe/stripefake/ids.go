package stripefake

import "github.com/reconciler/reconciler/internal/fakekit"

// Stripe-like identifiers. An id is prefix + 24 base62 characters: the first
// eight encode the object's creation counter (scrambled with a per-account,
// per-kind key so that ids do not look sequential) and the last sixteen are a
// keyed hash of the counter. Decoding therefore needs no id→index map: the
// counter is recovered from the first eight characters and the whole id is
// regenerated and compared.

type kind uint8

const (
	kPI kind = iota
	kCharge
	kRefund
	kDispute
	kPayout
	kTxn
	kEvent
	kCustomer
	kindCount
)

var kindPrefix = [kindCount]string{"pi_", "ch_", "re_", "dp_", "po_", "txn_", "evt_", "cus_"}

const base62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

var base62Index = func() (t [256]int8) {
	for i := range t {
		t[i] = -1
	}
	for i := 0; i < len(base62); i++ {
		t[base62[i]] = int8(i)
	}
	return t
}()

func fnv64(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}

// idCodec generates and decodes the ids of one account.
type idCodec struct {
	key    uint64
	scramb [kindCount][8]uint8
}

func newIDCodec(seed int64, account string) idCodec {
	c := idCodec{key: fakekit.SplitMix64(uint64(seed) ^ fnv64("acct:"+account))}
	for k := kind(0); k < kindCount; k++ {
		x := fakekit.SplitMix64(c.key ^ (uint64(k)+1)*0xA24BAED4963EE407)
		for i := 0; i < 8; i++ {
			c.scramb[k][i] = uint8((x >> (uint(i) * 8)) % 62)
		}
	}
	return c
}

const idLen = 24

func (c *idCodec) appendID(b []byte, k kind, n int) []byte {
	b = append(b, kindPrefix[k]...)
	var d [8]uint8
	v := uint64(n)
	for i := 7; i >= 0; i-- {
		d[i] = uint8(v % 62)
		v /= 62
	}
	for i := 0; i < 8; i++ {
		b = append(b, base62[(d[i]+c.scramb[k][i])%62])
	}
	h := fakekit.SplitMix64(c.key ^ uint64(k)<<56 ^ uint64(n))
	for j := 0; j < 2; j++ {
		x := h
		for i := 0; i < 8; i++ {
			b = append(b, base62[x%62])
			x /= 62
		}
		h = fakekit.SplitMix64(h)
	}
	return b
}

func (c *idCodec) id(k kind, n int) string {
	var buf [32]byte
	return string(c.appendID(buf[:0], k, n))
}

// decode returns the counter encoded in id for kind k, or -1 when id is not
// an id of this account and kind below limit.
func (c *idCodec) decode(k kind, id string, limit int) int {
	p := kindPrefix[k]
	if len(id) != len(p)+idLen || id[:len(p)] != p {
		return -1
	}
	s := id[len(p):]
	n := 0
	for i := 0; i < 8; i++ {
		v := base62Index[s[i]]
		if v < 0 {
			return -1
		}
		d := (int(v) - int(c.scramb[k][i]) + 62) % 62
		n = n*62 + d
	}
	if n >= limit {
		return -1
	}
	var buf [32]byte
	if string(c.appendID(buf[:0], k, n)) != id {
		return -1
	}
	return n
}
