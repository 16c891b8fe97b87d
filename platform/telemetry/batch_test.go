package telemetry

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quarry-router/quarry/platform/telemetry/otlptest"
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

// deadlineExporter refuses a batch whose context is already done, as otlptrace's
// clients do.
type deadlineExporter struct{ batchRecorder }

func (e *deadlineExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return e.batchRecorder.ExportSpans(ctx, spans)
}

// OTEL_BSP_EXPORT_TIMEOUT is a timeout in the specification's sense: 0 means no limit
// (the SDK's processor sets no deadline then). It was refused, so a deployment that
// set it did not start; and a batcher given 0 exported every batch with a context
// already past its deadline, losing them all.
func TestBatcherExportTimeoutZeroIsNoLimit(t *testing.T) {
	env := map[string]string{"OTEL_BSP_EXPORT_TIMEOUT": "0"}
	c, err := batcherConfigFromEnv(func(k string) string { return env[k] }, time.Second)
	if err != nil || c.timeout != 0 {
		t.Fatalf("OTEL_BSP_EXPORT_TIMEOUT=0: got timeout %v, error %v; want 0 (no limit) and no error", c.timeout, err)
	}
	for _, enc := range []bool{false, true} {
		var exp sdktrace.SpanExporter
		r := &deadlineExporter{batchRecorder: *newBatchRecorder()}
		exp = r
		col := otlptest.Start(t)
		if enc { // the OTLP exporter's queue, which encodes spans as they end
			exp = quarryExporter(t, col.Endpoint())
		}
		c.delay = time.Hour
		b := newBatcher(exp, c)
		b.OnEnd(testSpan(true))
		b.OnEnd(testSpan(true))
		if err := b.ForceFlush(context.Background()); err != nil {
			t.Errorf("encoded %v: ForceFlush: %v", enc, err)
		}
		if err := b.Shutdown(context.Background()); err != nil {
			t.Errorf("encoded %v: Shutdown: %v", enc, err)
		}
		n := 0
		if enc {
			n, _ = col.Count("")
		} else {
			_, n = r.got()
		}
		if n != 2 {
			t.Errorf("encoded %v: %d spans exported, want 2", enc, n)
		}
	}
}

// A batch size larger than the queue is the SDK's default batch size, or the queue's
// when that is smaller (NewBatchSpanProcessor), not the queue's size.
func TestBatcherConfigCapsTheBatchAsTheSDKDoes(t *testing.T) {
	env := map[string]string{"OTEL_BSP_MAX_QUEUE_SIZE": "1000", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "5000"}
	c, err := batcherConfigFromEnv(func(k string) string { return env[k] }, time.Second)
	if err != nil || c.maxQueue != 1000 || c.maxBatch != 512 {
		t.Errorf("got queue %d, batch %d, error %v; want 1000, 512 (the SDK's)", c.maxQueue, c.maxBatch, err)
	}
}
