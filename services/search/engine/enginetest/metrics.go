package enginetest

import (
	"context"
	"sync"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// BackendDuration is the histogram engine.Observe records.
const BackendDuration = "quarry.search.backend.duration"

// Metrics reads the backend metrics through a real OpenTelemetry SDK.
type Metrics struct {
	reader *sdkmetric.ManualReader
}

// sdk is the provider InstallMetrics installs, one per process: the backend histogram
// is created at package init from the global provider, which forwards instruments to the
// first provider set in the process and to no later one.
var sdk struct {
	once   sync.Once
	mp     *sdkmetric.MeterProvider
	reader *sdkmetric.ManualReader
}

// InstallMetrics makes an SDK meter provider, read by hand, the global one until the test
// ends. Every call installs the same provider (it is never shut down), so tests may run
// again in one process (-count); a test that set another provider earlier in the process
// would take the histogram with it, and the backend calls would then read empty.
func InstallMetrics(t testing.TB) *Metrics {
	t.Helper()
	sdk.once.Do(func() {
		// Delta temporality: each Calls sees only what happened since the previous one.
		sdk.reader = sdkmetric.NewManualReader(sdkmetric.WithTemporalitySelector(func(sdkmetric.InstrumentKind) metricdata.Temporality {
			return metricdata.DeltaTemporality
		}))
		sdk.mp = sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdk.reader))
	})
	prev := otel.GetMeterProvider()
	otel.SetMeterProvider(sdk.mp)
	t.Cleanup(func() { otel.SetMeterProvider(prev) })
	return &Metrics{reader: sdk.reader}
}

// Calls returns the backend calls recorded since the previous Calls, counted by
// "backend/op/outcome". It fails the test if a data point carries any other attribute,
// since each one multiplies the metric's series.
func (m *Metrics) Calls(t testing.TB) map[string]uint64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := m.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatalf("collect metrics: %v", err)
	}
	out := map[string]uint64{}
	for _, sm := range rm.ScopeMetrics {
		for _, md := range sm.Metrics {
			if md.Name != BackendDuration {
				continue
			}
			if md.Unit != "ms" {
				t.Errorf("%s unit = %q, want ms", md.Name, md.Unit)
			}
			h, ok := md.Data.(metricdata.Histogram[float64])
			if !ok {
				t.Fatalf("%s is a %T, want a float64 histogram", md.Name, md.Data)
			}
			for _, dp := range h.DataPoints {
				if dp.Attributes.Len() != 3 {
					t.Errorf("%s point has attributes %v, want quarry.backend, quarry.op and quarry.outcome only", md.Name, dp.Attributes.ToSlice())
				}
				get := func(k attribute.Key) string { v, _ := dp.Attributes.Value(k); return v.AsString() }
				if v, ok := dp.Min.Value(); ok && v < 0 {
					t.Errorf("%s recorded a negative duration %v", md.Name, v)
				}
				out[get("quarry.backend")+"/"+get("quarry.op")+"/"+get("quarry.outcome")] += dp.Count
			}
		}
	}
	return out
}

// Counts returns what the int64 counter name counted since the previous read of the
// metrics (Calls or Counts), by the value of its attribute key: the search service's
// other counters, which share the one provider.
func (m *Metrics) Counts(t testing.TB, name string, key attribute.Key) map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := m.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatalf("collect metrics: %v", err)
	}
	out := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, md := range sm.Metrics {
			if sum, ok := md.Data.(metricdata.Sum[int64]); ok && md.Name == name {
				for _, dp := range sum.DataPoints {
					v, _ := dp.Attributes.Value(key)
					out[v.AsString()] += dp.Value
				}
			}
		}
	}
	return out
}
