// Package lexicon tells ordinary English words from names, so the out-of-domain check
// can treat "How often do backups run?" (an everyday word the knowledge base never
// uses) differently from "How do I rotate Kafka credentials?" (a product it never
// mentions).
//
// The word list is the stems of SCOWL's lower-case English words (Debian's wamerican
// package; see SCOWL-COPYRIGHT), regenerated with:
//
//	go run ./lexicon/gen -in /usr/share/dict/american-english -out lexicon/english.txt.gz
package lexicon

import (
	"bufio"
	"bytes"
	"compress/gzip"
	_ "embed"
	"strings"
	"sync"
	"unicode"

	"github.com/quarry-router/quarry/platform/text"
)

//go:embed english.txt.gz
var englishGz []byte

var english = sync.OnceValue(func() map[string]struct{} {
	zr, err := gzip.NewReader(bytes.NewReader(englishGz))
	if err != nil {
		panic("lexicon: embedded word list is corrupt: " + err.Error())
	}
	m := make(map[string]struct{}, 27000)
	sc := bufio.NewScanner(zr)
	for sc.Scan() {
		m[sc.Text()] = struct{}{}
	}
	if err := sc.Err(); err != nil {
		panic("lexicon: embedded word list is corrupt: " + err.Error())
	}
	return m
})

// Common reports whether a lower-case word is an ordinary English word (by its stem).
func Common(word string) bool {
	_, ok := english()[text.Stem(word)]
	return ok
}

// Names returns the lower-cased words of query that are written like names: capitalised
// anywhere but at the start of the question ("rotate Kafka credentials"), with a capital
// inside the word ("GraphQL"), or mixing letters and digits ("k8s", "s3").
func Names(query string) map[string]bool {
	out := map[string]bool{}
	first := true
	for _, w := range strings.FieldsFunc(query, func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r) && r != '\'' && r != '\u2019'
	}) {
		w = strings.NewReplacer("'", "", "\u2019", "").Replace(w)
		if w == "" {
			continue
		}
		rs := []rune(w)
		upperInside, digit, letter := false, false, false
		for i, r := range rs {
			switch {
			case unicode.IsDigit(r):
				digit = true
			case unicode.IsLetter(r):
				letter = true
				if i > 0 && unicode.IsUpper(r) {
					upperInside = true
				}
			}
		}
		capitalised := unicode.IsUpper(rs[0]) && !first
		// An all-capitals word ("JWT", "PKCE") is an acronym the KB would spell the same.
		acronym := strings.ToUpper(w) == w && letter
		if (capitalised && !acronym) || (upperInside && !acronym) || (digit && letter) {
			out[strings.ToLower(w)] = true
		}
		first = false
	}
	return out
}

// NameLike reports whether a lower-case word of a query should be taken as a name:
// written like one in the query (names from Names), or not an English word at all.
func NameLike(word string, names map[string]bool) bool {
	return names[word] || !Common(word)
}
