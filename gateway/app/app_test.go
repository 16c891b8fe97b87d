package app

import (
	"context"
	"flag"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	quarryv1 "github.com/quarry-router/quarry/gen/quarry/v1"
	"github.com/quarry-router/quarry/platform/grpcx"
	"github.com/quarry-router/quarry/platform/redistest"
	"github.com/quarry-router/quarry/platform/telemetry/telemetrytest"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// searchStub is the least of a search service the gateway needs to start and answer.
type searchStub struct {
	quarryv1.UnimplementedSearchServiceServer
}

func (searchStub) WatchGenerations(_ *quarryv1.WatchGenerationsRequest, stream quarryv1.SearchService_WatchGenerationsServer) error {
	if err := stream.Send(&quarryv1.WatchGenerationsResponse{KnowledgeBases: []*quarryv1.KnowledgeBaseState{{Id: "kb", Generation: 5}}}); err != nil {
		return err
	}
	<-stream.Context().Done()
	return nil
}

func (searchStub) Resolve(_ context.Context, req *quarryv1.ResolveRequest) (*quarryv1.ResolveResponse, error) {
	if strings.Contains(req.GetQuery(), "design") {
		return &quarryv1.ResolveResponse{Route: quarryv1.Tier_TIER_AGENTIC, Answer: "extract", Generation: 5}, nil
	}
	return &quarryv1.ResolveResponse{Route: quarryv1.Tier_TIER_DIRECT, Answer: "direct answer", Generation: 5,
		Sources: []*quarryv1.Source{{Path: "a.md"}}}, nil
}

func startSearch(t *testing.T) string { return serveSearch(t, searchStub{}) }

// serveSearch serves impl as the search service until the test ends and returns its
// address.
func serveSearch(t *testing.T, impl quarryv1.SearchServiceServer) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	quarryv1.RegisterSearchServiceServer(srv, impl)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}

// runGateway runs a gateway with args until ctx ends, waits until it is ready, and
// returns its address and what Run returns.
func runGateway(t *testing.T, ctx context.Context, args ...string) (net.Addr, <-chan error) {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	addrs := make(chan net.Addr, 1)
	done := make(chan error, 1)
	go func() { done <- Run(ctx, args, log, func(a net.Addr) { addrs <- a }) }()
	select {
	case addr := <-addrs:
		return addr, done
	case err := <-done:
		t.Fatalf("Run returned before it was ready: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("gateway not ready")
	}
	return nil, nil
}

func TestRunServesUntilCancelled(t *testing.T) {
	t.Setenv("QUARRY_GATEWAY_MAX_QUERY_BYTES", "64")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr, done := runGateway(t, ctx, "-listen", "127.0.0.1:0", "-search-addr", startSearch(t))

	conn, err := grpcx.Dial(addr.String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := quarryv1.NewQueryServiceClient(conn)
	cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer ccancel()

	health, err := healthpb.NewHealthClient(conn).Check(cctx, &healthpb.HealthCheckRequest{Service: "quarry.v1.QueryService"})
	if err != nil || health.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health %v, %v; want SERVING once ready", health, err)
	}
	resp, err := client.Query(cctx, &quarryv1.QueryRequest{KnowledgeBase: "kb", Query: "rotate keys"})
	if err != nil || resp.GetTier() != quarryv1.Tier_TIER_DIRECT || resp.GetGeneration() != 5 {
		t.Fatalf("Query: %v, %v; want the direct answer under generation 5", resp, err)
	}
	resp, err = client.Query(cctx, &quarryv1.QueryRequest{KnowledgeBase: "kb", Query: "our design process"})
	if err != nil || !resp.GetDegraded() || resp.GetTier() != quarryv1.Tier_TIER_AGENTIC {
		t.Fatalf("Query without an agent: %v, %v; want a degraded AGENTIC answer", resp, err)
	}
	_, err = client.Query(cctx, &quarryv1.QueryRequest{KnowledgeBase: "kb", Query: strings.Repeat("x", 65)})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("query over the limit set in the environment: %v, want INVALID_ARGUMENT", err)
	}
	_, err = client.Query(cctx, &quarryv1.QueryRequest{KnowledgeBase: "missing", Query: "rotate keys"})
	if status.Code(err) != codes.NotFound {
		t.Fatalf("unknown knowledge base: %v, want NOT_FOUND", err)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run after cancel: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Run did not return after its context was cancelled")
	}
}

// startGateway runs a gateway with args until the test ends and returns a client.
func startGateway(t *testing.T, args ...string) quarryv1.QueryServiceClient {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel) // also when the start fails
	addr, done := runGateway(t, ctx, args...)
	conn, err := grpcx.Dial(addr.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return quarryv1.NewQueryServiceClient(conn)
}

func TestRedisBackendIsSharedAndFailsOpen(t *testing.T) {
	search := startSearch(t)
	srv := redistest.Start(t)
	redisArgs := []string{"-listen", "127.0.0.1:0", "-search-addr", search, "-cache-backend", "redis", "-redis-addr", srv.Addr, "-redis-timeout", "1s"}
	a, b := startGateway(t, redisArgs...), startGateway(t, redisArgs...)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ask := func(c quarryv1.QueryServiceClient, want quarryv1.Tier) {
		t.Helper()
		resp, err := c.Query(ctx, &quarryv1.QueryRequest{KnowledgeBase: "kb", Query: "rotate keys"})
		if err != nil || resp.GetTier() != want {
			t.Fatalf("Query: %v, %v; want tier %v", resp, err, want)
		}
	}
	ask(a, quarryv1.Tier_TIER_DIRECT)
	ask(b, quarryv1.Tier_TIER_EXACT_CACHE)

	// A gateway whose Redis is not there starts and answers, uncached.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	nowhere := lis.Addr().String()
	lis.Close()
	c := startGateway(t, "-listen", "127.0.0.1:0", "-search-addr", search, "-cache-backend", "redis", "-redis-addr", nowhere, "-redis-dial-timeout", "100ms")
	ask(c, quarryv1.Tier_TIER_DIRECT)
	ask(c, quarryv1.Tier_TIER_DIRECT)
}

// TestRedisClusterBackendIsShared: two gateways on a three-node Redis Cluster, given
// the nodes as -redis-addr, share answers; every key Quarry wrote is in the one slot of
// the prefix's hash tag.
func TestRedisClusterBackendIsShared(t *testing.T) {
	search := startSearch(t)
	cl := redistest.StartCluster(t, 3)
	args := []string{"-listen", "127.0.0.1:0", "-search-addr", search, "-cache-backend", "redis",
		"-redis-cluster", "-redis-addr", cl.Addrs(), "-redis-timeout", "1s", "-redis-near-bytes", "0"}
	a, b := startGateway(t, args...), startGateway(t, args...)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, tc := range []struct {
		c    quarryv1.QueryServiceClient
		want quarryv1.Tier
	}{{a, quarryv1.Tier_TIER_DIRECT}, {b, quarryv1.Tier_TIER_EXACT_CACHE}, {a, quarryv1.Tier_TIER_EXACT_CACHE}} {
		resp, err := tc.c.Query(ctx, &quarryv1.QueryRequest{KnowledgeBase: "kb", Query: "rotate keys"})
		if err != nil || resp.GetTier() != tc.want {
			t.Fatalf("Query: %v, %v; want tier %v", resp, err, tc.want)
		}
	}
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: strings.Split(cl.Addrs(), ","), Protocol: 2, DisableIdentity: true})
	defer client.Close()
	var mu sync.Mutex // ForEachMaster calls each master at once
	var keys []string
	err := client.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		k, err := node.Keys(ctx, "*").Result()
		mu.Lock()
		defer mu.Unlock()
		keys = append(keys, k...)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) < 3 { // an entry, its postings, the LRU index, the generations
		t.Fatalf("keys in the cluster: %q", keys)
	}
	for _, k := range keys {
		if !strings.HasPrefix(k, "{quarry:}") {
			t.Errorf("key %q is outside the prefix's hash tag {quarry:}", k)
		}
	}
}

func TestRedisCopiesAnswerARepeatedQuestionOnTheReplica(t *testing.T) {
	search := startSearch(t)
	for _, tc := range []struct {
		nearBytes string
		// afterKill is the tier of the question asked again once Redis is gone.
		afterKill quarryv1.Tier
	}{
		{"33554432", quarryv1.Tier_TIER_EXACT_CACHE}, // the replica's copy
		{"0", quarryv1.Tier_TIER_DIRECT},             // no copies: answered uncached
	} {
		t.Run("-redis-near-bytes "+tc.nearBytes, func(t *testing.T) {
			srv := redistest.Start(t)
			c := startGateway(t, "-listen", "127.0.0.1:0", "-search-addr", search, "-cache-backend", "redis",
				"-redis-addr", srv.Addr, "-redis-timeout", "1s", "-redis-near-bytes", tc.nearBytes)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			for _, want := range []quarryv1.Tier{quarryv1.Tier_TIER_DIRECT, quarryv1.Tier_TIER_EXACT_CACHE, 0} {
				if want == 0 {
					srv.Kill()
					want = tc.afterKill
				}
				resp, err := c.Query(ctx, &quarryv1.QueryRequest{KnowledgeBase: "kb", Query: "rotate keys"})
				if err != nil || resp.GetTier() != want {
					t.Fatalf("Query: %v, %v; want tier %v", resp, err, want)
				}
			}
		})
	}
}

func TestRunRejectsBadConfiguration(t *testing.T) {
	cases := []struct {
		name string
		args []string
		env  [2]string
		want string
	}{
		{"a listen address without a port", []string{"-listen", "localhost"}, [2]string{}, "-listen"},
		{"a negative TTL", []string{"-cache-ttl", "-1s"}, [2]string{}, "-cache-ttl"},
		{"a fuzzy threshold above 1", []string{"-fuzzy-min", "1.5"}, [2]string{}, "-fuzzy-min"},
		{"an unknown flag", []string{"-nope"}, [2]string{}, "nope"},
		{"a malformed environment value", nil, [2]string{"QUARRY_GATEWAY_RESOLVE_TIMEOUT", "soon"}, "-resolve-timeout"},
		{"an unknown cache backend", []string{"-cache-backend", "memcached"}, [2]string{}, "-cache-backend"},
		{"a Redis address without a port", []string{"-cache-backend", "redis", "-redis-addr", "redis"}, [2]string{}, "-redis-addr"},
		{"a zero Redis call timeout", []string{"-cache-backend", "redis"}, [2]string{"QUARRY_GATEWAY_REDIS_TIMEOUT", "0s"}, "-redis-timeout"},
		{"a CA file without TLS", []string{"-cache-backend", "redis", "-redis-tls-ca", "ca.pem"}, [2]string{}, "-redis-tls-ca"},
		{"a negative size for the Redis copies", []string{"-cache-backend", "redis"}, [2]string{"QUARRY_GATEWAY_REDIS_NEAR_BYTES", "-1"}, "-redis-near-bytes"},
		{"several Redis servers without -redis-cluster", []string{"-cache-backend", "redis", "-redis-addr", "a:6379,b:6379"}, [2]string{}, "-redis-addr"},
		{"a database other than 0 in a cluster", []string{"-cache-backend", "redis", "-redis-cluster", "-redis-addr", "a:6379,b:6379", "-redis-db", "1"}, [2]string{}, "-redis-db"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.env[0] != "" {
				t.Setenv(c.env[0], c.env[1])
			}
			log := slog.New(slog.NewTextHandler(io.Discard, nil))
			err := Run(context.Background(), c.args, log, nil)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Run(%q) = %v, want an error naming %q", c.args, err, c.want)
			}
		})
	}
}

func TestFailedStartReleasesMetricsPort(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	telemetrytest.FailedStartReleasesMetrics(t, func(listen, metrics string) error {
		return Run(context.Background(), []string{"-listen", listen, "-metrics-addr", metrics}, log, nil)
	})
}

func TestMetricsAreServedWhileDraining(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	search := startSearch(t)
	telemetrytest.MetricsServedWhileDraining(t, func(ctx context.Context, metrics string) error {
		return Run(ctx, []string{"-listen", "127.0.0.1:0", "-search-addr", search, "-metrics-addr", metrics, "-drain-grace", "1s"}, log, nil)
	})
}

// By default a shutdown waits for the slowest query in flight, an LLM answer bounded
// by -agent-timeout (see TestShutdownLetsAnLLMAnswerInFlightFinish in cmd/quarry).
func TestDefaultDrainOutlastsAnAgentAnswer(t *testing.T) {
	fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
	var cfg Config
	cfg.RegisterFlags(fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if cfg.Serve.Drain.Timeout < cfg.Route.AgentTimeout {
		t.Errorf("-drain-timeout %s < -agent-timeout %s", cfg.Serve.Drain.Timeout, cfg.Route.AgentTimeout)
	}
	if cfg.Serve.MaxConnectionAge != grpcx.DefaultMaxConnectionAge {
		t.Errorf("-max-connection-age %s, want %s", cfg.Serve.MaxConnectionAge, grpcx.DefaultMaxConnectionAge)
	}
}

// bumpingSearch is a search service whose knowledge base "kb" moves from generation 5 to
// 6 when bump is closed.
type bumpingSearch struct {
	quarryv1.UnimplementedSearchServiceServer
	bump chan struct{}
	gen  atomic.Uint64
}

func (s *bumpingSearch) WatchGenerations(_ *quarryv1.WatchGenerationsRequest, stream quarryv1.SearchService_WatchGenerationsServer) error {
	send := func() error {
		return stream.Send(&quarryv1.WatchGenerationsResponse{KnowledgeBases: []*quarryv1.KnowledgeBaseState{{Id: "kb", Generation: s.gen.Load()}}})
	}
	if err := send(); err != nil {
		return err
	}
	select {
	case <-s.bump:
		if err := send(); err != nil {
			return err
		}
	case <-stream.Context().Done():
		return nil
	}
	<-stream.Context().Done()
	return nil
}

func (s *bumpingSearch) Resolve(context.Context, *quarryv1.ResolveRequest) (*quarryv1.ResolveResponse, error) {
	return &quarryv1.ResolveResponse{Route: quarryv1.Tier_TIER_DIRECT, Answer: "direct answer", Generation: s.gen.Load(),
		Sources: []*quarryv1.Source{{Path: "a.md"}}}, nil
}

// While a stopping gateway still answers (-drain-grace), it follows the knowledge bases'
// generations: a change then is not answered from the cache of the generation before it.
func TestADrainingGatewayFollowsGenerations(t *testing.T) {
	search := &bumpingSearch{bump: make(chan struct{})}
	search.gen.Store(5)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr, done := runGateway(t, ctx, "-listen", "127.0.0.1:0", "-search-addr", serveSearch(t, search), "-drain-grace", "3s")
	conn, err := grpcx.Dial(addr.String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := quarryv1.NewQueryServiceClient(conn)
	ask := func() *quarryv1.QueryResponse {
		t.Helper()
		qctx, qcancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer qcancel()
		resp, err := client.Query(qctx, &quarryv1.QueryRequest{KnowledgeBase: "kb", Query: "rotate keys"})
		if err != nil {
			t.Fatalf("Query: %v", err)
		}
		return resp
	}
	if r := ask(); r.GetGeneration() != 5 {
		t.Fatalf("generation %d, want 5", r.GetGeneration())
	}
	if r := ask(); !r.GetFromCache() {
		t.Fatal("the repeated question was not answered from the cache")
	}

	cancel() // SIGTERM: NOT_SERVING, but answering for -drain-grace
	search.gen.Store(6)
	close(search.bump)
	deadline := time.Now().Add(2 * time.Second)
	for {
		r := ask()
		if r.GetGeneration() == 6 && !r.GetFromCache() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("during the drain: generation %d from cache %v; want generation 6's answer", r.GetGeneration(), r.GetFromCache())
		}
		time.Sleep(20 * time.Millisecond)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Run did not return after the drain")
	}
}
