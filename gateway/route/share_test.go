package route

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quarry-router/quarry/gateway/cache"
	"github.com/quarry-router/quarry/gateway/cache/redistest"
	quarryv1 "github.com/quarry-router/quarry/gen/quarry/v1"
)

// replicas are n routers, each with a Redis cache of its own on one Redis server, as n
// gateway replicas share one, and the same agent.
func replicas(t *testing.T, n int, share bool, agent Agent) []*Router {
	t.Helper()
	srv := redistest.Start(t)
	cfg := DefaultConfig()
	cfg.ShareAnswers = share
	gens := &fakeGens{gens: map[string]uint64{"kb": 1}}
	var out []*Router
	for range n {
		rc := cache.DefaultRedisConfig()
		rc.Addr, rc.Timeout = srv.Addr, 2*time.Second
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
		out = append(out, r)
	}
	return out
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
		resp, err := rs[i].Query(context.Background(), &quarryv1.QueryRequest{KnowledgeBase: "kb", Query: "What is our design review process?"}, nil)
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
