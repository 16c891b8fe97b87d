package cache

import (
	"context"
	"math"
	"slices"
	"sync"
	"time"
)

// Memory is the in-process Store of the embedded default: a bounded LRU with a TTL and
// an inverted token index per knowledge base and generation, so a fuzzy lookup touches
// only the entries that share a token with the query.
type Memory struct {
	cfg Config
	now func() time.Time

	mu    sync.Mutex
	parts map[partKey]*partition
	lru   node // sentinel: lru.next is the most recently used entry, lru.prev the least
	n     int
	bytes int // the entries' Entry.Size, summed
	seq   uint64
	// stamp marks the nodes counted by the current Similar call, so counts live in the
	// nodes themselves instead of a per-call map.
	stamp uint64
	cands []*node   // scratch for Similar, reused under mu
	order []posting // scratch for Similar, reused under mu
	stale []*node   // scratch for Similar, reused under mu
}

type partKey struct {
	kb  string
	gen uint64
}

// partition holds the entries of one knowledge base generation.
type partition struct {
	key      partKey
	exact    map[string]*node
	postings map[string][]*node
}

type posting struct {
	token string
	n     int
}

type node struct {
	e       *Entry
	part    *partition
	pos     []int // pos[i] is the node's index in part.postings[e.Tokens[i]]; nil when not posted (MaxFuzzyTokens)
	expires int64 // unix nanoseconds
	seq     uint64
	size    int // e.Size()

	prev, next *node

	mark  uint64
	count int
}

var _ Store = (*Memory)(nil)

// NewMemory returns an empty Memory store; now is its clock (time.Now in production).
func NewMemory(cfg Config, now func() time.Time) *Memory {
	m := &Memory{cfg: cfg, now: now, parts: make(map[partKey]*partition)}
	m.lru.next, m.lru.prev = &m.lru, &m.lru
	return m
}

// Len returns the number of entries held, expired ones not yet removed included.
func (m *Memory) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.n
}

// Get implements Store.
func (m *Memory) Get(_ context.Context, kb string, gen uint64, query string) (*Entry, error) {
	now := m.now().UnixNano()
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.parts[partKey{kb, gen}]
	if p == nil {
		return nil, ErrMiss
	}
	n := p.exact[query]
	if n == nil {
		return nil, ErrMiss
	}
	if n.expires <= now {
		m.remove(n)
		return nil, ErrMiss
	}
	m.touch(n)
	return n.e, nil
}

// Similar implements Store.
func (m *Memory) Similar(_ context.Context, kb string, gen uint64, tokens []string) (*Entry, float64, error) {
	if len(tokens) < m.cfg.FuzzyMinTokens {
		return nil, 0, ErrMiss
	}
	tokens, nq := uniq(tokens)
	if nq < m.cfg.FuzzyMinTokens || nq > MaxFuzzyTokens {
		return nil, 0, ErrMiss
	}
	now := m.now().UnixNano()

	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.parts[partKey{kb, gen}]
	if p == nil {
		return nil, 0, ErrMiss
	}
	// Prefix filtering: a candidate reaching FuzzyMin shares at least need of the nq
	// query tokens, so it contains one of any nq-need+1 of them. Candidates are admitted
	// only from the rarest tokens' postings; the common tokens, whose postings are long,
	// are then checked against each candidate's own few tokens instead of being walked.
	order := m.order[:0]
	for _, t := range tokens {
		order = append(order, posting{t, len(p.postings[t])})
	}
	for i := 1; i < len(order); i++ {
		for j := i; j > 0 && order[j].n < order[j-1].n; j-- {
			order[j], order[j-1] = order[j-1], order[j]
		}
	}
	need := int(math.Ceil(m.cfg.FuzzyMin*float64(nq) - jaccardEpsilon))
	prefix := max(nq-max(need, 1)+1, 1)

	m.stamp++
	cands := m.cands[:0]
	for _, o := range order[:prefix] {
		for _, n := range p.postings[o.token] {
			if n.mark != m.stamp {
				n.mark, n.count = m.stamp, 0
				cands = append(cands, n)
			}
			n.count++
		}
	}
	suffix := order[prefix:]

	var best *node
	var bestSim float64
	stale := m.stale[:0]
	for _, n := range cands {
		if n.expires <= now {
			stale = append(stale, n)
			continue
		}
		nb := len(n.e.Tokens)
		if nb < m.cfg.FuzzyMinTokens {
			continue
		}
		// Even if every remaining token matched, could it reach the threshold?
		if up := n.count + len(suffix); !m.cfg.Reaches(float64(up) / float64(nq+nb-up)) {
			continue
		}
		c := n.count
		for _, o := range suffix {
			if slices.Contains(n.e.Tokens, o.token) {
				c++
			}
		}
		sim := float64(c) / float64(nq+nb-c)
		if !m.cfg.Reaches(sim) {
			continue
		}
		if best == nil || sim > bestSim || (sim == bestSim && newer(n, best)) {
			best, bestSim = n, sim
		}
	}
	clear(order)
	m.order = order[:0]
	for _, n := range stale {
		m.remove(n)
	}
	// Keep the scratch capacity but drop the pointers so evicted entries can be freed.
	clear(cands)
	clear(stale)
	m.cands, m.stale = cands[:0], stale[:0]

	if best == nil {
		return nil, 0, ErrMiss
	}
	m.touch(best)
	return best.e, bestSim, nil
}

func newer(a, b *node) bool {
	if !a.e.StoredAt.Equal(b.e.StoredAt) {
		return a.e.StoredAt.After(b.e.StoredAt)
	}
	return a.seq > b.seq
}

// uniq returns tokens without duplicates and their number; queries from text.Tokens are
// already unique, so the common case neither copies nor allocates.
func uniq(tokens []string) ([]string, int) {
	dup := false
	if len(tokens) <= 32 {
	scan:
		for i := 1; i < len(tokens); i++ {
			for j := 0; j < i; j++ {
				if tokens[i] == tokens[j] {
					dup = true
					break scan
				}
			}
		}
		if !dup {
			return tokens, len(tokens)
		}
	}
	seen := make(map[string]struct{}, len(tokens))
	out := make([]string, 0, len(tokens))
	for _, t := range tokens {
		if _, ok := seen[t]; !ok {
			seen[t] = struct{}{}
			out = append(out, t)
		}
	}
	return out, len(out)
}

// sweepPerPut bounds how many expired least-recently-used entries one Put removes, so
// expired entries do not linger until eviction without making Put unbounded.
const sweepPerPut = 4

// Put implements Store.
func (m *Memory) Put(_ context.Context, e *Entry) error {
	if e.Size() > m.cfg.MaxEntryBytes {
		return ErrTooLarge
	}
	now := m.now()
	tokens, _ := uniq(e.Tokens)
	c := &Entry{
		KB:         e.KB,
		Generation: e.Generation,
		Query:      e.Query,
		Tokens:     append([]string(nil), tokens...),
		Value:      e.Value,
		StoredAt:   now,
	}
	n := &node{e: c, expires: now.Add(m.cfg.TTL).UnixNano(), size: c.Size()}
	if len(c.Tokens) <= MaxFuzzyTokens {
		// Posted under each token (pos holds where); an entry with more takes no part in
		// fuzzy matching, as in Redis.
		n.pos = make([]int, len(c.Tokens))
	}

	m.mu.Lock()
	defer m.mu.Unlock()
	key := partKey{c.KB, c.Generation}
	p := m.parts[key]
	if p == nil {
		p = &partition{key: key, exact: make(map[string]*node), postings: make(map[string][]*node)}
		m.parts[key] = p
	}
	if old := p.exact[c.Query]; old != nil {
		m.remove(old)
		// remove drops an emptied partition; put it back for the new entry.
		m.parts[key] = p
	}
	for i := 0; i < sweepPerPut && m.lru.prev != &m.lru && m.lru.prev.expires <= now.UnixNano(); i++ {
		m.removeKeep(m.lru.prev, p)
	}
	for m.n > 0 && (m.n >= m.cfg.MaxEntries || m.bytes+n.size > m.cfg.MaxBytes) {
		m.removeKeep(m.lru.prev, p)
	}

	m.seq++
	n.seq = m.seq
	n.part = p
	p.exact[c.Query] = n
	for i, t := range c.Tokens[:len(n.pos)] {
		list := p.postings[t]
		n.pos[i] = len(list)
		p.postings[t] = append(list, n)
	}
	m.pushFront(n)
	m.n++
	m.bytes += n.size
	return nil
}

// removeKeep removes n but keeps partition keep registered even if it empties, because
// the caller is about to insert into it.
func (m *Memory) removeKeep(n *node, keep *partition) {
	m.remove(n)
	if n.part == keep {
		m.parts[keep.key] = keep
	}
}

// remove unlinks n from the LRU list, the exact map and its postings. Must hold mu.
func (m *Memory) remove(n *node) {
	n.prev.next, n.next.prev = n.next, n.prev
	n.prev, n.next = nil, nil
	p := n.part
	delete(p.exact, n.e.Query)
	for i, t := range n.e.Tokens[:len(n.pos)] {
		list := p.postings[t]
		idx, last := n.pos[i], len(list)-1
		if idx != last {
			moved := list[last]
			list[idx] = moved
			for j, mt := range moved.e.Tokens {
				if mt == t {
					moved.pos[j] = idx
					break
				}
			}
		}
		list[last] = nil
		if last == 0 {
			delete(p.postings, t)
		} else {
			p.postings[t] = list[:last]
		}
	}
	if len(p.exact) == 0 {
		delete(m.parts, p.key)
	}
	m.n--
	m.bytes -= n.size
}

func (m *Memory) pushFront(n *node) {
	n.prev, n.next = &m.lru, m.lru.next
	m.lru.next.prev = n
	m.lru.next = n
}

func (m *Memory) touch(n *node) {
	if m.lru.next == n {
		return
	}
	n.prev.next, n.next.prev = n.next, n.prev
	m.pushFront(n)
}
