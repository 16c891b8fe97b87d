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

// A name a tree path may not hold (not UTF-8, a control character, a backslash) is legal
// on disk. Loaded, its document could be found by a search but never read, written or
// deleted by its path (CleanPath refuses it), the watcher ignored it, and a result
// naming it raw (not UTF-8) failed the whole response: such files and folders are
// skipped, with the reason.
func TestLoadSkipsNamesNoTreePathMayHold(t *testing.T) {
	dir := t.TempDir()
	bad := []string{"caf\xe9.md", "tab\tname.md", `back\slash.md`, "bad\xff/inner.md"}
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
	if len(tr.Skipped) != 4 {
		t.Errorf("Skipped = %+v, want the 4 bad names", tr.Skipped)
	}
	files, skips, err := ReadFiles(context.Background(), dir, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 2 || len(skips) != 4 {
		t.Errorf("ReadFiles = %d files, %d skips; want 2 and 4", len(files), len(skips))
	}
	for _, s := range append(tr.Skipped, skips...) {
		if !strings.Contains(s.Reason, "invalid path") {
			t.Errorf("skip %q: reason %q, want it to say the path is invalid", s.Path, s.Reason)
		}
	}
}
