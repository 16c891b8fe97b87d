package route

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/quarry-router/quarry/gateway/cache"
	quarryv1 "github.com/quarry-router/quarry/gen/quarry/v1"
	"github.com/quarry-router/quarry/platform/text"
	"google.golang.org/protobuf/proto"
)

// benchRouter returns a router whose cache holds n answers of about 2 KB for distinct
// questions, and a search that only ever gets cancelled, as on a cache hit.
func benchRouter(b *testing.B, n int) (*Router, []string) {
	store := cache.NewMemory(cache.DefaultConfig(), time.Now)
	gens := &fakeGens{gens: map[string]uint64{"kb": 1}}
	res := &fakeResolver{}
	res.set(func(ctx context.Context, _ *quarryv1.ResolveRequest) (*quarryv1.ResolveResponse, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	})
	value, err := proto.Marshal(&quarryv1.QueryResponse{
		Tier: quarryv1.Tier_TIER_DIRECT, OriginTier: quarryv1.Tier_TIER_DIRECT, KnowledgeBase: "kb", Generation: 1,
		Answer:  string(make([]byte, 2000)),
		Sources: []*quarryv1.Source{{Path: "auth/rotate-keys.md", Title: "Rotate keys", Excerpt: "…"}},
	})
	if err != nil {
		b.Fatal(err)
	}
	var questions []string
	for i := range n {
		q := fmt.Sprintf("how do i rotate service%d signing keys in cluster%d", i, i%97)
		questions = append(questions, q)
		if err := store.Put(context.Background(), &cache.Entry{KB: "kb", Generation: 1, Query: q, Tokens: text.Tokens(q), Value: value}); err != nil {
			b.Fatal(err)
		}
	}
	cfg := DefaultConfig()
	return New(cfg, store, res, nil, gens, nil), questions
}

func benchQueries(b *testing.B, r *Router, queries []string, want quarryv1.Tier) {
	ctx := context.Background()
	reqs := make([]*quarryv1.QueryRequest, len(queries))
	for i, q := range queries {
		reqs[i] = &quarryv1.QueryRequest{KnowledgeBase: "kb", Query: q}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		resp, err := r.Query(ctx, reqs[i%len(reqs)], nil)
		if err != nil || resp.GetTier() != want {
			b.Fatalf("Query: %v, tier %s; want %s", err, resp.GetTier(), want)
		}
	}
	b.StopTimer()
	d := make([]time.Duration, 5000)
	for i := range d {
		start := time.Now()
		_, _ = r.Query(ctx, reqs[i%len(reqs)], nil)
		d[i] = time.Since(start)
	}
	slices.Sort(d)
	b.ReportMetric(float64(d[len(d)*99/100].Nanoseconds()), "p99-ns")
}

// BenchmarkQueryExactHit is T0 through the router, without gRPC.
func BenchmarkQueryExactHit(b *testing.B) {
	r, questions := benchRouter(b, 10000)
	benchQueries(b, r, questions, quarryv1.Tier_TIER_EXACT_CACHE)
}

// BenchmarkQueryFuzzyHit10k is T1 (same stems, served at once) through the router with
// 10,000 cached answers; the hedged speculative search does not start for such a hit.
func BenchmarkQueryFuzzyHit10k(b *testing.B) {
	r, questions := benchRouter(b, 10000)
	reworded := make([]string, len(questions))
	for i := range questions {
		reworded[i] = fmt.Sprintf("Rotating the signing keys of service%d in cluster%d?", i, i%97)
	}
	benchQueries(b, r, reworded, quarryv1.Tier_TIER_FUZZY_CACHE)
}
