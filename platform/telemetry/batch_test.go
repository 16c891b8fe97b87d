package telemetry

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// batchRecorder records the size of every batch exported to it.
type batchRecorder struct {
	mu       sync.Mutex
	batches  []int
	spans    int
	shutdown bool
	exported chan struct{}
	block    chan struct{} // when set, exports wait for it
}

func newBatchRecorder() *batchRecorder { return &batchRecorder{exported: make(chan struct{}, 100)} }

func (r *batchRecorder) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	if r.block != nil {
		<-r.block
	}
	r.mu.Lock()
	r.batches = append(r.batches, len(spans))
	r.spans += len(spans)
	r.mu.Unlock()
	r.exported <- struct{}{}
	return nil
}

func (r *batchRecorder) Shutdown(context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.shutdown = true
	return nil
}

func (r *batchRecorder) got() (batches []int, spans int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]int(nil), r.batches...), r.spans
}

func testSpan(sampled bool) sdktrace.ReadOnlySpan {
	cfg := trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1}}
	if sampled {
		cfg.TraceFlags = trace.FlagsSampled
	}
	return tracetest.SpanStub{Name: "s", SpanContext: trace.NewSpanContext(cfg)}.Snapshot()
}

func waitExport(t *testing.T, r *batchRecorder, within time.Duration) {
	t.Helper()
	select {
	case <-r.exported:
	case <-time.After(within):
		t.Fatalf("no export within %v", within)
	}
}

func TestBatcherExportsAFullBatchAtOnce(t *testing.T) {
	r := newBatchRecorder()
	b := newBatcher(r, batcherConfig{delay: time.Hour, timeout: time.Second, maxQueue: 100, maxBatch: 10})
	defer b.Shutdown(context.Background())
	for range 9 {
		b.OnEnd(testSpan(true))
	}
	select {
	case <-r.exported:
		t.Fatal("exported before the batch was full")
	case <-time.After(50 * time.Millisecond):
	}
	b.OnEnd(testSpan(false)) // not sampled: not queued
	b.OnEnd(testSpan(true))
	waitExport(t, r, 5*time.Second)
	if batches, _ := r.got(); len(batches) != 1 || batches[0] != 10 {
		t.Errorf("batches %v, want one of 10", batches)
	}
}

func TestBatcherExportsOnItsSchedule(t *testing.T) {
	r := newBatchRecorder()
	b := newBatcher(r, batcherConfig{delay: 20 * time.Millisecond, timeout: time.Second, maxQueue: 100, maxBatch: 10})
	defer b.Shutdown(context.Background())
	b.OnEnd(testSpan(true))
	b.OnEnd(testSpan(true))
	waitExport(t, r, 5*time.Second)
	if _, n := r.got(); n != 2 {
		t.Errorf("%d spans exported, want 2", n)
	}
}

func TestBatcherFlushSplitsIntoBatchesAndShutdownFlushes(t *testing.T) {
	r := newBatchRecorder()
	r.block = make(chan struct{})
	b := newBatcher(r, batcherConfig{delay: time.Hour, timeout: time.Second, maxQueue: 100, maxBatch: 10})
	// The first full batch is taken and its export blocks; the rest queue behind it.
	for range 10 {
		b.OnEnd(testSpan(true))
	}
	for range 25 {
		b.OnEnd(testSpan(true))
	}
	close(r.block)
	if err := b.ForceFlush(context.Background()); err != nil {
		t.Fatal(err)
	}
	batches, n := r.got()
	if n != 35 {
		t.Fatalf("%d spans exported after ForceFlush, want 35 (batches %v)", n, batches)
	}
	for _, size := range batches {
		if size > 10 {
			t.Errorf("a batch of %d spans, more than the maximum 10: %v", size, batches)
		}
	}
	b.OnEnd(testSpan(true))
	if err := b.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, n := r.got(); n != 36 || !r.shutdown {
		t.Errorf("after Shutdown: %d spans exported (want 36), exporter shut down %v", n, r.shutdown)
	}
	b.OnEnd(testSpan(true)) // refused, not exported, no panic
	if err := b.Shutdown(context.Background()); err != nil {
		t.Errorf("second Shutdown: %v", err)
	}
	if err := b.ForceFlush(context.Background()); err != nil {
		t.Errorf("ForceFlush after Shutdown: %v", err)
	}
	if _, n := r.got(); n != 36 {
		t.Errorf("%d spans exported after Shutdown, want 36", n)
	}
}

func TestBatcherDropsBeyondItsQueueAndSaysSo(t *testing.T) {
	var mu sync.Mutex
	var handled []error
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		mu.Lock()
		handled = append(handled, err)
		mu.Unlock()
	}))
	defer otel.SetErrorHandler(otel.ErrorHandlerFunc(func(error) {}))

	r := newBatchRecorder()
	r.block = make(chan struct{})
	b := newBatcher(r, batcherConfig{delay: time.Hour, timeout: time.Second, maxQueue: 20, maxBatch: 20})
	defer b.Shutdown(context.Background())
	for range 20 { // a full queue: its export starts and blocks
		b.OnEnd(testSpan(true))
	}
	waitQueued := time.Now().Add(5 * time.Second)
	for {
		b.mu.Lock()
		taken := b.queue.len() == 0
		b.mu.Unlock()
		if taken || time.Now().After(waitQueued) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	for range 25 { // 20 fit in the new queue, 5 are dropped
		b.OnEnd(testSpan(true))
	}
	close(r.block)
	// The drops are reported by the export running when they happened, or by the next.
	if err := b.ForceFlush(context.Background()); err != nil {
		mu.Lock()
		handled = append(handled, err)
		mu.Unlock()
	}
	mu.Lock()
	reported := errors.Join(handled...)
	mu.Unlock()
	if reported == nil || !strings.Contains(reported.Error(), "5 spans dropped") {
		t.Errorf("errors reported %v, want the 5 dropped spans", reported)
	}
	if _, n := r.got(); n != 40 {
		t.Errorf("%d spans exported, want 40", n)
	}
}

func TestBatcherUnderConcurrentSpans(t *testing.T) {
	r := newBatchRecorder()
	b := newBatcher(r, batcherConfig{delay: time.Millisecond, timeout: time.Second, maxQueue: 100_000, maxBatch: 64})
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 1000 {
				b.OnEnd(testSpan(true))
			}
		})
	}
	go func() {
		for range r.exported {
		}
	}()
	wg.Wait()
	if err := b.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, n := r.got(); n != 8000 {
		t.Errorf("%d spans exported, want 8000", n)
	}
}

func TestBatcherConfigFromEnv(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		want batcherConfig
		err  string
	}{
		{"defaults", nil, batcherConfig{delay: time.Second, timeout: 30 * time.Second, maxQueue: 2048, maxBatch: 512}, ""},
		{"set", map[string]string{"OTEL_BSP_SCHEDULE_DELAY": "200", "OTEL_BSP_EXPORT_TIMEOUT": "5000", "OTEL_BSP_MAX_QUEUE_SIZE": "4096", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "64"},
			batcherConfig{delay: 200 * time.Millisecond, timeout: 5 * time.Second, maxQueue: 4096, maxBatch: 64}, ""},
		{"batch capped by queue", map[string]string{"OTEL_BSP_MAX_QUEUE_SIZE": "100"},
			batcherConfig{delay: time.Second, timeout: 30 * time.Second, maxQueue: 100, maxBatch: 100}, ""},
		{"not a number", map[string]string{"OTEL_BSP_MAX_QUEUE_SIZE": "lots"}, batcherConfig{}, "OTEL_BSP_MAX_QUEUE_SIZE"},
		{"zero", map[string]string{"OTEL_BSP_SCHEDULE_DELAY": "0"}, batcherConfig{}, "OTEL_BSP_SCHEDULE_DELAY"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := batcherConfigFromEnv(func(k string) string { return tc.env[k] }, time.Second)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one naming %s", err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("got %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}
