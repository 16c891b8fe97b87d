package bleve

import (
	"errors"
	"flag"
	"fmt"
)

// Config tunes the embedded index. Boosts are relevance decisions: measure them on a
// labelled query set before changing them.
type Config struct {
	// TitleBoost, PathBoost and ContentBoost weigh an exact (stemmed) match per field
	// (SPEC §2 Search: title 3, path 1.5, content 1).
	TitleBoost   float64
	PathBoost    float64
	ContentBoost float64
	// PrefixBoost weighs a prefix match of a term's stem, times the field boost; kept low
	// so a prefix match never outranks the exact word.
	PrefixBoost float64
	// PrefixMinLen is the shortest stem (in characters) that gets a prefix query: short
	// prefixes match half the vocabulary, which is slow and is no evidence ("are" →
	// "arecord").
	PrefixMinLen int
	// FuzzyBoost weighs a typo match (edit distance <= Fuzziness), times the field boost.
	FuzzyBoost float64
	// FuzzyMinLen is the shortest word (in characters) that gets typo tolerance.
	FuzzyMinLen int
	// Fuzziness is the edit distance a typo match allows.
	Fuzziness int
	// PrefixKnown and FuzzyKnown apply prefix and typo matching to words the index
	// contains too; otherwise only to words it lacks (a misspelling, a partial word). Off by
	// default: ~10x slower searches (numbers at termQuery).
	PrefixKnown bool
	FuzzyKnown  bool
	// BatchSize is the number of documents indexed per batch while building. Each batch is
	// a segment, and an in-memory index never merges them: one batch of 5,000 documents
	// searches ~1.5x faster at p50 but took ~480 MB RSS to build against ~150 MB for 500.
	BatchSize int
	// DefaultLimit caps hits when a query sets no limit.
	DefaultLimit int

	// Dir is where the index persists ("" keeps it in memory). Set per index by the caller
	// (one directory per knowledge base), so it is not a flag.
	Dir string
	// Fingerprint identifies the documents the caller is about to index (for example a hash
	// of paths, sizes and modification times). An index in Dir is reused only when it was
	// built with the same fingerprint; an empty fingerprint always rebuilds.
	Fingerprint string
}

// DefaultConfig returns the SPEC defaults.
func DefaultConfig() Config {
	return Config{
		TitleBoost:   3,
		PathBoost:    1.5,
		ContentBoost: 1,
		PrefixBoost:  0.3,
		PrefixMinLen: 4,
		FuzzyBoost:   0.2,
		FuzzyMinLen:  5,
		Fuzziness:    1,
		BatchSize:    500,
		DefaultLimit: 50,
	}
}

// RegisterFlags registers the tunables with their SPEC defaults.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	d := DefaultConfig()
	fs.Float64Var(&c.TitleBoost, "bleve-title-boost", d.TitleBoost, "boost of a match in the title")
	fs.Float64Var(&c.PathBoost, "bleve-path-boost", d.PathBoost, "boost of a match in the path segments")
	fs.Float64Var(&c.ContentBoost, "bleve-content-boost", d.ContentBoost, "boost of a match in the content")
	fs.Float64Var(&c.PrefixBoost, "bleve-prefix-boost", d.PrefixBoost, "boost of a prefix match, times the field boost")
	fs.IntVar(&c.PrefixMinLen, "bleve-prefix-min-len", d.PrefixMinLen, "shortest stem (characters) matched as a prefix")
	fs.Float64Var(&c.FuzzyBoost, "bleve-fuzzy-boost", d.FuzzyBoost, "boost of a typo match, times the field boost")
	fs.IntVar(&c.FuzzyMinLen, "bleve-fuzzy-min-len", d.FuzzyMinLen, "shortest word (characters) matched with typo tolerance")
	fs.IntVar(&c.Fuzziness, "bleve-fuzziness", d.Fuzziness, "edit distance of a typo match (0-2)")
	fs.BoolVar(&c.PrefixKnown, "bleve-prefix-known", d.PrefixKnown, "prefix-match words the index contains too (slower; see engine/bleve)")
	fs.BoolVar(&c.FuzzyKnown, "bleve-fuzzy-known", d.FuzzyKnown, "typo-match words the index contains too (slower; see engine/bleve)")
	fs.IntVar(&c.BatchSize, "bleve-batch-size", d.BatchSize, "documents per indexing batch")
	fs.IntVar(&c.DefaultLimit, "bleve-default-limit", d.DefaultLimit, "hits returned when a query sets no limit")
}

// Validate rejects settings the index cannot work with, naming the flag.
func (c Config) Validate() error {
	var errs []error
	for _, b := range []struct {
		name string
		v    float64
	}{
		{"bleve-title-boost", c.TitleBoost},
		{"bleve-path-boost", c.PathBoost},
		{"bleve-content-boost", c.ContentBoost},
		{"bleve-prefix-boost", c.PrefixBoost},
		{"bleve-fuzzy-boost", c.FuzzyBoost},
	} {
		if b.v < 0 {
			errs = append(errs, fmt.Errorf("-%s must be >= 0, got %g", b.name, b.v))
		}
	}
	if c.TitleBoost+c.PathBoost+c.ContentBoost <= 0 {
		errs = append(errs, errors.New("-bleve-title-boost, -bleve-path-boost and -bleve-content-boost cannot all be 0"))
	}
	if c.PrefixMinLen < 1 {
		errs = append(errs, fmt.Errorf("-bleve-prefix-min-len must be >= 1, got %d", c.PrefixMinLen))
	}
	if c.FuzzyMinLen < 1 {
		errs = append(errs, fmt.Errorf("-bleve-fuzzy-min-len must be >= 1, got %d", c.FuzzyMinLen))
	}
	// Bleve's Levenshtein automata stop at distance 2.
	if c.Fuzziness < 0 || c.Fuzziness > 2 {
		errs = append(errs, fmt.Errorf("-bleve-fuzziness must be 0, 1 or 2, got %d", c.Fuzziness))
	}
	if c.BatchSize < 1 {
		errs = append(errs, fmt.Errorf("-bleve-batch-size must be >= 1, got %d", c.BatchSize))
	}
	if c.DefaultLimit < 1 {
		errs = append(errs, fmt.Errorf("-bleve-default-limit must be >= 1, got %d", c.DefaultLimit))
	}
	return errors.Join(errs...)
}
