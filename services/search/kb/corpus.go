package kb

import (
	"context"
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
// failure costs the next start that time, never this load; a load given up (ctx done)
// keeps nothing. The caller holds loadMu.
func (r *Registry) loadCorpus(ctx context.Context, id, fp string, docs []*tree.Document) *rank.Corpus {
	if r.cfg.DataDir == "" {
		return rank.NewCorpus(docs)
	}
	dir := filepath.Join(r.cfg.DataDir, id)
	c, err := readCorpus(filepath.Join(dir, corpusPrefix+fp), fp)
	switch {
	case err == nil && c.N() == len(docs):
		return c
	case err == nil:
		r.log.Warn("kept term statistics count other documents; computing them", "kb", id, "documents", len(docs), "kept", c.N())
	case errors.Is(err, rank.ErrStale):
		r.log.Info("kept term statistics are for other documents or from another version; computing them", "kb", id)
	case !errors.Is(err, fs.ErrNotExist):
		r.log.Warn("kept term statistics unreadable; computing them", "kb", id, "err", err)
	}
	c = rank.NewCorpus(docs)
	if ctx.Err() != nil {
		return c
	}
	if err := replaceFile(dir, corpusPrefix+fp, func(w io.Writer) error { return c.WriteTo(w, fp) }); err != nil {
		r.log.Warn("keep term statistics", "kb", id, "err", err)
	}
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
// contents, and what writes a crash cut short left of them: every file named as
// loadCorpus and replaceFile name them but the one for fp. Nothing else is touched, even
// with a -data-dir that holds other files.
func (r *Registry) removeStaleCorpora(id, fp string) {
	dir := filepath.Join(r.cfg.DataDir, id)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		n := e.Name()
		kept, ok := corpusFingerprint(n)
		if !ok || kept == fp || !e.Type().IsRegular() {
			continue
		}
		if err := os.Remove(filepath.Join(dir, n)); err != nil {
			r.log.Warn("remove stale term statistics", "kb", id, "file", n, "err", err)
		}
	}
}

// corpusFingerprint returns the fingerprint in the name of a kept corpus,
// corpus-<fingerprint>, or of a temporary file replaceFile left of one,
// .corpus-<fingerprint>-<random>.tmp.
func corpusFingerprint(name string) (string, bool) {
	tmp := strings.HasPrefix(name, ".")
	name = strings.TrimPrefix(strings.TrimPrefix(name, "."), corpusPrefix)
	if len(name) < fingerprintLen {
		return "", false
	}
	fp, rest := name[:fingerprintLen], name[fingerprintLen:]
	if strings.Trim(fp, "0123456789abcdef") != "" {
		return "", false
	}
	if tmp {
		if !strings.HasPrefix(rest, "-") || !strings.HasSuffix(rest, ".tmp") {
			return "", false
		}
	} else if rest != "" {
		return "", false
	}
	return fp, true
}
