package otlptest

import (
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
)

const exportMethod = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"

// exportWire is the counting collector's Export: it takes the request as bytes.
func (c *Collector) exportWire(_ any, stream grpc.ServerStream) error {
	if m, _ := grpc.MethodFromServerStream(stream); m != exportMethod {
		return status.Errorf(codes.Unimplemented, "otlptest: unknown method %s", m)
	}
	var req wireMessage
	if err := stream.RecvMsg(&req); err != nil {
		return err
	}
	if err := c.take(stream.Context(), req); err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	return stream.SendMsg(&wireMessage{}) // an empty ExportTraceServiceResponse
}

// countName counts a span named name; c.mu is held.
func (c *Collector) countName(name []byte) {
	n := c.byName[string(name)] // a lookup: the conversion allocates nothing
	if n == nil {
		n = new(int)
		c.byName[string(name)] = n
	}
	*n++
}

// wireMessage is a message as its bytes on the wire.
type wireMessage []byte

// wireCodec hands requests over as bytes, undecoded.
type wireCodec struct{}

func (wireCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(*v.(*wireMessage))}, nil
}

func (wireCodec) Unmarshal(data mem.BufferSlice, v any) error {
	*v.(*wireMessage) = data.Materialize()
	return nil
}

func (wireCodec) Name() string { return "proto" }

// Field numbers on the path from an ExportTraceServiceRequest to a span's name
// (opentelemetry/proto/collector/trace/v1 and trace/v1).
const (
	requestResourceSpans = 1 // ExportTraceServiceRequest.resource_spans
	resourceScopeSpans   = 2 // ResourceSpans.scope_spans
	scopeSpans           = 2 // ScopeSpans.spans
	spanName             = 5 // Span.name
)

// scanSpanNames calls name for each span in an ExportTraceServiceRequest and returns
// how many spans there were.
func scanSpanNames(req []byte, name func([]byte)) (int, error) {
	spans := 0
	err := eachField(req, requestResourceSpans, func(rs []byte) error {
		return eachField(rs, resourceScopeSpans, func(ss []byte) error {
			return eachField(ss, scopeSpans, func(span []byte) error {
				spans++
				found := false
				err := eachField(span, spanName, func(n []byte) error {
					name(n)
					found = true
					return nil
				})
				if err == nil && !found {
					name(nil) // proto3: an empty name is not on the wire
				}
				return err
			})
		})
	})
	return spans, err
}

// eachField calls f with the contents of each length-delimited field numbered num in
// msg, and checks that every other field is well formed.
func eachField(msg []byte, num protowire.Number, f func([]byte) error) error {
	for len(msg) > 0 {
		n, typ, l := protowire.ConsumeTag(msg)
		if l < 0 {
			return protowire.ParseError(l)
		}
		msg = msg[l:]
		if n != num {
			l = protowire.ConsumeFieldValue(n, typ, msg)
			if l < 0 {
				return fmt.Errorf("field %d: %w", n, protowire.ParseError(l))
			}
			msg = msg[l:]
			continue
		}
		if typ != protowire.BytesType {
			return fmt.Errorf("field %d: wire type %d, want length-delimited", n, typ)
		}
		v, l := protowire.ConsumeBytes(msg)
		if l < 0 {
			return fmt.Errorf("field %d: %w", n, protowire.ParseError(l))
		}
		msg = msg[l:]
		if err := f(v); err != nil {
			return err
		}
	}
	return nil
}
