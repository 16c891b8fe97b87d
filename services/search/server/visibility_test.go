package server

import (
	"context"
	"io"
	"log/slog"
	"net"
	"slices"
	"testing"
	"time"

	quarryv1 "github.com/quarry-router/quarry/gen/quarry/v1"
	"github.com/quarry-router/quarry/platform/auth"
	"github.com/quarry-router/quarry/platform/grpcx"
	"github.com/quarry-router/quarry/services/search/resolve"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

const platformOnlyKey = "qk_test_platform_only_0123456789"

// serveWithAuth serves f's registry as the search service does (app.go): WithAuth
// with KnowledgeService needing write; one key, read-only, limited to "platform".
func serveWithAuth(t *testing.T, f *fixture) *grpc.ClientConn {
	t.Helper()
	policy, err := auth.NewPolicy([]auth.Key{
		{Name: "platform-team", SHA256: auth.HashKey(platformOnlyKey), KnowledgeBases: []string{platform}},
	}, "/"+quarryv1.KnowledgeService_ServiceDesc.ServiceName+"/")
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpcx.NewServer(log, grpcx.WithAuth(policy)...)
	now := func() time.Time { return time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC) }
	quarryv1.RegisterSearchServiceServer(gs.Server, New(f.reg, resolve.New(f.cfg, f.reg, now), log))
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- gs.Serve(ctx, lis) }()
	conn, err := grpcx.Dial(lis.Addr().String(), grpcx.WithBearer(platformOnlyKey))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = conn.Close()
		stop()
		select {
		case <-served:
		case <-time.After(wait):
			t.Errorf("server did not stop")
		}
	})
	return conn
}

// TestListingShowsOnlyWhatTheKeyMayUse: a key limited to "platform" is told
// PERMISSION_DENIED for "extras", which says nothing of whether it exists; listing and
// watching knowledge bases must not tell it either (they handed it "extras" with its
// domains and document count).
func TestListingShowsOnlyWhatTheKeyMayUse(t *testing.T) {
	f := start(t)
	c := quarryv1.NewSearchServiceClient(serveWithAuth(t, f))

	_, err := c.GetManifest(callCtx(t), &quarryv1.GetManifestRequest{KnowledgeBase: extras})
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("GetManifest(extras) with a platform-only key: %v, want PERMISSION_DENIED", err)
	}

	resp, err := c.ListKnowledgeBases(callCtx(t), &quarryv1.ListKnowledgeBasesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if ids := stateIDs(resp.GetKnowledgeBases()); slices.Contains(ids, extras) {
		t.Errorf("ListKnowledgeBases with a platform-only key lists %v: %q (domains %v) leaks", ids, extras, resp.GetKnowledgeBases()[slices.Index(ids, extras)].GetDomains())
	}

	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	stream, err := c.WatchGenerations(ctx, &quarryv1.WatchGenerationsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	first, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if ids := stateIDs(first.GetKnowledgeBases()); slices.Contains(ids, extras) {
		t.Errorf("WatchGenerations with a platform-only key sends %v: %q leaks", ids, extras)
	}
	cancel()
}
