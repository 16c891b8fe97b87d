package kb_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The watcher read a folder it saw change by its full path after checking it through the
// tree's os.Root, and opening by path follows a link: a folder swapped for a link to
// outside the tree between the two got the outside files indexed as files of the tree.
// The folder is now opened through the root and checked to be the folder it checked.
// renameat2's exchange swaps the folder and a link atomically, again and again, to hit
// the window.
func TestWatcherNeverIndexesFilesFromOutsideTheTree(t *testing.T) {
	cfg := defaultConfig(t)
	cfg.Write.WatchDebounce = time.Millisecond
	reg := newRegistry(t, cfg)
	root := writeTree(t, map[string]string{
		"ops/pager.md": "# Pager\n\nThe pager rotates weekly.\n",
		"d/x.md":       "# X\n\nInside.\n",
	})
	outside := writeTree(t, map[string]string{"secret.md": "# Secret\n\nThe launch codes are zebra.\n"})
	// Hidden, so the load and the watcher ignore it until it is swapped in as d.
	if err := os.Symlink(outside, filepath.Join(root, ".lnk")); err != nil {
		t.Fatal(err)
	}
	load(t, reg, "team", root)
	watch(t, reg)

	stopSwap := make(chan struct{})
	swapped := make(chan struct{})
	go func() {
		defer close(swapped)
		for {
			select {
			case <-stopSwap:
				return
			default:
			}
			_ = unix.Renameat2(unix.AT_FDCWD, filepath.Join(root, ".lnk"), unix.AT_FDCWD, filepath.Join(root, "d"), unix.RENAME_EXCHANGE)
		}
	}()
	defer func() { close(stopSwap); <-swapped }()
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		k, _ := reg.Get("team")
		for _, d := range k.Tree.Docs {
			if strings.Contains(d.Content, "launch codes") {
				t.Fatalf("a file from outside the tree was indexed as %s", d.Path)
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
}
