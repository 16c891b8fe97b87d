package loop

import (
	"fmt"
	"slices"
	"strings"

	quarryv1 "github.com/quarry-router/quarry/gen/quarry/v1"
	"github.com/quarry-router/quarry/platform/text"
	"github.com/quarry-router/quarry/services/agent/tools"
)

const (
	extractiveMaxDocs = 3
	passageChars      = 800
)

// extractive is the answer when the LLM fails: the best passage of each of the best
// documents at hand, quoted, under a banner that says the answer is degraded and why.
// Every sentence after the banner is the knowledge base's own. The documents are
// those gathered (pre-fetched or read), in the search's order where it ranked them;
// without any, the search's own excerpts. It does not quote the question: callers who
// ask the same normalised question at once share one answer, each in a wording of its
// own (as the search service's extractive answer, which is cached).
func extractive(query, reason string, docs []*quarryv1.Document, ranked []*quarryv1.Source) (string, []*quarryv1.Source) {
	type passage struct {
		src  *quarryv1.Source
		text string
	}
	var picked []passage
	rank := func(path string) int {
		i := slices.IndexFunc(ranked, func(s *quarryv1.Source) bool { return s.GetPath() == path })
		if i < 0 {
			return len(ranked)
		}
		return i
	}
	ordered := slices.Clone(docs)
	slices.SortStableFunc(ordered, func(a, b *quarryv1.Document) int { return rank(a.GetPath()) - rank(b.GetPath()) })
	words := text.Stems(text.Tokens(query))
	for _, d := range ordered {
		src := &quarryv1.Source{Path: d.GetPath(), Title: d.GetTitle()}
		if i := rank(d.GetPath()); i < len(ranked) {
			src = ranked[i]
		}
		p := src.GetExcerpt()
		if p == "" {
			p = bestPassage(d.GetContent(), words)
		}
		picked = append(picked, passage{src, p})
	}
	if len(picked) == 0 {
		for _, s := range ranked {
			picked = append(picked, passage{s, s.GetExcerpt()})
		}
	}
	picked = picked[:min(len(picked), extractiveMaxDocs)]

	var b strings.Builder
	fmt.Fprintf(&b, "> Degraded answer: %s. The passages below are quoted from the knowledge base, not written by an LLM.\n\n",
		strings.TrimSuffix(oneLine(reason), "."))
	b.WriteString("## Summary\n\n")
	if len(picked) == 0 {
		b.WriteString("No document in the knowledge base was found for the question.\n")
		return b.String(), nil
	}
	fmt.Fprintf(&b, "%s in the knowledge base may answer the question; the best passages follow.\n\n## Excerpts\n\n",
		text.Count(len(picked), "document", "documents"))
	sources := make([]*quarryv1.Source, 0, len(picked))
	for i, p := range picked {
		if i > 0 {
			b.WriteString("---\n\n")
		}
		title := p.src.GetTitle()
		if title == "" {
			title = p.src.GetPath()
		}
		fmt.Fprintf(&b, "### %s\n\n%s\n\nFrom `%s`.\n\n", oneLine(title), blockquote(p.text), p.src.GetPath())
		sources = append(sources, p.src)
	}
	b.WriteString("## Sources\n\n")
	for _, s := range sources {
		fmt.Fprintf(&b, "- `%s`\n", s.GetPath())
	}
	return b.String(), sources
}

// bestPassage returns about passageChars of content starting at the paragraph that
// holds the most of the query's stems (the first paragraph when none does).
func bestPassage(content string, stems []string) string {
	paras := strings.Split(strings.TrimSpace(content), "\n\n")
	best, bestScore := 0, 0
	for i, p := range paras {
		have := text.Stems(text.Tokens(p))
		score := 0
		for _, s := range stems {
			if slices.Contains(have, s) {
				score++
			}
		}
		if score > bestScore {
			best, bestScore = i, score
		}
	}
	var b strings.Builder
	for _, p := range paras[best:] {
		if b.Len() > 0 {
			if b.Len()+len(p) > passageChars {
				break
			}
			b.WriteString("\n\n")
		}
		b.WriteString(p)
	}
	return tools.Cut(b.String(), passageChars)
}

func blockquote(s string) string {
	s = strings.TrimSpace(s)
	if s == "" {
		return "> _(no passage)_"
	}
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		if l == "" {
			lines[i] = ">"
		} else {
			lines[i] = "> " + l
		}
	}
	return strings.Join(lines, "\n")
}
