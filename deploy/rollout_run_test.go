package deploy

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	quarryv1 "github.com/quarry-router/quarry/gen/quarry/v1"
	"github.com/quarry-router/quarry/platform/telemetry/telemetrytest"
	"github.com/quarry-router/quarry/services/agent/llm/llmtest"
	"google.golang.org/grpc"
)

// checkReplicas plays what more than one pod per Deployment brings, in the overlays
// that run several (prod):
//   - the gateway balances its questions over every pod of the headless search
//     Service (each pod's backend searches must grow);
//   - a second gateway answers from the cache the first one filled (Redis);
//   - a rolling restart of a search pod, taken out of the Service's DNS answer and
//     sent SIGTERM as the endpoints controller and the kubelet do, fails and degrades
//     no question asked meanwhile.
func (r *overlayRun) checkReplicas(pods []*startedPod) {
	t := r.t
	var gateways, searches []*startedPod
	for _, p := range pods {
		switch p.workload {
		case "quarry-gateway":
			gateways = append(gateways, p)
		case "quarry-search":
			searches = append(searches, p)
		}
	}
	if len(searches) < 2 {
		return
	}
	t.Logf("%d gateway and %d search pods", len(gateways), len(searches))
	questions := exampleQuestions(r)
	if r.llm != nil {
		r.llm.Reset()
		r.llm.Repeat(llmtest.Turn{Content: "Check the deploy checklist."})
	}
	conn := r.dialGateway(gateways[0].ip)
	defer conn.Close()
	const timeout = 15 * time.Second

	before := make([]int, len(searches))
	for i, sp := range searches {
		before[i] = r.backendSearches(sp)
	}
	const balanced = 8
	for _, q := range questions[:balanced] {
		if _, err := ask(conn, q, timeout); err != nil {
			t.Fatalf("Query(%q) through %s: %v", q, gateways[0].name, err)
		}
	}
	for i, sp := range searches {
		if n := r.backendSearches(sp) - before[i]; n == 0 {
			t.Errorf("%s searched nothing for %d new questions: the gateway does not balance over the headless Service's pods", sp.name, balanced)
		} else {
			t.Logf("%s: %d backend searches for %d questions", sp.name, n, balanced)
		}
	}

	if len(gateways) > 1 {
		other := r.dialGateway(gateways[1].ip)
		defer other.Close()
		resp, err := ask(other, questions[0], timeout)
		if err != nil {
			t.Fatalf("Query(%q) through %s: %v", questions[0], gateways[1].name, err)
		}
		if resp.GetTier() != quarryv1.Tier_TIER_EXACT_CACHE || !resp.GetFromCache() {
			t.Errorf("%s: a question %s answered came back %v (from cache %v), want the exact cache both share", gateways[1].name, gateways[0].name, resp.GetTier(), resp.GetFromCache())
		}
	}

	// The rolling restart, with questions going on throughout.
	victim := searches[0]
	var rest []string
	for _, sp := range searches[1:] {
		rest = append(rest, sp.ip)
	}
	var asked atomic.Int64
	problems := make(chan string, len(questions))
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for _, q := range questions[balanced:] {
			select {
			case <-stop:
				return
			default:
			}
			resp, err := ask(conn, q, timeout)
			switch {
			case err != nil:
				problems <- fmt.Sprintf("%q: %v", q, err)
			case resp.GetDegraded():
				problems <- fmt.Sprintf("%q: degraded (%s)", q, resp.GetDegradedReason())
			}
			asked.Add(1)
		}
	}()
	waitAsked := func(n int64) {
		for deadline := time.Now().Add(30 * time.Second); asked.Load() < n && time.Now().Before(deadline); {
			select {
			case <-done:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
	waitAsked(3)
	r.net.setPods("quarry-search", rest)
	victim.p.stop(t, victim.grace())
	victim.stopped = true
	during := asked.Load()
	waitAsked(during + 10)
	close(stop)
	<-done
	close(problems)
	for p := range problems {
		t.Errorf("during the rolling restart of %s: %s", victim.name, p)
	}
	t.Logf("%d questions answered through the rolling restart of %s (%d after it began)", asked.Load(), victim.name, asked.Load()-during)
	if asked.Load()-during < 10 {
		t.Errorf("only %d questions were answered after %s stopped", asked.Load()-during, victim.name)
	}
}

// checkDrainWithAnswerInFlight sends SIGTERM to the gateway pod a caller's connection
// is on and to every agent pod while an LLM answer is under way, as a rollout of both
// would: each drains (the gateway through its grace, the agents within their timeout),
// so the answer still reaches the caller, whole, and each pod exits 0 within its
// termination grace.
func (r *overlayRun) checkDrainWithAnswerInFlight(pods []*startedPod) {
	t := r.t
	var gateway *startedPod
	var agents []*startedPod
	for _, p := range pods {
		switch {
		case p.stopped:
		case p.workload == "quarry-gateway" && gateway == nil:
			gateway = p
		case p.workload == "quarry-agent":
			agents = append(agents, p)
		}
	}
	if gateway == nil || len(agents) == 0 {
		t.Fatal("no gateway or agent pod left running")
	}
	conn := r.dialGateway(gateway.ip)
	defer conn.Close()
	const answer = "Drain first, then stop."
	r.llm.Reset()
	r.llm.Repeat(llmtest.Turn{Content: answer, Delay: 1500 * time.Millisecond})
	for len(r.llm.Received()) > 0 { // requests of the earlier questions
		<-r.llm.Received()
	}
	type result struct {
		resp *quarryv1.QueryResponse
		err  error
	}
	questions := exampleQuestions(r)
	slices.Reverse(questions) // the other checks take theirs from the front
	for _, q := range questions[:10] {
		answered := make(chan result, 1)
		go func() {
			resp, err := ask(conn, q, 30*time.Second)
			answered <- result{resp, err}
		}()
		select {
		case res := <-answered: // a tier below the model answered: the next question
			if res.err != nil {
				t.Fatalf("Query(%q): %v", q, res.err)
			}
			continue
		case <-r.llm.Received():
		}
		var wg sync.WaitGroup
		for _, p := range append([]*startedPod{gateway}, agents...) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				p.p.stop(t, p.grace())
				p.stopped = true
			}()
		}
		res := <-answered
		wg.Wait()
		switch {
		case res.err != nil:
			t.Errorf("Query(%q), its LLM answer under way when the gateway and agents got SIGTERM: %v", q, res.err)
		case res.resp.GetDegraded() || !strings.Contains(res.resp.GetAnswer(), answer):
			t.Errorf("Query(%q) under a drain: tier %v, degraded %v (%s); want the model's answer", q, res.resp.GetTier(), res.resp.GetDegraded(), res.resp.GetDegradedReason())
		}
		return
	}
	t.Fatal("none of 10 new questions reached the model")
}

// ask puts q about the example knowledge base to the gateway on conn, within timeout.
func ask(conn *grpc.ClientConn, q string, timeout time.Duration) (*quarryv1.QueryResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return quarryv1.NewQueryServiceClient(conn).Query(ctx, &quarryv1.QueryRequest{KnowledgeBase: exampleKB, Query: q})
}

// backendSearches is how many searches a search pod has sent its engine, from its
// Prometheus metrics (quarry_search_backend_duration, ops search and search_many).
func (r *overlayRun) backendSearches(sp *startedPod) int {
	t := r.t
	t.Helper()
	port := r.templates[sp.workload].Annotations["prometheus.io/port"]
	body, err := telemetrytest.Scrape("http://" + net.JoinHostPort(sp.ip, port) + "/metrics")
	if err != nil {
		t.Fatalf("%s: %v", sp.name, err)
	}
	n := 0
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "quarry_search_backend_duration_milliseconds_count{") || !strings.Contains(line, `quarry_op="search`) {
			continue
		}
		fields := strings.Fields(line)
		v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err != nil {
			t.Fatalf("%s: metrics line %q: %v", sp.name, line, err)
		}
		n += int(v)
	}
	return n
}

// exampleQuestions are the example knowledge base's labelled questions, new to the
// gateways' cache: askThrough asks others.
func exampleQuestions(r *overlayRun) []string {
	t := r.t
	f, err := os.Open("../examples/questions.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var q struct{ Query string }
		if err := json.Unmarshal(sc.Bytes(), &q); err != nil {
			t.Fatalf("questions.jsonl: %v", err)
		}
		switch q.Query {
		case directQuestion, oodQuestion, llmQuestion, unsampledQuestion, "":
		default:
			out = append(out, q.Query)
		}
	}
	if len(out) < 30 {
		t.Fatalf("questions.jsonl holds %d questions, want 30 or more", len(out))
	}
	return out
}
