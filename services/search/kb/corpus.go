package kb

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/quarry-router/quarry/services/search/rank"
	"github.com/quarry-router/quarry/services/search/tree"
)

// corpusPrefix names the files in -data-dir/<kb>/ that keep a tree's term statistics,
// corpus-<fingerprint>: one per tree content, so a file can only be read for the
// documents it was computed from.
const corpusPrefix = "corpus-"

// loadCorpus returns the term statistics of docs, whose content fingerprint is fp.
// With a -data-dir they are read from there when a previous start kept them for the
// same content, and kept there when computed: tokenising and stemming every document was
// half of what a restart spent before it answered. Keeping them is best effort: a
// failure costs the next start that time, never this load. The caller holds loadMu.
func (r *Registry) loadCorpus(id, fp string, docs []*tree.Document) *rank.Corpus {
	if r.cfg.DataDir == "" {
		return rank.NewCorpus(docs)
	}
	dir := filepath.Join(r.cfg.DataDir, id)
	name := corpusPrefix + fp
	c, err := readCorpus(filepath.Join(dir, name), fp)
	switch {
	case err == nil && c.N() == len(docs):
		r.removeStaleCorpora(id, name)
		return c
	case err == nil:
		r.log.Warn("kept term statistics count other documents; computing them", "kb", id, "documents", len(docs), "kept", c.N())
	case errors.Is(err, rank.ErrStale):
		r.log.Info("kept term statistics are for other documents or from another version; computing them", "kb", id)
	case !errors.Is(err, fs.ErrNotExist):
		r.log.Warn("kept term statistics unreadable; computing them", "kb", id, "err", err)
	}
	c = rank.NewCorpus(docs)
	if err := replaceFile(dir, name, func(w io.Writer) error { return c.WriteTo(w, fp) }); err != nil {
		r.log.Warn("keep term statistics", "kb", id, "err", err)
	}
	r.removeStaleCorpora(id, name)
	return c
}

func readCorpus(path, fp string) (*rank.Corpus, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	c, err := rank.ReadCorpus(f, fp)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Base(path), err)
	}
	return c, nil
}

// removeStaleCorpora deletes the term statistics kept for a knowledge base's earlier
// contents, and the leftovers of writes a crash interrupted: only keep is read again.
func (r *Registry) removeStaleCorpora(id, keep string) {
	dir := filepath.Join(r.cfg.DataDir, id)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		n := e.Name()
		if n == keep || e.IsDir() || !strings.HasPrefix(strings.TrimPrefix(n, "."), corpusPrefix) {
			continue
		}
		if err := os.Remove(filepath.Join(dir, n)); err != nil {
			r.log.Warn("remove stale term statistics", "kb", id, "file", n, "err", err)
		}
	}
}
