package main

import (
	"bytes"
	"context"
	"flag"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	quarryv1 "github.com/quarry-router/quarry/gen/quarry/v1"
	"github.com/quarry-router/quarry/platform/grpcx"
	"github.com/quarry-router/quarry/platform/telemetry/telemetrytest"
	"google.golang.org/grpc"
)

// TestUpServesMetrics runs "quarry up -metrics-addr" as the command runs, in a process
// of its own (package-level instruments bind to the first meter provider a process
// sets, so in this test process they would report elsewhere), asks its gateway a
// question and scrapes what that left: the gateway's and the search service's metrics,
// from the one process that runs all three. SIGTERM then stops it with status 0.
func TestUpServesMetrics(t *testing.T) {
	gateway, metrics := telemetrytest.FreeAddr(t), telemetrytest.FreeAddr(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestQuarryCommand$", "--", "up", "-listen", gateway,
		"-search-listen", "127.0.0.1:0", "-agent-listen", "127.0.0.1:0", "-kb-root", "../../examples/kb", "-demo=false", "-metrics-addr", metrics)
	cmd.Env = append(os.Environ(), quarryCommandEnv+"=1")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("quarry up after SIGTERM: %v\n%s", err, out.String())
			}
		case <-time.After(15 * time.Second):
			cmd.Process.Kill()
			t.Errorf("quarry up did not stop within 15 s of SIGTERM")
		}
	}()

	conn, err := grpcx.Dial(gateway)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// WaitForReady: the gateway may not be up yet.
	if _, err := quarryv1.NewQueryServiceClient(conn).Query(ctx, &quarryv1.QueryRequest{KnowledgeBase: "platform", Query: "how do I rotate the JWT signing key?"}, grpc.WaitForReady(true)); err != nil {
		t.Fatal(err)
	}
	body, err := telemetrytest.Scrape("http://" + metrics + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"\nquarry_gateway_queries_total", "\nquarry_search_backend_duration_milliseconds"} {
		if !strings.Contains(body, want) {
			t.Errorf("GET /metrics has no %s:\n%.800s", want[1:], body)
		}
	}
}

const quarryCommandEnv = "QUARRY_COMMAND_PROCESS"

// TestQuarryCommand is the quarry command, run in a child process by the tests that
// need one: the arguments after "--" are the command line.
func TestQuarryCommand(t *testing.T) {
	if os.Getenv(quarryCommandEnv) != "1" {
		t.Skip("a child process of other tests")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, flag.Args(), os.Stdout, os.Stderr))
}
