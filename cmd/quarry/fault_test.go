package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	gatewayapp "github.com/quarry-router/quarry/gateway/app"
	quarryv1 "github.com/quarry-router/quarry/gen/quarry/v1"
	"github.com/quarry-router/quarry/platform/grpcx"
	searchapp "github.com/quarry-router/quarry/services/search/app"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestSearchServiceKilled stops the search service under a running gateway: cached
// answers are still served, new questions fail fast with UNAVAILABLE and a clear message,
// and answers come back when the search service returns on the same address.
func TestSearchServiceKilled(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	// A free port the search service can come back on.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	searchAddr := l.Addr().String()
	l.Close()
	startSearch := func() (stop func()) {
		ctx, cancel := context.WithCancel(context.Background())
		ready, done := make(chan net.Addr, 1), make(chan error, 1)
		go func() {
			done <- searchapp.Run(ctx, []string{"-listen", searchAddr, "-kb-root", "../../examples/kb", "-watch=false"}, log, func(a net.Addr) { ready <- a })
		}()
		select {
		case <-ready:
		case err := <-done:
			t.Fatalf("search: %v", err)
		}
		return func() { cancel(); <-done }
	}
	stopSearch := startSearch()

	gctx, gcancel := context.WithCancel(context.Background())
	gready, gdone := make(chan net.Addr, 1), make(chan error, 1)
	go func() {
		gdone <- gatewayapp.Run(gctx, []string{"-listen", "127.0.0.1:0", "-search-addr", searchAddr}, log, func(a net.Addr) { gready <- a })
	}()
	var gwAddr net.Addr
	select {
	case gwAddr = <-gready:
	case err := <-gdone:
		t.Fatalf("gateway: %v", err)
	}
	t.Cleanup(func() { gcancel(); <-gdone })
	conn, err := grpcx.Dial(gwAddr.String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := quarryv1.NewQueryServiceClient(conn)
	query := func(q string) (*quarryv1.QueryResponse, time.Duration, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		t0 := time.Now()
		r, err := c.Query(ctx, &quarryv1.QueryRequest{KnowledgeBase: "platform", Query: q})
		return r, time.Since(t0), err
	}

	const cachedQ = "How do I rotate the JWT signing key?"
	if _, _, err := query(cachedQ); err != nil {
		t.Fatal(err)
	}
	stopSearch()

	r, _, err := query(cachedQ)
	if err != nil || r.Tier != quarryv1.Tier_TIER_EXACT_CACHE {
		t.Fatalf("cached answer with search down: %v, %v", r.GetTier(), err)
	}
	_, took, err := query("How do I restore a Postgres backup?")
	if status.Code(err) != codes.Unavailable || !strings.Contains(status.Convert(err).Message(), "search") {
		t.Fatalf("new question with search down: %v, want UNAVAILABLE naming the search service", err)
	}
	if took > 3*time.Second {
		t.Errorf("UNAVAILABLE took %v; it must fail fast", took)
	}

	t.Logf("UNAVAILABLE in %v", took)

	stopSearch = startSearch()
	defer stopSearch()
	back := time.Now()
	deadline := back.Add(10 * time.Second)
	for {
		r, _, err := query("How do I restore a Postgres backup?")
		if err == nil && r.Tier != quarryv1.Tier_TIER_UNSPECIFIED {
			t.Logf("answering again %v after the search service returned", time.Since(back))
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no recovery 10 s after the search service came back: %v", err)
		}
		time.Sleep(50 * time.Millisecond) // the gateway reconnects with backoff
	}
}
