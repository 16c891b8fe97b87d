package cache

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// checkIndex verifies that the exact map, the postings and the LRU list describe the
// same entries, which the swap-delete of postings must preserve.
func checkIndex(t *testing.T, m *Memory) {
	t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	inList := 0
	for n := m.lru.next; n != &m.lru; n = n.next {
		inList++
		if n.part.exact[n.e.Query] != n {
			t.Fatalf("entry %q in the LRU list is not in its exact map", n.e.Query)
		}
		for i, tok := range n.e.Tokens {
			if list := n.part.postings[tok]; n.pos[i] >= len(list) || list[n.pos[i]] != n {
				t.Fatalf("entry %q is not at its recorded position in postings[%q]", n.e.Query, tok)
			}
		}
	}
	exact, postings := 0, 0
	for key, p := range m.parts {
		if p.key != key || len(p.exact) == 0 {
			t.Fatalf("partition %v is empty or misfiled", key)
		}
		exact += len(p.exact)
		for _, list := range p.postings {
			postings += len(list)
		}
	}
	wantPostings := 0
	for n := m.lru.next; n != &m.lru; n = n.next {
		wantPostings += len(n.e.Tokens)
	}
	if inList != m.n || exact != m.n || postings != wantPostings {
		t.Fatalf("list %d, exact %d, n %d, postings %d (want %d): index out of step", inList, exact, m.n, postings, wantPostings)
	}
}

func TestMemoryIndexStaysConsistentUnderEviction(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxEntries = 17
	now := time.Unix(0, 0)
	m := NewMemory(cfg, func() time.Time { return now })
	ctx := context.Background()
	for i := range 500 {
		tokens := []string{"common", fmt.Sprintf("t%d", i%7), fmt.Sprintf("u%d", i%13)}
		e := &Entry{KB: fmt.Sprintf("kb%d", i%3), Generation: uint64(i % 4), Query: fmt.Sprintf("q%d", i%40), Tokens: tokens}
		if err := m.Put(ctx, e); err != nil {
			t.Fatal(err)
		}
		if i%5 == 0 {
			_, _, _ = m.Similar(ctx, e.KB, e.Generation, []string{"common", "t1", "u2"})
		}
		if i%50 == 0 {
			now = now.Add(cfg.TTL) // everything stored so far expires
		}
		checkIndex(t, m)
	}
	if m.Len() > cfg.MaxEntries {
		t.Fatalf("%d entries held, bound is %d", m.Len(), cfg.MaxEntries)
	}
}

func TestMemoryHotPathDoesNotAllocate(t *testing.T) {
	m := NewMemory(DefaultConfig(), time.Now)
	ctx := context.Background()
	for i := range 100 {
		_ = m.Put(ctx, &Entry{KB: "kb", Generation: 1, Query: fmt.Sprintf("q%d", i), Tokens: []string{"rotate", "keys", fmt.Sprintf("t%d", i)}})
	}
	query := []string{"rotate", "keys", "t5"}
	if a := testing.AllocsPerRun(100, func() { _, _ = m.Get(ctx, "kb", 1, "q5") }); a != 0 {
		t.Errorf("Get allocates %.1f times per call, want 0", a)
	}
	if a := testing.AllocsPerRun(100, func() { _, _, _ = m.Similar(ctx, "kb", 1, query) }); a != 0 {
		t.Errorf("Similar allocates %.1f times per call, want 0", a)
	}
}

// TestMemorySimilarAgreesWithFullScan checks the pruned index lookup against the
// definition: the best Jaccard over every entry of the knowledge base generation.
func TestMemorySimilarAgreesWithFullScan(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	vocab := make([]string, 40)
	for i := range vocab {
		vocab[i] = fmt.Sprintf("w%d", i)
	}
	pick := func() []string {
		var out []string
		for k := 1 + rng.IntN(7); len(out) < k; {
			w := vocab[int(rng.ExpFloat64()*8)%len(vocab)]
			if !slices.Contains(out, w) {
				out = append(out, w)
			}
		}
		return out
	}
	cfg := DefaultConfig()
	m := NewMemory(cfg, time.Now)
	ctx := context.Background()
	var all []*Entry
	for i := range 2000 {
		e := &Entry{KB: "kb", Generation: 1, Query: fmt.Sprintf("q%d", i), Tokens: pick()}
		all = append(all, e)
		if err := m.Put(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	jaccard := func(a, b []string) float64 {
		inter := 0
		for _, x := range a {
			if slices.Contains(b, x) {
				inter++
			}
		}
		return float64(inter) / float64(len(a)+len(b)-inter)
	}
	hits := 0
	for range 3000 {
		q := pick()
		want := 0.0
		for _, e := range all {
			if len(e.Tokens) >= cfg.FuzzyMinTokens && len(q) >= cfg.FuzzyMinTokens {
				if s := jaccard(q, e.Tokens); cfg.Reaches(s) && s > want {
					want = s
				}
			}
		}
		got, sim, err := m.Similar(ctx, "kb", 1, q)
		switch {
		case want == 0 && err == nil:
			t.Fatalf("Similar(%q) = %q at %.3f, full scan finds nothing", q, got.Tokens, sim)
		case want > 0 && err != nil:
			t.Fatalf("Similar(%q) = %v, full scan finds %.3f", q, err, want)
		case want > 0 && (sim != want || jaccard(q, got.Tokens) != want):
			t.Fatalf("Similar(%q) = %q at %.3f, full scan finds %.3f", q, got.Tokens, sim, want)
		}
		if err == nil {
			hits++
		}
	}
	if hits < 300 {
		t.Fatalf("only %d of 3000 lookups hit; the test corpus does not exercise matching", hits)
	}
}
