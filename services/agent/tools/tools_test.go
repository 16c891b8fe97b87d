package tools

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	quarryv1 "github.com/quarry-router/quarry/gen/quarry/v1"
)

// memKB is an in-memory knowledge base that records every call it gets.
type memKB struct {
	mu    sync.Mutex
	docs  map[string]*quarryv1.Document
	calls []string
}

func newMemKB() *memKB {
	return &memKB{docs: map[string]*quarryv1.Document{
		"auth/jwt/rotation.md": {Path: "auth/jwt/rotation.md", Title: "Key rotation", Content: "Rotate the signing key every 90 days.",
			Related: []string{"auth/jwt/validation.md", "auth/gone.md"}},
		"auth/jwt/validation.md": {Path: "auth/jwt/validation.md", Title: "Token validation", Content: "Check exp, iss and aud.\n\nThen the signature."},
		"auth/links.md": {Path: "auth/links.md", Title: "Links", Content: "See these.",
			Related: []string{"auth/refused.md", "auth/jwt/validation.md"}},
	}}
}

func (m *memKB) record(c string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.calls = append(m.calls, c)
}

func (m *memKB) Search(_ context.Context, kb, query, scope string, limit int) ([]*quarryv1.Source, error) {
	m.record(fmt.Sprintf("search %s %q %q %d", kb, query, scope, limit))
	return []*quarryv1.Source{{Path: "auth/jwt/rotation.md", Title: "Key rotation", Relevance: 0.81, Excerpt: "Rotate the\nsigning key"}}, nil
}

func (m *memKB) ReadDocument(_ context.Context, kb, path string) (*quarryv1.Document, error) {
	m.record("read " + path)
	if d, ok := m.docs[path]; ok {
		return d, nil
	}
	if path == "auth/refused.md" {
		// A related path the search service refuses (its own path rules are the last word).
		return nil, fmt.Errorf("read %q: %w", path, ErrOutsideKB)
	}
	return nil, fmt.Errorf("read %q: %w", path, ErrNotFound)
}

func (m *memKB) ListFolder(_ context.Context, kb, path string, limit int) ([]*quarryv1.FolderEntry, int, error) {
	m.record("list " + path)
	var entries []*quarryv1.FolderEntry
	switch path {
	case "down":
		return nil, 0, errors.New("rpc error: code = Unavailable desc = dial tcp 10.1.2.3:7701: connection refused")
	case "flat":
		for i := range 1000 {
			entries = append(entries, &quarryv1.FolderEntry{Path: fmt.Sprintf("flat/doc-%04d.md", i), Title: fmt.Sprintf("Doc %d", i)})
		}
	default:
		entries = []*quarryv1.FolderEntry{{Path: "auth/jwt", Folder: true, Title: "JWT"}, {Path: "auth/x.md", Title: "X"}}
	}
	total := len(entries)
	if limit > 0 && limit < total {
		entries = entries[:limit]
	}
	return entries, total, nil
}

func (m *memKB) Manifest(context.Context, string) (*quarryv1.GetManifestResponse, error) {
	return &quarryv1.GetManifestResponse{}, nil
}

func TestCleanPathKeepsModelsInsideTheKnowledgeBase(t *testing.T) {
	tests := []struct {
		name, in, want string
		outside        bool
	}{
		{"a relative path is kept", "auth/jwt/rotation.md", "auth/jwt/rotation.md", false},
		{"a ./ prefix and trailing slash are dropped", "./auth/jwt/", "auth/jwt", false},
		{"the root is empty", "", "", false},
		{"parent directory is refused", "../../etc/passwd", "", true},
		{"dot-dot inside is refused even when it stays inside", "auth/../auth/x.md", "", true},
		{"an absolute path is refused", "/etc/passwd", "", true},
		{"a drive path is refused", "C:/Windows/win.ini", "", true},
		{"a backslash is refused", `auth\..\..\secret`, "", true},
		{"NUL is refused", "auth/x.md\x00.png", "", true},
		{"invalid UTF-8 is refused", "auth/\xff.md", "", true},
		{"an overlong path is refused", strings.Repeat("a/", 600), "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := CleanPath(tt.in)
			if tt.outside {
				if !errors.Is(err, ErrOutsideKB) {
					t.Fatalf("CleanPath(%q) = %q, %v; want ErrOutsideKB", tt.in, got, err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("CleanPath(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
			}
		})
	}
}

func TestArgumentsAreCheckedAgainstTheSchema(t *testing.T) {
	s := New(DefaultConfig(), newMemKB())
	tests := []struct {
		name, tool, args string
		wantErr          string // "" for success
	}{
		{"valid arguments pass", Search, `{"query":"rotation","limit":3}`, ""},
		{"an integer written as a string passes", Search, `{"query":"rotation","limit":"3"}`, ""},
		{"white space around the object passes", ReadDocument, " \n{\"path\": \"auth/jwt/rotation.md\"}\n", ""},
		{"empty arguments count as {} for a tool without required ones", ListFolder, ``, ""},
		{"garbage is not a JSON object", Search, `{"query": "rotation"`, "not a JSON object"},
		{"an array is not an object", Search, `["rotation"]`, "not a JSON object"},
		{"null is not an object", Search, `null`, "got null"},
		{"text after the object is refused", Search, `{"query":"a"} {"query":"b"}`, "text after"},
		{"a missing required property is named", ReadDocument, `{}`, `"path" is required`},
		{"an empty required string is refused", Search, `{"query":"  "}`, "must not be empty"},
		{"an unknown property is named", Search, `{"query":"x","depth":2}`, `unknown property "depth"`},
		{"a wrong type is named", Search, `{"query":42}`, `"query" must be a string`},
		{"a fraction is not an integer", Search, `{"query":"x","limit":2.5}`, `"limit" must be an integer`},
		{"an integer out of range is refused", Search, `{"query":"x","limit":500}`, "must be in [1,20]"},
		{"an unknown tool is refused", "delete_everything", `{}`, `no tool named "delete_everything"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := s.Call(context.Background(), "kb", tt.tool, tt.args, All)
			if tt.wantErr == "" {
				if res.Err != nil {
					t.Fatalf("Call: %v", res.Err)
				}
				return
			}
			if !errors.Is(res.Err, ErrInvalidArguments) || !strings.Contains(res.Text, tt.wantErr) || !strings.HasPrefix(res.Text, "error: ") {
				t.Fatalf("Call(%s, %s) = %q (%v), want an ErrInvalidArguments tool error mentioning %q", tt.tool, tt.args, res.Text, res.Err, tt.wantErr)
			}
		})
	}
}

func TestPathsOutsideTheKnowledgeBaseAreNeverRead(t *testing.T) {
	kb := newMemKB()
	s := New(DefaultConfig(), kb)
	for _, call := range []struct{ tool, args string }{
		{ReadDocument, `{"path":"../../etc/passwd"}`},
		{ReadDocument, `{"path":"/etc/passwd"}`},
		{ListFolder, `{"path":"../"}`},
		{Related, `{"path":"auth/../../x.md"}`},
		{Search, `{"query":"x","scope":"/etc"}`},
	} {
		res := s.Call(context.Background(), "kb", call.tool, call.args, All)
		if !errors.Is(res.Err, ErrOutsideKB) || !strings.Contains(res.Text, "outside the knowledge base") {
			t.Errorf("%s(%s) = %q (%v), want an outside-the-KB tool error", call.tool, call.args, res.Text, res.Err)
		}
	}
	if len(kb.calls) != 0 {
		t.Errorf("the knowledge base was asked %v; nothing should reach it", kb.calls)
	}
}

func TestToolsOnlyRunWhenOffered(t *testing.T) {
	kb := newMemKB()
	s := New(DefaultConfig(), kb)
	res := s.Call(context.Background(), "kb", Search, `{"query":"x"}`, []string{ReadDocument})
	if res.Err == nil || !strings.Contains(res.Text, "available: read_document") || len(kb.calls) != 0 {
		t.Fatalf("search while only read_document is offered: %q, calls %v", res.Text, kb.calls)
	}
}

func TestToolResults(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxDocumentChars = 500
	kb := newMemKB()
	kb.docs["big.md"] = &quarryv1.Document{Path: "big.md", Title: "Big", Content: strings.Repeat("é", 700)}
	s := New(cfg, kb)
	tests := []struct {
		name, tool, args string
		want             []string
		doc              string
	}{
		{"search lists paths, titles, relevance and a one-line passage", Search, `{"query":"rotation","scope":"auth/"}`,
			[]string{"1 result for \"rotation\" under `auth`", "`auth/jwt/rotation.md` — Key rotation (relevance 0.81)", "Rotate the signing key"}, ""},
		{"read_document returns the document and its related paths", ReadDocument, `{"path":"auth/jwt/rotation.md"}`,
			[]string{"path: auth/jwt/rotation.md", "title: Key rotation", "related: auth/jwt/validation.md, auth/gone.md", "every 90 days"}, "auth/jwt/rotation.md"},
		{"a long document is cut", ReadDocument, `{"path":"big.md"}`, []string{"[200 more characters cut]"}, "big.md"},
		{"a missing document says how to find one", ReadDocument, `{"path":"auth/nope.md"}`, []string{"error:", "not found", "Use search or list_folder"}, ""},
		{"list_folder lists folders and documents", ListFolder, `{"path":"auth"}`, []string{"`auth` holds 2 entries", "folder `auth/jwt/` — JWT", "`auth/x.md` — X"}, ""},
		{"a large folder lists its first entries and says how many more", ListFolder, `{"path":"flat"}`,
			[]string{"`flat` holds 1000 entries; the first 200 (folders first, then by name):", "`flat/doc-0199.md`", "… and 800 more: list a sub-folder, or search"}, ""},
		{"a search service failure is not passed on in detail", ListFolder, `{"path":"down"}`, []string{"error: the knowledge base could not be searched just now"}, ""},
		{"related follows the links and marks missing ones", Related, `{"path":"auth/jwt/rotation.md"}`,
			[]string{"names 2 related documents", "`auth/jwt/validation.md` — Token validation: Check exp, iss and aud. Then the signature.", "`auth/gone.md` — (missing"}, ""},
		{"related marks a link the search service refuses, and goes on", Related, `{"path":"auth/links.md"}`,
			[]string{"`auth/refused.md` — (not a document of the knowledge base)", "`auth/jwt/validation.md` — Token validation"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := s.Call(context.Background(), "kb", tt.tool, tt.args, All)
			for _, w := range tt.want {
				if !strings.Contains(res.Text, w) {
					t.Errorf("result lacks %q:\n%s", w, res.Text)
				}
			}
			if strings.Contains(res.Text, "10.1.2.3") {
				t.Errorf("result %q shows an internal address to the model", res.Text)
			}
			if got := res.Doc.GetPath(); got != tt.doc {
				t.Errorf("document read = %q, want %q", got, tt.doc)
			}
		})
	}
	if res := s.Call(context.Background(), "kb", ListFolder, `{"path":"flat"}`, All); strings.Contains(res.Text, "doc-0200") {
		t.Errorf("list_folder showed more than -tool-max-folder-entries (200) entries")
	}
	if !strings.Contains(strings.Join(kb.calls, "\n"), `search kb "rotation" "auth" 5`) {
		t.Errorf("search did not use the cleaned scope and the default limit: %v", kb.calls)
	}
}

func TestCanonicalArgumentsIgnoreSpellingDifferences(t *testing.T) {
	same := []string{`{"query":"rotation","limit":3}`, ` { "limit": 3, "query": "rotation" } `}
	if Canonical(same[0]) != Canonical(same[1]) {
		t.Errorf("%q and %q differ: %q vs %q", same[0], same[1], Canonical(same[0]), Canonical(same[1]))
	}
	if Canonical(`{"query":"a"}`) == Canonical(`{"query":"b"}`) {
		t.Error("different arguments have the same canonical form")
	}
	if got := Canonical(" not json "); got != "not json" {
		t.Errorf("Canonical of garbage = %q, want the trimmed text", got)
	}
	if got := Canonical(""); got != "{}" {
		t.Errorf("Canonical of nothing = %q, want {}", got)
	}
}

func TestSchemasDescribeTheChecks(t *testing.T) {
	specs := New(DefaultConfig(), newMemKB()).Specs(All...)
	if len(specs) != 4 {
		t.Fatalf("%d specs, want 4", len(specs))
	}
	search := specs[0].Parameters
	if search["type"] != "object" || search["additionalProperties"] != false {
		t.Errorf("search schema %v: want a closed object", search)
	}
	if req, _ := search["required"].([]string); len(req) != 1 || req[0] != "query" {
		t.Errorf("search required = %v, want [query]", search["required"])
	}
	limit := search["properties"].(map[string]any)["limit"].(map[string]any)
	if limit["type"] != "integer" || limit["maximum"] != 20 {
		t.Errorf("limit schema %v", limit)
	}
}

func TestConfigValidate(t *testing.T) {
	if d := DefaultConfig(); d.Validate() != nil {
		t.Errorf("defaults rejected: %v", d.Validate())
	}
	bad := func(f func(*Config)) Config { c := DefaultConfig(); f(&c); return c }
	for _, c := range []Config{
		bad(func(c *Config) { c.MaxDocumentChars = 10 }),
		bad(func(c *Config) { c.SearchLimit = 0 }),
		bad(func(c *Config) { c.MaxRelated = 0 }),
		bad(func(c *Config) { c.MaxFolderEntries = 0 }),
	} {
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "-tool-") {
			t.Errorf("%+v: err %v, want one naming the flag", c, err)
		}
	}
}
