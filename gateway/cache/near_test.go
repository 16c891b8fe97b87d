package cache_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quarry-router/quarry/gateway/cache"
	"github.com/quarry-router/quarry/gateway/cache/cachetest"
	"github.com/quarry-router/quarry/platform/redistest"
)

func TestNearConformance(t *testing.T) {
	t.Run("over memory", func(t *testing.T) {
		cachetest.Run(t, func(t *testing.T, cfg cache.Config, now func() time.Time) cache.Store {
			return cache.NewNear(cache.NewMemory(cfg, now), cfg, 1<<20, now)
		}, cachetest.KeepsEvicted)
	})
	t.Run("over redis", func(t *testing.T) {
		srv := redistest.Start(t)
		client := newClient(t, testRedisConfig(srv.Addr, ""))
		var n atomic.Int64
		cachetest.Run(t, func(t *testing.T, cfg cache.Config, now func() time.Time) cache.Store {
			rc := testRedisConfig(srv.Addr, fmt.Sprintf("near%d:", n.Add(1)))
			return cache.NewNear(cache.NewRedis(client, cfg, rc, now, nil), cfg, 1<<20, now)
		}, cachetest.KeepsEvicted)
	})
}

// counting is a Store that counts the calls reaching it and fails them with err when
// err is set.
type counting struct {
	cache.Store
	gets, puts atomic.Int64
	err        error
}

func (c *counting) Get(ctx context.Context, kb string, gen uint64, q string) (*cache.Entry, error) {
	c.gets.Add(1)
	if c.err != nil {
		return nil, c.err
	}
	return c.Store.Get(ctx, kb, gen, q)
}

func (c *counting) Put(ctx context.Context, e *cache.Entry) error {
	c.puts.Add(1)
	if c.err != nil {
		return c.err
	}
	return c.Store.Put(ctx, e)
}

func TestNear(t *testing.T) {
	ctx := context.Background()
	cfg := cache.DefaultConfig()
	q := func(i int) *cache.Entry { // Size 121 for i < 10
		return &cache.Entry{KB: "kb", Generation: 1, Query: fmt.Sprintf("question %d", i),
			Tokens: []string{"question", fmt.Sprint(i)}, Value: []byte(strings.Repeat("a", 100))}
	}
	type env struct {
		clock *cachetest.Clock
		far   *counting
		near  *cache.Near
	}
	get := func(t *testing.T, e env, i int) error {
		t.Helper()
		got, err := e.near.Get(ctx, "kb", 1, q(i).Query)
		if err == nil && got.Query != q(i).Query {
			t.Fatalf("Get(question %d) = %q", i, got.Query)
		}
		return err
	}
	for _, tc := range []struct {
		name     string
		maxBytes int
		run      func(t *testing.T, e env)
	}{
		{"a repeated question is answered without the shared store", 1 << 20, func(t *testing.T, e env) {
			if err := e.far.Store.Put(ctx, q(1)); err != nil { // stored by another replica
				t.Fatal(err)
			}
			for range 3 {
				if err := get(t, e, 1); err != nil {
					t.Fatal(err)
				}
			}
			if n := e.far.gets.Load(); n != 1 {
				t.Fatalf("the shared store was asked %d times, want once", n)
			}
			if s := e.near.Stats(); s.Hits != 2 || s.Misses != 1 || s.Entries != 1 {
				t.Fatalf("stats %+v, want 2 hits, 1 miss, 1 entry", s)
			}
		}},
		{"a copy expires when the shared entry does, not a TTL after it was copied", 1 << 20, func(t *testing.T, e env) {
			if err := e.far.Store.Put(ctx, q(1)); err != nil {
				t.Fatal(err)
			}
			e.clock.Advance(cfg.TTL - time.Second)
			if err := get(t, e, 1); err != nil { // copied now, stored TTL-1s ago
				t.Fatal(err)
			}
			e.clock.Advance(time.Second)
			if err := get(t, e, 1); !errors.Is(err, cache.ErrMiss) {
				t.Fatalf("Get at the shared entry's expiry: %v, want ErrMiss", err)
			}
		}},
		{"another generation is another key", 1 << 20, func(t *testing.T, e env) {
			if err := e.near.Put(ctx, q(1)); err != nil {
				t.Fatal(err)
			}
			if _, err := e.near.Get(ctx, "kb", 2, q(1).Query); !errors.Is(err, cache.ErrMiss) {
				t.Fatalf("Get at generation 2: %v, want ErrMiss", err)
			}
		}},
		// Room for three: each entry's Size is 121, and Near counts 384 more for its
		// bookkeeping and 16 for each of its two tokens.
		{"the least recently used copies go when the bytes run out", 3 * (121 + 384 + 32), func(t *testing.T, e env) {
			for i := range 3 {
				if err := e.near.Put(ctx, q(i)); err != nil {
					t.Fatal(err)
				}
			}
			if err := get(t, e, 0); err != nil { // 1 is now the least recently used
				t.Fatal(err)
			}
			if err := e.near.Put(ctx, q(3)); err != nil {
				t.Fatal(err)
			}
			if s := e.near.Stats(); s.Entries != 3 || s.Bytes != 3*(121+384+32) {
				t.Fatalf("stats %+v, want 3 entries in %d bytes", s, 3*(121+384+32))
			}
			gets := e.far.gets.Load()
			for _, i := range []int{0, 3} {
				if err := get(t, e, i); err != nil {
					t.Fatal(err)
				}
			}
			if n := e.far.gets.Load() - gets; n != 0 {
				t.Fatalf("the recently used copies went to the shared store %d times", n)
			}
			if err := get(t, e, 1); err != nil { // from the shared store again
				t.Fatal(err)
			}
			if n := e.far.gets.Load() - gets; n != 1 {
				t.Fatalf("the evicted copy: %d calls to the shared store, want 1", n)
			}
		}},
		{"an answer the shared store could not take is not kept", 1 << 20, func(t *testing.T, e env) {
			e.far.err = fmt.Errorf("%w: redis: connection refused", cache.ErrUnavailable)
			if err := e.near.Put(ctx, q(1)); !errors.Is(err, cache.ErrUnavailable) {
				t.Fatalf("Put: %v, want the shared store's ErrUnavailable", err)
			}
			e.far.err = nil
			if err := get(t, e, 1); !errors.Is(err, cache.ErrMiss) {
				t.Fatalf("Get: %v, want ErrMiss", err)
			}
		}},
		{"a copy answers while the shared store is away", 1 << 20, func(t *testing.T, e env) {
			if err := e.near.Put(ctx, q(1)); err != nil {
				t.Fatal(err)
			}
			e.far.err = fmt.Errorf("%w: redis: connection refused", cache.ErrUnavailable)
			if err := get(t, e, 1); err != nil {
				t.Fatalf("Get while the shared store is away: %v", err)
			}
		}},
		{"an entry too large for the shared store is not kept", 1 << 20, func(t *testing.T, e env) {
			big := q(1)
			big.Value = make([]byte, cfg.MaxEntryBytes+1)
			if err := e.near.Put(ctx, big); !errors.Is(err, cache.ErrTooLarge) {
				t.Fatalf("Put: %v, want ErrTooLarge", err)
			}
			if err := get(t, e, 1); !errors.Is(err, cache.ErrMiss) {
				t.Fatalf("Get: %v, want ErrMiss", err)
			}
		}},
		{"a fuzzy hit is kept for its own question", 1 << 20, func(t *testing.T, e env) {
			if err := e.far.Store.Put(ctx, q(1)); err != nil {
				t.Fatal(err)
			}
			if _, _, err := e.near.Similar(ctx, "kb", 1, []string{"question", "1", "please"}); err != nil {
				t.Fatal(err)
			}
			if err := get(t, e, 1); err != nil || e.far.gets.Load() != 0 {
				t.Fatalf("Get after the fuzzy hit: %v, %d calls to the shared store; want a hit here", err, e.far.gets.Load())
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := cachetest.NewClock()
			far := &counting{Store: cache.NewMemory(cfg, clock.Now)}
			tc.run(t, env{clock: clock, far: far, near: cache.NewNear(far, cfg, tc.maxBytes, clock.Now)})
		})
	}
}

// TestNearOutlivesAFlushedRedis pins down what the copies do not see: an entry Redis
// lost before its time is served here until it expires.
func TestNearOutlivesAFlushedRedis(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	rc := testRedisConfig(srv.Addr, "flush:")
	client := newClient(t, rc)
	cfg := cache.DefaultConfig()
	clock := cachetest.NewClock()
	near := cache.NewNear(cache.NewRedis(client, cfg, rc, clock.Now, nil), cfg, 1<<20, clock.Now)
	e := rotateEntry("kb", 1)
	if err := near.Put(ctx, e); err != nil {
		t.Fatal(err)
	}
	if err := client.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := near.Get(ctx, "kb", 1, e.Query); err != nil {
		t.Fatalf("Get after FLUSHALL: %v, want the copy", err)
	}
	clock.Advance(cfg.TTL)
	if _, err := near.Get(ctx, "kb", 1, e.Query); !errors.Is(err, cache.ErrMiss) {
		t.Fatalf("Get a TTL later: %v, want ErrMiss", err)
	}
}

// slowPut is a shared store whose Put is answered late: the clock moves on between the
// moment the entry is stored (and its expiry set) and the moment Put returns.
type slowPut struct {
	cache.Store
	clock   *cachetest.Clock
	latency time.Duration
}

func (s *slowPut) Put(ctx context.Context, e *cache.Entry) error {
	err := s.Store.Put(ctx, e)
	s.clock.Advance(s.latency)
	return err
}

// A copy made by Put must not outlive the shared entry: the shared store set that
// entry's expiry when it stored it, before its reply came back, and a copy dated from the
// reply was served for as long as the reply took after the shared entry had expired.
func TestNearCopyOfAPutExpiresWithTheSharedEntry(t *testing.T) {
	ctx := context.Background()
	cfg := cache.DefaultConfig()
	clock := cachetest.NewClock()
	far := &slowPut{Store: cache.NewMemory(cfg, clock.Now), clock: clock, latency: 5 * time.Second}
	near := cache.NewNear(far, cfg, 1<<20, clock.Now)
	e := &cache.Entry{KB: "kb", Generation: 1, Query: "how do i rotate keys?", Tokens: []string{"rotate", "keys"}, Value: []byte("answer")}
	if err := near.Put(ctx, e); err != nil {
		t.Fatal(err)
	}
	// The shared entry was stored 5 s ago; it expires a TTL after that.
	clock.Advance(cfg.TTL - far.latency)
	if _, err := far.Get(ctx, "kb", 1, e.Query); !errors.Is(err, cache.ErrMiss) {
		t.Fatalf("shared entry at its expiry: %v, want ErrMiss", err)
	}
	if _, fromCopy, err := near.GetCopy(ctx, "kb", 1, e.Query); err == nil {
		t.Fatalf("copy served (from copy %v) after the shared entry expired", fromCopy)
	}
}

// TestNearCopyExpiresWhenTheWriterSaid: a copy of an entry another replica stored lives
// no longer than the expiry that replica wrote into it, which Redis serves it until.
// Dated with this replica's own -cache-ttl, a replica with a longer TTL (a rolling
// change of -cache-ttl) served its copies long after Redis had let the entries expire.
func TestNearCopyExpiresWhenTheWriterSaid(t *testing.T) {
	srv := redistest.Start(t)
	client := newClient(t, testRedisConfig(srv.Addr, ""))
	ctx := context.Background()
	tests := []struct {
		name                string
		writerTTL, ownTTL   time.Duration
		after               time.Duration
		wantCopy, wantRedis bool
	}{
		{"writer's TTL shorter: its expiry ends the copy", time.Minute, time.Hour, 2 * time.Minute, false, false},
		{"writer's TTL shorter: served before its expiry", time.Minute, time.Hour, 30 * time.Second, true, true},
		{"writer's TTL longer: the copy keeps to its own", time.Hour, time.Minute, 2 * time.Minute, false, true},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := cachetest.NewClock()
			rc := testRedisConfig(srv.Addr, fmt.Sprintf("ttl%d:", i))
			wcfg, ocfg := cache.DefaultConfig(), cache.DefaultConfig()
			wcfg.TTL, ocfg.TTL = tt.writerTTL, tt.ownTTL
			writer := cache.NewRedis(client, wcfg, rc, clock.Now, nil)
			own := cache.NewRedis(client, ocfg, rc, clock.Now, nil)
			near := cache.NewNear(own, ocfg, 1<<20, clock.Now)
			e := &cache.Entry{KB: "kb", Generation: 1, Query: "how do i rotate keys?", Tokens: []string{"rotate", "keys"}, Value: []byte("answer")}
			if err := writer.Put(ctx, e); err != nil {
				t.Fatal(err)
			}
			if _, fromCopy, err := near.GetCopy(ctx, "kb", 1, e.Query); err != nil || fromCopy {
				t.Fatalf("first lookup: from copy %v, %v; want Redis's entry", fromCopy, err)
			}
			clock.Advance(tt.after)
			if _, err := own.Get(ctx, "kb", 1, e.Query); (err == nil) != tt.wantRedis {
				t.Fatalf("Redis after %s: %v, want served %v", tt.after, err, tt.wantRedis)
			}
			if _, fromCopy, err := near.GetCopy(ctx, "kb", 1, e.Query); fromCopy != tt.wantCopy {
				t.Errorf("after %s: from copy %v (%v), want %v", tt.after, fromCopy, err, tt.wantCopy)
			}
		})
	}
}
