package serve

import (
	"strings"
	"testing"
)

func TestParseTokens(t *testing.T) {
	got, err := ParseTokens("finance:aaaaaaaaaaaaaaaa1, ops:bbbbbbbbbbbbbbbb2\n# a comment\n\nci:cccccccccccccccc3\n")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"finance": "aaaaaaaaaaaaaaaa1", "ops": "bbbbbbbbbbbbbbbb2", "ci": "cccccccccccccccc3"}
	if len(got) != len(want) {
		t.Fatalf("got %v", got)
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("%s: got %q", k, got[k])
		}
	}
	for _, bad := range []string{"nocolon-secretsecretsecret", "x:qz9k", ":aaaaaaaaaaaaaaaaaa", "a:aaaaaaaaaaaaaaaa,a:bbbbbbbbbbbbbbbb"} {
		_, err := ParseTokens(bad)
		if err == nil {
			t.Fatalf("%q accepted", bad)
		}
		for _, secret := range []string{"secretsecret", "qz9k", "aaaaaaaa", "bbbbbbbb"} {
			if strings.Contains(err.Error(), secret) {
				t.Fatalf("error %q reveals a token", err)
			}
		}
	}
	if got, err := ParseTokens(""); err != nil || len(got) != 0 {
		t.Fatalf("empty: %v %v", got, err)
	}
}

func TestParseTokensRefusesASharedToken(t *testing.T) {
	_, err := ParseTokens("finance:shared-token-0123456789, ops:shared-token-0123456789")
	if err == nil {
		t.Fatal("a shared token accepted")
	}
	if !strings.Contains(err.Error(), `"finance"`) || !strings.Contains(err.Error(), `"ops"`) || strings.Contains(err.Error(), "shared-token") {
		t.Fatalf("error %q: want both names, not the token", err)
	}
	if _, err := TokensFromEnv(func(k string) string {
		return map[string]string{"RECONCILER_API_TOKENS": "a:shared-token-0123456789,b:shared-token-0123456789"}[k]
	}); err == nil || !strings.Contains(err.Error(), "RECONCILER_API_TOKENS") {
		t.Fatalf("TokensFromEnv: %v", err)
	}
}
