package signedlink

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"
)

var key = []byte("0123456789abcdef0123456789abcdef")

func query(t *testing.T, s string) url.Values {
	t.Helper()
	q, err := url.ParseQuery(s)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// The signature is HMAC-SHA256 over the documented message: another
// implementation (a script, a proxy) can make or check the same links.
func TestSignIsTheDocumentedHMAC(t *testing.T) {
	exp := time.Unix(1767225600, 0)
	m := hmac.New(sha256.New, key)
	m.Write([]byte("run-report\x0012\x001767225600"))
	if got, want := Sign(key, 12, exp), hex.EncodeToString(m.Sum(nil)); got != want {
		t.Fatalf("Sign = %s, want %s", got, want)
	}
	if q := Query(key, 12, exp); !strings.HasPrefix(q, "expires=1767225600&sig=") {
		t.Fatalf("Query = %s", q)
	}
}

func TestVerify(t *testing.T) {
	now := time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)
	exp := now.Add(time.Hour)
	good := query(t, Query(key, 12, exp))
	if err := Verify(key, 12, good, now); err != nil {
		t.Fatalf("a good link: %v", err)
	}
	flip := func(q url.Values, k string) url.Values {
		out := url.Values{}
		for kk, v := range q {
			out[kk] = append([]string(nil), v...)
		}
		b := []byte(out.Get(k))
		if b[len(b)-1] == '0' {
			b[len(b)-1] = '1'
		} else {
			b[len(b)-1] = '0'
		}
		out.Set(k, string(b))
		return out
	}
	other := append([]byte(nil), key...)
	other[0] ^= 1
	for name, tc := range map[string]struct {
		key []byte
		id  int64
		q   url.Values
		at  time.Time
	}{
		"tampered signature":   {key, 12, flip(good, ParamSig), now},
		"extended expiry":      {key, 12, flip(good, ParamExpires), now},
		"another run's link":   {key, 13, good, now},
		"a rotated key":        {other, 12, good, now},
		"no key configured":    {nil, 12, good, now},
		"signature not hex":    {key, 12, url.Values{ParamExpires: good[ParamExpires], ParamSig: {"zz"}}, now},
		"signature truncated":  {key, 12, url.Values{ParamExpires: good[ParamExpires], ParamSig: {good.Get(ParamSig)[:32]}}, now},
		"expiry not a number":  {key, 12, url.Values{ParamExpires: {"soon"}, ParamSig: good[ParamSig]}, now},
		"expired and tampered": {key, 12, flip(good, ParamSig), exp.Add(time.Hour)},
	} {
		if err := Verify(tc.key, tc.id, tc.q, tc.at); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	for _, q := range []url.Values{{}, {ParamSig: good[ParamSig]}, {ParamExpires: good[ParamExpires]}} {
		if err := Verify(key, 12, q, now); !errors.Is(err, ErrMissing) {
			t.Errorf("%v: %v, want ErrMissing", q, err)
		}
	}
	for _, at := range []time.Time{exp, exp.Add(time.Second)} {
		var e *ExpiredError
		if err := Verify(key, 12, good, at); !errors.As(err, &e) || !e.At.Equal(exp) {
			t.Errorf("at %s: %v, want expired at %s", at, err, exp)
		} else if !strings.Contains(err.Error(), "2026-11-02 10:00 UTC") {
			t.Errorf("%v: want the expiry time", err)
		}
	}
}
