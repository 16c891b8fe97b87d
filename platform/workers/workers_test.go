package workers

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestPool(t *testing.T) {
	for _, tc := range []struct {
		name      string
		max, runs int
		together  bool // the runs block until all have started
		// maxKept bounds the kept goroutines started for the runs. One after another,
		// each run finds the one before's goroutine waiting, unless that one had not yet
		// come back to wait, or had ended idle while the test stalled (both seen on a
		// loaded CI machine): a few, never one a run.
		minKept, maxKept int64
	}{
		{"one after another reuse one goroutine", 16, 50, false, 1, 5},
		{"together, more than max: the rest get their own", 3, 8, true, 3, 3},
		{"together, fewer than max", 8, 5, true, 5, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPool(tc.max, idle)
			var ran sync.WaitGroup
			started := make(chan struct{}, tc.runs)
			release := make(chan struct{})
			count := 0
			var mu sync.Mutex
			for range tc.runs {
				ran.Add(1)
				p.Go(func() {
					defer ran.Done()
					mu.Lock()
					count++
					mu.Unlock()
					if tc.together {
						started <- struct{}{}
						<-release
					}
				})
				if !tc.together {
					ran.Wait() // the next run finds the kept goroutine waiting
				}
			}
			if tc.together {
				for range tc.runs {
					<-started // every run is running at once: none waited for another
				}
				close(release)
			}
			ran.Wait()
			if count != tc.runs {
				t.Fatalf("%d runs, want %d", count, tc.runs)
			}
			if got := p.kept.Load(); got < tc.minKept || got > tc.maxKept {
				t.Errorf("%d kept goroutines started for %d runs, want %d to %d", got, tc.runs, tc.minKept, tc.maxKept)
			}
			waitIdle(t, p, 0)
		})
	}
}

// idle is long enough for a test to see kept goroutines waiting, and short enough that
// they are gone when goleak looks.
const idle = 200 * time.Millisecond

func TestKeptGoroutinesEndWhenIdle(t *testing.T) {
	p := newPool(2, 20*time.Millisecond)
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		p.Go(func() { time.Sleep(time.Millisecond); wg.Done() })
	}
	wg.Wait()
	waitIdle(t, p, 0)
}

// waitIdle waits until want kept goroutines are alive.
func waitIdle(t *testing.T, p *Pool, want int32) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if p.alive.Load() == want {
			return
		}
	}
	t.Fatalf("%d kept goroutines after 5 s, want %d", p.alive.Load(), want)
}

// deep calls itself n times with a frame of some size, as a call down through gRPC,
// its stats handlers and a search engine does.
//
//go:noinline
func deep(n int) byte {
	var frame [256]byte
	frame[n%256] = byte(n)
	if n == 0 {
		return frame[0]
	}
	return deep(n-1) + frame[n%256]
}

// The point of the pool: a function that needs a 64 KiB stack, on a new goroutine
// and on a kept one.
//
//	go test -run '^$' -bench Stack ./workers
func BenchmarkStack(b *testing.B) {
	var sink byte
	var mu sync.Mutex
	for _, mode := range []string{"go", "pool"} {
		b.Run(mode, func(b *testing.B) {
			p := newPool(4, idle)
			done := make(chan struct{})
			f := func() {
				v := deep(200)
				mu.Lock()
				sink += v
				mu.Unlock()
				done <- struct{}{}
			}
			for b.Loop() {
				if mode == "go" {
					go f()
				} else {
					p.Go(f)
				}
				<-done
			}
		})
	}
	_ = sink
}

// Every runs its function on each tick until its context ends, and wait returns only
// once a run under way has finished.
func TestEvery(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var runs atomic.Int32
	var running atomic.Bool
	wait := Every(ctx, time.Millisecond, func() {
		running.Store(true)
		if runs.Add(1) == 3 {
			cancel()
			time.Sleep(20 * time.Millisecond) // a run still under way as ctx ends
		}
		running.Store(false)
	})
	wait()
	if running.Load() {
		t.Error("wait returned during a run")
	}
	if n := runs.Load(); n != 3 {
		t.Errorf("%d runs, want 3 (none after ctx ended)", n)
	}
}
