package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	quarryv1 "github.com/quarry-router/quarry/gen/quarry/v1"
	"github.com/quarry-router/quarry/platform/grpcx"
	"github.com/quarry-router/quarry/platform/text"
	searchapp "github.com/quarry-router/quarry/services/search/app"
	"github.com/quarry-router/quarry/services/search/engine/meili/meilitest"
)

// outageFiles is the knowledge base the outage test starts from: each file holds one
// marker word of its own, so a search for it finds that file and no other.
func outageFiles(version int) map[string]string {
	files := map[string]string{}
	for i := range 8 {
		files[fmt.Sprintf("ops/note%d.md", i)] = fmt.Sprintf("# Note %d\n\nThe runbook marker %s is here.\n", i, marker(i, version))
	}
	return files
}

// marker is a word of one file in one version; any two differ by more than the typos
// Meilisearch tolerates.
func marker(file, version int) string {
	return []string{"amber", "birch", "cedar", "dingo", "ember", "fjord", "gecko", "heron"}[file] +
		[]string{"alpha", "bravo"}[version]
}

// TestWritesDuringAMeilisearchOutage runs the search service on Meilisearch (the scripted
// server) and takes the server away during writes: a short outage is retried and the
// write succeeds; a longer one fails the write with UNAVAILABLE and leaves the folder, the
// generation and the index as they were; an outage in the middle of a sync (part of it
// already in the index) fails the sync the same way, and once Meilisearch is back a
// re-sync makes the index equal the tree, every file found by its own words and nothing
// else in the index.
func TestWritesDuringAMeilisearchOutage(t *testing.T) {
	const kbID = "team"
	srv := meilitest.New(t, "key")
	root, src := t.TempDir(), t.TempDir()
	writeTree(t, filepath.Join(root, kbID), outageFiles(0))
	writeTree(t, filepath.Join(src, kbID), outageFiles(1))

	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx, cancel := context.WithCancel(context.Background())
	ready, done := make(chan net.Addr, 1), make(chan error, 1)
	go func() {
		done <- searchapp.Run(ctx, []string{"-listen", "127.0.0.1:0", "-kb-root", root, "-sync-root", src, "-watch=false",
			"-engine", "meilisearch", "-meili-url", srv.URL, "-meili-key", "key", "-meili-batch-size", "3",
			"-meili-retries", "4", "-meili-retry-backoff", "50ms"}, log, func(a net.Addr) { ready <- a })
	}()
	var addr net.Addr
	select {
	case addr = <-ready:
	case err := <-done:
		cancel()
		t.Fatalf("search: %v", err)
	}
	t.Cleanup(func() { cancel(); <-done })
	conn, err := grpcx.Dial(addr.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	search, know := quarryv1.NewSearchServiceClient(conn), quarryv1.NewKnowledgeServiceClient(conn)
	call := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.Background(), 30*time.Second)
	}

	generation := func() (uint64, int32) {
		c, cancel := call()
		defer cancel()
		r, err := search.ListKnowledgeBases(c, &quarryv1.ListKnowledgeBasesRequest{})
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range r.KnowledgeBases {
			if k.Id == kbID {
				return k.Generation, k.DocumentCount
			}
		}
		t.Fatalf("%s is not served", kbID)
		return 0, 0
	}
	top := func(q string) string {
		c, cancel := call()
		defer cancel()
		r, err := search.Search(c, &quarryv1.SearchRequest{KnowledgeBase: kbID, Query: q})
		if err != nil {
			t.Fatalf("search %q: %v", q, err)
		}
		if len(r.Results) == 0 {
			return ""
		}
		return r.Results[0].Path
	}
	// indexEqualsTree checks the index against the folder: the index holds exactly the
	// folder's files, and each one is found by the marker it holds now.
	indexEqualsTree := func(version map[string]int) {
		t.Helper()
		folder := readTree(t, filepath.Join(root, kbID))
		var indexed []string
		for _, d := range srv.Documents("quarry_" + kbID) {
			indexed = append(indexed, d["path"].(string))
		}
		slices.Sort(indexed)
		var want []string
		for p := range folder {
			want = append(want, p)
		}
		slices.Sort(want)
		if !slices.Equal(indexed, want) {
			t.Errorf("the index holds %v, the folder %v", indexed, want)
		}
		for p, v := range version {
			i := fileNumber(t, p)
			if !strings.Contains(folder[p], marker(i, v)) {
				t.Errorf("%s does not hold %s in the folder", p, marker(i, v))
			}
			if got := top(marker(i, v)); got != p {
				t.Errorf("search %s (in %s) finds %q first", marker(i, v), p, got)
			}
			if v > 0 {
				if got := top(marker(i, v-1)); got == p {
					t.Errorf("search %s finds %s, which no longer holds it", marker(i, v-1), p)
				}
			}
		}
	}
	want := map[string]int{}
	for p := range outageFiles(0) {
		want[p] = 0
	}
	indexEqualsTree(want)

	// A short outage: the write is retried until Meilisearch answers again.
	t.Run("a write during a short outage is retried", func(t *testing.T) {
		seen := len(srv.Requests())
		srv.Down(meilitest.Unavailable)
		res := make(chan error, 1)
		go func() {
			c, cancel := call()
			defer cancel()
			_, err := know.UpsertFile(c, &quarryv1.UpsertFileRequest{KnowledgeBase: kbID, Path: "ops/note7.md", Content: []byte(outageFiles(1)["ops/note7.md"])})
			res <- err
		}()
		waitFor(t, "the upsert to reach the server", func() bool { return len(srv.Requests()) > seen })
		srv.Up()
		if err := <-res; err != nil {
			t.Fatalf("upsert across a short outage: %v", err)
		}
		want["ops/note7.md"] = 1
		indexEqualsTree(want)
	})

	// A longer outage: the write fails, reported, and nothing of it is kept.
	t.Run("a write during a long outage fails and changes nothing", func(t *testing.T) {
		gen, docs := generation()
		folder := readTree(t, filepath.Join(root, kbID))
		srv.Down(meilitest.Unavailable)
		c, cancel := call()
		_, err := know.UpsertFile(c, &quarryv1.UpsertFileRequest{KnowledgeBase: kbID, Path: "ops/new.md", Content: []byte("# New\n\nThe zqnewmark note.\n")})
		cancel()
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("upsert during an outage = %v, want UNAVAILABLE", err)
		}
		if g, d := generation(); g != gen || d != docs {
			t.Errorf("after a failed upsert: generation %d, %d documents; want %d, %d", g, d, gen, docs)
		}
		if got := readTree(t, filepath.Join(root, kbID)); !mapsEqualStr(got, folder) {
			t.Errorf("a failed upsert changed the folder")
		}
		srv.Up()
		indexEqualsTree(want)
		// Retried once Meilisearch is back, it goes through.
		c, cancel = call()
		_, err = know.UpsertFile(c, &quarryv1.UpsertFileRequest{KnowledgeBase: kbID, Path: "ops/new.md", Content: []byte("# New\n\nThe zqnewmark note.\n")})
		cancel()
		if err != nil {
			t.Fatalf("upsert retried after the outage: %v", err)
		}
		if got := top("zqnewmark"); got != "ops/new.md" {
			t.Errorf("after the retried upsert, search finds %q", got)
		}
	})

	// The server goes away in the middle of a sync, after its first batch was applied.
	t.Run("a sync cut short by an outage fails and a re-sync repairs the index", func(t *testing.T) {
		gen, docs := generation()
		folder := readTree(t, filepath.Join(root, kbID))
		srv.DownAfterTasks(1, meilitest.Refused)
		c, cancel := call()
		_, err := know.SyncTree(c, &quarryv1.SyncTreeRequest{KnowledgeBase: kbID, Source: kbID})
		cancel()
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("sync during an outage = %v, want UNAVAILABLE", err)
		}
		if g, d := generation(); g != gen || d != docs {
			t.Errorf("after a failed sync: generation %d, %d documents; want %d, %d", g, d, gen, docs)
		}
		if got := readTree(t, filepath.Join(root, kbID)); !mapsEqualStr(got, folder) {
			t.Errorf("a failed sync changed the folder")
		}
		// Part of the sync reached the index before the outage; the service rebuilds the
		// index from the folder on its own once Meilisearch is back.
		srv.Up()
		waitFor(t, "the index to be rebuilt from the folder", func() bool { return indexHolds(srv.Documents("quarry_"+kbID), folder) })
		indexEqualsTree(want)
		c, cancel = call()
		r, err := know.SyncTree(c, &quarryv1.SyncTreeRequest{KnowledgeBase: kbID, Source: kbID})
		cancel()
		if err != nil {
			t.Fatalf("re-sync after the outage: %v", err)
		}
		if g, _ := generation(); g <= gen {
			t.Errorf("the re-sync left generation %d, want above %d", g, gen)
		}
		var removed []string
		for _, f := range r.Files {
			if f.Outcome == quarryv1.FileOutcome_FILE_OUTCOME_REMOVED {
				removed = append(removed, f.Path)
			}
		}
		if !slices.Equal(removed, []string{"ops/new.md"}) {
			t.Errorf("the re-sync removed %v, want [ops/new.md]", removed)
		}
		for p := range want {
			want[p] = 1
		}
		indexEqualsTree(want)
	})
}

// indexHolds reports whether the Meilisearch documents are the folder's files, each
// with the marker the folder's version holds.
func indexHolds(docs []map[string]any, folder map[string]string) bool {
	if len(docs) != len(folder) {
		return false
	}
	for _, d := range docs {
		body, ok := folder[d["path"].(string)]
		if !ok {
			return false
		}
		content, _ := d["content"].(string)
		for _, w := range text.Words(body) {
			if strings.HasSuffix(w, "alpha") || strings.HasSuffix(w, "bravo") {
				if !strings.Contains(content, text.Stem(w)) {
					return false
				}
			}
		}
	}
	return true
}

func fileNumber(t *testing.T, p string) int {
	t.Helper()
	var i int
	if _, err := fmt.Sscanf(p, "ops/note%d.md", &i); err != nil {
		t.Fatalf("%s: %v", p, err)
	}
	return i
}

func writeTree(t *testing.T, dir string, files map[string]string) {
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

// readTree returns the markdown files under dir by slash path.
func readTree(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".md") {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		out[filepath.ToSlash(rel)] = string(b)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func mapsEqualStr(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// waitFor polls cond until it holds or 10 s pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}
