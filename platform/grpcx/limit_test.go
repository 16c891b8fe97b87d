package grpcx

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/quarry-router/quarry/platform/auth"
	"github.com/quarry-router/quarry/platform/limit"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// echoDesc is a two-method service for interceptor tests: Echo answers at once, Hold
// answers once and then stays open until the client goes away (a call in flight).
var echoDesc = grpc.ServiceDesc{
	ServiceName: "quarry.test.Echo",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Echo",
		Handler: func(srv any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
			in := new(wrapperspb.StringValue)
			if err := dec(in); err != nil {
				return nil, err
			}
			echo := func(_ context.Context, req any) (any, error) { return req, nil }
			if icpt == nil {
				return echo(ctx, in)
			}
			return icpt(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: "/quarry.test.Echo/Echo"}, echo)
		},
	}},
	Streams: []grpc.StreamDesc{{
		StreamName:    "Hold",
		ServerStreams: true,
		Handler: func(_ any, ss grpc.ServerStream) error {
			in := new(wrapperspb.StringValue)
			if err := ss.RecvMsg(in); err != nil {
				return err
			}
			if err := ss.SendMsg(in); err != nil {
				return err
			}
			<-ss.Context().Done()
			return nil
		},
	}},
}

type echoClient struct{ conn *grpc.ClientConn }

func (c echoClient) echo(t *testing.T) (metadata.MD, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var trailer metadata.MD
	err := c.conn.Invoke(ctx, "/quarry.test.Echo/Echo", wrapperspb.String("hi"), new(wrapperspb.StringValue), grpc.Trailer(&trailer))
	return trailer, err
}

// hold opens a Hold stream and waits until the server holds it; cancel ends it.
func (c echoClient) hold(t *testing.T) (cancel context.CancelFunc, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	s, err := c.conn.NewStream(ctx, &echoDesc.Streams[0], "/quarry.test.Echo/Hold")
	if err == nil {
		err = s.SendMsg(wrapperspb.String("hold"))
	}
	if err == nil {
		err = s.CloseSend()
	}
	if err == nil {
		err = s.RecvMsg(new(wrapperspb.StringValue))
	}
	if err != nil {
		cancel()
		return nil, err
	}
	return cancel, nil
}

func keyed(t *testing.T, addr, key string) echoClient {
	t.Helper()
	conn, err := Dial(addr, WithBearer(key))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return echoClient{conn}
}

func TestLimitsPerKey(t *testing.T) {
	policy, err := auth.NewPolicy([]auth.Key{
		{Name: "team-a", SHA256: auth.HashKey("k-a"), KnowledgeBases: []string{"*"}, Limits: limit.Limits{Rate: 1, Burst: 2}},
		{Name: "team-b", SHA256: auth.HashKey("k-b"), KnowledgeBases: []string{"*"}},
		{Name: "team-c", SHA256: auth.HashKey("k-c"), KnowledgeBases: []string{"*"}},
		{Name: "batch", SHA256: auth.HashKey("k-batch"), KnowledgeBases: []string{"*"}, Limits: limit.Limits{Concurrency: -1}},
	})
	if err != nil {
		t.Fatal(err)
	}
	l := limit.New(limit.Config{Limits: limit.Limits{Concurrency: 2}}, time.Now)
	opts := append(WithAuth(policy), WithLimits(l, Methods("/quarry.test.Echo/"))...)
	addr := serveEcho(t, opts...)
	a, b, c, batch := keyed(t, addr, "k-a"), keyed(t, addr, "k-b"), keyed(t, addr, "k-c"), keyed(t, addr, "k-batch")

	t.Run("a key over its rate gets RESOURCE_EXHAUSTED with a retry hint", func(t *testing.T) {
		for i := range 2 {
			if _, err := a.echo(t); err != nil {
				t.Fatalf("call %d within the burst: %v", i+1, err)
			}
		}
		trailer, err := a.echo(t)
		if status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("third call: %v, want RESOURCE_EXHAUSTED", err)
		}
		delay, ok := RetryDelay(err)
		if !ok || delay <= 0 || delay > time.Second {
			t.Errorf("RetryInfo delay %v (present %v), want within the 1 s a token takes", delay, ok)
		}
		if got := trailer.Get(RetryAfterKey); len(got) != 1 || got[0] != "1" {
			t.Errorf("retry-after trailer %q, want 1", got)
		}
		msg := status.Convert(err).Message()
		if !strings.Contains(msg, `API key "team-a"`) || !strings.Contains(msg, "rate limit of 1 requests/s") || strings.Contains(msg, auth.HashKey("k-a")) {
			t.Errorf("message %q should name the key and the limit, not the hash", msg)
		}
	})
	t.Run("another key is unaffected", func(t *testing.T) {
		for range 5 {
			if _, err := b.echo(t); err != nil {
				t.Fatal(err)
			}
		}
	})
	t.Run("refused keys take nothing", func(t *testing.T) {
		before := l.Len()
		unknown := keyed(t, addr, "k-guess")
		for range 20 {
			if _, err := unknown.echo(t); status.Code(err) != codes.Unauthenticated {
				t.Fatalf("unknown key: %v", err)
			}
		}
		if l.Len() != before {
			t.Errorf("%d callers tracked after refused calls, want %d", l.Len(), before)
		}
	})
	t.Run("calls in flight are limited per key", func(t *testing.T) {
		var cancels []context.CancelFunc
		defer func() {
			for _, c := range cancels {
				c()
			}
		}()
		for range 2 {
			cancel, err := b.hold(t)
			if err != nil {
				t.Fatal(err)
			}
			cancels = append(cancels, cancel)
		}
		if _, err := b.hold(t); status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("third stream: %v, want RESOURCE_EXHAUSTED", err)
		}
		_, err := b.echo(t)
		if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "2 calls in flight") {
			t.Fatalf("a unary call beside two held streams: %v, want RESOURCE_EXHAUSTED naming the limit", err)
		}
		if d, ok := RetryDelay(err); !ok || d != limit.ConcurrencyRetry {
			t.Errorf("retry hint %v, want %v", d, limit.ConcurrencyRetry)
		}
		if _, err := c.echo(t); err != nil {
			t.Errorf("another key: %v", err)
		}
		for range 3 {
			cancel, err := batch.hold(t)
			if err != nil {
				t.Fatalf("a key without a concurrency limit: %v", err)
			}
			cancels = append(cancels, cancel)
		}
		// Ending a held call frees its slot once the server sees the cancel.
		cancels[0]()
		deadline := time.Now().Add(5 * time.Second)
		for {
			_, err := b.echo(t)
			if err == nil {
				break
			}
			if status.Code(err) != codes.ResourceExhausted || time.Now().After(deadline) {
				t.Fatalf("after a held call ended: %v", err)
			}
			time.Sleep(5 * time.Millisecond)
		}
	})
	t.Run("methods not selected are not limited", func(t *testing.T) {
		for range 5 {
			if err := check(t, a.conn); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// On an open server callers have no key: each address is one caller.
func TestLimitsByAddressWhenOpen(t *testing.T) {
	l := limit.New(limit.Config{Limits: limit.Limits{Rate: 1, Burst: 1}}, time.Now)
	addr := serveEcho(t, WithLimits(l, Methods("/quarry.test.Echo/Echo"))...)
	c := keyed(t, addr, "")
	if _, err := c.echo(t); err != nil {
		t.Fatal(err)
	}
	// A second connection from the same address is the same caller.
	other := keyed(t, addr, "")
	_, err := other.echo(t)
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "address 127.0.0.1") {
		t.Fatalf("second call from 127.0.0.1: %v, want RESOURCE_EXHAUSTED naming the address", err)
	}
}

func TestMethods(t *testing.T) {
	m := Methods("/quarry.v1.QueryService/", "/quarry.v1.KnowledgeService/UpsertFile")
	for method, want := range map[string]bool{
		"/quarry.v1.QueryService/Query":          true,
		"/quarry.v1.QueryService/QueryStream":    true,
		"/quarry.v1.KnowledgeService/UpsertFile": true,
		"/quarry.v1.KnowledgeService/DeleteFile": false,
		"/grpc.health.v1.Health/Check":           false,
	} {
		if got := m(method); got != want {
			t.Errorf("Methods(...)(%q) = %v, want %v", method, got, want)
		}
	}
}

// BenchmarkLimitedCall measures what the limit interceptor adds to a call over a
// real loopback socket: the same echo without and with limits, in one run.
func BenchmarkLimitedCall(b *testing.B) {
	for _, bc := range []struct {
		name string
		lim  *limit.Limiter
	}{
		{"no limits", nil},
		{"rate and concurrency", limit.New(limit.Config{Limits: limit.Limits{Rate: 1e9, Burst: 1e9, Concurrency: 1 << 20}}, time.Now)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var opts []grpc.ServerOption
			if bc.lim != nil {
				opts = WithLimits(bc.lim, Methods("/quarry.test.Echo/"))
			}
			addr := serveEcho(b, opts...)
			conn, err := Dial(addr)
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Close()
			in, out := wrapperspb.String("hi"), new(wrapperspb.StringValue)
			b.ResetTimer()
			for range b.N {
				if err := conn.Invoke(context.Background(), "/quarry.test.Echo/Echo", in, out); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
