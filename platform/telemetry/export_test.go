package telemetry

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/quarry-router/quarry/platform/telemetry/otlptest"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
)

// otlptraceExporter is the stock OTLP exporter, which otlpExporter must match on the
// wire.
func otlptraceExporter(t testing.TB, endpoint string) sdktrace.SpanExporter {
	t.Helper()
	exp, err := otlptracegrpc.New(context.Background(), otlptracegrpc.WithEndpoint(strings.TrimPrefix(endpoint, "http://")), otlptracegrpc.WithInsecure())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { exp.Shutdown(context.Background()) })
	return exp
}

func otlptraceHTTPExporter(t testing.TB, endpoint string) sdktrace.SpanExporter {
	t.Helper()
	exp, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(endpoint+"/v1/traces"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { exp.Shutdown(context.Background()) })
	return exp
}

func quarryExporter(t testing.TB, endpoint string) sdktrace.SpanExporter {
	t.Helper()
	exp, err := newOTLPExporter(context.Background(), protocolGRPC, otlptracegrpc.WithEndpoint(strings.TrimPrefix(endpoint, "http://")), otlptracegrpc.WithInsecure())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { exp.Shutdown(context.Background()) })
	return exp
}

// testSpans are spans with every field and kind of attribute value an OTLP span has,
// from two resources and three scopes, interleaved.
func testSpans(n int) []sdktrace.ReadOnlySpan {
	resA := resource.NewSchemaless(attribute.String("service.name", "quarry-gateway"), attribute.Int("pid", 7))
	resB := resource.NewWithAttributes("https://opentelemetry.io/schemas/1.26.0", attribute.String("service.name", "quarry-search"))
	scopes := []instrumentation.Scope{
		{Name: "go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc", Version: "0.72.0"},
		{Name: "github.com/quarry-router/quarry/services/search/resolve", SchemaURL: "https://opentelemetry.io/schemas/1.26.0",
			Attributes: attribute.NewSet(attribute.Bool("quarry.scope", true))},
		{},
	}
	kinds := []trace.SpanKind{trace.SpanKindServer, trace.SpanKindClient, trace.SpanKindInternal, trace.SpanKindProducer, trace.SpanKindConsumer, trace.SpanKindUnspecified}
	statuses := []sdktrace.Status{{}, {Code: codes.Ok}, {Code: codes.Error, Description: "search: unavailable"}}
	ts, _ := trace.ParseTraceState("quarry=1,vendor=x")
	start := time.Unix(1_790_000_000, 123)
	var out []sdktrace.ReadOnlySpan
	for i := range n {
		var tid trace.TraceID
		var sid, psid trace.SpanID
		tid[0], tid[15], sid[0], sid[7], psid[1] = byte(i), byte(i>>8), byte(i+1), 9, byte(i+2)
		sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled})
		if i%4 == 1 {
			sc = sc.WithTraceState(ts)
		}
		stub := tracetest.SpanStub{
			Name:        fmt.Sprintf("span-%d", i),
			SpanContext: sc,
			SpanKind:    kinds[i%len(kinds)],
			StartTime:   start.Add(time.Duration(i) * time.Millisecond),
			EndTime:     start.Add(time.Duration(i)*time.Millisecond + 250*time.Microsecond),
			Attributes: []attribute.KeyValue{
				attribute.String("quarry.route", "direct"), attribute.Int("quarry.results", i),
				attribute.Float64("quarry.top_score", 0.25*float64(i)), attribute.Bool("quarry.from_cache", i%2 == 0),
			},
			Status:               statuses[i%len(statuses)],
			DroppedAttributes:    i % 3,
			DroppedEvents:        i % 2,
			DroppedLinks:         i % 5,
			Resource:             resA,
			InstrumentationScope: scopes[i%len(scopes)],
		}
		if i%3 == 0 {
			stub.Resource = resB
		}
		switch i % 3 {
		case 0: // a root span
		case 1:
			stub.Parent = trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: psid, Remote: true})
		case 2:
			stub.Parent = trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: psid})
		}
		if i%2 == 1 {
			stub.Attributes = append(stub.Attributes,
				attribute.StringSlice("quarry.entity_terms", []string{"jwt", "rotate"}),
				attribute.IntSlice("ints", []int{1, 2}), attribute.Float64Slice("floats", []float64{0.5}),
				attribute.BoolSlice("bools", []bool{true, false}), attribute.StringSlice("empty", nil),
				attribute.KeyValue{Key: "slice", Value: attribute.SliceValue(attribute.StringValue("a"), attribute.IntValue(1))},
				attribute.KeyValue{Key: "map", Value: attribute.MapValue(attribute.String("k", "v"), attribute.Bool("b", true))},
				attribute.KeyValue{Key: "bytes", Value: attribute.ByteSliceValue([]byte{1, 2, 3})},
				attribute.KeyValue{Key: "nothing", Value: attribute.Value{}},
			)
			stub.Events = []sdktrace.Event{
				{Name: "exact_cache", Time: start, Attributes: []attribute.KeyValue{attribute.String("quarry.outcome", "miss")}, DroppedAttributeCount: 1},
				{Name: "fuzzy_cache", Time: start.Add(time.Microsecond)},
			}
			stub.Links = []sdktrace.Link{
				{SpanContext: trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: psid, TraceFlags: trace.FlagsSampled, TraceState: ts, Remote: true}),
					Attributes: []attribute.KeyValue{attribute.String("why", "hedge")}, DroppedAttributeCount: 2},
				{SpanContext: trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid})},
			}
		}
		out = append(out, stub.Snapshot())
	}
	return out
}

// TestOTLPExporterSendsWhatOtlptraceSends: for the same spans, the collector receives
// the same request from Quarry's exporter as from the stock one, over either protocol,
// also when the exporter's memory is reused by later, smaller or differently shaped
// batches.
func TestOTLPExporterSendsWhatOtlptraceSends(t *testing.T) {
	for _, protocol := range []string{protocolGRPC, protocolHTTP} {
		t.Run(protocol, func(t *testing.T) {
			stockCol, ourCol := otlptest.Start(t), otlptest.Start(t)
			var stock, ours sdktrace.SpanExporter
			if protocol == protocolGRPC {
				stock, ours = otlptraceExporter(t, stockCol.Endpoint()), quarryExporter(t, ourCol.Endpoint())
			} else {
				stock = otlptraceHTTPExporter(t, stockCol.HTTPEndpoint())
				// As a deployment configures it: the exporter adds /v1/traces.
				t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", ourCol.HTTPEndpoint())
				exp, err := newOTLPExporter(context.Background(), protocolHTTP)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { exp.Shutdown(context.Background()) })
				ours = exp
			}
			exportsTheSame(t, stockCol, ourCol, stock, ours)
		})
	}
}

func exportsTheSame(t *testing.T, stockCol, ourCol *otlptest.Collector, stock, ours sdktrace.SpanExporter) {
	ctx := context.Background()
	all := testSpans(40)
	batches := [][]sdktrace.ReadOnlySpan{all, all[:3], all[7:8], all[1:], testSpans(300), all[2:5], nil}
	for i, batch := range batches {
		if err := stock.ExportSpans(ctx, batch); err != nil {
			t.Fatal(err)
		}
		if err := ours.ExportSpans(ctx, batch); err != nil {
			t.Fatal(err)
		}
		want, got := stockCol.Requests(), ourCol.Requests()
		if len(got) != len(want) {
			t.Fatalf("batch %d: %d requests received from ours, %d from otlptrace", i, len(got), len(want))
		}
		if len(want) == 0 {
			continue
		}
		w, g := want[len(want)-1], got[len(got)-1]
		sortResources(w)
		sortResources(g)
		if !proto.Equal(w, g) {
			t.Fatalf("batch %d (%d spans): the requests differ: %s", i, len(batch), firstDifference(w, g))
		}
	}
	if n := len(ourCol.Requests()); n != len(batches)-1 {
		t.Errorf("%d requests for %d non-empty batches", n, len(batches)-1)
	}
}

// The batcher's queue for this exporter encodes each span as it ends and sends what
// it holds in batches of at most a batch size: each request must be what otlptrace
// sends for the same spans in the same batches, also when the queue's memory is reused.
func TestEncodedQueueSendsWhatOtlptraceSends(t *testing.T) {
	ctx := context.Background()
	stockCol, ourCol := otlptest.Start(t), otlptest.Start(t)
	stock, ours := otlptraceExporter(t, stockCol.Endpoint()), quarryExporter(t, ourCol.Endpoint())
	b := newBatcher(ours, batcherConfig{delay: time.Hour, timeout: time.Second, maxQueue: 10, maxBatch: 10})
	t.Cleanup(func() { b.Shutdown(ctx) })
	q, ok := b.queue.(*encodedQueue)
	if !ok {
		t.Fatalf("the batcher queues %T for the OTLP exporter, want *encodedQueue", b.queue)
	}
	const maxBatch = 16
	for _, spans := range [][]sdktrace.ReadOnlySpan{testSpans(40), testSpans(5), testSpans(100)[3:], nil} {
		for _, s := range spans {
			q.add(s)
		}
		if err := q.export(ctx, maxBatch, 5*time.Second); err != nil {
			t.Fatal(err)
		}
		if q.len() != 0 {
			t.Fatalf("%d spans left after export", q.len())
		}
		for i := 0; i < len(spans); i += maxBatch {
			if err := stock.ExportSpans(ctx, spans[i:min(i+maxBatch, len(spans))]); err != nil {
				t.Fatal(err)
			}
		}
	}
	want, got := stockCol.Requests(), ourCol.Requests()
	if len(got) != len(want) || len(want) != 3+1+7 {
		t.Fatalf("%d requests from the queue, %d from otlptrace, want 11", len(got), len(want))
	}
	for i := range want {
		sortResources(want[i])
		sortResources(got[i])
		if !proto.Equal(want[i], got[i]) {
			t.Fatalf("request %d: %s", i, firstDifference(want[i], got[i]))
		}
	}
}

// sortResources orders a request's resources by their attributes: otlptrace sends them
// in map order. Scopes and spans keep the order the exporter was given them in.
func sortResources(req *coltracepb.ExportTraceServiceRequest) {
	slices.SortFunc(req.ResourceSpans, func(a, b *tracepb.ResourceSpans) int {
		return strings.Compare(prototext.Format(a.GetResource()), prototext.Format(b.GetResource()))
	})
}

// firstDifference names the first part of two requests that differs.
func firstDifference(want, got *coltracepb.ExportTraceServiceRequest) string {
	if len(want.ResourceSpans) != len(got.ResourceSpans) {
		return fmt.Sprintf("%d resources, want %d", len(got.ResourceSpans), len(want.ResourceSpans))
	}
	for r, wr := range want.ResourceSpans {
		gr := got.ResourceSpans[r]
		if !proto.Equal(wr.GetResource(), gr.GetResource()) || wr.GetSchemaUrl() != gr.GetSchemaUrl() {
			return fmt.Sprintf("resource %d:\n got %v\nwant %v", r, gr.GetResource(), wr.GetResource())
		}
		if len(wr.ScopeSpans) != len(gr.ScopeSpans) {
			return fmt.Sprintf("resource %d: %d scopes, want %d", r, len(gr.ScopeSpans), len(wr.ScopeSpans))
		}
		for s, ws := range wr.ScopeSpans {
			gs := gr.ScopeSpans[s]
			if !proto.Equal(ws.GetScope(), gs.GetScope()) || ws.GetSchemaUrl() != gs.GetSchemaUrl() || len(ws.Spans) != len(gs.Spans) {
				return fmt.Sprintf("resource %d scope %d:\n got %v (%d spans)\nwant %v (%d spans)", r, s, gs.GetScope(), len(gs.Spans), ws.GetScope(), len(ws.Spans))
			}
			for i, w := range ws.Spans {
				if g := gs.Spans[i]; !proto.Equal(w, g) {
					return fmt.Sprintf("resource %d scope %d span %d:\n got %v\nwant %v", r, s, i, prototext.Format(g), prototext.Format(w))
				}
			}
		}
	}
	return "the requests differ elsewhere"
}

// BenchmarkExportSpans exports batches of 512 spans, the batch processor's default
// size, with the stock exporter and with Quarry's, to a server on loopback that takes
// each request without decoding it: what is measured is the exporter's work.
//
//	go test -run '^$' -bench ExportSpans -benchmem ./telemetry
func BenchmarkExportSpans(b *testing.B) {
	batch := testSpans(512)
	for _, e := range []struct {
		name string
		new  func(testing.TB, string) sdktrace.SpanExporter
	}{{"otlptrace", otlptraceExporter}, {"quarry", quarryExporter}} {
		b.Run(e.name, func(b *testing.B) {
			exp := e.new(b, startSink(b))
			b.ReportAllocs()
			for b.Loop() {
				if err := exp.ExportSpans(context.Background(), batch); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(batch)), "ns/span")
		})
	}
}

// startSink serves the OTLP trace method on loopback, taking each request as bytes.
func startSink(tb testing.TB) string {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ForceServerCodecV2(rawCodec{}), grpc.UnknownServiceHandler(func(_ any, stream grpc.ServerStream) error {
		var in []byte
		if err := stream.RecvMsg(&in); err != nil {
			return err
		}
		return stream.SendMsg(&in) // empty: an empty ExportTraceServiceResponse
	}))
	go srv.Serve(lis)
	tb.Cleanup(srv.Stop)
	return "http://" + lis.Addr().String()
}

// rawCodec takes a request without reading it and answers with an empty message.
type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(*v.(*[]byte))}, nil
}

func (rawCodec) Unmarshal(_ mem.BufferSlice, v any) error {
	*v.(*[]byte) = nil
	return nil
}

func (rawCodec) Name() string { return "proto" }
