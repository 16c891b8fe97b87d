package app

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	quarryv1 "github.com/quarry-router/quarry/gen/quarry/v1"
	"github.com/quarry-router/quarry/platform/grpcx"
	"github.com/quarry-router/quarry/services/search/tree/treetest"
)

// A team's knowledge base shipped as a ConfigMap mounted under -kb-root, beside a plain
// folder: served as the KB named after its mount, read through its "..data" link, and
// an edit of the ConfigMap (the kubelet's atomic update) changes the answers, through
// the folder watcher, with no restart.
func TestAConfigMapMountedUnderTheKBRootIsServedAndFollowed(t *testing.T) {
	root := kbFolder(t, map[string]string{"platform/deploy.md": "# Deploys\n\nDeploys go out on Tuesdays.\n"})
	vol := treetest.NewVolume(t, filepath.Join(root, "runbooks"), map[string]string{
		"pager.md":       "# Pager rotation\n\nThe pager rotates weekly.\n",
		"ops/backups.md": "# Backups\n\nNightly backups go to object storage.\n",
	})
	addr, _, _ := start(t, "-kb-root", root, "-watch-debounce", "20ms")
	conn, err := grpcx.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	search := quarryv1.NewSearchServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	read := func() string {
		res, err := search.ReadDocument(ctx, &quarryv1.ReadDocumentRequest{KnowledgeBase: "runbooks", Path: "pager.md"})
		if err != nil {
			t.Fatalf("ReadDocument runbooks/pager.md: %v", err)
		}
		return res.GetDocument().GetContent()
	}
	res, err := search.Resolve(ctx, &quarryv1.ResolveRequest{KnowledgeBase: "runbooks", Query: "how often does the pager rotate?"})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.GetSources()) == 0 || res.GetSources()[0].GetPath() != "pager.md" {
		t.Fatalf("the question found %v, want pager.md first", res.GetSources())
	}
	if got := read(); !strings.Contains(got, "weekly") {
		t.Fatalf("pager.md reads %q", got)
	}

	vol.Update(map[string]string{"pager.md": "# Pager rotation\n\nThe pager follows the sun.\n"})
	for !strings.Contains(read(), "follows the sun") {
		if ctx.Err() != nil {
			t.Fatal("the ConfigMap's update never reached the answers")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := search.ReadDocument(ctx, &quarryv1.ReadDocumentRequest{KnowledgeBase: "runbooks", Path: "ops/backups.md"}); err == nil {
		t.Error("ops/backups.md, gone from the ConfigMap, is still served")
	}
}
