package grpcx

import (
	"context"
	"testing"
	"time"

	"github.com/quarry-router/quarry/platform/auth"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// A call without a known key is refused when its headers arrive, before the server
// reads its message: a keyless client cannot make the server hold up to a message's
// 4 MiB per stream, as it could while the key was checked only by the interceptors,
// which run once a unary request is in memory. The client here opens the unary call
// and never sends the message; a server that waited for it would answer only at the
// deadline.
func TestKeylessCallsAreRefusedBeforeTheirMessage(t *testing.T) {
	policy, err := auth.NewPolicy([]auth.Key{{Name: "team", SHA256: auth.HashKey("k-team"), KnowledgeBases: []string{"*"}}})
	if err != nil {
		t.Fatal(err)
	}
	addr := serveEcho(t, WithAuth(policy)...)
	for _, tt := range []struct {
		name, key string
		want      codes.Code
	}{
		{"no key", "", codes.Unauthenticated},
		{"an unknown key", "k-other", codes.Unauthenticated},
		{"a known key", "k-team", codes.DeadlineExceeded}, // waits for the message
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := keyed(t, addr, tt.key)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			s, err := c.conn.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, "/quarry.test.Echo/Echo")
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			err = s.RecvMsg(new(wrapperspb.StringValue))
			if status.Code(err) != tt.want {
				t.Fatalf("%v after %v, want %v", err, time.Since(start).Round(time.Millisecond), tt.want)
			}
			if tt.want == codes.Unauthenticated && time.Since(start) > time.Second {
				t.Errorf("refused after %v: the server waited for the message", time.Since(start).Round(time.Millisecond))
			}
		})
	}
	// The interceptors' check stays: a known key still gets its answer.
	if _, err := keyed(t, addr, "k-team").echo(t); err != nil {
		t.Fatalf("a known key's call: %v", err)
	}
}
