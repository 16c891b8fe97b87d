package route

import (
	"context"
	"fmt"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/quarry-router/quarry/platform/workers"
)

// group coalesces concurrent identical work into one flight per key. Unlike
// x/sync/singleflight, a flight is reference-counted: its context is detached from any
// one caller and is cancelled only when every caller waiting for it has gone, which is
// how a speculative search is cancelled when a cache answers first.
type group[T any] struct {
	// pool runs the flights; nil runs each on a goroutine of its own.
	pool *workers.Pool
	// linger keeps a successful flight joinable for this long after its last caller
	// leaves, if lingers accepts its value (nil accepts every one). A caller whose
	// cache lookup was sent just before the flight stored its answer misses, and
	// reaches join only after its lookups return (or its hedge delay passes); under
	// load that is after every holder has gone, and without linger it would run the
	// same work again.
	linger  time.Duration
	lingers func(T) bool

	mu sync.Mutex
	m  map[string]*flight[T]
}

// flight is one run of coalesced work.
type flight[T any] struct {
	done   chan struct{}
	val    T
	err    error
	cancel context.CancelFunc
	refs   int // guarded by group.mu

	// Text published so far and the callers' sinks, so a caller that joins late still
	// receives the whole streamed answer.
	mu    sync.Mutex
	text  strings.Builder
	sinks []*sink
}

// join attaches the caller to the flight for key, starting fn in its own goroutine when
// none is running. fn's context keeps ctx's values but not its cancellation, and ends
// after timeout. Every join must be paired with a leave.
func (g *group[T]) join(ctx context.Context, key string, timeout time.Duration,
	fn func(ctx context.Context, publish func(string)) (T, error)) *flight[T] {
	g.mu.Lock()
	if f, ok := g.m[key]; ok {
		f.refs++
		g.mu.Unlock()
		return f
	}
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	f := &flight[T]{done: make(chan struct{}), cancel: cancel, refs: 1}
	if g.m == nil {
		g.m = make(map[string]*flight[T])
	}
	g.m[key] = f
	g.mu.Unlock()

	g.spawn(func() {
		defer cancel()
		v, err := run(fctx, f.publish, fn)
		f.val, f.err = v, err
		g.mu.Lock()
		close(f.done)
		// A successful flight stays joinable while callers still hold it, and for linger
		// after the last leaves (see leave).
		if (err != nil || f.refs == 0) && g.m[key] == f {
			delete(g.m, key)
		}
		g.mu.Unlock()
	})
	return f
}

func (g *group[T]) spawn(f func()) {
	if g.pool == nil {
		go f()
		return
	}
	g.pool.Go(f)
}

// run calls fn, turning a panic into an error: a flight's goroutine has no caller
// whose recovery would catch it.
func run[T any](ctx context.Context, publish func(string), fn func(context.Context, func(string)) (T, error)) (v T, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v\n%s", p, debug.Stack())
		}
	}()
	return fn(ctx, publish)
}

// leave detaches a caller. When the last one leaves an unfinished flight, it is
// cancelled and removed, so later callers start afresh instead of joining a cancelled
// flight; a finished one that succeeded is removed after g.linger.
func (g *group[T]) leave(key string, f *flight[T]) {
	g.mu.Lock()
	defer g.mu.Unlock()
	f.refs--
	if f.refs > 0 {
		return
	}
	select {
	case <-f.done:
		if f.err == nil && g.linger > 0 && (g.lingers == nil || g.lingers(f.val)) && g.m[key] == f {
			time.AfterFunc(g.linger, func() { g.expire(key, f) })
			return
		}
	default:
		f.cancel()
	}
	if g.m[key] == f {
		delete(g.m, key)
	}
}

// expire removes a lingering flight unless a caller has joined it again.
func (g *group[T]) expire(key string, f *flight[T]) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if f.refs == 0 && g.m[key] == f {
		delete(g.m, key)
	}
}

// inFlight returns how many callers wait on the flight for key (0 when there is none).
func (g *group[T]) inFlight(key string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	if f, ok := g.m[key]; ok {
		return f.refs
	}
	return 0
}

// wait returns the flight's result, or ctx's error if the caller gives up first.
func (f *flight[T]) wait(ctx context.Context) (T, error) {
	select {
	case <-f.done:
		return f.val, f.err
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
}

func (f *flight[T]) publish(delta string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.text.WriteString(delta)
	for _, s := range f.sinks {
		s.send(delta)
	}
}

// subscribe sends fn the text published so far, then every later delta, until the
// returned sink is closed. A nil fn subscribes nothing.
func (f *flight[T]) subscribe(fn func(string)) *sink {
	s := &sink{fn: fn, closed: fn == nil}
	if fn == nil {
		return s
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.text.Len() > 0 {
		s.send(f.text.String())
	}
	f.sinks = append(f.sinks, s)
	return s
}

// sink forwards deltas to one caller until the caller is done with the flight; close
// waits for a delivery in progress, so fn is never called after its caller returned.
type sink struct {
	mu     sync.Mutex
	fn     func(string)
	closed bool
}

func (s *sink) send(delta string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		s.fn(delta)
	}
}

func (s *sink) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
}
