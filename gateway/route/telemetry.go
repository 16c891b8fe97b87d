package route

import (
	"context"
	"strings"
	"time"

	quarryv1 "github.com/quarry-router/quarry/gen/quarry/v1"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

var tracer = otel.Tracer("github.com/quarry-router/quarry/gateway/route")

// instruments are the gateway's query metrics: the tier mix and cache outcomes, and
// latency per tier. They are no-ops until telemetry is set up.
type instruments struct {
	queries metric.Int64Counter
	latency metric.Float64Histogram
}

func newInstruments() *instruments {
	m := otel.Meter("github.com/quarry-router/quarry/gateway/route")
	q, _ := m.Int64Counter("quarry.gateway.queries",
		metric.WithDescription("Queries answered, by tier, the tier that computed the answer, cache and degraded flags"),
		metric.WithUnit("{query}"))
	l, _ := m.Float64Histogram("quarry.gateway.query.duration",
		metric.WithDescription("Server-side time to answer a query, by tier"), metric.WithUnit("ms"),
		metric.WithExplicitBucketBoundaries(0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000))
	return &instruments{queries: q, latency: l}
}

func tierName(t quarryv1.Tier) string {
	return strings.ToLower(strings.TrimPrefix(t.String(), "TIER_"))
}

// record puts the outcome of a query on its span and into the metrics.
func (in *instruments) record(ctx context.Context, span trace.Span, resp *quarryv1.QueryResponse, elapsed time.Duration) {
	tier, origin := tierName(resp.GetTier()), tierName(resp.GetOriginTier())
	attrs := []attribute.KeyValue{
		attribute.String("quarry.tier", tier),
		attribute.String("quarry.origin_tier", origin),
		attribute.Bool("quarry.from_cache", resp.GetFromCache()),
		attribute.Bool("quarry.degraded", resp.GetDegraded()),
	}
	if span.IsRecording() {
		span.SetAttributes(append(attrs, attribute.String("quarry.kb", resp.GetKnowledgeBase()),
			attribute.Int64("quarry.generation", int64(resp.GetGeneration())))...)
	}
	in.queries.Add(ctx, 1, metric.WithAttributes(attrs...))
	in.latency.Record(ctx, float64(elapsed.Microseconds())/1000, metric.WithAttributes(attrs[0]))
}
