package auth

import (
	"context"
	"os"
	"path/filepath"
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
		if p, err := LoadPolicy(path); err == nil || !strings.Contains(err.Error(), "-auth-keys") {
			t.Errorf("LoadPolicy(a file holding %s) = open %v, %v; want an error naming -auth-keys", body, p != nil && p.Open(), err)
		}
	}
	if p, err := LoadPolicy(""); err != nil || !p.Open() {
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
