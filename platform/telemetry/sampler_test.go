package telemetry

import (
	"context"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// TestSamplerSettings starts spans through the provider Setup builds from
// OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG and counts the ones exported: new
// traces (roots), and calls from a caller that did or did not sample its trace.
func TestSamplerSettings(t *testing.T) {
	const roots = 2000
	for _, tc := range []struct {
		sampler, arg string
		// rootsMin and rootsMax bound how many of the roots are exported.
		rootsMin, rootsMax int
		// sampledParent and unsampledParent: whether a span under such a parent is.
		sampledParent, unsampledParent bool
	}{
		{"", "", roots, roots, true, false},
		{"parentbased_always_on", "", roots, roots, true, false},
		{"Parentbased_TraceIDRatio ", "0.1", 140, 260, true, false}, // 200 ± 4.2σ
		{"parentbased_traceidratio", "0", 0, 0, true, false},
		{"parentbased_traceidratio", "", roots, roots, true, false}, // no ratio: 1
		{"parentbased_always_off", "", 0, 0, true, false},
		{"traceidratio", "1", roots, roots, true, true},
		{"always_on", "", roots, roots, true, true},
		{"always_off", "", 0, 0, false, false},
	} {
		t.Run(tc.sampler+" "+tc.arg, func(t *testing.T) {
			exp := tracetest.NewInMemoryExporter()
			env := map[string]string{"OTEL_TRACES_SAMPLER": tc.sampler, "OTEL_TRACES_SAMPLER_ARG": tc.arg}
			tel, err := Setup(context.Background(), Config{Service: "test", SpanExporter: exp, Getenv: func(k string) string { return env[k] }})
			if err != nil {
				t.Fatal(err)
			}
			defer tel.Shutdown(context.Background())
			tr := tel.TracerProvider().Tracer("sampler-test")
			for range roots {
				_, s := tr.Start(context.Background(), "root")
				s.End()
			}
			if n := len(exp.GetSpans()); n < tc.rootsMin || n > tc.rootsMax {
				t.Errorf("%d of %d new traces exported, want %d to %d", n, roots, tc.rootsMin, tc.rootsMax)
			}
			for _, parent := range []struct {
				flags trace.TraceFlags
				want  bool
			}{{trace.FlagsSampled, tc.sampledParent}, {0, tc.unsampledParent}} {
				exp.Reset()
				ctx := trace.ContextWithRemoteSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
					TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}, TraceFlags: parent.flags, Remote: true,
				}))
				_, s := tr.Start(ctx, "child")
				s.End()
				if got := len(exp.GetSpans()) == 1; got != parent.want {
					t.Errorf("caller's trace flags %v: exported %v, want %v", parent.flags, got, parent.want)
				}
			}
		})
	}
}

// TestSamplerSettingsRejected: a sampler setting the SDK would replace with its
// default stops Setup, naming the variable.
func TestSamplerSettingsRejected(t *testing.T) {
	for _, tc := range []struct{ sampler, arg, want string }{
		{"parentbased_traceidratio", "10%", "OTEL_TRACES_SAMPLER_ARG"},
		{"traceidratio", "1.5", "OTEL_TRACES_SAMPLER_ARG"},
		{"traceidratio", "-0.1", "OTEL_TRACES_SAMPLER_ARG"},
		{"jaeger_remote", "", "OTEL_TRACES_SAMPLER"},
		{"parentbased_ratio", "0.1", "OTEL_TRACES_SAMPLER"},
	} {
		env := map[string]string{"OTEL_TRACES_SAMPLER": tc.sampler, "OTEL_TRACES_SAMPLER_ARG": tc.arg}
		tel, err := Setup(context.Background(), Config{Service: "test", SpanExporter: tracetest.NewInMemoryExporter(), Getenv: func(k string) string { return env[k] }})
		if err == nil {
			tel.Shutdown(context.Background())
			t.Errorf("%s=%q %s=%q: Setup succeeded, want an error", "OTEL_TRACES_SAMPLER", tc.sampler, "OTEL_TRACES_SAMPLER_ARG", tc.arg)
			continue
		}
		if !strings.Contains(err.Error(), tc.want+"=") {
			t.Errorf("%q %q: error %q does not name %s", tc.sampler, tc.arg, err, tc.want)
		}
	}
}
