package generations

import (
	"context"
	"errors"
	"maps"
	"net"
	"testing"
	"time"

	quarryv1 "github.com/quarry-router/quarry/gen/quarry/v1"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// searchStub streams a fixed first state, then whatever the test sends.
type searchStub struct {
	quarryv1.UnimplementedSearchServiceServer
	first   map[string]uint64
	updates chan *quarryv1.WatchGenerationsResponse
}

func state(gens map[string]uint64, removed ...string) *quarryv1.WatchGenerationsResponse {
	msg := &quarryv1.WatchGenerationsResponse{Removed: removed}
	for id, g := range gens {
		msg.KnowledgeBases = append(msg.KnowledgeBases, &quarryv1.KnowledgeBaseState{Id: id, Generation: g})
	}
	return msg
}

func (s *searchStub) WatchGenerations(_ *quarryv1.WatchGenerationsRequest, stream quarryv1.SearchService_WatchGenerationsServer) error {
	if err := stream.Send(state(s.first)); err != nil {
		return err
	}
	for {
		select {
		case msg := <-s.updates:
			if err := stream.Send(msg); err != nil {
				return err
			}
		case <-stream.Context().Done():
			return nil
		}
	}
}

func serve(t *testing.T, addr string, stub *searchStub) *grpc.Server {
	t.Helper()
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	quarryv1.RegisterSearchServiceServer(srv, stub)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return srv
}

// generationsOf is w's view, generations only.
func generationsOf(w *Watcher) map[string]uint64 {
	out := map[string]uint64{}
	for kb, st := range w.States() {
		out[kb] = st.Generation
	}
	return out
}

func waitFor(t *testing.T, w *Watcher, want map[string]uint64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		changed := w.Updated()
		if maps.Equal(generationsOf(w), want) {
			return
		}
		select {
		case <-changed:
		case <-ctx.Done():
			t.Fatalf("generations %v, want %v", generationsOf(w), want)
		}
	}
}

func wantGen(t *testing.T, w *Watcher, kb string, gen uint64, ok bool) {
	t.Helper()
	st, found, err := w.State(kb)
	if err != nil || st.Generation != gen || found != ok {
		t.Fatalf("State(%q) = %+v, %v, %v; want generation %d, %v, nil", kb, st, found, err, gen, ok)
	}
}

func TestWatcherFollowsTheSearchServiceAcrossRestarts(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()

	stub := &searchStub{first: map[string]uint64{"kb-a": 1, "kb-b": 4}, updates: make(chan *quarryv1.WatchGenerationsResponse)}
	srv := serve(t, addr, stub)

	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 10 * time.Millisecond, Multiplier: 1.6, MaxDelay: 100 * time.Millisecond},
			MinConnectTimeout: time.Second,
		}))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	w := New(quarryv1.NewSearchServiceClient(conn), Config{BackoffMin: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond}, nil)
	if _, _, err := w.State("kb-a"); !errors.Is(err, ErrNotReady) {
		t.Fatalf("State before the first state: %v, want ErrNotReady", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()

	readyCtx, readyCancel := context.WithTimeout(ctx, 10*time.Second)
	defer readyCancel()
	if err := w.WaitReady(readyCtx); err != nil {
		t.Fatal(err)
	}
	wantGen(t, w, "kb-a", 1, true)
	wantGen(t, w, "kb-b", 4, true)
	wantGen(t, w, "kb-c", 0, false)

	// Changes: a generation bump, a new knowledge base, a removed one.
	stub.updates <- state(map[string]uint64{"kb-a": 2, "kb-d": 7}, "kb-b")
	waitFor(t, w, map[string]uint64{"kb-a": 2, "kb-d": 7})

	// The search service goes away: the last known generations stay.
	srv.Stop()
	wantGen(t, w, "kb-a", 2, true)

	// It comes back with a new state, which replaces the old one entirely.
	serve(t, addr, &searchStub{first: map[string]uint64{"kb-a": 3, "kb-c": 1}, updates: make(chan *quarryv1.WatchGenerationsResponse)})
	waitFor(t, w, map[string]uint64{"kb-a": 3, "kb-c": 1})
	wantGen(t, w, "kb-d", 0, false)
}

func TestWaitReadyGivesUpWithItsContext(t *testing.T) {
	w := New(nil, DefaultConfig(), nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := w.WaitReady(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("WaitReady: %v, want context.Canceled", err)
	}
}
