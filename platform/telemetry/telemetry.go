// Package telemetry sets up OpenTelemetry tracing and metrics once per process, from the
// standard OTEL_* environment variables, so one trace spans gateway → search → agent →
// LLM and every service exports the same way.
//
// Tracing is off unless asked for: OTEL_TRACES_EXPORTER=otlp, console or both
// (otlp,console), or an
// OTEL_EXPORTER_OTLP_ENDPOINT (or ..._TRACES_ENDPOINT) being set, turns it on. The
// sampler follows OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG (default parent-based
// always-on; a value the SDK would silently replace stops Setup), the resource
// OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES. Metrics go to a Prometheus registry
// served by Handler, and over OTLP as well when OTEL_METRICS_EXPORTER=otlp, or when it is
// unset and OTEL_EXPORTER_OTLP_ENDPOINT (or ..._METRICS_ENDPOINT) is set. OTLP goes over gRPC
// unless OTEL_EXPORTER_OTLP_PROTOCOL (or its _TRACES_/_METRICS_ form) says http/protobuf.
// OTEL_SDK_DISABLED=true exports nothing, whatever the other variables say.
// Spans are this package's own (span.go: the SDK's semantics and OTLP, at less cost per
// span) unless QUARRY_TRACES_SDK=true, a value length limit or the console exporter
// asks for the SDK's.
// Trace context travels in the headers OTEL_PROPAGATORS names (default W3C tracecontext and
// baggage; b3, b3multi, jaeger, xray and ottrace too).
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/contrib/propagators/autoprop"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetricgrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// Config names the service; everything else comes from OTEL_* variables.
type Config struct {
	Service string
	// Version is the service.version; "" takes the build's (see serviceVersion).
	Version string
	// SpanExporter, when set, replaces the one the environment selects (tests use an
	// in-memory exporter). It exports each span as it ends unless Batch is set.
	SpanExporter sdktrace.SpanExporter
	Batch        bool
	// Getenv reads the environment; nil means os.Getenv.
	Getenv func(string) string
}

// Telemetry holds the providers of one process.
type Telemetry struct {
	tracer   spanProvider
	meter    *sdkmetric.MeterProvider
	registry *prometheus.Registry
	// Tracing reports whether spans are exported.
	Tracing bool
}

// Setup installs the global meter provider, the W3C trace-context propagator and, when
// tracing is on, the global tracer provider. Call Shutdown on exit to flush what is
// buffered.
func Setup(ctx context.Context, cfg Config) (*Telemetry, error) {
	getenv := cfg.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	attrs := []attribute.KeyValue{semconv.ServiceName(cfg.Service)}
	if v := serviceVersion(cfg.Version); v != "" {
		attrs = append(attrs, semconv.ServiceVersion(v))
	}
	res, err := resource.New(ctx,
		// telemetry.sdk.name, .language and .version: the resource specification
		// requires them of every SDK's resource, and resource.New, unlike
		// resource.Default, adds them only when asked.
		resource.WithTelemetrySDK(),
		resource.WithAttributes(attrs...),
		resource.WithFromEnv(), // OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win
	)
	if err != nil {
		return nil, fmt.Errorf("telemetry resource: %w", err)
	}
	t := &Telemetry{registry: prometheus.NewRegistry()}
	// OTEL_SDK_DISABLED=true turns every exporter the environment selects off, whatever
	// the other OTEL_* variables say (the specification gives it precedence over them;
	// the Go SDK does not read it). The propagator stays, so a caller's trace context
	// still passes through, and Prometheus /metrics is still served where -metrics-addr
	// asks for it: that is a flag of the service, not an SDK exporter.
	sdkDisabled := strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true")
	// Checked before anything starts, so a refused setting leaves nothing running.
	// Values are case-insensitive, as OTEL_TRACES_EXPORTER's are.
	prop, err := propagators(getenv)
	if err != nil {
		return nil, fmt.Errorf("telemetry: %w", err)
	}
	otlpMetrics := false
	if !sdkDisabled {
		if otlpMetrics, err = metricsOverOTLP(getenv); err != nil {
			return nil, fmt.Errorf("telemetry: %w", err)
		}
	}
	metricsProtocol := ""
	if otlpMetrics {
		if metricsProtocol, err = otlpProtocol(getenv, "METRICS"); err != nil {
			return nil, fmt.Errorf("telemetry: %w", err)
		}
	}

	var exps []sdktrace.SpanExporter
	switch {
	case cfg.SpanExporter != nil:
		exps = []sdktrace.SpanExporter{cfg.SpanExporter}
	case !sdkDisabled:
		if exps, err = spanExporters(ctx, getenv); err != nil {
			return nil, err
		}
	}
	// A setting refused from here on stops what was started: an OTLP exporter holds a
	// client and its goroutines, and a caller may go on after the error (a test, or an
	// embedding program that runs without telemetry).
	stop := func(err error) (*Telemetry, error) {
		if t.tracer != nil {
			_ = t.tracer.Shutdown(ctx) // shuts its exporters down too
		} else if cfg.SpanExporter == nil {
			for _, exp := range exps {
				_ = exp.Shutdown(ctx)
			}
		}
		return nil, err
	}
	if len(exps) > 0 {
		t.Tracing = true
		sampler, err := samplerFromEnv(getenv)
		if err != nil {
			return stop(fmt.Errorf("telemetry: %w", err))
		}
		bc, err := batcherConfigFromEnv(getenv, time.Second)
		if err != nil {
			return stop(fmt.Errorf("telemetry: %w", err))
		}
		// QUARRY_TRACES_SDK=true makes the SDK's spans instead of span.go's: a way back
		// that needs no new build, should span.go's ever be found wanting. The SDK also
		// makes them when a value length limit is set, which span.go does not apply, and
		// for the console exporter.
		sdkSpans := strings.EqualFold(strings.TrimSpace(getenv("QUARRY_TRACES_SDK")), "true") ||
			sdktrace.NewSpanLimits().AttributeValueLengthLimit >= 0
		for _, exp := range exps {
			if _, otlp := exp.(*otlpExporter); !otlp && cfg.SpanExporter == nil {
				sdkSpans = true // the console's: it prints what span.go does not keep
			}
		}
		var sinks []spanSink
		for _, exp := range exps {
			var sink spanSink = newBatcher(exp, bc)
			if cfg.SpanExporter != nil && !cfg.Batch {
				// Tests read spans as soon as a call returns.
				sink = newSyncer(exp)
			}
			sinks = append(sinks, sink)
		}
		if sdkSpans {
			opts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res), sdktrace.WithSampler(sampler)}
			for _, sink := range sinks {
				opts = append(opts, sdktrace.WithSpanProcessor(sink))
			}
			t.tracer = sdktrace.NewTracerProvider(opts...)
		} else {
			t.tracer = newTracerProvider(res, sampler, sinks...)
		}
	}

	prom, err := otelprom.New(otelprom.WithRegisterer(t.registry))
	if err != nil {
		return stop(fmt.Errorf("telemetry prometheus: %w", err))
	}
	mopts := []sdkmetric.Option{sdkmetric.WithResource(res), sdkmetric.WithReader(prom)}
	if otlpMetrics {
		var mexp sdkmetric.Exporter
		if metricsProtocol == protocolHTTP {
			mexp, err = otlpmetrichttp.New(ctx)
		} else {
			mexp, err = otlpmetricgrpc.New(ctx)
		}
		if err != nil {
			return stop(fmt.Errorf("telemetry otlp metrics (%s): %w", metricsProtocol, err))
		}
		mopts = append(mopts, sdkmetric.WithReader(sdkmetric.NewPeriodicReader(mexp)))
	}
	t.meter = sdkmetric.NewMeterProvider(mopts...)

	current.Store(t)
	// Without an exporter the global tracer provider stays the API's no-op one rather
	// than an SDK with nowhere to send spans: that one would still build, time and end
	// every span. Its spans carry the caller's trace context on, so a traced caller's
	// trace continues through an untraced service, and logs show its trace id.
	if t.tracer != nil {
		otel.SetTracerProvider(t.tracer)
	}
	otel.SetMeterProvider(t.meter)
	otel.SetTextMapPropagator(prop)
	return t, nil
}

// propagators reads OTEL_PROPAGATORS: tracecontext and baggage when unset, as the
// specification says; also b3, b3multi, jaeger, xray, ottrace and none, so that a caller
// or a mesh that passes trace context in B3 or Jaeger headers keeps one trace through
// Quarry. An unknown name is refused: silently dropping it would cut every trace.
func propagators(getenv func(string) string) (propagation.TextMapPropagator, error) {
	v := strings.TrimSpace(getenv("OTEL_PROPAGATORS"))
	if v == "" {
		return propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}), nil
	}
	p, err := autoprop.TextMapPropagator(listOf(v)...)
	if err != nil {
		return nil, fmt.Errorf("OTEL_PROPAGATORS=%q: %w (want a list of tracecontext, baggage, b3, b3multi, jaeger, xray, ottrace, or none)", v, err)
	}
	return p, nil
}

// buildVersion is set by image builds, which have no .git for the build information to
// read: -ldflags "-X github.com/quarry-router/quarry/platform/telemetry.buildVersion=v1.2.3"
// (the Dockerfiles' VERSION argument).
var buildVersion string

// serviceVersion is the service.version of the resource: the one the program gives,
// else the one the image build set (buildVersion), else the build's (its module version, or for a development build the VCS revision
// the binary was built from, "-dirty" when it had local changes), else "" and the
// resource has none; an empty service.version would say nothing and hide an
// OTEL_RESOURCE_ATTRIBUTES-less deployment's missing version.
func serviceVersion(given string) string {
	if given != "" {
		return given
	}
	if buildVersion != "" {
		return buildVersion
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev string
	var dirty bool
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return ""
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if dirty {
		rev += "-dirty"
	}
	return rev
}

// listOf reads a comma-separated OTEL_* list: its names in lower case, white space
// and empty items dropped.
func listOf(v string) []string {
	var out []string
	for _, n := range strings.Split(v, ",") {
		if n = strings.ToLower(strings.TrimSpace(n)); n != "" {
			out = append(out, n)
		}
	}
	return out
}

// The OTLP transports, as OTEL_EXPORTER_OTLP_PROTOCOL names them.
const (
	protocolGRPC = "grpc"
	protocolHTTP = "http/protobuf"
)

// otlpProtocol is the OTLP transport for signal (TRACES or METRICS):
// OTEL_EXPORTER_OTLP_<signal>_PROTOCOL, else OTEL_EXPORTER_OTLP_PROTOCOL, else grpc.
// The specification's default is http/protobuf, but the Go SDK leaves the choice to the
// program, and Quarry's compose file and manifests send to port 4317: a deployment that
// set only an endpoint keeps working. http/json is refused, not ignored: the Go SDK has
// no JSON exporter, and sending protobuf where JSON was asked for would fail at every
// export instead of at the start.
func otlpProtocol(getenv func(string) string, signal string) (string, error) {
	name := "OTEL_EXPORTER_OTLP_" + signal + "_PROTOCOL"
	p := strings.TrimSpace(getenv(name))
	if p == "" {
		name = "OTEL_EXPORTER_OTLP_PROTOCOL"
		p = strings.TrimSpace(getenv(name))
	}
	switch p {
	case "", protocolGRPC:
		return protocolGRPC, nil
	case protocolHTTP:
		return protocolHTTP, nil
	case "http/json":
		return "", fmt.Errorf("%s=http/json: not supported (the Go SDK exports binary protobuf only); use grpc or http/protobuf", name)
	default:
		return "", fmt.Errorf("%s=%q: want grpc or http/protobuf", name, p)
	}
}

// otlpConfigured reports whether an OTLP endpoint is set for signal (TRACES or
// METRICS): OTEL_EXPORTER_OTLP_ENDPOINT, or the signal's own endpoint. A signal's own
// endpoint says where that signal goes and nothing about the other: with only a traces
// endpoint set, metrics pushed over OTLP would go to the exporter's default,
// localhost:4317, and fail at every push.
func otlpConfigured(getenv func(string) string, signal string) bool {
	return getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_"+signal+"_ENDPOINT") != ""
}

// metricsOverOTLP reports whether metrics are pushed over OTLP, beside the Prometheus
// endpoint that is always served: OTEL_METRICS_EXPORTER=otlp (or a comma-separated list
// holding otlp), or unset with an OTLP endpoint for metrics; prometheus or none push
// nothing. Values are read as OTEL_TRACES_EXPORTER's are, and one the service cannot
// honour stops it at start.
func metricsOverOTLP(getenv func(string) string) (bool, error) {
	v := strings.ToLower(strings.TrimSpace(getenv("OTEL_METRICS_EXPORTER")))
	if v == "" {
		return otlpConfigured(getenv, "METRICS"), nil
	}
	otlp, none := false, false
	var kinds []string // each name once, as OTEL_TRACES_EXPORTER's
	for _, k := range listOf(v) {
		switch k {
		case "otlp":
			otlp = true
		case "none":
			none = true
		case "prometheus":
		default:
			return false, fmt.Errorf("OTEL_METRICS_EXPORTER=%q: want otlp, prometheus or none, or a comma-separated list of otlp and prometheus (Prometheus metrics are always served)", v)
		}
		if !slices.Contains(kinds, k) {
			kinds = append(kinds, k)
		}
	}
	if none && len(kinds) > 1 {
		return false, fmt.Errorf("OTEL_METRICS_EXPORTER=%q: none pushes nothing, and cannot be listed with other exporters", v)
	}
	return otlp, nil
}

// spanExporters builds the exporters OTEL_TRACES_EXPORTER names: a comma-separated
// list, as the specification has it (otlp,console sends spans to a collector and shows
// them in the log at once), each name once; none, alone, turns tracing off. Unset means
// OTLP when an OTLP endpoint is configured and nothing otherwise. A name the service
// cannot honour stops it at start, and whatever was built before it is shut down.
func spanExporters(ctx context.Context, getenv func(string) string) ([]sdktrace.SpanExporter, error) {
	v := strings.ToLower(strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")))
	if v == "" && otlpConfigured(getenv, "TRACES") {
		v = "otlp"
	}
	var kinds []string
	for _, k := range listOf(v) {
		if !slices.Contains(kinds, k) {
			kinds = append(kinds, k)
		}
	}
	for _, k := range kinds {
		switch k {
		case "otlp", "console":
		case "none":
			if len(kinds) > 1 {
				return nil, fmt.Errorf("OTEL_TRACES_EXPORTER=%q: none turns tracing off, and cannot be listed with other exporters", v)
			}
		default:
			return nil, fmt.Errorf("OTEL_TRACES_EXPORTER=%q: want otlp, console or none, or a comma-separated list of otlp and console", v)
		}
	}
	var exps []sdktrace.SpanExporter
	for _, k := range kinds {
		exp, err := spanExporter(ctx, getenv, k)
		if err != nil {
			for _, e := range exps {
				_ = e.Shutdown(ctx)
			}
			return nil, err
		}
		if exp != nil {
			exps = append(exps, exp)
		}
	}
	return exps, nil
}

// spanExporter builds one exporter of OTEL_TRACES_EXPORTER's list: nil for none.
func spanExporter(ctx context.Context, getenv func(string) string, kind string) (sdktrace.SpanExporter, error) {
	switch kind {
	case "otlp":
		protocol, err := otlpProtocol(getenv, "TRACES")
		if err != nil {
			return nil, fmt.Errorf("telemetry: %w", err)
		}
		exp, err := newOTLPExporter(ctx, protocol)
		if err != nil {
			return nil, fmt.Errorf("telemetry: %w", err)
		}
		return exp, nil
	case "console":
		exp, err := stdouttrace.New(stdouttrace.WithWriter(os.Stderr))
		if err != nil {
			return nil, fmt.Errorf("telemetry console traces: %w", err)
		}
		return exp, nil
	default:
		return nil, nil
	}
}

// Handler serves the process's metrics in the Prometheus text format.
func (t *Telemetry) Handler() http.Handler {
	return promhttp.HandlerFor(t.registry, promhttp.HandlerOpts{})
}

// current is the Telemetry of the last Setup, which services serve metrics from.
var current atomic.Pointer[Telemetry]

// StartMetrics serves the process's /metrics on addr until ctx is done or stop is
// called, whichever comes first; with addr "" it serves nothing. The address is bound
// before it returns, so that a service whose metrics port is taken fails at start, as
// it does for its gRPC port, rather than serving without metrics. A caller defers stop,
// so that a start failing after this one releases the port too.
func StartMetrics(ctx context.Context, addr string, log *slog.Logger) (stop func(), err error) {
	if addr == "" {
		return func() {}, nil
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics listen %s: %w", addr, err)
	}
	ctx, stop = context.WithCancel(ctx)
	mux := http.NewServeMux()
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, r *http.Request) {
		t := current.Load()
		if t == nil {
			http.Error(w, "telemetry is not set up", http.StatusServiceUnavailable)
			return
		}
		t.Handler().ServeHTTP(w, r)
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	log.Info("serving Prometheus metrics", "addr", "http://"+lis.Addr().String()+"/metrics")
	go func() {
		if err := srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics endpoint stopped", "addr", lis.Addr().String(), "err", err)
		}
	}()
	return stop, nil
}

// spanProvider is a tracer provider that exports: the SDK's, or this package's own
// (span.go).
type spanProvider interface {
	trace.TracerProvider
	ForceFlush(context.Context) error
	Shutdown(context.Context) error
}

// TracerProvider is the provider spans are exported from; nil when tracing is off.
func (t *Telemetry) TracerProvider() trace.TracerProvider {
	if t.tracer == nil {
		return nil
	}
	return t.tracer
}

// ForceFlush exports the spans ended so far; with tracing off it does nothing.
func (t *Telemetry) ForceFlush(ctx context.Context) error {
	if t.tracer == nil {
		return nil
	}
	return t.tracer.ForceFlush(ctx)
}

// Shutdown flushes and stops the providers.
func (t *Telemetry) Shutdown(ctx context.Context) error {
	// Both at once, each within ctx: one after the other, a trace collector that never
	// answered took the whole deadline, and the meter's last push was lost with it.
	var terr error
	var wg sync.WaitGroup
	if t.tracer != nil {
		wg.Go(func() { terr = t.tracer.Shutdown(ctx) })
	}
	merr := t.meter.Shutdown(ctx)
	wg.Wait()
	return errors.Join(terr, merr)
}
