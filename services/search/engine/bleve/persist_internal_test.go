package bleve

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/quarry-router/quarry/services/search/engine"
)

// An index persisted by the previous schema (before quarry-bleve-3 composed text again
// after lower-casing it) names the same tree but may hold other terms: the upgrade must
// rebuild it, not serve it.
func TestAnIndexOfAnOlderSchemaIsRebuilt(t *testing.T) {
	ctx := context.Background()
	cfg := persisted(t, func(ix *Index, cfg Config) error {
		// What the release before wrote: the same tree's fingerprint under its own schema.
		return ix.idx.SetInternal([]byte(fingerprintKey), []byte("quarry-bleve-2\x00"+cfg.Fingerprint))
	})
	again, err := Build(ctx, kb, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if again.Reused() {
		t.Fatal("an index of schema quarry-bleve-2 was reused by " + schemaVersion)
	}
	if again.Len() != len(kb) {
		t.Errorf("rebuilt index holds %d documents, want %d", again.Len(), len(kb))
	}
	_ = again.Close()
	if third := build(t, kb, cfg); !third.Reused() {
		t.Error("the rebuilt index was not reused by the next start")
	}
}

// A removal of a stale index that was cut short (a crash, a kill after the drain
// timeout, a full disk) can take index_meta.json first and leave Bleve's store folder
// behind. Build then refused the folder as not an index (ErrNotIndex), and the knowledge
// base never loaded again until someone deleted it by hand.
func TestAnIndexWhoseRemovalWasCutShortIsRebuilt(t *testing.T) {
	ctx := context.Background()
	cfg := persisted(t, nil)
	if err := os.Remove(filepath.Join(cfg.Dir, metaFile)); err != nil {
		t.Fatal(err)
	}
	if !IsIndexDir(cfg.Dir) {
		t.Error("IsIndexDir: the remains of a Bleve index are not recognised")
	}
	again, err := Build(ctx, kb, cfg)
	if err != nil {
		t.Fatalf("Build over the remains of an interrupted removal: %v", err)
	}
	defer again.Close()
	if again.Reused() || again.Len() != len(kb) {
		t.Errorf("reused %v, %d documents; want a rebuild of %d", again.Reused(), again.Len(), len(kb))
	}
	hits, err := again.Search(ctx, engine.Query{Terms: []string{"rotation"}})
	if err != nil || len(hits) == 0 {
		t.Errorf("search after the rebuild: %v, %v", hits, err)
	}
}

// RemoveIndexDir takes index_meta.json last, so that whatever an interrupted removal
// leaves is still recognised as an index; and it refuses a folder Bleve did not make.
func TestRemoveIndexDir(t *testing.T) {
	cfg := persisted(t, nil)
	if err := RemoveIndexDir(cfg.Dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(cfg.Dir); !os.IsNotExist(err) {
		t.Errorf("index folder still there: %v", err)
	}
	if err := RemoveIndexDir(cfg.Dir); err != nil {
		t.Errorf("removing a missing folder: %v", err)
	}

	foreign := t.TempDir()
	for _, name := range []string{"store", "notes.txt"} {
		if err := os.WriteFile(filepath.Join(foreign, name), []byte("mine"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if IsIndexDir(foreign) {
		t.Error("IsIndexDir: a folder with a file named store and notes is taken for an index")
	}
	if err := RemoveIndexDir(foreign); err == nil {
		t.Error("RemoveIndexDir removed a foreign folder")
	}
	if _, err := os.Stat(filepath.Join(foreign, "notes.txt")); err != nil {
		t.Errorf("foreign file removed: %v", err)
	}
}

// persisted builds the test corpus's index in a new folder, lets edit (when not nil)
// change it, closes it as a stopping service would, and returns its configuration.
func persisted(t *testing.T, edit func(*Index, Config) error) Config {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Dir, cfg.Fingerprint = filepath.Join(t.TempDir(), "kb"), "tree-1"
	ix, err := Build(context.Background(), kb, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		if err := edit(ix, cfg); err != nil {
			t.Fatal(err)
		}
	}
	if err := ix.Close(); err != nil {
		t.Fatal(err)
	}
	return cfg
}
