package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	gatewayapp "github.com/quarry-router/quarry/gateway/app"
	"github.com/quarry-router/quarry/gateway/cache"
	"github.com/quarry-router/quarry/gateway/route"
	quarryv1 "github.com/quarry-router/quarry/gen/quarry/v1"
	"github.com/quarry-router/quarry/platform/grpcx"
	"github.com/quarry-router/quarry/services/agent/llm"
	"github.com/quarry-router/quarry/services/agent/llm/llmtest"
	"github.com/quarry-router/quarry/services/agent/loop"
)

// llmDelay is the scripted model's fixed thinking time before it streams its answer.
const llmDelay = 10 * time.Millisecond

// noStore is a cache that never hits, so that every question runs the whole miss path
// down to the LLM.
type noStore struct{}

func (noStore) Get(context.Context, string, uint64, string) (*cache.Entry, error) {
	return nil, cache.ErrMiss
}

func (noStore) Similar(context.Context, string, uint64, []string) (*cache.Entry, float64, error) {
	return nil, 0, cache.ErrMiss
}

func (noStore) Put(context.Context, *cache.Entry) error { return nil }

// BenchmarkLLMOverhead measures what Quarry adds around an LLM call (SPEC §5: < 5 ms):
// a T3 question asked through the gateway over gRPC — validation, cache lookups, the
// search's Resolve, the agent's prompt (manifest cached per generation), the streamed
// call to a scripted OpenAI-compatible server that starts answering llmDelay after the
// request arrived, and the answer's way back. It reports two figures per call:
//
//   - end to end minus llmDelay, the SPEC's definition, which also charges Quarry with
//     the HTTP call any client of the model makes, and the scripted server's writing
//     of its chunks (its reading of the request counts against the delay, which ends
//     on time: llmtest spins its last 2 ms, where a timer alone woke up to a
//     millisecond late, later the longer the request took to read);
//   - end to end minus the time the server spent on the request (arrival to last byte),
//     i.e. everything outside the model.
//
// The baseline is the same chat call made directly with the provider, alternated with
// the gateway's call (which goes first alternates too), so that both see the machine
// in the same moments: "added" compares their percentiles.
//
//	go test -run '^$' -bench LLMOverhead -benchtime 2000x ./cmd/quarry
func BenchmarkLLMOverhead(b *testing.B) {
	srv := llmtest.New(b)
	srv.Repeat(llmtest.Turn{Content: "Run the smoke tests, then check the error budget (`deploy/_index.md`).", Chunks: 4, Delay: llmDelay})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sys, err := start(ctx, upConfig{
		Gateway: "127.0.0.1:0", Search: "127.0.0.1:0", Agent: "127.0.0.1:0", KBRoot: "../../examples/kb",
		AgentArgs:   []string{"-llm-base-url", srv.BaseURL(), "-llm-model", "scripted-model"},
		GatewayOpts: []gatewayapp.Option{gatewayapp.WithStore(noStore{})},
	}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		b.Fatal(err)
	}
	conn, err := grpcx.Dial(sys.Gateway.String())
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	gw := quarryv1.NewQueryServiceClient(conn)
	const question = "What should I check before a production deploy?"

	cfg := llm.DefaultConfig()
	cfg.BaseURL, cfg.Model = srv.BaseURL(), "scripted-model"
	direct := llm.New(cfg)
	req := loop.ChatRequest{MaxTokens: 1024, Temperature: 0.3, Messages: []loop.Message{
		{Role: loop.RoleSystem, Content: "Answer from the documents."}, {Role: loop.RoleUser, Content: question},
	}}
	directCall := func() error {
		_, err := direct.Chat(ctx, req, func(string) error { return nil })
		return err
	}

	// The gateway keeps a finished answer joinable for a moment (route.FlightLinger), so
	// the same question asked again at once takes that answer without an LLM call. Each
	// gateway call asks the next of the example questions that route to T3, and a
	// question comes round again only once its last answer is gone (waiting, untimed,
	// if needed).
	questions := t3Questions(b, ctx, gw, question)
	asked := 0
	last := map[string]time.Time{} // when each question was last answered
	for _, q := range questions {
		last[q] = time.Now() // t3Questions has just asked it
	}
	gatewayCall := func() error {
		q := questions[asked%len(questions)]
		asked++
		defer func() { last[q] = time.Now() }()
		qctx, qcancel := context.WithTimeout(ctx, 10*time.Second)
		defer qcancel()
		r, err := gw.Query(qctx, &quarryv1.QueryRequest{KnowledgeBase: "platform", Query: q})
		switch {
		case err != nil:
			return err
		case r.Tier != quarryv1.Tier_TIER_SINGLE_LLM || r.FromCache || r.Degraded:
			return fmt.Errorf("tier %v from cache %v degraded %v (%s): want a fresh T3 answer", r.Tier, r.FromCache, r.Degraded, r.DegradedReason)
		}
		return nil
	}
	nextReady := func() {
		q := questions[asked%len(questions)]
		time.Sleep(time.Until(last[q].Add(route.FlightLinger + 10*time.Millisecond)))
	}

	var base, f llmSeries
	srv.Reset()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		nextReady()
		b.StartTimer()
		calls := []func(){
			func() { base.add(b, srv, directCall) },
			func() { f.add(b, srv, gatewayCall) },
		}
		if i%2 == 1 {
			calls[0], calls[1] = calls[1], calls[0]
		}
		for _, call := range calls {
			call()
		}
	}
	b.StopTimer()
	g, d := f.figures(), base.figures()
	fmt.Printf("LLM overhead, end to end minus the model's fixed %v: p50 %.2f ms, p99 %.2f ms (bar < 5 ms)\n", llmDelay, ms(g.minusDelay50), ms(g.minusDelay99))
	fmt.Printf("LLM overhead, end to end minus the model server's time:  p50 %.2f ms, p99 %.2f ms\n", ms(g.outside50), ms(g.outside99))
	fmt.Printf("baseline, a direct provider call (alternated), the same two ways: p50 %.2f / %.2f ms, p99 %.2f / %.2f ms\n",
		ms(d.minusDelay50), ms(d.outside50), ms(d.minusDelay99), ms(d.outside99))
	b.ReportMetric(ms(g.minusDelay50), "overhead-p50-ms")
	b.ReportMetric(ms(g.minusDelay99), "overhead-p99-ms")
	b.ReportMetric(ms(d.minusDelay99), "direct-p99-ms")
	// Two readings of the bar: everything beyond the model's own 10 ms (which includes
	// the HTTP call any client of the model pays), and what Quarry adds to a direct
	// call of the same provider in the same moments.
	reportBar(b, "LLM overhead p50 (end to end minus the model)", b.N, g.minusDelay50, 5*time.Millisecond)
	reportBar(b, "LLM overhead p99 (end to end minus the model)", b.N, g.minusDelay99, 5*time.Millisecond)
	reportBar(b, "LLM overhead p99 added to a direct provider call", b.N, g.minusDelay99-d.minusDelay99, 5*time.Millisecond)
}

// t3Questions returns the questions the gateway answers with a fresh T3 answer:
// question itself and the example questions (examples/questions.jsonl) that route there.
func t3Questions(b *testing.B, ctx context.Context, gw quarryv1.QueryServiceClient, question string) []string {
	examples, err := readQuestions("../../examples/questions.jsonl")
	if err != nil {
		b.Fatal(err)
	}
	var out []string
	for _, q := range append([]string{question}, examples...) {
		qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		r, err := gw.Query(qctx, &quarryv1.QueryRequest{KnowledgeBase: "platform", Query: q})
		cancel()
		if err != nil {
			b.Fatal(err)
		}
		if r.Tier == quarryv1.Tier_TIER_SINGLE_LLM && !r.FromCache && !r.Degraded {
			out = append(out, q)
		}
	}
	if len(out) < 2 {
		b.Fatalf("%d of the example questions route to a fresh T3 answer, want several", len(out))
	}
	return out
}

// llmFigures are the percentiles of a call's latency beyond the model's.
type llmFigures struct {
	minusDelay50, minusDelay99 time.Duration // end to end − llmDelay
	outside50, outside99       time.Duration // end to end − the server's time on the request
}

// llmSeries collects one kind of call's latencies beyond the model's.
type llmSeries struct{ minusDelay, outside []time.Duration }

// add times op, which makes exactly one LLM request to srv.
func (s *llmSeries) add(b *testing.B, srv *llmtest.Server, op func() error) {
	t := time.Now()
	if err := op(); err != nil {
		b.Fatal(err)
	}
	took := time.Since(t)
	b.StopTimer()
	defer b.StartTimer()
	reqs := srv.Requests()
	if len(reqs) != 1 {
		b.Fatalf("%d LLM requests for one call, want 1", len(reqs))
	}
	s.minusDelay = append(s.minusDelay, took-llmDelay)
	s.outside = append(s.outside, took-reqs[0].ServerTime())
	srv.Reset()
}

func (s *llmSeries) figures() llmFigures {
	return llmFigures{
		minusDelay50: percentile(s.minusDelay, 0.50), minusDelay99: percentile(s.minusDelay, 0.99),
		outside50: percentile(s.outside, 0.50), outside99: percentile(s.outside, 0.99),
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
