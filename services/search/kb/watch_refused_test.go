package kb_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/quarry-router/quarry/services/search/kb"
	"github.com/quarry-router/quarry/services/search/tree"
)

// TestAFileTheWatcherRefusedCountsAndCanBeRemoved: a new file written into the folder
// that the loader refuses (bad front matter) is on the volume and counted by the next
// Load toward -kb-max-files, as a file a Load refused is. Seen by the watcher or a
// rescan it was not recorded at all: writes took the knowledge base past the limit (the
// restart then refused to load it), DeleteFile answered NOT_FOUND for it, and a full
// sync left it in the folder where no one had sent it.
func TestAFileTheWatcherRefusedCountsAndCanBeRemoved(t *testing.T) {
	for _, tc := range []struct {
		name  string
		start func(*testing.T, *kb.Registry)
	}{
		{"watcher", watch},
		{"rescan", func(t *testing.T, reg *kb.Registry) { poll(t, reg, 20*time.Millisecond) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := defaultConfig(t)
			cfg.Tree.MaxFiles = len(smallTree) + 2
			cfg.Write.WatchDebounce = 10 * time.Millisecond
			reg := newRegistry(t, cfg)
			root := writeTree(t, smallTree)
			load(t, reg, "team", root)
			tc.start(t, reg)
			ctx := context.Background()

			writeFile(t, root, "ops/broken.md", "---\nimportance: 500\n---\n# Broken\n")
			// A good file written after it: once it is indexed, the broken one was seen.
			writeFile(t, root, "ops/marker.md", "# Marker\n\nWritten after the broken file.\n")
			for deadline := time.Now().Add(wait); ; time.Sleep(10 * time.Millisecond) {
				if k, _ := reg.Get("team"); k.Tree.ByPath["ops/marker.md"] != nil {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the marker was never indexed")
				}
			}
			// Folder: the small tree, the marker and the broken file, the limit.
			_, err := reg.UpsertFile(ctx, "team", "ops/one-too-many.md", []byte("# One too many\n"))
			if !errors.Is(err, tree.ErrTooManyFiles) {
				t.Errorf("an upsert past the limit = %v, want ErrTooManyFiles", err)
			}
			load(t, newRegistry(t, cfg), "team", root) // the next start loads

			if _, err := reg.DeleteFile(ctx, "team", "ops/broken.md"); err != nil {
				t.Fatalf("DeleteFile of the refused file: %v", err)
			}
			if slices.Contains(folderFiles(t, root), "ops/broken.md") {
				t.Error("DeleteFile left ops/broken.md in the folder")
			}
			if _, err := reg.UpsertFile(ctx, "team", "ops/one-more.md", []byte("# One more\n")); err != nil {
				t.Errorf("an upsert within the limit after the delete: %v", err)
			}

			// Again, and a full sync takes it away (room made first).
			for _, p := range []string{"ops/marker.md", "ops/one-more.md"} {
				if _, err := reg.DeleteFile(ctx, "team", p); err != nil {
					t.Fatal(err)
				}
			}
			writeFile(t, root, "ops/broken2.md", "---\nimportance: 500\n---\n# Broken\n")
			writeFile(t, root, "ops/marker2.md", "# Marker 2\n")
			for deadline := time.Now().Add(wait); ; time.Sleep(10 * time.Millisecond) {
				if k, _ := reg.Get("team"); k.Tree.ByPath["ops/marker2.md"] != nil {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the second marker was never indexed")
				}
			}
			var ups []kb.Upload
			for p, body := range smallTree {
				ups = append(ups, kb.Upload{Path: p, Data: []byte(body)})
			}
			res, err := reg.SyncFiles(ctx, "team", ups, false)
			if err != nil {
				t.Fatal(err)
			}
			if slices.Contains(folderFiles(t, root), "ops/broken2.md") {
				t.Errorf("the full sync left ops/broken2.md in the folder; files %v", fmt.Sprint(res.Files))
			}
		})
	}
}
