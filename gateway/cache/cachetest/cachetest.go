// Package cachetest is the conformance suite every cache.Store implementation must pass.
package cachetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quarry-router/quarry/gateway/cache"
)

// NewStore builds an empty store under test with the given limits and clock.
type NewStore func(t *testing.T, cfg cache.Config, now func() time.Time) cache.Store

// Clock is a settable clock for the TTL rules.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// NewClock returns a clock stopped at a fixed instant.
func NewClock() *Clock {
	return &Clock{t: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)}
}

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Advance moves the clock forward.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func entry(kb string, gen uint64, query string, tokens ...string) *cache.Entry {
	return &cache.Entry{KB: kb, Generation: gen, Query: query, Tokens: tokens, Value: []byte("answer to " + query)}
}

type env struct {
	t     *testing.T
	ctx   context.Context
	store cache.Store
	clock *Clock
}

func setup(t *testing.T, newStore NewStore, edit func(*cache.Config)) *env {
	t.Helper()
	cfg := cache.DefaultConfig()
	if edit != nil {
		edit(&cfg)
	}
	clock := NewClock()
	return &env{t: t, ctx: context.Background(), store: newStore(t, cfg, clock.Now), clock: clock}
}

func (e *env) put(en *cache.Entry) {
	e.t.Helper()
	if err := e.store.Put(e.ctx, en); err != nil {
		e.t.Fatalf("Put(%q): %v", en.Query, err)
	}
}

// hit asserts that Get finds query and returns the value stored for it.
func (e *env) hit(kb string, gen uint64, query string) {
	e.t.Helper()
	got, err := e.store.Get(e.ctx, kb, gen, query)
	if err != nil {
		e.t.Fatalf("Get(%q, %d, %q): %v, want a hit", kb, gen, query, err)
	}
	if want := "answer to " + query; string(got.Value) != want || got.Query != query || got.KB != kb || got.Generation != gen {
		e.t.Fatalf("Get(%q, %d, %q) = {%q %d %q %q}, want the entry stored for it", kb, gen, query, got.KB, got.Generation, got.Query, got.Value)
	}
}

func (e *env) miss(kb string, gen uint64, query string) {
	e.t.Helper()
	got, err := e.store.Get(e.ctx, kb, gen, query)
	if !errors.Is(err, cache.ErrMiss) {
		e.t.Fatalf("Get(%q, %d, %q) = %v, %v; want ErrMiss", kb, gen, query, got, err)
	}
}

func (e *env) similar(kb string, gen uint64, tokens ...string) (*cache.Entry, float64) {
	e.t.Helper()
	got, sim, err := e.store.Similar(e.ctx, kb, gen, tokens)
	if err != nil {
		e.t.Fatalf("Similar(%q, %d, %q): %v, want a candidate", kb, gen, tokens, err)
	}
	return got, sim
}

func (e *env) noSimilar(kb string, gen uint64, tokens ...string) {
	e.t.Helper()
	got, sim, err := e.store.Similar(e.ctx, kb, gen, tokens)
	if !errors.Is(err, cache.ErrMiss) {
		e.t.Fatalf("Similar(%q, %d, %q) = %v (%.3f), %v; want ErrMiss", kb, gen, tokens, got, sim, err)
	}
}

// Option adjusts the suite to a kind of store.
type Option func(*options)

type options struct{ keepsEvicted bool }

// KeepsEvicted is for a store in front of another (cache.Near) that keeps its own
// copies of entries: they outlive an eviction in the store behind it until they expire,
// so the case of the entry bound is skipped.
func KeepsEvicted(o *options) { o.keepsEvicted = true }

// Run runs the conformance suite against stores built by newStore.
func Run(t *testing.T, newStore NewStore, opts ...Option) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	t.Run("exact lookup finds only the same normalised query", func(t *testing.T) {
		e := setup(t, newStore, nil)
		e.miss("kb", 1, "how do i rotate keys")
		e.put(entry("kb", 1, "how do i rotate keys", "rotate", "keys"))
		e.hit("kb", 1, "how do i rotate keys")
		e.miss("kb", 1, "how do i rotate key")
		e.miss("kb", 1, "")
	})

	t.Run("put replaces the entry with the same key", func(t *testing.T) {
		e := setup(t, newStore, nil)
		first := entry("kb", 1, "rotate keys", "rotate", "keys")
		first.Value = []byte("old")
		e.put(first)
		e.put(entry("kb", 1, "rotate keys", "rotate", "keys"))
		e.hit("kb", 1, "rotate keys")
		got, _ := e.similar("kb", 1, "rotate", "keys")
		if string(got.Value) != "answer to rotate keys" {
			t.Fatalf("Similar after replace returned %q, want the new value", got.Value)
		}
	})

	t.Run("a question of more than MaxFuzzyTokens tokens takes no part in fuzzy matching", func(t *testing.T) {
		e := setup(t, newStore, nil)
		words := func(n int) []string {
			out := make([]string, n)
			for i := range out {
				out[i] = fmt.Sprintf("word%d", i)
			}
			return out
		}
		most, over := words(cache.MaxFuzzyTokens), words(cache.MaxFuzzyTokens+1)
		e.put(entry("kb", 1, "most", most...))
		e.put(entry("kb", 1, "over", over...))
		e.hit("kb", 1, "over") // an exact hit as any other
		if got, _ := e.similar("kb", 1, most...); got.Query != "most" {
			t.Fatalf("Similar with the most tokens found %q, want the entry with them", got.Query)
		}
		// The entry of too many tokens is not found by its own tokens, and a lookup of
		// too many does not reach the entry they hold all of.
		e.noSimilar("kb", 1, over...)
		e.noSimilar("kb", 1, append(slices.Clone(most), "extra")...)
		// Taken out by eviction or replacement like any other.
		e.put(entry("kb", 1, "over", over[:3]...))
		if got, _ := e.similar("kb", 1, over[:3]...); got.Query != "over" {
			t.Fatalf("Similar after the replacement found %q, want the replaced entry", got.Query)
		}
	})

	t.Run("an entry of another generation never matches", func(t *testing.T) {
		e := setup(t, newStore, nil)
		e.put(entry("kb", 1, "rotate signing keys", "rotate", "signing", "keys"))
		e.miss("kb", 2, "rotate signing keys")
		e.noSimilar("kb", 2, "rotate", "signing", "keys")
		e.hit("kb", 1, "rotate signing keys")
		e.put(entry("kb", 2, "rotate signing keys", "rotate", "signing", "keys"))
		e.hit("kb", 2, "rotate signing keys")
		e.hit("kb", 1, "rotate signing keys")
	})

	t.Run("an entry of another knowledge base never matches", func(t *testing.T) {
		e := setup(t, newStore, nil)
		e.put(entry("team-a", 1, "rotate signing keys", "rotate", "signing", "keys"))
		e.miss("team-b", 1, "rotate signing keys")
		e.noSimilar("team-b", 1, "rotate", "signing", "keys")
	})

	t.Run("an entry expires after the TTL", func(t *testing.T) {
		e := setup(t, newStore, func(c *cache.Config) { c.TTL = time.Minute })
		e.put(entry("kb", 1, "rotate signing keys", "rotate", "signing", "keys"))
		e.clock.Advance(time.Minute - time.Millisecond)
		e.hit("kb", 1, "rotate signing keys")
		e.similar("kb", 1, "rotate", "signing", "keys")
		e.clock.Advance(time.Millisecond)
		e.miss("kb", 1, "rotate signing keys")
		e.noSimilar("kb", 1, "rotate", "signing", "keys")
	})

	t.Run("an entry larger than the size cap is refused", func(t *testing.T) {
		e := setup(t, newStore, func(c *cache.Config) { c.MaxEntryBytes = 1000 })
		fits := entry("kb", 1, "big answer", "big", "answer")
		fits.Value = bytes.Repeat([]byte("x"), 1000-fits.Size()+len(fits.Value))
		if fits.Size() != 1000 {
			t.Fatalf("test entry has size %d, want 1000", fits.Size())
		}
		e.put(fits)
		big := entry("kb", 1, "bigger answer", "bigger", "answer")
		big.Value = bytes.Repeat([]byte("x"), 1001-big.Size()+len(big.Value))
		if err := e.store.Put(e.ctx, big); !errors.Is(err, cache.ErrTooLarge) {
			t.Fatalf("Put of %d bytes with a 1000-byte cap = %v, want ErrTooLarge", big.Size(), err)
		}
		e.miss("kb", 1, "bigger answer")
	})

	t.Run("long queries are told apart and found whole", func(t *testing.T) {
		e := setup(t, newStore, nil)
		long := strings.Repeat("how do i rotate the signing keys of every service ", 20)
		a, b := entry("kb", 1, long+"a", "rotate", "signing", "keys", "a1"), entry("kb", 1, long+"b", "rotate", "signing", "keys", "b1")
		e.put(a)
		e.put(b)
		e.hit("kb", 1, long+"a")
		e.hit("kb", 1, long+"b")
		e.miss("kb", 1, long+"c")
		got, _ := e.similar("kb", 1, "rotate", "signing", "keys", "a1")
		if got.Query != long+"a" {
			t.Fatalf("Similar found %.20q…, want the long query ending in a", got.Query)
		}
	})

	t.Run("the value comes back byte for byte", func(t *testing.T) {
		e := setup(t, newStore, nil)
		en := entry("kb", 1, "binary answer", "binary", "answer")
		en.Value = []byte{0, 1, 2, 0xff, 0xfe, 0, '\n', 'x'}
		e.put(en)
		got, err := e.store.Get(e.ctx, "kb", 1, "binary answer")
		if err != nil || !bytes.Equal(got.Value, en.Value) {
			t.Fatalf("Get = %v, %v; want the value %v", got, err, en.Value)
		}
		fz, _ := e.similar("kb", 1, "answer", "binary")
		if !bytes.Equal(fz.Value, en.Value) || !slicesEqualSet(fz.Tokens, en.Tokens) {
			t.Fatalf("Similar returned value %v tokens %q, want %v %q", fz.Value, fz.Tokens, en.Value, en.Tokens)
		}
	})

	t.Run("an entry replaced with other tokens is found only by its new tokens", func(t *testing.T) {
		e := setup(t, newStore, nil)
		e.put(entry("kb", 1, "rotate keys now", "rotate", "signing", "keys"))
		e.put(entry("kb", 1, "rotate keys now", "rotate", "keys", "now"))
		e.noSimilar("kb", 1, "rotate", "signing", "keys", "weekly") // 2/5 against the new tokens
		got, sim := e.similar("kb", 1, "rotate", "keys", "now")
		if got.Query != "rotate keys now" || sim != 1 {
			t.Fatalf("Similar = %q at %.3f, want the replaced entry at 1", got.Query, sim)
		}
	})

	t.Run("fuzzy threshold", func(t *testing.T) {
		cases := []struct {
			name   string
			cached []string
			query  []string
			want   float64 // 0 for a miss
		}{
			{"identical token sets match at 1", []string{"rotate", "signing", "keys"}, []string{"keys", "rotate", "signing"}, 1},
			{"3 of 5 tokens is exactly 0.6 and matches", []string{"rotate", "jwt", "api", "token"}, []string{"revoke", "jwt", "api", "token"}, 0.6},
			{"3 of 4 tokens matches at 0.75", []string{"rotate", "signing", "keys"}, []string{"rotate", "signing", "keys", "now"}, 0.75},
			{"2 of 4 tokens is 0.5 and misses", []string{"rotate", "api", "token"}, []string{"revoke", "api", "token"}, 0},
			{"no shared token misses", []string{"rotate", "keys"}, []string{"deploy", "service"}, 0},
			{"a one-token query is never fuzzy-matched", []string{"rotate"}, []string{"rotate"}, 0},
			{"an empty query is never fuzzy-matched", []string{"rotate", "keys"}, nil, 0},
			{"duplicate query tokens count once", []string{"rotate", "keys"}, []string{"rotate", "rotate", "keys"}, 1},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				e := setup(t, newStore, nil)
				e.put(entry("kb", 1, strings.Join(c.cached, " "), c.cached...))
				if c.want == 0 {
					e.noSimilar("kb", 1, c.query...)
					return
				}
				got, sim := e.similar("kb", 1, c.query...)
				if got.Query != strings.Join(c.cached, " ") || sim < c.want-1e-9 || sim > c.want+1e-9 {
					t.Fatalf("Similar = %q at %.4f, want %q at %.4f", got.Query, sim, strings.Join(c.cached, " "), c.want)
				}
			})
		}
	})

	t.Run("an entry with fewer than the minimum tokens is never fuzzy-matched", func(t *testing.T) {
		e := setup(t, newStore, func(c *cache.Config) { c.FuzzyMin = 0.5 })
		e.put(entry("kb", 1, "rotate", "rotate"))
		e.noSimilar("kb", 1, "rotate", "keys")
	})

	t.Run("the most similar candidate is chosen", func(t *testing.T) {
		e := setup(t, newStore, nil)
		e.put(entry("kb", 1, "rotate jwt api token", "rotate", "jwt", "api", "token"))                // 3/5 = 0.6
		e.put(entry("kb", 1, "rotate jwt api token daily", "rotate", "jwt", "api", "token", "daily")) // 4/5 = 0.8
		e.put(entry("kb", 1, "deploy service", "deploy", "service"))
		e.clock.Advance(time.Second)
		e.put(entry("kb", 1, "rotate jwt token", "rotate", "jwt", "token")) // 3/5 = 0.6, newest
		got, sim := e.similar("kb", 1, "rotate", "jwt", "api", "token", "daily")
		if got.Query != "rotate jwt api token daily" || sim != 1 {
			t.Fatalf("Similar = %q at %.3f, want the identical set at 1", got.Query, sim)
		}
		got, sim = e.similar("kb", 1, "rotate", "jwt", "api", "token", "weekly")
		if got.Query != "rotate jwt api token" || sim < 0.8-1e-9 {
			t.Fatalf("Similar = %q at %.3f, want %q at 0.8", got.Query, sim, "rotate jwt api token")
		}
	})

	t.Run("ties go to the most recently stored entry", func(t *testing.T) {
		e := setup(t, newStore, nil)
		e.put(entry("kb", 1, "rotate signing keys", "rotate", "signing", "keys"))
		e.clock.Advance(time.Second)
		e.put(entry("kb", 1, "rotate signing certs", "rotate", "signing", "certs"))
		got, sim := e.similar("kb", 1, "rotate", "signing", "keys", "certs")
		if got.Query != "rotate signing certs" || sim < 0.75-1e-9 || sim > 0.75+1e-9 {
			t.Fatalf("Similar = %q at %.3f, want the newer tie %q at 0.75", got.Query, sim, "rotate signing certs")
		}
	})

	t.Run("the least recently used entry is evicted at the bound", func(t *testing.T) {
		if o.keepsEvicted {
			t.Skip("copies outlive an eviction behind them until they expire")
		}
		e := setup(t, newStore, func(c *cache.Config) { c.MaxEntries = 3 })
		for i := range 3 {
			q := fmt.Sprintf("question %d", i)
			e.put(entry("kb", 1, q, "question", fmt.Sprintf("n%d", i)))
		}
		e.hit("kb", 1, "question 0") // 1 is now the least recently used
		e.put(entry("kb", 1, "question 3", "question", "n3"))
		e.miss("kb", 1, "question 1")
		e.noSimilar("kb", 1, "question", "n1")
		for _, q := range []string{"question 0", "question 2", "question 3"} {
			e.hit("kb", 1, q)
		}
		for i := 4; i < 20; i++ {
			e.put(entry("kb", 1, fmt.Sprintf("question %d", i), "question", fmt.Sprintf("n%d", i)))
		}
		found := 0
		for i := range 20 {
			if _, err := e.store.Get(e.ctx, "kb", 1, fmt.Sprintf("question %d", i)); err == nil {
				found++
			}
		}
		if found != 3 {
			t.Fatalf("%d entries found after 20 puts with a bound of 3, want 3", found)
		}
	})

	t.Run("concurrent use is safe", func(t *testing.T) {
		e := setup(t, newStore, func(c *cache.Config) { c.MaxEntries = 50 })
		var wg sync.WaitGroup
		for w := range 8 {
			wg.Go(func() {
				for i := range 200 {
					q := fmt.Sprintf("worker %d question %d", w, i%70)
					tokens := []string{"worker", fmt.Sprintf("w%d", w), fmt.Sprintf("q%d", i%70)}
					if err := e.store.Put(e.ctx, entry("kb", uint64(i%2), q, tokens...)); err != nil {
						t.Errorf("Put: %v", err)
						return
					}
					if got, err := e.store.Get(e.ctx, "kb", uint64(i%2), q); err == nil && got.Query != q {
						t.Errorf("Get(%q) returned %q", q, got.Query)
					}
					if _, _, err := e.store.Similar(e.ctx, "kb", uint64(i%2), tokens); err != nil && !errors.Is(err, cache.ErrMiss) {
						t.Errorf("Similar: %v", err)
					}
				}
			})
		}
		wg.Wait()
	})
}

func slicesEqualSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for _, x := range a {
		found := false
		for _, y := range b {
			found = found || x == y
		}
		if !found {
			return false
		}
	}
	return true
}
