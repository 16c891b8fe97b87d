package tree

import (
	"context"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

func TestCheckFilePath(t *testing.T) {
	tests := []struct {
		in, want string
		err      error
	}{
		{"ops/pager.md", "ops/pager.md", nil},
		{"./ops//pager.md", "ops/pager.md", nil},
		{"ops/_archived/pager.stub.md", "ops/_archived/pager.stub.md", nil},
		{"../x.md", "", ErrOutsideTree},
		{"/etc/x.md", "", ErrOutsideTree},
		{"ops/../../x.md", "", ErrOutsideTree},
		{`ops\x.md`, "", ErrInvalidPath},
		{"ops/x.txt", "", ErrNotKnowledgeFile},
		{".md", "", ErrNotKnowledgeFile},
		{"ops/.hidden.md", "", ErrNotKnowledgeFile},
		{".git/x.md", "", ErrNotKnowledgeFile},
		{"", "", ErrNotKnowledgeFile},
	}
	for _, tt := range tests {
		got, err := CheckFilePath(tt.in, DefaultConfig())
		if !errors.Is(err, tt.err) || got != tt.want {
			t.Errorf("CheckFilePath(%q) = %q, %v; want %q, %v", tt.in, got, err, tt.want, tt.err)
		}
	}
	deep := DefaultConfig()
	deep.MaxDepth = 2
	if _, err := CheckFilePath("a/b/c/x.md", deep); !errors.Is(err, ErrNotKnowledgeFile) {
		t.Errorf("a path deeper than MaxDepth = %v, want ErrNotKnowledgeFile", err)
	}
}

func TestArchiveAndRestorePathsRoundTrip(t *testing.T) {
	for _, p := range []string{"ops/pager.md", "pager.md", "a/b/c.md"} {
		stub, orig := ArchivePaths(p)
		if !IsStub(stub) || !IsArchivedOriginal(orig) || IsArchivedOriginal(stub) || IsStub(orig) {
			t.Errorf("ArchivePaths(%q) = %q, %q: wrong kinds", p, stub, orig)
		}
		for _, q := range []string{stub, orig} {
			if back, ok := RestorePath(q); !ok || back != p {
				t.Errorf("RestorePath(%q) = %q, %v; want %q", q, back, ok, p)
			}
		}
	}
	if _, ok := RestorePath("ops/pager.md"); ok {
		t.Error("RestorePath of a plain file succeeded")
	}
}

func TestDirRefusesSymlinksAndWritesAtomically(t *testing.T) {
	root, outside := t.TempDir(), t.TempDir()
	if err := os.Symlink(outside, filepath.Join(root, "out")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(outside, "f.md"), filepath.Join(root, "f.md")); err != nil {
		t.Fatal(err)
	}
	d, err := OpenDir(root)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for _, p := range []string{"out/x.md", "f.md"} {
		if _, err := d.Write(p, []byte("x")); !errors.Is(err, ErrSymlink) {
			t.Errorf("Write(%s) = %v, want ErrSymlink", p, err)
		}
		if err := d.Remove(p); !errors.Is(err, ErrSymlink) {
			t.Errorf("Remove(%s) = %v, want ErrSymlink", p, err)
		}
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Errorf("a write went through a link: %v", entries)
	}
	mtime, err := d.Write("a/b/new.md", []byte("# New\n"))
	if err != nil || mtime.IsZero() {
		t.Fatalf("Write = %v, %v", mtime, err)
	}
	data, ok, err := d.Read("a/b/new.md", 1<<20)
	if err != nil || !ok || string(data) != "# New\n" {
		t.Errorf("Read = %q, %v, %v", data, ok, err)
	}
	entries, _ := os.ReadDir(filepath.Join(root, "a", "b"))
	if len(entries) != 1 {
		t.Errorf("folder holds %d entries after a write, want the file alone (no temporary left)", len(entries))
	}
	if err := d.Remove("a/b/new.md"); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := d.Read("a/b/new.md", 1<<20); ok {
		t.Error("file still there after Remove")
	}
	if err := d.Remove("a/b/new.md"); err != nil {
		t.Errorf("removing a missing file = %v, want nil", err)
	}
}

func TestWithReplacesAddsAndRemovesDocuments(t *testing.T) {
	base := New("root", []*Document{{Path: "a/x.md", Title: "x"}, {Path: "a/y.md", Title: "y"}, {Path: "b/z.md", Title: "z"}})
	base.Skipped = []Skip{{Path: "a/w.md", Reason: "bad"}, {Path: "c/v.md", Reason: "bad"}}
	next := base.With([]*Document{{Path: "a/x.md", Title: "x2"}, {Path: "a/w.md", Title: "w"}}, []string{"b/z.md"})
	var got []string
	for _, d := range next.Docs {
		got = append(got, d.Path+"="+d.Title)
	}
	if want := []string{"a/w.md=w", "a/x.md=x2", "a/y.md=y"}; !slices.Equal(got, want) {
		t.Errorf("docs = %v, want %v", got, want)
	}
	if len(next.Skipped) != 1 || next.Skipped[0].Path != "c/v.md" {
		t.Errorf("skipped = %v, want only c/v.md (a/w.md is now loaded)", next.Skipped)
	}
	if !slices.Equal(next.Domains(), []string{"a"}) {
		t.Errorf("domains = %v, want [a]", next.Domains())
	}
	if len(base.Docs) != 3 || base.ByPath["a/x.md"].Title != "x" {
		t.Error("With changed the tree it was called on")
	}
}

// TestWithCountsRefusedFilesAsLoadDoes: a file the watcher finds in the folder and the
// loader refuses is counted toward MaxFiles, as Load counts it, until it is deleted or
// loaded after all.
func TestWithCountsRefusedFilesAsLoadDoes(t *testing.T) {
	base := New("root", []*Document{{Path: "a/x.md", Title: "x"}})
	next := base.With(nil, nil, "a/bad.md", "a/x.md") // an indexed file is no refused one
	if got := next.Refused(); !slices.Equal(got, []string{"a/bad.md"}) || next.Files() != 2 || !next.Counts("a/bad.md") {
		t.Errorf("refused %v, files %d; want [a/bad.md], 2", got, next.Files())
	}
	if base.Files() != 1 {
		t.Error("With changed the tree it was called on")
	}
	if gone := next.With(nil, []string{"a/bad.md"}); gone.Files() != 1 || gone.Counts("a/bad.md") {
		t.Errorf("after deleting it: files %d, refused %v; want 1, []", gone.Files(), gone.Refused())
	}
	if fixed := next.With([]*Document{{Path: "a/bad.md", Title: "fixed"}}, nil); fixed.Files() != 2 || len(fixed.Refused()) != 0 {
		t.Errorf("after loading it: files %d, refused %v; want 2, []", fixed.Files(), fixed.Refused())
	}
}

func TestParseFileHashesTheBytesAndRejectsWhatLoadSkips(t *testing.T) {
	d, err := ParseFile("root", "a.md", []byte("# A\n"), time.Unix(0, 0), DefaultConfig())
	if err != nil || d.Hash == "" || d.Title != "A" {
		t.Fatalf("ParseFile = %+v, %v", d, err)
	}
	small := DefaultConfig()
	small.MaxFileBytes, small.MaxFrontMatterBytes = 10, 5
	for _, data := range []string{"# far too long a file\n", "# x\xff\n"} {
		cfg := DefaultConfig()
		if len(data) > 10 {
			cfg = small
		}
		if _, err := ParseFile("root", "a.md", []byte(data), time.Unix(0, 0), cfg); !errors.Is(err, ErrRejected) {
			t.Errorf("ParseFile(%q) = %v, want ErrRejected", data, err)
		}
	}
}

// Dir.ReadFiles reads a folder the watcher saw change through the tree's root, one folder
// at a time: a folder that is a link, or below one, to outside the tree or inside it, is
// refused, as Load never follows a link.
func TestDirReadFilesNeverGoesThroughALink(t *testing.T) {
	root, outside := t.TempDir(), t.TempDir()
	for _, p := range []string{filepath.Join(root, "d", "sub", "x.md"), filepath.Join(root, "ops", "y.md"), filepath.Join(outside, "secret.md")} {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("# X\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(outside, filepath.Join(root, "out")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(root, "ops"), filepath.Join(root, "in")); err != nil {
		t.Fatal(err)
	}
	d, err := OpenDir(root)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	files, _, err := d.ReadFiles(t.Context(), "d", DefaultConfig())
	if err != nil || len(files) != 1 || files[0].Path != "sub/x.md" {
		t.Fatalf("ReadFiles(d) = %v, %v; want sub/x.md alone", files, err)
	}
	for _, p := range []string{"out", "in", "out/sub"} {
		if files, _, err := d.ReadFiles(t.Context(), p, DefaultConfig()); !errors.Is(err, ErrSymlink) {
			t.Errorf("ReadFiles(%s) = %v, %v; want ErrSymlink", p, files, err)
		}
	}
	if _, _, err := d.ReadFiles(t.Context(), "ops/y.md", DefaultConfig()); !errors.Is(err, ErrNotKnowledgeFile) {
		t.Errorf("ReadFiles of a file = %v, want ErrNotKnowledgeFile", err)
	}
	if _, _, err := d.ReadFiles(t.Context(), "gone", DefaultConfig()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("ReadFiles of a missing folder = %v, want os.ErrNotExist", err)
	}
}

// ReadFilesBeneath reads a sync source under the sync root: links on the way may be
// followed while they stay beneath it (operators point "current" at a release), never
// out of it.
func TestReadFilesBeneathStaysBeneath(t *testing.T) {
	base, outside := t.TempDir(), t.TempDir()
	for _, p := range []string{filepath.Join(base, "release-2", "x.md"), filepath.Join(outside, "secret.md")} {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("# X\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("release-2", filepath.Join(base, "current")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(base, "out")); err != nil {
		t.Fatal(err)
	}
	for _, rel := range []string{"release-2", "current"} {
		files, _, err := ReadFilesBeneath(t.Context(), base, rel, DefaultConfig())
		if err != nil || len(files) != 1 || files[0].Path != "x.md" {
			t.Errorf("ReadFilesBeneath(%s) = %v, %v; want x.md alone", rel, files, err)
		}
	}
	if files, _, err := ReadFilesBeneath(t.Context(), base, "out", DefaultConfig()); err == nil {
		t.Errorf("ReadFilesBeneath through a link out of the base = %v, want an error", files)
	}
}

// A single-file write acknowledges the file under its name, so every folder entry on the
// way must be durable: the file's folder (its name) and, for folders the write made, the
// folder that holds each (their names). Syncing the file's folder alone left a new
// folder's own name to chance: after a crash the acknowledged file was gone with it.
func TestWriteSyncsTheFoldersItMakes(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "a"), 0o755); err != nil {
		t.Fatal(err)
	}
	d, synced := openRecordingSyncs(t, root)
	if _, err := d.Write("a/b/c/x.md", []byte("# X\n")); err != nil {
		t.Fatal(err)
	}
	slices.Sort(*synced)
	if want := []string{"a", "a/b", "a/b/c"}; !slices.Equal(*synced, want) {
		t.Errorf("a write that made a/b and a/b/c synced %q, want %q", *synced, want)
	}
	*synced = nil
	if _, err := d.Write("a/b/c/y.md", []byte("# Y\n")); err != nil {
		t.Fatal(err)
	}
	if want := []string{"a/b/c"}; !slices.Equal(*synced, want) {
		t.Errorf("a write into an existing folder synced %q, want %q", *synced, want)
	}
}

// openRecordingSyncs opens root for writing and records each folder it syncs.
func openRecordingSyncs(t *testing.T, root string) (*Dir, *[]string) {
	t.Helper()
	d, err := OpenDir(root)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	synced := new([]string)
	d.onSync = func(folder string) { *synced = append(*synced, folder) }
	return d, synced
}

// Removing a file that is not there changes nothing and has nothing to make durable,
// even when its folder is gone too: an undo removes files a failed write may never
// have made, and a folder sync failing there reported a failed undo.
func TestRemoveOfAMissingFileChangesNothing(t *testing.T) {
	d, synced := openRecordingSyncs(t, t.TempDir())
	for _, p := range []string{"gone.md", "no/such/folder/gone.md"} {
		if err := d.Remove(p); err != nil {
			t.Errorf("Remove(%q) of a missing file: %v, want nil", p, err)
		}
	}
	if len(*synced) != 0 {
		t.Errorf("removing missing files synced %q, want nothing", *synced)
	}
}

// TestSkipsSayWhichFilesLoadCounts: a markdown file listed and then refused (here, too
// large) counts toward MaxFiles; a link, never read, does not. The watcher reads a new
// folder with ReadFiles and counts what Load would.
func TestSkipsSayWhichFilesLoadCounts(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "big.md"), make([]byte, 64), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "ok.md"), []byte("# ok\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("ok.md", filepath.Join(dir, "link.md")); err != nil {
		t.Skipf("no symbolic links here: %v", err)
	}
	cfg := DefaultConfig()
	cfg.MaxFileBytes, cfg.MaxFrontMatterBytes = 32, 16
	tr, err := Load(context.Background(), dir, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, skips, err := ReadFiles(context.Background(), dir, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, got := range [][]Skip{tr.Skipped, skips} {
		refused := map[string]bool{}
		for _, s := range got {
			refused[s.Path] = s.Refused
		}
		if want := map[string]bool{"big.md": true, "link.md": false}; !maps.Equal(refused, want) {
			t.Errorf("skips %+v, want big.md refused and link.md not", got)
		}
	}
}
