package loop_test

// A conversation that outgrows the model's context window is refused by the server
// (HTTP 400 from vLLM, llama.cpp server, OpenAI). These tests run the loop against
// llmtest's scripted server refusing every request whose body is over a size, through
// the real llm client, for each shape of refusal those servers send.

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	quarryv1 "github.com/quarry-router/quarry/gen/quarry/v1"
	"github.com/quarry-router/quarry/platform/telemetry/telemetrytest"
	"github.com/quarry-router/quarry/services/agent/llm"
	"github.com/quarry-router/quarry/services/agent/llm/llmtest"
	"github.com/quarry-router/quarry/services/agent/loop"
	"github.com/quarry-router/quarry/services/agent/tools"
)

// sizedKB holds documents of the given sizes; each starts with "<path> begins".
type sizedKB map[string]int

func (k sizedKB) doc(path string) *quarryv1.Document {
	return &quarryv1.Document{Path: path, Title: path, Content: path + " begins. " + strings.Repeat("lorem ipsum ", k[path]/12)}
}

func (k sizedKB) Search(context.Context, string, string, string, int) ([]*quarryv1.Source, error) {
	return []*quarryv1.Source{{Path: "a.md", Title: "a", Relevance: 0.6}}, nil
}

func (k sizedKB) ReadDocument(_ context.Context, _, path string) (*quarryv1.Document, error) {
	if _, ok := k[path]; !ok {
		return nil, fmt.Errorf("read %q: %w", path, tools.ErrNotFound)
	}
	return k.doc(path), nil
}

func (sizedKB) ListFolder(context.Context, string, string, int) ([]*quarryv1.FolderEntry, int, error) {
	return nil, 0, nil
}

func (sizedKB) Manifest(context.Context, string) (*quarryv1.GetManifestResponse, error) {
	return &quarryv1.GetManifestResponse{}, nil
}

// contextKB has one large document and two small ones.
var contextKB = sizedKB{"a.md": 9000, "b.md": 1500, "c.md": 1500}

// contextAgent asks srv with no retries of transient failures: getting past a
// context-length refusal must not depend on -llm-max-retries.
func contextAgent(srv *llmtest.Server, edit func(*loop.Config)) *loop.Agent {
	cfg := llm.DefaultConfig()
	cfg.BaseURL, cfg.Model = srv.BaseURL(), "scripted-model"
	cfg.Timeout, cfg.MaxRetries = 2*time.Second, 0
	lc := loop.DefaultConfig()
	lc.Deadline, lc.ConcludeTimeout = 5*time.Second, 5*time.Second
	if edit != nil {
		edit(&lc)
	}
	return loop.New(lc, llm.New(cfg), tools.New(tools.DefaultConfig(), contextKB), nil)
}

func read(id, path string) llmtest.Turn {
	return llmtest.Turn{ToolCalls: []llmtest.Call{{ID: id, Name: "read_document", Arguments: `{"path":"` + path + `"}`}}}
}

const contextAnswer = "The answer, from what was read."

func t4Question() *quarryv1.AnswerRequest {
	return &quarryv1.AnswerRequest{KnowledgeBase: "platform", Query: "What do a, b and c say?", Tier: quarryv1.Tier_TIER_AGENTIC}
}

func t3Question() *quarryv1.AnswerRequest {
	return &quarryv1.AnswerRequest{KnowledgeBase: "platform", Query: "What do a, b and c say?", Tier: quarryv1.Tier_TIER_SINGLE_LLM,
		Prefetched: []*quarryv1.Document{contextKB.doc("a.md"), contextKB.doc("b.md"), contextKB.doc("c.md")}}
}

// sizes answers req against a server without a limit and returns the size of each
// request body, so that a test can set the limit between two of them.
func sizes(t *testing.T, agent func(*llmtest.Server) *loop.Agent, req *quarryv1.AnswerRequest, turns ...llmtest.Turn) []int {
	t.Helper()
	srv := llmtest.New(t, turns...)
	ans, err := agent(srv).Answer(context.Background(), req, func(string) error { return nil })
	if err != nil || ans.GetDegraded() {
		t.Fatalf("without a limit: %v, degraded %q", err, ans.GetDegradedReason())
	}
	var out []int
	for _, r := range srv.Requests() {
		out = append(out, len(r.Raw))
	}
	return out
}

// answerSpan returns the attributes of the last agent.answer span recorded.
func answerSpan(t *testing.T, spans func() []string, attrs func(int) map[string]string) map[string]string {
	t.Helper()
	names := spans()
	for i := len(names) - 1; i >= 0; i-- {
		if names[i] == "agent.answer" {
			return attrs(i)
		}
	}
	t.Fatal("no agent.answer span")
	return nil
}

// A T4 loop whose history outgrows the context window keeps going on a shorter
// history: the oldest tool results (never the system prompt, the question or the most
// recent result) are replaced by a note, and the refused call is made again. The
// answer is the model's, not the degraded fallback; the span says the history was
// trimmed. The same when it is the concluding call, after the loop stopped, that no
// longer fits.
func TestAConversationThatOutgrowsTheContextIsTrimmed(t *testing.T) {
	_, exp := telemetrytest.Tracing()
	spans := func() []string {
		var out []string
		for _, s := range exp.GetSpans() {
			out = append(out, s.Name)
		}
		return out
	}
	attrs := func(i int) map[string]string {
		m := map[string]string{}
		for _, a := range exp.GetSpans()[i].Attributes {
			m[string(a.Key)] = a.Value.String()
		}
		return m
	}
	turns := []llmtest.Turn{read("r1", "a.md"), read("r2", "b.md"), read("r3", "c.md"), {Content: contextAnswer}}
	for _, call := range []struct {
		name  string
		edit  func(*loop.Config)
		stop  string
		tools bool // whether the refused call offers tools
	}{
		{"a call of the loop", nil, loop.StopAnswered, true},
		{"the concluding call", func(c *loop.Config) { c.T4MaxIterations = 3 }, loop.StopMaxIterations, false},
	} {
		agent := func(srv *llmtest.Server) *loop.Agent { return contextAgent(srv, call.edit) }
		// The fourth request holds all three documents: the server refuses it, and
		// would have taken the third.
		size := sizes(t, agent, t4Question(), turns...)
		if len(size) != 4 {
			t.Fatalf("%s: %d requests without a limit, want 4", call.name, len(size))
		}
		for _, refusal := range llmtest.ContextRefusals {
			t.Run(call.name+"/"+refusal.Name, func(t *testing.T) {
				srv := llmtest.New(t, turns...)
				srv.LimitContext(size[3]-1, refusal.Turn)
				exp.Reset()
				ans, err := agent(srv).Answer(context.Background(), t4Question(), func(string) error { return nil })
				if err != nil {
					t.Fatal(err)
				}
				if p := srv.Problems(); len(p) > 0 {
					t.Errorf("requests the server rejected as malformed: %v", p)
				}
				if ans.GetDegraded() || !strings.HasPrefix(ans.GetAnswer(), contextAnswer) {
					t.Fatalf("degraded %v (%q), answer %q; want the model's answer on a trimmed history", ans.GetDegraded(), ans.GetDegradedReason(), cut(ans.GetAnswer()))
				}
				if got := ans.GetLlm().GetStopReason(); got != call.stop {
					t.Errorf("stop reason %q, want %q", got, call.stop)
				}
				reqs := srv.Requests()
				if len(reqs) != 5 {
					t.Fatalf("%d requests, want 5: three rounds, the refused call and the same call trimmed", len(reqs))
				}
				refused, trimmed := reqs[3], reqs[4]
				if (len(trimmed.Tools) > 0) != call.tools || len(trimmed.Messages) != len(refused.Messages) {
					t.Errorf("the call made again has %d messages and tools %v; want the refused call's %d, tools %v",
						len(trimmed.Messages), trimmed.ToolNames(), len(refused.Messages), call.tools)
				}
				for i, m := range trimmed.Messages {
					was := refused.Messages[i]
					text := m.Text()
					switch {
					case m.Role == "tool" && m.ToolCallID == "r1":
						if !strings.HasPrefix(text, "[trimmed to fit the model's context") || strings.Contains(text, "lorem") {
							t.Errorf("the oldest tool result is %q, want a note in its place", cut(text))
						}
					case text != was.Text() || m.Role != was.Role:
						t.Errorf("message %d (%s %s) changed: %q, was %q", i, m.Role, m.ToolCallID, cut(text), cut(was.Text()))
					}
				}
				if last := trimmed.Messages[len(trimmed.Messages)-1]; call.tools && (last.ToolCallID != "r3" || !strings.Contains(last.Text(), "c.md begins")) {
					t.Errorf("the most recent tool result is %q, want it whole", cut(last.Text()))
				}
				if got := ans.GetLlm().GetCalls(); got != 4 {
					t.Errorf("trace: %d calls, want 4 (the call made again is the same call)", got)
				}
				if got := ans.GetLlm().GetContextTrims(); got != 1 {
					t.Errorf("trace: %d context trims, want 1", got)
				}
				a := answerSpan(t, spans, attrs)
				if a["quarry.agent.context_trims"] != "1" || a["quarry.agent.context_trimmed_chars"] == "" || a["quarry.agent.context_trimmed_chars"] == "0" {
					t.Errorf("answer span %v, want quarry.agent.context_trims=1 and the characters trimmed", a)
				}
			})
		}
	}
}

// A T3 answer whose pre-fetched documents do not fit the context window is asked
// again with the first document only; the model may read the others itself.
func TestT3DropsPrefetchedDocumentsThatDoNotFit(t *testing.T) {
	agent := func(srv *llmtest.Server) *loop.Agent { return contextAgent(srv, nil) }
	size := sizes(t, agent, t3Question(), llmtest.Turn{Content: contextAnswer})
	srv := llmtest.New(t, llmtest.Turn{Content: contextAnswer})
	srv.LimitContext(size[0]-1, llmtest.ContextRefusals[1].Turn)
	ans, err := agent(srv).Answer(context.Background(), t3Question(), func(string) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	if ans.GetDegraded() || !strings.HasPrefix(ans.GetAnswer(), contextAnswer) {
		t.Fatalf("degraded %v (%q), answer %q; want the model's answer", ans.GetDegraded(), ans.GetDegradedReason(), cut(ans.GetAnswer()))
	}
	reqs := srv.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests, want 2", len(reqs))
	}
	user := reqs[1].Messages[1].Text()
	if !strings.Contains(user, "a.md begins") || strings.Contains(user, "b.md begins") || strings.Contains(user, "c.md begins") ||
		!strings.Contains(user, "What do a, b and c say?") || !strings.Contains(user, "read_document") {
		t.Errorf("the prompt asked again is %q; want the first document, a note naming the others and the question", cut(user))
	}
	if reqs[1].Messages[0].Text() != reqs[0].Messages[0].Text() {
		t.Error("the system prompt changed")
	}
	// The answer was written from a.md alone: the documents dropped from the prompt are
	// not its sources.
	var paths []string
	for _, src := range ans.GetSources() {
		paths = append(paths, src.GetPath())
	}
	if !slices.Equal(paths, []string{"a.md"}) {
		t.Errorf("sources %q, want only the document the model was given, a.md", paths)
	}
	if line := ans.GetAnswer()[strings.LastIndex(ans.GetAnswer(), "Sources:"):]; strings.Contains(line, "b.md") || !strings.Contains(line, "a.md") {
		t.Errorf("the answer's sources line is %q, want a.md alone", line)
	}
}

// A server that refuses however short the conversation gets: the history is trimmed
// until nothing is left to trim, a bounded number of calls, and the answer degrades as
// for any other failure, saying why.
func TestAContextThatNeverFitsDegrades(t *testing.T) {
	refusal := llmtest.ContextRefusals[0].Turn
	tests := []struct {
		name  string
		turns []llmtest.Turn
		limit int
		want  int // requests
	}{
		{"refused from the first call", nil, 1, 1},
		// Three rounds, then refused with the oldest result trimmed, with the two
		// oldest trimmed; the most recent one is never trimmed.
		{"refused after three rounds", []llmtest.Turn{read("r1", "a.md"), read("r2", "b.md"), read("r3", "c.md"), refusal}, 0, 6},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := llmtest.New(t, tt.turns...)
			srv.Repeat(refusal)
			if tt.limit > 0 {
				srv.LimitContext(tt.limit, refusal)
			}
			ans, err := contextAgent(srv, nil).Answer(context.Background(), t4Question(), func(string) error { return nil })
			if err != nil {
				t.Fatal(err)
			}
			if !ans.GetDegraded() || !strings.Contains(ans.GetDegradedReason(), "context window") || ans.GetLlm().GetStopReason() != loop.StopLLMError {
				t.Errorf("degraded %v (%q), stop %q; want a degraded answer saying the conversation does not fit", ans.GetDegraded(), ans.GetDegradedReason(), ans.GetLlm().GetStopReason())
			}
			if n := len(srv.Requests()); n != tt.want {
				t.Errorf("%d requests, want %d", n, tt.want)
			}
		})
	}
}

func cut(s string) string {
	if len(s) > 120 {
		return s[:120] + "..."
	}
	return s
}
