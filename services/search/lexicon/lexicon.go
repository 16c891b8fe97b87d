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
	"slices"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"

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

// Warm loads the English word list Common reads, which otherwise happens on first use
// (~10–15 ms: it is gunzipped and put in a map) and would fall on a query.
func Warm() { english() }

// Common reports whether a lower-case word is an ordinary English word (by its stem).
func Common(word string) bool {
	_, ok := english()[text.Stem(word)]
	return ok
}

// dropApostrophes joins a word's parts around an apostrophe ("team's" → "teams"), as
// text.Words does. Built once: Names ran NewReplacer for every word of a question.
var dropApostrophes = strings.NewReplacer("'", "", "\u2019", "")

// Names returns the lower-cased words of query that are written like names: capitalised
// anywhere but at the start of the question ("rotate Kafka credentials"), with a capital
// inside the word ("GraphQL"), or mixing letters and digits ("k8s", "s3"). A question in
// title case ("How Do I Rotate The Signing Key?") capitalises every word, so there a
// capital names nothing: before, that called 11 of the example set's 42 known-item
// questions out of domain.
func Names(query string) map[string]bool {
	titleCase := titleCased(query)
	out := map[string]bool{}
	for _, sentence := range sentences(query) {
		first := true // a sentence's first word is capitalised as any sentence's is
		for _, w := range strings.FieldsFunc(sentence, func(r rune) bool {
			return !unicode.IsLetter(r) && !unicode.IsDigit(r) && r != '\'' && r != '\u2019'
		}) {
			w = dropApostrophes.Replace(w)
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
			capitalised := unicode.IsUpper(rs[0]) && !first && !titleCase
			// An all-capitals word ("JWT", "PKCE") is an acronym the KB would spell the same.
			acronym := strings.ToUpper(w) == w && letter
			if (capitalised && !acronym) || (upperInside && !acronym) || (digit && letter) {
				out[strings.ToLower(w)] = true
			}
			first = false
		}
	}
	return out
}

// sentences cuts query after each "!", "?" or full stop that white space follows ("Hi
// all! Quick one: ..."). A full stop after a word of one or two letters ("e.g. Kafka",
// "vs. Pulsar") ends an abbreviation, not a sentence; one without white space after it
// ("torch.nn") ends nothing.
func sentences(query string) []string {
	var out []string
	start := 0
	rs := []rune(query)
	for i, r := range rs {
		if r != '!' && r != '?' && r != '.' || i+1 == len(rs) || !unicode.IsSpace(rs[i+1]) {
			continue
		}
		if r == '.' {
			k := i
			for k > 0 && unicode.IsLetter(rs[k-1]) {
				k--
			}
			if i-k <= 2 {
				continue
			}
		}
		out = append(out, string(rs[start:i+1]))
		start = i + 1
	}
	return append(out, string(rs[start:]))
}

// titleCased reports whether every content word of query after the first is
// capitalised, with at least titleCaseMin of them: the way a heading is written, not a
// sentence with names in it ("How do I connect Kafka to Postgres?" has "connect"). Words
// are what white space separates ("Single-page" is one, capitalised); stop words,
// acronyms and words with digits are not content here.
func titleCased(query string) bool {
	count := 0
	for i, f := range strings.Fields(query) {
		f = strings.TrimFunc(f, func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) })
		if i == 0 || f == "" || strings.IndexFunc(f, unicode.IsDigit) >= 0 || strings.ToUpper(f) == f {
			continue
		}
		if w := text.Words(f); len(w) == 0 || (len(w) == 1 && text.IsStopWord(w[0])) {
			continue
		}
		if r, _ := utf8.DecodeRuneInString(f); !unicode.IsUpper(r) {
			return false
		}
		count++
	}
	return count >= titleCaseMin
}

// titleCaseMin is the fewest capitalised content words that make a question title case:
// two could be the names a short question is about ("Kafka or Pulsar?").
const titleCaseMin = 3

// Writing says which ways of writing a word mark it as a name besides those Names knows.
// A name the KB never mentions makes a question out of domain, so each way is one the
// question's author chose, not a habit of typing: a lower-case everyday word anywhere
// else in a question is read as a rewording (see package gate).
type Writing struct {
	// Label: the words of a short label that opens the question and ends in a colon
	// ("Rails: how to encode a string to base64", "Spring Boot: ...") name its topic, even
	// when they are English words written at the start of the sentence, where a capital
	// says nothing. The topic is what the KB must cover: "Backups: how often do they run?"
	// is in domain because the KB knows backups, whatever other words it lacks.
	Label bool
	// Qualified: the parts of a qualified identifier — words joined by ".", "::" or "#"
	// with no space ("torch.nn.Module.forward", "Array.prototype.reduce", "std::vector",
	// "Enumerable#each_slice") — are names of code, not the English words they spell.
	Qualified bool
}

// LabelMaxWords is the most words a leading label may have: a topic ("Kotlin coroutines",
// "Spring Boot"), not a sentence that happens to end in a colon.
const LabelMaxWords = 3

// courtesy holds the words of politeness and urgency that users add to a question
// ("... please?", "thanks", "asap"): they name nothing the question asks about.
var courtesy = map[string]bool{
	"please": true, "pls": true, "plz": true, "kindly": true, "thanks": true, "thank": true,
	"thx": true, "ty": true, "cheers": true, "asap": true, "hi": true, "hello": true, "hey": true,
}

// Courtesy reports whether a lower-case word is only politeness or urgency. Such a word
// is no evidence for or against any document, and no KB is expected to use it: added
// to each of the example set's 42 known-item questions, "please" called 5 of them out of
// domain (the head of their last noun phrase) and "asap" 40 (an unknown name).
func Courtesy(word string) bool { return courtesy[word] }

// discourse holds words that open a question without naming its topic ("Quick
// question: ...", "Update: ...", "Hi: ..."): a label holding one is not a topic label.
var discourse = map[string]bool{
	"question": true, "questions": true, "quick": true, "update": true, "note": true, "help": true,
	"hi": true, "hello": true, "hey": true, "thanks": true, "please": true, "urgent": true,
	"fyi": true, "edit": true, "followup": true, "follow": true, "context": true, "background": true,
	"tldr": true, "ps": true, "q": true, "btw": true, "ok": true, "okay": true, "also": true,
	"newbie": true, "beginner": true, "problem": true, "issue": true, "summary": true,
	"one": true, // "Quick one: ..."
}

// NamesWith returns Names(query) plus the words written like names in the ways w turns on.
func NamesWith(query string, w Writing) map[string]bool {
	out := Names(query)
	if w.Label {
		for _, word := range label(query) {
			out[word] = true
		}
	}
	if w.Qualified {
		for _, word := range qualified(query) {
			out[word] = true
		}
	}
	return out
}

// Opener returns how many of query's first words (text.Words) are an opener that names
// no topic, made of any of these in this order: a label of discourse words ("Quick
// question: ...", "Update: ..."), a greeting ("Hey team, ..."), an apology ("Sorry if
// this is a dumb question, but ...") and a request to be told ("Can someone tell me
// ...", "Does anyone know ...", "I was wondering ...", "Explain ..."; see asking). Its
// words are no evidence about the question: before each of the example set's 42
// known-item questions, "Quick question: " took the direct answers from 26 to 8, "Can
// someone tell me " to 2, and "I need to know " called 12 out of domain, the apology 33.
func Opener(query string) int {
	n := discourseLabel(query)
	words := text.Words(query)
	n += greeting(words[n:])
	n += apology(words[n:])
	return n + asking(query, words[n:])
}

// greeting returns how many of words greet the readers ("Hey team", "Hi all"): a
// greeting and whom it addresses.
func greeting(words []string) int {
	// An addressee alone greets too ("Folks, ..."), unless it could be a topic ("Team
	// leads: ...").
	if len(words) == 0 || !(greetings[words[0]] || (addressees[words[0]] && words[0] != "team" && words[0] != "people")) {
		return 0
	}
	n := 1
	for n < len(words) && addressees[words[n]] {
		n++
	}
	return n
}

// apology returns how many of words excuse the question before it is asked ("Sorry if
// this is a dumb question, but ...", "Sorry to bother you, ..."): a leading run of stop
// words and apology words with an apology among them, when words follow it.
func apology(words []string) int {
	sorry := false
	for i, w := range words {
		switch {
		case apologies[w]:
			sorry = true
		case apologyWords[w] || text.IsStopWord(w):
		case sorry:
			return i
		default:
			return 0
		}
	}
	return 0
}

// discourseLabel returns how many words a leading label of discourse words has, or 0.
// A greeting may come first ("Hi everyone! Quick one: ...").
func discourseLabel(query string) int {
	ws := labelWords(query)
	g := greeting(ws)
	if len(ws)-g > LabelMaxWords {
		return 0
	}
	hasDiscourse := false
	for _, w := range ws[g:] {
		switch {
		case discourse[w]:
			hasDiscourse = true
		case !text.IsStopWord(w):
			return 0
		}
	}
	if !hasDiscourse {
		return 0
	}
	return len(ws)
}

// asking returns how many of words open the question with a request to be told: a run
// of stop words and askingWords up to the last asking verb in it, when some word the
// question is about follows. A verb the question writes in capitals ("EXPLAIN ANALYZE")
// is a name, not a request.
func asking(query string, words []string) int {
	n := 0
	var caps map[string]bool // the query's words in capitals, made at the first verb
	for i, w := range words {
		switch {
		case askingVerbs[w] && !shouted(query, w, &caps):
			n = i + 1
			if i+1 < len(words) && words[i+1] == "us" { // "tell us", not the country
				n++
			}
		case askingWords[w] || text.IsStopWord(w):
		default:
			return n // a topic word: the request, if any, ended before it
		}
	}
	return 0 // nothing but the request: it is the question
}

// askingVerbs are the verbs of a request to be told or to understand; askingWords the
// other words such requests are made of besides stop words ("someone", "I'd like",
// "I need", "help me"). Words a knowledge base could be about ("deploy", "key") are
// never in either.
var (
	askingVerbs = map[string]bool{
		"tell": true, "know": true, "wonder": true, "wondering": true, "explain": true,
		"understand": true, "remind": true, "curious": true, "ask": true, "asking": true,
	}
	askingWords = map[string]bool{
		"someone": true, "somebody": true, "anyone": true, "anybody": true, "everyone": true,
		"help": true, "like": true, "want": true, "wanted": true, "need": true, "trying": true,
		"please": true, "kindly": true, "just": true, "quick": true, "really": true,
		"guys": true, "folks": true, "team": true, "hi": true, "hello": true, "hey": true,
		"id": true, "wed": true, // "I'd", "we'd" as text.Words spells them
	}
)

// The words of greeting, apology and apology's company (see greeting and apology).
var (
	greetings  = map[string]bool{"hi": true, "hello": true, "hey": true, "morning": true, "greetings": true, "yo": true}
	addressees = map[string]bool{"team": true, "all": true, "folks": true, "guys": true, "everyone": true,
		"everybody": true, "there": true, "yall": true, "people": true}
	apologies    = map[string]bool{"sorry": true, "apologies": true, "dumb": true, "stupid": true, "silly": true, "naive": true}
	apologyWords = map[string]bool{"question": true, "basic": true, "obvious": true, "newbie": true, "noob": true,
		"beginner": true, "probably": true, "maybe": true, "already": true, "asked": true, "bother": true,
		"bothering": true, "interrupt": true, "disturb": true, "ping": true, "pinging": true}
)

// Closer returns how many of words' last words ask for the answer's form or pace, or
// thank for it ("... in detail", "... step by step", "... right now", "... thanks in
// advance", "... TIA", "... any ideas?"), at most all but one: they name nothing the
// question asks about. After each of the example set's 42 known-item questions, "TIA"
// called 40 of them out of domain (a name the KB never mentions), "in detail", "any
// ideas" and "thanks in advance" 10 (the head of the last noun phrase), and "right now"
// took the direct answers from 26 to 2.
func Closer(words []string) int {
	n := 0
	for {
		rest := words[:len(words)-n]
		m := 0
		for _, c := range closers {
			if len(c) < len(rest) && slices.Equal(rest[len(rest)-len(c):], c) {
				m = max(m, len(c))
			}
		}
		if m == 0 {
			return n
		}
		n += m
	}
}

// closers are Closer's phrases, as text.Words spells them.
var closers = [][]string{
	{"thanks", "in", "advance"}, {"thank", "you", "in", "advance"}, {"in", "advance"}, {"tia"},
	{"any", "ideas"}, {"any", "idea"}, {"any", "help"}, {"anyone"}, {"someone"},
	{"in", "detail"}, {"in", "details"}, {"briefly"}, {"in", "short"}, {"step", "by", "step"},
	{"right", "now"}, {"quickly"}, {"asap"}, {"if", "possible"}, {"if", "you", "can"},
	{"by", "any", "chance"}, {"new", "here"},
	{"pls", "help"}, {"plz", "help"}, {"please", "help"}, {"help", "please"}, {"help", "pls"},
	{"urgent"}, {"lmk"}, {"let", "me", "know"}, {"asking", "for", "a", "friend"},
	{"if", "anyone", "knows"}, {"if", "anybody", "knows"}, {"anyone", "know"},
	{"any", "help", "appreciated"}, {"help", "appreciated"}, {"much", "appreciated"}, {"appreciated"},
}

// shouted reports whether query holds w in capitals as a word of its own. *caps holds
// the query's words in capitals once a first call has read them: read again for each
// word, a query of one verb repeated took seconds.
func shouted(query, w string, caps *map[string]bool) bool {
	if *caps == nil {
		*caps = map[string]bool{}
		for _, q := range strings.FieldsFunc(query, func(r rune) bool { return !unicode.IsLetter(r) }) {
			if len(q) > 1 && q == strings.ToUpper(q) {
				(*caps)[q] = true
			}
		}
	}
	return (*caps)[strings.ToUpper(w)]
}

// leadingLabel returns the words before the ": " that opens query, when there are at
// most LabelMaxWords of them and a question follows; otherwise nil.
func leadingLabel(query string) []string {
	ws := labelWords(query)
	if len(ws) > LabelMaxWords {
		return nil
	}
	return ws
}

// labelWords returns the words before the first ": " of query when a question follows
// it, however many; otherwise nil.
func labelWords(query string) []string {
	q := strings.TrimSpace(query)
	i := strings.Index(q, ": ")
	if i <= 0 || strings.TrimSpace(q[i+1:]) == "" {
		return nil
	}
	return text.Words(q[:i])
}

// label returns the words of the label that opens query, or nil. The colon must be
// followed by a space and then the question: "std::vector" and "Rails:" are no labels.
func label(query string) []string {
	ws := leadingLabel(query)
	if len(ws) == 0 {
		return nil
	}
	for _, w := range ws {
		if text.IsStopWord(w) || discourse[w] {
			return nil
		}
	}
	return ws
}

// qualified returns the words of query's qualified identifiers.
func qualified(query string) []string {
	var out []string
	for _, f := range strings.Fields(query) {
		f = strings.TrimFunc(f, func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) })
		parts := strings.FieldsFunc(strings.ReplaceAll(f, "::", "."), func(r rune) bool { return r == '.' || r == '#' })
		if len(parts) < 2 {
			continue
		}
		lettered := 0
		for _, p := range parts {
			if strings.IndexFunc(p, unicode.IsLetter) >= 0 {
				lettered++
			}
		}
		// "v1.2" and "3.14" are versions and numbers, not code.
		if lettered < 2 {
			continue
		}
		for _, w := range text.Words(f) {
			if strings.IndexFunc(w, unicode.IsLetter) >= 0 {
				out = append(out, w)
			}
		}
	}
	return out
}

// NameLike reports whether a lower-case word of a query should be taken as a name:
// written like one in the query (names from Names), or not an English word at all.
func NameLike(word string, names map[string]bool) bool {
	return names[word] || !Common(word)
}

// TypoMinLen is the shortest word Typo corrects: one edit turns a short name into some
// word of a large KB ("vue" is one letter from "use", "rails" from "mails").
const TypoMinLen = 5

// TypoMaxLen is the longest word Typo corrects. No dictionary word is near it, and the
// edits to try grow with the square of the length: a 1,000-letter word took seconds.
const TypoMaxLen = 32

// TypoCandidate reports whether Typo would try edits of word: a lower-case a–z word of
// TypoMinLen to TypoMaxLen letters that no dictionary has. It costs a stem; the tries
// cost a thousand, so callers that bound them count only candidates.
func TypoCandidate(word string) bool {
	if len(word) < TypoMinLen || len(word) > TypoMaxLen {
		return false
	}
	for i := 0; i < len(word); i++ {
		if word[i] < 'a' || word[i] > 'z' {
			return false
		}
	}
	return !Common(word)
}

// Typo returns the English word one edit (a letter deleted, inserted, replaced, or two
// swapped) from word that the KB uses, and true, when word is a lower-case word of
// TypoMinLen+ letters that no dictionary has ("transacton", "bufferd", "contxt"): a
// misspelling of a KB word, not a name the KB lacks. df returns how many documents of
// the KB use a stem. Callers pass only words the KB never uses and that the question does
// not capitalise.
//
// The first letter is never edited (people rarely mistype it, while "gmail" is one letter
// from "email"), the fix must be a dictionary word (a name one letter from a KB word, such
// as "nginx" and "nginxe", stays a name), and among several fixes the one the most
// documents use wins ("bufferd" is "buffered", not "buffed"), the first in a fixed order
// on a tie, so the answer is the same every time.
func Typo(word string, df func(stem string) int) (string, bool) {
	if !TypoCandidate(word) {
		return "", false
	}
	best, bestDF := "", 0
	try := func(v string) {
		if v == word || text.IsStopWord(v) {
			return
		}
		st := text.Stem(v)
		if _, ok := english()[st]; !ok {
			return
		}
		if n := df(st); n > bestDF {
			best, bestDF = v, n
		}
	}
	for i := 1; i < len(word); i++ {
		try(word[:i] + word[i+1:])
		if i+1 < len(word) {
			try(word[:i] + string(word[i+1]) + string(word[i]) + word[i+2:])
		}
	}
	for i := 1; i <= len(word); i++ {
		for ch := byte('a'); ch <= 'z'; ch++ {
			if i < len(word) {
				try(word[:i] + string(ch) + word[i+1:])
			}
			try(word[:i] + string(ch) + word[i:])
		}
	}
	return best, best != ""
}

// Literals returns the lower-cased words of query inside double quotes or backticks
// (`Atoi fails on "12abc"`), and its numbers and versions ("ticket 4711", "in 2024",
// "port 8080", "v2"):
// values the question gives as data, which no KB is expected to hold, not names of what
// it asks about. A number the KB never mentions called 39 of 42 example known-item
// questions out of domain when one was added to each. Single quotes are apostrophes too
// often ("partner's") to mark anything.
func Literals(query string) map[string]bool {
	out := map[string]bool{}
	for _, w := range text.Words(query) {
		// A version ("v2", "v10") is a number too.
		if strings.Trim(strings.TrimPrefix(w, "v"), "0123456789") == "" && w != "v" {
			out[w] = true
		}
	}
	var open rune
	start := 0
	for i, r := range query {
		switch {
		case open == 0 && (r == '"' || r == '`' || r == '\u201c'):
			open, start = r, i+utf8.RuneLen(r)
		case open != 0 && (r == open || (open == '\u201c' && r == '\u201d')):
			for _, w := range text.Words(query[start:i]) {
				out[w] = true
			}
			open = 0
		}
	}
	return out
}
