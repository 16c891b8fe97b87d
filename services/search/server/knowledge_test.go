package server

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	quarryv1 "github.com/quarry-router/quarry/gen/quarry/v1"
	"github.com/quarry-router/quarry/platform/grpcx"
	"github.com/quarry-router/quarry/services/search/engine/meili/meilitest"
	"github.com/quarry-router/quarry/services/search/kb"
	"github.com/quarry-router/quarry/services/search/resolve"
	"github.com/quarry-router/quarry/services/search/tree"
)

const team = "team"

// teamFiles is the knowledge base the write-side tests start from.
var teamFiles = map[string]string{
	"ops/_index.md": "# Ops\n\nOperations runbooks.\n",
	"ops/pager.md": `---
title: Pager rotation
importance: 60
---
The pager rotates weekly between the SRE team members. Escalate to the incident commander
after fifteen minutes without an acknowledgement.

## Handover

Write the handover note in the on-call channel before the rotation changes. Mention open
incidents, silenced alerts and anything that paged twice.

## Overrides

Swap shifts with an override in the scheduling tool; never edit the rotation itself.
`,
	"ops/backups.md":   "# Backups\n\nNightly backups go to object storage and are kept for thirty days.\n",
	"auth/tokens.md":   "# Tokens\n\nAccess tokens expire after one hour; refresh tokens after thirty days.\n",
	"auth/_index.md":   "# Auth\n\nAuthentication and authorization.\n",
	"ops/low-value.md": "---\nimportance: 10\n---\n# Old dashboards\n\nThe legacy graphite dashboards.\n",
}

type writeFixture struct {
	search   quarryv1.SearchServiceClient
	know     quarryv1.KnowledgeServiceClient
	reg      *kb.Registry
	root     string // folder of knowledge bases (team lives in root/team)
	syncRoot string
	meili    *meilitest.Server
	conn     *grpc.ClientConn // for raw requests the generated clients would refuse to send
	addr     string
}

// startWrite serves the team knowledge base with both services on a loopback socket.
// edit changes the configuration before the registry is made.
func startWrite(t *testing.T, edit func(*kb.Config, *writeFixture)) *writeFixture {
	t.Helper()
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	var kc kb.Config
	kc.RegisterFlags(fs)
	var rc resolve.Config
	rc.RegisterFlags(fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	f := &writeFixture{root: t.TempDir(), syncRoot: t.TempDir()}
	kc.Write.NewRoot, kc.Write.SyncRoot = f.root, f.syncRoot
	if edit != nil {
		edit(&kc, f)
	}
	writeFiles(t, filepath.Join(f.root, team), teamFiles)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	f.reg = kb.NewRegistry(kc, log)
	t.Cleanup(f.reg.Close)
	if _, err := f.reg.Load(context.Background(), team, filepath.Join(f.root, team)); err != nil {
		t.Fatal(err)
	}

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpcx.NewServer(log)
	quarryv1.RegisterSearchServiceServer(gs.Server, New(f.reg, resolve.New(rc, f.reg, time.Now), log))
	quarryv1.RegisterKnowledgeServiceServer(gs.Server, NewKnowledge(f.reg, log))
	serveCtx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- gs.Serve(serveCtx, lis) }()
	t.Cleanup(func() {
		stop()
		select {
		case err := <-served:
			if err != nil {
				t.Errorf("serve: %v", err)
			}
		case <-time.After(wait):
			t.Errorf("server did not stop within %v", wait)
		}
	})
	conn, err := grpcx.Dial(lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	f.conn, f.addr = conn, lis.Addr().String()
	f.search = quarryv1.NewSearchServiceClient(conn)
	f.know = quarryv1.NewKnowledgeServiceClient(conn)
	return f
}

func writeFiles(t *testing.T, dir string, files map[string]string) {
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

// state is what must not move when a write is refused.
type state struct {
	generation uint64
	documents  int32
	files      map[string]string
}

func (f *writeFixture) state(t *testing.T, id string) state {
	t.Helper()
	resp, err := f.search.ListKnowledgeBases(callCtx(t), &quarryv1.ListKnowledgeBasesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	st := state{files: map[string]string{}}
	for _, k := range resp.GetKnowledgeBases() {
		if k.GetId() == id {
			st.generation, st.documents = k.GetGeneration(), k.GetDocumentCount()
		}
	}
	root := filepath.Join(f.root, id)
	_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			data, _ := os.ReadFile(p)
			rel, _ := filepath.Rel(root, p)
			st.files[filepath.ToSlash(rel)] = string(data)
		}
		return nil
	})
	return st
}

func (f *writeFixture) searchPaths(t *testing.T, id, q string) []string {
	t.Helper()
	resp, err := f.search.Search(callCtx(t), &quarryv1.SearchRequest{KnowledgeBase: id, Query: q, Limit: 50})
	if err != nil {
		t.Fatalf("Search(%q): %v", q, err)
	}
	var out []string
	for _, r := range resp.GetResults() {
		out = append(out, r.GetPath())
	}
	return out
}

func (f *writeFixture) upsert(t *testing.T, id, path, content string) *quarryv1.UpsertFileResponse {
	t.Helper()
	resp, err := f.know.UpsertFile(callCtx(t), &quarryv1.UpsertFileRequest{KnowledgeBase: id, Path: path, Content: []byte(content)})
	if err != nil {
		t.Fatalf("UpsertFile(%s): %v", path, err)
	}
	return resp
}

func syncFiles(ctx context.Context, c quarryv1.KnowledgeServiceClient, id string, keep bool, files ...[2]string) (*quarryv1.SyncFilesResponse, error) {
	stream, err := c.SyncFiles(ctx)
	if err != nil {
		return nil, err
	}
	// Send says only io.EOF once the server has ended the stream (as it does for a
	// stream over its bound, often before the client has sent everything); the status
	// is what CloseAndRecv returns, as a real client would read it.
	if err := stream.Send(&quarryv1.SyncFilesRequest{Message: &quarryv1.SyncFilesRequest_Header{Header: &quarryv1.SyncFilesHeader{KnowledgeBase: id, KeepMissing: keep}}}); err != nil {
		return stream.CloseAndRecv()
	}
	for _, f := range files {
		if err := stream.Send(&quarryv1.SyncFilesRequest{Message: &quarryv1.SyncFilesRequest_File{File: &quarryv1.UploadedFile{Path: f[0], Content: []byte(f[1])}}}); err != nil {
			break
		}
	}
	return stream.CloseAndRecv()
}

func outcomes(fs []*quarryv1.FileResult) map[string]quarryv1.FileOutcome {
	out := map[string]quarryv1.FileOutcome{}
	for _, f := range fs {
		out[f.GetPath()] = f.GetOutcome()
	}
	return out
}

func TestSyncTreeThenQuery(t *testing.T) {
	f := startWrite(t, nil)
	src := filepath.Join(f.syncRoot, "platform")
	if err := os.CopyFS(src, os.DirFS(exampleKB)); err != nil {
		t.Fatal(err)
	}
	resp, err := f.know.SyncTree(callCtx(t), &quarryv1.SyncTreeRequest{KnowledgeBase: "synced", Source: "platform"})
	if err != nil {
		t.Fatal(err)
	}
	want, err := tree.Load(context.Background(), exampleKB, tree.Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := resp.GetSummary()
	if !s.GetChanged() || int(s.GetIndexed()) != want.Len() || int(s.GetDocumentCount()) != want.Len() || s.GetRejected() != 0 {
		t.Fatalf("sync of the example KB into a new one = %v, want %d indexed", s, want.Len())
	}
	r, err := f.search.Resolve(callCtx(t), &quarryv1.ResolveRequest{KnowledgeBase: "synced", Query: "pgbouncer pool mode"})
	if err != nil {
		t.Fatal(err)
	}
	if r.GetRoute() != quarryv1.Tier_TIER_DIRECT || r.GetSources()[0].GetPath() != "data/postgres/pgbouncer-pooling.md" {
		t.Errorf("synced KB answers %v from %v, want DIRECT from pgbouncer-pooling.md", r.GetRoute(), r.GetSources())
	}
	if r.GetGeneration() != s.GetGeneration() {
		t.Errorf("answer generation %d, want the sync's %d", r.GetGeneration(), s.GetGeneration())
	}

	// The same tree again changes nothing.
	again, err := f.know.SyncTree(callCtx(t), &quarryv1.SyncTreeRequest{KnowledgeBase: "synced", Source: src})
	if err != nil {
		t.Fatal(err)
	}
	if a := again.GetSummary(); a.GetChanged() || a.GetGeneration() != s.GetGeneration() || int(a.GetUnchanged()) != want.Len() {
		t.Errorf("second sync of the same tree = %v, want nothing changed", a)
	}
}

func TestSyncTreeSourceMustBeUnderTheSyncRoot(t *testing.T) {
	f := startWrite(t, nil)
	outside := t.TempDir()
	writeFiles(t, outside, map[string]string{"x.md": "# X\n"})
	if err := os.Symlink(outside, filepath.Join(f.syncRoot, "link")); err != nil {
		t.Fatal(err)
	}
	// A file is not a folder to sync from: it was read as a failure of the service.
	writeFiles(t, f.syncRoot, map[string]string{"file.md": "# F\n"})
	for _, src := range []string{outside, "../" + filepath.Base(outside), "link", "missing", "file.md"} {
		_, err := f.know.SyncTree(callCtx(t), &quarryv1.SyncTreeRequest{KnowledgeBase: team, Source: src})
		if status.Code(err) != codes.FailedPrecondition {
			t.Errorf("SyncTree(%q) = %v, want FAILED_PRECONDITION", src, err)
		}
	}

	g := startWrite(t, func(c *kb.Config, _ *writeFixture) { c.Write.SyncRoot = "" })
	if _, err := g.know.SyncTree(callCtx(t), &quarryv1.SyncTreeRequest{KnowledgeBase: team, Source: "x"}); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("SyncTree without -sync-root = %v, want FAILED_PRECONDITION", err)
	}
}

func TestSyncFilesAddsChangesAndRemovesInOneGeneration(t *testing.T) {
	f := startWrite(t, nil)
	ch, stop := f.reg.Watch()
	defer stop()
	<-ch // the initial state
	before := f.state(t, team)

	changed := "# Backups\n\nNightly backups go to object storage; restores are tested monthly.\n"
	resp, err := syncFiles(callCtx(t), f.know, team, false,
		[2]string{"ops/_index.md", teamFiles["ops/_index.md"]},
		[2]string{"ops/pager.md", teamFiles["ops/pager.md"]},
		[2]string{"ops/backups.md", changed},
		[2]string{"auth/tokens.md", teamFiles["auth/tokens.md"]},
		[2]string{"auth/_index.md", teamFiles["auth/_index.md"]},
		[2]string{"data/kafka.md", "# Kafka\n\nConsumer groups rebalance when a member leaves.\n"},
	)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]quarryv1.FileOutcome{
		"ops/_index.md":    quarryv1.FileOutcome_FILE_OUTCOME_UNCHANGED,
		"ops/pager.md":     quarryv1.FileOutcome_FILE_OUTCOME_UNCHANGED,
		"ops/backups.md":   quarryv1.FileOutcome_FILE_OUTCOME_INDEXED,
		"auth/tokens.md":   quarryv1.FileOutcome_FILE_OUTCOME_UNCHANGED,
		"auth/_index.md":   quarryv1.FileOutcome_FILE_OUTCOME_UNCHANGED,
		"data/kafka.md":    quarryv1.FileOutcome_FILE_OUTCOME_INDEXED,
		"ops/low-value.md": quarryv1.FileOutcome_FILE_OUTCOME_REMOVED,
	}
	if got := outcomes(resp.GetFiles()); !mapsEqual(got, want) {
		t.Errorf("outcomes = %v, want %v", got, want)
	}
	s := resp.GetSummary()
	if s.GetIndexed() != 2 || s.GetUnchanged() != 4 || s.GetRemoved() != 1 || s.GetDocumentCount() != before.documents {
		t.Errorf("summary = %v, want 2 indexed, 4 unchanged, 1 removed, %d documents", s, before.documents)
	}
	// Exactly one generation for the batch.
	select {
	case st := <-ch:
		if len(st) != 1 || st[0].Generation != s.GetGeneration() || s.GetGeneration() <= before.generation {
			t.Errorf("watchers saw %v, want one change to generation %d", st, s.GetGeneration())
		}
	case <-time.After(wait):
		t.Fatal("no generation change announced")
	}
	select {
	case st := <-ch:
		t.Errorf("a second generation change for one sync: %v", st)
	default:
	}
	if got := f.searchPaths(t, team, "consumer groups rebalance"); len(got) == 0 || got[0] != "data/kafka.md" {
		t.Errorf("new file not searchable: %v", got)
	}
	if got := f.searchPaths(t, team, "restores tested monthly"); len(got) == 0 || got[0] != "ops/backups.md" {
		t.Errorf("changed file not searchable by its new words: %v", got)
	}
	if _, err := os.Stat(filepath.Join(f.root, team, "ops/low-value.md")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("removed file still in the folder: %v", err)
	}
}

func TestUpsertChangesTheAnswerAndBumpsTheGeneration(t *testing.T) {
	f := startWrite(t, nil)
	before := f.state(t, team)

	resp := f.upsert(t, team, "ops/kafka.md", "# Kafka lag\n\nConsumer lag alerts fire above ten thousand messages.\n")
	if resp.GetFile().GetOutcome() != quarryv1.FileOutcome_FILE_OUTCOME_INDEXED || !resp.GetSummary().GetChanged() {
		t.Fatalf("upsert of a new file = %v", resp)
	}
	gen := resp.GetSummary().GetGeneration()
	if gen <= before.generation || resp.GetSummary().GetDocumentCount() != before.documents+1 {
		t.Errorf("summary = %v, want a newer generation than %d and %d documents", resp.GetSummary(), before.generation, before.documents+1)
	}
	r, err := f.search.Resolve(callCtx(t), &quarryv1.ResolveRequest{KnowledgeBase: team, Query: "kafka consumer lag alerts"})
	if err != nil {
		t.Fatal(err)
	}
	if r.GetGeneration() != gen || len(r.GetSources()) == 0 || r.GetSources()[0].GetPath() != "ops/kafka.md" {
		t.Errorf("resolve after the upsert: generation %d, sources %v; want %d and ops/kafka.md first", r.GetGeneration(), r.GetSources(), gen)
	}

	// The same bytes again change nothing.
	same := f.upsert(t, team, "ops/kafka.md", "# Kafka lag\n\nConsumer lag alerts fire above ten thousand messages.\n")
	if same.GetFile().GetOutcome() != quarryv1.FileOutcome_FILE_OUTCOME_UNCHANGED || same.GetSummary().GetChanged() || same.GetSummary().GetGeneration() != gen {
		t.Errorf("upsert of the same bytes = %v, want UNCHANGED at generation %d", same, gen)
	}

	// Changing a file replaces its words and is a curation update (+5 importance).
	doc := func() *quarryv1.Document {
		d, err := f.search.ReadDocument(callCtx(t), &quarryv1.ReadDocumentRequest{KnowledgeBase: team, Path: "ops/pager.md"})
		if err != nil {
			t.Fatal(err)
		}
		return d.GetDocument()
	}
	imp := doc().GetImportance()
	f.upsert(t, team, "ops/pager.md", "---\ntitle: Pager rotation\nimportance: 60\n---\nThe pager now follows the sun across three regions.\n")
	if got := f.searchPaths(t, team, "follows the sun regions"); len(got) == 0 || got[0] != "ops/pager.md" {
		t.Errorf("new words of a changed file find %v", got)
	}
	if got := f.searchPaths(t, team, "handover note"); slices.Contains(got, "ops/pager.md") {
		t.Errorf("old words of a changed file still find it: %v", got)
	}
	if got := doc().GetImportance(); got < imp+4.99 || got > imp+5.01 {
		t.Errorf("importance after a curation update = %v, want %v + 5", got, imp)
	}
}

func TestDeleteFileRemovesItFromAnswers(t *testing.T) {
	f := startWrite(t, nil)
	before := f.state(t, team)
	resp, err := f.know.DeleteFile(callCtx(t), &quarryv1.DeleteFileRequest{KnowledgeBase: team, Path: "ops/backups.md"})
	if err != nil {
		t.Fatal(err)
	}
	if s := resp.GetSummary(); s.GetRemoved() != 1 || s.GetGeneration() <= before.generation || s.GetDocumentCount() != before.documents-1 {
		t.Errorf("summary = %v", s)
	}
	if got := f.searchPaths(t, team, "nightly backups object storage"); slices.Contains(got, "ops/backups.md") {
		t.Errorf("deleted file still found: %v", got)
	}
	_, err = f.search.ReadDocument(callCtx(t), &quarryv1.ReadDocumentRequest{KnowledgeBase: team, Path: "ops/backups.md"})
	if status.Code(err) != codes.NotFound {
		t.Errorf("ReadDocument of a deleted file = %v, want NOT_FOUND", err)
	}
	_, err = f.know.DeleteFile(callCtx(t), &quarryv1.DeleteFileRequest{KnowledgeBase: team, Path: "ops/backups.md"})
	if status.Code(err) != codes.NotFound {
		t.Errorf("deleting it again = %v, want NOT_FOUND", err)
	}
}

func TestArchiveKeepsAGhostCueSearchableAndTheFullTextReadable(t *testing.T) {
	f := startWrite(t, nil)
	before := f.state(t, team)
	arch, err := f.know.ArchiveFile(callCtx(t), &quarryv1.ArchiveFileRequest{KnowledgeBase: team, Path: "ops/pager.md"})
	if err != nil {
		t.Fatal(err)
	}
	if arch.GetStubPath() != "ops/_archived/pager.stub.md" || arch.GetArchivedPath() != "ops/_archived/pager.md" {
		t.Fatalf("archive wrote %s and %s", arch.GetStubPath(), arch.GetArchivedPath())
	}
	if n := len(arch.GetGhostCue()); n == 0 || n > 220*4+50 {
		t.Errorf("ghost cue is %d characters, want about 220 tokens at most:\n%s", n, arch.GetGhostCue())
	}
	t.Logf("ghost cue (%d characters):\n%s", len(arch.GetGhostCue()), arch.GetGhostCue())
	if !strings.Contains(arch.GetGhostCue(), "The pager rotates weekly") {
		t.Errorf("ghost cue is not an extract of the file:\n%s", arch.GetGhostCue())
	}
	if s := arch.GetSummary(); s.GetDocumentCount() != before.documents || s.GetGeneration() <= before.generation {
		t.Errorf("summary = %v, want the same document count (file out, cue in) and a new generation", s)
	}

	// The cue is searchable and flagged archived; the file is gone from search.
	resp, err := f.search.Search(callCtx(t), &quarryv1.SearchRequest{KnowledgeBase: team, Query: "pager rotates weekly"})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetResults()) == 0 || resp.GetResults()[0].GetPath() != arch.GetStubPath() || !resp.GetResults()[0].GetArchived() {
		t.Errorf("search after archiving = %v, want the archived cue first", resp.GetResults())
	}
	for _, r := range resp.GetResults() {
		if r.GetPath() == "ops/pager.md" {
			t.Error("the archived file is still searchable")
		}
	}
	if _, err := f.search.ReadDocument(callCtx(t), &quarryv1.ReadDocumentRequest{KnowledgeBase: team, Path: "ops/pager.md"}); status.Code(err) != codes.NotFound {
		t.Errorf("ReadDocument of the archived path = %v, want NOT_FOUND", err)
	}
	stub, err := f.search.ReadDocument(callCtx(t), &quarryv1.ReadDocumentRequest{KnowledgeBase: team, Path: arch.GetStubPath()})
	if err != nil {
		t.Fatal(err)
	}
	if d := stub.GetDocument(); !d.GetArchived() || d.GetTitle() != "Pager rotation" || d.GetExtra().GetFields()["original"].GetStringValue() != arch.GetArchivedPath() {
		t.Errorf("ghost cue document = %v, want archived, the file's title and a pointer to the full text", d)
	}

	// The full text stays readable, by the file's path or the cue's.
	for _, p := range []string{"ops/pager.md", arch.GetStubPath()} {
		full, err := f.know.ReadArchivedFile(callCtx(t), &quarryv1.ReadArchivedFileRequest{KnowledgeBase: team, Path: p})
		if err != nil {
			t.Fatal(err)
		}
		if d := full.GetDocument(); !strings.Contains(d.GetContent(), "Swap shifts with an override") || !d.GetArchived() || full.GetStubPath() != arch.GetStubPath() {
			t.Errorf("ReadArchivedFile(%s) = %v", p, full)
		}
	}

	// Archiving twice, or archiving what is no knowledge file, is refused.
	for _, tt := range []struct {
		path string
		want codes.Code
	}{{"ops/pager.md", codes.NotFound}, {"ops/_index.md", codes.FailedPrecondition}, {arch.GetStubPath(), codes.FailedPrecondition}} {
		if _, err := f.know.ArchiveFile(callCtx(t), &quarryv1.ArchiveFileRequest{KnowledgeBase: team, Path: tt.path}); status.Code(err) != tt.want {
			t.Errorf("ArchiveFile(%s) = %v, want %v", tt.path, err, tt.want)
		}
	}

	// Restore brings it back and removes the cue.
	res, err := f.know.RestoreFile(callCtx(t), &quarryv1.RestoreFileRequest{KnowledgeBase: team, Path: arch.GetStubPath()})
	if err != nil {
		t.Fatal(err)
	}
	if res.GetPath() != "ops/pager.md" || res.GetSummary().GetDocumentCount() != before.documents {
		t.Errorf("restore = %v", res)
	}
	if got := f.searchPaths(t, team, "override scheduling tool"); len(got) == 0 || got[0] != "ops/pager.md" {
		t.Errorf("restored file not searchable: %v", got)
	}
	after := f.state(t, team)
	if after.files["ops/pager.md"] != teamFiles["ops/pager.md"] {
		t.Error("the restored file's bytes differ from the original")
	}
	for p := range after.files {
		if strings.Contains(p, "_archived") {
			t.Errorf("%s left behind after restoring", p)
		}
	}
	if _, err := f.know.RestoreFile(callCtx(t), &quarryv1.RestoreFileRequest{KnowledgeBase: team, Path: "ops/pager.md"}); status.Code(err) != codes.NotFound {
		t.Errorf("restoring again = %v, want NOT_FOUND", err)
	}
}

func TestSuggestArchiveListsFilesBelowTheThreshold(t *testing.T) {
	f := startWrite(t, nil)
	resp, err := f.know.SuggestArchive(callCtx(t), &quarryv1.SuggestArchiveRequest{KnowledgeBase: team})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetCandidates()) != 1 || resp.GetCandidates()[0].GetPath() != "ops/low-value.md" || resp.GetCandidates()[0].GetImportance() >= 35 {
		t.Errorf("candidates = %v, want only ops/low-value.md", resp.GetCandidates())
	}
	all, err := f.know.SuggestArchive(callCtx(t), &quarryv1.SuggestArchiveRequest{KnowledgeBase: team, BelowImportance: 100, Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	if c := all.GetCandidates(); len(c) != 2 || c[0].GetImportance() > c[1].GetImportance() {
		t.Errorf("candidates below 100, limit 2 = %v, want the 2 least important, ascending", c)
	}
}

// A threshold or limit out of range is INVALID_ARGUMENT. NaN compared false with both
// bounds, so it passed the check and listed nothing, as if no file were unimportant.
func TestSuggestArchiveRefusesAThresholdOutOfRange(t *testing.T) {
	f := startWrite(t, nil)
	tests := []struct {
		name  string
		below float64
		limit int32
	}{
		{"a negative threshold", -1, 0},
		{"a threshold over 100", 101, 0},
		{"NaN", math.NaN(), 0},
		{"infinity", math.Inf(1), 0},
		{"a negative limit", 50, -1},
		{"a limit over 10000", 50, 10001},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := f.know.SuggestArchive(callCtx(t), &quarryv1.SuggestArchiveRequest{KnowledgeBase: team, BelowImportance: tt.below, Limit: tt.limit})
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("SuggestArchive(below %v, limit %d) = %v, %v; want INVALID_ARGUMENT", tt.below, tt.limit, resp.GetCandidates(), err)
			}
		})
	}
}

// Every refused write changes nothing: not the generation, not the document count, not a
// byte in the folder.
func TestRefusedWritesChangeNothing(t *testing.T) {
	f := startWrite(t, nil)
	outside := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(f.root, team, "linked")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(outside, "x.md"), filepath.Join(f.root, team, "ops", "link.md")); err != nil {
		t.Fatal(err)
	}
	ok := "# Fine\n\nA perfectly good file.\n"
	aliasBomb := "---\na: &a [x, x, x]\nb: &b [*a, *a, *a]\nc: [*b, *b, *b]\n---\n# Bomb\n"
	deep := "---\nx: " + strings.Repeat("[", 40) + strings.Repeat("]", 40) + "\n---\n# Deep\n"
	upserts := []struct {
		name, path, content string
		want                codes.Code
	}{
		{"a path climbing out of the tree", "../escape.md", ok, codes.InvalidArgument},
		{"an absolute path", "/etc/escape.md", ok, codes.InvalidArgument},
		{"a climb hidden in the middle", "ops/../../escape.md", ok, codes.InvalidArgument},
		{"a path through a symlinked folder", "linked/x.md", ok, codes.InvalidArgument},
		{"a symlinked file", "ops/link.md", ok, codes.InvalidArgument},
		{"not markdown", "ops/notes.txt", ok, codes.InvalidArgument},
		{"a hidden file", "ops/.secret.md", ok, codes.InvalidArgument},
		{"a backslash", `ops\x.md`, ok, codes.InvalidArgument},
		{"a name passing for another (a byte-order mark)", "ops/\ufeffoncall.md", ok, codes.InvalidArgument},
		{"oversized", "ops/big.md", "# Big\n\n" + strings.Repeat("word ", 1<<18), codes.InvalidArgument},
		{"invalid UTF-8", "ops/bad.md", "# Bad\n\n\xff\xfe\n", codes.InvalidArgument},
		{"NUL bytes", "ops/nul.md", "# Nul\n\x00\n", codes.InvalidArgument},
		{"unclosed front matter", "ops/open.md", "---\ntitle: x\n# never closed\n", codes.InvalidArgument},
		{"a YAML alias bomb", "ops/bomb.md", aliasBomb, codes.InvalidArgument},
		{"deeply nested YAML", "ops/deep.md", deep, codes.InvalidArgument},
		{"an importance out of range", "ops/imp.md", "---\nimportance: 500\n---\n# x\n", codes.InvalidArgument},
		{"an unknown knowledge base", "ops/x.md", ok, codes.NotFound},
		{"a malformed knowledge base id", "ops/x.md", ok, codes.InvalidArgument},
	}
	for _, tt := range upserts {
		t.Run(tt.name, func(t *testing.T) {
			id := team
			switch tt.name {
			case "an unknown knowledge base":
				id = "nope"
			case "a malformed knowledge base id":
				id = "Bad/ID"
			}
			before := f.state(t, team)
			_, err := f.know.UpsertFile(callCtx(t), &quarryv1.UpsertFileRequest{KnowledgeBase: id, Path: tt.path, Content: []byte(tt.content)})
			if status.Code(err) != tt.want {
				t.Fatalf("UpsertFile = %v, want %v", err, tt.want)
			}
			if msg := status.Convert(err).Message(); msg == "" {
				t.Error("refusal without a reason")
			}
			assertUnchanged(t, before, f.state(t, team))
			if _, err := os.Stat(filepath.Join(outside, "x.md")); !errors.Is(err, os.ErrNotExist) {
				t.Error("a write went through a symlink out of the tree")
			}
		})
	}

	t.Run("a path twice in one sync", func(t *testing.T) {
		before := f.state(t, team)
		_, err := syncFiles(callCtx(t), f.know, team, true, [2]string{"ops/new.md", ok}, [2]string{"./ops//new.md", ok})
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), "ops/new.md") {
			t.Fatalf("SyncFiles with a duplicate = %v, want INVALID_ARGUMENT naming the path", err)
		}
		assertUnchanged(t, before, f.state(t, team))
	})

	t.Run("a sync whose every file is rejected", func(t *testing.T) {
		before := f.state(t, team)
		resp, err := syncFiles(callCtx(t), f.know, team, true, [2]string{"../x.md", ok}, [2]string{"ops/pager.md", aliasBomb})
		if err != nil {
			t.Fatal(err)
		}
		if s := resp.GetSummary(); s.GetChanged() || s.GetRejected() != 2 {
			t.Errorf("summary = %v, want 2 rejected and nothing changed", s)
		}
		for _, fr := range resp.GetFiles() {
			if fr.GetOutcome() != quarryv1.FileOutcome_FILE_OUTCOME_REJECTED || fr.GetReason() == "" {
				t.Errorf("file result %v, want REJECTED with a reason", fr)
			}
		}
		assertUnchanged(t, before, f.state(t, team))
	})

	t.Run("a rejected file in a full sync keeps its indexed version", func(t *testing.T) {
		var files [][2]string
		for p, body := range teamFiles {
			if p == "ops/pager.md" {
				body = aliasBomb
			}
			files = append(files, [2]string{p, body})
		}
		files = append(files, [2]string{"ops/extra.md", ok})
		resp, err := syncFiles(callCtx(t), f.know, team, false, files...)
		if err != nil {
			t.Fatal(err)
		}
		got := outcomes(resp.GetFiles())
		if got["ops/pager.md"] != quarryv1.FileOutcome_FILE_OUTCOME_REJECTED || got["ops/extra.md"] != quarryv1.FileOutcome_FILE_OUTCOME_INDEXED {
			t.Errorf("outcomes = %v, want pager rejected and extra indexed", got)
		}
		if got := f.searchPaths(t, team, "handover note"); len(got) == 0 || got[0] != "ops/pager.md" {
			t.Errorf("the rejected file's indexed version is gone: %v", got)
		}
		if st := f.state(t, team); st.files["ops/pager.md"] != teamFiles["ops/pager.md"] {
			t.Error("the rejected file's bytes were overwritten")
		}
	})
}

func assertUnchanged(t *testing.T, before, after state) {
	t.Helper()
	if after.generation != before.generation || after.documents != before.documents {
		t.Errorf("generation %d → %d, documents %d → %d; want no change", before.generation, after.generation, before.documents, after.documents)
	}
	if !mapsEqual(before.files, after.files) {
		var diff []string
		for p := range after.files {
			if before.files[p] != after.files[p] {
				diff = append(diff, p)
			}
		}
		for p := range before.files {
			if _, ok := after.files[p]; !ok {
				diff = append(diff, p)
			}
		}
		t.Errorf("files changed: %v", diff)
	}
}

func mapsEqual[K comparable, V comparable](a, b map[K]V) bool {
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

// With Meilisearch, a write is acknowledged only once its task has succeeded; a failed
// task fails the write with Meilisearch's message and puts the files back.
func TestWritesThroughMeilisearch(t *testing.T) {
	f := startWrite(t, func(c *kb.Config, f *writeFixture) {
		f.meili = meilitest.New(t, "key")
		c.Engine = kb.EngineMeilisearch
		c.Meili.URL, c.Meili.Key = f.meili.URL, "key"
	})
	f.upsert(t, team, "ops/kafka.md", "# Kafka lag\n\nConsumer lag alerts fire above ten thousand messages.\n")
	if got := f.searchPaths(t, team, "kafka consumer lag"); len(got) == 0 || got[0] != "ops/kafka.md" {
		t.Errorf("after an upsert through Meilisearch, search finds %v", got)
	}

	before := f.state(t, team)
	f.meili.FailNextTasks(1, "no space left on device")
	_, err := f.know.UpsertFile(callCtx(t), &quarryv1.UpsertFileRequest{KnowledgeBase: team, Path: "ops/zookeeper.md", Content: []byte("# Zookeeper\n\nQuorum of five.\n")})
	if status.Code(err) != codes.Unavailable || !strings.Contains(status.Convert(err).Message(), "no space left on device") {
		t.Fatalf("upsert with a failing task = %v, want UNAVAILABLE with Meilisearch's message", err)
	}
	assertUnchanged(t, before, f.state(t, team))
	if got := f.searchPaths(t, team, "zookeeper quorum"); slices.Contains(got, "ops/zookeeper.md") {
		t.Errorf("a failed write is searchable: %v", got)
	}

	// A delete whose task fails leaves the file indexed and in the folder.
	f.meili.FailNextTasks(1, "task canceled by operator")
	if _, err := f.know.DeleteFile(callCtx(t), &quarryv1.DeleteFileRequest{KnowledgeBase: team, Path: "ops/backups.md"}); status.Code(err) != codes.Unavailable {
		t.Fatalf("delete with a failing task = %v, want UNAVAILABLE", err)
	}
	assertUnchanged(t, before, f.state(t, team))
	if got := f.searchPaths(t, team, "nightly backups"); len(got) == 0 || got[0] != "ops/backups.md" {
		t.Errorf("after a failed delete, search finds %v", got)
	}
}

// A search Meilisearch cannot answer (down, or a proxy with no upstream) is UNAVAILABLE,
// the code clients retry, not INTERNAL, which said the search service itself had failed.
func TestSearchWithMeilisearchDownIsUnavailable(t *testing.T) {
	f := startWrite(t, func(c *kb.Config, f *writeFixture) {
		f.meili = meilitest.New(t, "key")
		c.Engine = kb.EngineMeilisearch
		c.Meili.URL, c.Meili.Key = f.meili.URL, "key"
	})
	for _, how := range []meilitest.Outage{meilitest.Unavailable, meilitest.Refused} {
		f.meili.Down(how)
		before := len(f.meili.Requests())
		_, err := f.search.Search(callCtx(t), &quarryv1.SearchRequest{KnowledgeBase: team, Query: "nightly backups"})
		if status.Code(err) != codes.Unavailable {
			t.Errorf("Search with Meilisearch down (outage %d) = %v, want UNAVAILABLE", how, err)
		}
		// The client's retry policy retries UNAVAILABLE on another replica, which would
		// ask the same Meilisearch: the server tells it not to (grpc-retry-pushback-ms),
		// so one query makes the engine's one retry, not three times that.
		if n := len(f.meili.Requests()) - before; how == meilitest.Unavailable && n > 2 {
			t.Errorf("one Search during an outage sent %d requests to Meilisearch, want at most 2", n)
		}
		f.meili.Up()
		if got := f.searchPaths(t, team, "nightly backups"); len(got) == 0 || got[0] != "ops/backups.md" {
			t.Errorf("after the outage, search finds %v", got)
		}
	}
}

func TestToStatusMapsWriteErrors(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	tests := []struct {
		err  error
		want codes.Code
	}{
		{fmt.Errorf("x: %w", tree.ErrRejected), codes.InvalidArgument},
		{fmt.Errorf("x: %w", tree.ErrSymlink), codes.InvalidArgument},
		{fmt.Errorf("x: %w", tree.ErrNotKnowledgeFile), codes.InvalidArgument},
		{fmt.Errorf("x: %w", kb.ErrDuplicatePath), codes.InvalidArgument},
		{fmt.Errorf("x: %w", kb.ErrNotArchived), codes.NotFound},
		{fmt.Errorf("x: %w", kb.ErrExists), codes.AlreadyExists},
		{fmt.Errorf("x: %w", kb.ErrNotArchivable), codes.FailedPrecondition},
		{fmt.Errorf("x: %w", kb.ErrSyncSource), codes.FailedPrecondition},
		{fmt.Errorf("write /srv/kb/x.md: %w", tree.ErrReadOnly), codes.FailedPrecondition},
		{fmt.Errorf("x: %w", tree.ErrTooManyFiles), codes.FailedPrecondition},
		{fmt.Errorf("x: %w", kb.ErrEngine), codes.Unavailable},
	}
	for _, tt := range tests {
		st := status.Convert(toStatus(context.Background(), log, tt.err))
		if st.Code() != tt.want {
			t.Errorf("toStatus(%v) = %v, want %v", tt.err, st.Code(), tt.want)
		}
		if strings.Contains(st.Message(), "/srv/kb") {
			t.Errorf("toStatus(%v) leaks a server folder: %q", tt.err, st.Message())
		}
	}
}

// Importance rises by 3 each time a search returns a file (aggregated and applied by the
// background flush, never on the query path) and maturity follows it past 65; hits do not
// change the generation, so caches stay valid.
func TestSearchHitsRaiseImportanceAndPromoteMaturity(t *testing.T) {
	f := startWrite(t, nil)
	read := func() *quarryv1.Document {
		d, err := f.search.ReadDocument(callCtx(t), &quarryv1.ReadDocumentRequest{KnowledgeBase: team, Path: "ops/pager.md"})
		if err != nil {
			t.Fatal(err)
		}
		return d.GetDocument()
	}
	start := read()
	near := func(got, want float64) bool { return got > want-0.01 && got < want+0.01 } // decay since load
	if !near(start.GetImportance(), 60) || start.GetMaturity() != quarryv1.Maturity_MATURITY_DRAFT {
		t.Fatalf("pager starts at %v %v, want 60 draft (its front matter)", start.GetImportance(), start.GetMaturity())
	}
	gen := f.state(t, team).generation
	// An agent's search inside its loop counts nothing: only a question's sources do.
	sr, err := f.search.Search(callCtx(t), &quarryv1.SearchRequest{KnowledgeBase: team, Query: "pager handover note overrides"})
	if err != nil || len(sr.GetResults()) == 0 || sr.GetResults()[0].GetPath() != "ops/pager.md" {
		t.Fatalf("Search: %v, results %v, want ops/pager.md first", err, sr.GetResults())
	}
	hits := 0
	for range 2 {
		r, err := f.search.Resolve(callCtx(t), &quarryv1.ResolveRequest{KnowledgeBase: team, Query: "pager handover note overrides"})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range r.GetSources() {
			if s.GetPath() == "ops/pager.md" {
				hits++
			}
		}
	}
	if hits != 2 {
		t.Fatalf("pager returned %d times, want 2", hits)
	}
	if got := read().GetImportance(); !near(got, 60) {
		t.Errorf("importance before the background flush = %v, want 60: hits are applied off the query path", got)
	}
	k, err := f.reg.Get(team)
	if err != nil {
		t.Fatal(err)
	}
	k.Signals.Flush() // what RunSignals does every -signals-flush-interval
	after := read()
	if !near(after.GetImportance(), 66) || after.GetMaturity() != quarryv1.Maturity_MATURITY_VALIDATED {
		t.Errorf("after 2 hits: %v %v, want 66 validated", after.GetImportance(), after.GetMaturity())
	}
	if got := f.state(t, team).generation; got != gen {
		t.Errorf("hits changed the generation %d → %d", gen, got)
	}
	// A curation update carries the learned state: +5 on top, not a reset to 60.
	f.upsert(t, team, "ops/pager.md", teamFiles["ops/pager.md"]+"\nOne more line.\n")
	if got := read(); !near(got.GetImportance(), 71) || got.GetMaturity() != quarryv1.Maturity_MATURITY_VALIDATED {
		t.Errorf("after a curation update: %v %v, want 71 validated", got.GetImportance(), got.GetMaturity())
	}
}

// A sync's response lists its per-file results only as far as maxListedBytes (half a
// client's default message limit), rejected files first, and says when it cut the list;
// the summary counts every file. Listed whole, a sync of 100,000 files built a response
// over the limit after the write was made, and every retry failed the same way.
func TestASyncsResultsAreListedWithinABound(t *testing.T) {
	defer func(n int) { maxListedBytes = n }(maxListedBytes)
	f := startWrite(t, nil)
	var files [][2]string
	for p, c := range teamFiles {
		files = append(files, [2]string{p, c})
	}
	files = append(files, [2]string{"ops/bad.md", "---\nimportance: 500\n---\n# Bad\n"})
	resp, err := syncFiles(callCtx(t), f.know, team, false, files...)
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetFilesTruncated() || len(resp.GetFiles()) != len(files) {
		t.Fatalf("a small sync listed %d of %d results, truncated %v", len(resp.GetFiles()), len(files), resp.GetFilesTruncated())
	}

	maxListedBytes = len("ops/bad.md") + 200 // the rejected file and its reason, and little more
	resp, err = syncFiles(callCtx(t), f.know, team, false, files...)
	if err != nil {
		t.Fatal(err)
	}
	got := resp.GetFiles()
	if !resp.GetFilesTruncated() || len(got) == 0 || len(got) == len(files) {
		t.Fatalf("listed %d of %d results, truncated %v; want a cut list", len(got), len(files), resp.GetFilesTruncated())
	}
	if !slices.ContainsFunc(got, func(r *quarryv1.FileResult) bool {
		return r.GetPath() == "ops/bad.md" && r.GetOutcome() == quarryv1.FileOutcome_FILE_OUTCOME_REJECTED
	}) {
		t.Errorf("listed %v; want the rejected file among the few", got)
	}
	for i := 1; i < len(got); i++ {
		if got[i-1].GetPath() >= got[i].GetPath() {
			t.Errorf("listed results not sorted by path: %v", got)
		}
	}
	if s := resp.GetSummary(); s.GetUnchanged()+s.GetRejected()+s.GetIndexed() != int32(len(files)) {
		t.Errorf("summary %v does not count all %d files", s, len(files))
	}
}
