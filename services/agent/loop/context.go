package loop

import (
	"context"
	"fmt"
	"unicode/utf8"

	quarryv1 "github.com/quarry-router/quarry/gen/quarry/v1"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// minTrim is the length under which a tool result is left whole when the chat must
// shrink: a note in its place would save next to nothing.
const minTrim = 256

// trimNote stands in for a tool result of n characters cut to fit the context window.
func trimNote(n int) string {
	return fmt.Sprintf("[trimmed to fit the model's context: %d chars; call again if needed]", n)
}

// shrink shortens the chat after the model refused it as too long for its context
// window (every tool result stays in every later prompt, and small-context models
// behind vLLM or llama.cpp server fill theirs in a few reads). The older half of the
// tool results still whole give way to a note, the most recent one never; with none
// left, a T3 prompt keeps only the first of its pre-fetched documents. The system
// prompt and the question are never touched. A call trimmed away may be made again:
// loop detection forgets it. shrink reports false when nothing is left to shorten.
func (r *run) shrink(ctx context.Context) bool {
	// The most recent result of a call that ran (only those have a key): the tool
	// messages of calls past -loop-max-tool-calls-per-turn may follow it.
	last := -1
	for i := len(r.msgs) - 1; i >= 0; i-- {
		if _, ran := r.keys[i]; ran && r.msgs[i].Role == RoleTool {
			last = i
			break
		}
	}
	var whole []int
	for i, m := range r.msgs {
		if m.Role == RoleTool && i != last && !r.trimmed[i] && len(m.Content) > minTrim {
			whole = append(whole, i)
		}
	}
	results, dropped, chars := 0, 0, 0
	switch {
	case len(whole) > 0:
		results = (len(whole) + 1) / 2
		for _, i := range whole[:results] {
			n := utf8.RuneCountInString(r.msgs[i].Content)
			r.msgs[i].Content = trimNote(n)
			chars += n - utf8.RuneCountInString(r.msgs[i].Content)
			r.trimmed[i] = true
			if k, ok := r.keys[i]; ok && r.seen[k] > 0 {
				r.seen[k]--
			}
		}
	case r.spec.tier == quarryv1.Tier_TIER_SINGLE_LLM && r.docsInPrompt > 1:
		dropped = r.docsInPrompt - 1
		before := utf8.RuneCountInString(r.msgs[1].Content)
		r.docsInPrompt = 1
		r.unread = map[string]bool{}
		for _, d := range r.req.GetPrefetched()[1:] {
			if d.GetPath() != r.req.GetPrefetched()[0].GetPath() {
				r.unread[d.GetPath()] = true
			}
		}
		r.msgs[1].Content = r.a.prompt(r.spec, r.req, r.manifest, r.docsInPrompt)[1].Content
		chars = before - utf8.RuneCountInString(r.msgs[1].Content)
	default:
		return false
	}
	r.trims++
	r.trace.ContextTrims = int32(r.trims)
	r.trimmedChars += chars
	trace.SpanFromContext(ctx).AddEvent("context trimmed", trace.WithAttributes(
		attribute.Int("quarry.agent.trimmed_results", results),
		attribute.Int("quarry.agent.dropped_documents", dropped),
		attribute.Int("quarry.agent.trimmed_chars", chars)))
	r.a.log.InfoContext(ctx, "the chat outgrew the model's context window; shortened it", "kb", r.req.GetKnowledgeBase(),
		"tier", r.spec.tier.String(), "tool_results_trimmed", results, "documents_dropped", dropped, "chars", chars)
	return true
}
