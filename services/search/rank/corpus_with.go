package rank

import (
	"maps"
	"slices"

	"github.com/quarry-router/quarry/services/search/tree"
)

// With returns a corpus for the knowledge base after a write: c with the documents of
// upserts added or replacing those of the same path and the paths of deletes removed. c is
// unchanged (snapshots in use keep reading it); only the changed documents are stemmed, so
// a one-file write to a 5,000-file knowledge base costs milliseconds, not a rebuild.
func (c *Corpus) With(upserts []*tree.Document, deletes []string) *Corpus {
	n := &Corpus{
		vocab: maps.Clone(c.vocab),
		df:    slices.Clone(c.df),
		docs:  maps.Clone(c.docs),
		// Clipped, so that a rune put inserts copies it rather than writing into c's.
		alphabet: slices.Clip(c.alphabet),
	}
	for _, p := range deletes {
		n.remove(p)
	}
	// One goroutine, unlike NewCorpus: a write runs beside queries, which need the other
	// cores more than a large sync needs to finish a second sooner.
	for _, d := range upserts {
		if d != nil {
			n.put(d.Path, DocStems(d))
		}
	}
	return n
}
