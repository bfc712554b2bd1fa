package serve

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// oneObject checks that raw is exactly one JSON object, nothing after it,
// with no key twice in any object: encoding/json would let the last of two
// keys win (`"dry_run":true,"dry_run":false` is a real run) and ignore what
// follows the first value. The key is set when a duplicate is the fault.
func oneObject(raw []byte) (key string, err error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	t, err := dec.Token()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return "", errors.New("the body is empty; send one JSON object")
		}
		return "", err
	}
	if t != json.Delim('{') {
		return "", errors.New("the body is not a JSON object")
	}
	if key, err := walkObject(dec, ""); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return key, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return "", errors.New("data after the JSON object; send exactly one")
	}
	return "", nil
}

// walkObject reads the rest of an object whose '{' has been read.
func walkObject(dec *json.Decoder, path string) (string, error) {
	seen := map[string]bool{}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return "", err
		}
		k, _ := t.(string)
		name := k
		if path != "" {
			name = path + "." + k
		}
		if seen[k] {
			return name, fmt.Errorf("duplicate key %q", name)
		}
		seen[k] = true
		if key, err := walkValue(dec, name); err != nil {
			return key, err
		}
	}
	_, err := dec.Token() // '}'
	return "", err
}

func walkValue(dec *json.Decoder, path string) (string, error) {
	t, err := dec.Token()
	if err != nil {
		return "", err
	}
	switch t {
	case json.Delim('{'):
		return walkObject(dec, path)
	case json.Delim('['):
		for i := 0; dec.More(); i++ {
			if key, err := walkValue(dec, path+"["+strconv.Itoa(i)+"]"); err != nil {
				return key, err
			}
		}
		_, err := dec.Token() // ']'
		return "", err
	}
	return "", nil
}

// parseRunID reads a run id: digits only, no sign, no space, no leading
// zero, in range. strconv.ParseInt alone takes "+1".
func parseRunID(s string) (int64, error) {
	bad := errors.New("run id must be a positive integer (digits only)")
	if s == "" || s[0] == '0' {
		return 0, bad
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, bad
		}
	}
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, bad
	}
	return id, nil
}
