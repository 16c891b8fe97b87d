package telemetry

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// batcher is a batching span processor, like the SDK's BatchSpanProcessor, that does
// not wake its export goroutine for every span. The SDK's hands each ended span to that
// goroutine over a channel, so a query that ends five spans readies it five times, on
// the two cores the query itself runs on; in BenchmarkTracingOverhead those handoffs
// showed in the slowest queries, untraced ones too. Here a span is appended to a slice
// under a mutex, and the goroutine wakes when a batch is full, on its schedule, or
// when asked to flush.
//
// It reads the SDK's OTEL_BSP_* variables with the SDK's defaults.
type batcher struct {
	exp      sdktrace.SpanExporter
	delay    time.Duration
	timeout  time.Duration
	maxQueue int
	maxBatch int

	mu      sync.Mutex
	queue   []sdktrace.ReadOnlySpan
	spare   []sdktrace.ReadOnlySpan // the previous export's slice, emptied, for the next queue
	stopped bool

	full    chan struct{} // a batch is waiting; buffered, one wakeup at a time
	flushes chan chan error
	stop    chan struct{}
	done    chan struct{}

	dropped atomic.Int64
}

type batcherConfig struct {
	delay, timeout     time.Duration
	maxQueue, maxBatch int
}

// batcherConfigFromEnv is the SDK's BatchSpanProcessor configuration: its defaults,
// changed by OTEL_BSP_SCHEDULE_DELAY, OTEL_BSP_EXPORT_TIMEOUT (milliseconds),
// OTEL_BSP_MAX_QUEUE_SIZE and OTEL_BSP_MAX_EXPORT_BATCH_SIZE. delay is the default
// schedule delay.
func batcherConfigFromEnv(getenv func(string) string, delay time.Duration) (batcherConfig, error) {
	c := batcherConfig{delay: delay, timeout: 30 * time.Second, maxQueue: 2048, maxBatch: 512}
	for _, v := range []struct {
		name string
		ms   *time.Duration
		n    *int
	}{
		{"OTEL_BSP_SCHEDULE_DELAY", &c.delay, nil},
		{"OTEL_BSP_EXPORT_TIMEOUT", &c.timeout, nil},
		{"OTEL_BSP_MAX_QUEUE_SIZE", nil, &c.maxQueue},
		{"OTEL_BSP_MAX_EXPORT_BATCH_SIZE", nil, &c.maxBatch},
	} {
		s := getenv(v.name)
		if s == "" {
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			return c, fmt.Errorf("%s=%q: want a positive whole number", v.name, s)
		}
		if v.ms != nil {
			*v.ms = time.Duration(n) * time.Millisecond
		} else {
			*v.n = n
		}
	}
	// As the SDK: a batch is never larger than the queue.
	c.maxBatch = min(c.maxBatch, c.maxQueue)
	return c, nil
}

func newBatcher(exp sdktrace.SpanExporter, c batcherConfig) *batcher {
	b := &batcher{
		exp: exp, delay: c.delay, timeout: c.timeout, maxQueue: c.maxQueue, maxBatch: c.maxBatch,
		queue:   make([]sdktrace.ReadOnlySpan, 0, c.maxBatch),
		full:    make(chan struct{}, 1),
		flushes: make(chan chan error),
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
	}
	go b.run()
	return b
}

// OnStart does nothing: spans are queued when they end.
func (b *batcher) OnStart(context.Context, sdktrace.ReadWriteSpan) {}

// OnEnd queues a sampled span, or counts it dropped when the queue is full.
func (b *batcher) OnEnd(s sdktrace.ReadOnlySpan) {
	if !s.SpanContext().IsSampled() {
		return
	}
	b.mu.Lock()
	if b.stopped || len(b.queue) >= b.maxQueue {
		b.mu.Unlock()
		b.dropped.Add(1)
		return
	}
	b.queue = append(b.queue, s)
	n := len(b.queue)
	b.mu.Unlock()
	if n == b.maxBatch {
		select {
		case b.full <- struct{}{}:
		default:
		}
	}
}

func (b *batcher) run() {
	defer close(b.done)
	t := time.NewTimer(b.delay)
	defer t.Stop()
	for {
		select {
		case <-b.stop:
			return
		case <-t.C:
			b.report(b.export(context.Background()))
		case <-b.full:
			b.report(b.export(context.Background()))
		case reply := <-b.flushes:
			reply <- b.export(context.Background())
		}
		// Each export restarts the schedule, as the SDK's does.
		t.Reset(b.delay)
	}
}

func (b *batcher) report(err error) {
	if err != nil {
		otel.Handle(err)
	}
}

// export sends everything queued so far, in batches of at most maxBatch, each within
// the export timeout. Spans that end meanwhile go into the next queue.
func (b *batcher) export(ctx context.Context) error {
	b.mu.Lock()
	spans := b.queue
	b.queue, b.spare = b.spare[:0], nil
	b.mu.Unlock()
	var errs []error
	for i := 0; i < len(spans); i += b.maxBatch {
		batch := spans[i:min(i+b.maxBatch, len(spans))]
		ctx, cancel := context.WithTimeout(ctx, b.timeout)
		if err := b.exp.ExportSpans(ctx, batch); err != nil {
			errs = append(errs, err)
		}
		cancel()
	}
	if n := b.dropped.Swap(0); n > 0 {
		errs = append(errs, fmt.Errorf("span queue full (%d spans): %d spans dropped", b.maxQueue, n))
	}
	clear(spans) // the spans' memory goes with them
	b.mu.Lock()
	if b.spare == nil && cap(spans) <= 2*b.maxQueue {
		b.spare = spans[:0]
	}
	b.mu.Unlock()
	return errors.Join(errs...)
}

// ForceFlush exports every span ended so far and returns when that is done or ctx is.
func (b *batcher) ForceFlush(ctx context.Context) error {
	reply := make(chan error, 1)
	select {
	case b.flushes <- reply:
	case <-b.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-reply:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Shutdown exports what is queued, refuses later spans and shuts the exporter down.
func (b *batcher) Shutdown(ctx context.Context) error {
	b.mu.Lock()
	if b.stopped {
		b.mu.Unlock()
		return nil
	}
	b.stopped = true
	b.mu.Unlock()
	err := b.ForceFlush(ctx)
	close(b.stop)
	<-b.done
	return errors.Join(err, b.exp.Shutdown(ctx))
}
