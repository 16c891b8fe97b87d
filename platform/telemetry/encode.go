package telemetry

import (
	"math"
	"strings"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// spanEncoder writes an export's spans in the OTLP protobuf wire format straight from
// the SDK's spans, into a buffer it keeps for the next export: no message is built.
// Each resource's encoded fields become the fields of a tracepb.ResourceSpans that
// holds nothing else (protobuf keeps fields it was not given as typed values, "unknown
// fields", and marshals them as they are), so otlptrace's client sends them unchanged.
// A collector decodes the same messages as from otlptrace's own conversion
// (TestOTLPExporterSendsWhatOtlptraceSends).
type spanEncoder struct {
	buf []byte
	out []*tracepb.ResourceSpans

	// Resources and scopes are the same for every span of a process: encoded once.
	resources map[attribute.Distinct][]byte
	scopes    map[instrumentation.Scope][]byte

	groups []spanGroup

	// spans holds the messages of the spans added since the last reset, one after
	// another; entries says where each lies and which group it is in.
	spans   []byte
	entries []encodedSpan
	present []bool // of each group, whether the spans being finished hold any
	order   []int  // the groups of the spans being finished, in the order first seen
}

// encodedSpan is one added span: spans[start:end] of its group.
type encodedSpan struct{ group, start, end int }

// spanGroup is the spans of one resource and instrumentation scope.
type spanGroup struct {
	resource *resource.Resource
	key      attribute.Distinct // resources with the same attributes are one
	scope    instrumentation.Scope
}

// maxCached bounds the encoded resources and scopes kept: a process has a handful.
const maxCached = 64

// maxKeptBuffer bounds each buffer kept between exports, the encoder's and the
// request codec's: a batch of the default 512 spans takes a few hundred KiB.
const maxKeptBuffer = 4 << 20

// OTLP field numbers (opentelemetry/proto/trace/v1/trace.proto, common/v1/common.proto).
const (
	fResourceSpansResource, fResourceSpansScopeSpans, fResourceSpansSchemaURL = 1, 2, 3
	fResourceAttributes                                                       = 1
	fScopeSpansScope, fScopeSpansSpans, fScopeSpansSchemaURL                  = 1, 2, 3
	fScopeName, fScopeVersion, fScopeAttributes                               = 1, 2, 3

	fSpanTraceID, fSpanSpanID, fSpanTraceState, fSpanParentSpanID  = 1, 2, 3, 4
	fSpanName, fSpanKind, fSpanStart, fSpanEnd                     = 5, 6, 7, 8
	fSpanAttributes, fSpanDroppedAttributes                        = 9, 10
	fSpanEvents, fSpanDroppedEvents, fSpanLinks, fSpanDroppedLinks = 11, 12, 13, 14
	fSpanStatus, fSpanFlags                                        = 15, 16

	fEventTime, fEventName, fEventAttributes, fEventDroppedAttributes = 1, 2, 3, 4
	fLinkTraceID, fLinkSpanID, fLinkAttributes                        = 1, 2, 4
	fLinkDroppedAttributes, fLinkFlags                                = 5, 6
	fStatusMessage, fStatusCode                                       = 2, 3

	fKeyValueKey, fKeyValueValue                                  = 1, 2
	fAnyString, fAnyBool, fAnyInt, fAnyDouble, fAnyArray, fAnyMap = 1, 2, 3, 4, 5, 6
	fAnyBytes                                                     = 7
	fArrayValues, fKeyValueListValues                             = 1, 1
)

// encode returns the ResourceSpans of spans, grouped by resource and then by scope,
// each in the order first seen, spans in their order, as otlptrace groups them. The
// result is valid until the encoder is next used.
func (e *spanEncoder) encode(spans []sdktrace.ReadOnlySpan) []*tracepb.ResourceSpans {
	e.reset()
	for _, sd := range spans {
		e.add(sd)
	}
	return e.finish(0, len(e.entries))
}

// add encodes a span. The batcher encodes each span as it ends, so that it queues
// bytes, which the garbage collector does not scan, rather than the span, and the
// export's work is spread over the calls instead of done in one go.
func (e *spanEncoder) add(sd spanData) {
	if sd == nil {
		return
	}
	g := e.group(sd.Resource(), sd.InstrumentationScope())
	start := len(e.spans)
	e.spans = appendSpan(e.spans, sd)
	e.entries = append(e.entries, encodedSpan{group: g, start: start, end: len(e.spans)})
}

// len is how many spans have been added since the last reset.
func (e *spanEncoder) len() int { return len(e.entries) }

// finish returns the ResourceSpans of the added spans from to to (exclusive), valid
// until the next finish or reset.
func (e *spanEncoder) finish(from, to int) []*tracepb.ResourceSpans {
	if cap(e.buf) > maxKeptBuffer {
		e.buf = nil
	}
	e.buf, e.out = e.buf[:0], e.out[:0]
	entries := e.entries[from:to]
	// The groups in the order the spans being finished first show them, as otlptrace
	// orders a batch's.
	e.present = append(e.present[:0], make([]bool, len(e.groups))...)
	e.order = e.order[:0]
	for _, en := range entries {
		if !e.present[en.group] {
			e.present[en.group] = true
			e.order = append(e.order, en.group)
		}
	}
	for oi, i := range e.order {
		if !e.firstOfResource(oi) {
			continue
		}
		res := e.groups[i]
		start := len(e.buf)
		b := e.buf
		if res.resource != nil {
			b = appendBytesField(b, fResourceSpansResource, e.resource(res.resource, res.key))
		}
		for _, j := range e.order[oi:] {
			if e.groups[j].key != res.key {
				continue
			}
			var m int
			b, m = beginMessage(b, fResourceSpansScopeSpans)
			if s := e.groups[j].scope; s != (instrumentation.Scope{}) {
				b = appendBytesField(b, fScopeSpansScope, e.scope(s))
			}
			for _, en := range entries {
				if en.group == j {
					b = appendBytesField(b, fScopeSpansSpans, e.spans[en.start:en.end])
				}
			}
			b = appendString(b, fScopeSpansSchemaURL, e.groups[j].scope.SchemaURL)
			b = endMessage(b, m)
		}
		b = appendString(b, fResourceSpansSchemaURL, res.resource.SchemaURL())
		e.buf = b
		rs := &tracepb.ResourceSpans{}
		// A full slice expression: a later append must not write into this one.
		rs.ProtoReflect().SetUnknown(protoreflect.RawFields(e.buf[start:len(e.buf):len(e.buf)]))
		e.out = append(e.out, rs)
	}
	return e.out
}

// reset forgets the added spans, keeping the buffers unless they grew too large.
func (e *spanEncoder) reset() {
	if cap(e.spans) > maxKeptBuffer {
		e.spans = nil
	}
	e.spans, e.entries, e.groups = e.spans[:0], e.entries[:0], e.groups[:0]
}

func (e *spanEncoder) group(res *resource.Resource, scope instrumentation.Scope) int {
	key := res.Equivalent()
	for i := range e.groups {
		if e.groups[i].key == key && e.groups[i].scope == scope {
			return i
		}
	}
	e.groups = append(e.groups, spanGroup{resource: res, key: key, scope: scope})
	return len(e.groups) - 1
}

// firstOfResource says whether the oi-th group in order is the first with its resource.
func (e *spanEncoder) firstOfResource(oi int) bool {
	key := e.groups[e.order[oi]].key
	for _, j := range e.order[:oi] {
		if e.groups[j].key == key {
			return false
		}
	}
	return true
}

// resource is a Resource message's encoding.
func (e *spanEncoder) resource(res *resource.Resource, key attribute.Distinct) []byte {
	return memo(&e.resources, key, func() []byte {
		var r []byte
		for it := res.Iter(); it.Next(); {
			r = appendKeyValue(r, fResourceAttributes, it.Attribute())
		}
		return r
	})
}

// scope is an InstrumentationScope message's encoding.
func (e *spanEncoder) scope(s instrumentation.Scope) []byte {
	return memo(&e.scopes, s, func() []byte {
		p := appendString(nil, fScopeName, s.Name)
		p = appendString(p, fScopeVersion, s.Version)
		for it := s.Attributes.Iter(); it.Next(); {
			p = appendKeyValue(p, fScopeAttributes, it.Attribute())
		}
		return p
	})
}

// memo returns m's encoding for k, encoding and keeping it the first time.
func memo[K comparable](m *map[K][]byte, k K, encode func() []byte) []byte {
	if v, ok := (*m)[k]; ok {
		return v
	}
	v := encode()
	if *m == nil {
		*m = map[K][]byte{}
	}
	if len(*m) < maxCached {
		(*m)[k] = v
	}
	return v
}

// spanData is what the encoder reads of an ended span: the SDK's ReadOnlySpan, or this
// package's own span (span.go).
type spanData interface {
	SpanContext() trace.SpanContext
	Parent() trace.SpanContext
	Name() string
	SpanKind() trace.SpanKind
	StartTime() time.Time
	EndTime() time.Time
	Attributes() []attribute.KeyValue
	DroppedAttributes() int
	Events() []sdktrace.Event
	DroppedEvents() int
	Links() []sdktrace.Link
	DroppedLinks() int
	Status() sdktrace.Status
	Resource() *resource.Resource
	InstrumentationScope() instrumentation.Scope
}

func appendSpan(b []byte, sd spanData) []byte {
	sc := sd.SpanContext()
	tid, sid := sc.TraceID(), sc.SpanID()
	b = appendBytesField(b, fSpanTraceID, tid[:])
	b = appendBytesField(b, fSpanSpanID, sid[:])
	if ts := sc.TraceState(); ts.Len() > 0 {
		b = appendString(b, fSpanTraceState, ts.String())
	}
	parent := sd.Parent()
	if p := parent.SpanID(); p.IsValid() {
		b = appendBytesField(b, fSpanParentSpanID, p[:])
	}
	b = appendString(b, fSpanName, sd.Name())
	b = appendVarint(b, fSpanKind, uint64(spanKind(sd.SpanKind())))
	b = appendFixed64(b, fSpanStart, unixNano(sd.StartTime().UnixNano()))
	b = appendFixed64(b, fSpanEnd, unixNano(sd.EndTime().UnixNano()))
	for _, a := range sd.Attributes() {
		b = appendKeyValue(b, fSpanAttributes, a)
	}
	b = appendVarint(b, fSpanDroppedAttributes, uint64(clampUint32(sd.DroppedAttributes())))
	for _, ev := range sd.Events() {
		var m int
		b, m = beginMessage(b, fSpanEvents)
		b = appendFixed64(b, fEventTime, unixNano(ev.Time.UnixNano()))
		b = appendString(b, fEventName, ev.Name)
		for _, a := range ev.Attributes {
			b = appendKeyValue(b, fEventAttributes, a)
		}
		b = appendVarint(b, fEventDroppedAttributes, uint64(clampUint32(ev.DroppedAttributeCount)))
		b = endMessage(b, m)
	}
	b = appendVarint(b, fSpanDroppedEvents, uint64(clampUint32(sd.DroppedEvents())))
	for _, l := range sd.Links() {
		var m int
		b, m = beginMessage(b, fSpanLinks)
		ltid, lsid := l.SpanContext.TraceID(), l.SpanContext.SpanID()
		b = appendBytesField(b, fLinkTraceID, ltid[:])
		b = appendBytesField(b, fLinkSpanID, lsid[:])
		// otlptrace leaves a link's trace state out; so does this, to send the same.
		for _, a := range l.Attributes {
			b = appendKeyValue(b, fLinkAttributes, a)
		}
		b = appendVarint(b, fLinkDroppedAttributes, uint64(clampUint32(l.DroppedAttributeCount)))
		b = protowire.AppendTag(b, fLinkFlags, protowire.Fixed32Type)
		b = protowire.AppendFixed32(b, spanFlags(l.SpanContext.TraceFlags(), l.SpanContext))
		b = endMessage(b, m)
	}
	b = appendVarint(b, fSpanDroppedLinks, uint64(clampUint32(sd.DroppedLinks())))
	// The status is always there, as otlptrace sends it, even when unset.
	st := sd.Status()
	var m int
	b, m = beginMessage(b, fSpanStatus)
	b = appendString(b, fStatusMessage, st.Description)
	b = appendVarint(b, fStatusCode, uint64(statusCode(st.Code)))
	b = endMessage(b, m)
	b = protowire.AppendTag(b, fSpanFlags, protowire.Fixed32Type)
	return protowire.AppendFixed32(b, spanFlags(sc.TraceFlags(), parent))
}

func appendKeyValue(b []byte, num protowire.Number, a attribute.KeyValue) []byte {
	var m int
	b, m = beginMessage(b, num)
	b = appendString(b, fKeyValueKey, string(a.Key))
	b = appendAnyValue(b, fKeyValueValue, a.Value)
	return endMessage(b, m)
}

// appendAnyValue writes an AnyValue message; an EMPTY value is a message with no
// field set, as otlptrace sends it.
func appendAnyValue(b []byte, num protowire.Number, v attribute.Value) []byte {
	var m int
	b, m = beginMessage(b, num)
	switch v.Type() {
	case attribute.BOOL:
		b = appendBool(b, v.AsBool())
	case attribute.INT64:
		b = appendInt(b, v.AsInt64())
	case attribute.FLOAT64:
		b = appendDouble(b, v.AsFloat64())
	case attribute.STRING:
		b = appendStringValue(b, v.AsString())
	case attribute.BYTESLICE:
		b = protowire.AppendTag(b, fAnyBytes, protowire.BytesType)
		b = protowire.AppendBytes(b, v.AsByteSlice())
	case attribute.BOOLSLICE:
		b = appendArray(b, v.AsBoolSlice(), appendBool)
	case attribute.INT64SLICE:
		b = appendArray(b, v.AsInt64Slice(), appendInt)
	case attribute.FLOAT64SLICE:
		b = appendArray(b, v.AsFloat64Slice(), appendDouble)
	case attribute.STRINGSLICE:
		b = appendArray(b, v.AsStringSlice(), appendStringValue)
	case attribute.SLICE:
		var a int
		b, a = beginMessage(b, fAnyArray)
		for _, e := range v.AsSlice() {
			b = appendAnyValue(b, fArrayValues, e)
		}
		b = endMessage(b, a)
	case attribute.MAP:
		var l int
		b, l = beginMessage(b, fAnyMap)
		for _, kv := range v.AsMap() {
			b = appendKeyValue(b, fKeyValueListValues, kv)
		}
		b = endMessage(b, l)
	case attribute.EMPTY:
	default:
		b = appendStringValue(b, "INVALID")
	}
	return endMessage(b, m)
}

// appendArray writes an ArrayValue field, each element an AnyValue that set writes.
func appendArray[E any](b []byte, vs []E, set func([]byte, E) []byte) []byte {
	var a int
	b, a = beginMessage(b, fAnyArray)
	for _, v := range vs {
		var m int
		b, m = beginMessage(b, fArrayValues)
		b = set(b, v)
		b = endMessage(b, m)
	}
	return endMessage(b, a)
}

// The AnyValue fields are a oneof: written even when zero, so the kind is known.
func appendBool(b []byte, v bool) []byte {
	b = protowire.AppendTag(b, fAnyBool, protowire.VarintType)
	return protowire.AppendVarint(b, protowire.EncodeBool(v))
}

func appendInt(b []byte, v int64) []byte {
	b = protowire.AppendTag(b, fAnyInt, protowire.VarintType)
	return protowire.AppendVarint(b, uint64(v))
}

func appendDouble(b []byte, v float64) []byte {
	b = protowire.AppendTag(b, fAnyDouble, protowire.Fixed64Type)
	return protowire.AppendFixed64(b, math.Float64bits(v))
}

func appendStringValue(b []byte, v string) []byte {
	b = protowire.AppendTag(b, fAnyString, protowire.BytesType)
	return protowire.AppendString(b, validUTF8(v))
}

// Proto3 leaves scalars that are zero off the wire; so do these.
func appendString(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, validUTF8(s))
}

// validUTF8 is s with each run of bytes that is not UTF-8 replaced by U+FFFD. Every
// string field of OTLP is a protobuf string, which must be UTF-8: a receiver that
// checks (Go's protobuf, gRPC's codec) refuses the whole request, every span of the
// batch, for one file name or error message that is not (otlptrace cannot marshal such
// a batch at all). The replacement character is what OpenTelemetry recommends
// (opentelemetry-proto#845). A valid string, every string in practice, is not copied.
func validUTF8(s string) string {
	if isASCII(s) || utf8.ValidString(s) {
		return s
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

// isASCII reports whether s is all ASCII, eight bytes at a time and without a branch
// per word: for a span's short keys and values, a few times faster than
// utf8.ValidString, which validUTF8 leaves to strings that are not.
func isASCII(s string) bool {
	var or uint64
	for len(s) >= 8 {
		or |= uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
			uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
		s = s[8:]
	}
	for i := 0; i < len(s); i++ {
		or |= uint64(s[i])
	}
	return or&0x8080808080808080 == 0
}

func appendVarint(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

func appendFixed64(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.Fixed64Type)
	return protowire.AppendFixed64(b, v)
}

// appendBytesField writes a bytes or embedded message field, present even when empty.
func appendBytesField(b []byte, num protowire.Number, v []byte) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, v)
}

// beginMessage starts an embedded message field; endMessage puts its length in front of
// it once written. A length takes one byte below 128 bytes of message, so most
// messages need no move; a longer one moves its bytes along by the rest.
func beginMessage(b []byte, num protowire.Number) ([]byte, int) {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	b = append(b, 0) // the length: one byte, until endMessage knows better
	return b, len(b)
}

func endMessage(b []byte, start int) []byte {
	n := len(b) - start
	size := protowire.SizeVarint(uint64(n))
	if size > 1 {
		b = append(b, make([]byte, size-1)...)
		copy(b[start+size-1:], b[start:start+n])
	}
	protowire.AppendVarint(b[start-1:start-1], uint64(n))
	return b
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
