package cache_test

import (
	"context"
	"testing"
	"time"

	"github.com/quarry-router/quarry/gateway/cache"
	"github.com/quarry-router/quarry/platform/redistest"
	"github.com/redis/go-redis/v9"
)

func filledRedis(b *testing.B, c *benchCorpus) (*cache.Redis, redis.UniversalClient) {
	srv := redistest.Start(b)
	rc := cache.DefaultRedisConfig()
	rc.Addr, rc.Timeout = srv.Addr, time.Second
	client := newClient(b, rc)
	cfg := cache.DefaultConfig()
	cfg.TTL = time.Hour
	s := cache.NewRedis(client, cfg, rc, time.Now, nil)
	for _, e := range c.entries {
		if err := s.Put(context.Background(), e); err != nil {
			b.Fatal(err)
		}
	}
	return s, client
}

// The Redis store's calls over loopback, beside a bare GET of the same server: the
// difference is what the scripts cost.
func BenchmarkRedisGet(b *testing.B) {
	c := newBenchCorpus(10000)
	s, _ := filledRedis(b, c)
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if _, err := s.Get(ctx, "kb", 1, c.entries[i%len(c.entries)].Query); err != nil {
			b.Fatal(err)
		}
	}
	reportP99(b, 5000, func(i int) { _, _ = s.Get(ctx, "kb", 1, c.entries[i%len(c.entries)].Query) })
}

// BenchmarkRedisBareGet is the floor: one GET of an entry's key, without the script,
// decoding or checks.
func BenchmarkRedisBareGet(b *testing.B) {
	c := newBenchCorpus(10000)
	s, client := filledRedis(b, c)
	ctx := context.Background()
	keys := make([]string, len(c.entries))
	for i, e := range c.entries {
		keys[i] = s.EntryKey("kb", 1, e.Query)
	}
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if err := client.Get(ctx, keys[i%len(keys)]).Err(); err != nil {
			b.Fatal(err)
		}
	}
	reportP99(b, 5000, func(i int) { _ = client.Get(ctx, keys[i%len(keys)]).Err() })
}

func BenchmarkRedisSimilar10k(b *testing.B) {
	c := newBenchCorpus(10000)
	s, _ := filledRedis(b, c)
	ctx := context.Background()
	hits := 0
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if _, _, err := s.Similar(ctx, "kb", 1, c.queries[i%len(c.queries)]); err == nil {
			hits++
		}
	}
	reportP99(b, 5000, func(i int) { _, _, _ = s.Similar(ctx, "kb", 1, c.queries[i%len(c.queries)]) })
	b.ReportMetric(float64(hits)/float64(b.N), "hit-ratio")
}
