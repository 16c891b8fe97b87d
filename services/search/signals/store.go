// Package signals keeps a knowledge base's runtime importance and maturity beside its
// files: hits from searches and curation updates raise importance, idleness decays it,
// and maturity follows it with hysteresis.
package signals

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"maps"
	"math"
	"math/rand/v2"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quarry-router/quarry/services/search/tree"
)

// Signal is a document's runtime state at one moment.
type Signal struct {
	// Importance after idle decay, in [0, MaxImportance].
	Importance float64
	// Maturity after hysteresis against Importance.
	Maturity tree.Maturity
	// LastAccess is the last hit, curation or seed; decay counts idle days from it.
	LastAccess time.Time
	// Updated is the document's last update, as seeded.
	Updated time.Time
	// Known is false for a path that was never seeded; the other fields are then zero.
	Known bool
}

// Record is the persisted runtime state of one document (see Snapshot and Restore).
type Record struct {
	Path string
	// Importance as of LastAccess, before decay.
	Importance float64
	Maturity   tree.Maturity
	LastAccess time.Time
}

// entry is one document's state. It is replaced whole, never changed in place, so
// Get reads it without a lock.
type entry struct {
	base    float64 // importance at last, before decay since
	last    time.Time
	mat     tree.Maturity
	updated time.Time
}

// Store holds the runtime signals of one knowledge base. All methods are safe for
// concurrent use. Hits are counted on the query path into sharded maps that a caller
// only ever try-locks, and applied to the signals by Flush (or Run), so recording a hit
// never waits for a lock.
type Store struct {
	cfg Config
	now func() time.Time
	// logDecay is ln(DecayPerDay): decay as Exp(days × logDecay) is cheaper than Pow.
	logDecay float64

	shards   []shard
	shardCap int
	dropped  atomic.Uint64
	// successor is the store that took this one's state over (TakeOver): the hits of
	// queries that began on this one and end after the reload are counted there. A
	// hit recorded just as TakeOver ran can still land here: the successor drains its
	// predecessor too until predecessorUntil (flushMu).
	successor        atomic.Pointer[Store]
	predecessor      *Store
	predecessorUntil time.Time

	// entries maps a path to an *atomic.Pointer[entry]. Get, on the query path, reads
	// it without locks; writers (Seed, Flush, Restore) hold flushMu.
	entries sync.Map

	curMu     sync.Mutex
	curations map[string]int
	edits     []Edit

	// seen holds the batch IDs and edits applied lately, with when, so that each counts
	// once (seenFor); forgotAt is the minute it was last pruned at. Guarded by flushMu.
	seen     map[string]time.Time
	forgotAt time.Time

	// flushMu serialises every writer of entries and the draining of shards.
	flushMu sync.Mutex
	// poolMu serialises FlushVia, which holds it across its calls to the pool.
	poolMu sync.Mutex
	pool   poolState
	// onFlush, when set (tests), is called after each Flush.
	onFlush func()
	// changes counts the writes that changed learned state (see Changes).
	changes atomic.Uint64
}

// Changes counts the flushes, restores and forgets that changed what Snapshot returns,
// so a caller persisting snapshots can skip unchanged ones.
func (s *Store) Changes() uint64 { return s.changes.Load() }

// shard holds hit counts since the last flush. spare is the map the previous flush
// drained, kept for reuse so the steady state allocates nothing; only Flush touches it.
type shard struct {
	mu     sync.Mutex
	counts map[string]uint32
	spare  map[string]uint32
	_      [64]byte // keep shards' locks on separate cache lines
}

// New returns an empty store. cfg should pass Validate; the zero Config means
// DefaultConfig(). now is the clock (time.Now in production).
func New(cfg Config, now func() time.Time) *Store {
	if cfg == (Config{}) {
		cfg = DefaultConfig()
	}
	if now == nil {
		now = time.Now
	}
	// A few shards per processor make it rare for two concurrent queries to pick the
	// same one; a busy shard is skipped, not waited for.
	n := 8
	for n < 4*runtime.GOMAXPROCS(0) {
		n *= 2
	}
	limit := cfg.MaxPendingPaths
	if limit <= 0 {
		limit = DefaultConfig().MaxPendingPaths
	}
	s := &Store{
		cfg:       cfg,
		now:       now,
		logDecay:  math.Log(cfg.DecayPerDay),
		shards:    make([]shard, n),
		shardCap:  max(1, (limit+n-1)/n),
		curations: map[string]int{},
		seen:      map[string]time.Time{},
	}
	var id [6]byte
	_, _ = crand.Read(id[:])
	s.pool.replica = hex.EncodeToString(id[:])
	for i := range s.shards {
		s.shards[i].counts = map[string]uint32{}
		s.shards[i].spare = map[string]uint32{}
	}
	return s
}

// Seed sets a document's starting values (from its front matter) and starts its idle
// clock now. Seeding a known path resets it; carry learned values across a reload with
// Snapshot and Restore. The maturity is settled against the importance at once: a
// front-matter stage outside its importance band (core below DemoteCore, draft at or
// above PromoteValidated, ...) moves to the stage the thresholds give.
func (s *Store) Seed(path string, importance float64, maturity tree.Maturity, updated time.Time) {
	imp := s.clamp(importance)
	e := &entry{base: imp, last: s.now(), mat: s.settle(maturity, imp), updated: updated}
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	if p, ok := s.load(path); ok {
		p.Store(e)
		return
	}
	p := new(atomic.Pointer[entry])
	p.Store(e)
	s.entries.Store(path, p)
}

// Get returns a document's signal now: importance × DecayPerDay^(days idle), and the
// maturity settled against it. An unseeded path returns a zero Signal with Known false.
func (s *Store) Get(path string) Signal {
	p, ok := s.load(path)
	if !ok {
		return Signal{}
	}
	e := p.Load()
	imp := s.decayed(e, s.now())
	return Signal{Importance: imp, Maturity: s.settle(e.mat, imp), LastAccess: e.last, Updated: e.updated, Known: true}
}

// RecordHits notes that a search returned these paths. It never blocks: it counts the
// hits in the first shard it can lock without waiting, starting from a random one, and
// drops them (counted by Dropped) only if every shard is busy at that instant or the
// pending-path limit is reached, because a lost hit costs a little ranking signal while
// a blocked query costs latency. It keeps no reference to the slice.
func (s *Store) RecordHits(paths []string) {
	if len(paths) == 0 {
		return
	}
	if next := s.successor.Load(); next != nil {
		next.RecordHits(paths)
		return
	}
	mask := uint32(len(s.shards) - 1)
	start := rand.Uint32()
	for i := range uint32(len(s.shards)) {
		sh := &s.shards[(start+i)&mask]
		if !sh.mu.TryLock() {
			continue
		}
		var lost uint64
		for _, p := range paths {
			switch {
			case len(sh.counts) < s.shardCap:
				sh.counts[p]++ // one map operation on the common path
			default:
				if c, ok := sh.counts[p]; ok {
					sh.counts[p] = c + 1
				} else {
					lost++
				}
			}
		}
		sh.mu.Unlock()
		if lost > 0 {
			s.dropped.Add(lost)
		}
		return
	}
	s.dropped.Add(uint64(len(paths)))
}

// Dropped is the number of hits RecordHits has dropped (see RecordHits).
func (s *Store) Dropped() uint64 { return s.dropped.Load() }

// RecordCuration notes a curation update of a path; it applies at the next Flush.
// Curations are never dropped.
func (s *Store) RecordCuration(path string) {
	s.curMu.Lock()
	s.curations[path]++
	s.curMu.Unlock()
}

// RecordEdit notes a curation update of a path that made its content version (a
// content hash). Replicas whose folders are one (a shared volume) each see the same
// edit: pooled, it counts once however many of them publish it, where RecordCuration
// would count it once per replica.
func (s *Store) RecordEdit(path, version string) {
	s.curMu.Lock()
	s.edits = append(s.edits, Edit{Path: path, Version: version})
	s.curMu.Unlock()
}

// Flush applies the hits and curations recorded so far: each hit adds HitGain and each
// curation CurationGain to the decayed importance (capped at MaxImportance), the idle
// clock restarts, and maturity is settled against the new importance. Paths that were
// never seeded are ignored. The result depends only on the counts per path and the
// clock, not on the order hits arrived in. A store whose replicas pool their signals
// flushes with FlushVia instead.
func (s *Store) Flush() {
	defer s.flushed()
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	now := s.now()
	s.forgetSeen(now)
	s.apply(s.drain(), now)
}

// flushed calls the test hook, after a flush.
func (s *Store) flushed() {
	if s.onFlush != nil {
		s.onFlush()
	}
}

// drain takes the hits and curations recorded since the last drain, and those left in
// the store this one took over (see successor): those recorded before TakeOver, at the
// first drain after it, and any that land there later. Called under flushMu.
func (s *Store) drain() Batch {
	b := s.drainOwn()
	if p := s.predecessor; p != nil {
		p.flushMu.Lock()
		b.add(p.drain())
		p.flushMu.Unlock()
		if s.now().After(s.predecessorUntil) {
			s.predecessor = nil
		}
	}
	return b
}

// drainOwn is drain of this store's own counts.
func (s *Store) drainOwn() Batch {
	var b Batch
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		full := sh.counts
		sh.counts = sh.spare
		sh.mu.Unlock()
		for p, c := range full {
			if b.Hits == nil {
				b.Hits = map[string]int{}
			}
			b.Hits[p] += int(c)
		}
		clear(full)
		sh.spare = full
	}
	s.curMu.Lock()
	if len(s.curations) > 0 {
		b.Curations = s.curations
		s.curations = map[string]int{}
	}
	b.Edits, s.edits = s.edits, nil
	s.curMu.Unlock()
	return b
}

// apply adds a batch's hits and curations to the importance of its paths as of at (see
// Flush). A path whose last access is later than at (a pooled batch stamped before a
// local seed) takes the batch at its last access, so that its idle clock never runs
// backwards. Called under flushMu.
func (s *Store) apply(b Batch, at time.Time) {
	if b.empty() {
		return
	}
	if b.ID != "" {
		if _, dup := s.seen["b:"+b.ID]; dup {
			return
		}
		s.seen["b:"+b.ID] = at
	}
	curations := b.Curations
	if len(b.Edits) > 0 {
		curations = maps.Clone(curations)
		if curations == nil {
			curations = map[string]int{}
		}
		for _, e := range b.Edits {
			k := "e:" + e.Path + "@" + e.Version
			if _, dup := s.seen[k]; dup {
				continue
			}
			s.seen[k] = at
			curations[e.Path]++
		}
	}
	s.changes.Add(1)
	for _, p := range sortedPaths(b.Hits, curations) {
		ptr, ok := s.load(p)
		if !ok {
			continue
		}
		e := ptr.Load()
		now := at
		if now.Before(e.last) {
			now = e.last
		}
		imp := s.decayed(e, now)
		mat := s.settle(e.mat, imp)
		imp = s.clamp(imp + float64(b.Hits[p])*s.cfg.HitGain + float64(curations[p])*s.cfg.CurationGain)
		ptr.Store(&entry{base: imp, last: now, mat: s.settle(mat, imp), updated: e.updated})
	}
}

// Run flushes every interval (Config.FlushInterval when interval <= 0) until ctx ends,
// then flushes once more so no recorded hit is left behind, and returns.
func (s *Store) Run(ctx context.Context, interval time.Duration) {
	if interval <= 0 {
		interval = s.cfg.FlushInterval
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			s.Flush()
			return
		case <-t.C:
			s.Flush()
		}
	}
}

// Snapshot returns the learned state of every document, sorted by path, for keeping
// beside the files (the SPEC keeps runtime signals out of the markdown). Pending hits
// are not included; Flush first to include them.
func (s *Store) Snapshot() []Record {
	var out []Record
	s.entries.Range(func(k, v any) bool {
		e := v.(*atomic.Pointer[entry]).Load()
		out = append(out, Record{Path: k.(string), Importance: e.base, Maturity: e.mat, LastAccess: e.last})
		return true
	})
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

// Restore replaces the state of seeded documents with learned records, as after a
// reload: seed the new tree, then restore the old store's snapshot. Records for paths
// not seeded (files that were removed) are ignored. Records read back from a file are
// not trusted blindly: a maturity that is no stage keeps the seeded one (a stage no
// threshold moves would never change again), a last access after now (another
// machine's clock, a hand edit) counts from now, or the importance would not decay
// until then, and so does a record without one, which would otherwise have decayed
// to nothing.
func (s *Store) Restore(records []Record) {
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	s.restoreLocked(records)
}

// restoreLocked is Restore under flushMu.
func (s *Store) restoreLocked(records []Record) {
	s.changes.Add(1)
	now := s.now()
	for _, r := range records {
		p, ok := s.load(r.Path)
		if !ok {
			continue
		}
		seeded := p.Load()
		imp := s.clamp(r.Importance)
		mat := r.Maturity
		if mat < tree.Draft || mat > tree.Core {
			mat = seeded.mat
		}
		last := r.LastAccess
		if last.IsZero() || last.After(now) {
			last = now
		}
		p.Store(&entry{base: imp, last: last, mat: s.settle(mat, imp), updated: seeded.updated})
	}
}

func (s *Store) load(path string) (*atomic.Pointer[entry], bool) {
	v, ok := s.entries.Load(path)
	if !ok {
		return nil, false
	}
	return v.(*atomic.Pointer[entry]), true
}

// decayed is e's importance at now: base × DecayPerDay^days idle. A clock that went
// backwards counts as no time idle.
func (s *Store) decayed(e *entry, now time.Time) float64 {
	days := now.Sub(e.last).Hours() / 24
	if days <= 0 {
		return e.base
	}
	return e.base * math.Exp(days*s.logDecay)
}

func (s *Store) clamp(v float64) float64 {
	switch {
	case math.IsNaN(v) || v < 0:
		return 0
	case v > s.cfg.MaxImportance:
		return s.cfg.MaxImportance
	}
	return v
}

// settle moves m through the hysteresis thresholds until importance holds it: draft →
// validated at >= PromoteValidated, validated → core at >= PromoteCore, core →
// validated below DemoteCore, validated → draft below DemoteValidated. Because each
// demotion threshold sits below its promotion threshold (Config.Validate), a stage is
// kept anywhere inside its band, and the loop ends after at most two moves.
func (s *Store) settle(m tree.Maturity, importance float64) tree.Maturity {
	for range 4 {
		switch {
		case m == tree.Draft && importance >= s.cfg.PromoteValidated:
			m = tree.Validated
		case m == tree.Validated && importance >= s.cfg.PromoteCore:
			m = tree.Core
		case m == tree.Core && importance < s.cfg.DemoteCore:
			m = tree.Validated
		case m == tree.Validated && importance < s.cfg.DemoteValidated:
			m = tree.Draft
		default:
			return m
		}
	}
	return m
}
