package main

import (
	"bytes"
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
	"github.com/quarry-router/quarry/platform/grpcx/tlstest"
	"github.com/quarry-router/quarry/services/agent/llm/llmtest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// TestMutualTLSBetweenEveryService runs gateway, search and agent each serving mutual
// TLS and calling one another with client certificates and service credentials, and
// checks that a question travels the whole chain — the gateway to search (T2), the
// gateway to the agent and the agent's tool back to search (T3 reading a document) —
// while callers without the right certificate or key are refused at every service.
func TestMutualTLSBetweenEveryService(t *testing.T) {
	ca := tlstest.NewCA(t, "quarry")
	stranger := tlstest.NewCA(t, "stranger")
	cert := map[string][2]string{}
	for _, name := range []string{"search", "agent", "gateway", "caller"} {
		c, k := ca.Issue(t, name, "127.0.0.1", name+".quarry.svc")
		cert[name] = [2]string{c, k}
	}
	strangerCert, strangerKey := stranger.Issue(t, "caller", "127.0.0.1")
	keys := filepath.Join(t.TempDir(), "keys.json")
	if err := os.WriteFile(keys, []byte(`[
  {"name": "gateway", "sha256": "`+auth.HashKey("k-gateway")+`", "knowledge_bases": ["*"]},
  {"name": "agent", "sha256": "`+auth.HashKey("k-agent")+`", "knowledge_bases": ["*"]}
]`), 0o600); err != nil {
		t.Fatal(err)
	}
	serving := func(name string) []string {
		return []string{"-tls-cert", cert[name][0], "-tls-key", cert[name][1], "-tls-client-ca", ca.CertFile}
	}
	calling := func(peer, as string) []string {
		return []string{"-" + peer + "-tls-ca", ca.CertFile, "-" + peer + "-tls-cert", cert[as][0], "-" + peer + "-tls-key", cert[as][1]}
	}

	llmSrv := llmtest.New(t,
		llmtest.Turn{ToolCalls: []llmtest.Call{{ID: "call_read", Name: "read_document", Arguments: `{"path":"auth/api-keys/issuing-api-keys.md"}`}}},
		llmtest.Turn{Content: "Partners get keys as in `auth/api-keys/issuing-api-keys.md`."})
	searchArgs := append(serving("search"), "-auth-keys", keys)
	agentArgs := append(append(append(scriptedArgs(llmSrv), serving("agent")...), calling("search", "agent")...),
		"-search-key", "k-agent", "-auth-keys", keys)
	gatewayArgs := append(append(append(serving("gateway"), calling("search", "gateway")...), calling("agent", "gateway")...),
		"-search-key", "k-gateway", "-agent-key", "k-gateway")

	ctx, cancel := context.WithCancel(context.Background())
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	// The gateway reports ready only once it has the knowledge bases' generations from
	// search: start returning at all proves gateway → search over mutual TLS.
	sys, err := start(ctx, upConfig{Gateway: "127.0.0.1:0", Search: "127.0.0.1:0", Agent: "127.0.0.1:0", KBRoot: "../../examples/kb",
		SearchArgs: searchArgs, AgentArgs: agentArgs, GatewayArgs: gatewayArgs}, log)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); <-sys.done })

	dial := func(addr string, c grpcx.ClientTLSConfig, key string) *grpc.ClientConn {
		conn, err := c.Dial(addr, key)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return conn
	}
	caller := grpcx.ClientTLSConfig{CAFile: ca.CertFile, CertFile: cert["caller"][0], KeyFile: cert["caller"][1]}
	gw := quarryv1.NewQueryServiceClient(dial(sys.Gateway.String(), caller, ""))
	ask := func(q string) *quarryv1.QueryResponse {
		t.Helper()
		qctx, qcancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer qcancel()
		resp, err := gw.Query(qctx, &quarryv1.QueryRequest{KnowledgeBase: "platform", Query: q})
		if err != nil {
			t.Fatalf("Query(%q): %v", q, err)
		}
		return resp
	}

	t.Run("a T2 answer: gateway to search", func(t *testing.T) {
		if resp := ask("How do I rotate the JWT signing key?"); resp.Tier != quarryv1.Tier_TIER_DIRECT || len(resp.Sources) == 0 {
			t.Errorf("tier %v with %d sources, want a DIRECT answer", resp.Tier, len(resp.Sources))
		}
	})
	t.Run("a T3 answer: gateway to agent, agent's tool to search", func(t *testing.T) {
		resp := ask("How do rate limits work for API keys?")
		if resp.Degraded || resp.Tier != quarryv1.Tier_TIER_SINGLE_LLM {
			t.Fatalf("tier %v degraded %v (%s), want the model's T3 answer", resp.Tier, resp.Degraded, resp.DegradedReason)
		}
		reqs := llmSrv.Requests()
		if len(reqs) != 2 {
			t.Fatalf("%d LLM calls, want 2 (the second with the document the tool read)", len(reqs))
		}
		tool := reqs[1].Messages[len(reqs[1].Messages)-1]
		if tool.Role != "tool" || !strings.Contains(tool.Text(), "title: Issuing an API key for a partner or batch job") {
			t.Errorf("the tool's read_document did not return the document from search: %s %.200q", tool.Role, tool.Text())
		}
	})

	t.Run("quarry query over mutual TLS", func(t *testing.T) {
		base := []string{"-addr", sys.Gateway.String(), "-kb", "platform"}
		var out bytes.Buffer
		err := query(context.Background(), append(base, "-tls-ca", ca.CertFile, "-tls-cert", cert["caller"][0], "-tls-key", cert["caller"][1],
			"How do I rotate the JWT signing key?"), &out)
		if err != nil || !strings.Contains(out.String(), "DIRECT") {
			t.Fatalf("query with the caller's certificate: %v\n%s", err, out.String())
		}
		if err := query(context.Background(), append(base, "-tls-ca", ca.CertFile, "How do I rotate the JWT signing key?"), io.Discard); err == nil ||
			!strings.Contains(err.Error(), "Unavailable") {
			t.Errorf("query without a client certificate: %v, want Unavailable", err)
		}
	})

	healthOf := func(conn *grpc.ClientConn) error {
		hctx, hcancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer hcancel()
		_, err := healthpb.NewHealthClient(conn).Check(hctx, &healthpb.HealthCheckRequest{})
		return err
	}
	refused := []struct {
		name string
		c    grpcx.ClientTLSConfig
	}{
		{"plaintext", grpcx.ClientTLSConfig{}},
		{"TLS without a client certificate", grpcx.ClientTLSConfig{CAFile: ca.CertFile}},
		{"a client certificate from another CA", grpcx.ClientTLSConfig{CAFile: ca.CertFile, CertFile: strangerCert, KeyFile: strangerKey}},
	}
	for _, svc := range []struct{ name, addr string }{{"gateway", sys.Gateway.String()}, {"search", sys.Search.String()}, {"agent", sys.Agent.String()}} {
		t.Run(svc.name+" answers a caller with a certificate from the CA", func(t *testing.T) {
			if err := healthOf(dial(svc.addr, caller, "")); err != nil {
				t.Fatal(err)
			}
		})
		for _, r := range refused {
			t.Run(svc.name+" refuses "+r.name, func(t *testing.T) {
				if err := healthOf(dial(svc.addr, r.c, "")); status.Code(err) != codes.Unavailable {
					t.Fatalf("code %v (%v), want UNAVAILABLE", status.Code(err), err)
				}
			})
		}
	}
	t.Run("internal services want the service credential on top of the certificate", func(t *testing.T) {
		actx, acancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer acancel()
		stream, err := quarryv1.NewAgentServiceClient(dial(sys.Agent.String(), caller, "")).Answer(actx,
			&quarryv1.AnswerRequest{KnowledgeBase: "platform", Query: "What should I check before a production deploy?", Tier: quarryv1.Tier_TIER_SINGLE_LLM})
		if err == nil {
			_, err = stream.Recv()
		}
		if status.Code(err) != codes.Unauthenticated {
			t.Errorf("agent without a key: %v, want UNAUTHENTICATED", err)
		}
		_, err = quarryv1.NewSearchServiceClient(dial(sys.Search.String(), caller, "")).Resolve(actx,
			&quarryv1.ResolveRequest{KnowledgeBase: "platform", Query: "rotate the jwt signing key"})
		if status.Code(err) != codes.Unauthenticated {
			t.Errorf("search without a key: %v, want UNAUTHENTICATED", err)
		}
	})
}
