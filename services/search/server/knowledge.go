package server

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	quarryv1 "github.com/quarry-router/quarry/gen/quarry/v1"
	"github.com/quarry-router/quarry/platform/auth"
	"github.com/quarry-router/quarry/services/search/kb"
)

// maxSyncBytes bounds the files one SyncFiles stream may upload in total, paths
// included: they are held in memory until the stream ends, so the sync applies as one
// change. A variable so that tests can lower it.
var maxSyncBytes = 1 << 30

// syncFileBytes is what the server holds per file of a SyncFiles stream beyond its path
// and bytes (the upload, its parse, its result and the response entry), counted toward
// maxSyncBytes: a file of a few bytes on the wire costs this much memory, and a stream
// of millions of empty files is held until it ends just the same.
const syncFileBytes = 256

// Knowledge implements quarryv1.KnowledgeServiceServer, the write side.
type Knowledge struct {
	quarryv1.UnimplementedKnowledgeServiceServer
	reg *kb.Registry
	log *slog.Logger
}

// NewKnowledge returns the write side's gRPC server.
func NewKnowledge(reg *kb.Registry, log *slog.Logger) *Knowledge {
	return &Knowledge{reg: reg, log: log}
}

// SyncTree makes a knowledge base equal to a folder under -sync-root; a key limited to
// some knowledge bases may name only a folder under -sync-root/<knowledge base>.
func (s *Knowledge) SyncTree(ctx context.Context, req *quarryv1.SyncTreeRequest) (*quarryv1.SyncTreeResponse, error) {
	if req.GetSource() == "" {
		return nil, status.Error(codes.InvalidArgument, "source folder is empty")
	}
	sync := s.reg.SyncTree
	if c, ok := auth.CallerFrom(ctx); ok && !slices.Contains(c.KnowledgeBases, "*") {
		// A key limited to some knowledge bases syncs each only from its own folder of
		// -sync-root, which holds other knowledge bases' sources too.
		sync = s.reg.SyncOwnTree
	}
	res, err := sync(ctx, req.GetKnowledgeBase(), req.GetSource(), req.GetKeepMissing())
	if err != nil {
		return nil, toStatus(ctx, s.log, err)
	}
	files, truncated := fileResults(res.Files)
	return &quarryv1.SyncTreeResponse{Summary: summary(res), Files: files, FilesTruncated: truncated}, nil
}

// SyncFiles makes a knowledge base hold the uploaded files.
func (s *Knowledge) SyncFiles(stream grpc.ClientStreamingServer[quarryv1.SyncFilesRequest, quarryv1.SyncFilesResponse]) error {
	ctx := stream.Context()
	first, err := stream.Recv()
	if errors.Is(err, io.EOF) {
		return status.Error(codes.InvalidArgument, "empty stream: the first message must be the header")
	}
	if err != nil {
		return err
	}
	h := first.GetHeader()
	if h == nil {
		return status.Error(codes.InvalidArgument, "the first message must be the header")
	}
	if err := s.reg.Writable(h.GetKnowledgeBase()); err != nil {
		return toStatus(ctx, s.log, err)
	}
	var files []kb.Upload
	total := 0
	for {
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		f := msg.GetFile()
		if f == nil {
			return status.Error(codes.InvalidArgument, "only the first message may be a header")
		}
		// The path counts too: a stream of empty files with long paths (each as large as
		// a message may be) is held in memory just the same; and so does the file itself.
		if total += len(f.GetPath()) + len(f.GetContent()) + syncFileBytes; total > maxSyncBytes {
			return status.Errorf(codes.ResourceExhausted, "upload over %d bytes: sync the tree in parts with keep_missing", maxSyncBytes)
		}
		files = append(files, kb.Upload{Path: f.GetPath(), Data: f.GetContent()})
	}
	res, err := s.reg.SyncFiles(ctx, h.GetKnowledgeBase(), files, h.GetKeepMissing())
	if err != nil {
		return toStatus(ctx, s.log, err)
	}
	results, truncated := fileResults(res.Files)
	return stream.SendAndClose(&quarryv1.SyncFilesResponse{Summary: summary(res), Files: results, FilesTruncated: truncated})
}

// UpsertFile adds or replaces one file.
func (s *Knowledge) UpsertFile(ctx context.Context, req *quarryv1.UpsertFileRequest) (*quarryv1.UpsertFileResponse, error) {
	res, err := s.reg.UpsertFile(ctx, req.GetKnowledgeBase(), req.GetPath(), req.GetContent())
	if err != nil {
		return nil, toStatus(ctx, s.log, err)
	}
	out := &quarryv1.UpsertFileResponse{Summary: summary(res)}
	if fs, _ := fileResults(res.Files); len(fs) > 0 {
		out.File = fs[0]
	}
	return out, nil
}

// DeleteFile removes one file.
func (s *Knowledge) DeleteFile(ctx context.Context, req *quarryv1.DeleteFileRequest) (*quarryv1.DeleteFileResponse, error) {
	res, err := s.reg.DeleteFile(ctx, req.GetKnowledgeBase(), req.GetPath())
	if err != nil {
		return nil, toStatus(ctx, s.log, err)
	}
	return &quarryv1.DeleteFileResponse{Summary: summary(res)}, nil
}

// ArchiveFile replaces a file by its ghost cue.
func (s *Knowledge) ArchiveFile(ctx context.Context, req *quarryv1.ArchiveFileRequest) (*quarryv1.ArchiveFileResponse, error) {
	res, err := s.reg.ArchiveFile(ctx, req.GetKnowledgeBase(), req.GetPath())
	if err != nil {
		return nil, toStatus(ctx, s.log, err)
	}
	return &quarryv1.ArchiveFileResponse{Summary: summary(res.WriteResult), StubPath: res.StubPath, ArchivedPath: res.ArchivedPath, GhostCue: res.GhostCue}, nil
}

// RestoreFile brings an archived file back.
func (s *Knowledge) RestoreFile(ctx context.Context, req *quarryv1.RestoreFileRequest) (*quarryv1.RestoreFileResponse, error) {
	res, err := s.reg.RestoreFile(ctx, req.GetKnowledgeBase(), req.GetPath())
	if err != nil {
		return nil, toStatus(ctx, s.log, err)
	}
	out := &quarryv1.RestoreFileResponse{Summary: summary(res)}
	for _, f := range res.Files {
		if f.Outcome == kb.Indexed {
			out.Path = f.Path
		}
	}
	return out, nil
}

// ReadArchivedFile returns an archived file's full text.
func (s *Knowledge) ReadArchivedFile(ctx context.Context, req *quarryv1.ReadArchivedFileRequest) (*quarryv1.ReadArchivedFileResponse, error) {
	k, d, stub, err := s.reg.ReadArchivedFile(ctx, req.GetKnowledgeBase(), req.GetPath())
	if err != nil {
		return nil, toStatus(ctx, s.log, err)
	}
	doc := document(d, k)
	// The full text is not indexed, so the runtime has no signals for it: report the
	// values its front matter starts from.
	doc.Importance, doc.Maturity = d.Importance, maturity(d.Maturity)
	return &quarryv1.ReadArchivedFileResponse{Document: doc, StubPath: stub, Generation: k.Generation}, nil
}

// SuggestArchive lists archive candidates.
func (s *Knowledge) SuggestArchive(ctx context.Context, req *quarryv1.SuggestArchiveRequest) (*quarryv1.SuggestArchiveResponse, error) {
	below := req.GetBelowImportance()
	// Written so that NaN fails too: it compares false with both bounds.
	if !(below >= 0 && below <= 100) {
		return nil, status.Errorf(codes.InvalidArgument, "below_importance must be in [0,100], got %v", below)
	}
	limit := int(req.GetLimit())
	switch {
	case limit == 0:
		limit = 100
	case limit < 0 || limit > 10000:
		return nil, status.Errorf(codes.InvalidArgument, "limit must be in [1,10000], got %d", limit)
	}
	k, cands, err := s.reg.SuggestArchive(req.GetKnowledgeBase(), below, limit)
	if err != nil {
		return nil, toStatus(ctx, s.log, err)
	}
	out := &quarryv1.SuggestArchiveResponse{Generation: k.Generation}
	for _, c := range cands {
		a := &quarryv1.ArchiveCandidate{Path: c.Doc.Path, Title: c.Doc.Title, Importance: c.Importance, Maturity: maturity(c.Maturity)}
		if !c.LastAccess.IsZero() {
			a.LastAccess = timestamppb.New(c.LastAccess)
		}
		out.Candidates = append(out.Candidates, a)
	}
	return out, nil
}

func summary(res *kb.WriteResult) *quarryv1.WriteSummary {
	return &quarryv1.WriteSummary{
		Generation:    res.KB.Generation,
		Changed:       res.Changed,
		DocumentCount: int32(res.KB.Tree.Len()),
		Indexed:       int32(res.Count(kb.Indexed)),
		Unchanged:     int32(res.Count(kb.Unchanged)),
		Removed:       int32(res.Count(kb.Removed)),
		Rejected:      int32(res.Count(kb.Rejected)),
	}
}

// maxListedBytes bounds the per-file results a sync's response lists, at about half a
// client's default 4 MiB message limit. Listed whole, a sync of 100,000 files (within
// -kb-max-files) built a response over it after the write had been made: the client
// was told RESOURCE_EXHAUSTED, and so was every retry.
var maxListedBytes = 2 << 20

// listedResultBytes is a result's size on the wire beside its path and reason: tags,
// lengths and the outcome.
const listedResultBytes = 8

// fileResults returns fs for a response, sorted by path, and whether some were left out
// (maxListedBytes): rejected files are listed first, then removed, indexed and unchanged
// ones, as far as the bound allows.
func fileResults(fs []kb.FileResult) (out []*quarryv1.FileResult, truncated bool) {
	order := slices.Clone(fs)
	rank := map[kb.Outcome]int{kb.Rejected: 0, kb.Removed: 1, kb.Indexed: 2, kb.Unchanged: 3}
	slices.SortStableFunc(order, func(a, b kb.FileResult) int { return rank[a.Outcome] - rank[b.Outcome] })
	size := 0
	for _, f := range order {
		if size += len(f.Path) + len(f.Reason) + listedResultBytes; size > maxListedBytes {
			truncated = true
			break
		}
		out = append(out, &quarryv1.FileResult{Path: f.Path, Outcome: outcome(f.Outcome), Reason: f.Reason})
	}
	slices.SortFunc(out, func(a, b *quarryv1.FileResult) int { return strings.Compare(a.GetPath(), b.GetPath()) })
	return out, truncated
}

func outcome(o kb.Outcome) quarryv1.FileOutcome {
	switch o {
	case kb.Indexed:
		return quarryv1.FileOutcome_FILE_OUTCOME_INDEXED
	case kb.Unchanged:
		return quarryv1.FileOutcome_FILE_OUTCOME_UNCHANGED
	case kb.Removed:
		return quarryv1.FileOutcome_FILE_OUTCOME_REMOVED
	case kb.Rejected:
		return quarryv1.FileOutcome_FILE_OUTCOME_REJECTED
	default:
		return quarryv1.FileOutcome_FILE_OUTCOME_UNSPECIFIED
	}
}
