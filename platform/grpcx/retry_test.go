package grpcx

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// flaky is a service that answers UNAVAILABLE to its first call and then answers, as
// a replica that was draining or not yet ready does, and keeps the deadline each call
// arrived with.
type flaky struct {
	calls    atomic.Int64
	deadline atomic.Pointer[time.Time]
}

// flakyDesc registers one unary method under service's name: Dial's retry policy is
// chosen by service name, so the names are Quarry's own.
func flakyDesc(service, method string) *grpc.ServiceDesc {
	return &grpc.ServiceDesc{
		ServiceName: service,
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{
			MethodName: method,
			Handler: func(srv any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
				in := new(wrapperspb.StringValue)
				if err := dec(in); err != nil {
					return nil, err
				}
				f := srv.(*flaky)
				h := func(ctx context.Context, req any) (any, error) {
					if d, ok := ctx.Deadline(); ok {
						f.deadline.Store(&d)
					}
					if f.calls.Add(1) == 1 {
						return nil, status.Error(codes.Unavailable, "not ready")
					}
					return req, nil
				}
				if icpt == nil {
					return h(ctx, in)
				}
				return icpt(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: "/" + service + "/" + method}, h)
			},
		}},
	}
}

// Dial retries an UNAVAILABLE call only on the search service, whose calls read and
// may be sent twice; an agent answer (an LLM's time and tokens) and a knowledge-base
// write are not sent again, their callers decide. Every call reaches the next service
// with the caller's deadline, so a hop never works past the time its caller has.
func TestRetriesOnlyWhereIdempotentAndDeadlinesPropagate(t *testing.T) {
	for _, tc := range []struct {
		service, method string
		wantCalls       int64
		wantCode        codes.Code
	}{
		{"quarry.v1.SearchService", "Resolve", 2, codes.OK},
		{"quarry.v1.AgentService", "Answer", 1, codes.Unavailable},
		{"quarry.v1.KnowledgeService", "UpsertFile", 1, codes.Unavailable},
	} {
		t.Run(tc.service, func(t *testing.T) {
			f := &flaky{}
			addr, _ := serveWith(t, loopback(t), func(s *Server) { s.RegisterService(flakyDesc(tc.service, tc.method), f) })
			conn, err := Dial(addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()

			const budget = 5 * time.Second
			ctx, cancel := context.WithTimeout(context.Background(), budget)
			defer cancel()
			callerDeadline, _ := ctx.Deadline()
			err = conn.Invoke(ctx, "/"+tc.service+"/"+tc.method, wrapperspb.String("q"), new(wrapperspb.StringValue))
			if got := status.Code(err); got != tc.wantCode {
				t.Fatalf("call ended %v (%v), want %v", got, err, tc.wantCode)
			}
			if got := f.calls.Load(); got != tc.wantCalls {
				t.Errorf("server saw %d calls, want %d", got, tc.wantCalls)
			}
			d := f.deadline.Load()
			if d == nil {
				t.Fatal("the call reached the server without a deadline")
			}
			// The wire carries the time left, not the instant: allow for clock reading
			// on either side, but never more than the caller had.
			if d.After(callerDeadline.Add(50*time.Millisecond)) || d.Before(callerDeadline.Add(-budget/2)) {
				t.Errorf("server's deadline %v, want about the caller's %v", time.Until(*d), time.Until(callerDeadline))
			}
		})
	}
}
