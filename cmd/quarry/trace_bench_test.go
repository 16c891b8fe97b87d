package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	quarryv1 "github.com/quarry-router/quarry/gen/quarry/v1"
	"github.com/quarry-router/quarry/platform/telemetry"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// BenchmarkTracingOverhead measures T0 and T2 with tracing off, then on (every span
// sampled, exported in batches to a discarding exporter), in the same process and run:
// SPEC's bar is under 10 % added at p99.
//
//	go test -run '^$' -bench TracingOverhead -benchtime 2000x ./cmd/quarry
func BenchmarkTracingOverhead(b *testing.B) {
	if b.N == 1 {
		// The testing package's probe round: tracing, once on, stays on in this process,
		// so only the real round may switch it.
		return
	}
	// Each round gets a fresh system, so both start from empty caches: a round's
	// questions are all new to it.
	var c quarryv1.QueryServiceClient
	var h healthpb.HealthClient
	fresh := func() {
		_, gw, _ := startSystem(b, "../../examples/kb")
		c, h = quarryv1.NewQueryServiceClient(gw), healthpb.NewHealthClient(gw)
	}
	qs, err := readQuestions("../../examples/questions.jsonl")
	if err != nil {
		b.Fatal(err)
	}
	ask := func(q string) (quarryv1.Tier, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		r, err := c.Query(ctx, &quarryv1.QueryRequest{KnowledgeBase: "platform", Query: q})
		return r.GetTier(), err
	}
	// measure asks each question once (T2 and the other search tiers: variants make every
	// call a miss) and then one cached question repeatedly (T0).
	measure := func() (t0, t2, echo []time.Duration) {
		fresh()
		for i := 0; i < b.N; i++ {
			q := qs[i%len(qs)]
			if n := i / len(qs); n > 0 {
				q = fmt.Sprintf("%s (variant %d)", q, n)
			}
			t := time.Now()
			tier, err := ask(q)
			if err != nil {
				b.Fatal(err)
			}
			if tier == quarryv1.Tier_TIER_DIRECT {
				t2 = append(t2, time.Since(t))
			}
			t = time.Now()
			if tier, err = ask(q); err != nil {
				b.Fatal(err)
			}
			if tier == quarryv1.Tier_TIER_EXACT_CACHE { // fuzzy answers are not stored under the new question
				t0 = append(t0, time.Since(t))
			}
			t = time.Now()
			if _, err := h.Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil {
				b.Fatal(err)
			}
			echo = append(echo, time.Since(t))
		}
		return t0, t2, echo
	}
	b.ResetTimer()
	off0, off2, offEcho := measure()
	tel, err := telemetry.Setup(context.Background(), telemetry.Config{Service: "bench", SpanExporter: tracetest.NewNoopExporter(), Batch: true, Getenv: func(string) string { return "" }})
	if err != nil {
		b.Fatal(err)
	}
	defer tel.Shutdown(context.Background())
	on0, on2, onEcho := measure()
	b.StopTimer()
	report := func(name string, off, on []time.Duration) {
		if len(off) == 0 || len(on) == 0 {
			return
		}
		p99off, p99on := percentile(off, 0.99), percentile(on, 0.99)
		added := 100 * (float64(p99on) - float64(p99off)) / float64(p99off)
		b.ReportMetric(added, name+"-p99-added-%")
		fmt.Printf("%-5s tracing off p50 %7.1f µs p99 %7.1f µs | on p50 %7.1f µs p99 %7.1f µs | p99 %+5.1f %% (n=%d/%d)\n",
			name, us(percentile(off, 0.5)), us(p99off), us(percentile(on, 0.5)), us(p99on), added, len(off), len(on))
	}
	report("echo", offEcho, onEcho)
	report("T0", off0, on0)
	report("T2", off2, on2)
}
