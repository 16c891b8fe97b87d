// Package workers runs short-lived functions on goroutines that are kept between runs.
//
// A new goroutine starts on a small stack and grows it by copying as its function
// calls deeper: a query's search call through gRPC, otelgrpc and the SDK's sampler, or
// an entity search down through Bleve, each copies its stack three or four times, which
// profiles of the serving path put at 2–3 % of its CPU. A kept goroutine keeps the
// stack it grew (the garbage collector halves an idle one's now and then).
package workers

import (
	"context"
	"runtime"
	"sync/atomic"
	"time"
)

// Pool runs functions on up to max kept goroutines; when all of them are busy a
// function gets a goroutine of its own, so Go never waits. A kept goroutine that has
// had nothing to run for the idle time ends, so a pool at rest holds none.
type Pool struct {
	work  chan func()
	max   int32
	idle  time.Duration
	alive atomic.Int32
	// kept counts the kept goroutines started, so tests can tell reuse from
	// starting afresh without depending on when an idle one ends.
	kept atomic.Int64
}

// New returns a pool of four kept goroutines per core, each ending after a quarter of
// a second without work: enough for a busy service's calls, of which a few per core run
// at once while others wait on the network, and none left at rest.
func New() *Pool { return newPool(4*runtime.GOMAXPROCS(0), 250*time.Millisecond) }

func newPool(max int, idle time.Duration) *Pool {
	return &Pool{work: make(chan func()), max: int32(max), idle: idle}
}

// Go runs f on a kept goroutine, starting one if fewer than max are running, or else on
// a goroutine of its own.
func (p *Pool) Go(f func()) {
	select {
	case p.work <- f: // a kept goroutine was waiting
		return
	default:
	}
	if p.alive.Add(1) <= p.max {
		p.kept.Add(1)
		go p.keep(f)
		return
	}
	p.alive.Add(-1)
	go f()
}

// keep runs f, then whatever Go hands it, until it has waited idle for work.
func (p *Pool) keep(f func()) {
	defer p.alive.Add(-1)
	t := time.NewTimer(p.idle)
	defer t.Stop()
	for {
		f()
		f = nil // what f holds is not kept alive while waiting
		t.Reset(p.idle)
		select {
		case f = <-p.work:
		case <-t.C:
			return
		}
	}
}

// Every runs f every interval on a goroutine of its own until ctx is done; the first
// run is an interval after the call. wait returns once that goroutine has stopped,
// after any run of f under way: what f uses may be closed then.
func Every(ctx context.Context, interval time.Duration, f func()) (wait func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if ctx.Err() != nil {
				return // a tick and the end both ready: select picks either
			}
			f()
		}
	}()
	return func() { <-done }
}
