package grpcx

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/quarry-router/quarry/platform/grpcx/wiretest"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/structpb"
)

// A request with text that is not UTF-8 is INVALID_ARGUMENT naming the field, on every
// service of a server (here, health); one that is broken otherwise is INTERNAL as
// before; and the server keeps nothing of either.
func TestNonUTF8RequestsAreInvalidArgument(t *testing.T) {
	s := NewServer(slog.New(slog.NewTextHandler(io.Discard, nil)))
	s.SetServing("quarry.v1.Test")
	conn, stop := serveAndDial(t, s)
	defer func() {
		if err := stop(); err != nil {
			t.Error(err)
		}
	}()
	service := func(name string) wiretest.Bytes {
		b := protowire.AppendTag(nil, 1, protowire.BytesType)
		return protowire.AppendBytes(b, []byte(name))
	}
	tests := []struct {
		name string
		req  wiretest.Bytes
		want codes.Code
		says string
	}{
		{"invalid UTF-8", service("quarry.v1.\xffTest"), codes.InvalidArgument, "field service is not valid UTF-8"},
		{"a lone surrogate", service("\xed\xa0\x80"), codes.InvalidArgument, "field service is not valid UTF-8"},
		{"a truncated message", service("quarry.v1.Test")[:5], codes.Internal, ""},
		{"valid UTF-8", service("quarry.v1.Test"), codes.OK, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			var resp healthpb.HealthCheckResponse
			err := conn.Invoke(ctx, healthpb.Health_Check_FullMethodName, &tt.req, &resp,
				wiretest.CallOption())
			if st := status.Convert(err); st.Code() != tt.want || !strings.Contains(st.Message(), tt.says) {
				t.Fatalf("status = %v %q, want %v %q", st.Code(), st.Message(), tt.want, tt.says)
			}
		})
	}
	n := 0
	badUTF8.Range(func(any, any) bool { n++; return true })
	if n != 0 {
		t.Errorf("%d refused requests still held", n)
	}
}

// The lenient decode follows nested messages no deeper than protobuf does: a Struct
// nested without end is refused as before instead of growing the stack.
func TestValidUTF8StopsAtTheDepthLimit(t *testing.T) {
	md := (&structpb.Value{}).ProtoReflect().Descriptor()
	// Value.list_value (6) -> ListValue.values (1) -> Value ..., a bad string at the bottom.
	inner := protowire.AppendTag(nil, 3, protowire.BytesType) // Value.string_value
	inner = protowire.AppendBytes(inner, []byte("\xff"))
	// nest wraps inner in levels of Value{list_value: ListValue{values: [...]}}, outermost
	// first, in linear time.
	nest := func(levels int) []byte {
		sizes := []int{len(inner)} // encoded size of the Value at each level, innermost first
		lists := []int{0}          // and of the ListValue it holds
		for k := 1; k <= levels; k++ {
			l := 1 + protowire.SizeVarint(uint64(sizes[k-1])) + sizes[k-1]
			lists = append(lists, l)
			sizes = append(sizes, 1+protowire.SizeVarint(uint64(l))+l)
		}
		var b []byte
		for k := levels; k >= 1; k-- {
			b = protowire.AppendTag(b, 6, protowire.BytesType)
			b = protowire.AppendVarint(b, uint64(lists[k]))
			b = protowire.AppendTag(b, 1, protowire.BytesType)
			b = protowire.AppendVarint(b, uint64(sizes[k-1]))
		}
		return append(b, inner...)
	}
	for _, tt := range []struct {
		levels int
		want   string
	}{
		{0, "string_value"},
		{2, "list_value.values.list_value.values.string_value"},
		{4, "list_value.values.list_value.values.list_value.values.list_value.values.string_value"},
		{1000, "list_value.values.list_value.values.….values.list_value.values.string_value"},
	} {
		bad, err := validUTF8(nest(tt.levels), md, 0)
		if got := fieldName(bad); err != nil || got != tt.want {
			t.Errorf("%d levels: field %q, %v; want %q", tt.levels, got, err, tt.want)
		}
	}
	// Each level is two messages deep (a Value, then a ListValue).
	if _, err := validUTF8(nest(maxDepth/2+1), md, 0); err == nil {
		t.Errorf("%d messages deep: no error, want one past the depth limit of %d", maxDepth+2, maxDepth)
	}
}
