package kb_test

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quarry-router/quarry/services/search/kb"
	"github.com/quarry-router/quarry/services/search/tree/treetest"
)

// A knowledge base shipped as a ConfigMap (or Secret, or projected volume) mounted as its
// folder: every file there is a link, which the loader never follows, so the folder
// indexed nothing. The folder is read through its "..data" link instead, whose every
// update (a new "..data" renamed over the old) is applied as one generation, found by the
// watcher or by the rescans.
func TestAKnowledgeBaseMountedFromAConfigMap(t *testing.T) {
	v1 := map[string]string{
		"pager.md":       "# Pager\n\nThe pager rotates weekly.\n",
		"ops/backups.md": "# Backups\n\nNightly backups go to object storage.\n",
		"ops/_index.md":  "# Ops\n",
	}
	v2 := map[string]string{
		"pager.md":          "# Pager\n\nThe pager follows the sun.\n",
		"kafka/lag.md":      "# Lag\n\nConsumer lag alerts.\n",
		"kafka/_index.md":   "# Kafka\n",
		"runbook-oncall.md": "# On-call\n\nPage the secondary after ten minutes.\n",
	}
	for _, tc := range followers {
		t.Run(tc.name, func(t *testing.T) {
			cfg := defaultConfig(t)
			cfg.Write.WatchDebounce = 20 * time.Millisecond
			reg := newRegistry(t, cfg)
			vol := treetest.NewVolume(t, "", v1)
			k := load(t, reg, "team", vol.Dir)
			if want := docPaths(load(t, newRegistry(t, defaultConfig(t)), "x", writeTree(t, v1))); docPaths(k) != want {
				t.Fatalf("loaded from the volume: %q, want %q", docPaths(k), want)
			}
			tc.start(t, reg)
			ch, stop := reg.Watch()
			defer stop()
			recv(t, ch)

			vol.Update(v2)
			want := docPaths(load(t, newRegistry(t, defaultConfig(t)), "x", writeTree(t, v2)))
			waitFor(t, reg, ch, func(k *kb.KB) bool { return docPaths(k) == want },
				"the updated volume ("+want+")")
			k, _ = reg.Get("team")
			if d := k.Tree.ByPath["pager.md"]; d == nil || !strings.Contains(d.Content, "sun") {
				t.Errorf("pager.md after the update: %+v", d)
			}

			// And the next update too: the watch follows the new folder.
			v3 := map[string]string{"pager.md": "# Pager\n\nThe pager is retired.\n"}
			vol.Update(v3)
			waitFor(t, reg, ch, func(k *kb.KB) bool { return docPaths(k) == "pager.md" },
				"the second update")
		})
	}
}

// A volume's "..data" link re-pointed out of its folder (the rename the kubelet does,
// by whoever can write the folder) is not followed: the root "<folder>/..data" is
// opened through the folder every time, not only at the first load, so the watcher's
// and the rescans' reads, writes and reloads find nothing outside it.
func TestAVolumesDataLinkNeverLeadsOutOfItsFolder(t *testing.T) {
	for _, tc := range followers {
		t.Run(tc.name, func(t *testing.T) {
			cfg := defaultConfig(t)
			cfg.Write.WatchDebounce = 20 * time.Millisecond
			reg := newRegistry(t, cfg)
			vol := treetest.NewVolume(t, "", map[string]string{"pager.md": "# Pager\n\nThe pager rotates weekly.\n"})
			outside := writeTree(t, map[string]string{"secret.md": "# Secret\n\nNot part of the knowledge base.\n"})
			k := load(t, reg, "team", vol.Dir)
			if docPaths(k) != "pager.md" {
				t.Fatalf("loaded %q", docPaths(k))
			}
			tc.start(t, reg)
			ch, stop := reg.Watch()
			defer stop()
			recv(t, ch)

			// "..data" is re-pointed out of the folder (the same rename the kubelet does).
			swapLink(t, filepath.Join(vol.Dir, "..data"), outside)
			deadline := time.After(time.Second) // many rescans and debounces
			for {
				if k, _ := reg.Get("team"); strings.Contains(docPaths(k), "secret.md") {
					t.Fatalf("a file outside the folder was indexed: %q (root %s)", docPaths(k), k.Tree.Root)
				}
				select {
				case <-ch:
				case <-deadline:
					return
				}
			}
		})
	}
}
