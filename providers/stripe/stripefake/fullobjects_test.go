package stripefake

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v76"
)

// noDuplicateKeys fails when an object anywhere in b names a key twice
// (encoding/json would keep the last silently).
func noDuplicateKeys(t *testing.T, b []byte) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	var walk func() error
	walk = func() error {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		switch tok {
		case json.Delim('{'):
			seen := map[string]bool{}
			for dec.More() {
				k, err := dec.Token()
				if err != nil {
					return err
				}
				if seen[k.(string)] {
					return fmt.Errorf("key %q twice", k)
				}
				seen[k.(string)] = true
				if err := walk(); err != nil {
					return err
				}
			}
			_, err = dec.Token()
			return err
		case json.Delim('['):
			for dec.More() {
				if err := walk(); err != nil {
					return err
				}
			}
			_, err = dec.Token()
			return err
		}
		return nil
	}
	require.NoError(t, walk())
}

// FullObjects adds Stripe's other fields to payment intents and charges
// (each key once, every value of the type stripe-go v76 declares) and
// changes none of those the fake models; events become Stripe-sized.
func TestFullObjects(t *testing.T) {
	lean := New(Options{Now: fixedNow, Seed: 7})
	full := New(Options{Now: fixedNow, Seed: 7, FullObjects: true})
	var piID string
	for _, s := range []*Server{lean, full} {
		a := s.Account("")
		piID = a.CreatePayment(1234, "gbp", false, now0.Add(-24*time.Hour))
		a.Capture(piID, now0.Add(-12*time.Hour))
	}
	_, _, pib := rawGet(t, lean, "/v1/payment_intents/"+piID)
	var pi struct {
		LatestCharge string `json:"latest_charge"`
	}
	require.NoError(t, json.Unmarshal(pib, &pi))
	require.NotEmpty(t, pi.LatestCharge)
	for path, id := range map[string]string{"/v1/payment_intents/": piID, "/v1/charges/": pi.LatestCharge} {
		ids := []string{id}
		code, _, lb := rawGet(t, lean, path+ids[0])
		require.Equal(t, http.StatusOK, code)
		code, _, fb := rawGet(t, full, path+ids[0])
		require.Equal(t, http.StatusOK, code, string(fb))
		noDuplicateKeys(t, fb)
		var lm, fm map[string]json.RawMessage
		require.NoError(t, json.Unmarshal(lb, &lm))
		require.NoError(t, json.Unmarshal(fb, &fm))
		require.Greater(t, len(fm), len(lm)+15, path)
		for k, v := range lm {
			require.JSONEq(t, string(v), string(fm[k]), "%s: %s", path, k)
		}
		var into any = &stripe.PaymentIntent{}
		if path == "/v1/charges/" {
			into = &stripe.Charge{}
		}
		require.NoError(t, json.Unmarshal(fb, into), "stripe-go v76 decodes it")
	}
	_, _, lev := rawGet(t, lean, "/v1/events?limit=100")
	_, _, fev := rawGet(t, full, "/v1/events?limit=100")
	require.Greater(t, len(fev), len(lev)*3/2, "Stripe-sized events")
	noDuplicateKeys(t, fev)
}
