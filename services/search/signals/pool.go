package signals

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
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

func (b Batch) empty() bool { return b.paths() == 0 }

// maxBatchCount bounds one path's hits or curations in a batch: a replica counts a
// flush's worth. A count past it, or not positive, is no batch a replica published (a
// hand-made or damaged entry): applied, -1,000,000 hits zeroed a file's importance on
// every replica, and the snapshots kept it.
const maxBatchCount = 1 << 20

// check reports whether b could have been published by a replica.
func (b Batch) check() error {
	for _, counts := range []map[string]int{b.Hits, b.Curations} {
		for p, n := range counts {
			if p == "" || n <= 0 || n > maxBatchCount {
				return fmt.Errorf("batch counts %d for %q, want 1 to %d for a path", n, p, maxBatchCount)
			}
		}
	}
	for _, e := range b.Edits {
		if e.Path == "" || e.Version == "" {
			return fmt.Errorf("batch edit %+v names no path or no version", e)
		}
	}
	return nil
}

// paths is how many paths the batch names (a path with hits and curations twice).
func (b Batch) paths() int { return len(b.Hits) + len(b.Curations) + len(b.Edits) }

// add adds o's hits, curations and edits to b.
func (b *Batch) add(o Batch) {
	for p, n := range o.Hits {
		if b.Hits == nil {
			b.Hits = map[string]int{}
		}
		b.Hits[p] += n
	}
	for p, n := range o.Curations {
		if b.Curations == nil {
			b.Curations = map[string]int{}
		}
		b.Curations[p] += n
	}
	b.Edits = append(b.Edits, o.Edits...)
}

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
// the pool's batches up to Cursor, which the pool stamped At.
type Snapshot struct {
	Cursor  string    `json:"cursor"`
	At      time.Time `json:"at"`
	Records []Record  `json:"records"`
	// Seen is the batch IDs and edits applied in the last minutes (seenFor), with
	// the pool's time of each: a replica that starts from the snapshot counts them
	// once too.
	Seen map[string]time.Time `json:"seen,omitempty"`
	// Pending is this replica's batches the pool has not confirmed yet (State): kept
	// with its saved state across restarts, never in the pool's snapshot.
	Pending []PendingBatch `json:"pending,omitempty"`
}

// PendingBatch is a batch of this replica's applied here before the pool confirmed it.
type PendingBatch struct {
	Batch
	// Entry is its place in the pool once the pool has taken it (Pooled.ID). It is
	// kept until this replica's cursor reaches that place: a trim can take it before
	// it is read back, and a snapshot from before that place lacks it.
	Entry string `json:"entry,omitempty"`
}

func (b PendingBatch) published() bool { return b.Entry != "" }

// What FlushVia's errors can say, besides the pool's own errors (errors.Is):
var (
	// ErrUnreachable: the pool could not be reached. This replica's batch is applied
	// here alone, and published again once the pool is back.
	ErrUnreachable = errors.New("the signals pool could not be reached")
	// ErrMissed: batches after this replica's cursor were trimmed from the pool before
	// it read them, and the pool's snapshot did not have them either: they are lost
	// to this replica.
	ErrMissed = errors.New("batches this replica never applied were trimmed from the pool")
	// ErrSnapshot: the pool's snapshot could not be read or offered; the replica
	// carries on from the batches.
	ErrSnapshot = errors.New("the signals pool's snapshot could not be used")
	// ErrUnreadable: an entry of the pool could not be read and was passed by.
	ErrUnreadable = errors.New("an entry of the signals pool could not be read")
)

// Pool is where the search replicas of one knowledge base pool what their searches
// hit. Without it each replica counts only the hits of the searches it serves, so with
// n replicas a file gains importance n times slower than the rules say, and each
// replica ranks by its own view. With it, every replica applies every replica's hits,
// in the pool's one order and as of the pool's one clock. RedisPool is the pool the
// services use.
type Pool interface {
	// Publish adds a batch to the pool and returns its place there (Pooled.ID).
	Publish(ctx context.Context, b Batch) (string, error)
	// Read returns up to max batches published after cursor ("" reads from the
	// start), oldest first, and whether batches after cursor may have been trimmed
	// from the pool before they were read (then the batches are what is left).
	Read(ctx context.Context, cursor string, max int) (batches []Pooled, trimmed bool, err error)
	// SnapshotAt returns when the pool stamped the cursor of the snapshot it keeps;
	// false when it keeps none it can read.
	SnapshotAt(ctx context.Context) (time.Time, bool, error)
	// SaveSnapshot keeps build's snapshot, at cursor, for replicas that start later,
	// unless the pool keeps a readable one at or after cursor already (then build is
	// not called).
	SaveSnapshot(ctx context.Context, cursor string, build func() Snapshot) error
	// LoadSnapshot returns the snapshot the pool keeps, if it keeps one whose cursor
	// is later than after ("" any). One it cannot read is reported as ErrUnreadable
	// (dropped, for the next offer to replace).
	LoadSnapshot(ctx context.Context, after string) (Snapshot, bool, error)
}

// readPage is how many batches FlushVia reads from its pool at a time.
const readPage = 1000

// snapshotEvery is how far, in the pool's time, a replica's cursor may run ahead of
// the pool's snapshot before it offers its own: replicas that start later begin from
// it. Replicas read the same batches, so the first to get that far offers, and the
// others then find the pool's snapshot recent: about one offer a minute in all. A pool
// that keeps none (its Redis restarted empty) is offered one at once. A replica whose
// offer failed tries again after offerRetry.
const (
	snapshotEvery = time.Minute
	offerRetry    = 10 * time.Second
)

// maxPending and maxPendingPaths bound the batches a replica keeps to publish again
// while the pool is unreachable, and their paths: ten minutes' worth at the default
// flush interval. Older ones still count here; the other replicas never see them. The
// IDs of the last maxDropped of those stay seen: one whose reply was lost is in the
// stream, and read back, it must not count here twice.
const (
	maxPending      = 600
	maxPendingPaths = 100_000
)

var maxDropped = MaxBatches // a variable for tests

// poolState is a store's place in its pool, kept under Store.poolMu.
type poolState struct {
	// cursor is the last batch applied ("" none), stamped cursorAt. Also read under
	// flushMu.
	cursor   string
	cursorAt time.Time
	// loaded is set once the store has looked for the pool's snapshot: a store that
	// had read nothing from the pool by then starts from it.
	loaded bool
	// retryOffer is when this store may offer its snapshot again after an offer
	// failed (its clock).
	retryOffer time.Time
	// replica names this store's batches, with published their count.
	replica   string
	published uint64
	// pending are the batches applied here alone because their publication failed:
	// published again at each flush until one succeeds (their IDs keep them from
	// counting twice anywhere), and applied again over a snapshot that lacks them.
	// dropped are the IDs of those dropped past maxPending, oldest first.
	pending []PendingBatch
	dropped []string
	// retired is set once the store is about to be replaced (Retire): its flushes
	// then do nothing, and its successor takes its state over; replaced once it has
	// (TakeOver), when its state is no longer what the replica learned.
	retired, replaced bool
}

// FlushVia is Flush for a replica that pools its signals: it publishes the hits and
// curations recorded since the last flush to p, then applies every batch the pool
// holds after this store's cursor, this replica's own included, each as of the time
// the pool stamped it. A store that has read nothing from the pool yet (a new
// replica, or one whose saved state predates pooling) starts from the pool's snapshot,
// if it keeps one, and so does one whose place in the pool was trimmed away; until
// that snapshot could be looked at, it reads nothing.
//
// If the batch cannot be published, it is applied here alone, so that this replica
// still counts its own hits, and published again at the next flushes: one that reached
// the pool although its reply was lost is found there (Pool.Publish) rather than added
// twice, and its place in the pool tells whether a snapshot holds it. The error
// returned says what went wrong
// (ErrUnreachable, ErrMissed, ErrSnapshot, ErrUnreadable); the flush goes as far as it
// can. Calls are serialised; Flush must not be used on a pooled store.
func (s *Store) FlushVia(ctx context.Context, p Pool) error {
	s.poolMu.Lock()
	defer s.poolMu.Unlock()
	if s.pool.retired {
		return nil
	}
	defer s.flushed()

	s.flushMu.Lock()
	b := s.drain()
	s.flushMu.Unlock()
	if !b.empty() {
		s.pool.published++
		b.ID = fmt.Sprintf("%s.%d", s.pool.replica, s.pool.published)
	}

	// Published first, so that every pending batch knows its place in the pool (a
	// lost reply's too, found by the pool's mark) before a snapshot is weighed against
	// it.
	var errs []error
	if err := s.publish(ctx, p, b); err != nil {
		errs = append(errs, err)
	}
	if !s.pool.loaded {
		if s.pool.cursor != "" {
			s.pool.loaded = true // resumed from a saved place: reads on from it
		} else if err := s.loadSnapshot(ctx, p); err == nil || errors.Is(err, ErrUnreadable) {
			s.pool.loaded = true // none, or one that was dropped: the next offer replaces it
			if err != nil {
				errs = append(errs, err)
			}
		} else {
			errs = append(errs, err)
		}
	}
	if !s.pool.loaded {
		return errors.Join(errs...)
	}
	if err := s.read(ctx, p, &errs); err != nil {
		return errors.Join(append(errs, err)...)
	}
	if err := s.offerSnapshot(ctx, p); err != nil {
		errs = append(errs, fmt.Errorf("%w: offer: %w", ErrSnapshot, err))
	}
	return errors.Join(errs...)
}

// read applies every batch the pool holds after the cursor. What it passes by or
// misses is added to errs; the error returned says the pool could not be read. Called
// under poolMu.
func (s *Store) read(ctx context.Context, p Pool, errs *[]error) error {
	for {
		batches, trimmed, err := p.Read(ctx, s.pool.cursor, readPage)
		if err == nil && trimmed {
			// Batches this store never applied are gone: the snapshot may have them.
			cursor := s.pool.cursor
			if err := s.loadSnapshot(ctx, p); err != nil {
				*errs = append(*errs, err)
			}
			if s.pool.cursor != cursor {
				batches, trimmed, err = p.Read(ctx, s.pool.cursor, readPage)
			}
			if err == nil && trimmed {
				*errs = append(*errs, fmt.Errorf("%w (read after %q)", ErrMissed, s.pool.cursor))
			}
		}
		if err != nil {
			return fmt.Errorf("%w: read: %w", ErrUnreachable, err)
		}
		s.flushMu.Lock()
		for _, pb := range batches {
			if pb.Err != nil {
				*errs = append(*errs, fmt.Errorf("%w: %w", ErrUnreadable, pb.Err))
			}
			s.applyPooled(pb)
		}
		s.flushMu.Unlock()
		if len(batches) < readPage {
			return nil
		}
	}
}

// publish publishes the pending batches still to publish, then b, in the order of
// their numbers, which the pool's marks rely on (Pool.Publish): a batch that fails stops
// the rest, and b is then applied here alone (if not empty) and kept to try again.
// Called under poolMu.
func (s *Store) publish(ctx context.Context, p Pool, b Batch) error {
	failed := func(q Batch, err error) error {
		s.keepPending(b)
		return fmt.Errorf("%w: publish %s (applied here only, to be published again): %w", ErrUnreachable, describe(q), err)
	}
	for i := range s.pool.pending {
		q := &s.pool.pending[i]
		if q.published() {
			continue
		}
		entry, err := p.Publish(ctx, q.Batch)
		if err != nil {
			return failed(q.Batch, err)
		}
		q.Entry = entry
		// Applied here already: when it is read back, its ID must still be seen,
		// however long the pool was away.
		s.flushMu.Lock()
		s.seen["b:"+q.ID] = s.latestAt()
		s.flushMu.Unlock()
	}
	if b.empty() {
		return nil
	}
	if _, err := p.Publish(ctx, b); err != nil {
		return failed(b, err)
	}
	return nil
}

// keepPending applies b here alone and keeps it to publish again. Should b have reached
// the pool after all, its ID, seen here now, keeps it from counting twice when it is
// read back. Past maxPending batches or maxPendingPaths paths, the oldest are dropped,
// and their IDs with them. Called under poolMu.
func (s *Store) keepPending(b Batch) {
	if b.empty() {
		return
	}
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	at := s.latestAt()
	s.apply(b, at)
	// Reading the pool forgets what was seen more than seenFor ago (forgetSeen); while
	// it is away nothing would, and each edit applied here would be remembered, and
	// saved in signals.json at every flush, until it is back. Batch ids are kept: the
	// pending batches' are refreshed when they are published.
	s.forgetEdits(at)
	s.pool.pending = append(s.pool.pending, PendingBatch{Batch: b})
	paths := 0
	for _, pb := range s.pool.pending {
		paths += pb.paths()
	}
	drop := 0
	for ; drop < len(s.pool.pending)-1 && (len(s.pool.pending)-drop > maxPending || paths > maxPendingPaths); drop++ {
		old := s.pool.pending[drop]
		paths -= old.paths()
		s.pool.dropped = append(s.pool.dropped, old.ID)
	}
	s.pool.pending = slices.Delete(s.pool.pending, 0, drop)
	if n := len(s.pool.dropped) - maxDropped; n > 0 {
		for _, id := range s.pool.dropped[:n] {
			delete(s.seen, "b:"+id)
		}
		s.pool.dropped = slices.Delete(s.pool.dropped, 0, n)
	}
}

// latestAt is the time to stamp what this store applies on its own: the pool's time
// of its cursor, or its own clock if later. Called under flushMu.
func (s *Store) latestAt() time.Time {
	if now := s.now(); now.After(s.pool.cursorAt) {
		return now
	}
	return s.pool.cursorAt
}

// maxAhead is how far ahead of this replica's clock a pooled batch's stamp is taken as
// it is: the clocks of Redis and the replicas agree within milliseconds.
const maxAhead = time.Minute

// applyPooled applies a batch read from the pool and moves the cursor past it.
// Called under flushMu.
func (s *Store) applyPooled(pb Pooled) {
	if limit := s.now().Add(maxAhead); pb.At.After(limit) {
		// Stamped far ahead (a Redis clock that jumped, a hand-made id): applied as of
		// then, it would take that much decay off every path it names at once, and stamp
		// them so that they never decay again until the clock catches up.
		pb.At = limit
	}
	s.forgetSeen(pb.At)
	s.apply(pb.Batch, pb.At)
	s.pool.cursor, s.pool.cursorAt = pb.ID, pb.At
	if len(s.pool.pending) > 0 {
		// This store's own, in the pool after all (its reply was lost), or published
		// and now passed: no need to publish or keep them.
		s.pool.pending = slices.DeleteFunc(s.pool.pending, func(q PendingBatch) bool {
			return q.ID == pb.Batch.ID || (q.published() && !cursorIsBefore(pb.ID, q.Entry))
		})
	}
}

// offerSnapshot offers the pool this store's snapshot when the pool keeps none it can
// read (its Redis restarted empty: a replica that starts next would otherwise begin
// from the front matter), or when this store's cursor is snapshotEvery past the
// pool's. Called under poolMu.
func (s *Store) offerSnapshot(ctx context.Context, p Pool) error {
	if s.pool.cursor == "" {
		return nil // nothing read: nothing to offer
	}
	keptAt, ok, err := p.SnapshotAt(ctx)
	if err != nil {
		return err
	}
	if ok && s.pool.cursorAt.Sub(keptAt) < snapshotEvery {
		return nil
	}
	now := s.now()
	if now.Before(s.pool.retryOffer) {
		return nil
	}
	if err := p.SaveSnapshot(ctx, s.pool.cursor, s.learned); err != nil {
		// A snapshot is a whole knowledge base's records: not built again every flush.
		s.pool.retryOffer = now.Add(offerRetry)
		return err
	}
	return nil
}

// loadSnapshot resumes from the pool's snapshot if it is later than this store's
// cursor: a store that has read nothing from the pool starts from it, and so does one
// that finds batches after its cursor trimmed. What the store had applied is replaced,
// what it had seen too (or an edit it applied alone would be skipped when applied again
// over the snapshot); its own batches the snapshot lacks are applied again over it.
// Called under poolMu.
func (s *Store) loadSnapshot(ctx context.Context, p Pool) error {
	snap, ok, err := p.LoadSnapshot(ctx, s.pool.cursor)
	if err != nil {
		return fmt.Errorf("%w: load: %w", ErrSnapshot, err)
	}
	if !ok {
		return nil
	}
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	at := make(map[string]time.Time, len(s.pool.pending))
	for _, b := range s.pool.pending {
		at[b.ID] = s.seen["b:"+b.ID]
	}
	clear(s.seen)
	s.resumeLocked(snap)
	kept := s.pool.pending[:0]
	for _, b := range s.pool.pending {
		if b.published() && !cursorIsBefore(snap.Cursor, b.Entry) {
			continue // in the snapshot
		}
		// Not published, or published after the snapshot's cursor: the snapshot lacks
		// it, unless its maker applied it (a reply that was lost) and still knows.
		if _, in := snap.Seen["b:"+b.ID]; !in {
			s.apply(b.Batch, at[b.ID])
		}
		kept = append(kept, b)
	}
	clear(s.pool.pending[len(kept):])
	s.pool.pending = kept
	return nil
}

// learned is what the store learned, the cursor of the last pooled batch in it and
// what it applied lately, read together: the snapshot it offers its pool. Called under
// poolMu.
func (s *Store) learned() Snapshot {
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	return s.learnedLocked()
}

// learnedLocked is learned under flushMu.
func (s *Store) learnedLocked() Snapshot {
	return Snapshot{Cursor: s.pool.cursor, At: s.pool.cursorAt, Records: s.Snapshot(), Seen: maps.Clone(s.seen)}
}

// State is what the store learned (as its pool's snapshot) and its own batches the pool
// has not confirmed yet: saved, the store resumes from it (Resume).
func (s *Store) State() Snapshot {
	state, _ := s.SavedState()
	return state
}

// SavedState is State, and false once another store took this one's state over
// (TakeOver): saved then, it would replace the successor's with less.
func (s *Store) SavedState() (Snapshot, bool) {
	s.poolMu.Lock()
	defer s.poolMu.Unlock()
	state := s.learned()
	state.Pending = slices.Clone(s.pool.pending)
	return state, !s.pool.replaced
}

// Resume restores a saved State: what was learned (as Restore), where the store had
// read its pool to (a store with a cursor reads on from it, and starts from the pool's
// snapshot only if batches after it were trimmed), what it applied lately, and its
// batches still to confirm.
func (s *Store) Resume(state Snapshot) {
	s.poolMu.Lock()
	defer s.poolMu.Unlock()
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	s.resumeLocked(state)
	s.pool.pending = slices.Clone(state.Pending)
}

// resumeLocked is Resume, bar the pending batches, under poolMu and flushMu.
func (s *Store) resumeLocked(state Snapshot) {
	s.restoreLocked(state.Records)
	s.pool.cursor, s.pool.cursorAt = state.Cursor, state.At
	for k, at := range state.Seen {
		s.seen[k] = at
	}
	// A store that read on to the cursor would have pruned what it had seen on that
	// minute (forgetSeen): so does this one, and the two agree.
	s.forgotAt = state.At.Truncate(time.Minute)
}

// Cursor is the last pooled batch this store applied ("" none): saved with its
// snapshot, it is where the store reads on from after a restart (Resume).
func (s *Store) Cursor() string {
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	return s.pool.cursor
}

// predecessorFor is how long a store drains the one it took over: longer than any
// query that began on the old one runs (every query has a deadline far shorter).
const predecessorFor = time.Minute

// Retire waits for a flush of s under way, and makes later ones do nothing: s is about
// to be replaced by a store that takes its state over (TakeOver), which then need not
// wait on the pool while its caller holds locks of its own.
func (s *Store) Retire() {
	s.poolMu.Lock()
	defer s.poolMu.Unlock()
	s.pool.retired = true
}

// TakeOver carries prev's state into s, which replaces it after a reload: what prev
// learned (as Restore), where it had read its pool to, and its batches the pool has not
// confirmed. The hits and curations prev recorded but did not flush, and any that land
// there later, s drains with its own (see successor). A flush of prev under way is
// waited for (Retire it first not to wait here).
func (s *Store) TakeOver(prev *Store) {
	// One store takes over one other, once, before it publishes: two stores publishing
	// under one name would break the order the pool's marks rely on.
	s.poolMu.Lock()
	fresh := s.pool.published == 0 && len(s.pool.pending) == 0
	s.poolMu.Unlock()
	// From here prev's hits go to s.
	if s == prev || !fresh || !prev.successor.CompareAndSwap(nil, s) {
		panic("signals: TakeOver by a store that has published, or of a store taken over already")
	}
	prev.poolMu.Lock()
	prev.flushMu.Lock()
	state := prev.learnedLocked()
	state.Pending, prev.pool.pending = prev.pool.pending, nil
	prev.pool.retired, prev.pool.replaced = true, true
	// s publishes under prev's name, numbering on: one mark in the pool per process,
	// not one per reload.
	replica, published := prev.pool.replica, prev.pool.published
	prev.flushMu.Unlock()
	prev.poolMu.Unlock()

	s.poolMu.Lock()
	defer s.poolMu.Unlock()
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	s.resumeLocked(state)
	s.pool.pending = state.Pending
	s.pool.replica, s.pool.published = replica, published
	s.predecessor, s.predecessorUntil = prev, s.now().Add(predecessorFor)
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

// seenFor is how long, in the pool's time, a store remembers the batches and edits it
// applied, to count each once: far longer than a batch takes to be published again or
// an edit to reach every replica's watcher, far shorter than the same edit takes to be
// made again. What is remembered is forgotten as batches arrive (forgetSeen), on
// minute boundaries of their stamps, so every replica that applies the same batches
// remembers the same things.
const seenFor = 10 * time.Minute

// forgetSeen drops what was applied more than seenFor before the minute of at, once
// per minute of pool time. Called under flushMu.
func (s *Store) forgetSeen(at time.Time) {
	minute := at.Truncate(time.Minute)
	if !minute.After(s.forgotAt) {
		return
	}
	s.forgotAt = minute
	s.forget(minute, "")
}

// forgetEdits drops the edits applied more than seenFor before at. Called under flushMu.
func (s *Store) forgetEdits(at time.Time) { s.forget(at, "e:") }

// forget drops the keys of seen that start with prefix and were applied more than
// seenFor before at.
func (s *Store) forget(at time.Time, prefix string) {
	for k, t := range s.seen {
		if strings.HasPrefix(k, prefix) && at.Sub(t) > seenFor {
			delete(s.seen, k)
		}
	}
}
