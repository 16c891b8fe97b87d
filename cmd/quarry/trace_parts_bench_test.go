package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	quarryv1 "github.com/quarry-router/quarry/gen/quarry/v1"
	"github.com/quarry-router/quarry/platform/telemetry"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"
	"go.opentelemetry.io/otel/trace/noop"
)

// BenchmarkTracingCostParts tells apart what tracing a cached answer (T0, one span:
// the gateway's server span) costs, by asking the same question in six modes, in
// interleaved rounds against one running system:
//
//   - off: the API's no-op tracer;
//
//   - unsampled: the OpenTelemetry SDK sampling nothing (a ratio of 0): what an SDK
//     provider costs a query it does not trace, at any sampling ratio;
//
//   - free: a span that says it is recording and keeps nothing, so otelgrpc and the
//     gateway build and hand over its attributes and event: the cost of the code
//     around a span;
//
//   - sdk: the OpenTelemetry SDK's span with a processor that drops it: the cost of
//     the SDK's span itself;
//
//   - sdk-full: the SDK's spans with the batching processor and OTLP export to a
//     collector process (QUARRY_TRACES_SDK=true);
//
//   - full: the spans of platform/telemetry (span.go) through the same pipeline, as
//     services and BenchmarkTracingOverhead run it.
//
//     go test -run '^$' -bench TracingCostParts -benchtime 2000x ./cmd/quarry
func BenchmarkTracingCostParts(b *testing.B) {
	if b.N == 1 {
		return
	}
	col := startCollectorProcess(b)
	b.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", col.endpoint)
	b.Setenv("OTEL_METRICS_EXPORTER", "none")
	b.Setenv("OTEL_TRACES_SAMPLER", "parentbased_always_on")
	modes := &modeProvider{}
	otel.SetTracerProvider(modes)
	tel, err := telemetry.Setup(context.Background(), telemetry.Config{Service: "quarry-bench"})
	if err != nil {
		b.Fatal(err)
	}
	// The same pipeline with the SDK's spans, for the comparison.
	b.Setenv("QUARRY_TRACES_SDK", "true")
	telSDK, err := telemetry.Setup(context.Background(), telemetry.Config{Service: "quarry-bench"})
	if err != nil {
		b.Fatal(err)
	}
	names := []string{"off", "unsampled", "free", "sdk", "sdk-full", "full"}
	modes.tps = []trace.TracerProvider{noop.NewTracerProvider(),
		sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(0))), sdktrace.WithSpanProcessor(dropProcessor{})),
		freeProvider{},
		sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(dropProcessor{})), telSDK.TracerProvider(), tel.TracerProvider()}
	otel.SetTracerProvider(modes)
	b.Cleanup(func() {
		telSDK.Shutdown(context.Background())
		tel.Shutdown(context.Background())
		otel.SetTracerProvider(noop.NewTracerProvider())
	})

	ctx, cancel := context.WithCancel(context.Background())
	sys, err := start(ctx, upConfig{Gateway: "127.0.0.1:0", Search: "127.0.0.1:0", Agent: "127.0.0.1:0", KBRoot: "../../examples/kb"},
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		cancel()
		b.Fatal(err)
	}
	b.Cleanup(func() { cancel(); <-sys.done })
	c, _ := dialGateway(b, sys.Gateway.String())
	// A question the search answers directly, whose answer the cache then keeps: an
	// answer that needed the LLM, which this system has not, is not kept.
	qs, err := readQuestions("../../examples/questions.jsonl")
	if err != nil {
		b.Fatal(err)
	}
	var req *quarryv1.QueryRequest
	for _, q := range qs {
		r := &quarryv1.QueryRequest{KnowledgeBase: "platform", Query: q}
		if a, err := c.Query(context.Background(), r); err == nil && a.GetTier() == quarryv1.Tier_TIER_DIRECT {
			req = r
			break
		}
	}
	if req == nil {
		b.Fatal("no example question routes DIRECT")
	}
	run := func(mode, n int) (lat []time.Duration, cpu time.Duration) {
		modes.mode.Store(int32(mode))
		before := cpuTime()
		for len(lat) < n {
			t := time.Now()
			r, err := c.Query(context.Background(), req)
			if err != nil {
				b.Fatal(err)
			}
			switch r.GetTier() {
			case quarryv1.Tier_TIER_EXACT_CACHE:
				lat = append(lat, time.Since(t))
			case quarryv1.Tier_TIER_DIRECT:
				// The first call of all, or the cached answer expired (its time to live
				// is shorter than the benchmark): answered and cached again, not counted.
			default:
				b.Fatalf("mode %s: answered by %v, want EXACT_CACHE", names[mode], r.GetTier())
			}
		}
		if err := tel.ForceFlush(context.Background()); err != nil {
			b.Fatal(err)
		}
		if err := telSDK.ForceFlush(context.Background()); err != nil {
			b.Fatal(err)
		}
		return lat, cpuTime() - before
	}
	for m := range names {
		run(m, 2000) // warm-up
	}
	lat := make([][]time.Duration, len(names))
	cpu := make([][]float64, len(names))
	const rounds = 30
	b.ResetTimer()
	for r := range rounds {
		for i := range names {
			m := (i + r) % len(names) // each mode goes first in turn
			l, c := run(m, b.N)
			lat[m] = append(lat[m], l...)
			cpu[m] = append(cpu[m], us(c)/float64(b.N))
		}
	}
	b.StopTimer()
	fmt.Printf("tracing a cached answer, by part: %d rounds × %d calls per mode\n", rounds, b.N)
	for m, name := range names {
		slices.Sort(lat[m])
		fmt.Printf("%-9s p50 %6.1f p90 %6.1f p99 %6.1f µs (p50 %+5.1f µs, p99 %+5.1f %% against off); CPU per call %6.1f µs (median of rounds)\n",
			name, us(quantile(lat[m], 0.5)), us(quantile(lat[m], 0.9)), us(quantile(lat[m], 0.99)),
			us(quantile(lat[m], 0.5)-quantile(lat[0], 0.5)), 100*(us(quantile(lat[m], 0.99))/us(quantile(lat[0], 0.99))-1), median(cpu[m]))
	}
}

// dropProcessor drops every span as it ends.
type dropProcessor struct{}

func (dropProcessor) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (dropProcessor) OnEnd(sdktrace.ReadOnlySpan)                     {}
func (dropProcessor) Shutdown(context.Context) error                  { return nil }
func (dropProcessor) ForceFlush(context.Context) error                { return nil }

// freeProvider's spans are recording and sampled, and keep nothing.
type freeProvider struct{ embedded.TracerProvider }

func (freeProvider) Tracer(string, ...trace.TracerOption) trace.Tracer { return freeTracer{} }

type freeTracer struct{ embedded.Tracer }

var freeIDs atomic.Uint64

func (freeTracer) Start(ctx context.Context, _ string, _ ...trace.SpanStartOption) (context.Context, trace.Span) {
	n := freeIDs.Add(1)
	var tid trace.TraceID
	var sid trace.SpanID
	for i := range 8 {
		tid[i], sid[i] = byte(n>>(8*i)), byte(n>>(8*i))
	}
	tid[15] = 1 // never all zero
	s := &freeSpan{sc: trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled})}
	return trace.ContextWithSpan(ctx, s), s
}

type freeSpan struct {
	embedded.Span
	sc trace.SpanContext
}

func (*freeSpan) End(...trace.SpanEndOption)              {}
func (*freeSpan) AddEvent(string, ...trace.EventOption)   {}
func (*freeSpan) AddLink(trace.Link)                      {}
func (*freeSpan) IsRecording() bool                       { return true }
func (*freeSpan) RecordError(error, ...trace.EventOption) {}
func (s *freeSpan) SpanContext() trace.SpanContext        { return s.sc }
func (*freeSpan) SetStatus(codes.Code, string)            {}
func (*freeSpan) SetName(string)                          {}
func (*freeSpan) SetAttributes(...attribute.KeyValue)     {}
func (*freeSpan) TracerProvider() trace.TracerProvider    { return freeProvider{} }
