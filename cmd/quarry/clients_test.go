package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	quarryv1 "github.com/quarry-router/quarry/gen/quarry/v1"
	"github.com/quarry-router/quarry/platform/grpcx/tlstest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// The example clients in clients/ prove the promise made to platform teams: a stub
// generated from proto/ is all it takes to call Quarry. These tests run them as a user
// would, against a running Quarry over a real socket, and read what they print.
// `make client-deps` installs what they need; a missing runtime fails the test with the
// command to run, it never skips it.

const clientsDir = "../../clients"

// exampleClient is one example client, ready to run.
type exampleClient struct {
	lang string
	cmd  []string // the command that runs the client, before its own arguments
	err  error    // why the client cannot run on this machine
}

var exampleClients = sync.OnceValue(func() []exampleClient {
	return []exampleClient{pythonClient(), nodeClient()}
})

// pythonClient finds an interpreter with the grpcio and protobuf modules: Debian's
// python3-grpcio installs for /usr/bin/python3, which need not be the python3 on PATH.
func pythonClient() exampleClient {
	c := exampleClient{lang: "python"}
	candidates := []string{os.Getenv("QUARRY_PYTHON"), "python3", "/usr/bin/python3"}
	for _, py := range candidates {
		if py == "" {
			continue
		}
		if _, err := exec.LookPath(py); err != nil {
			continue
		}
		if exec.Command(py, "-c", "import grpc, google.protobuf").Run() == nil {
			c.cmd = []string{py, filepath.Join(clientsDir, "python", "quarry_client.py")}
			return c
		}
	}
	c.err = errors.New("no python3 with the grpcio and protobuf modules (tried $QUARRY_PYTHON, python3, /usr/bin/python3): run `make client-deps`")
	return c
}

// nodeClient compiles the TypeScript client, which also type-checks the generated stubs
// against the pinned Connect-ES runtime.
func nodeClient() exampleClient {
	c := exampleClient{lang: "node"}
	dir := filepath.Join(clientsDir, "node")
	node, err := exec.LookPath("node")
	if err != nil {
		c.err = errors.New("node not found: the TypeScript client needs Node.js >= 20 and npm (https://nodejs.org), then `make client-deps`")
		return c
	}
	tsc := filepath.Join(dir, "node_modules", "typescript", "bin", "tsc")
	if _, err := os.Stat(tsc); err != nil {
		c.err = errors.New("clients/node/node_modules is missing: run `make client-deps` (npm ci in clients/node)")
		return c
	}
	if out, err := exec.Command(node, tsc, "-p", dir).CombinedOutput(); err != nil {
		c.err = fmt.Errorf("compiling the TypeScript client: %v\n%s", err, out)
		return c
	}
	c.cmd = []string{node, filepath.Join(dir, "dist", "quarry_client.js")}
	return c
}

// forEachClient runs f once per example client, as parallel subtests named after the
// language: the clients spend most of their time starting their runtimes.
func forEachClient(t *testing.T, f func(t *testing.T, c exampleClient)) {
	for _, c := range exampleClients() {
		t.Run(c.lang, func(t *testing.T) {
			t.Parallel()
			if c.err != nil {
				t.Fatal(c.err)
			}
			f(t, c)
		})
	}
}

type clientRun struct {
	stdout, stderr string
	exit           int
}

// run runs the client with args; env adds to an environment cleared of the variables
// the clients read, so the caller's shell cannot change the outcome.
func (c exampleClient) run(t *testing.T, env []string, args ...string) clientRun {
	t.Helper()
	return c.runUntil(t, env, nil, args...)
}

// command is the client's command line with args, in this environment less the
// variables the clients read, plus env.
func (c exampleClient) command(ctx context.Context, env []string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, c.cmd[0], append(c.cmd[1:], args...)...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "QUARRY_API_KEY=") && !strings.HasPrefix(kv, "QUARRY_ADDR=") &&
			!strings.HasPrefix(kv, "GRPC_DEFAULT_SSL_ROOTS_FILE_PATH=") && !strings.HasPrefix(kv, "NODE_EXTRA_CA_CERTS=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "PYTHONDONTWRITEBYTECODE=1")
	cmd.Env = append(cmd.Env, env...)
	return cmd
}

// runUntil is run that sends the client an interrupt (Ctrl-C) once interrupt is
// closed; a nil interrupt never does.
func (c exampleClient) runUntil(t *testing.T, env []string, interrupt <-chan struct{}, args ...string) clientRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := c.command(ctx, env, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("%s client: %v", c.lang, err)
	}
	exited := make(chan struct{})
	defer close(exited)
	if interrupt != nil {
		go func() {
			select {
			case <-interrupt:
				// Leave the client a moment to print what it received.
				time.Sleep(300 * time.Millisecond)
				_ = cmd.Process.Signal(os.Interrupt)
			case <-exited:
			}
		}()
	}
	err := cmd.Wait()
	r := clientRun{stdout: stdout.String(), stderr: stderr.String()}
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		r.exit = exit.ExitCode()
	case err != nil:
		t.Fatalf("%s client: %v", c.lang, err)
	}
	if ctx.Err() != nil {
		t.Fatalf("%s client did not finish within 30s; stdout:\n%s\nstderr:\n%s", c.lang, r.stdout, r.stderr)
	}
	return r
}

var tierLine = regexp.MustCompile(`(?m)^tier: (.*?)  latency `)

// tiers returns what the client printed on its tier lines, e.g. "DIRECT" or
// "EXACT_CACHE (cached DIRECT answer)", in question order.
func tiers(stdout string) []string {
	var out []string
	for _, m := range tierLine.FindAllStringSubmatch(stdout, -1) {
		out = append(out, m[1])
	}
	return out
}

func TestExampleClientsSeeEachTierAndAnExactHitOnTheRepeat(t *testing.T) {
	questions := []struct {
		q    string
		tier *regexp.Regexp
	}{
		{"How do I rotate the JWT signing key?", regexp.MustCompile(`^DIRECT$`)},
		{"  how do i ROTATE the jwt signing key? ", regexp.MustCompile(`^EXACT_CACHE \(cached DIRECT answer\)$`)},
		{"How do I rotate Kafka consumer credentials?", regexp.MustCompile(`^OUT_OF_DOMAIN$`)},
		{"What should I check before a production deploy?", regexp.MustCompile(`^(SINGLE_LLM|AGENTIC)$`)},
	}
	args := []string{"--kb", "platform", "--explain"}
	for _, q := range questions {
		args = append(args, q.q)
	}
	forEachClient(t, func(t *testing.T, c exampleClient) {
		// A system per client: each must see its own first answer and then the cache.
		sys, gw, _ := startSystem(t, "../../examples/kb")
		r := c.run(t, nil, append([]string{"--addr", sys.Gateway.String()}, args...)...)
		if r.exit != 0 {
			t.Fatalf("exit %d, stderr:\n%s", r.exit, r.stderr)
		}
		got := tiers(r.stdout)
		if len(got) != len(questions) {
			t.Fatalf("printed %d tier lines %q, want one per question (%d); stdout:\n%s", len(got), got, len(questions), r.stdout)
		}
		for i, q := range questions {
			if !q.tier.MatchString(got[i]) {
				t.Errorf("question %q: printed tier %q, want %v", q.q, got[i], q.tier)
			}
		}
		for _, want := range []string{
			"sources:\n  0.", "auth/jwt/", // sources with their relevance
			"degraded: ",                                     // the LLM route without an LLM
			"explain:\n  stage ", "cache exact=hit", "gate ", // the trace, including the T0 hit
		} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("output lacks %q; stdout:\n%s", want, r.stdout)
			}
		}
		// The answer the client printed is the one the server holds, byte for byte.
		cached := ask(t, quarryv1.NewQueryServiceClient(gw), "platform", questions[0].q, false)
		if !strings.Contains(r.stdout, "answer:\n"+strings.TrimRight(cached.Answer, "\n")+"\n") {
			t.Errorf("printed answer differs from the server's; stdout:\n%s", r.stdout)
		}
	})
}

func TestExampleClientsConsumeQueryStream(t *testing.T) {
	sys, _, _ := startSystem(t, "../../examples/kb")
	forEachClient(t, func(t *testing.T, c exampleClient) {
		r := c.run(t, nil, "--addr", sys.Gateway.String(), "--kb", "platform", "--stream", "How do I restore a Postgres backup?")
		if r.exit != 0 {
			t.Fatalf("exit %d, stderr:\n%s", r.exit, r.stderr)
		}
		if got := tiers(r.stdout); len(got) != 1 || strings.HasPrefix(got[0], "UNSPECIFIED") {
			t.Errorf("tier lines %q, want one tier from the final event", got)
		}
		if !strings.Contains(r.stdout, "data/backups/postgres-restore") || !strings.Contains(r.stdout, "## Summary") {
			t.Errorf("streamed answer lacks the restore document; stdout:\n%s", r.stdout)
		}
	})
}

func TestExampleClientsReportStatusCodesOnOneLine(t *testing.T) {
	sys, _, _ := startSystem(t, "../../examples/kb")
	closed := closedAddr(t)
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"empty question", []string{"--addr", sys.Gateway.String(), "--kb", "platform", ""}, "error: INVALID_ARGUMENT: "},
		{"unknown knowledge base", []string{"--addr", sys.Gateway.String(), "--kb", "nosuchkb", "how do I rotate keys?"}, "error: NOT_FOUND: "},
		{"nothing listening", []string{"--addr", closed, "--kb", "platform", "how do I rotate keys?"}, "error: UNAVAILABLE: "},
	}
	forEachClient(t, func(t *testing.T, c exampleClient) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				r := c.run(t, nil, tt.args...)
				if r.exit != 1 {
					t.Errorf("exit %d, want 1", r.exit)
				}
				msg := strings.TrimRight(r.stderr, "\n")
				if !strings.HasPrefix(msg, tt.want) || strings.Contains(msg, "\n") {
					t.Errorf("stderr %q, want one line starting %q", r.stderr, tt.want)
				}
				if len(tiers(r.stdout)) != 0 {
					t.Errorf("printed an answer for a failed call:\n%s", r.stdout)
				}
			})
		}
	})
}

// closedAddr returns a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	return addr
}

const (
	testAPIKey = "qk_test_1234"
	// truncatedQuestion makes the scripted stream end without its final event.
	truncatedQuestion = "cut me off"
	// cancelledQuestion is refused with CANCELLED, as the gateway refuses a query
	// whose context it saw cancelled.
	cancelledQuestion = "cancel me"
	// A question starting with hangPrefix is never answered: after the deltas (on a
	// stream) the call waits for the caller's deadline or its cancel.
	hangPrefix = "hang: "
	// A question starting with resetPrefix is cut short by the server just before the
	// deadline, with the CANCELLED a reset stream (RST_STREAM CANCEL) reads as: what
	// the client sees when the server's timer for the shared deadline fires first.
	resetPrefix = "reset: "
)

// scriptedQueryService stands in for a gateway that checks API keys and streams LLM
// text, neither of which the embedded system does yet.
type scriptedQueryService struct {
	quarryv1.UnimplementedQueryServiceServer
	deltas []string
	hung   sync.Map // question → chan struct{}, closed once a hanging call is waiting
}

// hanging returns a channel closed once the call asking q (which starts with
// hangPrefix) has sent what it will send and waits.
func (s *scriptedQueryService) hanging(q string) <-chan struct{} {
	ch, _ := s.hung.LoadOrStore(q, make(chan struct{}))
	return ch.(chan struct{})
}

// hang waits, as an answer that never comes, until the caller gives up.
func (s *scriptedQueryService) hang(ctx context.Context, q string) error {
	ch, _ := s.hung.LoadOrStore(q, make(chan struct{}))
	close(ch.(chan struct{}))
	<-ctx.Done()
	return status.FromContextError(ctx.Err()).Err()
}

func (s *scriptedQueryService) authorize(ctx context.Context) error {
	md, _ := metadata.FromIncomingContext(ctx)
	if got := md.Get("authorization"); len(got) != 1 || got[0] != "Bearer "+testAPIKey {
		return status.Errorf(codes.Unauthenticated, "authorization %q: want a valid bearer API key", got)
	}
	return nil
}

func (s *scriptedQueryService) response(tier quarryv1.Tier) *quarryv1.QueryResponse {
	return &quarryv1.QueryResponse{
		Tier: tier, OriginTier: tier, Answer: strings.Join(s.deltas, ""), KnowledgeBase: "platform", Generation: 7,
		Elapsed: durationpb.New(3 * time.Millisecond),
		Sources: []*quarryv1.Source{{Path: "auth/jwt/signing-key-rotation.md", Title: "Rotating JWT signing keys", Relevance: 0.9}},
	}
}

func (s *scriptedQueryService) Query(ctx context.Context, req *quarryv1.QueryRequest) (*quarryv1.QueryResponse, error) {
	if err := s.authorize(ctx); err != nil {
		return nil, err
	}
	switch q := req.GetQuery(); {
	case q == cancelledQuestion:
		return nil, status.Error(codes.Canceled, "the query was cancelled")
	case strings.HasPrefix(q, hangPrefix):
		return nil, s.hang(ctx, q)
	}
	return s.response(quarryv1.Tier_TIER_DIRECT), nil
}

func (s *scriptedQueryService) QueryStream(req *quarryv1.QueryStreamRequest, stream grpc.ServerStreamingServer[quarryv1.QueryStreamResponse]) error {
	if err := s.authorize(stream.Context()); err != nil {
		return err
	}
	for _, d := range s.deltas {
		if err := stream.Send(&quarryv1.QueryStreamResponse{Event: &quarryv1.QueryStreamResponse_Delta{Delta: d}}); err != nil {
			return err
		}
	}
	switch q := req.GetRequest().GetQuery(); {
	case q == truncatedQuestion:
		return nil
	case strings.HasPrefix(q, hangPrefix):
		return s.hang(stream.Context(), q)
	case strings.HasPrefix(q, resetPrefix):
		if dl, ok := stream.Context().Deadline(); ok {
			time.Sleep(time.Until(dl) - 20*time.Millisecond)
		}
		return status.Error(codes.Canceled, "Received RST_STREAM with error code 8")
	}
	return stream.Send(&quarryv1.QueryStreamResponse{Event: &quarryv1.QueryStreamResponse_Final{Final: s.response(quarryv1.Tier_TIER_SINGLE_LLM)}})
}

func TestExampleClientsSendTheAPIKeyAndPrintStreamedText(t *testing.T) {
	svc := &scriptedQueryService{deltas: []string{"Rotate the key ", "in three phases", ": publish, switch, retire."}}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	quarryv1.RegisterQueryServiceServer(srv, svc)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	addr := lis.Addr().String()
	q := "How do I rotate the JWT signing key?"

	forEachClient(t, func(t *testing.T, c exampleClient) {
		t.Run("flag, streamed", func(t *testing.T) {
			r := c.run(t, nil, "--addr", addr, "--kb", "platform", "--api-key", testAPIKey, "--stream", q)
			if r.exit != 0 {
				t.Fatalf("exit %d, stderr:\n%s", r.exit, r.stderr)
			}
			want := "answer (streamed):\n" + strings.Join(svc.deltas, "") + "\ntier: SINGLE_LLM  "
			if !strings.Contains(r.stdout, want) {
				t.Errorf("stdout lacks %q:\n%s", want, r.stdout)
			}
			if strings.Count(r.stdout, "publish, switch, retire") != 1 {
				t.Errorf("streamed answer printed again after the stream:\n%s", r.stdout)
			}
		})
		t.Run("environment, unary", func(t *testing.T) {
			r := c.run(t, []string{"QUARRY_API_KEY=" + testAPIKey}, "--addr", addr, "--kb", "platform", q)
			if r.exit != 0 {
				t.Fatalf("exit %d, stderr:\n%s", r.exit, r.stderr)
			}
			if got := tiers(r.stdout); len(got) != 1 || got[0] != "DIRECT" {
				t.Errorf("tier lines %q, want [DIRECT]", got)
			}
		})
		t.Run("stream without a final event", func(t *testing.T) {
			r := c.run(t, nil, "--addr", addr, "--kb", "platform", "--api-key", testAPIKey, "--stream", truncatedQuestion)
			if r.exit != 1 || r.stderr != "error: the stream ended without a final response\n" {
				t.Errorf("exit %d stderr %q, want 1 and the missing final event named", r.exit, r.stderr)
			}
		})
		t.Run("no key", func(t *testing.T) {
			r := c.run(t, nil, "--addr", addr, "--kb", "platform", q)
			if r.exit != 1 || !strings.HasPrefix(r.stderr, "error: UNAUTHENTICATED: ") {
				t.Errorf("exit %d stderr %q, want 1 and UNAUTHENTICATED", r.exit, r.stderr)
			}
		})
	})
}

// startScripted serves svc on a loopback port (over TLS given grpc.Creds).
func startScripted(t *testing.T, svc quarryv1.QueryServiceServer, opts ...grpc.ServerOption) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(opts...)
	quarryv1.RegisterQueryServiceServer(srv, svc)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}

// oneLine checks that a failed run exited 1 (or exit) with stderr one line starting
// with want.
func (r clientRun) oneLine(t *testing.T, exit int, want string) {
	t.Helper()
	if r.exit != exit {
		t.Errorf("exit %d, want %d; stderr:\n%s", r.exit, exit, r.stderr)
	}
	msg := strings.TrimSuffix(r.stderr, "\n")
	if !strings.HasPrefix(msg, want) || strings.Contains(msg, "\n") {
		t.Errorf("stderr %q, want one line starting %q", r.stderr, want)
	}
}

// TestExampleClientsEndAStreamCutShort: an error or a Ctrl-C after some deltas ends the
// partial answer's line before the error is reported (on a terminal the two share the
// screen: "in three phaseserror: DEADLINE_EXCEEDED" was what the user saw), a Ctrl-C
// is reported on one line with exit 130, not a traceback, and a CANCELLED status is
// spelled as gRPC spells it.
func TestExampleClientsEndAStreamCutShort(t *testing.T) {
	svc := &scriptedQueryService{deltas: []string{"Rotate the key ", "in three phases"}}
	addr := startScripted(t, svc)
	base := []string{"--addr", addr, "--kb", "platform", "--api-key", testAPIKey}
	partial := "answer (streamed):\n" + strings.Join(svc.deltas, "") + "\n"

	forEachClient(t, func(t *testing.T, c exampleClient) {
		t.Run("deadline after deltas", func(t *testing.T) {
			r := c.run(t, nil, append(base, "--stream", "--timeout", "1", hangPrefix+"deadline "+c.lang)...)
			r.oneLine(t, 1, "error: DEADLINE_EXCEEDED: ")
			if !strings.HasSuffix(r.stdout, partial) {
				t.Errorf("stdout does not end the partial answer's line:\n%q", r.stdout)
			}
			if len(tiers(r.stdout)) != 0 {
				t.Errorf("printed a response for a failed stream:\n%s", r.stdout)
			}
		})
		t.Run("reset by the server at the deadline", func(t *testing.T) {
			r := c.run(t, nil, append(base, "--stream", "--timeout", "1", resetPrefix+c.lang)...)
			r.oneLine(t, 1, "error: DEADLINE_EXCEEDED: ")
			if !strings.HasSuffix(r.stdout, partial) {
				t.Errorf("stdout does not end the partial answer's line:\n%q", r.stdout)
			}
		})
		t.Run("ctrl-c after deltas", func(t *testing.T) {
			q := hangPrefix + "interrupt stream " + c.lang
			r := c.runUntil(t, nil, svc.hanging(q), append(base, "--stream", q)...)
			r.oneLine(t, 130, "error: CANCELLED: interrupted")
			if !strings.HasSuffix(r.stdout, partial) {
				t.Errorf("stdout does not end the partial answer's line:\n%q", r.stdout)
			}
		})
		t.Run("ctrl-c while waiting", func(t *testing.T) {
			q := hangPrefix + "interrupt unary " + c.lang
			r := c.runUntil(t, nil, svc.hanging(q), append(base, q)...)
			r.oneLine(t, 130, "error: CANCELLED: interrupted")
		})
		t.Run("cancelled by the server", func(t *testing.T) {
			r := c.run(t, nil, append(base, cancelledQuestion)...)
			r.oneLine(t, 1, "error: CANCELLED: the query was cancelled")
		})
	})
}

// TestExampleClientsSpeakTLS runs the clients with --tls against a gateway whose
// certificate a private CA signed: trusted through the runtime's own setting (gRPC's
// GRPC_DEFAULT_SSL_ROOTS_FILE_PATH, Node's NODE_EXTRA_CA_CERTS) the question is
// answered; untrusted, or against a plaintext server, the failure is UNAVAILABLE on one
// line (not INTERNAL, which QueryService reserves for faults of the gateway, and not
// followed by gRPC's own log lines), with a hint naming --tls.
func TestExampleClientsSpeakTLS(t *testing.T) {
	ca := tlstest.NewCA(t, "quarry-clients")
	certFile, keyFile := ca.Issue(t, "gateway", "127.0.0.1")
	creds, err := credentials.NewServerTLSFromFile(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	svc := &scriptedQueryService{deltas: []string{"Rotate the key."}}
	tlsAddr := startScripted(t, svc, grpc.Creds(creds))
	plainAddr := startScripted(t, svc)
	trust := []string{"GRPC_DEFAULT_SSL_ROOTS_FILE_PATH=" + ca.CertFile, "NODE_EXTRA_CA_CERTS=" + ca.CertFile}
	q := "How do I rotate the JWT signing key?"

	forEachClient(t, func(t *testing.T, c exampleClient) {
		t.Run("trusted", func(t *testing.T) {
			r := c.run(t, trust, "--tls", "--addr", tlsAddr, "--kb", "platform", "--api-key", testAPIKey, q)
			if r.exit != 0 {
				t.Fatalf("exit %d, stderr:\n%s", r.exit, r.stderr)
			}
			if got := tiers(r.stdout); len(got) != 1 || got[0] != "DIRECT" {
				t.Errorf("tier lines %q, want [DIRECT]", got)
			}
		})
		for _, tt := range []struct {
			name, addr string
		}{{"untrusted certificate", tlsAddr}, {"plaintext server", plainAddr}} {
			t.Run(tt.name, func(t *testing.T) {
				r := c.run(t, nil, "--tls", "--addr", tt.addr, "--kb", "platform", "--api-key", testAPIKey, q)
				r.oneLine(t, 1, "error: UNAVAILABLE: ")
				if !strings.Contains(r.stderr, "--tls") {
					t.Errorf("stderr %q: the hint should name --tls", r.stderr)
				}
			})
		}
	})
}

// TestExampleClientsRefuseANonPositiveTimeout: a --timeout that is not positive, or so
// long it cannot be a deadline, is a usage error (exit 2 naming --timeout). Before,
// Python took "inf" and Node "Infinity" or 1e10 seconds (over its timers' 24.8 days) and
// each failed at once with DEADLINE_EXCEEDED.
func TestExampleClientsRefuseANonPositiveTimeout(t *testing.T) {
	forEachClient(t, func(t *testing.T, c exampleClient) {
		for _, timeout := range []string{"0", "-1", "nan", "inf", "Infinity", "1e10"} {
			r := c.run(t, nil, "--addr", closedAddr(t), "--kb", "platform", "--timeout="+timeout, "how do I rotate keys?")
			if r.exit != 2 || !strings.Contains(r.stderr, "--timeout") {
				t.Errorf("--timeout %s: exit %d stderr %q, want 2 naming --timeout", timeout, r.exit, r.stderr)
			}
		}
	})
}

// TestExampleClientsRefuseAMalformedAddress: an --addr that is not HOST:PORT is a usage
// error (exit 2 naming --addr). Before, Python's gRPC read "127.0.0.1:77OO" as port 77
// and reported that nothing listened there, and Node threw a stack trace.
func TestExampleClientsRefuseAMalformedAddress(t *testing.T) {
	forEachClient(t, func(t *testing.T, c exampleClient) {
		for _, addr := range []string{"127.0.0.1:77OO", "localhost", ""} {
			r := c.run(t, nil, "--addr", addr, "--kb", "platform", "--timeout", "2", "how do I rotate keys?")
			if r.exit != 2 || !strings.Contains(r.stderr, "--addr") || strings.Contains(r.stderr, "    at ") {
				t.Errorf("--addr %q: exit %d stderr %q, want 2 naming --addr", addr, r.exit, r.stderr)
			}
		}
		// An empty QUARRY_ADDR counts as unset in both clients: the default address is asked
		// (whatever answers there, the command line itself is no mistake).
		r := c.run(t, []string{"QUARRY_ADDR="}, "--kb", "platform", "--timeout", "2", "how do I rotate keys?")
		if r.exit == 2 || strings.Contains(r.stderr, "HOST:PORT") {
			t.Errorf("QUARRY_ADDR empty: exit %d stderr %q, want the default address asked", r.exit, r.stderr)
		}
	})
}

// TestExampleClientsKeepTheAPIKeyOffPlaintext: as the Go CLI, the clients send a key in
// plaintext only to a loopback address; to any other address it needs --tls. Refused
// before any connection (192.0.2.1 is a documentation address nothing answers at).
func TestExampleClientsKeepTheAPIKeyOffPlaintext(t *testing.T) {
	forEachClient(t, func(t *testing.T, c exampleClient) {
		r := c.run(t, nil, "--api-key", "qk_secret_9876", "--addr", "192.0.2.1:7700", "--kb", "platform", "--timeout", "2", "how do I rotate keys?")
		if r.exit != 2 || !strings.Contains(r.stderr, "--tls") || strings.Contains(r.stdout+r.stderr, "qk_secret_9876") {
			t.Errorf("key to a remote address in plaintext: exit %d stderr %q, want 2 naming --tls", r.exit, r.stderr)
		}
	})
}

// TestExampleClientsNeverPrintTheAPIKey: a key gRPC cannot send (a control character)
// is refused before any call, without quoting it; before, Python's traceback and
// Node's error message both printed "Bearer <key>". A key read from a file with its
// line break (CRLF included) is sent without it.
func TestExampleClientsNeverPrintTheAPIKey(t *testing.T) {
	addr := startScripted(t, &scriptedQueryService{deltas: []string{"Rotate the key."}})
	q := "How do I rotate the JWT signing key?"
	const secret = "qk_secret_9876"
	forEachClient(t, func(t *testing.T, c exampleClient) {
		for _, key := range []string{secret + "\x01", secret + "\nmore", "qk é " + secret} {
			for _, how := range []struct {
				env  []string
				args []string
			}{{nil, []string{"--api-key", key}}, {[]string{"QUARRY_API_KEY=" + key}, nil}} {
				r := c.run(t, how.env, append(how.args, "--addr", addr, "--kb", "platform", q)...)
				if r.exit != 2 || strings.Contains(r.stdout+r.stderr, secret) {
					t.Errorf("key %q: exit %d, want 2 without the key; stdout %q stderr %q", key, r.exit, r.stdout, r.stderr)
				}
			}
		}
		r := c.run(t, []string{"QUARRY_API_KEY=" + testAPIKey + "\r\n"}, "--addr", addr, "--kb", "platform", q)
		if got := tiers(r.stdout); r.exit != 0 || len(got) != 1 || got[0] != "DIRECT" {
			t.Errorf("key with a trailing CRLF: exit %d tiers %q stderr %q, want DIRECT", r.exit, got, r.stderr)
		}
	})
}

// TestExampleClientsStopQuietlyWhenTheReaderGoes: piped into a reader that stops early
// (`| head -1`), a client ends without a traceback or a stack, as command-line tools
// do; Python printed a BrokenPipeError traceback.
func TestExampleClientsStopQuietlyWhenTheReaderGoes(t *testing.T) {
	addr := startScripted(t, &scriptedQueryService{deltas: []string{"Rotate the key."}})
	forEachClient(t, func(t *testing.T, c exampleClient) {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		r.Close() // the reader is gone before the client writes
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cmd := c.command(ctx, nil, "--addr", addr, "--kb", "platform", "How do I rotate the JWT signing key?", "How do I rotate the JWT signing key?")
		var stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = w, &stderr
		err = cmd.Run()
		w.Close()
		if ctx.Err() != nil {
			t.Fatalf("the client did not end within 30s: %v", err)
		}
		if s := stderr.String(); strings.Contains(s, "Traceback") || strings.Contains(s, "    at ") || strings.Contains(s, "EPIPE") {
			t.Errorf("stderr %q, want no traceback when the reader is gone", s)
		}
	})
}
