package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	stdlog "log"
	"log/slog"
	"os"
	"os/exec"
	"testing"

	"github.com/quarry-router/quarry/platform/telemetry/otlptest"
	"go.opentelemetry.io/otel"
)

// tracedChild is a service's main in the re-executed test binary: its work records a
// span and logs within it, and returns.
func tracedChild() {
	os.Exit(Main("quarry-test", func(ctx context.Context, log *slog.Logger) error {
		ctx, span := otel.Tracer("test").Start(ctx, "work")
		log.InfoContext(ctx, "working")
		// A package that logs through slog's default logger, as the LLM provider
		// does, and the log package, as libraries do.
		slog.InfoContext(ctx, "working by default")
		stdlog.Print("working by the log package")
		span.End()
		return nil
	}))
}

// Main sets telemetry up from the OTEL_* environment, logs JSON lines that name the
// service and carry the trace and span ids of their context, and flushes the spans
// still buffered when the service returns: the batch here would not be sent for a
// minute, so only the flush on exit gets it to the collector.
func TestMainTracesLogsAndFlushesOnExit(t *testing.T) {
	col := otlptest.Start(t)
	cmd := exec.Command(os.Args[0], "-test.run", "^$")
	cmd.Env = append(os.Environ(), "QUARRY_DAEMON_TEST_CHILD=traced",
		"OTEL_EXPORTER_OTLP_ENDPOINT="+col.Endpoint(), "OTEL_EXPORTER_OTLP_PROTOCOL=grpc", "OTEL_TRACES_EXPORTER=otlp",
		"OTEL_METRICS_EXPORTER=none", "OTEL_BSP_SCHEDULE_DELAY=60000", "OTEL_SERVICE_NAME=", "OTEL_SDK_DISABLED=",
		"OTEL_TRACES_SAMPLER=", "OTEL_RESOURCE_ATTRIBUTES=")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("service: %v\n%s", err, stderr.Bytes())
	}
	spans := col.Spans()
	if len(spans) != 1 || spans[0].Name != "work" || spans[0].Service != "quarry-test" {
		t.Fatalf("collector received %+v, want the span work of quarry-test, flushed on exit", spans)
	}
	lines := map[string]map[string]any{}
	for _, l := range bytes.Split(stderr.Bytes(), []byte("\n")) {
		var m map[string]any
		if json.Unmarshal(l, &m) == nil {
			if msg, ok := m["msg"].(string); ok {
				lines[msg] = m
			}
		}
	}
	// Lines logged through slog's default logger were plain text, without the
	// service's name or the trace's ids: the default was never the service's logger.
	for _, msg := range []string{"working", "working by default"} {
		line := lines[msg]
		if line == nil {
			t.Errorf("no JSON log line %q in:\n%s", msg, stderr.Bytes())
			continue
		}
		for k, want := range map[string]string{"trace_id": spans[0].TraceID.String(), "span_id": spans[0].SpanID.String(), "service": "quarry-test"} {
			if line[k] != want {
				t.Errorf("log line %q has %s=%v, want %s: %v", msg, k, line[k], want, line)
			}
		}
	}
	if line := lines["working by the log package"]; line == nil || line["service"] != "quarry-test" {
		t.Errorf("the log package's line is not a JSON line of the service: %v\n%s", line, stderr.Bytes())
	}
}
