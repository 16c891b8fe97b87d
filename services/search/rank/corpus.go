package rank

import (
	"math"
	"runtime"
	"slices"
	"strings"
	"sync"

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
}

// NewCorpus indexes the stems of docs (title, path words and content, stop words removed).
// A path that occurs twice counts once, the later document winning.
func NewCorpus(docs []*tree.Document) *Corpus {
	c := &Corpus{
		vocab: make(map[string]uint32),
		docs:  make(map[string][]uint32, len(docs)),
	}
	for i, stems := range docStemsAll(docs) {
		d := docs[i]
		if d == nil {
			continue
		}
		c.put(d.Path, stems)
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

// docStems is DocStems with a memo of stems already computed.
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
	var have, total float64
	for i, s := range stems {
		if slices.Contains(stems[:i], s) {
			continue
		}
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
