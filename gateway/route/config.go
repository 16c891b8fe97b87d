package route

import (
	"flag"
	"fmt"
	"time"
)

// Config holds the router's limits.
type Config struct {
	// MaxQueryBytes bounds the length of a query in bytes.
	MaxQueryBytes int
	// ResolveTimeout bounds one search-service Resolve call. It runs detached from the
	// callers who wait for it, so one caller giving up does not cancel it for the rest.
	ResolveTimeout time.Duration
	// AgentTimeout bounds one agent answer (T3/T4), streaming included; a caller whose
	// deadline is nearer bounds the answer it starts to nine tenths of its time left.
	AgentTimeout time.Duration
	// SpeculativeDelay hedges the speculative search: it starts as soon as the fuzzy
	// lookup returns without an answer it can serve at once, or once the lookup has run
	// this long, whichever comes first. A hit served at once then never shares the CPU
	// with a search; 0 starts the search at once, in parallel with the lookup.
	SpeculativeDelay time.Duration
	// ShareAnswers, with a cache shared by replicas that hands out leases (Redis), has
	// one replica ask the LLM for a question asked on several at once, and the others
	// wait for its answer in the cache (see Router.ShareAnswersVia).
	ShareAnswers bool
}

// RegisterFlags registers the router flags with their defaults.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.IntVar(&c.MaxQueryBytes, "max-query-bytes", 4096, "longest accepted query in bytes")
	fs.DurationVar(&c.ResolveTimeout, "resolve-timeout", 5*time.Second, "deadline of one search-service Resolve call")
	fs.DurationVar(&c.AgentTimeout, "agent-timeout", 60*time.Second, "deadline of one agent (LLM) answer")
	fs.DurationVar(&c.SpeculativeDelay, "speculative-delay", time.Millisecond,
		"how long the fuzzy-cache lookup may run before the speculative search starts beside it (0: always in parallel)")
	fs.BoolVar(&c.ShareAnswers, "share-answers", true,
		"with the Redis cache, a question asked on several replicas at once goes to the LLM once; the other replicas wait for that answer (sent whole, not streamed)")
}

// Validate rejects settings the router cannot work with, naming the flag.
func (c *Config) Validate() error {
	switch {
	case c.MaxQueryBytes < 1:
		return fmt.Errorf("-max-query-bytes must be at least 1, got %d", c.MaxQueryBytes)
	case c.ResolveTimeout <= 0:
		return fmt.Errorf("-resolve-timeout must be positive, got %s", c.ResolveTimeout)
	case c.AgentTimeout <= 0:
		return fmt.Errorf("-agent-timeout must be positive, got %s", c.AgentTimeout)
	case c.SpeculativeDelay < 0:
		return fmt.Errorf("-speculative-delay must not be negative, got %s", c.SpeculativeDelay)
	}
	return nil
}

// DefaultConfig returns the flag defaults.
func DefaultConfig() Config {
	var c Config
	c.RegisterFlags(flag.NewFlagSet("route", flag.ContinueOnError))
	return c
}
