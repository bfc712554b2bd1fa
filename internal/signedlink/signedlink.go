// Package signedlink signs and checks the token-free links to one run's
// report that the chat message carries.
//
// Why a signed link and not a bearer token in the URL: chat messages are
// copied, forwarded and pasted into tickets, and a link outlives the
// conversation it was posted in. An API token in a link would grant the
// whole API (POST /runs too) to everyone the message reaches, until the
// token is rotated. A signed link opens one run's report (HTML and CSV),
// read only, until it expires; rotating the key revokes every link at once.
//
// A link's query is expires=<unix seconds>&sig=<hex HMAC-SHA256(key,
// "run-report\x00<run id>\x00<expires>")>. The purpose prefix keeps a
// signature from ever being valid for anything but a run's report, and the
// NUL separators keep id and expiry from running into each other.
package signedlink

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"time"
)

// MinKeyLen is the shortest key accepted, in bytes: HMAC-SHA256's own
// block of strength (a shorter key is easier to guess than the MAC).
const MinKeyLen = 32

// purpose is the first field of every signed message.
const purpose = "run-report"

// Query parameter names.
const (
	ParamExpires = "expires"
	ParamSig     = "sig"
)

var (
	// ErrMissing means the request carries no signature (or no expiry).
	ErrMissing = errors.New("the link carries no signature")
	// ErrInvalid means the signature does not match the run and expiry:
	// the link was altered, belongs to another run, or was signed with a
	// key since rotated.
	ErrInvalid = errors.New("the link's signature is not valid")
)

// ExpiredError is a link whose signature is valid but whose time is up.
type ExpiredError struct {
	// At is when the link expired.
	At time.Time
}

func (e *ExpiredError) Error() string {
	return "the link expired on " + e.At.UTC().Format("2006-01-02 15:04 UTC")
}

// Sign returns the signature of the report of run id until expires.
func Sign(key []byte, id int64, expires time.Time) string {
	return sign(key, id, strconv.FormatInt(expires.Unix(), 10))
}

func sign(key []byte, id int64, expires string) string {
	m := hmac.New(sha256.New, key)
	fmt.Fprintf(m, "%s\x00%d\x00%s", purpose, id, expires)
	return hex.EncodeToString(m.Sum(nil))
}

// Query returns the encoded query (expires=…&sig=…) that opens the report
// of run id until expires.
func Query(key []byte, id int64, expires time.Time) string {
	v := url.Values{}
	v.Set(ParamExpires, strconv.FormatInt(expires.Unix(), 10))
	v.Set(ParamSig, Sign(key, id, expires))
	return v.Encode()
}

// Verify checks q's signature for the report of run id at now. It returns
// ErrMissing, ErrInvalid or an *ExpiredError; the expiry is only told once
// the signature is known to be good, so a forged link learns nothing. The
// signature is compared in constant time.
func Verify(key []byte, id int64, q url.Values, now time.Time) error {
	exp, sig := q.Get(ParamExpires), q.Get(ParamSig)
	if exp == "" || sig == "" {
		return ErrMissing
	}
	if len(key) < MinKeyLen {
		return ErrInvalid // no key configured: nothing verifies
	}
	got, err := hex.DecodeString(sig)
	if err != nil || len(got) != sha256.Size || len(exp) > 19 {
		return ErrInvalid
	}
	want, _ := hex.DecodeString(sign(key, id, exp))
	if !hmac.Equal(got, want) {
		return ErrInvalid
	}
	// Only our signer wrote exp, so it parses; check anyway.
	secs, err := strconv.ParseInt(exp, 10, 64)
	if err != nil {
		return ErrInvalid
	}
	if at := time.Unix(secs, 0); !now.Before(at) {
		return &ExpiredError{At: at}
	}
	return nil
}
