package route

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/quarry-router/quarry/gateway/cache"
	"github.com/quarry-router/quarry/gateway/generations"
	quarryv1 "github.com/quarry-router/quarry/gen/quarry/v1"
	"github.com/quarry-router/quarry/platform/telemetry/telemetrytest"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// fakeGens is a settable view of knowledge base generations and, where set, content
// versions.
type fakeGens struct {
	mu       sync.Mutex
	gens     map[string]uint64
	versions map[string]uint64
	err      error
	ready    chan struct{} // nil: ready from the start
}

func (f *fakeGens) Names() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Sorted(maps.Keys(f.gens))
}

func (f *fakeGens) WaitReady(ctx context.Context) error {
	f.mu.Lock()
	ready := f.ready
	f.mu.Unlock()
	if ready == nil {
		return nil
	}
	select {
	case <-ready:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (f *fakeGens) State(kb string) (generations.State, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return generations.State{}, false, f.err
	}
	g, ok := f.gens[kb]
	return generations.State{Generation: g, Version: f.versions[kb]}, ok, nil
}

func (f *fakeGens) Generation(kb string) (uint64, bool, error) {
	st, ok, err := f.State(kb)
	return st.Generation, ok, err
}

func (f *fakeGens) set(kb string, gen uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.gens[kb] = gen
}

func (f *fakeGens) current(kb string) uint64 {
	g, _, _ := f.Generation(kb)
	return g
}

// fakeResolver counts calls and delegates to fn, which tests swap.
type fakeResolver struct {
	calls atomic.Int64
	// before, when set, runs before the n-th call answers.
	before func(ctx context.Context, n int) error
	mu     sync.Mutex
	fn     func(ctx context.Context, req *quarryv1.ResolveRequest) (*quarryv1.ResolveResponse, error)
}

func (f *fakeResolver) Resolve(ctx context.Context, req *quarryv1.ResolveRequest) (*quarryv1.ResolveResponse, error) {
	n := f.calls.Add(1)
	if f.before != nil {
		if err := f.before(ctx, int(n)); err != nil {
			return nil, err
		}
	}
	f.mu.Lock()
	fn := f.fn
	f.mu.Unlock()
	return fn(ctx, req)
}

func (f *fakeResolver) set(fn func(context.Context, *quarryv1.ResolveRequest) (*quarryv1.ResolveResponse, error)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fn = fn
}

type agentFunc func(ctx context.Context, req *quarryv1.AnswerRequest, onDelta func(string)) (*quarryv1.AgentAnswer, error)

func (f agentFunc) Answer(ctx context.Context, req *quarryv1.AnswerRequest, onDelta func(string)) (*quarryv1.AgentAnswer, error) {
	return f(ctx, req, onDelta)
}

const outOfDomain = "This topic is not covered in the knowledge base."

// canned stands in for the search service over a tiny knowledge base: it routes by
// keyword, the way the real gates would for these questions.
func canned(gens *fakeGens) func(context.Context, *quarryv1.ResolveRequest) (*quarryv1.ResolveResponse, error) {
	return func(_ context.Context, req *quarryv1.ResolveRequest) (*quarryv1.ResolveResponse, error) {
		q := strings.ToLower(req.GetQuery())
		res := &quarryv1.ResolveResponse{Generation: gens.current(req.GetKnowledgeBase())}
		direct := func(path, answer string) {
			res.Route = quarryv1.Tier_TIER_DIRECT
			res.Answer = answer
			res.Sources = []*quarryv1.Source{{Path: path, Relevance: 0.95}}
		}
		switch {
		case strings.Contains(q, "rotate"):
			direct("auth/rotate-keys.md", "Rotate the signing keys with `keyctl rotate`.")
		case strings.Contains(q, "revoke"):
			direct("auth/revoke-token.md", "Revoke a token with `keyctl revoke`.")
		case strings.Contains(q, "hmac"):
			direct("crypto/hmac.md", "hmac.New returns a new HMAC hash.")
		case strings.Contains(q, "design"):
			res.Route = quarryv1.Tier_TIER_SINGLE_LLM
			res.Answer = "Extract from arch/design.md."
			res.FallbackDegraded = true
			res.Sources = []*quarryv1.Source{{Path: "arch/design.md", Relevance: 0.75}}
		default:
			res.Route = quarryv1.Tier_TIER_OUT_OF_DOMAIN
			res.Answer = outOfDomain
		}
		if req.GetExplain() {
			res.Gate = &quarryv1.GateTrace{SearchText: q, DirectDecision: "canned"}
			res.Stages = []*quarryv1.StageTiming{{Name: "search", Duration: durationpb.New(time.Microsecond)}}
		}
		return res, nil
	}
}

// countingStore counts the calls of each lookup, so a test can order the search after
// the fuzzy lookup the way a real search, taking milliseconds, always is.
type countingStore struct {
	*cache.Memory
	mu      sync.Mutex
	similar int
	puts    int
	changed chan struct{}
	// beforeSimilar, when set, runs before each fuzzy lookup.
	beforeSimilar func(ctx context.Context) error
}

func (s *countingStore) Similar(ctx context.Context, kb string, gen uint64, tokens []string) (*cache.Entry, float64, error) {
	if s.beforeSimilar != nil {
		if err := s.beforeSimilar(ctx); err != nil {
			return nil, 0, err
		}
	}
	e, sim, err := s.Memory.Similar(ctx, kb, gen, tokens)
	s.bump(func() { s.similar++ })
	return e, sim, err
}

func (s *countingStore) Put(ctx context.Context, e *cache.Entry) error {
	err := s.Memory.Put(ctx, e)
	s.bump(func() { s.puts++ })
	return err
}

func (s *countingStore) bump(f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f()
	close(s.changed)
	s.changed = make(chan struct{})
}

// waitFor blocks until cond holds over the counts, or ctx ends.
func (s *countingStore) waitFor(ctx context.Context, cond func(similar, puts int) bool) error {
	for {
		s.mu.Lock()
		ok, ch := cond(s.similar, s.puts), s.changed
		s.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

type harness struct {
	t      *testing.T
	router *Router
	res    *fakeResolver
	gens   *fakeGens
	store  *countingStore
}

func newHarness(t *testing.T, agent Agent) *harness {
	t.Helper()
	return newHarnessWith(t, agent, DefaultConfig())
}

func newHarnessWith(t *testing.T, agent Agent, cfg Config) *harness {
	t.Helper()
	gens := &fakeGens{gens: map[string]uint64{"kb": 1, "other": 1}}
	store := &countingStore{Memory: cache.NewMemory(cache.DefaultConfig(), time.Now), changed: make(chan struct{})}
	res := &fakeResolver{before: func(ctx context.Context, n int) error {
		// Every search starts with a query whose fuzzy lookup runs beside it.
		return store.waitFor(ctx, func(similar, _ int) bool { return similar >= n })
	}}
	res.set(canned(gens))
	return &harness{t: t, res: res, gens: gens, store: store,
		router: New(cfg, store, res, agent, gens, nil)}
}

func (h *harness) query(q string) *quarryv1.QueryResponse {
	h.t.Helper()
	resp, err := h.router.Query(context.Background(), &quarryv1.QueryRequest{KnowledgeBase: "kb", Query: q, Explain: true}, nil)
	if err != nil {
		h.t.Fatalf("Query(%q): %v", q, err)
	}
	if resp.GetElapsed() == nil {
		h.t.Fatalf("Query(%q): elapsed not set", q)
	}
	return resp
}

func wantTier(t *testing.T, resp *quarryv1.QueryResponse, tier, origin quarryv1.Tier, fromCache bool) {
	t.Helper()
	if resp.GetTier() != tier || resp.GetOriginTier() != origin || resp.GetFromCache() != fromCache {
		t.Fatalf("tier %s origin %s from_cache %v; want %s origin %s from_cache %v (cache trace %v)",
			resp.GetTier(), resp.GetOriginTier(), resp.GetFromCache(), tier, origin, fromCache, resp.GetExplain().GetCache())
	}
}

// waitUntil spins (yielding, not sleeping) until cond holds, failing after a deadline.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		runtime.Gosched()
	}
}

func TestValidation(t *testing.T) {
	cases := []struct {
		name  string
		kb    string
		query string
		want  error // nil: accepted
	}{
		{"an empty query is invalid", "kb", "", ErrInvalidQuery},
		{"a whitespace-only query is invalid", "kb", " \t\r\n  ", ErrInvalidQuery},
		{"a query over the byte limit is invalid", "kb", strings.Repeat("a", 4097), ErrInvalidQuery},
		{"a query at the byte limit is accepted", "kb", strings.Repeat("a", 4096), nil},
		{"a query that is not UTF-8 is invalid", "kb", "rotate \xff keys", ErrInvalidQuery},
		{"a query with NUL is invalid", "kb", "rotate\x00keys", ErrInvalidQuery},
		{"a query with escape is invalid", "kb", "rotate \x1b[31m keys", ErrInvalidQuery},
		{"a query with DEL is invalid", "kb", "rotate\x7fkeys", ErrInvalidQuery},
		{"a query with a C1 control is invalid", "kb", "rotate\u0085keys", ErrInvalidQuery},
		{"tab, newline and carriage return are accepted", "kb", "rotate\tkeys\r\nnow", nil},
		{"non-ASCII text is accepted", "kb", "Schlüssel rotieren — wie?", nil},
		{"an empty knowledge base id is invalid", "", "rotate keys", ErrInvalidKB},
		{"an upper-case knowledge base id is invalid", "Team", "rotate keys", ErrInvalidKB},
		{"a knowledge base id starting with '-' is invalid", "-team", "rotate keys", ErrInvalidKB},
		{"a knowledge base id starting with '_' is invalid", "_team", "rotate keys", ErrInvalidKB},
		{"a knowledge base id with '/' is invalid", "a/b", "rotate keys", ErrInvalidKB},
		{"a knowledge base id with '.' is invalid", "kb.v1", "rotate keys", ErrInvalidKB},
		{"a knowledge base id of 65 characters is invalid", strings.Repeat("k", 65), "rotate keys", ErrInvalidKB},
		{"a knowledge base id of 64 characters is valid", strings.Repeat("k", 64), "rotate keys", ErrUnknownKB},
		{"a knowledge base id of digits, '_' and '-' is valid", "0team_a-1", "rotate keys", ErrUnknownKB},
		{"an unknown knowledge base is not found", "nope", "rotate keys", ErrUnknownKB},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, nil)
			_, err := h.router.Query(context.Background(), &quarryv1.QueryRequest{KnowledgeBase: c.kb, Query: c.query}, nil)
			if c.want == nil {
				if err != nil {
					t.Fatalf("Query: %v, want it accepted", err)
				}
				return
			}
			if !errors.Is(err, c.want) {
				t.Fatalf("Query: %v, want %v", err, c.want)
			}
			if n := h.res.calls.Load(); n != 0 {
				t.Fatalf("a rejected query reached the search service %d times", n)
			}
			if h.store.Len() != 0 {
				t.Fatalf("a rejected query changed the cache")
			}
		})
	}
}

func TestGenerationsUnavailable(t *testing.T) {
	h := newHarness(t, nil)
	h.gens.err = errors.New("not synced")
	_, err := h.router.Query(context.Background(), &quarryv1.QueryRequest{KnowledgeBase: "kb", Query: "rotate keys"}, nil)
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Query with unknown generations: %v, want ErrUnavailable", err)
	}
}

// A query that reaches a gateway before it has learnt the knowledge bases' generations
// from the search service (just started, or its connection still being set up) waits
// for them, within -resolve-timeout, rather than failing UNAVAILABLE a few milliseconds
// early.
func TestAQueryBeforeTheFirstGenerationsWaitsForThem(t *testing.T) {
	h := newHarness(t, nil)
	h.gens.err, h.gens.ready = generations.ErrNotReady, make(chan struct{})
	go func() {
		time.Sleep(50 * time.Millisecond)
		h.gens.mu.Lock()
		h.gens.err = nil
		close(h.gens.ready)
		h.gens.mu.Unlock()
	}()
	wantTier(t, h.query("rotate signing keys"), quarryv1.Tier_TIER_DIRECT, quarryv1.Tier_TIER_DIRECT, false)

	cfg := DefaultConfig()
	cfg.ResolveTimeout = 50 * time.Millisecond
	h = newHarnessWith(t, nil, cfg)
	h.gens.err, h.gens.ready = generations.ErrNotReady, make(chan struct{})
	began := time.Now()
	_, err := h.router.Query(context.Background(), &quarryv1.QueryRequest{KnowledgeBase: "kb", Query: "rotate keys"}, nil)
	if !errors.Is(err, ErrUnavailable) || time.Since(began) < cfg.ResolveTimeout {
		t.Fatalf("Query with generations never ready: %v after %v, want ErrUnavailable after -resolve-timeout (%v)", err, time.Since(began), cfg.ResolveTimeout)
	}

	// A caller whose deadline is nearer than -resolve-timeout ends with its deadline, not
	// with an outage (logged as one, and UNAVAILABLE where DEADLINE_EXCEEDED is due).
	cfg.ResolveTimeout = time.Minute
	h = newHarnessWith(t, nil, cfg)
	h.gens.err, h.gens.ready = generations.ErrNotReady, make(chan struct{})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := h.router.Query(ctx, &quarryv1.QueryRequest{KnowledgeBase: "kb", Query: "rotate keys"}, nil); !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrUnavailable) {
		t.Fatalf("Query with a deadline nearer than -resolve-timeout before the generations: %v, want context.DeadlineExceeded", err)
	}
}

func TestExactCache(t *testing.T) {
	h := newHarness(t, nil)
	first := h.query("How do I rotate keys?")
	wantTier(t, first, quarryv1.Tier_TIER_DIRECT, quarryv1.Tier_TIER_DIRECT, false)
	if !first.GetExplain().GetCache().GetStored() {
		t.Fatalf("a computed answer was not stored")
	}
	second := h.query("  how do I ROTATE   keys?")
	wantTier(t, second, quarryv1.Tier_TIER_EXACT_CACHE, quarryv1.Tier_TIER_DIRECT, true)
	if second.GetAnswer() != first.GetAnswer() || second.GetSources()[0].GetPath() != "auth/rotate-keys.md" || second.GetGeneration() != 1 {
		t.Fatalf("exact hit served %q from %v, want the first answer", second.GetAnswer(), second.GetSources())
	}
	if n := h.res.calls.Load(); n != 1 {
		t.Fatalf("Resolve called %d times, want 1: the exact hit must not search", n)
	}
	if got := second.GetExplain().GetCache().GetExact(); got != "hit" {
		t.Fatalf("cache trace exact = %q, want hit", got)
	}
}

func TestOutOfDomainIsCached(t *testing.T) {
	h := newHarness(t, nil)
	first := h.query("What is the weather in Paris?")
	wantTier(t, first, quarryv1.Tier_TIER_OUT_OF_DOMAIN, quarryv1.Tier_TIER_OUT_OF_DOMAIN, false)
	second := h.query("what is the weather in paris?")
	wantTier(t, second, quarryv1.Tier_TIER_EXACT_CACHE, quarryv1.Tier_TIER_OUT_OF_DOMAIN, true)
	if second.GetAnswer() != outOfDomain || h.res.calls.Load() != 1 {
		t.Fatalf("served %q after %d searches, want the cached out-of-domain answer after 1", second.GetAnswer(), h.res.calls.Load())
	}
}

func TestFuzzyCache(t *testing.T) {
	cases := []struct {
		name         string
		cached       string
		query        string
		tier, origin quarryv1.Tier
		answerFrom   string // top source of the served answer
		verification string // substring of the trace's verification
		reject       string // the rejects metric's reason, for a rejected candidate
	}{
		{"the same stems are served at once", "How do I rotate keys?", "rotate the keys",
			quarryv1.Tier_TIER_FUZZY_CACHE, quarryv1.Tier_TIER_DIRECT, "auth/rotate-keys.md", "same stems", ""},
		{"a candidate the fresh search agrees with is served", "How do I rotate signing keys?", "rotate signing keys now",
			quarryv1.Tier_TIER_FUZZY_CACHE, quarryv1.Tier_TIER_DIRECT, "auth/rotate-keys.md", "search agrees", ""},
		{"two out-of-domain questions agree", "weather forecast paris today", "weather forecast paris tomorrow",
			quarryv1.Tier_TIER_FUZZY_CACHE, quarryv1.Tier_TIER_OUT_OF_DOMAIN, "", "both out of domain", ""},
		{"a candidate whose top source differs is rejected (rotate vs revoke)", "How do I rotate the jwt api token?", "How do I revoke the jwt api token?",
			quarryv1.Tier_TIER_DIRECT, quarryv1.Tier_TIER_DIRECT, "auth/revoke-token.md", "differs", rejectTopSource},
		{"a candidate whose route differs is rejected", "weather forecast paris today", "weather forecast paris rotate",
			quarryv1.Tier_TIER_DIRECT, quarryv1.Tier_TIER_DIRECT, "auth/rotate-keys.md", "routes to", rejectRoute},
		{"a candidate the search agrees with but whose subject was replaced is rejected (hmac vs sha256)",
			"How does hmac New return a new HMAC hash?", "How does sha256 New return a new HMAC hash?",
			quarryv1.Tier_TIER_DIRECT, quarryv1.Tier_TIER_DIRECT, "crypto/hmac.md", "replaced by", rejectWordReplaced},
		// One-digit numbers are not fuzzy tokens (SPEC: tokens of 2+ characters), so
		// these two have the same tokens, yet they ask about different things.
		{"a candidate whose one-digit number was replaced is rejected (node 3 vs node 4)",
			"How do I rotate keys on node 3?", "How do I rotate keys on node 4?",
			quarryv1.Tier_TIER_DIRECT, quarryv1.Tier_TIER_DIRECT, "auth/rotate-keys.md", "replaced by", rejectWordReplaced},
		{"a candidate whose version digit was replaced is rejected (python 2 vs 3)",
			"rotate keys after upgrading to python 2", "rotate keys after upgrading to python 3",
			quarryv1.Tier_TIER_DIRECT, quarryv1.Tier_TIER_DIRECT, "auth/rotate-keys.md", "replaced by", rejectWordReplaced},
		{"the same one-digit number in other words is served at once", "How do I rotate keys on node 3?", "rotate the keys on node 3",
			quarryv1.Tier_TIER_FUZZY_CACHE, quarryv1.Tier_TIER_DIRECT, "auth/rotate-keys.md", "same stems", ""},
		// "not" is a stop word: the two have the same tokens.
		{"a candidate that the question negates is rejected (not)", "why do the keys rotate?", "why do the keys not rotate?",
			quarryv1.Tier_TIER_DIRECT, quarryv1.Tier_TIER_DIRECT, "auth/rotate-keys.md", "negates", rejectNegation},
		{"a candidate the question negates with an added word is rejected (with vs without)", "rotate keys with downtime", "rotate keys without downtime",
			quarryv1.Tier_TIER_DIRECT, quarryv1.Tier_TIER_DIRECT, "auth/rotate-keys.md", "negates", rejectNegation},
		{"the same negation in other words is served at once", "why don't the keys rotate?", "the keys dont rotate, why",
			quarryv1.Tier_TIER_FUZZY_CACHE, quarryv1.Tier_TIER_DIRECT, "auth/rotate-keys.md", "same stems", ""},
		// Opposites among stop words ("before" and "after", "up" and "down") leave the
		// tokens alike, and the search ranks the same document first for both.
		{"a candidate whose stop word was swapped for its opposite is rejected (before vs after)",
			"rotate keys before the deploy", "rotate keys after the deploy",
			quarryv1.Tier_TIER_DIRECT, quarryv1.Tier_TIER_DIRECT, "auth/rotate-keys.md", "replaced by", rejectWordReplaced},
		{"a candidate whose stop word was swapped for its opposite is rejected (up vs down)",
			"rotate keys when scaling up", "rotate keys when scaling down",
			quarryv1.Tier_TIER_DIRECT, quarryv1.Tier_TIER_DIRECT, "auth/rotate-keys.md", "replaced by", rejectWordReplaced},
		{"a candidate whose stop word was swapped for its opposite content word is rejected (more vs less)",
			"rotate keys more often", "rotate keys less often",
			quarryv1.Tier_TIER_DIRECT, quarryv1.Tier_TIER_DIRECT, "auth/rotate-keys.md", "replaced by", rejectWordReplaced},
		{"a candidate asking another question word is rejected (when vs why)",
			"when do the keys rotate?", "why do the keys rotate?",
			quarryv1.Tier_TIER_DIRECT, quarryv1.Tier_TIER_DIRECT, "auth/rotate-keys.md", "replaced by", rejectWordReplaced},
		{"the same opposite in other words is served at once", "how do I rotate keys before the deploy?", "before deploy, rotate the keys",
			quarryv1.Tier_TIER_FUZZY_CACHE, quarryv1.Tier_TIER_DIRECT, "auth/rotate-keys.md", "same stems", ""},
		{"a question word dropped is served at once", "when do the keys rotate?", "the keys rotate",
			quarryv1.Tier_TIER_FUZZY_CACHE, quarryv1.Tier_TIER_DIRECT, "auth/rotate-keys.md", "same stems", ""},
		// A word of a pair dropped in one place and its opposite added in another is no
		// swap: "from" gone with its phrase, and the "to" of "how to"; a "when" clause
		// reworded while "how" asks the question.
		{"a \"from\" dropped and the \"to\" of \"how to\" added is served at once",
			"How do I rotate keys from the vault?", "How to rotate vault keys?",
			quarryv1.Tier_TIER_FUZZY_CACHE, quarryv1.Tier_TIER_DIRECT, "auth/rotate-keys.md", "same stems", ""},
		{"a \"when\" clause reworded as a \"how\" question is served at once",
			"rotate keys when deploying", "how do I rotate keys while deploying?",
			quarryv1.Tier_TIER_FUZZY_CACHE, quarryv1.Tier_TIER_DIRECT, "auth/rotate-keys.md", "same stems", ""},
		// A neighbour counts on its own side: "deploying" follows the "when" and comes
		// before the "how", which does not stand where the "when" stood.
		{"a \"when\" clause moved before a \"how\" question is served at once",
			"rotate keys when deploying", "while deploying, how do I rotate keys?",
			quarryv1.Tier_TIER_FUZZY_CACHE, quarryv1.Tier_TIER_DIRECT, "auth/rotate-keys.md", "same stems", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			reader := telemetrytest.Metrics()
			h := newHarness(t, nil)
			h.query(c.cached)
			before := rejects(t, reader)
			resp := h.query(c.query)
			after := rejects(t, reader)
			for _, r := range []string{rejectTopSource, rejectRoute, rejectWordReplaced, rejectNegation} {
				want := int64(0)
				if r == c.reject {
					want = 1
				}
				if got := after[r] - before[r]; got != want {
					t.Errorf("quarry.gateway.fuzzy.rejects{quarry.reason=%s} rose by %d, want %d", r, got, want)
				}
			}
			wantTier(t, resp, c.tier, c.origin, c.tier == quarryv1.Tier_TIER_FUZZY_CACHE)
			if got := topPath(resp.GetSources()); got != c.answerFrom {
				t.Fatalf("served the answer from %q, want %q", got, c.answerFrom)
			}
			ct := resp.GetExplain().GetCache()
			if ct.GetFuzzyCandidate() == "" || !strings.Contains(ct.GetFuzzyVerification(), c.verification) {
				t.Fatalf("cache trace %v, want a candidate verified or rejected with %q", ct, c.verification)
			}
		})
	}
}

// TestOnlyAFailedSearchIsASearchFailedReject: a fuzzy candidate the search could not
// verify is counted as search_failed only when the search failed; a caller that gave
// up, or a knowledge base the search does not know, ends the query itself.
func TestOnlyAFailedSearchIsASearchFailedReject(t *testing.T) {
	for _, tc := range []struct {
		name    string
		fail    func(ctx context.Context) error
		timeout time.Duration
		counted bool
	}{
		{"the search is down", func(context.Context) error { return errors.New("connection refused") }, 0, true},
		{"the search does not know the knowledge base", func(context.Context) error { return fmt.Errorf("%w %q", ErrUnknownKB, "kb") }, 0, false},
		{"the caller gave up", func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }, 50 * time.Millisecond, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reader := telemetrytest.Metrics()
			h := newHarness(t, nil)
			h.query("How do I rotate signing keys?")
			h.res.set(func(ctx context.Context, _ *quarryv1.ResolveRequest) (*quarryv1.ResolveResponse, error) {
				return nil, tc.fail(ctx)
			})
			before := rejects(t, reader)
			ctx := context.Background()
			if tc.timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tc.timeout)
				defer cancel()
			}
			if _, err := h.router.Query(ctx, &quarryv1.QueryRequest{KnowledgeBase: "kb", Query: "rotate signing keys now", Explain: true}, nil); err == nil {
				t.Fatal("the query succeeded with no search to verify its fuzzy candidate")
			}
			want := map[bool]int64{true: 1, false: 0}[tc.counted]
			if got := rejects(t, reader)[rejectSearchFailed] - before[rejectSearchFailed]; got != want {
				t.Errorf("quarry.gateway.fuzzy.rejects{quarry.reason=search_failed} rose by %d, want %d", got, want)
			}
		})
	}
}

// rejects reads the fuzzy rejects counter by reason.
func rejects(t *testing.T, r *sdkmetric.ManualReader) map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if sum, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == "quarry.gateway.fuzzy.rejects" {
				for _, p := range sum.DataPoints {
					reason, _ := p.Attributes.Value("quarry.reason")
					out[reason.AsString()] += p.Value
				}
			}
		}
	}
	return out
}

func TestAnswerComputedDuringTheFuzzyLookupIsNotAHit(t *testing.T) {
	h := newHarness(t, nil)
	h.res.before = nil
	h.store.beforeSimilar = func(ctx context.Context) error {
		return h.store.waitFor(ctx, func(_, puts int) bool { return puts >= 1 })
	}
	resp := h.query("How do I rotate keys?")
	wantTier(t, resp, quarryv1.Tier_TIER_DIRECT, quarryv1.Tier_TIER_DIRECT, false)
	if got := resp.GetExplain().GetCache().GetFuzzy(); !strings.HasPrefix(got, "skipped") {
		t.Fatalf("fuzzy outcome %q, want skipped: the question's own answer is not a fuzzy hit", got)
	}
}

func TestSpeculativeSearchIsCancelledOnFuzzyHit(t *testing.T) {
	h := newHarness(t, nil)
	h.query("How do I rotate keys?")

	// The lookup outlasts the hedge delay, so the search starts beside it.
	h.res.before = nil
	started := make(chan struct{})
	h.store.beforeSimilar = until(started, "the search started")
	cancelled := make(chan error, 1)
	h.res.set(func(ctx context.Context, _ *quarryv1.ResolveRequest) (*quarryv1.ResolveResponse, error) {
		close(started)
		<-ctx.Done()
		cancelled <- ctx.Err()
		return nil, ctx.Err()
	})
	resp := h.query("rotate the keys")
	wantTier(t, resp, quarryv1.Tier_TIER_FUZZY_CACHE, quarryv1.Tier_TIER_DIRECT, true)
	select {
	case err := <-cancelled:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("speculative search ended with %v, want cancellation", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the speculative search was not cancelled after the fuzzy hit")
	}
	if n := h.res.calls.Load(); n != 2 {
		t.Fatalf("Resolve called %d times, want 2 (one answer, one speculative)", n)
	}
}

func TestCacheAnswersWhileSearchIsDown(t *testing.T) {
	h := newHarness(t, nil)
	h.query("How do I rotate keys?")
	h.res.set(func(context.Context, *quarryv1.ResolveRequest) (*quarryv1.ResolveResponse, error) {
		return nil, errors.New("connection refused")
	})
	wantTier(t, h.query("how do i rotate keys?"), quarryv1.Tier_TIER_EXACT_CACHE, quarryv1.Tier_TIER_DIRECT, true)
	wantTier(t, h.query("rotate the keys"), quarryv1.Tier_TIER_FUZZY_CACHE, quarryv1.Tier_TIER_DIRECT, true)

	_, err := h.router.Query(context.Background(), &quarryv1.QueryRequest{KnowledgeBase: "kb", Query: "rotate signing keys now"}, nil)
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("unverifiable fuzzy candidate with search down: %v, want ErrUnavailable", err)
	}
	_, err = h.router.Query(context.Background(), &quarryv1.QueryRequest{KnowledgeBase: "kb", Query: "revoke a token"}, nil)
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("new question with search down: %v, want ErrUnavailable wrapping the cause", err)
	}
}

func TestGenerationChangeMakesOldAnswersUnreachable(t *testing.T) {
	h := newHarness(t, nil)
	h.query("How do I rotate keys?")
	h.gens.set("kb", 2)
	resp := h.query("How do I rotate keys?")
	wantTier(t, resp, quarryv1.Tier_TIER_DIRECT, quarryv1.Tier_TIER_DIRECT, false)
	if resp.GetGeneration() != 2 {
		t.Fatalf("answer generation %d, want 2", resp.GetGeneration())
	}
	if n := h.res.calls.Load(); n != 2 {
		t.Fatalf("Resolve called %d times, want 2", n)
	}
	if got := h.query("rotate the keys"); got.GetGeneration() != 2 {
		t.Fatalf("fuzzy hit served generation %d, want 2", got.GetGeneration())
	}
	// Another knowledge base never sees this one's answers.
	resp, err := h.router.Query(context.Background(), &quarryv1.QueryRequest{KnowledgeBase: "other", Query: "How do I rotate keys?"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	wantTier(t, resp, quarryv1.Tier_TIER_DIRECT, quarryv1.Tier_TIER_DIRECT, false)
}

// Two search replicas that loaded the same tree at different moments number its
// generation differently; round-robin sends questions to either. With content versions
// their answers are cached under the one version and found again whichever replica
// answered; by generation alone, the answers of the replica whose number the gateway's
// view does not hold were stored where no lookup looks.
func TestReplicasWithTheSameContentShareAnswers(t *testing.T) {
	const version = 1<<63 | 42
	for _, tc := range []struct {
		name     string
		versions bool
		hits     int // of the four questions asked again
	}{
		{"with content versions", true, 4},
		{"by generation alone", false, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, nil)
			h.gens.set("kb", 1000) // the view: replica A's generation
			if tc.versions {
				h.gens.versions = map[string]uint64{"kb": version}
			}
			base := canned(h.gens)
			var n atomic.Int64
			h.res.set(func(ctx context.Context, req *quarryv1.ResolveRequest) (*quarryv1.ResolveResponse, error) {
				res, err := base(ctx, req)
				if n.Add(1)%2 == 0 {
					res.Generation = 1003 // replica B, loaded 3 ms later
				}
				if tc.versions {
					res.ContentVersion = version
				}
				return res, err
			})
			qs := []string{"How do I rotate keys?", "How do I revoke a token?", "what is hmac?", "weather in paris"}
			for _, q := range qs {
				h.query(q)
			}
			hits := 0
			for _, q := range qs {
				if h.query(q).GetTier() == quarryv1.Tier_TIER_EXACT_CACHE {
					hits++
				}
			}
			if hits != tc.hits {
				t.Errorf("%d of %d questions asked again were cache hits, want %d", hits, len(qs), tc.hits)
			}
		})
	}
}

func TestLLMRoutes(t *testing.T) {
	cases := []struct {
		name     string
		agent    Agent
		degraded string // reason; "" for an LLM answer
		cached   bool   // a configuration without an LLM is cached; a failure is not
	}{
		{"no agent gives the extractive fallback, cached", nil, "no agent configured", true},
		{"an agent without a provider gives the extractive fallback, cached",
			agentFunc(func(context.Context, *quarryv1.AnswerRequest, func(string)) (*quarryv1.AgentAnswer, error) {
				return nil, fmt.Errorf("agent: %w", ErrNoProvider)
			}), "no LLM provider configured", true},
		{"an agent out of time gives the extractive fallback, not cached",
			agentFunc(func(context.Context, *quarryv1.AnswerRequest, func(string)) (*quarryv1.AgentAnswer, error) {
				return nil, context.DeadlineExceeded
			}), "did not answer in time", false},
		{"an unreachable agent gives the extractive fallback, not cached",
			agentFunc(func(context.Context, *quarryv1.AnswerRequest, func(string)) (*quarryv1.AgentAnswer, error) {
				return nil, errors.New("connection refused")
			}), "unavailable", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var asked atomic.Int64
			agent := c.agent
			if agent != nil {
				agent = agentFunc(func(ctx context.Context, req *quarryv1.AnswerRequest, onDelta func(string)) (*quarryv1.AgentAnswer, error) {
					asked.Add(1)
					return c.agent.Answer(ctx, req, onDelta)
				})
			}
			h := newHarness(t, agent)
			for i := range 2 {
				resp := h.query("What is our design review process?")
				if c.cached && i == 1 {
					wantTier(t, resp, quarryv1.Tier_TIER_EXACT_CACHE, quarryv1.Tier_TIER_SINGLE_LLM, true)
				} else {
					wantTier(t, resp, quarryv1.Tier_TIER_SINGLE_LLM, quarryv1.Tier_TIER_SINGLE_LLM, false)
				}
				if !resp.GetDegraded() || !strings.Contains(resp.GetDegradedReason(), c.degraded) || resp.GetAnswer() != "Extract from arch/design.md." {
					t.Fatalf("degraded %v (%q) answer %q; want the fallback, degraded because %q",
						resp.GetDegraded(), resp.GetDegradedReason(), resp.GetAnswer(), c.degraded)
				}
			}
			// A failure is asked of the agent again; the search before it may be the
			// first one's, which lingers for a moment.
			wantAsked, wantSearched := int64(2), []int64{1, 2}
			switch {
			case c.agent == nil:
				wantAsked, wantSearched = 0, []int64{1}
			case c.cached:
				wantAsked, wantSearched = 1, []int64{1}
			}
			if n := asked.Load(); n != wantAsked {
				t.Fatalf("agent asked %d times, want %d", n, wantAsked)
			}
			if n := h.res.calls.Load(); !slices.Contains(wantSearched, n) {
				t.Fatalf("Resolve called %d times, want one of %v", n, wantSearched)
			}
		})
	}
}

func TestTheCallersDeadlineBoundsTheAgent(t *testing.T) {
	// like the agent's loop (services/agent/loop): it gathers for two thirds of the time
	// its deadline leaves, then answers; without a deadline it would gather until cut off.
	loop := agentFunc(func(ctx context.Context, _ *quarryv1.AnswerRequest, _ func(string)) (*quarryv1.AgentAnswer, error) {
		d, ok := ctx.Deadline()
		if !ok {
			<-ctx.Done()
			return nil, ctx.Err()
		}
		select {
		case <-time.After(time.Until(d) * 2 / 3):
			return &quarryv1.AgentAnswer{Answer: "Design reviews happen weekly."}, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	})
	// stuck never answers before its deadline.
	stuck := agentFunc(func(ctx context.Context, _ *quarryv1.AnswerRequest, _ func(string)) (*quarryv1.AgentAnswer, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	})
	cases := []struct {
		name         string
		agent        Agent
		caller       time.Duration // the caller's deadline; 0 for none
		agentTimeout time.Duration
		degraded     string // "" for the agent's answer
	}{
		{"without a deadline the agent has -agent-timeout", loop, 0, 300 * time.Millisecond, ""},
		{"a deadline past -agent-timeout leaves it at that", loop, time.Minute, 300 * time.Millisecond, ""},
		{"a nearer deadline is the agent's, so it answers in time", loop, 600 * time.Millisecond, time.Minute, ""},
		{"an agent that cannot make the caller's deadline leaves time for the fallback", stuck, 600 * time.Millisecond, time.Minute, "did not answer in time"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.AgentTimeout = c.agentTimeout
			h := newHarnessWith(t, c.agent, cfg)
			ctx := context.Background()
			if c.caller > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, c.caller)
				defer cancel()
			}
			resp, err := h.router.Query(ctx, &quarryv1.QueryRequest{KnowledgeBase: "kb", Query: "What is our design review process?"}, nil)
			if err != nil {
				t.Fatalf("Query: %v; want an answer within the caller's deadline", err)
			}
			wantTier(t, resp, quarryv1.Tier_TIER_SINGLE_LLM, quarryv1.Tier_TIER_SINGLE_LLM, false)
			if resp.GetDegraded() != (c.degraded != "") || !strings.Contains(resp.GetDegradedReason(), c.degraded) {
				t.Fatalf("degraded %v (%q), want degraded because %q", resp.GetDegraded(), resp.GetDegradedReason(), c.degraded)
			}
		})
	}
}

func TestACallerWithMoreTimeDoesNotTakeAHurriedCallersFallback(t *testing.T) {
	// The agent answers when given time enough, and nothing before a nearer deadline.
	var asked atomic.Int64
	agent := agentFunc(func(ctx context.Context, _ *quarryv1.AnswerRequest, _ func(string)) (*quarryv1.AgentAnswer, error) {
		asked.Add(1)
		if d, _ := ctx.Deadline(); time.Until(d) > 5*time.Second {
			return &quarryv1.AgentAnswer{Answer: "Design reviews happen weekly."}, nil
		}
		<-ctx.Done()
		return nil, ctx.Err()
	})
	h := newHarness(t, agent)
	req := &quarryv1.QueryRequest{KnowledgeBase: "kb", Query: "What is our design review process?"}
	hurried, cancel := context.WithTimeout(context.Background(), 600*time.Millisecond)
	defer cancel()
	type result struct {
		resp *quarryv1.QueryResponse
		err  error
	}
	first := make(chan result, 1)
	go func() {
		resp, err := h.router.Query(hurried, req, nil)
		first <- result{resp, err}
	}()
	key := flightKey("kb", 1, "what is our design review process?", false)
	waitUntil(t, "the hurried caller's agent flight starts", func() bool { return h.router.answers.inFlight(key) == 1 })
	patient := make(chan result, 1)
	go func() {
		resp, err := h.router.Query(context.Background(), req, nil)
		patient <- result{resp, err}
	}()
	waitUntil(t, "a patient caller joins it", func() bool { return h.router.answers.inFlight(key) == 2 })

	got := <-first
	if got.err != nil || !strings.Contains(got.resp.GetDegradedReason(), "did not answer in time") {
		t.Fatalf("hurried caller: %v, %v; want the fallback before its deadline", got.resp, got.err)
	}
	got = <-patient
	if got.err != nil || got.resp.GetDegraded() || got.resp.GetAnswer() != "Design reviews happen weekly." {
		t.Fatalf("patient caller: %v, %v; want the agent's answer, not the hurried caller's fallback", got.resp, got.err)
	}
	if n := asked.Load(); n != 2 {
		t.Fatalf("agent asked %d times, want 2", n)
	}
}

// A caller with a near deadline that joins the agent flight of a caller with more time
// gets the extractive fallback before its deadline, as it would have from a flight of
// its own (query.proto), not DEADLINE_EXCEEDED; the text it was streamed comes first.
func TestAHurriedCallerJoiningALongerFlightGetsTheFallbackInTime(t *testing.T) {
	for _, streaming := range []bool{false, true} {
		t.Run(fmt.Sprintf("streaming=%v", streaming), func(t *testing.T) {
			// The agent answers the patient caller once released.
			release := make(chan struct{})
			h := newHarness(t, agentFunc(func(ctx context.Context, _ *quarryv1.AnswerRequest, onDelta func(string)) (*quarryv1.AgentAnswer, error) {
				onDelta("Design reviews ")
				select {
				case <-release:
					onDelta("happen weekly.")
					return &quarryv1.AgentAnswer{Answer: "Design reviews happen weekly."}, nil
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}))
			req := &quarryv1.QueryRequest{KnowledgeBase: "kb", Query: "What is our design review process?"}
			type result struct {
				resp *quarryv1.QueryResponse
				err  error
			}
			patient := make(chan result, 1)
			go func() {
				resp, err := h.router.Query(context.Background(), req, nil)
				patient <- result{resp, err}
			}()
			key := flightKey("kb", 1, "what is our design review process?", false)
			waitUntil(t, "the patient caller's agent flight starts", func() bool { return h.router.answers.inFlight(key) == 1 })

			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			defer cancel()
			var deltas strings.Builder
			var onDelta func(string)
			if streaming {
				onDelta = func(d string) { deltas.WriteString(d) }
			}
			resp, err := h.router.Query(ctx, req, onDelta)
			if err != nil || ctx.Err() != nil {
				t.Fatalf("hurried caller: %v (its context: %v); want the fallback before its deadline", err, ctx.Err())
			}
			if !resp.GetDegraded() || !strings.Contains(resp.GetDegradedReason(), "did not answer in time") ||
				!strings.Contains(resp.GetAnswer(), "Extract from arch/design.md.") {
				t.Fatalf("hurried caller: degraded %v (%q), answer %q; want the extractive fallback", resp.GetDegraded(), resp.GetDegradedReason(), resp.GetAnswer())
			}
			if streaming && deltas.String() != resp.GetAnswer() {
				t.Fatalf("hurried caller streamed %q, final answer %q; want the deltas to make up the answer", deltas.String(), resp.GetAnswer())
			}
			close(release)
			got := <-patient
			if got.err != nil || got.resp.GetDegraded() || got.resp.GetAnswer() != "Design reviews happen weekly." {
				t.Fatalf("patient caller: %v, %v; want the agent's answer", got.resp, got.err)
			}
		})
	}
}

func TestAgentAnswerIsStreamedAndCached(t *testing.T) {
	var got *quarryv1.AnswerRequest
	agent := agentFunc(func(_ context.Context, req *quarryv1.AnswerRequest, onDelta func(string)) (*quarryv1.AgentAnswer, error) {
		got = req
		onDelta("Design reviews ")
		onDelta("happen weekly.")
		return &quarryv1.AgentAnswer{
			Answer:  "Design reviews happen weekly.",
			Sources: []*quarryv1.Source{{Path: "arch/reviews.md"}, {Path: "arch/design.md"}},
			Llm:     &quarryv1.LlmTrace{Model: "test-model", Calls: 1},
		}, nil
	})
	h := newHarness(t, agent)
	const version = 1<<63 | 5
	h.gens.versions = map[string]uint64{"kb": version}
	base := canned(h.gens)
	h.res.set(func(ctx context.Context, req *quarryv1.ResolveRequest) (*quarryv1.ResolveResponse, error) {
		res, err := base(ctx, req)
		res.ContentVersion = version
		return res, err
	})
	var streamed strings.Builder
	resp, err := h.router.Query(context.Background(),
		&quarryv1.QueryRequest{KnowledgeBase: "kb", Query: "What is our design review process?", Explain: true},
		func(d string) { streamed.WriteString(d) })
	if err != nil {
		t.Fatal(err)
	}
	wantTier(t, resp, quarryv1.Tier_TIER_SINGLE_LLM, quarryv1.Tier_TIER_SINGLE_LLM, false)
	if streamed.String() != resp.GetAnswer() || resp.GetDegraded() {
		t.Fatalf("streamed %q, final %q (degraded %v); want the deltas to make up the answer", streamed.String(), resp.GetAnswer(), resp.GetDegraded())
	}
	if got.GetTier() != quarryv1.Tier_TIER_SINGLE_LLM || got.GetGeneration() != 1 || got.GetContentVersion() != version || got.GetKnowledgeBase() != "kb" {
		t.Fatalf("agent asked %v, want the routed tier, generation and content version", got)
	}
	if resp.GetContentVersion() != version {
		t.Fatalf("answer's content version %x, want %x", resp.GetContentVersion(), uint64(version))
	}
	if paths := []string{resp.GetSources()[0].GetPath(), resp.GetSources()[1].GetPath()}; len(resp.GetSources()) != 2 ||
		paths[0] != "arch/design.md" || paths[1] != "arch/reviews.md" {
		t.Fatalf("sources %v, want the search's ranked sources first, then what the agent read", resp.GetSources())
	}
	if resp.GetExplain().GetLlm().GetModel() != "test-model" || !hasStage(resp, "agent") {
		t.Fatalf("explain %v, want the LLM trace and an agent stage", resp.GetExplain())
	}
	cached := h.query("what is our design review process?")
	wantTier(t, cached, quarryv1.Tier_TIER_EXACT_CACHE, quarryv1.Tier_TIER_SINGLE_LLM, true)
}

func hasStage(resp *quarryv1.QueryResponse, name string) bool {
	for _, s := range resp.GetExplain().GetStages() {
		if s.GetName() == name {
			return true
		}
	}
	return false
}

func TestExplainTrace(t *testing.T) {
	h := newHarness(t, nil)
	resp := h.query("How do I rotate keys?")
	var names []string
	for _, s := range resp.GetExplain().GetStages() {
		names = append(names, s.GetName())
		if s.GetDuration() == nil {
			t.Fatalf("stage %q has no duration", s.GetName())
		}
	}
	if got, want := strings.Join(names, ","), "normalise,exact_cache,fuzzy_cache,resolve,search"; got != want {
		t.Fatalf("stages %s, want %s", got, want)
	}
	ex := resp.GetExplain()
	if ex.GetGate().GetDirectDecision() != "canned" || ex.GetCache().GetNormalisedQuery() != "how do i rotate keys?" ||
		strings.Join(ex.GetCache().GetTokens(), " ") != "rotate keys" || ex.GetCache().GetExact() != "miss" || ex.GetCache().GetFuzzy() != "miss" {
		t.Fatalf("explain %v, want the gate trace and both cache outcomes", ex)
	}
	plain, err := h.router.Query(context.Background(), &quarryv1.QueryRequest{KnowledgeBase: "kb", Query: "rotate keys please"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if plain.GetExplain() != nil || plain.GetElapsed() == nil {
		t.Fatalf("untraced response has explain %v, elapsed %v; want no trace and an elapsed time", plain.GetExplain(), plain.GetElapsed())
	}
}

func TestConcurrentIdenticalMissesSearchOnce(t *testing.T) {
	h := newHarness(t, nil)
	release := make(chan struct{})
	search := canned(h.gens)
	h.res.set(func(ctx context.Context, req *quarryv1.ResolveRequest) (*quarryv1.ResolveResponse, error) {
		<-release
		return search(ctx, req)
	})
	const n = 100
	var wg sync.WaitGroup
	resps := make([]*quarryv1.QueryResponse, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			resps[i], errs[i] = h.router.Query(context.Background(),
				&quarryv1.QueryRequest{KnowledgeBase: "kb", Query: "How do I rotate the signing keys?"}, nil)
		})
	}
	key := flightKey("kb", 1, "how do i rotate the signing keys?", false)
	waitUntil(t, "all callers wait on one search", func() bool { return h.router.resolves.inFlight(key) == n })
	close(release)
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("caller %d: %v", i, errs[i])
		}
		wantTier(t, resps[i], quarryv1.Tier_TIER_DIRECT, quarryv1.Tier_TIER_DIRECT, false)
	}
	if got := h.res.calls.Load(); got != 1 {
		t.Fatalf("Resolve called %d times for %d identical questions, want 1", got, n)
	}
}

func TestSearchIsCancelledOnlyWhenEveryCallerLeaves(t *testing.T) {
	h := newHarness(t, nil)
	release := make(chan struct{})
	ended := make(chan error, 2)
	search := canned(h.gens)
	h.res.set(func(ctx context.Context, req *quarryv1.ResolveRequest) (*quarryv1.ResolveResponse, error) {
		select {
		case <-release:
			ended <- ctx.Err()
			return search(ctx, req)
		case <-ctx.Done():
			ended <- ctx.Err()
			return nil, ctx.Err()
		}
	})
	req := &quarryv1.QueryRequest{KnowledgeBase: "kb", Query: "How do I rotate the signing keys?"}
	key := flightKey("kb", 1, "how do i rotate the signing keys?", false)

	// One caller of two gives up: the search goes on for the other.
	ctxA, cancelA := context.WithCancel(context.Background())
	errA := make(chan error, 1)
	go func() { _, err := h.router.Query(ctxA, req, nil); errA <- err }()
	respB := make(chan *quarryv1.QueryResponse, 1)
	go func() { resp, _ := h.router.Query(context.Background(), req, nil); respB <- resp }()
	waitUntil(t, "both callers wait", func() bool { return h.router.resolves.inFlight(key) == 2 })
	cancelA()
	if err := <-errA; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled caller got %v, want context.Canceled", err)
	}
	waitUntil(t, "one caller waits", func() bool { return h.router.resolves.inFlight(key) == 1 })
	close(release)
	if err := <-ended; err != nil {
		t.Fatalf("the search saw %v while a caller still waited", err)
	}
	wantTier(t, <-respB, quarryv1.Tier_TIER_DIRECT, quarryv1.Tier_TIER_DIRECT, false)

	// The only caller gives up: the search is cancelled, and the next caller starts anew.
	h.gens.set("kb", 2)
	h.res.set(func(ctx context.Context, _ *quarryv1.ResolveRequest) (*quarryv1.ResolveResponse, error) {
		<-ctx.Done()
		ended <- ctx.Err()
		return nil, ctx.Err()
	})
	ctxC, cancelC := context.WithCancel(context.Background())
	go func() { _, err := h.router.Query(ctxC, req, nil); errA <- err }()
	waitUntil(t, "the caller waits", func() bool {
		return h.router.resolves.inFlight(flightKey("kb", 2, "how do i rotate the signing keys?", false)) == 1
	})
	cancelC()
	if err := <-errA; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled caller got %v", err)
	}
	if err := <-ended; !errors.Is(err, context.Canceled) {
		t.Fatalf("abandoned search ended with %v, want cancellation", err)
	}
	h.res.set(canned(h.gens))
	wantTier(t, h.query("How do I rotate the signing keys?"), quarryv1.Tier_TIER_DIRECT, quarryv1.Tier_TIER_DIRECT, false)
}

func TestLateCallerReceivesTheWholeStream(t *testing.T) {
	release := make(chan struct{})
	agent := agentFunc(func(ctx context.Context, _ *quarryv1.AnswerRequest, onDelta func(string)) (*quarryv1.AgentAnswer, error) {
		onDelta("Design reviews ")
		select {
		case <-release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		onDelta("happen weekly.")
		return &quarryv1.AgentAnswer{Answer: "Design reviews happen weekly."}, nil
	})
	h := newHarness(t, agent)
	req := &quarryv1.QueryRequest{KnowledgeBase: "kb", Query: "What is our design review process?"}
	var streams [2]strings.Builder
	var wg sync.WaitGroup
	for i := range streams {
		wg.Go(func() {
			resp, err := h.router.Query(context.Background(), req, func(d string) { streams[i].WriteString(d) })
			if err != nil || resp.GetAnswer() != "Design reviews happen weekly." {
				t.Errorf("caller %d: %v, %q", i, err, resp.GetAnswer())
			}
		})
		key := flightKey("kb", 1, "what is our design review process?", false)
		waitUntil(t, "the caller waits on the agent", func() bool { return h.router.answers.inFlight(key) == i+1 })
	}
	close(release)
	wg.Wait()
	for i := range streams {
		if got := streams[i].String(); got != "Design reviews happen weekly." {
			t.Fatalf("caller %d streamed %q, want the whole answer", i, got)
		}
	}
}

// A streaming caller whose client stops reading blocks in its send (gRPC's stream.Send
// under HTTP/2 flow control). Only that caller may wait: the flight is shared, and if
// it delivered the deltas itself, every other caller of the question would wait too,
// and the flight, stuck in a send, could not even end at its AgentTimeout.
func TestASlowStreamingCallerHoldsUpOnlyItself(t *testing.T) {
	agent := agentFunc(func(ctx context.Context, _ *quarryv1.AnswerRequest, onDelta func(string)) (*quarryv1.AgentAnswer, error) {
		onDelta("Design reviews ")
		onDelta("happen weekly.")
		return &quarryv1.AgentAnswer{Answer: "Design reviews happen weekly."}, nil
	})
	h := newHarness(t, agent)
	req := &quarryv1.QueryRequest{KnowledgeBase: "kb", Query: "What is our design review process?"}

	slow := startStalledStream(t, h.router, req)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := h.router.Query(ctx, req, nil)
	if err != nil || resp.GetAnswer() != "Design reviews happen weekly." {
		t.Fatalf("another caller of the question got %v, %q while a streaming caller was blocked; want the answer", err, resp.GetAnswer())
	}
	// Once its client reads again, the slow caller still receives every delta.
	r, streamed := slow.resume()
	if r.err != nil || r.resp.GetAnswer() != "Design reviews happen weekly." || streamed != r.resp.GetAnswer() {
		t.Fatalf("slow caller: %v, streamed %q, final %q; want the whole answer", r.err, streamed, r.resp.GetAnswer())
	}
}

// stalledStream is a streaming caller whose client stops reading at its first delta.
type stalledStream struct {
	unblock  chan struct{}
	resumed  sync.Once
	streamed strings.Builder
	done     chan stalledResult
}

type stalledResult struct {
	resp *quarryv1.QueryResponse
	err  error
}

// startStalledStream asks req as a streaming caller and returns once the caller is
// blocked in its first delta. The caller is resumed at the end of the test if it has
// not been before.
func startStalledStream(t *testing.T, r *Router, req *quarryv1.QueryRequest) *stalledStream {
	t.Helper()
	s := &stalledStream{unblock: make(chan struct{}), done: make(chan stalledResult, 1)}
	inSend := make(chan struct{})
	var once sync.Once
	go func() {
		resp, err := r.Query(context.Background(), req, func(d string) {
			once.Do(func() { close(inSend) })
			<-s.unblock // a client that does not read
			s.streamed.WriteString(d)
		})
		s.done <- stalledResult{resp, err}
	}()
	t.Cleanup(func() { s.resumed.Do(func() { close(s.unblock) }) })
	select {
	case <-inSend:
	case <-time.After(5 * time.Second):
		t.Fatal("the stalled caller never received a delta")
	}
	return s
}

// resume lets the caller's client read again and returns what the caller got: its
// result and the text it streamed.
func (s *stalledStream) resume() (stalledResult, string) {
	s.resumed.Do(func() { close(s.unblock) })
	r := <-s.done
	return r, s.streamed.String()
}

// query.proto promises that the deltas concatenated equal the final answer. When the
// agent fails after streaming some text, that text has gone out already, so the
// extractive fallback must follow it, as the agent's own fallback does, rather than
// replace it; and such an answer, degraded by a failure, is not cached.
func TestAFailureMidStreamIsFollowedByTheFallback(t *testing.T) {
	const want = "Design reviews happen \n\nExtract from arch/design.md."
	cases := []struct {
		name string
		fail func() (*quarryv1.AgentAnswer, error)
	}{
		{"the agent's stream breaks", func() (*quarryv1.AgentAnswer, error) {
			return nil, errors.New("agent answer: rpc error: code = Unavailable desc = connection reset")
		}},
		{"the agent times out", func() (*quarryv1.AgentAnswer, error) { return nil, context.DeadlineExceeded }},
		// The flight itself fails (see run), and each caller ends its stream.
		{"the agent client panics", func() (*quarryv1.AgentAnswer, error) { panic("agent client bug") }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var asked atomic.Int64
			agent := agentFunc(func(ctx context.Context, _ *quarryv1.AnswerRequest, onDelta func(string)) (*quarryv1.AgentAnswer, error) {
				asked.Add(1)
				onDelta("Design reviews happen ")
				return c.fail()
			})
			h := newHarness(t, agent)
			req := &quarryv1.QueryRequest{KnowledgeBase: "kb", Query: "What is our design review process?"}
			for i := range 2 {
				var streamed strings.Builder
				resp, err := h.router.Query(context.Background(), req, func(d string) { streamed.WriteString(d) })
				if err != nil {
					t.Fatal(err)
				}
				if !resp.GetDegraded() || resp.GetFromCache() || resp.GetAnswer() != want || streamed.String() != want {
					t.Fatalf("query %d: degraded %v, from cache %v, streamed %q, final %q; want both %q, degraded and not cached",
						i, resp.GetDegraded(), resp.GetFromCache(), streamed.String(), resp.GetAnswer(), want)
				}
			}
			if n := asked.Load(); n != 2 {
				t.Fatalf("agent asked %d times, want 2: a failure is asked again", n)
			}
		})
	}
}

// An answer degraded by a failure is not cached, so the next caller asks the LLM again.
// A streaming caller whose client has stopped reading still holds the finished flight
// while it delivers the text, for as long as its client stalls: a caller that comes
// after the flight has finished must not be served that failure from it.
func TestAFailedAnswerHeldByAStalledStreamIsNotServedAgain(t *testing.T) {
	const answer = "Design reviews happen weekly."
	var asked atomic.Int64
	agent := agentFunc(func(ctx context.Context, _ *quarryv1.AnswerRequest, onDelta func(string)) (*quarryv1.AgentAnswer, error) {
		if asked.Add(1) == 1 {
			onDelta("Design reviews happen ")
			return nil, errors.New("agent answer: rpc error: code = Unavailable desc = connection reset")
		}
		onDelta(answer)
		return &quarryv1.AgentAnswer{Answer: answer}, nil
	})
	h := newHarness(t, agent)
	req := &quarryv1.QueryRequest{KnowledgeBase: "kb", Query: "What is our design review process?"}
	key := flightKey("kb", 1, "what is our design review process?", false)

	slow := startStalledStream(t, h.router, req)
	waitUntil(t, "the failed flight has finished", func() bool {
		h.router.answers.mu.Lock()
		defer h.router.answers.mu.Unlock()
		f := h.router.answers.m[key]
		return f == nil || isClosed(f.done)
	})

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := h.router.Query(ctx, req, nil)
	if err != nil || resp.GetDegraded() || resp.GetAnswer() != answer || asked.Load() != 2 {
		t.Fatalf("a caller after the failure: %v, degraded %v (%s), %q, agent asked %d times; want the agent asked again and its answer",
			err, resp.GetDegraded(), resp.GetDegradedReason(), resp.GetAnswer(), asked.Load())
	}

	r, streamed := slow.resume()
	if r.err != nil || !r.resp.GetDegraded() || streamed != r.resp.GetAnswer() {
		t.Fatalf("stalled caller: %v, degraded %v, streamed %q, final %q; want its degraded answer, deltas and final alike",
			r.err, r.resp.GetDegraded(), streamed, r.resp.GetAnswer())
	}
}

// brokenStore is a cache that has gone away, as Redis might.
type brokenStore struct{}

var errCacheDown = errors.New("cache: connection refused")

func (brokenStore) Get(context.Context, string, uint64, string) (*cache.Entry, error) {
	return nil, errCacheDown
}
func (brokenStore) Similar(context.Context, string, uint64, []string) (*cache.Entry, float64, error) {
	return nil, 0, errCacheDown
}
func (brokenStore) Put(context.Context, *cache.Entry) error { return errCacheDown }

func TestQueriesAreAnsweredWithoutACache(t *testing.T) {
	gens := &fakeGens{gens: map[string]uint64{"kb": 1}}
	res := &fakeResolver{}
	res.set(canned(gens))
	r := New(DefaultConfig(), brokenStore{}, res, nil, gens, nil)
	for range 2 {
		resp, err := r.Query(context.Background(), &quarryv1.QueryRequest{KnowledgeBase: "kb", Query: "How do I rotate keys?", Explain: true}, nil)
		if err != nil {
			t.Fatalf("Query with the cache down: %v", err)
		}
		wantTier(t, resp, quarryv1.Tier_TIER_DIRECT, quarryv1.Tier_TIER_DIRECT, false)
		ct := resp.GetExplain().GetCache()
		if ct.GetStored() || !strings.HasPrefix(ct.GetExact(), "error") || !strings.HasPrefix(ct.GetFuzzy(), "error") {
			t.Fatalf("cache trace %v, want both lookups failed and nothing stored", ct)
		}
	}
}

// A question asked again just after its answer was computed, by a caller whose cache
// lookup missed it (here the cache is down; in a burst, the lookup was sent before the
// answer was stored), is answered by the finished search for a moment, not searched
// again.
func TestARepeatJustAfterTheAnswerSharesItsSearch(t *testing.T) {
	gens := &fakeGens{gens: map[string]uint64{"kb": 1}}
	res := &fakeResolver{}
	res.set(canned(gens))
	r := New(DefaultConfig(), brokenStore{}, res, nil, gens, nil)
	ask := func() {
		t.Helper()
		resp, err := r.Query(context.Background(), &quarryv1.QueryRequest{KnowledgeBase: "kb", Query: "How do I rotate keys?"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		wantTier(t, resp, quarryv1.Tier_TIER_DIRECT, quarryv1.Tier_TIER_DIRECT, false)
	}
	ask()
	answered := time.Now()
	ask()
	if n := res.calls.Load(); n != 1 && time.Since(answered) < FlightLinger {
		t.Fatalf("Resolve called %d times for a repeat within %s of the answer, want 1", n, FlightLinger)
	}
	before := res.calls.Load()
	time.Sleep(FlightLinger + 50*time.Millisecond)
	ask()
	if n := res.calls.Load(); n != before+1 {
		t.Fatalf("Resolve called %d times after the linger, want %d: a finished search is not kept", n, before+1)
	}
}

// A question may hold any character, "|" included: a traced question and an untraced
// one whose text is the traced one's plus "|explain" are different questions, and
// neither may be answered by the other's search.
func TestAQuestionEndingInExplainIsNotAnotherQuestionsTrace(t *testing.T) {
	gens := &fakeGens{gens: map[string]uint64{"kb": 1}}
	release := make(chan struct{})
	res := &fakeResolver{before: func(ctx context.Context, n int) error {
		if n == 1 {
			<-release
		}
		return nil
	}}
	res.set(func(_ context.Context, req *quarryv1.ResolveRequest) (*quarryv1.ResolveResponse, error) {
		r := &quarryv1.ResolveResponse{Route: quarryv1.Tier_TIER_DIRECT, Generation: 1, Answer: "answer to " + req.GetQuery(),
			Sources: []*quarryv1.Source{{Path: "auth/rotate-keys.md"}}}
		if req.GetExplain() {
			r.Gate = &quarryv1.GateTrace{SearchText: req.GetQuery()}
		}
		return r, nil
	})
	r := New(DefaultConfig(), brokenStore{}, res, nil, gens, nil)
	ask := func(q string, explain bool, out **quarryv1.QueryResponse) func() {
		return func() {
			resp, err := r.Query(context.Background(), &quarryv1.QueryRequest{KnowledgeBase: "kb", Query: q, Explain: explain}, nil)
			if err != nil {
				t.Error(err)
			}
			*out = resp
		}
	}
	var untraced, traced *quarryv1.QueryResponse
	var wg sync.WaitGroup
	wg.Go(ask("rotate keys|explain", false, &untraced))
	waitUntil(t, "the untraced question searches", func() bool { return res.calls.Load() == 1 })
	wg.Go(ask("rotate keys", true, &traced))
	waitUntil(t, "the traced question joins a search", func() bool {
		return r.resolves.inFlight(flightKey("kb", 1, "rotate keys|explain", false)) == 2 || res.calls.Load() == 2
	})
	close(release)
	wg.Wait()
	if got := untraced.GetAnswer(); got != "answer to rotate keys|explain" {
		t.Errorf("untraced question answered %q", got)
	}
	if got := traced.GetAnswer(); got != "answer to rotate keys" || traced.GetExplain().GetGate() == nil {
		t.Fatalf("traced question %q answered %q with gate trace %v; want its own answer and trace",
			"rotate keys", got, traced.GetExplain().GetGate())
	}
}

func TestUnreadableCacheEntryIsAMiss(t *testing.T) {
	h := newHarness(t, nil)
	garbage := &cache.Entry{KB: "kb", Generation: 1, Query: "how do i rotate keys?", Tokens: []string{"rotate", "keys"}, Value: []byte{0xff, 0xff, 0xff}}
	if err := h.store.Put(context.Background(), garbage); err != nil {
		t.Fatal(err)
	}
	resp := h.query("How do I rotate keys?")
	wantTier(t, resp, quarryv1.Tier_TIER_DIRECT, quarryv1.Tier_TIER_DIRECT, false)
	if got := resp.GetExplain().GetCache().GetExact(); !strings.Contains(got, "decode") {
		t.Fatalf("exact outcome %q, want the decode error", got)
	}
	wantTier(t, h.query("how do i rotate keys?"), quarryv1.Tier_TIER_EXACT_CACHE, quarryv1.Tier_TIER_DIRECT, true)
}

// unavailableStore is a shared cache that is down and says so.
type unavailableStore struct{}

func (unavailableStore) Get(context.Context, string, uint64, string) (*cache.Entry, error) {
	return nil, fmt.Errorf("%w: redis: connection refused", cache.ErrUnavailable)
}
func (unavailableStore) Similar(context.Context, string, uint64, []string) (*cache.Entry, float64, error) {
	return nil, 0, fmt.Errorf("%w: redis: connection refused", cache.ErrUnavailable)
}
func (unavailableStore) Put(context.Context, *cache.Entry) error {
	return fmt.Errorf("%w: redis: connection refused", cache.ErrUnavailable)
}

// countingHandler counts log records at warning level and above.
type countingHandler struct{ n atomic.Int64 }

func (h *countingHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (h *countingHandler) Handle(context.Context, slog.Record) error {
	h.n.Add(1)
	return nil
}
func (h *countingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *countingHandler) WithGroup(string) slog.Handler      { return h }

func TestAnUnavailableCacheIsTracedButNotLoggedPerQuery(t *testing.T) {
	cases := []struct {
		name  string
		store cache.Store
		logs  bool
	}{
		{"a shared cache that is down logs its own outage", unavailableStore{}, false},
		{"any other cache failure is logged", brokenStore{}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			gens := &fakeGens{gens: map[string]uint64{"kb": 1}}
			res := &fakeResolver{}
			res.set(canned(gens))
			h := &countingHandler{}
			r := New(DefaultConfig(), c.store, res, nil, gens, slog.New(h))
			for range 10 {
				resp, err := r.Query(context.Background(), &quarryv1.QueryRequest{KnowledgeBase: "kb", Query: "How do I rotate keys?", Explain: true}, nil)
				if err != nil {
					t.Fatal(err)
				}
				ct := resp.GetExplain().GetCache()
				if !strings.HasPrefix(ct.GetExact(), "error: ") || !strings.HasPrefix(ct.GetFuzzy(), "error: ") || ct.GetStored() {
					t.Fatalf("cache trace %v, want both lookups marked as errors and nothing stored", ct)
				}
			}
			if logged := h.n.Load() > 0; logged != c.logs {
				t.Fatalf("%d warnings for 10 queries, want logged=%v", h.n.Load(), c.logs)
			}
		})
	}
}

// shallowCopy copies every field of a response but the two each caller sets (elapsed
// and explain): a field added to QueryResponse and not to it would go missing from every
// coalesced answer.
func TestShallowCopyCopiesEveryField(t *testing.T) {
	src := &quarryv1.QueryResponse{}
	m := src.ProtoReflect()
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		f := fields.Get(i)
		switch {
		case f.IsList():
			l := m.Mutable(f).List()
			l.Append(l.NewElement())
		case f.Message() != nil:
			m.Mutable(f)
		case f.Kind() == protoreflect.StringKind:
			m.Set(f, protoreflect.ValueOfString("x"))
		case f.Kind() == protoreflect.BoolKind:
			m.Set(f, protoreflect.ValueOfBool(true))
		case f.Kind() == protoreflect.EnumKind:
			m.Set(f, protoreflect.ValueOfEnum(1))
		case f.Kind() == protoreflect.Uint64Kind:
			m.Set(f, protoreflect.ValueOfUint64(1))
		default:
			t.Fatalf("field %s of kind %v: teach this test to set it", f.Name(), f.Kind())
		}
	}
	got := shallowCopy(src).ProtoReflect()
	for i := range fields.Len() {
		f := fields.Get(i)
		if name := f.Name(); name == "elapsed" || name == "explain" {
			continue
		}
		if !got.Has(f) {
			t.Errorf("shallowCopy leaves out %s", f.Name())
		}
	}
}
