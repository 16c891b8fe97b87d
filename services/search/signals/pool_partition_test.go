package signals

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// A replica that starts from the pool's snapshot replaces what it had seen with the
// snapshot's: merged, the edit of a batch it had applied alone stayed seen, and
// applying the batch again over the snapshot skipped the edit, lost to this replica.
func TestAnEditAppliedAloneCountsOverTheSnapshot(t *testing.T) {
	_, _, pool := redisPools(t)
	a := replica()
	pa := pool("kb")
	a.RecordHits([]string{"a.md"})
	flushVia(t, a, pa) // the pool keeps a snapshot
	late, pl := replica(), pool("kb")
	late.RecordEdit("c.md", "v1")
	if err := late.FlushVia(context.Background(), publishFails{pl}); !errors.Is(err, ErrUnreachable) {
		t.Fatalf("publishing failed: %v, want ErrUnreachable", err)
	}
	importanceIs(t, "the replica that could not publish", late, "a.md", 53)
	importanceIs(t, "the replica that could not publish", late, "c.md", 55)
	flushVia(t, late, pl)
	flushVia(t, a, pa)
	importanceIs(t, "the replica that could not publish", late, "c.md", 55)
	importanceIs(t, "the other replica", a, "c.md", 55)
}

// A batch applied here alone and published again is kept until it is read back: the
// same flush can find its place trimmed and resume from an older snapshot, which lacks
// the batch, and the batch is then applied again over it (it had been dropped once
// published, and its hits were lost on the replica that made them).
func TestABatchRepublishedBeforeATrimStillCountsOnItsReplica(t *testing.T) {
	_, client, pool := redisPools(t)
	ctx := context.Background()
	a, b := replica(), replica()
	pa, pb := pool("kb"), pool("kb")
	b.RecordHits([]string{"a.md"})
	flushVia(t, b, pb) // offers the first snapshot
	flushVia(t, a, pa) // a starts from it
	a.RecordHits([]string{"b.md"})
	if err := a.FlushVia(ctx, publishFails{pa}); !errors.Is(err, ErrUnreachable) {
		t.Fatalf("publishing failed: %v, want ErrUnreachable", err)
	}
	importanceIs(t, "replica a, alone", a, "b.md", 53)
	// a is away; b goes on and (a minute later) offers a newer snapshot; the stream is trimmed.
	b.RecordHits([]string{"c.md"})
	flushVia(t, b, pb)
	if err := pb.SaveSnapshot(ctx, b.Cursor(), b.State); err != nil {
		t.Fatal(err)
	}
	if err := client.XTrimMaxLen(ctx, pa.stream, 0).Err(); err != nil {
		t.Fatal(err)
	}
	flushVia(t, a, pa) // publishes b.md's batch, finds its cursor trimmed, resumes from the snapshot
	flushVia(t, b, pb)
	for name, s := range map[string]*Store{"a": a, "b": b} {
		importanceIs(t, "replica "+name, s, "a.md", 53)
		importanceIs(t, "replica "+name, s, "b.md", 53)
		importanceIs(t, "replica "+name, s, "c.md", 53)
	}
}

// A reload (TakeOver) carries the batches waiting to be published again: left with
// the replaced store, hits counted while the pool was unreachable never reached the
// other replicas.
func TestTakeOverKeepsBatchesToPublishAgain(t *testing.T) {
	_, _, pool := redisPools(t)
	a, b := replica(), replica()
	pa, pb := pool("kb"), pool("kb")
	flushVia(t, a, pa)
	flushVia(t, b, pb)
	a.RecordHits([]string{"b.md"})
	if err := a.FlushVia(context.Background(), publishFails{pa}); !errors.Is(err, ErrUnreachable) {
		t.Fatalf("publishing failed: %v, want ErrUnreachable", err)
	}
	next := replica()
	next.TakeOver(a) // a reload while the pool is away
	flushVia(t, next, pa)
	flushVia(t, b, pb)
	importanceIs(t, "the reloaded replica", next, "b.md", 53)
	importanceIs(t, "the other replica", b, "b.md", 53)
}

// A replica back from a partition publishes its batches again, and the pool finds the
// one whose reply was lost by its number (the replica's mark) instead of adding it
// twice: added again, it counted twice on the other replicas, which forget a batch's ID
// after seenFor of pool time.
func TestALostReplyCountsOnceOnTheOtherReplicasAfterALongPartition(t *testing.T) {
	_, client, pool := redisPools(t)
	ctx := context.Background()
	a, off := skewed()
	b := replica()
	pa, pb := pool("kb"), pool("kb")
	flushVia(t, b, pb)
	a.RecordHits([]string{"b.md"})
	// The partition starts while the publish is under way: the batch lands, its reply
	// is lost, and the read that follows fails too.
	if err := a.FlushVia(ctx, lostReplyReadFails{pa}); !errors.Is(err, ErrUnreachable) {
		t.Fatalf("a lost reply: %v, want ErrUnreachable", err)
	}
	flushVia(t, b, pb)
	importanceIs(t, "the other replica", b, "b.md", 53)

	// a is cut off for twelve minutes; the other replicas go on publishing (an entry
	// stamped by the pool's clock twelve minutes on stands for them).
	off.Store(int64(12 * time.Minute))
	laterBatch(t, client, pa.stream, 12*time.Minute)
	flushVia(t, b, pb)
	flushVia(t, a, pa) // back: publishes its batch again, which the pool has
	flushVia(t, b, pb)
	importanceIs(t, "the replica whose reply was lost", a, "b.md", 53)
	importanceIs(t, "the other replica", b, "b.md", 53)
}

// lostReplyReadFails is a pool cut off while a publish is under way: the batch lands,
// its reply is lost, and reads fail.
type lostReplyReadFails struct{ *RedisPool }

func (p lostReplyReadFails) Publish(ctx context.Context, b Batch) (string, error) {
	return lostReply(p).Publish(ctx, b)
}

func (lostReplyReadFails) Read(context.Context, string, int) ([]Pooled, bool, error) {
	return nil, false, errors.New("dial tcp: i/o timeout")
}

// loadFailsOnce is a pool whose first LoadSnapshot fails (a timeout on a big snapshot,
// a blip at start).
type loadFailsOnce struct {
	*RedisPool
	failed *bool
}

func (p loadFailsOnce) LoadSnapshot(ctx context.Context, after string) (Snapshot, bool, error) {
	if !*p.failed {
		*p.failed = true
		return Snapshot{}, false, errors.New("i/o timeout")
	}
	return p.RedisPool.LoadSnapshot(ctx, after)
}

// A new replica whose first look at the pool's snapshot fails looks again at the next
// flush, and reads nothing until then. It had read on from the start instead: after a
// Redis restarted empty, whose new stream lacks nothing, no trim sent it back to the
// snapshot, and it missed what was learned before the restart for good.
func TestAFailedFirstSnapshotLoadIsRetried(t *testing.T) {
	srv, client, pool := redisPools(t)
	a := replica()
	pa := pool("kb")
	a.RecordHits([]string{"a.md"})
	flushVia(t, a, pa)
	restartEmpty(t, srv, client)
	flushVia(t, a, pa) // offers its snapshot to the emptied pool
	late, pl := replica(), pool("kb")
	failed := false
	if err := late.FlushVia(context.Background(), loadFailsOnce{pl, &failed}); !errors.Is(err, ErrSnapshot) {
		t.Fatalf("first load failed: %v, want ErrSnapshot", err)
	}
	a.RecordHits([]string{"b.md"})
	flushVia(t, a, pa)
	flushVia(t, late, pl)
	flushVia(t, late, pl)
	importanceIs(t, "the replica whose first load failed", late, "a.md", 53)
	importanceIs(t, "the replica whose first load failed", late, "b.md", 53)
}

type allFails struct{ *RedisPool }

func (allFails) Publish(context.Context, Batch) (string, error) {
	return "", errors.New("dial tcp: i/o timeout")
}
func (allFails) Read(context.Context, string, int) ([]Pooled, bool, error) {
	return nil, false, errors.New("dial tcp: i/o timeout")
}

// While the pool is down every flush applies a batch alone and remembers its ID, which
// forgetSeen prunes only as batches are read. The queue of batches to publish again is
// bounded (maxPending), and so are the IDs of those dropped from it (maxDropped: one
// may be in the stream after all, its reply lost), so what is seen (and saved to
// signals.json at every flush) stays bounded.
func TestSeenIsBoundedWhileThePoolIsDown(t *testing.T) {
	defer func(n int) { maxDropped = n }(maxDropped)
	maxDropped = 500
	_, _, pool := redisPools(t)
	a, off := skewed()
	pa := pool("kb")
	flushVia(t, a, pa)
	for i := range 2000 {
		off.Store(int64(time.Duration(i) * time.Second))
		a.RecordHits([]string{"a.md"})
		_ = a.FlushVia(context.Background(), allFails{pa})
	}
	if n, u := len(a.State().Seen), len(a.pool.pending); n != maxPending+maxDropped || u != maxPending {
		t.Errorf("after 2000 flushes (33 minutes) with the pool down: %d IDs in seen (want %d), %d batches kept to publish (want %d)",
			n, maxPending+maxDropped, u, maxPending)
	}
	// Edits are remembered for seenFor, while the pool is down too: each one an edit
	// key in seen, which grew with every edit until the pool came back.
	for i := range 2000 {
		off.Store(int64(2000*time.Second + time.Duration(i)*time.Second))
		a.RecordEdit("a.md", fmt.Sprintf("v%d", i))
		_ = a.FlushVia(context.Background(), allFails{pa})
	}
	edits := 0
	for k := range a.State().Seen {
		if strings.HasPrefix(k, "e:") {
			edits++
		}
	}
	if max := int(seenFor/time.Second) + 1; edits > max {
		t.Errorf("after 2000 edits, one a second with the pool down: %d in seen, want those of the last %v (%d)", edits, seenFor, max)
	}

	// And the paths they hold are bounded too: a busy replica's batch can name tens of
	// thousands of files.
	cfg := DefaultConfig()
	cfg.MaxPendingPaths = 4 * maxPendingPaths // a batch of maxPendingPaths/2 fits
	b, pb := New(cfg, time.Now), pool("kb")
	flushVia(t, b, pb)
	for i := range 3 {
		for j := 0; j < maxPendingPaths/2; j += 500 {
			paths := make([]string, 0, 500)
			for k := range cap(paths) {
				paths = append(paths, fmt.Sprintf("f%d/%d.md", i, j+k))
			}
			b.RecordHits(paths)
		}
		_ = b.FlushVia(context.Background(), allFails{pb})
	}
	if d := b.Dropped(); d != 0 {
		t.Fatalf("%d hits dropped while recording", d)
	}
	if n := len(b.pool.pending); n != 2 {
		t.Errorf("batches of %d paths each kept: %d, want 2 (at most %d paths)", maxPendingPaths/2, n, maxPendingPaths)
	}
}

// readFailsAfterPublish is a pool cut off right after a publish went through: reads
// work until the first successful Publish, then fail.
type readFailsAfterPublish struct {
	*RedisPool
	published *bool
}

func (p readFailsAfterPublish) Publish(ctx context.Context, b Batch) (string, error) {
	entry, err := p.RedisPool.Publish(ctx, b)
	if err != nil {
		return "", err
	}
	*p.published = true
	return entry, nil
}

func (p readFailsAfterPublish) Read(ctx context.Context, cursor string, n int) ([]Pooled, bool, error) {
	if *p.published {
		return nil, false, errors.New("dial tcp: i/o timeout")
	}
	return p.RedisPool.Read(ctx, cursor, n)
}

// A batch applied here alone, published again, then cut off before it is read back,
// is known by its place in the pool: a snapshot whose cursor is past that place holds
// it, whatever the snapshot's maker still remembers of its ID (forgotten after seenFor,
// it was applied again over the snapshot and counted twice).
func TestAPublishedBatchCountsOnceOverASnapshotThatForgotItsID(t *testing.T) {
	_, client, pool := redisPools(t)
	ctx := context.Background()
	a, b := replica(), replica()
	pa, pb := pool("kb"), pool("kb")
	b.RecordHits([]string{"a.md"})
	flushVia(t, b, pb) // first snapshot
	flushVia(t, a, pa) // a starts from it

	// a's batch fails to publish: applied here alone, pending.
	a.RecordHits([]string{"b.md"})
	if err := a.FlushVia(ctx, publishFails{pa}); !errors.Is(err, ErrUnreachable) {
		t.Fatalf("publish failing: %v", err)
	}
	// Next flush publishes it (Published=true), then the partition starts: the read fails.
	published := false
	if err := a.FlushVia(ctx, readFailsAfterPublish{pa, &published}); !errors.Is(err, ErrUnreachable) {
		t.Fatalf("read failing after publish: %v", err)
	}
	if !published {
		t.Fatal("the pending batch was not published")
	}
	flushVia(t, b, pb)
	importanceIs(t, "replica b", b, "b.md", 53)

	longPartition(t, client, b, pb)
	_ = a.FlushVia(ctx, pa) // back: trimmed, resumes from b's snapshot
	importanceIs(t, "replica b", b, "b.md", 53)
	importanceIs(t, "replica a (one hit on b.md)", a, "b.md", 53)
}

// A batch whose reply was lost is in the stream; dropped from the queue to publish
// again during a long outage, it is read back when the pool returns, and its ID, kept
// (maxDropped), keeps it from counting twice here.
func TestADroppedBatchWhoseReplyWasLostCountsOnceWhenReadBack(t *testing.T) {
	_, _, pool := redisPools(t)
	ctx := context.Background()
	a, off := skewed()
	b := replica()
	pa, pb := pool("kb"), pool("kb")
	flushVia(t, a, pa)
	flushVia(t, b, pb)
	a.RecordHits([]string{"b.md"})
	// The batch lands, its reply is lost, and Redis is gone right after.
	if err := a.FlushVia(ctx, lostReplyReadFails{pa}); !errors.Is(err, ErrUnreachable) {
		t.Fatalf("a lost reply: %v", err)
	}
	importanceIs(t, "replica a", a, "b.md", 53)
	// Ten minutes of flushes with the pool down (one a second, the default), each with a hit.
	for i := range maxPending {
		off.Store(int64(time.Duration(i) * time.Second))
		a.RecordHits([]string{"c.md"})
		_ = a.FlushVia(ctx, allFails{pa})
	}
	off.Store(0)
	flushVia(t, a, pa) // back: reads the stream, which still holds the lost-reply batch
	flushVia(t, b, pb)
	importanceIs(t, "replica b", b, "b.md", 53)
	importanceIs(t, "replica a", a, "b.md", 53)
}

// A published batch waiting to be read back leaves the queue once the cursor passes
// its place, even when it is never read back (lost with a Redis that restarted empty,
// whose new stream reports no trim): it stayed pending, and in signals.json, for good.
func TestAPublishedBatchLeavesThePendingOnceTheCursorPassesIt(t *testing.T) {
	srv, client, pool := redisPools(t)
	ctx := context.Background()
	a := replica()
	pa := pool("kb")
	flushVia(t, a, pa)
	a.RecordHits([]string{"b.md"})
	if err := a.FlushVia(ctx, publishFails{pa}); !errors.Is(err, ErrUnreachable) {
		t.Fatal(err)
	}
	published := false
	_ = a.FlushVia(ctx, readFailsAfterPublish{pa, &published})
	restartEmpty(t, srv, client)
	for range 5 {
		a.RecordHits([]string{"c.md"})
		_ = a.FlushVia(ctx, pa)
	}
	if n := len(a.State().Pending); n != 0 {
		t.Errorf("%d batches still pending after the pool came back and five flushes succeeded", n)
	}
}

// laterBatch appends another replica's batch (a hit on c.md) to stream, stamped d after
// its last entry: the batches the other replicas publish while one is cut off.
func laterBatch(t *testing.T, client redis.UniversalClient, stream string, d time.Duration) {
	t.Helper()
	ctx := context.Background()
	last, err := client.XRevRangeN(ctx, stream, "+", "-", 1).Result()
	if err != nil || len(last) != 1 {
		t.Fatal(last, err)
	}
	ms, _ := splitID(last[0].ID)
	id := fmt.Sprintf("%d-0", int64(ms)+d.Milliseconds())
	if err := client.XAdd(ctx, &redis.XAddArgs{Stream: stream, ID: id,
		Values: []string{"b", `{"id":"other.1","h":{"c.md":1}}`, "p", last[0].ID}}).Err(); err != nil {
		t.Fatal(err)
	}
}

// A batch whose reply was lost, published again after a partition longer than seenFor
// during which the stream was trimmed past the replica's place: the pool keeps each
// replica's last batch number and place (its marks), so the second publication finds
// the first and adds nothing. It counted twice on every replica: here, applied again
// over a snapshot whose maker had forgotten its ID, and on the others, which had too.
func TestALostReplyCountsOnceAfterAPartitionAndATrim(t *testing.T) {
	_, client, pool := redisPools(t)
	ctx := context.Background()
	a, b := replica(), replica()
	pa, pb := pool("kb"), pool("kb")
	b.RecordHits([]string{"a.md"})
	flushVia(t, b, pb)
	flushVia(t, a, pa)
	a.RecordHits([]string{"b.md"})
	if err := a.FlushVia(ctx, lostReplyReadFails{pa}); !errors.Is(err, ErrUnreachable) {
		t.Fatalf("a lost reply: %v, want ErrUnreachable", err)
	}
	flushVia(t, b, pb)
	importanceIs(t, "replica b", b, "b.md", 53)

	longPartition(t, client, b, pb)
	_ = a.FlushVia(ctx, pa) // back: trimmed, resumes from b's snapshot
	flushVia(t, a, pa)
	flushVia(t, b, pb)
	importanceIs(t, "replica a", a, "b.md", 53)
	importanceIs(t, "replica b", b, "b.md", 53)
	if n := len(a.State().Pending); n != 0 {
		t.Errorf("%d batches still pending", n)
	}
}

// The pool keeps each replica's last batch number and place: a batch published again
// returns its first place and adds nothing, and the marks of replicas idle for a day
// are dropped once there are more than maxMarks.
func TestThePoolFindsABatchPublishedAgain(t *testing.T) {
	_, client, pool := redisPools(t)
	ctx := context.Background()
	p := pool("kb")
	b := Batch{ID: "r1.1", Hits: map[string]int{"a.md": 1}}
	first, err := p.Publish(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	again, err := p.Publish(ctx, b)
	if err != nil || again != first {
		t.Fatalf("published again: %q, %v; want its first place %q", again, err, first)
	}
	if n := client.XLen(ctx, p.stream).Val(); n != 1 {
		t.Fatalf("%d entries after publishing one batch twice, want 1", n)
	}
	next, err := p.Publish(ctx, Batch{ID: "r1.2", Hits: map[string]int{"a.md": 1}})
	if err != nil || next == first {
		t.Fatalf("the next batch: %q, %v", next, err)
	}
	// An earlier number than the last: in already, at or before the last's place.
	if got, err := p.Publish(ctx, b); err != nil || got != next {
		t.Errorf("an earlier batch published again: %q, %v; want the last's place %q", got, err, next)
	}

	// Past maxMarks, the marks of replicas idle for markIdle go (those of earlier
	// processes: a restart publishes under a new name).
	for i := range maxMarks {
		if err := client.HSet(ctx, p.marks, fmt.Sprintf("old%d", i), "1 1-0").Err(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := p.Publish(ctx, Batch{ID: "new.1", Hits: map[string]int{"a.md": 1}}); err != nil {
		t.Fatal(err)
	}
	if marks := client.HKeys(ctx, p.marks).Val(); len(marks) != 2 || !slices.Contains(marks, "r1") || !slices.Contains(marks, "new") {
		t.Errorf("marks %v after %d idle ones and a new replica's batch, want r1 and new", marks, maxMarks)
	}
}

// longPartition stands for twelve minutes of pool time while a replica is cut off: the
// other replicas publish (an entry stamped 12 minutes on), b reads it, forgets the IDs
// it applied before, and offers a snapshot, and the stream is trimmed to nothing.
func longPartition(t *testing.T, client redis.UniversalClient, b *Store, pb *RedisPool) {
	t.Helper()
	laterBatch(t, client, pb.stream, 12*time.Minute)
	flushVia(t, b, pb)
	ctx := context.Background()
	if err := pb.SaveSnapshot(ctx, b.Cursor(), b.State); err != nil {
		t.Fatal(err)
	}
	if err := client.XTrimMaxLen(ctx, pb.stream, 0).Err(); err != nil {
		t.Fatal(err)
	}
}

// loadFails is a pool whose snapshot cannot be read (a timeout on a big one), and
// whose publishing fails too while publishFails is set.
type loadFails struct {
	*RedisPool
	publishFails bool
}

func (p loadFails) LoadSnapshot(context.Context, string) (Snapshot, bool, error) {
	return Snapshot{}, false, errors.New("i/o timeout")
}

func (p loadFails) Publish(ctx context.Context, b Batch) (string, error) {
	if p.publishFails {
		return "", errors.New("dial tcp: i/o timeout")
	}
	return p.RedisPool.Publish(ctx, b)
}

// A replica publishes its batches in the order of their numbers, even while it cannot
// read the pool's snapshot yet: had a later batch gone first, the pool's mark would
// have taken the earlier one, published next, for one it already had.
func TestBatchesArePublishedInOrderBeforeTheSnapshotIsRead(t *testing.T) {
	_, _, pool := redisPools(t)
	ctx := context.Background()
	a, late := replica(), replica()
	pa, pl := pool("kb"), pool("kb")
	a.RecordHits([]string{"a.md"})
	flushVia(t, a, pa) // the pool keeps a snapshot: late starts from it
	late.RecordHits([]string{"b.md"})
	_ = late.FlushVia(ctx, loadFails{pl, true})
	late.RecordHits([]string{"c.md"})
	_ = late.FlushVia(ctx, loadFails{pl, false})
	flushVia(t, late, pl)
	flushVia(t, a, pa)
	for name, s := range map[string]*Store{"a": a, "late": late} {
		importanceIs(t, "replica "+name, s, "a.md", 53)
		importanceIs(t, "replica "+name, s, "b.md", 53)
		importanceIs(t, "replica "+name, s, "c.md", 53)
	}
}

// loadFailsLostReply: the snapshot load times out and the publish lands but its reply
// is lost (the partition starts under way), and reads fail.
type loadFailsLostReply struct{ *RedisPool }

func (loadFailsLostReply) LoadSnapshot(context.Context, string) (Snapshot, bool, error) {
	return Snapshot{}, false, errors.New("i/o timeout")
}
func (p loadFailsLostReply) Publish(ctx context.Context, b Batch) (string, error) {
	return lostReply(p).Publish(ctx, b)
}
func (loadFailsLostReply) Read(context.Context, string, int) ([]Pooled, bool, error) {
	return nil, false, errors.New("dial tcp: i/o timeout")
}

// A store that has not read the pool's snapshot yet publishes its pending batches
// before it does, so each knows its place (a lost reply's found by the pool's mark)
// when the snapshot is weighed against it. Loaded first, a lost reply was judged by
// the snapshot's Seen alone, whose maker had forgotten it after a long partition:
// applied again over the snapshot, it counted twice here.
func TestAStoreNotYetLoadedCountsALostReplyOnceOverTheSnapshot(t *testing.T) {
	_, client, pool := redisPools(t)
	ctx := context.Background()
	b := replica()
	pb := pool("kb")
	b.RecordHits([]string{"a.md"})
	flushVia(t, b, pb) // pool keeps a snapshot
	late, pl := replica(), pool("kb")
	late.RecordHits([]string{"b.md"})
	_ = late.FlushVia(ctx, loadFailsLostReply{pl}) // lands, reply lost; not loaded
	flushVia(t, b, pb)
	importanceIs(t, "replica b", b, "b.md", 53)

	// twelve minutes of pool time; b forgets late's ID and offers a snapshot past it.
	laterBatch(t, client, pb.stream, 12*time.Minute)
	flushVia(t, b, pb)
	if err := pb.SaveSnapshot(ctx, b.Cursor(), b.State); err != nil {
		t.Fatal(err)
	}
	flushVia(t, late, pl) // back: loads the snapshot, then republishes
	flushVia(t, late, pl)
	flushVia(t, b, pb)
	importanceIs(t, "replica b", b, "b.md", 53)
	importanceIs(t, "late (lost reply)", late, "b.md", 53)
}

// The marks are pruned by idleness, not by trims: pruned once the hash passed maxMarks
// during a partition, the mark of the cut-off replica went with the trimmed stream, and
// its lost reply, published again, counted twice everywhere.
func TestAMarkOutlivesAPartitionWhenTheMarksArePruned(t *testing.T) {
	_, client, pool := redisPools(t)
	ctx := context.Background()
	a, b := replica(), replica()
	pa, pb := pool("kb"), pool("kb")
	b.RecordHits([]string{"a.md"})
	flushVia(t, b, pb)
	flushVia(t, a, pa)
	a.RecordHits([]string{"b.md"})
	_ = a.FlushVia(ctx, lostReplyReadFails{pa})
	flushVia(t, b, pb)
	importanceIs(t, "replica b", b, "b.md", 53)

	longPartition(t, client, b, pb)
	// stores of earlier loads (restarts, reloads) left their marks; one more publishes.
	for i := range maxMarks {
		client.HSet(ctx, pa.marks, fmt.Sprintf("old%d", i), "1 1-0")
	}
	b.RecordHits([]string{"c.md"})
	flushVia(t, b, pb)
	_ = a.FlushVia(ctx, pa)
	flushVia(t, a, pa)
	flushVia(t, b, pb)
	importanceIs(t, "replica a", a, "b.md", 53)
	importanceIs(t, "replica b", b, "b.md", 53)
}

// A query holds its snapshot of the knowledge base for its whole search and records
// its hits at the end: those of a query that ends after a reload go to the store that
// took the replaced one over. They went to the replaced store, drained and never
// flushed again: lost everywhere.
func TestHitsRecordedOnAReplacedStoreCountOnItsSuccessor(t *testing.T) {
	_, _, pool := redisPools(t)
	prev, p := replica(), pool("kb")
	flushVia(t, prev, p)
	next := replica()
	prev.Retire()
	next.TakeOver(prev)
	prev.RecordHits([]string{"a.md"}) // the in-flight query finishes
	flushVia(t, prev, p)
	flushVia(t, next, p)
	importanceIs(t, "the current store", next, "a.md", 53)
}

// A reload's store publishes under the name of the store it took over, numbering on:
// the pool keeps one mark per search process, not one per reload.
func TestAReloadPublishesUnderTheSameName(t *testing.T) {
	_, client, pool := redisPools(t)
	a, pa := replica(), pool("kb")
	a.RecordHits([]string{"a.md"})
	flushVia(t, a, pa)
	next := replica()
	next.TakeOver(a)
	next.RecordHits([]string{"b.md"})
	flushVia(t, next, pa)
	if marks := client.HGetAll(context.Background(), pa.marks).Val(); len(marks) != 1 {
		t.Errorf("marks %v after a reload, want one", marks)
	}
	importanceIs(t, "the reloaded store", next, "a.md", 53)
	importanceIs(t, "the reloaded store", next, "b.md", 53)
}

// addAfter appends a batch with an explicit id d after the entry prev (as the publish
// script would: field p names the entry before it).
func addAfter(t *testing.T, client redis.UniversalClient, stream, prev string, d time.Duration, batch string) string {
	t.Helper()
	ms, _ := splitID(prev)
	id := fmt.Sprintf("%d-0", int64(ms)+d.Milliseconds())
	if err := client.XAdd(context.Background(), &redis.XAddArgs{Stream: stream, ID: id,
		Values: []string{"b", batch, "p", prev}}).Err(); err != nil {
		t.Fatal(err)
	}
	return id
}

// The same stream loses its last entries (a failover to a replica that had not
// received them yet, a restart from an RDB or AOF-everysec file): the cursor is then
// missing between entries the stream holds. Taken for another stream and read from its
// start, every batch older than seenFor counted a second time; the replica reads on.
func TestATailLostToAFailoverIsNotCountedAgain(t *testing.T) {
	_, client, pool := redisPools(t)
	ctx := context.Background()
	a, pa := replica(), pool("kb")
	a.RecordHits([]string{"a.md"})
	flushVia(t, a, pa) // e1, a.md +3
	importanceIs(t, "replica a", a, "a.md", 53)
	e1 := a.Cursor()
	// twelve minutes of pool time: a forgets e1's ID (seenFor)
	e2 := addAfter(t, client, pa.stream, e1, 12*time.Minute, `{"id":"o.1","h":{"c.md":1}}`)
	flushVia(t, a, pa)
	e3 := addAfter(t, client, pa.stream, e2, time.Second, `{"id":"o.2","h":{"b.md":1}}`)
	flushVia(t, a, pa)
	if a.Cursor() != e3 {
		t.Fatalf("cursor %s, want %s", a.Cursor(), e3)
	}
	// failover: the promoted replica never got e3
	if err := client.XDel(ctx, pa.stream, e3).Err(); err != nil {
		t.Fatal(err)
	}
	if err := client.Do(ctx, "XSETID", pa.stream, e2).Err(); err != nil {
		t.Fatal(err)
	}
	// the next batch lands on the promoted master, after e2
	addAfter(t, client, pa.stream, e2, 2*time.Second, `{"id":"o.3","h":{"c.md":1}}`)
	flushVia(t, a, pa)
	importanceIs(t, "replica a (e1 read again)", a, "a.md", 53)
	importanceIs(t, "replica a", a, "b.md", 53)
	importanceIs(t, "replica a", a, "c.md", 56)
}

// TakeOver points prev at its successor before it drains prev, and a RecordHits that
// read no successor just before can still land in a shard the drain emptied: the
// successor drains its predecessor too, for predecessorFor, so no hit is stranded.
func TestHitsRecordedDuringTakeOverAreNotStranded(t *testing.T) {
	for iter := range 60 { // fails within the first ten without the drain
		prev, next := replica(), replica()
		var stop atomic.Bool
		var recorded atomic.Int64
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				for !stop.Load() {
					prev.RecordHits([]string{"a.md"})
					recorded.Add(1)
				}
			})
		}
		time.Sleep(20 * time.Microsecond)
		prev.Retire()
		next.TakeOver(prev)
		stop.Store(true)
		wg.Wait()
		next.flushMu.Lock()
		counted := next.drain().Hits["a.md"]
		next.flushMu.Unlock()
		if lost := recorded.Load() - int64(counted) - int64(prev.Dropped()+next.Dropped()); lost != 0 {
			t.Fatalf("iteration %d: %d of %d hits recorded during a reload never reached the successor", iter, lost, recorded.Load())
		}
	}
}

// A store takes over one other, once, before it has published: otherwise two live
// stores would publish under one name, and the pool's marks would take one's batches
// for the other's.
func TestTakeOverRefusesWhatWouldShareAName(t *testing.T) {
	_, _, pool := redisPools(t)
	for _, tc := range []struct {
		name string
		do   func()
	}{
		{"itself", func() { a := replica(); a.TakeOver(a) }},
		{"a store taken over already", func() { a := replica(); replica().TakeOver(a); replica().TakeOver(a) }},
		{"by a store that has published", func() {
			a, p := replica(), pool("kb")
			a.RecordHits([]string{"a.md"})
			flushVia(t, a, p)
			a.TakeOver(replica())
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Error("TakeOver did not refuse")
				}
			}()
			tc.do()
		})
	}
}
