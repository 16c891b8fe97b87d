// Package upstream adapts the search service's gRPC client to the agent's tools,
// turning its status codes back into the tools' errors.
package upstream

import (
	"context"
	"fmt"

	quarryv1 "github.com/quarry-router/quarry/gen/quarry/v1"
	"github.com/quarry-router/quarry/services/agent/tools"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Search is the tools.KB backed by SearchService.
type Search struct {
	client quarryv1.SearchServiceClient
}

var _ tools.KB = (*Search)(nil)

// NewSearch returns a tools.KB that calls client.
func NewSearch(client quarryv1.SearchServiceClient) *Search {
	return &Search{client: client}
}

// Search implements tools.KB.
func (s *Search) Search(ctx context.Context, kb, query, scope string, limit int) ([]*quarryv1.Source, error) {
	res, err := s.client.Search(ctx, &quarryv1.SearchRequest{KnowledgeBase: kb, Query: query, Scope: scope, Limit: int32(limit)})
	if err != nil {
		return nil, fromStatus("search", scope, err)
	}
	return res.GetResults(), nil
}

// ReadDocument implements tools.KB.
func (s *Search) ReadDocument(ctx context.Context, kb, path string) (*quarryv1.Document, error) {
	res, err := s.client.ReadDocument(ctx, &quarryv1.ReadDocumentRequest{KnowledgeBase: kb, Path: path})
	if err != nil {
		return nil, fromStatus("read", path, err)
	}
	return res.GetDocument(), nil
}

// ListFolder implements tools.KB.
func (s *Search) ListFolder(ctx context.Context, kb, path string, limit int) ([]*quarryv1.FolderEntry, int, error) {
	res, err := s.client.ListFolder(ctx, &quarryv1.ListFolderRequest{KnowledgeBase: kb, Path: path, Limit: int32(limit)})
	if err != nil {
		return nil, 0, fromStatus("list", path, err)
	}
	// A search service from before the limit lists every entry and no total.
	entries, total := res.GetEntries(), int(res.GetTotal())
	total = max(total, len(entries))
	if limit > 0 && len(entries) > limit {
		entries = entries[:limit]
	}
	return entries, total, nil
}

// Manifest implements tools.KB.
func (s *Search) Manifest(ctx context.Context, kb string) (*quarryv1.GetManifestResponse, error) {
	res, err := s.client.GetManifest(ctx, &quarryv1.GetManifestRequest{KnowledgeBase: kb})
	if err != nil {
		return nil, fromStatus("manifest", kb, err)
	}
	return res, nil
}

// fromStatus maps the codes the tools act on to their errors. NOT_FOUND and
// INVALID_ARGUMENT carry the search service's message, which names the path and what
// is wrong with it, for the model to read; the others stay wrapped for the logs.
func fromStatus(op, what string, err error) error {
	st, _ := status.FromError(err)
	switch st.Code() {
	case codes.NotFound:
		return fmt.Errorf("%s %q: %w", op, what, tools.ErrNotFound)
	case codes.InvalidArgument:
		if op == "search" {
			return fmt.Errorf("%s: %w: %s", op, tools.ErrInvalidArguments, st.Message())
		}
		return fmt.Errorf("%s %q: %w: %s", op, what, tools.ErrOutsideKB, st.Message())
	case codes.Canceled:
		return fmt.Errorf("%s %q: %w", op, what, context.Canceled)
	case codes.DeadlineExceeded:
		return fmt.Errorf("%s %q: %w", op, what, context.DeadlineExceeded)
	default:
		return fmt.Errorf("%s %q: %w", op, what, err)
	}
}
