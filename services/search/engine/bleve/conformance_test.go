package bleve

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/quarry-router/quarry/services/search/engine"
	"github.com/quarry-router/quarry/services/search/engine/enginetest"
)

func TestConformance(t *testing.T) {
	t.Run("in memory", func(t *testing.T) {
		enginetest.Run(t, func(t *testing.T, docs []engine.Doc) engine.Backend {
			ix, err := Build(context.Background(), docs, DefaultConfig())
			if err != nil {
				t.Fatal(err)
			}
			return ix
		})
	})
	t.Run("persisted", func(t *testing.T) {
		enginetest.Run(t, func(t *testing.T, docs []engine.Doc) engine.Backend {
			cfg := DefaultConfig()
			cfg.Dir = filepath.Join(t.TempDir(), "index")
			cfg.Fingerprint = "conformance"
			ix, err := Build(context.Background(), docs, cfg)
			if err != nil {
				t.Fatal(err)
			}
			return ix
		})
	})
}

// An index changed in place no longer holds the tree its fingerprint names: the next
// Build with that fingerprint must rebuild, not reuse it.
func TestApplyDropsTheFingerprint(t *testing.T) {
	ctx := context.Background()
	cfg := DefaultConfig()
	cfg.Dir = filepath.Join(t.TempDir(), "index")
	cfg.Fingerprint = "v1"
	docs := enginetest.Docs()
	ix, err := Build(ctx, docs, cfg)
	if err != nil {
		t.Fatal(err)
	}
	added := engine.Doc{Path: "x.md", Title: "Zebra", Content: "zebra"}
	if err := ix.Apply(ctx, []engine.Change{{New: &added}}); err != nil {
		t.Fatal(err)
	}
	if err := ix.Close(); err != nil {
		t.Fatal(err)
	}
	again, err := Build(ctx, docs, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if again.Reused() {
		t.Fatal("an index changed in place was reused for the tree it was first built from")
	}
	if hits, _ := again.Search(ctx, engine.Query{Terms: []string{"zebra"}}); len(hits) != 0 {
		t.Errorf("rebuilt index still holds the applied document: %v", hits)
	}
}
