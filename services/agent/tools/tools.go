// Package tools is the agent's read-only view of a knowledge base: the tools a model may
// call (search, read a document, list a folder, follow related links), their JSON
// schemas, and the checks on the arguments models send.
package tools

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	quarryv1 "github.com/quarry-router/quarry/gen/quarry/v1"
	"github.com/quarry-router/quarry/platform/kbpath"
	"github.com/quarry-router/quarry/platform/text"
)

// KB is what the tools need from the search service. Implementations return
// ErrOutsideKB and ErrNotFound (wrapped) for the paths they refuse or cannot find.
type KB interface {
	Search(ctx context.Context, kb, query, scope string, limit int) ([]*quarryv1.Source, error)
	ReadDocument(ctx context.Context, kb, path string) (*quarryv1.Document, error)
	// ListFolder returns the first limit entries of a folder (all for 0) and how many
	// it holds.
	ListFolder(ctx context.Context, kb, path string, limit int) (entries []*quarryv1.FolderEntry, total int, err error)
	Manifest(ctx context.Context, kb string) (*quarryv1.GetManifestResponse, error)
}

// Tool names, as the model calls them.
const (
	Search       = "search"
	ReadDocument = "read_document"
	ListFolder   = "list_folder"
	Related      = "related"
)

// All names every tool, in the order they are offered to a model.
var All = []string{Search, ReadDocument, ListFolder, Related}

// Config bounds what one tool call returns to the model.
type Config struct {
	// MaxDocumentChars caps the content of one document handed to the model (tool
	// results and the T3 prompt alike), in characters.
	MaxDocumentChars int
	// SearchLimit is the number of results a search returns when the model does not
	// ask for a number; it may ask for up to 20.
	SearchLimit int
	// MaxRelated caps the related documents listed for one document.
	MaxRelated int
	// MaxFolderEntries caps the entries one list_folder call shows: a flat folder of
	// thousands of documents, listed whole, outgrew the model's context window.
	MaxFolderEntries int
}

// RegisterFlags registers the tool flags with their defaults.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.IntVar(&c.MaxDocumentChars, "tool-max-document-chars", 12000, "characters of one document given to the model (prompt and read_document); the rest is cut")
	fs.IntVar(&c.SearchLimit, "tool-search-limit", 5, "results of a search tool call when the model does not ask for a number (1-20)")
	fs.IntVar(&c.MaxRelated, "tool-max-related", 8, "related documents listed by one related tool call")
	fs.IntVar(&c.MaxFolderEntries, "tool-max-folder-entries", 200, "entries of a folder listed by one list_folder tool call (folders first); the model is told how many more there are")
}

// Validate rejects settings the tools cannot work with, naming the flag.
func (c *Config) Validate() error {
	switch {
	case c.MaxDocumentChars < 500:
		return fmt.Errorf("-tool-max-document-chars must be at least 500, got %d", c.MaxDocumentChars)
	case c.SearchLimit < 1 || c.SearchLimit > maxSearchLimit:
		return fmt.Errorf("-tool-search-limit must be in [1,%d], got %d", maxSearchLimit, c.SearchLimit)
	case c.MaxRelated < 1:
		return fmt.Errorf("-tool-max-related must be at least 1, got %d", c.MaxRelated)
	case c.MaxFolderEntries < 1:
		return fmt.Errorf("-tool-max-folder-entries must be at least 1, got %d", c.MaxFolderEntries)
	}
	return nil
}

// DefaultConfig returns the flag defaults.
func DefaultConfig() Config {
	var c Config
	c.RegisterFlags(flag.NewFlagSet("tools", flag.ContinueOnError))
	return c
}

const (
	maxSearchLimit = 20
	maxQueryBytes  = 500
	excerptChars   = 400
	summaryChars   = 300
)

// Spec describes a tool to a model.
type Spec struct {
	Name        string
	Description string
	// Parameters is the JSON schema of the arguments object.
	Parameters map[string]any
}

// Result is the outcome of one tool call.
type Result struct {
	// Text is what the model sees: the tool's output, or for a failed call the reason,
	// starting with "error:".
	Text string
	// Err is set when the call failed; the model still gets Text.
	Err error
	// Doc is the document a successful read_document returned.
	Doc *quarryv1.Document
}

type tool struct {
	desc   string
	params []param
	run    func(s *Set, ctx context.Context, kb string, a args) (Result, error)
}

// Set serves the tools over one search backend.
type Set struct {
	cfg   Config
	kb    KB
	tools map[string]tool
}

// New returns the tools backed by kb.
func New(cfg Config, kb KB) *Set {
	return &Set{cfg: cfg, kb: kb, tools: map[string]tool{
		Search: {
			desc: "Search the knowledge base (BM25 over titles, paths and content). Returns ranked documents with their paths, titles, relevance in [0,1] and a matching passage.",
			params: []param{
				{name: "query", kind: kindString, desc: "search words, e.g. \"postgres restore backup\"", required: true, maxLen: maxQueryBytes, same: sameWords},
				{name: "scope", kind: kindString, desc: "folder to search under, relative to the root, e.g. \"data/backups\"; omit to search everything", maxLen: kbpath.MaxBytes, same: samePath},
				{name: "limit", kind: kindInteger, desc: fmt.Sprintf("number of results (default %d)", cfg.SearchLimit), min: 1, max: maxSearchLimit},
			},
			run: (*Set).search,
		},
		ReadDocument: {
			desc: "Read one document of the knowledge base in full: title, tags, related paths and markdown content.",
			params: []param{
				{name: "path", kind: kindString, desc: "document path relative to the root, e.g. \"auth/jwt/token-validation.md\"", required: true, maxLen: kbpath.MaxBytes, same: samePath},
			},
			run: (*Set).read,
		},
		ListFolder: {
			desc: "List a folder of the knowledge base: its sub-folders and documents with their titles.",
			params: []param{
				{name: "path", kind: kindString, desc: "folder relative to the root, e.g. \"deploy\"; omit or \"\" for the root", maxLen: kbpath.MaxBytes, same: samePath},
			},
			run: (*Set).list,
		},
		Related: {
			desc: "Follow the related links of a document: the documents its front matter names as related, with their titles and first lines.",
			params: []param{
				{name: "path", kind: kindString, desc: "document path relative to the root", required: true, maxLen: kbpath.MaxBytes, same: samePath},
			},
			run: (*Set).related,
		},
	}}
}

// Specs describes the named tools, in the order given.
func (s *Set) Specs(names ...string) []Spec {
	out := make([]Spec, 0, len(names))
	for _, n := range names {
		t, ok := s.tools[n]
		if !ok {
			continue
		}
		out = append(out, Spec{Name: n, Description: t.desc, Parameters: schema(t.params)})
	}
	return out
}

// Call runs the tool name with the model's raw arguments against knowledge base kb,
// if allowed lists it. It never panics on what the model sent: an unknown tool, bad
// arguments or a refused path become a Result whose Text tells the model what was
// wrong. Err wraps ctx's error when the context ended during the call.
func (s *Set) Call(ctx context.Context, kb, name, raw string, allowed []string) Result {
	t, ok := s.tools[name]
	if !ok || !slices.Contains(allowed, name) {
		return failed(fmt.Errorf("%w: no tool named %q; available: %s", ErrInvalidArguments, name, strings.Join(allowed, ", ")))
	}
	a, err := parseArgs(raw, t.params)
	if err != nil {
		return failed(err)
	}
	res, err := t.run(s, ctx, kb, a)
	if err != nil {
		if ctx.Err() != nil {
			return Result{Text: "error: stopped: " + ctx.Err().Error(), Err: fmt.Errorf("%s: %w", name, ctx.Err())}
		}
		return failed(err)
	}
	return res
}

// Key names the call of tool name with the raw arguments by what it would do, for loop
// detection: calls that differ only in how the model spelled them get one key. Paths
// are compared cleaned ("./ops//oncall.md/" is "ops/oncall.md"), searches by their
// words (case and spacing aside: the engine ignores both), the rest as Canonical
// writes it. Arguments that do not parse, and unknown tools, are keyed as Canonical
// writes them.
func (s *Set) Key(name, raw string) string {
	t, ok := s.tools[name]
	if !ok {
		return name + "\x00" + Canonical(raw)
	}
	a, err := parseArgs(raw, t.params)
	if err != nil {
		return name + "\x00" + Canonical(raw)
	}
	v := make(map[string]any, len(a.strs)+len(a.ints))
	for _, p := range t.params {
		if str, ok := a.strs[p.name]; ok {
			if p.same != nil {
				str = p.same(str)
			}
			if str != "" || p.required {
				v[p.name] = str // "" for an optional path is the root, as if omitted
			}
		}
		if n, ok := a.ints[p.name]; ok {
			v[p.name] = n
		}
	}
	b, err := json.Marshal(v) // keys sorted
	if err != nil {
		return name + "\x00" + Canonical(raw)
	}
	return name + "\x00" + string(b)
}

// samePath spells a path as the tools will send it; one they will refuse stays as
// written.
func samePath(p string) string {
	if c, err := CleanPath(p); err == nil {
		return c
	}
	return p
}

// sameWords spells a search query in lower case with single spaces.
func sameWords(q string) string {
	return strings.Join(strings.Fields(strings.ToLower(q)), " ")
}

// failed tells the model what went wrong. Mistakes it can fix are spelled out; other
// failures (the search service down) get a generic message, so that no internal
// address or error text reaches the LLM provider. Err keeps the cause for the logs.
func failed(err error) Result {
	var msg string
	switch {
	case errors.Is(err, ErrOutsideKB):
		msg = err.Error() + ". Use a path relative to the knowledge base root, such as one a search returned; nothing outside it can be read"
	case errors.Is(err, ErrNotFound):
		msg = err.Error() + ". Use search or list_folder to find existing paths"
	case errors.Is(err, ErrInvalidArguments):
		msg = err.Error() + ". Call the tool again with arguments that match its schema"
	default:
		msg = "the knowledge base could not be searched just now; answer with what you have"
	}
	return Result{Text: "error: " + msg, Err: err}
}

func (s *Set) search(ctx context.Context, kb string, a args) (Result, error) {
	scope, err := CleanPath(a.str("scope"))
	if err != nil {
		return Result{}, err
	}
	query := strings.TrimSpace(a.str("query"))
	results, err := s.kb.Search(ctx, kb, query, scope, a.integer("limit", s.cfg.SearchLimit))
	if err != nil {
		return Result{}, err
	}
	var b strings.Builder
	where := ""
	if scope != "" {
		where = fmt.Sprintf(" under `%s`", scope)
	}
	if len(results) == 0 {
		fmt.Fprintf(&b, "No document matches %q%s.", query, where)
		return Result{Text: b.String()}, nil
	}
	noun := "results"
	if len(results) == 1 {
		noun = "result"
	}
	fmt.Fprintf(&b, "%d %s for %q%s, best first:\n", len(results), noun, query, where)
	for i, r := range results {
		fmt.Fprintf(&b, "\n%d. `%s` — %s (relevance %.2f", i+1, r.GetPath(), oneLine(r.GetTitle()), r.GetRelevance())
		if r.GetArchived() {
			b.WriteString(", archived stub")
		}
		if r.GetPropagated() {
			b.WriteString(", folder summary")
		}
		b.WriteString(")\n")
		if ex := Cut(oneLine(r.GetExcerpt()), excerptChars); ex != "" {
			fmt.Fprintf(&b, "   %s\n", ex)
		}
	}
	return Result{Text: b.String()}, nil
}

func (s *Set) read(ctx context.Context, kb string, a args) (Result, error) {
	p, err := CleanPath(a.str("path"))
	if err != nil {
		return Result{}, err
	}
	if p == "" {
		return Result{}, fmt.Errorf("%w: \"path\" names the root folder; use list_folder for folders", ErrInvalidArguments)
	}
	doc, err := s.kb.ReadDocument(ctx, kb, p)
	if err != nil {
		return Result{}, err
	}
	return Result{Text: s.FormatDocument(doc), Doc: doc}, nil
}

// FormatDocument renders a document for a model: path, title, tags, related paths and
// the content, cut at Config.MaxDocumentChars.
func (s *Set) FormatDocument(d *quarryv1.Document) string {
	var b strings.Builder
	fmt.Fprintf(&b, "path: %s\ntitle: %s\n", d.GetPath(), oneLine(d.GetTitle()))
	if len(d.GetTags()) > 0 {
		fmt.Fprintf(&b, "tags: %s\n", strings.Join(d.GetTags(), ", "))
	}
	if len(d.GetRelated()) > 0 {
		fmt.Fprintf(&b, "related: %s\n", strings.Join(d.GetRelated(), ", "))
	}
	if d.GetArchived() {
		b.WriteString("archived: true (a stub saying what the archived file held)\n")
	}
	b.WriteString("\n")
	b.WriteString(Cut(strings.TrimSpace(d.GetContent()), s.cfg.MaxDocumentChars))
	return b.String()
}

func (s *Set) list(ctx context.Context, kb string, a args) (Result, error) {
	p, err := CleanPath(a.str("path"))
	if err != nil {
		return Result{}, err
	}
	entries, total, err := s.kb.ListFolder(ctx, kb, p, s.cfg.MaxFolderEntries)
	if err != nil {
		return Result{}, err
	}
	name := "the root folder"
	if p != "" {
		name = "`" + p + "`"
	}
	if len(entries) == 0 {
		return Result{Text: name + " is empty."}, nil
	}
	var b strings.Builder
	more := total - len(entries)
	name = strings.ToUpper(name[:1]) + name[1:]
	if more > 0 {
		fmt.Fprintf(&b, "%s holds %s; the first %d (folders first, then by name):\n", name, text.Count(total, "entry", "entries"), len(entries))
	} else {
		fmt.Fprintf(&b, "%s holds %s:\n", name, text.Count(len(entries), "entry", "entries"))
	}
	for _, e := range entries {
		switch {
		case e.GetFolder():
			fmt.Fprintf(&b, "- folder `%s/`", e.GetPath())
			if e.GetTitle() != "" {
				fmt.Fprintf(&b, " — %s", oneLine(e.GetTitle()))
			}
		default:
			fmt.Fprintf(&b, "- `%s` — %s", e.GetPath(), oneLine(e.GetTitle()))
			if e.GetArchived() {
				b.WriteString(" (archived stub)")
			}
		}
		b.WriteString("\n")
	}
	if more > 0 {
		fmt.Fprintf(&b, "- … and %d more: list a sub-folder, or search for what you need.\n", more)
	}
	return Result{Text: b.String()}, nil
}

func (s *Set) related(ctx context.Context, kb string, a args) (Result, error) {
	p, err := CleanPath(a.str("path"))
	if err != nil {
		return Result{}, err
	}
	if p == "" {
		return Result{}, fmt.Errorf("%w: \"path\" must name a document", ErrInvalidArguments)
	}
	doc, err := s.kb.ReadDocument(ctx, kb, p)
	if err != nil {
		return Result{}, err
	}
	rel := doc.GetRelated()
	if len(rel) == 0 {
		return Result{Text: fmt.Sprintf("`%s` names no related documents.", p)}, nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "`%s` names %s:\n", p, text.Count(len(rel), "related document", "related documents"))
	for i, r := range rel {
		if i == s.cfg.MaxRelated {
			fmt.Fprintf(&b, "- … and %d more\n", len(rel)-i)
			break
		}
		rp, err := CleanPath(r)
		if err != nil {
			continue
		}
		d, err := s.kb.ReadDocument(ctx, kb, rp)
		switch {
		case err == nil:
			fmt.Fprintf(&b, "- `%s` — %s: %s\n", rp, oneLine(d.GetTitle()), Cut(oneLine(d.GetContent()), summaryChars))
		case errors.Is(err, ErrNotFound):
			fmt.Fprintf(&b, "- `%s` — (missing from the knowledge base)\n", rp)
		case errors.Is(err, ErrOutsideKB):
			// The document's own link, not the model's argument: the call goes on.
			fmt.Fprintf(&b, "- `%s` — (not a document of the knowledge base)\n", rp)
		default:
			return Result{}, err
		}
	}
	return Result{Text: b.String()}, nil
}

// Cut returns s cut to at most max characters on a rune boundary, saying how much was
// left out.
func Cut(s string, max int) string {
	if utf8.RuneCountInString(s) <= max {
		return s
	}
	runes := []rune(s)
	return string(runes[:max]) + fmt.Sprintf(" … [%d more characters cut]", len(runes)-max)
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// Manifest returns the knowledge base's manifest.
func (s *Set) Manifest(ctx context.Context, kb string) (*quarryv1.GetManifestResponse, error) {
	return s.kb.Manifest(ctx, kb)
}
