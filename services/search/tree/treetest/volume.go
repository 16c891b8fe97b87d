// Package treetest lays out folders for tests as the platforms Quarry runs on lay them
// out.
package treetest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Volume is a folder laid out and updated the way the kubelet writes a ConfigMap,
// Secret or projected volume (pkg/volume/util/atomic_writer.go): the files live in a
// timestamped hidden folder, "..data" links to it, and every top-level name is a link
// through "..data". An update writes a new timestamped folder, renames a new "..data"
// link over the old one (the one atomic step), then adds and removes the top-level
// links and the old folder.
type Volume struct {
	// Dir is the folder the volume is mounted on.
	Dir string
	t   testing.TB
	n   int
	cur string
}

// NewVolume mounts a volume holding files (slash path → content) on dir, which must not
// exist yet ("" for a new temporary folder).
func NewVolume(t testing.TB, dir string, files map[string]string) *Volume {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	} else if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	v := &Volume{Dir: dir, t: t}
	v.Update(files)
	return v
}

// Update makes the volume hold files instead, as the kubelet applies an edited ConfigMap.
func (v *Volume) Update(files map[string]string) {
	t := v.t
	t.Helper()
	v.n++
	ts := fmt.Sprintf("..2026_11_27_10_00_%02d.%09d", v.n, v.n)
	top := map[string]bool{}
	for p, body := range files {
		full := filepath.Join(v.Dir, ts, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		first, _, _ := strings.Cut(p, "/")
		top[first] = true
	}
	tmp := filepath.Join(v.Dir, "..data_tmp")
	if err := os.Symlink(ts, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(v.Dir, "..data")); err != nil {
		t.Fatal(err)
	}
	for name := range top {
		link := filepath.Join(v.Dir, name)
		if _, err := os.Lstat(link); err == nil {
			continue
		}
		if err := os.Symlink(filepath.Join("..data", name), link); err != nil {
			t.Fatal(err)
		}
	}
	entries, err := os.ReadDir(v.Dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), ".") && !top[e.Name()] {
			if err := os.Remove(filepath.Join(v.Dir, e.Name())); err != nil {
				t.Fatal(err)
			}
		}
	}
	if v.cur != "" {
		if err := os.RemoveAll(filepath.Join(v.Dir, v.cur)); err != nil {
			t.Fatal(err)
		}
	}
	v.cur = ts
}
