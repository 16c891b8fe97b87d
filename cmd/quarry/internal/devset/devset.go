// Package devset turns the Go standard library's documentation into a labelled dev set: a
// knowledge base of one file per package and mechanically generated eval questions.
package devset

import (
	"bytes"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/build"
	"go/doc"
	"go/parser"
	"go/printer"
	"go/token"
	"io/fs"
	"math/rand/v2"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"
	"unicode"
)

// Options control what Generate writes.
type Options struct {
	// GOROOT whose src/ is read.
	GOROOT string
	// Seed of every random choice; the same seed and Go release write the same files.
	Seed uint64
	// Now dates the documents (front matter "updated" falls in the 120 days before it).
	Now time.Time
	// KnownPerPackage is the most known-item questions drawn from one package.
	KnownPerPackage int
}

// Stats says what Generate wrote.
type Stats struct {
	Packages, Files                 int
	Known, OutOfDomain, Same, Other int
}

// skipped top-level source folders: not importable library documentation (cmd, the
// internal and vendored packages) or operating-system tables that would swamp the KB.
var skipped = map[string]bool{"cmd": true, "internal": true, "vendor": true, "testdata": true, "builtin": true, "syscall": true, "simd": true, "unsafe": true}

// pkgDoc is one documented package.
type pkgDoc struct {
	Import, Short, Domain, File string
	Synopsis, Doc               string
	Markdown                    string
	// Sentences of the package's and its exported symbols' doc comments, each with the
	// symbol it documents ("" for the package comment).
	Sentences []sentence
	Funcs     map[string]string // exported function name → first sentence
}

type sentence struct{ Symbol, Text string }

// Generate writes the knowledge base to out/gostd and the questions to out/questions.jsonl.
func Generate(out string, o Options) (Stats, error) {
	if o.KnownPerPackage <= 0 {
		o.KnownPerPackage = 3
	}
	pkgs, err := load(filepath.Join(o.GOROOT, "src"))
	if err != nil {
		return Stats{}, err
	}
	rng := rand.New(rand.NewPCG(o.Seed, o.Seed^0x9e3779b97f4a7c15))
	kbDir := filepath.Join(out, "gostd")
	st := Stats{Packages: len(pkgs)}
	domains := map[string][]*pkgDoc{}
	for _, p := range pkgs {
		domains[p.Domain] = append(domains[p.Domain], p)
		fm := frontMatter(p.Import, []string{p.Domain, p.Short}, 40+rng.IntN(55), []string{"draft", "validated", "core"}[rng.IntN(3)], o.Now.AddDate(0, 0, -rng.IntN(120)))
		if err := write(kbDir, p.File, fm+p.Markdown); err != nil {
			return st, err
		}
		st.Files++
	}
	for _, d := range sortedKeys(domains) {
		var b strings.Builder
		fmt.Fprintf(&b, "The Go standard library's %s packages.\n\n", d)
		for _, p := range domains[d] {
			fmt.Fprintf(&b, "- `%s` — %s\n", p.Import, p.Synopsis)
		}
		fm := frontMatter(d+" packages", []string{d}, 60, "validated", o.Now.AddDate(0, 0, -30))
		if err := write(kbDir, path.Join(d, "_index.md"), fm+b.String()); err != nil {
			return st, err
		}
		st.Files++
	}
	qs := questions(pkgs, rng, o.KnownPerPackage, vocabulary(pkgs))
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	for _, q := range qs {
		switch {
		case q.Kind == "known_item":
			st.Known++
		case q.Kind == "out_of_domain":
			st.OutOfDomain++
		case *q.Same:
			st.Same++
		default:
			st.Other++
		}
		if err := enc.Encode(q); err != nil {
			return st, err
		}
	}
	return st, os.WriteFile(filepath.Join(out, "questions.jsonl"), buf.Bytes(), 0o644)
}

func frontMatter(title string, tags []string, importance int, maturity string, updated time.Time) string {
	return fmt.Sprintf("---\ntitle: %q\ntags: [%s]\nimportance: %d\nmaturity: %s\nupdated: %s\n---\n", title, strings.Join(tags, ", "), importance, maturity, updated.Format("2006-01-02"))
}

func write(root, rel, content string) error {
	p := filepath.Join(root, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	return os.WriteFile(p, []byte(content), 0o644)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// load parses every library package's doc comments in-process with go/doc.
func load(src string) ([]*pkgDoc, error) {
	var dirs []string
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		rel, _ := filepath.Rel(src, p)
		rel = filepath.ToSlash(rel)
		if rel == "." {
			return nil
		}
		if skipped[strings.Split(rel, "/")[0]] || slices.ContainsFunc(strings.Split(rel, "/"), func(e string) bool {
			return e == "internal" || e == "testdata" || e == "vendor" || strings.HasPrefix(e, ".") || strings.HasPrefix(e, "_")
		}) {
			return filepath.SkipDir
		}
		dirs = append(dirs, rel)
		return nil
	})
	if err != nil {
		return nil, err
	}
	hasChildren := map[string]bool{}
	for _, d := range dirs {
		if i := strings.Index(d, "/"); i > 0 {
			hasChildren[d[:i]] = true
		}
	}
	var out []*pkgDoc
	for _, d := range dirs {
		p, err := loadPackage(filepath.Join(src, filepath.FromSlash(d)), d)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", d, err)
		}
		if p == nil {
			continue
		}
		top := strings.Split(d, "/")[0]
		switch {
		case hasChildren[top]:
			p.Domain = top
			if d == top {
				p.File = top + "/" + top + ".md"
			} else {
				p.File = d + ".md"
			}
		default:
			p.Domain = "core"
			p.File = "core/" + d + ".md"
		}
		out = append(out, p)
	}
	return out, nil
}

var docLink = regexp.MustCompile(`\[([*]?[A-Za-z0-9_./]+)\]`)

func loadPackage(dir, importPath string) (*pkgDoc, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range entries {
		n := e.Name()
		if e.IsDir() || !strings.HasSuffix(n, ".go") || strings.HasSuffix(n, "_test.go") {
			continue
		}
		names = append(names, n)
	}
	names = onePlatform(dir, names)
	fset := token.NewFileSet()
	byName := map[string][]*ast.File{}
	for _, n := range names {
		f, err := parser.ParseFile(fset, filepath.Join(dir, n), nil, parser.ParseComments)
		if err != nil {
			continue // a file for another toolchain stage; its package still documents
		}
		byName[f.Name.Name] = append(byName[f.Name.Name], f)
	}
	name := ""
	for _, n := range sortedKeys(byName) { // a tie is broken by name, not by map order
		fs := byName[n]
		if n == "main" || n == "documentation" {
			continue
		}
		if name == "" || len(fs) > len(byName[name]) {
			name = n
		}
	}
	if name == "" {
		return nil, nil
	}
	dp, err := doc.NewFromFiles(fset, byName[name], importPath)
	if err != nil {
		return nil, err
	}
	if strings.TrimSpace(dp.Doc) == "" {
		return nil, nil
	}
	p := &pkgDoc{Import: importPath, Short: dp.Name, Synopsis: dp.Synopsis(dp.Doc), Doc: dp.Doc, Funcs: map[string]string{}}
	var md bytes.Buffer
	fmt.Fprintf(&md, "# Package %s\n\n`import \"%s\"`\n\n", dp.Name, importPath)
	md.Write(dp.Markdown(dp.Doc))
	p.addSentences("", dp.Doc)
	decl := func(n ast.Node) string {
		var b bytes.Buffer
		_ = printer.Fprint(&b, fset, n)
		return b.String()
	}
	fn := func(f *doc.Func, level string) {
		if !token.IsExported(f.Name) {
			return
		}
		f.Decl.Body = nil
		fmt.Fprintf(&md, "\n%s func %s\n\n```go\n%s\n```\n\n", level, f.Name, decl(f.Decl))
		md.Write(dp.Markdown(f.Doc))
		p.addSentences(f.Name, f.Doc)
		if level == "##" {
			p.Funcs[f.Name] = firstSentence(f.Doc)
		}
	}
	for _, f := range dp.Funcs {
		fn(f, "##")
	}
	for _, t := range dp.Types {
		fmt.Fprintf(&md, "\n## type %s\n\n", t.Name)
		md.Write(dp.Markdown(t.Doc))
		p.addSentences(t.Name, t.Doc)
		for _, f := range t.Funcs {
			fn(f, "##")
		}
		for _, f := range t.Methods {
			fn(f, "###")
		}
	}
	p.Markdown = md.String()
	// The loader skips files over 1 MiB; keep the largest packages under it.
	if len(p.Markdown) > 900<<10 {
		p.Markdown = p.Markdown[:900<<10]
		for !utf8Boundary(p.Markdown) {
			p.Markdown = p.Markdown[:len(p.Markdown)-1]
		}
	}
	return p, nil
}

// platforms are the builds a package is documented for, the first that has any of its
// files (pkg.go.dev shows linux/amd64 first, too).
var platforms = [][2]string{{"linux", "amd64"}, {"js", "wasm"}, {"wasip1", "wasm"}, {"windows", "amd64"}, {"darwin", "arm64"}}

// onePlatform keeps the files of one build of a package. A package can define a
// function once per platform (os.Pipe in pipe_unix.go, pipe_windows.go, ...), and
// go/doc, given them all, keeps whichever it reads first, in map order: the text and
// every question drawn after it changed from run to run. One build defines each once.
func onePlatform(dir string, names []string) []string {
	for _, pl := range platforms {
		ctx := build.Default
		ctx.GOOS, ctx.GOARCH, ctx.CgoEnabled = pl[0], pl[1], true
		var kept []string
		for _, n := range names {
			if ok, err := ctx.MatchFile(dir, n); err == nil && ok {
				kept = append(kept, n)
			}
		}
		if len(kept) > 0 {
			return kept
		}
	}
	return names
}

func utf8Boundary(s string) bool {
	return len(s) == 0 || s[len(s)-1] < 0x80
}

var sentenceEnd = regexp.MustCompile(`[.!?]\s+`)

func splitSentences(docText string) []string {
	// Code blocks and lists are not sentences.
	var prose []string
	for _, para := range strings.Split(docText, "\n\n") {
		if strings.HasPrefix(para, "\t") || strings.HasPrefix(para, "  ") || strings.HasPrefix(strings.TrimSpace(para), "-") {
			continue
		}
		prose = append(prose, strings.Join(strings.Fields(para), " "))
	}
	var out []string
	for _, para := range prose {
		for _, s := range sentenceEnd.Split(para, -1) {
			s = strings.TrimRight(strings.TrimSpace(docLink.ReplaceAllString(s, "$1")), ".:")
			if s != "" {
				out = append(out, s)
			}
		}
	}
	return out
}

func firstSentence(docText string) string {
	if s := splitSentences(docText); len(s) > 0 {
		return s[0]
	}
	return ""
}

func (p *pkgDoc) addSentences(symbol, docText string) {
	for i, s := range splitSentences(docText) {
		if i == 3 {
			break
		}
		p.Sentences = append(p.Sentences, sentence{Symbol: symbol, Text: s})
	}
}

// words splits text into lower-case words of letters and digits.
func words(s string) []string {
	return strings.FieldsFunc(strings.ToLower(s), func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) })
}

// vocabulary counts in how many packages each word appears.
func vocabulary(pkgs []*pkgDoc) map[string]int {
	df := map[string]int{}
	for _, p := range pkgs {
		seen := map[string]bool{}
		for _, w := range words(p.Markdown) {
			if !seen[w] {
				seen[w] = true
				df[w]++
			}
		}
	}
	return df
}
