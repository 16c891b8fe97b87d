package route

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestFinishedFlightStaysJoinableWhileHeldAndLingers(t *testing.T) {
	const linger = 50 * time.Millisecond
	g := group[int]{linger: linger}
	var runs atomic.Int64
	fn := func(context.Context, func(string)) (int, error) { return int(runs.Add(1)), nil }
	ctx := context.Background()

	first := g.join(ctx, "k", time.Second, fn)
	if v, err := first.wait(ctx); err != nil || v != 1 {
		t.Fatalf("first flight: %d, %v", v, err)
	}
	// Its caller still holds it (it is storing or returning the answer): a caller whose
	// cache lookup missed a moment ago joins the finished flight instead of redoing it.
	late := g.join(ctx, "k", time.Second, fn)
	if v, err := late.wait(ctx); err != nil || v != 1 || late != first {
		t.Fatalf("late caller got %d, %v from a new flight; want the finished one's 1", v, err)
	}
	g.leave("k", first)
	g.leave("k", late)
	// Every caller has left, but a caller whose lookup was sent before the answer was
	// stored may still be on its way: it joins the finished flight too.
	lingering := g.join(ctx, "k", time.Second, fn)
	if v, _ := lingering.wait(ctx); v != 1 || lingering != first {
		t.Fatalf("just after every caller left: %d, want the finished flight's 1", v)
	}
	g.leave("k", lingering)
	// Once the linger has passed, the work runs anew.
	time.Sleep(linger + 50*time.Millisecond)
	again := g.join(ctx, "k", time.Second, fn)
	defer g.leave("k", again)
	if v, _ := again.wait(ctx); v != 2 {
		t.Fatalf("after the linger: %d, want a second run", v)
	}
}

func TestFailedFlightIsNotJoined(t *testing.T) {
	var g group[int]
	var runs atomic.Int64
	boom := errors.New("boom")
	fn := func(context.Context, func(string)) (int, error) { runs.Add(1); return 0, boom }
	ctx := context.Background()
	first := g.join(ctx, "k", time.Second, fn)
	defer g.leave("k", first)
	if _, err := first.wait(ctx); !errors.Is(err, boom) {
		t.Fatalf("first flight: %v", err)
	}
	next := g.join(ctx, "k", time.Second, fn)
	defer g.leave("k", next)
	if _, err := next.wait(ctx); !errors.Is(err, boom) || runs.Load() != 2 || next == first {
		t.Fatalf("a caller after a failure joined the failed flight (runs %d)", runs.Load())
	}
}

// Callers follow the text on their own goroutines while the flight goes on publishing,
// so whenever one joins, it must still receive the whole text, in order and exactly
// once, all of it before the result.
func TestEveryFollowerReceivesTheWholeTextOnce(t *testing.T) {
	const n = 200
	var g group[string]
	var want strings.Builder
	for i := range n {
		fmt.Fprintf(&want, "%d,", i)
	}
	started := make(chan struct{})
	fn := func(_ context.Context, publish func(string)) (string, error) {
		for i := range n {
			publish(fmt.Sprintf("%d,", i))
			if i == 0 {
				close(started)
			}
			runtime.Gosched()
		}
		return "done", nil
	}
	ctx := context.Background()
	first := g.join(ctx, "k", time.Second, fn)
	defer g.leave("k", first)
	<-started
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			f := first
			if i > 0 { // the others join while the text is being published, or after
				f = g.join(ctx, "k", time.Second, fn)
				defer g.leave("k", f)
			}
			var got strings.Builder
			v, err := f.follow(ctx, func(d string) { got.WriteString(d) })
			if err != nil || v != "done" || got.String() != want.String() {
				t.Errorf("follower %d: %q, %v, text %q; want done and the whole text", i, v, err, got.String())
			}
		})
	}
	wg.Wait()
}
