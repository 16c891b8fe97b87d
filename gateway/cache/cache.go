// Package cache stores answers for the exact (T0) and fuzzy (T1) cache tiers.
package cache

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"time"
)

// ErrMiss is returned when no entry matches.
var ErrMiss = errors.New("cache: miss")

// ErrTooLarge is returned by Put when an entry is larger than Config.MaxEntryBytes.
var ErrTooLarge = errors.New("cache: entry too large")

// ErrUnavailable is returned (wrapped with the cause) when a shared cache backend is
// unreachable, too slow or refused by its circuit breaker. The caller answers uncached;
// the store itself reports outages in its log, once per outage, so callers need not.
var ErrUnavailable = errors.New("cache unavailable")

// Entry is one cached answer. Entries are keyed by (KB, Generation, Query): an entry
// filled under another generation of a knowledge base never matches. What the router
// passes as the generation is the knowledge base's content version when the search
// service reports one (generations.State.CacheKey); the store compares it, nothing more.
type Entry struct {
	KB         string
	Generation uint64
	// Query is the normalised query (text.Normalise), the exact-cache key.
	Query string
	// Tokens are text.Tokens(Query), the set the fuzzy lookup compares.
	Tokens []string
	// Value is the marshalled quarryv1.QueryResponse of the original answer.
	Value []byte
	// StoredAt is set by the store when the entry is put.
	StoredAt time.Time
	// expires is when the store that returned the entry stops serving it, as the replica
	// that stored it wrote it (zero when the store keeps no such instant): a copy of it
	// (Near) must not outlive it, whatever this replica's own -cache-ttl.
	expires time.Time
}

// Size is the number of bytes an entry counts against Config.MaxEntryBytes; every
// Store implementation uses it so the limit means the same everywhere.
func (e *Entry) Size() int {
	n := len(e.KB) + len(e.Query) + len(e.Value)
	for _, t := range e.Tokens {
		n += len(t)
	}
	return n
}

// Store is the answer cache the gateway's router consults. Entries a Store returns are
// shared and must not be modified.
type Store interface {
	// Get returns the entry stored for exactly this knowledge base, generation and
	// normalised query, or ErrMiss.
	Get(ctx context.Context, kb string, gen uint64, query string) (*Entry, error)
	// Similar returns the entry of the same knowledge base and generation whose tokens
	// have the highest Jaccard similarity with tokens, if it reaches Config.FuzzyMin,
	// with that similarity. Ties go to the most recently stored entry. Queries and
	// entries with fewer than Config.FuzzyMinTokens distinct tokens, or more than
	// MaxFuzzyTokens, never match. ErrMiss otherwise.
	Similar(ctx context.Context, kb string, gen uint64, tokens []string) (*Entry, float64, error)
	// Put stores e, replacing any entry with the same key. ErrTooLarge when e.Size()
	// exceeds Config.MaxEntryBytes.
	Put(ctx context.Context, e *Entry) error
}

// MaxFuzzyTokens bounds the distinct tokens of a question that takes part in fuzzy
// matching, as a lookup or as a cached entry: questions have a few dozen words at most,
// and text pasted into a question (a log, a stack trace) is not reworded. In Redis each
// entry's name in every one of its token postings carries its whole token signature, so
// an entry costs the square of its tokens: one of 676 (2.7 KB, within -max-query-bytes)
// took 1.8 MB of Redis memory, and a lookup among a hundred of them 23 ms of its time.
const MaxFuzzyTokens = 64

// MaxTTL is the longest -cache-ttl: ten years, as good as never.
const MaxTTL = 10 * 365 * 24 * time.Hour

// Config holds the cache limits (SPEC §2, T0 and T1).
type Config struct {
	// TTL is how long an entry may be served after it was stored.
	TTL time.Duration
	// MaxEntries bounds the number of entries; the least recently used go first.
	MaxEntries int
	// MaxEntryBytes bounds the size of one entry (Entry.Size).
	MaxEntryBytes int
	// MaxBytes bounds the sum of the in-process store's entries (Entry.Size); the least
	// recently used go first. Redis is bounded by its own maxmemory.
	MaxBytes int
	// FuzzyMin is the Jaccard similarity a fuzzy candidate must reach.
	FuzzyMin float64
	// FuzzyMinTokens is the fewest tokens a query (and a cached entry) needs to take
	// part in fuzzy matching.
	FuzzyMinTokens int
}

// RegisterFlags registers the cache flags with their SPEC defaults.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.DurationVar(&c.TTL, "cache-ttl", 60*time.Second, "how long a cached answer is served")
	fs.IntVar(&c.MaxEntries, "cache-max-entries", 10000, "maximum cached answers (least recently used are evicted)")
	fs.IntVar(&c.MaxEntryBytes, "cache-max-entry-bytes", 256<<10, "maximum size of one cached answer in bytes")
	fs.IntVar(&c.MaxBytes, "cache-max-bytes", 512<<20, "maximum bytes of cached answers the in-process cache holds (least recently used are evicted; Redis is bounded by its maxmemory)")
	fs.Float64Var(&c.FuzzyMin, "fuzzy-min", 0.6, "Jaccard similarity of query tokens a fuzzy-cache candidate must reach")
	fs.IntVar(&c.FuzzyMinTokens, "fuzzy-min-tokens", 2, "fewest query tokens for a fuzzy-cache lookup")
}

// Validate rejects limits the cache cannot work with, naming the flag.
func (c *Config) Validate() error {
	switch {
	case c.TTL <= 0:
		return fmt.Errorf("-cache-ttl must be positive, got %s", c.TTL)
	case c.TTL > MaxTTL:
		// Expiry times are Unix nanoseconds, which end in 2262.
		return fmt.Errorf("-cache-ttl must be at most %s (an answer is dropped anyway when its knowledge base changes), got %s", MaxTTL, c.TTL)
	case c.MaxEntries < 1:
		return fmt.Errorf("-cache-max-entries must be at least 1, got %d", c.MaxEntries)
	case c.MaxEntryBytes < 1:
		return fmt.Errorf("-cache-max-entry-bytes must be at least 1, got %d", c.MaxEntryBytes)
	case c.MaxBytes < c.MaxEntryBytes:
		return fmt.Errorf("-cache-max-bytes (%d) must be at least -cache-max-entry-bytes (%d)", c.MaxBytes, c.MaxEntryBytes)
	case !(c.FuzzyMin > 0 && c.FuzzyMin <= 1):
		return fmt.Errorf("-fuzzy-min must be in (0, 1], got %g", c.FuzzyMin)
	case c.FuzzyMinTokens < 1:
		return fmt.Errorf("-fuzzy-min-tokens must be at least 1, got %d", c.FuzzyMinTokens)
	}
	return nil
}

// DefaultConfig returns the flag defaults, so tests and embedders need not repeat them.
func DefaultConfig() Config {
	var c Config
	c.RegisterFlags(flag.NewFlagSet("cache", flag.ContinueOnError))
	return c
}

// jaccardEpsilon absorbs float rounding so a similarity of exactly FuzzyMin (3 of 5
// tokens shared at 0.6) counts as reaching it.
const jaccardEpsilon = 1e-9

// Reaches reports whether a similarity reaches the fuzzy threshold; every Store
// implementation decides with it.
func (c *Config) Reaches(sim float64) bool { return sim >= c.FuzzyMin-jaccardEpsilon }
