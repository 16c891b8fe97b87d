package generations

import (
	"context"
	"fmt"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	quarryv1 "github.com/quarry-router/quarry/gen/quarry/v1"
	"github.com/quarry-router/quarry/platform/redistest"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// fakeSource is a settable first-hand view, standing in for a replica's watcher.
type fakeSource struct {
	mu       sync.Mutex
	gens     map[string]uint64
	versions map[string]uint64
	changed  chan struct{}
}

func newFakeSource(gens map[string]uint64) *fakeSource {
	return &fakeSource{gens: gens, changed: make(chan struct{})}
}

func (f *fakeSource) States() map[string]State {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]State{}
	for kb, g := range f.gens {
		out[kb] = State{Generation: g, Version: f.versions[kb]}
	}
	return out
}

// setVersion gives kb's current state a content version.
func (f *fakeSource) setVersion(kb string, v uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.versions == nil {
		f.versions = map[string]uint64{}
	}
	f.versions[kb] = v
	close(f.changed)
	f.changed = make(chan struct{})
}

func (f *fakeSource) Updated() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.changed
}

func (f *fakeSource) set(kb string, gen uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.gens[kb] = gen
	close(f.changed)
	f.changed = make(chan struct{})
}

func newRedis(t *testing.T, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2, DisableIdentity: true, MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	return c
}

// runShared runs a replica's shared view until the test ends.
func runShared(t *testing.T, addr string, src Source) *Shared {
	t.Helper()
	return runSharedOn(t, newRedis(t, addr), "q:", src)
}

func runSharedOn(t *testing.T, client redis.UniversalClient, prefix string, src Source) *Shared {
	t.Helper()
	s := NewShared(client, prefix, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, src) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return s
}

// waitShared blocks until s's view of kb is gen.
func waitShared(t *testing.T, s *Shared, kb string, gen uint64) {
	t.Helper()
	waitView(t, s, func() bool { return s.State(kb).Generation == gen },
		func() string { return fmt.Sprintf("shared view of %s is %d, want %d", kb, s.State(kb).Generation, gen) })
}

// waitState blocks until s's view of kb is want.
func waitState(t *testing.T, s *Shared, kb string, want State) {
	t.Helper()
	waitView(t, s, func() bool { return s.State(kb) == want },
		func() string { return fmt.Sprintf("shared view of %s is %+v, want %+v", kb, s.State(kb), want) })
}

// waitView blocks until ok holds of s, failing with what after a deadline.
func waitView(t *testing.T, s *Shared, ok func() bool, what func() string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		changed := s.Updated()
		if ok() {
			return
		}
		select {
		case <-changed:
		case <-ctx.Done():
			t.Fatal(what())
		}
	}
}

func TestSharedViewSpreadsTheGreatestGeneration(t *testing.T) {
	srv := redistest.Start(t)
	srcA := newFakeSource(map[string]uint64{"kb": 5})
	a := runShared(t, srv.Addr, srcA)
	b := runShared(t, srv.Addr, newFakeSource(map[string]uint64{}))

	select {
	case <-b.Synced():
	case <-time.After(10 * time.Second):
		t.Fatal("the shared view never read Redis's state")
	}
	// A's search reported 5: B learns it through Redis.
	waitShared(t, b, "kb", 5)

	// A smaller generation (a replica whose search lags) changes nothing anywhere.
	late := NewShared(newRedis(t, srv.Addr), "q:", nil)
	if err := late.Publish(context.Background(), "kb", State{Generation: 3}); err != nil {
		t.Fatal(err)
	}
	if got := newRedis(t, srv.Addr).HGet(context.Background(), "q:generations", "kb").Val(); got != "5" {
		t.Fatalf("Redis holds generation %s after a smaller one was published, want 5", got)
	}

	// A bump on A's side reaches B; B's own publication reaches A.
	srcA.set("kb", 6)
	waitShared(t, b, "kb", 6)
	if err := b.Publish(context.Background(), "other", State{Generation: 9}); err != nil {
		t.Fatal(err)
	}
	waitShared(t, a, "other", 9)
	if got := b.State("kb").Generation; got != 6 {
		t.Fatalf("B's view of kb went to %d, want it to stay at 6", got)
	}
}

// TestSharedViewOverARedisCluster: on a Redis Cluster the hash and the channel are on
// whichever node owns their slot, and a publication reaches subscribers of every node.
func TestSharedViewOverARedisCluster(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	client := func() redis.UniversalClient {
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: strings.Split(cl.Addrs(), ","), Protocol: 2, DisableIdentity: true})
		t.Cleanup(func() { c.Close() })
		return c
	}
	srcA := newFakeSource(map[string]uint64{"kb": 5})
	a := runSharedOn(t, client(), "{q}:", srcA)
	b := runSharedOn(t, client(), "{q}:", newFakeSource(map[string]uint64{}))
	waitShared(t, b, "kb", 5)
	srcA.set("kb", 6)
	waitShared(t, b, "kb", 6)
	if err := b.Publish(context.Background(), "other", State{Generation: 9}); err != nil {
		t.Fatal(err)
	}
	waitShared(t, a, "other", 9)
}

func TestSharedViewSurvivesARedisRestart(t *testing.T) {
	srv := redistest.Start(t)
	srcA := newFakeSource(map[string]uint64{"kb": 7})
	runShared(t, srv.Addr, srcA)
	b := runShared(t, srv.Addr, newFakeSource(map[string]uint64{}))
	waitShared(t, b, "kb", 7)

	// Redis restarts empty: the views keep what they knew, and A writes it back.
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	if got := b.State("kb").Generation; got != 7 {
		t.Fatalf("B's view after the restart is %d, want 7", got)
	}
	check := newRedis(t, srv.Addr)
	deadline := time.Now().Add(10 * time.Second)
	for check.HGet(context.Background(), "q:generations", "kb").Val() != "7" {
		if time.Now().After(deadline) {
			t.Fatal("the replica did not publish its generations again after Redis restarted")
		}
		runtime.Gosched()
	}
	// Both replicas are subscribed again: a bump still travels.
	srcA.set("kb", 8)
	waitShared(t, b, "kb", 8)

	// A replica that starts now reads the state without waiting for a bump.
	c := runShared(t, srv.Addr, newFakeSource(map[string]uint64{}))
	waitShared(t, c, "kb", 8)
}

func TestCombinedViewIsTheSearchServicesRaisedToTheShared(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	serve(t, addr, &searchStub{first: map[string]uint64{"kb": 3, "ahead": 4}, updates: make(chan *quarryv1.WatchGenerationsResponse)})
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	w := New(quarryv1.NewSearchServiceClient(conn), DefaultConfig(), nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() {
		cancel()
		<-done
	}()
	rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
	defer rcancel()
	if err := w.WaitReady(rctx); err != nil {
		t.Fatal(err)
	}

	srvR := redistest.Start(t)
	shared := NewShared(newRedis(t, srvR.Addr), "q:", nil)
	for kb, st := range map[string]State{"kb": {5, 1<<63 | 55}, "ahead": {2, 1<<63 | 22}, "gone": {9, 0}} {
		if err := shared.Publish(ctx, kb, st); err != nil {
			t.Fatal(err)
		}
	}
	c := Combined{Local: w, Shared: shared}
	cases := []struct {
		kb   string
		want State
		ok   bool
		rule string
	}{
		{"kb", State{5, 1<<63 | 55}, true, "a newer shared generation wins, with the version of its content"},
		{"ahead", State{4, 0}, true, "an older shared generation is ignored"},
		{"gone", State{}, false, "the search service alone says which knowledge bases exist"},
	}
	for _, cs := range cases {
		st, ok, err := c.State(cs.kb)
		if err != nil || st != cs.want || ok != cs.ok {
			t.Errorf("%s: State(%q) = %+v, %v, %v; want %+v, %v", cs.rule, cs.kb, st, ok, err, cs.want, cs.ok)
		}
	}
}

// TestSharedViewCarriesContentVersions: a state travels with its content version; an
// equal generation fills in a version the hash lacked (a replica that knew none published
// it first), and never replaces one; the hash keeps the form older replicas wrote.
func TestSharedViewCarriesContentVersions(t *testing.T) {
	srv := redistest.Start(t)
	src := newFakeSource(map[string]uint64{"kb": 5})
	a := runShared(t, srv.Addr, src)
	b := runShared(t, srv.Addr, newFakeSource(map[string]uint64{}))
	waitShared(t, b, "kb", 5)
	if st := b.State("kb"); st.Version != 0 {
		t.Fatalf("state %+v before any version was known", st)
	}
	src.setVersion("kb", 1<<63|77)
	waitState(t, b, "kb", State{5, 1<<63 | 77})
	ctx := context.Background()
	if err := a.Publish(ctx, "kb", State{5, 1<<63 | 99}); err != nil {
		t.Fatal(err)
	}
	if err := a.Publish(ctx, "kb", State{Generation: 5}); err != nil {
		t.Fatal(err)
	}
	client := newRedis(t, srv.Addr)
	if got := client.HGet(ctx, "q:generations", "kb").Val(); got != "5 9223372036854775885" {
		t.Fatalf("the hash holds %q, want the first version published for generation 5", got)
	}
	// A value an older replica wrote (a generation alone) still reads, and a newer
	// generation replaces the state whole.
	if err := client.HSet(ctx, "q:generations", "old", "12").Err(); err != nil {
		t.Fatal(err)
	}
	late := runShared(t, srv.Addr, newFakeSource(map[string]uint64{}))
	waitState(t, late, "old", State{Generation: 12})
	waitState(t, late, "kb", State{5, 1<<63 | 77})
	if err := a.Publish(ctx, "kb", State{Generation: 6}); err != nil {
		t.Fatal(err)
	}
	waitState(t, b, "kb", State{Generation: 6})
}
