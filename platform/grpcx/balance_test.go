package grpcx

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
)

// countingServer serves health on loopback and counts the Check calls it answers.
func countingServer(t *testing.T, c ServeConfig) (addr string, calls *atomic.Int64) {
	t.Helper()
	calls = new(atomic.Int64)
	count := grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		calls.Add(1)
		return h(ctx, req)
	})
	addr, _ = serveWith(t, loopback(t), func(s *Server) { s.SetDrain(c.Drain) }, append(c.serverOptions(), count)...)
	return addr, calls
}

// dnsLike is a resolver that answers as DNS does for a headless Service: the answer
// it gives changes only when the client resolves the name again (ResolveNow), which
// gRPC asks for when a connection ends.
type dnsLike struct {
	*manual.Resolver
	mu    sync.Mutex
	addrs []string
}

var schemes atomic.Int64

func newDNSLike(addrs ...string) *dnsLike {
	r := &dnsLike{Resolver: manual.NewBuilderWithScheme(fmt.Sprintf("dnslike%d", schemes.Add(1))), addrs: addrs}
	r.InitialState(r.state())
	r.ResolveNowCallback = func(resolver.ResolveNowOptions) {
		// Not from inside ResolveNow: the channel is calling it.
		go r.UpdateState(r.state())
	}
	return r
}

func (r *dnsLike) state() resolver.State {
	r.mu.Lock()
	defer r.mu.Unlock()
	var s resolver.State
	for _, a := range r.addrs {
		s.Addresses = append(s.Addresses, resolver.Address{Addr: a})
	}
	return s
}

// add puts an address in the next answer, as a new pod's becomes part of the
// Service's once it is ready.
func (r *dnsLike) add(addr string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.addrs = append(r.addrs, addr)
}

// A replica that starts after the clients connected (one an autoscaler adds) gets
// calls only if the clients resolve the Service's name again, which they do when a
// connection ends: with connections kept for ever it gets none.
func TestClientsReachReplicasThatStartLater(t *testing.T) {
	for _, tc := range []struct {
		name    string
		age     time.Duration
		wait    time.Duration // how long the new replica is given
		wantNew bool
	}{
		{"connections kept for ever", 0, 1500 * time.Millisecond, false},
		{"connections closed after an age", 300 * time.Millisecond, 5 * time.Second, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := ServeConfig{Drain: DrainConfig{Timeout: time.Second}, MaxConnectionAge: tc.age}
			first, firstCalls := countingServer(t, c)
			r := newDNSLike(first)
			conn, err := Dial(r.Scheme()+":///search", grpc.WithResolvers(r))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			hc := healthpb.NewHealthClient(conn)
			ask := func() {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				defer cancel()
				if _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
					t.Fatalf("call failed: %v", err) // a connection's end must fail no call
				}
			}
			ask()

			second, secondCalls := countingServer(t, c)
			r.add(second)
			for deadline := time.Now().Add(tc.wait); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
				ask()
				if tc.wantNew && secondCalls.Load() > 10 {
					break
				}
			}
			t.Logf("first replica %d calls, second %d", firstCalls.Load(), secondCalls.Load())
			if got := secondCalls.Load() > 0; got != tc.wantNew {
				t.Errorf("new replica got calls: %v, want %v (%d calls)", got, tc.wantNew, secondCalls.Load())
			}
			if tc.wantNew {
				// Round-robin: once both are known, the old replica keeps its share.
				before := firstCalls.Load()
				for range 20 {
					ask()
				}
				if firstCalls.Load()-before < 5 {
					t.Errorf("the first replica answered %d of the last 20 calls, want about half", firstCalls.Load()-before)
				}
			}
		})
	}
}

func TestServeConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		c       ServeConfig
		wantErr string
	}{
		{ServeConfig{Drain: DrainConfig{Timeout: time.Second}, MaxConnectionAge: time.Minute}, ""},
		{ServeConfig{Drain: DrainConfig{Timeout: time.Second}}, ""},
		{ServeConfig{Drain: DrainConfig{Grace: -time.Second, Timeout: time.Second}}, "-drain-grace"},
		{ServeConfig{Drain: DrainConfig{Timeout: 0}}, "-drain-timeout"},
		{ServeConfig{Drain: DrainConfig{Timeout: time.Second}, MaxConnectionAge: time.Millisecond}, "-max-connection-age"},
	} {
		err := tc.c.Validate()
		if tc.wantErr == "" && err != nil {
			t.Errorf("%+v: %v", tc.c, err)
		}
		if tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("%+v: error %v, want one naming %s", tc.c, err, tc.wantErr)
		}
	}
}

// An aged connection ends only once its calls and streams have: a stream that lives as
// long as its caller wants (a gateway's generation watch) is not cut at the age.
func TestConnectionAgeLeavesStreamsRunning(t *testing.T) {
	addr, _ := countingServer(t, ServeConfig{Drain: DrainConfig{Timeout: time.Second}, MaxConnectionAge: 200 * time.Millisecond})
	conn, err := Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	watch, err := healthpb.NewHealthClient(conn).Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := watch.Recv(); err != nil {
		t.Fatal(err)
	}
	ended := make(chan error, 1)
	go func() { _, err := watch.Recv(); ended <- err }()
	select {
	case err := <-ended:
		t.Fatalf("the stream ended at the connection's age: %v", err)
	case <-time.After(1500 * time.Millisecond): // seven ages
	}
	// New calls meanwhile go over new connections.
	ask, askCancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer askCancel()
	if _, err := healthpb.NewHealthClient(conn).Check(ask, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
}
