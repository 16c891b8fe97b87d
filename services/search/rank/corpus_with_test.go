package rank

import (
	"testing"

	"github.com/quarry-router/quarry/services/search/tree"
)

// A corpus updated with With equals one built from scratch over the new documents.
func TestCorpusWithEqualsARebuild(t *testing.T) {
	docs := []*tree.Document{
		{Path: "a.md", Title: "Rotation", Content: "Rotate the signing key."},
		{Path: "b.md", Title: "Tokens", Content: "Refresh tokens rotate."},
		{Path: "c.md", Title: "Backups", Content: "Nightly backups."},
	}
	base := NewCorpus(docs)
	changed := &tree.Document{Path: "b.md", Title: "Tokens", Content: "Access tokens expire."}
	added := &tree.Document{Path: "d.md", Title: "Kafka", Content: "Consumer lag."}
	got := base.With([]*tree.Document{changed, added}, []string{"c.md"})
	want := NewCorpus([]*tree.Document{docs[0], changed, added})
	if got.N() != want.N() {
		t.Fatalf("N = %d, want %d", got.N(), want.N())
	}
	for _, stem := range []string{"rotat", "token", "backup", "nightli", "kafka", "consum", "expir", "refresh"} {
		if got.DF(stem) != want.DF(stem) {
			t.Errorf("DF(%s) = %d, want %d", stem, got.DF(stem), want.DF(stem))
		}
		for _, p := range []string{"a.md", "b.md", "c.md", "d.md"} {
			if got.Contains(p, stem) != want.Contains(p, stem) {
				t.Errorf("Contains(%s, %s) = %v, want %v", p, stem, got.Contains(p, stem), want.Contains(p, stem))
			}
		}
	}
	if base.N() != 3 || base.DF("backup") != 1 || base.Contains("b.md", "expir") {
		t.Error("With changed the corpus it was called on")
	}
}
