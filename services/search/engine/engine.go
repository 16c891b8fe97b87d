// Package engine is the seam between the query path and a full-text search engine, so the
// embedded Bleve index and a Meilisearch cluster are interchangeable.
package engine

import (
	"context"
	"errors"
	"strings"
)

// ErrUnavailable means the engine could not answer: a server behind it could not be
// reached, was too busy, or did not answer in time. It is the engine's failure, not the
// query's, and the gRPC edge answers UNAVAILABLE (which clients retry) rather than
// INTERNAL.
var ErrUnavailable = errors.New("search engine unavailable")

// Doc is one knowledge file as an engine indexes it.
type Doc struct {
	// Path is the document's identity: relative to the tree root, forward slashes.
	Path    string
	Title   string
	Content string
	// Folder holds the document ("" for the root); scope filters match it and its ancestors.
	Folder string
	// Archived marks an archived stub; stubs are searchable like any file.
	Archived bool
	// Summary marks a folder summary (_index.md).
	Summary bool
}

// Query is one search. Terms are words the caller has already analysed (split, lower-cased,
// stop words removed); the engine stems them itself.
type Query struct {
	// Terms are the search words, e.g. ["refresh", "token", "rotation"].
	Terms []string
	// Scope is a folder prefix: only documents under it match ("" = the whole KB).
	Scope string
	// AllTerms requires every term to match; otherwise any term does.
	AllTerms bool
	// Limit caps the number of hits (<= 0 means the backend's default).
	Limit int
	// Passage asks the engine for each hit's best-matching passage, at most this many
	// words (0: none). Engines that do not pick passages ignore it.
	Passage int
	// Near, when set, reports whether the knowledge base holds a stem or one a single
	// typo from it (rank.Corpus.Near). An engine that matches typos by walking its own
	// dictionary may skip a word for which it says false: the walk would find nothing.
	// nil: no such knowledge.
	Near func(stem string) bool
}

// Hit is one matching document.
type Hit struct {
	Path string
	// Score is the engine's relevance, higher is better (BM25 for Bleve). Scores compare only
	// within one query.
	Score float64
	// Passage is the engine's pick of the document's best-matching passage when the query
	// asked for one, in the words the engine indexed (Meilisearch's crop of the content's
	// stems, stop words removed); "" when the engine picks none (Bleve stores no text).
	// answer.Config.ExcerptAround finds it in the file's own text.
	Passage string
}

// Backend is what the query path needs from a search engine.
type Backend interface {
	// Search returns hits ordered by Score descending. A query without terms has no hits.
	Search(ctx context.Context, q Query) ([]Hit, error)
	// Len returns the number of indexed documents.
	Len() int
	// Close releases the index; the backend is unusable afterwards.
	Close() error
}

// Change replaces, adds or removes one document.
type Change struct {
	// Old is the indexed document being replaced or removed; nil for a new document.
	Old *Doc
	// New is the document to index; nil removes Old.
	New *Doc
}

// Writer is a Backend whose documents can be changed in place, so a write to a knowledge
// base costs the changed documents rather than a rebuild.
type Writer interface {
	Backend
	// Apply makes the changes. It returns once they are searchable; an error means the
	// backend may hold some of them (the caller undoes them by applying the inverse).
	Apply(ctx context.Context, changes []Change) error
}

// MultiSearcher is a Backend that runs several searches in one round trip (the entity
// search of the query path).
type MultiSearcher interface {
	Backend
	// SearchMany runs qs and returns their hits in the same order.
	SearchMany(ctx context.Context, qs []Query) ([][]Hit, error)
}

// Inverse returns the changes that undo cs.
func Inverse(cs []Change) []Change {
	out := make([]Change, len(cs))
	for i, c := range cs {
		out[len(cs)-1-i] = Change{Old: c.New, New: c.Old}
	}
	return out
}

// PathText returns the words of a document path that describe its topic, for engines and
// rankers to index beside the title: folder and file names without the markdown extension,
// minus the "_archived" folder and the "_index.md" name, which every stub or summary shares.
// "ops/_archived/pager-duty.stub.md" → "ops pager-duty".
func PathText(p string) string {
	segs := strings.Split(p, "/")
	out := segs[:0:0]
	for i, s := range segs {
		last := i == len(segs)-1
		switch {
		case s == "_archived" && !last:
			continue
		case last && s == "_index.md":
			continue
		case last:
			s = strings.TrimSuffix(strings.TrimSuffix(s, ".md"), ".stub")
		}
		if s != "" {
			out = append(out, s)
		}
	}
	return strings.Join(out, " ")
}

// Ancestors returns folder and each of its ancestors, "auth/jwt" → ["auth", "auth/jwt"]:
// the values a document's scope field holds, so a scope filter is one exact term.
func Ancestors(folder string) []string {
	folder = strings.Trim(folder, "/")
	if folder == "" {
		return nil
	}
	var out []string
	for i := 0; i < len(folder); i++ {
		if folder[i] == '/' {
			out = append(out, folder[:i])
		}
	}
	return append(out, folder)
}
