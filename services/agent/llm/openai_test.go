package llm

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/quarry-router/quarry/services/agent/llm/llmtest"
	"github.com/quarry-router/quarry/services/agent/loop"
)

func testConfig(base string) Config {
	c := DefaultConfig()
	c.BaseURL, c.Model, c.APIKey = base, "scripted-model", "sk-test"
	c.Timeout = 2 * time.Second
	c.RetryBackoff, c.MaxRetryDelay = time.Millisecond, 50*time.Millisecond
	return c
}

func chatRequest() loop.ChatRequest {
	return loop.ChatRequest{
		Messages: []loop.Message{
			{Role: loop.RoleSystem, Content: "be brief"},
			{Role: loop.RoleUser, Content: "how do I rotate the key?"},
			{Role: loop.RoleAssistant, ToolCalls: []loop.ToolCall{{ID: "call_1", Name: "read_document", Arguments: `{"path":"a.md"}`}}},
			{Role: loop.RoleTool, ToolCallID: "call_1", Content: "path: a.md\n\nRotate weekly."},
		},
		Tools:       []loop.ToolSpec{{Name: "read_document", Description: "read one", Parameters: map[string]any{"type": "object", "properties": map[string]any{"path": map[string]any{"type": "string"}}}}},
		MaxTokens:   1024,
		Temperature: 0.3,
	}
}

func collect(t *testing.T) (func(string) error, *[]string) {
	t.Helper()
	var deltas []string
	return func(d string) error { deltas = append(deltas, d); return nil }, &deltas
}

func TestRequestsUseTheChatCompletionsWireFormat(t *testing.T) {
	srv := llmtest.New(t, llmtest.Turn{Content: "Rotate it weekly."})
	onDelta, _ := collect(t)
	if _, err := New(testConfig(srv.BaseURL())).Chat(context.Background(), chatRequest(), onDelta); err != nil {
		t.Fatal(err)
	}
	if p := srv.Problems(); len(p) > 0 {
		t.Fatalf("wire-format problems: %v", p)
	}
	req := srv.Requests()[0]
	if req.Model != "scripted-model" || req.MaxTokens == nil || *req.MaxTokens != 1024 || req.MaxCompletionTokens != nil {
		t.Errorf("model %q max_tokens %v max_completion_tokens %v", req.Model, req.MaxTokens, req.MaxCompletionTokens)
	}
	if req.Temperature == nil || *req.Temperature != 0.3 {
		t.Errorf("temperature %v, want 0.3", req.Temperature)
	}
	if !req.Stream || !req.IncludeUsage {
		t.Errorf("stream %v include_usage %v, want both", req.Stream, req.IncludeUsage)
	}
	if got := strings.Join(req.Roles(), ","); got != "system,user,assistant,tool" {
		t.Errorf("roles %s", got)
	}
	if tc := req.Messages[2].ToolCalls; len(tc) != 1 || tc[0].ID != "call_1" || tc[0].Function.Name != "read_document" || tc[0].Function.Arguments != `{"path":"a.md"}` {
		t.Errorf("assistant tool calls %+v", tc)
	}
	if req.Messages[3].ToolCallID != "call_1" || req.Messages[3].Text() != "path: a.md\n\nRotate weekly." {
		t.Errorf("tool message %+v", req.Messages[3])
	}
	if len(req.Tools) != 1 || req.Tools[0].Type != "function" || req.Tools[0].Function.Name != "read_document" || req.Tools[0].Function.Parameters["type"] != "object" {
		t.Errorf("tools %+v", req.Tools)
	}
	if req.Authorization != "Bearer sk-test" {
		t.Errorf("Authorization %q", req.Authorization)
	}
}

func TestMaxCompletionTokensFieldForReasoningModels(t *testing.T) {
	srv := llmtest.New(t, llmtest.Turn{Content: "ok"})
	cfg := testConfig(srv.BaseURL())
	cfg.MaxTokensField = "max_completion_tokens"
	onDelta, _ := collect(t)
	if _, err := New(cfg).Chat(context.Background(), chatRequest(), onDelta); err != nil {
		t.Fatal(err)
	}
	req := srv.Requests()[0]
	if req.MaxTokens != nil || req.MaxCompletionTokens == nil || *req.MaxCompletionTokens != 1024 {
		t.Errorf("max_tokens %v max_completion_tokens %v", req.MaxTokens, req.MaxCompletionTokens)
	}
}

func TestNoKeyMeansNoAuthorizationEvenWithOpenAIKeyInTheEnvironment(t *testing.T) {
	t.Setenv("OPENAI_API_KEY", "sk-must-not-leak")
	srv := llmtest.New(t, llmtest.Turn{Content: "ok"})
	cfg := testConfig(srv.BaseURL())
	cfg.APIKey = ""
	onDelta, _ := collect(t)
	if _, err := New(cfg).Chat(context.Background(), chatRequest(), onDelta); err != nil {
		t.Fatal(err)
	}
	if a := srv.Requests()[0].Authorization; a != "" {
		t.Errorf("Authorization %q sent without a configured key", a)
	}
}

func TestStreamedTurnsAreAccumulated(t *testing.T) {
	srv := llmtest.New(t,
		llmtest.Turn{Content: "Rotate the key every 90 days.", Chunks: 4, PromptTokens: 120, CompletionTokens: 9, Model: "served-model"},
		llmtest.Turn{ToolCalls: []llmtest.Call{{ID: "c1", Name: "search", Arguments: `{"query":"key rotation"}`}, {Name: "read_document", Arguments: `{"path":"auth/x.md"}`}}},
	)
	p := New(testConfig(srv.BaseURL()))
	onDelta, deltas := collect(t)
	resp, err := p.Chat(context.Background(), chatRequest(), onDelta)
	if err != nil {
		t.Fatal(err)
	}
	if len(*deltas) != 4 || strings.Join(*deltas, "") != resp.Content || resp.Content != "Rotate the key every 90 days." {
		t.Errorf("deltas %q, content %q", *deltas, resp.Content)
	}
	if resp.FinishReason != "stop" || resp.Model != "served-model" || resp.PromptTokens != 120 || resp.CompletionTokens != 9 || resp.Attempts != 1 {
		t.Errorf("response %+v", resp)
	}

	onDelta, deltas = collect(t)
	resp, err = p.Chat(context.Background(), chatRequest(), onDelta)
	if err != nil {
		t.Fatal(err)
	}
	want := []loop.ToolCall{{ID: "c1", Name: "search", Arguments: `{"query":"key rotation"}`}, {ID: "call_1", Name: "read_document", Arguments: `{"path":"auth/x.md"}`}}
	if len(resp.ToolCalls) != 2 || resp.ToolCalls[0] != want[0] || resp.ToolCalls[1] != want[1] || resp.FinishReason != "tool_calls" || len(*deltas) != 0 {
		t.Errorf("tool calls %+v finish %q deltas %q", resp.ToolCalls, resp.FinishReason, *deltas)
	}
}

func TestFailuresAreRetriedWithinBounds(t *testing.T) {
	hang := llmtest.Turn{Hang: true}
	tests := []struct {
		name        string
		turns       []llmtest.Turn
		timeout     time.Duration
		wantErr     string // "" for success
		wantAttempt int    // requests the server saw
	}{
		{"429 then success is retried", []llmtest.Turn{{Status: 429, RetryAfter: "0"}, {Content: "ok"}}, 0, "", 2},
		{"503 twice then success is retried", []llmtest.Turn{{Status: 503}, {Status: 503}, {Content: "ok"}}, 0, "", 3},
		{"a timeout is retried", []llmtest.Turn{hang, {Content: "ok"}}, 100 * time.Millisecond, "", 2},
		{"a stream that breaks before any text is retried", []llmtest.Turn{{ToolCalls: []llmtest.Call{{Name: "search", Arguments: `{"query":"x"}`}}, BreakAfter: 2}, {Content: "ok"}}, 0, "", 2},
		// Hugging Face TGI's error is a string, not an object.
		{"TGI's overloaded 429 is retried", []llmtest.Turn{{Status: 429, Body: `{"error":"Model is overloaded","error_type":"overloaded"}`}, {Content: "ok"}}, 0, "", 2},
		{"TGI's 503 twice is retried", []llmtest.Turn{{Status: 503, Body: `{"error":"Model is loading","error_type":"unhealthy"}`}, {Status: 503, Body: `{"error":"Model is loading"}`}, {Content: "ok"}}, 0, "", 3},
		{"TGI's 422 says its status and is not retried", []llmtest.Turn{{Status: 422, Body: `{"error":"Input validation error: temperature must be strictly positive","error_type":"validation"}`}, {Content: "never"}}, 0, "HTTP 422 Unprocessable Entity after 1 attempt", 1},
		{"a proxy's HTML 502 is retried", []llmtest.Turn{{Status: 502, Body: "<html>bad gateway</html>"}, {Content: "ok"}}, 0, "", 2},
		{"retries stop after -llm-max-retries", []llmtest.Turn{{Status: 500}, {Status: 500}, {Status: 500}, {Content: "never"}}, 0, "HTTP 500 Internal Server Error after 3 attempts", 3},
		{"timeouts stop after -llm-max-retries", []llmtest.Turn{hang, hang, hang}, 50 * time.Millisecond, "no complete answer within -llm-timeout (50ms) after 3 attempts", 3},
		{"a client error is not retried", []llmtest.Turn{{Status: 400}, {Content: "never"}}, 0, "HTTP 400 Bad Request after 1 attempt", 1},
		{"a bad key is not retried and says so", []llmtest.Turn{{Status: 401}}, 0, "HTTP 401 Unauthorized (check the API key)", 1},
		{"a Retry-After beyond the cap is not waited for", []llmtest.Turn{{Status: 429, RetryAfter: "120"}, {Content: "never"}}, 0, "longer than -llm-max-retry-delay", 1},
		// Converted as they were, these overflowed to a negative wait and were retried at once.
		{"a Retry-After too long for a time.Duration is not waited for", []llmtest.Turn{{Status: 429, RetryAfter: "99999999999"}, {Content: "never"}}, 0, "HTTP 429 Too Many Requests; the server asked to wait longer than -llm-max-retry-delay", 1},
		{"an infinite Retry-After is not waited for", []llmtest.Turn{{Status: 429, RetryAfter: "inf"}, {Content: "never"}}, 0, "HTTP 429 Too Many Requests; the server asked to wait longer than -llm-max-retry-delay", 1},
		{"a stream that breaks after text is not retried", []llmtest.Turn{{Content: "Rotate the key", Chunks: 3, BreakAfter: 2}, {Content: "never"}}, 0, "broke off after it had started", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := llmtest.New(t, tt.turns...)
			cfg := testConfig(srv.BaseURL())
			if tt.timeout > 0 {
				cfg.Timeout = tt.timeout
			}
			onDelta, _ := collect(t)
			resp, err := New(cfg).Chat(context.Background(), chatRequest(), onDelta)
			if got := len(srv.Requests()); got != tt.wantAttempt {
				t.Errorf("server saw %d requests, want %d", got, tt.wantAttempt)
			}
			if tt.wantErr == "" {
				if err != nil || resp.Content != "ok" || resp.Attempts != tt.wantAttempt {
					t.Fatalf("Chat = %+v, %v; want ok after %d attempts", resp, err, tt.wantAttempt)
				}
				return
			}
			var pe *loop.ProviderError
			if !errors.As(err, &pe) || !errors.Is(err, loop.ErrProvider) || !strings.Contains(pe.Summary, tt.wantErr) {
				t.Fatalf("Chat error %v, want a ProviderError saying %q", err, tt.wantErr)
			}
			if strings.Contains(pe.Summary, srv.URL) {
				t.Errorf("summary %q shows the endpoint's address to users", pe.Summary)
			}
		})
	}
}

// A retry whose wait would outlast the caller's deadline cannot be made: the call fails
// at once, saying what the server answered, rather than sleeping until the caller gives
// up and reporting only that time ran out.
func TestARetryPastTheCallersDeadlineIsNotWaitedFor(t *testing.T) {
	tests := []struct {
		name string
		turn llmtest.Turn
	}{
		{"a Retry-After past the deadline", llmtest.Turn{Status: 503, RetryAfter: "3"}},
		{"a backoff past the deadline", llmtest.Turn{Status: 503}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := llmtest.New(t, tt.turn, llmtest.Turn{Content: "never"})
			cfg := testConfig(srv.BaseURL())
			cfg.RetryBackoff, cfg.MaxRetryDelay = 3*time.Second, 4*time.Second
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			began := time.Now()
			_, err := New(cfg).Chat(ctx, chatRequest(), func(string) error { return nil })
			var pe *loop.ProviderError
			if !errors.As(err, &pe) || !strings.Contains(pe.Summary, "HTTP 503") {
				t.Fatalf("Chat error %v, want a ProviderError naming the HTTP 503", err)
			}
			if waited := time.Since(began); waited > 500*time.Millisecond {
				t.Errorf("Chat took %s, waiting for a retry it could not make", waited)
			}
			if n := len(srv.Requests()); n != 1 {
				t.Errorf("server saw %d requests, want 1", n)
			}
		})
	}
}

func TestCancellingTheCallerStopsTheRequest(t *testing.T) {
	srv := llmtest.New(t, llmtest.Turn{Hang: true})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		onDelta := func(string) error { return nil }
		_, err := New(testConfig(srv.BaseURL())).Chat(ctx, chatRequest(), onDelta)
		done <- err
	}()
	select {
	case <-srv.Received():
	case <-time.After(5 * time.Second):
		t.Fatal("the request never reached the server")
	}
	cancel()
	select {
	case req := <-srv.Canceled():
		if req != srv.Requests()[0] {
			t.Error("another request was cancelled")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the server never saw the request cancelled")
	}
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Chat after cancel: %v, want context.Canceled", err)
	}
	if n := len(srv.Requests()); n != 1 {
		t.Errorf("%d requests after cancel, want no retry", n)
	}
}

func TestADeltaErrorStopsTheCallUnchanged(t *testing.T) {
	srv := llmtest.New(t, llmtest.Turn{Content: "abcdef", Chunks: 3}, llmtest.Turn{Content: "never"})
	stop := errors.New("client gone")
	_, err := New(testConfig(srv.BaseURL())).Chat(context.Background(), chatRequest(), func(string) error { return stop })
	if !errors.Is(err, stop) || errors.Is(err, loop.ErrProvider) {
		t.Fatalf("err %v, want the delta error itself", err)
	}
	if n := len(srv.Requests()); n != 1 {
		t.Errorf("%d requests, want no retry", n)
	}
}

func TestConfigValidate(t *testing.T) {
	ok := DefaultConfig()
	if err := ok.Validate(); err != nil {
		t.Errorf("defaults (no provider) rejected: %v", err)
	}
	tests := []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"a base URL needs a model", func(c *Config) { c.BaseURL = "http://localhost:11434/v1" }, "-llm-model"},
		{"a base URL needs a scheme and host", func(c *Config) { c.BaseURL, c.Model = "localhost:11434", "m" }, "-llm-base-url"},
		{"the token field is one of two", func(c *Config) { c.MaxTokensField = "tokens" }, "-llm-max-tokens-field"},
		{"retries are bounded", func(c *Config) { c.MaxRetries = 100 }, "-llm-max-retries"},
		{"the timeout is positive", func(c *Config) { c.Timeout = 0 }, "-llm-timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			tt.edit(&c)
			if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err %v, want one naming %s", err, tt.want)
			}
		})
	}
}

func TestTheAPIKeyIsNeverLogged(t *testing.T) {
	c := DefaultConfig()
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	c.RegisterFlags(fs)
	if err := fs.Parse([]string{"-llm-base-url", "https://user:pass@llm.example/v1", "-llm-model", "m", "-llm-api-key", "sk-secret"}); err != nil {
		t.Fatal(err)
	}
	logged := c.LogValue().String()
	for _, secret := range []string{"sk-secret", "pass"} {
		if strings.Contains(logged, secret) {
			t.Errorf("log value %s holds %q", logged, secret)
		}
	}
	if d := c.Describe(); d != "LLM m at https://REDACTED@llm.example/v1" {
		t.Errorf("Describe() = %q", d)
	}
	if !strings.Contains(logged, "api_key_set=true") {
		t.Errorf("log value %s does not say a key is set", logged)
	}
}

func TestUnstreamedCallsForServersThatCannotStreamToolCalls(t *testing.T) {
	srv := llmtest.New(t,
		llmtest.Turn{Status: 503},
		llmtest.Turn{ToolCalls: []llmtest.Call{{ID: "c1", Name: "search", Arguments: `{"query":"x"}`}}, PromptTokens: 50, CompletionTokens: 4},
		llmtest.Turn{Content: "Rotate weekly."},
	)
	cfg := testConfig(srv.BaseURL())
	cfg.Stream = false
	p := New(cfg)
	onDelta, deltas := collect(t)
	resp, err := p.Chat(context.Background(), chatRequest(), onDelta)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.ToolCalls) != 1 || resp.ToolCalls[0].Name != "search" || resp.PromptTokens != 50 || resp.Attempts != 2 || len(*deltas) != 0 {
		t.Errorf("response %+v deltas %q", resp, *deltas)
	}
	if resp, err = p.Chat(context.Background(), chatRequest(), onDelta); err != nil || resp.Content != "Rotate weekly." || strings.Join(*deltas, "|") != "Rotate weekly." {
		t.Fatalf("response %+v, %v, deltas %q", resp, err, *deltas)
	}
	for _, req := range srv.Requests() {
		if req.Stream || req.IncludeUsage {
			t.Errorf("stream %v include_usage %v, want neither", req.Stream, req.IncludeUsage)
		}
	}
	if p := srv.Problems(); len(p) > 0 {
		t.Errorf("wire-format problems: %v", p)
	}
}

// sse writes a stream body of data lines, each event ended by a blank line.
func sse(events ...string) string {
	var b strings.Builder
	for _, e := range events {
		b.WriteString("data: " + e + "\n\n")
	}
	return b.String()
}

func TestStreamsAsCompatibleServersWriteThem(t *testing.T) {
	const id = `"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m"`
	tests := []struct {
		name                 string
		body                 string
		wantContent          string
		wantFinish           string
		wantCalls            []loop.ToolCall
		wantPrompt, wantComp int64
	}{
		{
			name: "data: without a space, CRLF line ends and keep-alive comments",
			body: ": keep-alive\r\n\r\n" +
				`data:{` + id + `,"choices":[{"index":0,"delta":{"role":"assistant","content":"Rot"},"finish_reason":null}]}` + "\r\n\r\n" +
				": keep-alive\r\n\r\n" +
				`data:{` + id + `,"choices":[{"index":0,"delta":{"content":"ate."},"finish_reason":"stop"}]}` + "\r\n\r\n" +
				"data:[DONE]\r\n\r\n",
			wantContent: "Rotate.", wantFinish: "stop",
		},
		{
			name: "tool-call deltas in pieces, usage only in a last chunk without choices",
			body: sse(
				`{`+id+`,"choices":[{"index":0,"delta":{"role":"assistant","tool_calls":[{"index":0,"id":"c1","type":"function","function":{"name":"sea","arguments":""}}]},"finish_reason":null}]}`,
				`{`+id+`,"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"name":"rch","arguments":"{\"query\":"}}]},"finish_reason":null}]}`,
				`{`+id+`,"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"jwt\"}"}}]},"finish_reason":null}]}`,
				`{`+id+`,"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"c2","type":"function","function":{"name":"read_document","arguments":"{\"path\":\"a.md\"}"}}]},"finish_reason":null}]}`,
				`{`+id+`,"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}`,
				`{`+id+`,"choices":[],"usage":{"prompt_tokens":70,"completion_tokens":12,"total_tokens":82}}`,
				`[DONE]`),
			wantFinish: "tool_calls", wantPrompt: 70, wantComp: 12,
			wantCalls: []loop.ToolCall{{ID: "c1", Name: "search", Arguments: `{"query":"jwt"}`}, {ID: "c2", Name: "read_document", Arguments: `{"path":"a.md"}`}},
		},
		{
			// Azure OpenAI's asynchronous content filter interleaves annotation chunks,
			// with no id and no delta, with the text, and sends one after the finish.
			name: "Azure content-filter annotations, one after the finish",
			body: sse(
				`{"id":"","object":"","created":0,"model":"","prompt_filter_results":[{"prompt_index":0,"content_filter_results":{}}],"choices":[]}`,
				`{`+id+`,"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}`,
				`{`+id+`,"choices":[{"index":0,"delta":{"content":"Rotate "},"finish_reason":null}]}`,
				`{"id":"","object":"","created":0,"model":"","choices":[{"index":0,"finish_reason":null,"content_filter_results":{"hate":{"filtered":false,"severity":"safe"}},"content_filter_offsets":{"check_offset":0,"start_offset":0,"end_offset":7}}]}`,
				`{`+id+`,"choices":[{"index":0,"delta":{"content":"weekly."},"finish_reason":null}]}`,
				`{`+id+`,"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`,
				`{"id":"","object":"","created":0,"model":"","choices":[{"index":0,"finish_reason":null,"content_filter_results":{"hate":{"filtered":false,"severity":"safe"}},"content_filter_offsets":{"check_offset":7,"start_offset":7,"end_offset":14}}]}`,
				`{`+id+`,"choices":[],"usage":{"prompt_tokens":30,"completion_tokens":4,"total_tokens":34}}`,
				`[DONE]`),
			wantContent: "Rotate weekly.", wantFinish: "stop", wantPrompt: 30, wantComp: 4,
		},
		{
			// Proxies in front of Anthropic models number calls by content block, so a
			// call after text is index 1: no empty call may stand in for index 0.
			name: "tool calls numbered from 1",
			body: sse(
				`{`+id+`,"choices":[{"index":0,"delta":{"role":"assistant","content":"Let me look."},"finish_reason":null}]}`,
				`{`+id+`,"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"toolu_1","type":"function","function":{"name":"search","arguments":""}}]},"finish_reason":null}]}`,
				`{`+id+`,"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"arguments":"{\"query\":\"jwt\"}"}}]},"finish_reason":null}]}`,
				`{`+id+`,"choices":[{"index":0,"delta":{"tool_calls":[{"index":3,"id":"toolu_2","type":"function","function":{"name":"read_document","arguments":"{\"path\":\"a.md\"}"}}]},"finish_reason":null}]}`,
				`{`+id+`,"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}`,
				`[DONE]`),
			wantContent: "Let me look.", wantFinish: "tool_calls",
			wantCalls: []loop.ToolCall{{ID: "toolu_1", Name: "search", Arguments: `{"query":"jwt"}`}, {ID: "toolu_2", Name: "read_document", Arguments: `{"path":"a.md"}`}},
		},
		{
			// Gemini sends no index; its calls must not run together into one.
			name: "tool calls without an index",
			body: sse(
				`{`+id+`,"choices":[{"index":0,"delta":{"role":"assistant","tool_calls":[{"id":"a","type":"function","function":{"name":"search","arguments":"{\"query\":\"jwt\"}"}},{"id":"b","type":"function","function":{"name":"read_document","arguments":"{\"path\":"}}]},"finish_reason":null}]}`,
				`{`+id+`,"choices":[{"index":0,"delta":{"tool_calls":[{"function":{"arguments":"\"a.md\"}"}}]},"finish_reason":null}]}`,
				`{`+id+`,"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`,
				`[DONE]`),
			wantFinish: "stop",
			wantCalls:  []loop.ToolCall{{ID: "a", Name: "search", Arguments: `{"query":"jwt"}`}, {ID: "b", Name: "read_document", Arguments: `{"path":"a.md"}`}},
		},
		{
			// Ollama (ollama/ollama#15457) numbers every call 0, each with its own id.
			name: "every tool call at index 0",
			body: sse(
				`{`+id+`,"choices":[{"index":0,"delta":{"role":"assistant","tool_calls":[{"index":0,"id":"call_x","type":"function","function":{"name":"search","arguments":"{\"query\":\"jwt\"}"}}]},"finish_reason":null}]}`,
				`{`+id+`,"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_y","type":"function","function":{"name":"read_document","arguments":"{\"path\":\"a.md\"}"}}]},"finish_reason":null}]}`,
				`{`+id+`,"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}`,
				`[DONE]`),
			wantFinish: "tool_calls",
			wantCalls:  []loop.ToolCall{{ID: "call_x", Name: "search", Arguments: `{"query":"jwt"}`}, {ID: "call_y", Name: "read_document", Arguments: `{"path":"a.md"}`}},
		},
		{
			// MiniMax behind NVIDIA NIM (NousResearch/hermes-agent#8259) and some
			// OpenAI models (open-webui/open-webui#22235) send the whole name again
			// with every delta of a call: run together it named no tool.
			name: "the name sent again with every delta of a call",
			body: sse(
				`{`+id+`,"choices":[{"index":0,"delta":{"role":"assistant","tool_calls":[{"index":0,"id":"c1","type":"function","function":{"name":"read_document","arguments":""}}]},"finish_reason":null}]}`,
				`{`+id+`,"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"name":"read_document","arguments":"{\"path\":"}}]},"finish_reason":null}]}`,
				`{`+id+`,"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c1","type":"function","function":{"name":"read_document","arguments":"\"a.md\"}"}}]},"finish_reason":null}]}`,
				`{`+id+`,"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"c2","type":"function","function":{"name":"search","arguments":"{\"query\":"}}]},"finish_reason":null}]}`,
				`{`+id+`,"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"name":"search","arguments":"\"jwt\"}"}}]},"finish_reason":null}]}`,
				`{`+id+`,"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}`,
				`[DONE]`),
			wantFinish: "tool_calls",
			wantCalls:  []loop.ToolCall{{ID: "c1", Name: "read_document", Arguments: `{"path":"a.md"}`}, {ID: "c2", Name: "search", Arguments: `{"query":"jwt"}`}},
		},
		{
			// LM Studio (NousResearch/hermes-agent#5254) gives every argument fragment
			// of one call an id of its own and no name: still one call.
			name: "a new id with every nameless delta of a call",
			body: sse(
				`{`+id+`,"choices":[{"index":0,"delta":{"role":"assistant","tool_calls":[{"index":0,"id":"f1","type":"function","function":{"name":"search","arguments":""}}]},"finish_reason":null}]}`,
				`{`+id+`,"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"f2","type":"function","function":{"arguments":"{\"query\":"}}]},"finish_reason":null}]}`,
				`{`+id+`,"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"f3","type":"function","function":{"arguments":"\"jwt\"}"}}]},"finish_reason":null}]}`,
				`{`+id+`,"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}`,
				`[DONE]`),
			wantFinish: "tool_calls",
			wantCalls:  []loop.ToolCall{{ID: "f3", Name: "search", Arguments: `{"query":"jwt"}`}},
		},
		{
			// Foundry Local (microsoft/foundry-local#144), llama.cpp server before
			// ggml-org/llama.cpp#5876 and proxies give each chunk an id of its own.
			name: "a new completion id in every chunk",
			body: sse(
				`{"id":"chat.id.1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"Rot"},"finish_reason":null}]}`,
				`{"id":"chat.id.2","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"ate."},"finish_reason":null}]}`,
				`{"id":"chat.id.3","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`,
				`{"id":"chat.id.4","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":2,"total_tokens":11}}`,
				`[DONE]`),
			wantContent: "Rotate.", wantFinish: "stop", wantPrompt: 9, wantComp: 2,
		},
		{
			// Gemini, OpenRouter and vLLM's continuous_usage_stats report usage more
			// than once; each report is the total so far, not an increment.
			name: "usage in every chunk, as running totals",
			body: sse(
				`{`+id+`,"choices":[{"index":0,"delta":{"role":"assistant","content":"Ro"},"finish_reason":null}],"usage":{"prompt_tokens":50,"completion_tokens":1,"total_tokens":51}}`,
				`{`+id+`,"choices":[{"index":0,"delta":{"content":"tate."},"finish_reason":null}],"usage":{"prompt_tokens":50,"completion_tokens":2,"total_tokens":52}}`,
				`{`+id+`,"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":50,"completion_tokens":3,"total_tokens":53}}`,
				`{`+id+`,"choices":[],"usage":{"prompt_tokens":50,"completion_tokens":3,"total_tokens":53}}`,
				`[DONE]`),
			wantContent: "Rotate.", wantFinish: "stop", wantPrompt: 50, wantComp: 3,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := llmtest.New(t, llmtest.Turn{SSE: tt.body}, llmtest.Turn{SSE: tt.body}, llmtest.Turn{SSE: tt.body})
			onDelta, deltas := collect(t)
			resp, err := New(testConfig(srv.BaseURL())).Chat(context.Background(), chatRequest(), onDelta)
			if err != nil {
				t.Fatalf("Chat: %v (after %d requests)", err, len(srv.Requests()))
			}
			if resp.Content != tt.wantContent || strings.Join(*deltas, "") != tt.wantContent || resp.FinishReason != tt.wantFinish || resp.Attempts != 1 {
				t.Errorf("content %q deltas %q finish %q attempts %d; want %q, %q, 1", resp.Content, *deltas, resp.FinishReason, resp.Attempts, tt.wantContent, tt.wantFinish)
			}
			if resp.PromptTokens != tt.wantPrompt || resp.CompletionTokens != tt.wantComp {
				t.Errorf("tokens %d/%d, want %d/%d", resp.PromptTokens, resp.CompletionTokens, tt.wantPrompt, tt.wantComp)
			}
			if len(resp.ToolCalls) != len(tt.wantCalls) {
				t.Fatalf("tool calls %+v, want %+v", resp.ToolCalls, tt.wantCalls)
			}
			for i := range tt.wantCalls {
				if resp.ToolCalls[i] != tt.wantCalls[i] {
					t.Errorf("tool call %d: %+v, want %+v", i, resp.ToolCalls[i], tt.wantCalls[i])
				}
			}
		})
	}
}

// Servers that have already answered 200 report a failure as an error event in the
// stream (OpenAI, OpenRouter, vLLM): before any text it is retried as the same status
// would be, and it is not when it says the request itself was wrong.
func TestErrorEventsInTheStream(t *testing.T) {
	ok := llmtest.Turn{Content: "ok"}
	tests := []struct {
		name        string
		event       string
		wantErr     string // "" for success after a retry
		wantAttempt int
	}{
		{"OpenAI's server_error is retried", `{"error":{"message":"The server had an error while processing your request.","type":"server_error","param":null,"code":null}}`, "", 2},
		{"a numeric 5xx code is retried", `{"error":{"message":"Provider returned error","code":502}}`, "", 2},
		{"a rate limit is retried", `{"error":{"message":"Rate limit reached","type":"rate_limit_exceeded","code":"rate_limit_exceeded"}}`, "", 2},
		// Hugging Face TGI: its status as http_status_code, or (older) the error a string.
		{"TGI's overloaded event is retried", `{"error":{"message":"Model is overloaded","http_status_code":429}}`, "", 2},
		{"TGI's older overloaded event is retried", `{"error":"Model is overloaded","error_type":"overloaded"}`, "", 2},
		{"TGI's validation event is not retried", `{"error":{"message":"Input validation error: top_p must be > 0.0 and < 1.0","http_status_code":422}}`, "the LLM reported an error in its stream (HTTP 422) after 1 attempt", 1},
		{"a bad request is not retried", `{"error":{"object":"error","message":"Expecting ',' delimiter: line 1 column 43 (char 42)","type":"BadRequestError","code":400}}`, "the LLM reported an error in its stream (HTTP 400) after 1 attempt", 1},
		{"a context-length refusal is not retried and says so", `{"error":{"object":"error","message":"This model's maximum context length is 4096 tokens","type":"BadRequestError","code":400}}`, "the LLM reported an error in its stream (HTTP 400) after 1 attempt: the conversation exceeds the model's context window", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := llmtest.New(t, llmtest.Turn{SSE: sse(tt.event, "[DONE]")}, ok)
			onDelta, _ := collect(t)
			resp, err := New(testConfig(srv.BaseURL())).Chat(context.Background(), chatRequest(), onDelta)
			if got := len(srv.Requests()); got != tt.wantAttempt {
				t.Errorf("server saw %d requests, want %d", got, tt.wantAttempt)
			}
			if tt.wantErr == "" {
				if err != nil || resp.Content != "ok" {
					t.Fatalf("Chat = %+v, %v; want ok after a retry", resp, err)
				}
				return
			}
			var pe *loop.ProviderError
			if !errors.As(err, &pe) || pe.Summary != tt.wantErr {
				t.Fatalf("Chat error %v, want a ProviderError saying %q", err, tt.wantErr)
			}
		})
	}
}

func TestAnEndpointThatRefusesStreamOptionsIsAskedWithout(t *testing.T) {
	tests := []struct {
		name   string
		status int
		body   string
		asked  bool // whether the refusal is about stream_options
	}{
		{"Azure OpenAI before 2024-09-01-preview", 400, `{"error":{"message":"Unrecognized request argument supplied: stream_options","type":"invalid_request_error","param":null,"code":null}}`, true},
		{"older vLLM, its error at the top level", 400, `{"object":"error","message":"[{'type': 'extra_forbidden', 'loc': ('body', 'stream_options'), 'msg': 'Extra inputs are not permitted'}]","type":"BadRequestError","param":null,"code":400}`, true},
		{"a FastAPI server's validation error", 422, `{"detail":[{"type":"extra_forbidden","loc":["body","stream_options"],"msg":"Extra inputs are not permitted"}]}`, true},
		{"an OpenAI-style error naming the field as its param", 400, `{"error":{"message":"Unknown parameter.","type":"invalid_request_error","param":"stream_options","code":"unknown_parameter"}}`, true},
		{"another bad request", 400, `{"error":{"message":"messages: too long","type":"invalid_request_error","param":"messages","code":null}}`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := llmtest.New(t, llmtest.Turn{Status: tt.status, Body: tt.body}, llmtest.Turn{Content: "ok"}, llmtest.Turn{Content: "ok again"})
			p := New(testConfig(srv.BaseURL()))
			onDelta, _ := collect(t)
			resp, err := p.Chat(context.Background(), chatRequest(), onDelta)
			if !tt.asked {
				var pe *loop.ProviderError
				if !errors.As(err, &pe) || !strings.Contains(pe.Summary, fmt.Sprintf("HTTP %d", tt.status)) || len(srv.Requests()) != 1 {
					t.Fatalf("Chat = %+v, %v after %d requests; want the refusal, not retried", resp, err, len(srv.Requests()))
				}
				return
			}
			if err != nil || resp.Content != "ok" || resp.Attempts != 2 {
				t.Fatalf("Chat = %+v, %v; want ok on the second request", resp, err)
			}
			if _, err := p.Chat(context.Background(), chatRequest(), onDelta); err != nil {
				t.Fatal(err)
			}
			reqs := srv.Requests()
			for i, want := range []bool{true, false, false} {
				if got := bytes.Contains(reqs[i].Raw, []byte(`"stream_options"`)); got != want || !reqs[i].Stream {
					t.Errorf("request %d: stream %v, stream_options sent %v, want %v", i+1, reqs[i].Stream, got, want)
				}
			}
		})
	}
}

// Learning that the endpoint refuses stream_options costs no retry: with
// -llm-max-retries 1, a server error after it is still retried once.
func TestTheStreamOptionsRefusalCostsNoRetry(t *testing.T) {
	azure := `{"error":{"message":"Unrecognized request argument supplied: stream_options","type":"invalid_request_error","param":null,"code":null}}`
	srv := llmtest.New(t, llmtest.Turn{Status: 400, Body: azure}, llmtest.Turn{Status: 503}, llmtest.Turn{Content: "ok"})
	cfg := testConfig(srv.BaseURL())
	cfg.MaxRetries = 1
	onDelta, _ := collect(t)
	resp, err := New(cfg).Chat(context.Background(), chatRequest(), onDelta)
	if err != nil || resp.Content != "ok" || resp.Attempts != 3 {
		t.Fatalf("Chat = %+v, %v; want ok after 3 requests (refusal, 503, success)", resp, err)
	}
}

// A conversation longer than the model's context window is refused the same way every
// time it is sent, so it is not retried (it would only spend -llm-max-retries): the
// error says so in the chain (loop.ErrContextLength), for the loop to shorten the
// conversation, and in its summary, for users — whichever server refused, in
// whichever shape, and however the call was made.
func TestContextLengthRefusalsAreRecognisedAndNotRetried(t *testing.T) {
	type shape struct {
		name   string
		turn   llmtest.Turn
		stream bool
	}
	var shapes []shape
	for _, r := range llmtest.ContextRefusals {
		shapes = append(shapes, shape{r.Name, r.Turn, true}, shape{r.Name + ", unstreamed", r.Turn, false})
	}
	// An error event in place of the first chunk, as vLLM sends what its engine
	// refuses after the stream has opened.
	shapes = append(shapes, shape{"vLLM, in the stream", llmtest.Turn{SSE: sse(`{"error":{"object":"error","message":"This model's maximum context length is 4096 tokens. However, you requested 4726 tokens (2678 in the messages, 2048 in the completion). Please reduce the length of the messages or completion.","type":"BadRequestError","param":null,"code":400}}`)}, true})
	for _, tt := range shapes {
		t.Run(tt.name, func(t *testing.T) {
			srv := llmtest.New(t, tt.turn, llmtest.Turn{Content: "never"})
			cfg := testConfig(srv.BaseURL())
			cfg.Stream = tt.stream
			onDelta, _ := collect(t)
			_, err := New(cfg).Chat(context.Background(), chatRequest(), onDelta)
			if n := len(srv.Requests()); n != 1 {
				t.Errorf("server saw %d requests, want 1: the same conversation is refused again", n)
			}
			var pe *loop.ProviderError
			if !errors.As(err, &pe) || !errors.Is(err, loop.ErrProvider) || !errors.Is(err, loop.ErrContextLength) {
				t.Fatalf("Chat error %v, want a ProviderError matching ErrProvider and ErrContextLength", err)
			}
			if !strings.Contains(pe.Summary, "context window") {
				t.Errorf("summary %q does not say the conversation is too long for the model", pe.Summary)
			}
		})
	}
	// Other refusals are not mistaken for it.
	for _, turn := range []llmtest.Turn{{Status: 400}, {Status: 500}, {Status: 400, Body: `{"error":{"message":"Invalid 'messages[3].content': string too long. Expected a string with maximum length 1048576, but got a string with length 2000000 instead.","type":"invalid_request_error","param":"messages[3].content","code":"string_above_max_length"}}`}} {
		srv := llmtest.New(t, turn)
		srv.Repeat(turn)
		cfg := testConfig(srv.BaseURL())
		cfg.MaxRetries = 0
		onDelta, _ := collect(t)
		if _, err := New(cfg).Chat(context.Background(), chatRequest(), onDelta); err == nil || errors.Is(err, loop.ErrContextLength) {
			t.Errorf("HTTP %d %s: error %v, want a failure that is not ErrContextLength", turn.Status, turn.Body, err)
		}
	}
}
