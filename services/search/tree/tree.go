package tree

import (
	"fmt"
	"path"
	"slices"
	"sort"
	"strings"
)

// Tree is a loaded knowledge base. It is immutable once Load returns, so any number of
// goroutines may read it; a change to the files is a new Load.
type Tree struct {
	// Root is the folder the tree was loaded from, as given to Load, or for a Kubernetes
	// volume its data link ("<folder>/..data"), through which every later read goes.
	Root string
	// Docs holds every loaded document, sorted by path.
	Docs []*Document
	// ByPath indexes Docs by path.
	ByPath map[string]*Document
	// Skipped lists the files and folders Load refused, sorted by path, with the reason.
	Skipped []Skip

	folders map[string]*folder
	// refused holds the markdown files Load read and refused (Skipped lists why): on
	// disk, and counted toward Config.MaxFiles by the next Load.
	refused map[string]bool
}

// Skip records one file or folder Load refused and why.
type Skip struct {
	Path   string
	Reason string
	// Refused marks a markdown file that was listed and then could not be read or
	// loaded (size, encoding, front matter): Load counts it toward Config.MaxFiles.
	Refused bool `json:",omitempty"`
}

// Entry is one child of a folder, as List returns it.
type Entry struct {
	// Path is relative to the root.
	Path string
	// Folder is true for a sub-folder.
	Folder bool
	// Title is the document's title; for a folder, the title of its _index.md, if any.
	Title string
	// HasSummary is true for a folder with an _index.md.
	HasSummary bool
	// Archived is true for an archived stub.
	Archived bool
}

type folder struct {
	subfolders []string
	files      []*Document
	// summary is the folder's _index.md, if it has one: ranking asks for the summaries of
	// every result's folders, several per result and query.
	summary *Document
}

// New builds a tree from documents already in memory (tests, and knowledge bases not
// read from a folder). Paths must be clean (see CleanPath); of documents sharing a path,
// only the first is kept. The slice is copied.
func New(root string, docs []*Document) *Tree {
	seen := make(map[string]bool, len(docs))
	kept := make([]*Document, 0, len(docs))
	for _, d := range docs {
		if !seen[d.Path] {
			seen[d.Path] = true
			kept = append(kept, d)
		}
	}
	return newTree(root, kept, nil)
}

func newTree(root string, docs []*Document, skipped []Skip) *Tree {
	sort.Slice(docs, func(i, j int) bool { return docs[i].Path < docs[j].Path })
	sort.SliceStable(skipped, func(i, j int) bool { return skipped[i].Path < skipped[j].Path })
	t := &Tree{
		Root:    root,
		Docs:    docs,
		ByPath:  make(map[string]*Document, len(docs)),
		Skipped: skipped,
		folders: map[string]*folder{"": {}},
	}
	for _, d := range docs {
		t.ByPath[d.Path] = d
		f := t.folder(d.Folder())
		f.files = append(f.files, d)
		if path.Base(d.Path) == indexName {
			f.summary = d
		}
	}
	for _, f := range t.folders {
		sort.Strings(f.subfolders)
	}
	return t
}

// folder returns the folder at dir, creating it and linking it to its ancestors.
func (t *Tree) folder(dir string) *folder {
	if f, ok := t.folders[dir]; ok {
		return f
	}
	f := &folder{}
	t.folders[dir] = f
	parent := ""
	if i := strings.LastIndexByte(dir, '/'); i >= 0 {
		parent = dir[:i]
	}
	p := t.folder(parent)
	p.subfolders = append(p.subfolders, dir)
	return f
}

// Len is the number of documents.
func (t *Tree) Len() int { return len(t.Docs) }

// Files is the number of markdown files Load counts toward Config.MaxFiles: the
// documents and the files it read and refused (archived originals, never read, are not
// counted).
func (t *Tree) Files() int { return len(t.Docs) + len(t.refused) }

// Refused lists the markdown files Load read and refused, sorted by path.
func (t *Tree) Refused() []string {
	out := make([]string, 0, len(t.refused))
	for p := range t.refused {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

// Counts reports whether p is one of the files Files counts.
func (t *Tree) Counts(p string) bool {
	_, ok := t.ByPath[p]
	return ok || t.refused[p]
}

// Doc returns the document at a user-supplied path (see CleanPath for the rules).
func (t *Tree) Doc(p string) (*Document, error) {
	c, err := CleanPath(p)
	if err != nil {
		return nil, err
	}
	d, ok := t.ByPath[c]
	if !ok {
		return nil, fmt.Errorf("document %q: %w", c, ErrNotFound)
	}
	return d, nil
}

// Summary returns the _index.md of a folder ("" for the root), if it has one.
func (t *Tree) Summary(folder string) (*Document, bool) {
	f, ok := t.folders[folder]
	if !ok {
		// Another spelling of a folder ("a//b"), or no folder of the tree.
		c, err := CleanPath(folder)
		if err != nil || c == folder {
			return nil, false
		}
		if f, ok = t.folders[c]; !ok {
			return nil, false
		}
	}
	return f.summary, f.summary != nil
}

// List returns the children of a folder ("" for the root): sub-folders first, then
// documents, each sorted by path. A folder exists when it holds a loaded document
// somewhere below it; the root always exists.
func (t *Tree) List(folder string) ([]Entry, error) {
	c, err := CleanPath(folder)
	if err != nil {
		return nil, err
	}
	f, ok := t.folders[c]
	if !ok {
		if _, isDoc := t.ByPath[c]; isDoc {
			return nil, fmt.Errorf("folder %q is a document: %w", c, ErrNotFound)
		}
		return nil, fmt.Errorf("folder %q: %w", c, ErrNotFound)
	}
	out := make([]Entry, 0, len(f.subfolders)+len(f.files))
	for _, sub := range f.subfolders {
		e := Entry{Path: sub, Folder: true}
		if s := t.folders[sub].summary; s != nil {
			e.Title, e.HasSummary = s.Title, true
		}
		out = append(out, e)
	}
	for _, d := range f.files {
		out = append(out, Entry{Path: d.Path, Title: d.Title, Archived: d.Archived})
	}
	return out, nil
}

// Folder returns the folder p names (clean, "" for the root), matched segment by
// segment as written or else ignoring case: users type "Auth/JWT" for the folder
// "auth/jwt", while a folder spelled "JWT" must still match itself. ok is false when no
// folder matches.
func (t *Tree) Folder(p string) (folder string, ok bool) {
	if p == "" {
		return "", true
	}
	cur := ""
	for seg := range strings.SplitSeq(p, "/") {
		want := seg
		if cur != "" {
			want = cur + "/" + seg
		}
		next := ""
		for _, sub := range t.folders[cur].subfolders {
			if sub == want {
				next = sub
				break
			}
			if next == "" && strings.EqualFold(sub, want) {
				next = sub
			}
		}
		if next == "" {
			return "", false
		}
		cur = next
	}
	return cur, true
}

// Domains returns the top-level folders, sorted; folders starting with "_" (such as
// _archived) hold structure, not a domain.
func (t *Tree) Domains() []string {
	var out []string
	for _, sub := range t.folders[""].subfolders {
		if !strings.HasPrefix(sub, "_") {
			out = append(out, sub)
		}
	}
	return out
}
