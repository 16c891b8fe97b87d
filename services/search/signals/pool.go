package signals

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/quarry-router/quarry/platform/text"
)

// Batch is the hits and curations one replica recorded between two flushes, counted
// per path.
type Batch struct {
	Hits      map[string]int `json:"h,omitempty"`
	Curations map[string]int `json:"c,omitempty"`
}

func (b Batch) empty() bool { return len(b.Hits) == 0 && len(b.Curations) == 0 }

// Pooled is a batch as its pool ordered and stamped it.
type Pooled struct {
	// ID is the batch's place in the pool: reading after it returns the batches that
	// follow.
	ID string
	// At is the pool's clock when the batch arrived: every replica applies the batch
	// as of this time, so that all of them compute the same importance from it.
	At time.Time
	Batch
}

// Snapshot is what a replica had learned about a knowledge base once it had applied
// the pool's batches up to Cursor.
type Snapshot struct {
	Cursor  string
	Records []Record
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
	// SaveSnapshot keeps s for replicas that start later, unless the pool holds one
	// with a later cursor already.
	SaveSnapshot(ctx context.Context, s Snapshot) error
	// LoadSnapshot returns the snapshot the pool keeps, if it keeps one whose cursor
	// is later than after ("" any).
	LoadSnapshot(ctx context.Context, after string) (Snapshot, bool, error)
}

// readPage is how many batches FlushVia reads from its pool at a time.
const readPage = 1000

// snapshotEvery is how often a replica offers its snapshot to the pool, when it has
// read further since its last offer: replicas that start later begin from it.
const snapshotEvery = time.Minute

// poolState is a store's place in its pool, kept under Store.poolMu.
type poolState struct {
	// cursor is the last batch applied ("" none). Also read by Cursor under flushMu.
	cursor string
	// loaded is set after the first FlushVia: a store that has read nothing from the
	// pool by then starts from the pool's snapshot.
	loaded bool
	// offered is the cursor of the last snapshot offered, at offeredAt.
	offered   string
	offeredAt time.Time
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
	s.flushMu.Unlock()
	if !b.empty() {
		if err := p.Publish(ctx, b); err != nil {
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
			s.apply(pb.Batch, pb.At)
			s.pool.cursor = pb.ID
		}
		s.flushMu.Unlock()
		if len(batches) < readPage {
			break
		}
	}
	if now := s.now(); s.pool.cursor != s.pool.offered && now.Sub(s.pool.offeredAt) >= snapshotEvery {
		s.pool.offered, s.pool.offeredAt = s.pool.cursor, now
		if err := p.SaveSnapshot(ctx, s.State()); err != nil {
			errs = append(errs, fmt.Errorf("offer a snapshot to the pool: %w", err))
		}
	}
	return errors.Join(errs...)
}

// loadSnapshot restores the pool's snapshot if it is later than this store's cursor:
// a store that has read nothing from the pool starts from it, and so does one that
// finds batches after its cursor trimmed. Called under poolMu.
func (s *Store) loadSnapshot(ctx context.Context, p Pool) error {
	snap, ok, err := p.LoadSnapshot(ctx, s.pool.cursor)
	if err != nil {
		return fmt.Errorf("load the pool's snapshot: %w", err)
	}
	if !ok {
		return nil
	}
	s.Restore(snap.Records)
	s.flushMu.Lock()
	s.pool.cursor = snap.Cursor
	s.flushMu.Unlock()
	// Offered already: the pool has it.
	s.pool.offered, s.pool.offeredAt = snap.Cursor, s.now()
	return nil
}

// State is what the store learned, with the cursor of the last pooled batch in it,
// read together.
func (s *Store) State() Snapshot {
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	return Snapshot{Cursor: s.pool.cursor, Records: s.Snapshot()}
}

// Cursor is the last pooled batch this store applied ("" none): saved with its
// snapshot, it is where the store reads on from after a restart (SetCursor).
func (s *Store) Cursor() string {
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	return s.pool.cursor
}

// SetCursor sets where FlushVia reads the pool on from, as saved with the records a
// store was restored from. A store with a cursor does not start from the pool's
// snapshot unless batches after its cursor were trimmed.
func (s *Store) SetCursor(c string) {
	s.poolMu.Lock()
	defer s.poolMu.Unlock()
	s.flushMu.Lock()
	s.pool.cursor = c
	s.flushMu.Unlock()
}

// TakeOver carries prev's state into s, which replaces it after a reload: what prev
// learned (as Restore), where it had read its pool to, and the hits and curations it
// recorded but did not flush, which s applies or publishes at its next flush. A flush
// of prev that is under way when TakeOver runs may publish after it; s reads that batch
// from the pool like any other.
func (s *Store) TakeOver(prev *Store) {
	prev.flushMu.Lock()
	pending := prev.drain()
	records := prev.Snapshot()
	cursor := prev.pool.cursor
	prev.flushMu.Unlock()

	s.Restore(records)
	s.SetCursor(cursor)
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
	return text.Count(hits, "hit", "hits") + " and " + text.Count(curations, "curation", "curations")
}

// sortedPaths returns the paths of b, sorted, each once.
func sortedPaths(b Batch) []string {
	paths := make([]string, 0, len(b.Hits)+len(b.Curations))
	for p := range b.Hits {
		paths = append(paths, p)
	}
	for p := range b.Curations {
		if _, dup := b.Hits[p]; !dup {
			paths = append(paths, p)
		}
	}
	sort.Strings(paths)
	return paths
}
