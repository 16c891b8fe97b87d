package llm

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/shared"
	"github.com/quarry-router/quarry/services/agent/loop"
)

// The body Quarry writes is the JSON value openai-go would write from the same request,
// with the "stream" member NewStreaming adds to a streamed one.
func TestBodyIsWhatTheClientWouldSend(t *testing.T) {
	reqs := map[string]loop.ChatRequest{
		"a conversation with tool calls": chatRequest(),
		"a T3 prompt":                    t3Request(),
		"an assistant turn with text and calls, a tool without parameters": {
			Messages: []loop.Message{
				{Role: loop.RoleUser, Content: "hi \"there\" <&> \u2028 é"},
				{Role: loop.RoleAssistant, Content: "let me look", ToolCalls: []loop.ToolCall{{ID: "c1", Name: "list", Arguments: "{}"}, {ID: "c2", Name: "read", Arguments: `{"path":"x.md"}`}}},
				{Role: loop.RoleTool, ToolCallID: "c1", Content: ""},
				{Role: loop.RoleTool, ToolCallID: "c2", Content: "x"},
				{Role: loop.RoleAssistant, Content: ""},
			},
			Tools:     []loop.ToolSpec{{Name: "list", Description: ""}, {Name: "none", Description: "d", Parameters: map[string]any{}}},
			MaxTokens: 1,
		},
	}
	for name, req := range reqs {
		for _, stream := range []bool{true, false} {
			for _, field := range []string{"max_tokens", "max_completion_tokens"} {
				cfg := testConfig("http://127.0.0.1:1/v1")
				cfg.Stream, cfg.MaxTokensField = stream, field
				p := New(cfg)
				ours, err := p.body(req, stream)
				if err != nil {
					t.Fatal(err)
				}
				theirs, err := json.Marshal(p.params(req))
				if err != nil {
					t.Fatal(err)
				}
				var got, want map[string]any
				if err := json.Unmarshal(ours, &got); err != nil {
					t.Fatal(err)
				}
				if err := json.Unmarshal(theirs, &want); err != nil {
					t.Fatal(err)
				}
				if stream {
					want["stream"] = true
				}
				if !reflect.DeepEqual(got, want) {
					t.Errorf("%s (stream %v, %s):\nours   %s\nclient %s", name, stream, field, ours, theirs)
				}
			}
		}
	}
}

// t3Request is the shape of a T3 call: the agent's instructions and manifest, and the
// question with about 13 KB of pre-fetched documents.
func t3Request() loop.ChatRequest {
	doc := strings.Repeat("Rotate the signing key weekly; the old key stays valid for a day. ", 65)
	return loop.ChatRequest{
		Messages: []loop.Message{
			{Role: loop.RoleSystem, Content: "Answer from the documents below and cite their paths.\n\n" + strings.Repeat("- auth/jwt/signing.md: Signing keys\n", 40)},
			{Role: loop.RoleUser, Content: "How do I rotate the key?\n\n## auth/jwt/signing.md\n\n" + doc + "\n\n## auth/jwt/rotation.md\n\n" + doc + "\n\n## auth/sessions.md\n\n" + doc},
		},
		MaxTokens:   1024,
		Temperature: 0.3,
	}
}

func BenchmarkRequestBody(b *testing.B) {
	p := New(testConfig("http://127.0.0.1:1/v1"))
	req := t3Request()
	b.Run("openai-go params", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			if _, err := json.Marshal(p.params(req)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("body", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			if _, err := p.body(req, p.cfg.Stream); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// params is the request as openai-go's params, which Quarry sent before body: the
// reference the body is checked against.
func (p *OpenAI) params(req loop.ChatRequest) openai.ChatCompletionNewParams {
	params := openai.ChatCompletionNewParams{
		Model:       shared.ChatModel(p.cfg.Model),
		Temperature: openai.Float(req.Temperature),
	}
	if p.cfg.Stream {
		// Usage comes in a last chunk only when asked for.
		params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	}
	if p.cfg.MaxTokensField == "max_completion_tokens" {
		params.MaxCompletionTokens = openai.Int(int64(req.MaxTokens))
	} else {
		params.MaxTokens = openai.Int(int64(req.MaxTokens))
	}
	for _, m := range req.Messages {
		params.Messages = append(params.Messages, message(m))
	}
	for _, t := range req.Tools {
		params.Tools = append(params.Tools, openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
			Name:        t.Name,
			Description: openai.String(t.Description),
			Parameters:  shared.FunctionParameters(t.Parameters),
		}))
	}
	return params
}

func message(m loop.Message) openai.ChatCompletionMessageParamUnion {
	switch m.Role {
	case loop.RoleSystem:
		return openai.SystemMessage(m.Content)
	case loop.RoleTool:
		return openai.ToolMessage(m.Content, m.ToolCallID)
	case loop.RoleAssistant:
		a := openai.ChatCompletionAssistantMessageParam{}
		if m.Content != "" || len(m.ToolCalls) == 0 {
			a.Content.OfString = openai.String(m.Content)
		}
		for _, tc := range m.ToolCalls {
			a.ToolCalls = append(a.ToolCalls, openai.ChatCompletionMessageToolCallUnionParam{
				OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{
					ID:       tc.ID,
					Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{Name: tc.Name, Arguments: tc.Arguments},
				},
			})
		}
		return openai.ChatCompletionMessageParamUnion{OfAssistant: &a}
	default:
		return openai.UserMessage(m.Content)
	}
}
