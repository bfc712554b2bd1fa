package jsonw

import (
	"bytes"
	"encoding/json"
	"testing"
)

// FuzzString: String and HTMLString write, byte for byte, what
// encoding/json writes for the same string, with HTML escaping off and on.
func FuzzString(f *testing.F) {
	for _, s := range []string{"", "plain", `quote " and \ slash`, "new\nline\ttab\r", "\x00\x1f\b\f", "é ü 日本", "\u2028\u2029", "\xff\xfe bad", "<a href='x'>&amp;</a>"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		html, _ := json.Marshal(s)
		if got := HTMLString(nil, s); !bytes.Equal(got, html) {
			t.Fatalf("%q: HTMLString %s, json.Marshal %s", s, got, html)
		}
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		_ = enc.Encode(s)
		if got, want := String(nil, s), bytes.TrimSuffix(buf.Bytes(), []byte("\n")); !bytes.Equal(got, want) {
			t.Fatalf("%q: String %s, encoding/json %s", s, got, want)
		}
	})
}
