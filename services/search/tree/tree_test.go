package tree

import (
	"slices"
	"testing"
)

func TestNewBuildsTheSameIndexAsLoad(t *testing.T) {
	docs := []*Document{
		{Path: "ops/deploy.md", Title: "Deploy"},
		{Path: "auth/_index.md", Title: "Auth", Summary: true},
		{Path: "auth/jwt/rotation.md", Title: "Rotation"},
		{Path: "ops/deploy.md", Title: "Duplicate"},
	}
	tr := New("mem", docs)
	if got := docPaths(tr); !slices.Equal(got, []string{"auth/_index.md", "auth/jwt/rotation.md", "ops/deploy.md"}) {
		t.Errorf("Docs = %v, want sorted and without the duplicate", got)
	}
	if d, _ := tr.Doc("ops/deploy.md"); d == nil || d.Title != "Deploy" {
		t.Errorf("the first document of a duplicated path must win, got %+v", d)
	}
	if got := tr.Domains(); !slices.Equal(got, []string{"auth", "ops"}) {
		t.Errorf("Domains() = %v", got)
	}
	entries, err := tr.List("auth")
	if err != nil {
		t.Fatal(err)
	}
	want := []Entry{{Path: "auth/jwt", Folder: true}, {Path: "auth/_index.md", Title: "Auth"}}
	if !slices.Equal(entries, want) {
		t.Errorf("List(auth) = %v, want %v", entries, want)
	}
	if docs[0].Title != "Deploy" || len(docs) != 4 {
		t.Error("New modified its argument")
	}
}

func TestEmptyTree(t *testing.T) {
	tr := New("empty", nil)
	if tr.Len() != 0 || len(tr.Domains()) != 0 {
		t.Errorf("empty tree has %d docs, domains %v", tr.Len(), tr.Domains())
	}
	entries, err := tr.List("")
	if err != nil || len(entries) != 0 {
		t.Errorf("List(root) = %v, %v; want no entries and no error", entries, err)
	}
}

func TestFolderMatchesAsWrittenThenIgnoringCase(t *testing.T) {
	tr := New("mem", []*Document{
		{Path: "auth/jwt/rotation.md"},
		{Path: "auth/JWT/legacy.md"}, // a folder spelled "JWT" beside "jwt" matches itself
		{Path: "ops/Runbooks/db.md"},
		{Path: "ops/deploy.md"},
	})
	tests := []struct {
		in, want string
		ok       bool
	}{
		{"", "", true},
		{"auth/jwt", "auth/jwt", true},
		{"auth/JWT", "auth/JWT", true},
		{"Auth/Jwt", "auth/JWT", true}, // no exact match: the first in sorted order
		{"OPS/runbooks", "ops/Runbooks", true},
		{"ops", "ops", true},
		{"ops/deploy.md", "", false}, // a document, not a folder
		{"ops/runbooks/db", "", false},
		{"billing", "", false},
	}
	for _, tt := range tests {
		got, ok := tr.Folder(tt.in)
		if got != tt.want || ok != tt.ok {
			t.Errorf("Folder(%q) = %q, %v; want %q, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}
