package meili_test

import (
	"context"
	"testing"

	"github.com/meilisearch/meilisearch-go"

	"github.com/quarry-router/quarry/services/search/engine/enginetest"
	"github.com/quarry-router/quarry/services/search/engine/meili/meilitest"
)

// The index of a knowledge base is Quarry's, but a person at the Meilisearch dashboard,
// another tool or another release may have set what Quarry never sets: a distinct
// attribute (one hit per domain: the other documents of a domain were never found) or
// synonyms (words matched that the embedded engine does not match). Open left them, and
// the service answered from an index set up otherwise than it says.
func TestOpenResetsSettingsQuarryDoesNotUse(t *testing.T) {
	srv := meilitest.New(t, key)
	docs := enginetest.Docs()
	ix := open(t, srv.URL, key, "kb", docs)
	_ = ix.Close()

	c := meilisearch.New(srv.URL, meilisearch.WithAPIKey(key))
	defer c.Close()
	domain := "domain"
	info, err := c.Index("quarry_kb").UpdateSettings(&meilisearch.Settings{
		DistinctAttribute: &domain,
		Synonyms:          map[string][]string{"rotat": {"revok"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitForTaskWithContext(context.Background(), info.TaskUID, 0); err != nil {
		t.Fatal(err)
	}
	if st := srv.Settings("quarry_kb"); st["distinctAttribute"] != domain {
		t.Fatalf("the scripted server did not keep the distinct attribute: %v", st)
	}

	ix = open(t, srv.URL, key, "kb", docs)
	_ = ix.Close()
	st := srv.Settings("quarry_kb")
	if st["distinctAttribute"] != nil {
		t.Errorf("distinct attribute after a start = %v, want none", st["distinctAttribute"])
	}
	if syn, _ := st["synonyms"].(map[string]any); len(syn) != 0 {
		t.Errorf("synonyms after a start = %v, want none", syn)
	}

	// Once reset, a restart sends nothing more.
	before := len(srv.Requests())
	ix = open(t, srv.URL, key, "kb", docs)
	_ = ix.Close()
	for _, r := range srv.Requests()[before:] {
		if r.Method != "GET" && r.Method != "POST" {
			t.Errorf("a restart over reset settings sent %s %s", r.Method, r.Path)
		}
	}
}
