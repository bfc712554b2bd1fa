package gcfake

import "github.com/reconciler/reconciler/internal/fakekit"

// GoCardless-like identifiers: a two-letter prefix and 12 upper-case
// alphanumerics. The first seven characters are the object's creation
// counter plus a per-seed, per-kind offset in base 36, so ids of one kind
// sort (as strings) in creation order and "id desc" list order equals
// "counter desc"; the last five are a keyed hash of the counter. Decoding
// needs no id → index map: the counter is recovered from the first seven
// characters and the whole id is regenerated and compared.

type kind uint8

const (
	kPayment kind = iota
	kEvent
	kRefund
	kPayout
	kMandate
	kCreditor
	kRequest
	kItemCursor // a payout item's position, as the cursor of /payout_items
	kindCount
)

var kindPrefix = [kindCount]string{"PM", "EV", "RF", "PO", "MD", "CR", "RQ", "PI"}

const base36 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"

const (
	idLen     = 12
	counterLn = 7
	hashLn    = idLen - counterLn
	// Offsets stay below 36^6, so more
	// than 7·10^10 objects of a kind fit in the seven counter characters.
	offsetRange = 2176782336
)

// idCodec generates and decodes the ids of one server.
type idCodec struct {
	key    uint64
	offset [kindCount]uint64
}

func newIDCodec(seed int64) idCodec {
	c := idCodec{key: fakekit.SplitMix64(uint64(seed) ^ 0x6C0C_A4D1_E55F_A4E0)}
	for k := kind(0); k < kindCount; k++ {
		c.offset[k] = fakekit.SplitMix64(c.key^(uint64(k)+1)*0xA24BAED4963EE407) % offsetRange
	}
	return c
}

func (c *idCodec) appendID(b []byte, k kind, n int) []byte {
	b = append(b, kindPrefix[k]...)
	v := uint64(n) + c.offset[k]
	var d [counterLn]byte
	for i := counterLn - 1; i >= 0; i-- {
		d[i] = base36[v%36]
		v /= 36
	}
	b = append(b, d[:]...)
	h := fakekit.SplitMix64(c.key ^ uint64(k)<<56 ^ uint64(n))
	for i := 0; i < hashLn; i++ {
		b = append(b, base36[h%36])
		h /= 36
	}
	return b
}

func (c *idCodec) id(k kind, n int) string {
	var buf [16]byte
	return string(c.appendID(buf[:0], k, n))
}

// decode returns the counter encoded in id for kind k, or -1 when id is not
// an id of this server and kind below limit.
func (c *idCodec) decode(k kind, id string, limit int) int {
	p := kindPrefix[k]
	if len(id) != len(p)+idLen || id[:len(p)] != p {
		return -1
	}
	var v uint64
	for i := len(p); i < len(p)+counterLn; i++ {
		ch := id[i]
		var d uint64
		switch {
		case ch >= '0' && ch <= '9':
			d = uint64(ch - '0')
		case ch >= 'A' && ch <= 'Z':
			d = uint64(ch-'A') + 10
		default:
			return -1
		}
		v = v*36 + d
	}
	if v < c.offset[k] {
		return -1
	}
	n := v - c.offset[k]
	if n >= uint64(limit) {
		return -1
	}
	var buf [16]byte
	if string(c.appendID(buf[:0], k, int(n))) != id {
		return -1
	}
	return int(n)
}
