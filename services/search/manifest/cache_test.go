package manifest

import (
	"sync"
	"sync/atomic"
	"testing"
)

// counter is a build function that counts its calls and returns a new manifest each time.
type counter struct{ n atomic.Int64 }

func (c *counter) build() *Manifest {
	c.n.Add(1)
	return &Manifest{}
}

func TestCacheRebuildsOnlyWhenTheGenerationChanges(t *testing.T) {
	var c Cache
	var b counter
	steps := []struct {
		gen        uint64
		wantBuilds int64
	}{
		{1, 1}, // first use builds
		{1, 1}, // same generation: cached
		{1, 1},
		{2, 2}, // new generation: rebuilt
		{2, 2},
		{5, 3},
		{5, 3},
	}
	var last *Manifest
	for i, s := range steps {
		m := c.Get(s.gen, b.build)
		if got := b.n.Load(); got != s.wantBuilds {
			t.Fatalf("step %d (gen %d): %d builds, want %d", i, s.gen, got, s.wantBuilds)
		}
		if m.Generation != s.gen {
			t.Errorf("step %d: manifest stamped generation %d, want %d", i, m.Generation, s.gen)
		}
		if i > 0 && steps[i-1].gen == s.gen && m != last {
			t.Errorf("step %d: same generation returned a different manifest", i)
		}
		last = m
	}
}

func TestCacheBuildsOncePerGenerationUnderConcurrency(t *testing.T) {
	var c Cache
	var builds atomic.Int64
	started := make(chan struct{})
	release := make(chan struct{})
	build := func() *Manifest {
		if builds.Add(1) == 1 {
			close(started)
		}
		<-release
		return &Manifest{}
	}
	const callers = 64
	results := make([]*Manifest, callers)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		results[0] = c.Get(7, build)
	}()
	<-started // one build is under way; everyone else must wait for it
	for i := 1; i < callers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = c.Get(7, build)
		}()
	}
	close(release)
	wg.Wait()
	if n := builds.Load(); n != 1 {
		t.Fatalf("%d builds for one generation, want 1", n)
	}
	for i, m := range results {
		if m != results[0] {
			t.Fatalf("caller %d got a different manifest", i)
		}
	}
}

func TestCacheOlderGenerationDoesNotEvictNewer(t *testing.T) {
	var c Cache
	var b counter
	newer := c.Get(9, b.build)
	older := c.Get(8, b.build)
	if older.Generation != 8 || older == newer {
		t.Fatalf("older request got generation %d", older.Generation)
	}
	if again := c.Get(9, b.build); again != newer {
		t.Error("an older generation's build evicted the current manifest")
	}
	if n := b.n.Load(); n != 2 {
		t.Errorf("%d builds, want 2 (9 once, 8 uncached)", n)
	}
}

func TestCacheRetriesAfterAFailedBuild(t *testing.T) {
	var c Cache
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("the build's panic did not reach its caller")
			}
		}()
		c.Get(1, func() *Manifest { panic("boom") })
	}()
	var b counter
	if m := c.Get(1, b.build); m == nil || b.n.Load() != 1 {
		t.Fatalf("after a panicking build, Get returned %v with %d builds; want a fresh build", m, b.n.Load())
	}
	var nilBuilds atomic.Int64
	if m := c.Get(2, func() *Manifest { nilBuilds.Add(1); return nil }); m != nil {
		t.Fatalf("a nil build returned %v", m)
	}
	c.Get(2, b.build)
	if nilBuilds.Load() != 1 || b.n.Load() != 2 {
		t.Errorf("a nil manifest was cached (nil builds %d, builds %d)", nilBuilds.Load(), b.n.Load())
	}
}
