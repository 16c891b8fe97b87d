//go:build unix

package tree

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// A FIFO named like a markdown file would block a plain open forever.
func TestLoadSkipsFIFOWithoutBlocking(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "ok.md"), []byte("# ok\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "pipe.md"), 0o644); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	tr, err := Load(context.Background(), dir, DefaultConfig(), nil)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if got := docPaths(tr); !slices.Equal(got, []string{"ok.md"}) {
		t.Errorf("loaded %v, want [ok.md]", got)
	}
	if want := []Skip{{Path: "pipe.md", Reason: "not a regular file"}}; !slices.Equal(tr.Skipped, want) {
		t.Errorf("Skipped = %v, want %v", tr.Skipped, want)
	}
}

// A file the loader cannot read is skipped; the rest of the tree still loads.
func TestLoadSkipsUnreadableFile(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root reads files regardless of permissions")
	}
	dir := t.TempDir()
	for name, mode := range map[string]os.FileMode{"ok.md": 0o644, "locked.md": 0o000} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("# x\n"), mode); err != nil {
			t.Fatal(err)
		}
	}
	tr, err := Load(context.Background(), dir, DefaultConfig(), nil)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if got := docPaths(tr); !slices.Equal(got, []string{"ok.md"}) {
		t.Errorf("loaded %v, want [ok.md]", got)
	}
	if len(tr.Skipped) != 1 || tr.Skipped[0].Path != "locked.md" {
		t.Errorf("Skipped = %v, want locked.md", tr.Skipped)
	}
}

// A name a tree path may not hold (not UTF-8, a control character, a backslash, an
// invisible format character) is legal on disk. Loaded, its document could be found by
// a search but never read, written or deleted by its path (CleanPath refuses it), the
// watcher ignored it, and a result naming it raw (not UTF-8) failed the whole
// response: such files and folders are skipped, with the reason.
func TestLoadSkipsNamesNoTreePathMayHold(t *testing.T) {
	dir := t.TempDir()
	bad := []string{"caf\xe9.md", "tab\tname.md", `back\slash.md`, "bad\xff/inner.md", "ops/\ufefffine.md"}
	for _, name := range append([]string{"ok.md", "ops/fine.md"}, bad...) {
		full := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Skipf("this file system refuses %q: %v", name, err)
		}
		if err := os.WriteFile(full, []byte("# x\n"), 0o644); err != nil {
			t.Skipf("this file system refuses %q: %v", name, err)
		}
	}
	tr, err := Load(context.Background(), dir, DefaultConfig(), nil)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if got := docPaths(tr); !slices.Equal(got, []string{"ok.md", "ops/fine.md"}) {
		t.Errorf("loaded %q, want [ok.md ops/fine.md]", got)
	}
	if len(tr.Skipped) != len(bad) {
		t.Errorf("Skipped = %+v, want the %d bad names", tr.Skipped, len(bad))
	}
	files, skips, err := ReadFiles(context.Background(), dir, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 2 || len(skips) != len(bad) {
		t.Errorf("ReadFiles = %d files, %d skips; want 2 and %d", len(files), len(skips), len(bad))
	}
	for _, s := range append(tr.Skipped, skips...) {
		if !strings.Contains(s.Reason, "invalid path") {
			t.Errorf("skip %q: reason %q, want it to say the path is invalid", s.Path, s.Reason)
		}
	}
}

// A Kubernetes ConfigMap, Secret or projected volume holds its files in a hidden
// timestamped folder named by the link "..data", and shows each top-level name as a link
// through it: read as a plain folder it held nothing but links. It is read through
// "..data", unless that link leads out of the folder, and a folder that merely holds a
// "..data" folder (no link) is read as it is.
func TestLoadReadsAKubernetesVolumeThroughItsDataLink(t *testing.T) {
	write := func(t *testing.T, dir string, files map[string]string) {
		t.Helper()
		for p, body := range files {
			full := filepath.Join(dir, filepath.FromSlash(p))
			if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(full, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	link := func(t *testing.T, target, name string) {
		t.Helper()
		if err := os.Symlink(target, name); err != nil {
			t.Fatal(err)
		}
	}
	volume := map[string]string{
		"_index.md":      "Runbooks of the team.\n",
		"pager.md":       "# Pager\n\nThe pager rotates weekly.\n",
		"ops/backups.md": "# Backups\n\nNightly.\n",
	}
	for _, tc := range []struct {
		name string
		// lay out returns the folder to load (its base name is "team").
		layout    func(t *testing.T) string
		wantPaths []string
		wantTitle string // of the root's _index.md, when loaded
	}{
		{"volume", func(t *testing.T) string {
			dir := filepath.Join(t.TempDir(), "team")
			write(t, filepath.Join(dir, "..2026_11_27_10_00_00.000000001"), volume)
			link(t, "..2026_11_27_10_00_00.000000001", filepath.Join(dir, "..data"))
			for _, name := range []string{"_index.md", "pager.md", "ops"} {
				link(t, filepath.Join("..data", name), filepath.Join(dir, name))
			}
			return dir
		}, []string{"_index.md", "ops/backups.md", "pager.md"}, "team"},
		{"data link out of the folder", func(t *testing.T) string {
			outside := t.TempDir()
			write(t, outside, volume)
			dir := filepath.Join(t.TempDir(), "team")
			write(t, dir, map[string]string{"local.md": "# Local\n"})
			link(t, outside, filepath.Join(dir, "..data"))
			return dir
		}, []string{"local.md"}, ""},
		{"data folder, not a link", func(t *testing.T) string {
			dir := filepath.Join(t.TempDir(), "team")
			write(t, dir, map[string]string{"local.md": "# Local\n", "..data/hidden.md": "# Hidden\n"})
			return dir
		}, []string{"local.md"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := tc.layout(t)
			tr, err := Load(context.Background(), dir, DefaultConfig(), nil)
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if got := docPaths(tr); !slices.Equal(got, tc.wantPaths) {
				t.Errorf("loaded %v, want %v", got, tc.wantPaths)
			}
			if tc.wantTitle != "" {
				if d := tr.ByPath["_index.md"]; d == nil || d.Title != tc.wantTitle {
					t.Errorf("root _index.md = %+v, want title %q", d, tc.wantTitle)
				}
			}
			for name, read := range map[string]func() ([]File, []Skip, error){
				"ReadFiles": func() ([]File, []Skip, error) { return ReadFiles(context.Background(), dir, DefaultConfig()) },
				"ReadFilesBeneath": func() ([]File, []Skip, error) {
					return ReadFilesBeneath(context.Background(), filepath.Dir(dir), "team", DefaultConfig())
				},
			} {
				files, _, err := read()
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				var got []string
				for _, f := range files {
					got = append(got, f.Path)
				}
				slices.Sort(got)
				if !slices.Equal(got, tc.wantPaths) {
					t.Errorf("%s read %v, want %v", name, got, tc.wantPaths)
				}
			}
		})
	}
}
