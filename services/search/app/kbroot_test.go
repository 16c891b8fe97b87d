package app

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	quarryv1 "github.com/quarry-router/quarry/gen/quarry/v1"
	"github.com/quarry-router/quarry/platform/grpcx"
)

// servedKBs returns the ids of the knowledge bases the service at addr serves.
func servedKBs(t *testing.T, addr string) []string {
	t.Helper()
	conn, err := grpcx.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	res, err := quarryv1.NewSearchServiceClient(conn).ListKnowledgeBases(ctx, &quarryv1.ListKnowledgeBasesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, k := range res.GetKnowledgeBases() {
		ids = append(ids, k.GetId())
	}
	return ids
}

// waitServed waits until the service at addr serves exactly want.
func waitServed(t *testing.T, addr string, want []string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		got := servedKBs(t, addr)
		if slices.Equal(got, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("knowledge bases served = %v, want %v", got, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Under -kb-root one team's folder that cannot be loaded (here: more files than
// -kb-max-files) made Run fail, so every other team's knowledge base went down with
// it and the pod crash-looped. Knowledge bases appear under -kb-root while the
// service runs too (a team's sync job, a new git-sync link), and were not served until
// a restart. The others are served, a new folder is found by the next -watch-poll
// rescan, and a folder that failed is tried again there.
func TestKBRootFoldersAreLoadedApartAndFoundWhileRunning(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"in memory", nil},
		{"with a data dir", []string{"-data-dir", t.TempDir()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := kbFolder(t, map[string]string{
				"ops/pager.md":     "# Pager\n\nThe pager rotates weekly.\n",
				"big/one.md":       "# One\n\nThe first file.\n",
				"big/two.md":       "# Two\n\nThe second file.\n",
				"big/more/tree.md": "# Three\n\nOne file too many.\n",
			})
			args := append([]string{"-kb-root", root, "-kb-max-files", "2", "-watch-poll", "100ms"}, tc.args...)
			addr, _, _ := start(t, args...)
			if got := servedKBs(t, addr); !slices.Equal(got, []string{"ops"}) {
				t.Fatalf("knowledge bases served = %v, want [ops]", got)
			}

			// A new team's folder is served without a restart.
			if err := os.MkdirAll(filepath.Join(root, "billing"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(root, "billing", "invoices.md"), []byte("# Invoices\n\nInvoices go out monthly.\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			waitServed(t, addr, []string{"billing", "ops"})

			// The folder that failed is served once it can be.
			if err := os.RemoveAll(filepath.Join(root, "big", "more")); err != nil {
				t.Fatal(err)
			}
			waitServed(t, addr, []string{"big", "billing", "ops"})
		})
	}
}

// Without any knowledge base to serve, the start still fails, naming why.
func TestKBRootWithNothingLoadableFails(t *testing.T) {
	root := kbFolder(t, map[string]string{
		"big/one.md": "# One\n\nThe first file.\n",
		"big/two.md": "# Two\n\nThe second file.\n",
	})
	err := Run(context.Background(), []string{"-listen", "127.0.0.1:0", "-kb-root", root, "-kb-max-files", "1"},
		slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
	if err == nil || !containsAll(err.Error(), "big", "kb-max-files") {
		t.Fatalf("Run = %v, want an error naming big and -kb-max-files", err)
	}
}

// SIGTERM (or Ctrl-C) while the knowledge bases load ended Run with "context
// canceled": the process exited 1 and logged an error, and systemd marked a stop
// during start as a failure. A stop asked for is no failure.
func TestAStopWhileLoadingIsNoFailure(t *testing.T) {
	root := kbFolder(t, map[string]string{"ops/pager.md": "# Pager\n\nThe pager rotates weekly.\n"})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := Run(ctx, []string{"-listen", "127.0.0.1:0", "-kb", "team=" + root, "-data-dir", t.TempDir()},
		slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
	if err != nil {
		t.Fatalf("Run stopped while loading = %v, want nil", err)
	}
}

func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}
