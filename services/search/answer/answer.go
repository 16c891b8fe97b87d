// Package answer writes the answers the search service gives without an LLM: the T2 direct
// answer, the out-of-domain answer and the degraded extractive answer.
package answer

import (
	"errors"
	"flag"
	"fmt"
	"regexp"
	"strings"
	"unicode/utf8"

	"github.com/quarry-router/quarry/platform/text"
	"github.com/quarry-router/quarry/services/search/rank"
	"github.com/quarry-router/quarry/services/search/tree"
)

// Config holds the answer limits of SPEC §2 (T2 direct answer, excerpts).
type Config struct {
	// MaxDocChars caps each document's content in a direct answer, in characters (5000).
	MaxDocChars int
	// MaxDocs caps the documents in a direct answer (5).
	MaxDocs int
	// ExcerptChars is the size of an excerpt chunk in characters (about 800).
	ExcerptChars int
	// ExcerptOverlap is how much consecutive chunks overlap, in characters (about 200), so a
	// passage cut by one chunk boundary is whole in the next chunk.
	ExcerptOverlap int
}

// DefaultConfig returns the SPEC defaults.
func DefaultConfig() Config {
	return Config{MaxDocChars: 5000, MaxDocs: 5, ExcerptChars: 800, ExcerptOverlap: 200}
}

// RegisterFlags registers the limits with their SPEC defaults.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	d := DefaultConfig()
	fs.IntVar(&c.MaxDocChars, "answer-max-doc-chars", d.MaxDocChars, "characters of each document in a direct answer")
	fs.IntVar(&c.MaxDocs, "answer-max-docs", d.MaxDocs, "documents in a direct answer")
	fs.IntVar(&c.ExcerptChars, "answer-excerpt-chars", d.ExcerptChars, "characters of an excerpt chunk")
	fs.IntVar(&c.ExcerptOverlap, "answer-excerpt-overlap", d.ExcerptOverlap, "characters consecutive excerpt chunks share")
}

// Validate rejects nonsense, naming the flag.
func (c Config) Validate() error {
	var errs []error
	if c.MaxDocChars < 1 {
		errs = append(errs, fmt.Errorf("-answer-max-doc-chars must be >= 1, got %d", c.MaxDocChars))
	}
	if c.MaxDocs < 1 {
		errs = append(errs, fmt.Errorf("-answer-max-docs must be >= 1, got %d", c.MaxDocs))
	}
	if c.ExcerptChars < 1 {
		errs = append(errs, fmt.Errorf("-answer-excerpt-chars must be >= 1, got %d", c.ExcerptChars))
	}
	if c.ExcerptOverlap < 0 || c.ExcerptOverlap >= c.ExcerptChars {
		errs = append(errs, fmt.Errorf("-answer-excerpt-overlap must be in [0, -answer-excerpt-chars), got %d", c.ExcerptOverlap))
	}
	return errors.Join(errs...)
}

// extractiveMaxDocs caps the excerpts of a degraded answer: it stands in for an LLM answer,
// so it quotes the few best passages rather than whole documents.
const extractiveMaxDocs = 3

const truncatedMarker = "…(truncated)"

// Direct returns the T2 answer (SPEC §2 "T2 direct answer"): Summary, Details (each
// document's content under its title, at most cfg.MaxDocs documents of cfg.MaxDocChars
// characters), Sources and Gaps (see Gaps). It does not quote the question: the answer
// is cached and served to whoever asks it again, in their own words (T0, T1).
func Direct(docs []*tree.Document, gaps []string, cfg Config) string {
	docs = docs[:min(len(docs), cfg.MaxDocs)]
	var b strings.Builder
	b.WriteString("## Summary\n\n")
	fmt.Fprintf(&b, "%s in the knowledge base %s the question.\n\n", text.Count(len(docs), "document", "documents"), verb(len(docs), "answers", "answer"))
	b.WriteString("## Details\n\n")
	for i, d := range docs {
		if i > 0 {
			b.WriteString("---\n\n")
		}
		fmt.Fprintf(&b, "### %s\n\n", title(d))
		// Cut before demoting: MaxDocChars caps the document, not the "###" that demoting
		// adds; and a line the cut leaves looking like a heading is demoted too.
		body := trimBlankLines(dropTitleHeading(d.Content, d.Title))
		if body == "" {
			body = "_(empty document)_"
		}
		b.WriteString(closeBlocks(demoteHeadings(truncate(body, cfg.MaxDocChars))))
		b.WriteString("\n\n")
	}
	writeSources(&b, docs)
	writeGaps(&b, gaps)
	return b.String()
}

// OutOfDomain returns the answer to a question the knowledge base does not cover. Like
// Direct's, it is cached for whoever asks again, so it does not quote the question.
func OutOfDomain() string {
	return "This topic is not covered in the knowledge base.\n\n" +
		"Nothing in it answers the question. Curate the knowledge first: add a markdown file " +
		"about this topic to the tree (for example `<domain>/<topic>/<name>.md` with a title and the facts). " +
		"The change starts a new generation of the knowledge base, so asking again then answers from the new file.\n"
}

// Extractive returns the degraded answer for a question routed to an LLM when no LLM can
// answer: a banner with the reason, the best passage of each of the top results (at most
// three; excerpt picks it, nil for Excerpt with the default size), their sources and the
// search words none of them contains (words and contains as for Gaps). Every sentence
// after the banner is quoted from the knowledge base. Like Direct's, it does not quote
// the question: without an agent it is cached for whoever asks again.
func Extractive(words []string, results []rank.Result, excerpt func(*tree.Document) string,
	contains func(path, stem string) bool, reason string) string {
	if excerpt == nil {
		size := DefaultConfig().ExcerptChars
		excerpt = func(d *tree.Document) string { return Excerpt(d.Content, words, size) }
	}
	top := results[:min(len(results), extractiveMaxDocs)]
	docs := make([]*tree.Document, len(top))
	for i, r := range top {
		docs[i] = r.Doc
	}
	var b strings.Builder
	fmt.Fprintf(&b, "> Degraded answer: %s. The passages below are quoted from the knowledge base, not written by an LLM.\n\n",
		strings.TrimSuffix(oneLine(reason), "."))
	b.WriteString("## Summary\n\n")
	if len(docs) == 0 {
		b.WriteString("No document in the knowledge base matched the question.\n\n")
	} else {
		fmt.Fprintf(&b, "%s in the knowledge base may answer the question; the best passages follow.\n\n", text.Count(len(docs), "document", "documents"))
		b.WriteString("## Excerpts\n\n")
		for i, d := range docs {
			if i > 0 {
				b.WriteString("---\n\n")
			}
			fmt.Fprintf(&b, "### %s\n\n", title(d))
			passage := strings.TrimSpace(excerpt(d))
			if passage == "" {
				passage = "_(no passage)_"
			}
			b.WriteString(blockquote(passage))
			fmt.Fprintf(&b, "\n\nFrom `%s`.\n\n", d.Path)
		}
	}
	writeSources(&b, docs)
	writeGaps(&b, Gaps(words, docs, contains))
	return b.String()
}

// Gaps returns the question's search words whose stem none of docs contains, in
// question order: what the answer does not cover. words are the search words as the
// caller read them: a resolver sets aside the words that name no topic (an opener, a
// greeting, politeness, a scope, the user's data), which listed here would tell the
// reader that the knowledge base lacks "thanks" or "someone". contains reports whether a
// document holds a stem (rank.Corpus.Contains); nil stems the documents' text instead.
func Gaps(words []string, docs []*tree.Document, contains func(path, stem string) bool) []string {
	if contains == nil {
		stems := make(map[string]map[string]struct{}, len(docs))
		for _, d := range docs {
			set := make(map[string]struct{})
			for _, s := range rank.DocStems(d) {
				set[s] = struct{}{}
			}
			stems[d.Path] = set
		}
		contains = func(path, stem string) bool {
			_, ok := stems[path][stem]
			return ok
		}
	}
	var gaps []string
	seen := map[string]struct{}{}
	for _, w := range words {
		if text.IsStopWord(w) {
			continue
		}
		s := text.Stem(w)
		if _, dup := seen[s]; dup {
			continue
		}
		seen[s] = struct{}{}
		found := false
		for _, d := range docs {
			if contains(d.Path, s) {
				found = true
				break
			}
		}
		if !found {
			gaps = append(gaps, w)
		}
	}
	return gaps
}

func writeSources(b *strings.Builder, docs []*tree.Document) {
	b.WriteString("## Sources\n\n")
	if len(docs) == 0 {
		b.WriteString("None.\n\n")
		return
	}
	for _, d := range docs {
		fmt.Fprintf(b, "- `%s`\n", d.Path)
	}
	b.WriteString("\n")
}

func writeGaps(b *strings.Builder, gaps []string) {
	b.WriteString("## Gaps\n\n")
	if len(gaps) == 0 {
		b.WriteString("None found.\n")
		return
	}
	b.WriteString("No answering document mentions:\n\n")
	for _, g := range gaps {
		fmt.Fprintf(b, "- %s\n", oneLine(g))
	}
}

func title(d *tree.Document) string {
	if t := oneLine(d.Title); t != "" {
		return t
	}
	return d.Path
}

func verb(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// oneLine puts text on one line, its runs of white space one space.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// dropTitleHeading removes a first heading (ATX "# title" or setext "title\n=====") that
// repeats the title the answer already shows.
func dropTitleHeading(content, title string) string {
	trimmed := strings.TrimLeft(content, " \t\r\n")
	line, rest, _ := strings.Cut(trimmed, "\n")
	if h := strings.TrimLeft(line, "#"); len(h) < len(line) {
		if strings.EqualFold(strings.TrimSpace(h), strings.TrimSpace(title)) {
			return rest
		}
		return content
	}
	under, after, _ := strings.Cut(rest, "\n")
	if setextLevel(strings.Trim(under, " \t\r")) > 0 && strings.EqualFold(strings.TrimSpace(line), strings.TrimSpace(title)) {
		return after
	}
	return content
}

// trimBlankLines drops the blank lines around s and trailing white space, but not the
// indentation of its first line, which can make it code.
func trimBlankLines(s string) string {
	for {
		line, rest, ok := strings.Cut(s, "\n")
		if !ok || strings.TrimSpace(line) != "" {
			break
		}
		s = rest
	}
	if strings.TrimSpace(s) == "" {
		return ""
	}
	return strings.TrimRight(s, " \t\r\n")
}

// htmlBlock is an open CommonMark HTML block of the kinds that run until a line holds
// their end text (a comment, <pre>, <script>, <style>, <textarea>, <?...?>, <!X...>,
// CDATA), not until a blank line: left open, it hides the rest of the answer as raw
// HTML.
type htmlBlock struct{ end string }

// openHTML returns the HTML block a line opens, if it opens one of those kinds, and the
// rest of the line after the text that opened it.
func openHTML(line string) (h htmlBlock, rest string, ok bool) {
	t := strings.TrimLeft(line, " ")
	if len(line)-len(t) > 3 || !strings.HasPrefix(t, "<") {
		return htmlBlock{}, "", false
	}
	lower := strings.ToLower(t)
	for _, tag := range []string{"pre", "script", "style", "textarea"} {
		if r, ok := strings.CutPrefix(lower, "<"+tag); ok && (r == "" || strings.ContainsRune(" \t\r>", rune(r[0]))) {
			return htmlBlock{"</" + tag + ">"}, r, true
		}
	}
	for _, k := range []struct{ open, end string }{{"<!--", "-->"}, {"<?", "?>"}, {"<![cdata[", "]]>"}} {
		if r, ok := strings.CutPrefix(lower, k.open); ok {
			return htmlBlock{k.end}, r, true
		}
	}
	if len(t) > 2 && t[1] == '!' && ('a' <= lower[2] && lower[2] <= 'z') {
		return htmlBlock{">"}, lower[2:], true
	}
	return htmlBlock{}, "", false
}

func (h htmlBlock) closedBy(line string) bool { return strings.Contains(strings.ToLower(line), h.end) }

// closeBlocks closes a code fence or an HTML block (see htmlBlock) left open, by
// truncation or by the author, so the rest of the answer is not swallowed by it.
func closeBlocks(s string) string {
	var (
		f     tree.Fence
		h     htmlBlock
		inF   bool
		inH   bool
		ind   string // indentation of the line that opened the block
		lines = strings.Split(s, "\n")
	)
	for _, l := range lines {
		switch {
		case inF:
			inF = !f.ClosedBy(l)
		case inH:
			inH = !h.closedBy(l)
		default:
			ind = l[:len(l)-len(strings.TrimLeft(l, " "))]
			if f, inF = tree.OpenFence(l); inF {
				continue
			}
			var rest string
			if h, rest, inH = openHTML(l); inH {
				inH = !h.closedBy(rest)
			}
		}
	}
	// The closer is indented as the opener was: a block opened inside a list item
	// ("1. Run:\n\n   ```sh") is closed only by a line the item continues; a closer at
	// column 0 ends the item instead and, for a fence, opens a new one that swallows the
	// rest of the answer (its Sources and Gaps) as code. An indentation of at most three
	// spaces closes a block outside a list too.
	var closer string
	switch {
	case inF:
		closer = ind + f.String()
	case inH:
		closer = ind + h.end
	default:
		return s
	}
	if i := strings.LastIndex(s, "\n\n"+truncatedMarker); i >= 0 && i == len(s)-len(truncatedMarker)-2 {
		return s[:i] + "\n" + closer + "\n\n" + truncatedMarker
	}
	return s + "\n" + closer
}

// truncate cuts s after max characters (runes, never inside one) and marks the cut.
func truncate(s string, max int) string {
	if utf8.RuneCountInString(s) <= max {
		return s
	}
	n := 0
	for i := range s {
		if n == max {
			return strings.TrimRight(s[:i], " \t\n") + "\n\n" + truncatedMarker
		}
		n++
	}
	return s
}

// demoteHeadings moves a document's own headings three levels down (capped at ######) so
// they nest under its "### title" and cannot open a section of the answer. That goes for
// setext headings too (a paragraph underlined with "===" or "---"), rewritten as ATX
// headings of the demoted level. Fenced and indented code is left alone: a "# comment" in
// a shell block is not a heading. An underline after a list item or a quote is a rule
// (CommonMark: a setext underline is no lazy continuation), and left as written.
func demoteHeadings(content string) string {
	if !strings.ContainsAny(content, "#=-") {
		return content
	}
	lines := strings.SplitAfter(content, "\n")
	out := make([]string, 0, len(lines))
	var f tree.Fence
	var h htmlBlock
	inFence, inHTML := false, false
	para := -1         // index in out of the first line of the open paragraph, -1 if none
	container := false // since the last blank line, lines continue a list item, quote or HTML
	for _, l := range lines {
		if inFence {
			if f.ClosedBy(l) {
				// A list item or quote whose last block is code is no paragraph a line
				// can continue lazily: the next line at its left starts a paragraph.
				inFence, container = false, false
			}
			out = append(out, l)
			continue
		}
		if inHTML {
			// An HTML block of the kinds htmlBlock describes runs to the line that holds
			// its end text, blank lines included, and ends there: the next line starts a
			// paragraph of its own, which an underline makes a heading.
			if h.closedBy(l) {
				inHTML, para, container = false, -1, false
			}
			out = append(out, l)
			continue
		}
		trimmed := strings.TrimLeft(l, " ")
		indent := len(l) - len(trimmed)
		body := strings.TrimRight(trimmed, " \t\r\n")
		if body == "" {
			para, container = -1, false
			out = append(out, l)
			continue
		}
		if indent > 3 {
			// Indented code, or a continuation line of the open paragraph.
			out = append(out, l)
			continue
		}
		if level := setextLevel(body); level > 0 && para >= 0 {
			out = append(out[:para], setextHeading(out[para:], level, l))
			para = -1
			continue
		}
		if g, ok := tree.OpenFence(l); ok {
			f, inFence, para = g, true, -1
			out = append(out, l)
			continue
		}
		if g, rest, ok := openHTML(l); ok {
			// Not a container up to the next blank line (containerRe's "<", for the other
			// HTML blocks): a comment or <pre> ends at its end text, and "<!-- x -->\nTitle\n==="
			// is a level-one heading the answer must demote.
			h, inHTML, para, container = g, !g.closedBy(rest), -1, false
			out = append(out, l)
			continue
		}
		if level := atxLevel(trimmed); level > 0 {
			out = append(out, strings.Repeat("#", min(level+3, 6))+trimmed[level:])
			// A heading is no paragraph either, and one at the left ends a list or quote.
			para, container = -1, false
			continue
		}
		switch {
		case ruleRe.MatchString(body):
			para, container = -1, false // as for a heading
		case containerRe.MatchString(body):
			para, container = -1, true
		case para < 0 && !container:
			para = len(out)
		}
		out = append(out, l)
	}
	return strings.Join(out, "")
}

var (
	// ruleRe matches a thematic break (after the indentation).
	ruleRe = regexp.MustCompile(`^(?:(?:\*[ \t]*){3,}|(?:-[ \t]*){3,}|(?:_[ \t]*){3,})$`)
	// containerRe matches a line that opens a list item, a quote or an HTML block: the
	// lines after it, up to a blank line, are its continuation, not a paragraph of their
	// own, and an underline after them is a rule.
	containerRe = regexp.MustCompile(`^(?:[-+*](?:[ \t]|$)|\d{1,9}[.)](?:[ \t]|$)|>|<)`)
)

// atxLevel returns the level of an ATX heading line (indentation removed), 0 if it is none.
func atxLevel(trimmed string) int {
	level := 0
	for level < len(trimmed) && trimmed[level] == '#' {
		level++
	}
	if level == 0 || level > 6 || (level < len(trimmed) && trimmed[level] != ' ' && trimmed[level] != '\t' && trimmed[level] != '\r' && trimmed[level] != '\n') {
		return 0
	}
	return level
}

// setextLevel returns the level a setext underline gives the paragraph above it (1 for
// "===", 2 for "---"; white space trimmed), 0 if the line is no underline.
func setextLevel(body string) int {
	switch {
	case body == "":
		return 0
	case strings.Trim(body, "=") == "":
		return 1
	case strings.Trim(body, "-") == "":
		return 2
	}
	return 0
}

// setextHeading returns the ATX heading, demoted, for a setext heading of the paragraph
// lines para underlined by under: one line, with the paragraph's indentation (inside a
// list item, the heading stays in it) and the underline's line ending.
func setextHeading(para []string, level int, under string) string {
	text := make([]string, len(para))
	for i, l := range para {
		text[i] = strings.TrimSpace(l)
	}
	indent := para[0][:len(para[0])-len(strings.TrimLeft(para[0], " "))]
	end := under[len(strings.TrimRight(under, "\r\n")):]
	return indent + strings.Repeat("#", min(level+3, 6)) + " " + strings.Join(text, " ") + end
}

func blockquote(s string) string {
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
