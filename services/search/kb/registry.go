// Package kb keeps the knowledge bases a search service serves: each one's tree, search
// index, term statistics, runtime signals and generation, swapped atomically on reload.
package kb

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/quarry-router/quarry/platform/kbid"
	"github.com/quarry-router/quarry/services/search/engine"
	"github.com/quarry-router/quarry/services/search/engine/bleve"
	"github.com/quarry-router/quarry/services/search/engine/meili"
	"github.com/quarry-router/quarry/services/search/manifest"
	"github.com/quarry-router/quarry/services/search/rank"
	"github.com/quarry-router/quarry/services/search/signals"
	"github.com/quarry-router/quarry/services/search/tree"
)

// Errors returned by the registry.
var (
	ErrUnknownKB = errors.New("unknown knowledge base")
	ErrInvalidID = errors.New("invalid knowledge base id")
)

// retireAfter is how long a replaced snapshot's index stays open for in-flight queries.
const retireAfter = time.Minute

// IDRule says in words what ValidID accepts, for messages.
const IDRule = kbid.Rule

// ValidID reports whether id is a well-formed knowledge base id (kbid.Valid).
func ValidID(id string) bool { return kbid.Valid(id) }

// Search engines a knowledge base can be indexed with (Config.Engine).
const (
	EngineBleve       = "bleve"
	EngineMeilisearch = "meilisearch"
)

// Config configures how knowledge bases are loaded.
type Config struct {
	Tree tree.Config
	// Engine is the search backend: EngineBleve (embedded, the default) or
	// EngineMeilisearch.
	Engine   string
	Bleve    bleve.Config
	Meili    meili.Config
	Signals  signals.Config
	Manifest manifest.Config
	// DataDir holds persistent search indexes, one folder per knowledge base; "" keeps
	// them in memory.
	DataDir string
	// Write configures the write side (KnowledgeService).
	Write WriteConfig
	// VersionSalt enters every content version (KB.Version) beside the tree: what else
	// decides answers (the service's settings and build), so a replica configured or
	// built differently does not share answers with this one. Not a flag.
	VersionSalt string
}

// RegisterFlags registers the loading flags with their defaults.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	c.Tree.RegisterFlags(fs)
	fs.StringVar(&c.Engine, "engine", EngineBleve, "search engine: bleve (embedded) or meilisearch (-meili-*)")
	c.Bleve.RegisterFlags(fs)
	c.Meili.RegisterFlags(fs)
	c.Signals.RegisterFlags(fs)
	c.Manifest.RegisterFlags(fs)
	c.Write.RegisterFlags(fs)
	fs.StringVar(&c.DataDir, "data-dir", "", "folder for persistent search indexes (empty: in memory, rebuilt at start)")
}

// Validate rejects unusable settings.
func (c *Config) Validate() error {
	errs := []error{c.Tree.Validate(), c.Bleve.Validate(), c.Signals.Validate(), c.Manifest.Validate(), c.Write.Validate()}
	switch c.Engine {
	case EngineBleve, "":
	case EngineMeilisearch:
		errs = append(errs, c.Meili.Validate())
	default:
		errs = append(errs, fmt.Errorf("-engine must be %s or %s, got %q", EngineBleve, EngineMeilisearch, c.Engine))
	}
	return errors.Join(errs...)
}

// KB is one immutable snapshot of a knowledge base; a reload builds a new one.
type KB struct {
	ID         string
	Generation uint64
	// Version names the tree's content (contentVersion): replicas holding the same files
	// agree on it, where each numbers its generations from its own clock.
	Version   uint64
	Tree      *tree.Tree
	Engine    engine.Backend
	Corpus    *rank.Corpus
	Signals   *signals.Store
	manifests *manifest.Cache
	cfg       manifest.Config
	files     int
	// dir is where Engine persists ("" in memory); snapshots of the same tree share it.
	dir string
	// ref counts the snapshots sharing Engine: a write's snapshot shares its
	// predecessor's, changed in place.
	ref *openIndex
}

// Manifest returns the manifest of this generation, building it on first use.
func (k *KB) Manifest() *manifest.Manifest {
	return k.manifests.Get(k.Generation, func() *manifest.Manifest {
		return manifest.Build(k.Tree, func(p string) float64 { return k.Signals.Get(p).Importance }, k.cfg)
	})
}

// Files is the number of knowledge files (not summaries or stubs), the N of the
// out-of-domain rule on KB size.
func (k *KB) Files() int { return k.files }

// State describes a knowledge base for watchers.
type State struct {
	ID         string
	Generation uint64
	Version    uint64
	Documents  int
	Domains    []string
}

// Registry holds the knowledge bases.
type Registry struct {
	cfg Config
	log *slog.Logger

	// loadMu serialises Load, Close and the release of persisted indexes, so no two of
	// them work on one index directory at once.
	loadMu sync.Mutex
	// open counts the snapshots using each persisted index directory. A directory can be
	// opened only once at a time (Bleve locks it, and a second open waits forever), so a
	// reload of an unchanged tree shares the open index instead of reopening it.
	open map[string]*openIndex
	// retiring holds replaced snapshots until their index is released.
	retiring map[*KB]*time.Timer
	// repairs holds the knowledge bases whose index may not match their folder: a write
	// failed, undoing it in the index failed too (the engine was unreachable), and so did
	// the rebuild after it. Each one's timer retries the rebuild; the next write to it
	// tries first. Guarded by loadMu.
	repairs map[string]*time.Timer

	mu   sync.RWMutex
	kbs  map[string]*KB
	subs map[chan []State]struct{}

	// pools, when set (PoolSignalsVia), gives each knowledge base the pool its
	// replicas share their signals through.
	pools func(kb string) signals.Pool

	// watcher, when WatchFolders runs, watches the folder of every knowledge base
	// loaded. Guarded by loadMu.
	watcher *folderWatcher
}

type openIndex struct {
	engine engine.Backend
	refs   int
	// dir is where the engine persists ("" in memory or on a server).
	dir string
	// dirty marks a persisted index changed in place by a write: it no longer holds the
	// tree its directory is named after, so no Load may reuse it.
	dirty bool
	// broken marks one a write failed on: it may hold part of that write (when the undo
	// failed too), or BM25 statistics that no longer count its documents (when the undo
	// worked: see apply). It is never kept for the next start (keepLocked).
	broken bool
}

// NewRegistry returns an empty registry.
func NewRegistry(cfg Config, log *slog.Logger) *Registry {
	return &Registry{cfg: cfg, log: log, kbs: map[string]*KB{}, subs: map[chan []State]struct{}{},
		open: map[string]*openIndex{}, retiring: map[*KB]*time.Timer{}, repairs: map[string]*time.Timer{}}
}

// PoolSignalsVia has the knowledge bases' signals pooled with the other replicas of
// the search service through pools (signals.Pool): each replica then counts every
// replica's hits and curations. Call it before the first Load.
func (r *Registry) PoolSignalsVia(pools func(kb string) signals.Pool) { r.pools = pools }

// Get returns the current snapshot of a knowledge base.
func (r *Registry) Get(id string) (*KB, error) {
	if !ValidID(id) {
		return nil, fmt.Errorf("%w: %q", ErrInvalidID, id)
	}
	r.mu.RLock()
	k, ok := r.kbs[id]
	r.mu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknownKB, id)
	}
	return k, nil
}

// Load (re)loads a knowledge base from dir and bumps its generation. Queries keep using
// the previous snapshot until the new one is complete.
func (r *Registry) Load(ctx context.Context, id, dir string) (*KB, error) {
	if !ValidID(id) {
		return nil, fmt.Errorf("%w: %q", ErrInvalidID, id)
	}
	r.loadMu.Lock()
	defer r.loadMu.Unlock()
	return r.loadLocked(ctx, id, dir)
}

// LoadNew loads a knowledge base from dir unless one is served under id already, which
// it then returns with loaded false. The check is made under the lock loads and writes
// hold: checked apart from the load (Get, then Load), a write that created the
// knowledge base meanwhile (a first sync) was followed by a second load of it, a new
// generation for nothing.
func (r *Registry) LoadNew(ctx context.Context, id, dir string) (k *KB, loaded bool, err error) {
	if !ValidID(id) {
		return nil, false, fmt.Errorf("%w: %q", ErrInvalidID, id)
	}
	r.loadMu.Lock()
	defer r.loadMu.Unlock()
	r.mu.RLock()
	k = r.kbs[id]
	r.mu.RUnlock()
	if k != nil {
		return k, false, nil
	}
	k, err = r.loadLocked(ctx, id, dir)
	return k, err == nil, err
}

// loadLocked is Load; the caller holds loadMu.
func (r *Registry) loadLocked(ctx context.Context, id, dir string) (*KB, error) {
	start := time.Now()
	t, err := tree.Load(ctx, dir, r.cfg.Tree, r.log.With("kb", id))
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", id, err)
	}
	docs := make([]engine.Doc, 0, len(t.Docs))
	for _, d := range t.Docs {
		docs = append(docs, engine.Doc{Path: d.Path, Title: d.Title, Content: d.Content, Folder: d.Folder(), Archived: d.Archived, Summary: d.Summary})
	}
	ecfg := r.cfg.Bleve
	var fp string
	if r.cfg.DataDir != "" {
		fp = fingerprint(t)
	}
	if fp != "" && r.cfg.Engine != EngineMeilisearch {
		// One directory per tree content: a changed tree is indexed beside the index the
		// previous snapshot is still serving from, never over it.
		ecfg.Fingerprint = fp
		ecfg.Dir = filepath.Join(r.cfg.DataDir, id, fp)
	}
	// The term statistics do not depend on the index: build them on the side while the
	// engine indexes (the two are most of a cold load).
	corpusc := make(chan *rank.Corpus, 1)
	go func() { corpusc <- r.loadCorpus(ctx, id, fp, t.Docs) }()
	corpus := func() *rank.Corpus { c := <-corpusc; corpusc <- c; return c }
	defer corpus() // never leave the goroutine behind, whatever path returns
	if o := r.open[ecfg.Dir]; ecfg.Dir != "" && o != nil && o.dirty {
		// The index there was changed in place by writes and is still open for the
		// snapshots using it: build beside it.
		ecfg.Dir += fmt.Sprintf(".%d", time.Now().UnixNano())
	}
	var ref *openIndex
	if o := r.open[ecfg.Dir]; ecfg.Dir != "" && o != nil {
		o.refs++
		ref = o
	} else {
		b, err := r.build(ctx, id, docs, ecfg)
		if err != nil {
			return nil, fmt.Errorf("index %s: %w", id, err)
		}
		ref = &openIndex{engine: b, refs: 1, dir: ecfg.Dir}
		if ecfg.Dir != "" {
			r.open[ecfg.Dir] = ref
		}
	}
	idx := ref.engine
	sig := signals.New(r.cfg.Signals, time.Now)
	for _, d := range t.Docs {
		sig.Seed(d.Path, d.Importance, d.Maturity, d.Updated)
	}
	k := &KB{
		ID:        id,
		Version:   contentVersion(r.cfg.VersionSalt, t),
		Tree:      t,
		Engine:    idx,
		Corpus:    corpus(),
		Signals:   sig,
		manifests: &manifest.Cache{},
		cfg:       r.cfg.Manifest,
		dir:       ecfg.Dir,
		ref:       ref,
	}
	for _, d := range t.Docs {
		if !d.Summary && !d.Archived {
			k.files++
		}
	}

	if r.pools != nil {
		// A flush under way may wait on the pool for seconds: wait for it here, not
		// under r.mu, which every query takes (loadMu keeps the KB from changing).
		r.mu.RLock()
		old := r.kbs[id]
		r.mu.RUnlock()
		if old != nil {
			old.Signals.Retire()
		}
	}
	r.mu.Lock()
	prev := r.kbs[id]
	if prev != nil {
		// Learned importance and maturity outlive a reload; only new files start fresh.
		// Pooled, prev's pending hits go to the pool with the new store's next flush.
		if r.pools == nil {
			prev.Signals.Flush()
		}
		sig.TakeOver(prev.Signals)
	} else {
		r.restoreSignals(id, sig)
	}
	k.Generation = nextGeneration(prev)
	r.kbs[id] = k
	r.notifyLocked([]State{k.state()})
	r.mu.Unlock()
	if t := r.repairs[id]; t != nil {
		// Indexed from the folder: whatever a failed write left in the index is gone.
		t.Stop()
		delete(r.repairs, id)
		r.log.Info("index repaired after a failed write", "kb", id)
	}
	if r.watcher != nil && (prev == nil || prev.Tree.Root != t.Root) {
		r.watcher.add(id, t.Root, r)
	}

	if prev != nil {
		r.retireLocked(prev)
	}
	if ecfg.Dir != "" {
		r.removeStaleLocked(id)
	}
	if fp != "" {
		r.removeStaleCorpora(id, fp)
	}
	r.log.Info("knowledge base loaded", "kb", id, "generation", k.Generation, "documents", t.Len(),
		"skipped", len(t.Skipped), "took", time.Since(start).Round(time.Millisecond))
	return k, nil
}

// retireLocked releases a replaced snapshot's index after retireAfter: queries that
// started on it may still be searching it, and every query has a deadline far shorter
// than that. The caller holds loadMu.
func (r *Registry) retireLocked(prev *KB) {
	r.retiring[prev] = time.AfterFunc(retireAfter, func() {
		r.loadMu.Lock()
		defer r.loadMu.Unlock()
		if _, ok := r.retiring[prev]; ok {
			delete(r.retiring, prev)
			r.releaseLocked(prev)
		}
	})
}

// repairLocked schedules a rebuild of a knowledge base's index from its folder, retried
// with backoff (1 s, doubling, at most a minute) until it succeeds, a load replaces the
// snapshot, or the registry closes. The caller holds loadMu.
func (r *Registry) repairLocked(id, root string, attempt int) {
	if t := r.repairs[id]; t != nil {
		t.Stop()
	}
	var t *time.Timer
	t = time.AfterFunc(min(time.Second<<min(attempt, 6), time.Minute), func() {
		r.loadMu.Lock()
		defer r.loadMu.Unlock()
		if r.repairs[id] != t {
			return // done by a load meanwhile, rescheduled, or the registry closed
		}
		ctx, cancel := context.WithTimeout(context.Background(), r.cfg.Write.Timeout)
		defer cancel()
		if _, err := r.loadLocked(ctx, id, root); err != nil {
			r.log.Warn("repair the index after a failed write", "kb", id, "attempt", attempt+1, "err", err)
			r.repairLocked(id, root, attempt+1)
		}
	})
	r.repairs[id] = t
}

// Close releases every index, including those of replaced snapshots.
func (r *Registry) Close() {
	r.loadMu.Lock()
	defer r.loadMu.Unlock()
	for id, t := range r.repairs {
		t.Stop()
		delete(r.repairs, id)
	}
	// Replaced snapshots first: a persisted index they share with a current snapshot is
	// then closed as the current one's, and kept on disk.
	for k, t := range r.retiring {
		t.Stop()
		delete(r.retiring, k)
		r.releaseLocked(k)
	}
	r.mu.RLock()
	kbs := make([]*KB, 0, len(r.kbs))
	for _, k := range r.kbs {
		kbs = append(kbs, k)
	}
	r.mu.RUnlock()
	for _, k := range kbs {
		r.releaseLocked(k)
	}
	r.mu.Lock()
	clear(r.kbs)
	r.mu.Unlock()
}

// releaseLocked drops a snapshot's hold on its index, closing the index when no snapshot
// uses it any more, and deleting its directory unless it holds the current snapshot's
// tree, which the next start reuses. The caller holds loadMu.
func (r *Registry) releaseLocked(k *KB) {
	o := k.ref
	if o == nil || o.refs <= 0 {
		return
	}
	if o.refs--; o.refs > 0 {
		return
	}
	r.mu.RLock()
	cur := r.kbs[k.ID]
	r.mu.RUnlock()
	current := cur != nil && cur.ref == o
	fp := ""
	if current && o.dirty && !o.broken {
		fp = r.sealLocked(cur)
	}
	if err := o.engine.Close(); err != nil {
		r.log.Warn("close index", "kb", k.ID, "err", err)
	}
	if o.dir == "" {
		return
	}
	if r.open[o.dir] == o {
		delete(r.open, o.dir)
	}
	switch {
	case fp != "":
		r.keepLocked(cur, o.dir, fp)
	case !current || o.dirty:
		if err := bleve.RemoveIndexDir(o.dir); err != nil {
			r.log.Warn("remove stale index", "kb", k.ID, "dir", o.dir, "err", err)
		}
	}
}

// sealLocked records in the current snapshot's persisted index, which writes changed in
// place, the fingerprint of the tree it now holds, and returns it ("" if it could not).
// Without it the next start would index every document again: a service whose folder
// changes (writes, git-sync through the watcher) would restart cold every time. The
// caller holds loadMu, and the index is closed next (keepLocked).
func (r *Registry) sealLocked(cur *KB) string {
	ix, ok := cur.ref.engine.(*bleve.Index)
	if !ok {
		return ""
	}
	fp := fingerprint(cur.Tree)
	if err := ix.Keep(fp); err != nil {
		r.log.Warn("keep the written index for the next start", "kb", cur.ID, "err", err)
		return ""
	}
	return fp
}

// keepLocked moves a sealed index (sealLocked), now closed, from dir to where the next
// start on its tree looks for it, and keeps the snapshot's term statistics beside it, as
// a load keeps them: the written knowledge base restarts as warm as one never written.
// What it cannot move is removed, and the next start rebuilds it. The caller holds
// loadMu.
func (r *Registry) keepLocked(cur *KB, dir, fp string) {
	base := filepath.Join(r.cfg.DataDir, cur.ID)
	target := filepath.Join(base, fp)
	if dir != target {
		// A folder there is an index of the same tree a crash kept from being removed,
		// or the remains of one: this one replaces it.
		err := bleve.RemoveIndexDir(target)
		if err == nil {
			err = os.Rename(dir, target)
		}
		if err != nil {
			r.log.Warn("keep the written index for the next start", "kb", cur.ID, "err", err)
			if err := bleve.RemoveIndexDir(dir); err != nil {
				r.log.Warn("remove stale index", "kb", cur.ID, "dir", dir, "err", err)
			}
			return
		}
	}
	if err := replaceFile(base, corpusPrefix+fp, func(w io.Writer) error { return cur.Corpus.WriteTo(w, fp) }); err != nil {
		r.log.Warn("keep term statistics", "kb", cur.ID, "err", err)
	}
	r.removeStaleCorpora(cur.ID, fp)
}

// build creates the configured engine for a knowledge base.
func (r *Registry) build(ctx context.Context, id string, docs []engine.Doc, bcfg bleve.Config) (engine.Backend, error) {
	if r.cfg.Engine == EngineMeilisearch {
		return meili.Open(ctx, r.cfg.Meili, id, docs)
	}
	return bleve.Build(ctx, docs, bcfg)
}

// nextGeneration returns the generation after prev's. Generations must grow across
// restarts too, or a shared cache could serve answers computed from an older tree: they
// start from the clock, never below the last one.
func nextGeneration(prev *KB) uint64 {
	g := uint64(time.Now().UnixMilli())
	if prev != nil && prev.Generation >= g {
		g = prev.Generation + 1
	}
	return g
}

// removeStaleLocked deletes the persisted indexes of a knowledge base that no snapshot
// uses, left by trees it served before a restart. Only folders holding a Bleve index (or
// the remains of one, bleve.IsIndexDir) are touched. The caller holds loadMu.
func (r *Registry) removeStaleLocked(id string) {
	root := filepath.Join(r.cfg.DataDir, id)
	entries, err := os.ReadDir(root)
	if err != nil {
		return
	}
	for _, e := range entries {
		dir := filepath.Join(root, e.Name())
		if !e.IsDir() || r.open[dir] != nil {
			continue
		}
		if !bleve.IsIndexDir(dir) {
			continue
		}
		if err := bleve.RemoveIndexDir(dir); err != nil {
			r.log.Warn("remove stale index", "kb", id, "dir", dir, "err", err)
		}
	}
}

// States returns the state of every knowledge base, sorted by id.
func (r *Registry) States() []State {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.statesLocked()
}

func (r *Registry) statesLocked() []State {
	out := make([]State, 0, len(r.kbs))
	for _, k := range r.kbs {
		out = append(out, k.state())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Watch returns a channel that first receives every knowledge base's state and then
// each change, and a function to stop watching. A watcher that falls behind gets the
// latest full state instead of a backlog.
func (r *Registry) Watch() (<-chan []State, func()) {
	ch := make(chan []State, 1)
	r.mu.Lock()
	ch <- r.statesLocked()
	r.subs[ch] = struct{}{}
	r.mu.Unlock()
	return ch, func() {
		r.mu.Lock()
		delete(r.subs, ch)
		r.mu.Unlock()
	}
}

func (r *Registry) notifyLocked(changed []State) {
	for ch := range r.subs {
		select {
		case ch <- changed:
		default:
			// The watcher has not read the last update: replace it with the full state,
			// which includes this change.
			select {
			case <-ch:
			default:
			}
			ch <- r.statesLocked()
		}
	}
}

func (k *KB) state() State {
	return State{ID: k.ID, Generation: k.Generation, Version: k.Version, Documents: k.Tree.Len(), Domains: k.Tree.Domains()}
}

// contentVersion names a tree's content: a hash of salt (Config.VersionSalt) and every
// document's path and bytes (its title and body for one built in memory), in path
// order (the tree keeps Docs so), so every replica holding the same files, configured
// and built alike, computes the same number whenever and in whatever order it read
// them. Every write computes it, so it writes the hash's input directly. The top bit is
// set: a version is never 0 and never equal to a generation, which counts milliseconds.
func contentVersion(salt string, t *tree.Tree) uint64 {
	h := sha256.New()
	buf := make([]byte, 0, 32<<10)
	field := func(s string) {
		if len(buf)+len(s) >= cap(buf) {
			h.Write(buf)
			buf = buf[:0]
		}
		if len(s) >= cap(buf) {
			h.Write([]byte(s))
		} else {
			buf = append(buf, s...)
		}
		buf = append(buf, 0)
	}
	field(strconv.Itoa(len(salt)))
	field(salt)
	for _, d := range t.Docs {
		field(d.Path)
		if d.Hash != "" {
			field(d.Hash)
			continue
		}
		field(d.Title)
		field(strconv.Itoa(len(d.Content)))
		field(d.Content)
	}
	h.Write(buf)
	return binary.BigEndian.Uint64(h.Sum(nil)) | 1<<63
}

// fingerprintLen is the length of a fingerprint: a SHA-256 in hex.
const fingerprintLen = 64

// fingerprint identifies a tree's content, so a persisted index is reused only for the
// tree it was built from.
func fingerprint(t *tree.Tree) string {
	h := sha256.New()
	for _, d := range t.Docs {
		fmt.Fprintf(h, "%s\x00%s\x00%d\x00", d.Path, d.Title, len(d.Content))
		h.Write([]byte(d.Content))
	}
	return hex.EncodeToString(h.Sum(nil))
}
