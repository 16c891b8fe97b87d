// Package text holds the query text rules every Quarry service must apply identically:
// normalisation for the exact cache, tokenising for the fuzzy cache, stop words and
// stemming for search terms.
package text

import (
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/blevesearch/snowballstem"
	"github.com/blevesearch/snowballstem/english"
)

// Normalise returns the exact-cache form of a query: lower case, trimmed, runs of white
// space collapsed to one space (SPEC §2, T0).
func Normalise(q string) string {
	var b strings.Builder
	b.Grow(len(q))
	space := false
	for _, r := range q {
		if unicode.IsSpace(r) {
			space = b.Len() > 0
			continue
		}
		if space {
			b.WriteByte(' ')
			space = false
		}
		b.WriteRune(unicode.ToLower(r))
	}
	return b.String()
}

// Words splits s on white space and punctuation into lower-case words. Letters, digits
// and marks make up words; an apostrophe inside a word is dropped ("don't" is "dont",
// "team's" is "teams") so contractions and possessives stay one word.
//
// It runs over every document of a knowledge base at load, so it lower-cases the text
// once and slices words out of it instead of building each word rune by rune.
func Words(s string) []string {
	lower := strings.ToLower(s)
	words := make([]string, 0, len(lower)/6+1)
	start, apostrophe := -1, false
	flush := func(end int) {
		if start < 0 {
			return
		}
		w := lower[start:end]
		if apostrophe {
			w = strings.NewReplacer("'", "", "\u2019", "").Replace(w)
		}
		if w != "" {
			words = append(words, w)
		}
		start, apostrophe = -1, false
	}
	for i, r := range lower {
		switch {
		case isWordRune(r):
			if start < 0 {
				start = i
			}
		case (r == '\'' || r == '\u2019') && start >= 0:
			apostrophe = true // inside a word: dropped, not a split
		default:
			flush(i)
		}
	}
	flush(len(lower))
	return words
}

func isWordRune(r rune) bool {
	if r < utf8.RuneSelf {
		return 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9'
	}
	return unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r)
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
func Stem(word string) string {
	env := snowballstem.NewEnv(word)
	english.Stem(env)
	return env.Current()
}

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
