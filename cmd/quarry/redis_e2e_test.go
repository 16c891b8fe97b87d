package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gatewayapp "github.com/quarry-router/quarry/gateway/app"
	"github.com/quarry-router/quarry/gateway/cache"
	"github.com/quarry-router/quarry/gateway/generations"
	quarryv1 "github.com/quarry-router/quarry/gen/quarry/v1"
	"github.com/quarry-router/quarry/platform/grpcx"
	"github.com/quarry-router/quarry/platform/redistest"
	"github.com/quarry-router/quarry/platform/telemetry"
	"github.com/quarry-router/quarry/platform/text"
	"github.com/quarry-router/quarry/services/agent/llm/llmtest"
	searchapp "github.com/quarry-router/quarry/services/search/app"
	"github.com/quarry-router/quarry/services/search/kb"
	"github.com/quarry-router/quarry/services/search/resolve"
	searchserver "github.com/quarry-router/quarry/services/search/server"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
)

// These tests run gateway replicas that share one real redis-server, each on its own
// gRPC listener, in front of one real search service over the example knowledge base.

const (
	exampleKB     = "platform"
	exampleKBDir  = "../../examples/kb/platform"
	e2eKeyPrefix  = "e2e:"
	e2eDeadline   = 10 * time.Second
	bumpBudget    = 100 * time.Millisecond // the bar for invalidating every replica
	jwtRotateQ    = "How do I rotate the JWT signing key?"
	jwtRotateWord = "JWT signing key: how do I rotate it?"
)

func e2eLog() *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// reloadableSearch is the search service as searchapp.Run builds it, over the example
// knowledge base, with two additions for tests: the test can reload the knowledge base
// (which bumps its generation, as any change to the tree does), and it counts the
// Resolve calls it serves.
type reloadableSearch struct {
	addr     string
	dir      string // a copy of the example knowledge base, which reload changes
	reloads  int
	reg      *kb.Registry
	resolves atomic.Int64
	// slow, when set, delays every Resolve: the example knowledge base answers in well
	// under a millisecond, and a test that wants a fuzzy hit needs the cache to answer
	// before the speculative search stores the question's own answer.
	slow atomic.Int64
}

func startReloadableSearch(t testing.TB) *reloadableSearch {
	t.Helper()
	fs := flag.NewFlagSet("search", flag.ContinueOnError)
	var cfg searchapp.Config
	cfg.RegisterFlags(fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	log := e2eLog()
	s := &reloadableSearch{reg: kb.NewRegistry(cfg.Load, log), dir: t.TempDir()}
	t.Cleanup(s.reg.Close)
	if err := os.CopyFS(s.dir, os.DirFS(exampleKBDir)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.reg.Load(context.Background(), exampleKB, s.dir); err != nil {
		t.Fatal(err)
	}
	count := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
		if info.FullMethod == quarryv1.SearchService_Resolve_FullMethodName {
			s.resolves.Add(1)
			if d := time.Duration(s.slow.Load()); d > 0 {
				select {
				case <-time.After(d):
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
		}
		return next(ctx, req)
	}
	srv := grpcx.NewServer(log, grpc.ChainUnaryInterceptor(count))
	quarryv1.RegisterSearchServiceServer(srv.Server, searchserver.New(s.reg, resolve.New(cfg.Resolve, s.reg, time.Now), log))
	srv.SetServing(quarryv1.SearchService_ServiceDesc.ServiceName)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.addr = lis.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, lis) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return s
}

// reload reloads the knowledge base and returns its new generation.
//
// The tree changes first (a file is added), as it does when a knowledge base changes:
// a reload of the same files would keep the content version, under which the cached
// answers stay valid.
func (s *reloadableSearch) reload(t testing.TB) uint64 {
	t.Helper()
	s.reloads++
	marker := filepath.Join(s.dir, "ops", fmt.Sprintf("reload-%d.md", s.reloads))
	if err := os.MkdirAll(filepath.Dir(marker), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(marker, fmt.Appendf(nil, "# Reload %d\n\nMarks a reload of the tree.\n", s.reloads), 0o644); err != nil {
		t.Fatal(err)
	}
	k, err := s.reg.Load(context.Background(), exampleKB, s.dir)
	if err != nil {
		t.Fatal(err)
	}
	return k.Generation
}

// version is the knowledge base's content version: what its answers are cached under.
func (s *reloadableSearch) version(t testing.TB) uint64 {
	t.Helper()
	k, err := s.reg.Get(exampleKB)
	if err != nil {
		t.Fatal(err)
	}
	return k.Version
}

// startReplica runs one gateway replica with the Redis cache until the test ends.
func startReplica(t testing.TB, searchAddr, redisAddr string, log *slog.Logger, extra ...string) quarryv1.QueryServiceClient {
	t.Helper()
	args := append([]string{
		"-listen", "127.0.0.1:0", "-search-addr", searchAddr,
		"-cache-backend", "redis", "-redis-addr", redisAddr, "-redis-key-prefix", e2eKeyPrefix,
		// Generous for shared test machines; a dead Redis refuses at once anyway.
		"-redis-timeout", "250ms", "-redis-breaker-cooldown", "50ms",
	}, extra...)
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan net.Addr, 1)
	done := make(chan error, 1)
	go func() { done <- gatewayapp.Run(ctx, args, log, func(a net.Addr) { ready <- a }) }()
	var addr net.Addr
	select {
	case addr = <-ready:
	case err := <-done:
		cancel()
		t.Fatalf("gateway replica: %v", err)
	case <-time.After(e2eDeadline):
		cancel()
		t.Fatal("gateway replica not ready")
	}
	conn, err := grpcx.Dial(addr.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("gateway replica: %v", err)
		}
	})
	return quarryv1.NewQueryServiceClient(conn)
}

// redisCluster is one search service and one redis-server with two gateway replicas.
type redisCluster struct {
	search *reloadableSearch
	redis  *redistest.Server
	client *redis.Client // the test's own connection to Redis
	a, b   quarryv1.QueryServiceClient
}

func startRedisCluster(t *testing.T, gatewayArgs ...string) *redisCluster {
	t.Helper()
	c := &redisCluster{search: startReloadableSearch(t), redis: redistest.Start(t)}
	c.client = redis.NewClient(&redis.Options{Addr: c.redis.Addr, Protocol: 2, DisableIdentity: true})
	t.Cleanup(func() { c.client.Close() })
	log := e2eLog()
	c.a = startReplica(t, c.search.addr, c.redis.Addr, log, gatewayArgs...)
	c.b = startReplica(t, c.search.addr, c.redis.Addr, log, gatewayArgs...)
	return c
}

func queryKB(c quarryv1.QueryServiceClient, q string, explain bool) (*quarryv1.QueryResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), e2eDeadline)
	defer cancel()
	return c.Query(ctx, &quarryv1.QueryRequest{KnowledgeBase: exampleKB, Query: q, Explain: explain})
}

func askOn(t *testing.T, c quarryv1.QueryServiceClient, q string) *quarryv1.QueryResponse {
	t.Helper()
	resp, err := queryKB(c, q, true)
	if err != nil {
		t.Fatalf("Query(%q): %v", q, err)
	}
	return resp
}

func wantServed(t *testing.T, resp *quarryv1.QueryResponse, tier quarryv1.Tier, fromCache bool) {
	t.Helper()
	if resp.GetTier() != tier || resp.GetFromCache() != fromCache {
		t.Fatalf("tier %v from_cache %v, want %v from_cache %v; cache trace %v",
			resp.GetTier(), resp.GetFromCache(), tier, fromCache, resp.GetExplain().GetCache())
	}
}

func TestReplicasShareOneRedisCache(t *testing.T) {
	c := startRedisCluster(t)
	c.search.slow.Store(int64(10 * time.Millisecond))
	first := askOn(t, c.a, jwtRotateQ)
	wantServed(t, first, quarryv1.Tier_TIER_DIRECT, false)
	if !first.GetExplain().GetCache().GetStored() {
		t.Fatal("the answer computed on replica A was not stored")
	}

	// Replica B never saw the question: both cache tiers answer it from Redis.
	exact := askOn(t, c.b, "  how do I ROTATE the JWT signing key? ")
	wantServed(t, exact, quarryv1.Tier_TIER_EXACT_CACHE, true)
	if exact.GetAnswer() != first.GetAnswer() || exact.GetOriginTier() != quarryv1.Tier_TIER_DIRECT || exact.GetGeneration() != first.GetGeneration() {
		t.Fatalf("replica B's exact hit differs from A's answer: origin %v generation %d", exact.GetOriginTier(), exact.GetGeneration())
	}
	fuzzy := askOn(t, c.b, jwtRotateWord)
	wantServed(t, fuzzy, quarryv1.Tier_TIER_FUZZY_CACHE, true)
	if ct := fuzzy.GetExplain().GetCache(); ct.GetFuzzyCandidate() != text.Normalise(jwtRotateQ) || ct.GetFuzzyVerification() != "same stems" {
		t.Fatalf("fuzzy trace %v, want A's question as the candidate, verified by its stems", ct)
	}

	// And the other way round.
	q := "How do I restore a Postgres backup?"
	wantServed(t, askOn(t, c.b, q), quarryv1.Tier_TIER_DIRECT, false)
	wantServed(t, askOn(t, c.a, q), quarryv1.Tier_TIER_EXACT_CACHE, true)
}

// untilInvalidated polls every replica at once with q until each gives an answer that
// stale does not hold for, and returns how long after since the slowest of them
// started the request that got it: that request's cache lookup ran after its replica
// had seen the bump, and the one before it ran before.
func untilInvalidated(ctx context.Context, since time.Time, kb, q string, stale func(*quarryv1.QueryResponse) bool,
	replicas ...quarryv1.QueryServiceClient) (time.Duration, error) {
	lat := make([]time.Duration, len(replicas))
	errs := make([]error, len(replicas))
	var wg sync.WaitGroup
	for i, c := range replicas {
		wg.Go(func() {
			for {
				start := time.Now()
				qctx, cancel := context.WithTimeout(ctx, e2eDeadline)
				r, err := c.Query(qctx, &quarryv1.QueryRequest{KnowledgeBase: kb, Query: q})
				cancel()
				if err != nil {
					errs[i] = err
					return
				}
				if !stale(r) {
					lat[i] = start.Sub(since)
					return
				}
				if time.Since(since) > e2eDeadline {
					errs[i] = fmt.Errorf("%q still answered from the stale entry %v after the bump", q, e2eDeadline)
					return
				}
			}
		})
	}
	wg.Wait()
	return slices.Max(lat), errors.Join(errs...)
}

func TestGenerationBumpInvalidatesEveryReplica(t *testing.T) {
	c := startRedisCluster(t)
	ctx := context.Background()
	warm := askOn(t, c.a, jwtRotateQ)
	old, oldKey := warm.GetGeneration(), c.search.version(t)
	wantServed(t, askOn(t, c.b, jwtRotateQ), quarryv1.Tier_TIER_EXACT_CACHE, true)

	// A reload of the knowledge base (any change to the tree) bumps its generation: no
	// replica serves the old answer afterwards, and nothing was deleted to get there.
	gen := c.search.reload(t)
	// The reload announced the generation before it returned.
	reloaded := time.Now()
	oldEntry := func(r *quarryv1.QueryResponse) bool { return r.GetFromCache() && r.GetGeneration() == old }
	lat, err := untilInvalidated(ctx, reloaded, exampleKB, jwtRotateQ, oldEntry, c.a, c.b)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("search reload to both replicas invalidated: %v", lat)
	if lat > bumpBudget {
		t.Errorf("replicas served the old generation for %v after the reload, want at most %v", lat, bumpBudget)
	}
	if n := c.client.Exists(ctx, redisEntryKey(oldKey, jwtRotateQ)).Val(); n != 1 {
		t.Errorf("the old generation's entry is gone (%d); a bump must not delete keys", n)
	}
	for _, r := range []quarryv1.QueryServiceClient{c.a, c.b} {
		if resp := askOn(t, r, jwtRotateQ); resp.GetGeneration() != gen {
			t.Fatalf("answer of generation %d after the reload to %d", resp.GetGeneration(), gen)
		}
	}

	// A bump that reaches Redis first — from a replica whose search already reloaded,
	// or from the write side — invalidates every replica through the shared view,
	// although their own watch streams have not seen it.
	writeSide := generations.NewShared(c.client, e2eKeyPrefix, nil)
	began := time.Now()
	if err := writeSide.Publish(ctx, exampleKB, generations.State{Generation: gen + 1}); err != nil {
		t.Fatal(err)
	}
	lat, err = untilInvalidated(ctx, began, exampleKB, jwtRotateQ, (*quarryv1.QueryResponse).GetFromCache, c.a, c.b)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("bump published in Redis to both replicas invalidated: %v", lat)
	if lat > bumpBudget {
		t.Errorf("replicas served the old entry for %v after the shared bump, want at most %v", lat, bumpBudget)
	}

	// Once the search catches up, both replicas cache and share answers again.
	if next := c.search.reload(t); next <= gen+1 {
		t.Fatalf("generation after the second reload is %d, want above %d", next, gen+1)
	}
	for {
		first := askOn(t, c.a, jwtRotateQ)
		second := askOn(t, c.b, jwtRotateQ)
		if second.GetTier() == quarryv1.Tier_TIER_EXACT_CACHE && second.GetGeneration() == first.GetGeneration() {
			break
		}
		if time.Since(began) > e2eDeadline {
			t.Fatalf("caching did not resume after the search caught up: %v", second.GetExplain().GetCache())
		}
	}
}

// redisEntryKey returns the Redis key of q's T0 entry under key (its content version).
func redisEntryKey(key uint64, q string) string {
	rc := cache.DefaultRedisConfig()
	rc.KeyPrefix = e2eKeyPrefix
	return cache.NewRedis(nil, cache.DefaultConfig(), rc, time.Now, nil).EntryKey(exampleKB, key, text.Normalise(q))
}

// logCount counts a logger's records by message prefix.
type logCount struct {
	mu sync.Mutex
	n  map[string]int
}

func (l *logCount) Enabled(context.Context, slog.Level) bool { return true }
func (l *logCount) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.n[r.Message]++
	return nil
}
func (l *logCount) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logCount) WithGroup(string) slog.Handler      { return l }
func (l *logCount) count(prefix string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for m, c := range l.n {
		if strings.HasPrefix(m, prefix) {
			n += c
		}
	}
	return n
}

// knownItemQuestions returns the example set's known-item questions.
func knownItemQuestions(t testing.TB) []string {
	t.Helper()
	var qs []string
	for _, r := range loadJSONLines[struct {
		Query string `json:"query"`
		Kind  string `json:"kind"`
	}](t, "../../examples/questions.jsonl") {
		if r.Kind == "known_item" {
			qs = append(qs, r.Query)
		}
	}
	return qs
}

func loadJSONLines[T any](t testing.TB, path string) []T {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []T
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if strings.TrimSpace(sc.Text()) == "" {
			continue
		}
		var v T
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		out = append(out, v)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestRedisOutageMidStreamFailsOpenAndRecovers(t *testing.T) {
	search := startReloadableSearch(t)
	srv := redistest.Start(t)
	logs := &logCount{n: map[string]int{}}
	replicas := []quarryv1.QueryServiceClient{
		startReplica(t, search.addr, srv.Addr, slog.New(logs)),
		startReplica(t, search.addr, srv.Addr, slog.New(logs)),
	}
	questions := knownItemQuestions(t)

	// The phases of the stream: Redis up, killed, restarted.
	const (
		up = iota
		down
		back
	)
	var (
		phase    atomic.Int32
		answered [3]atomic.Int64
		marked   atomic.Int64 // answers during the outage traced as a cache error
		hitsBack atomic.Int64 // cache hits after the restart
		failed   atomic.Int64
		firstErr atomic.Value
		stop     = make(chan struct{})
		tick     = make(chan struct{}, 1) // a worker finished a query
		wg       sync.WaitGroup
	)
	for w := range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				p := phase.Load()
				resp, err := queryKB(replicas[(w+i)%2], questions[(w*7+i)%len(questions)], true)
				select {
				case tick <- struct{}{}:
				default:
				}
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err)
					continue
				}
				answered[p].Add(1)
				switch {
				case p == down && strings.HasPrefix(resp.GetExplain().GetCache().GetExact(), "error: cache unavailable"):
					marked.Add(1)
				case p == back && resp.GetFromCache():
					hitsBack.Add(1)
				}
			}
		})
	}
	waitCount := func(what string, cond func() bool) {
		timeout := time.After(2 * e2eDeadline)
		for !cond() {
			select {
			case <-tick:
			case <-timeout:
				close(stop)
				wg.Wait()
				t.Fatalf("timed out waiting for %s (answered %d/%d/%d, failed %d: %v)", what,
					answered[up].Load(), answered[down].Load(), answered[back].Load(), failed.Load(), firstErr.Load())
			}
		}
	}
	waitCount("answers with Redis up", func() bool { return answered[up].Load() >= 100 })
	srv.Kill()
	phase.Store(down)
	waitCount("answers with Redis down", func() bool { return answered[down].Load() >= 200 && marked.Load() > 0 })
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	phase.Store(back)
	waitCount("cache hits after Redis came back", func() bool { return hitsBack.Load() >= 20 })
	// Hits may come from the replicas' copies (-redis-near-bytes) before any replica has
	// called Redis again; a question without a copy does, and the replica then logs it back.
	waitCount("each replica that noticed the outage to notice the recovery", func() bool {
		return logs.count("redis cache reachable again") >= logs.count("redis cache unavailable")
	})
	close(stop)
	wg.Wait()

	t.Logf("answered %d with Redis up, %d with it down (%d traced as a cache error), %d after the restart (%d cache hits); %d failed",
		answered[up].Load(), answered[down].Load(), marked.Load(), answered[back].Load(), hitsBack.Load(), failed.Load())
	if failed.Load() != 0 {
		t.Fatalf("%d queries failed while Redis was down or coming back, want 0: %v", failed.Load(), firstErr.Load())
	}
	// Each replica logs the outage once, however many queries it answered uncached.
	if down, back := logs.count("redis cache unavailable"), logs.count("redis cache reachable again"); down < 1 || down > 2 || back != down {
		t.Fatalf("logged %d outages and %d recoveries for one outage on two replicas, want one of each per replica that noticed", down, back)
	}
}

func TestCachedAnswersExpireAfterTheTTL(t *testing.T) {
	const ttl = 400 * time.Millisecond
	c := startRedisCluster(t, "-cache-ttl", ttl.String())
	c.search.slow.Store(int64(10 * time.Millisecond))
	began := time.Now()
	// Stored first, so it has expired by the time the other entry has.
	askOn(t, c.a, "How do I restore a Postgres backup?")
	otherWords := "A Postgres backup: how do I restore it?"
	wantServed(t, askOn(t, c.b, otherWords), quarryv1.Tier_TIER_FUZZY_CACHE, true)
	askOn(t, c.a, jwtRotateQ)
	stored := time.Now()
	for {
		start := time.Now()
		resp := askOn(t, c.b, jwtRotateQ)
		end := time.Now()
		if resp.GetFromCache() {
			if start.After(stored.Add(ttl + 200*time.Millisecond)) {
				t.Fatalf("served from the cache %v after it was stored, with a TTL of %v", start.Sub(stored), ttl)
			}
			continue
		}
		if end.Before(began.Add(ttl)) {
			t.Fatalf("the entry expired after %v, before its TTL of %v", end.Sub(began), ttl)
		}
		break
	}
	// The fuzzy tier forgets too: the other question's entry has expired as well.
	resp := askOn(t, c.b, otherWords)
	if resp.GetFromCache() {
		t.Fatalf("expired entry served by %v; cache trace %v", resp.GetTier(), resp.GetExplain().GetCache())
	}
}

func TestAnswersOverTheSizeCapAreNotCached(t *testing.T) {
	const capBytes = 2000
	c := startRedisCluster(t, "-cache-max-entry-bytes", fmt.Sprint(capBytes))
	big := askOn(t, c.a, jwtRotateQ)
	small := askOn(t, c.a, "How do I rotate Kafka consumer credentials?")
	if len(big.GetAnswer()) <= capBytes || small.GetTier() != quarryv1.Tier_TIER_OUT_OF_DOMAIN || len(small.GetAnswer()) >= capBytes/2 {
		t.Fatalf("test premise: want a DIRECT answer over %d bytes (got %d) and a short OUT_OF_DOMAIN one (got %v, %d)",
			capBytes, len(big.GetAnswer()), small.GetTier(), len(small.GetAnswer()))
	}
	if big.GetExplain().GetCache().GetStored() || !small.GetExplain().GetCache().GetStored() {
		t.Fatalf("stored: big %v, small %v; want only the answer under the cap stored",
			big.GetExplain().GetCache().GetStored(), small.GetExplain().GetCache().GetStored())
	}
	wantServed(t, askOn(t, c.b, jwtRotateQ), quarryv1.Tier_TIER_DIRECT, false)
	wantServed(t, askOn(t, c.b, "How do I rotate Kafka consumer credentials?"), quarryv1.Tier_TIER_EXACT_CACHE, true)
}

func TestForeignBytesInRedisAreMisses(t *testing.T) {
	c := startRedisCluster(t)
	ctx := context.Background()
	first := askOn(t, c.a, jwtRotateQ)
	key := redisEntryKey(c.search.version(t), jwtRotateQ)
	if err := c.client.Set(ctx, key, "\x00\xffnot an entry", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	// Garbage in the shared generations too: a replica ignores what it cannot parse.
	if err := c.client.HSet(ctx, e2eKeyPrefix+"generations", exampleKB, "garbage").Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.client.Publish(ctx, e2eKeyPrefix+"generations", exampleKB+" garbage").Err(); err != nil {
		t.Fatal(err)
	}

	resp := askOn(t, c.b, jwtRotateQ)
	wantServed(t, resp, quarryv1.Tier_TIER_DIRECT, false)
	if got := resp.GetExplain().GetCache().GetExact(); got != "miss" {
		t.Fatalf("exact outcome %q over garbage, want a plain miss", got)
	}
	if resp.GetAnswer() != first.GetAnswer() {
		t.Fatal("the fresh answer differs from the first one")
	}
	// The fresh answer replaced the garbage.
	wantServed(t, askOn(t, c.a, jwtRotateQ), quarryv1.Tier_TIER_EXACT_CACHE, true)
}

func TestBurstOfIdenticalQuestionsSearchesAtMostOncePerReplica(t *testing.T) {
	c := startRedisCluster(t)
	const n = 100
	q := "Which checks must a service run on an incoming bearer token?"
	before := c.search.resolves.Load()
	start := make(chan struct{})
	var wg sync.WaitGroup
	resps := make([]*quarryv1.QueryResponse, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			<-start
			resps[i], errs[i] = queryKB([]quarryv1.QueryServiceClient{c.a, c.b}[i%2], q, false)
		})
	}
	close(start)
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("caller %d: %v", i, errs[i])
		}
		if resps[i].GetAnswer() != resps[0].GetAnswer() {
			t.Fatalf("caller %d got another answer", i)
		}
	}
	searches := c.search.resolves.Load() - before
	t.Logf("%d identical questions over 2 replicas ran the search %d times", n, searches)
	if searches < 1 || searches > 2 {
		t.Fatalf("the search ran %d times for a burst of %d identical questions over 2 replicas, want at most once per replica", searches, n)
	}
}

// nearDuplicatePair is a labelled pair of questions: same says whether b asks what a
// asks (so a's answer may serve it).
type nearDuplicatePair struct {
	Kind string `json:"kind"`
	A    string `json:"a"`
	B    string `json:"b"`
	Same bool   `json:"same"`
	// labelled is true for the example set's pairs, false for this test's extra ones.
	labelled bool
}

// TestNearDuplicatesAreVerifiedAcrossReplicas asks a on replica A, then b on replica B,
// for each pair, with the cache emptied in between, and measures how often a pair
// asking different things is answered from the cache (a wrong hit). The example set's
// labelled pairs must have none. The extra pairs (testdata/near_duplicates.jsonl) are
// built to be fuzzy candidates; a wrong hit among them is reported, and must have been
// let through by the fresh search agreeing (same route, same top document) — never by
// the stems rule, which different questions cannot pass. Each candidate the fresh search
// turns down is counted in quarry.gateway.fuzzy.rejects by reason.
func TestNearDuplicatesAreVerifiedAcrossReplicas(t *testing.T) {
	_, tel := inMemoryTracing(t)
	// Each pair starts from an empty cache (FLUSHDB below), which the replicas' copies
	// would outlive: a question one pair asked on replica B would be an exact hit there
	// in the next.
	c := startRedisCluster(t, "-redis-near-bytes", "0")
	rejectsBefore := fuzzyRejects(t, tel) // the process's telemetry counts other tests' too
	c.search.slow.Store(int64(10 * time.Millisecond))
	var pairs []nearDuplicatePair
	for _, p := range loadJSONLines[nearDuplicatePair](t, "../../examples/questions.jsonl") {
		if p.Kind == "pair" {
			p.labelled = true
			pairs = append(pairs, p)
		}
	}
	pairs = append(pairs, loadJSONLines[nearDuplicatePair](t, "testdata/near_duplicates.jsonl")...)
	ctx := context.Background()
	var different, candidates, wrong, same, served, rejected int
	for _, p := range pairs {
		// Every pair starts from an empty cache (the generations survive in each
		// replica's view, which never goes back).
		if err := c.client.FlushDB(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		askOn(t, c.a, p.A)
		resp := askOn(t, c.b, p.B)
		if strings.HasPrefix(resp.GetExplain().GetCache().GetFuzzy(), "rejected: ") {
			rejected++
		}
		if p.Same {
			same++
			if resp.GetFromCache() {
				served++
			}
			continue
		}
		different++
		if text.Jaccard(text.Tokens(text.Normalise(p.A)), text.Tokens(text.Normalise(p.B))) >= 0.6-1e-9 {
			candidates++
		}
		if !resp.GetFromCache() {
			continue
		}
		wrong++
		why := resp.GetExplain().GetCache().GetFuzzyVerification()
		t.Logf("wrong hit: %q was answered with the cached answer to %q (%s)", p.B, p.A, why)
		if p.labelled || !strings.HasPrefix(why, "search agrees") {
			t.Errorf("wrong hit %q for %q must not happen: labelled pair %v, verification %q", p.B, p.A, p.labelled, why)
		}
	}
	t.Logf("pairs asking different things: %d (%d of them fuzzy candidates, Jaccard >= 0.6); answered from the cache: %d (wrong-hit rate %.1f%%, %.1f%% of candidates)",
		different, candidates, wrong, 100*float64(wrong)/float64(different), 100*float64(wrong)/float64(max(candidates, 1)))
	t.Logf("pairs asking the same thing: %d, answered from the other replica's cache: %d (%.0f%%)",
		same, served, 100*float64(served)/float64(same))
	if candidates < different/2 {
		t.Errorf("only %d of %d different pairs reach the fuzzy threshold: the set does not exercise verification", candidates, different)
	}
	if counted := fuzzyRejects(t, tel) - rejectsBefore; rejected == 0 || counted != rejected {
		t.Errorf("%d candidates were rejected by the fresh search; quarry_gateway_fuzzy_rejects_total counted %d", rejected, counted)
	}
}

// fuzzyRejects sums quarry_gateway_fuzzy_rejects_total over its reasons, as /metrics
// serves it.
func fuzzyRejects(t *testing.T, tel *telemetry.Telemetry) int {
	return metricSum(t, tel, "quarry_gateway_fuzzy_rejects_total", "")
}

// metricSum sums a counter over the series whose labels contain label, as /metrics
// serves it.
func metricSum(t *testing.T, tel *telemetry.Telemetry, name, label string) int {
	t.Helper()
	rec := httptest.NewRecorder()
	tel.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	n := 0
	for _, l := range strings.Split(rec.Body.String(), "\n") {
		if rest, ok := strings.CutPrefix(l, name+"{"); ok && strings.Contains(rest, label) {
			v, err := strconv.Atoi(rest[strings.LastIndexByte(rest, ' ')+1:])
			if err != nil {
				t.Fatalf("metrics line %q: %v", l, err)
			}
			n += v
		}
	}
	return n
}

// TestTwoSearchReplicasShareOneCache runs the deployment's shape: two search replicas
// holding the same tree, loaded at different moments and so numbering its generation
// differently, given to the gateways together (as DNS gives a headless Service's pods),
// and two gateway replicas on one Redis. Each question is asked on one gateway and then
// on the other: the second is a cache hit whichever search replica computed the answer,
// and both computed some.
func TestTwoSearchReplicasShareOneCache(t *testing.T) {
	s1 := startReloadableSearch(t)
	time.Sleep(2 * time.Millisecond)
	s2 := startReloadableSearch(t)
	k1, _ := s1.reg.Get(exampleKB)
	k2, _ := s2.reg.Get(exampleKB)
	if k1.Version != k2.Version || k1.Generation == k2.Generation {
		t.Fatalf("test premise: versions %x and %x (want equal), generations %d and %d (want apart)",
			k1.Version, k2.Version, k1.Generation, k2.Generation)
	}
	r := manual.NewBuilderWithScheme("quarry-two-search")
	r.InitialState(resolver.State{Addresses: []resolver.Address{{Addr: s1.addr}, {Addr: s2.addr}}})
	resolver.Register(r)
	srv := redistest.Start(t)
	log := e2eLog()
	a := startReplica(t, "quarry-two-search:///search", srv.Addr, log)
	b := startReplica(t, "quarry-two-search:///search", srv.Addr, log)

	qs, err := readQuestions("../../examples/questions.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range qs[:12] {
		first := askOn(t, a, q)
		if first.GetFromCache() {
			t.Fatalf("%q: the first ask came from the cache", q)
		}
		if again := askOn(t, b, q); !again.GetFromCache() {
			t.Errorf("%q asked again on the other gateway: %v, not from the cache (computed under generation %d; cache trace %v)",
				q, again.GetTier(), first.GetGeneration(), again.GetExplain().GetCache())
		}
	}
	if s1.resolves.Load() == 0 || s2.resolves.Load() == 0 {
		t.Errorf("Resolve calls: %d and %d; want both search replicas to have answered", s1.resolves.Load(), s2.resolves.Load())
	}
}

// Two whole systems (gateway, search, agent) share one redis-server and one scripted
// LLM, as two gateway replicas do: a question routed to the LLM, asked on both at once
// through the gRPC API, reaches the LLM once. The second replica serves the first's
// answer from the cache (-share-answers, the default).
func TestReplicasAskTheLLMOnceForAQuestion(t *testing.T) {
	srv := redistest.Start(t)
	llmSrv := llmtest.New(t)
	llmSrv.Repeat(llmtest.Turn{Content: "Check the runbook and the rollback plan first.", Delay: time.Second})
	replica := func() quarryv1.QueryServiceClient {
		ctx, cancel := context.WithCancel(context.Background())
		sys, err := start(ctx, upConfig{Gateway: "127.0.0.1:0", Search: "127.0.0.1:0", Agent: "127.0.0.1:0", KBRoot: "../../examples/kb",
			GatewayArgs: []string{"-cache-backend", "redis", "-redis-addr", srv.Addr, "-redis-key-prefix", e2eKeyPrefix, "-redis-timeout", "250ms"},
			AgentArgs:   scriptedArgs(llmSrv)}, e2eLog())
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		t.Cleanup(func() { cancel(); <-sys.done })
		conn, err := grpcx.Dial(sys.Gateway.String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return quarryv1.NewQueryServiceClient(conn)
	}
	a, b := replica(), replica()
	const q = "What should I check before a production deploy?"
	type result struct {
		resp *quarryv1.QueryResponse
		err  error
	}
	first := make(chan result, 1)
	go func() {
		resp, err := queryKB(a, q, true)
		first <- result{resp, err}
	}()
	select {
	case <-llmSrv.Received():
	case <-time.After(e2eDeadline):
		t.Fatal("the first replica's question never reached the LLM")
	}
	second, err := queryKB(b, q, true)
	if err != nil {
		t.Fatal(err)
	}
	r := <-first
	if r.err != nil {
		t.Fatal(r.err)
	}
	if n := len(llmSrv.Requests()); n != 1 {
		t.Fatalf("the LLM was asked %d times, want once", n)
	}
	wantServed(t, r.resp, quarryv1.Tier_TIER_SINGLE_LLM, false)
	wantServed(t, second, quarryv1.Tier_TIER_EXACT_CACHE, true)
	if second.GetOriginTier() != quarryv1.Tier_TIER_SINGLE_LLM || second.GetAnswer() != r.resp.GetAnswer() || second.GetDegraded() {
		t.Fatalf("the second replica served %q (origin %v, degraded %v), want the first's answer %q",
			second.GetAnswer(), second.GetOriginTier(), second.GetDegraded(), r.resp.GetAnswer())
	}
}
