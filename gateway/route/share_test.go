package route

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quarry-router/quarry/gateway/cache"
	quarryv1 "github.com/quarry-router/quarry/gen/quarry/v1"
	"github.com/quarry-router/quarry/platform/redistest"
	"github.com/redis/go-redis/v9"
)

// replicas are n routers, each with a Redis cache of its own on one Redis server, as n
// gateway replicas share one, and the same agent.
func replicas(t *testing.T, n int, share bool, agent Agent) []*Router {
	t.Helper()
	rs, _ := replicasOn(t, n, share, 2*time.Second, agent)
	out := make([]*Router, n)
	for i, r := range rs {
		out[i] = r.router
	}
	return out
}

type replica struct {
	router *Router
	res    *fakeResolver
	store  *cache.Redis
}

// replicasOn is replicas with each cache call's deadline (-redis-timeout), returning
// each replica's resolver and the Redis server's address too.
func replicasOn(t *testing.T, n int, share bool, timeout time.Duration, agent Agent) ([]replica, string) {
	t.Helper()
	srv := redistest.Start(t)
	cfg := DefaultConfig()
	cfg.ShareAnswers = share
	gens := &fakeGens{gens: map[string]uint64{"kb": 1}}
	var out []replica
	for range n {
		rc := cache.DefaultRedisConfig()
		rc.Addr, rc.Timeout = srv.Addr, timeout
		client, err := rc.NewClient()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { client.Close() })
		store := cache.NewRedis(client, cache.DefaultConfig(), rc, time.Now, nil)
		res := &fakeResolver{}
		res.set(canned(gens))
		r := New(cfg, store, res, agent, gens, nil)
		r.ShareAnswersVia(store)
		out = append(out, replica{r, res, store})
	}
	return out, srv.Addr
}

const designQuestion = "What is our design review process?"

func askDesign(ctx context.Context, r *Router) (*quarryv1.QueryResponse, error) {
	return r.Query(ctx, &quarryv1.QueryRequest{KnowledgeBase: "kb", Query: designQuestion, Explain: true}, nil)
}

// slowAgent answers after delay, counting the questions it is asked.
type slowAgent struct {
	asked atomic.Int64
	delay time.Duration
}

func (a *slowAgent) Answer(ctx context.Context, _ *quarryv1.AnswerRequest, onDelta func(string)) (*quarryv1.AgentAnswer, error) {
	a.asked.Add(1)
	select {
	case <-time.After(a.delay):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	onDelta("Design reviews happen weekly.")
	return &quarryv1.AgentAnswer{Answer: "Design reviews happen weekly."}, nil
}

// gatedAgent answers once released, counting the questions it is asked.
type gatedAgent struct {
	asked   atomic.Int64
	release chan struct{}
	fail    bool
}

func (a *gatedAgent) Answer(ctx context.Context, _ *quarryv1.AnswerRequest, onDelta func(string)) (*quarryv1.AgentAnswer, error) {
	a.asked.Add(1)
	select {
	case <-a.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if a.fail {
		return nil, errors.New("connection refused")
	}
	onDelta("Design reviews happen weekly.")
	return &quarryv1.AgentAnswer{Answer: "Design reviews happen weekly."}, nil
}

// askBoth asks the first replica, waits until the agent has the question, asks the
// second, and releases the agent once the second has waited a while.
func askBoth(t *testing.T, rs []*Router, agent *gatedAgent) [2]*quarryv1.QueryResponse {
	t.Helper()
	var out [2]*quarryv1.QueryResponse
	errs := make(chan error, 2)
	ask := func(i int) {
		resp, err := askDesign(context.Background(), rs[i])
		out[i] = resp
		errs <- err
	}
	go ask(0)
	waitUntil(t, "the first replica asks the agent", func() bool { return agent.asked.Load() == 1 })
	go ask(1)
	time.Sleep(3 * peerPoll) // the second replica is at the lease by now
	close(agent.release)
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// A question asked on two replicas at once goes to the LLM once: the second replica
// waits for the first one's answer in the shared cache.
func TestReplicasShareAnAnswer(t *testing.T) {
	agent := &gatedAgent{release: make(chan struct{})}
	out := askBoth(t, replicas(t, 2, true, agent), agent)
	if n := agent.asked.Load(); n != 1 {
		t.Fatalf("the agent was asked %d times, want once", n)
	}
	wantTier(t, out[0], quarryv1.Tier_TIER_SINGLE_LLM, quarryv1.Tier_TIER_SINGLE_LLM, false)
	wantTier(t, out[1], quarryv1.Tier_TIER_EXACT_CACHE, quarryv1.Tier_TIER_SINGLE_LLM, true)
	for i, resp := range out {
		if resp.GetAnswer() != "Design reviews happen weekly." || resp.GetDegraded() {
			t.Errorf("replica %d answered %q (degraded %v), want the agent's answer", i, resp.GetAnswer(), resp.GetDegraded())
		}
	}
	if !strings.Contains(stageOutcome(out[1], "agent"), "another replica") {
		t.Errorf("the second replica's agent stage reads %q, want it to say another replica answered", stageOutcome(out[1], "agent"))
	}
}

func stageOutcome(resp *quarryv1.QueryResponse, name string) string {
	for _, st := range resp.GetExplain().GetStages() {
		if st.GetName() == name {
			return st.GetOutcome()
		}
	}
	return ""
}

// Waiting for another replica's answer is counted as lease calls, not as cache
// lookups: ten looks a second during an LLM answer would read as a cache that misses.
func TestWaitingIsNotCountedAsCacheMisses(t *testing.T) {
	agent := &slowAgent{delay: time.Second}
	rs, _ := replicasOn(t, 2, true, 2*time.Second, agent)
	go askDesign(context.Background(), rs[0].router)
	waitUntil(t, "the first replica asks the agent", func() bool { return agent.asked.Load() == 1 })
	resp, err := askDesign(context.Background(), rs[1].router)
	if err != nil {
		t.Fatal(err)
	}
	wantTier(t, resp, quarryv1.Tier_TIER_EXACT_CACHE, quarryv1.Tier_TIER_SINGLE_LLM, true)
	// Its own exact and fuzzy lookups, before the search: two misses.
	if st := rs[1].store.Stats(); st.Misses > 2 {
		t.Errorf("the waiting replica's cache counted %d misses, want its two lookups", st.Misses)
	}
}

// A replica whose lookup missed just before another cached the answer, and which then
// takes the free lease, serves the cached answer rather than ask the LLM again.
func TestATurnTakenLateServesTheCachedAnswer(t *testing.T) {
	agent := &slowAgent{delay: 50 * time.Millisecond}
	rs, _ := replicasOn(t, 2, true, 2*time.Second, agent)
	firstDone := make(chan struct{})
	rs[1].res.before = func(context.Context, int) error { <-firstDone; return nil } // its search is slower
	errs := make(chan error, 1)
	var second *quarryv1.QueryResponse
	go func() {
		var err error
		second, err = askDesign(context.Background(), rs[1].router)
		errs <- err
	}()
	waitUntil(t, "the second replica searches", func() bool { return rs[1].res.calls.Load() == 1 })
	if _, err := askDesign(context.Background(), rs[0].router); err != nil {
		t.Fatal(err)
	}
	close(firstDone)
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	if n := agent.asked.Load(); n != 1 {
		t.Fatalf("the agent was asked %d times, want once: the answer was cached when the second took the lease", n)
	}
	wantTier(t, second, quarryv1.Tier_TIER_EXACT_CACHE, quarryv1.Tier_TIER_SINGLE_LLM, true)
}

// A wait started by a caller with little time ends with that caller's time; a caller
// with more time that joined it asks again instead of taking its end as a failure.
func TestAShortWaitLetsALongerCallerHaveTheAnswer(t *testing.T) {
	agent := &slowAgent{delay: 1500 * time.Millisecond}
	rs, _ := replicasOn(t, 2, true, 2*time.Second, agent)
	go askDesign(context.Background(), rs[0].router)
	waitUntil(t, "the first replica asks the agent", func() bool { return agent.asked.Load() == 1 })
	short, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	go askDesign(short, rs[1].router) // starts the second replica's wait
	time.Sleep(200 * time.Millisecond)
	resp, err := askDesign(context.Background(), rs[1].router) // joins it
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetDegraded() || resp.GetAnswer() != "Design reviews happen weekly." {
		t.Fatalf("the caller with time got %q (degraded %v, %q), want the first replica's answer", resp.GetAnswer(), resp.GetDegraded(), resp.GetDegradedReason())
	}
}

// With the default 10 ms per Redis call, a Redis that stalls for a quarter second while
// a replica waits (its calls time out) does not make it ask the LLM beside the holder,
// which is still answering.
func TestAWaitRidesOutASlowRedis(t *testing.T) {
	agent := &slowAgent{delay: 1500 * time.Millisecond}
	rs, addr := replicasOn(t, 2, true, 10*time.Millisecond, agent)
	go askDesign(context.Background(), rs[0].router)
	waitUntil(t, "the first replica asks the agent", func() bool { return agent.asked.Load() == 1 })
	done := make(chan struct{})
	go func() { askDesign(context.Background(), rs[1].router); close(done) }()
	time.Sleep(300 * time.Millisecond) // waiting by now
	admin := redis.NewClient(&redis.Options{Addr: addr})
	defer admin.Close()
	if err := admin.Do(context.Background(), "CLIENT", "PAUSE", "250", "ALL").Err(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	if n := agent.asked.Load(); n != 1 {
		t.Errorf("the agent was asked %d times: a Redis stall made the waiting replica ask too", n)
	}
	<-done
}

// When the replica that asked fails (its fallback is not cached), the one waiting asks
// the LLM itself; with -share-answers=false each replica asks.
func TestReplicasAskThemselvesWhenTheyCannotShare(t *testing.T) {
	for _, tt := range []struct {
		name  string
		share bool
		fail  bool
	}{
		{"the first replica's agent fails", true, true},
		{"sharing is off", false, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			agent := &gatedAgent{release: make(chan struct{}), fail: tt.fail}
			out := askBoth(t, replicas(t, 2, tt.share, agent), agent)
			if n := agent.asked.Load(); n != 2 {
				t.Fatalf("the agent was asked %d times, want twice", n)
			}
			for i, resp := range out {
				wantTier(t, resp, quarryv1.Tier_TIER_SINGLE_LLM, quarryv1.Tier_TIER_SINGLE_LLM, false)
				if resp.GetDegraded() != tt.fail {
					t.Errorf("replica %d: degraded %v, want %v", i, resp.GetDegraded(), tt.fail)
				}
			}
		})
	}
}
