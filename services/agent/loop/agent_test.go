package loop

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	quarryv1 "github.com/quarry-router/quarry/gen/quarry/v1"
	"github.com/quarry-router/quarry/services/agent/tools"
)

// turn is one scripted model turn.
type turn func(ctx context.Context, req ChatRequest, onDelta func(string) error) (*ChatResponse, error)

// fakeLLM replays turns and records the requests.
type fakeLLM struct {
	t     *testing.T
	mu    sync.Mutex
	turns []turn
	reqs  []ChatRequest
}

func (f *fakeLLM) Chat(ctx context.Context, req ChatRequest, onDelta func(string) error) (*ChatResponse, error) {
	f.mu.Lock()
	req.Messages = slices.Clone(req.Messages)
	f.reqs = append(f.reqs, req)
	if len(f.turns) == 0 {
		f.mu.Unlock()
		f.t.Errorf("unexpected call %d", len(f.reqs))
		return nil, errors.New("script used up")
	}
	next := f.turns[0]
	f.turns = f.turns[1:]
	f.mu.Unlock()
	return next(ctx, req, onDelta)
}

func (f *fakeLLM) requests() []ChatRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.reqs)
}

// say answers text, streamed in two pieces.
func say(text string) turn {
	return func(_ context.Context, _ ChatRequest, onDelta func(string) error) (*ChatResponse, error) {
		half := len(text) / 2
		for _, d := range []string{text[:half], text[half:]} {
			if err := onDelta(d); err != nil {
				return nil, err
			}
		}
		return &ChatResponse{Content: text, FinishReason: "stop", Model: "fake-1", PromptTokens: 100, CompletionTokens: 10}, nil
	}
}

// use asks for tool calls; each call is "name args".
func use(calls ...string) turn {
	return func(context.Context, ChatRequest, func(string) error) (*ChatResponse, error) {
		resp := &ChatResponse{FinishReason: "tool_calls", Model: "fake-1", PromptTokens: 100, CompletionTokens: 5}
		for i, c := range calls {
			name, args, _ := strings.Cut(c, " ")
			resp.ToolCalls = append(resp.ToolCalls, ToolCall{ID: fmt.Sprintf("c%d", i), Name: name, Arguments: args})
		}
		return resp, nil
	}
}

// fail fails the call without text.
func fail(summary string) turn {
	return func(context.Context, ChatRequest, func(string) error) (*ChatResponse, error) {
		return nil, &ProviderError{Summary: summary, Err: errors.New("scripted failure")}
	}
}

// block waits for the call to be cancelled.
func block(ctx context.Context, _ ChatRequest, _ func(string) error) (*ChatResponse, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// memKB is a small knowledge base that counts reads and manifest fetches.
type memKB struct {
	mu        sync.Mutex
	docs      map[string]*quarryv1.Document
	reads     []string
	manifests int
	gen       uint64
	version   uint64
	noMan     bool
	hangMan   bool // Manifest waits for its context to end, as a hung search replica would
}

func newKB() *memKB {
	return &memKB{gen: 7, docs: map[string]*quarryv1.Document{
		"deploy/checklist.md": {Path: "deploy/checklist.md", Title: "Deploy checklist", Content: "# Deploy checklist\n\nRun the smoke tests.\n\nCheck the error budget before a production deploy."},
		"deploy/rollback.md":  {Path: "deploy/rollback.md", Title: "Rollbacks", Content: "Roll back with `kubectl rollout undo`."},
		"ops/oncall.md":       {Path: "ops/oncall.md", Title: "On-call", Content: "The on-call engineer is paged by the alert router.", Related: []string{"deploy/rollback.md"}},
	}}
}

func (m *memKB) Search(_ context.Context, _, query, _ string, _ int) ([]*quarryv1.Source, error) {
	return []*quarryv1.Source{{Path: "ops/oncall.md", Title: "On-call", Relevance: 0.6, Excerpt: "paged by the alert router"}}, nil
}

func (m *memKB) ReadDocument(_ context.Context, _, path string) (*quarryv1.Document, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.reads = append(m.reads, path)
	if d, ok := m.docs[path]; ok {
		return d, nil
	}
	return nil, fmt.Errorf("read %q: %w", path, tools.ErrNotFound)
}

func (m *memKB) ListFolder(context.Context, string, string, int) ([]*quarryv1.FolderEntry, int, error) {
	return []*quarryv1.FolderEntry{{Path: "deploy", Folder: true}}, 1, nil
}

func (m *memKB) Manifest(ctx context.Context, _ string) (*quarryv1.GetManifestResponse, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.manifests++
	if m.hangMan {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	if m.noMan {
		return nil, errors.New("search unavailable")
	}
	return &quarryv1.GetManifestResponse{
		Generation:     m.gen,
		ContentVersion: m.version,
		Summaries:      &quarryv1.ManifestLane{Entries: []*quarryv1.ManifestEntry{{Path: "deploy/_index.md", Title: "Deploy", Summary: "How we ship."}}},
		Contexts:       &quarryv1.ManifestLane{Entries: []*quarryv1.ManifestEntry{{Path: "ops/oncall.md", Title: "On-call"}}, Omitted: 4},
	}, nil
}

func testConfig() Config {
	c := DefaultConfig()
	c.Deadline = 5 * time.Second
	c.ConcludeTimeout = 5 * time.Second
	return c
}

type harness struct {
	llm    *fakeLLM
	kb     *memKB
	agent  *Agent
	deltas []string
}

func newHarness(t *testing.T, cfg Config, turns ...turn) *harness {
	h := &harness{llm: &fakeLLM{t: t, turns: turns}, kb: newKB()}
	h.agent = New(cfg, h.llm, tools.New(tools.DefaultConfig(), h.kb), nil)
	return h
}

func (h *harness) answer(t *testing.T, ctx context.Context, req *quarryv1.AnswerRequest) (*quarryv1.AgentAnswer, error) {
	t.Helper()
	h.deltas = nil
	ans, err := h.agent.Answer(ctx, req, func(d string) error { h.deltas = append(h.deltas, d); return nil })
	if err == nil && strings.Join(h.deltas, "") != ans.GetAnswer() {
		t.Errorf("deltas %q do not add up to the answer %q", h.deltas, ans.GetAnswer())
	}
	return ans, err
}

func t3Request(kb *memKB) *quarryv1.AnswerRequest {
	return &quarryv1.AnswerRequest{
		KnowledgeBase: "platform", Query: "What should I check before a production deploy?", Tier: quarryv1.Tier_TIER_SINGLE_LLM,
		Prefetched: []*quarryv1.Document{kb.docs["deploy/checklist.md"]},
		Sources:    []*quarryv1.Source{{Path: "deploy/checklist.md", Title: "Deploy checklist", Relevance: 0.8, Excerpt: "Check the error budget before a production deploy."}},
		Generation: 7,
	}
}

func t4Request() *quarryv1.AnswerRequest {
	return &quarryv1.AnswerRequest{
		KnowledgeBase: "platform", Query: "What is our on-call process?", Tier: quarryv1.Tier_TIER_AGENTIC,
		Sources:    []*quarryv1.Source{{Path: "ops/oncall.md", Title: "On-call", Relevance: 0.56, Excerpt: "paged by the alert router"}},
		Generation: 7,
	}
}

func paths(s []*quarryv1.Source) []string {
	var out []string
	for _, x := range s {
		out = append(out, x.GetPath())
	}
	return out
}

func TestT3AnswersInOneCallWithTheDocumentsInThePrompt(t *testing.T) {
	h := newHarness(t, testConfig(), say("Run the smoke tests and check the error budget (`deploy/checklist.md`)."))
	ans, err := h.answer(t, context.Background(), t3Request(h.kb))
	if err != nil {
		t.Fatal(err)
	}
	reqs := h.llm.requests()
	if len(reqs) != 1 {
		t.Fatalf("%d calls, want 1", len(reqs))
	}
	r := reqs[0]
	if r.MaxTokens != 1024 || r.Temperature != 0.3 {
		t.Errorf("max tokens %d temperature %g, want 1024 and 0.3", r.MaxTokens, r.Temperature)
	}
	if len(r.Tools) != 1 || r.Tools[0].Name != tools.ReadDocument {
		t.Errorf("T3 tools %v, want only read_document", r.Tools)
	}
	user := r.Messages[1].Content
	for _, want := range []string{"Check the error budget before a production deploy.", "path: deploy/checklist.md",
		"# Structure of the knowledge base", "`deploy/_index.md` — Deploy: How we ship.", "… 4 more not listed",
		"# Question\n\nWhat should I check before a production deploy?"} {
		if !strings.Contains(user, want) {
			t.Errorf("prompt lacks %q:\n%s", want, user)
		}
	}
	if r.Messages[0].Role != RoleSystem || !strings.Contains(r.Messages[0].Content, "at most 3 rounds") {
		t.Errorf("system message %+v", r.Messages[0])
	}
	if !strings.HasPrefix(ans.Answer, "Run the smoke tests") || !strings.HasSuffix(ans.Answer, "Sources: `deploy/checklist.md`\n") {
		t.Errorf("answer %q", ans.Answer)
	}
	if ans.Degraded || !slices.Equal(paths(ans.Sources), []string{"deploy/checklist.md"}) || ans.Sources[0].Relevance != 0.8 {
		t.Errorf("degraded %v sources %v", ans.Degraded, ans.Sources)
	}
	l := ans.Llm
	if l.Model != "fake-1" || l.Calls != 1 || l.Iterations != 0 || l.PromptTokens != 100 || l.CompletionTokens != 10 || l.StopReason != StopAnswered {
		t.Errorf("trace %v", l)
	}
}

func TestT3MayReadMoreDocumentsWithinItsSteps(t *testing.T) {
	t.Run("one more document is read and cited", func(t *testing.T) {
		h := newHarness(t, testConfig(), use(`read_document {"path":"deploy/rollback.md"}`), say("Check the budget; roll back with kubectl."))
		ans, err := h.answer(t, context.Background(), t3Request(h.kb))
		if err != nil {
			t.Fatal(err)
		}
		reqs := h.llm.requests()
		if len(reqs) != 2 {
			t.Fatalf("%d calls, want 2", len(reqs))
		}
		last := reqs[1].Messages
		tool := last[len(last)-1]
		if tool.Role != RoleTool || tool.ToolCallID != "c0" || !strings.Contains(tool.Content, "kubectl rollout undo") {
			t.Errorf("tool result %+v", tool)
		}
		if !slices.Equal(paths(ans.Sources), []string{"deploy/checklist.md", "deploy/rollback.md"}) ||
			!strings.HasSuffix(ans.Answer, "Sources: `deploy/checklist.md`, `deploy/rollback.md`\n") {
			t.Errorf("sources %v answer %q", paths(ans.Sources), ans.Answer)
		}
		if ans.Llm.Iterations != 1 || ans.Llm.Calls != 2 || !slices.Equal(ans.Llm.ToolCalls, []string{`read_document({"path":"deploy/rollback.md"})`}) {
			t.Errorf("trace %v", ans.Llm)
		}
	})
	t.Run("after the last step the model must answer without tools", func(t *testing.T) {
		cfg := testConfig()
		cfg.T3MaxToolSteps = 2
		h := newHarness(t, cfg, use(`read_document {"path":"deploy/rollback.md"}`), use(`read_document {"path":"ops/oncall.md"}`), say("Enough."))
		ans, err := h.answer(t, context.Background(), t3Request(h.kb))
		if err != nil {
			t.Fatal(err)
		}
		reqs := h.llm.requests()
		last := reqs[len(reqs)-1]
		if len(reqs) != 3 || len(last.Tools) != 0 || !strings.Contains(last.Messages[len(last.Messages)-1].Content, "every tool round allowed") {
			t.Errorf("%d calls; last offered %v with %q", len(reqs), last.Tools, last.Messages[len(last.Messages)-1].Content)
		}
		if ans.Llm.StopReason != StopMaxIterations || ans.Llm.Iterations != 2 {
			t.Errorf("trace %v", ans.Llm)
		}
	})
	t.Run("with no steps no tool is offered", func(t *testing.T) {
		cfg := testConfig()
		cfg.T3MaxToolSteps = 0
		h := newHarness(t, cfg, say("Plain."))
		ans, err := h.answer(t, context.Background(), t3Request(h.kb))
		if err != nil || len(h.llm.requests()[0].Tools) != 0 || ans.Llm.StopReason != StopAnswered {
			t.Fatalf("err %v tools %v trace %v", err, h.llm.requests()[0].Tools, ans.GetLlm())
		}
	})
	t.Run("T3 cannot use T4's tools", func(t *testing.T) {
		h := newHarness(t, testConfig(), use(`search {"query":"deploy"}`), say("Done."))
		if _, err := h.answer(t, context.Background(), t3Request(h.kb)); err != nil {
			t.Fatal(err)
		}
		msgs := h.llm.requests()[1].Messages
		if got := msgs[len(msgs)-1].Content; !strings.Contains(got, `no tool named "search"`) {
			t.Errorf("tool result %q, want a refusal", got)
		}
	})
}

func TestT4SearchesReadsAndAnswers(t *testing.T) {
	h := newHarness(t, testConfig(),
		use(`search {"query":"on-call"}`),
		use(`read_document {"path":"ops/oncall.md"}`, `related {"path":"ops/oncall.md"}`),
		say("The alert router pages the on-call engineer (`ops/oncall.md`)."))
	ans, err := h.answer(t, context.Background(), t4Request())
	if err != nil {
		t.Fatal(err)
	}
	reqs := h.llm.requests()
	if len(reqs) != 3 {
		t.Fatalf("%d calls, want 3", len(reqs))
	}
	for _, r := range reqs {
		if r.MaxTokens != 2048 || r.Temperature != 0.5 {
			t.Errorf("max tokens %d temperature %g, want 2048 and 0.5", r.MaxTokens, r.Temperature)
		}
		var names []string
		for _, tl := range r.Tools {
			names = append(names, tl.Name)
		}
		if !slices.Equal(names, tools.All) {
			t.Errorf("T4 tools %v, want %v", names, tools.All)
		}
	}
	if user := reqs[0].Messages[1].Content; !strings.Contains(user, "1. `ops/oncall.md` — On-call (relevance 0.56)") {
		t.Errorf("T4 prompt lacks the search's leads:\n%s", user)
	}
	msgs := reqs[2].Messages
	roles := []Role{}
	for _, m := range msgs {
		roles = append(roles, m.Role)
	}
	if want := []Role{RoleSystem, RoleUser, RoleAssistant, RoleTool, RoleAssistant, RoleTool, RoleTool}; !slices.Equal(roles, want) {
		t.Errorf("roles %v, want %v", roles, want)
	}
	if !strings.Contains(msgs[6].Content, "`deploy/rollback.md` — Rollbacks") {
		t.Errorf("related result %q", msgs[6].Content)
	}
	if !slices.Equal(paths(ans.Sources), []string{"ops/oncall.md"}) || ans.Sources[0].Relevance != 0.56 {
		t.Errorf("sources %v", ans.Sources)
	}
	if l := ans.Llm; l.Iterations != 3 || l.Calls != 3 || len(l.ToolCalls) != 3 || l.StopReason != StopAnswered || l.PromptTokens != 300 {
		t.Errorf("trace %v", l)
	}
}

func TestLoopStops(t *testing.T) {
	t.Run("a repeated call stops the loop and the model answers from what it has", func(t *testing.T) {
		h := newHarness(t, testConfig(),
			use(`read_document {"path":"ops/oncall.md"}`),
			use(`read_document { "path" : "ops/oncall.md" }`),
			say("From what I read: the alert router pages."))
		ans, err := h.answer(t, context.Background(), t4Request())
		if err != nil {
			t.Fatal(err)
		}
		if len(h.kb.reads) != 1 {
			t.Errorf("reads %v: the repeated call must not run", h.kb.reads)
		}
		reqs := h.llm.requests()
		last := reqs[len(reqs)-1]
		if len(reqs) != 3 || len(last.Tools) != 0 {
			t.Fatalf("%d calls, last with tools %v; want a final call without tools", len(reqs), last.Tools)
		}
		msgs := last.Messages
		if !strings.Contains(msgs[len(msgs)-2].Content, "already made") || !strings.Contains(msgs[len(msgs)-1].Content, "you repeated a call") {
			t.Errorf("last messages %q / %q", msgs[len(msgs)-2].Content, msgs[len(msgs)-1].Content)
		}
		if ans.Degraded || ans.Llm.StopReason != StopLoopDetected || !strings.HasPrefix(ans.Answer, "From what I read") {
			t.Errorf("answer %q degraded %v trace %v", ans.Answer, ans.Degraded, ans.Llm)
		}
	})
	t.Run("iterations are bounded", func(t *testing.T) {
		cfg := testConfig()
		cfg.T4MaxIterations = 3
		h := newHarness(t, cfg,
			use(`search {"query":"a"}`), use(`search {"query":"b"}`), use(`search {"query":"c"}`), say("Done."))
		ans, err := h.answer(t, context.Background(), t4Request())
		if err != nil {
			t.Fatal(err)
		}
		if ans.Llm.StopReason != StopMaxIterations || ans.Llm.Iterations != 3 || ans.Llm.Calls != 4 {
			t.Errorf("trace %v", ans.Llm)
		}
	})
	t.Run("the deadline stops a call that has not started to answer", func(t *testing.T) {
		cfg := testConfig()
		cfg.Deadline = 100 * time.Millisecond
		h := newHarness(t, cfg, use(`search {"query":"on-call"}`), block, say("Gathered so far: the alert router."))
		began := time.Now()
		ans, err := h.answer(t, context.Background(), t4Request())
		if err != nil {
			t.Fatal(err)
		}
		if ans.Llm.StopReason != StopDeadline || ans.Degraded || !strings.HasPrefix(ans.Answer, "Gathered so far") {
			t.Errorf("answer %q trace %v", ans.Answer, ans.Llm)
		}
		if took := time.Since(began); took > 3*time.Second {
			t.Errorf("took %v", took)
		}
	})
	t.Run("a caller's nearer deadline leaves time to conclude", func(t *testing.T) {
		// -loop-deadline is far off; the caller gives up in 600 ms. Gathering until
		// then would leave no answer at all.
		h := newHarness(t, testConfig(), use(`search {"query":"on-call"}`), block, say("Gathered so far: the alert router."))
		ctx, cancel := context.WithTimeout(context.Background(), 600*time.Millisecond)
		defer cancel()
		ans, err := h.answer(t, ctx, t4Request())
		if err != nil {
			t.Fatal(err)
		}
		if ans.Llm.StopReason != StopDeadline || ans.Degraded || !strings.HasPrefix(ans.Answer, "Gathered so far") {
			t.Errorf("answer %q trace %v", ans.Answer, ans.Llm)
		}
	})
	t.Run("the deadline lets an answer that is being written finish", func(t *testing.T) {
		cfg := testConfig()
		cfg.Deadline = 50 * time.Millisecond
		slow := func(ctx context.Context, _ ChatRequest, onDelta func(string) error) (*ChatResponse, error) {
			if err := onDelta("The answer "); err != nil {
				return nil, err
			}
			select {
			case <-time.After(150 * time.Millisecond):
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			if err := onDelta("is complete."); err != nil {
				return nil, err
			}
			return &ChatResponse{Content: "The answer is complete.", FinishReason: "stop"}, nil
		}
		h := newHarness(t, cfg, slow)
		ans, err := h.answer(t, context.Background(), t4Request())
		if err != nil || ans.Answer != "The answer is complete." || ans.Llm.StopReason != StopAnswered {
			t.Fatalf("answer %q err %v trace %v", ans.GetAnswer(), err, ans.GetLlm())
		}
	})
}

func TestMalformedToolCallsGetToolErrors(t *testing.T) {
	h := newHarness(t, testConfig(),
		use(`read_document {"path": "ops/oncall.md"`, `list_folder ["deploy"]`, `read_document {"path":"../../etc/passwd"}`, `launch_missiles {}`),
		say("Sorry, answering anyway."))
	ans, err := h.answer(t, context.Background(), t4Request())
	if err != nil {
		t.Fatal(err)
	}
	msgs := h.llm.requests()[1].Messages
	asked := msgs[2]
	if asked.Role != RoleAssistant || asked.ToolCalls[0].Arguments != "{}" || asked.ToolCalls[1].Arguments != "{}" || asked.ToolCalls[2].Arguments != `{"path":"../../etc/passwd"}` {
		t.Errorf("echoed calls %+v: garbage arguments must go back as {}", asked.ToolCalls)
	}
	wants := []string{"not a JSON object", "not a JSON object", "outside the knowledge base", `no tool named "launch_missiles"`}
	for i, want := range wants {
		m := msgs[3+i]
		if m.Role != RoleTool || m.ToolCallID != fmt.Sprintf("c%d", i) || !strings.HasPrefix(m.Content, "error: ") || !strings.Contains(m.Content, want) {
			t.Errorf("tool message %d = %+v, want an error saying %q", i, m, want)
		}
	}
	if len(h.kb.reads) != 0 {
		t.Errorf("reads %v: nothing should have been read", h.kb.reads)
	}
	if ans.Degraded || ans.Llm.StopReason != StopAnswered {
		t.Errorf("answer %q trace %v", ans.Answer, ans.Llm)
	}
}

// answeredOnce checks that every call of every assistant turn in msgs is answered by
// exactly one tool message, as chat-completions servers require, and returns the tool
// messages of the first turn with calls, in order.
func answeredOnce(t *testing.T, msgs []Message) []Message {
	t.Helper()
	var first []Message
	for i, m := range msgs {
		if m.Role != RoleAssistant || len(m.ToolCalls) == 0 {
			continue
		}
		replies := map[string]int{}
		var turn []Message
		for _, r := range msgs[i+1:] {
			if r.Role != RoleTool {
				break
			}
			replies[r.ToolCallID]++
			turn = append(turn, r)
		}
		if len(turn) != len(m.ToolCalls) {
			t.Errorf("message %d: %d calls, %d tool messages", i, len(m.ToolCalls), len(turn))
		}
		for _, tc := range m.ToolCalls {
			if replies[tc.ID] != 1 {
				t.Errorf("message %d: call %s answered %d times", i, tc.ID, replies[tc.ID])
			}
		}
		if first == nil {
			first = turn
		}
	}
	return first
}

// A turn may ask for any number of tool calls; at most -loop-max-tool-calls-per-turn
// are run, the rest each get a tool error naming the limit (never dropped: every call
// needs its tool message), and the conversation goes on with the tools still offered.
// The calls not run are not counted by loop detection, so asking again next turn runs
// them, and the iterations count turns, not calls.
func TestToolCallsPastThePerTurnLimitAreAnsweredNotRun(t *testing.T) {
	read := func(path string) string { return `read_document {"path":"` + path + `"}` }
	tests := []struct {
		name      string
		limit     int
		req       func(*memKB) *quarryv1.AnswerRequest
		turns     []turn
		reads     []string
		first     []string // what the first turn's tool messages say, in order
		toolCalls int      // in the trace: those run or stopped, not those past the limit
		iters     int32
		calls     int32
		stop      string
	}{
		{"T4 runs the first calls of a turn and answers the rest with the limit", 3, t4Req,
			[]turn{use(read("deploy/checklist.md"), read("deploy/rollback.md"), read("ops/oncall.md"), read("a.md"), read("b.md")), say("Done.")},
			[]string{"deploy/checklist.md", "deploy/rollback.md", "ops/oncall.md"},
			[]string{"smoke tests", "kubectl rollout undo", "alert router",
				"error: not run: at most 3 tool calls are run per turn and this turn asked for 5; if you still need this call, ask for it again in your next turn",
				"error: not run: at most 3 tool calls are run per turn and this turn asked for 5"},
			3, 2, 2, StopAnswered},
		{"a call past the limit asked for again next turn runs and is no repeat", 2, t4Req,
			[]turn{use(read("deploy/checklist.md"), read("deploy/rollback.md"), read("ops/oncall.md")), use(read("ops/oncall.md")), say("Done.")},
			[]string{"deploy/checklist.md", "deploy/rollback.md", "ops/oncall.md"},
			[]string{"smoke tests", "kubectl rollout undo", "at most 2 tool calls are run per turn and this turn asked for 3"},
			3, 3, 3, StopAnswered},
		{"a turn within the limit runs whole", 3, t4Req,
			[]turn{use(read("deploy/checklist.md"), read("ops/oncall.md")), say("Done.")},
			[]string{"deploy/checklist.md", "ops/oncall.md"},
			[]string{"smoke tests", "alert router"},
			2, 2, 2, StopAnswered},
		{"T3 steps have the same limit", 1, t3Req,
			[]turn{use(read("deploy/rollback.md"), read("ops/oncall.md")), say("Done.")},
			[]string{"deploy/rollback.md"},
			[]string{"kubectl rollout undo", "at most 1 tool calls are run per turn and this turn asked for 2"},
			1, 1, 2, StopAnswered},
		{"a repeat within the limit still stops the loop; the calls past it say so", 3, t4Req,
			[]turn{use(read("ops/oncall.md"), read("ops/oncall.md"), read("deploy/rollback.md"), read("deploy/checklist.md")), say("From what I read.")},
			[]string{"ops/oncall.md"},
			[]string{"alert router", "already made", "not run: the loop stopped (loop_detected)", "not run: the loop stopped (loop_detected)"},
			3, 1, 2, StopLoopDetected},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig()
			cfg.MaxToolCallsPerTurn = tt.limit
			h := newHarness(t, cfg, tt.turns...)
			ans, err := h.answer(t, context.Background(), tt.req(h.kb))
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(h.kb.reads, tt.reads) {
				t.Errorf("reads %v, want %v", h.kb.reads, tt.reads)
			}
			reqs := h.llm.requests()
			if len(reqs) != int(tt.calls) {
				t.Fatalf("%d calls, want %d", len(reqs), tt.calls)
			}
			if tt.stop == StopAnswered && len(reqs[1].Tools) == 0 && tt.req(h.kb).Tier == quarryv1.Tier_TIER_AGENTIC {
				t.Error("the turn after the limit was offered no tools")
			}
			turn := answeredOnce(t, reqs[len(reqs)-1].Messages)
			if len(turn) != len(tt.first) {
				t.Fatalf("first turn's tool messages %+v, want %d", turn, len(tt.first))
			}
			for i, want := range tt.first {
				if !strings.Contains(turn[i].Content, want) {
					t.Errorf("tool message %d = %q, want it to say %q", i, turn[i].Content, want)
				}
			}
			l := ans.Llm
			if ans.Degraded || l.StopReason != tt.stop || len(l.ToolCalls) != tt.toolCalls || l.Iterations != tt.iters || l.Calls != tt.calls {
				t.Errorf("answer %q degraded %v trace %v", ans.Answer, ans.Degraded, l)
			}
		})
	}
}

// Each tool message answers its call by id, so within a turn every call needs an id of
// its own, or servers reject the next request. Missing and repeated ids are made up;
// a made-up id must not take one the model wrote for a later call.
func TestToolCallIDsAreUniqueWithinATurn(t *testing.T) {
	tests := []struct {
		name      string
		ids, want []string
	}{
		{"distinct ids are kept", []string{"a", "b"}, []string{"a", "b"}},
		{"missing ids are made up", []string{"", "a", ""}, []string{"call_2_0", "a", "call_2_2"}},
		{"a repeat gets a new id, the first keeps it", []string{"a", "a", "a"}, []string{"a", "call_2_1", "call_2_2"}},
		{"a made-up id avoids the model's", []string{"a", "a", "call_2_1"}, []string{"a", "call_2_1_1", "call_2_1"}},
		{"as does a filled-in one", []string{"", "call_2_0"}, []string{"call_2_0_1", "call_2_0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &run{msgs: make([]Message, 2)}
			in := make([]ToolCall, len(tt.ids))
			for i, id := range tt.ids {
				in[i] = ToolCall{ID: id, Name: "search", Arguments: "{}"}
			}
			got := r.uniqueCallIDs(in)
			ids := make([]string, len(got))
			for i, tc := range got {
				ids[i] = tc.ID
			}
			if !slices.Equal(ids, tt.want) {
				t.Errorf("ids %q, want %q", ids, tt.want)
			}
			if in[0].ID != tt.ids[0] {
				t.Errorf("the model's calls were changed: %+v", in)
			}
		})
	}
}

func TestLLMFailuresGiveAMarkedExtractiveAnswer(t *testing.T) {
	t.Run("T3 quotes the pre-fetched documents", func(t *testing.T) {
		h := newHarness(t, testConfig(), fail("HTTP 429 Too Many Requests after 3 attempts"))
		ans, err := h.answer(t, context.Background(), t3Request(h.kb))
		if err != nil {
			t.Fatal(err)
		}
		if !ans.Degraded || ans.DegradedReason != "the LLM failed: HTTP 429 Too Many Requests after 3 attempts" || ans.Llm.StopReason != StopLLMError {
			t.Errorf("degraded %v reason %q trace %v", ans.Degraded, ans.DegradedReason, ans.Llm)
		}
		for _, want := range []string{"> Degraded answer: the LLM failed: HTTP 429 Too Many Requests after 3 attempts.", "> Check the error budget before a production deploy.", "From `deploy/checklist.md`."} {
			if !strings.Contains(ans.Answer, want) {
				t.Errorf("answer lacks %q:\n%s", want, ans.Answer)
			}
		}
		if !slices.Equal(paths(ans.Sources), []string{"deploy/checklist.md"}) {
			t.Errorf("sources %v", paths(ans.Sources))
		}
		// Shared with callers who asked the same normalised question in other words.
		if q := t3Request(h.kb).GetQuery(); strings.Contains(ans.Answer, q) {
			t.Errorf("answer quotes the question %q:\n%s", q, ans.Answer)
		}
	})
	t.Run("T4 with nothing read quotes the search's excerpts", func(t *testing.T) {
		h := newHarness(t, testConfig(), fail("could not connect to the endpoint after 3 attempts"))
		ans, err := h.answer(t, context.Background(), t4Request())
		if err != nil {
			t.Fatal(err)
		}
		if !ans.Degraded || !strings.Contains(ans.Answer, "> paged by the alert router") {
			t.Errorf("answer %q", ans.Answer)
		}
	})
	t.Run("text already streamed stays and the fallback follows it", func(t *testing.T) {
		broken := func(_ context.Context, _ ChatRequest, onDelta func(string) error) (*ChatResponse, error) {
			_ = onDelta("Check the")
			return nil, &ProviderError{Summary: "the answer stream broke off after it had started", Err: errors.New("EOF")}
		}
		h := newHarness(t, testConfig(), broken)
		ans, err := h.answer(t, context.Background(), t3Request(h.kb))
		if err != nil {
			t.Fatal(err)
		}
		if !ans.Degraded || !strings.HasPrefix(ans.Answer, "Check the\n\n> Degraded answer: the LLM failed: the answer stream broke off") {
			t.Errorf("answer %q", ans.Answer)
		}
	})
	t.Run("a failed final call after the loop stopped falls back too", func(t *testing.T) {
		h := newHarness(t, testConfig(), use(`read_document {"path":"ops/oncall.md"}`), use(`read_document {"path":"ops/oncall.md"}`), fail("HTTP 503 Service Unavailable after 3 attempts"))
		ans, err := h.answer(t, context.Background(), t4Request())
		if err != nil {
			t.Fatal(err)
		}
		if !ans.Degraded || ans.Llm.StopReason != StopLLMError || !strings.Contains(ans.Answer, "> paged by the alert router\n\nFrom `ops/oncall.md`.") {
			t.Errorf("answer %q trace %v", ans.Answer, ans.Llm)
		}
	})
	t.Run("an empty answer is not an answer", func(t *testing.T) {
		h := newHarness(t, testConfig(), say(""))
		ans, err := h.answer(t, context.Background(), t3Request(h.kb))
		if err != nil || !ans.Degraded || !strings.Contains(ans.DegradedReason, "no answer") {
			t.Fatalf("err %v answer %v", err, ans)
		}
	})
	// A reasoning model (max_completion_tokens) can spend the whole limit thinking and
	// write nothing: the reason must point at the limit, which the operator can raise,
	// not read as if the model had nothing to say.
	t.Run("an empty answer cut by the token limit says so", func(t *testing.T) {
		thought := func(context.Context, ChatRequest, func(string) error) (*ChatResponse, error) {
			return &ChatResponse{FinishReason: "length", Model: "fake-1", PromptTokens: 900, CompletionTokens: 1024}, nil
		}
		h := newHarness(t, testConfig(), thought)
		ans, err := h.answer(t, context.Background(), t3Request(h.kb))
		if err != nil || !ans.Degraded || !strings.Contains(ans.DegradedReason, "token limit") || !strings.Contains(ans.DegradedReason, "-t3-max-tokens") {
			t.Fatalf("err %v reason %q", err, ans.GetDegradedReason())
		}
	})
	t.Run("nothing at hand says so", func(t *testing.T) {
		h := newHarness(t, testConfig(), fail("HTTP 500 Internal Server Error after 3 attempts"))
		req := t4Request()
		req.Sources = nil
		ans, err := h.answer(t, context.Background(), req)
		if err != nil || !strings.Contains(ans.Answer, "No document in the knowledge base was found") || len(ans.Sources) != 0 {
			t.Fatalf("err %v answer %q", err, ans.GetAnswer())
		}
	})
}

func TestAnswersCutByTheTokenLimitSaySo(t *testing.T) {
	cut := func(_ context.Context, _ ChatRequest, onDelta func(string) error) (*ChatResponse, error) {
		_ = onDelta("Partial")
		return &ChatResponse{Content: "Partial", FinishReason: "length"}, nil
	}
	h := newHarness(t, testConfig(), cut)
	ans, err := h.answer(t, context.Background(), t4Request())
	if err != nil || !strings.Contains(ans.Answer, "token limit") {
		t.Fatalf("err %v answer %q", err, ans.GetAnswer())
	}
}

func TestTheCallerGoingAwayStopsTheAnswer(t *testing.T) {
	t.Run("a cancelled context ends the LLM call", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		started := make(chan struct{})
		h := newHarness(t, testConfig(), func(ctx context.Context, req ChatRequest, onDelta func(string) error) (*ChatResponse, error) {
			close(started)
			return block(ctx, req, onDelta)
		})
		go func() { <-started; cancel() }()
		if _, err := h.answer(t, ctx, t4Request()); !errors.Is(err, context.Canceled) {
			t.Fatalf("err %v, want context.Canceled", err)
		}
		if n := len(h.llm.requests()); n != 1 {
			t.Errorf("%d calls after cancel, want 1", n)
		}
	})
	t.Run("a failed send stops the answer", func(t *testing.T) {
		h := newHarness(t, testConfig(), say("Hello there"))
		gone := errors.New("stream closed")
		_, err := h.agent.Answer(context.Background(), t3Request(h.kb), func(string) error { return gone })
		if !errors.Is(err, gone) {
			t.Fatalf("err %v, want the send error", err)
		}
	})
	t.Run("a request for another tier is refused", func(t *testing.T) {
		h := newHarness(t, testConfig())
		req := t4Request()
		req.Tier = quarryv1.Tier_TIER_DIRECT
		if _, err := h.answer(t, context.Background(), req); !errors.Is(err, ErrTier) {
			t.Fatalf("err %v, want ErrTier", err)
		}
	})
}

// TestAHungManifestFetchIsLeftOut: the manifest is a map the answer can do without, so
// a search service that does not answer its fetch costs -manifest-timeout, not the
// answer.
func TestAHungManifestFetchIsLeftOut(t *testing.T) {
	cfg := testConfig()
	cfg.ManifestTimeout = 50 * time.Millisecond
	h := newHarness(t, cfg, say("Answered without the map."))
	h.kb.hangMan = true
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	began := time.Now()
	ans, err := h.answer(t, ctx, t4Request())
	if err != nil || ans.Degraded || ans.Answer != "Answered without the map." {
		t.Fatalf("answer %q degraded %v err %v", ans.GetAnswer(), ans.GetDegraded(), err)
	}
	if took := time.Since(began); took > 2*time.Second {
		t.Errorf("took %v: the hung fetch held the answer", took)
	}
	if msgs := h.llm.requests()[0].Messages; strings.Contains(msgs[len(msgs)-1].Content, "Structure of the knowledge base") {
		t.Error("the prompt has a manifest section, with no manifest fetched")
	}
}

// TestAFailedManifestFetchIsRemembered: while a search replica hangs, each fetch costs
// the whole -manifest-timeout; the next prompts go without the map at once, and after
// manifestRetry the fetch is tried again. A caller giving up is not a failure of search.
func TestAFailedManifestFetchIsRemembered(t *testing.T) {
	cfg := testConfig()
	cfg.ManifestTimeout = 200 * time.Millisecond
	h := newHarness(t, cfg, say("1"), say("2"), say("3"), say("4"), say("5"))
	now := time.Unix(1e9, 0)
	h.agent.manifests.now = func() time.Time { return now }
	h.kb.hangMan = true
	ask := func(ctx context.Context, gen uint64) time.Duration {
		t.Helper()
		req := t4Request()
		req.Generation = gen
		began := time.Now()
		if _, err := h.answer(t, ctx, req); err != nil {
			t.Fatal(err)
		}
		return time.Since(began)
	}
	ask(context.Background(), 7)
	// A new generation would fetch again; within manifestRetry of the failure it does not.
	if took := ask(context.Background(), 8); took >= cfg.ManifestTimeout {
		t.Errorf("the answer after a failed fetch took %v: it waited for the hung replica again", took)
	}
	if h.kb.manifests != 1 {
		t.Fatalf("%d manifest fetches within %v of a failed one, want 1", h.kb.manifests, manifestRetry)
	}
	now = now.Add(manifestRetry)
	h.kb.hangMan = false
	ask(context.Background(), 8)
	if h.kb.manifests != 2 {
		t.Fatalf("%d manifest fetches once %v had passed, want 2", h.kb.manifests, manifestRetry)
	}
	if msgs := h.llm.requests()[2].Messages; !strings.Contains(msgs[len(msgs)-1].Content, "Structure of the knowledge base") {
		t.Error("the fetch tried again succeeded, but its manifest is not in the prompt")
	}

	// The caller's own deadline cutting a fetch short is not remembered.
	h.kb.hangMan = true
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	req := t4Request()
	req.Generation = 9
	h.answer(t, ctx, req) // may fail or degrade: the caller's time is up
	h.kb.hangMan = false
	ask(context.Background(), 9)
	if h.kb.manifests != 4 {
		t.Errorf("%d manifest fetches, want 4: a fetch the caller cut short must not hold off the next", h.kb.manifests)
	}
}

func TestTheManifestIsFetchedOncePerGeneration(t *testing.T) {
	h := newHarness(t, testConfig(), say("one"), say("two"), say("three"), say("four"))
	ctx := context.Background()
	for range 2 {
		if _, err := h.answer(t, ctx, t4Request()); err != nil {
			t.Fatal(err)
		}
	}
	if h.kb.manifests != 1 {
		t.Errorf("%d manifest fetches for one generation, want 1", h.kb.manifests)
	}
	h.kb.gen = 8
	req := t4Request()
	req.Generation = 8
	if _, err := h.answer(t, ctx, req); err != nil {
		t.Fatal(err)
	}
	if h.kb.manifests != 2 {
		t.Errorf("%d manifest fetches after a new generation, want 2", h.kb.manifests)
	}
	h.kb.noMan = true
	req.Generation = 9
	if _, err := h.answer(t, ctx, req); err != nil {
		t.Fatalf("a missing manifest must not fail the answer: %v", err)
	}
}

// Two search replicas hold the same tree under generations 5 and 9, and the manifest
// came from the one with 5. Questions routed by either name the same content version,
// and the manifest is fetched once; by generation alone, every question the other
// replica routed fetched it again.
func TestTheManifestIsFetchedOncePerContentVersion(t *testing.T) {
	for _, tc := range []struct {
		name    string
		version uint64
		fetches int
	}{
		{"with content versions", 1<<63 | 3, 1},
		{"by generation alone", 0, 3}, // each of the three routed by the replica with 9
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, testConfig(), say("1"), say("2"), say("3"), say("4"), say("5"))
			h.kb.gen, h.kb.version = 5, tc.version
			for _, gen := range []uint64{9, 5, 9, 9, 5} {
				req := t4Request()
				req.Generation, req.ContentVersion = gen, tc.version
				if _, err := h.answer(t, context.Background(), req); err != nil {
					t.Fatal(err)
				}
			}
			if h.kb.manifests != tc.fetches {
				t.Errorf("%d manifest fetches, want %d", h.kb.manifests, tc.fetches)
			}
		})
	}
}

func TestConfigValidate(t *testing.T) {
	d := DefaultConfig()
	if err := d.Validate(); err != nil {
		t.Fatalf("defaults rejected: %v", err)
	}
	if d.T3MaxTokens != 1024 || d.T3Temperature != 0.3 || d.T4MaxTokens != 2048 || d.T4Temperature != 0.5 || d.T4MaxIterations != 50 {
		t.Errorf("defaults %+v differ from SPEC's T3/T4 numbers", d)
	}
	if d.MaxToolCallsPerTurn != 8 {
		t.Errorf("-loop-max-tool-calls-per-turn defaults to %d, want 8", d.MaxToolCallsPerTurn)
	}
	tests := []struct {
		name string
		edit func(*Config)
		flag string
	}{
		{"a repeat limit of 1 would stop every call", func(c *Config) { c.RepeatLimit = 1 }, "-loop-repeat-limit"},
		{"temperature is in [0,2]", func(c *Config) { c.T4Temperature = 3 }, "-t4-temperature"},
		{"the deadline is positive", func(c *Config) { c.Deadline = 0 }, "-loop-deadline"},
		{"the manifest fetch has time", func(c *Config) { c.ManifestTimeout = 0 }, "-manifest-timeout"},
		{"iterations are at least 1", func(c *Config) { c.T4MaxIterations = 0 }, "-t4-max-iterations"},
		{"a turn may run a tool call", func(c *Config) { c.MaxToolCallsPerTurn = 0 }, "-loop-max-tool-calls-per-turn"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			tt.edit(&c)
			if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tt.flag) {
				t.Fatalf("err %v, want one naming %s", err, tt.flag)
			}
		})
	}
}

// tooLong refuses the chat as too long for the model's context window.
func tooLong(context.Context, ChatRequest, func(string) error) (*ChatResponse, error) {
	return nil, &ProviderError{Summary: "HTTP 400 Bad Request after 1 attempt: the conversation exceeds the model's context window", Err: ErrContextLength}
}

// A tool result trimmed to fit the context window is gone from the chat, so the call
// that gave it may be made again: loop detection must not stop it as a repeat whose
// result "is above".
func TestACallTrimmedAwayMayBeMadeAgain(t *testing.T) {
	const read = `read_document {"path":"deploy/checklist.md"}`
	h := newHarness(t, testConfig(), use(read), use(`read_document {"path":"deploy/rollback.md"}`), tooLong, use(read), say("Check the error budget."))
	h.kb.docs["deploy/checklist.md"].Content = strings.Repeat("Check the error budget before a production deploy. ", 20)
	ans, err := h.answer(t, context.Background(), t4Request())
	if err != nil {
		t.Fatal(err)
	}
	if ans.Degraded || ans.Llm.StopReason != StopAnswered {
		t.Fatalf("degraded %v (%q), stop %q; want an answer", ans.Degraded, ans.DegradedReason, ans.Llm.StopReason)
	}
	if want := []string{"deploy/checklist.md", "deploy/rollback.md", "deploy/checklist.md"}; !slices.Equal(h.kb.reads, want) {
		t.Errorf("reads %v, want %v", h.kb.reads, want)
	}
	reqs := h.llm.requests()
	if len(reqs) != 5 {
		t.Fatalf("%d calls, want 5", len(reqs))
	}
	if got := reqs[3].Messages[3].Content; !strings.HasPrefix(got, "[trimmed to fit the model's context: ") {
		t.Errorf("the first result, asked again, is %q; want the note", got)
	}
}

// A refusal that comes back after the loop's deadline is not answered by shortening
// the chat and asking again: the loop stops and concludes.
func TestARefusalPastTheDeadlineIsNotRetried(t *testing.T) {
	cfg := testConfig()
	cfg.Deadline = 100 * time.Millisecond
	late := func(ctx context.Context, req ChatRequest, onDelta func(string) error) (*ChatResponse, error) {
		<-ctx.Done()
		return tooLong(ctx, req, onDelta)
	}
	h := newHarness(t, cfg, use(`read_document {"path":"deploy/checklist.md"}`), use(`read_document {"path":"deploy/rollback.md"}`), late, say("From what was read."))
	h.kb.docs["deploy/checklist.md"].Content = strings.Repeat("Check the error budget before a production deploy. ", 20)
	ans, err := h.answer(t, context.Background(), t4Request())
	if err != nil {
		t.Fatal(err)
	}
	if ans.Degraded || ans.Llm.StopReason != StopDeadline || len(h.llm.requests()) != 4 {
		t.Fatalf("degraded %v (%q), stop %q, %d calls; want the concluding answer after 4 calls", ans.Degraded, ans.DegradedReason, ans.Llm.StopReason, len(h.llm.requests()))
	}
	if got := h.llm.requests()[3].Messages[3].Content; strings.HasPrefix(got, "[trimmed") {
		t.Errorf("the chat was trimmed after the deadline: %q", got)
	}
}

// The most recent tool result is never trimmed to fit the context window: the model
// just asked for it. A turn past -loop-max-tool-calls-per-turn ends with tool messages
// of calls not run; taken for the most recent result, they let the result of the last
// call that ran be trimmed away.
func TestTheLastResultRunIsNotTrimmedBehindCallsPastTheLimit(t *testing.T) {
	cfg := testConfig()
	cfg.MaxToolCallsPerTurn = 1
	h := newHarness(t, cfg, use(`read_document {"path":"deploy/checklist.md"}`, `read_document {"path":"deploy/rollback.md"}`), tooLong, say("From what was read."))
	h.kb.docs["deploy/checklist.md"].Content = strings.Repeat("Check the error budget before a production deploy. ", 20)
	if _, err := h.answer(t, context.Background(), t4Request()); err != nil {
		t.Fatal(err)
	}
	for i, req := range h.llm.requests() {
		for _, m := range req.Messages {
			if m.Role == RoleTool && strings.HasPrefix(m.Content, "[trimmed") {
				t.Errorf("request %d: the only result run, the most recent, was trimmed: %q", i, m.Content)
			}
		}
	}
}
