package tree

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite golden files in testdata/")

func loadKB(t *testing.T) *Tree {
	t.Helper()
	tr, err := Load(context.Background(), "testdata/kb", DefaultConfig(), nil)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	return tr
}

// goldenDoc is the stable, comparable view of a Document.
type goldenDoc struct {
	Path       string         `json:"path"`
	Title      string         `json:"title"`
	Tags       []string       `json:"tags,omitempty"`
	Related    []string       `json:"related,omitempty"`
	Importance float64        `json:"importance"`
	Maturity   string         `json:"maturity"`
	Updated    string         `json:"updated"`
	Summary    bool           `json:"summary,omitempty"`
	Archived   bool           `json:"archived,omitempty"`
	Extra      map[string]any `json:"extra,omitempty"`
	Content    string         `json:"content"`
}

func TestLoadMatchesGolden(t *testing.T) {
	tr := loadKB(t)
	var got struct {
		Docs    []goldenDoc `json:"docs"`
		Skipped []Skip      `json:"skipped"`
		Domains []string    `json:"domains"`
	}
	for _, d := range tr.Docs {
		fi, err := os.Stat(filepath.Join("testdata/kb", d.Path))
		if err != nil {
			t.Fatal(err)
		}
		updated := d.Updated.UTC().Format(time.RFC3339)
		if d.Updated.Equal(fi.ModTime()) {
			updated = "mtime" // checkout time varies; what matters is the fallback was used
		}
		got.Docs = append(got.Docs, goldenDoc{
			Path: d.Path, Title: d.Title, Tags: d.Tags, Related: d.Related,
			Importance: d.Importance, Maturity: d.Maturity.String(), Updated: updated,
			Summary: d.Summary, Archived: d.Archived, Extra: d.Extra, Content: d.Content,
		})
	}
	got.Skipped = tr.Skipped
	got.Domains = tr.Domains()
	b, err := json.MarshalIndent(got, "", "  ")
	if err != nil {
		t.Fatalf("Extra must survive JSON: %v", err)
	}
	b = append(b, '\n')
	golden := "testdata/kb.golden.json"
	if *update {
		if err := os.WriteFile(golden, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(b, want) {
		t.Errorf("loaded tree differs from %s (run go test -update after checking the change):\n%s", golden, b)
	}
}

func TestLoadFollowsFrontMatterRules(t *testing.T) {
	tr := loadKB(t)
	tests := []struct {
		rule  string
		path  string
		check func(d *Document) string
	}{
		{"front matter title wins over the first heading", "auth/jwt/rotation.md", func(d *Document) string {
			return eq(d.Title, "JWT signing key rotation")
		}},
		{"first # heading is the title when front matter has none", "auth/_index.md", func(d *Document) string {
			return eq(d.Title, "Authentication")
		}},
		{"a # line inside a code fence is not a heading, and closing #s are dropped", "ops/deploy.md", func(d *Document) string {
			return eq(d.Title, "Deploying services")
		}},
		{"_index.md without title or heading is named after its folder", "auth/jwt/_index.md", func(d *Document) string {
			return eq(d.Title, "jwt")
		}},
		{"root _index.md front matter title", "_index.md", func(d *Document) string {
			return eq(d.Title, "Platform knowledge")
		}},
		{"stub without title is named after its file without .stub.md", "auth/_archived/legacy-sessions.stub.md", func(d *Document) string {
			return eq(d.Title, "legacy-sessions")
		}},
		{"_index.md is a folder summary", "auth/jwt/_index.md", func(d *Document) string {
			return eq(fmt.Sprint(d.Summary, d.Archived), "true false")
		}},
		{"_archived/<name>.stub.md is an archived stub", "auth/_archived/legacy-sessions.stub.md", func(d *Document) string {
			return eq(fmt.Sprint(d.Summary, d.Archived), "false true")
		}},
		{"a root _archived folder holds stubs too", "_archived/old-runbook.stub.md", func(d *Document) string {
			return eq(fmt.Sprintf("%v %v", d.Archived, d.Title), "true Old runbook (archived)")
		}},
		{"tags list is deduplicated in order", "auth/jwt/rotation.md", func(d *Document) string {
			return eq(strings.Join(d.Tags, ","), "jwt,keys,rotation")
		}},
		{"tags as a comma string are split, trimmed and deduplicated", "auth/oauth/flow.md", func(d *Document) string {
			return eq(strings.Join(d.Tags, ","), "oauth,flows")
		}},
		{"related paths are cleaned and those escaping the tree dropped", "auth/jwt/rotation.md", func(d *Document) string {
			return eq(strings.Join(d.Related, ","), "auth/oauth/flow.md")
		}},
		{"importance and maturity come from front matter", "auth/jwt/rotation.md", func(d *Document) string {
			return eq(fmt.Sprint(d.Importance, d.Maturity), "80 core")
		}},
		{"maturity is case-insensitive and importance may be fractional", "auth/oauth/flow.md", func(d *Document) string {
			return eq(fmt.Sprint(d.Importance, d.Maturity), "42.5 validated")
		}},
		{"importance defaults to 50 and maturity to draft", "ops/deploy.md", func(d *Document) string {
			return eq(fmt.Sprint(d.Importance, d.Maturity), "50 draft")
		}},
		{"updated accepts RFC 3339", "auth/jwt/rotation.md", func(d *Document) string {
			return eq(d.Updated.UTC().Format(time.RFC3339), "2024-05-01T10:00:00Z")
		}},
		{"updated accepts YYYY-MM-DD", "auth/oauth/flow.md", func(d *Document) string {
			return eq(d.Updated.UTC().Format(time.RFC3339), "2024-03-05T00:00:00Z")
		}},
		{"updated falls back to the modification time", "ops/deploy.md", func(d *Document) string {
			fi, err := os.Stat("testdata/kb/ops/deploy.md")
			if err != nil {
				return err.Error()
			}
			return eq(d.Updated.String(), fi.ModTime().String())
		}},
		{"unknown keys are kept in Extra, dates as written", "auth/jwt/rotation.md", func(d *Document) string {
			b, _ := json.Marshal(d.Extra)
			return eq(string(b), `{"owner":"team-auth","review":{"by":["alice","bob"],"every":90,"since":"2023-01-01"}}`)
		}},
		{"content excludes the front matter", "auth/jwt/rotation.md", func(d *Document) string {
			if strings.Contains(d.Content, "importance:") || !strings.HasPrefix(d.Content, "# Rotating signing keys") {
				return fmt.Sprintf("content = %q", d.Content)
			}
			return ""
		}},
	}
	for _, tt := range tests {
		t.Run(tt.rule, func(t *testing.T) {
			d, ok := tr.ByPath[tt.path]
			if !ok {
				t.Fatalf("%s not loaded", tt.path)
			}
			if msg := tt.check(d); msg != "" {
				t.Error(msg)
			}
		})
	}
}

func eq(got, want string) string {
	if got != want {
		return fmt.Sprintf("got %q, want %q", got, want)
	}
	return ""
}

func TestLoadIgnoresHiddenAndNonMarkdown(t *testing.T) {
	tr := loadKB(t)
	for _, p := range []string{".obsidian/workspace.md", "ops/.draft.md", "ops/notes.txt"} {
		if _, ok := tr.ByPath[p]; ok {
			t.Errorf("%s was loaded", p)
		}
		for _, s := range tr.Skipped {
			if s.Path == p {
				t.Errorf("%s is reported skipped; ignored entries are not failures", p)
			}
		}
	}
	want := []Skip{{Path: "auth/_archived/legacy-sessions.md", Reason: "archived original: only .stub.md ghost cues are loaded from _archived"}}
	if !slices.Equal(tr.Skipped, want) {
		t.Errorf("Skipped = %v, want %v", tr.Skipped, want)
	}
}

// hostileTree copies testdata/hostile into a temporary folder and adds what git cannot
// hold portably: symbolic links out of and inside the tree.
func hostileTree(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "kb")
	if err := os.CopyFS(dir, os.DirFS("testdata/hostile")); err != nil {
		t.Fatal(err)
	}
	outside := t.TempDir()
	secret := filepath.Join(outside, "secret.md")
	if err := os.WriteFile(secret, []byte("# Secret\n\nmust never be read\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	links := map[string]string{
		"passwd.md":        "/etc/passwd",
		"secret.md":        secret,
		"etc":              "/etc",
		"outside":          outside,
		"inner-link.md":    "ok.md",
		"dangling.md":      "does-not-exist.md",
		"relative-out.md":  "../../outside/secret.md",
		"linked-folder.md": ".",
	}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
			t.Skipf("symlinks unavailable: %v", err)
		}
	}
	return dir
}

func hostileConfig() Config {
	cfg := DefaultConfig()
	cfg.MaxFileBytes = 4096
	cfg.MaxFrontMatterBytes = 1024
	return cfg
}

func TestLoadSkipsHostileFilesWithAReason(t *testing.T) {
	dir := hostileTree(t)
	var logs bytes.Buffer
	tr, err := Load(context.Background(), dir, hostileConfig(), slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	for _, s := range tr.Skipped {
		if !strings.Contains(logs.String(), fmt.Sprintf("path=%s reason=", s.Path)) {
			t.Errorf("skip of %s was not logged with its reason", s.Path)
		}
	}
	if got := docPaths(tr); !slices.Equal(got, []string{"ok.md"}) {
		t.Errorf("loaded %v, want only ok.md", got)
	}
	wantReasons := map[string]string{
		"alias-bomb.md":       "anchors and aliases",
		"anchor.md":           "anchors and aliases",
		"bad-yaml.md":         "front matter",
		"big-front-matter.md": "1024-byte limit",
		"binary.md":           "NUL bytes",
		"dangling.md":         "symbolic link",
		"deep.md":             "nested deeper",
		"duplicate-key.md":    "duplicate key",
		"etc":                 "symbolic link",
		"importance-nan.md":   "importance",
		"importance-range.md": "importance \"150\" is not a number from 0 to 100",
		"importance-text.md":  "importance \"high\"",
		"inner-link.md":       "symbolic link",
		"latin1.md":           "not valid UTF-8",
		"linked-folder.md":    "symbolic link",
		"maturity.md":         "maturity \"gold\" is not draft, validated or core",
		"not-mapping.md":      "not a mapping",
		"nul.md":              "NUL bytes",
		"outside":             "symbolic link",
		"passwd.md":           "symbolic link",
		"relative-out.md":     "symbolic link",
		"secret.md":           "symbolic link",
		"tags-map.md":         "tags must be a list",
		"title-list.md":       "title must be a string",
		"too-large.md":        "4096-byte limit",
		"unterminated.md":     "no closing line",
	}
	seen := map[string]bool{}
	for _, s := range tr.Skipped {
		seen[s.Path] = true
		want, ok := wantReasons[s.Path]
		if !ok {
			t.Errorf("unexpected skip %s: %s", s.Path, s.Reason)
			continue
		}
		if !strings.Contains(s.Reason, want) {
			t.Errorf("skip %s: reason %q does not mention %q", s.Path, s.Reason, want)
		}
	}
	for p := range wantReasons {
		if !seen[p] {
			t.Errorf("%s was not reported skipped", p)
		}
	}
	for _, d := range tr.Docs {
		if strings.Contains(d.Content, "root:") || strings.Contains(d.Content, "must never be read") {
			t.Errorf("%s holds content from outside the tree", d.Path)
		}
	}
}

func docPaths(tr *Tree) []string {
	var out []string
	for _, d := range tr.Docs {
		out = append(out, d.Path)
	}
	return out
}

func TestLoadLimits(t *testing.T) {
	deep := t.TempDir()
	p := deep
	for i := range 5 {
		p = filepath.Join(p, fmt.Sprintf("d%d", i))
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(p, "f.md"), []byte("# f\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name      string
		root      string
		cfg       func(*Config)
		wantErr   error
		wantDocs  int
		wantSkips []Skip
	}{
		{
			name: "folders deeper than MaxDepth are skipped and recorded",
			root: deep, cfg: func(c *Config) { c.MaxDepth = 3 },
			wantDocs:  3,
			wantSkips: []Skip{{Path: "d0/d1/d2/d3", Reason: "folder deeper than 3 levels"}},
		},
		{
			name: "a tree at MaxDepth loads whole",
			root: deep, cfg: func(c *Config) { c.MaxDepth = 5 },
			wantDocs: 5,
		},
		{
			name: "more markdown files than MaxFiles fails the load",
			root: deep, cfg: func(c *Config) { c.MaxFiles = 4 },
			wantErr: ErrTooManyFiles,
		},
		{
			name: "exactly MaxFiles markdown files load",
			root: deep, cfg: func(c *Config) { c.MaxFiles = 5 },
			wantDocs: 5,
		},
		{
			name: "an invalid config is refused",
			root: deep, cfg: func(c *Config) { c.MaxFileBytes = 0 },
			wantErr: errAny,
		},
		{
			name: "the zero config means the defaults",
			root: deep, cfg: func(c *Config) { *c = Config{} },
			wantDocs: 5,
		},
		{
			name: "a missing root is an error",
			root: filepath.Join(deep, "missing"), cfg: func(*Config) {},
			wantErr: os.ErrNotExist,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultConfig()
			tt.cfg(&cfg)
			tr, err := Load(context.Background(), tt.root, cfg, nil)
			if tt.wantErr != nil {
				if err == nil || (tt.wantErr != errAny && !errors.Is(err, tt.wantErr)) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if tr.Len() != tt.wantDocs {
				t.Errorf("loaded %d docs (%v), want %d", tr.Len(), docPaths(tr), tt.wantDocs)
			}
			if !slices.Equal(tr.Skipped, tt.wantSkips) {
				t.Errorf("Skipped = %v, want %v", tr.Skipped, tt.wantSkips)
			}
		})
	}
}

// errAny marks a table row that expects some error, not a particular one.
var errAny = errors.New("any error")

func TestLoadStopsWhenContextEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := Load(ctx, "testdata/kb", DefaultConfig(), nil)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}

func TestTreeDoc(t *testing.T) {
	tr := loadKB(t)
	tests := []struct {
		name    string
		path    string
		want    string
		wantErr error
	}{
		{"a clean path finds its document", "auth/jwt/rotation.md", "auth/jwt/rotation.md", nil},
		{"a ./ prefix is trimmed", "./auth/jwt/rotation.md", "auth/jwt/rotation.md", nil},
		{"an unknown path is not found", "auth/nope.md", "", ErrNotFound},
		{"the root is not a document", "", "", ErrNotFound},
		{"a folder is not a document", "auth", "", ErrNotFound},
		{"a skipped file is not found", "auth/_archived/legacy-sessions.md", "", ErrNotFound},
		{"a hidden file is not found", "ops/.draft.md", "", ErrNotFound},
		{"climbing out is refused", "../tree/load.go", "", ErrOutsideTree},
		{"climbing back in is refused too", "auth/../auth/jwt/rotation.md", "", ErrOutsideTree},
		{"an absolute path is refused", "/etc/passwd", "", ErrOutsideTree},
		{"a backslash is refused", `auth\jwt\rotation.md`, "", ErrInvalidPath},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := tr.Doc(tt.path)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if err == nil && d.Path != tt.want {
				t.Errorf("Doc(%q).Path = %q, want %q", tt.path, d.Path, tt.want)
			}
		})
	}
}

func TestTreeList(t *testing.T) {
	tr := loadKB(t)
	tests := []struct {
		name    string
		folder  string
		want    []Entry
		wantErr error
	}{
		{
			name: "the root lists folders first, then files", folder: "",
			want: []Entry{
				{Path: "_archived", Folder: true},
				{Path: "auth", Folder: true, Title: "Authentication", HasSummary: true},
				{Path: "ops", Folder: true},
				{Path: "_index.md", Title: "Platform knowledge"},
			},
		},
		{
			name: "a folder lists sub-folders with their summaries, then its files", folder: "auth/",
			want: []Entry{
				{Path: "auth/_archived", Folder: true},
				{Path: "auth/jwt", Folder: true, Title: "jwt", HasSummary: true},
				{Path: "auth/oauth", Folder: true},
				{Path: "auth/_index.md", Title: "Authentication"},
			},
		},
		{
			name: "archived stubs are flagged", folder: "auth/_archived",
			want: []Entry{{Path: "auth/_archived/legacy-sessions.stub.md", Title: "legacy-sessions", Archived: true}},
		},
		{name: "a document is not a folder", folder: "auth/jwt/rotation.md", wantErr: ErrNotFound},
		{name: "an unknown folder is not found", folder: "billing", wantErr: ErrNotFound},
		{name: "a hidden folder is not listed", folder: ".obsidian", wantErr: ErrNotFound},
		{name: "climbing out is refused", folder: "..", wantErr: ErrOutsideTree},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tr.List(tt.folder)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("List(%q) =\n%v\nwant\n%v", tt.folder, got, tt.want)
			}
		})
	}
}

func TestTreeSummaryAndDomains(t *testing.T) {
	tr := loadKB(t)
	tests := []struct {
		folder string
		want   string
	}{
		{"", "_index.md"},
		{"auth", "auth/_index.md"},
		{"auth/jwt/", "auth/jwt/_index.md"},
		{"ops", ""},
		{"missing", ""},
		{"../auth", ""},
	}
	for _, tt := range tests {
		d, ok := tr.Summary(tt.folder)
		got := ""
		if ok {
			got = d.Path
		}
		if got != tt.want {
			t.Errorf("Summary(%q) = %q, want %q", tt.folder, got, tt.want)
		}
	}
	if got := tr.Domains(); !slices.Equal(got, []string{"auth", "ops"}) {
		t.Errorf("Domains() = %v, want [auth ops]: folders starting with _ are not domains", got)
	}
	if tr.Len() != len(tr.Docs) || tr.Len() != 8 {
		t.Errorf("Len() = %d, want 8", tr.Len())
	}
	if !slices.IsSortedFunc(tr.Docs, func(a, b *Document) int { return strings.Compare(a.Path, b.Path) }) {
		t.Error("Docs are not sorted by path")
	}
}
