package meili

import (
	"errors"
	"flag"
	"fmt"
	"net/url"
	"regexp"
	"time"
)

// Config says how to reach Meilisearch and how the indexes are set up.
type Config struct {
	// URL is the server, e.g. "http://127.0.0.1:7700".
	URL string
	// Key is the API key (the master key, or a key allowed to manage the indexes).
	Key string
	// IndexPrefix names the indexes: prefix + knowledge base id, so several deployments
	// can share one server.
	IndexPrefix string
	// TaskPoll is how often a write polls its task until Meilisearch has applied it.
	TaskPoll time.Duration
	// TaskTimeout bounds the wait for one task; a write whose task has not finished by
	// then fails (and is undone).
	TaskTimeout time.Duration
	// RequestTimeout bounds one HTTP request to Meilisearch, answer included (0: none).
	// A server that takes connections and never answers held a start, or any call
	// without a deadline of its own, for ever.
	RequestTimeout time.Duration
	// BatchSize is the number of documents sent per add request (and of ids per delete
	// request).
	BatchSize int
	// BatchBytes caps an add or delete request's body as well: Meilisearch refuses one
	// over its --http-payload-size-limit (100 MB by default), and a proxy in front of it
	// often allows less. A batch refused as too large anyway (HTTP 413) is sent in halves.
	BatchBytes int
	// Retries is how many times a request that changes or sets up an index (add and
	// delete documents, settings, the wait for a task) is sent again when the server
	// could not be reached or answered 429, 502, 503 or 504. Those requests are
	// idempotent: a document sent twice is stored once. Searches do not use it: queries
	// have short deadlines, and the gateway degrades when search fails, so a search is
	// sent once more at most, at once, and only when its connection failed or a proxy
	// had no upstream (see Index.Search).
	Retries int
	// RetryBackoff is the wait before the first retry; each retry waits twice as long
	// as the one before, at most maxBackoff.
	RetryBackoff time.Duration
	// OneTypo and TwoTypos are the shortest words (in characters) matched with one and
	// two typos. The embedded engine allows one typo from 5 characters and never two, and
	// only for words the index lacks; words it has are searched as exact phrases here too.
	OneTypo  int
	TwoTypos int
	// DefaultLimit caps hits when a query sets no limit.
	DefaultLimit int
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{
		IndexPrefix: "quarry_",
		TaskPoll:    10 * time.Millisecond,
		TaskTimeout: 2 * time.Minute,
		BatchSize:   1000,
		BatchBytes:  32 << 20,

		RequestTimeout: 30 * time.Second,
		Retries:        4,
		RetryBackoff:   200 * time.Millisecond,
		OneTypo:        5,
		TwoTypos:       255,
		DefaultLimit:   50,
	}
}

// RegisterFlags registers the settings with their defaults.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	d := DefaultConfig()
	fs.StringVar(&c.URL, "meili-url", d.URL, "Meilisearch URL, e.g. http://127.0.0.1:7700 (with -engine meilisearch)")
	fs.StringVar(&c.Key, "meili-key", d.Key, "Meilisearch API key (prefer the environment: QUARRY_SEARCH_MEILI_KEY)")
	fs.StringVar(&c.IndexPrefix, "meili-index-prefix", d.IndexPrefix, "prefix of the Meilisearch index of each knowledge base ([A-Za-z0-9_-])")
	fs.DurationVar(&c.TaskPoll, "meili-task-poll", d.TaskPoll, "how often a write polls its Meilisearch task")
	fs.DurationVar(&c.TaskTimeout, "meili-task-timeout", d.TaskTimeout, "longest wait for one Meilisearch task before the write fails")
	fs.DurationVar(&c.RequestTimeout, "meili-request-timeout", d.RequestTimeout, "longest one HTTP request to Meilisearch may take, its answer included (0: no bound)")
	fs.IntVar(&c.BatchSize, "meili-batch-size", d.BatchSize, "documents per Meilisearch add request (ids per delete request)")
	fs.IntVar(&c.BatchBytes, "meili-batch-bytes", d.BatchBytes, "largest body of a Meilisearch add or delete request, in bytes (below Meilisearch's --http-payload-size-limit and any proxy's; a batch refused as too large is halved)")
	fs.IntVar(&c.Retries, "meili-retries", d.Retries, "times a write request is retried when Meilisearch is unreachable or answers 429/502/503/504")
	fs.DurationVar(&c.RetryBackoff, "meili-retry-backoff", d.RetryBackoff, "wait before the first retry of a write request (doubling after each retry)")
	fs.IntVar(&c.OneTypo, "meili-one-typo", d.OneTypo, "shortest word (characters) matched with one typo")
	fs.IntVar(&c.TwoTypos, "meili-two-typos", d.TwoTypos, "shortest word (characters) matched with two typos (255: never)")
	fs.IntVar(&c.DefaultLimit, "meili-default-limit", d.DefaultLimit, "hits returned when a query sets no limit")
}

var prefixPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{0,64}$`)

// Validate rejects settings that cannot work, naming the flag.
func (c Config) Validate() error {
	var errs []error
	if c.URL == "" {
		errs = append(errs, errors.New("-meili-url is required with -engine meilisearch"))
	} else if u, err := url.Parse(c.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		errs = append(errs, fmt.Errorf("-meili-url must be an http(s) URL, got %q", c.URL))
	}
	if !prefixPattern.MatchString(c.IndexPrefix) {
		errs = append(errs, fmt.Errorf("-meili-index-prefix must be at most 64 of [A-Za-z0-9_-], got %q", c.IndexPrefix))
	}
	if c.TaskPoll <= 0 {
		errs = append(errs, fmt.Errorf("-meili-task-poll must be positive, got %v", c.TaskPoll))
	}
	if c.TaskTimeout <= 0 {
		errs = append(errs, fmt.Errorf("-meili-task-timeout must be positive, got %v", c.TaskTimeout))
	}
	if c.RequestTimeout < 0 {
		errs = append(errs, fmt.Errorf("-meili-request-timeout must not be negative, got %v", c.RequestTimeout))
	}
	if c.BatchSize < 1 {
		errs = append(errs, fmt.Errorf("-meili-batch-size must be >= 1, got %d", c.BatchSize))
	}
	if c.BatchBytes < 1 {
		errs = append(errs, fmt.Errorf("-meili-batch-bytes must be >= 1, got %d", c.BatchBytes))
	}
	if c.Retries < 0 {
		errs = append(errs, fmt.Errorf("-meili-retries must be >= 0, got %d", c.Retries))
	}
	if c.Retries > 0 && c.RetryBackoff <= 0 {
		errs = append(errs, fmt.Errorf("-meili-retry-backoff must be positive, got %v", c.RetryBackoff))
	}
	// Meilisearch stores both as one byte and wants oneTypo <= twoTypos.
	if c.OneTypo < 0 || c.OneTypo > 255 || c.TwoTypos < c.OneTypo || c.TwoTypos > 255 {
		errs = append(errs, fmt.Errorf("-meili-one-typo and -meili-two-typos must satisfy 0 <= one <= two <= 255, got %d and %d", c.OneTypo, c.TwoTypos))
	}
	if c.DefaultLimit < 1 {
		errs = append(errs, fmt.Errorf("-meili-default-limit must be >= 1, got %d", c.DefaultLimit))
	}
	return errors.Join(errs...)
}

// IndexUID returns the index of a knowledge base. Knowledge base ids are already
// [a-z0-9_-], which Meilisearch accepts; the prefix is validated.
func (c Config) IndexUID(kbID string) string { return c.IndexPrefix + kbID }
