package cache

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quarry-router/quarry/platform/redisx"
)

// errCircuitOpen is what calls get while the breaker keeps them off a failing backend.
var errCircuitOpen = errors.New("circuit open: Redis did not answer a health check")

// sporadicLogEvery bounds how often failures that do not open the breaker are logged.
const sporadicLogEvery = 10 * time.Second

// checkTimeout is the deadline of the health check that confirms an outage, and of the
// probe call that ends one: far longer than a cache call's, so that a gateway whose own
// CPU is saturated (its calls missing their few-millisecond deadlines while Redis is
// fine) does not mistake itself for a Redis outage and stop caching, which would add
// the cost of a search to every query just when it can least afford it. The client
// waits at least as long for a reply (redisx.MinReadTimeout).
const checkTimeout = redisx.MinReadTimeout

// breaker keeps calls off a backend that is down, so a dead or hung Redis costs a query
// nothing instead of a timeout per lookup. After `failures` consecutive failed calls it
// checks the backend with a health check (check) under a generous deadline; if that
// fails too, it opens for `cooldown`, during which calls fail at once; then one call
// probes, with the generous deadline, and its success closes the breaker. Opening and
// closing are logged once each, which is the "once per outage" log; other failures are
// logged at most every 10 s.
type breaker struct {
	failures int32
	cooldown time.Duration
	check    func(context.Context) error
	log      *slog.Logger

	open        atomic.Bool // read without the lock on every call
	consecutive atomic.Int32

	mu        sync.Mutex
	checking  bool
	openUntil time.Time
	probing   bool
	openedAt  time.Time
	rejected  int64
	lastLog   time.Time
}

func newBreaker(failures int, cooldown time.Duration, check func(context.Context) error, log *slog.Logger) *breaker {
	return &breaker{failures: int32(max(failures, 1)), cooldown: cooldown, check: check, log: log}
}

// allow reports whether a call may go to the backend; probe is true for the one call
// that tests a backend the breaker had given up on, which gets checkTimeout. Every
// allowed call must be followed by exactly one of succeeded, failed or abandoned with
// the same probe.
func (b *breaker) allow() (probe bool, err error) {
	if !b.open.Load() {
		return false, nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.open.Load() {
		return false, nil
	}
	if b.probing || time.Now().Before(b.openUntil) {
		b.rejected++
		return false, errCircuitOpen
	}
	b.probing = true
	return true, nil
}

// succeeded records a call the backend answered (a miss included).
func (b *breaker) succeeded(probe bool) {
	if b.consecutive.Load() != 0 {
		b.consecutive.Store(0)
	}
	if !probe && !b.open.Load() {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if probe {
		b.probing = false
	}
	if b.open.Load() {
		b.open.Store(false)
		b.log.Info("redis cache reachable again; caching resumed",
			"outage", time.Since(b.openedAt).Round(time.Millisecond), "calls_skipped", b.rejected)
		b.rejected = 0
	}
}

// failed records a call the backend did not answer in time or at all.
func (b *breaker) failed(probe bool, err error) {
	n := b.consecutive.Add(1)
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case probe:
		b.probing = false
		b.openUntil = time.Now().Add(b.cooldown)
	case b.open.Load() || b.checking:
		// The outage is known, or being confirmed.
	case n >= b.failures:
		b.checking = true
		go b.confirm(err, n)
	default:
		b.sporadicLocked(err)
	}
}

// confirm runs the health check after a run of failed calls and opens the breaker only
// if Redis fails it too.
func (b *breaker) confirm(cause error, n int32) {
	ctx, cancel := context.WithTimeout(context.Background(), checkTimeout)
	err := b.check(ctx)
	cancel()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.checking = false
	if err == nil {
		// Redis is fine: the calls were late on our side (an overloaded gateway).
		b.consecutive.Store(0)
		b.sporadicLocked(cause)
		return
	}
	now := time.Now()
	b.open.Store(true)
	b.openedAt, b.openUntil = now, now.Add(b.cooldown)
	b.log.Warn("redis cache unavailable; answering uncached until it is back",
		"err", cause, "health_check", err, "consecutive_failures", n, "retry_every", b.cooldown)
}

// abandoned records a call its caller gave up on: it says nothing about the backend.
func (b *breaker) abandoned(probe bool) {
	if !probe {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.probing = false
}

// failedSporadically logs a failure that says nothing about the backend's health (a
// reply error), at most every 10 s.
func (b *breaker) failedSporadically(err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.sporadicLocked(err)
}

func (b *breaker) sporadicLocked(err error) {
	if now := time.Now(); now.Sub(b.lastLog) >= sporadicLogEvery {
		b.lastLog = now
		b.log.Warn("redis cache call failed; answered uncached", "err", err)
	}
}
