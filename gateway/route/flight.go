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
	done     chan struct{}
	val      T
	err      error
	cancel   context.CancelFunc
	deadline time.Time // when its context ends
	refs     int       // guarded by group.mu

	// The deltas published so far, so a caller that joins late still receives the whole
	// streamed answer. published is closed and replaced by each publish, to wake the
	// callers following the text without the flight ever calling them (see publish).
	mu        sync.Mutex
	deltas    []string
	published chan struct{}
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
	f := &flight[T]{done: make(chan struct{}), cancel: cancel, refs: 1, published: make(chan struct{})}
	f.deadline, _ = fctx.Deadline()
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
		// after the last leaves (see leave). One whose value must not linger is removed
		// now: a streaming caller holds the flight until its client has taken the whole
		// text, which a client that stops reading can make last indefinitely, and a
		// caller that comes after must not be served that value (an answer degraded by a
		// failure, which the next caller asks the LLM for again).
		if (err != nil || f.refs == 0 || (g.lingers != nil && !g.lingers(v))) && g.m[key] == f {
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

// publish appends a delta to the flight's text and wakes the callers following it. It
// must never call them: a caller's send blocks while its client is not reading (HTTP/2
// flow control), and the flight's goroutine, blocked there, would no longer see its
// timeout, holding up every other caller of the question.
func (f *flight[T]) publish(delta string) {
	if delta == "" {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.deltas = append(f.deltas, delta)
	close(f.published)
	f.published = make(chan struct{})
}

// follow is wait for a caller that streams the text: it first calls fn with the text
// published so far, then with each later delta, in order, and returns the result only
// once all the text has been delivered. fn runs on the caller's goroutine, so a client
// that is slow to take the text holds up only its own caller, and it is never called
// after follow returns. A nil fn only waits.
func (f *flight[T]) follow(ctx context.Context, fn func(string)) (T, error) {
	if fn == nil {
		return f.wait(ctx)
	}
	var zero T
	for sent := 0; ; {
		// Checked before the text is read: once done is closed nothing more is published,
		// so what is read then is the whole text.
		finished := isClosed(f.done)
		f.mu.Lock()
		pending, published := f.deltas[sent:], f.published
		f.mu.Unlock()
		if sent == 0 && len(pending) > 1 {
			// A caller that joins late catches up in one delta.
			sent += len(pending) - 1
			pending = []string{strings.Join(pending, "")}
		}
		for _, d := range pending {
			if ctx.Err() != nil {
				return zero, ctx.Err()
			}
			fn(d)
			sent++
		}
		if finished {
			return f.val, f.err
		}
		select {
		case <-published:
		case <-f.done:
		case <-ctx.Done():
			return zero, ctx.Err()
		}
	}
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}
