package loop

import (
	"context"
	"strings"

	quarryv1 "github.com/quarry-router/quarry/gen/quarry/v1"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/trace"
)

// An answer's trace: its totals on the span of the call that asked for it (the gRPC
// server span), an agent.iteration span per round of the loop holding that round's
// LLM call (the provider's span) and an execute_tool span per tool call (GenAI
// conventions), and an agent.conclude span when the loop stopped and the model answers
// from what it gathered.
var tracer = otel.Tracer("github.com/quarry-router/quarry/services/agent/loop")

// answerSpan returns the span an answer's totals go on: the server span of the call,
// or, for an in-process caller, an agent.answer span of its own (own says the caller
// must end it).
func answerSpan(ctx context.Context, tier quarryv1.Tier) (_ context.Context, _ trace.Span, own bool) {
	if s := trace.SpanFromContext(ctx); s.IsRecording() {
		return ctx, s, false
	}
	ctx, s := tracer.Start(ctx, "agent.answer", trace.WithAttributes(tierAttr(tier)))
	return ctx, s, true
}

func tierAttr(t quarryv1.Tier) attribute.KeyValue {
	return attribute.String("quarry.tier", strings.ToLower(strings.TrimPrefix(t.String(), "TIER_")))
}

// record puts an answer's totals on its span.
func (r *run) record(span trace.Span) {
	if !span.IsRecording() {
		return
	}
	t := r.trace
	attrs := []attribute.KeyValue{
		tierAttr(r.spec.tier),
		attribute.Int("quarry.llm.calls", int(t.GetCalls())),
		attribute.Int("quarry.agent.iterations", int(t.GetIterations())),
		attribute.Int("quarry.agent.tool_calls", len(t.GetToolCalls())),
		attribute.String("quarry.agent.stop_reason", t.GetStopReason()),
		attribute.Bool("quarry.degraded", r.degraded),
		// How often the chat was shortened to fit the model's context window, and by
		// how many characters (see shrink).
		attribute.Int("quarry.agent.context_trims", r.trims),
		attribute.Int("quarry.agent.context_trimmed_chars", r.trimmedChars),
		// Tool calls not run for being past -loop-max-tool-calls-per-turn (each
		// iteration span that had some counts its own).
		attribute.Int("quarry.agent.tool_calls_over_limit", r.overLimitCalls),
	}
	// A provider that reported no usage (a server streaming without it) gave 0 and 0:
	// counts it did not give are left out, as on each chat's span.
	if t.GetPromptTokens() != 0 || t.GetCompletionTokens() != 0 {
		attrs = append(attrs,
			semconv.GenAIUsageInputTokens(int(t.GetPromptTokens())),
			semconv.GenAIUsageOutputTokens(int(t.GetCompletionTokens())))
	}
	if t.GetModel() != "" {
		attrs = append(attrs, semconv.GenAIResponseModel(t.GetModel()))
	}
	span.SetAttributes(attrs...)
}

// startIteration starts the span of one round of the loop: a call and its tools.
func (r *run) startIteration(ctx context.Context, step int) (context.Context, trace.Span) {
	return tracer.Start(ctx, "agent.iteration", trace.WithAttributes(tierAttr(r.spec.tier), attribute.Int("quarry.agent.iteration", step)))
}

// startTool starts the span of one tool call the model asked for.
func startTool(ctx context.Context, tc ToolCall) (context.Context, trace.Span) {
	return tracer.Start(ctx, "execute_tool "+tc.Name, trace.WithAttributes(
		semconv.GenAIOperationNameExecuteTool, semconv.GenAIToolName(tc.Name), semconv.GenAIToolCallID(tc.ID)))
}

// endTool ends a tool call's span: skipped says why it was not run, if it was not.
func endTool(span trace.Span, skipped string, err error) {
	switch {
	case skipped != "":
		span.SetAttributes(attribute.String("quarry.tool.skipped", skipped))
	case err != nil:
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
