package grpcx

import (
	"context"
	"io"
	"log/slog"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/quarry-router/quarry/platform/grpcx/tlstest"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
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
