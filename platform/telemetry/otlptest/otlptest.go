// Package otlptest is an OTLP trace collector for tests and benchmarks. It listens on
// loopback for OTLP/gRPC and OTLP/HTTP (binary protobuf) and takes what an OTLP exporter
// sends over the real protocol, so a test
// sees the spans as a collector (Jaeger, the OpenTelemetry Collector) would: batched,
// encoded and sent by the exporter, with the resource's service name.
package otlptest

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// Span is one span as the collector received it.
type Span struct {
	// Service is the service.name of the span's resource.
	Service    string
	Name       string
	Kind       trace.SpanKind
	TraceID    trace.TraceID
	SpanID     trace.SpanID
	Parent     trace.SpanID // zero for a root span
	Attributes map[string]string
	Events     []string
}

// Collector receives spans until the test ends.
type Collector struct {
	coltracepb.UnimplementedTraceServiceServer
	addr, httpAddr string
	keep           bool // decode and keep requests, or only count their spans

	mu       sync.Mutex
	requests []*coltracepb.ExportTraceServiceRequest
	spans    []Span
	byName   map[string]*int // pointers, so that counting a name held as bytes allocates no key
	metrics  map[string]int  // metric name → requests that carried it
	total    int
	exports  int
	headers  map[string]string // of the last trace export, by lower-case name
}

// Start runs a collector that keeps every span it receives.
func Start(tb testing.TB) *Collector { return start(tb, true) }

// StartCounting runs a collector that only counts spans, in total and by name. It
// walks each request's wire format for the span names and decodes nothing else, so
// that a benchmark whose collector shares the machine's cores with the services (a
// real one runs elsewhere) spends a few µs per request on it rather than the tens of
// µs per span a full decoding costs. A request that is not well-formed OTLP fails with
// INVALID_ARGUMENT, as it would at a real collector.
func StartCounting(tb testing.TB) *Collector { return start(tb, false) }

func start(tb testing.TB, keep bool) *Collector {
	tb.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	c := &Collector{addr: lis.Addr().String(), keep: keep, byName: map[string]*int{}, metrics: map[string]int{}}
	mux := http.NewServeMux()
	// A plain server: one instrumented with otelgrpc would trace its own exports.
	var srv *grpc.Server
	if keep {
		// Export decodes each request and keeps it and its spans.
		srv = grpc.NewServer()
		coltracepb.RegisterTraceServiceServer(srv, c)
		metricsService{c: c}.register(srv, mux)
	} else {
		// exportWire counts from the bytes.
		srv = grpc.NewServer(grpc.ForceServerCodecV2(wireCodec{}), grpc.UnknownServiceHandler(c.exportWire))
	}
	go srv.Serve(lis)
	tb.Cleanup(srv.Stop)
	c.serveHTTP(tb, mux)
	return c
}

// Endpoint is the OTLP/gRPC URL to put in OTEL_EXPORTER_OTLP_ENDPOINT; its http scheme
// makes the exporter connect without TLS.
func (c *Collector) Endpoint() string { return "http://" + c.addr }

// Export implements the OTLP trace service.
func (c *Collector) Export(ctx context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.exports++
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		c.headers = map[string]string{}
		for k, v := range md {
			c.headers[strings.ToLower(k)] = strings.Join(v, ",")
		}
	}
	c.requests = append(c.requests, req)
	for _, rs := range req.GetResourceSpans() {
		service := ""
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.GetKey() == "service.name" {
				service = kv.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				c.total++
				c.countName([]byte(s.GetName()))
				sp := Span{Service: service, Name: s.GetName(), Kind: trace.SpanKind(s.GetKind()), Attributes: map[string]string{}}
				copy(sp.TraceID[:], s.GetTraceId())
				copy(sp.SpanID[:], s.GetSpanId())
				copy(sp.Parent[:], s.GetParentSpanId())
				for _, kv := range s.GetAttributes() {
					sp.Attributes[kv.GetKey()] = value(kv.GetValue())
				}
				for _, e := range s.GetEvents() {
					sp.Events = append(sp.Events, e.GetName())
				}
				c.spans = append(c.spans, sp)
			}
		}
	}
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// Header is the value of the named header (gRPC metadata, or HTTP header) of the last
// trace export a keeping collector received; "" when it had none.
func (c *Collector) Header(name string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.headers[strings.ToLower(name)]
}

// Spans returns the spans kept so far.
func (c *Collector) Spans() []Span {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Span(nil), c.spans...)
}

// Requests returns the export requests received so far, as decoded.
func (c *Collector) Requests() []*coltracepb.ExportTraceServiceRequest {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*coltracepb.ExportTraceServiceRequest(nil), c.requests...)
}

// Count returns how many spans arrived, and how many of them were named name ("" for
// the total only).
func (c *Collector) Count(name string) (total, named int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n := c.byName[name]; n != nil {
		named = *n
	}
	return c.total, named
}

// Exports returns how many export requests arrived.
func (c *Collector) Exports() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.exports
}

// Reset forgets every span received so far.
func (c *Collector) Reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.requests, c.spans, c.byName, c.total, c.exports = nil, nil, map[string]*int{}, 0, 0
	c.metrics = map[string]int{}
}

func value(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_BoolValue:
		return strconv.FormatBool(x.BoolValue)
	case *commonpb.AnyValue_IntValue:
		return strconv.FormatInt(x.IntValue, 10)
	case *commonpb.AnyValue_DoubleValue:
		return strconv.FormatFloat(x.DoubleValue, 'g', -1, 64)
	case *commonpb.AnyValue_ArrayValue:
		parts := make([]string, 0, len(x.ArrayValue.GetValues()))
		for _, e := range x.ArrayValue.GetValues() {
			parts = append(parts, value(e))
		}
		return "[" + strings.Join(parts, ",") + "]"
	case nil:
		return ""
	default:
		return fmt.Sprint(x)
	}
}
