package cache_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quarry-router/quarry/gateway/cache"
	"github.com/quarry-router/quarry/gateway/cache/cachetest"
	"github.com/quarry-router/quarry/platform/redistest"
	"github.com/redis/go-redis/v9"
)

// testRedisConfig is the Redis configuration of these tests: a generous per-call
// deadline, because they check behaviour, not speed, on shared machines.
func testRedisConfig(addr, prefix string) cache.RedisConfig {
	rc := cache.DefaultRedisConfig()
	rc.Addr = addr
	rc.KeyPrefix = prefix
	rc.Timeout = 2 * time.Second
	return rc
}

func newClient(t testing.TB, rc cache.RedisConfig) redis.UniversalClient {
	t.Helper()
	c, err := rc.NewClient()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestRedisConformance(t *testing.T) {
	srv := redistest.Start(t)
	client := newClient(t, testRedisConfig(srv.Addr, ""))
	var n atomic.Int64
	cachetest.Run(t, func(t *testing.T, cfg cache.Config, now func() time.Time) cache.Store {
		// Each case gets its own key space on the one server.
		rc := testRedisConfig(srv.Addr, fmt.Sprintf("case%d:", n.Add(1)))
		return cache.NewRedis(client, cfg, rc, now, nil)
	})
}

// TestRedisClusterConformance runs the conformance suite on a three-node Redis Cluster,
// each case under its own prefix, so the cases' slots fall on different nodes and the
// client follows them there.
func TestRedisClusterConformance(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	rc := testRedisConfig(cl.Addrs(), "q:")
	rc.Cluster = true
	if err := rc.Validate(); err != nil {
		t.Fatal(err)
	}
	client := newClient(t, rc)
	var n atomic.Int64
	cachetest.Run(t, func(t *testing.T, cfg cache.Config, now func() time.Time) cache.Store {
		rc := testRedisConfig(cl.Addrs(), fmt.Sprintf("case%d:", n.Add(1)))
		rc.Cluster = true
		return cache.NewRedis(client, cfg, rc, now, nil)
	})
}

// TestRedisClusterNeedsOneSlot shows why the prefix becomes a hash tag: keys spread
// over slots fail every script with CROSSSLOT, and the store answers uncached.
func TestRedisClusterNeedsOneSlot(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	rc := testRedisConfig(cl.Addrs(), "q:")
	rc.Cluster = true
	client := newClient(t, rc)
	ctx := context.Background()
	for _, tc := range []struct {
		cluster bool // whether the store is told it is a cluster (and tags its keys)
		stored  bool
	}{{true, true}, {false, false}} {
		rc.Cluster = tc.cluster
		s := cache.NewRedis(client, cache.DefaultConfig(), rc, time.Now, nil)
		err := s.Put(ctx, rotateEntry("kb", 1))
		if (err == nil) != tc.stored {
			t.Fatalf("cluster=%v: Put = %v, want stored %v", tc.cluster, err, tc.stored)
		}
		if err != nil && !strings.Contains(err.Error(), "CROSSSLOT") {
			t.Errorf("cluster=%v: Put = %v, want CROSSSLOT", tc.cluster, err)
		}
	}
}

func TestRedisConfigValidate(t *testing.T) {
	tests := []struct {
		name    string
		edit    func(*cache.RedisConfig)
		wantErr string // "" for valid
		prefix  string // Prefix() of a valid one
	}{
		{"one server", func(c *cache.RedisConfig) {}, "", "quarry:"},
		{"a cluster tags the prefix", func(c *cache.RedisConfig) { c.Cluster, c.Addr = true, "a:1, b:2,c:3" }, "", "{quarry:}"},
		{"a cluster keeps a prefix's own tag", func(c *cache.RedisConfig) { c.Cluster, c.KeyPrefix = true, "q{team-a}:" }, "", "q{team-a}:"},
		{"an empty tag is no tag", func(c *cache.RedisConfig) { c.Cluster, c.KeyPrefix = true, "q{}:" }, "", "{q{}:}"},
		{"a list needs -redis-cluster", func(c *cache.RedisConfig) { c.Addr = "a:1,b:2" }, "-redis-addr", ""},
		{"a cluster node without a port", func(c *cache.RedisConfig) { c.Cluster, c.Addr = true, "a:1,b" }, "-redis-addr", ""},
		{"a cluster has database 0 only", func(c *cache.RedisConfig) { c.Cluster, c.DB = true, 2 }, "-redis-db", ""},
		{"a cluster needs a prefix to tag", func(c *cache.RedisConfig) { c.Cluster, c.KeyPrefix = true, "" }, "-redis-key-prefix", ""},
		{"a prefix that closes the tag at once", func(c *cache.RedisConfig) { c.Cluster, c.KeyPrefix = true, "}q:" }, "-redis-key-prefix", ""},
		{"a closing brace later is fine", func(c *cache.RedisConfig) { c.Cluster, c.KeyPrefix = true, "q}:" }, "", "{q}:}"},
		{"one server may do without a prefix", func(c *cache.RedisConfig) { c.KeyPrefix = "" }, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := cache.DefaultRedisConfig()
			tt.edit(&c)
			err := c.Validate()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Validate() = %v", err)
				}
				if got := c.Prefix(); got != tt.prefix {
					t.Errorf("Prefix() = %q, want %q", got, tt.prefix)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Validate() = %v, want an error naming %s", err, tt.wantErr)
			}
		})
	}
}

// TestRedisAddrIsDialledAsValidated: Validate reads -redis-addr with spaces and a
// trailing comma trimmed (as an environment variable may carry them), so the client
// must dial that address too, or the cache is off while its settings look valid.
func TestRedisAddrIsDialledAsValidated(t *testing.T) {
	srv := redistest.Start(t)
	for _, addr := range []string{srv.Addr + ",", srv.Addr + " ", " " + srv.Addr} {
		rc := testRedisConfig(addr, "addr:")
		if err := rc.Validate(); err != nil {
			t.Fatalf("Validate(%q) = %v", addr, err)
		}
		s := cache.NewRedis(newClient(t, rc), cache.DefaultConfig(), rc, time.Now, nil)
		if err := s.Put(context.Background(), rotateEntry("kb", 1)); err != nil {
			t.Errorf("-redis-addr %q: Put = %v, want stored", addr, err)
		}
	}
}

func rotateEntry(kb string, gen uint64) *cache.Entry {
	return &cache.Entry{KB: kb, Generation: gen, Query: "how do i rotate the signing keys?",
		Tokens: []string{"rotate", "signing", "keys"}, Value: []byte("answer")}
}

func TestRedisForeignValuesAreMisses(t *testing.T) {
	srv := redistest.Start(t)
	rc := testRedisConfig(srv.Addr, "q:")
	client := newClient(t, rc)
	ctx := context.Background()
	other := cache.NewRedis(client, cache.DefaultConfig(), rc, time.Now, nil)
	if err := other.Put(ctx, rotateEntry("other", 1)); err != nil {
		t.Fatal(err)
	}
	otherBytes, err := client.Get(ctx, other.EntryKey("other", 1, rotateEntry("other", 1).Query)).Bytes()
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name    string
		corrupt func(key string) error
		bad     int64 // values the store must count as foreign: read by Get and Similar
	}{
		{"random bytes", func(k string) error { return client.Set(ctx, k, "\x00\xffgarbage", 0).Err() }, 2},
		{"an empty string", func(k string) error { return client.Set(ctx, k, "", 0).Err() }, 2},
		{"a truncated entry", func(k string) error { return client.Set(ctx, k, otherBytes[:len(otherBytes)/3], 0).Err() }, 2},
		{"another knowledge base's entry", func(k string) error { return client.Set(ctx, k, otherBytes, 0).Err() }, 2},
		{"a hash instead of a string", func(k string) error {
			if err := client.Del(ctx, k).Err(); err != nil {
				return err
			}
			return client.HSet(ctx, k, "f", "v").Err()
		}, 0}, // never leaves Redis: the script reads it as no value
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if err := client.FlushDB(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			s := cache.NewRedis(client, cache.DefaultConfig(), rc, time.Now, nil)
			e := rotateEntry("kb", 1)
			if err := s.Put(ctx, e); err != nil {
				t.Fatal(err)
			}
			if err := c.corrupt(s.EntryKey("kb", 1, e.Query)); err != nil {
				t.Fatal(err)
			}
			if got, err := s.Get(ctx, "kb", 1, e.Query); !errors.Is(err, cache.ErrMiss) {
				t.Fatalf("Get over %s = %v, %v; want ErrMiss", c.name, got, err)
			}
			// The postings still point at the key: the fuzzy lookup reaches it too.
			if got, _, err := s.Similar(ctx, "kb", 1, e.Tokens); !errors.Is(err, cache.ErrMiss) {
				t.Fatalf("Similar over %s = %v, %v; want ErrMiss", c.name, got, err)
			}
			if st := s.Stats(); st.BadEntries != c.bad || st.Failures != 0 {
				t.Fatalf("stats %+v: want %d foreign values and no failures", st, c.bad)
			}
			// The store keeps working: a fresh answer replaces the foreign value.
			if err := s.Put(ctx, e); err != nil {
				t.Fatalf("Put over %s: %v", c.name, err)
			}
			if _, err := s.Get(ctx, "kb", 1, e.Query); err != nil {
				t.Fatalf("Get after the entry was stored again: %v", err)
			}
		})
	}
}

func TestRedisKeysExpireWithTheirEntries(t *testing.T) {
	srv := redistest.Start(t)
	rc := testRedisConfig(srv.Addr, "q:")
	client := newClient(t, rc)
	ctx := context.Background()
	cfg := cache.DefaultConfig()
	cfg.TTL = 30 * time.Second
	s := cache.NewRedis(client, cfg, rc, time.Now, nil)
	e := rotateEntry("kb", 7)
	if err := s.Put(ctx, e); err != nil {
		t.Fatal(err)
	}
	keys, err := client.Keys(ctx, "q:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	var entries, postings int
	for _, k := range keys {
		ttl, err := client.PTTL(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case strings.HasPrefix(k, "q:e:kb:7:"):
			entries++
		case strings.HasPrefix(k, "q:t:kb:7:"):
			postings++
		default:
			continue // the LRU index and its counter live as long as the cache
		}
		if ttl <= 0 || ttl > cfg.TTL {
			t.Errorf("%s has TTL %v, want (0, %v]", k, ttl, cfg.TTL)
		}
	}
	if entries != 1 || postings != len(e.Tokens) {
		t.Fatalf("keys %q: want 1 entry and %d postings", keys, len(e.Tokens))
	}
}

// TestRedisDanglingPostingsAreDroppedByTheLookup: an entry Redis lost before its time
// (maxmemory eviction, a DEL by hand, a replica of an older release that kept no index
// record) leaves its members in the postings; the first lookup that finds them
// dangling drops them.
func TestRedisDanglingPostingsAreDroppedByTheLookup(t *testing.T) {
	srv := redistest.Start(t)
	rc := testRedisConfig(srv.Addr, "q:")
	client := newClient(t, rc)
	ctx := context.Background()
	s := cache.NewRedis(client, cache.DefaultConfig(), rc, time.Now, nil)
	if err := s.Put(ctx, rotateEntry("kb", 1)); err != nil {
		t.Fatal(err)
	}
	e := rotateEntry("kb", 1)
	if err := client.Del(ctx, s.EntryKey("kb", 1, e.Query)).Err(); err != nil {
		t.Fatal(err)
	}
	members := func() int64 {
		var n int64
		for _, tok := range e.Tokens {
			n += client.ZCard(ctx, "q:t:kb:1:"+tok).Val()
		}
		return n
	}
	if n := members(); n != 3 {
		t.Fatalf("postings hold %d members before the lookup, want the lost entry's 3", n)
	}
	if _, _, err := s.Similar(ctx, "kb", 1, e.Tokens); !errors.Is(err, cache.ErrMiss) {
		t.Fatalf("Similar found a lost entry: %v", err)
	}
	if n := members(); n != 0 {
		t.Fatalf("postings hold %d members after the lookup found them dangling, want 0", n)
	}
}

// TestRedisEvictionEmptiesThePostings: -cache-max-entries bounds the fuzzy index too.
// An entry evicted for room takes its members out of its postings at once; left there
// until their expiry, the postings grew with the answers stored per TTL rather than
// with the entries kept (with -cache-ttl 1h and 10 new answers a second, 36,000
// entries' worth of members behind a bound of 10,000), and nothing bounded Redis's
// memory but maxmemory.
func TestRedisEvictionEmptiesThePostings(t *testing.T) {
	srv := redistest.Start(t)
	client := newClient(t, testRedisConfig(srv.Addr, ""))
	ctx := context.Background()
	long := strings.Repeat("very long question about deployment ", 4) // hashed in the key
	tests := []struct {
		name   string
		prefix string
		query  func(i int) string
	}{
		{"short questions", "a:", func(i int) string { return fmt.Sprintf("deploy service %d", i) }},
		{"hashed long questions", "b:", func(i int) string { return fmt.Sprintf("%s%d", long, i) }},
		{"a prefix holding e: and i:", "x:e:i:", func(i int) string { return fmt.Sprintf("deploy: e:%d", i) }},
	}
	const kept, put = 5, 60
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rc := testRedisConfig(srv.Addr, tt.prefix)
			cfg := cache.DefaultConfig()
			cfg.TTL, cfg.MaxEntries = time.Hour, kept
			s := cache.NewRedis(client, cfg, rc, time.Now, nil)
			for i := range put {
				q := tt.query(i)
				e := &cache.Entry{KB: "kb", Generation: 7, Query: q, Tokens: []string{"deploy", "service", strconv.Itoa(i)}, Value: []byte("x")}
				if err := s.Put(ctx, e); err != nil {
					t.Fatal(err)
				}
			}
			for _, tok := range []string{"deploy", "service"} {
				if n := client.ZCard(ctx, tt.prefix+"t:kb:7:"+tok).Val(); n != kept {
					t.Errorf("posting %q holds %d members after %d puts, want the %d entries kept", tok, n, put, kept)
				}
			}
			keys, err := client.Keys(ctx, tt.prefix+"*").Result()
			if err != nil {
				t.Fatal(err)
			}
			// Kept entries with their index records and own-token postings, two shared
			// postings, lru and seq.
			if want := kept*3 + 2 + 2; len(keys) != want {
				t.Errorf("%d keys under %q, want %d: %v", len(keys), tt.prefix, want, keys)
			}
			// The entries kept are the newest, and still found by their words.
			q := tt.query(put - 1)
			if _, _, err := s.Similar(ctx, "kb", 7, []string{"deploy", "service", strconv.Itoa(put - 1)}); err != nil {
				t.Errorf("Similar(%q) = %v, want the newest entry", q, err)
			}
		})
	}
}

// logCounter counts log records by message.
type logCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (l *logCounter) Enabled(context.Context, slog.Level) bool { return true }
func (l *logCounter) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.n[r.Message]++
	return nil
}
func (l *logCounter) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logCounter) WithGroup(string) slog.Handler      { return l }
func (l *logCounter) count(prefix string) int {
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

// lookups runs one Get, Similar and Put and reports their errors.
func lookups(ctx context.Context, s cache.Store) []error {
	e := rotateEntry("kb", 1)
	_, err1 := s.Get(ctx, "kb", 1, e.Query)
	_, _, err2 := s.Similar(ctx, "kb", 1, e.Tokens)
	return []error{err1, err2, s.Put(ctx, e)}
}

func TestRedisFailsOpen(t *testing.T) {
	srv := redistest.Start(t)
	rc := testRedisConfig(srv.Addr, "q:")
	rc.Timeout = 20 * time.Millisecond
	rc.BreakerFailures = 3
	rc.BreakerCooldown = 50 * time.Millisecond
	client := newClient(t, rc)
	logs := &logCounter{n: map[string]int{}}
	s := cache.NewRedis(client, cache.DefaultConfig(), rc, time.Now, slog.New(logs))
	ctx := context.Background()
	for _, err := range lookups(ctx, s) {
		if err != nil && !errors.Is(err, cache.ErrMiss) {
			t.Fatalf("with Redis up: %v", err)
		}
	}

	outage := func(t *testing.T, name string, stop, start func()) {
		before := s.Stats()
		stop()
		// Every call fails open, quickly: no call waits much past the per-call deadline.
		for i := range 100 {
			began := time.Now()
			for _, err := range lookups(ctx, s) {
				if !errors.Is(err, cache.ErrUnavailable) {
					t.Fatalf("%s, call %d: %v, want ErrUnavailable", name, i, err)
				}
			}
			if d := time.Since(began); d > 3*(rc.Timeout+100*time.Millisecond) {
				t.Fatalf("%s: three calls took %v, want each bounded by the %v deadline", name, d, rc.Timeout)
			}
		}
		st := s.Stats()
		if st.Failures-before.Failures < int64(rc.BreakerFailures) || st.Skipped-before.Skipped < 150 {
			t.Fatalf("%s: %+v after 300 calls, want the breaker to have kept most of them off Redis", name, st)
		}
		start()
		// The client reconnects by itself once a probe gets through.
		deadline := time.Now().Add(10 * time.Second)
		for {
			if _, err := s.Get(ctx, "kb", 1, "nothing here"); errors.Is(err, cache.ErrMiss) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: Redis back but the store still fails: %+v", name, s.Stats())
			}
			runtime.Gosched()
		}
		for _, err := range lookups(ctx, s) {
			if err != nil && !errors.Is(err, cache.ErrMiss) {
				t.Fatalf("%s: after recovery: %v", name, err)
			}
		}
		if got, err := s.Get(ctx, "kb", 1, rotateEntry("kb", 1).Query); err != nil || !bytes.Equal(got.Value, []byte("answer")) {
			t.Fatalf("%s: after recovery Get = %v, %v", name, got, err)
		}
	}
	t.Run("killed and restarted empty", func(t *testing.T) {
		outage(t, "killed", srv.Kill, func() {
			if err := srv.Restart(); err != nil {
				t.Fatal(err)
			}
		})
	})
	t.Run("hung, then resumed", func(t *testing.T) {
		outage(t, "hung", srv.Freeze, srv.Thaw)
	})
	if down, up := logs.count("redis cache unavailable"), logs.count("redis cache reachable again"); down != 2 || up != 2 {
		t.Fatalf("logged %d outages and %d recoveries for two outages of 300 calls each, want 2 and 2", down, up)
	}
}

func TestRedisLateCallsDoNotOpenTheBreakerWhileRedisIsHealthy(t *testing.T) {
	srv := redistest.Start(t)
	rc := testRedisConfig(srv.Addr, "q:")
	// Every call misses this deadline, as calls do on a gateway whose CPU is saturated,
	// while Redis itself answers.
	rc.Timeout = time.Nanosecond
	rc.BreakerFailures = 3
	client := newClient(t, rc)
	logs := &logCounter{n: map[string]int{}}
	s := cache.NewRedis(client, cache.DefaultConfig(), rc, time.Now, slog.New(logs))
	ctx := context.Background()
	for range 100 {
		for _, err := range lookups(ctx, s) {
			if !errors.Is(err, cache.ErrUnavailable) {
				t.Fatalf("call past its deadline: %v, want ErrUnavailable", err)
			}
		}
	}
	if st := s.Stats(); st.Skipped != 0 || st.Failures != 300 {
		t.Fatalf("stats %+v: want every call tried (the health check passes), none skipped", st)
	}
	if n := logs.count("redis cache unavailable"); n != 0 {
		t.Fatalf("logged %d outages of a healthy Redis", n)
	}
}

// TestRedisAtMaxmemoryStillServesItsEntries: a Redis that is full and evicts nothing
// more (noeviction, or a volatile policy on a server whose memory holds other
// deployments' keys) refuses writes. The cached answers it holds must still be served:
// marking an entry recently used is a write, and a lookup whose bookkeeping write was
// refused failed whole, so a full Redis answered no query from the cache at all.
func TestRedisAtMaxmemoryStillServesItsEntries(t *testing.T) {
	srv := redistest.Start(t)
	rc := testRedisConfig(srv.Addr, "q:")
	client := newClient(t, rc)
	ctx := context.Background()
	s := cache.NewRedis(client, cache.DefaultConfig(), rc, time.Now, nil)
	e := rotateEntry("kb", 1)
	if err := s.Put(ctx, e); err != nil {
		t.Fatal(err)
	}
	for _, kv := range [][2]string{{"maxmemory-policy", "noeviction"}, {"maxmemory", "1"}} {
		if err := client.ConfigSet(ctx, kv[0], kv[1]).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := s.Get(ctx, "kb", 1, e.Query); err != nil || string(got.Value) != "answer" {
		t.Errorf("Get at maxmemory = %v, %v; want the stored answer", got, err)
	}
	if got, _, err := s.Similar(ctx, "kb", 1, []string{"rotate", "signing", "keys", "now"}); err != nil || got.Query != e.Query {
		t.Errorf("Similar at maxmemory = %v, %v; want the stored entry", got, err)
	}
	// A new answer cannot be stored: answered uncached, as with Redis away.
	other := &cache.Entry{KB: "kb", Generation: 1, Query: "deploy the service", Tokens: []string{"deploy", "service"}, Value: []byte("x")}
	if err := s.Put(ctx, other); !errors.Is(err, cache.ErrUnavailable) {
		t.Errorf("Put at maxmemory = %v, want ErrUnavailable", err)
	}
	if err := client.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}
	// The lookups at maxmemory left nothing half written: the entry is served, and still
	// ranked in the least-recently-used index.
	if _, err := s.Get(ctx, "kb", 1, e.Query); err != nil {
		t.Errorf("Get after memory was freed: %v", err)
	}
	if n := client.ZCard(ctx, "q:lru").Val(); n != 1 {
		t.Errorf("the LRU index holds %d entries, want 1", n)
	}
}

// An entry of a long question (a log pasted into it) is stored in the size of its
// bytes, not the square of its tokens: it writes no postings, whose members would each
// carry its whole token signature.
func TestRedisALongQuestionCostsItsSize(t *testing.T) {
	srv := redistest.Start(t)
	rc := testRedisConfig(srv.Addr, "q:")
	client := newClient(t, rc)
	ctx := context.Background()
	s := cache.NewRedis(client, cache.DefaultConfig(), rc, time.Now, nil)
	tokens := make([]string, 676)
	for i := range tokens {
		tokens[i] = fmt.Sprintf("t%d", i)
	}
	e := &cache.Entry{KB: "kb", Generation: 7, Query: strings.Join(tokens, " "), Tokens: tokens, Value: []byte("answer")}
	if err := s.Put(ctx, e); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, "kb", 7, e.Query); err != nil {
		t.Fatalf("Get of the long question: %v", err)
	}
	postings, err := client.Keys(ctx, "q:t:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(postings) != 0 {
		t.Errorf("%d postings for an entry of %d tokens, want none", len(postings), len(tokens))
	}
	used, err := client.Info(ctx, "memory").Result()
	if err != nil {
		t.Fatal(err)
	}
	var bytes int64
	for _, line := range strings.Split(used, "\r\n") {
		if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
			bytes, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	// An empty redis-server uses about 1 MB; the entry itself a few KB. Posted under
	// every token, it took 1.8 MB more.
	if bytes > 1<<20+512<<10 {
		t.Errorf("Redis uses %d bytes after one long question's entry", bytes)
	}
}
