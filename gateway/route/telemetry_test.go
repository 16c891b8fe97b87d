package route

import (
	"context"
	"fmt"
	"strings"
	"testing"

	quarryv1 "github.com/quarry-router/quarry/gen/quarry/v1"
	"github.com/quarry-router/quarry/platform/telemetry/telemetrytest"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
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

// TestQueriesAreCountedByTierAndCacheOutcomeAndTimedPerTier: every answered query adds
// one to quarry.gateway.queries under its tier, the tier that computed it, whether it
// came from the cache and whether it is degraded, and one measurement to
// quarry.gateway.query.duration under its tier alone.
func TestQueriesAreCountedByTierAndCacheOutcomeAndTimedPerTier(t *testing.T) {
	reader := telemetrytest.Metrics()
	h := newHarness(t, nil)
	before := queryMetrics(t, reader)
	for _, q := range []struct {
		query        string
		tier, origin quarryv1.Tier
		fromCache    bool
	}{
		{"How do I rotate keys on node 3?", quarryv1.Tier_TIER_DIRECT, quarryv1.Tier_TIER_DIRECT, false},
		{"How do I rotate keys on node 3?", quarryv1.Tier_TIER_EXACT_CACHE, quarryv1.Tier_TIER_DIRECT, true},
		{"rotate the keys on node 3", quarryv1.Tier_TIER_FUZZY_CACHE, quarryv1.Tier_TIER_DIRECT, true},
		{"lasagna recipe", quarryv1.Tier_TIER_OUT_OF_DOMAIN, quarryv1.Tier_TIER_OUT_OF_DOMAIN, false},
	} {
		wantTier(t, h.query(q.query), q.tier, q.origin, q.fromCache)
	}
	after := queryMetrics(t, reader)
	for k, want := range map[string]int64{
		"queries direct/direct/false/false":               1,
		"queries exact_cache/direct/true/false":           1,
		"queries fuzzy_cache/direct/true/false":           1,
		"queries out_of_domain/out_of_domain/false/false": 1,
		"duration direct":                                 1,
		"duration exact_cache":                            1,
		"duration fuzzy_cache":                            1,
		"duration out_of_domain":                          1,
	} {
		if got := after[k] - before[k]; got != want {
			t.Errorf("%s rose by %d, want %d (before %v, after %v)", k, got, want, before, after)
		}
	}
	for k := range after {
		if strings.HasPrefix(k, "duration ") && strings.Contains(k, "/") {
			t.Errorf("query duration broken down by more than the tier: %s", k)
		}
	}
}

// queryMetrics reads the query counter, keyed "queries tier/origin/from_cache/degraded",
// and the duration histogram's counts, keyed "duration tier" (with "/attr=value" for any
// other attribute).
func queryMetrics(t *testing.T, r *sdkmetric.ManualReader) map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	str := func(s attribute.Set, k string) string { v, _ := s.Value(attribute.Key(k)); return v.String() }
	out := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				if m.Name != "quarry.gateway.queries" {
					continue
				}
				for _, p := range d.DataPoints {
					out[fmt.Sprintf("queries %s/%s/%s/%s", str(p.Attributes, "quarry.tier"), str(p.Attributes, "quarry.origin_tier"),
						str(p.Attributes, "quarry.from_cache"), str(p.Attributes, "quarry.degraded"))] += p.Value
				}
			case metricdata.Histogram[float64]:
				if m.Name != "quarry.gateway.query.duration" {
					continue
				}
				for _, p := range d.DataPoints {
					k := "duration " + str(p.Attributes, "quarry.tier")
					for _, kv := range p.Attributes.ToSlice() {
						if kv.Key != "quarry.tier" {
							k += "/" + string(kv.Key) + "=" + kv.Value.String()
						}
					}
					out[k] += int64(p.Count)
				}
			}
		}
	}
	return out
}
