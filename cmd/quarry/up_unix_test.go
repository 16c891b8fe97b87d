//go:build unix

package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestUpServesAKnowledgeBaseHoldingWhatItDoesNotServe: a knowledge base may hold a named
// pipe, a socket or a link (an editor's or a tool's), which the search service skips.
// "up" and "eval" copied it with os.CopyFS, which refuses the whole copy for one such
// entry: up exited 1 on a knowledge base the search service serves.
func TestUpServesAKnowledgeBaseHoldingWhatItDoesNotServe(t *testing.T) {
	root := t.TempDir()
	if err := os.CopyFS(filepath.Join(root, "platform"), os.DirFS("../../examples/kb/platform")); err != nil {
		t.Fatal(err)
	}
	kb := filepath.Join(root, "platform")
	if err := syscall.Mkfifo(filepath.Join(kb, "deploy", "events.md"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(kb, "auth"), filepath.Join(kb, "auth-link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/hostname", filepath.Join(kb, "deploy", "host.md")); err != nil {
		t.Fatal(err)
	}

	copied := filepath.Join(t.TempDir(), "platform")
	if err := copyKB(copied, kb); err != nil {
		t.Fatalf("copyKB: %v", err)
	}
	for _, gone := range []string{"deploy/events.md", "auth-link", "deploy/host.md"} {
		if _, err := os.Lstat(filepath.Join(copied, gone)); !os.IsNotExist(err) {
			t.Errorf("the copy holds %s (%v), which the search service does not serve", gone, err)
		}
	}
	if _, err := os.Stat(filepath.Join(copied, "auth", "jwt", "refresh-token-revocation.md")); err != nil {
		t.Errorf("the copy lacks a document: %v", err)
	}

	code, out := runUntil(t, []string{"up", "-kb-root", root, "-listen", "127.0.0.1:0", "-search-listen", "127.0.0.1:0", "-agent-listen", "127.0.0.1:0"}, "Serving; press Ctrl-C")
	if code != 0 || !strings.Contains(out, "EXACT_CACHE") {
		t.Errorf("quarry up with a named pipe and links in the knowledge base: exit %d, want the demo and 0:\n%s", code, out)
	}
}
