// Package limit bounds how much each caller may ask of a service at once and over
// time — calls in flight and a token-bucket request rate — so one team's burst cannot
// starve the others.
package limit

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"sync"
	"time"
)

// Limits bound one caller. In a per-key override (the keys file's "limits") a zero
// field keeps the service's default and a negative one lifts the limit.
type Limits struct {
	// Rate is the sustained requests per second; 0 = unlimited.
	Rate float64 `json:"rate,omitempty"`
	// Burst is how many requests may arrive at once on top of a full bucket; 0 = one
	// second's worth of Rate (at least 1).
	Burst int `json:"burst,omitempty"`
	// Concurrency is the most calls in flight at once; 0 = unlimited.
	Concurrency int `json:"concurrency,omitempty"`
}

// Override returns l with the non-zero fields of o in place of its own, negative ones
// meaning unlimited.
func (l Limits) Override(o Limits) Limits {
	if o.Rate != 0 {
		l.Rate = max(o.Rate, 0)
	}
	if o.Burst != 0 {
		l.Burst = max(o.Burst, 0)
	}
	if o.Concurrency != 0 {
		l.Concurrency = max(o.Concurrency, 0)
	}
	return l
}

func (l Limits) burst() float64 {
	if l.Burst > 0 {
		return float64(l.Burst)
	}
	return max(1, math.Ceil(l.Rate))
}

// Config is a service's default limits per caller.
type Config struct {
	Limits
}

// DefaultConcurrency bounds each caller's calls in flight by default. It adapts to
// cost by itself — a caller of slow LLM answers holds its slots longer than one of
// cached answers — so one number suits every deployment, and 64 is above what one
// well-behaved client needs ("quarry bench" uses 64 callers) while keeping one caller
// from holding every worker. A rate depends on capacity planning (50 µs cached
// answers, 30 s agentic ones), so it has no default: set it per key in the keys file.
const DefaultConcurrency = 64

// RegisterFlags registers -limit-rate, -limit-burst and -limit-concurrency.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.Float64Var(&c.Rate, "limit-rate", 0, "requests per second per caller (API key, or address when open); 0 = unlimited. Keys may override it")
	fs.IntVar(&c.Burst, "limit-burst", 0, "requests a caller may send at once above -limit-rate; 0 = one second's worth")
	fs.IntVar(&c.Concurrency, "limit-concurrency", DefaultConcurrency, "calls in flight per caller; 0 = unlimited. Keys may override it")
}

// Validate rejects negative limits, naming the flag.
func (c Config) Validate() error {
	switch {
	case c.Rate < 0 || math.IsNaN(c.Rate) || math.IsInf(c.Rate, 0):
		return fmt.Errorf("-limit-rate must be a number >= 0 (0 = unlimited), got %v", c.Rate)
	case c.Burst < 0:
		return fmt.Errorf("-limit-burst must be >= 0, got %d", c.Burst)
	case c.Concurrency < 0:
		return fmt.Errorf("-limit-concurrency must be >= 0 (0 = unlimited), got %d", c.Concurrency)
	}
	return nil
}

// ErrExceeded is what every Exceeded error is.
var ErrExceeded = errors.New("limit exceeded")

// Exceeded says which limit refused a call and when to try again.
type Exceeded struct {
	// Caller as named in Acquire.
	Caller string
	// Limit is "rate" or "concurrency".
	Limit string
	// Limits the caller was held to.
	Limits Limits
	// RetryAfter is the earliest time worth retrying: when the next token is due, or a
	// fixed short pause for concurrency, which frees when a call ends.
	RetryAfter time.Duration
}

func (e *Exceeded) Error() string {
	if e.Limit == "concurrency" {
		return fmt.Sprintf("%s has %d calls in flight, the limit; retry after %v", e.Caller, e.Limits.Concurrency, e.RetryAfter)
	}
	return fmt.Sprintf("%s is over its rate limit of %g requests/s (burst %g); retry after %v", e.Caller, e.Limits.Rate, e.Limits.burst(), e.RetryAfter)
}

func (e *Exceeded) Unwrap() error { return ErrExceeded }

// ConcurrencyRetry is the retry hint when a caller's slots are full: nothing says when
// one frees, and a cached answer takes well under this.
const ConcurrencyRetry = 100 * time.Millisecond

// MaxCallers bounds the callers tracked at once. Beyond it (and after evicting the
// idle ones) new callers share one state, so memory stays bounded even when an open
// service is called from very many addresses.
const MaxCallers = 100_000

// overflow names the state shared by callers beyond MaxCallers.
const overflow = "(other callers)"

// sweepEvery is how often Acquire looks for idle callers to forget.
const sweepEvery = time.Minute

// Limiter tracks each caller's bucket and calls in flight.
type Limiter struct {
	def Limits
	now func() time.Time

	mu        sync.Mutex
	callers   map[string]*state
	lastSweep time.Time
}

type state struct {
	lim      Limits // as of the last call
	tokens   float64
	last     time.Time // when tokens was last brought up to date
	inflight int
}

// New returns a limiter holding callers to cfg unless Acquire overrides it. now is
// the clock (time.Now outside tests).
func New(cfg Config, now func() time.Time) *Limiter {
	return &Limiter{def: cfg.Limits, now: now, callers: map[string]*state{}, lastSweep: now()}
}

// Defaults returns the limits every caller has unless overridden.
func (l *Limiter) Defaults() Limits { return l.def }

// Acquire admits one call by caller under the defaults with over applied, taking a
// token and a slot; the caller must call release when the call ends. A refused call
// takes nothing: the error is an *Exceeded.
func (l *Limiter) Acquire(caller string, over Limits) (release func(), err error) {
	lim := l.def.Override(over)
	if lim.Rate == 0 && lim.Concurrency == 0 {
		return func() {}, nil
	}
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	// A full table is swept at most once a second, so callers past the bound do not
	// each pay for a sweep.
	if since := now.Sub(l.lastSweep); since >= sweepEvery || (len(l.callers) >= MaxCallers && since >= time.Second) {
		l.sweep(now)
	}
	key := caller
	s := l.callers[key]
	if s == nil {
		if len(l.callers) >= MaxCallers {
			key = overflow
			s = l.callers[key]
		}
		if s == nil {
			s = &state{tokens: lim.burst(), last: now}
			l.callers[key] = s
		}
	}
	s.lim = lim
	if lim.Concurrency > 0 && s.inflight >= lim.Concurrency {
		return nil, &Exceeded{Caller: caller, Limit: "concurrency", Limits: lim, RetryAfter: ConcurrencyRetry}
	}
	if lim.Rate > 0 {
		s.refill(now, lim)
		if s.tokens < 1 {
			wait := time.Duration((1 - s.tokens) / lim.Rate * float64(time.Second))
			return nil, &Exceeded{Caller: caller, Limit: "rate", Limits: lim, RetryAfter: max(wait, time.Millisecond)}
		}
		s.tokens--
	}
	s.inflight++
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			s.inflight--
			l.mu.Unlock()
		})
	}, nil
}

func (s *state) refill(now time.Time, lim Limits) {
	if el := now.Sub(s.last); el > 0 {
		s.tokens = min(lim.burst(), s.tokens+el.Seconds()*lim.Rate)
		s.last = now
	}
}

// sweep forgets callers with nothing in flight whose bucket has refilled: a fresh
// state is the same, so forgetting loses nothing and needs no idle timeout.
func (l *Limiter) sweep(now time.Time) {
	l.lastSweep = now
	for k, s := range l.callers {
		if s.inflight > 0 {
			continue
		}
		if s.lim.Rate == 0 || s.tokens+now.Sub(s.last).Seconds()*s.lim.Rate >= s.lim.burst() {
			delete(l.callers, k)
		}
	}
}

// Len reports how many callers are tracked.
func (l *Limiter) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.callers)
}
