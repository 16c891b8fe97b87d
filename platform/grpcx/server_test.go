package grpcx

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/quarry-router/quarry/platform/grpcx/tlstest"
	"github.com/quarry-router/quarry/platform/syncbuf"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

func TestServeReportsHealthAndDrains(t *testing.T) {
	s := NewServer(slog.New(slog.NewTextHandler(io.Discard, nil)))
	s.SetServing("quarry.v1.Test")
	conn, stop := serveAndDial(t, s)
	hc := healthpb.NewHealthClient(conn)
	cctx, ccancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer ccancel()
	resp, err := hc.Check(cctx, &healthpb.HealthCheckRequest{Service: "quarry.v1.Test"})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("status = %v, want SERVING", resp.Status)
	}

	if err := stop(); err != nil {
		t.Fatalf("Serve returned %v after drain", err)
	}
}

// A TLS-only server still answers probes on its plaintext health port, and only there
// only health: the services stay behind TLS.
func TestHealthPortServesProbesBesideATLSPort(t *testing.T) {
	ca := tlstest.NewCA(t, "quarry")
	cert, key := ca.Issue(t, "search", "127.0.0.1")
	tlsOpt, err := ServerTLSConfig{CertFile: cert, KeyFile: key}.ServerOption()
	if err != nil {
		t.Fatal(err)
	}
	s := NewServer(slog.New(slog.NewTextHandler(io.Discard, nil)), tlsOpt)
	s.SetDrain(DrainConfig{Grace: 0, Timeout: time.Second})
	s.SetServing("quarry.v1.Test")
	healthAddr, err := s.HealthOn("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lis := loopback(t)
	stop := run(t, s, lis)

	check := func(addr string) (healthpb.HealthCheckResponse_ServingStatus, error) {
		conn, err := Dial(addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		cctx, ccancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer ccancel()
		resp, err := healthpb.NewHealthClient(conn).Check(cctx, &healthpb.HealthCheckRequest{Service: "quarry.v1.Test"})
		return resp.GetStatus(), err
	}
	if st, err := check(healthAddr.String()); err != nil || st != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("plaintext probe on the health port: %v %v, want SERVING", st, err)
	}
	if _, err := check(lis.Addr().String()); status.Code(err) != codes.Unavailable {
		t.Errorf("plaintext probe on the TLS port: %v, want Unavailable", err)
	}
	conn, err := Dial(healthAddr.String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	err = conn.Invoke(context.Background(), "/quarry.v1.Test/Do", &healthpb.HealthCheckRequest{}, &healthpb.HealthCheckResponse{})
	if status.Code(err) != codes.Unimplemented {
		t.Errorf("a service call on the health port: %v, want Unimplemented", err)
	}

	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := check(healthAddr.String()); err == nil {
		t.Error("the health port still answers after Serve returned")
	}
}

// A start that fails between NewServer and Serve stops the server it made: the health
// port is free again and no stream worker is left running.
func TestStopBeforeServeReleasesTheHealthPort(t *testing.T) {
	before := runtime.NumGoroutine()
	s := NewServer(slog.New(slog.NewTextHandler(io.Discard, nil)))
	addr, err := s.HealthOn("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.Stop()
	l, err := net.Listen("tcp", addr.String())
	if err != nil {
		t.Fatalf("health port still bound after Stop: %v", err)
	}
	l.Close()
	for deadline := time.Now().Add(2 * time.Second); runtime.NumGoroutine() > before; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines after Stop, %d before NewServer", runtime.NumGoroutine(), before)
		}
	}
}

// A health watcher is told NOT_SERVING when the drain begins, and its stream ends when
// the server stops: before, it held GracefulStop until the drain timeout.
func TestAHealthWatchDoesNotHoldTheDrain(t *testing.T) {
	s := NewServer(slog.New(slog.NewTextHandler(io.Discard, nil)))
	const timeout = 5 * time.Second
	s.SetDrain(DrainConfig{Grace: 100 * time.Millisecond, Timeout: timeout})
	s.SetServing()
	conn, stop := serveAndDial(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 2*timeout)
	defer cancel()
	w, err := healthpb.NewHealthClient(conn).Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := w.Recv(); err != nil || r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("first watch update %v, %v; want SERVING", r.GetStatus(), err)
	}
	began := time.Now()
	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	if r, err := w.Recv(); err != nil || r.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("watch update on drain %v, %v; want NOT_SERVING", r.GetStatus(), err)
	}
	if _, err := w.Recv(); status.Code(err) != codes.Unavailable {
		t.Errorf("the watch ended with %v, want Unavailable", err)
	}
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	if took := time.Since(began); took >= timeout {
		t.Errorf("Serve took %v to drain with a health watcher, the whole -drain-timeout", took)
	}
}

// panicDesc's Boom method panics in panicsHere, a frame the log must show.
var panicDesc = grpc.ServiceDesc{
	ServiceName: "quarry.test.Panic",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Boom",
		Handler: func(srv any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
			in := new(wrapperspb.StringValue)
			if err := dec(in); err != nil {
				return nil, err
			}
			return icpt(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: "/quarry.test.Panic/Boom"}, panicsHere)
		},
	}},
	Streams: []grpc.StreamDesc{{
		StreamName:    "BoomStream",
		ServerStreams: true,
		Handler: func(_ any, ss grpc.ServerStream) error {
			_, err := panicsHere(ss.Context(), nil)
			return err
		},
	}},
}

func panicsHere(context.Context, any) (any, error) {
	panic("a handler's bug")
}

// A handler's panic is answered INTERNAL and logged with the stack that panicked and
// the method: the panic value alone ("assignment to entry in nil map") said nothing of
// where, and the call log has no line for a call that panicked.
func TestAPanicIsLoggedWithItsStack(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(map[bool]string{false: "unary", true: "stream"}[stream], func(t *testing.T) {
			var out syncbuf.Buffer
			s := NewServer(slog.New(slog.NewJSONHandler(&out, nil)))
			s.RegisterService(&panicDesc, struct{}{})
			s.SetServing()
			conn, stop := serveAndDial(t, s)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			method := "/quarry.test.Panic/Boom"
			var err error
			if stream {
				method += "Stream"
				var cs grpc.ClientStream
				if cs, err = conn.NewStream(ctx, &panicDesc.Streams[0], method); err == nil {
					if err = cs.SendMsg(wrapperspb.String("x")); err == nil {
						err = cs.RecvMsg(new(wrapperspb.StringValue))
					}
				}
			} else {
				err = conn.Invoke(ctx, method, wrapperspb.String("x"), new(wrapperspb.StringValue))
			}
			if status.Code(err) != codes.Internal {
				t.Fatalf("call ended %v, want INTERNAL", err)
			}
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			var line map[string]any
			for l := range strings.Lines(out.String()) {
				var m map[string]any
				if json.Unmarshal([]byte(l), &m) == nil && m["msg"] == "panic in handler" {
					line = m
				}
			}
			if line == nil {
				t.Fatalf("no panic line in:\n%s", out.String())
			}
			if st, _ := line["stack"].(string); !strings.Contains(st, "grpcx.panicsHere") {
				t.Errorf("stack = %q, want the frame that panicked (grpcx.panicsHere)", st)
			}
			if line["grpc.method"] != method {
				t.Errorf("grpc.method = %v, want %s", line["grpc.method"], method)
			}
		})
	}
}
