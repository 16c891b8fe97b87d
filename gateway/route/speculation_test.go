package route

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/quarry-router/quarry/gateway/cache"
	quarryv1 "github.com/quarry-router/quarry/gen/quarry/v1"
	"github.com/quarry-router/quarry/platform/text"
)

// never is a hedge delay no test outlives: with it, a search that starts was started by
// the fuzzy lookup's outcome, not by the timer.
const never = time.Hour

// until returns a fuzzy-lookup hook that blocks until ch is closed, failing the lookup
// (not the test's patience) if it is not within a deadline.
func until(ch <-chan struct{}, what string) func(context.Context) error {
	return func(ctx context.Context) error {
		select {
		case <-ch:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Second):
			return fmt.Errorf("timed out waiting until %s", what)
		}
	}
}

func TestSpeculativeSearchStartsOnlyWhenTheFuzzyCacheCannotAnswerAtOnce(t *testing.T) {
	cases := []struct {
		name   string
		delay  time.Duration
		cached string // asked first, so that its answer is cached
		query  string
		// lookup: "" runs the fuzzy lookup as is; "blocks" holds it until the search
		// has started; "fails" makes it fail as an unreachable cache does.
		lookup       string
		tier, origin quarryv1.Tier
		// duringLookup: the search was joined while the lookup ran; searches: the
		// Resolve calls the query made.
		duringLookup bool
		searches     int64
	}{
		{"a same-stems hit starts no search", never, "How do I rotate keys?", "rotate the keys", "",
			quarryv1.Tier_TIER_FUZZY_CACHE, quarryv1.Tier_TIER_DIRECT, false, 0},
		{"a miss starts the search as soon as the lookup returns", never, "", "How do I rotate keys?", "",
			quarryv1.Tier_TIER_DIRECT, quarryv1.Tier_TIER_DIRECT, false, 1},
		{"a failed lookup starts the search as soon as it returns", never, "", "How do I rotate keys?", "fails",
			quarryv1.Tier_TIER_DIRECT, quarryv1.Tier_TIER_DIRECT, false, 1},
		{"a candidate that needs the fresh search starts it as soon as the lookup returns", never,
			"How do I rotate signing keys?", "rotate signing keys now", "",
			quarryv1.Tier_TIER_FUZZY_CACHE, quarryv1.Tier_TIER_DIRECT, false, 1},
		{"a lookup slower than the delay has the search started beside it", time.Millisecond,
			"How do I rotate keys?", "rotate the keys", "blocks",
			quarryv1.Tier_TIER_FUZZY_CACHE, quarryv1.Tier_TIER_DIRECT, true, 1},
		{"with no delay the search starts beside the lookup", 0,
			"How do I rotate keys?", "rotate the keys", "blocks",
			quarryv1.Tier_TIER_FUZZY_CACHE, quarryv1.Tier_TIER_DIRECT, true, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.SpeculativeDelay = c.delay
			h := newHarnessWith(t, nil, cfg)
			// The order of search and lookup is what is under test: no ordering hook.
			h.res.before = nil
			if c.cached != "" {
				h.query(c.cached)
			}
			before := h.res.calls.Load()
			key := flightKey("kb", 1, text.Normalise(c.query), true)
			var duringLookup bool
			switch c.lookup {
			case "":
				h.store.beforeSimilar = func(context.Context) error {
					duringLookup = h.router.resolves.inFlight(key) > 0
					return nil
				}
			case "blocks":
				started := make(chan struct{})
				wait := until(started, "the search started")
				h.store.beforeSimilar = func(ctx context.Context) error {
					err := wait(ctx)
					duringLookup = h.router.resolves.inFlight(key) > 0
					return err
				}
				// The search waits to be cancelled: finishing first, it would store this
				// question's own answer, which the lookup then skips.
				h.res.set(func(ctx context.Context, _ *quarryv1.ResolveRequest) (*quarryv1.ResolveResponse, error) {
					close(started)
					<-ctx.Done()
					return nil, ctx.Err()
				})
			case "fails":
				h.store.beforeSimilar = func(context.Context) error {
					duringLookup = h.router.resolves.inFlight(key) > 0
					return fmt.Errorf("%w: connection refused", cache.ErrUnavailable)
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			resp, err := h.router.Query(ctx, &quarryv1.QueryRequest{KnowledgeBase: "kb", Query: c.query, Explain: true}, nil)
			if err != nil {
				t.Fatalf("Query(%q): %v (a search waiting for the hedge delay would time out)", c.query, err)
			}
			wantTier(t, resp, c.tier, c.origin, c.tier == quarryv1.Tier_TIER_FUZZY_CACHE)
			if duringLookup != c.duringLookup {
				t.Fatalf("search joined while the fuzzy lookup ran: %v, want %v", duringLookup, c.duringLookup)
			}
			if n := h.res.calls.Load() - before; n != c.searches {
				t.Fatalf("Resolve called %d times for %q, want %d (cache trace %v)", n, c.query, c.searches, resp.GetExplain().GetCache())
			}
		})
	}
}

func TestAHedgeTimerFiringAfterTheCallEndedStartsNoSearch(t *testing.T) {
	cfg := DefaultConfig()
	cfg.SpeculativeDelay = never
	h := newHarnessWith(t, nil, cfg)
	req := &quarryv1.QueryRequest{KnowledgeBase: "kb", Query: "How do I rotate keys?"}
	c := &call{r: h.router, req: req, kb: "kb", norm: "how do i rotate keys?", tokens: []string{"rotate", "keys"}, gen: 1}
	s := c.speculate(context.Background())
	s.end()
	// What the timer does when it fires.
	if f, _ := s.start(); f != nil {
		t.Fatal("a hedge timer firing after the call ended joined a search")
	}
	if n := h.res.calls.Load(); n != 0 {
		t.Fatalf("Resolve called %d times, want 0", n)
	}
}

func TestSpeculativeDelayValidation(t *testing.T) {
	cases := []struct {
		name  string
		delay time.Duration
		ok    bool
	}{
		{"zero (always in parallel) is valid", 0, true},
		{"a positive delay is valid", time.Millisecond, true},
		{"a negative delay is invalid", -time.Millisecond, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.SpeculativeDelay = c.delay
			err := cfg.Validate()
			if (err == nil) != c.ok || (err != nil && !strings.Contains(err.Error(), "-speculative-delay")) {
				t.Fatalf("Validate() = %v, want ok=%v or an error naming the flag", err, c.ok)
			}
		})
	}
}
