package main

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
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
	// Written to a log, not a terminal: no progress bar redrawn with carriage returns.
	if strings.Contains(errOut.String(), "\r") || strings.Contains(errOut.String(), "uploading") {
		t.Errorf("sync drew its progress bar into a log: %q", errOut.String())
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

// TestSyncRefusesToEmptyByMistake: a sync makes the knowledge base equal to the folder,
// so one given a file (walked, it lists nothing) or a folder without markdown removed
// every file of the knowledge base and exited 0. Both are refused and change nothing;
// -allow-empty empties it on purpose.
func TestSyncRefusesToEmptyByMistake(t *testing.T) {
	root := t.TempDir()
	if err := os.CopyFS(filepath.Join(root, "platform"), os.DirFS("../../examples/kb/platform")); err != nil {
		t.Fatal(err)
	}
	sys, _, _ := startSystem(t, root)
	note := filepath.Join(t.TempDir(), "note.md")
	if err := os.WriteFile(note, []byte("# A note\nSome text.\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	empty := t.TempDir()
	sync := func(args ...string) (int, string) {
		var out, errOut bytes.Buffer
		code := run(context.Background(), append([]string{"sync"}, append(args, "-kb", "platform", "-addr", sys.Search.String())...), &out, &errOut)
		return code, out.String() + errOut.String()
	}
	for _, arg := range []string{note, empty} {
		if code, out := sync(arg); code == 0 || strings.Contains(out, "removed") {
			t.Errorf("quarry sync %s: exit %d, %s; want it refused", arg, code, out)
		}
	}
	if docs := countFiles(t, filepath.Join(root, "platform")); docs == 0 {
		t.Fatal("a refused sync emptied the knowledge base's folder")
	}
	if code, out := sync(empty, "-allow-empty"); code != 0 || !strings.Contains(out, "0 documents") {
		t.Errorf("quarry sync EMPTY -allow-empty: exit %d, %s; want the knowledge base emptied", code, out)
	}
}

func countFiles(t *testing.T, dir string) int {
	t.Helper()
	n := 0
	err := filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			n++
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestReorderArgsKnowsSwitches: flags may follow the folder, and a switch (-tls,
// -keep-missing) takes no value, so the folder after one stays the folder ("-tls DIR"
// made DIR the value of -tls and the rest a usage error).
func TestReorderArgsKnowsSwitches(t *testing.T) {
	fs := flag.NewFlagSet("sync", flag.ContinueOnError)
	fs.Bool("tls", false, "")
	fs.Bool("keep-missing", false, "")
	fs.String("kb", "", "")
	tests := []struct{ in, want []string }{
		{[]string{"DIR", "-kb", "k"}, []string{"-kb", "k", "--", "DIR"}},
		{[]string{"-tls", "DIR", "-kb", "k"}, []string{"-tls", "-kb", "k", "--", "DIR"}},
		{[]string{"--keep-missing", "DIR", "-kb=k"}, []string{"--keep-missing", "-kb=k", "--", "DIR"}},
		{[]string{"-tls=false", "DIR"}, []string{"-tls=false", "--", "DIR"}},
		{[]string{"-kb", "k"}, []string{"-kb", "k"}},
		// After "--" every word is positional, one with a dash too (it was read as a
		// flag, and "--" took the next word as its value).
		{[]string{"-kb", "k", "--", "what", "does", "-race", "do"}, []string{"-kb", "k", "--", "what", "does", "-race", "do"}},
		{[]string{"--", "-odd-dir", "-kb", "k"}, []string{"--", "-odd-dir", "-kb", "k"}},
		{[]string{"how", "do", "I", "rotate?", "-tls", "-kb", "k"}, []string{"-tls", "-kb", "k", "--", "how", "do", "I", "rotate?"}},
		{[]string{"-", "-kb", "k"}, []string{"-kb", "k", "--", "-"}},
	}
	for _, tt := range tests {
		if got := reorderArgs(fs, tt.in); !slices.Equal(got, tt.want) {
			t.Errorf("reorderArgs(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// TestCollectFollowsTheFolderItIsGiven: the folder named on the command line may be a
// link (~/notes to a synced drive). WalkDir does not follow the link it starts from, so
// collect listed nothing, and quarry sync refused the folder as holding no markdown
// (before that refusal, the sync emptied the knowledge base). Links inside the folder
// are still left out.
func TestCollectFollowsTheFolderItIsGiven(t *testing.T) {
	real := t.TempDir()
	for _, p := range []string{"a.md", "ops/b.md"} {
		if err := os.MkdirAll(filepath.Join(real, filepath.Dir(p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(real, p), []byte("# X\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Join(real, "a.md"), filepath.Join(real, "c.md")); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(t.TempDir(), "notes")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	files, skipped, err := collect(link)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"a.md", "ops/b.md"}; !slices.Equal(files, want) {
		t.Errorf("collect(link to a folder) = %q, want %q", files, want)
	}
	if len(skipped) != 1 || !strings.HasPrefix(skipped[0], "c.md") {
		t.Errorf("skipped = %q, want the link c.md inside the folder", skipped)
	}
}

// TestSyncSkipsWhatNoKnowledgeBaseHolds: a folder may hold what the search service's
// loader leaves out of a tree it serves. A file whose name is not UTF-8 failed the whole
// sync, after uploading, with "Internal: grpc: error while marshaling: string field
// contains invalid UTF-8" and no file named; a named pipe called *.md blocked the sync
// for good, its first Ctrl-C included. Both are now skipped, named on stderr, and the
// rest is synced.
func TestSyncSkipsWhatNoKnowledgeBaseHolds(t *testing.T) {
	root := t.TempDir()
	mustWrite(t, filepath.Join(root, "seed", "note.md"), "# Seed\nA placeholder.\n")
	sys, _, _ := startSystem(t, root)

	src := t.TempDir()
	mustWrite(t, filepath.Join(src, "ops", "alpha.md"), "# Alpha\nAlpha text about frobnicators.\n")
	mustWrite(t, filepath.Join(src, "ops", "b\xffeta.md"), "# Beta\nA Latin-1 name.\n")
	mustWrite(t, filepath.Join(src, "caf\xe9", "gamma.md"), "# Gamma\nIn a folder with a Latin-1 name.\n")
	mustWrite(t, filepath.Join(src, "ops", "tab\there.md"), "# Tab\nA control character in the name.\n")
	fifo := filepath.Join(src, "ops", "pipe.md")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}

	var out, errOut bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run(context.Background(), []string{"sync", src, "-kb", "odd", "-addr", sys.Search.String()}, &out, &errOut)
	}()
	var code int
	select {
	case code = <-done:
	case <-time.After(20 * time.Second):
		t.Error("quarry sync still running after 20 s: blocked reading the named pipe")
		if f, err := os.OpenFile(fifo, os.O_WRONLY, 0); err == nil { // unblock the reader
			f.Close()
		}
		code = <-done
	}
	if code != 0 {
		t.Fatalf("quarry sync exited %d, want 0\nstdout: %s\nstderr: %s", code, out.String(), errOut.String())
	}
	if !strings.Contains(out.String(), "synced 1 files") || !strings.Contains(out.String(), "0 rejected") {
		t.Errorf("summary %q, want the one ordinary file synced", out.String())
	}
	for _, want := range []string{`"ops/b\xffeta.md" (invalid path: not valid UTF-8)`, `"caf\xe9" (invalid path: not valid UTF-8)`,
		"ops/pipe.md (not a regular file)", `"ops/tab\there.md" (invalid path`} {
		if !strings.Contains(errOut.String(), want) {
			t.Errorf("stderr does not say %s:\n%s", want, errOut.String())
		}
	}
}
