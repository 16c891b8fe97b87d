package upstream

import (
	"context"
	"errors"
	"net"
	"testing"

	quarryv1 "github.com/quarry-router/quarry/gen/quarry/v1"
	"github.com/quarry-router/quarry/services/agent/tools"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// stub fails with the code named by the path or query, or answers.
type stub struct {
	quarryv1.UnimplementedSearchServiceServer
}

func code(s string) error {
	for _, c := range []codes.Code{codes.NotFound, codes.InvalidArgument, codes.Unavailable, codes.DeadlineExceeded} {
		if s == c.String() {
			return status.Error(c, "stub says "+s)
		}
	}
	return nil
}

func (stub) Search(_ context.Context, req *quarryv1.SearchRequest) (*quarryv1.SearchResponse, error) {
	if err := code(req.GetQuery()); err != nil {
		return nil, err
	}
	return &quarryv1.SearchResponse{Results: []*quarryv1.Source{{Path: req.GetScope() + "/x.md"}}}, nil
}

func (stub) ReadDocument(_ context.Context, req *quarryv1.ReadDocumentRequest) (*quarryv1.ReadDocumentResponse, error) {
	if err := code(req.GetPath()); err != nil {
		return nil, err
	}
	return &quarryv1.ReadDocumentResponse{Document: &quarryv1.Document{Path: req.GetPath()}}, nil
}

func (stub) ListFolder(_ context.Context, req *quarryv1.ListFolderRequest) (*quarryv1.ListFolderResponse, error) {
	if err := code(req.GetPath()); err != nil {
		return nil, err
	}
	return &quarryv1.ListFolderResponse{Entries: []*quarryv1.FolderEntry{{Path: req.GetPath() + "/a.md"}}}, nil
}

func (stub) GetManifest(_ context.Context, req *quarryv1.GetManifestRequest) (*quarryv1.GetManifestResponse, error) {
	if err := code(req.GetKnowledgeBase()); err != nil {
		return nil, err
	}
	return &quarryv1.GetManifestResponse{Generation: 4}, nil
}

func TestStatusCodesBecomeToolErrors(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	quarryv1.RegisterSearchServiceServer(srv, stub{})
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	s := NewSearch(quarryv1.NewSearchServiceClient(conn))
	ctx := context.Background()
	read := func(p string) error { _, err := s.ReadDocument(ctx, "kb", p); return err }
	list := func(p string) error { _, _, err := s.ListFolder(ctx, "kb", p, 0); return err }
	search := func(q string) error { _, err := s.Search(ctx, "kb", q, "", 5); return err }
	manifest := func(kb string) error { _, err := s.Manifest(ctx, kb); return err }
	tests := []struct {
		name string
		call func(string) error
		code codes.Code
		want error
	}{
		{"a missing document is ErrNotFound", read, codes.NotFound, tools.ErrNotFound},
		{"a refused path is ErrOutsideKB", read, codes.InvalidArgument, tools.ErrOutsideKB},
		{"a refused folder is ErrOutsideKB", list, codes.InvalidArgument, tools.ErrOutsideKB},
		{"a refused search is ErrInvalidArguments", search, codes.InvalidArgument, tools.ErrInvalidArguments},
		{"a deadline stays a deadline", read, codes.DeadlineExceeded, context.DeadlineExceeded},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.call(tt.code.String()); !errors.Is(err, tt.want) {
				t.Fatalf("error %v, want %v", err, tt.want)
			}
		})
	}
	if err := manifest(codes.Unavailable.String()); status.Code(errors.Unwrap(err)) != codes.Unavailable {
		t.Errorf("UNAVAILABLE: %v, want the status wrapped", err)
	}
	if res, err := s.Search(ctx, "kb", "rotation", "auth", 5); err != nil || res[0].GetPath() != "auth/x.md" {
		t.Errorf("Search = %v, %v", res, err)
	}
	if m, err := s.Manifest(ctx, "kb"); err != nil || m.GetGeneration() != 4 {
		t.Errorf("Manifest = %v, %v", m, err)
	}
}
