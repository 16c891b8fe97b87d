package bleve

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quarry-router/quarry/services/search/engine"
)

// While searches run, the lane admits engine.IndexWorkers analyses at once (here 2 of 3
// cores), and every one waiting gets in as others leave.
func TestLaneAdmitsIndexWorkersAtOnce(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(3))
	engine.NoteSearch()
	l := newLane()
	var running, peak atomic.Int32
	release := make(chan struct{})
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			l.acquire()
			n := running.Add(1)
			for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
			}
			<-release
			running.Add(-1)
			l.release()
		})
	}
	deadline := time.Now().Add(10 * time.Second)
	for running.Load() < 2 {
		if time.Now().After(deadline) {
			t.Fatal("the lane never admitted two analyses")
		}
		time.Sleep(time.Millisecond)
	}
	for range 8 {
		engine.NoteSearch() // searches keep being served: the limit stays at 2
		release <- struct{}{}
	}
	wg.Wait()
	if p := peak.Load(); p != 2 {
		t.Errorf("%d analyses ran at once, want 2 (3 cores, searches running)", p)
	}
}
