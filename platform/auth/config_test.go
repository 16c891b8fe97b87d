package auth

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/grpc/metadata"
)

// TestAnEmptyKeysFileIsRefused: no keys means an open policy, so a keys file emptied by
// mistake (a Secret without its entry, a templating slip) opened the service, write
// side included, without a word. Only leaving out -auth-keys runs open.
func TestAnEmptyKeysFileIsRefused(t *testing.T) {
	for _, body := range []string{"[]", "null"} {
		path := filepath.Join(t.TempDir(), "keys.json")
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		if p, err := LoadPolicy(path, nil); err == nil || !strings.Contains(err.Error(), "-auth-keys") {
			t.Errorf("LoadPolicy(a file holding %s) = open %v, %v; want an error naming -auth-keys", body, p != nil && p.Open(), err)
		}
	}
	if p, err := LoadPolicy("", nil); err != nil || !p.Open() {
		t.Errorf(`LoadPolicy("") = %v, %v; want the open policy`, p, err)
	}
}

// TestTheBearerSchemeIsCaseInsensitive: RFC 7235 makes the scheme case-insensitive, and
// some clients and proxies send "bearer".
func TestTheBearerSchemeIsCaseInsensitive(t *testing.T) {
	p := policy(t)
	for _, v := range []string{"Bearer " + teamA, "bearer " + teamA, "BEARER " + teamA, " Bearer  " + teamA + " "} {
		ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", v))
		if _, err := p.Authorize(ctx, query, "platform"); err != nil {
			t.Errorf("authorization %q…: %v, want the key accepted", v[:8], err)
		}
	}
	for _, v := range []string{"Basic " + teamA, "Bearer", "Bearer ", teamA} {
		ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", v))
		if _, err := p.Authorize(ctx, query, "platform"); err == nil {
			t.Errorf("authorization %q: accepted, want it refused", v)
		}
	}
}

// TestAKeysFileWithAnUnknownFieldIsRefused: a misspelt field was dropped without a word,
// so the key ran with less (or more) than its entry meant: "limits" with "concurency"
// or "rate_limit" left the key at the service's defaults.
func TestAKeysFileWithAnUnknownFieldIsRefused(t *testing.T) {
	h := HashKey("k")
	for _, tc := range []struct {
		name, body, field string
	}{
		{"a misspelt limit", `[{"name":"ci","sha256":"` + h + `","knowledge_bases":["*"],"limits":{"concurency":4}}]`, "concurency"},
		{"a misspelt grant", `[{"name":"ci","sha256":"` + h + `","knowledge_bases":["*"],"writes":true}]`, "writes"},
		{"a misspelt limits", `[{"name":"ci","sha256":"` + h + `","knowledge_bases":["*"],"limit":{"rate":1}}]`, "limit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "keys.json")
			if err := os.WriteFile(path, []byte(tc.body), 0o600); err != nil {
				t.Fatal(err)
			}
			if _, err := LoadPolicy(path, nil); err == nil || !strings.Contains(err.Error(), strconv.Quote(tc.field)) {
				t.Errorf("LoadPolicy = %v; want an error naming the field %q", err, tc.field)
			}
		})
	}
	for _, body := range []string{`[] []`, `[]]`, `[{"name":"ci","sha256":"` + h + `","knowledge_bases":["*"]}] x`} {
		path := filepath.Join(t.TempDir(), "keys.json")
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := Load(path); err == nil {
			t.Errorf("Load(%q) accepted what follows the list", body)
		}
	}
}
