// Package server is the gRPC edge of the search service: it converts between protobuf
// messages and the domain types, and maps domain errors to status codes in one place.
package server

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"syscall"
	"time"
	"unicode/utf8"

	quarryv1 "github.com/quarry-router/quarry/gen/quarry/v1"
	"github.com/quarry-router/quarry/platform/auth"
	"github.com/quarry-router/quarry/platform/text"
	"github.com/quarry-router/quarry/services/search/engine"
	"github.com/quarry-router/quarry/services/search/gate"
	"github.com/quarry-router/quarry/services/search/kb"
	"github.com/quarry-router/quarry/services/search/resolve"
	"github.com/quarry-router/quarry/services/search/tree"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Server implements quarryv1.SearchServiceServer.
type Server struct {
	quarryv1.UnimplementedSearchServiceServer
	reg *kb.Registry
	res *resolve.Resolver
	log *slog.Logger
	// draining, when closed, ends the generation watches (nil: never).
	draining <-chan struct{}
}

// StopWatchesOn ends WatchGenerations streams when draining is closed (grpcx.Server's
// Draining), so a shutdown does not wait for watchers that never leave.
func (s *Server) StopWatchesOn(draining <-chan struct{}) { s.draining = draining }

// New returns the search service's gRPC server.
func New(reg *kb.Registry, res *resolve.Resolver, log *slog.Logger) *Server {
	return &Server{reg: reg, res: res, log: log}
}

// maxQueryBytes bounds the text of Resolve and Search requests; the gateway enforces
// its own, usually smaller, limit for users.
const maxQueryBytes = 64 << 10

// Resolve routes a question.
func (s *Server) Resolve(ctx context.Context, req *quarryv1.ResolveRequest) (*quarryv1.ResolveResponse, error) {
	if err := checkQuery(req.GetQuery()); err != nil {
		return nil, err
	}
	r, err := s.res.Resolve(ctx, req.GetKnowledgeBase(), req.GetQuery())
	if err != nil {
		return nil, s.toStatus(ctx, err)
	}
	resp := &quarryv1.ResolveResponse{
		Route:            routeTier(r.Route),
		Answer:           r.Answer,
		FallbackDegraded: r.FallbackDegraded,
		Generation:       r.KB.Generation,
		ContentVersion:   r.KB.Version,
	}
	if r.Route != gate.OutOfDomain {
		resp.Sources = sources(r.KB, r.Results, r.Excerpts)
	}
	for _, d := range r.Prefetched {
		resp.Prefetched = append(resp.Prefetched, document(d, r.KB))
	}
	if req.GetExplain() {
		resp.Gate = gateTrace(r, s.res.Config())
		resp.Stages = stages(r.Stages)
	}
	return resp, nil
}

// Search returns ranked results.
func (s *Server) Search(ctx context.Context, req *quarryv1.SearchRequest) (*quarryv1.SearchResponse, error) {
	limit := int(req.GetLimit())
	switch {
	case limit == 0:
		limit = 10
	case limit < 0 || limit > 50:
		return nil, status.Errorf(codes.InvalidArgument, "limit must be in [1,50], got %d", limit)
	}
	if err := checkQuery(req.GetQuery()); err != nil {
		return nil, err
	}
	k, results, err := s.res.Search(ctx, req.GetKnowledgeBase(), req.GetQuery(), req.GetScope(), limit)
	if err != nil {
		return nil, s.toStatus(ctx, err)
	}
	return &quarryv1.SearchResponse{Results: sources(k, results, nil), Generation: k.Generation}, nil
}

// ReadDocument returns one document.
func (s *Server) ReadDocument(ctx context.Context, req *quarryv1.ReadDocumentRequest) (*quarryv1.ReadDocumentResponse, error) {
	k, err := s.reg.Get(req.GetKnowledgeBase())
	if err != nil {
		return nil, s.toStatus(ctx, err)
	}
	d, err := k.Tree.Doc(req.GetPath())
	if err != nil {
		return nil, s.toStatus(ctx, err)
	}
	return &quarryv1.ReadDocumentResponse{Document: document(d, k), Generation: k.Generation}, nil
}

// ListFolder lists one folder.
func (s *Server) ListFolder(ctx context.Context, req *quarryv1.ListFolderRequest) (*quarryv1.ListFolderResponse, error) {
	k, err := s.reg.Get(req.GetKnowledgeBase())
	if err != nil {
		return nil, s.toStatus(ctx, err)
	}
	if req.GetLimit() < 0 {
		return nil, status.Errorf(codes.InvalidArgument, "limit %d: want 0 (all entries) or more", req.GetLimit())
	}
	entries, err := k.Tree.List(req.GetPath())
	if err != nil {
		return nil, s.toStatus(ctx, err)
	}
	resp := &quarryv1.ListFolderResponse{Generation: k.Generation, Total: int32(len(entries))}
	if n := int(req.GetLimit()); n > 0 && n < len(entries) {
		entries = entries[:n]
	}
	for _, e := range entries {
		resp.Entries = append(resp.Entries, &quarryv1.FolderEntry{Path: e.Path, Folder: e.Folder, Title: e.Title, HasSummary: e.HasSummary, Archived: e.Archived})
	}
	return resp, nil
}

// GetManifest returns the manifest, built lazily per generation.
func (s *Server) GetManifest(ctx context.Context, req *quarryv1.GetManifestRequest) (*quarryv1.GetManifestResponse, error) {
	k, err := s.reg.Get(req.GetKnowledgeBase())
	if err != nil {
		return nil, s.toStatus(ctx, err)
	}
	resp := manifestProto(k.Manifest(), k.Generation)
	resp.ContentVersion = k.Version
	return resp, nil
}

// ListKnowledgeBases lists the knowledge bases.
func (s *Server) ListKnowledgeBases(ctx context.Context, _ *quarryv1.ListKnowledgeBasesRequest) (*quarryv1.ListKnowledgeBasesResponse, error) {
	return &quarryv1.ListKnowledgeBasesResponse{KnowledgeBases: states(visible(ctx, s.reg.States()))}, nil
}

// visible keeps the knowledge bases the caller's key may use: a key limited to some
// must not learn that the others exist, as PERMISSION_DENIED does not tell it either.
func visible(ctx context.Context, ss []kb.State) []kb.State {
	out := make([]kb.State, 0, len(ss))
	for _, st := range ss {
		if auth.Allowed(ctx, st.ID) {
			out = append(out, st)
		}
	}
	return out
}

// WatchGenerations streams generation changes.
func (s *Server) WatchGenerations(_ *quarryv1.WatchGenerationsRequest, stream grpc.ServerStreamingServer[quarryv1.WatchGenerationsResponse]) error {
	ch, stop := s.reg.Watch()
	defer stop()
	ctx := stream.Context()
	opened, _ := auth.CallerFrom(ctx)
	// The keys file may change while the watch is open. Changes after the first
	// message are deltas, which cannot tell the watcher that a knowledge base became
	// visible or hidden: a key whose rights change ends the watch UNAVAILABLE, and the
	// watcher's next watch starts from a whole first message under the new rights. A
	// revoked key's ends UNAUTHENTICATED. Looked at on every change and every second.
	recheck := func() error {
		c, _, err := auth.Recheck(ctx)
		if err != nil {
			return err
		}
		if !slices.Equal(c.KnowledgeBases, opened.KnowledgeBases) {
			return status.Error(codes.Unavailable, "this API key's knowledge bases changed: watch again")
		}
		return nil
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	first := true
	for {
		select {
		case <-stream.Context().Done():
			return nil
		case <-s.draining:
			// The server is shutting down: end the watch so the drain does not wait on
			// it; watchers reconnect to another replica.
			return status.Error(codes.Unavailable, "search service shutting down")
		case <-tick.C:
			if err := recheck(); err != nil {
				return err
			}
		case st := <-ch:
			if err := recheck(); err != nil {
				return err
			}
			st = visible(ctx, st)
			if len(st) == 0 && !first {
				continue // changes of knowledge bases the caller may not see
			}
			first = false
			if err := stream.Send(&quarryv1.WatchGenerationsResponse{KnowledgeBases: states(st)}); err != nil {
				return err
			}
		}
	}
}

// maxStatusBytes bounds the message of a status: messages quote what they refuse, and a
// long trailer is over what many clients accept (8 KiB of metadata by default in gRPC's
// C-core and Java), which then see a transport error instead of the status.
const maxStatusBytes = 1 << 10

// clip shortens msg to at most maxStatusBytes, cutting between characters.
func clip(msg string) string {
	if len(msg) <= maxStatusBytes {
		return msg
	}
	const more = "…"
	cut := maxStatusBytes - len(more)
	for cut > 0 && !utf8.RuneStart(msg[cut]) {
		cut--
	}
	return msg[:cut] + more
}

// checkQuery rejects what no search can answer: an empty or oversized query.
func checkQuery(q string) error {
	if text.Blank(q) {
		return status.Error(codes.InvalidArgument, "query is empty")
	}
	if len(q) > maxQueryBytes {
		return status.Errorf(codes.InvalidArgument, "query is %d bytes, the limit is %d", len(q), maxQueryBytes)
	}
	return nil
}

// toStatus is the one place where domain errors become gRPC status codes. Causes that
// are not the caller's business are logged, not returned.
func (s *Server) toStatus(ctx context.Context, err error) error { return toStatus(ctx, s.log, err) }

func toStatus(ctx context.Context, log *slog.Logger, err error) error {
	switch {
	case errors.Is(err, kb.ErrInvalidID), errors.Is(err, tree.ErrOutsideTree), errors.Is(err, tree.ErrInvalidPath),
		errors.Is(err, tree.ErrNotKnowledgeFile), errors.Is(err, tree.ErrSymlink), errors.Is(err, tree.ErrRejected),
		errors.Is(err, kb.ErrDuplicatePath):
		return status.Error(codes.InvalidArgument, clip(err.Error()))
	case errors.Is(err, kb.ErrUnknownKB), errors.Is(err, tree.ErrNotFound), errors.Is(err, kb.ErrNotArchived):
		return status.Error(codes.NotFound, clip(err.Error()))
	case errors.Is(err, kb.ErrExists):
		return status.Error(codes.AlreadyExists, clip(err.Error()))
	case errors.Is(err, tree.ErrReadOnly):
		// The cause names folders of the server.
		log.ErrorContext(ctx, "knowledge base folder not writable", "err", err)
		return status.Error(codes.FailedPrecondition, "the knowledge base's folder cannot be written (read-only or no permission)")
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		// The write was undone (kb.applyFiles); the cause names folders of the server.
		log.ErrorContext(ctx, "knowledge base volume full", "err", err)
		return status.Error(codes.ResourceExhausted, "the knowledge base's volume is full")
	case errors.Is(err, kb.ErrNotArchivable), errors.Is(err, kb.ErrSyncSource), errors.Is(err, tree.ErrTooManyFiles):
		return status.Error(codes.FailedPrecondition, clip(err.Error()))
	case errors.Is(err, kb.ErrEngine):
		// The engine's own message (a failed Meilisearch task) is what an operator needs.
		log.ErrorContext(ctx, "index write failed", "err", err)
		return status.Error(codes.Unavailable, clip(err.Error()))
	case errors.Is(err, engine.ErrUnavailable):
		// Meilisearch down or overloaded: UNAVAILABLE, and the gateway degrades as it
		// does for an unreachable search service. Its retry policy would send the call
		// to another replica, which asks the same Meilisearch: a negative pushback
		// (gRFC A6) tells the client not to, rather than triple the load on an engine
		// that is failing.
		_ = grpc.SetTrailer(ctx, metadata.Pairs("grpc-retry-pushback-ms", "-1"))
		log.WarnContext(ctx, "search engine unavailable", "err", err)
		return status.Error(codes.Unavailable, "search engine unavailable")
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, "search deadline exceeded")
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, "canceled")
	default:
		log.ErrorContext(ctx, "search failed", "err", err)
		return status.Error(codes.Internal, "search failed")
	}
}
