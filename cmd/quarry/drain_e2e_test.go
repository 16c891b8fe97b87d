package main

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	quarryv1 "github.com/quarry-router/quarry/gen/quarry/v1"
	"github.com/quarry-router/quarry/services/agent/llm/llmtest"
)

// A shutdown (SIGTERM, here the services' context) while an LLM answer is on its way:
// the gateway and the agent drain, and the answer reaches its caller, as long as it
// comes within their -drain-timeout; a shorter timeout cuts it. The defaults (65 s and
// 60 s) cover the gateway's -agent-timeout; before there was a flag, every service cut
// its calls 10 s into a shutdown, so a rollout failed the LLM answers under way.
func TestShutdownLetsAnLLMAnswerInFlightFinish(t *testing.T) {
	const question = "What should I check before a production deploy?" // T3: one LLM call
	const thinking = 1500 * time.Millisecond
	for _, tc := range []struct {
		name         string
		drainTimeout string
		wantAnswer   bool
	}{
		{"within the drain timeout", "10s", true},
		{"past the drain timeout", "300ms", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := llmtest.New(t)
			srv.Repeat(llmtest.Turn{Content: "Check the runbook, the canary and the rollback plan.", Delay: thinking})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			sys, err := start(ctx, upConfig{Gateway: "127.0.0.1:0", Search: "127.0.0.1:0", Agent: "127.0.0.1:0",
				KBRoot:      "../../examples/kb",
				AgentArgs:   append(scriptedArgs(srv), "-drain-timeout", tc.drainTimeout),
				GatewayArgs: []string{"-drain-timeout", tc.drainTimeout}},
				slog.New(slog.NewTextHandler(io.Discard, nil)))
			if err != nil {
				t.Fatal(err)
			}
			c, _ := dialGateway(t, sys.Gateway.String())

			type result struct {
				r   *quarryv1.QueryResponse
				err error
			}
			answered := make(chan result, 1)
			go func() {
				qctx, qcancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer qcancel()
				r, err := c.Query(qctx, &quarryv1.QueryRequest{KnowledgeBase: "platform", Query: question})
				answered <- result{r, err}
			}()
			select {
			case <-srv.Received():
			case <-time.After(10 * time.Second):
				t.Fatal("the question did not reach the LLM")
			}
			stopped := time.Now()
			cancel() // SIGTERM to the three services

			res := <-answered
			if tc.wantAnswer {
				if res.err != nil {
					t.Fatalf("the answer in flight was lost to the shutdown: %v", res.err)
				}
				if res.r.GetTier() != quarryv1.Tier_TIER_SINGLE_LLM || res.r.GetDegraded() || !strings.Contains(res.r.GetAnswer(), "rollback plan") {
					t.Fatalf("answer: tier %v, degraded %v, %q; want the model's T3 answer", res.r.GetTier(), res.r.GetDegraded(), res.r.GetAnswer())
				}
			} else if res.err == nil && !res.r.GetDegraded() {
				t.Fatalf("the answer arrived whole although the drain timeout (%s) is shorter than the model's %s", tc.drainTimeout, thinking)
			}
			select {
			case err := <-sys.done:
				if err != nil {
					t.Fatalf("services ended with %v", err)
				}
			case <-time.After(15 * time.Second):
				t.Fatal("services did not stop within 15 s of the shutdown")
			}
			t.Logf("shutdown to stop: %s", time.Since(stopped).Round(time.Millisecond))
		})
	}
}

// An agentic answer in flight at the shutdown still reads what its tools ask for: the
// services stop in the order of their calls (gateway, agent, then search), not all at
// once, which left the agent's read_document to a search service already stopped and
// the answer without the document, unflagged.
func TestShutdownLetsAnAnswerInFlightUseItsTools(t *testing.T) {
	const doc = "observability/alerts/alert-routing.md"
	srv := llmtest.New(t,
		llmtest.Turn{ToolCalls: []llmtest.Call{{Name: "read_document", Arguments: `{"path":"` + doc + `"}`}}, Delay: 1500 * time.Millisecond},
		llmtest.Turn{Content: "Alerts page the owning team's on-call engineer."},
	)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sys, err := start(ctx, upConfig{Gateway: "127.0.0.1:0", Search: "127.0.0.1:0", Agent: "127.0.0.1:0",
		KBRoot: "../../examples/kb", AgentArgs: scriptedArgs(srv)}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	c, _ := dialGateway(t, sys.Gateway.String())
	answered := make(chan *quarryv1.QueryResponse, 1)
	go func() {
		qctx, qcancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer qcancel()
		r, err := c.Query(qctx, &quarryv1.QueryRequest{KnowledgeBase: "platform", Query: "What is our on-call process?"})
		if err != nil {
			t.Errorf("the answer in flight was lost to the shutdown: %v", err)
		}
		answered <- r
	}()
	select {
	case <-srv.Received():
	case <-time.After(10 * time.Second):
		t.Fatal("the question did not reach the LLM")
	}
	cancel() // SIGTERM while the model thinks about which document to read

	r := <-answered
	if r.GetTier() != quarryv1.Tier_TIER_AGENTIC || r.GetDegraded() {
		t.Fatalf("answer: tier %v, degraded %v (%s); want the model's AGENTIC answer", r.GetTier(), r.GetDegraded(), r.GetDegradedReason())
	}
	var tool string
	for _, req := range srv.Requests() {
		for _, m := range req.Messages {
			if m.Role == "tool" {
				tool = m.Text()
			}
		}
	}
	if tool == "" || strings.HasPrefix(tool, "error:") || !strings.Contains(tool, doc) {
		t.Errorf("the model's read_document got %.200q; want the document", tool)
	}
	select {
	case err := <-sys.done:
		if err != nil {
			t.Fatalf("services ended with %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("services did not stop within 20 s of the shutdown")
	}
}
