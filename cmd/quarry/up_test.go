package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	quarryv1 "github.com/quarry-router/quarry/gen/quarry/v1"
	"github.com/quarry-router/quarry/platform/auth"
	"github.com/quarry-router/quarry/platform/grpcx"
	"github.com/quarry-router/quarry/platform/telemetry/telemetrytest"
	"github.com/quarry-router/quarry/services/agent/llm"
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

// TestUpServesKnowledgeBasesThatAreLinks: the search service serves a knowledge base
// that is a link to a folder (git-sync publishes each checkout so), but "up" copied
// -kb-root with os.CopyFS, which copies the link itself: a relative link pointed nowhere
// from the temporary copy and up exited 1 with "no knowledge base found under -kb-root
// /tmp/quarry-up-…"; an absolute one let the write side change the original folder.
func TestUpServesKnowledgeBasesThatAreLinks(t *testing.T) {
	dir := t.TempDir()
	if err := os.CopyFS(filepath.Join(dir, "checkouts", "platform"), os.DirFS("../../examples/kb/platform")); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, filepath.Join(dir, "checkouts", "team", "rotate.md"), "# Rotating the frobnicator\nRotate the frobnicator weekly.\n")
	root := filepath.Join(dir, "root")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join("..", "checkouts", "platform"), filepath.Join(root, "platform")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(dir, "checkouts", "team"), filepath.Join(root, "team")); err != nil {
		t.Fatal(err)
	}

	copied := t.TempDir()
	if err := copyKBRoot(copied, root); err != nil {
		t.Fatal(err)
	}
	for _, kb := range []string{"platform", "team"} {
		if fi, err := os.Lstat(filepath.Join(copied, kb)); err != nil || !fi.IsDir() {
			t.Errorf("the copy's %s is not a folder (%v, %v): the copy serves or writes the original", kb, fi, err)
		}
	}

	code, out := runUntil(t, []string{"up", "-kb-root", root, "-listen", "127.0.0.1:0", "-search-listen", "127.0.0.1:0", "-agent-listen", "127.0.0.1:0"}, "Serving; press Ctrl-C")
	if code != 0 || !strings.Contains(out, "EXACT_CACHE") {
		t.Errorf("quarry up -kb-root with linked knowledge bases: exit %d, want the demo and 0:\n%s", code, out)
	}
}

// TestUpDemoWithAPIKeys: every flag of the gateway is also QUARRY_GATEWAY_<FLAG>, which
// "up" passes on, so QUARRY_GATEWAY_AUTH_KEYS makes its gateway want a key. The demo
// asked without one and UNAUTHENTICATED stopped the system just started (exit 1). It
// now presents $QUARRY_API_KEY, as "quarry query" does, and without a key it skips the
// demo and serves.
func TestUpDemoWithAPIKeys(t *testing.T) {
	key := keyPrefix + "demo-test-key"
	keys := filepath.Join(t.TempDir(), "keys.json")
	b, err := json.Marshal([]auth.Key{{Name: "demo", SHA256: auth.HashKey(key), KnowledgeBases: []string{"*"}}})
	if err != nil {
		t.Fatal(err)
	}
	mustWrite(t, keys, string(b))
	t.Setenv("QUARRY_GATEWAY_AUTH_KEYS", keys)
	args := []string{"up", "-kb-root", "../../examples/kb", "-listen", "127.0.0.1:0", "-search-listen", "127.0.0.1:0", "-agent-listen", "127.0.0.1:0"}

	t.Run("without a key", func(t *testing.T) {
		t.Setenv("QUARRY_API_KEY", "")
		code, out := runUntil(t, args, "Serving; press Ctrl-C")
		if code != 0 || !strings.Contains(out, "no demo: the gateway wants an API key") {
			t.Errorf("exit %d, want the demo skipped and 0:\n%s", code, out)
		}
	})
	t.Run("with QUARRY_API_KEY", func(t *testing.T) {
		t.Setenv("QUARRY_API_KEY", key)
		code, out := runUntil(t, args, "Serving; press Ctrl-C")
		if code != 0 || !strings.Contains(out, "EXACT_CACHE") {
			t.Errorf("exit %d, want the demo and 0:\n%s", code, out)
		}
	})
}

// TestUpOnAPortInUseSaysWhy: the likeliest cause is an earlier "quarry up" still running
// ("go run ... up &" and "kill $!" stop the go tool, not the program it started), and
// the error said only "address already in use". Run in a child process: up installs the
// process's telemetry providers, which the tests in this one share.
func TestUpOnAPortInUseSaysWhy(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^TestQuarryCommand$", "--", "up", "-kb-root", "../../examples/kb",
		"-listen", taken.Addr().String(), "-search-listen", "127.0.0.1:0", "-agent-listen", "127.0.0.1:0", "-demo=false")
	cmd.Env = append(os.Environ(), quarryCommandEnv+"=1")
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 || !strings.Contains(string(out), "another quarry up still running?") {
		t.Fatalf("quarry up on a port in use: %v\n%s\nwant exit 1 naming the likely cause", err, out)
	}
}

// TestBackendsNameWhatRuns: "up" passes the services' environment on, so
// QUARRY_GATEWAY_CACHE_BACKEND=redis or QUARRY_SEARCH_ENGINE=meilisearch change what
// runs; the banner said "embedded defaults: in-process cache, Bleve BM25" whatever ran.
func TestBackendsNameWhatRuns(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		want string
	}{
		{"the defaults", nil, "embedded defaults: in-process cache, Bleve BM25, no LLM"},
		{"a Redis cache", map[string]string{"QUARRY_GATEWAY_CACHE_BACKEND": "redis", "QUARRY_GATEWAY_REDIS_ADDR": "127.0.0.1:18379"},
			"Redis cache at 127.0.0.1:18379, Bleve BM25, no LLM"},
		{"Meilisearch", map[string]string{"QUARRY_SEARCH_ENGINE": "meilisearch", "QUARRY_SEARCH_MEILI_URL": "http://meili:7700"},
			"in-process cache, Meilisearch at http://meili:7700, no LLM"},
		{"the memory backend named", map[string]string{"QUARRY_GATEWAY_CACHE_BACKEND": "memory"}, "embedded defaults: in-process cache, Bleve BM25, no LLM"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, k := range []string{"QUARRY_GATEWAY_CACHE_BACKEND", "QUARRY_GATEWAY_REDIS_ADDR", "QUARRY_SEARCH_ENGINE",
				"QUARRY_SEARCH_MEILI_URL", "QUARRY_AGENT_LLM_BASE_URL", "QUARRY_AGENT_LLM_MODEL"} {
				t.Setenv(k, tc.env[k])
			}
			if got := backends(llm.Config{}); got != tc.want {
				t.Errorf("backends() = %q, want %q", got, tc.want)
			}
		})
	}
}
