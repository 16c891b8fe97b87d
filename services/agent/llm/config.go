package llm

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Config says which OpenAI-compatible endpoint to call and how patiently.
type Config struct {
	// BaseURL of the chat-completions API, e.g. https://api.openai.com/v1 or
	// http://localhost:11434/v1 (Ollama). Empty: no provider, T3/T4 answers degrade.
	BaseURL string
	// Model to ask, e.g. gpt-4o-mini, llama3.1:8b.
	Model string
	// APIKey sent as a bearer token; never logged. Local servers ignore it.
	APIKey string
	// Timeout bounds one attempt of one call, the whole streamed answer included.
	Timeout time.Duration
	// MaxRetries is the number of retries after a first failed attempt, for rate
	// limits (429), server errors (5xx), timeouts and dropped connections, as long as
	// no answer text has been passed on.
	MaxRetries int
	// RetryBackoff is the wait before the first retry; it doubles for each next one.
	RetryBackoff time.Duration
	// MaxRetryDelay caps one wait, Retry-After included: a server that asks for a
	// longer wait gets no retry.
	MaxRetryDelay time.Duration
	// Stream asks for server-sent events, so that answers reach users as they are
	// written. Off, each call waits for the whole turn: for servers that cannot stream
	// tool calls (Ollama before 0.8).
	Stream bool
	// MaxTokensField names the request field that carries the token limit:
	// "max_tokens" (understood by every compatible server) or "max_completion_tokens"
	// (required by OpenAI's reasoning models).
	MaxTokensField string
}

// RegisterFlags registers the provider flags with their defaults.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.BaseURL, "llm-base-url", "", `OpenAI-compatible API base URL, e.g. https://api.openai.com/v1 or http://localhost:11434/v1 ("" = no LLM: T3/T4 answers are extractive, marked degraded)`)
	fs.StringVar(&c.Model, "llm-model", "", "model name, e.g. gpt-4o-mini or llama3.1:8b (required with -llm-base-url)")
	fs.StringVar(&c.APIKey, "llm-api-key", "", "API key sent as a bearer token (prefer the environment: QUARRY_AGENT_LLM_API_KEY); never logged")
	fs.DurationVar(&c.Timeout, "llm-timeout", 30*time.Second, "deadline of one attempt of one LLM call, streamed answer included")
	fs.IntVar(&c.MaxRetries, "llm-max-retries", 2, "retries of a call that failed with 429, 5xx, a timeout or a dropped connection before any text arrived")
	fs.DurationVar(&c.RetryBackoff, "llm-retry-backoff", 500*time.Millisecond, "wait before the first retry; doubles for each next one")
	fs.DurationVar(&c.MaxRetryDelay, "llm-max-retry-delay", 4*time.Second, "longest wait before a retry, Retry-After included (a server asking for longer gets no retry)")
	fs.BoolVar(&c.Stream, "llm-stream", true, "stream answers as they are written (false for servers that cannot stream tool calls, e.g. Ollama before 0.8)")
	fs.StringVar(&c.MaxTokensField, "llm-max-tokens-field", "max_tokens", `request field carrying the token limit: max_tokens or max_completion_tokens`)
}

// Validate rejects settings the provider cannot work with, naming the flag.
func (c *Config) Validate() error {
	var errs []error
	if c.BaseURL != "" {
		u, err := url.Parse(c.BaseURL)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("-llm-base-url %q: %w", redact(c.BaseURL), parseReason(c.BaseURL, err)))
		case u.Scheme != "http" && u.Scheme != "https" || u.Host == "":
			errs = append(errs, fmt.Errorf("-llm-base-url %q: want http(s)://host[:port]/path", redact(c.BaseURL)))
		}
		if c.Model == "" {
			errs = append(errs, errors.New("-llm-model must be set with -llm-base-url"))
		}
	}
	if c.Timeout <= 0 {
		errs = append(errs, fmt.Errorf("-llm-timeout must be positive, got %s", c.Timeout))
	}
	if c.MaxRetries < 0 || c.MaxRetries > 10 {
		errs = append(errs, fmt.Errorf("-llm-max-retries must be in [0,10], got %d", c.MaxRetries))
	}
	if c.RetryBackoff <= 0 || c.MaxRetryDelay <= 0 {
		errs = append(errs, fmt.Errorf("-llm-retry-backoff and -llm-max-retry-delay must be positive, got %s and %s", c.RetryBackoff, c.MaxRetryDelay))
	}
	if c.MaxTokensField != "max_tokens" && c.MaxTokensField != "max_completion_tokens" {
		errs = append(errs, fmt.Errorf("-llm-max-tokens-field must be max_tokens or max_completion_tokens, got %q", c.MaxTokensField))
	}
	return errors.Join(errs...)
}

// Enabled reports whether a provider is configured.
func (c Config) Enabled() bool { return c.BaseURL != "" }

// DefaultConfig returns the flag defaults.
func DefaultConfig() Config {
	var c Config
	c.RegisterFlags(flag.NewFlagSet("llm", flag.ContinueOnError))
	return c
}

// Describe names the model and endpoint for people, credentials left out.
func (c Config) Describe() string {
	if !c.Enabled() {
		return "no LLM"
	}
	return fmt.Sprintf("LLM %s at %s", c.Model, redact(c.BaseURL))
}

// LogValue keeps the API key, and any credentials in the URL, out of the logs.
func (c Config) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("base_url", redact(c.BaseURL)),
		slog.String("model", c.Model),
		slog.Bool("api_key_set", c.APIKey != ""),
		slog.Duration("timeout", c.Timeout),
		slog.Int("max_retries", c.MaxRetries),
	)
}

// redact drops user information from a URL.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return redactText(raw)
	}
	if u.User != nil {
		u.User = url.User("REDACTED")
	}
	return u.String()
}

// redactText drops user information from a URL that does not parse, so that it can
// still be shown: everything up to the last '@' after the scheme. A password with an
// unescaped '/', '?' or '#' is dropped whole too (url.Parse would take its tail for the
// host), and so is the host when an '@' follows it: more is left out, never less.
func redactText(raw string) string {
	at := strings.LastIndex(raw, "@")
	if at < 0 {
		return raw
	}
	start := 0
	if i := strings.Index(raw[:at], "://"); i >= 0 {
		start = i + len("://")
	}
	return raw[:start] + "REDACTED" + raw[at:]
}

// quoted matches the %q pieces of an error's text.
var quoted = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)

// parseReason is why url.Parse refused raw, without raw: its *url.Error quotes the
// URL whole, user:password@ included, and Validate's errors are printed at startup.
// The reason may still quote the piece it stopped at ("invalid URL escape \"%zz\"",
// "invalid port \":44x\" after host"), which is in the password when the password is
// what is malformed; a piece the redacted URL does not show is left out.
func parseReason(raw string, err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	shown := redactText(raw)
	scrubbed := false
	msg := quoted.ReplaceAllStringFunc(err.Error(), func(q string) string {
		if s, uerr := strconv.Unquote(q); uerr == nil && strings.Contains(shown, s) {
			return q
		}
		scrubbed = true
		return "(in the user information, not shown)"
	})
	if scrubbed {
		return errors.New(msg)
	}
	return err
}
