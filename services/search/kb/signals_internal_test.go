package kb

import (
	"context"
	"errors"
	"flag"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quarry-router/quarry/platform/redistest"
	"github.com/quarry-router/quarry/services/search/engine/enginetest"
	"github.com/quarry-router/quarry/services/search/signals"
	"github.com/redis/go-redis/v9"
)

// Every reload gives a knowledge base a new signals store. The saver remembered each
// store it had saved, keyed by the store itself, and never forgot one: every reload (a
// large sync, a repair) kept the replaced store and all its entries alive for the life
// of the process, a leak of a KB's worth of signals per reload.
func TestTheSignalSaverForgetsReplacedStores(t *testing.T) {
	root, _, reg := oneFileKB(t, "# A\n\nText.\n", "-data-dir", t.TempDir())
	ctx := context.Background()
	var sv signalSaver
	for range 5 {
		k, err := reg.Load(ctx, "docs", root)
		if err != nil {
			t.Fatal(err)
		}
		k.Signals.RecordHits([]string{"a.md"})
		sv.flush(ctx, reg)
	}
	if len(sv.saved) != 1 {
		t.Errorf("the saver holds %d signal stores after 5 loads of one knowledge base, want 1", len(sv.saved))
	}
	k, _ := reg.Get("docs")
	if _, ok := sv.saved[k.Signals]; !ok {
		t.Error("the saver does not hold the current store")
	}
}

// A pooled replica saves its place in the pool with what it learned: restarted, it
// reads on from there instead of starting again from the pool's snapshot, and a reload
// carries the place and the hits not yet flushed to the new store.
func TestPooledSignalsKeepTheirPlaceAcrossReloadsAndRestarts(t *testing.T) {
	srv := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr, Protocol: 2, DisableIdentity: true})
	t.Cleanup(func() { client.Close() })
	root := t.TempDir()
	for _, name := range []string{"a.md", "b.md"} {
		if err := os.WriteFile(filepath.Join(root, name), []byte("# "+name+"\n\nText.\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	var cfg Config
	cfg.RegisterFlags(fs)
	if err := fs.Parse([]string{"-data-dir", t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	open := func() *Registry {
		reg := NewRegistry(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
		reg.PoolSignalsVia(func(id string) signals.Pool { return signals.NewRedisPool(client, "kbtest:", id, time.Second) })
		return reg
	}
	ctx := context.Background()
	reg := open()
	k, err := reg.Load(ctx, "docs", root)
	if err != nil {
		t.Fatal(err)
	}
	seeded := k.Signals.Get("a.md").Importance
	k.Signals.RecordHits([]string{"a.md"})
	var sv signalSaver
	sv.flush(ctx, reg)
	k.Signals.RecordHits([]string{"b.md"}) // pending across the reload
	if k, err = reg.Load(ctx, "docs", root); err != nil {
		t.Fatal(err)
	}
	sv.flush(ctx, reg)
	cursor := k.Signals.Cursor()
	for _, p := range []string{"a.md", "b.md"} {
		if got := k.Signals.Get(p).Importance; math.Abs(got-(seeded+3)) > 1e-3 {
			t.Errorf("after the reload: %s importance %v, want %v", p, got, seeded+3)
		}
	}
	reg.Close()

	reg = open()
	t.Cleanup(reg.Close)
	if k, err = reg.Load(ctx, "docs", root); err != nil {
		t.Fatal(err)
	}
	if got := k.Signals.Cursor(); cursor == "" || got != cursor {
		t.Fatalf("restarted at cursor %q, want the saved %q", got, cursor)
	}
	sv = signalSaver{}
	sv.flush(ctx, reg) // reads nothing again: a batch applied twice would show
	if got := k.Signals.Get("a.md").Importance; math.Abs(got-(seeded+3)) > 1e-3 {
		t.Errorf("after the restart: a.md importance %v, want %v", got, seeded+3)
	}
}

// The pool's flushes are counted by outcome (quarry.search.signals.pool.flushes), so an
// outage shows on a dashboard and not only once in a log.
func TestPooledFlushesAreCountedByOutcome(t *testing.T) {
	metrics := enginetest.InstallMetrics(t) // the test binary's one meter provider
	srv := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr, Protocol: 2, DisableIdentity: true, MaxRetries: -1})
	t.Cleanup(func() { client.Close() })
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "a.md"), []byte("# A\n\nText.\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var cfg Config
	cfg.RegisterFlags(flag.NewFlagSet("test", flag.ContinueOnError))
	reg := NewRegistry(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	t.Cleanup(reg.Close)
	reg.PoolSignalsVia(func(id string) signals.Pool { return signals.NewRedisPool(client, "counted:", id, time.Second) })
	ctx := context.Background()
	if _, err := reg.Load(ctx, "docs", root); err != nil {
		t.Fatal(err)
	}
	var sv signalSaver
	metrics.Counts(t, "quarry.search.signals.pool.flushes", "quarry.outcome") // from here
	sv.flush(ctx, reg)
	sv.flush(ctx, reg)
	srv.Kill()
	sv.flush(ctx, reg)
	got := metrics.Counts(t, "quarry.search.signals.pool.flushes", "quarry.outcome")
	for outcome, want := range map[string]int64{"ok": 2, "error": 1, "missed": 0} {
		if n := got[outcome]; n != want {
			t.Errorf("%s flushes counted %d, want %d", outcome, n, want)
		}
	}
}

// Search replicas that share a folder (the prod overlay's volume) each see an edit of
// it, through their watchers or rescans, and each recorded a curation: pooled, one edit
// raised a file by +5 per replica. An edit counts once, named by the content it made.
func TestAnEditSeenByEveryReplicaCountsOnce(t *testing.T) {
	srv := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr, Protocol: 2, DisableIdentity: true})
	t.Cleanup(func() { client.Close() })
	root := t.TempDir()
	file := filepath.Join(root, "a.md")
	if err := os.WriteFile(file, []byte("# A\n\nText.\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var cfg Config
	cfg.RegisterFlags(flag.NewFlagSet("test", flag.ContinueOnError))
	ctx := context.Background()
	var regs []*Registry
	for range 2 {
		reg := NewRegistry(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
		t.Cleanup(reg.Close)
		reg.PoolSignalsVia(func(id string) signals.Pool { return signals.NewRedisPool(client, "edits:", id, time.Second) })
		if _, err := reg.Load(ctx, "docs", root); err != nil {
			t.Fatal(err)
		}
		regs = append(regs, reg)
	}
	seeded := regs[0].kbs["docs"].Signals.Get("a.md").Importance
	if err := os.WriteFile(file, []byte("# A\n\nText, edited.\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, reg := range regs {
		if _, err := reg.applyEdits(ctx, "docs", []string{"a.md"}); err != nil {
			t.Fatal(err)
		}
	}
	var savers [2]signalSaver
	for range 2 {
		for i, reg := range regs {
			savers[i].flush(ctx, reg)
		}
	}
	for i, reg := range regs {
		if got := reg.kbs["docs"].Signals.Get("a.md").Importance; math.Abs(got-(seeded+5)) > 1e-3 {
			t.Errorf("replica %d: a.md importance %.3f after one edit, want %.3f", i, got, seeded+5)
		}
	}
}

// downPool is a signals pool that can be cut off, as by a partition.
type downPool struct {
	signals.Pool
	down *atomic.Bool
}

var errPartition = errors.New("dial tcp: i/o timeout")

func (p downPool) Publish(ctx context.Context, b signals.Batch) (string, error) {
	if p.down.Load() {
		return "", errPartition
	}
	return p.Pool.Publish(ctx, b)
}

func (p downPool) Read(ctx context.Context, cursor string, n int) ([]signals.Pooled, bool, error) {
	if p.down.Load() {
		return nil, false, errPartition
	}
	return p.Pool.Read(ctx, cursor, n)
}

// Hits a replica counted alone while the pool was away are kept in signals.json with
// what it learned: restarted, the replica publishes them, and the other replicas count
// them too; the replica itself still counts them once.
func TestHitsCountedWhileThePoolWasAwayOutliveARestart(t *testing.T) {
	open, down, _ := awayPool(t)
	ctx := context.Background()
	dataDir := t.TempDir()
	a, other := open("-data-dir", dataDir), open()
	var sa, so signalSaver
	sa.flush(ctx, a)
	so.flush(ctx, other)
	seeded := other.kbs["docs"].Signals.Get("a.md").Importance

	down.Store(true)
	a.kbs["docs"].Signals.RecordHits([]string{"a.md"})
	sa.flush(ctx, a) // applied alone, saved
	a.Close()
	down.Store(false)

	a = open("-data-dir", dataDir)
	sa = signalSaver{}
	for range 2 {
		sa.flush(ctx, a)
		so.flush(ctx, other)
	}
	for name, reg := range map[string]*Registry{"the restarted replica": a, "the other replica": other} {
		if got := reg.kbs["docs"].Signals.Get("a.md").Importance; math.Abs(got-(seeded+3)) > 1e-3 {
			t.Errorf("%s: a.md importance %.3f, want %.3f (one hit)", name, got, seeded+3)
		}
	}
}

// stallPool is a signals pool whose Read hangs (a slow or black-holed Redis, up to
// -redis-timeout, or a 10 s snapshot transfer) until released.
type stallPool struct {
	entered chan struct{}
	release chan struct{}
	once    *sync.Once
}

func (stallPool) Publish(context.Context, signals.Batch) (string, error) { return "1-0", nil }
func (p stallPool) Read(ctx context.Context, _ string, _ int) ([]signals.Pooled, bool, error) {
	p.once.Do(func() { close(p.entered) })
	select {
	case <-p.release:
	case <-ctx.Done():
	}
	return nil, false, nil
}
func (stallPool) SnapshotAt(context.Context) (time.Time, bool, error) { return time.Time{}, true, nil }
func (stallPool) SaveSnapshot(context.Context, string, func() signals.Snapshot) error {
	return nil
}
func (stallPool) LoadSnapshot(context.Context, string) (signals.Snapshot, bool, error) {
	return signals.Snapshot{}, false, nil
}

// TakeOver waits for a flush of the store it replaces, which holds its pool lock across
// calls to Redis (up to -redis-timeout, 10 s for a snapshot): a reload waited there
// holding r.mu, and every query of every knowledge base waited behind it. The old
// store is retired first, before r.mu is taken.
func TestAReloadDoesNotHoldQueriesWhileAFlushWaitsOnThePool(t *testing.T) {
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "a.md"), []byte("# A\n\nText.\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	var cfg Config
	cfg.RegisterFlags(fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	reg := NewRegistry(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	t.Cleanup(reg.Close)
	p := stallPool{entered: make(chan struct{}), release: make(chan struct{}), once: &sync.Once{}}
	reg.PoolSignalsVia(func(string) signals.Pool { return p })
	ctx := context.Background()
	if _, err := reg.Load(ctx, "docs", root); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Load(ctx, "other", t.TempDir()); err != nil {
		t.Fatal(err)
	}
	released := false
	release := func() {
		if !released {
			released = true
			close(p.release)
		}
	}
	defer release()

	var sv signalSaver
	flushed := make(chan struct{})
	go func() { defer close(flushed); sv.flush(ctx, reg) }()
	<-p.entered // a flush is waiting on the pool, holding the store's poolMu

	reloaded := make(chan error, 1)
	go func() { _, err := reg.Load(ctx, "docs", root); reloaded <- err }()
	// Give the reload time to reach the store's pool lock (before the fix, it waited
	// there holding r.mu).
	time.Sleep(200 * time.Millisecond)
	got := make(chan error, 1)
	go func() { _, err := reg.Get("other"); got <- err }()
	select {
	case <-got:
	case <-time.After(time.Second):
		t.Errorf("Get of another knowledge base blocked for 1s: a reload holds r.mu while TakeOver waits for a flush stalled on the pool")
	}
	release()
	<-flushed
	if err := <-reloaded; err != nil {
		t.Fatal(err)
	}
}

// The saver lists the knowledge bases, then flushes and saves each: a reload in between
// moves the store's pending batches to its successor, and a save of the replaced store
// wrote signals.json without them. Crashed before the next save, the replica lost the
// batches it had counted alone for good. A replaced store is not saved.
func TestASaveOfAReplacedStoreKeepsItsPendingBatches(t *testing.T) {
	open, down, root := awayPool(t)
	ctx := context.Background()
	dataDir := t.TempDir()
	a, other := open("-data-dir", dataDir), open()
	var sa, so signalSaver
	sa.flush(ctx, a)
	so.flush(ctx, other)
	seeded := other.kbs["docs"].Signals.Get("a.md").Importance

	down.Store(true)
	oldK := a.kbs["docs"]
	oldK.Signals.RecordHits([]string{"a.md"})
	// a tick saves the batch kept to publish again
	sa.flushVia(ctx, a, oldK)
	if err := a.saveSignals(oldK); err != nil {
		t.Fatal(err)
	}
	// the next tick lists the KB; a reload; the tick saves the store it listed
	if _, err := a.Load(ctx, "docs", root); err != nil {
		t.Fatal(err)
	}
	if err := a.saveSignals(oldK); err != nil {
		t.Fatal(err)
	}
	// crash before the next tick (Close releases the indexes, saves no signals)
	a.Close()
	down.Store(false)
	a2 := open("-data-dir", dataDir)
	var sa2 signalSaver
	for range 2 {
		sa2.flush(ctx, a2)
		so.flush(ctx, other)
	}
	if got := other.kbs["docs"].Signals.Get("a.md").Importance; math.Abs(got-(seeded+3)) > 1e-3 {
		t.Errorf("the other replica: a.md importance %.3f, want %.3f (one hit)", got, seeded+3)
	}
}

// awayPool starts a redis-server and returns a maker of registries serving one
// knowledge base (the folder root, one file) that pool their signals through it, and
// the switch that cuts them all off from it (set: every publish and read fails).
func awayPool(t *testing.T) (open func(args ...string) *Registry, down *atomic.Bool, root string) {
	t.Helper()
	srv := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr, Protocol: 2, DisableIdentity: true})
	t.Cleanup(func() { client.Close() })
	root = t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "a.md"), []byte("# A\n\nText.\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	down = new(atomic.Bool)
	open = func(args ...string) *Registry {
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		var cfg Config
		cfg.RegisterFlags(fs)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		reg := NewRegistry(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
		t.Cleanup(reg.Close)
		reg.PoolSignalsVia(func(id string) signals.Pool {
			return downPool{signals.NewRedisPool(client, "away:", id, time.Second), down}
		})
		if _, err := reg.Load(context.Background(), "docs", root); err != nil {
			t.Fatal(err)
		}
		return reg
	}
	return open, down, root
}
