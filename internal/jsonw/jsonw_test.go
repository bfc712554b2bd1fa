package jsonw

import (
	"encoding/json"
	"testing"
)

// FuzzString: the output is what encoding/json makes of the same string.
func FuzzString(f *testing.F) {
	for _, s := range []string{"", "plain", `quote " and \ slash`, "new\nline\ttab\r", "\x00\x1f", "é ü 日本", "\u2028\u2029", "\xff\xfe bad"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, _ := json.Marshal(s)
		var back string
		if err := json.Unmarshal(String(nil, s), &back); err != nil {
			t.Fatalf("%q: invalid JSON %q: %v", s, String(nil, s), err)
		}
		var wantBack string
		_ = json.Unmarshal(want, &wantBack)
		if back != wantBack {
			t.Fatalf("%q decodes to %q, encoding/json's to %q", s, back, wantBack)
		}
	})
}
