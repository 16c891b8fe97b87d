package engine

import (
	"runtime"
	"sync/atomic"
	"time"
)

// searchQuiet is how long after the last search the write side may use every core again.
const searchQuiet = time.Second

var (
	epoch = time.Now()
	// lastSearch is when a search last started, in nanoseconds since epoch (0: never).
	lastSearch atomic.Int64
)

// NoteSearch records that a search is starting. Backends call it on every search, so the
// write side knows queries are being served (one atomic store: nothing on the query path
// waits for the write side).
func NoteSearch() {
	lastSearch.Store(int64(time.Since(epoch)) + 1)
}

// Searching reports whether a search started in the last second.
func Searching() bool {
	last := lastSearch.Load()
	return last != 0 && time.Duration(int64(time.Since(epoch))-last) < searchQuiet
}

// IndexWorkers is how many goroutines CPU-bound write work (parsing, analysis, indexing)
// may use at once: every core while no search runs, one core fewer while searches are
// being served (at least one). On a two-core machine, a sync that took both cores made
// queries wait for the scheduler: their p99 rose 2-3x while a 5,000-file sync ran.
func IndexWorkers() int {
	n := runtime.GOMAXPROCS(0)
	if Searching() {
		n--
	}
	return max(1, n)
}
