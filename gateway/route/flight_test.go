package route

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

func TestFinishedFlightStaysJoinableWhileHeld(t *testing.T) {
	var g group[int]
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
	// Once every caller has left, the work runs anew.
	again := g.join(ctx, "k", time.Second, fn)
	defer g.leave("k", again)
	if v, _ := again.wait(ctx); v != 2 {
		t.Fatalf("after every caller left: %d, want a second run", v)
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
