package telemetry

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/quarry-router/quarry/platform/grpcx"
	"github.com/quarry-router/quarry/platform/telemetry/otlptest"
	"go.opentelemetry.io/otel"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/grpc/reflection/grpc_reflection_v1"
)

func TestExporterFromEnvironment(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		tracing bool
		wantErr bool
	}{
		{"off when nothing is set", nil, false, false},
		{"none is off", map[string]string{"OTEL_TRACES_EXPORTER": "none"}, false, false},
		{"console is on", map[string]string{"OTEL_TRACES_EXPORTER": "console"}, true, false},
		{"an OTLP endpoint turns OTLP on", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317", "OTEL_METRICS_EXPORTER": "none"}, true, false},
		{"an unknown exporter is an error", map[string]string{"OTEL_TRACES_EXPORTER": "zipkin-v0"}, false, true},
		{"OTLP over HTTP", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf", "OTEL_METRICS_EXPORTER": "none"}, true, false},
		{"OTLP over gRPC, said", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": " grpc ", "OTEL_METRICS_EXPORTER": "none"}, true, false},
		{"JSON is refused, not ignored", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, false, true},
		{"an unknown protocol is an error", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "udp"}, false, true},
		{"the traces protocol is the one that counts for traces", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "thrift", "OTEL_METRICS_EXPORTER": "none"}, false, true},
		{"an unknown metrics exporter is an error", map[string]string{"OTEL_METRICS_EXPORTER": "console"}, false, true},
		{"a list of exporters", map[string]string{"OTEL_TRACES_EXPORTER": "console, OTLP", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317", "OTEL_METRICS_EXPORTER": "none"}, true, false},
		{"a name twice is one exporter", map[string]string{"OTEL_TRACES_EXPORTER": "console,console"}, true, false},
		{"none cannot be listed with others", map[string]string{"OTEL_TRACES_EXPORTER": "none,console"}, false, true},
		{"an unknown exporter in a list is an error", map[string]string{"OTEL_TRACES_EXPORTER": "otlp,zipkin", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317"}, false, true},
		{"none cannot be listed with other metrics exporters", map[string]string{"OTEL_METRICS_EXPORTER": "otlp,none"}, false, true},
		{"the metrics protocol is checked too", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317", "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL": "http/json"}, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tel, err := Setup(context.Background(), Config{Service: "test", Getenv: func(k string) string { return tt.env[k] }})
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			defer tel.Shutdown(context.Background())
			if tel.Tracing != tt.tracing {
				t.Errorf("Tracing = %v, want %v", tel.Tracing, tt.tracing)
			}
			if (tel.TracerProvider() != nil) != tt.tracing {
				t.Errorf("TracerProvider() = %v with tracing %v", tel.TracerProvider(), tt.tracing)
			}
		})
	}
}

// TestOneTraceAcrossAGRPCHop calls a real server through the grpcx bootstrap and checks
// that the server span continues the client's trace, and that metrics are served.
func TestOneTraceAcrossAGRPCHop(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tel, err := Setup(context.Background(), Config{Service: "test", SpanExporter: exp, Getenv: func(string) string { return "" }})
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Shutdown(context.Background())

	root := tracedReflectionCall(t, slog.New(slog.NewTextHandler(io.Discard, nil)))

	deadline := time.Now().Add(5 * time.Second)
	for len(exp.GetSpans()) < 3 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond) // the server span ends on its own goroutine
	}
	spans := exp.GetSpans()
	var client, server *tracetest.SpanStub
	for i := range spans {
		switch spans[i].SpanKind {
		case trace.SpanKindClient:
			client = &spans[i]
		case trace.SpanKindServer:
			server = &spans[i]
		}
	}
	if client == nil || server == nil {
		t.Fatalf("want a client and a server span, got %d spans", len(spans))
	}
	if server.SpanContext.TraceID() != root.SpanContext().TraceID() || client.SpanContext.TraceID() != root.SpanContext().TraceID() {
		t.Error("the RPC's spans are not in the caller's trace")
	}
	if server.Parent.SpanID() != client.SpanContext.SpanID() {
		t.Error("the server span's parent is not the client span")
	}

	// The server's call duration is recorded as its handler ends, on the server's
	// goroutine, which can run after the server span was exported: look until it is
	// there (CI once read /metrics in between).
	var body string
	for {
		rec := httptest.NewRecorder()
		tel.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		if body = rec.Body.String(); strings.Contains(body, "rpc_server") || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !strings.Contains(body, "rpc_server") {
		t.Errorf("metrics lack the gRPC server metrics:\n%.500s", body)
	}
}

func TestLogHandlerAddsTraceIDs(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(LogHandler(slog.NewJSONHandler(&buf, nil)))
	exp := tracetest.NewInMemoryExporter()
	tel, err := Setup(context.Background(), Config{Service: "test", SpanExporter: exp, Getenv: func(string) string { return "" }})
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Shutdown(context.Background())
	ctx, span := otel.Tracer("test").Start(context.Background(), "op")
	log.InfoContext(ctx, "hello")
	span.End()
	if !strings.Contains(buf.String(), span.SpanContext().TraceID().String()) {
		t.Errorf("log line %s lacks the trace id", buf.String())
	}
}

// TestTracingOffCostsNoSpans checks that with no exporter Setup leaves the no-op tracer
// provider in place, whose spans record nothing yet carry a caller's trace on.
func TestTracingOffCostsNoSpans(t *testing.T) {
	before := noop.NewTracerProvider()
	otel.SetTracerProvider(before)
	tel, err := Setup(context.Background(), Config{Service: "test", Getenv: func(string) string { return "" }})
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Shutdown(context.Background())
	if otel.GetTracerProvider() != before {
		t.Fatalf("tracing off replaced the tracer provider with %T", otel.GetTracerProvider())
	}
	caller := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5, 6}, TraceFlags: trace.FlagsSampled, Remote: true,
	})
	_, span := otel.Tracer("test").Start(trace.ContextWithRemoteSpanContext(context.Background(), caller), "op")
	if span.IsRecording() {
		t.Error("a span records with tracing off")
	}
	if span.SpanContext().TraceID() != caller.TraceID() {
		t.Errorf("span's trace id %v, want the caller's %v", span.SpanContext().TraceID(), caller.TraceID())
	}
}

// TestOTLPEndpointExportsSpans configures OTLP the way a deployment does, through
// OTEL_EXPORTER_OTLP_ENDPOINT and OTEL_EXPORTER_OTLP_PROTOCOL, and checks that a span
// and a metric reach a collector over each protocol, under the service's name.
func TestOTLPEndpointExportsSpans(t *testing.T) {
	tests := []struct {
		protocol string // "" leaves OTEL_EXPORTER_OTLP_PROTOCOL unset: gRPC
		endpoint func(*otlptest.Collector) string
	}{
		{"", (*otlptest.Collector).Endpoint},
		{"grpc", (*otlptest.Collector).Endpoint},
		{"http/protobuf", (*otlptest.Collector).HTTPEndpoint},
	}
	for _, tt := range tests {
		t.Run("protocol="+tt.protocol, func(t *testing.T) {
			col := otlptest.Start(t)
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", tt.endpoint(col))
			t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", tt.protocol)
			t.Setenv("OTEL_METRICS_EXPORTER", "")
			t.Setenv("OTEL_SERVICE_NAME", "")
			tel, span := setupAndRecord(t)
			// Shutdown flushes the batch and the metrics: both are at the collector
			// when it returns.
			if err := tel.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			spans := col.Spans()
			if len(spans) != 1 || spans[0].Name != "op" || spans[0].Service != "quarry-test" || spans[0].TraceID != span.SpanContext().TraceID() {
				t.Fatalf("collector received %+v, want the one span op of service quarry-test", spans)
			}
			if got := col.Metrics(); got["quarry.test.calls"] == 0 {
				t.Errorf("collector received metrics %v, want quarry.test.calls among them", got)
			}
		})
	}
}

// setupAndRecord sets telemetry up from the environment for the service quarry-test,
// ends one span "op" and counts one quarry.test.calls; the global providers are reset
// when the test ends.
func setupAndRecord(t *testing.T) (*Telemetry, trace.Span) {
	t.Helper()
	tel, err := Setup(context.Background(), Config{Service: "quarry-test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		otel.SetTracerProvider(noop.NewTracerProvider())
		otel.SetMeterProvider(metricnoop.NewMeterProvider())
	})
	_, span := otel.Tracer("test").Start(context.Background(), "op")
	span.End()
	calls, err := otel.Meter("test").Int64Counter("quarry.test.calls")
	if err != nil {
		t.Fatal(err)
	}
	calls.Add(context.Background(), 1)
	return tel, span
}

// A trace collector that never answers does not cost the metrics their last push at
// exit: the tracer and the meter are shut down at once, each within the deadline.
func TestAStuckTraceCollectorLeavesTheMetricsTheirShutdown(t *testing.T) {
	stuck, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer stuck.Close()
	go func() {
		// Takes connections and never speaks: the exporter's call waits for its deadline.
		for {
			c, err := stuck.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	col := otlptest.Start(t)
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://"+stuck.Addr().String())
	t.Setenv("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", col.Endpoint())
	t.Setenv("OTEL_METRICS_EXPORTER", "")
	tel, _ := setupAndRecord(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := tel.Shutdown(ctx); err == nil {
		t.Error("Shutdown = nil, want the trace export's failure")
	}
	if got := col.Metrics(); got["quarry.test.calls"] == 0 {
		t.Errorf("collector received metrics %v, want quarry.test.calls among them", got)
	}
}

// tracedReflectionCall serves a grpcx server that logs to log, makes one call to it
// (reflection is registered on every grpcx server: a real RPC to trace) within a new
// root span, and returns that span, ended.
func tracedReflectionCall(t *testing.T, log *slog.Logger) trace.Span {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpcx.NewServer(log)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go s.Serve(ctx, lis)
	conn, err := grpcx.Dial(lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	tctx, root := otel.Tracer("test").Start(context.Background(), "root")
	defer root.End()
	cctx, ccancel := context.WithTimeout(tctx, 5*time.Second)
	defer ccancel()
	stream, err := grpc_reflection_v1.NewServerReflectionClient(conn).ServerReflectionInfo(cctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&grpc_reflection_v1.ServerReflectionRequest{MessageRequest: &grpc_reflection_v1.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	stream.CloseSend()
	if _, err := stream.Recv(); err != io.EOF {
		t.Fatalf("stream end: %v", err)
	}
	return root
}
