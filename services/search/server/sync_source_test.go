package server

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	quarryv1 "github.com/quarry-router/quarry/gen/quarry/v1"
	"github.com/quarry-router/quarry/platform/auth"
	"github.com/quarry-router/quarry/platform/grpcx"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

const (
	teamWriterKey = "qk_test_team_writer_0123456789ab"
	allWriterKey  = "qk_test_all_writer_0123456789abc"
)

// serveWriteWithAuth serves f's registry's write side as the search service does
// (app.go): KnowledgeService needs Write. One key may write "team" only, one all.
func serveWriteWithAuth(t *testing.T, f *writeFixture) (teamOnly, all quarryv1.KnowledgeServiceClient) {
	t.Helper()
	policy, err := auth.NewPolicy([]auth.Key{
		{Name: "team-writer", SHA256: auth.HashKey(teamWriterKey), KnowledgeBases: []string{team}, Write: true},
		{Name: "all-writer", SHA256: auth.HashKey(allWriterKey), KnowledgeBases: []string{"*"}, Write: true},
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
	quarryv1.RegisterKnowledgeServiceServer(gs.Server, NewKnowledge(f.reg, log))
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- gs.Serve(ctx, lis) }()
	t.Cleanup(func() {
		stop()
		select {
		case <-served:
		case <-time.After(wait):
			t.Errorf("server did not stop")
		}
	})
	dial := func(key string) quarryv1.KnowledgeServiceClient {
		conn, err := grpcx.Dial(lis.Addr().String(), grpcx.WithBearer(key))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		return quarryv1.NewKnowledgeServiceClient(conn)
	}
	return dial(teamWriterKey), dial(allWriterKey)
}

// TestSyncTreeKeepsAKeyToItsOwnSource: -sync-root holds the sources of several
// knowledge bases. A key allowed to write "team" only synced "team" from "secret/", the
// source of a knowledge base it may not read, and then read that knowledge base's
// documents through "team". A key limited to some knowledge bases may sync one only from
// the folder named after it (or beneath), links resolved.
func TestSyncTreeKeepsAKeyToItsOwnSource(t *testing.T) {
	f := startWrite(t, nil)
	writeFiles(t, filepath.Join(f.syncRoot, team), map[string]string{"ops/pager.md": "# Pager\n\nWho is on call.\n"})
	writeFiles(t, filepath.Join(f.syncRoot, "secret"), map[string]string{"hr/salaries.md": "# Salaries\n\nConfidential.\n"})
	// A link inside the team's folder that leads to another's source.
	if err := os.Symlink(filepath.Join(f.syncRoot, "secret"), filepath.Join(f.syncRoot, team, "linked")); err != nil {
		t.Fatal(err)
	}
	teamKey, allKey := serveWriteWithAuth(t, f)

	for _, src := range []string{"secret", "secret/hr", team + "/../secret", ".", "", team + "/linked", filepath.Join(f.syncRoot, "secret")} {
		_, err := teamKey.SyncTree(callCtx(t), &quarryv1.SyncTreeRequest{KnowledgeBase: team, Source: src, KeepMissing: true})
		if status.Code(err) != codes.PermissionDenied && status.Code(err) != codes.FailedPrecondition && status.Code(err) != codes.InvalidArgument {
			t.Errorf("team-only key: SyncTree(team, %q) = %v, want it refused", src, err)
		}
		if k, err := f.reg.Get(team); err == nil {
			if _, err := k.Tree.Doc("hr/salaries.md"); err == nil {
				t.Fatalf("team-only key: SyncTree(team, %q) copied another source's documents into team", src)
			}
		}
	}
	// Its own folder, by name or beneath, is fine.
	for _, src := range []string{team, team + "/ops", filepath.Join(f.syncRoot, team)} {
		if _, err := teamKey.SyncTree(callCtx(t), &quarryv1.SyncTreeRequest{KnowledgeBase: team, Source: src, KeepMissing: true}); err != nil {
			t.Errorf("team-only key: SyncTree(team, %q) = %v, want it synced", src, err)
		}
	}
	// A key for every knowledge base may sync from anywhere under the root.
	if _, err := allKey.SyncTree(callCtx(t), &quarryv1.SyncTreeRequest{KnowledgeBase: team, Source: "secret", KeepMissing: true}); err != nil {
		t.Errorf("all-KB key: SyncTree(team, secret) = %v, want it synced", err)
	}
}

// TestSyncTreeErrorsTellNothingOfTheServersFolders: a refused source was answered with
// the operating system's error, which names the service's folders ("lstat
// /srv/sync/x: no such file or directory"), and a folder outside -sync-root was looked
// up before it was refused, so "missing" and "outside" told any writer which paths
// exist on the service's machine.
func TestSyncTreeErrorsTellNothingOfTheServersFolders(t *testing.T) {
	f := startWrite(t, nil)
	_, allKey := serveWriteWithAuth(t, f)
	exists := t.TempDir()
	msgs := map[string]string{}
	for _, src := range []string{"missing", exists, filepath.Join(exists, "missing"), "../" + filepath.Base(exists)} {
		_, err := allKey.SyncTree(callCtx(t), &quarryv1.SyncTreeRequest{KnowledgeBase: team, Source: src})
		if status.Code(err) != codes.FailedPrecondition {
			t.Errorf("SyncTree(%q) = %v, want FAILED_PRECONDITION", src, err)
			continue
		}
		msg := status.Convert(err).Message()
		if strings.Contains(msg, f.syncRoot) || strings.Contains(msg, "lstat") || strings.Contains(msg, "no such file") {
			t.Errorf("SyncTree(%q) says %q: names the service's folders", src, msg)
		}
		msgs[src] = strings.ReplaceAll(msg, src, "SRC")
	}
	if a, b := msgs[exists], msgs[filepath.Join(exists, "missing")]; a != b {
		t.Errorf("outside -sync-root, an existing folder is refused with %q and a missing one with %q: an oracle of the service's folders", a, b)
	}
}
