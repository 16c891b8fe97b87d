package bleve

import (
	"context"
	"encoding/json"
	"errors"
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

// Keep records, in a persisted index that Apply changed, that it now holds the documents
// whose content fingerprint is fingerprint, with their BM25 statistics: a Build with that
// fingerprint then reopens it instead of indexing every document again. The caller
// vouches for the claim (every Apply succeeded or was undone) and moves the folder where
// that Build looks; the fingerprint is written last, as Build writes it.
func (ix *Index) Keep(fingerprint string) error {
	if ix.cfg.Dir == "" || fingerprint == "" {
		return errors.New("bleve keep: only a persisted index, under a fingerprint")
	}
	ix.writeMu.Lock()
	defer ix.writeMu.Unlock()
	ix.mu.RLock()
	st := ix.bm25
	ix.mu.RUnlock()
	// Stats from before the writes must not be read back with the new documents: Build
	// trusts any whose document count matches.
	var err error
	if st != nil {
		var raw []byte
		if raw, err = json.Marshal(st); err == nil {
			err = ix.idx.SetInternal([]byte(bm25Key), raw)
		}
	} else {
		err = ix.idx.DeleteInternal([]byte(bm25Key))
	}
	if err != nil {
		return fmt.Errorf("bleve keep: bm25 stats: %w", err)
	}
	cfg := ix.cfg
	cfg.Fingerprint = fingerprint
	if err := ix.idx.SetInternal([]byte(fingerprintKey), []byte(storedFingerprint(cfg))); err != nil {
		return fmt.Errorf("bleve keep: fingerprint: %w", err)
	}
	return nil
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
