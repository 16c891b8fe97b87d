package main

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	quarryv1 "github.com/quarry-router/quarry/gen/quarry/v1"
	"github.com/quarry-router/quarry/platform/auth"
	"github.com/quarry-router/quarry/platform/grpcx"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestAPIKeysAndIsolation runs the whole system with API keys on the gateway and a
// service credential between gateway and search, and checks who may ask what, and that
// a question asked of one knowledge base is never answered from another's cache.
func TestAPIKeysAndIsolation(t *testing.T) {
	root := t.TempDir()
	if err := os.CopyFS(filepath.Join(root, "platform"), os.DirFS("../../examples/kb/platform")); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(root, "other", "auth")
	if err := os.MkdirAll(other, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(other, "signing-keys.md"), []byte("---\ntitle: Signing key rotation at Other Corp\n---\n# Signing key rotation at Other Corp\n\nTo rotate the JWT signing key, file a ticket with the other-corp security desk.\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	keys := filepath.Join(t.TempDir(), "keys.json")
	write := func(path, body string) {
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(keys, `[
  {"name": "team-platform", "sha256": "`+auth.HashKey("k-platform")+`", "knowledge_bases": ["platform"]},
  {"name": "team-other", "sha256": "`+auth.HashKey("k-other")+`", "knowledge_bases": ["other"]},
  {"name": "gateway", "sha256": "`+auth.HashKey("k-gateway")+`", "knowledge_bases": ["*"]}
]`)
	ctx, cancel := context.WithCancel(context.Background())
	sys, err := start(ctx, upConfig{Gateway: "127.0.0.1:0", Search: "127.0.0.1:0", Agent: "127.0.0.1:0", KBRoot: root,
		SearchArgs:  []string{"-auth-keys", keys},
		AgentArgs:   []string{"-search-key", "k-gateway"},
		GatewayArgs: []string{"-auth-keys", keys, "-search-key", "k-gateway"}}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); <-sys.done })

	ask := func(key, kb, q string) (*quarryv1.QueryResponse, error) {
		conn, err := grpcx.Dial(sys.Gateway.String(), grpcx.WithBearer(key))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		cctx, ccancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer ccancel()
		return quarryv1.NewQueryServiceClient(conn).Query(cctx, &quarryv1.QueryRequest{KnowledgeBase: kb, Query: q})
	}
	const q = "How do I rotate the JWT signing key?"
	for _, tt := range []struct {
		name, key, kb string
		want          codes.Code
	}{
		{"no key", "", "platform", codes.Unauthenticated},
		{"an unknown key", "k-guess", "platform", codes.Unauthenticated},
		{"a team's own knowledge base", "k-platform", "platform", codes.OK},
		{"another team's knowledge base", "k-platform", "other", codes.PermissionDenied},
		{"a knowledge base that does not exist looks the same", "k-platform", "nosuchkb", codes.PermissionDenied},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := ask(tt.key, tt.kb, q); status.Code(err) != tt.want {
				t.Fatalf("code %v (%v), want %v", status.Code(err), err, tt.want)
			}
		})
	}

	// eval asks a running gateway with the key it is given, as query does.
	qs := filepath.Join(t.TempDir(), "qs.jsonl")
	write(qs, `{"query": "How do I rotate the JWT signing key?", "kind": "known_item", "expect": ["auth/jwt/signing-key-rotation.md"]}`+"\n")
	t.Setenv("QUARRY_API_KEY", "")
	for _, tt := range []struct {
		name string
		args []string
		ok   bool
	}{
		{"eval with the team's key", []string{"-api-key", "k-platform"}, true},
		{"eval without a key", nil, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var out, errOut strings.Builder
			args := append([]string{"-addr", sys.Gateway.String(), "-kb-id", "platform", "-json"}, tt.args...)
			err := evalCmd(context.Background(), append(args, qs), &out, &errOut)
			if (err == nil) != tt.ok || (!tt.ok && !strings.Contains(err.Error(), "Unauthenticated")) {
				t.Fatalf("eval: %v, want ok %v\n%s", err, tt.ok, errOut.String())
			}
		})
	}

	// The same question of the other knowledge base: never the first one's cached answer.
	a, err := ask("k-platform", "platform", q)
	if err != nil {
		t.Fatal(err)
	}
	b, err := ask("k-other", "other", q)
	if err != nil {
		t.Fatal(err)
	}
	if b.FromCache || b.KnowledgeBase != "other" {
		t.Errorf("other KB's answer: from_cache %v kb %q", b.FromCache, b.KnowledgeBase)
	}
	for _, s := range b.Sources {
		if !strings.HasPrefix(s.Path, "auth/signing-keys") {
			t.Errorf("other KB's answer cites %s", s.Path)
		}
	}
	if a.Answer == b.Answer || !strings.Contains(b.Answer, "other-corp") {
		t.Error("the other KB got the platform KB's answer")
	}
}
