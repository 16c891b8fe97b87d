package loop

import (
	"context"
	"errors"
)

// Provider is a chat-completions LLM with tool calling. llm.OpenAI is the one Quarry
// ships (any OpenAI-compatible endpoint); the interface lives here, where it is used,
// so another provider needs only these few types.
type Provider interface {
	// Chat sends one request and returns the model's whole turn. Text is passed to
	// onDelta as it arrives; when onDelta returns an error the call stops with it.
	// Implementations retry what is worth retrying (rate limits, server errors,
	// timeouts) before any text has been passed on, and return ErrProvider (wrapped)
	// when the model could not be reached or broke off, with ErrContextLength also in
	// the chain when it refused the conversation as too long for its context window.
	Chat(ctx context.Context, req ChatRequest, onDelta func(string) error) (*ChatResponse, error)
}

// ErrProvider means the LLM did not produce a turn: it was unreachable, kept failing
// after its retries, or its stream broke off.
var ErrProvider = errors.New("LLM provider failed")

// ErrContextLength means the endpoint refused a request because the conversation does
// not fit the model's context window (prompt and max_tokens together). Providers return
// it wrapped in their ProviderError; the loop then shortens the conversation and asks
// again rather than failing the answer.
var ErrContextLength = errors.New("the conversation exceeds the model's context window")

// ProviderError is a provider failure with a summary that is safe to show to users
// (no addresses, no response bodies); the cause stays in the chain for the logs.
type ProviderError struct {
	// Summary says what went wrong in a few words, e.g. "HTTP 429 after 3 attempts".
	Summary string
	Err     error
}

func (e *ProviderError) Error() string { return e.Summary + ": " + e.Err.Error() }

// Unwrap makes the error match ErrProvider and its cause.
func (e *ProviderError) Unwrap() []error { return []error{ErrProvider, e.Err} }

// Role is a message's author.
type Role string

// The roles of a chat.
const (
	RoleSystem    Role = "system"
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
	RoleTool      Role = "tool"
)

// Message is one message of a chat.
type Message struct {
	Role    Role
	Content string
	// ToolCalls are the calls an assistant message asked for.
	ToolCalls []ToolCall
	// ToolCallID links a tool message to the call it answers.
	ToolCallID string
}

// ToolCall is one function call a model asked for.
type ToolCall struct {
	ID   string
	Name string
	// Arguments is the JSON text the model wrote; it may be anything.
	Arguments string
}

// ToolSpec describes a tool to the model.
type ToolSpec struct {
	Name        string
	Description string
	// Parameters is the JSON schema of the arguments object.
	Parameters map[string]any
}

// ChatRequest is one call to the model.
type ChatRequest struct {
	Messages    []Message
	Tools       []ToolSpec
	MaxTokens   int
	Temperature float64
}

// ChatResponse is the model's turn.
type ChatResponse struct {
	Content   string
	ToolCalls []ToolCall
	// FinishReason as the provider reported it: "stop", "tool_calls", "length"...
	FinishReason string
	// Model as the provider reported it.
	Model            string
	PromptTokens     int64
	CompletionTokens int64
	// Attempts is the number of requests the call took, retries included.
	Attempts int
}
