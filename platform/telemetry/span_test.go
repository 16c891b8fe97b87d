package telemetry

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quarry-router/quarry/platform/telemetry/otlptest"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
)

// countingIDs makes the same ids in the same order for each provider given one, so
// that two providers' spans can be compared field by field. The low half of a trace
// id, which the ratio sampler reads, is spread over its range.
type countingIDs struct {
	mu sync.Mutex
	n  uint64
}

func (g *countingIDs) next() uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.n++
	return g.n
}

func (g *countingIDs) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	var tid trace.TraceID
	n := g.next()
	binary.BigEndian.PutUint64(tid[:8], n)
	binary.BigEndian.PutUint64(tid[8:], n*0x9E3779B97F4A7C15)
	return tid, g.NewSpanID(ctx, tid)
}

func (g *countingIDs) NewSpanID(context.Context, trace.TraceID) trace.SpanID {
	var sid trace.SpanID
	binary.BigEndian.PutUint64(sid[:], g.next())
	return sid
}

var scriptStart = time.Unix(1_790_000_000, 0)

// at is a time in the script, i microseconds after its start.
func at(i int) time.Time { return scriptStart.Add(time.Duration(i) * time.Microsecond) }

// spanScript does to tp what Quarry's code and its instrumentation do to spans, and the
// edges besides: duplicate and invalid attributes, the attribute, event and link
// limits, statuses set twice, errors, panics, links, remote and sampled-out parents,
// new roots, spans ended twice and used after they ended.
func spanScript(tp trace.TracerProvider) {
	ctx := context.Background()
	grpcTracer := tp.Tracer("go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc",
		trace.WithInstrumentationVersion("0.72.0"), trace.WithSchemaURL("https://opentelemetry.io/schemas/1.43.0"))
	quarry := tp.Tracer("github.com/quarry-router/quarry/gateway/route", trace.WithInstrumentationAttributes(attribute.String("quarry.scope", "x")))
	unnamed := tp.Tracer("")

	// A server span as otelgrpc makes it under a caller's sampled span (parent-based
	// sampling keeps it and what is under it), with a cache hit's attributes and event.
	caller := trace.ContextWithRemoteSpanContext(ctx, trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{0xca}, SpanID: trace.SpanID{0x11}, TraceFlags: trace.FlagsSampled, Remote: true}))
	sctx, server := grpcTracer.Start(caller, "quarry.v1.QueryService/Query", trace.WithSpanKind(trace.SpanKindServer), trace.WithTimestamp(at(0)),
		trace.WithAttributes(attribute.String("rpc.method", "quarry.v1.QueryService/Query"), attribute.String("rpc.system.name", "grpc")))
	server.SetAttributes(attribute.String("server.address", "127.0.0.1"), attribute.Int("server.port", 7700))
	server.SetAttributes(attribute.String("quarry.tier", "EXACT_CACHE"), attribute.String("quarry.kb", "demo"), attribute.String("quarry.tier", "FUZZY_CACHE"))
	server.AddEvent("exact_cache", trace.WithTimestamp(at(3)), trace.WithAttributes(attribute.Int64("quarry.generation", 7), attribute.Int64("quarry.generation", 8)))
	server.SetAttributes(attribute.String("", "an empty key is invalid"), attribute.String("rpc.response.status_code", "OK"))

	// A child with a new name, links, and statuses that are not all kept.
	cctx, child := quarry.Start(sctx, "search.search", trace.WithTimestamp(at(5)),
		trace.WithLinks(trace.Link{SpanContext: server.SpanContext(), Attributes: []attribute.KeyValue{attribute.String("why", "hedge"), attribute.String("why", "retry")}},
			trace.Link{}, // a link to nothing, with nothing, is left out
		))
	child.SetName("search.resolve")
	child.SetStatus(codes.Ok, "kept without its description")
	child.SetStatus(codes.Error, "not after Ok")
	child.AddLink(trace.Link{SpanContext: trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{9}, SpanID: trace.SpanID{9}, Remote: true})})
	_, grandchild := unnamed.Start(cctx, "bm25", trace.WithSpanKind(trace.SpanKindClient), trace.WithTimestamp(at(6)))
	grandchild.RecordError(errors.New("meili: timeout"), trace.WithTimestamp(at(7)))
	grandchild.RecordError(nil)
	grandchild.SetStatus(codes.Error, "meili: timeout")
	grandchild.SetStatus(codes.Unset, "ignored")
	grandchild.End(trace.WithTimestamp(at(8)))
	grandchild.SetAttributes(attribute.Bool("after.end", true)) // ignored
	grandchild.End(trace.WithTimestamp(at(99)))                 // ignored
	child.End(trace.WithTimestamp(at(9)))

	// Past the limits: 140 attributes (and one of the first set again), 130 events (the
	// oldest go), 130 links, an event with 140 attributes.
	_, big := quarry.Start(sctx, "limits", trace.WithTimestamp(at(10)))
	many := make([]attribute.KeyValue, 140)
	for i := range many {
		many[i] = attribute.Int(fmt.Sprintf("k%03d", i), i)
	}
	big.SetAttributes(many[:100]...)
	big.SetAttributes(attribute.Int("k000", -1))
	big.SetAttributes(many[100:]...)
	big.SetAttributes(attribute.Int("k001", -2), attribute.Int("k139", -3))
	for i := range 130 {
		big.AddEvent(fmt.Sprintf("e%d", i), trace.WithTimestamp(at(11+i)))
		big.AddLink(trace.Link{SpanContext: trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{byte(i + 1)}})})
	}
	big.AddEvent("wide", trace.WithTimestamp(at(200)), trace.WithAttributes(many...))
	big.End(trace.WithTimestamp(at(201)))
	server.SetStatus(codes.Error, "search: unavailable")
	server.End(trace.WithTimestamp(at(202)))

	// A caller's remote parent with a trace state, and a new root linked to it.
	ts, _ := trace.ParseTraceState("vendor=1")
	remote := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{0xab, 1}, SpanID: trace.SpanID{0xcd}, TraceFlags: trace.FlagsSampled, TraceState: ts, Remote: true})
	rctx := trace.ContextWithRemoteSpanContext(ctx, remote)
	_, s := grpcTracer.Start(rctx, "from.caller", trace.WithSpanKind(trace.SpanKindServer), trace.WithTimestamp(at(300)))
	s.End(trace.WithTimestamp(at(301)))
	_, s = quarry.Start(rctx, "new.root", trace.WithNewRoot(), trace.WithTimestamp(at(302)), trace.WithLinks(trace.Link{SpanContext: remote}))
	s.End(trace.WithTimestamp(at(303)))
	// A caller that did not sample: parent-based sampling records nothing under it.
	unsampled := trace.ContextWithRemoteSpanContext(ctx, trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{0xee}, SpanID: trace.SpanID{0xee}, Remote: true}))
	uctx, s := grpcTracer.Start(unsampled, "unsampled", trace.WithTimestamp(at(304)))
	_, c := quarry.Start(uctx, "unsampled.child")
	c.SetAttributes(attribute.Bool("x", true))
	seen := []attribute.KeyValue{
		attribute.Bool("unsampled.recording", s.IsRecording() || c.IsRecording()),
		attribute.String("unsampled.trace", c.SpanContext().TraceID().String()),
		attribute.Bool("unsampled.sampled", c.SpanContext().IsSampled()),
	}
	c.End()
	s.End()

	// Roots the ratio sampler decides on (the providers sample a half of new traces).
	for i := range 20 {
		rctx, r := quarry.Start(ctx, fmt.Sprintf("ratio-%d", i), trace.WithTimestamp(at(400+i)), trace.WithSpanKind(trace.SpanKindProducer))
		_, c := quarry.Start(rctx, "ratio-child", trace.WithTimestamp(at(400+i)), trace.WithSpanKind(trace.SpanKindConsumer))
		c.End(trace.WithTimestamp(at(401 + i)))
		r.End(trace.WithTimestamp(at(402 + i)))
	}

	// A panic under a deferred End is recorded (the event's time is the clock's) and
	// goes on.
	func() {
		defer func() { seen = append(seen, attribute.Bool("panic.went_on", recover() != nil)) }()
		_, p := quarry.Start(caller, "panicked", trace.WithTimestamp(at(500)))
		defer p.End(trace.WithTimestamp(at(501)))
		panic("kaboom")
	}()

	// What the script saw of the spans, on a span of its own for the comparison.
	_, s = quarry.Start(caller, "seen", trace.WithTimestamp(at(600)), trace.WithAttributes(seen...))
	s.SetAttributes(attribute.Bool("seen.recording", s.IsRecording()))
	s.End(trace.WithTimestamp(at(601)))
	s.SetAttributes(attribute.Bool("ended.recording", s.IsRecording())) // ignored, and false
	if s.IsRecording() {
		panic("a span records after End")
	}
}

// TestSpansMatchTheSDKs: the spans of span.go reach a collector as the SDK's spans do
// through otlptrace, the stock exporter, for the same calls: names, kinds, ids and
// parents, times, attributes as the SDK de-duplicates and limits them, events, links,
// statuses, sampling, and what is dropped and counted.
func TestSpansMatchTheSDKs(t *testing.T) {
	// The limits as the environment sets them, which both providers read: the defaults,
	// and limits that the script's spans exceed or that drop everything.
	for _, tt := range []struct {
		name string
		env  map[string]string
	}{
		{"default limits", nil},
		{"small limits", map[string]string{"OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT": "3", "OTEL_SPAN_EVENT_COUNT_LIMIT": "2",
			"OTEL_SPAN_LINK_COUNT_LIMIT": "1", "OTEL_EVENT_ATTRIBUTE_COUNT_LIMIT": "1", "OTEL_LINK_ATTRIBUTE_COUNT_LIMIT": "1"}},
		{"zero limits", map[string]string{"OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT": "0", "OTEL_SPAN_EVENT_COUNT_LIMIT": "0",
			"OTEL_SPAN_LINK_COUNT_LIMIT": "0", "OTEL_EVENT_ATTRIBUTE_COUNT_LIMIT": "0", "OTEL_LINK_ATTRIBUTE_COUNT_LIMIT": "0"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			spansMatchTheSDKs(t)
		})
	}
}

func spansMatchTheSDKs(t *testing.T) {
	ctx := context.Background()
	res := resource.NewWithAttributes("https://opentelemetry.io/schemas/1.26.0", attribute.String("service.name", "quarry-gateway"))
	sampler := sdktrace.ParentBased(sdktrace.TraceIDRatioBased(0.5))
	stockCol, ourCol := otlptest.Start(t), otlptest.Start(t)

	sdk := sdktrace.NewTracerProvider(sdktrace.WithResource(res), sdktrace.WithSampler(sampler), sdktrace.WithIDGenerator(&countingIDs{}),
		sdktrace.WithBatcher(otlptraceExporter(t, stockCol.Endpoint()), sdktrace.WithMaxExportBatchSize(1000), sdktrace.WithMaxQueueSize(1000), sdktrace.WithBatchTimeout(time.Hour)))
	spanScript(sdk)
	if err := sdk.ForceFlush(ctx); err != nil {
		t.Fatal(err)
	}

	ours := newTracerProvider(res, sampler, newBatcher(quarryExporter(t, ourCol.Endpoint()).(*otlpExporter),
		batcherConfig{delay: time.Hour, timeout: 5 * time.Second, maxQueue: 1000, maxBatch: 1000}))
	ours.ids = &countingIDs{}
	t.Cleanup(func() { ours.Shutdown(ctx) })
	spanScript(ours)
	if err := ours.ForceFlush(ctx); err != nil {
		t.Fatal(err)
	}

	want, got := stockCol.Requests(), ourCol.Requests()
	if len(want) != 1 || len(got) != 1 {
		t.Fatalf("%d requests from the SDK, %d from span.go, want one each", len(want), len(got))
	}
	w, g := want[0], got[0]
	n := 0
	for _, rs := range g.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			n += len(ss.Spans)
		}
	}
	if n < 15 {
		t.Fatalf("span.go exported %d spans: the script should export more than 15", n)
	}
	for _, req := range []*coltracepb.ExportTraceServiceRequest{w, g} {
		for _, rs := range req.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				for _, sp := range ss.Spans {
					if sp.Name == "panicked" {
						for _, ev := range sp.Events {
							ev.TimeUnixNano = 0 // the clock's, in each run
						}
					}
				}
			}
		}
	}
	sortResources(w)
	sortResources(g)
	if !proto.Equal(w, g) {
		t.Fatalf("the requests differ: %s", firstDifference(w, g))
	}
}

// BenchmarkSpan makes the spans of a cached answer's query, as otelgrpc and the gateway
// make them, with the SDK's provider and with span.go's, each through the batcher and
// the OTLP exporter to a server on loopback that takes the requests unread.
//
//	go test -run '^$' -bench 'Span$' -benchmem ./telemetry
func BenchmarkSpan(b *testing.B) {
	res := resource.NewSchemaless(attribute.String("service.name", "quarry-gateway"))
	sampler := sdktrace.ParentBased(sdktrace.AlwaysSample())
	cfg := batcherConfig{delay: time.Second, timeout: 5 * time.Second, maxQueue: 2048, maxBatch: 512}
	for _, p := range []struct {
		name string
		new  func(*otlpExporter) spanProvider
	}{
		{"sdk", func(exp *otlpExporter) spanProvider {
			return sdktrace.NewTracerProvider(sdktrace.WithResource(res), sdktrace.WithSampler(sampler), sdktrace.WithSpanProcessor(newBatcher(exp, cfg)))
		}},
		{"quarry", func(exp *otlpExporter) spanProvider { return newTracerProvider(res, sampler, newBatcher(exp, cfg)) }},
	} {
		b.Run(p.name, func(b *testing.B) {
			tp := p.new(quarryExporter(b, startSink(b)).(*otlpExporter))
			defer tp.Shutdown(context.Background())
			tr := tp.Tracer("go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc", trace.WithInstrumentationVersion("0.72.0"))
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				_, s := tr.Start(ctx, "quarry.v1.QueryService/Query", trace.WithSpanKind(trace.SpanKindServer),
					trace.WithAttributes(attribute.String("rpc.method", "quarry.v1.QueryService/Query"), attribute.String("rpc.system.name", "grpc")))
				s.SetAttributes(attribute.String("server.address", "127.0.0.1"), attribute.Int("server.port", 7700))
				s.SetAttributes(attribute.String("quarry.tier", "EXACT_CACHE"), attribute.String("quarry.origin_tier", "DIRECT"), attribute.String("quarry.kb", "demo"))
				s.AddEvent("exact_cache", trace.WithAttributes(attribute.Int64("quarry.generation", 7)))
				s.SetAttributes(attribute.String("rpc.response.status_code", "OK"))
				s.End()
			}
		})
	}
}

// TestWhichSpansSetupMakes: spans exported over OTLP are span.go's; QUARRY_TRACES_SDK=true
// (any case) or an attribute value length limit, which span.go does not apply, gives the
// SDK's, and both reach the collector. The SDK reads its OTEL_*_LIMIT variables from the
// process environment, whatever Config.Getenv says, and so does Setup.
func TestWhichSpansSetupMakes(t *testing.T) {
	tests := []struct {
		name, sdkVar, lengthLimit string
		wantSDK                   bool
	}{
		{"default", "", "", false},
		{"QUARRY_TRACES_SDK=true", "true", "", true},
		{"QUARRY_TRACES_SDK=TRUE", "TRUE", "", true},
		{"QUARRY_TRACES_SDK=false", "false", "", false},
		{"value length limit", "", "64", true},
		{"the console exporter too", "", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			col := otlptest.Start(t)
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", col.Endpoint()) // the exporter reads it itself
			t.Setenv("OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT", tt.lengthLimit)
			env := map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": col.Endpoint(), "OTEL_METRICS_EXPORTER": "none", "QUARRY_TRACES_SDK": tt.sdkVar}
			if strings.Contains(tt.name, "console") {
				// It prints what span.go does not keep (a child span count).
				env["OTEL_TRACES_EXPORTER"] = "otlp,console"
			}
			tel, err := Setup(context.Background(), Config{Service: "test", Getenv: func(k string) string { return env[k] }})
			if err != nil {
				t.Fatal(err)
			}
			defer otel.SetMeterProvider(metricnoop.NewMeterProvider())
			defer otel.SetTracerProvider(noop.NewTracerProvider())
			tp := tel.TracerProvider()
			if _, isSDK := tp.(*sdktrace.TracerProvider); isSDK != tt.wantSDK {
				t.Errorf("Setup made %T, want the SDK's: %v", tp, tt.wantSDK)
			}
			_, span := tp.Tracer("test").Start(context.Background(), "quarry.test.which")
			span.End()
			if err := tel.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			if _, named := col.Count("quarry.test.which"); named != 1 {
				t.Errorf("the collector got %d spans named quarry.test.which, want 1", named)
			}
		})
	}
}

// TestSpanIsSafeForConcurrentUse: otelgrpc ends a server span on the transport's
// goroutine while the handler's may still add to it; a span takes calls from several
// goroutines at once, and ends once (run with -race).
func TestSpanIsSafeForConcurrentUse(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := newTracerProvider(resource.Empty(), sdktrace.AlwaysSample(), newSyncer(exp))
	_, s := tp.Tracer("test").Start(context.Background(), "shared")
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				s.SetAttributes(attribute.Int(fmt.Sprintf("g%d", g), i))
				s.AddEvent("e")
				s.SetStatus(codes.Error, "x")
				_ = s.IsRecording()
				if g == 0 && i == 100 {
					s.End()
				}
			}
		}()
	}
	wg.Wait()
	s.End()
	if n := len(exp.GetSpans()); n != 1 {
		t.Fatalf("%d spans exported, want the one, once", n)
	}
	got := exp.GetSpans()[0]
	if len(got.Events)+got.DroppedEvents > 8*200 || len(got.Attributes) > 8 {
		t.Errorf("the span holds %d events (%d dropped) and %d attributes, want at most 1600 and 8", len(got.Events), got.DroppedEvents, len(got.Attributes))
	}
}

// concurrencyCheckingExporter fails a test whose exporter is called while a call is
// under way: the SpanExporter contract says it never is.
type concurrencyCheckingExporter struct {
	t       *testing.T
	inside  atomic.Int32
	spans   atomic.Int32
	overlap atomic.Bool
}

func (e *concurrencyCheckingExporter) ExportSpans(_ context.Context, spans []sdktrace.ReadOnlySpan) error {
	if e.inside.Add(1) > 1 {
		e.overlap.Store(true)
	}
	time.Sleep(50 * time.Microsecond)
	e.spans.Add(int32(len(spans)))
	e.inside.Add(-1)
	return nil
}
func (*concurrencyCheckingExporter) Shutdown(context.Context) error { return nil }

// Spans ending on many goroutines reach a tests' exporter one call at a time, every one.
func TestSyncerCallsTheExporterOneAtATime(t *testing.T) {
	exp := &concurrencyCheckingExporter{t: t}
	tp := newTracerProvider(resource.Empty(), sdktrace.AlwaysSample(), newSyncer(exp))
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				_, s := tp.Tracer("test").Start(context.Background(), "op")
				s.End()
			}
		}()
	}
	wg.Wait()
	if exp.overlap.Load() || exp.spans.Load() != 400 {
		t.Fatalf("exporter called concurrently: %v; %d of 400 spans exported", exp.overlap.Load(), exp.spans.Load())
	}
}
