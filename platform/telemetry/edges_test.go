package telemetry

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/quarry-router/quarry/platform/telemetry/otlptest"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/protobuf/proto"
)

func edgeSpans() []sdktrace.ReadOnlySpan {
	start := time.Unix(1_790_000_000, 0)
	var tid trace.TraceID
	tid[3] = 9
	var out []sdktrace.ReadOnlySpan
	for i, n := range []int{0, 1, 127, 128, 16383, 16384, 20000} {
		var sid trace.SpanID
		sid[0] = byte(i + 1)
		long := strings.Repeat("x", n)
		var evs []sdktrace.Event
		for j := range 300 {
			evs = append(evs, sdktrace.Event{Name: fmt.Sprint("e", j), Time: start.Add(time.Duration(j)), Attributes: []attribute.KeyValue{attribute.String("k", long[:min(n, 200)])}})
		}
		var links []sdktrace.Link
		for j := range 200 {
			var lsid trace.SpanID
			lsid[1] = byte(j + 1)
			links = append(links, sdktrace.Link{SpanContext: trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: lsid}), Attributes: []attribute.KeyValue{attribute.String("", long[:min(n, 300)])}})
		}
		stub := tracetest.SpanStub{
			Name:        long,
			SpanContext: trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled}),
			StartTime:   start, EndTime: start.Add(time.Second),
			Attributes: []attribute.KeyValue{
				attribute.String("", ""), attribute.String("long", long), attribute.Int64("neg", -1),
				attribute.Float64("nan", math.Inf(-1)), attribute.Float64("zero", 0), attribute.Bool("f", false), attribute.Int("z", 0),
				{Key: "emptymap", Value: attribute.MapValue()}, {Key: "emptyslice", Value: attribute.SliceValue()},
				{Key: "nested", Value: attribute.SliceValue(attribute.MapValue(attribute.String("a", long), attribute.KeyValue{Key: "e"}), attribute.Value{})},
				attribute.StringSlice("ss", []string{"", long}), {Key: "emptybytes", Value: attribute.ByteSliceValue(nil)},
			},
			Events: evs, Links: links,
			Status:               sdktrace.Status{Code: codes.Error, Description: long},
			Resource:             resource.NewSchemaless(attribute.String("service.name", long)),
			InstrumentationScope: instrumentation.Scope{SchemaURL: "s"},
		}
		if i%2 == 1 {
			stub.Resource = nil
			stub.InstrumentationScope = instrumentation.Scope{Name: long}
		}
		out = append(out, stub.Snapshot())
	}
	return out
}

// TestEncoderEdgeCasesMatchOtlptrace: the encoder writes the OTLP bytes itself, so the
// edges of the wire format (varint lengths at 127/128 and 16383/16384 bytes, empty keys
// and values, nested maps and slices, hundreds of events and links, a resource or a scope
// left out) are checked against what the official exporter sends for the same spans.
func TestEncoderEdgeCasesMatchOtlptrace(t *testing.T) {
	stockCol, ourCol := otlptest.Start(t), otlptest.Start(t)
	stock, ours := otlptraceExporter(t, stockCol.Endpoint()), quarryExporter(t, ourCol.Endpoint())
	ctx := context.Background()
	spans := edgeSpans()
	for i := range spans {
		batch := spans[i : i+1]
		if err := stock.ExportSpans(ctx, batch); err != nil {
			t.Fatal(err)
		}
		if err := ours.ExportSpans(ctx, batch); err != nil {
			t.Fatal(i, err)
		}
	}
	if err := stock.ExportSpans(ctx, spans); err != nil {
		t.Fatal(err)
	}
	if err := ours.ExportSpans(ctx, spans); err != nil {
		t.Fatal(err)
	}
	want, got := stockCol.Requests(), ourCol.Requests()
	if len(want) != len(got) {
		t.Fatalf("%d vs %d", len(got), len(want))
	}
	for i := range want {
		sortResources(want[i])
		sortResources(got[i])
		if !protoMessagesEqual(want[i], got[i]) {
			t.Fatalf("request %d differs: %s", i, firstDifference(want[i], got[i]))
		}
	}
}

func protoMessagesEqual(a, b any) bool { return proto.Equal(a.(proto.Message), b.(proto.Message)) }

// OTEL_TRACES_SAMPLER_ARG=NaN passed the 0..1 check (NaN compares false either way) and
// sampled nothing, silently: it is refused like any other value outside 0..1.
func TestSamplerArgRefusesNaN(t *testing.T) {
	for _, arg := range []string{"NaN", "nan"} {
		env := map[string]string{"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": arg}
		exp := tracetest.NewInMemoryExporter()
		tel, err := Setup(context.Background(), Config{Service: "test", SpanExporter: exp, Getenv: func(k string) string { return env[k] }})
		if err == nil {
			tp := tel.TracerProvider()
			for range 100 {
				_, s := tp.Tracer("t").Start(context.Background(), "op")
				s.End()
			}
			tel.Shutdown(context.Background())
			t.Errorf("OTEL_TRACES_SAMPLER_ARG=%q: Setup succeeded (%d of 100 spans sampled), want an error naming OTEL_TRACES_SAMPLER_ARG", arg, len(exp.GetSpans()))
		}
	}
}

// stuckExporter is a collector that does not answer: each export waits for its
// context, as otlptrace's client retrying an unreachable endpoint does.
type stuckExporter struct{}

func (stuckExporter) ExportSpans(ctx context.Context, _ []sdktrace.ReadOnlySpan) error {
	<-ctx.Done()
	return ctx.Err()
}
func (stuckExporter) Shutdown(context.Context) error { return nil }

// Shutdown(ctx) returns by ctx's deadline (daemon.Main gives telemetry 5 s): it waited
// for every queued batch, each with a fresh OTEL_BSP_EXPORT_TIMEOUT (30 s by default),
// against a collector that did not answer: minutes, past a pod's grace period.
func TestShutdownKeepsItsDeadline(t *testing.T) {
	env := map[string]string{"OTEL_BSP_EXPORT_TIMEOUT": "1000", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "1", "OTEL_BSP_SCHEDULE_DELAY": "60000"}
	tel, err := Setup(context.Background(), Config{Service: "test", SpanExporter: stuckExporter{}, Batch: true, Getenv: func(k string) string { return env[k] }})
	if err != nil {
		t.Fatal(err)
	}
	tp := tel.TracerProvider()
	for range 4 {
		_, s := tp.Tracer("t").Start(context.Background(), "op")
		s.End()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	err = tel.Shutdown(ctx)
	if took := time.Since(start); took > time.Second {
		t.Errorf("Shutdown with a 200ms deadline took %v (err %v), want it to return by the deadline", took.Round(time.Millisecond), err)
	}
}

// OTEL_METRICS_EXPORTER is read as OTEL_TRACES_EXPORTER is, trimmed and in any case:
// "NONE" turned traces off but still pushed metrics over OTLP.
func TestMetricsExporterNoneIgnoresCase(t *testing.T) {
	for _, v := range []string{"NONE", "None", " none", "none,none"} {
		t.Run(v, func(t *testing.T) {
			col := otlptest.Start(t)
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", col.Endpoint())
			env := map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": col.Endpoint(), "OTEL_METRICS_EXPORTER": v, "OTEL_TRACES_EXPORTER": v}
			tel, err := Setup(context.Background(), Config{Service: "test", Getenv: func(k string) string { return env[k] }})
			if err != nil {
				t.Fatal(err)
			}
			defer otel.SetMeterProvider(metricnoop.NewMeterProvider())
			c, _ := otel.Meter("test").Int64Counter("quarry.test.calls")
			c.Add(context.Background(), 1)
			if err := tel.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			if tel.Tracing {
				t.Errorf("OTEL_TRACES_EXPORTER=%q: tracing on", v)
			}
			if got := col.Metrics(); got["quarry.test.calls"] != 0 {
				t.Errorf("OTEL_METRICS_EXPORTER=%q: metrics still pushed over OTLP (%v), while OTEL_TRACES_EXPORTER=%q turned traces off", v, got, v)
			}
		})
	}
}

// Each signal's own OTLP endpoint says where that signal goes and nothing about the
// other. A traces endpoint alone pushed metrics to the exporter's default,
// localhost:4317, failing at every push and at Shutdown; a metrics endpoint alone
// pushed nothing.
func TestSignalEndpointsAreEachTheirOwn(t *testing.T) {
	clear := func() {
		for _, k := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
			"OTEL_TRACES_EXPORTER", "OTEL_METRICS_EXPORTER", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
			t.Setenv(k, "")
		}
	}
	tests := []struct {
		name         string
		env          func(col string) map[string]string
		tracing      bool
		metricsTaken bool
	}{
		{"a traces endpoint alone", func(col string) map[string]string {
			return map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": col}
		}, true, false},
		{"a metrics endpoint alone", func(col string) map[string]string {
			return map[string]string{"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": col}
		}, false, true},
		{"otlp said, with the metrics endpoint", func(col string) map[string]string {
			return map[string]string{"OTEL_METRICS_EXPORTER": "OTLP", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": col}
		}, false, true},
		{"prometheus only", func(col string) map[string]string {
			return map[string]string{"OTEL_METRICS_EXPORTER": "prometheus", "OTEL_EXPORTER_OTLP_ENDPOINT": col}
		}, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clear()
			col := otlptest.Start(t)
			for k, v := range tt.env(col.Endpoint()) {
				t.Setenv(k, v) // the SDK's exporters read the environment themselves
			}
			tel, err := Setup(context.Background(), Config{Service: "test"})
			if err != nil {
				t.Fatal(err)
			}
			defer otel.SetMeterProvider(metricnoop.NewMeterProvider())
			if tel.Tracing != tt.tracing {
				t.Errorf("tracing %v, want %v", tel.Tracing, tt.tracing)
			}
			c, _ := otel.Meter("test").Int64Counter("quarry.test.calls")
			c.Add(context.Background(), 1)
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			if err := tel.Shutdown(ctx); err != nil {
				t.Errorf("Shutdown: %v, want the metrics pushed where asked or not at all", err)
			}
			if got := col.Metrics()["quarry.test.calls"] > 0; got != tt.metricsTaken {
				t.Errorf("collector took the metric: %v, want %v", got, tt.metricsTaken)
			}
		})
	}
}

// A setting refused after the OTLP exporter was made (the sampler's, the batcher's) left
// that exporter's client running: a caller that goes on after the error, as a test or a
// program embedding the services does, kept its goroutines for good.
func TestRefusedSetupLeavesNothingRunning(t *testing.T) {
	col := otlptest.Start(t)
	for _, bad := range []map[string]string{
		{"OTEL_TRACES_SAMPLER": "sometimes"},
		{"OTEL_BSP_MAX_QUEUE_SIZE": "-1"},
	} {
		env := map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": col.Endpoint()}
		for k, v := range bad {
			env[k] = v
		}
		before := runtime.NumGoroutine()
		for range 5 {
			if tel, err := Setup(context.Background(), Config{Service: "test", Getenv: func(k string) string { return env[k] }}); err == nil {
				tel.Shutdown(context.Background())
				t.Fatalf("%v: Setup succeeded", bad)
			}
		}
		var after int
		for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if after = runtime.NumGoroutine(); after <= before {
				break
			}
		}
		if after > before {
			t.Errorf("%v: %d goroutines after five refused setups, %d before", bad, after, before)
		}
	}
}

// OTEL_TRACES_EXPORTER is a comma-separated list, as the specification has it:
// "otlp,console" was refused at start, so a team could not watch spans in a pod's log
// while they also went to the collector. Each exporter now gets every span, and
// "otlp,prometheus" for metrics pushes them over OTLP.
func TestExporterListsSendToEach(t *testing.T) {
	col := otlptest.Start(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", col.Endpoint()) // the SDK's exporters read it themselves
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := os.Stderr
	os.Stderr = w // the console exporter writes to the stderr it finds at Setup
	env := map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": col.Endpoint(), "OTEL_TRACES_EXPORTER": "otlp, console", "OTEL_METRICS_EXPORTER": "prometheus,otlp"}
	tel, err := Setup(context.Background(), Config{Service: "test", Getenv: func(k string) string { return env[k] }})
	os.Stderr = stderr
	if err != nil {
		t.Fatal(err)
	}
	defer otel.SetMeterProvider(metricnoop.NewMeterProvider())
	defer otel.SetTracerProvider(noop.NewTracerProvider())
	_, span := tel.TracerProvider().Tracer("test").Start(context.Background(), "quarry.test.listed")
	span.End()
	c, _ := otel.Meter("test").Int64Counter("quarry.test.calls")
	c.Add(context.Background(), 1)
	if err := tel.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	w.Close()
	printed, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	if _, named := col.Count("quarry.test.listed"); named != 1 {
		t.Errorf("the collector got %d spans named quarry.test.listed, want 1", named)
	}
	if !strings.Contains(string(printed), "quarry.test.listed") {
		t.Errorf("the console exporter printed %q, want the span", printed)
	}
	if got := col.Metrics(); got["quarry.test.calls"] == 0 {
		t.Errorf("OTEL_METRICS_EXPORTER=prometheus,otlp pushed no metrics over OTLP (%v)", got)
	}
}

// A string with invalid UTF-8 (a file name in Latin-1, an error message cut mid-rune)
// made the whole request undecodable: protobuf strings must be UTF-8, and a receiver
// that checks (Go's protobuf, gRPC's codec) refused every span of the batch with it.
// The encoder sends such a string with U+FFFD in place of each bad sequence, as the
// OTLP specification recommends; the other spans arrive unchanged.
func TestEncoderMakesStringsValidUTF8(t *testing.T) {
	const bad = "top\xff/r\xc3\xa9sum\xe9.md" // a valid é, then a Latin-1 é
	fixed := strings.ToValidUTF8(bad, "\uFFFD")
	start := time.Unix(1_790_000_000, 0)
	stub := tracetest.SpanStub{
		Name:        bad,
		SpanContext: trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1}, TraceFlags: trace.FlagsSampled}),
		StartTime:   start, EndTime: start.Add(time.Millisecond),
		Attributes: []attribute.KeyValue{
			attribute.String("quarry.top_path", bad), attribute.String(bad, "key"),
			attribute.StringSlice("terms", []string{"ok", bad}),
			{Key: "map", Value: attribute.MapValue(attribute.String("k", bad))},
		},
		Events:               []sdktrace.Event{{Name: bad, Time: start, Attributes: []attribute.KeyValue{attribute.String("e", bad)}}},
		Links:                []sdktrace.Link{{SpanContext: trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{2}, SpanID: trace.SpanID{2}}), Attributes: []attribute.KeyValue{attribute.String("l", bad)}}},
		Status:               sdktrace.Status{Code: codes.Error, Description: bad},
		Resource:             resource.NewSchemaless(attribute.String("service.name", bad)),
		InstrumentationScope: instrumentation.Scope{Name: bad, Version: bad, Attributes: attribute.NewSet(attribute.String("s", bad))},
	}
	good := stub
	good.Name, good.Events, good.Links = "fine", nil, nil
	good.Attributes = []attribute.KeyValue{attribute.String("quarry.top_path", "résumé ✓.md")} // UTF-8, not ASCII: kept as it is
	good.Status = sdktrace.Status{}

	col := otlptest.Start(t)
	exp := quarryExporter(t, col.Endpoint())
	if err := exp.ExportSpans(context.Background(), []sdktrace.ReadOnlySpan{good.Snapshot(), stub.Snapshot()}); err != nil {
		t.Fatalf("the collector refused the batch: %v", err)
	}
	reqs := col.Requests()
	if len(reqs) != 1 {
		t.Fatalf("%d requests arrived, want 1", len(reqs))
	}
	var got []string
	var walkValue func(v *commonpb.AnyValue)
	walkKV := func(kvs []*commonpb.KeyValue) {
		for _, kv := range kvs {
			got = append(got, kv.GetKey())
			walkValue(kv.GetValue())
		}
	}
	walkValue = func(v *commonpb.AnyValue) {
		switch x := v.GetValue().(type) {
		case *commonpb.AnyValue_StringValue:
			got = append(got, x.StringValue)
		case *commonpb.AnyValue_ArrayValue:
			for _, e := range x.ArrayValue.GetValues() {
				walkValue(e)
			}
		case *commonpb.AnyValue_KvlistValue:
			walkKV(x.KvlistValue.GetValues())
		}
	}
	spans := 0
	for _, rs := range reqs[0].GetResourceSpans() {
		walkKV(rs.GetResource().GetAttributes())
		for _, ss := range rs.GetScopeSpans() {
			got = append(got, ss.GetScope().GetName(), ss.GetScope().GetVersion())
			walkKV(ss.GetScope().GetAttributes())
			for _, sp := range ss.GetSpans() {
				spans++
				got = append(got, sp.GetName(), sp.GetStatus().GetMessage())
				walkKV(sp.GetAttributes())
				for _, ev := range sp.GetEvents() {
					got = append(got, ev.GetName())
					walkKV(ev.GetAttributes())
				}
				for _, l := range sp.GetLinks() {
					walkKV(l.GetAttributes())
				}
			}
		}
	}
	if spans != 2 {
		t.Errorf("%d spans arrived, want 2", spans)
	}
	n := 0
	if !slices.Contains(got, "résumé ✓.md") {
		t.Errorf("the valid non-ASCII value did not arrive as it was: %q", got)
	}
	for _, s := range got {
		if s == fixed {
			n++
		}
		if !utf8.ValidString(s) {
			t.Errorf("%q arrived, not UTF-8", s)
		}
	}
	// Every place the bad string was put: resource, scope name, version and attribute,
	// span name, status, four attributes (a key among them), the event's name and
	// attribute, the link's attribute.
	if n != 13 {
		t.Errorf("%d strings arrived as %q, want 13: %q", n, fixed, got)
	}
}
