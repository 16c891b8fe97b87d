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
// showed in the slowest queries, untraced ones too. Here a span is added to a queue
// under a mutex (for the OTLP exporter, as the bytes it will send: encodedQueue), and
// the goroutine wakes when a batch is full, on its schedule, or when asked to flush.
//
// It reads the SDK's OTEL_BSP_* variables with the SDK's defaults, but for the schedule
// delay: Setup's is 1 s where the SDK's is 5 s, so that a quiet service's trace reaches
// the viewer about a second after its query.
type batcher struct {
	exp      sdktrace.SpanExporter
	delay    time.Duration
	timeout  time.Duration
	maxQueue int
	maxBatch int

	mu       sync.Mutex
	queue    spanQueue
	spare    spanQueue // the previous export's queue, emptied, for the next one
	newQueue func() spanQueue
	stopped  bool

	full    chan struct{} // a batch is waiting; buffered, one wakeup at a time
	flushes chan flushRequest
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
		// The export timeout may be 0: the specification's "timeout" type, where 0 is no
		// limit, as the SDK's processor reads it (export). The others must be positive:
		// a schedule delay of 0 would wake the batcher without pause.
		zeroOK := v.name == "OTEL_BSP_EXPORT_TIMEOUT" && n == 0
		if err != nil || n <= 0 && !zeroOK {
			return c, fmt.Errorf("%s=%q: want a positive whole number", v.name, s)
		}
		if v.ms != nil {
			*v.ms = time.Duration(n) * time.Millisecond
		} else {
			*v.n = n
		}
	}
	// As the SDK (NewBatchSpanProcessor): a batch is never larger than the queue, and
	// one asked to be is the default batch size, or the queue's when that is smaller.
	if c.maxBatch > c.maxQueue {
		c.maxBatch = min(sdktrace.DefaultMaxExportBatchSize, c.maxQueue)
	}
	return c, nil
}

func newBatcher(exp sdktrace.SpanExporter, c batcherConfig) *batcher {
	newQueue := func() spanQueue { return &sliceQueue{exp: exp, maxQueue: c.maxQueue} }
	if oe, ok := exp.(*otlpExporter); ok {
		newQueue = func() spanQueue { return &encodedQueue{exp: oe} }
	}
	b := &batcher{
		exp: exp, delay: c.delay, timeout: c.timeout, maxQueue: c.maxQueue, maxBatch: c.maxBatch,
		queue:    newQueue(),
		newQueue: newQueue,
		full:     make(chan struct{}, 1),
		flushes:  make(chan flushRequest),
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	go b.run()
	return b
}

// OnStart does nothing: spans are queued when they end.
func (b *batcher) OnStart(context.Context, sdktrace.ReadWriteSpan) {}

// OnEnd queues a sampled span of the SDK's (QUARRY_TRACES_SDK=true).
func (b *batcher) OnEnd(s sdktrace.ReadOnlySpan) {
	if s.SpanContext().IsSampled() {
		b.enqueue(s)
	}
}

// enqueue queues an ended, sampled span, or counts it dropped when the queue is full.
func (b *batcher) enqueue(s spanData) {
	b.mu.Lock()
	if b.stopped || b.queue.len() >= b.maxQueue {
		b.mu.Unlock()
		b.dropped.Add(1)
		return
	}
	b.queue.add(s)
	n := b.queue.len()
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
		case f := <-b.flushes:
			// The caller's deadline bounds the export: a collector that does not answer
			// must not hold a shutdown past it.
			f.reply <- b.export(f.ctx)
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
	q := b.queue
	b.queue, b.spare = b.spare, nil
	if b.queue == nil {
		b.queue = b.newQueue()
	}
	b.mu.Unlock()
	errs := []error{q.export(ctx, b.maxBatch, b.timeout)}
	if n := b.dropped.Swap(0); n > 0 {
		errs = append(errs, fmt.Errorf("span queue full (%d spans): %d spans dropped", b.maxQueue, n))
	}
	b.mu.Lock()
	b.spare = q // emptied by export
	b.mu.Unlock()
	return errors.Join(errs...)
}

// spanQueue holds ended spans until the batcher exports them. Its methods other than
// export run under the batcher's lock; export runs on the batcher's goroutine, on a
// queue no span is being added to.
type spanQueue interface {
	add(spanData)
	len() int
	// export sends what is queued in batches of at most max spans, each within
	// timeout, and empties the queue.
	export(ctx context.Context, max int, timeout time.Duration) error
}

// sliceQueue keeps the spans themselves, for any exporter.
type sliceQueue struct {
	exp      sdktrace.SpanExporter
	maxQueue int
	spans    []sdktrace.ReadOnlySpan
}

func (q *sliceQueue) add(s spanData) { q.spans = append(q.spans, readOnly(s)) }
func (q *sliceQueue) len() int       { return len(q.spans) }

func (q *sliceQueue) export(ctx context.Context, max int, timeout time.Duration) error {
	var errs []error
	for i := 0; i < len(q.spans); i += max {
		batch := q.spans[i:min(i+max, len(q.spans))]
		ctx, cancel := exportContext(ctx, timeout)
		if err := q.exp.ExportSpans(ctx, batch); err != nil {
			errs = append(errs, err)
		}
		cancel()
	}
	clear(q.spans) // the spans' memory goes with them
	q.spans = q.spans[:0]
	if cap(q.spans) > 2*q.maxQueue {
		q.spans = nil
	}
	return errors.Join(errs...)
}

// encodedQueue keeps each span as the OTLP bytes the exporter will send, written when
// the span ends (spanEncoder.add): the SDK's copy of the span is garbage at once, the
// queue is bytes the garbage collector does not scan, and an export copies bytes
// instead of encoding a batch in one burst on the services' cores.
type encodedQueue struct {
	exp *otlpExporter
	enc spanEncoder
}

func (q *encodedQueue) add(s spanData) { q.enc.add(s) }
func (q *encodedQueue) len() int       { return q.enc.len() }

func (q *encodedQueue) export(ctx context.Context, max int, timeout time.Duration) error {
	var errs []error
	for i := 0; i < q.enc.len(); i += max {
		ctx, cancel := exportContext(ctx, timeout)
		if err := q.exp.upload(ctx, q.enc.finish(i, min(i+max, q.enc.len()))); err != nil {
			errs = append(errs, err)
		}
		cancel()
	}
	q.enc.reset()
	return errors.Join(errs...)
}

// exportContext is ctx within the export timeout of one batch. A timeout of 0 is no
// limit (OTEL_BSP_EXPORT_TIMEOUT=0, as the specification and the SDK's processor read
// it): context.WithTimeout would give a context already past its deadline, and every
// export would fail.
func exportContext(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	if timeout <= 0 {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, timeout)
}

// ForceFlush exports every span ended so far and returns when that is done or ctx is.
func (b *batcher) ForceFlush(ctx context.Context) error {
	reply := make(chan error, 1)
	select {
	case b.flushes <- flushRequest{ctx, reply}:
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
	select {
	case <-b.done:
	case <-ctx.Done():
		// An export under way when the flush gave up (a scheduled one runs on its own
		// timeout, not ctx): the exporter's Shutdown below cancels it, as the OTLP
		// exporters do with their requests in flight.
		err = errors.Join(err, ctx.Err())
	}
	return errors.Join(err, b.exp.Shutdown(ctx))
}

// flushRequest asks the batcher's goroutine to export what is queued, within ctx.
type flushRequest struct {
	ctx   context.Context
	reply chan error
}
