package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	quarryv1 "github.com/quarry-router/quarry/gen/quarry/v1"
	"github.com/quarry-router/quarry/platform/grpcx"
	"github.com/quarry-router/quarry/platform/syncbuf"
	"github.com/quarry-router/quarry/services/agent/llm/llmtest"
	"google.golang.org/protobuf/proto"
)

// refused is a loopback address nothing listens on: a command that dials it fails
// with UNAVAILABLE, so a case that must fail before dialing shows it by its message.
const refused = "127.0.0.1:1"

// TestCommandLineMistakes runs command lines a user gets wrong through the command's
// entry point: each must exit with the right code (0 for -h, 2 for a command line the
// command cannot run, 1 for work that failed) and say what is wrong on stderr.
func TestCommandLineMistakes(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "note.md")
	mustWrite(t, file, "# A note\n")
	empty := filepath.Join(dir, "empty.jsonl")
	mustWrite(t, empty, "\n\n")
	longLine := filepath.Join(dir, "long.jsonl")
	mustWrite(t, longLine, `{"kind":"out_of_domain","query":"pandas"}`+"\n"+`{"kind":"out_of_domain","query":"`+strings.Repeat("x", 2<<20)+`"}`+"\n")
	blankThenBad := filepath.Join(dir, "bench.jsonl")
	mustWrite(t, blankThenBad, `{"query":"rotate the key"}`+"\n\n"+`{"query": rotate}`+"\n")
	pairsOnly := filepath.Join(dir, "pairs.jsonl")
	mustWrite(t, pairsOnly, `{"kind":"pair","a":"x y","b":"y x","same":true}`+"\n")
	genOut := filepath.Join(dir, "genkb")
	bigTree := filepath.Join(dir, "big")
	mustWrite(t, filepath.Join(bigTree, "a.md"), "# A\nSmall.\n")
	mustWrite(t, filepath.Join(bigTree, "ops", "changelog.md"), "# Changelog\n"+strings.Repeat("a line of history\n", 300_000))
	listen := []string{"-listen", "127.0.0.1:0", "-search-listen", "127.0.0.1:0", "-agent-listen", "127.0.0.1:0", "-demo=false"}
	noMarkdown := filepath.Join(dir, "gocode")
	mustWrite(t, filepath.Join(noMarkdown, "main.go"), "package main\n")
	badName := filepath.Join(dir, "My Notes")
	mustWrite(t, filepath.Join(badName, "a.md"), "# A\nA note.\n")

	tests := []struct {
		name   string
		args   []string
		code   int
		stderr string // in the message, "" = not checked
	}{
		// -h asks for the flags: no failure ("flag: help requested", exit 1, before).
		{"query -h", []string{"query", "-h"}, 0, ""},
		{"bench -help", []string{"bench", "-help"}, 0, ""},
		{"sync -h", []string{"sync", "-h"}, 0, ""},
		{"eval -h", []string{"eval", "-h"}, 0, ""},
		// Command lines the command cannot run exit 2, as the flag package's do.
		{"unknown flag", []string{"query", "-bogus", "x"}, 2, "flag provided but not defined: -bogus"},
		{"bad flag value", []string{"bench", "-c", "many"}, 2, "invalid value"},
		{"query without a question", []string{"query"}, 2, "a question is required"},
		{"sync without -kb", []string{"sync", bigTree}, 2, "usage: quarry sync DIR -kb K"},
		{"eval without files", []string{"eval", "-kb", evalKB}, 2, "no question files"},
		// Arguments a command takes none of were ignored: "genkb -out DIR 10 -files 3"
		// stopped at "10" and wrote 5,000 files.
		{"genkb with a stray argument", []string{"genkb", "-out", genOut, "10", "-files", "3"}, 2, `unexpected argument "10"`},
		{"up with a stray argument", []string{"up", "platform"}, 2, `unexpected argument "platform"`},
		{"bench with a stray argument", []string{"bench", "10s"}, 2, `unexpected argument "10s"`},
		{"devset with a stray argument", []string{"devset", "-out", genOut, "gostd"}, 2, `unexpected argument "gostd"`},
		{"archive with a stray argument", []string{"archive", "-kb", "platform", "-suggest", "apply"}, 2, `unexpected argument "apply"`},
		{"archive with a limit past int32", []string{"archive", "-kb", "platform", "-suggest", "-limit", "4294967297"}, 2, "-limit must be in [1,10000], got 4294967297"},
		{"archive with no time", []string{"archive", "-kb", "platform", "-suggest", "-timeout", "0s"}, 2, "-timeout 0s: the deadline must be positive"},
		{"key with a stray argument", []string{"key", "-name", "ci", "-kb", "platform", "write"}, 2, `unexpected argument "write"`},
		// A missing or wrong -kb-root was "copy examples/kb ...: stat .: no such file or
		// directory".
		{"up with a missing -kb-root", append([]string{"up", "-kb-root", filepath.Join(dir, "nope")}, listen...), 1, "not found: run from the repository root or pass -kb-root"},
		{"up with a file as -kb-root", append([]string{"up", "-kb-root", file}, listen...), 1, "is a file, not a folder"},
		// eval: an empty question file reported n/a everywhere and exited 0.
		{"eval of an empty file", []string{"eval", "-kb", evalKB, empty}, 1, "no questions"},
		{"eval of a file as -kb", []string{"eval", "-kb", file, evalQuestions}, 1, "is a file"},
		{"eval of an over-long line", []string{"eval", "-kb", evalKB, longLine}, 1, "long.jsonl:2: bufio.Scanner: token too long"},
		// bench: a blank line was "unexpected end of JSON input", and no line was named.
		{"bench questions with a bad line", []string{"bench", "-addr", refused, "-questions", blankThenBad}, 1, "bench.jsonl:3: invalid character"},
		{"bench questions without a query", []string{"bench", "-addr", refused, "-questions", pairsOnly}, 1, "no questions"},
		// A -timeout that leaves no time failed as DEADLINE_EXCEEDED, exit 1, after dialing.
		{"query with a zero -timeout", []string{"query", "-addr", refused, "-timeout", "0", "a question"}, 2, "-timeout 0s: the deadline must be positive"},
		{"sync with a negative -timeout", []string{"sync", dir, "-kb", "k", "-addr", refused, "-timeout", "-1s"}, 2, "-timeout -1s: the deadline must be positive"},
		// What gRPC cannot send was "Internal: grpc: error while marshaling: string field
		// contains invalid UTF-8", exit 1, as if the gateway had failed.
		{"query of a non-UTF-8 question", []string{"query", "-addr", refused, "caf\xe9 menu"}, 2, "the question is not valid UTF-8"},
		{"query of a non-UTF-8 -kb", []string{"query", "-addr", refused, "-kb", "caf\xe9", "menu"}, 2, `-kb "caf\xe9" is not valid UTF-8`},
		// An -addr without a port dialled port 443; one with a letter in the port failed
		// as UNAVAILABLE.
		{"query of an address without a port", []string{"query", "-addr", "127.0.0.1", "a question"}, 2, `-addr "127.0.0.1" is not HOST:PORT`},
		{"query of a port with a letter", []string{"query", "-addr", "127.0.0.1:77OO", "a question"}, 2, `-addr "127.0.0.1:77OO" is not HOST:PORT`},
		// TLS and key flags that cannot work together exited 1, as a failed call does.
		{"query with -tls-cert alone", []string{"query", "-addr", refused, "-tls-cert", file, "a question"}, 2, "-tls-cert and -tls-key go together"},
		{"query with a key in plaintext off the host", []string{"query", "-addr", "192.0.2.1:7700", "-api-key", "qk_x", "a question"}, 2, "the key would cross the network in plaintext"},
		{"query with a key gRPC cannot send", []string{"query", "-addr", refused, "-api-key", "qk_\xe9", "a question"}, 2, "the key is not shown"},
		{"query of an empty question", []string{"query", "-addr", refused, "  "}, 2, "the question is empty"},
		// What to do about a refused connection, or a key naming no knowledge base.
		{"query where nothing listens", []string{"query", "-addr", refused, "a question"}, 1, "is Quarry running there?"},
		{"key for a KB no id can name", []string{"key", "-name", "ci", "-kb", "platform,Bad KB"}, 2, `-kb "Bad KB" is no knowledge base id`},
		// eval of a folder without markdown called every question out of domain, exit 0.
		{"eval of a folder without markdown", []string{"eval", "-kb", noMarkdown, evalQuestions}, 1, "holds no markdown file"},
		// Flag values bench, genkb and eval cannot use exited 1, as a failed run does; an
		// eval -timeout of 0 or -addr without a port failed every call instead.
		{"bench with no callers", []string{"bench", "-c", "0"}, 2, "-c must be in [1,1024]"},
		{"bench with a mix of no kind", []string{"bench", "-mix", "repeat"}, 2, "want kind=weight"},
		{"bench with no time", []string{"bench", "-addr", refused, "-timeout", "0"}, 2, "-timeout 0s: the deadline must be positive"},
		{"bench of another machine", []string{"bench", "-addr", "192.0.2.1:7700"}, 1, `-addr "192.0.2.1:7700" is not a loopback address`},
		{"bench of an address without a port", []string{"bench", "-addr", "127.0.0.1"}, 2, `-addr "127.0.0.1" is not HOST:PORT`},
		{"bench with too few files", []string{"bench", "-files", "3"}, 2, "too few"},
		{"genkb with too few files", []string{"genkb", "-out", genOut, "-files", "3"}, 2, "too few"},
		{"eval with no time", []string{"eval", "-kb", evalKB, "-timeout", "0", evalQuestions}, 2, "-timeout 0s: the deadline must be positive"},
		{"eval of an address without a port", []string{"eval", "-addr", "127.0.0.1", "-kb-id", "platform", evalQuestions}, 2, `-addr "127.0.0.1" is not HOST:PORT`},
		// A KB id names a folder under a temporary one: a path wrote outside it.
		{"bench of a KB id that is a path", []string{"bench", "-kb", "../escape", "-files", "200"}, 2, `-kb "../escape" is no knowledge base id`},
		{"eval of a KB id that is a path", []string{"eval", "-kb", evalKB, "-kb-id", "../escape", evalQuestions}, 2, `-kb-id "../escape" is no knowledge base id`},
		{"eval of the embedded system with a key", []string{"eval", "-kb", evalKB, "-api-key", "k", evalQuestions}, 2, "-api-key and -tls* are for a running gateway"},
		{"eval of a folder named no KB id", []string{"eval", "-kb", badName, evalQuestions}, 2, `its folder name "My Notes" is no knowledge base id`},
		// sync: a file over one message's size was read, sent and failed the whole sync
		// with "trying to send message larger than max"; now refused before dialing.
		{"sync of a file too large to send", []string{"sync", bigTree, "-kb", "big", "-addr", refused}, 1, "ops/changelog.md (5400012 bytes)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			code := run(ctx, tt.args, &out, &errOut)
			if code != tt.code {
				t.Errorf("quarry %q exited %d, want %d\nstdout: %.500s\nstderr: %.500s", tt.args, code, tt.code, out.String(), errOut.String())
			}
			if !strings.Contains(errOut.String(), tt.stderr) {
				t.Errorf("quarry %q: stderr %.500q does not say %q", tt.args, errOut.String(), tt.stderr)
			}
			if strings.Contains(errOut.String(), "help requested") {
				t.Errorf("quarry %q: stderr %q", tt.args, errOut.String())
			}
		})
	}
	if _, err := os.Stat(genOut); err == nil {
		t.Errorf("a refused genkb wrote %s", genOut)
	}
}

func mustWrite(t *testing.T, path, s string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestLargestUploadFitsOneMessage: the size sync lets through fits one SyncFiles
// message, and one byte more does not.
func TestLargestUploadFitsOneMessage(t *testing.T) {
	for _, p := range []string{"a.md", "ops/" + strings.Repeat("x", 200) + ".md"} {
		n := maxUploadBytes(p)
		msg := func(size int64) int {
			return proto.Size(&quarryv1.SyncFilesRequest{Message: &quarryv1.SyncFilesRequest_File{File: &quarryv1.UploadedFile{Path: p, Content: make([]byte, size)}}})
		}
		if got := msg(n); got > grpcx.MaxMessageBytes {
			t.Errorf("%s: a %d-byte file makes a %d-byte message, over %d", p, n, got, grpcx.MaxMessageBytes)
		}
		if got := msg(n + 64); got <= grpcx.MaxMessageBytes {
			t.Errorf("%s: the limit %d leaves %d bytes unused", p, n, grpcx.MaxMessageBytes-got)
		}
	}
}

// TestBenchJSONExitsNonZeroOnFailedCalls: with -json, a run whose every call failed
// exited 0; CI reading the exit code saw a pass.
func TestBenchJSONExitsNonZeroOnFailedCalls(t *testing.T) {
	q := filepath.Join(t.TempDir(), "q.jsonl")
	mustWrite(t, q, `{"query":"how do I rotate the key?"}`+"\n")
	for _, format := range [][]string{nil, {"-json"}} {
		var out, errOut bytes.Buffer
		args := append([]string{"bench", "-addr", refused, "-questions", q, "-d", "200ms", "-warmup", "0", "-c", "1", "-mix", "new=1", "-timeout", "1s"}, format...)
		if code := run(context.Background(), args, &out, &errOut); code != 1 || !strings.Contains(errOut.String(), "calls failed") {
			t.Errorf("quarry %q: exit %d, stderr %.300q; want 1 and the failed calls counted", args, code, errOut.String())
		}
	}
}

// TestQueryStreamPrintsTheAnswerOnce: "quarry query -stream" printed the streamed
// text, then "tier:" on the same line as its end, then the whole answer again.
func TestQueryStreamPrintsTheAnswerOnce(t *testing.T) {
	srv := llmtest.New(t)
	const said = "Before a production deploy, check the items in `deploy/_index.md`."
	srv.Repeat(llmtest.Turn{Content: said, Chunks: 4})
	ctx, cancel := context.WithCancel(context.Background())
	sys, err := start(ctx, upConfig{Gateway: "127.0.0.1:0", Search: "127.0.0.1:0", Agent: "127.0.0.1:0",
		KBRoot: "../../examples/kb", AgentArgs: scriptedArgs(srv)}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); <-sys.done })

	addr := sys.Gateway.String()
	// A new question each, so every answer comes from the model, not the cache.
	tests := []struct {
		name    string
		args    []string
		explain bool
	}{
		{"streamed", []string{"-addr", addr, "-stream", "What should I check before a production deploy?"}, false},
		{"streamed with the trace", []string{"-addr", addr, "-stream", "-explain", "What must be checked before deploying to production?"}, true},
		{"not streamed", []string{"-addr", addr, "Which checks come before a production release?"}, false},
		// Flags after the question were part of it: "... release? -explain" was asked
		// without the trace.
		{"flags after the question", []string{"What", "should", "be", "checked", "before", "a", "production", "release?", "-explain", "-addr", addr, "-stream"}, true},
		{"after --", []string{"-addr", addr, "-explain", "--", "What do we check before a production deploy?"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			args := append([]string{"query"}, tt.args...)
			if code := run(ctx, args, &out, &errOut); code != 0 {
				t.Fatalf("quarry %q: exit %d: %s", args, code, errOut.String())
			}
			got := out.String()
			if n := strings.Count(got, said); n != 1 {
				t.Errorf("the answer is printed %d times, want once:\n%s", n, got)
			}
			if !strings.Contains(got, "\ntier:") && !strings.HasPrefix(got, "tier:") {
				t.Errorf("no line starts with tier:\n%s", got)
			}
			if strings.Contains(got, "\nexplain:") != tt.explain {
				t.Errorf("trace printed: %v, want %v:\n%s", !tt.explain, tt.explain, got)
			}
			if !strings.Contains(got, "SINGLE_LLM") && !strings.Contains(got, "AGENTIC") || strings.Contains(got, "degraded") {
				t.Errorf("not an LLM answer:\n%s", got)
			}
		})
	}
}

// runUntil runs a command line in a child process (as "quarry up" runs: a process of
// its own, whose telemetry set-up cannot touch this one's) until stdout holds until,
// then sends it SIGINT as Ctrl-C does and returns its exit code and output.
func runUntil(t *testing.T, args []string, until string) (int, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"-test.run=^TestQuarryCommand$", "--"}, args...)...)
	cmd.Env = append(os.Environ(), quarryCommandEnv+"=1")
	var out syncbuf.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan int, 1)
	go func() {
		err := cmd.Wait()
		var exit *exec.ExitError
		switch {
		case err == nil:
			exited <- 0
		case errors.As(err, &exit):
			exited <- exit.ExitCode()
		default:
			exited <- -1
		}
	}()
	deadline := time.After(30 * time.Second)
	for !strings.Contains(out.String(), until) {
		select {
		case code := <-exited:
			return code, out.String()
		case <-deadline:
			cmd.Process.Kill()
			t.Fatalf("quarry %q printed no %q within 30 s:\n%s", args, until, out.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
	cmd.Process.Signal(os.Interrupt)
	select {
	case code := <-exited:
		return code, out.String()
	case <-time.After(20 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("quarry %q did not stop within 20 s of SIGINT:\n%s", args, out.String())
		return -1, ""
	}
}

// TestUpStopsCleanly: "quarry up" with a -kb-root that holds no "platform" knowledge
// base asked the demo's first question of it anyway, and NOT_FOUND stopped the system
// it had just started (exit 1); Ctrl-C while a demo question waited for a slow model
// exited 1 with "context canceled". Each now keeps serving until Ctrl-C, then exits 0.
func TestUpStopsCleanly(t *testing.T) {
	root := t.TempDir()
	mustWrite(t, filepath.Join(root, "team", "rotate.md"), "---\ntitle: Rotating the frobnicator\n---\n# Rotating the frobnicator\nRotate the frobnicator weekly.\n")
	srv := llmtest.New(t)
	srv.Repeat(llmtest.Turn{Hang: true})
	listen := []string{"-listen", "127.0.0.1:0", "-search-listen", "127.0.0.1:0", "-agent-listen", "127.0.0.1:0"}

	tests := []struct {
		name      string
		args      []string
		until     string // stopped once stdout holds this
		wantInOut string
	}{
		{"another -kb-root", append([]string{"up", "-kb-root", root}, listen...), "Serving; press Ctrl-C", `no demo: it asks the example knowledge base "platform"`},
		{"Ctrl-C during the demo", append([]string{"up", "-kb-root", "../../examples/kb", "-llm-base-url", srv.BaseURL(), "-llm-model", "m", "-llm-api-key", "k"}, listen...), "OUT_OF_DOMAIN", "OUT_OF_DOMAIN"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out := runUntil(t, tt.args, tt.until)
			if code != 0 {
				t.Errorf("exit %d, want 0:\n%s", code, out)
			}
			if !strings.Contains(out, tt.wantInOut) {
				t.Errorf("output does not say %q:\n%s", tt.wantInOut, out)
			}
		})
	}
}

// TestFirstLineCutsAtACharacter: the demo's one-line answers were cut at byte 160,
// which can fall inside a character and print invalid UTF-8.
func TestFirstLineCutsAtACharacter(t *testing.T) {
	tests := []struct{ in, want string }{
		{"# Title\n\nshort line", "short line"},
		{strings.Repeat("a", 160), strings.Repeat("a", 160)},
		{strings.Repeat("a", 161), strings.Repeat("a", 160) + "…"},
		{strings.Repeat("a", 159) + "“quoted”", strings.Repeat("a", 159) + "…"},
		{strings.Repeat("é", 100), strings.Repeat("é", 80) + "…"},
	}
	for _, tt := range tests {
		got := firstLine(tt.in)
		if !utf8.ValidString(got) {
			t.Errorf("firstLine(%.20q...) = %q: invalid UTF-8", tt.in, got)
		}
		if got != tt.want {
			t.Errorf("firstLine(%.20q...) = %.40q..., want %.40q...", tt.in, got, tt.want)
		}
	}
}

// The explain trace shows how often the agent shortened a chat that outgrew the model's
// context window, and says nothing of it when it never did.
func TestExplainShowsContextTrims(t *testing.T) {
	for _, n := range []int32{0, 2} {
		var b strings.Builder
		printExplain(&b, &quarryv1.Explain{Llm: &quarryv1.LlmTrace{Model: "m", Calls: 3, ContextTrims: n, StopReason: "answered"}})
		if got, want := strings.Contains(b.String(), "context_trims="), n > 0; got != want || n > 0 && !strings.Contains(b.String(), "context_trims=2\n") {
			t.Errorf("explain with %d trims printed %q", n, b.String())
		}
	}
}

// TestQueryTrimsTheAPIKey: a key read from a file (an env file, a mounted Secret) ends
// in a line break, which gRPC refused to send: "quarry query: Internal: header key
// "authorization" contains value with non-printable ASCII characters", exit 1, as if
// the gateway had failed. The example clients trim it; so does the CLI now.
func TestQueryTrimsTheAPIKey(t *testing.T) {
	addr := startScripted(t, &scriptedQueryService{deltas: []string{"Rotate it."}})
	t.Setenv("QUARRY_API_KEY", testAPIKey+"\n")
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"query", "-addr", addr, "How do I rotate the JWT signing key?"}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d, want 0: %s", code, errOut.String())
	}
	if !strings.Contains(out.String(), "DIRECT") {
		t.Errorf("stdout does not name the tier:\n%s", out.String())
	}
}

// TestInterruptedCommandExits130: Ctrl-C during "quarry query" (a T3/T4 answer on its
// way) printed "quarry query: Canceled: context canceled" and exited 1, as a failed call
// does. An interrupted command says so and exits 130, as the example clients do.
func TestInterruptedCommandExits130(t *testing.T) {
	svc := &scriptedQueryService{}
	addr := startScripted(t, svc)
	t.Setenv("QUARRY_API_KEY", testAPIKey)
	ctx, cancel := context.WithCancel(context.Background())
	q := hangPrefix + "what should I check before a deploy?"
	go func() {
		<-svc.hanging(q)
		cancel() // as the first SIGINT does (daemon.SignalContext)
	}()
	var out, errOut bytes.Buffer
	code := run(ctx, []string{"query", "-addr", addr, q}, &out, &errOut)
	if code != 130 || errOut.String() != "quarry query: interrupted\n" {
		t.Errorf("exit %d, stderr %q; want 130 and \"quarry query: interrupted\"", code, errOut.String())
	}
}

// TestQueryReadsQuarryAddr: the example clients take the gateway's address from
// $QUARRY_ADDR, and query did not: the same environment asked another gateway (or none).
// -addr still wins.
func TestQueryReadsQuarryAddr(t *testing.T) {
	addr := startScripted(t, &scriptedQueryService{deltas: []string{"Rotate it."}})
	t.Setenv("QUARRY_API_KEY", testAPIKey)
	t.Setenv("QUARRY_ADDR", addr)
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"query", "How do I rotate the JWT signing key?"}, &out, &errOut); code != 0 || !strings.Contains(out.String(), "DIRECT") {
		t.Fatalf("exit %d with QUARRY_ADDR=%s, want 0 and an answer: %s%s", code, addr, out.String(), errOut.String())
	}
	t.Setenv("QUARRY_ADDR", "127.0.0.1:1")
	out.Reset()
	if code := run(context.Background(), []string{"query", "-addr", addr, "How do I rotate the JWT signing key?"}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d with -addr over QUARRY_ADDR, want 0: %s", code, errOut.String())
	}
}

// TestStatusErrorsSayWhatToDo: a call that reached the wrong service, or none, or went
// without a key, said only what gRPC said ("Unimplemented: unknown service
// quarry.v1.KnowledgeService").
func TestStatusErrorsSayWhatToDo(t *testing.T) {
	gateway := startScripted(t, &scriptedQueryService{deltas: []string{"Rotate it."}})
	dir := t.TempDir()
	mustWrite(t, filepath.Join(dir, "a.md"), "# A\n\nA note.\n")
	tests := []struct {
		name string
		args []string
		env  string // QUARRY_API_KEY
		want string
	}{
		{"sync to a gateway", []string{"sync", dir, "-kb", "notes", "-addr", gateway}, testAPIKey, "sync and archive talk to the search service"},
		{"query without a key", []string{"query", "-addr", gateway, "a question"}, "", "pass -api-key, or set $QUARRY_API_KEY"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("QUARRY_API_KEY", tt.env)
			var out, errOut bytes.Buffer
			if code := run(context.Background(), tt.args, &out, &errOut); code != 1 || !strings.Contains(errOut.String(), tt.want) {
				t.Errorf("exit %d, stderr %q; want 1 and %q", code, errOut.String(), tt.want)
			}
		})
	}
}

// TestExplainLabelsItsNumbers: the sources showed the ranking score unlabelled beside a
// gate line of relevance ("sources: 0.814" against "top=0.90"), and an out-of-domain
// answer printed "top=0.000 second=0.000 decision=\"\"" for a gate that never ran, above
// a result of relevance 0.998. Each number says what it is; a gate that did not run
// shows no numbers.
func TestExplainLabelsItsNumbers(t *testing.T) {
	src := &quarryv1.Source{Path: "auth/jwt/rotation.md", Title: "Rotation", Score: 0.814, Relevance: 0.94}
	tests := []struct {
		name     string
		resp     *quarryv1.QueryResponse
		want     []string
		dontWant []string
	}{
		{"a direct answer", &quarryv1.QueryResponse{Tier: quarryv1.Tier_TIER_DIRECT, Sources: []*quarryv1.Source{src},
			Explain: &quarryv1.Explain{Gate: &quarryv1.GateTrace{TopRelevance: 0.94, SecondRelevance: 0.5, DirectDecision: "direct"}}},
			[]string{"R=0.940 score=0.814  auth/jwt/rotation.md", "top_R=0.940 second_R=0.500 decision=\"direct\""}, nil},
		{"out of domain", &quarryv1.QueryResponse{Tier: quarryv1.Tier_TIER_OUT_OF_DOMAIN,
			Explain: &quarryv1.Explain{Gate: &quarryv1.GateTrace{OutOfDomainRule: "unfamiliar_words"}}},
			[]string{`ood_rule="unfamiliar_words" (the relevance gate did not run)`}, []string{"top_R=", "decision="}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			printResponse(&b, tt.resp, time.Millisecond, false)
			for _, w := range tt.want {
				if !strings.Contains(b.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, b.String())
				}
			}
			for _, w := range tt.dontWant {
				if strings.Contains(b.String(), w) {
					t.Errorf("output holds %q:\n%s", w, b.String())
				}
			}
		})
	}
}
