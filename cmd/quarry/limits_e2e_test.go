package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	quarryv1 "github.com/quarry-router/quarry/gen/quarry/v1"
	"github.com/quarry-router/quarry/platform/auth"
	"github.com/quarry-router/quarry/platform/grpcx"
	"github.com/quarry-router/quarry/services/agent/llm/llmtest"
	searchapp "github.com/quarry-router/quarry/services/search/app"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// startKeyed runs the whole system with the gateway requiring the keys in keysJSON,
// and returns a client per key.
func startKeyed(t *testing.T, keysJSON string, gatewayArgs, agentArgs []string, keys ...string) map[string]quarryv1.QueryServiceClient {
	t.Helper()
	file := filepath.Join(t.TempDir(), "keys.json")
	if err := os.WriteFile(file, []byte(keysJSON), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	sys, err := start(ctx, upConfig{Gateway: "127.0.0.1:0", Search: "127.0.0.1:0", Agent: "127.0.0.1:0", KBRoot: "../../examples/kb",
		GatewayArgs: append([]string{"-auth-keys", file}, gatewayArgs...), AgentArgs: agentArgs}, log)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); <-sys.done })
	out := map[string]quarryv1.QueryServiceClient{}
	for _, k := range keys {
		conn, err := grpcx.Dial(sys.Gateway.String(), grpcx.WithBearer(k))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		out[k] = quarryv1.NewQueryServiceClient(conn)
	}
	return out
}

func askAs(c quarryv1.QueryServiceClient, q string, opts ...grpc.CallOption) (*quarryv1.QueryResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return c.Query(ctx, &quarryv1.QueryRequest{KnowledgeBase: "platform", Query: q}, opts...)
}

// TestPerKeyRateLimit gives one team a rate of 1 query/s with a burst of 2 in the keys
// file: its third query at once is refused with a retry hint that holds, another team
// is unaffected, and the refused question left nothing behind in the cache.
func TestPerKeyRateLimit(t *testing.T) {
	c := startKeyed(t, `[
  {"name": "team-a", "sha256": "`+auth.HashKey("k-a")+`", "knowledge_bases": ["platform"], "limits": {"rate": 1, "burst": 2}},
  {"name": "team-b", "sha256": "`+auth.HashKey("k-b")+`", "knowledge_bases": ["platform"]}
]`, nil, nil, "k-a", "k-b")
	for _, q := range []string{"How do I rotate the JWT signing key?", "How do I issue an API key for a partner?"} {
		if _, err := askAs(c["k-a"], q); err != nil {
			t.Fatalf("within the burst: %v", err)
		}
	}
	const refusedQ = "How do I restore a Postgres backup?"
	var trailer metadata.MD
	_, err := askAs(c["k-a"], refusedQ, grpc.Trailer(&trailer))
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("third query at once: %v, want RESOURCE_EXHAUSTED", err)
	}
	delay, ok := grpcx.RetryDelay(err)
	if !ok || delay <= 0 || delay > time.Second {
		t.Fatalf("RetryInfo %v (present %v), want a delay within the second a token takes", delay, ok)
	}
	if got := trailer.Get(grpcx.RetryAfterKey); len(got) != 1 || got[0] != "1" {
		t.Errorf("retry-after trailer %q, want 1", got)
	}
	if msg := status.Convert(err).Message(); !strings.Contains(msg, `"team-a"`) || !strings.Contains(msg, "rate limit") {
		t.Errorf("message %q should name the key and the limit", msg)
	}

	for i := range 5 {
		if _, err := askAs(c["k-b"], "How do I rotate the JWT signing key?"); err != nil {
			t.Fatalf("team-b query %d while team-a is limited: %v", i+1, err)
		}
	}
	// Nothing changed for the refused call: the question was never answered, so it is
	// computed now, not served from a cache entry the refusal left.
	resp, err := askAs(c["k-b"], refusedQ)
	if err != nil {
		t.Fatal(err)
	}
	if resp.FromCache {
		t.Errorf("the refused question came from the cache (tier %v): the refusal ran the query", resp.Tier)
	}

	// A client that waits the hinted delay is served.
	time.Sleep(delay)
	if _, err := askAs(c["k-a"], refusedQ); err != nil {
		t.Errorf("after waiting the hinted %v: %v", delay, err)
	}
}

// TestPerKeyConcurrencyLimit holds two of one team's LLM-routed questions in flight
// (the scripted model never answers) under -limit-concurrency 2: the team's next call
// is refused at once, another team's is answered, and a slot frees when a held call
// ends.
func TestPerKeyConcurrencyLimit(t *testing.T) {
	llmSrv := llmtest.New(t)
	llmSrv.Repeat(llmtest.Turn{Hang: true})
	c := startKeyed(t, `[
  {"name": "team-a", "sha256": "`+auth.HashKey("k-a")+`", "knowledge_bases": ["platform"]},
  {"name": "team-b", "sha256": "`+auth.HashKey("k-b")+`", "knowledge_bases": ["platform"]}
]`, []string{"-limit-concurrency", "2"}, append(scriptedArgs(llmSrv), "-llm-timeout", "60s"), "k-a", "k-b")

	var cancels []context.CancelFunc
	defer func() {
		for _, cancel := range cancels {
			cancel()
		}
	}()
	for _, q := range []string{"What should I check before a production deploy?", "What should a new engineer learn first?"} {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		cancels = append(cancels, cancel)
		if _, err := c["k-a"].QueryStream(ctx, &quarryv1.QueryStreamRequest{Request: &quarryv1.QueryRequest{KnowledgeBase: "platform", Query: q}}); err != nil {
			t.Fatal(err)
		}
		select {
		case <-llmSrv.Received():
		case <-time.After(10 * time.Second):
			t.Fatalf("%q never reached the model", q)
		}
	}

	_, err := askAs(c["k-a"], "How do I rotate the JWT signing key?")
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "2 calls in flight") {
		t.Fatalf("a third call with two held: %v, want RESOURCE_EXHAUSTED naming the limit", err)
	}
	if d, ok := grpcx.RetryDelay(err); !ok || d <= 0 {
		t.Errorf("no retry hint: %v", err)
	}
	if _, err := askAs(c["k-b"], "How do I rotate the JWT signing key?"); err != nil {
		t.Errorf("another team with two of team-a's calls held: %v", err)
	}

	cancels[0]()
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := askAs(c["k-a"], "How do I rotate the JWT signing key?")
		if err == nil {
			break
		}
		if status.Code(err) != codes.ResourceExhausted || time.Now().After(deadline) {
			t.Fatalf("after a held call ended: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestWriteRateLimitOnSearch limits a writer to one write per long while on the
// search service's KnowledgeService: its second write is refused with a retry hint
// and changes nothing — no new generation, no document.
func TestWriteRateLimitOnSearch(t *testing.T) {
	root := t.TempDir()
	if err := os.CopyFS(filepath.Join(root, "platform"), os.DirFS("../../examples/kb/platform")); err != nil {
		t.Fatal(err)
	}
	keys := filepath.Join(t.TempDir(), "keys.json")
	if err := os.WriteFile(keys, []byte(`[
  {"name": "writer", "sha256": "`+auth.HashKey("k-w")+`", "knowledge_bases": ["platform"], "write": true, "limits": {"rate": 0.001, "burst": 1}},
  {"name": "reader", "sha256": "`+auth.HashKey("k-r")+`", "knowledge_bases": ["*"]}
]`), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan net.Addr, 1)
	done := make(chan error, 1)
	go func() {
		done <- searchapp.Run(ctx, []string{"-listen", "127.0.0.1:0", "-kb-root", root, "-auth-keys", keys, "-watch=false"},
			slog.New(slog.NewTextHandler(io.Discard, nil)), func(a net.Addr) { ready <- a })
	}()
	var addr net.Addr
	select {
	case addr = <-ready:
	case err := <-done:
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); <-done })
	dial := func(key string) *grpc.ClientConn {
		conn, err := grpcx.Dial(addr.String(), grpcx.WithBearer(key))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return conn
	}
	kc := quarryv1.NewKnowledgeServiceClient(dial("k-w"))
	sc := quarryv1.NewSearchServiceClient(dial("k-r"))
	cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer ccancel()
	state := func() *quarryv1.KnowledgeBaseState {
		resp, err := sc.ListKnowledgeBases(cctx, &quarryv1.ListKnowledgeBasesRequest{})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range resp.KnowledgeBases {
			if s.Id == "platform" {
				return s
			}
		}
		t.Fatal("no platform knowledge base")
		return nil
	}
	upsert := func(path string) error {
		_, err := kc.UpsertFile(cctx, &quarryv1.UpsertFileRequest{KnowledgeBase: "platform", Path: path,
			Content: []byte("---\ntitle: Rate limited write\n---\n# Rate limited write\n\nA write under a per-key limit.\n")})
		return err
	}

	if err := upsert("limits/first.md"); err != nil {
		t.Fatalf("first write: %v", err)
	}
	before := state()
	err := upsert("limits/second.md")
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("second write: %v, want RESOURCE_EXHAUSTED", err)
	}
	if d, ok := grpcx.RetryDelay(err); !ok || d < 15*time.Minute {
		t.Errorf("retry hint %v (present %v), want the ~1000 s a token takes at 0.001/s", d, ok)
	}
	after := state()
	if after.Generation != before.Generation || after.DocumentCount != before.DocumentCount {
		t.Errorf("the refused write changed the knowledge base: generation %d → %d, documents %d → %d",
			before.Generation, after.Generation, before.DocumentCount, after.DocumentCount)
	}
	if _, err := sc.ReadDocument(cctx, &quarryv1.ReadDocumentRequest{KnowledgeBase: "platform", Path: "limits/second.md"}); status.Code(err) != codes.NotFound {
		t.Errorf("the refused file: %v, want NOT_FOUND", err)
	}
	if _, err := os.Stat(filepath.Join(root, "platform", "limits", "second.md")); !os.IsNotExist(err) {
		t.Errorf("the refused file reached the tree: %v", err)
	}
	// Reads are not the write side's limit.
	for range 3 {
		if _, err := sc.Resolve(cctx, &quarryv1.ResolveRequest{KnowledgeBase: "platform", Query: "rotate the jwt signing key"}); err != nil {
			t.Fatal(err)
		}
	}
}
