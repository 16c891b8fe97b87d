package signals

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quarry-router/quarry/platform/redistest"
	"github.com/quarry-router/quarry/services/search/tree"
)

// redisPools starts a redis-server and returns a client of it and a maker of pools on
// it, each test case's under a key prefix of its own.
func redisPools(t *testing.T) (*redistest.Server, redis.UniversalClient, func(kb string) *RedisPool) {
	t.Helper()
	srv := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr, Protocol: 2, DisableIdentity: true, MaxRetries: -1})
	t.Cleanup(func() { client.Close() })
	var n atomic.Int64
	prefix := fmt.Sprintf("t%d:", n.Add(1))
	return srv, client, func(kb string) *RedisPool { return NewRedisPool(client, prefix, kb, time.Second) }
}

// restartEmpty restarts the redis-server, which keeps nothing (persistence is off, as
// in the deployment), and waits until the client reaches it again: the restart closed
// its connections, so the first call after it may fail.
func restartEmpty(t *testing.T, srv *redistest.Server, client redis.UniversalClient) {
	t.Helper()
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	for tries := 0; client.Ping(context.Background()).Err() != nil; tries++ {
		if tries == 10 {
			t.Fatal("redis-server did not come back after its restart")
		}
	}
}

// replica is a store seeded as every replica of the test knowledge base seeds it.
func replica() *Store {
	s := New(DefaultConfig(), time.Now)
	for _, p := range []string{"a.md", "b.md", "c.md"} {
		s.Seed(p, 50, tree.Validated, time.Time{})
	}
	return s
}

func flushVia(t *testing.T, s *Store, p Pool) {
	t.Helper()
	if err := s.FlushVia(context.Background(), p); err != nil {
		t.Fatal(err)
	}
}

// Within a test, at most seconds pass between batches, or a skewed clock moves eleven
// minutes: decay over them is below 0.01, a hit or curation counted twice 3 or 5.
func importanceIs(t *testing.T, who string, s *Store, path string, want float64) {
	t.Helper()
	if got := s.Get(path).Importance; math.Abs(got-want) > 0.01 {
		t.Errorf("%s: %s importance %v, want %v", who, path, got, want)
	}
}

func TestPooledReplicasCountEveryReplicasHits(t *testing.T) {
	_, _, pool := redisPools(t)
	tests := []struct {
		name string
		// hits and curations recorded on replica a and replica b before they flush
		aHits, bHits []string
		bCurations   []string
		want         map[string]float64
	}{
		{"each counts the other's hits", []string{"a.md", "a.md"}, []string{"a.md", "b.md"}, nil,
			map[string]float64{"a.md": 50 + 3*3, "b.md": 50 + 3, "c.md": 50}},
		{"curations are pooled too", nil, nil, []string{"c.md"}, map[string]float64{"a.md": 50, "c.md": 55}},
		{"a path a replica does not have is ignored", []string{"gone.md"}, []string{"b.md"}, nil,
			map[string]float64{"b.md": 53}},
		{"promotion follows the pooled importance", []string{"a.md", "a.md", "a.md"}, []string{"a.md", "a.md"}, nil,
			map[string]float64{"a.md": 65}},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, b := replica(), replica()
			pa, pb := pool(fmt.Sprintf("kb%d", i)), pool(fmt.Sprintf("kb%d", i))
			a.RecordHits(tc.aHits)
			b.RecordHits(tc.bHits)
			for _, c := range tc.bCurations {
				b.RecordCuration(c)
			}
			flushVia(t, a, pa)
			flushVia(t, b, pb)
			flushVia(t, a, pa) // reads b's batch
			for path, want := range tc.want {
				importanceIs(t, "replica a", a, path, want)
				importanceIs(t, "replica b", b, path, want)
			}
			if ga, gb := a.Get("a.md"), b.Get("a.md"); ga.Maturity != gb.Maturity {
				t.Errorf("a.md maturity: replica a %v, replica b %v", ga.Maturity, gb.Maturity)
			}
			if ca, cb := a.Cursor(), b.Cursor(); ca == "" || ca != cb {
				t.Errorf("cursors %q and %q: both replicas should have read to the last batch", ca, cb)
			}
		})
	}
	t.Run("a batch is applied once", func(t *testing.T) {
		a := replica()
		pa := pool("once")
		a.RecordHits([]string{"a.md"})
		for range 3 {
			flushVia(t, a, pa)
		}
		importanceIs(t, "replica a", a, "a.md", 53)
	})
}

func TestAReplicaThatJoinsLaterStartsFromThePoolsSnapshot(t *testing.T) {
	_, client, pool := redisPools(t)
	a := replica()
	pa := pool("kb")
	a.RecordHits([]string{"a.md", "a.md"})
	flushVia(t, a, pa) // the first flush offers a snapshot
	a.RecordHits([]string{"b.md"})
	flushVia(t, a, pa) // within a minute: no new snapshot, the batch is only in the stream

	late := replica()
	flushVia(t, late, pool("kb"))
	importanceIs(t, "the replica that joined", late, "a.md", 56)
	importanceIs(t, "the replica that joined", late, "b.md", 53)

	// Trimming the stream loses nothing for a replica that starts now: it begins at the
	// snapshot, whose batches it does not read again.
	if err := client.XTrimMaxLen(context.Background(), pa.stream, 0).Err(); err != nil {
		t.Fatal(err)
	}
	a.RecordHits([]string{"c.md"})
	flushVia(t, a, pa)
	later := replica()
	err := later.FlushVia(context.Background(), pool("kb"))
	if !errors.Is(err, ErrMissed) {
		t.Fatalf("a replica whose snapshot misses trimmed batches: got %v, want ErrMissed", err)
	}
	importanceIs(t, "the replica that joined after the trim", later, "a.md", 56)
	importanceIs(t, "the replica that joined after the trim", later, "c.md", 53)
	// b.md's hit was trimmed before any snapshot had it: lost to this replica, and said so.
	importanceIs(t, "the replica that joined after the trim", later, "b.md", 50)
}

func TestAReplicaBehindATrimmedPoolStartsAgainFromItsSnapshot(t *testing.T) {
	_, client, pool := redisPools(t)
	a, b := replica(), replica()
	pa, pb := pool("kb"), pool("kb")
	flushVia(t, b, pb) // b has read the pool, and stops flushing (a long pause)
	a.RecordHits([]string{"a.md"})
	flushVia(t, a, pa) // offers a snapshot with the hit
	if err := client.XTrimMaxLen(context.Background(), pa.stream, 0).Err(); err != nil {
		t.Fatal(err)
	}
	flushVia(t, b, pb) // the snapshot has every trimmed batch: nothing to report
	importanceIs(t, "the replica behind", b, "a.md", 53)
	if b.Cursor() != a.Cursor() {
		t.Errorf("cursor %q after the snapshot, want %q", b.Cursor(), a.Cursor())
	}
}

func TestAReplicaCountsItsOwnHitsWhileThePoolIsDown(t *testing.T) {
	srv, _, pool := redisPools(t)
	a := replica()
	pa := pool("kb")
	flushVia(t, a, pa)
	srv.Kill()
	a.RecordHits([]string{"a.md"})
	if err := a.FlushVia(context.Background(), pa); err == nil {
		t.Fatal("FlushVia with Redis down returned no error")
	}
	importanceIs(t, "replica a", a, "a.md", 53)
}

func TestTakeOverCarriesPendingHitsAndThePlaceInThePool(t *testing.T) {
	_, _, pool := redisPools(t)
	prev := replica()
	p := pool("kb")
	prev.RecordHits([]string{"a.md"})
	flushVia(t, prev, p)
	prev.RecordHits([]string{"b.md"}) // not flushed before the reload
	prev.RecordCuration("c.md")

	next := replica()
	next.TakeOver(prev)
	if next.Cursor() != prev.Cursor() {
		t.Fatalf("cursor %q, want prev's %q", next.Cursor(), prev.Cursor())
	}
	flushVia(t, next, p)
	importanceIs(t, "the new store", next, "a.md", 53) // learned, not read again
	importanceIs(t, "the new store", next, "b.md", 53) // pending, published by the new store
	importanceIs(t, "the new store", next, "c.md", 55)
}

func TestCursorIsBefore(t *testing.T) {
	tests := []struct {
		a, b string
		want bool
	}{
		{"", "1-0", true},
		{"1-0", "", false},
		{"", "", false},
		{"1-0", "1-1", true},
		{"1-1", "1-0", false},
		{"9-5", "10-0", true}, // numbers, not strings
		{"10-0", "9-5", false},
		{"1700000000000-3", "1700000000000-3", false},
	}
	for _, tc := range tests {
		if got := cursorIsBefore(tc.a, tc.b); got != tc.want {
			t.Errorf("cursorIsBefore(%q, %q) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}

// Redis runs without persistence in the deployment: a restart empties the pool. The
// replicas carry on from what they learned, into the new stream, and report no loss.
func TestReplicasCarryOnAfterThePoolsRedisRestarts(t *testing.T) {
	srv, client, pool := redisPools(t)
	a, b := replica(), replica()
	pa, pb := pool("kb"), pool("kb")
	a.RecordHits([]string{"a.md"})
	flushVia(t, a, pa)
	flushVia(t, b, pb)
	restartEmpty(t, srv, client)
	b.RecordHits([]string{"b.md"})
	flushVia(t, b, pb)
	flushVia(t, a, pa)
	for _, s := range []*Store{a, b} {
		importanceIs(t, "after the restart", s, "a.md", 53)
		importanceIs(t, "after the restart", s, "b.md", 53)
	}
}

// lostReply is a pool whose publish reaches Redis but whose reply does not: a stall
// past the deadline, a connection dropped after the write.
type lostReply struct{ *RedisPool }

func (p lostReply) Publish(ctx context.Context, b Batch) (string, error) {
	if _, err := p.RedisPool.Publish(ctx, b); err != nil {
		return "", err
	}
	return "", errors.New("read tcp: i/o timeout")
}

// A publish whose reply was lost was applied here as unpublished and then again when
// read back: its ID counts it once.
func TestABatchPublishedDespiteAnErrorCountsOnce(t *testing.T) {
	_, _, pool := redisPools(t)
	a, b := replica(), replica()
	pa, pb := pool("kb"), pool("kb")
	a.RecordHits([]string{"b.md"})
	if err := a.FlushVia(context.Background(), lostReply{pa}); err == nil {
		t.Fatal("a flush whose reply was lost returned no error")
	}
	flushVia(t, a, pa)
	flushVia(t, b, pb)
	importanceIs(t, "the replica whose reply was lost", a, "b.md", 53)
	importanceIs(t, "the other replica", b, "b.md", 53)
}

// The same edit published by two replicas counts once; two edits count twice.
func TestEditsCountOncePerChange(t *testing.T) {
	_, _, pool := redisPools(t)
	a, b := replica(), replica()
	pa, pb := pool("kb"), pool("kb")
	a.RecordEdit("a.md", "v1")
	b.RecordEdit("a.md", "v1")
	b.RecordEdit("b.md", "v1")
	flushVia(t, a, pa)
	flushVia(t, b, pb)
	flushVia(t, a, pa)
	b.RecordEdit("a.md", "v2")
	flushVia(t, b, pb)
	flushVia(t, a, pa)
	for _, s := range []*Store{a, b} {
		importanceIs(t, "edits", s, "a.md", 60)
		importanceIs(t, "edits", s, "b.md", 55)
	}
}

// Redis restarted empty while the pool was quiet: the replicas read no new batch, and
// offered no snapshot, so a replica that started next began from the front matter. A
// pool without a snapshot is offered one at the next flush.
func TestAPoolThatLostItsSnapshotIsOfferedOneAtOnce(t *testing.T) {
	srv, client, pool := redisPools(t)
	a := replica()
	pa := pool("kb")
	a.RecordHits([]string{"a.md"})
	flushVia(t, a, pa)
	restartEmpty(t, srv, client)
	flushVia(t, a, pa) // no batch since: only the snapshot to offer
	late := replica()
	flushVia(t, late, pool("kb"))
	importanceIs(t, "the replica that started after the restart", late, "a.md", 53)
}

// An entry a replica cannot read (another release's format, a hand-made or damaged one)
// is passed by and said, not a wall that stops every replica's pooling for good, nor a
// batch that poisons every replica's importance.
func TestAnUnreadableBatchIsPassedBy(t *testing.T) {
	for _, tc := range []struct {
		name, id, batch string
	}{
		{"another format", "*", `{"h":{"a.md":1.5}}`},
		{"a negative count", "*", `{"h":{"a.md":-1000000}}`},
		{"a count past any flush", "*", `{"c":{"a.md":2000000}}`},
		{"an edit of no path", "*", `{"e":[{"p":"","v":"x"}]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, client, pool := redisPools(t)
			a := replica()
			pa := pool("kb")
			flushVia(t, a, pa)
			if err := client.XAdd(context.Background(), &redis.XAddArgs{Stream: pa.stream, ID: tc.id, Values: []string{"b", tc.batch}}).Err(); err != nil {
				t.Fatal(err)
			}
			a.RecordHits([]string{"b.md"})
			if err := a.FlushVia(context.Background(), pa); !errors.Is(err, ErrUnreadable) {
				t.Fatalf("FlushVia over an unreadable entry: %v, want it said", err)
			}
			flushVia(t, a, pa)
			importanceIs(t, "past the unreadable entry", a, "b.md", 53)
			importanceIs(t, "past the unreadable entry", a, "a.md", 50)
			a.RecordHits([]string{"b.md"})
			flushVia(t, a, pa)
			importanceIs(t, "learning on after the unreadable entry", a, "b.md", 56)
		})
	}
}

// A batch stamped far ahead of the replicas' clocks (a Redis clock that jumped, a
// hand-made id) is applied as of a minute ahead at most: as of a year ahead, it took a
// year's decay off every path it named, and stamped them so that they did not decay again.
func TestABatchStampedFarAheadIsAppliedAsOfNow(t *testing.T) {
	_, client, pool := redisPools(t)
	a := replica()
	pa := pool("kb")
	a.RecordHits([]string{"a.md"})
	flushVia(t, a, pa)
	importanceIs(t, "before", a, "a.md", 53)
	ahead := time.Now().Add(365 * 24 * time.Hour).UnixMilli()
	if err := client.XAdd(context.Background(), &redis.XAddArgs{Stream: pa.stream, ID: fmt.Sprintf("%d-0", ahead), Values: []string{"b", `{"id":"x.1","h":{"a.md":1}}`}}).Err(); err != nil {
		t.Fatal(err)
	}
	flushVia(t, a, pa)
	importanceIs(t, "after a hit stamped a year ahead", a, "a.md", 56)
	// Redis takes ids up to 2^64-1 ms, and every later entry's id follows the largest.
	if err := client.XAdd(context.Background(), &redis.XAddArgs{Stream: pa.stream, ID: "18446744073709551615-0", Values: []string{"b", `{"id":"x.2","h":{"a.md":1}}`}}).Err(); err != nil {
		t.Fatal(err)
	}
	flushVia(t, a, pa)
	importanceIs(t, "after a hit stamped past any time", a, "a.md", 59)
	a.RecordHits([]string{"b.md"}) // published after it: its id follows
	flushVia(t, a, pa)
	importanceIs(t, "learning on after it", a, "b.md", 53)
}

// A cursor that is no stream id (a hand edit of signals.json) reads from the start
// rather than fail every read.
func TestACursorThatIsNoStreamIDReadsFromTheStart(t *testing.T) {
	_, _, pool := redisPools(t)
	a := replica()
	pa := pool("kb")
	a.RecordHits([]string{"a.md"})
	flushVia(t, a, pa)
	b := replica()
	b.Resume(Snapshot{Cursor: "not-a-cursor", Records: b.State().Records})
	flushVia(t, b, pool("kb"))
	importanceIs(t, "a replica with a broken cursor", b, "a.md", 53)
}

// BenchmarkSnapshot saves and loads the snapshot of a knowledge base of 100,000 files
// (-kb-max-files) and reports its size and what it costs Redis's one thread per call,
// which every gateway's cache calls wait behind.
//
//	go test -run '^$' -bench Snapshot -benchtime 5x ./services/search/signals
func BenchmarkSnapshot(b *testing.B) {
	srv := redistest.Start(b)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr, Protocol: 2, DisableIdentity: true})
	b.Cleanup(func() { client.Close() })
	s := New(DefaultConfig(), time.Now)
	for i := range 100_000 {
		s.Seed(fmt.Sprintf("team-%d/area-%d/document-%d.md", i%40, i%900, i), 50+float64(i%50), tree.Validated, time.Time{})
	}
	p := NewRedisPool(client, "bench:", "kb", time.Second)
	ctx := context.Background()
	raw, err := encodeSnapshot(s.State())
	if err != nil {
		b.Fatal(err)
	}
	if err := client.ConfigResetStat(ctx).Err(); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := range b.N {
		if err := p.SaveSnapshot(ctx, fmt.Sprintf("%d-0", i+1), s.State); err != nil {
			b.Fatal(err)
		}
		if _, ok, err := p.LoadSnapshot(ctx, ""); err != nil || !ok {
			b.Fatalf("load: %v %v", ok, err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(len(raw))/1e6, "MB")
	stats, err := client.Info(ctx, "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(stats, "\n") {
		for _, cmd := range []string{"cmdstat_hset:", "cmdstat_hmget:"} {
			if strings.HasPrefix(line, cmd) {
				_, per, _ := strings.Cut(line, "usec_per_call=")
				per, _, _ = strings.Cut(per, ",")
				v, _ := strconv.ParseFloat(per, 64)
				b.ReportMetric(v/1000, strings.TrimSuffix(strings.TrimPrefix(cmd, "cmdstat_"), ":")+"-ms")
			}
		}
	}
}

// skewed is a replica whose clock is real time plus an offset the test moves.
func skewed() (*Store, *atomic.Int64) {
	var off atomic.Int64
	s := New(DefaultConfig(), func() time.Time { return time.Now().Add(time.Duration(off.Load())) })
	for _, p := range []string{"a.md", "b.md", "c.md"} {
		s.Seed(p, 50, tree.Validated, time.Time{})
	}
	return s, &off
}

// readFails and publishFails are pools with one direction cut.
type (
	readFails    struct{ *RedisPool }
	publishFails struct{ *RedisPool }
)

func (readFails) Read(context.Context, string, int) ([]Pooled, bool, error) {
	return nil, false, errors.New("dial tcp: i/o timeout")
}

func (publishFails) Publish(context.Context, Batch) (string, error) {
	return "", errors.New("dial tcp: i/o timeout")
}

// A snapshot this release cannot read (a hand edit, a later release's after a
// rollback) stopped every replica that started from nothing: it is dropped, the
// replica reads the batches, and offers its own in its place.
func TestAnUnreadableSnapshotIsReplaced(t *testing.T) {
	_, client, pool := redisPools(t)
	a := replica()
	pa := pool("kb")
	a.RecordHits([]string{"a.md"})
	flushVia(t, a, pa)
	if err := client.HSet(context.Background(), pa.snapshot, "state", "not gzip").Err(); err != nil {
		t.Fatal(err)
	}
	late, pl := replica(), pool("kb")
	if err := late.FlushVia(context.Background(), pl); !errors.Is(err, ErrSnapshot) {
		t.Fatalf("starting from an unreadable snapshot: %v, want ErrSnapshot", err)
	}
	importanceIs(t, "the replica that started", late, "a.md", 53)
	a.RecordHits([]string{"b.md"})
	flushVia(t, a, pa)
	flushVia(t, late, pl) // offers its snapshot in the dropped one's place
	later := replica()
	flushVia(t, later, pool("kb"))
	importanceIs(t, "a replica that started from the new snapshot", later, "a.md", 53)
	importanceIs(t, "a replica that started from the new snapshot", later, "b.md", 53)
}

// A batch applied here alone because its publication seemed to fail was counted again
// when it came back from the pool after a partition longer than ten minutes: what was
// seen is forgotten by the pool's time, not this replica's clock.
func TestALostReplyCountsOnceAfterALongPartition(t *testing.T) {
	_, _, pool := redisPools(t)
	a, off := skewed()
	pa := pool("kb")
	flushVia(t, a, pa)
	a.RecordHits([]string{"b.md"})
	if err := a.FlushVia(context.Background(), lostReply{pa}); !errors.Is(err, ErrUnreachable) {
		t.Fatalf("a lost reply: %v, want ErrUnreachable", err)
	}
	off.Store(int64(11 * time.Minute))
	if err := a.FlushVia(context.Background(), readFails{pa}); !errors.Is(err, ErrUnreachable) {
		t.Fatalf("reads failing: %v, want ErrUnreachable", err)
	}
	flushVia(t, a, pa)
	importanceIs(t, "after the partition", a, "b.md", 53)
}

// Replicas that read the same batches agree, however their reads fall in time: one
// that read an edit's two publications in two flushes ten minutes apart by its clock,
// and one that read both in one flush, counted it twice and once.
func TestReplicasAgreeWhateverTheirClocks(t *testing.T) {
	_, _, pool := redisPools(t)
	a, b, d := replica(), replica(), replica()
	c, off := skewed()
	pa, pb, pc, pd := pool("kb"), pool("kb"), pool("kb"), pool("kb")
	flushVia(t, d, pd)
	a.RecordEdit("a.md", "v1")
	flushVia(t, a, pa)
	flushVia(t, c, pc)
	off.Store(int64(11 * time.Minute))
	b.RecordEdit("a.md", "v1")
	flushVia(t, b, pb)
	flushVia(t, c, pc)
	flushVia(t, d, pd)
	for name, s := range map[string]*Store{"read apart": c, "read together": d} {
		importanceIs(t, name, s, "a.md", 55)
	}
}

// A replica that counted its own hits alone before it first reached the pool kept them
// when it then started from the pool's snapshot, and publishes them once it can.
func TestHitsCountedAloneOutliveTheSnapshot(t *testing.T) {
	_, _, pool := redisPools(t)
	a := replica()
	pa := pool("kb")
	a.RecordHits([]string{"a.md"})
	flushVia(t, a, pa) // the pool keeps a snapshot
	late, pl := replica(), pool("kb")
	late.RecordHits([]string{"c.md"})
	if err := late.FlushVia(context.Background(), publishFails{pl}); !errors.Is(err, ErrUnreachable) {
		t.Fatalf("publishing failed: %v, want ErrUnreachable", err)
	}
	importanceIs(t, "the replica that could not publish", late, "a.md", 53) // it read on
	importanceIs(t, "the replica that could not publish", late, "c.md", 53)
	flushVia(t, late, pl) // published now
	flushVia(t, a, pa)
	importanceIs(t, "the replica that could not publish", late, "c.md", 53)
	importanceIs(t, "the other replica", a, "c.md", 53)
}
