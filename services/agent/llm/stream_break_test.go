package llm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/packages/ssestream"
	"github.com/quarry-router/quarry/services/agent/loop"
)

// cutServer answers each request with the next of bodies, streamed and flushed a
// line at a time, and then drops the connection without ending the chunked body, as
// a proxy or load balancer that closes it early does: the client reads
// io.ErrUnexpectedEOF. It counts the requests it saw.
func cutServer(t *testing.T, bodies ...string) (*httptest.Server, func() int) {
	t.Helper()
	var mu sync.Mutex
	n := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		mu.Lock()
		body := bodies[min(n, len(bodies)-1)]
		n++
		mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		for _, line := range strings.SplitAfter(body, "\n\n") {
			_, _ = io.WriteString(w, line)
			w.(http.Flusher).Flush()
		}
		conn, _, err := w.(http.Hijacker).Hijack()
		if err != nil {
			t.Errorf("hijack: %v", err)
			return
		}
		_ = conn.Close()
	}))
	t.Cleanup(srv.Close)
	return srv, func() int { mu.Lock(); defer mu.Unlock(); return n }
}

// chunk is one streamed chat-completion chunk of choice 0.
func chunk(delta map[string]any, finish any) string {
	b, _ := json.Marshal(map[string]any{
		"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m",
		"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish}},
	})
	return string(b)
}

// TestAStreamCutAfterTheFinishKeepsTheTurn: once the finish reason has arrived, only
// the usage chunk and [DONE] are still to come, so a connection lost then has cost
// nothing of the turn; before it, the turn is incomplete and the call fails as ever.
// An error the server sends after the finish is not a lost connection.
func TestAStreamCutAfterTheFinishKeepsTheTurn(t *testing.T) {
	text := []string{
		chunk(map[string]any{"role": "assistant", "content": "Rotate "}, nil),
		chunk(map[string]any{"content": "weekly."}, nil),
	}
	calls := []string{
		chunk(map[string]any{"role": "assistant", "tool_calls": []any{map[string]any{"index": 0, "id": "c1", "type": "function", "function": map[string]any{"name": "search", "arguments": `{"query":`}}}}, nil),
		chunk(map[string]any{"tool_calls": []any{map[string]any{"index": 0, "function": map[string]any{"arguments": `"jwt"}`}}}}, nil),
		chunk(map[string]any{"tool_calls": []any{map[string]any{"index": 1, "id": "c2", "type": "function", "function": map[string]any{"name": "read_document", "arguments": `{"path":"a.md"}`}}}}, nil),
	}
	stop := chunk(map[string]any{}, "stop")
	toolCalls := chunk(map[string]any{}, "tool_calls")
	usage := `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":70,"completion_tokens":12,"total_tokens":82}}`
	wantCalls := []loop.ToolCall{{ID: "c1", Name: "search", Arguments: `{"query":"jwt"}`}, {ID: "c2", Name: "read_document", Arguments: `{"path":"a.md"}`}}
	cat := func(parts ...[]string) []string {
		var out []string
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	tests := []struct {
		name       string
		events     []string // each request's stream, cut after the last
		maxRetries int
		// want on success
		wantContent          string
		wantCalls            []loop.ToolCall
		wantFinish           string
		wantPrompt, wantComp int64
		// want on failure
		wantErr      string
		wantRequests int
	}{
		{
			name:        "text, cut after the finish reason",
			events:      cat(text, []string{stop}),
			wantContent: "Rotate weekly.", wantFinish: "stop", wantRequests: 1,
		},
		{
			name:      "tool calls, cut after the finish reason",
			events:    cat(calls, []string{toolCalls}),
			wantCalls: wantCalls, wantFinish: "tool_calls", wantRequests: 1,
		},
		{
			name:        "cut after the usage, before [DONE]",
			events:      cat(text, []string{stop, usage}),
			wantContent: "Rotate weekly.", wantFinish: "stop", wantPrompt: 70, wantComp: 12, wantRequests: 1,
		},
		{
			name:         "text, cut before the finish reason",
			events:       text,
			wantErr:      "the answer stream broke off after it had started",
			wantRequests: 1,
		},
		{
			name:         "tool calls, cut before the finish reason",
			events:       calls,
			wantErr:      "the answer stream broke off after 1 attempt",
			wantRequests: 1,
		},
		{
			name:         "tool calls, cut before the finish reason, retried",
			events:       calls,
			maxRetries:   2,
			wantErr:      "the answer stream broke off after 3 attempts",
			wantRequests: 3,
		},
		{
			name:         "an error event after the finish reason",
			events:       cat(text, []string{stop, `{"error":{"message":"The server had an error while processing your request.","type":"server_error"}}`}),
			wantErr:      "the answer stream broke off after it had started",
			wantRequests: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, requests := cutServer(t, sse(tt.events...))
			cfg := testConfig(srv.URL + "/v1")
			cfg.MaxRetries = tt.maxRetries
			onDelta, deltas := collect(t)
			resp, err := New(cfg).Chat(context.Background(), chatRequest(), onDelta)
			if n := requests(); n != tt.wantRequests {
				t.Errorf("server saw %d requests, want %d", n, tt.wantRequests)
			}
			if tt.wantErr != "" {
				var pe *loop.ProviderError
				if !errors.As(err, &pe) || !strings.Contains(pe.Summary, tt.wantErr) {
					t.Fatalf("Chat = %+v, %v; want a ProviderError saying %q", resp, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Chat: %v", err)
			}
			if resp.Content != tt.wantContent || strings.Join(*deltas, "") != tt.wantContent || resp.FinishReason != tt.wantFinish || resp.Attempts != 1 {
				t.Errorf("content %q deltas %q finish %q attempts %d; want %q, %q, 1", resp.Content, *deltas, resp.FinishReason, resp.Attempts, tt.wantContent, tt.wantFinish)
			}
			// No usage chunk arrived: no counts, as from a server that never sends them.
			if resp.PromptTokens != tt.wantPrompt || resp.CompletionTokens != tt.wantComp {
				t.Errorf("tokens %d/%d, want %d/%d", resp.PromptTokens, resp.CompletionTokens, tt.wantPrompt, tt.wantComp)
			}
			if fmt.Sprint(resp.ToolCalls) != fmt.Sprint(tt.wantCalls) {
				t.Errorf("tool calls %+v, want %+v", resp.ToolCalls, tt.wantCalls)
			}
		})
	}
}

func TestTransportBreak(t *testing.T) {
	reset := &net.OpError{Op: "read", Net: "tcp", Err: &net.OpError{Op: "read", Err: syscall.ECONNRESET}}
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"the body cut short", io.ErrUnexpectedEOF, true},
		{"the body cut short, wrapped", fmt.Errorf("reading: %w", io.ErrUnexpectedEOF), true},
		{"a connection reset", reset, true},
		{"a bare ECONNRESET", fmt.Errorf("read: %w", syscall.ECONNRESET), true},
		{"a broken pipe", fmt.Errorf("write: %w", syscall.EPIPE), true},
		{"an error event", &ssestream.StreamError{Message: "received error while streaming", Event: ssestream.Event{Data: []byte(`{"error":{"type":"server_error"}}`)}}, false},
		{"an API error", &openai.Error{StatusCode: 500}, false},
		{"a chunk that is not JSON", json.Unmarshal([]byte("{"), new(any)), false},
		{"a deadline", context.DeadlineExceeded, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := transportBreak(tt.err); got != tt.want {
				t.Errorf("transportBreak(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}
