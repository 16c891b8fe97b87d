package signals

import (
	"sync/atomic"
	"time"

	"github.com/quarry-router/quarry/services/search/tree"
)

// SeedNew seeds a path (see Seed) only if the store does not know it yet, and reports
// whether it did: a file changed by a write keeps what the runtime learned about it.
func (s *Store) SeedNew(path string, importance float64, maturity tree.Maturity, updated time.Time) bool {
	imp := s.clamp(importance)
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	if _, ok := s.load(path); ok {
		return false
	}
	p := new(atomic.Pointer[entry])
	p.Store(&entry{base: imp, last: s.now(), mat: s.settle(maturity, imp), updated: updated})
	s.entries.Store(path, p)
	return true
}

// Forget drops the state of paths (files that were removed), so a file created later at
// one of them starts from its front matter. Pending hits for them are dropped at the
// next Flush, which ignores unknown paths.
func (s *Store) Forget(paths []string) {
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	if len(paths) > 0 {
		s.changes.Add(1)
	}
	for _, p := range paths {
		s.entries.Delete(p)
	}
}
