package rank

import (
	"math"
	"runtime"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/quarry-router/quarry/platform/text"
	"github.com/quarry-router/quarry/services/search/engine"
	"github.com/quarry-router/quarry/services/search/tree"
)

// Corpus holds the term statistics of one KB generation: which stems each document
// contains and in how many documents each stem occurs. It is built once per load and is
// read-only afterwards, so it is safe for concurrent use.
type Corpus struct {
	vocab map[string]uint32 // stem → term id
	df    []uint32          // term id → document frequency
	// docs maps a path to the sorted ids of the stems its title, path and content hold:
	// a sorted slice costs 4 bytes a term, a map per document ten times that.
	docs map[string][]uint32
	// alphabet holds, sorted, every rune of the stems in vocab: the runes Near tries.
	alphabet []rune
}

// NewCorpus indexes the stems of docs (title, path words and content, stop words removed).
// A path that occurs twice counts once, the later document winning.
func NewCorpus(docs []*tree.Document) *Corpus {
	c := &Corpus{
		vocab: make(map[string]uint32),
		docs:  make(map[string][]uint32, len(docs)),
	}
	// Only the last document of a path is counted: one counted and then replaced would
	// leave its stems in the vocabulary with no document, which a corpus read back
	// (WriteTo) does not have.
	last := make(map[string]int, len(docs))
	for i, d := range docs {
		if d != nil {
			last[d.Path] = i
		}
	}
	uniq := make([]*tree.Document, len(docs))
	for i, d := range docs {
		if d != nil && last[d.Path] == i {
			uniq[i] = d
		}
	}
	for i, stems := range docStemsAll(uniq) {
		if d := uniq[i]; d != nil {
			c.put(d.Path, stems)
		}
	}
	return c
}

// put counts the document at path with its distinct stems, replacing what it had.
func (c *Corpus) put(path string, stems []string) {
	c.remove(path)
	ids := make([]uint32, 0, len(stems))
	for _, s := range stems {
		id, ok := c.vocab[s]
		if !ok {
			id = uint32(len(c.df))
			c.vocab[s] = id
			c.df = append(c.df, 0)
			for _, r := range s {
				if i, found := slices.BinarySearch(c.alphabet, r); !found {
					c.alphabet = slices.Insert(c.alphabet, i, r)
				}
			}
		}
		c.df[id]++
		ids = append(ids, id)
	}
	slices.Sort(ids)
	c.docs[path] = slices.Clip(ids)
}

// remove uncounts the document at path, if there is one.
func (c *Corpus) remove(path string) {
	if old, ok := c.docs[path]; ok {
		for _, id := range old {
			c.df[id]--
		}
		delete(c.docs, path)
	}
}

// docStemsAll returns DocStems of every document, computed on every core. A KB repeats
// a vocabulary of some ten thousand words across a million tokens, so each worker
// stems a word once and remembers it: stemming was most of the corpus build.
func docStemsAll(docs []*tree.Document) [][]string {
	out := make([][]string, len(docs))
	next := make(chan int)
	var wg sync.WaitGroup
	for range max(1, min(runtime.GOMAXPROCS(0), len(docs))) {
		wg.Go(func() {
			memo := make(text.StemMemo, 1<<14)
			for i := range next {
				if docs[i] != nil {
					out[i] = docStems(docs[i], memo)
				}
			}
		})
	}
	for i := range docs {
		next <- i
	}
	close(next)
	wg.Wait()
	return out
}

// DocStems returns the distinct stems of a document's title, path words and content, stop
// words removed: the same words the search engine indexes.
func DocStems(d *tree.Document) []string {
	var b strings.Builder
	b.Grow(len(d.Title) + len(d.Path) + len(d.Content) + 2)
	b.WriteString(d.Title)
	b.WriteByte(' ')
	b.WriteString(engine.PathText(d.Path))
	b.WriteByte(' ')
	b.WriteString(d.Content)
	return text.Stems(nonStop(text.Words(b.String())))
}

// docStems is DocStems with a memo of stems already computed. Corpora are kept on disk
// (persist.go): a change to what it returns needs a new corpusFormat.
func docStems(d *tree.Document, memo text.StemMemo) []string {
	words := text.Words(d.Title + " " + engine.PathText(d.Path) + " " + d.Content)
	seen := make(map[string]struct{}, 256)
	out := make([]string, 0, 256)
	for _, w := range words {
		if text.IsStopWord(w) {
			continue
		}
		st := memo.Stem(w)
		if _, dup := seen[st]; dup {
			continue
		}
		seen[st] = struct{}{}
		out = append(out, st)
	}
	return out
}

// QueryStems returns the distinct stems of a query's search words, stop words removed.
func QueryStems(words []string) []string {
	return text.Stems(nonStop(words))
}

func nonStop(words []string) []string {
	out := words[:0:0]
	for _, w := range words {
		if !text.IsStopWord(w) {
			out = append(out, w)
		}
	}
	return out
}

// N returns the number of documents.
func (c *Corpus) N() int { return len(c.docs) }

// DF returns the number of documents that contain stem.
func (c *Corpus) DF(stem string) int {
	id, ok := c.vocab[stem]
	if !ok {
		return 0
	}
	return int(c.df[id])
}

// IDF returns the BM25 inverse document frequency of stem, ln(1 + (N-df+0.5)/(df+0.5)).
// A stem absent from the KB gets the idf of df=0, the highest there is: a name the KB never
// mentions is the most telling word of a question.
func (c *Corpus) IDF(stem string) float64 {
	n, df := float64(c.N()), float64(c.DF(stem))
	return math.Log(1 + (n-df+0.5)/(df+0.5))
}

// Near reports whether some document holds stem or a stem one typo from it: one rune
// inserted, deleted or replaced, or two adjacent runes swapped (the edits of a search
// engine's typo matching at distance 1). It tries every such edit of stem, with the runes
// the corpus's stems are written in, in a few microseconds; an engine's typo matching
// builds an automaton for stem and walks its dictionary with it, a hundred times that,
// to find nothing for most words a KB lacks. For a longer stem or a larger alphabet
// than its bounds it says true without trying.
func (c *Corpus) Near(stem string) bool {
	word := []rune(stem)
	if len(word) > nearMaxStem || len(c.alphabet) > nearMaxAlphabet {
		return true
	}
	buf := make([]byte, 0, 4*(len(word)+1))
	has := func(parts ...[]rune) bool {
		buf = buf[:0]
		for _, p := range parts {
			for _, r := range p {
				buf = utf8.AppendRune(buf, r)
			}
		}
		return c.DF(string(buf)) > 0 // the conversion in a map index does not allocate
	}
	one := make([]rune, 1)
	for i := 0; i <= len(word); i++ {
		head, tail := word[:i], word[i:]
		if i < len(word) && has(head, tail[1:]) { // deleted
			return true
		}
		if i+1 < len(word) {
			one[0] = tail[1]
			if has(head, one, tail[:1], tail[2:]) { // swapped
				return true
			}
		}
		for _, r := range c.alphabet {
			one[0] = r
			if has(head, one, tail) { // inserted
				return true
			}
			if i < len(word) && has(head, one, tail[1:]) { // replaced (or stem itself)
				return true
			}
		}
	}
	return false
}

// Near's bounds: a stem of 32 runes and an alphabet of 128 try some 8,500 edits, about
// as long as the typo matching they would spare.
const (
	nearMaxStem     = 32
	nearMaxAlphabet = 128
)

// Distinct returns stems without repeats, in their order; stems itself when it has none.
// Past a few stems a set finds them: checking each against the ones before it was
// quadratic, and a 64 KiB query holds thousands of words.
func Distinct(stems []string) []string {
	if len(stems) <= 16 {
		for i, s := range stems {
			if slices.Contains(stems[:i], s) {
				return distinctSlow(stems)
			}
		}
		return stems
	}
	return distinctSlow(stems)
}

func distinctSlow(stems []string) []string {
	seen := make(map[string]struct{}, len(stems))
	out := make([]string, 0, len(stems))
	for _, s := range stems {
		if _, ok := seen[s]; !ok {
			seen[s] = struct{}{}
			out = append(out, s)
		}
	}
	return out
}

// Contains reports whether the document at path contains stem (exactly: prefix or typo
// matches of the engine do not count).
func (c *Corpus) Contains(path, stem string) bool {
	id, ok := c.vocab[stem]
	if !ok {
		return false
	}
	_, found := slices.BinarySearch(c.docs[path], id)
	return found
}

// Coverage returns the idf-weighted share of stems that the document at path contains, in
// [0,1]; 0 when there are no stems. Duplicate stems count once.
func (c *Corpus) Coverage(path string, stems []string) float64 {
	return c.coverage(path, Distinct(stems))
}

// coverage is Coverage of distinct stems.
func (c *Corpus) coverage(path string, stems []string) float64 {
	var have, total float64
	for _, s := range stems {
		w := c.IDF(s)
		total += w
		if c.Contains(path, s) {
			have += w
		}
	}
	if total == 0 {
		return 0
	}
	return have / total
}
