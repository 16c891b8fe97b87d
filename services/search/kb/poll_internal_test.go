package kb

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/quarry-router/quarry/platform/syncbuf"
	"github.com/quarry-router/quarry/services/search/kbgen"
)

func TestChangedFiles(t *testing.T) {
	t0 := time.Unix(1000, 0)
	before := map[string]stamp{"a.md": {10, t0}, "b.md": {20, t0}, "c.md": {30, t0}}
	now := map[string]stamp{"a.md": {10, t0}, "b.md": {21, t0}, "c.md": {30, t0.Add(time.Nanosecond)}, "d.md": {1, t0}}
	before["gone.md"] = stamp{5, t0}
	if got, want := changedFiles(before, now), []string{"b.md", "c.md", "d.md", "gone.md"}; !slices.Equal(got, want) {
		t.Errorf("changedFiles = %v, want %v", got, want)
	}
	if got := changedFiles(now, now); len(got) != 0 {
		t.Errorf("changedFiles of a folder and itself = %v", got)
	}
}

// stampFolder sees what the loader indexes: regular files, not hidden ones, not links.
func TestStampFolderLeavesOutWhatTheLoaderLeavesOut(t *testing.T) {
	root := t.TempDir()
	for _, p := range []string{"a.md", "ops/b.md", ".git/config", "ops/.draft.md"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, p), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "secret.md"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(root, "linked")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(outside, "secret.md"), filepath.Join(root, "link.md")); err != nil {
		t.Fatal(err)
	}
	got, err := stampFolder(root)
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for p := range got {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	if want := []string{"a.md", "ops/b.md"}; !slices.Equal(paths, want) {
		t.Errorf("stamped %v, want %v", paths, want)
	}
	if _, err := stampFolder(filepath.Join(root, "missing")); err == nil {
		t.Error("a missing folder stamped without an error")
	}
}

// BenchmarkRescan is what -watch-poll costs while nothing changes: one rescan of a
// 5,000-file knowledge base's folder that finds no change.
func BenchmarkRescan(b *testing.B) {
	dir := b.TempDir()
	if _, err := kbgen.Generate(dir, kbgen.Options{Files: 5000, Seed: 1}); err != nil {
		b.Fatal(err)
	}
	before, err := stampFolder(dir)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		now, err := stampFolder(dir)
		if err != nil {
			b.Fatal(err)
		}
		if c := changedFiles(before, now); len(c) != 0 {
			b.Fatalf("changed: %v", c)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/1000, "ms/rescan")
}

// A knowledge base loaded while the rescans run (-kb-root's rescan loads the folders a
// sync job adds, LoadNew) was only recorded by the first rescan that saw it: on a network
// volume, which raises no events, what changed between its load and that rescan (up to
// -watch-poll later; the rest of a folder the sync job was still copying) was never
// applied, until the same files changed again.
func TestARescanAppliesWhatChangedSinceALaterLoad(t *testing.T) {
	root, _, reg := oneFileKB(t, "# A\n\nThe old text.\n")
	ctx := context.Background()
	seen := map[string]folderStamps{}
	reg.rescan(ctx, seen, true) // PollFolders' first rescan: nothing loaded yet
	if _, loaded, err := reg.LoadNew(ctx, "docs", root); err != nil || !loaded {
		t.Fatalf("LoadNew: loaded %v, %v", loaded, err)
	}
	// Changed on the volume before the next rescan; no watcher sees it.
	if err := os.WriteFile(filepath.Join(root, "a.md"), []byte("# A\n\nThe new text, longer.\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "b.md"), []byte("# B\n\nCopied last.\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	reg.rescan(ctx, seen, false)
	reg.rescan(ctx, seen, false)
	k, err := reg.Get("docs")
	if err != nil {
		t.Fatal(err)
	}
	if d := k.Tree.ByPath["a.md"]; d == nil || !strings.Contains(d.Content, "new text") {
		t.Error("the edit made after the load was never applied")
	}
	if k.Tree.ByPath["b.md"] == nil {
		t.Error("the file added after the load was never indexed")
	}
	// Read whole once: the next rescans of the unchanged folder change nothing.
	gen := k.Generation
	reg.rescan(ctx, seen, false)
	if k, _ := reg.Get("docs"); k.Generation != gen {
		t.Errorf("generation %d after a rescan of an unchanged folder, want %d", k.Generation, gen)
	}
}

// TestEditsThatCannotSucceedWaitForAChange: edits found by a rescan that fail for a
// lasting reason (here more files than -kb-max-files) cannot succeed at the next
// rescan either: they were tried, with a warning, at every rescan, and the first
// rescan's whole read of a knowledge base loaded while running read a 5,000-file
// knowledge base every -watch-poll. They wait for the folder to change, and are
// applied then, with it read whole, not lost.
func TestEditsThatCannotSucceedWaitForAChange(t *testing.T) {
	for _, tc := range []struct {
		name string
		// load loads the knowledge base at root and makes the poller's first rescan.
		load func(ctx context.Context, reg *Registry, root string, seen map[string]folderStamps) error
	}{
		{"known to the rescans", func(ctx context.Context, reg *Registry, root string, seen map[string]folderStamps) error {
			_, err := reg.Load(ctx, "docs", root)
			reg.rescan(ctx, seen, true)
			return err
		}},
		{"loaded while running, read whole", func(ctx context.Context, reg *Registry, root string, seen map[string]folderStamps) error {
			reg.rescan(ctx, seen, true)
			_, _, err := reg.LoadNew(ctx, "docs", root)
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root, cfg, _ := oneFileKB(t, "# A\n\nThe old text.\n", "-kb-max-files", "2")
			var logs syncbuf.Buffer
			reg := NewRegistry(cfg, slog.New(slog.NewTextHandler(&logs, nil)))
			t.Cleanup(reg.Close)
			ctx := context.Background()
			seen := map[string]folderStamps{}
			if err := tc.load(ctx, reg, root, seen); err != nil {
				t.Fatal(err)
			}
			write := func(name, text string) {
				t.Helper()
				if err := os.WriteFile(filepath.Join(root, name), []byte(text), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			write("a.md", "# A\n\nThe new text, longer.\n")
			write("b.md", "# B\n\nOne more.\n")
			write("c.md", "# C\n\nOne too many.\n")
			for range 3 {
				reg.rescan(ctx, seen, false)
			}
			if n := strings.Count(logs.String(), "apply folder edits found by rescan"); n != 1 {
				t.Errorf("%d warnings over three rescans of an unchanged folder, want 1:\n%s", n, logs.String())
			}
			if err := os.Remove(filepath.Join(root, "c.md")); err != nil {
				t.Fatal(err)
			}
			reg.rescan(ctx, seen, false)
			k, err := reg.Get("docs")
			if err != nil {
				t.Fatal(err)
			}
			if d := k.Tree.ByPath["a.md"]; d == nil || !strings.Contains(d.Content, "new text") {
				t.Error("the edit made before the failed rescan was lost")
			}
			if k.Tree.ByPath["b.md"] == nil {
				t.Error("the file added before the failed rescan was lost")
			}
		})
	}
}
