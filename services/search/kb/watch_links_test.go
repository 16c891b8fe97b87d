package kb_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quarry-router/quarry/services/search/kb"
)

// A folder renamed inside the tree (d → e) keeps its subfolders' inotify watches, and
// fsnotify keeps their old paths (d/sub): walking e/sub got the same watch back, stale
// path and all, so every later edit in e/sub was reported as d/sub/..., found missing,
// and never applied. The watcher drops the watches of a renamed folder before it walks
// the new one.
func TestWatcherSeesEditsInAFolderRenamedInsideTheTree(t *testing.T) {
	cfg := defaultConfig(t)
	cfg.Write.WatchDebounce = 20 * time.Millisecond
	reg := newRegistry(t, cfg)
	root := writeTree(t, map[string]string{
		"d/sub/x.md":  "# X\n\nThe walrus runbook.\n",
		"d/_index.md": "# D\n",
	})
	load(t, reg, "team", root)
	watch(t, reg)
	ch, stop := reg.Watch()
	defer stop()
	recv(t, ch)

	if err := os.Rename(filepath.Join(root, "d"), filepath.Join(root, "e")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, reg, ch, func(k *kb.KB) bool {
		_, ok := k.Tree.ByPath["e/sub/x.md"]
		return ok
	}, "the rename applied")

	writeFile(t, root, "e/sub/x.md", "# X\n\nThe narwhal runbook.\n")
	waitFor(t, reg, ch, func(k *kb.KB) bool {
		d := k.Tree.ByPath["e/sub/x.md"]
		return d != nil && strings.Contains(d.Content, "narwhal")
	}, "the edit of e/sub/x.md after the rename")
}

// A folder of the tree replaced by a symbolic link: the loader skips the link and all
// that is under it, wherever it points, so the documents that were under the folder must
// leave the index. The only event is for the link itself, d, so removing the path d
// alone left them indexed.
func TestWatcherDropsDocumentsOfAFolderReplacedByALink(t *testing.T) {
	for _, tc := range []struct {
		name   string
		target func(root, outside string) string
	}{
		{"out of the tree", func(_, outside string) string { return filepath.Join(outside, "d") }},
		{"inside the tree", func(root, _ string) string { return filepath.Join(root, "ops") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := defaultConfig(t)
			cfg.Write.WatchDebounce = 20 * time.Millisecond
			reg := newRegistry(t, cfg)
			root := writeTree(t, map[string]string{
				"d/x.md":       "# X\n\nThe walrus runbook.\n",
				"ops/pager.md": "# Pager\n\nThe pager rotates weekly.\n",
			})
			outside := t.TempDir()
			load(t, reg, "team", root)
			watch(t, reg)
			ch, stop := reg.Watch()
			defer stop()
			recv(t, ch)

			if err := os.Rename(filepath.Join(root, "d"), filepath.Join(outside, "d")); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(tc.target(root, outside), filepath.Join(root, "d")); err != nil {
				t.Fatal(err)
			}
			// The watcher applies events in order, so once an edit made after the swap
			// is indexed, the swap is too.
			writeFile(t, root, "ops/marker.md", "# Marker\n")
			waitFor(t, reg, ch, func(k *kb.KB) bool { _, ok := k.Tree.ByPath["ops/marker.md"]; return ok }, "the marker")
			k, _ := reg.Get("team")
			fresh := load(t, newRegistry(t, defaultConfig(t)), "team", root)
			if docPaths(k) != docPaths(fresh) {
				t.Errorf("watched snapshot:\n  %s\na load of the folder:\n  %s", docPaths(k), docPaths(fresh))
			}
		})
	}
}

// When d becomes a link out of the tree, a rescan finds d/x.md gone, and looking it up
// through the tree's os.Root fails with "path escapes from parent". That error failed
// the whole batch, and since the rescan had already recorded the new stamps, the other
// edits of the same rescan were never applied. A path below a link is gone, like a
// missing one.
func TestRescanAppliesEditsBesideAFolderSwappedForALink(t *testing.T) {
	cfg := defaultConfig(t)
	reg := newRegistry(t, cfg)
	root := writeTree(t, map[string]string{
		"d/x.md":       "# X\n\nThe walrus runbook.\n",
		"ops/pager.md": "# Pager\n\nThe pager rotates weekly.\n",
	})
	outside := t.TempDir()
	load(t, reg, "team", root)
	poll(t, reg, 300*time.Millisecond)
	ch, stop := reg.Watch()
	defer stop()
	recv(t, ch)

	// Both changes within one rescan interval, so one batch holds both.
	writeFile(t, root, "ops/pager.md", "# Pager\n\nThe pager follows the sun.\n")
	if err := os.Rename(filepath.Join(root, "d"), filepath.Join(outside, "d")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(outside, "d"), filepath.Join(root, "d")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, reg, ch, func(k *kb.KB) bool {
		d := k.Tree.ByPath["ops/pager.md"]
		return d != nil && strings.Contains(d.Content, "sun")
	}, "the edit of ops/pager.md")
	k, _ := reg.Get("team")
	if _, still := k.Tree.ByPath["d/x.md"]; still {
		t.Error("d/x.md is still indexed though d is now a link out of the tree")
	}
}

// waitFor waits for state changes until the current snapshot of "team" satisfies cond.
func waitFor(t *testing.T, reg *kb.Registry, ch <-chan []kb.State, cond func(*kb.KB) bool, what string) {
	t.Helper()
	deadline := time.After(wait)
	for {
		if k, err := reg.Get("team"); err == nil && cond(k) {
			return
		}
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func docPaths(k *kb.KB) string {
	var out []string
	for _, d := range k.Tree.Docs {
		out = append(out, d.Path)
	}
	return strings.Join(out, " ")
}
