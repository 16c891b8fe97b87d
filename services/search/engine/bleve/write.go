package bleve

import (
	"context"
	"fmt"
	"maps"
	"strings"

	"github.com/blevesearch/bleve/v2/search"

	"github.com/quarry-router/quarry/platform/text"
	"github.com/quarry-router/quarry/services/search/engine"
)

var _ engine.Writer = (*Index)(nil)

// Apply indexes and removes documents in place, in batches of Config.BatchSize, and keeps
// the BM25 length statistics in step. Searches running meanwhile see the index before or
// after each batch. A persisted index changed in place no longer holds the tree its
// fingerprint names, so its fingerprint is dropped first: the next start rebuilds it.
func (ix *Index) Apply(ctx context.Context, changes []engine.Change) error {
	ix.writeMu.Lock()
	defer ix.writeMu.Unlock()
	if ix.cfg.Dir != "" {
		if err := ix.idx.DeleteInternal([]byte(fingerprintKey)); err != nil {
			return fmt.Errorf("bleve apply: drop fingerprint: %w", err)
		}
	}
	ix.mu.RLock()
	st, n := ix.bm25, ix.n
	ix.mu.RUnlock()
	// Without stats (an index reopened with nothing to count) Bleve's own stay in use;
	// an empty index starts counting.
	if st == nil && n == 0 {
		st = &search.BM25Stats{FieldCardinality: map[string]int{}}
	}
	if st != nil {
		st = &search.BM25Stats{DocCount: st.DocCount, FieldCardinality: maps.Clone(st.FieldCardinality)}
	}
	batch := ix.idx.NewBatch()
	flush := func() error {
		if batch.Size() == 0 {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("bleve apply: %w", err)
		}
		err := ix.idx.Batch(batch)
		// Even after an error: scorch makes a batch searchable before it saves it.
		ix.knownStems.Store(new(stemSet))
		if err != nil {
			return fmt.Errorf("bleve apply: %w", err)
		}
		// A new batch, not Reset: scorch's analysis goroutine may still be ranging over
		// the old one's map after Batch returns (a data race under -race).
		batch = ix.idx.NewBatch()
		ix.publish(st, n)
		return nil
	}
	for _, c := range changes {
		if c.Old != nil {
			n--
			count(st, *c.Old, -1)
			if c.New == nil || c.New.Path != c.Old.Path {
				batch.Delete(c.Old.Path)
			}
		}
		if c.New != nil {
			if c.New.Path == "" {
				return fmt.Errorf("bleve apply: document without a path")
			}
			n++
			count(st, *c.New, 1)
			if err := batch.Index(c.New.Path, fields(*c.New)); err != nil {
				return fmt.Errorf("bleve apply %s: %w", c.New.Path, err)
			}
		}
		if batch.Size() >= ix.cfg.BatchSize {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	return flush()
}

// publish makes new statistics visible to searches.
func (ix *Index) publish(st *search.BM25Stats, n int) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ix.n = n
	if st == nil || st.DocCount <= 0 {
		ix.bm25 = nil
		return
	}
	ix.bm25 = &search.BM25Stats{DocCount: st.DocCount, FieldCardinality: maps.Clone(st.FieldCardinality)}
}

// count adds (sign 1) or removes (sign -1) one document's token counts to st.
func count(st *search.BM25Stats, d engine.Doc, sign int) {
	if st == nil {
		return
	}
	st.DocCount += float64(sign)
	st.FieldCardinality[fieldFolders] += sign
	for name, v := range fields(d) {
		txt, ok := v.(string)
		if !ok {
			continue
		}
		n := 0
		for _, w := range strings.Fields(txt) {
			if !text.IsStopWord(w) {
				n++
			}
		}
		st.FieldCardinality[name] += sign * n
	}
}
