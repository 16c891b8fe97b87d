package cache_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/quarry-router/quarry/gateway/cache"
	"github.com/quarry-router/quarry/platform/text"
)

// benchVocabulary is the head of a knowledge base's vocabulary; the long tail is made of
// rarer generated terms. Word frequencies follow a Zipf law, as in real questions.
var benchVocabulary = strings.Fields(`
	deploy service config configure rotate revoke key keys token tokens jwt api auth
	login password reset user users team database backup restore migrate migration
	schema index query cache redis kubernetes pod pods node cluster helm chart upgrade
	rollback release version build test tests pipeline ci cd docker image registry
	secret secrets vault certificate tls ssl dns domain ingress load balancer timeout
	retry error errors log logs logging metrics alert alerts dashboard grafana trace
	tracing latency throughput queue kafka topic consumer producer schema storage bucket
	s3 permission role policy access admin onboarding laptop vpn ssh git branch merge
	review approval incident postmortem oncall runbook escalation sla billing invoice
	customer account subscription plan feature flag rollout experiment search ranking`)

type benchCorpus struct {
	entries []*cache.Entry
	queries [][]string
}

func newBenchCorpus(n int) *benchCorpus {
	rng := rand.New(rand.NewPCG(1, 2))
	vocab := append([]string(nil), benchVocabulary...)
	for i := range 3000 {
		vocab = append(vocab, fmt.Sprintf("term%04d", i))
	}
	zipf := rand.NewZipf(rng, 1.07, 2, uint64(len(vocab)-1))
	question := func() []string {
		k := 3 + rng.IntN(5)
		var tokens []string
		for len(tokens) < k {
			w := vocab[zipf.Uint64()]
			if !slices.Contains(tokens, w) {
				tokens = append(tokens, w)
			}
		}
		return tokens
	}
	c := &benchCorpus{}
	value := make([]byte, 2048)
	for i := range n {
		tokens := question()
		c.entries = append(c.entries, &cache.Entry{
			KB: "kb", Generation: 1, Query: fmt.Sprintf("%s %d", strings.Join(tokens, " "), i),
			Tokens: tokens, Value: value,
		})
	}
	// Half the lookups reword a cached question (one token swapped), half are new.
	for i := range 1000 {
		if i%2 == 0 {
			q := slices.Clone(c.entries[rng.IntN(n)].Tokens)
			q[rng.IntN(len(q))] = vocab[zipf.Uint64()]
			c.queries = append(c.queries, q)
		} else {
			c.queries = append(c.queries, question())
		}
	}
	return c
}

func filledMemory(b *testing.B, c *benchCorpus) *cache.Memory {
	cfg := cache.DefaultConfig()
	cfg.TTL = time.Hour
	m := cache.NewMemory(cfg, time.Now)
	for _, e := range c.entries {
		if err := m.Put(context.Background(), e); err != nil {
			b.Fatal(err)
		}
	}
	if m.Len() != len(c.entries) {
		b.Fatalf("store holds %d entries, want %d", m.Len(), len(c.entries))
	}
	return m
}

// reportP99 times calls of op one by one and reports their median and 99th percentile.
func reportP99(b *testing.B, calls int, op func(i int)) {
	b.StopTimer()
	d := make([]time.Duration, calls)
	for i := range d {
		start := time.Now()
		op(i)
		d[i] = time.Since(start)
	}
	slices.Sort(d)
	b.ReportMetric(float64(d[len(d)/2].Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(d[len(d)*99/100].Nanoseconds()), "p99-ns")
}

func BenchmarkMemoryGet(b *testing.B) {
	c := newBenchCorpus(10000)
	m := filledMemory(b, c)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if _, err := m.Get(ctx, "kb", 1, c.entries[i%len(c.entries)].Query); err != nil {
			b.Fatal(err)
		}
	}
	reportP99(b, 100000, func(i int) { _, _ = m.Get(ctx, "kb", 1, c.entries[i%len(c.entries)].Query) })
}

func BenchmarkMemorySimilar10k(b *testing.B) {
	c := newBenchCorpus(10000)
	m := filledMemory(b, c)
	ctx := context.Background()
	hits := 0
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if _, _, err := m.Similar(ctx, "kb", 1, c.queries[i%len(c.queries)]); err == nil {
			hits++
		}
	}
	reportP99(b, 20000, func(i int) { _, _, _ = m.Similar(ctx, "kb", 1, c.queries[i%len(c.queries)]) })
	b.ReportMetric(float64(hits)/float64(b.N), "hit-ratio")
}

// BenchmarkScanSimilar10k is the baseline the inverted index replaces: the reference
// implementation's Jaccard against every cached entry.
func BenchmarkScanSimilar10k(b *testing.B) {
	c := newBenchCorpus(10000)
	scan := func(q []string) *cache.Entry {
		var best *cache.Entry
		bestSim := 0.0
		for _, e := range c.entries {
			if s := text.Jaccard(q, e.Tokens); s >= 0.6 && s > bestSim {
				best, bestSim = e, s
			}
		}
		return best
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		scan(c.queries[i%len(c.queries)])
	}
	reportP99(b, 500, func(i int) { scan(c.queries[i%len(c.queries)]) })
}
