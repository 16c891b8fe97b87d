package cache_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/quarry-router/quarry/gateway/cache"
	"github.com/quarry-router/quarry/platform/redistest"
	"github.com/quarry-router/quarry/platform/telemetry/telemetrytest"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// TestRedisCallsAreCountedByOperationAndOutcome: the exported counter
// quarry.gateway.cache.redis.calls counts every call of the Redis store under its
// operation and outcome, Redis errors and calls the breaker kept off Redis included,
// as the store's own Stats count them.
func TestRedisCallsAreCountedByOperationAndOutcome(t *testing.T) {
	reader := telemetrytest.Metrics()
	srv := redistest.Start(t)
	rc := testRedisConfig(srv.Addr, "counted:")
	rc.Timeout = 50 * time.Millisecond
	rc.BreakerFailures = 3
	rc.BreakerCooldown = time.Hour // no probe gets through during the test
	s := cache.NewRedis(newClient(t, rc), cache.DefaultConfig(), rc, time.Now, nil)
	ctx := context.Background()

	before := redisCalls(t, reader)
	for _, err := range lookups(ctx, s) {
		if err != nil && !errors.Is(err, cache.ErrMiss) {
			t.Fatalf("with Redis up: %v", err)
		}
	}
	up := callsDiff(redisCalls(t, reader), before)
	for k, want := range map[string]int64{"get/miss": 1, "similar/miss": 1, "put/stored": 1} {
		if up[k] != want {
			t.Errorf("with Redis up: %s counted %d, want %d (all: %v)", k, up[k], want, up)
		}
	}

	stBefore, before := s.Stats(), redisCalls(t, reader)
	srv.Kill()
	for range 10 {
		for _, err := range lookups(ctx, s) {
			if !errors.Is(err, cache.ErrUnavailable) {
				t.Fatalf("with Redis down: %v, want ErrUnavailable", err)
			}
		}
	}
	down := callsDiff(redisCalls(t, reader), before)
	st := s.Stats()
	var errs, skipped int64
	for _, op := range []string{"get", "similar", "put"} {
		errs += down[op+"/error"]
		skipped += down[op+"/skipped"]
	}
	if errs == 0 || errs != st.Failures-stBefore.Failures {
		t.Errorf("Redis errors counted %d, Stats say %d (all: %v)", errs, st.Failures-stBefore.Failures, down)
	}
	if skipped == 0 || skipped != st.Skipped-stBefore.Skipped {
		t.Errorf("calls kept off Redis counted %d, Stats say %d (all: %v)", skipped, st.Skipped-stBefore.Skipped, down)
	}
	if errs+skipped != 30 {
		t.Errorf("%d error and %d skipped calls counted for 30 calls with Redis down", errs, skipped)
	}
}

// redisCalls reads quarry.gateway.cache.redis.calls, keyed "op/outcome".
func redisCalls(t *testing.T, r *sdkmetric.ManualReader) map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if sum, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == "quarry.gateway.cache.redis.calls" {
				for _, p := range sum.DataPoints {
					op, _ := p.Attributes.Value("op")
					outcome, _ := p.Attributes.Value("outcome")
					out[op.AsString()+"/"+outcome.AsString()] += p.Value
				}
			}
		}
	}
	return out
}

func callsDiff(after, before map[string]int64) map[string]int64 {
	out := map[string]int64{}
	for k, v := range after {
		if d := v - before[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}
