package meili_test

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/meilisearch/meilisearch-go"
	"github.com/quarry-router/quarry/services/search/engine"
	"github.com/quarry-router/quarry/services/search/engine/enginetest"
	"github.com/quarry-router/quarry/services/search/engine/meili"
	"github.com/quarry-router/quarry/services/search/engine/meili/meilitest"
)

// TestAScopeFindsItsOwnFolderOnly: the scope filter compared folder names the way
// Meilisearch compares filter strings, not the way the embedded engine does (one exact
// term). Meilisearch's `=` on strings is case-insensitive (and NFKD-normalised, trimmed),
// so a search scoped to "Guides" also returned the documents of "guides"; and it stores a
// filterable value cut at 468 bytes while the filter's value is not cut, so a scope on a
// folder whose path is longer than that found nothing.
func TestAScopeFindsItsOwnFolderOnly(t *testing.T) {
	long := strings.TrimSuffix(strings.Repeat("a-rather-long-folder-name/", 20), "/") // 519 bytes
	docs := append(enginetest.Docs(),
		engine.Doc{Path: "Guides/Setup/install.md", Folder: "Guides/Setup", Title: "Install", Content: "zeppelin install"},
		engine.Doc{Path: "guides/setup/other.md", Folder: "guides/setup", Title: "Other", Content: "zeppelin other"},
		engine.Doc{Path: "ﬁles/ligature.md", Folder: "ﬁles", Title: "Ligature", Content: "zeppelin ligature"},
		engine.Doc{Path: "files/plain.md", Folder: "files", Title: "Plain", Content: "zeppelin plain"},
		engine.Doc{Path: long + "/deep.md", Folder: long, Title: "Deep", Content: "zeppelin deep"},
	)
	run := func(t *testing.T, ix *meili.Index) {
		for _, tt := range []struct{ scope, want string }{
			{"Guides", "Guides/Setup/install.md"},
			{"guides/setup", "guides/setup/other.md"},
			{"ﬁles", "ﬁles/ligature.md"},
			{"files", "files/plain.md"},
			{long, long + "/deep.md"},
			{strings.Split(long, "/")[0], long + "/deep.md"},
		} {
			hits, err := ix.Search(context.Background(), engine.Query{Terms: []string{"zeppelin"}, Scope: tt.scope, Limit: 10})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, h := range hits {
				got = append(got, h.Path)
			}
			if !slices.Equal(got, []string{tt.want}) {
				t.Errorf("scope %.40q found %.60q, want only %.60q", tt.scope, got, tt.want)
			}
		}
	}
	t.Run("scripted server", func(t *testing.T) {
		srv := meilitest.New(t, key)
		ix := open(t, srv.URL, key, "kb", docs)
		defer ix.Close()
		run(t, ix)
	})
	t.Run("real server", func(t *testing.T) {
		url := os.Getenv("MEILI_URL")
		if url == "" {
			t.Skip("MEILI_URL not set (see README: Meilisearch)")
		}
		ix := openReal(t, url, os.Getenv("MEILI_MASTER_KEY"), docs)
		defer ix.Close()
		run(t, ix)
	})
}

// During a rolling upgrade the previous release's search replicas share the index this
// one set up, and scope their searches on folders by name: Meilisearch must still accept
// that filter.
func TestThePreviousReleasesScopeFilterStillWorks(t *testing.T) {
	srv := meilitest.New(t, key)
	ix := open(t, srv.URL, key, "kb", enginetest.Docs())
	defer ix.Close()
	c := meilisearch.New(srv.URL, meilisearch.WithAPIKey(key))
	defer c.Close()
	res, err := c.Index("quarry_kb").Search("", &meilisearch.SearchRequest{Filter: `folders = "auth/jwt"`, Limit: 10})
	if err != nil {
		t.Fatalf("a search scoped as the previous release scopes it: %v", err)
	}
	if len(res.Hits) == 0 {
		t.Error("a search scoped to auth/jwt by folder name found nothing")
	}
}
