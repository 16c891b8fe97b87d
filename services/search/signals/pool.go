package signals

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sort"
	"time"

	"github.com/quarry-router/quarry/platform/text"
)

// Batch is the hits and curations one replica recorded between two flushes, counted
// per path.
type Batch struct {
	// ID names a published batch, so that one published twice (a reply lost and the
	// call retried) or applied here before its publication was confirmed counts once.
	ID        string         `json:"id,omitempty"`
	Hits      map[string]int `json:"h,omitempty"`
	Curations map[string]int `json:"c,omitempty"`
	// Edits are curation updates named by the change they made (RecordEdit).
	Edits []Edit `json:"e,omitempty"`
}

// Edit is a curation update of Path that made its content Version (a content hash).
type Edit struct {
	Path    string `json:"p"`
	Version string `json:"v"`
}

func (b Batch) empty() bool { return len(b.Hits) == 0 && len(b.Curations) == 0 && len(b.Edits) == 0 }

// Pooled is a batch as its pool ordered and stamped it.
type Pooled struct {
	// ID is the batch's place in the pool: reading after it returns the batches that
	// follow.
	ID string
	// At is the pool's clock when the batch arrived: every replica applies the batch
	// as of this time, so that all of them compute the same importance from it.
	At time.Time
	Batch
	// Err says the entry could not be read (its batch is then empty): a reader passes
	// it by, rather than stop at it for good.
	Err error
}

// Snapshot is what a replica had learned about a knowledge base once it had applied
// the pool's batches up to Cursor.
type Snapshot struct {
	Cursor  string   `json:"cursor"`
	Records []Record `json:"records"`
	// Seen is the batch IDs and edits applied in the last minutes (seenFor), with
	// when: a replica that starts from the snapshot counts them once too.
	Seen map[string]time.Time `json:"seen,omitempty"`
}

// ErrMissed is what FlushVia reports when batches after its cursor were trimmed from the
// pool before it read them, and the pool's snapshot did not have them either: they are
// lost to this replica.
var ErrMissed = errors.New("batches this replica never applied were trimmed from the pool")

// Pool is where the search replicas of one knowledge base pool what their searches
// hit. Without it each replica counts only the hits of the searches it serves, so with
// n replicas a file gains importance n times slower than the rules say, and each
// replica ranks by its own view. With it, every replica applies every replica's hits,
// in the pool's one order and as of the pool's one clock. RedisPool is the pool the
// services use.
type Pool interface {
	// Publish adds a batch to the pool.
	Publish(ctx context.Context, b Batch) error
	// Read returns up to max batches published after cursor ("" reads from the
	// start), oldest first, and whether batches after cursor may have been trimmed
	// from the pool before they were read (then the batches are what is left).
	Read(ctx context.Context, cursor string, max int) (batches []Pooled, trimmed bool, err error)
	// SnapshotCursor returns the cursor of the snapshot the pool keeps ("" none).
	SnapshotCursor(ctx context.Context) (string, error)
	// SaveSnapshot keeps build's snapshot, at cursor, for replicas that start later,
	// unless the pool keeps one at or after cursor already (then build is not called).
	SaveSnapshot(ctx context.Context, cursor string, build func() Snapshot) error
	// LoadSnapshot returns the snapshot the pool keeps, if it keeps one whose cursor
	// is later than after ("" any).
	LoadSnapshot(ctx context.Context, after string) (Snapshot, bool, error)
}

// readPage is how many batches FlushVia reads from its pool at a time.
const readPage = 1000

// snapshotEvery is how often a replica offers its snapshot to the pool when the
// pool's is older: replicas that start later begin from it. A pool that keeps none (its
// Redis restarted empty) is offered one at the next flush.
const snapshotEvery = time.Minute

// poolState is a store's place in its pool, kept under Store.poolMu.
type poolState struct {
	// cursor is the last batch applied ("" none). Also read by Cursor under flushMu.
	cursor string
	// loaded is set after the first FlushVia: a store that has read nothing from the
	// pool by then starts from the pool's snapshot.
	loaded bool
	// offeredAt is when this store last offered its snapshot.
	offeredAt time.Time
	// replica names this store's batches, with published their count.
	replica   string
	published uint64
}

// FlushVia is Flush for a replica that pools its signals: it publishes the hits and
// curations recorded since the last flush to p, then applies every batch the pool
// holds after this store's cursor, this replica's own included, each as of the time
// the pool stamped it. A store that has read nothing from the pool yet (a new
// replica, or one whose saved state predates pooling) starts from the pool's snapshot,
// if it keeps one, and so does one whose place in the pool was trimmed away.
//
// If the batch cannot be published, it is applied here alone, so that this replica
// still counts its own hits, and the error is returned; the other replicas never see
// that batch. Calls are serialised; Flush must not be used on a pooled store.
func (s *Store) FlushVia(ctx context.Context, p Pool) error {
	s.poolMu.Lock()
	defer s.poolMu.Unlock()
	defer s.flushed()

	s.flushMu.Lock()
	b := s.drain()
	s.forgetSeen(s.now())
	s.flushMu.Unlock()
	if !b.empty() {
		s.pool.published++
		b.ID = fmt.Sprintf("%s.%d", s.pool.replica, s.pool.published)
		if err := p.Publish(ctx, b); err != nil {
			// Should the batch have reached the pool after all, its ID, seen here now,
			// keeps it from counting twice when it is read back.
			s.flushMu.Lock()
			s.apply(b, s.now())
			s.flushMu.Unlock()
			return fmt.Errorf("publish %s to the pool (applied here only): %w", describe(b), err)
		}
	}
	if !s.pool.loaded && s.pool.cursor == "" {
		if err := s.loadSnapshot(ctx, p); err != nil {
			return err
		}
	}
	s.pool.loaded = true
	var errs []error
	for {
		batches, trimmed, err := p.Read(ctx, s.pool.cursor, readPage)
		if err == nil && trimmed {
			// Batches this store never applied are gone: the snapshot may have them.
			cursor := s.pool.cursor
			if err := s.loadSnapshot(ctx, p); err != nil {
				return err
			}
			if s.pool.cursor != cursor {
				batches, trimmed, err = p.Read(ctx, s.pool.cursor, readPage)
			}
			if err == nil && trimmed {
				errs = append(errs, fmt.Errorf("%w (read after %q)", ErrMissed, s.pool.cursor))
			}
		}
		if err != nil {
			return errors.Join(append(errs, fmt.Errorf("read the pool: %w", err))...)
		}
		s.flushMu.Lock()
		for _, pb := range batches {
			if pb.Err != nil {
				errs = append(errs, fmt.Errorf("passed by an unreadable batch: %w", pb.Err))
			}
			s.apply(pb.Batch, pb.At)
			s.pool.cursor = pb.ID
		}
		s.flushMu.Unlock()
		if len(batches) < readPage {
			break
		}
	}
	if err := s.offerSnapshot(ctx, p); err != nil {
		errs = append(errs, fmt.Errorf("offer a snapshot to the pool: %w", err))
	}
	return errors.Join(errs...)
}

// offerSnapshot offers the pool this store's snapshot when the pool keeps none (its
// Redis restarted empty: a replica that starts next would otherwise begin from the
// front matter), or every snapshotEvery when the pool's is not at this store's cursor.
// Called under poolMu.
func (s *Store) offerSnapshot(ctx context.Context, p Pool) error {
	if s.pool.cursor == "" {
		return nil // nothing read: nothing to offer
	}
	kept, err := p.SnapshotCursor(ctx)
	if err != nil {
		return err
	}
	now := s.now()
	if kept == s.pool.cursor || (kept != "" && now.Sub(s.pool.offeredAt) < snapshotEvery) {
		return nil
	}
	s.pool.offeredAt = now
	return p.SaveSnapshot(ctx, s.pool.cursor, s.State)
}

// loadSnapshot resumes from the pool's snapshot if it is later than this store's
// cursor: a store that has read nothing from the pool starts from it, and so does one
// that finds batches after its cursor trimmed. Called under poolMu.
func (s *Store) loadSnapshot(ctx context.Context, p Pool) error {
	snap, ok, err := p.LoadSnapshot(ctx, s.pool.cursor)
	if err != nil {
		return fmt.Errorf("load the pool's snapshot: %w", err)
	}
	if ok {
		s.resume(snap)
		s.pool.offeredAt = s.now() // the pool has it
	}
	return nil
}

// State is what the store learned, with the cursor of the last pooled batch in it and
// what it applied lately, read together: saved, the store resumes from it (Resume).
func (s *Store) State() Snapshot {
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	return Snapshot{Cursor: s.pool.cursor, Records: s.Snapshot(), Seen: maps.Clone(s.seen)}
}

// Resume restores a saved State: what was learned (as Restore), where the store had
// read its pool to (a store with a cursor reads on from it, and starts from the pool's
// snapshot only if batches after it were trimmed), and what it applied lately.
func (s *Store) Resume(state Snapshot) {
	s.poolMu.Lock()
	defer s.poolMu.Unlock()
	s.resume(state)
}

// resume is Resume under poolMu.
func (s *Store) resume(state Snapshot) {
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	s.restoreLocked(state.Records)
	s.pool.cursor = state.Cursor
	for k, at := range state.Seen {
		s.seen[k] = at
	}
}

// Cursor is the last pooled batch this store applied ("" none): saved with its
// snapshot, it is where the store reads on from after a restart (Resume).
func (s *Store) Cursor() string {
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	return s.pool.cursor
}

// TakeOver carries prev's state into s, which replaces it after a reload: what prev
// learned (as Restore), where it had read its pool to, and the hits and curations it
// recorded but did not flush, which s applies or publishes at its next flush. A flush
// of prev that is under way when TakeOver runs may publish after it; s reads that batch
// from the pool like any other.
func (s *Store) TakeOver(prev *Store) {
	prev.flushMu.Lock()
	pending := prev.drain()
	state := Snapshot{Cursor: prev.pool.cursor, Records: prev.Snapshot(), Seen: maps.Clone(prev.seen)}
	prev.flushMu.Unlock()

	s.Resume(state)
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	// Into the first shard, past its cap: these hits were counted once already.
	sh := &s.shards[0]
	sh.mu.Lock()
	for p, n := range pending.Hits {
		sh.counts[p] += uint32(n)
	}
	sh.mu.Unlock()
	s.curMu.Lock()
	for p, n := range pending.Curations {
		s.curations[p] += n
	}
	s.edits = append(s.edits, pending.Edits...)
	s.curMu.Unlock()
}

// describe says what a batch holds, for errors: "3 hits and 1 curation".
func describe(b Batch) string {
	hits, curations := 0, 0
	for _, n := range b.Hits {
		hits += n
	}
	for _, n := range b.Curations {
		curations += n
	}
	curations += len(b.Edits)
	return text.Count(hits, "hit", "hits") + " and " + text.Count(curations, "curation", "curations")
}

// sortedPaths returns the paths of hits and curations, sorted, each once.
func sortedPaths(hits, curations map[string]int) []string {
	paths := make([]string, 0, len(hits)+len(curations))
	for p := range hits {
		paths = append(paths, p)
	}
	for p := range curations {
		if _, dup := hits[p]; !dup {
			paths = append(paths, p)
		}
	}
	sort.Strings(paths)
	return paths
}

// seenFor is how long a store remembers the batches and edits it applied, to count
// each once: far longer than a batch takes to be published again or an edit to reach
// every replica's watcher, far shorter than the same edit takes to be made again.
const seenFor = 10 * time.Minute

// forgetSeen drops what was applied more than seenFor before now. Called under
// flushMu.
func (s *Store) forgetSeen(now time.Time) {
	for k, at := range s.seen {
		if now.Sub(at) > seenFor {
			delete(s.seen, k)
		}
	}
}
