package main

import (
	"context"
	"fmt"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	quarryv1 "github.com/quarry-router/quarry/gen/quarry/v1"
	"github.com/quarry-router/quarry/platform/telemetry"
	"github.com/quarry-router/quarry/services/agent/llm/llmtest"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// TestOneTraceSpansTheChain asks a T4 question over real gRPC sockets with an in-memory
// span exporter and checks that gateway, search, agent and the LLM call all record into
// ONE trace, each hop's server span a child of the caller's client span.
func TestOneTraceSpansTheChain(t *testing.T) {
	exp, tel := inMemoryTracing(t)

	srv := llmtest.New(t,
		llmtest.Turn{ToolCalls: []llmtest.Call{{Name: "search", Arguments: `{"query":"on-call paging alert routing"}`}}},
		llmtest.Turn{ToolCalls: []llmtest.Call{{Name: "read_document", Arguments: `{"path":"observability/alerts/alert-routing.md"}`}}},
		llmtest.Turn{Content: "Alerts page the owning team's on-call engineer."},
	)
	gw, _ := startLLMSystem(t, scriptedArgs(srv)...)
	exp.Reset() // start-up traffic (generation watch) is not part of the query

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := gw.Query(ctx, &quarryv1.QueryRequest{KnowledgeBase: llmKB, Query: "What is our on-call process?", Explain: true})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Tier != quarryv1.Tier_TIER_AGENTIC || resp.Degraded {
		t.Fatalf("tier %v degraded %v, want an AGENTIC LLM answer", resp.Tier, resp.Degraded)
	}

	// Every hop must be in the query's trace.
	wanted := []struct {
		name string
		kind trace.SpanKind
	}{
		{"quarry.v1.SearchService/Resolve", trace.SpanKindClient},
		{"quarry.v1.SearchService/Resolve", trace.SpanKindServer},
		{"search.search", trace.SpanKindInternal},
		{"search.gate", trace.SpanKindInternal},
		{"quarry.v1.AgentService/Answer", trace.SpanKindClient},
		{"quarry.v1.AgentService/Answer", trace.SpanKindServer},
		{"quarry.v1.SearchService/Search", trace.SpanKindServer}, // the agent's search tool
		{"quarry.v1.SearchService/ReadDocument", trace.SpanKindServer},
	}
	// Server spans end after their response is written: the gateway's may end before
	// the agent's, whose answer it has already streamed on. Wait for them all.
	deadline := time.Now().Add(5 * time.Second)
	var spans tracetest.SpanStubs
	for time.Now().Before(deadline) {
		spans = exp.GetSpans()
		all := hasSpan(spans, "quarry.v1.QueryService/Query", trace.SpanKindServer)
		for _, w := range wanted {
			all = all && hasSpan(spans, w.name, w.kind)
		}
		if all {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	root := find(spans, "quarry.v1.QueryService/Query", trace.SpanKindServer)
	if root == nil {
		t.Fatalf("no gateway server span among %d spans", len(spans))
	}
	byID := map[trace.SpanID]tracetest.SpanStub{}
	for _, s := range spans {
		if s.SpanContext.TraceID() != root.SpanContext.TraceID() {
			continue
		}
		byID[s.SpanContext.SpanID()] = s
	}
	for _, want := range wanted {
		s := findIn(byID, want.name, want.kind)
		if s == nil {
			t.Errorf("no %v span %q in the query's trace", want.kind, want.name)
			continue
		}
		// The chain of parents leads back to the gateway's server span.
		if !descends(byID, *s, root.SpanContext.SpanID()) {
			t.Errorf("span %q does not descend from the gateway's server span", want.name)
		}
		if want.kind == trace.SpanKindServer {
			parent, ok := byID[s.Parent.SpanID()]
			if !ok || parent.SpanKind != trace.SpanKindClient {
				t.Errorf("server span %q's parent is not a client span", want.name)
			}
		}
	}
	// The search stages are children of the search service's server span, which
	// carries the route (within the eight attributes the SDK ends without a map); the
	// gate's span carries the decision and its inputs.
	resolve := findIn(byID, "quarry.v1.SearchService/Resolve", trace.SpanKindServer)
	if resolve != nil {
		route := attrMap(resolve.Attributes)
		for _, k := range []string{"quarry.route", "quarry.kb", "quarry.generation"} {
			if route[k] == "" {
				t.Errorf("search server span lacks %s: %v", k, route)
			}
		}
		if len(resolve.Attributes) > 8 {
			t.Errorf("search server span has %d attributes, want at most 8: %v", len(resolve.Attributes), route)
		}
		for _, name := range []string{"search.search", "search.gate"} {
			if s := findIn(byID, name, trace.SpanKindInternal); s != nil && s.Parent.SpanID() != resolve.SpanContext.SpanID() {
				t.Errorf("span %s is not a child of the search server span", name)
			}
		}
		if g := findIn(byID, "search.gate", trace.SpanKindInternal); g != nil {
			decision := attrMap(g.Attributes)
			for _, k := range []string{"quarry.outcome", "quarry.gate.top_relevance", "quarry.results", "quarry.top_path", "quarry.top_score"} {
				if decision[k] == "" {
					t.Errorf("search.gate span lacks %s: %v", k, decision)
				}
			}
		}
	}
	// The gateway's server span carries the routing outcome and the cache lookups.
	attrs := attrMap(root.Attributes)
	for k, want := range map[string]string{"quarry.tier": "agentic", "quarry.origin_tier": "agentic", "quarry.degraded": "false",
		"quarry.kb": llmKB, "quarry.generation": fmt.Sprint(resp.GetGeneration())} {
		if attrs[k] != want {
			t.Errorf("gateway server span has %s=%q, want %q", k, attrs[k], want)
		}
	}
	events := map[string]string{}
	for _, e := range root.Events {
		for _, a := range e.Attributes {
			if a.Key == "quarry.outcome" {
				events[e.Name] = a.Value.AsString()
			}
		}
	}
	if events["exact_cache"] != "miss" || events["fuzzy_cache"] == "" {
		t.Errorf("gateway server span's cache events %v, want an exact_cache miss and a fuzzy_cache outcome", events)
	}
	rec := httptest.NewRecorder()
	tel.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if body := rec.Body.String(); !strings.Contains(body, `quarry_gateway_queries_total{`) || !strings.Contains(body, `quarry_tier="agentic"`) {
		t.Errorf("metrics lack the tier mix:\n%.400s", body)
	}
	llmCalls := 0
	for _, s := range byID {
		if s.SpanKind == trace.SpanKindClient && strings.HasPrefix(s.Name, "HTTP ") {
			llmCalls++
		}
	}
	if llmCalls != 3 {
		t.Errorf("%d LLM HTTP spans in the trace, want 3", llmCalls)
	}
	checkAgentSpans(t, byID, resp)
	if body := rec.Body.String(); !strings.Contains(body, `quarry_search_backend_duration_milliseconds_bucket{`) ||
		!strings.Contains(body, `quarry_backend="bleve"`) || !strings.Contains(body, `quarry_op="search"`) {
		t.Error("metrics lack the search backend's latency")
	}
	for _, m := range []string{"gen_ai_client_token_usage", "gen_ai_client_operation_duration_seconds"} {
		if body := rec.Body.String(); !strings.Contains(body, m+"_bucket{") || !strings.Contains(body, `gen_ai_request_model="scripted-model"`) {
			t.Errorf("metrics lack %s for the scripted model", m)
		}
	}
}

// checkAgentSpans checks the agent's part of a T4 trace scripted as search, then
// read_document, then the answer: the answer's totals on the agent's server span, one
// agent.iteration span per call under it, each holding its chat span (GenAI
// conventions: model and tokens, the HTTP call beneath) and the tool calls it asked for,
// each tool's call to the search service beneath its execute_tool span.
func checkAgentSpans(t *testing.T, byID map[trace.SpanID]tracetest.SpanStub, resp *quarryv1.QueryResponse) {
	t.Helper()
	agent := findIn(byID, "quarry.v1.AgentService/Answer", trace.SpanKindServer)
	if agent == nil {
		return // reported above
	}
	attrs := attrMap(agent.Attributes)
	for k, want := range map[string]string{"quarry.tier": "agentic", "quarry.llm.calls": "3", "quarry.agent.iterations": "3",
		"quarry.agent.tool_calls": "2", "quarry.agent.stop_reason": "answered", "quarry.degraded": "false",
		"gen_ai.response.model":      "scripted-model",
		"gen_ai.usage.input_tokens":  fmt.Sprint(resp.GetExplain().GetLlm().GetPromptTokens()),
		"gen_ai.usage.output_tokens": fmt.Sprint(resp.GetExplain().GetLlm().GetCompletionTokens())} {
		if attrs[k] != want {
			t.Errorf("agent server span has %s=%q, want %q", k, attrs[k], want)
		}
	}
	if resp.GetExplain().GetLlm().GetPromptTokens() == 0 {
		t.Error("the answer reports no prompt tokens")
	}
	children := func(parent trace.SpanID, name string) []tracetest.SpanStub {
		var out []tracetest.SpanStub
		for _, s := range byID {
			if s.Parent.SpanID() == parent && strings.HasPrefix(s.Name, name) {
				out = append(out, s)
			}
		}
		slices.SortFunc(out, func(a, b tracetest.SpanStub) int { return a.StartTime.Compare(b.StartTime) })
		return out
	}
	iterations := children(agent.SpanContext.SpanID(), "agent.iteration")
	if len(iterations) != 3 {
		t.Fatalf("%d agent.iteration spans under the agent's server span, want 3", len(iterations))
	}
	tools := []string{"search", "read_document", ""}
	for i, it := range iterations {
		if got := attrMap(it.Attributes)["quarry.agent.iteration"]; got != fmt.Sprint(i+1) {
			t.Errorf("iteration span %d has quarry.agent.iteration=%q", i+1, got)
		}
		chats := children(it.SpanContext.SpanID(), "chat ")
		if len(chats) != 1 {
			t.Errorf("iteration %d holds %d chat spans, want 1", i+1, len(chats))
			continue
		}
		chat := attrMap(chats[0].Attributes)
		for k, want := range map[string]string{"gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai",
			"gen_ai.request.model": "scripted-model", "gen_ai.response.model": "scripted-model", "quarry.llm.attempts": "1"} {
			if chat[k] != want {
				t.Errorf("iteration %d's chat span has %s=%q, want %q", i+1, k, chat[k], want)
			}
		}
		if chats[0].Name != "chat scripted-model" || chats[0].SpanKind != trace.SpanKindClient || chat["gen_ai.usage.output_tokens"] == "" {
			t.Errorf("iteration %d's chat span: %q %v %v", i+1, chats[0].Name, chats[0].SpanKind, chat)
		}
		if len(children(chats[0].SpanContext.SpanID(), "HTTP ")) != 1 {
			t.Errorf("iteration %d's chat span does not hold its HTTP call", i+1)
		}
		calls := children(it.SpanContext.SpanID(), "execute_tool ")
		if tools[i] == "" {
			if len(calls) != 0 {
				t.Errorf("the answering iteration ran %d tools", len(calls))
			}
			continue
		}
		if len(calls) != 1 || calls[0].Name != "execute_tool "+tools[i] || attrMap(calls[0].Attributes)["gen_ai.tool.name"] != tools[i] {
			t.Errorf("iteration %d's tool spans: %v, want one execute_tool %s", i+1, calls, tools[i])
			continue
		}
		if len(children(calls[0].SpanContext.SpanID(), "quarry.v1.SearchService/")) != 1 {
			t.Errorf("execute_tool %s does not hold its call to the search service", tools[i])
		}
	}
}

func attrMap(kvs []attribute.KeyValue) map[string]string {
	m := map[string]string{}
	for _, a := range kvs {
		m[string(a.Key)] = a.Value.String()
	}
	return m
}

// TestCacheHitSpanStaysWithinEightAttributes: the SDK de-duplicates a span's attributes
// as it ends, in a map that costs nothing up to eight and 1.7 KB and about 1 µs beyond. otelgrpc puts five on the gateway's server span; a
// cache hit adds three (see route's record). A dependency that adds one fails here.
func TestCacheHitSpanStaysWithinEightAttributes(t *testing.T) {
	exp, _ := inMemoryTracing(t)
	gw, _ := startLLMSystem(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req := &quarryv1.QueryRequest{KnowledgeBase: exampleKB, Query: jwtRotateQ}
	if _, err := gw.Query(ctx, req); err != nil {
		t.Fatal(err)
	}
	exp.Reset()
	resp, err := gw.Query(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetTier() != quarryv1.Tier_TIER_EXACT_CACHE {
		t.Fatalf("second ask answered by %v, want EXACT_CACHE", resp.GetTier())
	}
	var root *tracetest.SpanStub
	for deadline := time.Now().Add(5 * time.Second); root == nil && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		root = find(exp.GetSpans(), "quarry.v1.QueryService/Query", trace.SpanKindServer)
	}
	if root == nil {
		t.Fatal("no gateway server span for the cache hit")
	}
	attrs := attrMap(root.Attributes)
	if len(root.Attributes) > 8 {
		t.Errorf("the cache hit's server span has %d attributes, want at most 8: %v", len(root.Attributes), attrs)
	}
	for k, want := range map[string]string{"quarry.tier": "exact_cache", "quarry.origin_tier": "direct", "quarry.kb": exampleKB} {
		if attrs[k] != want {
			t.Errorf("the cache hit's server span has %s=%q, want %q", k, attrs[k], want)
		}
	}
	var gen string
	for _, e := range root.Events {
		if e.Name == "exact_cache" {
			for _, a := range e.Attributes {
				if a.Key == "quarry.generation" {
					gen = a.Value.String()
				}
			}
		}
	}
	if gen == "" || gen != fmt.Sprint(resp.GetGeneration()) {
		t.Errorf("exact_cache event's generation %q, want the answer's %d", gen, resp.GetGeneration())
	}
}

// processTelemetry is set up once per test binary, as a service sets it up once at
// start: the services' packages take their tracers and meters from the global
// providers, which follow the first provider set in a process and no later one, so a
// second Setup would leave them writing to the first. Tests share it: each resets the
// exporter, and metrics are compared before and after.
var processTelemetry = sync.OnceValues(func() (*tracetest.InMemoryExporter, *telemetry.Telemetry) {
	exp := tracetest.NewInMemoryExporter()
	tel, err := telemetry.Setup(context.Background(), telemetry.Config{Service: "quarry-test", SpanExporter: exp, Getenv: func(string) string { return "" }})
	if err != nil {
		panic(fmt.Sprintf("telemetry setup: %v", err))
	}
	return exp, tel
})

// inMemoryTracing sets up telemetry as the services do, exporting spans to memory, and
// empties the exporter.
func inMemoryTracing(t *testing.T) (*tracetest.InMemoryExporter, *telemetry.Telemetry) {
	t.Helper()
	exp, tel := processTelemetry()
	exp.Reset()
	return exp, tel
}

func hasSpan(spans tracetest.SpanStubs, name string, kind trace.SpanKind) bool {
	return find(spans, name, kind) != nil
}

func find(spans tracetest.SpanStubs, name string, kind trace.SpanKind) *tracetest.SpanStub {
	for i := range spans {
		if spans[i].Name == name && spans[i].SpanKind == kind {
			return &spans[i]
		}
	}
	return nil
}

func findIn(byID map[trace.SpanID]tracetest.SpanStub, name string, kind trace.SpanKind) *tracetest.SpanStub {
	for _, s := range byID {
		if s.Name == name && s.SpanKind == kind {
			return &s
		}
	}
	return nil
}

func descends(byID map[trace.SpanID]tracetest.SpanStub, s tracetest.SpanStub, root trace.SpanID) bool {
	for range 64 {
		p := s.Parent.SpanID()
		if p == root {
			return true
		}
		next, ok := byID[p]
		if !ok {
			return false
		}
		s = next
	}
	return false
}

// TestRedisCommandsAreInTheQuerysTrace: with the Redis cache, a cached answer asked over
// gRPC shows its Redis lookup as a client span beneath the gateway's server span, without
// the command text; asked again on the replica that stored it, its copy answers, with no
// Redis span and the exact_cache event saying so.
func TestRedisCommandsAreInTheQuerysTrace(t *testing.T) {
	exp, tel := inMemoryTracing(t) // before the replicas: their Redis clients take the global provider as they start
	c := startRedisCluster(t)
	askOn(t, c.a, jwtRotateQ)
	for _, tc := range []struct {
		name    string
		replica quarryv1.QueryServiceClient
		copy    bool
	}{
		{"the other replica, from Redis", c.b, false},
		{"the replica that stored it, from its copy", c.a, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			exp.Reset()
			copyHits := metricSum(t, tel, "quarry_gateway_cache_near_lookups_total", `outcome="hit"`)
			resp := askOn(t, tc.replica, jwtRotateQ)
			wantServed(t, resp, quarryv1.Tier_TIER_EXACT_CACHE, true)
			if ec := resp.GetExplain().GetCache(); ec.GetExact() != "hit" || ec.GetExactReplicaCopy() != tc.copy {
				t.Errorf("explain: exact %q, exact_replica_copy %v; want hit, %v", ec.GetExact(), ec.GetExactReplicaCopy(), tc.copy)
			}
			if n := metricSum(t, tel, "quarry_gateway_cache_near_lookups_total", `outcome="hit"`) - copyHits; n != map[bool]int{true: 1, false: 0}[tc.copy] {
				t.Errorf("quarry_gateway_cache_near_lookups_total{outcome=\"hit\"} rose by %d", n)
			}
			var root *tracetest.SpanStub
			for deadline := time.Now().Add(5 * time.Second); root == nil && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
				root = find(exp.GetSpans(), "quarry.v1.QueryService/Query", trace.SpanKindServer)
			}
			if root == nil {
				t.Fatal("no gateway server span for the cached answer")
			}
			var commands []string
			for _, s := range exp.GetSpans() {
				if s.Parent.SpanID() != root.SpanContext.SpanID() || s.SpanKind != trace.SpanKindClient {
					continue
				}
				attrs := attrMap(s.Attributes)
				if attrs["db.system"] != "redis" {
					continue
				}
				commands = append(commands, s.Name)
				if attrs["db.statement"] != "" {
					t.Errorf("Redis span %q carries the command text", s.Name)
				}
			}
			if tc.copy != (len(commands) == 0) {
				t.Errorf("Redis command spans %v beneath the cached answer's server span; from the replica's copy: %v", commands, tc.copy)
			}
			copyAttr := ""
			for _, e := range root.Events {
				if e.Name == "exact_cache" {
					copyAttr = attrMap(e.Attributes)["quarry.cache.replica_copy"]
				}
			}
			if want := map[bool]string{true: "true", false: ""}[tc.copy]; copyAttr != want {
				t.Errorf("exact_cache event's quarry.cache.replica_copy = %q, want %q", copyAttr, want)
			}
		})
	}
}

// TestTheCallersSamplingDecisionHoldsAcrossTheChain: a caller's trace context decides
// for every hop (parent-based sampling). A sampled caller's query records its spans in
// the caller's trace, the gateway's server span a child of the caller's span; an
// unsampled caller's query records nothing in any service, which holds only if each hop
// passes the unsampled context on: a hop that started a trace of its own would record
// it.
func TestTheCallersSamplingDecisionHoldsAcrossTheChain(t *testing.T) {
	exp, _ := inMemoryTracing(t)
	gw, _ := startLLMSystem(t)
	for _, tc := range []struct {
		name    string
		query   string
		sampled bool
	}{
		{"sampled", jwtRotateQ, true},
		{"not sampled", "How do I restore a Postgres backup?", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var flags trace.TraceFlags
			if tc.sampled {
				flags = trace.FlagsSampled
			}
			caller := trace.NewSpanContext(trace.SpanContextConfig{
				TraceID: trace.TraceID{0x51, 1, 2, 3}, SpanID: trace.SpanID{0x52, 1}, TraceFlags: flags, Remote: true,
			})
			// The test's client is instrumented as a caller's would be: its client span
			// (recorded or not, as the caller's context says) carries the trace on.
			ctx, cancel := context.WithTimeout(trace.ContextWithRemoteSpanContext(context.Background(), caller), 10*time.Second)
			defer cancel()
			exp.Reset()
			resp, err := gw.Query(ctx, &quarryv1.QueryRequest{KnowledgeBase: exampleKB, Query: tc.query})
			if err != nil {
				t.Fatal(err)
			}
			if resp.GetTier() == quarryv1.Tier_TIER_EXACT_CACHE || resp.GetTier() == quarryv1.Tier_TIER_FUZZY_CACHE {
				t.Fatalf("answered by %v: the query must reach the search service", resp.GetTier())
			}
			// Server spans end after the response is written: wait for the gateway's and
			// the search's (which may end after the gateway's), or, unsampled, long
			// enough for them to have come.
			var spans tracetest.SpanStubs
			for deadline := time.Now().Add(map[bool]time.Duration{true: 5 * time.Second, false: 300 * time.Millisecond}[tc.sampled]); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
				if spans = exp.GetSpans(); hasSpan(spans, "quarry.v1.QueryService/Query", trace.SpanKindServer) &&
					hasSpan(spans, "quarry.v1.SearchService/Resolve", trace.SpanKindServer) {
					break
				}
			}
			if !tc.sampled {
				if len(spans) > 0 {
					names := make([]string, len(spans))
					for i, s := range spans {
						names[i] = s.Name
					}
					t.Fatalf("an unsampled caller's query recorded %d spans: %v", len(spans), names)
				}
				return
			}
			root := find(spans, "quarry.v1.QueryService/Query", trace.SpanKindServer)
			if root == nil {
				t.Fatal("no gateway server span for a sampled caller")
			}
			if c := find(spans, "quarry.v1.QueryService/Query", trace.SpanKindClient); c == nil || c.Parent.SpanID() != caller.SpanID() ||
				root.Parent.SpanID() != c.SpanContext.SpanID() {
				t.Errorf("the gateway's server span is not beneath the caller's span through the client's")
			}
			byID := map[trace.SpanID]tracetest.SpanStub{}
			for _, s := range spans {
				if s.SpanContext.TraceID() != caller.TraceID() {
					t.Errorf("span %q is in trace %v, not the caller's", s.Name, s.SpanContext.TraceID())
				}
				byID[s.SpanContext.SpanID()] = s
			}
			if s := findIn(byID, "quarry.v1.SearchService/Resolve", trace.SpanKindServer); s == nil || !descends(byID, *s, root.SpanContext.SpanID()) {
				t.Error("the search service's server span is not beneath the gateway's")
			}
		})
	}
}
