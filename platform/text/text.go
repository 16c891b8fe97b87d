// Package text holds the query text rules every Quarry service must apply identically:
// normalisation for the exact cache, tokenising for the fuzzy cache, stop words and
// stemming for search terms.
package text

import (
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"

	"github.com/blevesearch/snowballstem"
	"github.com/blevesearch/snowballstem/english"
	"golang.org/x/text/unicode/norm"
)

// Version names what Words, IsStopWord and Stem return. Whatever is persisted from them
// (a search service's index and term statistics, a Meilisearch document's hash) records
// it, and is rebuilt when it differs. Bump it with any change to their output, including
// one that a new Unicode table or stemmer release brings; TestVersionNamesTheOutput
// fails until then.
const Version = "1"

// Normalise returns the exact-cache form of a query: lower case, trimmed, runs of white
// space collapsed to one space (SPEC §2, T0). Text that looks the same has one form:
// it is in Unicode compatibility composition (NFKC: a decomposed "é", a fullwidth "Ａ"
// or a "ﬁ" ligature reads as the plain letters), invisible format characters (a soft
// hyphen, a zero-width joiner) are dropped, and a zero-width space is a space, as Words
// has them: two questions with one form must search the same.
func Normalise(q string) string {
	q = compose(q)
	var b strings.Builder
	b.Grow(len(q))
	space := false
	for _, r := range q {
		switch {
		case unicode.IsSpace(r) || r == zeroWidthSpace:
			space = b.Len() > 0
			continue
		case isInvisible(r):
			continue
		}
		if space {
			b.WriteByte(' ')
			space = false
		}
		b.WriteRune(unicode.ToLower(r))
	}
	// Lower-casing can make a letter and a mark that compose: "Y\u030a" has no composed
	// capital, its lower case has one ("ẙ"). Composed again, the form is stable.
	return compose(b.String())
}

// Blank reports whether q holds nothing but white space and invisible format characters:
// what Normalise reduces to "". Such a query is as empty as "" (a lone soft hyphen or
// zero-width space would otherwise be answered, and cached, as the empty question).
func Blank(q string) bool {
	for _, r := range q {
		if !unicode.IsSpace(r) && r != zeroWidthSpace && !isInvisible(r) {
			return false
		}
	}
	return true
}

// Words splits s on white space and punctuation into lower-case words. Letters, digits
// and marks make up words; an apostrophe or an invisible format character inside a
// word is dropped ("don't" is "dont", "team's" is "teams", "observ\u00adability" is
// "observability") so contractions, possessives and hyphenation hints stay one word.
// The text is read in NFKC first, as Normalise reads it, so the documents' words and
// the questions' words compare equal however each was typed.
//
// It runs over every document of a knowledge base at load, so it lower-cases the text
// once and slices words out of it instead of building each word rune by rune.
func Words(s string) []string {
	lower := compose(strings.ToLower(compose(s))) // as Normalise: see there
	words := make([]string, 0, len(lower)/6+1)
	start, dropped := -1, false
	flush := func(end int) {
		if start < 0 {
			return
		}
		w := lower[start:end]
		if dropped {
			w = strings.Map(dropJoiners, w)
		}
		if w != "" {
			words = append(words, w)
		}
		start, dropped = -1, false
	}
	for i, r := range lower {
		switch {
		case IsWordRune(r):
			if start < 0 {
				start = i
			}
		case IsJoiner(r):
			// Inside a word: dropped, not a split. Outside one: nothing to join.
			dropped = dropped || start >= 0
		default:
			flush(i)
		}
	}
	flush(len(lower))
	return words
}

// FoldWord returns a word as Words spells it: NFKC, lower case, joiners dropped. A
// splitter that must keep each word's place in the original text (an excerpt's) splits
// with IsWordRune and IsJoiner and folds each word with it. Words reads the whole text
// in NFKC before splitting, so the two differ only where compatibility composition
// turns a character that is not part of a word into one that is (a superscript "²").
func FoldWord(w string) string {
	return strings.Map(dropJoiners, strings.ToLower(compose(w)))
}

// IsWordRune reports whether r is part of a word: a letter, a digit or a mark.
func IsWordRune(r rune) bool {
	if r < utf8.RuneSelf {
		return 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9'
	}
	return unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r)
}

// IsJoiner reports whether r is dropped inside a word rather than ending it: an
// apostrophe, or an invisible format character.
func IsJoiner(r rune) bool {
	return r == '\'' || r == '\u2019' || isInvisible(r)
}

// zeroWidthSpace separates words without showing (Thai and Khmer text uses it between
// words), so it splits words where the other format characters do not.
const zeroWidthSpace = '\u200b'

// isInvisible reports whether r is a format character (Unicode category Cf: a soft
// hyphen, zero-width joiners, a byte-order mark) other than the zero-width space.
func isInvisible(r rune) bool {
	return r >= utf8.RuneSelf && r != zeroWidthSpace && unicode.Is(unicode.Cf, r)
}

func dropJoiners(r rune) rune {
	if IsJoiner(r) {
		return -1
	}
	return r
}

// compose returns s in NFKC. Text in ASCII, most of it, is returned as it is without
// looking further. Bytes that are not UTF-8 become U+FFFD first: norm leaves a letter
// after such a byte as it is ("\xf1ϒ" kept its ϒ), which Normalise then lower-cased
// and composed again into a capital (NFKC's Υ), so that Normalise was not idempotent and
// Words disagreed with the normalised question (found by FuzzTokens).
func compose(s string) string {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			if !utf8.ValidString(s[i:]) {
				s = strings.ToValidUTF8(s, "\uFFFD")
			}
			return norm.NFKC.String(s)
		}
	}
	return s
}

// Tokens returns the fuzzy-cache tokens of a query (SPEC §2, T1): words that are not stop
// words and have at least two characters, de-duplicated, in first-seen order.
func Tokens(q string) []string {
	words := Words(q)
	out := words[:0]
	seen := make(map[string]struct{}, len(words))
	for _, w := range words {
		if utf8.RuneCountInString(w) < 2 || IsStopWord(w) {
			continue
		}
		if _, dup := seen[w]; dup {
			continue
		}
		seen[w] = struct{}{}
		out = append(out, w)
	}
	return out
}

// Stem returns the English (Snowball) stem of a lower-case word, the same stemmer the
// embedded search engine indexes with, so stems compare equal across services.
//
// Stems are remembered process-wide, up to maxStemCache words of at most
// maxCachedWord bytes: every stage of a query stems its words again (parse, search,
// gates), and an excerpt stems the words of each result that may match, most of them
// seen before; stemming was a seventh of a T3 question's Resolve.
func Stem(word string) string {
	cacheable, full := len(word) <= maxCachedWord, true
	if cacheable {
		stemCache.RLock()
		st, ok := stemCache.m[word]
		full = len(stemCache.m) >= maxStemCache
		stemCache.RUnlock()
		if ok {
			return st
		}
	}
	if !cacheable || full {
		return snowball(word)
	}
	// Stemmed from a copy: Snowball returns its input, or a slice of it, when it
	// changes nothing or only cuts a suffix, and word may be a slice of a whole
	// document, which a cached key or stem would keep alive.
	word = strings.Clone(word)
	st := snowball(word)
	stemCache.Lock()
	if len(stemCache.m) < maxStemCache {
		stemCache.m[word] = st
	}
	stemCache.Unlock()
	return st
}

func snowball(word string) string {
	env := snowballstem.NewEnv(word)
	english.Stem(env)
	return env.Current()
}

// The bounds of Stem's cache: with them it holds about ten megabytes at most, and words
// seen once and long (hashes, identifiers) stay out of it. Once full it stays so; a
// word it does not hold is stemmed each time, as without it, under no lock.
const (
	maxStemCache  = 1 << 16
	maxCachedWord = 48
)

var stemCache = struct {
	sync.RWMutex
	m map[string]string
}{m: make(map[string]string)}

// StemMemo remembers the stems it has computed: analysing a corpus stems the same few
// thousand words millions of times. Not safe for concurrent use.
type StemMemo map[string]string

// Stem returns Stem(word), computed once per word.
func (m StemMemo) Stem(word string) string {
	st, ok := m[word]
	if !ok {
		st = Stem(word)
		m[word] = st
	}
	return st
}

// Stems returns the de-duplicated stems of tokens, in order.
func Stems(tokens []string) []string {
	out := make([]string, 0, len(tokens))
	seen := make(map[string]struct{}, len(tokens))
	for _, t := range tokens {
		s := Stem(t)
		if _, dup := seen[s]; dup {
			continue
		}
		seen[s] = struct{}{}
		out = append(out, s)
	}
	return out
}

// Jaccard returns |A∩B| / (|A|+|B|-|A∩B|) for two sets given as de-duplicated slices.
// Two empty sets have similarity 0: there is nothing to compare.
func Jaccard(a, b []string) float64 {
	if len(a) == 0 || len(b) == 0 {
		return 0
	}
	small, large := a, b
	if len(small) > len(large) {
		small, large = large, small
	}
	set := make(map[string]struct{}, len(large))
	for _, t := range large {
		set[t] = struct{}{}
	}
	inter := 0
	for _, t := range small {
		if _, ok := set[t]; ok {
			inter++
		}
	}
	return float64(inter) / float64(len(a)+len(b)-inter)
}
