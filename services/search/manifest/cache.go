package manifest

import "sync"

// Cache holds the manifest of the newest generation asked for and builds it lazily, once
// per generation however many callers ask at the same time. The zero value is ready.
type Cache struct {
	mu  sync.Mutex
	cur *call
}

type call struct {
	gen  uint64
	done chan struct{}
	m    *Manifest
}

// Get returns the manifest of generation gen, calling build to make it if the cache
// holds another generation. Concurrent callers for the same generation wait for one
// build. Get stamps gen on the manifest build returns, which the cache then owns. A
// request for a generation older than the cached one is built but not cached, so a slow
// caller holding an old snapshot cannot evict the current manifest. If build panics,
// the panic reaches its caller and the next Get builds again.
func (c *Cache) Get(gen uint64, build func() *Manifest) *Manifest {
	for {
		c.mu.Lock()
		cur := c.cur
		switch {
		case cur != nil && cur.gen == gen:
			c.mu.Unlock()
			<-cur.done
			if cur.m != nil {
				return cur.m
			}
			continue // that build failed; try again (this caller may build)
		case cur != nil && gen < cur.gen:
			c.mu.Unlock()
			m := build()
			if m != nil {
				m.Generation = gen
			}
			return m
		}
		nc := &call{gen: gen, done: make(chan struct{})}
		c.cur = nc
		c.mu.Unlock()
		return c.run(nc, build)
	}
}

func (c *Cache) run(nc *call, build func() *Manifest) *Manifest {
	defer func() {
		if nc.m == nil {
			// A panic or a nil manifest: forget this build so waiters and later callers retry.
			c.mu.Lock()
			if c.cur == nc {
				c.cur = nil
			}
			c.mu.Unlock()
		}
		close(nc.done)
	}()
	m := build()
	if m != nil {
		m.Generation = nc.gen
	}
	nc.m = m
	return m
}
