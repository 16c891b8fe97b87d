package meili_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"

	"github.com/meilisearch/meilisearch-go"

	"github.com/quarry-router/quarry/services/search/engine"
	"github.com/quarry-router/quarry/services/search/engine/enginetest"
	"github.com/quarry-router/quarry/services/search/engine/meili"
	"github.com/quarry-router/quarry/services/search/engine/meili/meilitest"
)

// TestConformance runs the backend suite against the scripted server, and against a real
// Meilisearch when MEILI_URL (and MEILI_MASTER_KEY) are set.
func TestConformance(t *testing.T) {
	t.Run("scripted server", func(t *testing.T) {
		enginetest.Run(t, func(t *testing.T, docs []engine.Doc) engine.Backend {
			srv := meilitest.New(t, "test-key")
			return open(t, srv.URL, "test-key", "conformance", docs)
		})
	})
	t.Run("real server", func(t *testing.T) {
		url := os.Getenv("MEILI_URL")
		if url == "" {
			t.Skip("MEILI_URL not set (see README: Meilisearch)")
		}
		enginetest.Run(t, func(t *testing.T, docs []engine.Doc) engine.Backend {
			return openReal(t, url, os.Getenv("MEILI_MASTER_KEY"), docs)
		})
	})
}

func testConfig(url, key string) meili.Config {
	cfg := meili.DefaultConfig()
	cfg.URL, cfg.Key = url, key
	return cfg
}

func open(t *testing.T, url, key, kbID string, docs []engine.Doc) *meili.Index {
	t.Helper()
	ix, err := meili.Open(context.Background(), testConfig(url, key), kbID, docs)
	if err != nil {
		t.Fatal(err)
	}
	return ix
}

// openReal opens a uniquely named index on a real server and deletes it when the test
// ends.
func openReal(t *testing.T, url, key string, docs []engine.Doc) *meili.Index {
	t.Helper()
	cfg := realConfig(t, url, key, nil)
	ix, err := meili.Open(context.Background(), cfg, "kb", docs)
	if err != nil {
		t.Fatal(err)
	}
	return ix
}

// realConfig configures a uniquely named index on the real server at url, reached
// through via(url) when via is set (a proxy in front), and deletes the index when the
// test ends.
func realConfig(t *testing.T, url, key string, via func(string) string) meili.Config {
	t.Helper()
	var rnd [4]byte
	_, _ = rand.Read(rnd[:])
	target := url
	if via != nil {
		target = via(url)
	}
	cfg := testConfig(target, key)
	cfg.IndexPrefix = "quarry_test_" + hex.EncodeToString(rnd[:]) + "_"
	t.Cleanup(func() {
		c := meilisearch.New(url, meilisearch.WithAPIKey(key))
		defer c.Close()
		if _, err := c.DeleteIndex(cfg.IndexUID("kb")); err != nil {
			t.Logf("delete test index: %v", err)
		}
	})
	return cfg
}
