package grpcx

import (
	"context"
	"errors"
	"math"
	"net"
	"strconv"
	"time"

	"github.com/quarry-router/quarry/platform/auth"
	"github.com/quarry-router/quarry/platform/limit"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// RetryAfterKey is the trailer that carries a refused call's retry hint in whole
// seconds, rounded up, for clients that do not read status details.
const RetryAfterKey = "retry-after"

// WithLimits holds every caller of the methods applies selects to l's limits, or to
// its API key's own (auth.Caller), and answers a call over a limit with
// RESOURCE_EXHAUSTED carrying a google.rpc.RetryInfo detail and a retry-after
// trailer. Pass it after WithAuth so that refused keys take nothing and callers are
// named by key; on an open server they are named by their address. A stream holds its
// slot until it ends.
func WithLimits(l *limit.Limiter, applies func(method string) bool) []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
			if !applies(info.FullMethod) {
				return handler(ctx, req)
			}
			release, err := acquire(ctx, l)
			if err != nil {
				return nil, exhausted(ctx, err, func(md metadata.MD) { _ = grpc.SetTrailer(ctx, md) })
			}
			defer release()
			return handler(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
			if !applies(info.FullMethod) {
				return handler(srv, ss)
			}
			ls := &limitedStream{ServerStream: ss, l: l}
			defer ls.release()
			return handler(srv, ls)
		}),
	}
}

// Methods returns an applies function for WithLimits matching full method names
// ("/pkg.Service/Method") or whole services ("/pkg.Service/").
func Methods(names ...string) func(method string) bool {
	set := map[string]bool{}
	for _, n := range names {
		set[n] = true
	}
	return func(method string) bool {
		if set[method] {
			return true
		}
		for i := len(method) - 1; i > 0; i-- {
			if method[i] == '/' {
				return set[method[:i+1]]
			}
		}
		return false
	}
}

// limitedStream takes a stream's token and slot when its first message has been read,
// not when it opens: auth checks the knowledge base a stream names as its messages are
// read (the stream is opened before any arrives), and a refused call takes nothing, on
// a stream as on a unary call.
type limitedStream struct {
	grpc.ServerStream
	l    *limit.Limiter
	held bool
	done func() // gives the token's slot back
}

func (s *limitedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil || s.held {
		return err
	}
	release, err := acquire(s.Context(), s.l)
	if err != nil {
		return exhausted(s.Context(), err, s.SetTrailer)
	}
	s.held, s.done = true, release
	return nil
}

func (s *limitedStream) release() {
	if s.held {
		s.done()
	}
}

func acquire(ctx context.Context, l *limit.Limiter) (func(), error) {
	if c, ok := auth.CallerFrom(ctx); ok {
		return l.Acquire("key "+c.ID, c.Limits)
	}
	return l.Acquire(peerHost(ctx), limit.Limits{})
}

// peerHost names an anonymous caller by its address without the port: one client
// opens several connections.
func peerHost(ctx context.Context) string {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return "address unknown"
	}
	a := p.Addr.String()
	if h, _, err := net.SplitHostPort(a); err == nil {
		a = h
	}
	return "address " + a
}

// exhausted turns a limit's refusal into RESOURCE_EXHAUSTED with the hint, naming
// the key by its name rather than its hash.
func exhausted(ctx context.Context, err error, setTrailer func(metadata.MD)) error {
	var ex *limit.Exceeded
	if !errors.As(err, &ex) {
		return status.Error(codes.Internal, "limit check failed")
	}
	if c, ok := auth.CallerFrom(ctx); ok {
		ex.Caller = "API key " + strconv.Quote(c.Name)
	}
	secs := int(math.Ceil(ex.RetryAfter.Seconds()))
	setTrailer(metadata.Pairs(RetryAfterKey, strconv.Itoa(max(secs, 1))))
	st, derr := status.New(codes.ResourceExhausted, ex.Error()).WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(ex.RetryAfter)})
	if derr != nil {
		return status.Error(codes.ResourceExhausted, ex.Error())
	}
	return st.Err()
}

// RetryDelay returns the retry hint of a RESOURCE_EXHAUSTED error, from its RetryInfo
// detail; false when it has none.
func RetryDelay(err error) (time.Duration, bool) {
	for _, d := range status.Convert(err).Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			return ri.GetRetryDelay().AsDuration(), true
		}
	}
	return 0, false
}
