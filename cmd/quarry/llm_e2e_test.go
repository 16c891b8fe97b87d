package main

import (
	"context"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	quarryv1 "github.com/quarry-router/quarry/gen/quarry/v1"
	"github.com/quarry-router/quarry/platform/grpcx"
	"github.com/quarry-router/quarry/services/agent/llm/llmtest"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The LLM scenarios of issue 5, end to end through the gateway's gRPC API: search,
// agent and gateway on loopback, the agent pointed at an OpenAI-compatible endpoint.
// TestLLMScenarios runs them against a scripted server (llmtest) and checks the
// requests Quarry sends and the answers it returns exactly; TestLLMScenariosRealEndpoint
// runs the ones a real model can play against QUARRY_LLM_BASE_URL with loose checks
// (an answer, sources inside the knowledge base, the right tier).

const llmKB = "platform"

// llmEnv is one running system and the endpoint its agent calls.
type llmEnv struct {
	gw     quarryv1.QueryServiceClient
	search quarryv1.SearchServiceClient
	// srv is the scripted endpoint; nil against a real one.
	srv     *llmtest.Server
	timeout time.Duration
}

func (e *llmEnv) real() bool { return e.srv == nil }

// startLLMSystem runs the whole system with the agent given agentArgs.
func startLLMSystem(t testing.TB, agentArgs ...string) (quarryv1.QueryServiceClient, quarryv1.SearchServiceClient) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	sys, err := start(ctx, upConfig{Gateway: "127.0.0.1:0", Search: "127.0.0.1:0", Agent: "127.0.0.1:0",
		KBRoot: "../../examples/kb", AgentArgs: agentArgs}, log)
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
	gwConn, err := grpcx.Dial(sys.Gateway.String())
	if err != nil {
		t.Fatal(err)
	}
	searchConn, err := grpcx.Dial(sys.Search.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gwConn.Close(); searchConn.Close() })
	return quarryv1.NewQueryServiceClient(gwConn), quarryv1.NewSearchServiceClient(searchConn)
}

// scriptedArgs points the agent at a scripted server, with retries fast enough for tests.
func scriptedArgs(srv *llmtest.Server) []string {
	return []string{"-llm-base-url", srv.BaseURL(), "-llm-model", "scripted-model", "-llm-api-key", "sk-scripted",
		"-llm-timeout", "5s", "-llm-retry-backoff", "5ms", "-llm-max-retry-delay", "100ms"}
}

// llmScenario is one scenario; run asks its question and checks the outcome, strictly
// against the scripted server and loosely against a real one.
type llmScenario struct {
	name     string
	question string
	tier     quarryv1.Tier
	args     []string // agent flags beyond the endpoint's
	script   []llmtest.Turn
	realToo  bool
	run      func(t *testing.T, e *llmEnv, s llmScenario)
}

func llmScenarios() []llmScenario {
	return []llmScenario{
		{
			name: "T3 answers in one call with the pre-fetched documents", question: "What should I check before a production deploy?",
			tier: quarryv1.Tier_TIER_SINGLE_LLM, realToo: true,
			script: []llmtest.Turn{{Content: "Before a production deploy, check the items in `deploy/_index.md`.", Chunks: 4}},
			run: func(t *testing.T, e *llmEnv, s llmScenario) {
				resp := e.ask(t, s.question, true)
				e.checkAnswered(t, resp, s.tier)
				if e.real() {
					return
				}
				if !strings.HasPrefix(resp.Answer, s.script[0].Content) || !strings.Contains(resp.Answer, "\n\n---\nSources: `") {
					t.Errorf("answer %q: want the model's text, then the sources it read", resp.Answer)
				}
				req := e.onlyRequest(t)
				checkShape(t, req, 1024, 0.3, []string{"read_document"})
				if got := strings.Join(req.Roles(), ","); got != "system,user" {
					t.Errorf("roles %s, want system,user", got)
				}
				prompt := req.Messages[1].Text()
				for _, want := range []string{"# Documents found for the question", "# Structure of the knowledge base", "## Folder summaries", s.question} {
					if !strings.Contains(prompt, want) {
						t.Errorf("prompt lacks %q", want)
					}
				}
				if len(resp.Sources) == 0 || !strings.Contains(prompt, "path: "+resp.Sources[0].Path) {
					t.Errorf("the top source %v is not in the prompt in full", resp.Sources)
				}
				l := resp.Explain.GetLlm()
				if l.GetModel() != "scripted-model" || l.GetCalls() != 1 || l.GetStopReason() != "answered" || l.GetPromptTokens() == 0 || l.GetCompletionTokens() == 0 {
					t.Errorf("LLM trace %v", l)
				}
				// T3 answers are cached like every other answer: no second LLM call.
				again := e.ask(t, s.question, false)
				if again.Tier != quarryv1.Tier_TIER_EXACT_CACHE || again.OriginTier != s.tier || again.Answer != resp.Answer {
					t.Errorf("repeat: tier %v origin %v, want a cached %v answer", again.Tier, again.OriginTier, s.tier)
				}
				if n := len(e.srv.Requests()); n != 1 {
					t.Errorf("%d LLM calls after the repeat, want 1", n)
				}
			},
		},
		{
			name: "T3 reads one more document", question: "How do rate limits work for API keys?",
			tier: quarryv1.Tier_TIER_SINGLE_LLM, realToo: true,
			script: []llmtest.Turn{
				{ToolCalls: []llmtest.Call{{ID: "call_read", Name: "read_document", Arguments: `{"path":"auth/api-keys/issuing-api-keys.md"}`}}},
				{Content: "Each key has its own limit (`auth/api-keys/key-rate-limits.md`); partners get keys as in `auth/api-keys/issuing-api-keys.md`."},
			},
			run: func(t *testing.T, e *llmEnv, s llmScenario) {
				resp := e.ask(t, s.question, true)
				e.checkAnswered(t, resp, s.tier)
				if e.real() {
					return
				}
				reqs := e.srv.Requests()
				if len(reqs) != 2 {
					t.Fatalf("%d LLM calls, want 2", len(reqs))
				}
				checkShape(t, reqs[1], 1024, 0.3, []string{"read_document"})
				tool := reqs[1].Messages[len(reqs[1].Messages)-1]
				if tool.Role != "tool" || tool.ToolCallID != "call_read" || !strings.Contains(tool.Text(), "title: Issuing an API key for a partner or batch job") {
					t.Errorf("tool message %s %s: %.200q", tool.Role, tool.ToolCallID, tool.Text())
				}
				if !hasSource(resp, "auth/api-keys/issuing-api-keys.md") || !strings.Contains(resp.Answer, "`auth/api-keys/issuing-api-keys.md`") {
					t.Errorf("the document read is not cited: sources %v", sourcePaths(resp))
				}
				if l := resp.Explain.GetLlm(); l.GetIterations() != 1 || l.GetCalls() != 2 || len(l.GetToolCalls()) != 1 {
					t.Errorf("LLM trace %v", l)
				}
			},
		},
		{
			name: "T4 searches, reads and answers", question: "What is our on-call process?",
			tier: quarryv1.Tier_TIER_AGENTIC, realToo: true,
			script: []llmtest.Turn{
				{ToolCalls: []llmtest.Call{{Name: "search", Arguments: `{"query":"on-call paging alert routing"}`}}},
				{ToolCalls: []llmtest.Call{{Name: "read_document", Arguments: `{"path":"observability/alerts/alert-routing.md"}`}}},
				{Content: "Alerts page the owning team's on-call engineer, as `observability/alerts/alert-routing.md` describes.", Chunks: 5},
			},
			run: func(t *testing.T, e *llmEnv, s llmScenario) {
				resp := e.ask(t, s.question, true)
				e.checkAnswered(t, resp, s.tier)
				if e.real() {
					return
				}
				reqs := e.srv.Requests()
				if len(reqs) != 3 {
					t.Fatalf("%d LLM calls, want 3", len(reqs))
				}
				for _, r := range reqs {
					checkShape(t, r, 2048, 0.5, []string{"search", "read_document", "list_folder", "related"})
				}
				if got := strings.Join(reqs[2].Roles(), ","); got != "system,user,assistant,tool,assistant,tool" {
					t.Errorf("roles %s", got)
				}
				if found := reqs[1].Messages[3].Text(); !strings.Contains(found, " for \"on-call paging alert routing\", best first") {
					t.Errorf("search result %.300q", found)
				}
				if !hasSource(resp, "observability/alerts/alert-routing.md") {
					t.Errorf("sources %v lack the document read", sourcePaths(resp))
				}
				if l := resp.Explain.GetLlm(); l.GetIterations() != 3 || l.GetCalls() != 3 || l.GetStopReason() != "answered" ||
					!slices.Equal(l.GetToolCalls(), []string{`search({"query":"on-call paging alert routing"})`, `read_document({"path":"observability/alerts/alert-routing.md"})`}) {
					t.Errorf("LLM trace %v", l)
				}
			},
		},
		{
			name: "a doom loop is stopped and answered from what was gathered", question: "Who do I page when the pager goes off at night?",
			tier: quarryv1.Tier_TIER_AGENTIC,
			script: []llmtest.Turn{
				{ToolCalls: []llmtest.Call{{Name: "read_document", Arguments: `{"path":"observability/alerts/alert-routing.md"}`}}},
				{ToolCalls: []llmtest.Call{{Name: "read_document", Arguments: `{ "path": "observability/alerts/alert-routing.md" }`}}},
				{Content: "Page the on-call engineer of the owning team."},
			},
			run: func(t *testing.T, e *llmEnv, s llmScenario) {
				resp := e.ask(t, s.question, true)
				e.checkAnswered(t, resp, s.tier)
				reqs := e.srv.Requests()
				last := reqs[len(reqs)-1]
				if len(reqs) != 3 || len(last.Tools) != 0 || !strings.Contains(last.Messages[len(last.Messages)-1].Text(), "you repeated a call") {
					t.Errorf("%d calls, the last with tools %v; want a final call without tools", len(reqs), last.ToolNames())
				}
				if l := resp.Explain.GetLlm(); l.GetStopReason() != "loop_detected" {
					t.Errorf("stop reason %q, want loop_detected", l.GetStopReason())
				}
			},
		},
		{
			name: "the deadline stops the loop and the model answers from what it has", question: "What is the process for incident review?",
			tier: quarryv1.Tier_TIER_AGENTIC, args: []string{"-loop-deadline", "300ms"},
			script: []llmtest.Turn{
				{ToolCalls: []llmtest.Call{{Name: "search", Arguments: `{"query":"incident review"}`}}},
				{Hang: true},
				{Content: "The knowledge base has no incident review process; the closest is alert routing."},
			},
			run: func(t *testing.T, e *llmEnv, s llmScenario) {
				began := time.Now()
				resp := e.ask(t, s.question, true)
				e.checkAnswered(t, resp, s.tier)
				if took := time.Since(began); took > 5*time.Second {
					t.Errorf("answer took %v with a 300ms deadline", took)
				}
				select {
				case req := <-e.srv.Canceled():
					if req != e.srv.Requests()[1] {
						t.Error("the wrong request was cancelled")
					}
				case <-time.After(5 * time.Second):
					t.Error("the call that was running at the deadline was not cancelled")
				}
				if l := resp.Explain.GetLlm(); l.GetStopReason() != "deadline" || l.GetCalls() != 3 {
					t.Errorf("LLM trace %v", l)
				}
			},
		},
		{
			name: "429 then success is retried", question: "what happens when postgres runs out of connections",
			tier:   quarryv1.Tier_TIER_SINGLE_LLM,
			script: []llmtest.Turn{{Status: 429, RetryAfter: "0"}, {Content: "New connections queue in PgBouncer (`data/postgres/pgbouncer-pooling.md`)."}},
			run: func(t *testing.T, e *llmEnv, s llmScenario) {
				resp := e.ask(t, s.question, false)
				e.checkAnswered(t, resp, s.tier)
				if n := len(e.srv.Requests()); n != 2 {
					t.Errorf("%d requests, want 2", n)
				}
			},
		},
		{
			name: "an LLM that stays down gives a marked extractive answer, not cached", question: "How do we keep customer data safe?",
			tier: quarryv1.Tier_TIER_SINGLE_LLM, args: []string{"-llm-max-retries", "1"},
			script: []llmtest.Turn{{Status: 503}, {Status: 503}, {Content: "Encrypt it."}},
			run: func(t *testing.T, e *llmEnv, s llmScenario) {
				resp := e.ask(t, s.question, false)
				if resp.Tier != s.tier || !resp.Degraded || resp.DegradedReason != "the LLM failed: HTTP 503 Service Unavailable after 2 attempts" ||
					!strings.HasPrefix(resp.Answer, "> Degraded answer: the LLM failed") || !strings.Contains(resp.Answer, "\n> ") {
					t.Fatalf("tier %v degraded %v (%q), answer %.200q: want a quoted, marked answer", resp.Tier, resp.Degraded, resp.DegradedReason, resp.Answer)
				}
				again := e.ask(t, s.question, false)
				if again.FromCache || again.Degraded || !strings.HasPrefix(again.Answer, "Encrypt it.") {
					t.Errorf("after the LLM recovered: from cache %v degraded %v answer %.80q; the degraded answer must not be cached", again.FromCache, again.Degraded, again.Answer)
				}
			},
		},
		{
			name: "garbage tool arguments get tool errors, not a crash", question: "How do I debug a slow service end to end?",
			tier: quarryv1.Tier_TIER_AGENTIC,
			script: []llmtest.Turn{
				{ToolCalls: []llmtest.Call{
					{ID: "bad_json", Name: "read_document", Arguments: `{"path": "observability/`},
					{ID: "escape", Name: "read_document", Arguments: `{"path":"../../../etc/passwd"}`},
					{ID: "wrong_type", Name: "search", Arguments: `{"query": ["tracing"]}`},
					{ID: "no_tool", Name: "rm_rf", Arguments: `{}`},
				}},
				{Content: "Start with tracing: see `observability/tracing/_index.md`."},
			},
			run: func(t *testing.T, e *llmEnv, s llmScenario) {
				resp := e.ask(t, s.question, true)
				e.checkAnswered(t, resp, s.tier)
				msgs := e.srv.Requests()[1].Messages
				want := map[string]string{"bad_json": "not a JSON object", "escape": "outside the knowledge base", "wrong_type": `"query" must be a string`, "no_tool": `no tool named "rm_rf"`}
				for _, m := range msgs {
					if m.Role != "tool" {
						continue
					}
					if w := want[m.ToolCallID]; !strings.HasPrefix(m.Text(), "error: ") || !strings.Contains(m.Text(), w) {
						t.Errorf("tool message %s = %q, want an error saying %q", m.ToolCallID, m.Text(), w)
					}
					delete(want, m.ToolCallID)
				}
				if len(want) > 0 {
					t.Errorf("no tool message for %v", want)
				}
				if strings.Contains(resp.Answer, "root:") {
					t.Error("the answer holds /etc/passwd")
				}
			},
		},
		{
			name: "QueryStream streams the answer as it is written", question: "How do we keep customer data safe?",
			tier: quarryv1.Tier_TIER_SINGLE_LLM, realToo: true,
			script: []llmtest.Turn{{Content: "Customer data is encrypted at rest and in transit; access goes through audited roles.", Chunks: 6, ChunkDelay: 5 * time.Millisecond}},
			run: func(t *testing.T, e *llmEnv, s llmScenario) {
				ctx, cancel := context.WithTimeout(context.Background(), e.timeout)
				defer cancel()
				stream, err := e.gw.QueryStream(ctx, &quarryv1.QueryStreamRequest{Request: &quarryv1.QueryRequest{KnowledgeBase: llmKB, Query: s.question}})
				if err != nil {
					t.Fatal(err)
				}
				var deltas []string
				var final *quarryv1.QueryResponse
				var firstDelta, finalAt time.Time
				for {
					ev, err := stream.Recv()
					if err == io.EOF {
						break
					}
					if err != nil {
						t.Fatal(err)
					}
					if final != nil {
						t.Fatal("an event arrived after the final response")
					}
					switch x := ev.GetEvent().(type) {
					case *quarryv1.QueryStreamResponse_Delta:
						if len(deltas) == 0 {
							firstDelta = time.Now()
						}
						deltas = append(deltas, x.Delta)
					case *quarryv1.QueryStreamResponse_Final:
						final, finalAt = x.Final, time.Now()
					}
				}
				if final == nil {
					t.Fatal("no final response")
				}
				e.checkAnswered(t, final, s.tier)
				if len(deltas) < 2 || strings.Join(deltas, "") != final.Answer {
					t.Errorf("%d deltas %q; concatenated they must equal the final answer %q", len(deltas), deltas, final.Answer)
				}
				if content := s.script[0].Content; !e.real() && (len(deltas) < 6 || len(deltas[0]) >= len(content) || !strings.HasPrefix(content, deltas[0])) {
					t.Errorf("deltas %q: want the model's chunks passed on one by one", deltas)
				}
				// The model spaces its six chunks 5 ms apart: text that was passed on as it
				// came arrives well before the end, not all at once with the final answer.
				if gap := finalAt.Sub(firstDelta); !e.real() && gap < 15*time.Millisecond {
					t.Errorf("first delta only %v before the final answer: the text was buffered", gap)
				}
			},
		},
		{
			name: "a client that cancels stops the LLM call", question: "What should a new engineer learn first?",
			tier: quarryv1.Tier_TIER_AGENTIC, realToo: true,
			script: []llmtest.Turn{{Hang: true}},
			run: func(t *testing.T, e *llmEnv, s llmScenario) {
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				stream, err := e.gw.QueryStream(ctx, &quarryv1.QueryStreamRequest{Request: &quarryv1.QueryRequest{KnowledgeBase: llmKB, Query: s.question}})
				if err != nil {
					t.Fatal(err)
				}
				errc := make(chan error, 1)
				go func() {
					for {
						if _, err := stream.Recv(); err != nil {
							errc <- err
							return
						}
					}
				}()
				if e.real() {
					// A real model cannot be watched; the call must at least end at once.
					time.AfterFunc(200*time.Millisecond, cancel)
				} else {
					select {
					case <-e.srv.Received():
					case <-time.After(10 * time.Second):
						t.Fatal("the question never reached the LLM")
					}
					cancel()
					select {
					case <-e.srv.Canceled():
					case <-time.After(10 * time.Second):
						t.Fatal("the LLM request was not cancelled when the client went away")
					}
				}
				select {
				case err := <-errc:
					if e.real() && err == io.EOF {
						t.Log("the model answered before the cancel")
					} else if status.Code(err) != codes.Canceled {
						t.Errorf("stream ended with %v, want CANCELED", err)
					}
				case <-time.After(10 * time.Second):
					t.Fatal("the stream did not end after the cancel")
				}
			},
		},
	}
}

func TestLLMScenarios(t *testing.T) {
	for _, s := range llmScenarios() {
		t.Run(s.name, func(t *testing.T) {
			srv := llmtest.New(t, s.script...)
			gw, sc := startLLMSystem(t, append(scriptedArgs(srv), s.args...)...)
			e := &llmEnv{gw: gw, search: sc, srv: srv, timeout: 10 * time.Second}
			e.checkRoute(t, s)
			s.run(t, e, s)
			if p := srv.Problems(); len(p) > 0 {
				t.Errorf("requests the endpoint would reject: %v", p)
			}
			if n := srv.Remaining(); n > 0 {
				t.Errorf("%d scripted turns were never asked for", n)
			}
		})
	}
}

// TestLLMScenariosRealEndpoint runs the scenarios a real model can play against the
// endpoint in QUARRY_LLM_BASE_URL, e.g. with Ollama:
//
//	ollama serve & ollama pull llama3.1:8b
//	QUARRY_LLM_BASE_URL=http://localhost:11434/v1 QUARRY_LLM_MODEL=llama3.1:8b \
//	  go test -run TestLLMScenariosRealEndpoint -v ./cmd/quarry
func TestLLMScenariosRealEndpoint(t *testing.T) {
	base := os.Getenv("QUARRY_LLM_BASE_URL")
	if base == "" {
		t.Skip("real-endpoint variant of the LLM scenarios: set QUARRY_LLM_BASE_URL (and QUARRY_LLM_MODEL, QUARRY_LLM_API_KEY if the endpoint needs one) to run it, e.g. QUARRY_LLM_BASE_URL=http://localhost:11434/v1 QUARRY_LLM_MODEL=llama3.1:8b for Ollama")
	}
	model := os.Getenv("QUARRY_LLM_MODEL")
	if model == "" {
		t.Fatal("QUARRY_LLM_MODEL must name the model to ask")
	}
	args := []string{"-llm-base-url", base, "-llm-model", model, "-llm-timeout", "120s", "-loop-deadline", "90s"}
	if key := os.Getenv("QUARRY_LLM_API_KEY"); key != "" {
		args = append(args, "-llm-api-key", key)
	}
	for _, s := range llmScenarios() {
		if !s.realToo {
			continue
		}
		t.Run(s.name, func(t *testing.T) {
			gw, sc := startLLMSystem(t, append(args, s.args...)...)
			e := &llmEnv{gw: gw, search: sc, timeout: 5 * time.Minute}
			e.checkRoute(t, s)
			s.run(t, e, s)
		})
	}
}

// checkRoute fails clearly when the search no longer routes a scenario's question to
// its tier (the example knowledge base or the gates changed): pick another question.
func (e *llmEnv) checkRoute(t *testing.T, s llmScenario) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := e.search.Resolve(ctx, &quarryv1.ResolveRequest{KnowledgeBase: llmKB, Query: s.question})
	if err != nil {
		t.Fatal(err)
	}
	if res.Route != s.tier {
		t.Fatalf("%q now routes to %v, not %v: choose a question that does", s.question, res.Route, s.tier)
	}
}

func (e *llmEnv) ask(t *testing.T, q string, explain bool) *quarryv1.QueryResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), e.timeout)
	defer cancel()
	resp, err := e.gw.Query(ctx, &quarryv1.QueryRequest{KnowledgeBase: llmKB, Query: q, Explain: explain})
	if err != nil {
		t.Fatalf("Query(%q): %v", q, err)
	}
	return resp
}

// checkAnswered is what holds for any model: the routed tier answered, not degraded,
// with a non-empty answer whose sources all exist in the knowledge base.
func (e *llmEnv) checkAnswered(t *testing.T, resp *quarryv1.QueryResponse, tier quarryv1.Tier) {
	t.Helper()
	if resp.Tier != tier || resp.FromCache {
		t.Errorf("tier %v (from cache %v), want %v computed now", resp.Tier, resp.FromCache, tier)
	}
	if resp.Degraded {
		t.Fatalf("degraded answer: %s", resp.DegradedReason)
	}
	if strings.TrimSpace(resp.Answer) == "" {
		t.Fatal("empty answer")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, s := range resp.Sources {
		if _, err := e.search.ReadDocument(ctx, &quarryv1.ReadDocumentRequest{KnowledgeBase: llmKB, Path: s.Path}); err != nil {
			t.Errorf("source %q is not a document of the knowledge base: %v", s.Path, err)
		}
	}
	if ex := resp.GetExplain(); ex != nil && ex.GetLlm().GetCalls() == 0 {
		t.Errorf("explain has no LLM trace: %v", ex.GetLlm())
	}
}

func (e *llmEnv) onlyRequest(t *testing.T) *llmtest.Request {
	t.Helper()
	reqs := e.srv.Requests()
	if len(reqs) != 1 {
		t.Fatalf("%d LLM calls, want 1", len(reqs))
	}
	return reqs[0]
}

// checkShape checks the request fields the tier fixes.
func checkShape(t *testing.T, req *llmtest.Request, maxTokens int, temperature float64, tools []string) {
	t.Helper()
	if req.Model != "scripted-model" || req.Authorization != "Bearer sk-scripted" || !req.Stream || !req.IncludeUsage {
		t.Errorf("model %q auth %q stream %v usage %v", req.Model, req.Authorization, req.Stream, req.IncludeUsage)
	}
	if req.MaxTokens == nil || *req.MaxTokens != maxTokens {
		t.Errorf("max_tokens %v, want %d", req.MaxTokens, maxTokens)
	}
	if req.Temperature == nil || *req.Temperature != temperature {
		t.Errorf("temperature %v, want %g", req.Temperature, temperature)
	}
	if got := req.ToolNames(); !slices.Equal(got, tools) {
		t.Errorf("tools %v, want %v", got, tools)
	}
	for _, tl := range req.Tools {
		p := tl.Function.Parameters
		if p["type"] != "object" || p["additionalProperties"] != false || p["properties"] == nil || tl.Function.Description == "" {
			t.Errorf("tool %s schema %v", tl.Function.Name, p)
		}
	}
}

func hasSource(resp *quarryv1.QueryResponse, path string) bool {
	return slices.Contains(sourcePaths(resp), path)
}

func sourcePaths(resp *quarryv1.QueryResponse) []string {
	var out []string
	for _, s := range resp.Sources {
		out = append(out, s.Path)
	}
	return out
}
