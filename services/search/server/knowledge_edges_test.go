package server

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	quarryv1 "github.com/quarry-router/quarry/gen/quarry/v1"
	"github.com/quarry-router/quarry/services/search/kb"
)

// TestRefusedArchivedOriginalsChangeNothing: the full text kept beside a ghost cue
// (<folder>/_archived/<name>.md) is read back by ReadArchivedFile and RestoreFile with the
// loader's rules, but an upload to such a path was written without them: binary bytes,
// invalid UTF-8 or hostile front matter went into the folder as INDEXED, and the file
// could then be neither read nor restored.
func TestRefusedArchivedOriginalsChangeNothing(t *testing.T) {
	f := startWrite(t, nil)
	aliasBomb := "---\na: &a [x, x, x]\nb: &b [*a, *a, *a]\n---\n# Bomb\n"
	tests := []struct{ name, content string }{
		{"invalid UTF-8", "# Bad\n\n\xff\xfe\n"},
		{"NUL bytes", "# Nul\n\x00\n"},
		{"a YAML alias bomb", aliasBomb},
		{"unclosed front matter", "---\ntitle: x\n# never closed\n"},
		{"an importance out of range", "---\nimportance: 500\n---\n# x\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := f.state(t, team)
			_, err := f.know.UpsertFile(callCtx(t), &quarryv1.UpsertFileRequest{KnowledgeBase: team, Path: "ops/_archived/kept.md", Content: []byte(tt.content)})
			if status.Code(err) != codes.InvalidArgument || status.Convert(err).Message() == "" {
				t.Fatalf("UpsertFile of an archived original = %v, want INVALID_ARGUMENT with a reason", err)
			}
			assertUnchanged(t, before, f.state(t, team))

			resp, err := syncFiles(callCtx(t), f.know, team, true, [2]string{"ops/_archived/kept.md", tt.content})
			if err != nil {
				t.Fatal(err)
			}
			if fr := resp.GetFiles(); len(fr) != 1 || fr[0].GetOutcome() != quarryv1.FileOutcome_FILE_OUTCOME_REJECTED || fr[0].GetReason() == "" {
				t.Errorf("SyncFiles of an archived original: %v, want REJECTED with a reason", fr)
			}
			assertUnchanged(t, before, f.state(t, team))
		})
	}

	// A valid one is kept, readable and restorable, as before.
	ok := "# Kept\n\nThe full text of an archived runbook.\n"
	if r := f.upsert(t, team, "ops/_archived/kept.md", ok); r.GetFile().GetOutcome() != quarryv1.FileOutcome_FILE_OUTCOME_INDEXED {
		t.Fatalf("upsert of a valid archived original: %v", r.GetFile())
	}
	got, err := f.know.ReadArchivedFile(callCtx(t), &quarryv1.ReadArchivedFileRequest{KnowledgeBase: team, Path: "ops/kept.md"})
	if err != nil || !strings.Contains(got.GetDocument().GetContent(), "full text of an archived runbook") {
		t.Fatalf("ReadArchivedFile = %v, %v", got, err)
	}
}

// TestSyncTreeReportsFilesWithNonUTF8Names: a file system allows names that are not
// UTF-8, which no tree path may hold; such a file is one REJECTED result, and the rest
// of the folder is synced. The result carried the raw name in a proto string field, the
// response could not be marshalled, and the whole sync failed with INTERNAL.
func TestSyncTreeReportsFilesWithNonUTF8Names(t *testing.T) {
	f := startWrite(t, nil)
	src := filepath.Join(f.syncRoot, "src")
	writeFiles(t, src, map[string]string{"ops/fine.md": "# Fine\n\nA perfectly good file.\n"})
	if err := os.WriteFile(filepath.Join(src, "ops", "caf\xe9.md"), []byte("# Cafe\n"), 0o644); err != nil {
		t.Skipf("this file system refuses a name that is not UTF-8: %v", err)
	}
	resp, err := f.know.SyncTree(callCtx(t), &quarryv1.SyncTreeRequest{KnowledgeBase: team, Source: "src", KeepMissing: true})
	if err != nil {
		t.Fatalf("SyncTree of a folder holding a name that is not UTF-8: %v", err)
	}
	var rejected int
	for _, fr := range resp.GetFiles() {
		if !utf8.ValidString(fr.GetPath()) {
			t.Errorf("result path %q is not UTF-8", fr.GetPath())
		}
		if fr.GetOutcome() == quarryv1.FileOutcome_FILE_OUTCOME_REJECTED {
			rejected++
			if !strings.Contains(fr.GetReason(), "UTF-8") {
				t.Errorf("rejected %q for %q, want the reason to say UTF-8", fr.GetPath(), fr.GetReason())
			}
		}
	}
	if s := resp.GetSummary(); rejected != 1 || s.GetIndexed() != 1 {
		t.Errorf("summary %v with %d rejected, want ops/fine.md indexed and the other file rejected", s, rejected)
	}
	if got := f.searchPaths(t, team, "perfectly good file"); !slices.Contains(got, "ops/fine.md") {
		t.Errorf("search finds %v, want ops/fine.md", got)
	}
}

// TestSyncFilesBoundsPathsToo: a SyncFiles stream is held in memory until it ends, so its
// size is bounded; only the contents were counted, and a stream of empty files with
// paths as long as a message allows grew without bound.
func TestSyncFilesBoundsPathsToo(t *testing.T) {
	old := maxSyncBytes
	maxSyncBytes = 64 << 10
	t.Cleanup(func() { maxSyncBytes = old })
	f := startWrite(t, nil)
	before := f.state(t, team)
	long := "ops/" + strings.Repeat("x/", 8<<10) + "f.md" // 16 KiB, refused later, but held first
	var files [][2]string
	for i := range 8 {
		files = append(files, [2]string{fmt.Sprintf("%s%d", long, i), ""})
	}
	_, err := syncFiles(callCtx(t), f.know, team, true, files...)
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("SyncFiles of 128 KiB of paths over a 64 KiB bound = %v, want RESOURCE_EXHAUSTED", err)
	}
	assertUnchanged(t, before, f.state(t, team))
}

// TestSyncFilesBoundsTheNumberOfFilesToo: each file of a stream is held in memory until
// it ends, at a cost of its own (its path and bytes, and what the server keeps per file,
// about a hundred bytes more), while the bound counted only the path and the bytes. A
// stream of empty files with one-byte paths, a few bytes each on the wire, grew the
// server's memory about forty times faster than the bound counted before it answered
// RESOURCE_EXHAUSTED, if it did at all.
func TestSyncFilesBoundsTheNumberOfFilesToo(t *testing.T) {
	old := maxSyncBytes
	maxSyncBytes = 64 << 10
	t.Cleanup(func() { maxSyncBytes = old })
	f := startWrite(t, nil)
	before := f.state(t, team)
	files := make([][2]string, 4096) // 4 KiB of paths, far more files than 64 KiB holds
	for i := range files {
		files[i] = [2]string{"x", ""}
	}
	_, err := syncFiles(callCtx(t), f.know, team, true, files...)
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("SyncFiles of %d empty files over a 64 KiB bound = %v, want RESOURCE_EXHAUSTED", len(files), err)
	}
	assertUnchanged(t, before, f.state(t, team))
}

// TestDeleteFileRemovesAFileTheLoaderRefused: a file in the folder that the loader
// refused (here, front matter out of range) counts toward -kb-max-files and sits on the
// volume, but DeleteFile answered NOT_FOUND, so only someone with access to the disk
// could take it away. It is now deleted like any other file.
func TestDeleteFileRemovesAFileTheLoaderRefused(t *testing.T) {
	f := startWrite(t, func(_ *kb.Config, f *writeFixture) {
		writeFiles(t, filepath.Join(f.root, team), map[string]string{"ops/broken.md": "---\nimportance: 500\n---\n# Broken\n"})
	})
	resp, err := f.know.DeleteFile(callCtx(t), &quarryv1.DeleteFileRequest{KnowledgeBase: team, Path: "ops/broken.md"})
	if err != nil {
		t.Fatalf("DeleteFile of a file the loader refused: %v", err)
	}
	if s := resp.GetSummary(); s.GetRemoved() != 1 || !s.GetChanged() {
		t.Errorf("summary %v, want ops/broken.md removed", s)
	}
	if _, err := os.Stat(filepath.Join(f.root, team, "ops", "broken.md")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the refused file is still on disk: %v", err)
	}
	// Gone, it is as unknown as any other missing path.
	_, err = f.know.DeleteFile(callCtx(t), &quarryv1.DeleteFileRequest{KnowledgeBase: team, Path: "ops/broken.md"})
	if status.Code(err) != codes.NotFound {
		t.Errorf("a second DeleteFile = %v, want NOT_FOUND", err)
	}
}

// A SyncFiles stream to a knowledge base no write may reach (a malformed id; an unknown
// one, with no folder for new ones) ends at its header, with the status: the upload
// behind it (up to the stream's bound) is not received and held first.
func TestSyncFilesRefusesAtTheHeader(t *testing.T) {
	for _, tc := range []struct {
		name string
		id   string
		edit func(*kb.Config, *writeFixture)
		want codes.Code
	}{
		{"a malformed id", "Not An ID", nil, codes.InvalidArgument},
		{"an unknown knowledge base", "nowhere", func(c *kb.Config, _ *writeFixture) { c.Write.NewRoot = "" }, codes.NotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := startWrite(t, tc.edit)
			stream, err := f.know.SyncFiles(callCtx(t))
			if err != nil {
				t.Fatal(err)
			}
			if err := stream.Send(&quarryv1.SyncFilesRequest{Message: &quarryv1.SyncFilesRequest_Header{Header: &quarryv1.SyncFilesHeader{KnowledgeBase: tc.id}}}); err != nil {
				t.Fatal(err)
			}
			// The server ends the stream; the client's sends then fail with io.EOF.
			body := strings.Repeat("x", 64<<10)
			sent := 0
			for ; sent < 16<<10; sent++ { // up to 1 GiB, the stream's bound
				if err := stream.Send(&quarryv1.SyncFilesRequest{Message: &quarryv1.SyncFilesRequest_File{File: &quarryv1.UploadedFile{Path: fmt.Sprintf("f%d.md", sent), Content: []byte(body)}}}); err != nil {
					break
				}
			}
			_, err = stream.CloseAndRecv()
			if status.Code(err) != tc.want {
				t.Fatalf("SyncFiles = %v, want %v", err, tc.want)
			}
			if sent == 16<<10 {
				t.Errorf("the server read all %d files before refusing the header", sent)
			}
		})
	}
}
