package loop_test

// These tests run the loop against llmtest's scripted server through the real llm
// client, because the bugs they guard against only show on the wire: the server checks
// each request's history the way strict chat-completions servers do and answers a bad
// one with HTTP 400, which is not retried and degrades the answer. They live in
// package loop_test because llm imports loop.

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	quarryv1 "github.com/quarry-router/quarry/gen/quarry/v1"
	"github.com/quarry-router/quarry/services/agent/llm"
	"github.com/quarry-router/quarry/services/agent/llm/llmtest"
	"github.com/quarry-router/quarry/services/agent/loop"
	"github.com/quarry-router/quarry/services/agent/tools"
)

// wireKB holds one document, ops/oncall.md.
type wireKB struct{}

func (wireKB) Search(context.Context, string, string, string, int) ([]*quarryv1.Source, error) {
	return []*quarryv1.Source{{Path: "ops/oncall.md", Title: "On-call", Relevance: 0.6, Excerpt: "paged by the alert router"}}, nil
}

func (wireKB) ReadDocument(_ context.Context, _, path string) (*quarryv1.Document, error) {
	if path == "ops/oncall.md" {
		return &quarryv1.Document{Path: path, Title: "On-call", Content: "The on-call engineer is paged by the alert router."}, nil
	}
	return nil, fmt.Errorf("read %q: %w", path, tools.ErrNotFound)
}

func (wireKB) ListFolder(context.Context, string, string, int) ([]*quarryv1.FolderEntry, int, error) {
	return nil, 0, nil
}

func (wireKB) Manifest(context.Context, string) (*quarryv1.GetManifestResponse, error) {
	return &quarryv1.GetManifestResponse{}, nil
}

func wireAgent(srv *llmtest.Server) *loop.Agent {
	cfg := llm.DefaultConfig()
	cfg.BaseURL, cfg.Model = srv.BaseURL(), "scripted-model"
	cfg.Timeout = 2 * time.Second
	cfg.RetryBackoff, cfg.MaxRetryDelay = time.Millisecond, 10*time.Millisecond
	lc := loop.DefaultConfig()
	lc.Deadline, lc.ConcludeTimeout = 5*time.Second, 5*time.Second
	return loop.New(lc, llm.New(cfg), tools.New(tools.DefaultConfig(), wireKB{}), nil)
}

// Small models (behind vLLM or llama.cpp especially) write malformed tool calls. The
// model must be told what was wrong and get to try again, as it is for bad arguments;
// the call it wrote must not come back in the history in a form the server rejects,
// or the whole answer degrades to the extractive fallback.
func TestMalformedToolCallsDoNotBreakTheConversation(t *testing.T) {
	tests := []struct {
		name  string
		calls []llmtest.Call
		// told is what each call's tool message must say, in order.
		told []string
	}{{
		// An empty name is echoed as a placeholder (servers reject a nameless call)
		// and the model is told no such tool exists.
		name:  "a call without a name",
		calls: []llmtest.Call{{ID: "c1", Name: "", Arguments: `{"query":"on-call"}`}},
		told:  []string{`no tool named ""`},
	}, {
		// Servers that number calls per turn, or models that copy ids, give two calls
		// one id; two tool messages would then answer one call. The repeat gets a new
		// id and both calls run, each answered by its own tool message.
		name: "two calls with the same id",
		calls: []llmtest.Call{
			{ID: "call_0", Name: "search", Arguments: `{"query":"on-call"}`},
			{ID: "call_0", Name: "read_document", Arguments: `{"path":"ops/oncall.md"}`},
		},
		told: []string{"ops/oncall.md", "The on-call engineer is paged by the alert router."},
	}, {
		// A turn asking for more calls than -loop-max-tool-calls-per-turn (8): the
		// first 8 run, the rest are not run but each still answered, by an error
		// naming the limit, so the server accepts the history.
		name:  "more calls than are run in one turn",
		calls: flood(10),
		told: append(slices.Repeat([]string{"ops/oncall.md"}, 8), slices.Repeat(
			[]string{"error: not run: at most 8 tool calls are run per turn and this turn asked for 10"}, 2)...),
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := llmtest.New(t,
				llmtest.Turn{ToolCalls: tt.calls},
				llmtest.Turn{Content: "The alert router pages the on-call engineer."},
			)
			req := &quarryv1.AnswerRequest{KnowledgeBase: "platform", Query: "What is our on-call process?", Tier: quarryv1.Tier_TIER_AGENTIC,
				Sources: []*quarryv1.Source{{Path: "ops/oncall.md", Title: "On-call", Relevance: 0.56, Excerpt: "paged by the alert router"}}}
			ans, err := wireAgent(srv).Answer(context.Background(), req, func(string) error { return nil })
			if err != nil {
				t.Fatal(err)
			}
			if p := srv.Problems(); len(p) > 0 {
				t.Errorf("requests the server rejected: %v", p)
			}
			if ans.GetDegraded() || !strings.HasPrefix(ans.GetAnswer(), "The alert router") {
				t.Fatalf("degraded %v (%q), answer %q; want the model's answer after the tool messages", ans.GetDegraded(), ans.GetDegradedReason(), ans.GetAnswer())
			}

			// The second request ends with the echoed turn and one tool message per call,
			// each answering its own call.
			reqs := srv.Requests()
			if len(reqs) != 2 {
				t.Fatalf("%d requests, want 2", len(reqs))
			}
			msgs := reqs[1].Messages
			n := len(tt.calls)
			if len(msgs) < n+1 {
				t.Fatalf("second request has %d messages, want the echoed turn and %d tool messages", len(msgs), n)
			}
			asked := msgs[len(msgs)-n-1]
			if asked.Role != "assistant" || len(asked.ToolCalls) != n {
				t.Fatalf("echoed turn %+v, want the assistant's %d calls", asked, n)
			}
			for i, m := range msgs[len(msgs)-n:] {
				if m.Role != "tool" || m.ToolCallID != asked.ToolCalls[i].ID || !strings.Contains(m.Text(), tt.told[i]) {
					t.Errorf("tool message %d = %s %q: %q, want the answer to call %q saying %q", i, m.Role, m.ToolCallID, m.Text(), asked.ToolCalls[i].ID, tt.told[i])
				}
			}
		})
	}
}

// flood is a turn of n searches, each for something else.
func flood(n int) []llmtest.Call {
	calls := make([]llmtest.Call, n)
	for i := range calls {
		calls[i] = llmtest.Call{ID: fmt.Sprintf("c%d", i), Name: "search", Arguments: fmt.Sprintf(`{"query":"on-call %d"}`, i)}
	}
	return calls
}

// Loop detection stops a call the model already made even when it spells it
// differently: the same path written "./ops//oncall.md", the same search in other
// case and spacing. Small models re-read what they have in those ways, and each
// re-read costs a round and a document's worth of prompt in every later call.
func TestRespelledRepeatsAreLoops(t *testing.T) {
	tests := []struct {
		name        string
		first, then llmtest.Call
	}{
		{"a path with ./ and //", llmtest.Call{ID: "c1", Name: "read_document", Arguments: `{"path":"ops/oncall.md"}`},
			llmtest.Call{ID: "c2", Name: "read_document", Arguments: `{"path":"./ops//oncall.md"}`}},
		{"a folder named with a trailing /", llmtest.Call{ID: "c1", Name: "list_folder", Arguments: `{"path":"ops"}`},
			llmtest.Call{ID: "c2", Name: "list_folder", Arguments: `{"path":"ops/"}`}},
		{"the root named or left out", llmtest.Call{ID: "c1", Name: "list_folder", Arguments: `{}`},
			llmtest.Call{ID: "c2", Name: "list_folder", Arguments: `{"path":"."}`}},
		{"a search in other case and spacing", llmtest.Call{ID: "c1", Name: "search", Arguments: `{"query":"on-call rotation"}`},
			llmtest.Call{ID: "c2", Name: "search", Arguments: `{"query":"  On-call   Rotation "}`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := llmtest.New(t,
				llmtest.Turn{ToolCalls: []llmtest.Call{tt.first}},
				llmtest.Turn{ToolCalls: []llmtest.Call{tt.then}},
				llmtest.Turn{Content: "The alert router pages the on-call engineer."},
			)
			req := &quarryv1.AnswerRequest{KnowledgeBase: "platform", Query: "What is our on-call process?", Tier: quarryv1.Tier_TIER_AGENTIC}
			ans, err := wireAgent(srv).Answer(context.Background(), req, func(string) error { return nil })
			if err != nil {
				t.Fatal(err)
			}
			if p := srv.Problems(); len(p) > 0 {
				t.Errorf("requests the server rejected: %v", p)
			}
			if ans.GetLlm().GetStopReason() != loop.StopLoopDetected {
				t.Errorf("stop reason %q, want %q", ans.GetLlm().GetStopReason(), loop.StopLoopDetected)
			}
			reqs := srv.Requests()
			if len(reqs) != 3 || len(reqs[2].Tools) != 0 {
				t.Fatalf("%d requests; want the concluding call, without tools, third", len(reqs))
			}
			msgs := reqs[2].Messages
			if told := msgs[len(msgs)-2]; told.Role != "tool" || !strings.Contains(told.Text(), "already made") {
				t.Errorf("the repeat was answered %s %q; want it not run", told.Role, told.Text())
			}
		})
	}
}
