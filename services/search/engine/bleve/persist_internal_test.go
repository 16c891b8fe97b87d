package bleve

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
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

// An index changed in place and then kept (Keep) under the new tree's fingerprint
// reopens for that tree as if it had been built from it: the same documents, the same
// BM25 statistics and the same scores. Without Keep, or under the old tree's
// fingerprint, it is rebuilt.
func TestAnIndexKeptAfterWritesReopensLikeABuild(t *testing.T) {
	changed := kb[2]
	changed.Content = "Sessions expire after a day; the refresh endpoint extends them once."
	added := engine.Doc{Path: "ops/kafka.md", Folder: "ops", Title: "Kafka", Content: "Consumer lag pages the on-call engineer."}
	changes := []engine.Change{
		{Old: &kb[2], New: &changed},
		{New: &added},
		{Old: &kb[7]}, // data/postgres_backups.md
	}
	after := []engine.Doc{kb[0], kb[1], changed, kb[3], kb[4], kb[5], kb[6], added}

	write := func(keep string) func(*Index, Config) error {
		return func(ix *Index, _ Config) error {
			if err := ix.Apply(context.Background(), changes); err != nil {
				return err
			}
			if keep == "" {
				return nil
			}
			return ix.Keep(keep)
		}
	}
	fresh := build(t, after, DefaultConfig())
	queries := [][]string{{"refresh"}, {"sessions", "expire"}, {"on-call"}, {"kafka", "lag"}, {"snapshots"}, {"rotation", "keys"}}

	tests := []struct {
		name   string
		keep   string // the fingerprint kept after the writes ("": none)
		reopen string // the fingerprint the next Build asks for
		reused bool
	}{
		{"kept: reopens for the written tree", "tree-2", "tree-2", true},
		{"kept: not for the tree it was built from", "tree-2", "tree-1", false},
		{"not kept: rebuilt", "", "tree-2", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := persisted(t, write(tc.keep))
			cfg.Fingerprint = tc.reopen
			ix := build(t, after, cfg)
			if ix.Reused() != tc.reused {
				t.Fatalf("reused = %v, want %v", ix.Reused(), tc.reused)
			}
			if ix.Len() != len(after) {
				t.Errorf("Len = %d, want %d", ix.Len(), len(after))
			}
			if !reflect.DeepEqual(ix.bm25, bm25Stats(after)) {
				t.Errorf("BM25 statistics %+v, want those of the written tree %+v", ix.bm25, bm25Stats(after))
			}
			for _, q := range queries {
				got, err := ix.Search(context.Background(), engine.Query{Terms: q})
				if err != nil {
					t.Fatal(err)
				}
				want, err := fresh.Search(context.Background(), engine.Query{Terms: q})
				if err != nil {
					t.Fatal(err)
				}
				if !sameHits(got, want) {
					t.Errorf("search %v = %v, want what a build of the tree finds: %v", q, got, want)
				}
			}
		})
	}
}

// sameHits compares hits by path and score, ignoring the order of equal scores.
func sameHits(a, b []engine.Hit) bool {
	if len(a) != len(b) {
		return false
	}
	key := func(h engine.Hit) string { return fmt.Sprintf("%s %.9g", h.Path, h.Score) }
	ka, kb := make([]string, len(a)), make([]string, len(b))
	for i := range a {
		ka[i], kb[i] = key(a[i]), key(b[i])
	}
	slices.Sort(ka)
	slices.Sort(kb)
	return slices.Equal(ka, kb)
}

// Scorch checks a segment's header and footer when it opens an index, not its content:
// a segment damaged in the middle (a bad sector, a torn write that a node crash left,
// a copy cut short and padded) reopened as reusable, and every search of the knowledge
// base failed ("vellum err: no decoder ...") until someone deleted the folder by hand.
// Each segment carries a CRC-32 of its bytes; one that does not match is rebuilt.
func TestAnIndexWithADamagedSegmentIsRebuilt(t *testing.T) {
	for _, damage := range []struct {
		name string
		edit func(b []byte) []byte
	}{
		{"bytes flipped in the middle", func(b []byte) []byte {
			for i := len(b) / 4; i < len(b)/2; i++ {
				b[i] ^= 0xff
			}
			return b
		}},
		{"one byte changed", func(b []byte) []byte { b[len(b)/3]++; return b }},
		{"zeroed", func(b []byte) []byte { return make([]byte, len(b)) }},
		{"cut short", func(b []byte) []byte { return b[:len(b)/2] }},
	} {
		t.Run(damage.name, func(t *testing.T) {
			ctx := context.Background()
			cfg := persisted(t, nil)
			segs, err := filepath.Glob(filepath.Join(cfg.Dir, storeDir, "*.zap"))
			if err != nil || len(segs) == 0 {
				t.Fatalf("segments: %v, %v", segs, err)
			}
			for _, seg := range segs {
				b, err := os.ReadFile(seg)
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(seg, damage.edit(b), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			again, err := Build(ctx, kb, cfg)
			if err != nil {
				t.Fatalf("Build over a damaged index: %v", err)
			}
			defer again.Close()
			if again.Reused() {
				t.Error("an index with a damaged segment was reused")
			}
			hits, err := again.Search(ctx, engine.Query{Terms: []string{"rotation"}})
			if err != nil || len(hits) == 0 || hits[0].Path != "auth/jwt/rotation.md" {
				t.Errorf("search after the rebuild: %v, %v", hits, err)
			}
		})
	}
}

// The segment check must pass every segment Bleve writes: those of many batches, the
// ones its merger writes from them, and those a write in place adds before Keep. A
// false alarm would rebuild every index at every restart.
func TestSoundSegmentsPassTheCheck(t *testing.T) {
	ctx := context.Background()
	docs := newSynthetic(1500, 7).docs
	cfg := DefaultConfig()
	cfg.Dir, cfg.Fingerprint, cfg.BatchSize = filepath.Join(t.TempDir(), "kb"), "tree-1", 50
	ix, err := Build(ctx, docs, cfg)
	if err != nil {
		t.Fatal(err)
	}
	moved := docs[0]
	moved.Content = "walrus " + moved.Content
	if err := ix.Apply(ctx, []engine.Change{{Old: &docs[0], New: &moved}}); err != nil {
		t.Fatal(err)
	}
	if err := ix.Keep("tree-2"); err != nil {
		t.Fatal(err)
	}
	if err := ix.Close(); err != nil {
		t.Fatal(err)
	}
	segs, _ := filepath.Glob(filepath.Join(cfg.Dir, storeDir, "*.zap"))
	if err := segmentsIntact(cfg.Dir); err != nil || len(segs) == 0 {
		t.Fatalf("segmentsIntact over %d segments: %v", len(segs), err)
	}
	cfg.Fingerprint = "tree-2"
	again, err := Build(ctx, nil, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if !again.Reused() || again.Len() != len(docs) {
		t.Errorf("reused %v with %d documents; want the kept index of %d reopened", again.Reused(), again.Len(), len(docs))
	}
}
