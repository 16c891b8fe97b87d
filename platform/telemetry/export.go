package telemetry

import (
	"context"
	"fmt"
	"math"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// otlpExporter is otlptrace's OTLP span exporter with one part replaced: the step that
// turns spans into OTLP protobuf messages. otlptrace builds every message afresh, three
// allocations per attribute, and in BenchmarkTracingOverhead that step made more than
// half of the allocations tracing adds to a query, in bursts on the services' own
// cores. This one reuses the messages of one export for the next; what goes on the
// wire is the same (TestOTLPExporterSendsWhatOtlptraceSends), and the transport, with
// its OTEL_EXPORTER_OTLP_* configuration, retries and TLS, is otlptrace's own client.
type otlpExporter struct {
	client otlptrace.Client
	codec  *requestCodec

	mu   sync.Mutex // the batch processor exports one batch at a time; ForceFlush may not
	conv spanConverter
}

// newOTLPExporter starts an exporter on otlptracegrpc's client, configured by opts and
// the OTEL_EXPORTER_OTLP_* environment.
func newOTLPExporter(ctx context.Context, opts ...otlptracegrpc.Option) (*otlpExporter, error) {
	codec := &requestCodec{}
	opts = append(opts, otlptracegrpc.WithDialOption(grpc.WithDefaultCallOptions(grpc.ForceCodecV2(codec))))
	client := otlptracegrpc.NewClient(opts...)
	if err := client.Start(ctx); err != nil {
		return nil, fmt.Errorf("otlp traces: %w", err)
	}
	return &otlpExporter{client: client, codec: codec}, nil
}

// ExportSpans sends spans in one request.
func (e *otlpExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	// The client has marshalled the messages when it returns, retries included.
	defer e.conv.reset()
	rs := e.conv.convert(spans)
	if len(rs) == 0 {
		return nil
	}
	if err := e.client.UploadTraces(ctx, rs); err != nil {
		return fmt.Errorf("traces export: %w", err)
	}
	e.codec.reuse()
	return nil
}

// Shutdown stops the client; spans exported after it are refused by the client.
func (e *otlpExporter) Shutdown(ctx context.Context) error { return e.client.Stop(ctx) }

// requestCodec is the exporter connection's gRPC codec. It marshals each request into
// a buffer kept for the next one, where gRPC's own codec takes a buffer from its pool,
// and for a batch of a few hundred spans that is a 1 MiB buffer, zeroed afresh whenever
// a garbage collection has emptied the pool since the last export.
type requestCodec struct {
	mu sync.Mutex
	// spare may be marshalled into. A buffer handed to gRPC is in use until the export
	// succeeds: a failed attempt's bytes may still be queued for a connection, and a
	// retry marshals into a new buffer.
	spare, sent []byte
}

func (c *requestCodec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("otlp codec: %T is not a protobuf message", v)
	}
	c.mu.Lock()
	buf := c.spare
	c.spare = nil
	c.mu.Unlock()
	size := proto.Size(m)
	if cap(buf) < size {
		buf = make([]byte, 0, size+size/4)
	}
	// UseCachedSize: Size has just computed and cached every message's size.
	out, err := proto.MarshalOptions{UseCachedSize: true}.MarshalAppend(buf[:0], m)
	if err != nil {
		return nil, fmt.Errorf("otlp codec: %w", err)
	}
	c.mu.Lock()
	c.sent = out
	c.mu.Unlock()
	return mem.BufferSlice{mem.SliceBuffer(out)}, nil
}

func (c *requestCodec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(proto.Message)
	if !ok {
		return fmt.Errorf("otlp codec: %T is not a protobuf message", v)
	}
	return proto.Unmarshal(data.Materialize(), m)
}

func (c *requestCodec) Name() string { return "proto" }

// maxSpare bounds the buffer kept between exports: a batch of the default 512 spans
// takes a few hundred KiB.
const maxSpare = 4 << 20

// reuse takes back the buffer of the request just answered: the server has read all
// of it, so gRPC holds none of it.
func (c *requestCodec) reuse() {
	c.mu.Lock()
	if cap(c.sent) <= maxSpare {
		c.spare = c.sent
	}
	c.sent = nil
	c.mu.Unlock()
}

// spanConverter builds the OTLP messages of one export from memory it keeps between
// exports. Resources and instrumentation scopes, the same for every span of a process,
// are converted once.
type spanConverter struct {
	resources map[attribute.Distinct]*resourcepb.Resource
	scopes    map[instrumentation.Scope]*commonpb.InstrumentationScope

	groups  []spanGroup
	groupOf []int // groups index of each span of the export

	resourceSpans arena[tracepb.ResourceSpans]
	scopeSpans    arena[tracepb.ScopeSpans]
	spans         arena[tracepb.Span]
	statuses      arena[tracepb.Status]
	events        arena[tracepb.Span_Event]
	links         arena[tracepb.Span_Link]
	ids           arena[[16]byte]
	kvs           arena[commonpb.KeyValue]
	values        arena[commonpb.AnyValue]
	strings       arena[commonpb.AnyValue_StringValue]
	ints          arena[commonpb.AnyValue_IntValue]
	doubles       arena[commonpb.AnyValue_DoubleValue]
	bools         arena[commonpb.AnyValue_BoolValue]
	arrays        arena[commonpb.AnyValue_ArrayValue]
	arrayValues   arena[commonpb.ArrayValue]

	resourceSpansPtrs ptrs[tracepb.ResourceSpans]
	scopeSpansPtrs    ptrs[tracepb.ScopeSpans]
	spanPtrs          ptrs[tracepb.Span]
	eventPtrs         ptrs[tracepb.Span_Event]
	linkPtrs          ptrs[tracepb.Span_Link]
	keyValuePtrs      ptrs[commonpb.KeyValue]
	valuePtrs         ptrs[commonpb.AnyValue]
}

// spanGroup is the spans of one resource and instrumentation scope.
type spanGroup struct {
	resource *resource.Resource
	key      attribute.Distinct // resources with the same attributes are one
	scope    instrumentation.Scope
	n        int
	ss       *tracepb.ScopeSpans
}

// maxCached bounds the converted resources and scopes kept: a process has a handful.
const maxCached = 64

func (c *spanConverter) reset() {
	c.groups = c.groups[:0]
	c.groupOf = c.groupOf[:0]
	c.resourceSpans.reset()
	c.scopeSpans.reset()
	c.spans.reset()
	c.statuses.reset()
	c.events.reset()
	c.links.reset()
	c.ids.reset()
	c.kvs.reset()
	c.values.reset()
	c.strings.reset()
	c.ints.reset()
	c.doubles.reset()
	c.bools.reset()
	c.arrays.reset()
	c.arrayValues.reset()
	c.resourceSpansPtrs.reset()
	c.scopeSpansPtrs.reset()
	c.spanPtrs.reset()
	c.eventPtrs.reset()
	c.linkPtrs.reset()
	c.keyValuePtrs.reset()
	c.valuePtrs.reset()
}

// convert groups spans by resource, then by scope, each in the order first seen, and
// keeps the order of spans within a scope, as otlptrace does. The result is valid
// until reset.
func (c *spanConverter) convert(spans []sdktrace.ReadOnlySpan) []*tracepb.ResourceSpans {
	// First pass: which group each span belongs to and how many each group has, so
	// that every list is carved out at its final size.
	for _, sd := range spans {
		g := -1
		if sd != nil {
			g = c.group(sd.Resource(), sd.InstrumentationScope())
			c.groups[g].n++
		}
		c.groupOf = append(c.groupOf, g)
	}
	if len(c.groups) == 0 {
		return nil
	}
	for i := range c.groups {
		g := &c.groups[i]
		g.ss = c.scopeSpans.alloc()
		g.ss.Scope = c.scope(g.scope)
		g.ss.SchemaUrl = g.scope.SchemaURL
		g.ss.Spans = c.spanPtrs.take(g.n)[:0]
	}
	for i, sd := range spans {
		if g := c.groupOf[i]; g >= 0 {
			c.groups[g].ss.Spans = append(c.groups[g].ss.Spans, c.span(sd))
		}
	}

	resources := 0
	for i := range c.groups {
		if c.firstOfResource(i) {
			resources++
		}
	}
	out := c.resourceSpansPtrs.take(resources)[:0]
	for i := range c.groups {
		if !c.firstOfResource(i) {
			continue
		}
		g := &c.groups[i]
		rs := c.resourceSpans.alloc()
		rs.Resource = c.resource(g.resource, g.key)
		rs.SchemaUrl = g.resource.SchemaURL()
		scopes := 0
		for j := i; j < len(c.groups); j++ {
			if c.groups[j].key == g.key {
				scopes++
			}
		}
		rs.ScopeSpans = c.scopeSpansPtrs.take(scopes)[:0]
		for j := i; j < len(c.groups); j++ {
			if c.groups[j].key == g.key {
				rs.ScopeSpans = append(rs.ScopeSpans, c.groups[j].ss)
			}
		}
		out = append(out, rs)
	}
	return out
}

// firstOfResource says whether group i is the first with its resource.
func (c *spanConverter) firstOfResource(i int) bool {
	for j := range i {
		if c.groups[j].key == c.groups[i].key {
			return false
		}
	}
	return true
}

func (c *spanConverter) group(res *resource.Resource, scope instrumentation.Scope) int {
	key := res.Equivalent()
	for i := range c.groups {
		if c.groups[i].key == key && c.groups[i].scope == scope {
			return i
		}
	}
	c.groups = append(c.groups, spanGroup{resource: res, key: key, scope: scope})
	return len(c.groups) - 1
}

// resource is converted once per process; its message is only ever read.
func (c *spanConverter) resource(res *resource.Resource, key attribute.Distinct) *resourcepb.Resource {
	if res == nil {
		return nil
	}
	if r, ok := c.resources[key]; ok {
		return r
	}
	r := &resourcepb.Resource{Attributes: keyValuesOf(res.Iter())}
	if c.resources == nil {
		c.resources = map[attribute.Distinct]*resourcepb.Resource{}
	}
	if len(c.resources) < maxCached {
		c.resources[key] = r
	}
	return r
}

func (c *spanConverter) scope(s instrumentation.Scope) *commonpb.InstrumentationScope {
	if s == (instrumentation.Scope{}) {
		return nil
	}
	if p, ok := c.scopes[s]; ok {
		return p
	}
	p := &commonpb.InstrumentationScope{Name: s.Name, Version: s.Version, Attributes: keyValuesOf(s.Attributes.Iter())}
	if c.scopes == nil {
		c.scopes = map[instrumentation.Scope]*commonpb.InstrumentationScope{}
	}
	if len(c.scopes) < maxCached {
		c.scopes[s] = p
	}
	return p
}

func (c *spanConverter) span(sd sdktrace.ReadOnlySpan) *tracepb.Span {
	sc := sd.SpanContext()
	s := c.spans.alloc()
	s.TraceId = c.traceID(sc.TraceID())
	s.SpanId = c.spanID(sc.SpanID())
	if ts := sc.TraceState(); ts.Len() > 0 {
		s.TraceState = ts.String()
	}
	parent := sd.Parent()
	if p := parent.SpanID(); p.IsValid() {
		s.ParentSpanId = c.spanID(p)
	}
	s.Flags = spanFlags(sc.TraceFlags(), parent)
	s.Name = sd.Name()
	s.Kind = spanKind(sd.SpanKind())
	s.StartTimeUnixNano = unixNano(sd.StartTime().UnixNano())
	s.EndTimeUnixNano = unixNano(sd.EndTime().UnixNano())
	s.Attributes = c.keyValues(sd.Attributes())
	s.DroppedAttributesCount = clampUint32(sd.DroppedAttributes())
	if es := sd.Events(); len(es) > 0 {
		s.Events = c.eventPtrs.take(len(es))
		for i, e := range es {
			pe := c.events.alloc()
			pe.Name = e.Name
			pe.TimeUnixNano = unixNano(e.Time.UnixNano())
			pe.Attributes = c.keyValues(e.Attributes)
			pe.DroppedAttributesCount = clampUint32(e.DroppedAttributeCount)
			s.Events[i] = pe
		}
	}
	s.DroppedEventsCount = clampUint32(sd.DroppedEvents())
	if ls := sd.Links(); len(ls) > 0 {
		s.Links = c.linkPtrs.take(len(ls))
		for i, l := range ls {
			pl := c.links.alloc()
			pl.TraceId = c.traceID(l.SpanContext.TraceID())
			pl.SpanId = c.spanID(l.SpanContext.SpanID())
			// otlptrace leaves a link's trace state out; so does this, to send the same.
			pl.Attributes = c.keyValues(l.Attributes)
			pl.DroppedAttributesCount = clampUint32(l.DroppedAttributeCount)
			pl.Flags = spanFlags(l.SpanContext.TraceFlags(), l.SpanContext)
			s.Links[i] = pl
		}
	}
	s.DroppedLinksCount = clampUint32(sd.DroppedLinks())
	st := sd.Status()
	s.Status = c.statuses.alloc()
	s.Status.Code = statusCode(st.Code)
	s.Status.Message = st.Description
	return s
}

func (c *spanConverter) traceID(id trace.TraceID) []byte {
	b := c.ids.alloc()
	copy(b[:], id[:])
	return b[:len(id):len(id)]
}

func (c *spanConverter) spanID(id trace.SpanID) []byte {
	b := c.ids.alloc()
	copy(b[:], id[:])
	return b[:len(id):len(id)]
}

func (c *spanConverter) keyValues(attrs []attribute.KeyValue) []*commonpb.KeyValue {
	if len(attrs) == 0 {
		return nil
	}
	out := c.keyValuePtrs.take(len(attrs))
	for i, a := range attrs {
		kv := c.kvs.alloc()
		kv.Key = string(a.Key)
		kv.Value = c.value(a.Value)
		out[i] = kv
	}
	return out
}

func (c *spanConverter) value(v attribute.Value) *commonpb.AnyValue {
	av := c.values.alloc()
	switch v.Type() {
	case attribute.BOOL:
		av.Value = c.boolValue(v.AsBool())
	case attribute.INT64:
		av.Value = c.intValue(v.AsInt64())
	case attribute.FLOAT64:
		av.Value = c.doubleValue(v.AsFloat64())
	case attribute.STRING:
		av.Value = c.stringValue(v.AsString())
	case attribute.STRINGSLICE:
		ss := v.AsStringSlice()
		av.Value = c.array(len(ss), func(i int, e *commonpb.AnyValue) { e.Value = c.stringValue(ss[i]) })
	case attribute.INT64SLICE:
		is := v.AsInt64Slice()
		av.Value = c.array(len(is), func(i int, e *commonpb.AnyValue) { e.Value = c.intValue(is[i]) })
	case attribute.FLOAT64SLICE:
		fs := v.AsFloat64Slice()
		av.Value = c.array(len(fs), func(i int, e *commonpb.AnyValue) { e.Value = c.doubleValue(fs[i]) })
	case attribute.BOOLSLICE:
		bs := v.AsBoolSlice()
		av.Value = c.array(len(bs), func(i int, e *commonpb.AnyValue) { e.Value = c.boolValue(bs[i]) })
	case attribute.SLICE:
		vs := v.AsSlice()
		av.Value = c.array(len(vs), func(i int, e *commonpb.AnyValue) { e.Value = c.value(vs[i]).Value })
	case attribute.BYTESLICE:
		av.Value = &commonpb.AnyValue_BytesValue{BytesValue: v.AsByteSlice()}
	case attribute.MAP:
		m := v.AsMap()
		kvs := c.keyValuePtrs.take(len(m))
		for i, a := range m {
			kv := c.kvs.alloc()
			kv.Key = string(a.Key)
			kv.Value = c.value(a.Value)
			kvs[i] = kv
		}
		av.Value = &commonpb.AnyValue_KvlistValue{KvlistValue: &commonpb.KeyValueList{Values: kvs}}
	case attribute.EMPTY:
	default:
		av.Value = c.stringValue("INVALID")
	}
	return av
}

func (c *spanConverter) boolValue(b bool) *commonpb.AnyValue_BoolValue {
	w := c.bools.alloc()
	w.BoolValue = b
	return w
}

func (c *spanConverter) intValue(i int64) *commonpb.AnyValue_IntValue {
	w := c.ints.alloc()
	w.IntValue = i
	return w
}

func (c *spanConverter) doubleValue(f float64) *commonpb.AnyValue_DoubleValue {
	w := c.doubles.alloc()
	w.DoubleValue = f
	return w
}

func (c *spanConverter) stringValue(s string) *commonpb.AnyValue_StringValue {
	w := c.strings.alloc()
	w.StringValue = s
	return w
}

// array builds an array value of n elements, each set by set.
func (c *spanConverter) array(n int, set func(i int, e *commonpb.AnyValue)) *commonpb.AnyValue_ArrayValue {
	arr := c.arrayValues.alloc()
	arr.Values = c.valuePtrs.take(n)
	for i := range n {
		e := c.values.alloc()
		set(i, e)
		arr.Values[i] = e
	}
	w := c.arrays.alloc()
	w.ArrayValue = arr
	return w
}

// keyValuesOf converts attributes that outlive an export (of the cached resources and
// scopes), with a converter of their own that is never reset.
func keyValuesOf(it attribute.Iterator) []*commonpb.KeyValue {
	if it.Len() == 0 {
		return nil
	}
	var c spanConverter
	out := make([]*commonpb.KeyValue, 0, it.Len())
	for it.Next() {
		a := it.Attribute()
		out = append(out, &commonpb.KeyValue{Key: string(a.Key), Value: c.value(a.Value)})
	}
	return out
}

func spanFlags(tf trace.TraceFlags, parent trace.SpanContext) uint32 {
	flags := uint32(tf) | uint32(tracepb.SpanFlags_SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK)
	if parent.IsRemote() {
		flags |= uint32(tracepb.SpanFlags_SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK)
	}
	return flags
}

func spanKind(k trace.SpanKind) tracepb.Span_SpanKind {
	switch k {
	case trace.SpanKindInternal:
		return tracepb.Span_SPAN_KIND_INTERNAL
	case trace.SpanKindClient:
		return tracepb.Span_SPAN_KIND_CLIENT
	case trace.SpanKindServer:
		return tracepb.Span_SPAN_KIND_SERVER
	case trace.SpanKindProducer:
		return tracepb.Span_SPAN_KIND_PRODUCER
	case trace.SpanKindConsumer:
		return tracepb.Span_SPAN_KIND_CONSUMER
	}
	return tracepb.Span_SPAN_KIND_UNSPECIFIED
}

func statusCode(c codes.Code) tracepb.Status_StatusCode {
	switch c {
	case codes.Ok:
		return tracepb.Status_STATUS_CODE_OK
	case codes.Error:
		return tracepb.Status_STATUS_CODE_ERROR
	}
	return tracepb.Status_STATUS_CODE_UNSET
}

func unixNano(ns int64) uint64 { return uint64(max(0, ns)) }

func clampUint32(v int) uint32 {
	if v < 0 {
		return 0
	}
	return uint32(min(int64(v), math.MaxUint32))
}

// arenaChunk is how many messages an arena allocates at a time; chunks are never
// moved, so a pointer into one stays valid until the arena is reset.
const arenaChunk = 128

// arena hands out zeroed values of T and takes them all back at once.
type arena[T any] struct {
	chunks []*[arenaChunk]T
	n      int
}

func (a *arena[T]) alloc() *T {
	c, i := a.n/arenaChunk, a.n%arenaChunk
	if c == len(a.chunks) {
		a.chunks = append(a.chunks, new([arenaChunk]T))
	}
	a.n++
	p := &a.chunks[c][i]
	var zero T
	*p = zero
	return p
}

func (a *arena[T]) reset() { a.n = 0 }

// ptrs hands out pointer slices carved from one buffer. A slice handed out stays valid
// when the buffer is replaced by a larger one; the next export starts in the larger one.
type ptrs[T any] struct{ buf []*T }

func (p *ptrs[T]) take(n int) []*T {
	if len(p.buf)+n > cap(p.buf) {
		p.buf = make([]*T, 0, max(2*cap(p.buf), n, 64))
	}
	l := len(p.buf)
	p.buf = p.buf[:l+n]
	return p.buf[l : l+n : l+n]
}

func (p *ptrs[T]) reset() {
	clear(p.buf)
	p.buf = p.buf[:0]
}
