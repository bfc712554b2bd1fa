package report

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/reconciler/reconciler/acks"
	"github.com/reconciler/reconciler/models"
)

// FuzzAppendItem: an item appended by hand (newItem, triaged, appendItem)
// is, byte for byte, what json.Marshal makes of the same drift item read
// by itemOf, whatever its detail holds (not an object, duplicate keys,
// lifted keys of the wrong type, nested objects, numbers of any size,
// strings needing escapes), dry run or not, acknowledged or not.
func FuzzAppendItem(f *testing.F) {
	for _, d := range []string{
		`{}`, ``, `[1]`, `"x"`, `{"a":`, `null`,
		`{"amount": 26836, "applied": ["authorised", "captured"], "currency": "gbp", "explanation": "The payment was <unknown> & \"late\""}`,
		`{"big": 12345678901234567890, "neg": -0.5, "exp": 1e21, "small": 1.5E-7, "tiny": 1e-7, "zero": 0, "huge": 1e999}`,
		`{"s": "quote \" backslash \\ tab \t \b \f \u0001 unicode \u00e9 \ud83d\ude00 \u2028 <>&", "t": true, "f": false, "n": null}`,
		`{"nested": {"b": [1, {"z": 1, "a": [null, "x"]}], "a": {}}, "empty": []}`,
		`{"dup": 1, "dup": 2, "amount": 5, "amount": "6"}`,
		`{"amount": "12", "currency": 3, "explanation": null, "time_inferred": "yes", "event_id": 7, "provider_time": "not a time"}`,
		`{"provider_time": "2026-11-19T10:00:00.123456789+02:00", "time_inferred": true, "event_id": "evt_1", "amount_refunded": 2.7}`,
		`{"ü": 1, "Z": 2, "a": 3, "\u00e9": 4, "\"": 5}`,
	} {
		f.Add(d, "pi_1", "captured", true, false, "")
		f.Add(d, "PM0<1>&", "", false, true, "seen")
	}
	f.Fuzz(func(t *testing.T, detail, providerID, local string, dry, human bool, note string) {
		r := models.Run{Provider: "stripe", Account: "acct_1", Mode: "live", DryRun: dry}
		it := models.DriftItem{Provider: "stripe", ProviderID: providerID, Kind: "behind", Action: models.ActionRepaired, Detail: models.JSON(detail)}
		if local != "" {
			it.LocalState = &local
		}
		settled := "settled"
		it.ProviderState = &settled
		var tri acks.Triage
		if human {
			it.Action = models.ActionRefused
			fp := acks.Fingerprint(it.Provider, it.ProviderID, it.Kind, it.ProviderState)
			if note != "" {
				tri.Status = map[string]string{fp: acks.StatusAcknowledged}
				tri.Acks = map[string]acks.Ack{fp: {AcknowledgedBy: "ops <on call>", Note: note, AcknowledgedAt: time.Date(2026, 11, 20, 1, 2, 3, 4, time.UTC)}}
			}
		}
		want, err := json.Marshal(triaged(itemOf(r, it), tri))
		if err != nil {
			t.Skip("encoding/json refuses it:", err)
		}
		p := parsers.Get()
		defer parsers.Put(p)
		item, rest := newItem(r, it, p, []field{{key: "stale"}})
		got := appendItem(nil, triaged(item, tri), rest)
		if string(got) != string(want) {
			t.Fatalf("detail %q:\n got %s\nwant %s", detail, got, want)
		}
	})
}
