package app

import (
	"context"
	"math"
	"testing"
	"time"

	quarryv1 "github.com/quarry-router/quarry/gen/quarry/v1"
	"github.com/quarry-router/quarry/platform/grpcx"
	"github.com/quarry-router/quarry/platform/redistest"
)

// importanceOf reads a file's runtime importance from a search replica, through the
// public API (SuggestArchive lists every file below 100).
func importanceOf(t *testing.T, addr, kb, path string) float64 {
	t.Helper()
	conn, err := grpcx.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := quarryv1.NewKnowledgeServiceClient(conn).SuggestArchive(ctx, &quarryv1.SuggestArchiveRequest{KnowledgeBase: kb, BelowImportance: 100})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range res.GetCandidates() {
		if c.GetPath() == path {
			return c.GetImportance()
		}
	}
	t.Fatalf("%s not among %s's files: %v", path, addr, res.GetCandidates())
	return 0
}

// Search replicas behind one Service each answer a share of the questions. Each
// counted only its own hits, so a file gained importance once per replica's share of
// them: with -share-signals, every replica counts every replica's hits.
func TestReplicasCountEachOthersHitsWithShareSignals(t *testing.T) {
	srv := redistest.Start(t)
	root := kbFolder(t, map[string]string{
		"ops/walrus.md": "# Walrus rotation\n\nThe walrus rotation runbook for the pager.\n",
		"ops/other.md":  "# Kafka\n\nConsumer lag alerts.\n",
	})
	tests := []struct {
		name  string
		share bool
	}{
		{"shared", true},
		{"each its own", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			args := []string{"-kb", "team=" + root, "-watch=false", "-signals-flush-interval", "20ms",
				"-redis-addr", srv.Addr, "-redis-key-prefix", tc.name + ":"}
			if tc.share {
				args = append(args, "-share-signals")
			}
			a, _, _ := start(t, args...)
			b, _, _ := start(t, args...)
			before := importanceOf(t, b, "team", "ops/walrus.md")

			conn, err := grpcx.Dial(a)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			const asked = 3
			for range asked {
				res, err := quarryv1.NewSearchServiceClient(conn).Resolve(ctx, &quarryv1.ResolveRequest{KnowledgeBase: "team", Query: "walrus rotation runbook"})
				if err != nil {
					t.Fatal(err)
				}
				if len(res.GetSources()) == 0 || res.GetSources()[0].GetPath() != "ops/walrus.md" {
					t.Fatalf("the question found %v", res.GetSources())
				}
			}
			want := before + asked*3 // -signals-hit-gain
			deadline := time.Now().Add(5 * time.Second)
			for importanceOf(t, a, "team", "ops/walrus.md") < want-0.01 {
				if time.Now().After(deadline) {
					t.Fatal("the replica that answered never counted its hits")
				}
				time.Sleep(20 * time.Millisecond)
			}
			// b flushes every 20 ms: well within this, it has read a's batches.
			time.Sleep(300 * time.Millisecond)
			got := importanceOf(t, b, "team", "ops/walrus.md")
			switch {
			case tc.share && got < want-0.01:
				t.Errorf("the other replica: importance %.3f, want %.3f: it did not count the hits of the replica that answered", got, want)
			case !tc.share && math.Abs(got-before) > 0.01:
				t.Errorf("without -share-signals the other replica's importance moved from %.3f to %.3f", before, got)
			}
		})
	}
}
