package telemetry

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/quarry-router/quarry/platform/syncbuf"
	"github.com/quarry-router/quarry/platform/telemetry/otlptest"
	"go.opentelemetry.io/otel"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// TestResourceNamesTheService: spans carry the service's name and version as the
// program gives them, OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win over both, and
// a program that gives no version gets the build's or none, never an empty one (every
// service's main gave none, so every span said service.version="").
func TestResourceNamesTheService(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		env     map[string]string
		want    map[string]string
		noEmpty []string // attributes that must be absent or non-empty
		build   string   // the image build's version (-ldflags -X buildVersion)
	}{
		{"the program's name and version", Config{Service: "quarry-gateway", Version: "1.2.3"}, nil,
			map[string]string{"service.name": "quarry-gateway", "service.version": "1.2.3"}, nil, ""},
		{"OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win",
			Config{Service: "quarry-gateway", Version: "1.2.3"},
			map[string]string{"OTEL_SERVICE_NAME": "gw-eu", "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment.name=prod,service.version=9.9,service.name=ignored"},
			map[string]string{"service.name": "gw-eu", "service.version": "9.9", "deployment.environment.name": "prod"}, nil, "v0.1.0"},
		{"no version given", Config{Service: "quarry-search"}, nil,
			map[string]string{"service.name": "quarry-search"}, []string{"service.version"}, ""},
		{"the image build's version", Config{Service: "quarry-agent"}, nil,
			map[string]string{"service.name": "quarry-agent", "service.version": "v0.1.0"}, nil, "v0.1.0"},
		{"the program's version over the image build's", Config{Service: "quarry-agent", Version: "1.2.3"}, nil,
			map[string]string{"service.version": "1.2.3"}, nil, "v0.1.0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			defer func(v string) { buildVersion = v }(buildVersion)
			buildVersion = tt.build
			// resource.WithFromEnv reads the process environment.
			t.Setenv("OTEL_SERVICE_NAME", tt.env["OTEL_SERVICE_NAME"])
			t.Setenv("OTEL_RESOURCE_ATTRIBUTES", tt.env["OTEL_RESOURCE_ATTRIBUTES"])
			exp := tracetest.NewInMemoryExporter()
			cfg := tt.cfg
			cfg.SpanExporter = exp
			cfg.Getenv = func(k string) string { return tt.env[k] }
			tel, err := Setup(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer tel.Shutdown(context.Background())
			_, s := tel.TracerProvider().Tracer("test").Start(context.Background(), "op")
			s.End()
			spans := exp.GetSpans()
			if len(spans) != 1 {
				t.Fatalf("%d spans, want 1", len(spans))
			}
			got := map[string]string{}
			present := map[string]bool{}
			for _, kv := range spans[0].Resource.Attributes() {
				got[string(kv.Key)] = kv.Value.String()
				present[string(kv.Key)] = true
			}
			for k, v := range tt.want {
				if got[k] != v {
					t.Errorf("resource %s=%q, want %q (resource %v)", k, got[k], v, got)
				}
			}
			for _, k := range tt.noEmpty {
				if present[k] && got[k] == "" {
					t.Errorf("resource has an empty %s", k)
				}
			}
			// The SDK-provided attributes the resource specification requires of
			// every SDK's resource: resource.New, unlike resource.Default, adds none of
			// them unless asked, and every span and metric went out without them.
			for k, v := range map[string]string{"telemetry.sdk.name": "opentelemetry", "telemetry.sdk.language": "go"} {
				if got[k] != v {
					t.Errorf("resource %s=%q, want %q (resource %v)", k, got[k], v, got)
				}
			}
			if got["telemetry.sdk.version"] == "" {
				t.Errorf("resource has no telemetry.sdk.version (resource %v)", got)
			}
		})
	}
}

// OTEL_SDK_DISABLED=true (any case) turns off every exporter the environment selects,
// above the variables that would turn one on, and above settings Setup would otherwise
// refuse; the Go SDK does not read it, so an OTLP endpoint set beside it exported
// traces and metrics.
func TestSDKDisabledExportsNothing(t *testing.T) {
	for _, tc := range []struct {
		value    string
		disabled bool
	}{{"true", true}, {"TRUE", true}, {" True ", true}, {"false", false}, {"", false}} {
		t.Run("OTEL_SDK_DISABLED="+tc.value, func(t *testing.T) {
			col := otlptest.Start(t)
			env := map[string]string{
				"OTEL_SDK_DISABLED":           tc.value,
				"OTEL_EXPORTER_OTLP_ENDPOINT": col.Endpoint(),
				"OTEL_TRACES_EXPORTER":        "otlp",
				"OTEL_METRICS_EXPORTER":       "otlp",
				"OTEL_EXPORTER_OTLP_PROTOCOL": "",
			}
			for k, v := range env {
				t.Setenv(k, v) // the SDK's exporters read the environment themselves
			}
			tel, err := Setup(context.Background(), Config{Service: "test"})
			if err != nil {
				t.Fatal(err)
			}
			defer otel.SetTracerProvider(noop.NewTracerProvider())
			defer otel.SetMeterProvider(metricnoop.NewMeterProvider())
			if tel.Tracing == tc.disabled {
				t.Errorf("Tracing = %v with OTEL_SDK_DISABLED=%q", tel.Tracing, tc.value)
			}
			_, s := otel.Tracer("test").Start(context.Background(), "op")
			s.End()
			c, _ := otel.Meter("test").Int64Counter("quarry.test.calls")
			c.Add(context.Background(), 1)
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			if err := tel.Shutdown(ctx); err != nil {
				t.Fatal(err)
			}
			if got := len(col.Spans()) > 0; got == tc.disabled {
				t.Errorf("spans exported: %v, with OTEL_SDK_DISABLED=%q", got, tc.value)
			}
			if got := col.Metrics()["quarry.test.calls"] > 0; got == tc.disabled {
				t.Errorf("metrics pushed: %v, with OTEL_SDK_DISABLED=%q", got, tc.value)
			}
		})
	}
	// It takes precedence over settings that would stop Setup.
	env := map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "zipkin-v0", "OTEL_TRACES_SAMPLER": "sometimes", "OTEL_METRICS_EXPORTER": "console"}
	tel, err := Setup(context.Background(), Config{Service: "test", Getenv: func(k string) string { return env[k] }})
	if err != nil {
		t.Fatalf("with OTEL_SDK_DISABLED=true: %v, want the other settings ignored", err)
	}
	tel.Shutdown(context.Background())
}

// The OTLP exporters' own variables pass through Setup to the SDK's clients (the trace
// exporter wraps otlptrace's client): headers reach the collector over both protocols,
// OTEL_EXPORTER_OTLP_INSECURE lets a gRPC endpoint that names no http scheme go
// without TLS, and a traces endpoint over HTTP is used as it is written.
func TestOTLPExporterVariablesReachTheCollector(t *testing.T) {
	tests := []struct {
		name string
		env  func(col *otlptest.Collector) map[string]string
	}{
		{"gRPC: headers, insecure", func(col *otlptest.Collector) map[string]string {
			return map[string]string{
				"OTEL_EXPORTER_OTLP_ENDPOINT": "dns:///" + strings.TrimPrefix(col.Endpoint(), "http://"),
				"OTEL_EXPORTER_OTLP_INSECURE": "true",
				"OTEL_EXPORTER_OTLP_HEADERS":  "authorization=Bearer%20abc,x-tenant=quarry",
			}
		}},
		{"HTTP: traces headers and endpoint as written, gzip", func(col *otlptest.Collector) map[string]string {
			return map[string]string{
				"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT":    col.HTTPEndpoint() + "/v1/traces",
				"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL":    "http/protobuf",
				"OTEL_EXPORTER_OTLP_TRACES_HEADERS":     "authorization=Bearer%20abc,x-tenant=quarry",
				"OTEL_EXPORTER_OTLP_TRACES_COMPRESSION": "gzip",
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, k := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL",
				"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_INSECURE", "OTEL_EXPORTER_OTLP_HEADERS",
				"OTEL_EXPORTER_OTLP_TRACES_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION", "OTEL_TRACES_EXPORTER", "OTEL_SDK_DISABLED"} {
				t.Setenv(k, "")
			}
			t.Setenv("OTEL_METRICS_EXPORTER", "none")
			col := otlptest.Start(t)
			for k, v := range tt.env(col) {
				t.Setenv(k, v)
			}
			tel, err := Setup(context.Background(), Config{Service: "test"})
			if err != nil {
				t.Fatal(err)
			}
			defer otel.SetTracerProvider(noop.NewTracerProvider())
			defer otel.SetMeterProvider(metricnoop.NewMeterProvider())
			_, s := tel.TracerProvider().Tracer("test").Start(context.Background(), "op")
			s.End()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := tel.Shutdown(ctx); err != nil {
				t.Fatalf("Shutdown: %v", err)
			}
			if spans := col.Spans(); len(spans) != 1 || spans[0].Name != "op" {
				t.Fatalf("collector received %v, want the span op", spans)
			}
			for k, want := range map[string]string{"authorization": "Bearer abc", "x-tenant": "quarry"} {
				if got := col.Header(k); got != want {
					t.Errorf("collector got header %s=%q, want %q", k, got, want)
				}
			}
		})
	}
}

// A service's log lines are JSON and carry the trace and span ids of the call they are
// about: the "finished call" line of a traced gRPC call over a real socket names the
// server span, through a logger made as daemon.Main makes it (With adds the service).
func TestCallLogLinesCarryTheCallsTraceAndSpanIDs(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tel, err := Setup(context.Background(), Config{Service: "test", SpanExporter: exp, Getenv: func(string) string { return "" }})
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Shutdown(context.Background())

	var buf syncbuf.Buffer
	log := slog.New(LogHandler(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))).With("service", "quarry-test")
	root := tracedReflectionCall(t, log)

	var server *tracetest.SpanStub
	var line map[string]any
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline) && (server == nil || line == nil); time.Sleep(10 * time.Millisecond) {
		spans := exp.GetSpans()
		for i := range spans {
			if spans[i].SpanKind == trace.SpanKindServer {
				server = &spans[i]
			}
		}
		for _, l := range bytes.Split(buf.Bytes(), []byte("\n")) {
			var m map[string]any
			if json.Unmarshal(l, &m) == nil && m["msg"] == "finished call" {
				line = m
			}
		}
	}
	if server == nil || line == nil {
		t.Fatalf("server span %v, finished-call line %v; logs:\n%s", server != nil, line, buf.Bytes())
	}
	for k, want := range map[string]string{"trace_id": root.SpanContext().TraceID().String(), "span_id": server.SpanContext.SpanID().String(), "service": "quarry-test"} {
		if line[k] != want {
			t.Errorf("finished-call line has %s=%v, want %s: %v", k, line[k], want, line)
		}
	}
	// A group opened on the logger keeps the ids too.
	buf.Reset()
	slog.New(LogHandler(slog.NewJSONHandler(&buf, nil))).WithGroup("g").InfoContext(trace.ContextWithSpan(context.Background(), root), "grouped", "k", "v")
	if !strings.Contains(buf.String(), root.SpanContext().SpanID().String()) {
		t.Errorf("a grouped logger's line lacks the span id: %s", buf.Bytes())
	}
}

// TestPropagatorsFollowOTELPropagators: the headers trace context travels in are the
// ones OTEL_PROPAGATORS names, so a caller or mesh speaking B3 or Jaeger keeps one
// trace; an unknown name refuses the set-up instead of cutting every trace.
func TestPropagatorsFollowOTELPropagators(t *testing.T) {
	tests := []struct {
		value   string
		fields  []string // the headers the propagator reads and writes
		wantErr bool
	}{
		{"", []string{"baggage", "traceparent", "tracestate"}, false},
		{"tracecontext", []string{"traceparent", "tracestate"}, false},
		{" B3 ", []string{"b3"}, false},
		{"b3multi", []string{"x-b3-flags", "x-b3-sampled", "x-b3-spanid", "x-b3-traceid"}, false},
		{"tracecontext,jaeger", []string{"traceparent", "tracestate", "uber-trace-id"}, false},
		{"none", nil, false},
		{"zipkin", nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.value, func(t *testing.T) {
			env := map[string]string{"OTEL_PROPAGATORS": tt.value}
			tel, err := Setup(context.Background(), Config{Service: "test", Getenv: func(k string) string { return env[k] }})
			if tt.wantErr {
				if err == nil || !strings.Contains(err.Error(), "OTEL_PROPAGATORS") {
					tel.Shutdown(context.Background())
					t.Fatalf("Setup = %v, want an error naming OTEL_PROPAGATORS", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer tel.Shutdown(context.Background())
			got := otel.GetTextMapPropagator().Fields()
			slices.Sort(got)
			if !slices.Equal(got, tt.fields) {
				t.Errorf("propagated headers %q, want %q", got, tt.fields)
			}
		})
	}
}
