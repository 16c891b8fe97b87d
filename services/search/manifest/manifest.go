// Package manifest builds a knowledge base's manifest: its folder summaries, knowledge
// files and archived stubs in three lanes, each cut to a token budget, for an LLM prompt.
package manifest

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/quarry-router/quarry/services/search/tree"
)

// Config holds the lane budgets (SPEC §1 "manifest").
type Config struct {
	// SummariesBudget is the token budget of the summaries lane (_index.md files).
	SummariesBudget int
	// ContextsBudget is the token budget of the contexts lane (knowledge files).
	ContextsBudget int
	// StubsBudget is the token budget of the stubs lane (archived ghost cues).
	StubsBudget int
	// SummaryChars is the longest description an entry carries, in characters.
	SummaryChars int
	// CharsPerToken converts characters to estimated tokens (tokens = ceil(chars / it)).
	CharsPerToken int
}

// DefaultConfig returns the defaults of the reference.
func DefaultConfig() Config {
	return Config{SummariesBudget: 2000, ContextsBudget: 4000, StubsBudget: 500, SummaryChars: 200, CharsPerToken: 4}
}

// RegisterFlags registers the budgets with their defaults.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	d := DefaultConfig()
	fs.IntVar(&c.SummariesBudget, "manifest-summaries-budget", d.SummariesBudget, "token budget of the manifest's summaries lane (_index.md files)")
	fs.IntVar(&c.ContextsBudget, "manifest-contexts-budget", d.ContextsBudget, "token budget of the manifest's contexts lane (knowledge files)")
	fs.IntVar(&c.StubsBudget, "manifest-stubs-budget", d.StubsBudget, "token budget of the manifest's stubs lane (archived ghost cues)")
	fs.IntVar(&c.SummaryChars, "manifest-summary-chars", d.SummaryChars, "longest description of one manifest entry, in characters")
	fs.IntVar(&c.CharsPerToken, "manifest-chars-per-token", d.CharsPerToken, "characters per estimated token")
}

// Validate rejects budgets that cannot be met.
func (c *Config) Validate() error {
	var errs []error
	for _, f := range []struct {
		name string
		v    int
		min  int
	}{
		{"manifest-summaries-budget", c.SummariesBudget, 0},
		{"manifest-contexts-budget", c.ContextsBudget, 0},
		{"manifest-stubs-budget", c.StubsBudget, 0},
		{"manifest-summary-chars", c.SummaryChars, 1},
		{"manifest-chars-per-token", c.CharsPerToken, 1},
	} {
		if f.v < f.min {
			errs = append(errs, fmt.Errorf("-%s must be at least %d, got %d", f.name, f.min, f.v))
		}
	}
	return errors.Join(errs...)
}

// Manifest is the structural overview of one generation of a knowledge base.
type Manifest struct {
	// Generation is the generation the manifest was built for (set by Cache.Get).
	Generation uint64
	// Summaries holds _index.md files, broadest first (fewest path segments, then path).
	Summaries Lane
	// Contexts holds knowledge files, highest importance first (then path).
	Contexts Lane
	// Stubs holds archived ghost cues, by path.
	Stubs Lane
}

// Lane is one ordered list of entries cut to a budget.
type Lane struct {
	// Entries is the longest prefix of the lane's order that fits the budget.
	Entries []Entry
	// Budget is the lane's budget.
	Budget int
	// Used is the sum of the entries' tokens, at most Budget.
	Used int
	// Omitted counts the entries left out once the budget was spent.
	Omitted int
}

// Entry is one document in the manifest.
type Entry struct {
	Path  string
	Title string
	// Summary is the document's opening text in whole sentences where possible, without
	// headings, code or markup, at most Config.SummaryChars characters.
	Summary string
	// Tokens is the entry's estimated cost: ceil((len(Path)+len(Title)+len(Summary)) /
	// CharsPerToken), lengths in characters.
	Tokens int
	// Importance is the runtime importance the contexts lane is ordered by.
	Importance float64
}

// Build lays out the manifest of t. importance gives a document's runtime importance
// (nil uses the front-matter value). A lane keeps its entries in order until the next
// one does not fit its budget; that entry and all after it are omitted, so a lane is
// always the most important part of its order, never a reshuffle to fill the budget.
//
// cfg should pass Validate; the zero Config means DefaultConfig().
func Build(t *tree.Tree, importance func(path string) float64, cfg Config) *Manifest {
	if cfg == (Config{}) {
		cfg = DefaultConfig()
	}
	if importance == nil {
		importance = func(p string) float64 {
			if d, ok := t.ByPath[p]; ok {
				return d.Importance
			}
			return 0
		}
	}
	var sums, ctxs, stubs []Entry
	for _, d := range t.Docs {
		e := Entry{Path: d.Path, Title: d.Title, Summary: describe(d.Content, cfg.SummaryChars), Importance: importance(d.Path)}
		if math.IsNaN(e.Importance) {
			e.Importance = 0
		}
		e.Tokens = tokens(utf8.RuneCountInString(e.Path)+utf8.RuneCountInString(e.Title)+utf8.RuneCountInString(e.Summary), cfg.CharsPerToken)
		switch {
		case d.Archived:
			stubs = append(stubs, e)
		case d.Summary:
			sums = append(sums, e)
		default:
			ctxs = append(ctxs, e)
		}
	}
	slices.SortFunc(sums, func(a, b Entry) int {
		return cmp.Or(cmp.Compare(strings.Count(a.Path, "/"), strings.Count(b.Path, "/")), strings.Compare(a.Path, b.Path))
	})
	slices.SortFunc(ctxs, func(a, b Entry) int {
		return cmp.Or(cmp.Compare(b.Importance, a.Importance), strings.Compare(a.Path, b.Path))
	})
	slices.SortFunc(stubs, func(a, b Entry) int { return strings.Compare(a.Path, b.Path) })
	return &Manifest{
		Summaries: fill(sums, cfg.SummariesBudget),
		Contexts:  fill(ctxs, cfg.ContextsBudget),
		Stubs:     fill(stubs, cfg.StubsBudget),
	}
}

func tokens(chars, perToken int) int {
	if perToken < 1 {
		perToken = 1
	}
	return (chars + perToken - 1) / perToken
}

func fill(entries []Entry, budget int) Lane {
	l := Lane{Budget: budget}
	for i, e := range entries {
		if l.Used+e.Tokens > budget {
			l.Omitted = len(entries) - i
			break
		}
		l.Entries = append(l.Entries, e)
		l.Used += e.Tokens
	}
	return l
}

var (
	linkRe    = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
	listRe    = regexp.MustCompile(`^(?:[-*+]|\d{1,9}[.)])\s+`)
	ruleRe    = regexp.MustCompile(`^(?:(?:-\s*){3,}|(?:\*\s*){3,}|(?:_\s*){3,})$`)
	markupRep = strings.NewReplacer("**", "", "__", "", "`", "", "<!--", "", "-->", "")
)

// describe returns the opening text of a markdown body for a manifest entry: headings,
// code blocks, tables and rules dropped, links reduced to their text, then as many whole
// sentences as fit in max characters. A first sentence longer than max is cut at a word
// boundary and marked with an ellipsis.
func describe(content string, max int) string {
	var sentences []string
	total := 0
	var para []string
	flush := func() {
		if len(para) == 0 {
			return
		}
		text := strings.Join(strings.Fields(strings.Join(para, " ")), " ")
		para = para[:0]
		for _, s := range splitSentences(text) {
			sentences = append(sentences, s)
			total += utf8.RuneCountInString(s) + 1
		}
	}
	for line, trimmed := range tree.BodyLines(content) {
		if total > max {
			break // enough text to choose from
		}
		switch {
		case trimmed == "", strings.HasPrefix(trimmed, "#"), strings.HasPrefix(trimmed, "|"), ruleRe.MatchString(trimmed):
			flush()
			continue
		case len(line)-len(strings.TrimLeft(line, " \t")) >= 4 && len(para) == 0:
			continue // indented code
		}
		trimmed = strings.TrimSpace(strings.TrimLeft(trimmed, "> "))
		if m := listRe.FindString(trimmed); m != "" {
			flush() // each list item stands alone
			trimmed = trimmed[len(m):]
		}
		trimmed = markupRep.Replace(linkRe.ReplaceAllString(trimmed, "$1"))
		if trimmed != "" {
			para = append(para, trimmed)
		}
	}
	flush()
	return pick(sentences, max)
}

// splitSentences splits text after '.', '!' or '?' followed by a space. A fragment at
// the end of a paragraph or list item (no final punctuation) is a sentence too; it gets
// a full stop so that joined fragments still read as separate statements.
func splitSentences(text string) []string {
	var out []string
	start := 0
	for i := 0; i < len(text); i++ {
		c := text[i]
		if (c == '.' || c == '!' || c == '?') && i+1 < len(text) && text[i+1] == ' ' {
			out = append(out, text[start:i+1])
			start = i + 2
		}
	}
	if last := strings.TrimSpace(text[start:]); last != "" {
		if !strings.ContainsAny(last[len(last)-1:], ".!?:;") {
			last += "."
		}
		out = append(out, last)
	}
	return out
}

func pick(sentences []string, max int) string {
	var b strings.Builder
	n := 0
	for _, s := range sentences {
		l := utf8.RuneCountInString(s)
		sep := 0
		if n > 0 {
			sep = 1
		}
		if n+sep+l > max {
			if n == 0 {
				return cut(s, max)
			}
			break
		}
		if sep == 1 {
			b.WriteByte(' ')
		}
		b.WriteString(s)
		n += sep + l
	}
	return b.String()
}

// cut shortens s to at most max characters, at a word boundary when there is one, and
// ends it with an ellipsis.
func cut(s string, max int) string {
	if max <= 1 {
		return "…"
	}
	r := []rune(s)[:max-1]
	end := len(r)
	for i := len(r) - 1; i > 0; i-- {
		if unicode.IsSpace(r[i]) {
			end = i
			break
		}
	}
	return strings.TrimRightFunc(string(r[:end]), func(c rune) bool { return unicode.IsSpace(c) || unicode.IsPunct(c) }) + "…"
}
