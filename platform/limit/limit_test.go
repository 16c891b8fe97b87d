package limit

import (
	"errors"
	"flag"
	"fmt"
	"testing"
	"time"
)

type clock struct{ t time.Time }

func (c *clock) now() time.Time          { return c.t }
func (c *clock) advance(d time.Duration) { c.t = c.t.Add(d) }

func newClock() *clock { return &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)} }

// take acquires n times and releases at once, returning how many were admitted and
// the last refusal.
func take(l *Limiter, caller string, over Limits, n int) (admitted int, last *Exceeded) {
	for range n {
		release, err := l.Acquire(caller, over)
		if err != nil {
			if !errors.As(err, &last) {
				panic(err)
			}
			continue
		}
		release()
		admitted++
	}
	return admitted, last
}

func TestRate(t *testing.T) {
	tests := []struct {
		name        string
		def, over   Limits
		calls       int
		wantAdmit   int
		wantRetry   time.Duration // hint of the last refusal; 0 when none is expected
		wantLimitBy string
	}{
		{"a full bucket admits the burst, then refuses", Limits{Rate: 10, Burst: 5}, Limits{}, 8, 5, 100 * time.Millisecond, "rate"},
		{"the burst defaults to one second's worth", Limits{Rate: 4}, Limits{}, 10, 4, 250 * time.Millisecond, "rate"},
		{"a slow rate still admits one call", Limits{Rate: 0.5}, Limits{}, 3, 1, 2 * time.Second, "rate"},
		{"no rate admits everything", Limits{}, Limits{}, 1000, 1000, 0, ""},
		{"a key's rate replaces the default", Limits{Rate: 100, Burst: 100}, Limits{Rate: 1, Burst: 2}, 5, 2, time.Second, "rate"},
		{"a key's zero fields keep the default", Limits{Rate: 1, Burst: 3}, Limits{Concurrency: 5}, 5, 3, time.Second, "rate"},
		{"a key's negative rate lifts the limit", Limits{Rate: 1, Burst: 1}, Limits{Rate: -1}, 50, 50, 0, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newClock()
			l := New(Config{Limits: tt.def}, c.now)
			admitted, last := take(l, "a", tt.over, tt.calls)
			if admitted != tt.wantAdmit {
				t.Errorf("admitted %d of %d, want %d", admitted, tt.calls, tt.wantAdmit)
			}
			if tt.wantRetry == 0 {
				if last != nil {
					t.Errorf("refused: %v", last)
				}
				return
			}
			if last == nil || last.Limit != tt.wantLimitBy || last.RetryAfter != tt.wantRetry {
				t.Fatalf("refusal %+v, want %s limit with retry after %v", last, tt.wantLimitBy, tt.wantRetry)
			}
			// The hint is exact: a caller who waits it out is admitted, and not before.
			c.advance(tt.wantRetry - time.Millisecond)
			if n, _ := take(l, "a", tt.over, 1); n != 0 {
				t.Error("admitted before the hinted time")
			}
			c.advance(time.Millisecond)
			if n, ex := take(l, "a", tt.over, 1); n != 1 {
				t.Errorf("refused after waiting the hinted %v: %v", tt.wantRetry, ex)
			}
		})
	}
}

func TestCallersAreLimitedApart(t *testing.T) {
	c := newClock()
	l := New(Config{Limits: Limits{Rate: 1, Burst: 2}}, c.now)
	if n, _ := take(l, "a", Limits{}, 5); n != 2 {
		t.Fatalf("a admitted %d, want 2", n)
	}
	if n, ex := take(l, "b", Limits{}, 2); n != 2 {
		t.Errorf("b admitted %d after a used its burst, want 2: %v", n, ex)
	}
}

func TestConcurrency(t *testing.T) {
	c := newClock()
	l := New(Config{Limits: Limits{Concurrency: 2}}, c.now)
	r1, err := l.Acquire("a", Limits{})
	if err != nil {
		t.Fatal(err)
	}
	r2, err := l.Acquire("a", Limits{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = l.Acquire("a", Limits{})
	var ex *Exceeded
	if !errors.As(err, &ex) || ex.Limit != "concurrency" || ex.RetryAfter != ConcurrencyRetry || !errors.Is(err, ErrExceeded) {
		t.Fatalf("third call in flight: %v, want a concurrency refusal", err)
	}
	if _, err := l.Acquire("b", Limits{}); err != nil {
		t.Errorf("another caller refused: %v", err)
	}
	if _, err := l.Acquire("c", Limits{Concurrency: -1}); err != nil {
		t.Errorf("a key without a concurrency limit refused: %v", err)
	}
	r1()
	r1() // a second release must not free a second slot
	if _, err := l.Acquire("a", Limits{}); err != nil {
		t.Errorf("refused after a call ended: %v", err)
	}
	if _, err := l.Acquire("a", Limits{}); err == nil {
		t.Error("a double release freed two slots")
	}
	r2()
}

// A call refused by one limit must not use up the other: a refusal takes nothing.
func TestRefusalTakesNothing(t *testing.T) {
	c := newClock()
	l := New(Config{Limits: Limits{Rate: 1, Burst: 1, Concurrency: 1}}, c.now)
	hold, err := l.Acquire("a", Limits{})
	if err != nil {
		t.Fatal(err)
	}
	c.advance(time.Second) // the bucket is full again
	if _, err := l.Acquire("a", Limits{}); err == nil {
		t.Fatal("admitted over the concurrency limit")
	}
	hold()
	if _, err := l.Acquire("a", Limits{}); err != nil {
		t.Errorf("the concurrency refusal spent the token: %v", err)
	}
}

func TestIdleCallersAreForgotten(t *testing.T) {
	c := newClock()
	l := New(Config{Limits: Limits{Rate: 10, Burst: 10, Concurrency: 4}}, c.now)
	for i := range 1000 {
		take(l, fmt.Sprint("caller-", i), Limits{}, 3)
	}
	busy, err := l.Acquire("busy", Limits{})
	if err != nil {
		t.Fatal(err)
	}
	slow := "slow"
	take(l, slow, Limits{Rate: 0.001, Burst: 1}, 1) // its next token is 1000 s away
	if l.Len() != 1002 {
		t.Fatalf("%d callers tracked, want 1002", l.Len())
	}
	c.advance(sweepEvery)
	take(l, "trigger", Limits{}, 1)
	// Left: the caller with a call in flight, the one whose bucket is still refilling,
	// and the one that triggered the sweep.
	if l.Len() != 3 {
		t.Errorf("%d callers tracked after a sweep, want 3", l.Len())
	}
	if n, _ := take(l, slow, Limits{Rate: 0.001, Burst: 1}, 1); n != 0 {
		t.Error("forgetting a caller whose bucket was not full gave it a fresh token")
	}
	busy()
}

func TestCallersBeyondTheBoundShareOneState(t *testing.T) {
	c := newClock()
	l := New(Config{Limits: Limits{Concurrency: 1}}, c.now)
	var holds []func()
	for i := range MaxCallers {
		r, err := l.Acquire(fmt.Sprint("caller-", i), Limits{})
		if err != nil {
			t.Fatal(err)
		}
		holds = append(holds, r)
	}
	c.advance(2 * time.Second)
	r, err := l.Acquire("newcomer", Limits{})
	if err != nil {
		t.Fatalf("first caller beyond the bound: %v", err)
	}
	if _, err := l.Acquire("another newcomer", Limits{}); err == nil {
		t.Error("callers beyond the bound do not share a state")
	}
	if l.Len() > MaxCallers+1 {
		t.Errorf("%d callers tracked, bound %d", l.Len(), MaxCallers)
	}
	r()
	for _, h := range holds {
		h()
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		args []string
		ok   bool
	}{
		{"the defaults", nil, true},
		{"a rate and a burst", []string{"-limit-rate=50", "-limit-burst=100"}, true},
		{"a negative rate", []string{"-limit-rate=-1"}, false},
		{"an infinite rate", []string{"-limit-rate=+Inf"}, false},
		{"a negative burst", []string{"-limit-burst=-1"}, false},
		{"a negative concurrency", []string{"-limit-concurrency=-3"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := flag.NewFlagSet("x", flag.ContinueOnError)
			var c Config
			c.RegisterFlags(fs)
			if err := fs.Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			if err := c.Validate(); (err == nil) != tt.ok {
				t.Errorf("Validate() = %v, want ok %v", err, tt.ok)
			}
		})
	}
}

func BenchmarkAcquire(b *testing.B) {
	for _, bc := range []struct {
		name string
		lim  Limits
	}{{"unlimited", Limits{}}, {"rate and concurrency", Limits{Rate: 1e9, Burst: 1e9, Concurrency: 1 << 20}}} {
		b.Run(bc.name, func(b *testing.B) {
			l := New(Config{Limits: bc.lim}, time.Now)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					release, err := l.Acquire("key", Limits{})
					if err != nil {
						b.Fatal(err)
					}
					release()
				}
			})
		})
	}
}
