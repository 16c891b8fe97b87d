//go:build unix

package tree

import (
	"context"
	"os"
	"path/filepath"
	"slices"
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
