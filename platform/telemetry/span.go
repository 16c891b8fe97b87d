package telemetry

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"
	"go.opentelemetry.io/otel/trace/noop"
)

// tracerProvider makes the spans of a process whose spans go to OTLP: the same spans
// the SDK's TracerProvider makes (sampler, ids, limits, attributes, events, links,
// status, panics recorded at End), sent as the same OTLP bytes
// (TestSpansMatchTheSDKs), at a fraction of the cost on the query's path. Each traced
// query pays for its spans on its own goroutine, before or while its response is
// written, and BenchmarkTracingOverhead found the SDK's span lifecycle the largest part
// of what tracing added to a cached answer: a span struct and its attribute slice
// regrown as attributes arrive, a de-duplicating map and a snapshot copy at End, and the
// processors' interface calls. Here a span keeps its first attributes in the span
// itself, de-duplicates them in place at End, and is encoded straight into the
// batcher's queue from its own fields: one allocation for a span with up to
// inlineAttrs attributes, besides what the caller's options cost.
//
// It is used where it reproduces the SDK exactly: spans exported over OTLP, and to
// tests' exporters (which get copies of the spans: readOnly), with no attribute value
// length limit set (the SDK truncates values then) and no console exporter (whose
// output shows a child span count, which these spans do not keep): Setup uses the SDK
// for those. Nested attribute
// values (slices and maps of values) are kept as given, where the SDK also de-duplicates
// a map's keys and cuts values nested deeper than 64 levels; Quarry and the
// instrumentation it uses set no such values.
type tracerProvider struct {
	embedded.TracerProvider

	sampler sdktrace.Sampler
	ids     sdktrace.IDGenerator
	limits  sdktrace.SpanLimits
	res     *resource.Resource
	sinks   []spanSink

	mu      sync.Mutex
	tracers map[instrumentation.Scope]*tracer
	stopped atomic.Bool
}

// spanSink takes ended, sampled spans: a batcher, or a syncer. As a span processor it
// takes the SDK's too (QUARRY_TRACES_SDK=true).
type spanSink interface {
	sdktrace.SpanProcessor
	enqueue(spanData)
}

func newTracerProvider(res *resource.Resource, sampler sdktrace.Sampler, sinks ...spanSink) *tracerProvider {
	return &tracerProvider{
		sampler: sampler,
		ids:     randomIDs{},
		limits:  sdktrace.NewSpanLimits(), // OTEL_SPAN_*_LIMIT, as the SDK reads them
		res:     res,
		sinks:   sinks,
		tracers: map[instrumentation.Scope]*tracer{},
	}
}

// defaultTracerName is the SDK's name for a tracer asked for without one.
const defaultTracerName = "go.opentelemetry.io/otel/sdk/tracer"

// Tracer returns the tracer of an instrumentation scope, the same one each time.
func (p *tracerProvider) Tracer(name string, opts ...trace.TracerOption) trace.Tracer {
	if p.stopped.Load() {
		return noop.NewTracerProvider().Tracer(name, opts...)
	}
	c := trace.NewTracerConfig(opts...)
	if name == "" {
		name = defaultTracerName
	}
	scope := instrumentation.Scope{Name: name, Version: c.InstrumentationVersion(), SchemaURL: c.SchemaURL(), Attributes: c.InstrumentationAttributes()}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped.Load() { // Shutdown ran meanwhile
		return noop.NewTracerProvider().Tracer(name, opts...)
	}
	t, ok := p.tracers[scope]
	if !ok {
		t = &tracer{p: p, scope: scope}
		p.tracers[scope] = t
	}
	return t
}

// ForceFlush exports the spans ended so far.
func (p *tracerProvider) ForceFlush(ctx context.Context) error {
	return p.eachSink(ctx, spanSink.ForceFlush)
}

// Shutdown exports what is queued and stops: later tracers are no-ops, and spans
// ending later are dropped.
func (p *tracerProvider) Shutdown(ctx context.Context) error {
	if p.stopped.Swap(true) {
		return nil
	}
	return p.eachSink(ctx, spanSink.Shutdown)
}

// eachSink calls f on each sink in turn, stopping when ctx is done, as the SDK's
// provider does with its processors.
func (p *tracerProvider) eachSink(ctx context.Context, f func(spanSink, context.Context) error) error {
	var errs []error
	for _, s := range p.sinks {
		if err := ctx.Err(); err != nil {
			return errors.Join(append(errs, err)...)
		}
		errs = append(errs, f(s, ctx))
	}
	return errors.Join(errs...)
}

// syncer exports each span as it ends, for tests that read spans as soon as a call
// returns (the SDK's WithSyncer). Exporters are never called concurrently (the
// SpanExporter contract), so it exports one span at a time.
type syncer struct {
	mu  sync.Mutex
	exp sdktrace.SpanExporter
}

func newSyncer(exp sdktrace.SpanExporter) *syncer { return &syncer{exp: exp} }

func (s *syncer) enqueue(sd spanData) {
	ro := readOnly(sd)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.exp.ExportSpans(context.Background(), []sdktrace.ReadOnlySpan{ro}); err != nil {
		otel.Handle(err)
	}
}
func (*syncer) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (s *syncer) OnEnd(sd sdktrace.ReadOnlySpan) {
	if sd.SpanContext().IsSampled() {
		s.enqueue(sd)
	}
}
func (*syncer) ForceFlush(context.Context) error { return nil }
func (s *syncer) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.exp.Shutdown(ctx)
}

// readOnly is a span as the SDK's exporters take it: the span itself when it is the
// SDK's, else a copy of its data. Only exporters other than OTLP (the console's, tests')
// need the copy.
func readOnly(sd spanData) sdktrace.ReadOnlySpan {
	if ro, ok := sd.(sdktrace.ReadOnlySpan); ok {
		return ro
	}
	return tracetest.SpanStub{
		Name: sd.Name(), SpanContext: sd.SpanContext(), Parent: sd.Parent(), SpanKind: sd.SpanKind(),
		StartTime: sd.StartTime(), EndTime: sd.EndTime(), Attributes: sd.Attributes(), Events: sd.Events(), Links: sd.Links(),
		Status: sd.Status(), DroppedAttributes: sd.DroppedAttributes(), DroppedEvents: sd.DroppedEvents(), DroppedLinks: sd.DroppedLinks(),
		Resource: sd.Resource(), InstrumentationScope: sd.InstrumentationScope(),
	}.Snapshot()
}

type tracer struct {
	embedded.Tracer

	p     *tracerProvider
	scope instrumentation.Scope
}

// Start starts a span as the SDK's tracer does: a child of the span context in ctx
// unless the options ask for a new root, sampled by the provider's sampler.
func (t *tracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if ctx == nil {
		ctx = context.Background()
	}
	cfg := trace.NewSpanStartConfig(opts...)
	var psc trace.SpanContext
	sctx := ctx
	if cfg.NewRoot() {
		sctx = trace.ContextWithSpanContext(ctx, psc)
	} else {
		psc = trace.SpanContextFromContext(ctx)
	}
	var tid trace.TraceID
	var sid trace.SpanID
	if psc.TraceID().IsValid() {
		tid = psc.TraceID()
		sid = t.p.ids.NewSpanID(sctx, tid)
	} else {
		tid, sid = t.p.ids.NewIDs(sctx)
	}
	sr := t.p.sampler.ShouldSample(sdktrace.SamplingParameters{
		ParentContext: sctx, TraceID: tid, Name: name, Kind: cfg.SpanKind(),
		Attributes: cfg.Attributes(), Links: cfg.Links(),
	})
	flags := psc.TraceFlags() &^ trace.FlagsSampled
	if sr.Decision == sdktrace.RecordAndSample {
		flags |= trace.FlagsSampled
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: flags, TraceState: sr.Tracestate})
	if sr.Decision == sdktrace.Drop {
		s := nonRecordingSpan{sc: sc, p: t.p}
		return trace.ContextWithSpan(ctx, s), s
	}
	s := &span{t: t, sc: sc, parent: psc, kind: trace.ValidateSpanKind(cfg.SpanKind()), name: name, start: cfg.Timestamp()}
	if s.start.IsZero() {
		s.start = time.Now()
	}
	s.attrs = s.inline[:0]
	for _, l := range cfg.Links() {
		s.addLink(l)
	}
	s.setAttributes(sr.Attributes)
	s.setAttributes(cfg.Attributes())
	return trace.ContextWithSpan(ctx, s), s
}

// inlineAttrs is how many attributes a span holds without allocating more: a gateway's
// server span for a cached answer has eight (otelgrpc's four and status, Quarry's three).
const inlineAttrs = 10

// span is a recording span. Its fields are written under mu until end is set; after
// that nothing writes them, and End reads them without the lock to encode the span.
type span struct {
	embedded.Span

	t      *tracer
	sc     trace.SpanContext
	parent trace.SpanContext
	kind   trace.SpanKind
	start  time.Time

	mu            sync.Mutex
	name          string
	end           time.Time // zero while the span records
	attrs         []attribute.KeyValue
	inline        [inlineAttrs]attribute.KeyValue
	dirty         bool // attrs may hold a key twice
	droppedAttrs  int
	events        []sdktrace.Event
	droppedEvents int
	links         []sdktrace.Link
	droppedLinks  int
	status        sdktrace.Status
}

func (s *span) SpanContext() trace.SpanContext       { return s.sc }
func (s *span) TracerProvider() trace.TracerProvider { return s.t.p }

func (s *span) IsRecording() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.end.IsZero()
}

// SetStatus sets the status as the SDK does: a code below the current one is ignored
// (Ok is final), and only an Error keeps its description.
func (s *span) SetStatus(code codes.Code, description string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.end.IsZero() || s.status.Code > code {
		return
	}
	st := sdktrace.Status{Code: code}
	if code == codes.Error {
		st.Description = description
	}
	s.status = st
}

func (s *span) SetAttributes(kv ...attribute.KeyValue) {
	if len(kv) == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.end.IsZero() {
		s.setAttributes(kv)
	}
}

// setAttributes adds kv, a key set again replacing its value, as the SDK does: within
// the count limit they are appended and de-duplicated at End; past it the span is
// de-duplicated first, so that only new keys are dropped. Called with mu held.
func (s *span) setAttributes(kv []attribute.KeyValue) {
	limit := s.t.p.limits.AttributeCountLimit
	if limit == 0 {
		s.droppedAttrs += len(kv)
		return
	}
	if limit < 0 || len(s.attrs)+len(kv) <= limit {
		for _, a := range kv {
			if !a.Valid() {
				s.droppedAttrs++
				continue
			}
			s.attrs = append(s.attrs, a)
			s.dirty = true
		}
		return
	}
	s.dedupe()
	for _, a := range kv {
		if !a.Valid() {
			s.droppedAttrs++
			continue
		}
		if i := indexOfKey(s.attrs, a.Key); i >= 0 {
			s.attrs[i] = a
		} else if len(s.attrs) < limit {
			s.attrs = append(s.attrs, a)
		} else {
			s.droppedAttrs++
		}
	}
}

// dedupe keeps each key once, at its first place, with its last value: the SDK's
// order. Spans hold a handful of attributes, so a scan is cheaper than the SDK's map.
func (s *span) dedupe() {
	if !s.dirty {
		return
	}
	s.dirty = false
	if len(s.attrs) > 32 {
		seen := make(map[attribute.Key]int, len(s.attrs))
		unique := s.attrs[:0]
		for _, a := range s.attrs {
			if i, ok := seen[a.Key]; ok {
				unique[i] = a
				continue
			}
			seen[a.Key] = len(unique)
			unique = append(unique, a)
		}
		clear(s.attrs[len(unique):])
		s.attrs = unique
		return
	}
	n := 0
	for _, a := range s.attrs {
		if i := indexOfKey(s.attrs[:n], a.Key); i >= 0 {
			s.attrs[i] = a
			continue
		}
		s.attrs[n] = a
		n++
	}
	clear(s.attrs[n:])
	s.attrs = s.attrs[:n]
}

func indexOfKey(kv []attribute.KeyValue, k attribute.Key) int {
	for i := range kv {
		if kv[i].Key == k {
			return i
		}
	}
	return -1
}

func (s *span) AddEvent(name string, opts ...trace.EventOption) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.end.IsZero() {
		s.addEvent(name, opts...)
	}
}

// addEvent adds an event, dropping the oldest past the event count limit and an
// event's attributes past its own, as the SDK does. Called with mu held.
func (s *span) addEvent(name string, opts ...trace.EventOption) {
	c := trace.NewEventConfig(opts...)
	ev := sdktrace.Event{Name: name, Time: c.Timestamp()}
	ev.Attributes, ev.DroppedAttributeCount = limitAttrs(c.Attributes(), s.t.p.limits.AttributePerEventCountLimit)
	s.events, s.droppedEvents = addEvicting(s.events, ev, s.t.p.limits.EventCountLimit, s.droppedEvents)
}

// RecordError adds an exception event for err, as the SDK does; the status is the
// caller's to set.
func (s *span) RecordError(err error, opts ...trace.EventOption) {
	if err == nil {
		return
	}
	opts = append(opts, trace.WithAttributes(semconv.ExceptionType(typeName(err)), semconv.ExceptionMessage(err.Error())))
	if c := trace.NewEventConfig(opts...); c.StackTrace() {
		opts = append(opts, trace.WithAttributes(semconv.ExceptionStacktrace(stackTrace())))
	}
	s.AddEvent(semconv.ExceptionEventName, opts...)
}

func (s *span) AddLink(l trace.Link) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.end.IsZero() {
		s.addLink(l)
	}
}

// addLink is the SDK's: a link to nothing, with nothing, is not kept. Called with mu
// held.
func (s *span) addLink(l trace.Link) {
	if !l.SpanContext.IsValid() && len(l.Attributes) == 0 && l.SpanContext.TraceState().Len() == 0 {
		return
	}
	link := sdktrace.Link{SpanContext: l.SpanContext}
	link.Attributes, link.DroppedAttributeCount = limitAttrs(l.Attributes, s.t.p.limits.AttributePerLinkCountLimit)
	s.links, s.droppedLinks = addEvicting(s.links, link, s.t.p.limits.LinkCountLimit, s.droppedLinks)
}

func (s *span) SetName(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.end.IsZero() {
		s.name = name
	}
}

// End ends the span once and queues it for export when sampled. Called deferred while
// its goroutine panics, it records the panic as an exception event and lets it go on,
// as the SDK does.
func (s *span) End(opts ...trace.SpanEndOption) {
	end := s.start.Add(time.Since(s.start)) // monotonic, as the SDK's
	s.mu.Lock()
	if !s.end.IsZero() {
		s.mu.Unlock()
		return
	}
	cfg := trace.NewSpanEndConfig(opts...)
	if r := recover(); r != nil {
		defer panic(r)
		attrs := []attribute.KeyValue{semconv.ExceptionType(typeName(r)), semconv.ExceptionMessage(fmt.Sprint(r))}
		if cfg.StackTrace() {
			attrs = append(attrs, semconv.ExceptionStacktrace(stackTrace()))
		}
		s.addEvent(semconv.ExceptionEventName, trace.WithAttributes(attrs...))
	}
	if ts := cfg.Timestamp(); !ts.IsZero() {
		end = ts
	}
	s.end = end
	s.dedupe()
	s.mu.Unlock()
	if s.sc.IsSampled() && !s.t.p.stopped.Load() {
		for _, sink := range s.t.p.sinks {
			sink.enqueue(s)
		}
	}
}

// The span's data, for the encoder; read after End only.
func (s *span) Parent() trace.SpanContext        { return s.parent }
func (s *span) Name() string                     { return s.name }
func (s *span) SpanKind() trace.SpanKind         { return s.kind }
func (s *span) StartTime() time.Time             { return s.start }
func (s *span) EndTime() time.Time               { return s.end }
func (s *span) Attributes() []attribute.KeyValue { return s.attrs }
func (s *span) DroppedAttributes() int           { return s.droppedAttrs }
func (s *span) Events() []sdktrace.Event         { return s.events }
func (s *span) DroppedEvents() int {
	if len(s.events) == 0 {
		return 0 // as the SDK reports it: its snapshot takes the count with the events only
	}
	return s.droppedEvents
}
func (s *span) Links() []sdktrace.Link { return s.links }
func (s *span) DroppedLinks() int {
	if len(s.links) == 0 {
		return 0 // as DroppedEvents
	}
	return s.droppedLinks
}
func (s *span) Status() sdktrace.Status                     { return s.status }
func (s *span) Resource() *resource.Resource                { return s.t.p.res }
func (s *span) InstrumentationScope() instrumentation.Scope { return s.t.scope }

// addEvicting appends v, dropping the oldest first when the list is at limit (a
// negative limit has none), and counts what it drops.
func addEvicting[T any](list []T, v T, limit, dropped int) ([]T, int) {
	switch {
	case limit == 0:
		return list, dropped + 1
	case limit > 0 && len(list) == limit:
		copy(list, list[1:])
		list = list[:limit-1]
		dropped++
	}
	return append(list, v), dropped
}

// limitAttrs keeps an event's or a link's first limit attributes (all with a negative
// limit) and counts the rest. As the SDK, it leaves a key given twice twice.
func limitAttrs(kv []attribute.KeyValue, limit int) ([]attribute.KeyValue, int) {
	switch {
	case limit == 0:
		return nil, len(kv)
	case limit > 0 && len(kv) > limit:
		return kv[:limit], len(kv) - limit
	}
	return kv, 0
}

// typeName is the SDK's exception.type: package path and name, or the type as Go
// writes it for one without (a pointer, a built-in type).
func typeName(v any) string {
	t := reflect.TypeOf(v)
	if t.PkgPath() == "" && t.Name() == "" {
		return t.String()
	}
	return t.PkgPath() + "." + t.Name()
}

func stackTrace() string {
	buf := make([]byte, 2048)
	return string(buf[:runtime.Stack(buf, false)])
}

// nonRecordingSpan is a span the sampler dropped: it carries its span context on and
// records nothing.
type nonRecordingSpan struct {
	embedded.Span

	sc trace.SpanContext
	p  *tracerProvider
}

func (s nonRecordingSpan) SpanContext() trace.SpanContext        { return s.sc }
func (s nonRecordingSpan) TracerProvider() trace.TracerProvider  { return s.p }
func (nonRecordingSpan) IsRecording() bool                       { return false }
func (nonRecordingSpan) SetStatus(codes.Code, string)            {}
func (nonRecordingSpan) SetAttributes(...attribute.KeyValue)     {}
func (nonRecordingSpan) End(...trace.SpanEndOption)              {}
func (nonRecordingSpan) RecordError(error, ...trace.EventOption) {}
func (nonRecordingSpan) AddEvent(string, ...trace.EventOption)   {}
func (nonRecordingSpan) AddLink(trace.Link)                      {}
func (nonRecordingSpan) SetName(string)                          {}

// randomIDs makes trace and span ids from the runtime's per-thread random source
// (math/rand/v2), as the SDK's generator does.
type randomIDs struct{}

func (randomIDs) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	var tid trace.TraceID
	for !tid.IsValid() {
		binary.NativeEndian.PutUint64(tid[:8], rand.Uint64())
		binary.NativeEndian.PutUint64(tid[8:], rand.Uint64())
	}
	return tid, randomIDs{}.NewSpanID(ctx, tid)
}

func (randomIDs) NewSpanID(context.Context, trace.TraceID) trace.SpanID {
	var sid trace.SpanID
	for !sid.IsValid() {
		binary.NativeEndian.PutUint64(sid[:], rand.Uint64())
	}
	return sid
}
