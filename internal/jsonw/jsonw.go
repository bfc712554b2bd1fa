// Package jsonw appends JSON by hand, for the hot paths that render many
// small objects (the fake providers' pages, the engine's batch arguments,
// the report's items) where encoding/json's reflection costs more than
// the work.
package jsonw

import (
	"time"
	"unicode/utf8"
)

const hexDigits = "0123456789abcdef"

// String appends v as a JSON string, byte for byte as encoding/json
// escapes it with HTML escaping off (an Encoder after SetEscapeHTML(false)):
// invalid UTF-8 becomes U+FFFD; U+2028 and U+2029 are escaped.
func String(b []byte, v string) []byte { return appendString(b, v, false) }

// HTMLString is String with <, > and & escaped too, byte for byte as
// json.Marshal (and a default Encoder) writes a string.
func HTMLString(b []byte, v string) []byte { return appendString(b, v, true) }

func appendString(b []byte, s string, html bool) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && (!html || c != '<' && c != '>' && c != '&') {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// Time appends t as time.Time's MarshalJSON writes it (RFC 3339 with
// nanoseconds, trailing zeros dropped) for the years it accepts.
func Time(b []byte, t time.Time) []byte {
	b = append(b, '"')
	b = t.AppendFormat(b, time.RFC3339Nano)
	return append(b, '"')
}
