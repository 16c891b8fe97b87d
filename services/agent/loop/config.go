package loop

import (
	"errors"
	"flag"
	"fmt"
	"time"
)

// Config holds the SPEC's T3 and T4 limits.
type Config struct {
	// T3: one call with the pre-fetched documents in the prompt.
	T3MaxTokens   int
	T3Temperature float64
	// T3MaxToolSteps bounds the rounds of read_document calls a T3 answer may make
	// before it must answer.
	T3MaxToolSteps int

	// T4: the agentic loop.
	T4MaxTokens     int
	T4Temperature   float64
	T4MaxIterations int

	// Deadline bounds the tool-using part of an answer, every call and tool of it.
	// When it passes, the loop stops and the model answers from what was gathered; an
	// answer the model has started to write is allowed to finish.
	Deadline time.Duration
	// MaxToolCallsPerTurn bounds the tool calls run from one model turn (a T3 step or
	// a T4 iteration). The chat-completions format lets one assistant message ask for
	// any number of calls, and a model (or a prompt-injected document) asking for
	// hundreds would have them all run, each a search-service request and a tool
	// message in every later prompt, long before the context trimming or the deadline
	// stop it. The calls past it are not run: each is answered with a tool error naming
	// the limit, since every call of the turn needs a tool message.
	MaxToolCallsPerTurn int
	// RepeatLimit stops the loop when the same tool call (same name and arguments,
	// however spelled: see tools.Set.Key) has been asked for this many times.
	RepeatLimit int
	// ConcludeTimeout bounds the final call that answers from what was gathered after
	// the loop stopped (repeats, iterations, deadline).
	ConcludeTimeout time.Duration
	// ManifestTimeout bounds the fetch of the knowledge base's manifest for the prompt;
	// past it the answer goes on without it.
	ManifestTimeout time.Duration
}

// RegisterFlags registers the loop flags with their defaults.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.IntVar(&c.T3MaxTokens, "t3-max-tokens", 1024, "max_tokens of a T3 (single LLM call) answer")
	fs.Float64Var(&c.T3Temperature, "t3-temperature", 0.3, "temperature of T3 calls")
	fs.IntVar(&c.T3MaxToolSteps, "t3-max-tool-steps", 3, "rounds of read_document calls a T3 answer may make before it must answer")
	fs.IntVar(&c.T4MaxTokens, "t4-max-tokens", 2048, "max_tokens of each T4 (agentic loop) call")
	fs.Float64Var(&c.T4Temperature, "t4-temperature", 0.5, "temperature of T4 calls")
	fs.IntVar(&c.T4MaxIterations, "t4-max-iterations", 50, "LLM calls with tools a T4 loop may make before it must answer")
	fs.DurationVar(&c.Deadline, "loop-deadline", 40*time.Second, "deadline of the tool-using part of a T3/T4 answer; then the model answers from what it gathered (keep it below the gateway's -agent-timeout; a caller's nearer deadline shortens it to two thirds of the caller's time)")
	// 8: room to read every result of a default search (-tool-search-limit 5) and
	// follow a few links in one turn, more than models that call tools in parallel
	// usually ask for; at the 50 iterations of T4 that is still at most 400 tool calls.
	fs.IntVar(&c.MaxToolCallsPerTurn, "loop-max-tool-calls-per-turn", 8, "tool calls run from one model turn (a T3 step or T4 iteration); the calls past it are not run but answered with an error naming the limit, so the model may ask again in its next turn (8: every result of a default search read, and a few more)")
	fs.IntVar(&c.RepeatLimit, "loop-repeat-limit", 2, "stop the loop when the same tool call with the same arguments is asked for this many times")
	fs.DurationVar(&c.ConcludeTimeout, "loop-conclude-timeout", 15*time.Second, "time for the final answer from what was gathered once the loop stopped")
	fs.DurationVar(&c.ManifestTimeout, "manifest-timeout", 2*time.Second, "time to fetch a knowledge base's manifest for the prompt (cached per content version); past it the answer is prompted without it, and for 10 s no fetch is tried")
}

// Validate rejects settings the loop cannot work with, naming the flag.
func (c *Config) Validate() error {
	var errs []error
	check := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	check(c.T3MaxTokens >= 1, "-t3-max-tokens must be at least 1, got %d", c.T3MaxTokens)
	check(c.T4MaxTokens >= 1, "-t4-max-tokens must be at least 1, got %d", c.T4MaxTokens)
	check(c.T3Temperature >= 0 && c.T3Temperature <= 2, "-t3-temperature must be in [0,2], got %g", c.T3Temperature)
	check(c.T4Temperature >= 0 && c.T4Temperature <= 2, "-t4-temperature must be in [0,2], got %g", c.T4Temperature)
	check(c.T3MaxToolSteps >= 0, "-t3-max-tool-steps must not be negative, got %d", c.T3MaxToolSteps)
	check(c.T4MaxIterations >= 1, "-t4-max-iterations must be at least 1, got %d", c.T4MaxIterations)
	check(c.Deadline > 0, "-loop-deadline must be positive, got %s", c.Deadline)
	check(c.MaxToolCallsPerTurn >= 1, "-loop-max-tool-calls-per-turn must be at least 1, got %d", c.MaxToolCallsPerTurn)
	check(c.RepeatLimit >= 2, "-loop-repeat-limit must be at least 2 (a call made once is not a repeat), got %d", c.RepeatLimit)
	check(c.ConcludeTimeout > 0, "-loop-conclude-timeout must be positive, got %s", c.ConcludeTimeout)
	check(c.ManifestTimeout > 0, "-manifest-timeout must be positive, got %s", c.ManifestTimeout)
	return errors.Join(errs...)
}

// DefaultConfig returns the flag defaults.
func DefaultConfig() Config {
	var c Config
	c.RegisterFlags(flag.NewFlagSet("loop", flag.ContinueOnError))
	return c
}
