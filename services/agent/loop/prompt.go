package loop

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	quarryv1 "github.com/quarry-router/quarry/gen/quarry/v1"
)

const systemT3 = `You answer engineers' questions from their team's knowledge base, a tree of markdown documents.
Answer only from the documents given to you and those you read with tools; never invent commands, names, numbers or steps.
If the documents do not answer the question, say so and say what is missing.
Be concise and use markdown. Cite the documents you used by path in backticks, e.g. ` + "`auth/jwt/token-validation.md`" + `.`

const systemT4 = `You answer engineers' questions from their team's knowledge base, a tree of markdown documents, which you explore with read-only tools:
search (ranked search), read_document (one document in full), list_folder (a folder's entries) and related (a document's related links).
Work in steps: search, read the documents that look relevant, follow related links or list folders when that helps, then answer.
Never repeat a call you have already made: its result is above. Stop as soon as you can answer.
Answer only from what the tools returned; never invent commands, names, numbers or steps. If the knowledge base does not answer the question, say so and say what is missing.
Be concise and use markdown. Cite the documents you used by path in backticks, e.g. ` + "`auth/jwt/token-validation.md`" + `.`

// prompt builds the opening messages of an answer: the instructions, the first docs of
// the pre-fetched documents (T3) or the search's leads (T4), the knowledge base's
// structure (manifest, rendered) and the question.
func (a *Agent) prompt(spec tierSpec, req *quarryv1.AnswerRequest, manifest string, docs int) []Message {
	var sys, user strings.Builder
	switch spec.tier {
	case quarryv1.Tier_TIER_SINGLE_LLM:
		sys.WriteString(systemT3)
		if spec.maxSteps > 0 {
			fmt.Fprintf(&sys, "\nIf the documents given are not enough, you may read other documents of the knowledge base with read_document, in at most %d rounds of at most %d calls each; then answer.", spec.maxSteps, a.cfg.MaxToolCallsPerTurn)
		}
		user.WriteString("# Documents found for the question\n")
		if len(req.GetPrefetched()) == 0 {
			user.WriteString("\n(none)\n")
		}
		for i, d := range req.GetPrefetched() {
			if i == docs {
				left := req.GetPrefetched()[i:]
				paths := make([]string, len(left))
				for j, d := range left {
					paths[j] = "`" + d.GetPath() + "`"
				}
				fmt.Fprintf(&user, "\n(%d more found for the question, left out to fit the model's context: %s", len(left), strings.Join(paths, ", "))
				if spec.maxSteps > 0 {
					user.WriteString("; read them with read_document if you need them")
				}
				user.WriteString(".)\n")
				break
			}
			fmt.Fprintf(&user, "\n## Document %d\n\n%s\n", i+1, a.tools.FormatDocument(d))
		}
	default:
		sys.WriteString(systemT4)
		fmt.Fprintf(&sys, "\nYou may make at most %d rounds of tool calls, of at most %d calls each.", spec.maxSteps, a.cfg.MaxToolCallsPerTurn)
		user.WriteString("# Search results for the question (starting points; read before relying on them)\n\n")
		if len(req.GetSources()) == 0 {
			user.WriteString("(none)\n")
		}
		for i, s := range req.GetSources() {
			if i == 5 {
				break
			}
			fmt.Fprintf(&user, "%d. `%s` — %s (relevance %.2f)\n", i+1, s.GetPath(), oneLine(s.GetTitle()), s.GetRelevance())
		}
	}
	if manifest != "" {
		user.WriteString("\n# Structure of the knowledge base\n\n")
		user.WriteString(manifest)
	}
	fmt.Fprintf(&user, "\n# Question\n\n%s\n", req.GetQuery())
	return []Message{{Role: RoleSystem, Content: sys.String()}, {Role: RoleUser, Content: user.String()}}
}

// concludePrompt asks the model to answer now, saying why.
func concludePrompt(why string) string {
	var because string
	switch why {
	case StopLoopDetected:
		because = "you repeated a call you had already made"
	case StopDeadline:
		because = "the time for gathering information is up"
	default:
		because = "you have used every tool round allowed"
	}
	return "Stop using tools: " + because + ". Answer the question now from the documents and tool results above. " +
		"If they do not answer it, say so and say what is missing."
}

// manifestRetry is how long a knowledge base's failed manifest fetch is remembered.
// While a search replica hangs, each fetch costs the whole -manifest-timeout; without
// the memory every prompt in that time would pay it again, for a map the answer can do
// without.
const manifestRetry = 10 * time.Second

// manifests caches each knowledge base's rendered manifest for the content (or, from a
// search service that reports no content version, the generation) it was built for,
// so that a prompt costs no manifest call while the knowledge is unchanged.
type manifests struct {
	mu sync.Mutex
	m  map[string]renderedManifest
	// failed holds when each knowledge base's last fetch failed, until manifestRetry
	// after it.
	failed map[string]time.Time
	now    func() time.Time // time.Now; tests move it
}

type renderedManifest struct {
	gen, version uint64
	text         string
}

// get returns the rendered manifest of kb's content version (or, for version 0,
// generation gen; 0 for both: whatever is current), fetching it when the cached one is
// of other content or an older generation. Search replicas holding the same tree number
// its generation differently: by generation alone, a manifest fetched from the replica
// with the smaller number would be fetched again for every question the other answered.
// A manifest that cannot be fetched is left out of the prompt (or the one cached before
// stands in): the documents matter more than the map. A failed fetch is not tried again
// for manifestRetry.
func (c *manifests) get(ctx context.Context, a *Agent, kb string, gen, version uint64) string {
	now := time.Now
	if c.now != nil {
		now = c.now
	}
	c.mu.Lock()
	cached, ok := c.m[kb]
	failed, recent := c.failed[kb]
	recent = recent && now().Sub(failed) < manifestRetry
	c.mu.Unlock()
	switch {
	case ok && version != 0 && cached.version == version:
		return cached.text
	case ok && version == 0 && gen != 0 && cached.gen >= gen:
		return cached.text
	case recent:
		return cached.text // "" when there is none
	}
	// A search replica that hangs (a partition drops packets, nothing resets) would
	// otherwise hold the answer until the caller gives up, for a map it can do without.
	mctx, cancel := context.WithTimeout(ctx, a.cfg.ManifestTimeout)
	defer cancel()
	m, err := a.tools.Manifest(mctx, kb)
	if err != nil {
		// A caller that gave up says nothing about the search service.
		if ctx.Err() == nil {
			a.log.WarnContext(ctx, "manifest unavailable; prompting without it", "kb", kb, "err", err, "retry_in", manifestRetry)
			c.mu.Lock()
			if c.failed == nil {
				c.failed = map[string]time.Time{}
			}
			c.failed[kb] = now()
			c.mu.Unlock()
		}
		return cached.text // "" when there is none
	}
	text := renderManifest(m)
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.failed, kb)
	if c.m == nil {
		c.m = map[string]renderedManifest{}
	}
	if prev, ok := c.m[kb]; !ok || prev.gen <= m.GetGeneration() || m.GetContentVersion() == version && version != 0 {
		c.m[kb] = renderedManifest{gen: m.GetGeneration(), version: m.GetContentVersion(), text: text}
	}
	return text
}

// renderManifest writes the manifest's three lanes as markdown lists; the search
// service has already fitted each lane to its token budget.
func renderManifest(m *quarryv1.GetManifestResponse) string {
	var b strings.Builder
	lane := func(title string, l *quarryv1.ManifestLane) {
		if len(l.GetEntries()) == 0 {
			return
		}
		fmt.Fprintf(&b, "## %s\n\n", title)
		for _, e := range l.GetEntries() {
			fmt.Fprintf(&b, "- `%s` — %s", e.GetPath(), oneLine(e.GetTitle()))
			if s := oneLine(e.GetSummary()); s != "" {
				fmt.Fprintf(&b, ": %s", s)
			}
			b.WriteString("\n")
		}
		if l.GetOmitted() > 0 {
			fmt.Fprintf(&b, "- … %d more not listed\n", l.GetOmitted())
		}
		b.WriteString("\n")
	}
	lane("Folder summaries (broadest first)", m.GetSummaries())
	lane("Documents (most important first)", m.GetContexts())
	lane("Archived documents (stubs)", m.GetStubs())
	return b.String()
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// validJSONObject reports whether s is one JSON object.
func validJSONObject(s string) bool {
	var v map[string]json.RawMessage
	return json.Unmarshal([]byte(s), &v) == nil && v != nil
}
