// Package jsonw appends JSON by hand, for the hot paths that render many
// small objects (the fake providers' pages, the engine's batch arguments)
// where encoding/json's reflection costs more than the work.
package jsonw

import "unicode/utf8"

const hexDigits = "0123456789abcdef"

// String appends v as a JSON string, escaped as encoding/json escapes it
// (invalid UTF-8 becomes U+FFFD; U+2028 and U+2029 are escaped).
func String(b []byte, v string) []byte {
	b = append(b, '"')
	for i := 0; i < len(v); {
		c := v[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				b = append(b, '\\', c)
			case c == '\n':
				b = append(b, '\\', 'n')
			case c == '\r':
				b = append(b, '\\', 'r')
			case c == '\t':
				b = append(b, '\\', 't')
			case c < 0x20:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			default:
				b = append(b, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(v[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, `\u202`...)
			b = append(b, hexDigits[r&0xF])
		default:
			b = append(b, v[i:i+size]...)
		}
		i += size
	}
	return append(b, '"')
}
