package answer

import (
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/quarry-router/quarry/platform/text"
)

// Excerpt returns the passage of content that best matches terms: content is cut into
// chunks of about size characters, each overlapping the next by a quarter of that, on white
// space; the chunk holding the most occurrences of the terms' stems wins, the earliest on a
// tie (and the first chunk when nothing matches).
func Excerpt(content string, terms []string, size int) string {
	return excerpt(content, terms, size, size/4)
}

// Excerpt is the package Excerpt with the configured chunk size and overlap.
func (c Config) Excerpt(content string, terms []string) string {
	return excerpt(content, terms, c.ExcerptChars, c.ExcerptOverlap)
}

// ExcerptAround returns the chunk of content (one of the chunks Excerpt cuts) that best
// covers a passage a search engine picked (engine.Hit.Passage: the passage's words as the
// engine indexed them, Snowball stems of the words that are not stop words), and false
// when content does not hold the passage (the file changed after it was indexed): the
// caller then picks the chunk itself with Excerpt.
func (c Config) ExcerptAround(content, passage string) (string, bool) {
	return excerptAround(content, passage, c.ExcerptChars, c.ExcerptOverlap)
}

func excerptAround(content, passage string, size, overlap int) (string, bool) {
	content = strings.TrimSpace(content)
	want := strings.Fields(passage)
	if size <= 0 || content == "" || len(want) == 0 {
		return "", false
	}
	// The content's words as an engine indexes them, each with where it is.
	var indexed []word
	var stems []string
	for _, w := range words(content) {
		if !text.IsStopWord(w.word) {
			indexed = append(indexed, w)
			stems = append(stems, text.Stem(w.word))
		}
	}
	at := -1
	for i := 0; i+len(want) <= len(stems); i++ {
		if slices.Equal(stems[i:i+len(want)], want) {
			at = i
			break
		}
	}
	if at < 0 {
		return "", false
	}
	if utf8.RuneCountInString(content) <= size {
		return content, true
	}
	p := span{indexed[at].start, indexed[at+len(want)-1].end}
	best, bestCover := span{}, -1
	for _, c := range chunks(content, size, overlap) {
		if cover := min(c.end, p.end) - max(c.start, p.start); cover > bestCover {
			best, bestCover = c, cover
		}
	}
	return strings.TrimSpace(content[best.start:best.end]), true
}

type span struct{ start, end int } // byte offsets

func excerpt(content string, terms []string, size, overlap int) string {
	content = strings.TrimSpace(content)
	if size <= 0 || content == "" {
		return ""
	}
	if utf8.RuneCountInString(content) <= size {
		return content
	}
	want := make(map[string]struct{}, len(terms))
	for _, t := range terms {
		for _, w := range text.Words(t) {
			if !text.IsStopWord(w) {
				want[text.Stem(w)] = struct{}{}
			}
		}
	}
	// Find where the content's words stem to a query stem. Stemming every word of every
	// result cost a fifth of a T3 question's Resolve (BenchmarkResolve); a Snowball stem
	// keeps its word's first letter, so only words that start like a query stem are
	// stemmed.
	var hits []int // byte offsets of words whose stem is a query stem
	if len(want) > 0 {
		starts := make(map[string]struct{}, len(want))
		for st := range want {
			starts[stemStart(st)] = struct{}{}
		}
		for _, w := range words(content) {
			if _, ok := starts[stemStart(w.word)]; !ok {
				continue
			}
			if _, ok := want[text.Stem(w.word)]; ok {
				hits = append(hits, w.start)
			}
		}
	}
	best, bestHits := span{}, -1
	for _, c := range chunks(content, size, overlap) {
		n := 0
		for _, h := range hits {
			if h >= c.start && h < c.end {
				n++
			}
		}
		if n > bestHits {
			best, bestHits = c, n
		}
	}
	return strings.TrimSpace(content[best.start:best.end])
}

// chunks cuts s into spans of at most size characters that end and start on white space
// where there is some in reach; each starts about overlap characters before the previous
// one ended.
func chunks(s string, size, overlap int) []span {
	var out []span
	start := 0
	for {
		end := advance(s, start, size)
		if end < len(s) {
			// Back up to white space, but keep at least half a chunk.
			if ws := lastSpace(s[start:end]); ws > 0 && utf8.RuneCountInString(s[start:start+ws]) >= size/2 {
				end = start + ws
			}
		}
		out = append(out, span{start, end})
		if end >= len(s) {
			return out
		}
		next := back(s, end, overlap)
		// Move forward to the start of a word so the chunk does not open mid-word.
		if prev, _ := utf8.DecodeLastRuneInString(s[:next]); next > 0 && !unicode.IsSpace(prev) {
			if i := strings.IndexFunc(s[next:end], unicode.IsSpace); i >= 0 {
				next += i
			}
		}
		next = skipSpace(s, next)
		if next <= start || next >= end {
			next = skipSpace(s, end) // no room to overlap: carry on without
		}
		if next >= len(s) {
			return out
		}
		start = next
	}
}

// advance returns the byte offset n characters after i (or len(s)).
func advance(s string, i, n int) int {
	for ; n > 0 && i < len(s); n-- {
		_, w := utf8.DecodeRuneInString(s[i:])
		i += w
	}
	return i
}

// back returns the byte offset n characters before i (or 0).
func back(s string, i, n int) int {
	for ; n > 0 && i > 0; n-- {
		_, w := utf8.DecodeLastRuneInString(s[:i])
		i -= w
	}
	return i
}

func skipSpace(s string, i int) int {
	for i < len(s) {
		r, n := utf8.DecodeRuneInString(s[i:])
		if !unicode.IsSpace(r) {
			break
		}
		i += n
	}
	return i
}

func lastSpace(s string) int {
	return strings.LastIndexFunc(s, unicode.IsSpace)
}

type word struct {
	word       string
	start, end int // byte offsets in the text
}

// stemStart is what a word and its Snowball stem have in common at the start: the first
// letter. The English stemmer rewrites endings, and a few whole words ("dying" → "die"),
// but never the first letter.
func stemStart(w string) string { return w[:advance(w, 0, 1)] }

// words splits s like text.Words and keeps each word's byte offsets. A word in lower-case
// ASCII without apostrophes (most of them) is a slice of s, not a copy; any other is
// folded as text.Words spells it.
func words(s string) []word {
	var out []word
	start, end, fold := -1, -1, false // fold: the word is not yet spelled as text.Words spells it
	flush := func() {
		if start >= 0 && end > start {
			w := s[start:end]
			if fold {
				w = text.FoldWord(w)
			}
			out = append(out, word{w, start, end})
		}
		start, fold = -1, false
	}
	for i, r := range s {
		switch {
		case text.IsWordRune(r):
			if start < 0 {
				start = i
			}
			end = i + utf8.RuneLen(r)
			if !fold && (r >= utf8.RuneSelf || 'A' <= r && r <= 'Z') {
				fold = true
			}
		case text.IsJoiner(r):
			fold = fold || start >= 0
		default:
			flush()
		}
	}
	flush()
	return out
}
