package grpcx

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	protoenc "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Requests whose string fields are not UTF-8 get INVALID_ARGUMENT naming the field.
// gRPC's standard codec refuses them while decoding, and gRPC reports every decoding
// failure as INTERNAL: a client's mistake (a C++ client, whose protobuf only logs
// invalid UTF-8 and sends it, or a hand-built request) looked like a fault of the
// server. The codec below decodes such a request with its bad strings made valid and
// notes which field was bad; the interceptors refuse the request before any handler
// sees it. A request that fails to decode for any other reason is INTERNAL as before.

// badUTF8 maps a request the codec decoded leniently to the field that was not UTF-8,
// until the interceptors take it: every request the server decodes reaches them.
var badUTF8 sync.Map // proto.Message -> string

type utf8Codec struct{ encoding.CodecV2 }

func newUTF8Codec() utf8Codec { return utf8Codec{encoding.GetCodecV2(protoenc.Name)} }

func (c utf8Codec) Unmarshal(data mem.BufferSlice, v any) error {
	err := c.CodecV2.Unmarshal(data, v)
	if err == nil {
		return nil
	}
	m, ok := v.(proto.Message)
	if !ok {
		return err
	}
	// A copy: the codec may be handed buffers it does not own.
	fixed := bytes.Clone(data.Materialize())
	path, ferr := validUTF8(fixed, m.ProtoReflect().Descriptor(), 0)
	if ferr != nil || path == nil {
		return err
	}
	proto.Reset(m)
	if proto.Unmarshal(fixed, m) != nil {
		return err
	}
	badUTF8.Store(m, fieldName(path))
	return nil
}

// maxDepth bounds how deep validUTF8 follows nested messages, as protobuf bounds its
// decoder: google.protobuf.Struct nests without end, and a request of a few megabytes
// could nest a million deep.
const maxDepth = 10000

var errTooDeep = errors.New("message nested too deep")

// validUTF8 makes every string field of b, at any depth, valid UTF-8 in place, each
// byte of a bad sequence replaced by '?' so that no length changes and each byte is
// visited once, and returns the path to the first field that was not, innermost name
// first (nil when none).
func validUTF8(b []byte, md protoreflect.MessageDescriptor, depth int) (bad []protoreflect.Name, err error) {
	if depth > maxDepth {
		return nil, errTooDeep
	}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, protowire.ParseError(n)
		}
		b = b[n:]
		fd := md.Fields().ByNumber(num)
		if typ != protowire.BytesType || fd == nil || (fd.Kind() != protoreflect.StringKind && fd.Kind() != protoreflect.MessageKind) {
			n = protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return nil, protowire.ParseError(n)
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return nil, protowire.ParseError(n)
		}
		b = b[n:]
		if fd.Kind() == protoreflect.MessageKind {
			inner, err := validUTF8(v, fd.Message(), depth+1)
			if err != nil {
				return nil, err
			}
			if bad == nil && inner != nil {
				bad = append(inner, fd.Name())
			}
			continue
		}
		for i := 0; i < len(v); {
			r, size := utf8.DecodeRune(v[i:])
			if r == utf8.RuneError && size == 1 {
				v[i] = '?'
				if bad == nil {
					bad = []protoreflect.Name{fd.Name()}
				}
			}
			i += size
		}
	}
	return bad, nil
}

// fieldName names the field at path (innermost first) as "outer.inner", with the
// middle of a path too deep to show left out.
func fieldName(path []protoreflect.Name) string {
	const ends = 4
	var names []string
	for i := len(path) - 1; i >= 0; i-- {
		if len(path) > 2*ends+1 && i == len(path)-1-ends {
			names = append(names, "…")
			i = ends - 1
		}
		names = append(names, string(path[i]))
	}
	return strings.Join(names, ".")
}

// refuseBadUTF8 is the status of a request the codec found a bad string in, or nil.
func refuseBadUTF8(req any) error {
	m, ok := req.(proto.Message)
	if !ok {
		return nil
	}
	field, ok := badUTF8.LoadAndDelete(m)
	if !ok {
		return nil
	}
	return status.Errorf(codes.InvalidArgument, "field %s is not valid UTF-8", field)
}

func unaryUTF8(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if err := refuseBadUTF8(req); err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

func streamUTF8(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	return handler(srv, utf8Stream{ss})
}

type utf8Stream struct{ grpc.ServerStream }

func (s utf8Stream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	return refuseBadUTF8(m)
}
