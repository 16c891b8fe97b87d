package kb_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/quarry-router/quarry/services/search/kb"
)

// A knowledge base served from a link to its folder, as git-sync publishes a checkout
// (--link: current -> .worktrees/<hash>, replaced atomically by renaming a new link over
// it on every pull), or as a tree deployed by switching a "current" link does. The
// loader follows the root link; the watcher and the rescans walked the link itself, did
// not descend, and so saw nothing: no edit and no swap reached the index until a
// restart. Both now follow the root (never a link below it), see a swap of the folder
// the root names, and bring the index in line with the new folder in one generation.
func TestEditsAndSwapsOfAKnowledgeBaseServedThroughALink(t *testing.T) {
	for _, tc := range followers {
		t.Run(tc.name, func(t *testing.T) {
			reg, link, v1, v2 := linkedKB(t)
			tc.start(t, reg)
			ch, stop := reg.Watch()
			defer stop()
			recv(t, ch)

			// An edit in the folder the link names.
			writeFile(t, v1, "ops/walrus.md", "# Walrus\n\nThe walrus runbook.\n")
			waitFor(t, reg, ch, func(k *kb.KB) bool { _, ok := k.Tree.ByPath["ops/walrus.md"]; return ok },
				"an edit in the linked folder")

			swapLink(t, link, v2)
			fresh := load(t, newRegistry(t, defaultConfig(t)), "team", link)
			waitFor(t, reg, ch, func(k *kb.KB) bool { return docPaths(k) == docPaths(fresh) },
				"the swapped folder ("+docPaths(fresh)+")")
			k, _ := reg.Get("team")
			if d := k.Tree.ByPath["ops/pager.md"]; d == nil || !strings.Contains(d.Content, "sun") {
				t.Errorf("ops/pager.md after the swap: %+v", d)
			}
			if k.Version != fresh.Version {
				t.Errorf("content version %x after the swap, a load of the new folder has %x", k.Version, fresh.Version)
			}
			if k.Tree.Files() != fresh.Tree.Files() || !slices.Equal(k.Tree.Refused(), fresh.Tree.Refused()) {
				t.Errorf("after the swap: %d files, refused %v; a load of the new folder: %d, %v",
					k.Tree.Files(), k.Tree.Refused(), fresh.Tree.Files(), fresh.Tree.Refused())
			}

			// And edits in the new folder, not the old one, are followed.
			writeFile(t, v2, "ops/narwhal.md", "# Narwhal\n\nThe narwhal runbook.\n")
			waitFor(t, reg, ch, func(k *kb.KB) bool { _, ok := k.Tree.ByPath["ops/narwhal.md"]; return ok },
				"an edit in the new folder")
			writeFile(t, v1, "ops/stale.md", "# Stale\n\nWritten to the old folder.\n")
			time.Sleep(300 * time.Millisecond)
			if k, _ := reg.Get("team"); k.Tree.ByPath["ops/stale.md"] != nil {
				t.Error("an edit in the folder the link no longer names was indexed")
			}
		})
	}
}

// What changes in a knowledge base's folder between its load and the start of its watch
// (a service starting while git-sync publishes, or a sync job writes) made no event, and
// the first rescan only records the folder: it was served stale until the same files
// changed again. The watch reads the folder whole once when it begins.
func TestChangesMadeWhileTheServiceStartsAreApplied(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(t *testing.T, link, v1, v2 string)
		want   func(k *kb.KB) bool
	}{
		{"an edit in the folder", func(t *testing.T, _, v1, _ string) {
			writeFile(t, v1, "ops/pager.md", "# Pager\n\nThe pager follows the moon.\n")
		}, func(k *kb.KB) bool {
			d := k.Tree.ByPath["ops/pager.md"]
			return d != nil && strings.Contains(d.Content, "moon")
		}},
		{"the link swapped", func(t *testing.T, link, _, v2 string) {
			swapLink(t, link, v2)
		}, func(k *kb.KB) bool {
			_, lag := k.Tree.ByPath["data/kafka/lag.md"]
			_, backups := k.Tree.ByPath["ops/backups.md"]
			return lag && !backups
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg, link, v1, v2 := linkedKB(t)
			ch, stop := reg.Watch()
			defer stop()
			recv(t, ch)
			tc.change(t, link, v1, v2)
			watch(t, reg)
			poll(t, reg, time.Minute)
			waitFor(t, reg, ch, tc.want, "the change made before the watch began")
		})
	}
}

// linkedKB loads the knowledge base "team" through a link, current, to the folder v1,
// as git-sync publishes a checkout; v2 is the next checkout.
func linkedKB(t *testing.T) (reg *kb.Registry, link, v1, v2 string) {
	t.Helper()
	cfg := defaultConfig(t)
	cfg.Write.WatchDebounce = 20 * time.Millisecond
	reg = newRegistry(t, cfg)
	v1 = writeTree(t, map[string]string{
		"ops/pager.md":   "# Pager\n\nThe pager rotates weekly.\n",
		"ops/backups.md": "# Backups\n\nNightly backups go to object storage.\n",
		"bad.md":         "---\nimportance: 500\n---\n# Bad\n", // refused, and counted
	})
	v2 = writeTree(t, map[string]string{
		"ops/pager.md":         "# Pager\n\nThe pager follows the sun.\n",
		"data/kafka/lag.md":    "# Lag\n\nConsumer lag alerts.\n",
		"data/kafka/_index.md": "# Kafka\n",
	})
	link = filepath.Join(t.TempDir(), "current")
	if err := os.Symlink(v1, link); err != nil {
		t.Fatal(err)
	}
	load(t, reg, "team", link)
	return reg, link, v1, v2
}

// swapLink points link at target atomically, as git-sync does: a new link renamed over it.
func swapLink(t *testing.T, link, target string) {
	t.Helper()
	tmp := link + ".tmp"
	if err := os.Symlink(target, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, link); err != nil {
		t.Fatal(err)
	}
}
