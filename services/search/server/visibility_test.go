package server

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
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
	return serveWithPolicy(t, f, policy, platformOnlyKey)
}

// serveWithPolicy serves f's registry with policy and returns a connection that sends
// key.
func serveWithPolicy(t *testing.T, f *fixture, policy *auth.Policy, key string) *grpc.ClientConn {
	t.Helper()
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
	conn, err := grpcx.Dial(lis.Addr().String(), grpcx.WithBearer(key))
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

	if _, ids := watchFirst(t, c, wait); slices.Contains(ids, extras) {
		t.Errorf("WatchGenerations with a platform-only key sends %v: %q leaks", ids, extras)
	}
}

// A watch outlives changes to the keys file: it sent the changes of every knowledge
// base its key could see when it opened, after the key was narrowed to fewer, and went
// on after the key was revoked. A key whose knowledge bases change now has its watch
// ended UNAVAILABLE (changes are deltas: the watcher starts again from a whole first
// message, under the new rights), and a revoked key's watch ends UNAUTHENTICATED, each
// within a couple of seconds and without waiting for a change.
func TestAWatchFollowsTheKeysFile(t *testing.T) {
	f := start(t)
	path := filepath.Join(t.TempDir(), "keys.json")
	write := func(kbs ...string) {
		t.Helper()
		var keys []auth.Key
		if len(kbs) > 0 {
			keys = append(keys, auth.Key{Name: "watcher", SHA256: auth.HashKey(platformOnlyKey), KnowledgeBases: kbs})
		}
		keys = append(keys, auth.Key{Name: "other", SHA256: auth.HashKey("qk_test_other_key_0123456789abcdef"), KnowledgeBases: []string{"*"}})
		b, err := json.Marshal(keys)
		if err != nil {
			t.Fatal(err)
		}
		// As the kubelet updates a Secret's volume: a new file put in place.
		if err := os.WriteFile(path+".new", b, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(path+".new", path); err != nil {
			t.Fatal(err)
		}
	}
	write(platform, extras)
	policy, err := auth.LoadPolicy(path, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	c := quarryv1.NewSearchServiceClient(serveWithPolicy(t, f, policy, platformOnlyKey))
	watch := func(want ...string) quarryv1.SearchService_WatchGenerationsClient {
		t.Helper()
		stream, ids := watchFirst(t, c, 4*wait)
		if !slices.Equal(ids, want) {
			t.Fatalf("first message holds %v, want %v", ids, want)
		}
		return stream
	}
	ends := func(stream quarryv1.SearchService_WatchGenerationsClient, want codes.Code) {
		t.Helper()
		start := time.Now()
		msg, err := stream.Recv()
		if status.Code(err) != want {
			t.Fatalf("the watch got %v, %v; want %v", msg, err, want)
		}
		if took := time.Since(start); took > 3*time.Second {
			t.Errorf("the watch ended after %v, want within a couple of seconds", took.Round(time.Millisecond))
		}
	}

	stream := watch(extras, platform)
	write(platform) // narrowed
	ends(stream, codes.Unavailable)
	stream = watch(platform)
	write(platform, extras) // widened
	ends(stream, codes.Unavailable)
	stream = watch(extras, platform)
	write() // revoked
	ends(stream, codes.Unauthenticated)
}

// watchFirst opens a generations watch for at most d and returns it with the ids of its
// first message.
func watchFirst(t *testing.T, c quarryv1.SearchServiceClient, d time.Duration) (quarryv1.SearchService_WatchGenerationsClient, []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	stream, err := c.WatchGenerations(ctx, &quarryv1.WatchGenerationsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	first, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	return stream, stateIDs(first.GetKnowledgeBases())
}
