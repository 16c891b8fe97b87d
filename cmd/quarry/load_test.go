package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	quarryv1 "github.com/quarry-router/quarry/gen/quarry/v1"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// leakSlack is how many more goroutines than before a load run may linger after it:
// background work that comes and goes (cache janitor ticks, gRPC keepalives).
const leakSlack = 10

// TestLoadMixedWorkload runs the load generator briefly against the example KB: 32
// concurrent callers, repeated, reworded and new questions and echoes, zero errors.
// "quarry bench" runs the long version (64 callers, 30 s, a 5,000-file KB).
func TestLoadMixedWorkload(t *testing.T) {
	_, gw, _ := startSystem(t, "../../examples/kb")
	qs, err := readQuestions("../../examples/questions.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	mix, err := parseMix("repeat=0.5,reword=0.2,new=0.25,echo=0.05")
	if err != nil {
		t.Fatal(err)
	}
	// One call first, so that the connections the run uses exist before the count.
	if _, err := healthpb.NewHealthClient(gw).Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	goroutines := runtime.NumGoroutine()
	rep, err := runLoad(context.Background(), quarryv1.NewQueryServiceClient(gw), healthpb.NewHealthClient(gw),
		loadConfig{Concurrency: 32, Duration: 3 * time.Second, Warmup: 500 * time.Millisecond, KB: "platform", Mix: mix, Questions: qs, Timeout: 10 * time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Errors != 0 {
		t.Fatalf("%d of %d calls failed: %v", rep.Errors, rep.Calls, rep.ErrorsBy)
	}
	for _, tier := range []string{"EXACT_CACHE", "FUZZY_CACHE", "ECHO"} {
		if rep.ByTier[tier].N == 0 {
			t.Errorf("no %s calls in the mix: %v", tier, rep.ByTier)
		}
	}
	// Every flight, stream and timer of the run ends with it: a goroutine left per call
	// (or per flight) would show here as hundreds more.
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > goroutines+leakSlack && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > goroutines+leakSlack {
		buf := make([]byte, 1<<20)
		t.Errorf("%d goroutines before the run, %d ten seconds after it:\n%s", goroutines, n, buf[:runtime.Stack(buf, true)])
	}
	t.Logf("%d calls, %.0f qps, T0 p99 %.2f ms, echo p99 %.2f ms", rep.Calls, rep.QPS, rep.ByTier["EXACT_CACHE"].P99, rep.ByTier["ECHO"].P99)
}

// TestBenchCommandReportsTiersAndMemory runs "quarry bench" on a small embedded system:
// no errors, every kind of call measured, and the memory report a leak hunt needs.
func TestBenchCommandReportsTiersAndMemory(t *testing.T) {
	var out, progress bytes.Buffer
	err := benchCmd(context.Background(), []string{"-files", "200", "-c", "4", "-d", "1s", "-warmup", "300ms", "-json"}, &out, &progress)
	if err != nil {
		t.Fatalf("bench: %v\n%s", err, progress.String())
	}
	var rep struct {
		Calls  int64                     `json:"calls"`
		Errors int64                     `json:"errors"`
		ByTier map[string]latencySummary `json:"by_tier"`
		Memory *memoryReport             `json:"memory"`
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("report is not JSON: %v\n%s", err, out.String())
	}
	if rep.Calls == 0 || rep.Errors != 0 {
		t.Errorf("%d calls, %d errors", rep.Calls, rep.Errors)
	}
	if rep.ByTier["EXACT_CACHE"].N == 0 || rep.ByTier["ECHO"].N == 0 {
		t.Errorf("tiers measured: %v", rep.ByTier)
	}
	if m := rep.Memory; m == nil || m.RSSStartKiB <= 0 || m.RSSEndKiB <= 0 || m.HeapEndKiB <= 0 {
		t.Errorf("memory report %+v, want RSS and live heap at the start and the end", m)
	}
}

// slowGateway answers every query after a pause, so that several callers' calls are
// in flight at once.
type slowGateway struct {
	quarryv1.QueryServiceClient
	pause time.Duration
}

func (g slowGateway) Query(ctx context.Context, _ *quarryv1.QueryRequest, _ ...grpc.CallOption) (*quarryv1.QueryResponse, error) {
	select {
	case <-time.After(g.pause):
		return &quarryv1.QueryResponse{Tier: quarryv1.Tier_TIER_DIRECT}, nil
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
}

// TestLoadCountMeasuresEveryCall: "bench -n N" measured fewer than N calls: the caller
// that spent the budget's last share cancelled the run, and the other callers' calls in
// flight (their shares taken) were dropped, the slowest among them. A call begun in the
// warm-up and ended after it counted with no share taken.
func TestLoadCountMeasuresEveryCall(t *testing.T) {
	for _, warmup := range []time.Duration{0, 30 * time.Millisecond} {
		t.Run(fmt.Sprintf("warmup %v", warmup), func(t *testing.T) {
			const n = 200
			rep, err := runLoad(context.Background(), slowGateway{pause: 3 * time.Millisecond}, nil,
				loadConfig{Concurrency: 16, Count: n, Warmup: warmup, KB: "k", Mix: map[string]float64{"new": 1}, Questions: []string{"q"}, Timeout: 10 * time.Second}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if rep.Calls != n || rep.Errors != 0 || rep.ByTier["DIRECT"].N != n {
				t.Errorf("-n %d measured %d calls (%d errors, %d DIRECT), want %d and no errors", n, rep.Calls, rep.Errors, rep.ByTier["DIRECT"].N, n)
			}
		})
	}
}

// TestLoadStoppedInWarmUp: a run stopped before its warm-up ended (Ctrl-C) reported an
// elapsed time counted from 1970, and its warm-up timer called OnMeasuring after the run
// had returned.
func TestLoadStoppedInWarmUp(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	var measuring atomic.Int32
	rep, err := runLoad(ctx, slowGateway{pause: time.Millisecond}, nil,
		loadConfig{Concurrency: 2, Duration: time.Second, Warmup: 200 * time.Millisecond, KB: "k", Mix: map[string]float64{"new": 1},
			Questions: []string{"q"}, Timeout: time.Second, OnMeasuring: func() { measuring.Add(1) }}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Calls != 0 || rep.Elapsed != 0 {
		t.Errorf("stopped in the warm-up: %d calls in %v, want none in 0s", rep.Calls, rep.Elapsed)
	}
	time.Sleep(300 * time.Millisecond) // past the warm-up's end
	if n := measuring.Load(); n != 0 {
		t.Errorf("OnMeasuring called %d times after a run stopped in its warm-up", n)
	}
}

// TestBenchInterruptedExits130: Ctrl-C during "quarry bench" against a running gateway
// printed the report so far and exited 0, as a finished run does.
func TestBenchInterruptedExits130(t *testing.T) {
	addr := startScripted(t, &scriptedQueryService{deltas: []string{"Rotate it."}})
	t.Setenv("QUARRY_API_KEY", testAPIKey)
	q := filepath.Join(t.TempDir(), "q.jsonl")
	mustWrite(t, q, `{"query":"how do I rotate the key?"}`+"\n")
	ctx, cancel := context.WithCancel(context.Background())
	defer time.AfterFunc(300*time.Millisecond, cancel).Stop() // as the first SIGINT does
	var out, errOut bytes.Buffer
	code := run(ctx, []string{"bench", "-addr", addr, "-questions", q, "-d", "1h", "-warmup", "0", "-c", "2", "-mix", "new=1"}, &out, &errOut)
	if code != 130 || !strings.Contains(errOut.String(), "quarry bench: interrupted") {
		t.Errorf("exit %d, stderr %.300q; want 130 and \"quarry bench: interrupted\"", code, errOut.String())
	}
}
