// Package loop answers the questions the gates route to an LLM: T3, one call with the
// pre-fetched documents in its prompt, and T4, an agentic loop over read-only tools.
// Both stream the answer as it is written and fall back to an extractive answer, marked
// degraded, when the LLM fails.
package loop

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	quarryv1 "github.com/quarry-router/quarry/gen/quarry/v1"
	"github.com/quarry-router/quarry/services/agent/tools"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// Why a loop stopped, as LlmTrace.stop_reason reports it.
const (
	StopAnswered      = "answered"
	StopLoopDetected  = "loop_detected"
	StopMaxIterations = "max_iterations"
	StopDeadline      = "deadline"
	// StopLLMError means the LLM failed and the answer is the extractive fallback.
	StopLLMError = "llm_error"
)

// ErrTier means a request named a tier the agent does not serve.
var ErrTier = errors.New("tier must be SINGLE_LLM or AGENTIC")

// errDeadline cancels a call that had not started to answer when the loop's deadline
// passed.
var errDeadline = errors.New("loop deadline passed")

// maxTraceCall bounds one "name(args)" entry of the trace.
const maxTraceCall = 200

// Agent answers T3 and T4 questions.
type Agent struct {
	cfg       Config
	llm       Provider
	tools     *tools.Set
	log       *slog.Logger
	manifests manifests
}

// New returns an Agent that asks p and lets it use ts.
func New(cfg Config, p Provider, ts *tools.Set, log *slog.Logger) *Agent {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Agent{cfg: cfg, llm: p, tools: ts, log: log}
}

// tierSpec is what differs between T3 and T4.
type tierSpec struct {
	tier        quarryv1.Tier
	maxTokens   int
	temperature float64
	tools       []string
	// maxSteps bounds the calls that may use tools; the next call must answer.
	maxSteps int
}

func (a *Agent) spec(t quarryv1.Tier) (tierSpec, error) {
	switch t {
	case quarryv1.Tier_TIER_SINGLE_LLM:
		return tierSpec{tier: t, maxTokens: a.cfg.T3MaxTokens, temperature: a.cfg.T3Temperature,
			tools: []string{tools.ReadDocument}, maxSteps: a.cfg.T3MaxToolSteps}, nil
	case quarryv1.Tier_TIER_AGENTIC:
		return tierSpec{tier: t, maxTokens: a.cfg.T4MaxTokens, temperature: a.cfg.T4Temperature,
			tools: tools.All, maxSteps: a.cfg.T4MaxIterations}, nil
	default:
		return tierSpec{}, fmt.Errorf("%w, got %s", ErrTier, t)
	}
}

// Answer answers req, passing the answer text to onDelta as it is written. The
// concatenated deltas always equal the final answer, degraded answers included. It
// returns an error only when req is not for an LLM tier, when ctx ends (the caller has
// gone: every LLM call is cancelled with it) or when onDelta fails; an LLM that fails
// gives a degraded answer, not an error.
func (a *Agent) Answer(ctx context.Context, req *quarryv1.AnswerRequest, onDelta func(string) error) (*quarryv1.AgentAnswer, error) {
	spec, err := a.spec(req.GetTier())
	if err != nil {
		return nil, err
	}
	r := &run{a: a, spec: spec, req: req, onDelta: onDelta, trace: &quarryv1.LlmTrace{}, seen: map[string]int{},
		keys: map[int]string{}, trimmed: map[int]bool{}}
	ctx, span, own := answerSpan(ctx, spec.tier)
	if own {
		defer span.End()
	}
	defer r.record(span)
	if spec.tier == quarryv1.Tier_TIER_SINGLE_LLM {
		for _, d := range req.GetPrefetched() {
			r.gather(d)
		}
	}
	began := time.Now()
	r.manifest = a.manifests.get(ctx, a, req.GetKnowledgeBase(), req.GetGeneration(), req.GetContentVersion())
	r.docsInPrompt = len(req.GetPrefetched())
	r.msgs = a.prompt(spec, req, r.manifest, r.docsInPrompt)
	if err := r.loop(ctx); err != nil {
		return nil, err
	}
	ans := r.result()
	if a.log.Enabled(ctx, slog.LevelDebug) {
		a.log.DebugContext(ctx, "answered", "kb", req.GetKnowledgeBase(), "tier", spec.tier.String(), "calls", r.trace.GetCalls(),
			"tool_calls", len(r.trace.GetToolCalls()), "tool_calls_over_limit", r.overLimitCalls, "stop", r.trace.GetStopReason(), "degraded", r.degraded, "elapsed", time.Since(began))
	}
	return ans, nil
}

// run is the state of one answer.
type run struct {
	a       *Agent
	spec    tierSpec
	req     *quarryv1.AnswerRequest
	onDelta func(string) error
	msgs    []Message
	trace   *quarryv1.LlmTrace
	seen    map[string]int // tool calls asked for, by tools.Set.Key

	// What shrink needs to shorten the chat when it outgrows the model's context
	// window: the rendered manifest and the number of pre-fetched documents (T3) in the
	// prompt, to build it again with fewer; each tool message's call, by index in msgs;
	// the tool messages replaced by a note; and, for the trace, how often and how much.
	manifest     string
	docsInPrompt int
	keys         map[int]string
	trimmed      map[int]bool
	trims        int
	trimmedChars int

	text    strings.Builder // everything sent through onDelta: the answer
	docs    []*quarryv1.Document
	sources []*quarryv1.Source
	// unread are the paths of pre-fetched documents shrink took out of the prompt and
	// the model has not read since: not sources of what it writes (the extractive
	// fallback still quotes them).
	unread map[string]bool

	// overLimitCalls counts the tool calls not run for being past the per-turn limit
	// (see overLimit).
	overLimitCalls int

	degraded bool
	reason   string
}

// loop runs the calls until the model answers or the loop has to stop.
func (r *run) loop(ctx context.Context) error {
	deadline := time.Now().Add(r.a.cfg.Deadline)
	if d, ok := ctx.Deadline(); ok {
		// A caller with less time than -loop-deadline (its own gRPC deadline, or the
		// gateway's -agent-timeout set too low) would get nothing from a loop that
		// gathers until the caller gives up: the concluding answer keeps a third of it.
		if byCaller := time.Now().Add(time.Until(d) * 2 / 3); byCaller.Before(deadline) {
			deadline = byCaller
		}
	}
	tctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	for step := 1; ; step++ {
		if step > r.spec.maxSteps && step > 1 {
			return r.conclude(ctx, StopMaxIterations)
		}
		done, stop, err := r.iterate(ctx, tctx, deadline, step)
		switch {
		case done:
			return err
		case stop != "":
			return r.conclude(ctx, stop)
		}
	}
}

// iterate runs one round of the loop: a call and the tools it asked for. done says the
// answer is over (err is why, if it failed); otherwise stop, when set, is why the loop
// must stop and conclude.
func (r *run) iterate(ctx, tctx context.Context, deadline time.Time, step int) (done bool, stop string, err error) {
	ctx, span := r.startIteration(ctx, step)
	defer span.End()
	offered := r.spec.tools
	if step > r.spec.maxSteps {
		offered = nil // T3 with no tool steps: the first call answers
	}
	if r.spec.tier == quarryv1.Tier_TIER_AGENTIC {
		r.trace.Iterations = int32(step)
	}
	resp, err := r.call(ctx, deadline, offered)
	switch {
	case ctx.Err() != nil:
		return true, "", ctx.Err()
	case errors.Is(err, errDeadline):
		return false, StopDeadline, nil
	case err != nil:
		return true, "", r.fail(ctx, err)
	}
	if len(resp.ToolCalls) == 0 || len(offered) == 0 {
		return true, "", r.finish(ctx, resp, StopAnswered)
	}
	if r.spec.tier == quarryv1.Tier_TIER_SINGLE_LLM {
		r.trace.Iterations = int32(step)
	}
	// The tools run within the loop's deadline, their spans in this round's.
	stop, err = r.useTools(ctx, trace.ContextWithSpan(tctx, span), resp, offered)
	return err != nil, stop, err
}

// useTools runs the calls of one assistant turn and adds the turn and every call's
// result to the chat. Each call gets a tool message, even when it is not run (the
// chat-completions format requires one per call): at most -loop-max-tool-calls-per-turn
// calls are run, the rest answered with an error (see overLimit). It returns why the
// loop must stop, if it must.
func (r *run) useTools(ctx, tctx context.Context, resp *ChatResponse, offered []string) (string, error) {
	calls := r.uniqueCallIDs(resp.ToolCalls)
	asked := make([]ToolCall, len(calls))
	copy(asked, calls)
	for i := range asked {
		// Echo the calls back in a form servers accept, since those that re-validate
		// the history (vLLM, Ollama) reject the whole chat over one bad call:
		// garbage arguments become an empty object, a missing name a placeholder. The
		// call is still run as the model wrote it, so its tool message says what was
		// wrong (for a nameless call: no tool named "").
		if !validJSONObject(asked[i].Arguments) {
			asked[i].Arguments = "{}"
		}
		if asked[i].Name == "" {
			asked[i].Name = unnamedTool
		}
	}
	r.msgs = append(r.msgs, Message{Role: RoleAssistant, Content: resp.Content, ToolCalls: asked})

	stop := ""
	limit := r.a.cfg.MaxToolCallsPerTurn
	for i, tc := range calls {
		if i >= limit {
			break
		}
		out, err := r.useTool(ctx, tctx, tc, offered, &stop)
		if err != nil {
			return "", err
		}
		r.keys[len(r.msgs)] = r.a.tools.Key(tc.Name, tc.Arguments)
		r.msgs = append(r.msgs, Message{Role: RoleTool, ToolCallID: tc.ID, Content: out})
	}
	if over := len(calls) - limit; over > 0 {
		r.overLimit(ctx, calls[limit:], stop)
	}
	return stop, nil
}

// overLimit answers the calls of a turn past -loop-max-tool-calls-per-turn without
// running them: each gets a tool message (the chat-completions format requires one per
// call) telling the model the limit, or, when the loop is stopping anyway, why. They
// are not counted by loop detection (they did not run, and the model is told it may ask
// again), and they get no entry in the trace's tool calls nor a span each, so that a
// turn of hundreds costs neither: the iteration and answer spans count them.
func (r *run) overLimit(ctx context.Context, calls []ToolCall, stop string) {
	limit := r.a.cfg.MaxToolCallsPerTurn
	msg := fmt.Sprintf("error: not run: at most %d tool calls are run per turn and this turn asked for %d; "+
		"if you still need this call, ask for it again in your next turn", limit, limit+len(calls))
	if stop != "" {
		msg = "error: not run: the loop stopped (" + stop + ")"
	}
	for _, tc := range calls {
		r.msgs = append(r.msgs, Message{Role: RoleTool, ToolCallID: tc.ID, Content: msg})
	}
	r.overLimitCalls += len(calls)
	trace.SpanFromContext(ctx).SetAttributes(attribute.Int("quarry.agent.tool_calls_over_limit", len(calls)))
	r.a.log.InfoContext(ctx, "the model asked for more tool calls in one turn than are run; answered the rest with an error",
		"kb", r.req.GetKnowledgeBase(), "tier", r.spec.tier.String(), "asked", limit+len(calls), "limit", limit)
}

// unnamedTool stands in, in the echoed assistant turn, for the name of a call the model
// wrote without one. It names no tool, so it cannot be mistaken for a call that ran.
const unnamedTool = "unnamed_tool"

// uniqueCallIDs returns a copy of one turn's calls in which every call has an id no
// other call of the turn has: each tool message answers its call by id, and servers
// reject a chat where an id is missing or two tool messages answer the same one. A
// missing or repeated id (servers that number calls per turn, models that copy ids)
// is replaced by a made-up one; the first call with a given id keeps it.
func (r *run) uniqueCallIDs(in []ToolCall) []ToolCall {
	calls := make([]ToolCall, len(in))
	copy(calls, in)
	taken := make(map[string]bool, len(calls)) // every id the turn uses or will use
	for _, tc := range calls {
		taken[tc.ID] = true
	}
	kept := make(map[string]bool, len(calls))
	for i := range calls {
		if id := calls[i].ID; id != "" && !kept[id] {
			kept[id] = true
			continue
		}
		// len(r.msgs) makes the id unique across turns too; the suffix avoids the
		// ids the model wrote, which may look the same.
		id := fmt.Sprintf("call_%d_%d", len(r.msgs), i)
		for n := 1; taken[id]; n++ {
			id = fmt.Sprintf("call_%d_%d_%d", len(r.msgs), i, n)
		}
		taken[id], kept[id] = true, true
		calls[i].ID = id
	}
	return calls
}

// useTool runs one call, unless the loop has to stop (*stop says why, and is set here
// when this call is the reason), and returns what the model is told.
func (r *run) useTool(ctx, tctx context.Context, tc ToolCall, offered []string, stop *string) (string, error) {
	canon := tools.Canonical(tc.Arguments)
	r.trace.ToolCalls = append(r.trace.ToolCalls, tools.Cut(tc.Name+"("+canon+")", maxTraceCall))
	tctx, span := startTool(tctx, tc)
	switch {
	case *stop != "":
		endTool(span, *stop, nil)
		return "error: not run: the loop stopped (" + *stop + ")", nil
	case r.repeat(r.a.tools.Key(tc.Name, tc.Arguments)):
		*stop = StopLoopDetected
		endTool(span, *stop, nil)
		return "error: not run: this exact call was already made; its result is above. Stop calling tools and answer.", nil
	case tctx.Err() != nil:
		*stop = StopDeadline
		endTool(span, *stop, nil)
		return "error: not run: the deadline for gathering information has passed", nil
	}
	res := r.a.tools.Call(tctx, r.req.GetKnowledgeBase(), tc.Name, tc.Arguments, offered)
	endTool(span, "", res.Err)
	if ctx.Err() != nil {
		return "", ctx.Err()
	}
	if res.Err != nil {
		if tctx.Err() != nil {
			*stop = StopDeadline
		}
		r.a.log.DebugContext(ctx, "tool call failed", "tool", tc.Name, "err", res.Err)
	}
	if res.Doc != nil {
		r.gather(res.Doc)
	}
	return res.Text, nil
}

// repeat counts a call and reports whether it has now been asked for RepeatLimit times.
func (r *run) repeat(key string) bool {
	r.seen[key]++
	return r.seen[key] >= r.a.cfg.RepeatLimit
}

// call makes one LLM call with the offered tools. Until the model starts writing its
// answer, the loop's deadline cancels the call (errDeadline); once text is flowing the
// call may finish, bounded by the provider's own timeout.
func (r *run) call(ctx context.Context, deadline time.Time, offered []string) (*ChatResponse, error) {
	remaining := time.Until(deadline)
	if remaining <= 0 {
		return nil, errDeadline
	}
	cctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var (
		mu               sync.Mutex
		started, expired bool
	)
	timer := time.AfterFunc(remaining, func() {
		mu.Lock()
		defer mu.Unlock()
		if !started {
			expired = true
			cancel(errDeadline)
		}
	})
	defer timer.Stop()
	first := true
	resp, err := r.chat(cctx, offered, func(d string) error {
		mu.Lock()
		if expired {
			mu.Unlock()
			return errDeadline
		}
		started = true
		mu.Unlock()
		return r.emitTurn(d, &first)
	})
	mu.Lock()
	timedOut := expired
	mu.Unlock()
	if err != nil && timedOut && ctx.Err() == nil {
		return nil, errDeadline
	}
	return resp, err
}

// chat sends the conversation so far and records the call in the trace. A conversation
// the model refuses as too long for its context window is shortened (see shrink) and
// sent again, within ctx, until it fits or nothing is left to shorten; each round
// shortens it, so the rounds are few, and they are not retries of the provider's.
func (r *run) chat(ctx context.Context, offered []string, onDelta func(string) error) (*ChatResponse, error) {
	req := ChatRequest{MaxTokens: r.spec.maxTokens, Temperature: r.spec.temperature}
	for _, s := range r.a.tools.Specs(offered...) {
		req.Tools = append(req.Tools, ToolSpec(s))
	}
	r.trace.Calls++
	for {
		req.Messages = r.msgs
		resp, err := r.a.llm.Chat(ctx, req, onDelta)
		if resp != nil {
			r.trace.PromptTokens += resp.PromptTokens
			r.trace.CompletionTokens += resp.CompletionTokens
			if resp.Model != "" {
				r.trace.Model = resp.Model
			}
		}
		if err == nil || !errors.Is(err, ErrContextLength) || ctx.Err() != nil || !r.shrink(ctx) {
			return resp, err
		}
	}
}

// conclude stops the loop and has the model answer, without tools, from what the
// chat holds; if that fails, the answer is the extractive fallback.
func (r *run) conclude(ctx context.Context, why string) error {
	r.a.log.DebugContext(ctx, "agent loop stopped", "kb", r.req.GetKnowledgeBase(), "reason", why, "calls", r.trace.GetCalls())
	r.msgs = append(r.msgs, Message{Role: RoleUser, Content: concludePrompt(why)})
	ctx, span := tracer.Start(ctx, "agent.conclude", trace.WithAttributes(attribute.String("quarry.agent.stop_reason", why)))
	defer span.End()
	cctx, cancel := context.WithTimeout(ctx, r.a.cfg.ConcludeTimeout)
	defer cancel()
	first := true
	resp, err := r.chat(cctx, nil, func(d string) error { return r.emitTurn(d, &first) })
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err != nil {
		return r.fail(ctx, err)
	}
	return r.finish(ctx, resp, why)
}

// finish completes an answer the model wrote.
func (r *run) finish(ctx context.Context, resp *ChatResponse, why string) error {
	if strings.TrimSpace(resp.Content) == "" {
		if resp.FinishReason == "length" {
			// Reasoning models spend max_completion_tokens on thinking first: an
			// empty turn cut by the limit wants a larger one, which only the
			// operator can give.
			flag := "-t4-max-tokens"
			if r.spec.tier == quarryv1.Tier_TIER_SINGLE_LLM {
				flag = "-t3-max-tokens"
			}
			return r.fail(ctx, fmt.Errorf("the model reached its token limit (%d, %s) before it wrote an answer", r.spec.maxTokens, flag))
		}
		return r.fail(ctx, errors.New("the model returned no answer"))
	}
	r.trace.StopReason = why
	if resp.FinishReason == "length" {
		if err := r.emit("\n\n_(The answer reached the token limit and is cut off here.)_"); err != nil {
			return err
		}
	}
	var paths []string
	for _, d := range r.docs {
		if r.unread[d.GetPath()] {
			continue
		}
		paths = append(paths, "`"+d.GetPath()+"`")
		r.sources = append(r.sources, r.source(d))
	}
	if len(paths) > 0 {
		if err := r.emit("\n\n---\nSources: " + strings.Join(paths, ", ") + "\n"); err != nil {
			return err
		}
	}
	return nil
}

// fail answers with the extractive fallback after the LLM failed.
func (r *run) fail(ctx context.Context, cause error) error {
	reason := "the LLM failed: " + summary(cause)
	r.a.log.WarnContext(ctx, "LLM did not answer; serving an extractive answer", "kb", r.req.GetKnowledgeBase(),
		"tier", r.spec.tier.String(), "calls", r.trace.GetCalls(), "err", cause)
	r.degraded, r.reason = true, reason
	r.trace.StopReason = StopLLMError
	answer, sources := extractive(r.req.GetQuery(), reason, r.docs, r.req.GetSources())
	r.sources = sources
	sep := ""
	if r.text.Len() > 0 {
		sep = "\n\n"
	}
	return r.emit(sep + answer)
}

// summary is the user-facing part of a failure.
func summary(err error) string {
	var pe *ProviderError
	switch {
	case errors.As(err, &pe):
		return pe.Summary
	case errors.Is(err, context.DeadlineExceeded):
		return "no answer in time"
	case errors.Is(err, ErrProvider):
		return "the provider did not answer"
	default:
		return err.Error()
	}
}

// emitTurn passes on the text of one model turn, separating it from the text of an
// earlier turn.
func (r *run) emitTurn(d string, first *bool) error {
	if d == "" {
		return nil
	}
	if *first && r.text.Len() > 0 {
		d = "\n\n" + d
	}
	*first = false
	return r.emit(d)
}

func (r *run) emit(d string) error {
	r.text.WriteString(d)
	return r.onDelta(d)
}

// gather records a document the model has read, once.
func (r *run) gather(d *quarryv1.Document) {
	delete(r.unread, d.GetPath())
	for _, have := range r.docs {
		if have.GetPath() == d.GetPath() {
			return
		}
	}
	r.docs = append(r.docs, d)
}

// source describes a document the answer was built from, with the search's scores
// when the search found it.
func (r *run) source(d *quarryv1.Document) *quarryv1.Source {
	for _, s := range r.req.GetSources() {
		if s.GetPath() == d.GetPath() {
			return s
		}
	}
	return &quarryv1.Source{Path: d.GetPath(), Title: d.GetTitle(), Archived: d.GetArchived(),
		Importance: d.GetImportance(), Maturity: d.GetMaturity()}
}

func (r *run) result() *quarryv1.AgentAnswer {
	return &quarryv1.AgentAnswer{
		Answer:         r.text.String(),
		Sources:        r.sources,
		Degraded:       r.degraded,
		DegradedReason: r.reason,
		Llm:            r.trace,
	}
}
