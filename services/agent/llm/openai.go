// Package llm calls any OpenAI-compatible chat-completions endpoint (OpenAI, Azure
// OpenAI, vLLM, Ollama, llama.cpp server, ...) through the official openai-go client:
// streamed answers, tool calls and bounded retries.
package llm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/ssestream"
	"github.com/quarry-router/quarry/platform/text"
	"github.com/quarry-router/quarry/services/agent/loop"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
)

// OpenAI is a loop.Provider for an OpenAI-compatible endpoint.
type OpenAI struct {
	cfg     Config
	client  openai.Client
	server  []attribute.KeyValue // server.address and port of cfg.BaseURL
	metrics instruments
	// noUsage is set once the endpoint has refused stream_options, the field that asks
	// for token counts in a streamed answer (see refusesStreamOptions).
	noUsage atomic.Bool
}

var _ loop.Provider = (*OpenAI)(nil)

// New returns a provider for cfg.BaseURL. opts go to the client after Quarry's own
// (tests pass an HTTP client).
func New(cfg Config, opts ...option.RequestOption) *OpenAI {
	base := []option.RequestOption{
		option.WithBaseURL(cfg.BaseURL),
		// Set even when empty, so an OPENAI_API_KEY in the environment is never sent
		// to a server the configuration did not name.
		option.WithAPIKey(cfg.APIKey),
		// The client retries only the opening of a stream and never a timed-out
		// attempt; Chat retries whole calls itself (see retryable).
		option.WithMaxRetries(0),
		// One span per HTTP call to the model, in the query's trace, with the W3C
		// trace context passed on (an instrumented LLM gateway continues the trace).
		option.WithHTTPClient(&http.Client{Transport: otelhttp.NewTransport(http.DefaultTransport)}),
		option.WithMiddleware(errorObject),
	}
	return &OpenAI{cfg: cfg, client: openai.NewClient(append(base, opts...)...), server: server(cfg.BaseURL), metrics: newInstruments()}
}

// errBrokenStream means a stream ended before the model finished its turn.
var errBrokenStream = errors.New("stream ended before the turn finished")

// errBadChunk means the server sent a chunk the accumulator could not take.
var errBadChunk = errors.New("malformed stream chunk")

// deltaError carries the error of the caller's onDelta out of the stream unchanged.
type deltaError struct{ err error }

func (e deltaError) Error() string { return e.err.Error() }
func (e deltaError) Unwrap() error { return e.err }

// Chat implements loop.Provider. Each attempt reads the whole turn within
// Config.Timeout; an attempt that fails with a rate limit, a server error, a timeout
// or a dropped connection before any text was passed on is retried after a backoff
// (doubling from RetryBackoff, capped by MaxRetryDelay, Retry-After honoured within the
// cap), at most MaxRetries times. Failures come back as *loop.ProviderError.
func (p *OpenAI) Chat(ctx context.Context, req loop.ChatRequest, onDelta func(string) error) (resp *loop.ChatResponse, err error) {
	ctx, span := p.startChat(ctx, req)
	defer func(began time.Time) { p.endChat(ctx, span, began, resp, err) }(time.Now())
	return p.chat(ctx, req, onDelta)
}

func (p *OpenAI) chat(ctx context.Context, req loop.ChatRequest, onDelta func(string) error) (*loop.ChatResponse, error) {
	usage := p.cfg.Stream && !p.noUsage.Load()
	body, err := p.body(req, usage)
	if err != nil {
		return nil, &loop.ProviderError{Summary: "the request could not be encoded", Err: err}
	}
	// failed counts the attempts that failed in a way -llm-max-retries bounds; the one
	// that learns the endpoint refuses stream_options is not among them.
	failed := 0
	for attempt := 1; ; attempt++ {
		resp, emitted, err := p.attempt(ctx, body, onDelta)
		if err == nil {
			resp.Attempts = attempt
			return resp, nil
		}
		var de deltaError
		if errors.As(err, &de) {
			return nil, de.err
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if usage && refusesStreamOptions(err) {
			// Asked again at once without the field, and never again with it: the
			// answers still stream, without token counts unless the server sends them.
			if p.noUsage.CompareAndSwap(false, true) {
				slog.WarnContext(ctx, "the LLM endpoint refuses stream_options; streamed answers will carry no token counts", "endpoint", redact(p.cfg.BaseURL))
			}
			usage = false
			if body, err = p.body(req, false); err != nil {
				return nil, &loop.ProviderError{Summary: "the request could not be encoded", Err: err}
			}
			continue
		}
		retry, what, _ := classify(err, p.cfg)
		if emitted {
			return nil, &loop.ProviderError{Summary: "the answer stream broke off after it had started", Err: err}
		}
		if contextLength(err) {
			// The same conversation would be refused again: no retry. The loop
			// shortens it and calls again.
			return nil, &loop.ProviderError{Summary: fmt.Sprintf("%s after %s: %s", what, text.Count(attempt, "attempt", "attempts"), tooLong), Err: contextError{err}}
		}
		failed++
		if !retry || failed > p.cfg.MaxRetries {
			return nil, &loop.ProviderError{Summary: fmt.Sprintf("%s after %s", what, text.Count(attempt, "attempt", "attempts")), Err: err}
		}
		delay, ok := p.delay(err, failed)
		if !ok {
			return nil, &loop.ProviderError{Summary: what + "; the server asked to wait longer than -llm-max-retry-delay", Err: err}
		}
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= delay {
			// The retry could not start before the caller's deadline: waiting for it
			// would only hold the answer until then and report "no answer in time" in
			// place of what the server said. The loop degrades now, with the cause.
			return nil, &loop.ProviderError{Summary: fmt.Sprintf("%s after %s; no time left to retry", what, text.Count(attempt, "attempt", "attempts")), Err: err}
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}

// attempt makes one request for a turn with the JSON body (see body). emitted reports
// whether any text reached onDelta.
func (p *OpenAI) attempt(ctx context.Context, body []byte, onDelta func(string) error) (resp *loop.ChatResponse, emitted bool, err error) {
	actx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	// The client's params stay empty: the body replaces what it would encode from them.
	withBody := option.WithRequestBody("application/json", body)
	if !p.cfg.Stream {
		return p.whole(ctx, actx, withBody, onDelta)
	}
	stream := p.client.Chat.Completions.NewStreaming(actx, openai.ChatCompletionNewParams{}, withBody)
	defer stream.Close()
	var (
		acc   openai.ChatCompletionAccumulator
		calls toolSlots
		usage openai.CompletionUsage
		id    string
	)
	for stream.Next() {
		chunk := stream.Current()
		if empty(chunk) {
			continue
		}
		// Some servers give each chunk an id of its own (Foundry Local, llama.cpp
		// server before 2024-03, proxies); the accumulator refuses a chunk whose id is
		// not the stream's, which would break off an answer already streaming. The id
		// names nothing Quarry uses: every chunk takes the first one.
		if id == "" {
			id = chunk.ID
		}
		chunk.ID = id
		if u := chunk.Usage; u.PromptTokens != 0 || u.CompletionTokens != 0 || u.TotalTokens != 0 {
			// Each report is the turn's total so far (Gemini and vLLM's
			// continuous_usage_stats send one in every chunk, OpenRouter more than
			// one), not an increment: the last one counts, where the accumulator
			// would add them up.
			usage = u
		}
		calls.renumber(&chunk)
		if !acc.AddChunk(chunk) {
			return nil, emitted, errBadChunk
		}
		for _, c := range chunk.Choices {
			if c.Index != 0 {
				continue
			}
			for _, text := range []string{c.Delta.Content, c.Delta.Refusal} {
				if text == "" {
					continue
				}
				emitted = true
				if err := onDelta(text); err != nil {
					return nil, emitted, deltaError{err}
				}
			}
		}
	}
	finished := len(acc.Choices) > 0 && acc.Choices[0].FinishReason != ""
	if err := stream.Err(); err != nil {
		if actx.Err() != nil && ctx.Err() == nil {
			// The attempt's own timeout, whatever layer noticed it first.
			return nil, emitted, fmt.Errorf("%w: %w", context.DeadlineExceeded, err)
		}
		// After the finish reason only the usage chunk and [DONE] were still to come:
		// a connection lost then (a proxy or load balancer closing it early) has cost
		// nothing of the turn, and failing it would throw away a whole streamed answer
		// or pay for the same tool calls again. The usage is then missing, as from a
		// server that never sends it. An error the server itself sent is never this.
		if !finished || actx.Err() != nil || !transportBreak(err) {
			return nil, emitted, err
		}
		slog.DebugContext(ctx, "the LLM stream broke off after the turn finished; the turn is kept", "error", err)
	}
	if !finished {
		return nil, emitted, errBrokenStream
	}
	acc.Usage = usage
	return p.turn(&acc.ChatCompletion), emitted, nil
}

// transportBreak reports whether a stream failed because its connection did, not
// because of anything the server sent: the body cut short (io.ErrUnexpectedEOF, as a
// chunked or TLS stream closed mid-way reads), or the connection reset or aborted. An
// error event (*ssestream.StreamError) or a chunk that cannot be decoded is the
// server's word and is not one; nor is an attempt that ran out of time or was
// cancelled (context errors are net.Errors too).
func transportBreak(err error) bool {
	var streamErr *ssestream.StreamError
	var apiErr *openai.Error
	if errors.As(err, &streamErr) || errors.As(err, &apiErr) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return false
	}
	var netErr net.Error
	return errors.Is(err, io.ErrUnexpectedEOF) || errors.As(err, &netErr) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNABORTED) || errors.Is(err, syscall.EPIPE)
}

// toolSlots numbers the tool calls of a streamed turn 0, 1, 2... in the order they
// start, the positions the accumulator files them under. Servers number them
// otherwise: from 1 or with gaps (proxies of Anthropic models number content blocks),
// all 0 (Ollama), or not at all (Gemini, read as 0). The accumulator would leave an
// empty call in each gap, which the loop would then run, or merge every call into
// one, names and arguments run together. A delta continues the call its index last
// started unless it starts another: it has a name, and an id other than that call's.
// Some servers send a call's whole name again with each of its deltas (MiniMax behind
// NVIDIA NIM, some OpenAI models); the accumulator appends names as it does arguments,
// so such a name is dropped from the delta rather than run together into one that
// names no tool ("searchsearch").
type toolSlots struct {
	slot  map[int64]int64 // the server's index -> position of the call it last started
	ids   []string        // the id of the call at each position, once known
	names []string        // the name of the call at each position, as accumulated
}

// renumber rewrites the tool-call indices of the chunk's first choice, the one read.
func (s *toolSlots) renumber(c *openai.ChatCompletionChunk) {
	for i := range c.Choices {
		if c.Choices[i].Index != 0 {
			continue
		}
		for j := range c.Choices[i].Delta.ToolCalls {
			tc := &c.Choices[i].Delta.ToolCalls[j]
			pos, ok := s.slot[tc.Index]
			if !ok || tc.ID != "" && tc.Function.Name != "" && s.ids[pos] != "" && s.ids[pos] != tc.ID {
				if s.slot == nil {
					s.slot = map[int64]int64{}
				}
				pos = int64(len(s.ids))
				s.slot[tc.Index] = pos
				s.ids = append(s.ids, "")
				s.names = append(s.names, "")
			}
			if tc.ID != "" {
				s.ids[pos] = tc.ID
			}
			if name := tc.Function.Name; name != "" && name == s.names[pos] {
				tc.Function.Name = "" // sent again whole, not the next piece of it
			}
			s.names[pos] += tc.Function.Name
			tc.Index = pos
		}
	}
}

// empty reports whether a chunk holds nothing of the turn: no text, tool call, finish
// reason or usage. Azure OpenAI's content-filter annotations are such chunks; they have
// no id, and one may come after the finish, so the accumulator would refuse it (an id
// that is not the stream's) or let its null finish_reason clear the turn's, and a
// finished answer would count as a broken stream.
func empty(c openai.ChatCompletionChunk) bool {
	if c.Usage.PromptTokens != 0 || c.Usage.CompletionTokens != 0 || c.Usage.TotalTokens != 0 {
		return false
	}
	for _, ch := range c.Choices {
		if ch.Delta.Content != "" || ch.Delta.Refusal != "" || len(ch.Delta.ToolCalls) > 0 || ch.FinishReason != "" {
			return false
		}
	}
	return true
}

// whole makes an unstreamed request and passes the turn's text on in one piece.
func (p *OpenAI) whole(ctx, actx context.Context, withBody option.RequestOption, onDelta func(string) error) (*loop.ChatResponse, bool, error) {
	c, err := p.client.Chat.Completions.New(actx, openai.ChatCompletionNewParams{}, withBody)
	if err != nil {
		if actx.Err() != nil && ctx.Err() == nil {
			return nil, false, fmt.Errorf("%w: %w", context.DeadlineExceeded, err)
		}
		return nil, false, err
	}
	if len(c.Choices) == 0 || c.Choices[0].FinishReason == "" {
		return nil, false, errBrokenStream
	}
	resp := p.turn(c)
	if resp.Content == "" {
		return resp, false, nil
	}
	if err := onDelta(resp.Content); err != nil {
		return nil, true, deltaError{err}
	}
	return resp, true, nil
}

// turn reads the first choice of a completion.
func (p *OpenAI) turn(c *openai.ChatCompletion) *loop.ChatResponse {
	choice := c.Choices[0]
	resp := &loop.ChatResponse{
		Content:          choice.Message.Content,
		FinishReason:     choice.FinishReason,
		Model:            c.Model,
		PromptTokens:     c.Usage.PromptTokens,
		CompletionTokens: c.Usage.CompletionTokens,
	}
	if resp.Content == "" {
		resp.Content = choice.Message.Refusal
	}
	if resp.Model == "" {
		resp.Model = p.cfg.Model
	}
	for _, tc := range choice.Message.ToolCalls {
		resp.ToolCalls = append(resp.ToolCalls, loop.ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments})
	}
	return resp
}

// classify says whether a failed attempt is worth another, names the failure in words
// safe to show users, and gives its kind in a few values, the error.type of the call's
// span and metrics: the HTTP status the server answered with, or what kind of failure.
func classify(err error, cfg Config) (retry bool, what, kind string) {
	var apiErr *openai.Error
	var streamErr *ssestream.StreamError
	var netErr net.Error
	switch {
	case errors.As(err, &apiErr):
		code := apiErr.StatusCode
		what = fmt.Sprintf("HTTP %d %s", code, http.StatusText(code))
		switch code {
		case http.StatusUnauthorized, http.StatusForbidden:
			what += " (check the API key)"
		case http.StatusNotFound:
			what += " (check -llm-base-url and -llm-model)"
		}
		return retryableStatus(code), what, strconv.Itoa(code)
	case errors.As(err, &streamErr):
		code, transient := streamFailure(streamErr.Event.Data)
		what, kind = "the LLM reported an error in its stream", "stream_error"
		if code != 0 {
			what, kind = fmt.Sprintf("%s (HTTP %d)", what, code), strconv.Itoa(code)
			transient = retryableStatus(code)
		}
		return transient, what, kind
	case errors.Is(err, context.DeadlineExceeded):
		return true, fmt.Sprintf("no complete answer within -llm-timeout (%s)", cfg.Timeout), "timeout"
	case errors.Is(err, errBrokenStream), errors.Is(err, io.ErrUnexpectedEOF):
		return true, "the answer stream broke off", "broken_stream"
	case errors.As(err, &netErr):
		return true, "could not connect to the endpoint", "connection"
	case errors.Is(err, errBadChunk):
		return false, "the LLM sent a malformed stream", "broken_stream"
	default:
		return false, "the LLM's response could not be read", "_OTHER"
	}
}

// refusesStreamOptions reports whether a request failed because the endpoint does not
// know stream_options: Azure OpenAI before API version 2024-09-01-preview ("Unrecognized
// request argument supplied: stream_options"), and servers that refuse unknown fields,
// such as older vLLM (400, its error at the top level of the body, not under "error")
// and other FastAPI servers (422). Any other refusal of the request stays an error.
func refusesStreamOptions(err error) bool {
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusBadRequest && apiErr.StatusCode != http.StatusUnprocessableEntity {
		return false
	}
	const field = "stream_options"
	if apiErr.Param == field || strings.Contains(apiErr.Message, field) {
		return true
	}
	return strings.Contains(errorBody(apiErr), field)
}

// errorBody returns the body of a refused request (the client puts it back on the
// response for errors it read), and puts it back again for the next reader.
func errorBody(apiErr *openai.Error) string {
	if apiErr.Response == nil || apiErr.Response.Body == nil {
		return ""
	}
	b, _ := io.ReadAll(io.LimitReader(apiErr.Response.Body, 64<<10))
	apiErr.Response.Body = io.NopCloser(bytes.NewReader(b))
	return string(b)
}

// ErrContextLength is loop.ErrContextLength: a failed Chat matches it when the endpoint
// refused the conversation as too long for the model's context window.
var ErrContextLength = loop.ErrContextLength

// contextError is a context-length refusal: it matches ErrContextLength and keeps the
// server's error in the chain.
type contextError struct{ err error }

func (e contextError) Error() string   { return e.err.Error() }
func (e contextError) Unwrap() []error { return []error{ErrContextLength, e.err} }

// tooLong is what users are told of a context-length refusal.
const tooLong = "the conversation exceeds the model's context window"

// contextMarkers are the words, lower-cased, by which servers say a request does not
// fit the model's context window (prompt and max_tokens together):
//
//   - OpenAI and Azure OpenAI: 400, error.code "context_length_exceeded", "This model's
//     maximum context length is 8192 tokens. However, your messages resulted in ...";
//   - vLLM: 400 with its error object at the top level of the body (older releases) or
//     under "error", "This model's maximum context length is 4096 tokens. However, you
//     requested 4726 tokens (3726 in the messages, 1000 in the completion)..." (newer:
//     "... you requested 2048 output tokens and your prompt contains at least ..."), and
//     from its engine "The decoder prompt (length N) is longer than the maximum model
//     length of M";
//   - llama.cpp server: error.type "exceed_context_size_error", "the request exceeds the
//     available context size, try increasing it" (HTTP 500 before late 2025, 400 since),
//     and older "Context size has been exceeded." (500);
//   - Hugging Face TGI: 422, "Input validation error: `inputs` tokens + `max_new_tokens`
//     must be <= 4096. Given: ..." or "`inputs` must have less than 4095 tokens";
//   - SGLang: "Requested token count exceeds the model's maximum context length of N";
//   - Together: "The input (N tokens) is longer than the model's context length (M)";
//   - Mistral: "Prompt contains N tokens ..., too large for model with M maximum context
//     length";
//   - Gemini: "The input token count (N) exceeds the maximum number of tokens allowed";
//   - Anthropic: "prompt is too long: N tokens > M maximum";
//   - xAI: "This model's maximum prompt length is N but the request contains M tokens";
//   - LM Studio: "... the model is loaded with context length of only N tokens".
//
// Ollama cuts the prompt to fit without a word, so it never refuses.
var contextMarkers = []string{
	"context_length_exceeded",
	"maximum context length",
	"longer than the maximum model length",
	"exceed_context_size_error",
	"exceeds the available context size",
	"context size has been exceeded",
	"`inputs` tokens + `max_new_tokens` must be",
	"`inputs` must have less than",
	"is longer than the model's context length",
	"too large for model with",
	"exceeds the maximum number of tokens allowed",
	"prompt is too long",
	"maximum prompt length is",
	"context length of only",
}

// contextLength reports whether a request was refused, with an HTTP error or an error
// event in its stream, because the conversation does not fit the model's context
// window. Sending it again unchanged would be refused again.
func contextLength(err error) bool {
	var text string
	var apiErr *openai.Error
	var streamErr *ssestream.StreamError
	switch {
	case errors.As(err, &apiErr):
		if apiErr.StatusCode < 400 {
			return false
		}
		text = apiErr.Code + " " + apiErr.Type + " " + apiErr.Message + " " + errorBody(apiErr)
	case errors.As(err, &streamErr):
		text = string(streamErr.Event.Data)
	default:
		return false
	}
	text = strings.ToLower(text)
	for _, m := range contextMarkers {
		if strings.Contains(text, m) {
			return true
		}
	}
	return false
}

// retryableStatus reports whether another attempt may get past an HTTP status: a
// timeout, a conflict, a rate limit or a server error.
func retryableStatus(code int) bool {
	return code == http.StatusRequestTimeout || code == http.StatusConflict ||
		code == http.StatusTooManyRequests || code >= 500
}

// streamFailure reads an error event a server sent in its stream after answering 200,
// in place of a chunk: the HTTP status its code names, when numeric (vLLM, OpenRouter),
// and whether its type or code says the server failed or is busy (OpenAI sends
// "server_error" with no code), which another attempt may get past.
func streamFailure(data []byte) (status int, transient bool) {
	var ev struct {
		Error struct {
			Type string          `json:"type"`
			Code json.RawMessage `json:"code"`
			// Hugging Face TGI names the status in a field of its own.
			HTTPStatus int `json:"http_status_code"`
		} `json:"error"`
	}
	if json.Unmarshal(reshapeError(data), &ev) != nil {
		return 0, false
	}
	if n := ev.Error.HTTPStatus; n >= 100 && n <= 599 {
		return n, false
	}
	code := string(ev.Error.Code)
	var s string
	if json.Unmarshal(ev.Error.Code, &s) == nil {
		code = s
	}
	if n, err := strconv.Atoi(code); err == nil && n >= 100 && n <= 599 {
		return n, false
	}
	for _, word := range []string{"server_error", "rate_limit", "overloaded"} {
		if strings.Contains(ev.Error.Type, word) || strings.Contains(code, word) {
			return 0, true
		}
	}
	return 0, false
}

// delay is the wait before retry number attempt (1-based): Retry-After when the server
// sent one, else the doubling backoff, both within MaxRetryDelay. ok is false when the
// server asks for more than that.
func (p *OpenAI) delay(err error, attempt int) (d time.Duration, ok bool) {
	var apiErr *openai.Error
	if errors.As(err, &apiErr) && apiErr.Response != nil {
		if ra, found := retryAfter(apiErr.Response.Header); found {
			return ra, ra <= p.cfg.MaxRetryDelay
		}
	}
	d = p.cfg.RetryBackoff << (attempt - 1)
	if d <= 0 || d > p.cfg.MaxRetryDelay {
		d = p.cfg.MaxRetryDelay
	}
	// Up to a quarter less, so that callers who failed together retry apart.
	if j := int64(d / 4); j > 0 {
		d -= time.Duration(rand.Int64N(j))
	}
	return d, true
}

// retryAfter reads Retry-After-Ms or Retry-After (seconds, or an HTTP date). A wait
// too long for a time.Duration (+Inf, 1e300) comes back as the longest one, so that it
// is over any cap: converted as it is, it would overflow to a negative wait, under the
// cap, and be retried at once. NaN and negative values are unreadable, as garbage is.
func retryAfter(h http.Header) (time.Duration, bool) {
	if v := h.Get("Retry-After-Ms"); v != "" {
		if d, ok := duration(v, time.Millisecond); ok {
			return d, true
		}
	}
	v := h.Get("Retry-After")
	if v == "" {
		return 0, false
	}
	if d, ok := duration(v, time.Second); ok {
		return d, true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(time.Until(t), 0), true
	}
	return 0, false
}

// duration reads a number of units, saturating at the longest time.Duration.
func duration(v string, unit time.Duration) (time.Duration, bool) {
	n, err := strconv.ParseFloat(v, 64)
	if errors.Is(err, strconv.ErrRange) {
		err = nil // out of float64's range: n is ±Inf, read below like "inf"
	}
	if err != nil || math.IsNaN(n) || n < 0 {
		return 0, false
	}
	// Compared in units, before multiplying: the product is what overflows.
	if n >= float64(math.MaxInt64/int64(unit)) {
		return math.MaxInt64, true
	}
	return time.Duration(n * float64(unit)), true
}
