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
	}
	drop := func(p string) {
		if old, ok := n.docs[p]; ok {
			for _, id := range old {
				n.df[id]--
			}
			delete(n.docs, p)
		}
	}
	for _, p := range deletes {
		drop(p)
	}
	// One goroutine, unlike NewCorpus: a write runs beside queries, which need the other
	// cores more than a large sync needs to finish a second sooner.
	for _, d := range upserts {
		if d == nil {
			continue
		}
		drop(d.Path)
		stems := DocStems(d)
		ids := make([]uint32, 0, len(stems))
		for _, s := range stems {
			id, ok := n.vocab[s]
			if !ok {
				id = uint32(len(n.df))
				n.vocab[s] = id
				n.df = append(n.df, 0)
			}
			n.df[id]++
			ids = append(ids, id)
		}
		slices.Sort(ids)
		n.docs[d.Path] = slices.Clip(ids)
	}
	return n
}
