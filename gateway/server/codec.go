package server

import (
	"errors"

	quarryv1 "github.com/quarry-router/quarry/gen/quarry/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	protoenc "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// Options returns the server options the QueryService needs: a codec that lets
// requests with non-UTF-8 text through to validation. The standard codec rejects them
// while decoding, which gRPC reports as INTERNAL; the API promises INVALID_ARGUMENT.
func Options() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.ForceServerCodecV2(lenientCodec{encoding.GetCodecV2(protoenc.Name)})}
}

type lenientCodec struct {
	encoding.CodecV2
}

// Unmarshal decodes with the standard codec and, for the query requests it fails on,
// again without checking UTF-8; the router rejects such queries with a clear message.
func (c lenientCodec) Unmarshal(data mem.BufferSlice, v any) error {
	err := c.CodecV2.Unmarshal(data, v)
	if err == nil {
		return nil
	}
	var lenient error
	switch m := v.(type) {
	case *quarryv1.QueryRequest:
		proto.Reset(m)
		lenient = decodeQueryRequest(data.Materialize(), m)
	case *quarryv1.QueryStreamRequest:
		proto.Reset(m)
		lenient = decodeQueryStreamRequest(data.Materialize(), m)
	default:
		return err
	}
	if lenient != nil {
		return err
	}
	return nil
}

var errMalformed = errors.New("malformed message")

// decodeFields walks the top-level fields of a message, giving each length-delimited
// or varint field to fn and skipping the rest.
func decodeFields(b []byte, fn func(num protowire.Number, typ protowire.Type, b []byte) int) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return errMalformed
		}
		b = b[n:]
		n = fn(num, typ, b)
		if n == 0 {
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return errMalformed
		}
		b = b[n:]
	}
	return nil
}

func decodeQueryRequest(b []byte, m *quarryv1.QueryRequest) error {
	return decodeFields(b, func(num protowire.Number, typ protowire.Type, b []byte) int {
		switch {
		case num == 1 && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			m.KnowledgeBase = string(v)
			return n
		case num == 2 && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			m.Query = string(v)
			return n
		case num == 3 && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			m.Explain = v != 0
			return n
		}
		return 0
	})
}

func decodeQueryStreamRequest(b []byte, m *quarryv1.QueryStreamRequest) error {
	return decodeFields(b, func(num protowire.Number, typ protowire.Type, b []byte) int {
		if num != 1 || typ != protowire.BytesType {
			return 0
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return n
		}
		if m.Request == nil {
			m.Request = &quarryv1.QueryRequest{}
		}
		// Repeated occurrences of a message field merge, as in the standard decoder.
		if decodeQueryRequest(v, m.Request) != nil {
			return -1
		}
		return n
	})
}
