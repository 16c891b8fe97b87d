package route

import (
	"context"
	"testing"

	quarryv1 "github.com/quarry-router/quarry/gen/quarry/v1"
	"github.com/quarry-router/quarry/platform/telemetry/telemetrytest"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

func TestQueryOutcomeGoesOnOneSpanPerQuery(t *testing.T) {
	tp, exp := telemetrytest.Tracing()
	tests := []struct {
		name     string
		caller   bool   // the query arrives inside a recording span, as over gRPC
		wantSpan string // the span that carries the outcome
	}{
		{"a traced call's own span carries the outcome", true, "server"},
		{"an in-process call without a span gets gateway.query", false, "gateway.query"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, nil)
			exp.Reset()
			var tiers []quarryv1.Tier
			for range 2 { // computed, then from the exact cache
				ctx := context.Background()
				end := func() {}
				if tt.caller {
					c, s := tp.Tracer("test").Start(ctx, "server")
					ctx, end = c, func() { s.End() }
				}
				resp, err := h.router.Query(ctx, &quarryv1.QueryRequest{KnowledgeBase: "kb", Query: "How do I rotate the keys?"}, nil)
				end()
				if err != nil {
					t.Fatal(err)
				}
				tiers = append(tiers, resp.GetTier())
			}
			spans := exp.GetSpans()
			if len(spans) != 2 {
				t.Fatalf("%d spans for two queries, want 2 (one each): %v", len(spans), spanNames(spans))
			}
			for i, s := range spans {
				if s.Name != tt.wantSpan {
					t.Errorf("query %d's span is %q, want %q", i, s.Name, tt.wantSpan)
				}
				tier := ""
				for _, a := range s.Attributes {
					if a.Key == "quarry.tier" {
						tier = a.Value.AsString()
					}
				}
				if want := tierName(tiers[i]); tier != want {
					t.Errorf("query %d's span has quarry.tier %q, want %q", i, tier, want)
				}
				exact, gen := "", int64(-1)
				for _, e := range s.Events {
					if e.Name != "exact_cache" {
						continue
					}
					for _, a := range e.Attributes {
						switch a.Key {
						case "quarry.outcome":
							exact = a.Value.AsString()
						case "quarry.generation":
							gen = a.Value.AsInt64()
						}
					}
				}
				if want := []string{"miss", "hit"}[i]; exact != want || gen != 1 {
					t.Errorf("query %d's exact_cache event says %q at generation %d, want %q at 1", i, exact, gen, want)
				}
			}
		})
	}
}

func spanNames(spans tracetest.SpanStubs) []string {
	var names []string
	for _, s := range spans {
		names = append(names, s.Name)
	}
	return names
}

// querySpan reuses the caller's span whenever there is one: recording, or valid and
// not sampled (a sampled-out server span, whose child would be sampled out too).
func TestQuerySpanReusesTheCallersSpan(t *testing.T) {
	tp, _ := telemetrytest.Tracing()
	sampledOut := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}, // no sampled flag
	}))
	recording, s := tp.Tracer("test").Start(context.Background(), "server")
	defer s.End()
	tests := []struct {
		name    string
		ctx     context.Context
		wantOwn bool
	}{
		{"a recording server span", recording, false},
		{"a sampled-out server span", sampledOut, false},
		{"an in-process call without a span", context.Background(), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, span, own := querySpan(tt.ctx)
			if own {
				defer span.End()
			}
			if own != tt.wantOwn {
				t.Fatalf("own = %v, want %v", own, tt.wantOwn)
			}
			if !own && (!span.SpanContext().Equal(trace.SpanContextFromContext(tt.ctx)) || ctx != tt.ctx) {
				t.Errorf("querySpan started a span under the caller's instead of using it")
			}
		})
	}
}
