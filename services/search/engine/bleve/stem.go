package bleve

import (
	"sync"

	"github.com/blevesearch/bleve/v2/analysis"
	"github.com/blevesearch/bleve/v2/registry"

	"github.com/quarry-router/quarry/platform/text"
)

// stemFilter is the stemming token filter of the index mapping: Snowball English, as
// Bleve's en.SnowballStemmerName and text.Stem, with each word stemmed once per worker.
// A 5,000-file knowledge base has about 1.5 million tokens of a few tens of thousands
// of words; stemming each token was a fifth of a first start's CPU.
const stemFilter = "quarry_snowball"

func init() {
	err := registry.RegisterTokenFilter(stemFilter, func(map[string]any, *registry.Cache) (analysis.TokenFilter, error) {
		return memoStemmer{}, nil
	})
	if err != nil {
		panic(err)
	}
}

// stemMemos holds the memos of the analysis goroutines, one per goroutine at a time, so
// they take no lock; the garbage collector may empty the pool, which costs a memo.
var stemMemos = sync.Pool{New: func() any { return make(map[string][]byte, 1<<12) }}

// maxStemMemo bounds a memo: past it, new words are stemmed each time. A knowledge base
// in one language stays well within it.
const maxStemMemo = 1 << 16

// maxRememberedWord is the longest word (or stem) the memos and stemSets keep: longer
// ones (hashes, encoded blobs, a question's 64 KiB word) are seen once, and would only
// fill them and make them large.
const maxRememberedWord = 48

type memoStemmer struct{}

// Filter stems every token. A memoised stem is shared by the tokens of that word, so
// nothing may write into a token's Term after this filter: no filter follows it in the
// mapping, and Bleve's indexing only reads terms (zapx keys its dictionary by copies).
func (memoStemmer) Filter(input analysis.TokenStream) analysis.TokenStream {
	memo := stemMemos.Get().(map[string][]byte)
	for _, tok := range input {
		st, ok := memo[string(tok.Term)]
		if !ok {
			st = []byte(text.Stem(string(tok.Term)))
			if len(memo) < maxStemMemo && len(tok.Term) <= maxRememberedWord {
				memo[string(tok.Term)] = st
			}
		}
		tok.Term = st
	}
	stemMemos.Put(memo)
	return input
}
