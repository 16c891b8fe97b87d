package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	quarryv1 "github.com/quarry-router/quarry/gen/quarry/v1"
)

// TestSyncCommand uploads a folder with "quarry sync" into a new knowledge base, asks it
// a question through the gateway, changes one file, syncs again and sees the new answer
// (not the cached one), then lists archive candidates.
func TestSyncCommand(t *testing.T) {
	root := t.TempDir() // the service's knowledge bases; "synced" is created by the sync
	if err := os.MkdirAll(filepath.Join(root, "seed"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "seed", "note.md"), []byte("# Seed\nA placeholder.\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	src := t.TempDir()
	if err := os.CopyFS(src, os.DirFS("../../examples/kb/platform")); err != nil {
		t.Fatal(err)
	}
	sys, gw, _ := startSystem(t, root)
	search := sys.Search.String()

	var out, errOut bytes.Buffer
	if err := syncCmd(context.Background(), []string{src, "-kb", "synced", "-addr", search}, &out, &errOut); err != nil {
		t.Fatalf("sync: %v\n%s%s", err, out.String(), errOut.String())
	}
	if !strings.Contains(out.String(), "0 rejected") || !strings.Contains(out.String(), "indexed") {
		t.Fatalf("summary %q", out.String())
	}

	c := quarryv1.NewQueryServiceClient(gw)
	askSynced := func(q string) *quarryv1.QueryResponse {
		var resp *quarryv1.QueryResponse
		deadline := time.Now().Add(5 * time.Second)
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			r, err := c.Query(ctx, &quarryv1.QueryRequest{KnowledgeBase: "synced", Query: q})
			cancel()
			if err == nil {
				resp = r
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("query the synced knowledge base: %v", err)
			}
			time.Sleep(20 * time.Millisecond) // the gateway learns the new KB from the watch stream
		}
		return resp
	}
	first := askSynced("How do I rotate the JWT signing key?")
	if first.Tier != quarryv1.Tier_TIER_DIRECT || !strings.Contains(first.Answer, "signing") {
		t.Fatalf("first answer: tier %v", first.Tier)
	}

	doc := filepath.Join(src, "auth", "jwt", "signing-key-rotation.md")
	b, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(doc, append(b, []byte("\n\nRotation drill marker: zebracorn-42.\n")...), 0o644); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if err := syncCmd(context.Background(), []string{src, "-kb", "synced", "-addr", search}, &out, &errOut); err != nil {
		t.Fatalf("second sync: %v", err)
	}
	if !strings.Contains(out.String(), "1 indexed") {
		t.Errorf("second sync summary %q, want exactly the changed file indexed", out.String())
	}
	// The gateway learns the new generation from the watch stream a moment after the
	// sync returns; from then on the old answer is never served.
	synced := time.Now()
	for {
		second := askSynced("How do I rotate the JWT signing key?")
		if !second.FromCache && strings.Contains(second.Answer, "zebracorn-42") {
			t.Logf("new answer %v after the sync returned", time.Since(synced))
			break
		}
		if time.Since(synced) > time.Second {
			t.Fatalf("a second after the change: from_cache %v, new text present %v", second.FromCache, strings.Contains(second.Answer, "zebracorn-42"))
		}
		time.Sleep(5 * time.Millisecond)
	}

	out.Reset()
	if err := archiveCmd(context.Background(), []string{"-kb", "synced", "-suggest", "-below", "100", "-limit", "3", "-addr", search}, &out); err != nil {
		t.Fatalf("archive -suggest: %v", err)
	}
	if n := strings.Count(out.String(), ".md"); n != 3 {
		t.Errorf("archive -suggest listed %d files, want 3:\n%s", n, out.String())
	}
}
