// Package wiretest sends messages as raw protobuf bytes over gRPC, for tests of what a
// server does with requests Go's generated clients refuse to marshal (strings that are
// not UTF-8) but clients in other languages send.
package wiretest

import (
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	protoenc "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
)

// Bytes is a message as bytes on the wire.
type Bytes []byte

type codec struct{ encoding.CodecV2 }

func (c codec) Marshal(v any) (mem.BufferSlice, error) {
	switch b := v.(type) {
	case Bytes:
		return mem.BufferSlice{mem.SliceBuffer(b)}, nil
	case *Bytes:
		return mem.BufferSlice{mem.SliceBuffer(*b)}, nil
	}
	return c.CodecV2.Marshal(v)
}

func (c codec) Unmarshal(data mem.BufferSlice, v any) error {
	if b, ok := v.(*Bytes); ok {
		*b = data.Materialize()
		return nil
	}
	return c.CodecV2.Unmarshal(data, v)
}

// CallOption makes a call send Bytes (or *Bytes) as they are and read a response into a
// *Bytes without decoding it; other messages are encoded and decoded as usual.
func CallOption() grpc.CallOption {
	return grpc.ForceCodecV2(codec{encoding.GetCodecV2(protoenc.Name)})
}
