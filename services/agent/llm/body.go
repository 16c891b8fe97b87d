package llm

import (
	"encoding/json"
	"fmt"

	"github.com/quarry-router/quarry/services/agent/loop"
)

// The request body of a chat completion, written with encoding/json from these types
// instead of by openai-go's params: the client encodes its params by reflection over
// optional fields and unions: 128 µs for a ~13 KB T3 prompt in BenchmarkRequestBody
// (19 µs here), 0.28 ms a call in BenchmarkLLMOverhead's profile, the largest single
// cost Quarry added to an LLM call after the search, and again for each turn of an
// agentic loop with its history. The same JSON value either way
// (TestBodyIsWhatTheClientWouldSend); the client still sends it, streams and decodes.
type (
	chatBody struct {
		Model               string         `json:"model"`
		Messages            []bodyMessage  `json:"messages"`
		MaxTokens           *int64         `json:"max_tokens,omitempty"`
		MaxCompletionTokens *int64         `json:"max_completion_tokens,omitempty"`
		Temperature         float64        `json:"temperature"`
		Stream              bool           `json:"stream,omitempty"`
		StreamOptions       *streamOptions `json:"stream_options,omitempty"`
		Tools               []bodyTool     `json:"tools,omitempty"`
	}
	streamOptions struct {
		IncludeUsage bool `json:"include_usage"`
	}
	bodyMessage struct {
		Role       loop.Role      `json:"role"`
		Content    *string        `json:"content,omitempty"`
		ToolCalls  []bodyToolCall `json:"tool_calls,omitempty"`
		ToolCallID string         `json:"tool_call_id,omitempty"`
	}
	bodyToolCall struct {
		ID       string       `json:"id"`
		Type     string       `json:"type"`
		Function bodyFunction `json:"function"`
	}
	bodyFunction struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	}
	bodyTool struct {
		Type     string           `json:"type"`
		Function bodyToolFunction `json:"function"`
	}
	bodyToolFunction struct {
		Name        string         `json:"name"`
		Description string         `json:"description"`
		Parameters  map[string]any `json:"parameters,omitzero"`
	}
)

// body returns the JSON request for req; usage asks for token counts in a streamed
// answer.
func (p *OpenAI) body(req loop.ChatRequest, usage bool) ([]byte, error) {
	b := chatBody{Model: p.cfg.Model, Temperature: req.Temperature, Messages: make([]bodyMessage, len(req.Messages))}
	maxTokens := int64(req.MaxTokens)
	if p.cfg.MaxTokensField == "max_completion_tokens" {
		b.MaxCompletionTokens = &maxTokens
	} else {
		b.MaxTokens = &maxTokens
	}
	if p.cfg.Stream {
		// Set here as the client would (NewStreaming sets it in the body it is given).
		b.Stream = true
	}
	if usage {
		// Usage comes in a last chunk only when asked for.
		b.StreamOptions = &streamOptions{IncludeUsage: true}
	}
	for i, m := range req.Messages {
		bm := bodyMessage{Role: m.Role}
		switch m.Role {
		case loop.RoleSystem, loop.RoleUser:
			bm.Content = &m.Content
		case loop.RoleTool:
			bm.Content, bm.ToolCallID = &m.Content, m.ToolCallID
		case loop.RoleAssistant:
			if m.Content != "" || len(m.ToolCalls) == 0 {
				bm.Content = &m.Content
			}
			for _, tc := range m.ToolCalls {
				bm.ToolCalls = append(bm.ToolCalls, bodyToolCall{ID: tc.ID, Type: "function", Function: bodyFunction{Name: tc.Name, Arguments: tc.Arguments}})
			}
		default:
			bm.Role, bm.Content = loop.RoleUser, &m.Content
		}
		b.Messages[i] = bm
	}
	for _, t := range req.Tools {
		b.Tools = append(b.Tools, bodyTool{Type: "function", Function: bodyToolFunction{Name: t.Name, Description: t.Description, Parameters: t.Parameters}})
	}
	out, err := json.Marshal(b)
	if err != nil {
		return nil, fmt.Errorf("encode chat request: %w", err)
	}
	return out, nil
}
