// Package llmtest is a scripted OpenAI-compatible chat-completions server for tests:
// it checks every request against the wire format (roles, tool-call pairing, tool
// schemas), replays scripted turns as real responses — server-sent event chunks with
// content, tool calls, finish reasons and usage, or HTTP errors — and records what it
// received.
package llmtest

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// Turn is one scripted response.
type Turn struct {
	// Status, when not 0 or 200, answers with this HTTP status and an OpenAI-style
	// error body.
	Status int
	// RetryAfter is sent as the Retry-After header of an error response.
	RetryAfter string
	// Body, when set, replaces the error response's JSON body: other servers' error
	// shapes, or a proxy's HTML.
	Body string
	// Content is the assistant text, streamed in Chunks pieces (default 3).
	Content string
	Chunks  int
	// ToolCalls the assistant asks for; their arguments are streamed in two pieces.
	ToolCalls []Call
	// FinishReason; default "tool_calls" when there are tool calls, else "stop".
	FinishReason string
	// Delay between the request's arrival and the response's start (a model thinking);
	// reading the request counts against it, so the delay is the model's fixed latency.
	Delay time.Duration
	// ChunkDelay between streamed chunks.
	ChunkDelay time.Duration
	// Hang never answers: the handler waits until the client gives up.
	Hang bool
	// BreakAfter, when > 0, ends the stream after this many chunks without a finish
	// reason or [DONE], as a dropped connection would.
	BreakAfter int
	// Usage reported in the final chunk; zero values are filled from the text sizes.
	PromptTokens, CompletionTokens int
	// Model reported in the chunks; default the requested model.
	Model string
	// SSE, when set, is the whole streamed response body, sent as it is in pieces of a
	// few bytes, each flushed, so that lines arrive split across reads: for the ways
	// real servers stream that the scripted chunks do not cover.
	SSE string
}

// Call is a scripted tool call.
type Call struct {
	ID, Name, Arguments string
}

// Request is one request the server received, decoded.
type Request struct {
	Model               string
	MaxTokens           *int
	MaxCompletionTokens *int
	Temperature         *float64
	Stream              bool
	IncludeUsage        bool
	Messages            []Message
	Tools               []Tool
	ToolChoice          json.RawMessage
	Authorization       string
	// RemoteAddr is the client's address: one per connection, so that tests can see
	// whether connections are reused.
	RemoteAddr string
	// Raw is the request body as sent.
	Raw json.RawMessage
	// Canceled is closed when the client abandoned the request before the response
	// was complete.
	Canceled chan struct{}
	once     sync.Once

	done   chan struct{} // closed when the response has ended
	served time.Duration
}

// ServerTime waits for the response to the request to end and returns the time the
// server spent on it, from the request's arrival to the response's last byte: the
// model's share of a call's latency.
func (r *Request) ServerTime() time.Duration {
	<-r.done
	return r.served
}

// Message is one message of a request.
type Message struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	ToolCalls  []WireToolCall  `json:"tool_calls"`
	ToolCallID string          `json:"tool_call_id"`
}

// Text returns the message content as text (string content, or text parts joined).
func (m Message) Text() string {
	var s string
	if json.Unmarshal(m.Content, &s) == nil {
		return s
	}
	var parts []struct {
		Text string `json:"text"`
	}
	_ = json.Unmarshal(m.Content, &parts)
	var b strings.Builder
	for _, p := range parts {
		b.WriteString(p.Text)
	}
	return b.String()
}

// WireToolCall is a tool call as the chat-completions format writes it.
type WireToolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// Tool is a tool offered in a request.
type Tool struct {
	Type     string `json:"type"`
	Function struct {
		Name        string         `json:"name"`
		Description string         `json:"description"`
		Parameters  map[string]any `json:"parameters"`
	} `json:"function"`
}

// ToolNames lists the offered tools' names.
func (r *Request) ToolNames() []string {
	out := make([]string, len(r.Tools))
	for i, t := range r.Tools {
		out[i] = t.Function.Name
	}
	return out
}

// Roles lists the messages' roles.
func (r *Request) Roles() []string {
	out := make([]string, len(r.Messages))
	for i, m := range r.Messages {
		out[i] = m.Role
	}
	return out
}

// Server is the scripted endpoint. Its zero value is not usable; call New.
type Server struct {
	*httptest.Server

	mu       sync.Mutex
	script   []Turn
	repeat   *Turn
	requests []*Request
	problems []string
	received chan *Request
	canceled chan *Request
	// limit, when > 0, refuses every request whose body is longer, with refusal.
	limit   int
	refusal Turn
}

// New starts a server that answers with turns, in order, and closes it when the test
// ends.
func New(t testing.TB, turns ...Turn) *Server {
	s := &Server{script: turns, received: make(chan *Request, 1024), canceled: make(chan *Request, 64)}
	s.Server = httptest.NewServer(http.HandlerFunc(s.handle))
	t.Cleanup(s.Close)
	return s
}

// BaseURL is the API base URL to configure clients with.
func (s *Server) BaseURL() string { return s.URL + "/v1" }

// Script replaces the turns still to be served.
func (s *Server) Script(turns ...Turn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.script = turns
}

// Repeat makes the server answer turn whenever the script is used up.
func (s *Server) Repeat(turn Turn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.repeat = &turn
}

// LimitContext makes the server refuse every request whose body is longer than limit
// bytes with refusal (one of ContextRefusals), as a server refuses a conversation that
// does not fit its model's context window; refused requests are recorded but use no
// scripted turn. 0 lifts the limit.
func (s *Server) LimitContext(limit int, refusal Turn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.limit, s.refusal = limit, refusal
}

// ContextRefusals are the ways OpenAI-compatible servers refuse a conversation longer
// than the model's context window, as they send them.
var ContextRefusals = []struct {
	Name string
	Turn Turn
}{
	{"OpenAI", Turn{Status: http.StatusBadRequest, Body: `{"error":{"message":"This model's maximum context length is 8192 tokens. However, your messages resulted in 8227 tokens. Please reduce the length of the messages.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`}},
	// vLLM's own error object, at the top level of the body (older releases) or under
	// "error"; the "decoder prompt" one comes from its engine's own check.
	{"vLLM", Turn{Status: http.StatusBadRequest, Body: `{"object":"error","message":"This model's maximum context length is 4096 tokens. However, you requested 4726 tokens (2678 in the messages, 2048 in the completion). Please reduce the length of the messages or completion.","type":"BadRequestError","param":null,"code":400}`}},
	{"vLLM under error", Turn{Status: http.StatusBadRequest, Body: `{"error":{"object":"error","message":"This model's maximum context length is 4096 tokens. However, you requested 2048 output tokens and your prompt contains at least 2049 input tokens, for a total of at least 4097 tokens.","type":"BadRequestError","param":null,"code":400}}`}},
	{"vLLM engine", Turn{Status: http.StatusBadRequest, Body: `{"object":"error","message":"The decoder prompt (length 4120) is longer than the maximum model length of 4096. Make sure that ` + "`max_model_len`" + ` is no smaller than the number of text tokens.","type":"BadRequestError","param":null,"code":400}`}},
	{"llama.cpp server", Turn{Status: http.StatusBadRequest, Body: `{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error","n_prompt_tokens":4390,"n_ctx":4096}}`}},
	// llama.cpp server answered this one with HTTP 500 until late 2025.
	{"llama.cpp server, older", Turn{Status: http.StatusInternalServerError, Body: `{"error":{"code":500,"message":"the request exceeds the available context size. try increasing the context size or enable context shift","type":"exceed_context_size_error","n_prompt_tokens":1407,"n_ctx":256}}`}},
	// Hugging Face TGI answers 422 with "error" a string, not an object, for the prompt
	// and the completion together or the prompt alone.
	{"TGI", Turn{Status: http.StatusUnprocessableEntity, Body: "{\"error\":\"Input validation error: `inputs` tokens + `max_new_tokens` must be <= 4096. Given: 3900 `inputs` tokens and 1024 `max_new_tokens`\",\"error_type\":\"validation\"}"}},
	{"TGI, prompt alone", Turn{Status: http.StatusUnprocessableEntity, Body: "{\"error\":\"Input validation error: `inputs` must have less than 4095 tokens. Given: 4210\",\"error_type\":\"validation\"}"}},
	{"SGLang", Turn{Status: http.StatusBadRequest, Body: `{"object":"error","message":"Requested token count exceeds the model's maximum context length of 4096 tokens. You requested a total of 5120 tokens: 4096 tokens from the input messages and 1024 tokens for the completion.","type":"BadRequestError","param":null,"code":400}`}},
	{"Together", Turn{Status: http.StatusBadRequest, Body: `{"error":{"message":"The input (9120 tokens) is longer than the model's context length (8192 tokens).","type":"invalid_request_error","param":null,"code":null}}`}},
	{"Mistral", Turn{Status: http.StatusBadRequest, Body: `{"object":"error","message":"Prompt contains 40000 tokens and 0 draft tokens, too large for model with 32768 maximum context length","type":"invalid_request_message_error","param":null,"code":"3051"}`}},
	// Gemini's OpenAI-compatible endpoint answers with Google's error list.
	{"Gemini", Turn{Status: http.StatusBadRequest, Body: `[{"error":{"code":400,"message":"The input token count (1300000) exceeds the maximum number of tokens allowed (1048576).","status":"INVALID_ARGUMENT"}}]`}},
	{"Anthropic", Turn{Status: http.StatusBadRequest, Body: `{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 210000 tokens > 200000 maximum"}}`}},
	{"xAI", Turn{Status: http.StatusBadRequest, Body: `{"code":"Client specified an invalid argument","error":"This model's maximum prompt length is 131072 but the request contains 137812 tokens."}`}},
	{"LM Studio", Turn{Status: http.StatusBadRequest, Body: `{"error":"Trying to keep the first 5000 tokens when context the overflows. However, the model is loaded with context length of only 4096 tokens, which is not enough. Try to load the model with a larger context length, or provide a shorter input"}`}},
}

// Requests returns the requests received so far.
func (s *Server) Requests() []*Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*Request(nil), s.requests...)
}

// Reset forgets the requests received so far.
func (s *Server) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests, s.problems = nil, nil
}

// Remaining is the number of scripted turns not served yet.
func (s *Server) Remaining() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.script)
}

// Problems lists the wire-format violations seen in requests (each was answered with
// HTTP 400) and requests that arrived with the script used up.
func (s *Server) Problems() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.problems...)
}

// Received delivers each request as it arrives (the first 1024 not taken are kept).
func (s *Server) Received() <-chan *Request { return s.received }

// Canceled delivers each request whose client went away before its response was
// complete.
func (s *Server) Canceled() <-chan *Request { return s.canceled }

func (s *Server) handle(w http.ResponseWriter, r *http.Request) {
	arrived := time.Now()
	if r.Method != http.MethodPost || r.URL.Path != "/v1/chat/completions" {
		s.problem(w, http.StatusNotFound, fmt.Sprintf("%s %s: only POST /v1/chat/completions is served", r.Method, r.URL.Path))
		return
	}
	req, err := decode(r)
	if err != nil {
		s.problem(w, http.StatusBadRequest, err.Error())
		return
	}
	req.RemoteAddr = r.RemoteAddr
	defer func() {
		req.served = time.Since(arrived)
		close(req.done)
	}()
	s.mu.Lock()
	s.requests = append(s.requests, req)
	s.mu.Unlock()
	select {
	case s.received <- req:
	default:
	}
	if problem := check(req); problem != "" {
		s.problem(w, http.StatusBadRequest, problem)
		return
	}
	s.mu.Lock()
	if s.limit > 0 && len(req.Raw) > s.limit {
		refusal := s.refusal
		s.mu.Unlock()
		s.respond(w, r, req, refusal)
		return
	}
	var turn Turn
	switch {
	case len(s.script) > 0:
		turn, s.script = s.script[0], s.script[1:]
	case s.repeat != nil:
		turn = *s.repeat
	default:
		s.mu.Unlock()
		s.problem(w, http.StatusInternalServerError, "script used up: unexpected request")
		return
	}
	s.mu.Unlock()
	turn.Delay -= time.Since(arrived)
	s.respond(w, r, req, turn)
}

func (s *Server) problem(w http.ResponseWriter, status int, msg string) {
	s.mu.Lock()
	s.problems = append(s.problems, msg)
	s.mu.Unlock()
	writeError(w, status, msg, "")
}

func writeError(w http.ResponseWriter, status int, msg, retryAfter string) {
	w.Header().Set("Content-Type", "application/json")
	if retryAfter != "" {
		w.Header().Set("Retry-After", retryAfter)
	}
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{
		"message": msg, "type": "scripted_error", "param": nil, "code": nil,
	}})
}

// cancel records that the client of req went away.
func (s *Server) cancel(req *Request) {
	req.once.Do(func() {
		close(req.Canceled)
		select {
		case s.canceled <- req:
		default:
		}
	})
}

// spinMargin is how long before a delay's end wait stops sleeping and spins: the Go
// runtime's poller sleeps in whole milliseconds, so a timer alone wakes up to a
// millisecond late.
const spinMargin = 2 * time.Millisecond

// wait sleeps d unless the client goes away first; it reports whether it is still there.
// It ends on time, not up to a millisecond late as a timer alone would, and by as much
// as the reading of the request left of the millisecond: a fixed model latency that
// grew with the request's size charged the client's benchmark with the server's own
// decoding (BenchmarkLLMOverhead: +0.35 ms for a 14 KB prompt against a small one).
func (s *Server) wait(r *http.Request, req *Request, d time.Duration) bool {
	deadline := time.Now().Add(d)
	if d > spinMargin {
		t := time.NewTimer(d - spinMargin)
		defer t.Stop()
		select {
		case <-t.C:
		case <-r.Context().Done():
			return s.gone(req)
		}
	}
	for time.Now().Before(deadline) {
		if r.Context().Err() != nil {
			return s.gone(req)
		}
		runtime.Gosched()
	}
	return r.Context().Err() == nil || s.gone(req)
}

func (s *Server) gone(req *Request) bool {
	s.cancel(req)
	return false
}

func (s *Server) respond(w http.ResponseWriter, r *http.Request, req *Request, turn Turn) {
	if turn.Hang {
		select {
		case <-r.Context().Done():
			s.cancel(req)
		case <-time.After(time.Minute):
		}
		return
	}
	if !s.wait(r, req, turn.Delay) {
		return
	}
	if turn.Status != 0 && turn.Status != http.StatusOK {
		if turn.Body != "" {
			ct := "text/html"
			if json.Valid([]byte(turn.Body)) {
				ct = "application/json"
			}
			w.Header().Set("Content-Type", ct)
			w.WriteHeader(turn.Status)
			_, _ = fmt.Fprint(w, turn.Body)
			return
		}
		writeError(w, turn.Status, fmt.Sprintf("scripted HTTP %d", turn.Status), turn.RetryAfter)
		return
	}
	model := turn.Model
	if model == "" {
		model = req.Model
	}
	finish := turn.FinishReason
	if finish == "" {
		finish = "stop"
		if len(turn.ToolCalls) > 0 {
			finish = "tool_calls"
		}
	}
	prompt, completion := turn.PromptTokens, turn.CompletionTokens
	if prompt == 0 {
		prompt = len(req.Raw) / 4
	}
	if completion == 0 {
		completion = max(1, len(turn.Content)/4)
		for _, c := range turn.ToolCalls {
			completion += len(c.Arguments) / 4
		}
	}
	if !req.Stream {
		writeCompletion(w, model, turn, finish, prompt, completion)
		return
	}
	if turn.SSE != "" {
		writeSSE(w, turn.SSE)
		return
	}

	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	sent := 0
	send := func(v any) bool {
		if turn.BreakAfter > 0 && sent >= turn.BreakAfter {
			return false
		}
		if sent > 0 && !s.wait(r, req, turn.ChunkDelay) {
			return false
		}
		b, _ := json.Marshal(v)
		if _, err := fmt.Fprintf(w, "data: %s\n\n", b); err != nil {
			return s.gone(req)
		}
		if flusher != nil {
			flusher.Flush()
		}
		sent++
		return true
	}
	chunk := func(delta map[string]any, finish any) map[string]any {
		return map[string]any{
			"id": "chatcmpl-scripted", "object": "chat.completion.chunk", "created": time.Now().Unix(), "model": model,
			"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": nil}},
		}
	}
	if !send(chunk(map[string]any{"role": "assistant", "content": ""}, nil)) {
		return
	}
	for _, piece := range split(turn.Content, turn.Chunks) {
		if !send(chunk(map[string]any{"content": piece}, nil)) {
			return
		}
	}
	for i, c := range turn.ToolCalls {
		id := c.ID
		if id == "" {
			id = fmt.Sprintf("call_%d", i)
		}
		args := split(c.Arguments, 2)
		if len(args) == 0 {
			args = []string{""}
		}
		first := map[string]any{"index": i, "id": id, "type": "function", "function": map[string]any{"name": c.Name, "arguments": args[0]}}
		if !send(chunk(map[string]any{"tool_calls": []any{first}}, nil)) {
			return
		}
		for _, a := range args[1:] {
			if !send(chunk(map[string]any{"tool_calls": []any{map[string]any{"index": i, "function": map[string]any{"arguments": a}}}}, nil)) {
				return
			}
		}
	}
	if !send(chunk(map[string]any{}, finish)) {
		return
	}
	if req.IncludeUsage {
		usage := map[string]any{
			"id": "chatcmpl-scripted", "object": "chat.completion.chunk", "created": time.Now().Unix(), "model": model,
			"choices": []any{}, "usage": map[string]any{"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion},
		}
		if !send(usage) {
			return
		}
	}
	if _, err := fmt.Fprint(w, "data: [DONE]\n\n"); err == nil && flusher != nil {
		flusher.Flush()
	}
}

// writeSSE sends body as a text/event-stream in pieces of 7 bytes.
func writeSSE(w http.ResponseWriter, body string) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	for i := 0; i < len(body); i += 7 {
		if _, err := fmt.Fprint(w, body[i:min(i+7, len(body))]); err != nil {
			return
		}
		if flusher != nil {
			flusher.Flush()
		}
	}
}

func writeCompletion(w http.ResponseWriter, model string, turn Turn, finish string, prompt, completion int) {
	msg := map[string]any{"role": "assistant", "content": turn.Content}
	if len(turn.ToolCalls) > 0 {
		var calls []any
		for i, c := range turn.ToolCalls {
			id := c.ID
			if id == "" {
				id = fmt.Sprintf("call_%d", i)
			}
			calls = append(calls, map[string]any{"id": id, "type": "function", "function": map[string]any{"name": c.Name, "arguments": c.Arguments}})
		}
		msg["tool_calls"] = calls
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{
		"id": "chatcmpl-scripted", "object": "chat.completion", "created": time.Now().Unix(), "model": model,
		"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finish, "logprobs": nil}},
		"usage":   map[string]any{"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion},
	})
}

// split cuts s into about n pieces at rune boundaries.
func split(s string, n int) []string {
	if s == "" {
		return nil
	}
	if n <= 0 {
		n = 3
	}
	runes := []rune(s)
	size := max(1, (len(runes)+n-1)/n)
	var out []string
	for i := 0; i < len(runes); i += size {
		out = append(out, string(runes[i:min(i+size, len(runes))]))
	}
	return out
}

// decode reads a chat-completions request.
func decode(r *http.Request) (*Request, error) {
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		return nil, fmt.Errorf("Content-Type %q, want application/json", ct)
	}
	var body struct {
		Model               string          `json:"model"`
		MaxTokens           *int            `json:"max_tokens"`
		MaxCompletionTokens *int            `json:"max_completion_tokens"`
		Temperature         *float64        `json:"temperature"`
		Stream              bool            `json:"stream"`
		StreamOptions       json.RawMessage `json:"stream_options"`
		Messages            []Message       `json:"messages"`
		Tools               []Tool          `json:"tools"`
		ToolChoice          json.RawMessage `json:"tool_choice"`
	}
	var raw json.RawMessage
	if err := json.NewDecoder(r.Body).Decode(&raw); err != nil {
		return nil, fmt.Errorf("body is not JSON: %v", err)
	}
	if err := json.Unmarshal(raw, &body); err != nil {
		return nil, fmt.Errorf("body does not match the chat-completions request: %v", err)
	}
	if !body.Stream && len(body.StreamOptions) > 0 && string(body.StreamOptions) != "null" {
		return nil, errors.New("stream_options is only allowed with stream: true")
	}
	var so struct {
		IncludeUsage bool `json:"include_usage"`
	}
	_ = json.Unmarshal(body.StreamOptions, &so)
	return &Request{
		Model: body.Model, MaxTokens: body.MaxTokens, MaxCompletionTokens: body.MaxCompletionTokens,
		Temperature: body.Temperature, Stream: body.Stream, IncludeUsage: so.IncludeUsage,
		Messages: body.Messages, Tools: body.Tools, ToolChoice: body.ToolChoice,
		Authorization: r.Header.Get("Authorization"), Raw: raw, Canceled: make(chan struct{}), done: make(chan struct{}),
	}, nil
}

// check enforces what real servers reject: a model, known roles, assistant tool calls
// each answered by a tool message with its id before the next turn, no tool message
// without its call, and tools whose parameters are JSON schema objects.
func check(req *Request) string {
	if req.Model == "" {
		return "model is required"
	}
	if len(req.Messages) == 0 {
		return "messages must not be empty"
	}
	pending := map[string]bool{}
	for i, m := range req.Messages {
		switch m.Role {
		case "system", "developer", "user":
			if len(pending) > 0 {
				return fmt.Sprintf("message %d (%s): tool calls %v have no tool message", i, m.Role, keys(pending))
			}
		case "assistant":
			if len(pending) > 0 {
				return fmt.Sprintf("message %d (assistant): tool calls %v have no tool message", i, keys(pending))
			}
			for _, tc := range m.ToolCalls {
				if tc.ID == "" || tc.Type != "function" || tc.Function.Name == "" {
					return fmt.Sprintf("message %d: tool call %+v needs id, type function and a name", i, tc)
				}
				var args map[string]any
				if err := json.Unmarshal([]byte(tc.Function.Arguments), &args); err != nil {
					return fmt.Sprintf("message %d: tool call %s arguments are not a JSON object: %q", i, tc.ID, tc.Function.Arguments)
				}
				pending[tc.ID] = true
			}
		case "tool":
			if !pending[m.ToolCallID] {
				return fmt.Sprintf("message %d: tool message for %q answers no pending call", i, m.ToolCallID)
			}
			delete(pending, m.ToolCallID)
		default:
			return fmt.Sprintf("message %d: unknown role %q", i, m.Role)
		}
	}
	if len(pending) > 0 {
		return fmt.Sprintf("the chat ends with tool calls %v unanswered", keys(pending))
	}
	for _, t := range req.Tools {
		if t.Type != "function" || t.Function.Name == "" {
			return fmt.Sprintf("tool %+v: want type function and a name", t)
		}
		if t.Function.Parameters["type"] != "object" {
			return fmt.Sprintf("tool %s: parameters must be a JSON schema of type object", t.Function.Name)
		}
	}
	return ""
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
