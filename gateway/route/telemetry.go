package route

import (
	"context"
	"strings"
	"sync"
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
	queries  metric.Int64Counter
	latency  metric.Float64Histogram
	outcomes sync.Map // outcomeKey → *outcomeSets
	rejects  metric.Int64Counter
	reasons  map[string][]metric.AddOption
}

// Why the fresh search did not confirm a fuzzy candidate: the quarry.reason of the
// rejects metric. A rising share of one reason says what to tune (word_replaced:
// rewordings that swap a subject; top_source_differs: near-duplicate documents).
const (
	rejectUnreadable   = "unreadable_entry"
	rejectSearchFailed = "search_failed"
	rejectGeneration   = "generation_changed"
	rejectRoute        = "route_differs"
	rejectTopSource    = "top_source_differs"
	rejectWordReplaced = "word_replaced"
	rejectNegation     = "negation_differs"
)

func newInstruments() *instruments {
	m := otel.Meter("github.com/quarry-router/quarry/gateway/route")
	q, _ := m.Int64Counter("quarry.gateway.queries",
		metric.WithDescription("Queries answered, by tier, the tier that computed the answer, cache and degraded flags"),
		metric.WithUnit("{query}"))
	l, _ := m.Float64Histogram("quarry.gateway.query.duration",
		metric.WithDescription("Server-side time to answer a query, by tier"), metric.WithUnit("ms"),
		metric.WithExplicitBucketBoundaries(0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000))
	rj, _ := m.Int64Counter("quarry.gateway.fuzzy.rejects",
		metric.WithDescription("Fuzzy cache candidates the fresh search did not confirm, by reason; the question was answered afresh"),
		metric.WithUnit("{candidate}"))
	reasons := map[string][]metric.AddOption{}
	for _, r := range []string{rejectUnreadable, rejectSearchFailed, rejectGeneration, rejectRoute, rejectTopSource, rejectWordReplaced, rejectNegation} {
		reasons[r] = []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(attribute.String("quarry.reason", r)))}
	}
	return &instruments{queries: q, latency: l, rejects: rj, reasons: reasons}
}

// reject counts a fuzzy candidate turned down for reason, one of the reject* kinds.
func (in *instruments) reject(ctx context.Context, reason string) {
	in.rejects.Add(ctx, 1, in.reasons[reason]...)
}

func tierName(t quarryv1.Tier) string {
	return strings.ToLower(strings.TrimPrefix(t.String(), "TIER_"))
}

// querySpan returns the span a query's outcome and stages go on. A call that arrived
// over gRPC has a server span already, and a child span covering the same time would
// only double the spans to build and export (on a T0 answer, half the cost of tracing
// it); an in-process caller gets a gateway.query span of its own, which is a no-op
// when tracing is off. own says whether the caller must end it.
//
// A server span that is not recording was not sampled, and neither would its child be
// (the sampler follows the parent, or decides again on the same trace id): starting
// one anyway cost every unsampled query a second span start, the larger part of what
// tracing at the prod overlay's 10 % costs a T0 answer.
func querySpan(ctx context.Context) (_ context.Context, _ trace.Span, own bool) {
	if s := trace.SpanFromContext(ctx); s.IsRecording() || s.SpanContext().IsValid() {
		return ctx, s, false
	}
	ctx, s := tracer.Start(ctx, "gateway.query")
	return ctx, s, true
}

// Common stage outcomes, built once: an event is added to every traced query.
var (
	outcomeHit  = attribute.String("quarry.outcome", "hit")
	outcomeMiss = attribute.String("quarry.outcome", "miss")
)

// stageEvent marks the end of a stage on the query's span, with attrs beside its
// outcome. Stages without an outcome (normalising the query takes microseconds) are
// left out.
func stageEvent(span trace.Span, name, outcome string, attrs ...attribute.KeyValue) {
	if outcome == "" || !span.IsRecording() {
		return
	}
	o := outcomeMiss
	switch outcome {
	case "hit":
		o = outcomeHit
	case "miss":
	default:
		o = attribute.String("quarry.outcome", outcome)
	}
	span.AddEvent(name, trace.WithAttributes(append([]attribute.KeyValue{o}, attrs...)...))
}

// outcomeKey is what the query metrics are broken down by.
type outcomeKey struct {
	tier, origin        quarryv1.Tier
	fromCache, degraded bool
}

// outcomeSets are the attribute sets of one outcome, built once: building a set sorts
// and hashes its attributes, which would otherwise happen twice per query.
type outcomeSets struct {
	// As slices: one option passed on its own escapes into a slice made per call.
	all  []metric.AddOption
	tier []metric.RecordOption
	// span is the outcome's attributes on the query's span: tier and origin tier, and,
	// for an answer computed in this call, whether it is degraded (from_cache follows
	// from the tier).
	span []attribute.KeyValue
}

func (in *instruments) sets(k outcomeKey) *outcomeSets {
	if s, ok := in.outcomes.Load(k); ok {
		return s.(*outcomeSets)
	}
	tier := attribute.String("quarry.tier", tierName(k.tier))
	origin := attribute.String("quarry.origin_tier", tierName(k.origin))
	degraded := attribute.Bool("quarry.degraded", k.degraded)
	s := &outcomeSets{
		all:  []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(tier, origin, attribute.Bool("quarry.from_cache", k.fromCache), degraded))},
		tier: []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(tier))},
		span: []attribute.KeyValue{tier, origin},
	}
	if !k.fromCache {
		s.span = append(s.span, degraded)
	}
	v, _ := in.outcomes.LoadOrStore(k, s)
	return v.(*outcomeSets)
}

// record puts the outcome of a query on its span and into the metrics.
//
// A cache hit's span carries its tier, origin tier and knowledge base, and no more: with
// otelgrpc's five attributes that is eight, the most the SDK de-duplicates at span end
// without allocating a map (TestCacheHitSpanStaysWithinEightAttributes keeps it so).
// With six of ours, tracing added 7.4 KB to a T0 query; with three, 5.0 KB. The
// generation a hit was looked up under is on its exact_cache event. An answer computed
// in this call also carries its generation, which may be newer than the one looked up,
// and whether it is degraded.
func (in *instruments) record(ctx context.Context, span trace.Span, resp *quarryv1.QueryResponse, elapsed time.Duration) {
	k := outcomeKey{resp.GetTier(), resp.GetOriginTier(), resp.GetFromCache(), resp.GetDegraded()}
	s := in.sets(k)
	if span.IsRecording() {
		// One call: each SetAttributes that outgrows the span's slice reallocates it.
		attrs := make([]attribute.KeyValue, 0, len(s.span)+2)
		attrs = append(append(attrs, s.span...), attribute.String("quarry.kb", resp.GetKnowledgeBase()))
		if !k.fromCache {
			attrs = append(attrs, attribute.Int64("quarry.generation", int64(resp.GetGeneration())))
		}
		span.SetAttributes(attrs...)
	}
	in.queries.Add(ctx, 1, s.all...)
	in.latency.Record(ctx, float64(elapsed.Microseconds())/1000, s.tier...)
}
