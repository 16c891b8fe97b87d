package loop

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"

	quarryv1 "github.com/quarry-router/quarry/gen/quarry/v1"
	"github.com/quarry-router/quarry/platform/telemetry/telemetrytest"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// TestAnswersAreTraced: an answer's totals (tier, LLM calls, iterations, tool calls,
// stop reason, degraded, GenAI token counts and model) go on the span of the call
// that asked for it, or on an agent.answer span for an in-process caller; each round is
// an agent.iteration span with its tier and number, holding an execute_tool span per
// tool call (a call not run says why), and a loop that stops answers in an
// agent.conclude span with its stop reason. T3 and T4 alike.
func TestAnswersAreTraced(t *testing.T) {
	tp, exp := telemetrytest.Tracing()
	type span struct {
		name, parent string
		attrs        map[string]string
	}
	tests := []struct {
		name   string
		caller bool // the answer is asked for inside a recording span, as over gRPC
		turns  []turn
		req    func(*memKB) *quarryv1.AnswerRequest
		want   []span // in the order they end
	}{
		{"T3 in one call, in process", false, []turn{say("Check the error budget.")}, t3Req, []span{
			{"agent.iteration", "agent.answer", map[string]string{"quarry.tier": "single_llm", "quarry.agent.iteration": "1"}},
			{"agent.answer", "", map[string]string{"quarry.tier": "single_llm", "quarry.llm.calls": "1", "quarry.agent.iterations": "0",
				"quarry.agent.tool_calls": "0", "quarry.agent.stop_reason": "answered", "quarry.degraded": "false",
				"gen_ai.usage.input_tokens": "100", "gen_ai.usage.output_tokens": "10", "gen_ai.response.model": "fake-1"}},
		}},
		// A provider that reports no usage: no token counts, rather than 0 and 0.
		{"T3 without usage", false, []turn{func(ctx context.Context, req ChatRequest, onDelta func(string) error) (*ChatResponse, error) {
			resp, err := say("Check the error budget.")(ctx, req, onDelta)
			resp.PromptTokens, resp.CompletionTokens = 0, 0
			return resp, err
		}}, t3Req, []span{
			{"agent.iteration", "agent.answer", nil},
			{"agent.answer", "", map[string]string{"quarry.llm.calls": "1", "gen_ai.usage.input_tokens": "", "gen_ai.usage.output_tokens": ""}},
		}},
		{"T3 reading one more document, in the caller's span", true, []turn{use(`read_document {"path":"deploy/rollback.md"}`), say("Roll back.")}, t3Req, []span{
			{"execute_tool read_document", "agent.iteration", map[string]string{"gen_ai.tool.name": "read_document", "gen_ai.tool.call.id": "c0", "gen_ai.operation.name": "execute_tool"}},
			{"agent.iteration", "server", map[string]string{"quarry.tier": "single_llm", "quarry.agent.iteration": "1"}},
			{"agent.iteration", "server", map[string]string{"quarry.tier": "single_llm", "quarry.agent.iteration": "2"}},
			{"server", "", map[string]string{"quarry.tier": "single_llm", "quarry.llm.calls": "2", "quarry.agent.iterations": "1",
				"quarry.agent.tool_calls": "1", "quarry.agent.stop_reason": "answered", "gen_ai.usage.input_tokens": "200", "gen_ai.usage.output_tokens": "15"}},
		}},
		{"T4 that repeats a call and concludes", true, []turn{
			use(`read_document {"path":"ops/oncall.md"}`), use(`read_document { "path" : "ops/oncall.md" }`), say("From what I read."),
		}, t4Req, []span{
			{"execute_tool read_document", "agent.iteration", map[string]string{"gen_ai.tool.name": "read_document"}},
			{"agent.iteration", "server", map[string]string{"quarry.tier": "agentic", "quarry.agent.iteration": "1"}},
			{"execute_tool read_document", "agent.iteration", map[string]string{"quarry.tool.skipped": "loop_detected"}},
			{"agent.iteration", "server", map[string]string{"quarry.tier": "agentic", "quarry.agent.iteration": "2"}},
			{"agent.conclude", "server", map[string]string{"quarry.agent.stop_reason": "loop_detected"}},
			{"server", "", map[string]string{"quarry.tier": "agentic", "quarry.llm.calls": "3", "quarry.agent.iterations": "2",
				"quarry.agent.tool_calls": "2", "quarry.agent.stop_reason": "loop_detected", "quarry.degraded": "false"}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, testConfig(), tt.turns...)
			exp.Reset()
			ctx := context.Background()
			var server trace.Span
			if tt.caller {
				ctx, server = tp.Tracer("test").Start(ctx, "server")
			}
			_, err := h.answer(t, ctx, tt.req(h.kb))
			if server != nil {
				server.End()
			}
			if err != nil {
				t.Fatal(err)
			}
			spans := exp.GetSpans()
			byID := map[trace.SpanID]tracetest.SpanStub{}
			for _, s := range spans {
				byID[s.SpanContext.SpanID()] = s
			}
			var got []string
			for _, s := range spans {
				got = append(got, s.Name)
			}
			var want []string
			for _, w := range tt.want {
				want = append(want, w.name)
			}
			if !slices.Equal(got, want) {
				t.Fatalf("spans %v, want %v", got, want)
			}
			for i, w := range tt.want {
				s := spans[i]
				parent := ""
				if p, ok := byID[s.Parent.SpanID()]; ok {
					parent = p.Name
				}
				if parent != w.parent {
					t.Errorf("span %d %s: parent %q, want %q", i, s.Name, parent, w.parent)
				}
				attrs := map[string]string{}
				for _, a := range s.Attributes {
					attrs[string(a.Key)] = a.Value.String()
				}
				for k, v := range w.attrs {
					if attrs[k] != v {
						t.Errorf("span %d %s: %s=%q, want %q (%v)", i, s.Name, k, attrs[k], v, attrs)
					}
				}
			}
		})
	}
}

func t3Req(kb *memKB) *quarryv1.AnswerRequest { return t3Request(kb) }

func t4Req(*memKB) *quarryv1.AnswerRequest { return t4Request() }

// TestToolCallsPastTheLimitAreCounted: the calls of a turn past
// -loop-max-tool-calls-per-turn get no execute_tool span each (a turn may ask for
// hundreds); the iteration span and the answer's totals count them.
func TestToolCallsPastTheLimitAreCounted(t *testing.T) {
	tp, exp := telemetrytest.Tracing()
	cfg := testConfig()
	cfg.MaxToolCallsPerTurn = 2
	h := newHarness(t, cfg, use(`search {"query":"a"}`, `search {"query":"b"}`, `search {"query":"c"}`, `search {"query":"d"}`, `search {"query":"e"}`),
		use(`search {"query":"c"}`), say("Done."))
	exp.Reset()
	ctx, server := tp.Tracer("test").Start(context.Background(), "server")
	_, err := h.answer(t, ctx, t4Request())
	server.End()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	over := map[string]string{}
	for _, s := range exp.GetSpans() {
		names = append(names, s.Name)
		for _, a := range s.Attributes {
			if a.Key == "quarry.agent.tool_calls_over_limit" {
				over[s.Name+"@"+fmt.Sprint(len(names))] = a.Value.String()
			}
		}
	}
	want := []string{"execute_tool search", "execute_tool search", "agent.iteration", "execute_tool search", "agent.iteration", "agent.iteration", "server"}
	if !slices.Equal(names, want) {
		t.Fatalf("spans %v, want %v", names, want)
	}
	if w := map[string]string{"agent.iteration@3": "3", "server@7": "3"}; !maps.Equal(over, w) {
		t.Errorf("quarry.agent.tool_calls_over_limit on %v, want %v", over, w)
	}
}
