package kb_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quarry-router/quarry/services/search/kb"
)

// atomicVolume lays out and updates a folder the way the kubelet writes a ConfigMap,
// Secret or projected volume (pkg/volume/util/atomic_writer.go): the files live in a
// timestamped hidden folder, "..data" links to it, and every top-level name is a link
// through "..data". An update writes a new timestamped folder, renames a new "..data"
// link over the old one (the one atomic step), then adds and removes the top-level links
// and the old folder.
type atomicVolume struct {
	t   *testing.T
	dir string
	n   int
	cur string
}

func newAtomicVolume(t *testing.T, files map[string]string) *atomicVolume {
	v := &atomicVolume{t: t, dir: t.TempDir()}
	v.update(files)
	return v
}

func (v *atomicVolume) update(files map[string]string) {
	t := v.t
	t.Helper()
	v.n++
	ts := fmt.Sprintf("..2026_11_27_10_00_%02d.%09d", v.n, v.n)
	top := map[string]bool{}
	for p, body := range files {
		full := filepath.Join(v.dir, ts, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		first, _, _ := strings.Cut(p, "/")
		top[first] = true
	}
	tmp := filepath.Join(v.dir, "..data_tmp")
	if err := os.Symlink(ts, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(v.dir, "..data")); err != nil {
		t.Fatal(err)
	}
	for name := range top {
		link := filepath.Join(v.dir, name)
		if _, err := os.Lstat(link); err == nil {
			continue
		}
		if err := os.Symlink(filepath.Join("..data", name), link); err != nil {
			t.Fatal(err)
		}
	}
	entries, err := os.ReadDir(v.dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), ".") && !top[e.Name()] {
			if err := os.Remove(filepath.Join(v.dir, e.Name())); err != nil {
				t.Fatal(err)
			}
		}
	}
	if v.cur != "" {
		if err := os.RemoveAll(filepath.Join(v.dir, v.cur)); err != nil {
			t.Fatal(err)
		}
	}
	v.cur = ts
}

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
	for _, tc := range []struct {
		name  string
		start func(*testing.T, *kb.Registry)
	}{
		{"watcher", watch},
		{"rescan", func(t *testing.T, reg *kb.Registry) { poll(t, reg, 50*time.Millisecond) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := defaultConfig(t)
			cfg.Write.WatchDebounce = 20 * time.Millisecond
			reg := newRegistry(t, cfg)
			vol := newAtomicVolume(t, v1)
			k := load(t, reg, "team", vol.dir)
			if want := docPaths(load(t, newRegistry(t, defaultConfig(t)), "x", writeTree(t, v1))); docPaths(k) != want {
				t.Fatalf("loaded from the volume: %q, want %q", docPaths(k), want)
			}
			tc.start(t, reg)
			ch, stop := reg.Watch()
			defer stop()
			recv(t, ch)

			vol.update(v2)
			want := docPaths(load(t, newRegistry(t, defaultConfig(t)), "x", writeTree(t, v2)))
			waitFor(t, reg, ch, func(k *kb.KB) bool { return docPaths(k) == want },
				"the updated volume ("+want+")")
			k, _ = reg.Get("team")
			if d := k.Tree.ByPath["pager.md"]; d == nil || !strings.Contains(d.Content, "sun") {
				t.Errorf("pager.md after the update: %+v", d)
			}

			// And the next update too: the watch follows the new folder.
			v3 := map[string]string{"pager.md": "# Pager\n\nThe pager is retired.\n"}
			vol.update(v3)
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
	for _, tc := range []struct {
		name  string
		start func(*testing.T, *kb.Registry)
	}{
		{"watcher", watch},
		{"rescan", func(t *testing.T, reg *kb.Registry) { poll(t, reg, 50*time.Millisecond) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := defaultConfig(t)
			cfg.Write.WatchDebounce = 20 * time.Millisecond
			reg := newRegistry(t, cfg)
			vol := newAtomicVolume(t, map[string]string{"pager.md": "# Pager\n\nThe pager rotates weekly.\n"})
			outside := writeTree(t, map[string]string{"secret.md": "# Secret\n\nNot part of the knowledge base.\n"})
			k := load(t, reg, "team", vol.dir)
			if docPaths(k) != "pager.md" {
				t.Fatalf("loaded %q", docPaths(k))
			}
			tc.start(t, reg)
			ch, stop := reg.Watch()
			defer stop()
			recv(t, ch)

			// "..data" is re-pointed out of the folder (the same rename the kubelet does).
			tmp := filepath.Join(vol.dir, "..data_tmp")
			if err := os.Symlink(outside, tmp); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(tmp, filepath.Join(vol.dir, "..data")); err != nil {
				t.Fatal(err)
			}
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
