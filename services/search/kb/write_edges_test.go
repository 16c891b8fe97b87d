package kb_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	quarryv1 "github.com/quarry-router/quarry/gen/quarry/v1"
	"github.com/quarry-router/quarry/services/search/kb"
	"github.com/quarry-router/quarry/services/search/server"
)

// TestEmptyFileIsWritten: gRPC delivers an empty file's bytes as nil (proto3 does not
// send empty bytes), so nil content must write an empty file, never remove one: the
// index would hold a document the folder, and so the next restart, does not.
func TestEmptyFileIsWritten(t *testing.T) {
	reg := newRegistry(t, defaultConfig(t))
	root := writeTree(t, smallTree)
	load(t, reg, "team", root)
	ctx := context.Background()

	wire, err := proto.Marshal(&quarryv1.UpsertFileRequest{KnowledgeBase: "team", Path: "ops/new.md", Content: []byte{}})
	if err != nil {
		t.Fatal(err)
	}
	var req quarryv1.UpsertFileRequest
	if err := proto.Unmarshal(wire, &req); err != nil {
		t.Fatal(err)
	}
	if req.GetContent() != nil {
		t.Fatalf("content after the wire = %#v: the test no longer shows what gRPC delivers", req.GetContent())
	}
	if _, err := server.NewKnowledge(reg, slog.New(slog.DiscardHandler)).UpsertFile(ctx, &req); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.UpsertFile(ctx, "team", "ops/pager.md", nil); err != nil { // an existing file emptied
		t.Fatal(err)
	}
	if _, err := reg.SyncFiles(ctx, "team", []kb.Upload{{Path: "ops/blank.md"}}, true); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"ops/new.md", "ops/pager.md", "ops/blank.md"} {
		if data, err := os.ReadFile(filepath.Join(root, p)); err != nil || len(data) != 0 {
			t.Errorf("%s in the folder: %q, %v; want an empty file", p, data, err)
		}
	}
	k := load(t, newRegistry(t, defaultConfig(t)), "team", root)
	for _, p := range []string{"ops/new.md", "ops/pager.md", "ops/blank.md"} {
		if _, ok := k.Tree.ByPath[p]; !ok {
			t.Errorf("a restart does not find %s", p)
		}
	}
}

// TestUpsertWritesWhatTheFolderLacks: after an edit the watcher refused (bad front
// matter), the index keeps the old version and the folder the broken bytes. Uploading
// the indexed bytes again, the obvious mend, must write them: the folder is what a
// restart loads.
func TestUpsertWritesWhatTheFolderLacks(t *testing.T) {
	cfg := defaultConfig(t)
	cfg.Write.WatchDebounce = 20 * time.Millisecond
	reg := newRegistry(t, cfg)
	root := writeTree(t, smallTree)
	load(t, reg, "team", root)
	watch(t, reg)
	ch, stop := reg.Watch()
	defer stop()
	recv(t, ch)

	writeFile(t, root, "ops/pager.md", "---\ntitle: [unclosed\n---\n# Broken\n")
	writeFile(t, root, "ops/marker.md", "# Marker\n\nWritten after the broken edit.\n")
	for deadline := time.Now().Add(wait); ; {
		recv(t, ch)
		if k, _ := reg.Get("team"); k.Tree.ByPath["ops/marker.md"] != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the watcher never applied the marker")
		}
	}
	if k, _ := reg.Get("team"); k.Tree.ByPath["ops/pager.md"] == nil {
		t.Fatal("the watcher dropped ops/pager.md: the test needs it kept at its indexed version")
	}

	res, err := reg.UpsertFile(context.Background(), "team", "ops/pager.md", []byte(smallTree["ops/pager.md"]))
	if err != nil {
		t.Fatal(err)
	}
	if res.Count(kb.Indexed) != 1 {
		t.Errorf("files = %+v, want ops/pager.md indexed (written)", res.Files)
	}
	if got, _ := os.ReadFile(filepath.Join(root, "ops", "pager.md")); string(got) != smallTree["ops/pager.md"] {
		t.Errorf("the folder holds %q, want the uploaded bytes", got)
	}
	// The same bytes once more: now the folder holds them too.
	res, err = reg.UpsertFile(context.Background(), "team", "ops/pager.md", []byte(smallTree["ops/pager.md"]))
	if err != nil {
		t.Fatal(err)
	}
	if res.Count(kb.Unchanged) != 1 || res.Changed {
		t.Errorf("files = %+v, changed %v; want unchanged", res.Files, res.Changed)
	}
}

// TestArchiveRefusesWhatTheLoaderCannotReadBack: archiving must leave the folder as the
// write's snapshot says, or a restart disagrees with it. A name ending in .stub.md
// would keep its full text where the loader takes it for a ghost cue (searched at full
// weight), and a file at the deepest level would get its cue a level deeper than the
// loader walks (gone after a restart). Both are refused and change nothing.
func TestArchiveRefusesWhatTheLoaderCannotReadBack(t *testing.T) {
	tests := []struct {
		name     string
		maxDepth int
		files    map[string]string
		archive  string
	}{
		{"a name ending in .stub.md", 0, map[string]string{
			"ops/_index.md":      "# Ops\n",
			"ops/legacy.stub.md": "# Legacy\n\nThe zebrafish cluster hosted the legacy batch jobs.\n",
		}, "ops/legacy.stub.md"},
		{"a file at the deepest level", 2, map[string]string{
			"a/_index.md": "# A\n",
			"a/b/deep.md": "# Deep\n\nThe okapi service runs in the basement.\n",
		}, "a/b/deep.md"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := defaultConfig(t)
			if tt.maxDepth > 0 {
				cfg.Tree.MaxDepth = tt.maxDepth
			}
			reg := newRegistry(t, cfg)
			root := writeTree(t, tt.files)
			before := load(t, reg, "team", root)
			_, err := reg.ArchiveFile(context.Background(), "team", tt.archive)
			if !errors.Is(err, kb.ErrNotArchivable) {
				t.Fatalf("ArchiveFile = %v, want ErrNotArchivable", err)
			}
			if got := folderFiles(t, root); !slices.Equal(got, sortedKeys(tt.files)) {
				t.Errorf("the folder holds %v after a refused archive, want %v", got, sortedKeys(tt.files))
			}
			if k, _ := reg.Get("team"); k.Generation != before.Generation {
				t.Errorf("generation %d → %d after a refused archive", before.Generation, k.Generation)
			}
		})
	}
}

// A name ending in .stub.md is never archived (ArchiveFile refuses it), so restoring or
// reading it finds nothing. It used to name the ghost cue of the file without ".stub":
// RestoreFile("ops/pager.stub.md") wrote that cue as a live document, deleted it, and
// orphaned ops/pager.md's archived full text.
func TestAStubNameIsNotAnArchivedFile(t *testing.T) {
	ctx := context.Background()
	reg := newRegistry(t, defaultConfig(t))
	root := writeTree(t, map[string]string{
		"ops/_index.md": "# Ops\n",
		"ops/pager.md":  "# Pager\n\nThe pager rotates weekly.\n",
	})
	load(t, reg, "team", root)
	if _, err := reg.ArchiveFile(ctx, "team", "ops/pager.md"); err != nil {
		t.Fatal(err)
	}
	archived := folderFiles(t, root)
	before, err := reg.Get("team")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"ops/pager.stub.md", "ops/_archived/pager.stub.stub.md"} {
		if _, err := reg.RestoreFile(ctx, "team", p); !errors.Is(err, kb.ErrNotArchived) {
			t.Errorf("RestoreFile(%s) = %v, want ErrNotArchived", p, err)
		}
		if _, _, _, err := reg.ReadArchivedFile(ctx, "team", p); !errors.Is(err, kb.ErrNotArchived) {
			t.Errorf("ReadArchivedFile(%s) = %v, want ErrNotArchived", p, err)
		}
	}
	if got := folderFiles(t, root); !slices.Equal(got, archived) {
		t.Errorf("the folder holds %v after refused restores, want %v", got, archived)
	}
	if k, _ := reg.Get("team"); k.Generation != before.Generation {
		t.Errorf("generation %d → %d after refused restores", before.Generation, k.Generation)
	}
	// The archived file itself still comes back, by either name.
	if _, err := reg.RestoreFile(ctx, "team", "ops/_archived/pager.stub.md"); err != nil {
		t.Fatalf("RestoreFile by the cue's path: %v", err)
	}
}

// TestArchiveKeepsManyTags: a ghost cue carries its file's tags. Written as a YAML block
// list they take about twice the bytes of a comma-separated tag line, and a file within
// the front-matter limit got a cue over it: its archive was refused as a bad file.
func TestArchiveKeepsManyTags(t *testing.T) {
	reg := newRegistry(t, defaultConfig(t))
	tags := make([]string, 7000)
	for i := range tags {
		tags[i] = fmt.Sprintf("t%d", i)
	}
	root := writeTree(t, map[string]string{"ops/tagged.md": "---\ntags: " + strings.Join(tags, ",") + "\n---\n# Tagged\n\nA file with many tags.\n"})
	if k := load(t, reg, "team", root); k.Tree.ByPath["ops/tagged.md"] == nil {
		t.Fatalf("the loader refused the file: %v", k.Tree.Skipped)
	}
	a, err := reg.ArchiveFile(context.Background(), "team", "ops/tagged.md")
	if err != nil {
		t.Fatal(err)
	}
	cue := a.KB.Tree.ByPath[a.StubPath]
	if cue == nil || !slices.Equal(cue.Tags, tags) {
		t.Fatalf("the ghost cue %s does not carry the file's %d tags", a.StubPath, len(tags))
	}
}

// TestRefusedSyncLeavesNoFolderBehind: a refused write changes nothing, folders
// included. A sync of a file x.md and a file under a folder x.md fails; the folder it
// had made stayed, empty, and refused every later write of the file x.md.
func TestRefusedSyncLeavesNoFolderBehind(t *testing.T) {
	reg := newRegistry(t, defaultConfig(t))
	root := writeTree(t, smallTree)
	load(t, reg, "team", root)
	ctx := context.Background()
	if _, err := reg.SyncFiles(ctx, "team", []kb.Upload{
		{Path: "x.md/y.md", Data: []byte("# Y\n")},
		{Path: "x.md", Data: []byte("# X\n")},
	}, true); err == nil {
		t.Fatal("a sync of a file and a folder of the same name succeeded")
	}
	if got := folderFiles(t, root); !slices.Equal(got, sortedKeys(smallTree)) {
		t.Errorf("the folder holds %v after a refused sync, want %v", got, sortedKeys(smallTree))
	}
	if _, err := reg.UpsertFile(ctx, "team", "x.md", []byte("# X\n")); err != nil {
		t.Errorf("upsert of x.md after the refused sync: %v", err)
	}
}

// TestOverlongNameIsInvalidArgument: a name longer than the file system allows is bad
// input. The file system's ENAMETOOLONG reached the caller as Internal.
func TestOverlongNameIsInvalidArgument(t *testing.T) {
	reg := newRegistry(t, defaultConfig(t))
	load(t, reg, "team", writeTree(t, smallTree))
	srv := server.NewKnowledge(reg, slog.New(slog.DiscardHandler))
	_, err := srv.UpsertFile(context.Background(), &quarryv1.UpsertFileRequest{
		KnowledgeBase: "team", Path: "ops/" + strings.Repeat("x", 300) + ".md", Content: []byte("# X\n"),
	})
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("UpsertFile with a 300-byte name: %v, want InvalidArgument", err)
	}
}

// TestReadingAnArchiveCreatesNothing: a read of an archived file whose knowledge base's
// folder was removed is NOT_FOUND, and leaves no folder behind (it made the folder
// again).
func TestReadingAnArchiveCreatesNothing(t *testing.T) {
	reg := newRegistry(t, defaultConfig(t))
	root := writeTree(t, smallTree)
	load(t, reg, "team", root)
	a, err := reg.ArchiveFile(context.Background(), "team", "ops/pager.md")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(root); err != nil {
		t.Fatal(err)
	}
	_, err = server.NewKnowledge(reg, slog.New(slog.DiscardHandler)).ReadArchivedFile(context.Background(),
		&quarryv1.ReadArchivedFileRequest{KnowledgeBase: "team", Path: a.ArchivedPath})
	if status.Code(err) != codes.NotFound {
		t.Errorf("ReadArchivedFile with the folder gone: %v, want NotFound", err)
	}
	if _, err := os.Lstat(root); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the read made the removed folder again: %v", err)
	}
}

// folderFiles lists every entry under root, folders as "name/", sorted.
func folderFiles(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil || p == root {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if d.IsDir() {
			rel += "/"
		}
		out = append(out, filepath.ToSlash(rel))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

// sortedKeys lists files' paths and their folders as folderFiles does.
func sortedKeys(files map[string]string) []string {
	seen := map[string]bool{}
	for p := range files {
		seen[p] = true
		for d := filepath.Dir(p); d != "."; d = filepath.Dir(d) {
			seen[filepath.ToSlash(d)+"/"] = true
		}
	}
	out := make([]string, 0, len(seen))
	for p := range seen {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

// TestUndoneFirstSyncLeavesNoFolder: a first sync creates its knowledge base's folder
// under -kb-root, and one that fails once files are written is undone. The folders
// it made inside the knowledge base went, but the knowledge base's own folder stayed,
// empty: the refused knowledge base came back, empty, at the next start (-kb-root
// serves every folder under it).
func TestUndoneFirstSyncLeavesNoFolder(t *testing.T) {
	cfg := defaultConfig(t)
	cfg.Write.NewRoot = t.TempDir()
	reg := newRegistry(t, cfg)
	if _, err := reg.SyncFiles(context.Background(), "fresh", []kb.Upload{
		{Path: "x.md/y.md", Data: []byte("# Y\n")},
		{Path: "x.md", Data: []byte("# X\n")},
	}, false); err == nil {
		t.Fatal("a first sync of a file and a folder of the same name succeeded")
	}
	if _, err := reg.Get("fresh"); !errors.Is(err, kb.ErrUnknownKB) {
		t.Errorf("the undone first sync created the knowledge base: %v", err)
	}
	if _, err := os.Stat(filepath.Join(cfg.Write.NewRoot, "fresh")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the undone first sync left its folder: %v", err)
	}
}

// TestAFirstSyncWhoseFilesAreAllRejectedSaysWhy: the files' reasons were lost and the
// caller read only "unknown knowledge base "badkb" (nothing to create it from)", where
// a sync into an existing KB lists each rejected file with its reason.
func TestAFirstSyncWhoseFilesAreAllRejectedSaysWhy(t *testing.T) {
	cfg := defaultConfig(t)
	cfg.Write.NewRoot = t.TempDir()
	reg := newRegistry(t, cfg)
	_, err := reg.SyncFiles(context.Background(), "badkb", []kb.Upload{
		{Path: "a.md", Data: []byte("---\nimportance: 500\n---\n# A\n")},
		{Path: "b.md", Data: []byte("---\ntags: [unclosed\n---\n# B\n")},
	}, false)
	if !errors.Is(err, kb.ErrUnknownKB) || !strings.Contains(err.Error(), "a.md") || !strings.Contains(err.Error(), "importance") || !strings.Contains(err.Error(), "b.md") {
		t.Fatalf("SyncFiles of two rejected files into a new KB = %v, want ErrUnknownKB naming each file and why", err)
	}
	if _, err := reg.Get("badkb"); !errors.Is(err, kb.ErrUnknownKB) {
		t.Errorf("the refused first sync created the knowledge base: %v", err)
	}
}
