package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	quarryv1 "github.com/quarry-router/quarry/gen/quarry/v1"
	"github.com/quarry-router/quarry/platform/grpcx"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
)

// startSystem runs search, agent and gateway on loopback ports chosen by the kernel,
// as "quarry up" does, and returns a client connection to each.
func startSystem(t testing.TB, kbRoot string, searchArgs ...string) (sys *system, gw, search *grpc.ClientConn) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	sys, err := start(ctx, upConfig{Gateway: "127.0.0.1:0", Search: "127.0.0.1:0", Agent: "127.0.0.1:0", KBRoot: kbRoot, SearchArgs: searchArgs}, log)
	if err != nil {
		cancel()
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		select {
		case <-sys.done:
		case <-time.After(15 * time.Second):
			t.Error("services did not stop within 15s of cancellation")
		}
	})
	gw, err = grpcx.Dial(sys.Gateway.String())
	if err != nil {
		t.Fatal(err)
	}
	search, err = grpcx.Dial(sys.Search.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gw.Close(); search.Close() })
	return sys, gw, search
}

func ask(t *testing.T, c quarryv1.QueryServiceClient, kb, q string, explain bool) *quarryv1.QueryResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := c.Query(ctx, &quarryv1.QueryRequest{KnowledgeBase: kb, Query: q, Explain: explain})
	if err != nil {
		t.Fatalf("Query(%q): %v", q, err)
	}
	return resp
}

func TestEveryTierAnswersOverGRPC(t *testing.T) {
	_, gw, _ := startSystem(t, "../../examples/kb")
	c := quarryv1.NewQueryServiceClient(gw)

	direct := ask(t, c, "platform", "How do I rotate the JWT signing key?", true)
	if direct.Tier != quarryv1.Tier_TIER_DIRECT || direct.FromCache {
		t.Fatalf("first ask: tier %v from_cache %v, want DIRECT computed now; explain: %v", direct.Tier, direct.FromCache, direct.GetExplain().GetGate())
	}
	if len(direct.Sources) == 0 || !strings.Contains(direct.Sources[0].Path, "jwt") {
		t.Errorf("top source %v, want the JWT key rotation document", direct.Sources)
	}
	for _, section := range []string{"## Summary", "## Details", "## Sources", "## Gaps"} {
		if !strings.Contains(direct.Answer, section) {
			t.Errorf("T2 answer lacks %q", section)
		}
	}
	if direct.Explain == nil || direct.Explain.Gate == nil || len(direct.Explain.Stages) == 0 {
		t.Errorf("explain trace missing: %v", direct.Explain)
	}

	exact := ask(t, c, "platform", "  how do i ROTATE the jwt signing key? ", false)
	if exact.Tier != quarryv1.Tier_TIER_EXACT_CACHE || !exact.FromCache || exact.OriginTier != quarryv1.Tier_TIER_DIRECT {
		t.Errorf("repeat: tier %v from_cache %v origin %v, want EXACT_CACHE of a DIRECT answer", exact.Tier, exact.FromCache, exact.OriginTier)
	}
	if exact.Answer != direct.Answer {
		t.Error("exact-cache answer differs from the original")
	}

	fuzzy := ask(t, c, "platform", "JWT signing key: how do I rotate it?", true)
	if fuzzy.Tier != quarryv1.Tier_TIER_FUZZY_CACHE || fuzzy.OriginTier != quarryv1.Tier_TIER_DIRECT {
		t.Errorf("reordered question: tier %v origin %v, want FUZZY_CACHE of DIRECT; cache trace %v", fuzzy.Tier, fuzzy.OriginTier, fuzzy.GetExplain().GetCache())
	}
	// A cached answer is served to whoever asks it again, in their words: it must not
	// quote the first caller's question (the demo's T1 answered "JWT signing key: how do
	// I rotate it?" with "1 document … answers “How do I rotate the JWT signing key?”").
	if strings.Contains(fuzzy.Answer, "How do I rotate the JWT signing key") {
		t.Errorf("the fuzzy-cache answer quotes the question it was computed for:\n%s", fuzzy.Answer)
	}

	ood := ask(t, c, "platform", "How do I rotate Kafka consumer credentials?", true)
	if ood.Tier != quarryv1.Tier_TIER_OUT_OF_DOMAIN {
		t.Errorf("Kafka question: tier %v, want OUT_OF_DOMAIN; gate %v", ood.Tier, ood.GetExplain().GetGate())
	}
	if !strings.Contains(ood.Answer, "not covered") || strings.Contains(ood.Answer, "Kafka consumer credentials") {
		t.Errorf("OOD answer %q: want \"not covered\", and not the question (it is cached for others)", ood.Answer)
	}
	oodAgain := ask(t, c, "platform", "How do I rotate Kafka consumer credentials?", false)
	if oodAgain.Tier != quarryv1.Tier_TIER_EXACT_CACHE || oodAgain.OriginTier != quarryv1.Tier_TIER_OUT_OF_DOMAIN {
		t.Errorf("OOD answers must be cached: got %v/%v", oodAgain.Tier, oodAgain.OriginTier)
	}

	llm := ask(t, c, "platform", "What should I check before a production deploy?", true)
	if llm.Tier != quarryv1.Tier_TIER_SINGLE_LLM && llm.Tier != quarryv1.Tier_TIER_AGENTIC {
		t.Fatalf("vague question: tier %v, want an LLM route; gate %v", llm.Tier, llm.GetExplain().GetGate())
	}
	if !llm.Degraded || llm.DegradedReason == "" || !strings.Contains(llm.Answer, "Degraded") {
		t.Errorf("LLM route without an LLM must be a marked degraded answer: degraded=%v reason=%q", llm.Degraded, llm.DegradedReason)
	}
}

func TestQueryStreamEndsWithTheFinalResponse(t *testing.T) {
	_, gw, _ := startSystem(t, "../../examples/kb")
	c := quarryv1.NewQueryServiceClient(gw)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := c.QueryStream(ctx, &quarryv1.QueryStreamRequest{Request: &quarryv1.QueryRequest{KnowledgeBase: "platform", Query: "How do I restore a Postgres backup?"}})
	if err != nil {
		t.Fatal(err)
	}
	var final *quarryv1.QueryResponse
	for {
		ev, err := s.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if f := ev.GetFinal(); f != nil {
			final = f
		}
	}
	if final == nil || final.Answer == "" || final.Tier == quarryv1.Tier_TIER_UNSPECIFIED {
		t.Fatalf("stream ended without a complete final response: %v", final)
	}
}

func TestBadInputGetsAClearStatusAndChangesNothing(t *testing.T) {
	_, gw, search := startSystem(t, "../../examples/kb")
	c := quarryv1.NewQueryServiceClient(gw)
	sc := quarryv1.NewSearchServiceClient(search)
	before := kbStates(t, sc)

	tests := []struct {
		name  string
		kb    string
		query string
		want  codes.Code
	}{
		{"empty query", "platform", "", codes.InvalidArgument},
		{"white space only", "platform", " \t\n ", codes.InvalidArgument},
		{"over the byte limit", "platform", strings.Repeat("rotate ", 1000), codes.InvalidArgument},
		{"NUL byte", "platform", "rotate\x00key", codes.InvalidArgument},
		{"control character", "platform", "rotate\x1bkey", codes.InvalidArgument},
		{"unknown knowledge base", "nosuchkb", "how do I rotate keys?", codes.NotFound},
		{"malformed knowledge base id", "../platform", "how do I rotate keys?", codes.InvalidArgument},
		{"empty knowledge base id", "", "how do I rotate keys?", codes.InvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_, err := c.Query(ctx, &quarryv1.QueryRequest{KnowledgeBase: tt.kb, Query: tt.query})
			if got := status.Code(err); got != tt.want {
				t.Fatalf("code = %v (%v), want %v", got, err, tt.want)
			}
			if status.Convert(err).Message() == "" {
				t.Error("status without a message")
			}
		})
	}
	// Go's client refuses to marshal invalid UTF-8, but other languages' clients send
	// it: put the bytes on the wire by hand.
	t.Run("not UTF-8 on the wire", func(t *testing.T) {
		var req []byte
		req = protowire.AppendTag(req, 1, protowire.BytesType)
		req = protowire.AppendString(req, "platform")
		req = protowire.AppendTag(req, 2, protowire.BytesType)
		req = protowire.AppendBytes(req, []byte("rotate \xff\xfe key"))
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var resp []byte
		err := gw.Invoke(ctx, quarryv1.QueryService_Query_FullMethodName, &req, &resp, grpc.ForceCodecV2(rawCodec{}))
		if got := status.Code(err); got != codes.InvalidArgument {
			t.Fatalf("code = %v (%v), want InvalidArgument", got, err)
		}
	})
	after := kbStates(t, sc)
	if before != after {
		t.Errorf("bad input changed the knowledge bases: %s -> %s", before, after)
	}
	// And the service still answers normally.
	if r := ask(t, c, "platform", "How do I rotate the JWT signing key?", false); r.Tier != quarryv1.Tier_TIER_DIRECT {
		t.Errorf("after bad input: tier %v", r.Tier)
	}
}

func TestSearchServiceRefusesPathsOutsideTheTree(t *testing.T) {
	_, _, search := startSystem(t, "../../examples/kb")
	sc := quarryv1.NewSearchServiceClient(search)
	tests := []struct {
		name, path string
		want       codes.Code
	}{
		{"parent directory", "../../etc/passwd", codes.InvalidArgument},
		{"absolute path", "/etc/passwd", codes.InvalidArgument},
		{"dot-dot inside", "auth/../../secrets.md", codes.InvalidArgument},
		{"missing file", "auth/nope.md", codes.NotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_, err := sc.ReadDocument(ctx, &quarryv1.ReadDocumentRequest{KnowledgeBase: "platform", Path: tt.path})
			if got := status.Code(err); got != tt.want {
				t.Fatalf("code = %v (%v), want %v", got, err, tt.want)
			}
		})
	}
}

func TestEveryServerHasHealth(t *testing.T) {
	sys, _, _ := startSystem(t, "../../examples/kb")
	for name, addr := range map[string]string{"gateway": sys.Gateway.String(), "search": sys.Search.String(), "agent": sys.Agent.String()} {
		conn, err := grpcx.Dial(addr)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
		cancel()
		conn.Close()
		if err != nil || resp.Status != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("%s health: %v %v", name, resp, err)
		}
	}
}

// rawCodec sends and receives pre-encoded protobuf bytes.
type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(*v.(*[]byte))}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	*v.(*[]byte) = data.Materialize()
	return nil
}

func (rawCodec) Name() string { return "proto" }

func kbStates(t *testing.T, sc quarryv1.SearchServiceClient) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := sc.ListKnowledgeBases(ctx, &quarryv1.ListKnowledgeBasesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, k := range resp.KnowledgeBases {
		fmt.Fprintf(&b, "%s gen=%d docs=%d;", k.Id, k.Generation, k.DocumentCount)
	}
	return b.String()
}
