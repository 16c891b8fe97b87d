package app

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	quarryv1 "github.com/quarry-router/quarry/gen/quarry/v1"
	"github.com/quarry-router/quarry/platform/grpcx"
	"google.golang.org/grpc/health/grpc_health_v1"
)

// start runs the search service with args until the test ends (or stop is called) and
// returns its address and a channel with Run's result.
func start(t *testing.T, args ...string) (addr string, stop context.CancelFunc, wait func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan net.Addr, 1)
	errc := make(chan error, 1)
	go func() {
		errc <- Run(ctx, append([]string{"-listen", "127.0.0.1:0"}, args...),
			slog.New(slog.NewTextHandler(io.Discard, nil)), func(a net.Addr) { ready <- a })
	}()
	select {
	case a := <-ready:
		addr = a.String()
	case err := <-errc:
		cancel()
		t.Fatalf("Run: %v", err)
	case <-time.After(30 * time.Second):
		cancel()
		t.Fatal("the search service did not start")
	}
	var (
		once   sync.Once
		result error
	)
	wait = func() error {
		once.Do(func() {
			select {
			case result = <-errc:
			case <-time.After(30 * time.Second):
				result = errors.New("the search service did not stop")
			}
		})
		return result
	}
	t.Cleanup(func() {
		cancel()
		if err := wait(); err != nil {
			t.Error(err)
		}
	})
	return addr, cancel, wait
}

func kbFolder(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, body := range files {
		full := filepath.Join(root, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// On SIGTERM the service keeps serving through -drain-grace (and calls in flight finish
// after it), and every search it answers counts hits. The signals were flushed and saved
// once, as the drain began, so what the drain's queries (and writes) taught was lost at
// every rollout. They are saved once serving has stopped.
func TestSignalsLearnedWhileDrainingAreSaved(t *testing.T) {
	data := t.TempDir()
	root := kbFolder(t, map[string]string{
		"ops/walrus.md": "# Walrus rotation\n\nThe walrus rotation runbook for the pager.\n",
		"ops/other.md":  "# Kafka\n\nConsumer lag alerts.\n",
	})
	addr, stop, wait := start(t, "-kb", "team="+root, "-data-dir", data, "-watch=false",
		"-drain-grace", "1s", "-signals-flush-interval", "1h")
	conn, err := grpcx.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	stop() // SIGTERM: the drain begins
	health := grpc_health_v1.NewHealthClient(conn)
	for {
		r, err := health.Check(ctx, &grpc_health_v1.HealthCheckRequest{Service: quarryv1.SearchService_ServiceDesc.ServiceName})
		if err == nil && r.GetStatus() == grpc_health_v1.HealthCheckResponse_NOT_SERVING {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the drain never began")
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond)
	res, err := quarryv1.NewSearchServiceClient(conn).Resolve(ctx, &quarryv1.ResolveRequest{KnowledgeBase: "team", Query: "walrus rotation runbook"})
	if err != nil {
		t.Fatalf("a question during the drain: %v", err)
	}
	if len(res.GetSources()) == 0 || res.GetSources()[0].GetPath() != "ops/walrus.md" {
		t.Fatalf("the question during the drain found %v", res.GetSources())
	}
	if err := wait(); err != nil {
		t.Fatalf("Run: %v", err)
	}

	raw, err := os.ReadFile(filepath.Join(data, "team", "signals.json"))
	if err != nil {
		t.Fatal(err)
	}
	var saved struct {
		Records []struct {
			Path       string  `json:"path"`
			Importance float64 `json:"importance"`
		} `json:"records"`
	}
	if err := json.Unmarshal(raw, &saved); err != nil {
		t.Fatal(err)
	}
	for _, r := range saved.Records {
		if r.Path == "ops/walrus.md" {
			if r.Importance <= 50 {
				t.Errorf("saved importance of ops/walrus.md = %v: the hit counted during the drain was lost", r.Importance)
			}
			return
		}
	}
	t.Errorf("ops/walrus.md not in the saved signals: %s", strings.TrimSpace(string(raw)))
}

// Two processes given the same -data-dir: the second waited forever for the lock Bleve
// holds on the first one's index (never listening, its health never answering), or,
// loading another tree, deleted the first one's index from under it as stale. It is
// refused at start, naming the folder.
func TestADataDirServesOneProcess(t *testing.T) {
	data := t.TempDir()
	root := kbFolder(t, map[string]string{"ops/walrus.md": "# Walrus\n\nThe walrus runbook.\n"})
	start(t, "-kb", "team="+root, "-data-dir", data, "-watch=false")

	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		errc <- Run(ctx, []string{"-listen", "127.0.0.1:0", "-kb", "team=" + root, "-data-dir", data, "-watch=false"},
			slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
	}()
	// Registered after start's cleanup, so it runs first: the first service stops only
	// after this one is told to.
	t.Cleanup(func() {
		cancel()
		select {
		case <-errc:
		case <-time.After(30 * time.Second):
			t.Error("the second service did not stop")
		}
	})
	select {
	case err := <-errc:
		errc <- err
		if err == nil || !strings.Contains(err.Error(), data) {
			t.Fatalf("the second service's Run = %v, want an error naming %s", err, data)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a second service on the same -data-dir did not return: it waits for the first one's index")
	}
}

// git-sync run with --root=<kb-root> --link=<kb> publishes each knowledge base as a link
// to its checkout. -kb-root served only the entries that are folders themselves, so
// such a knowledge base was left out (and a root holding only links refused to start),
// though -kb id=<the link> serves it and the loader follows a root link.
func TestKBRootServesKnowledgeBasesThatAreLinksToFolders(t *testing.T) {
	checkout := kbFolder(t, map[string]string{"ops/walrus.md": "# Walrus\n\nThe walrus runbook.\n"})
	kbRoot := kbFolder(t, map[string]string{"plain/ops/pager.md": "# Pager\n\nThe pager rotates weekly.\n"})
	if err := os.Symlink(checkout, filepath.Join(kbRoot, "team")); err != nil {
		t.Fatal(err)
	}
	// Neither a link to a file nor a dangling link is a knowledge base.
	if err := os.Symlink(filepath.Join(checkout, "ops", "walrus.md"), filepath.Join(kbRoot, "file")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(checkout, "missing"), filepath.Join(kbRoot, "dangling")); err != nil {
		t.Fatal(err)
	}
	cfg := Config{KBRoot: kbRoot}
	kbs, err := cfg.knowledgeBases(slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"plain": filepath.Join(kbRoot, "plain"), "team": filepath.Join(kbRoot, "team")}
	if len(kbs) != len(want) || kbs["plain"] != want["plain"] || kbs["team"] != want["team"] {
		t.Errorf("knowledge bases under -kb-root = %v, want %v", kbs, want)
	}
}

// A folder under -kb-root whose name is no knowledge base id ("Runbooks", "team docs")
// was skipped without a word: the operator saw a knowledge base missing and nothing
// saying why. It is named in a warning, and in the error when nothing is left; hidden
// folders and a volume's lost+found are not knowledge bases and pass unmentioned.
func TestFoldersThatAreNoKnowledgeBaseIDAreNamed(t *testing.T) {
	root := kbFolder(t, map[string]string{
		"ops/pager.md":        "# Pager\n\nThe pager rotates weekly.\n",
		"Runbooks/restart.md": "# Restart\n\nRestart the service.\n",
		".git/HEAD.md":        "# not a KB\n",
		"lost+found/x.md":     "# not a KB\n",
	})
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	cfg := Config{KBRoot: root}
	kbs, err := cfg.knowledgeBases(log)
	if err != nil || len(kbs) != 1 || kbs["ops"] == "" {
		t.Fatalf("knowledge bases = %v, %v; want ops alone", kbs, err)
	}
	if !strings.Contains(logs.String(), "Runbooks") || !strings.Contains(logs.String(), "a-z") {
		t.Errorf("log %q: want a warning naming Runbooks and the id rule", logs.String())
	}
	if strings.Contains(logs.String(), ".git") || strings.Contains(logs.String(), "lost+found") {
		t.Errorf("log %q names a hidden folder or lost+found", logs.String())
	}

	only := kbFolder(t, map[string]string{"Runbooks/restart.md": "# Restart\n\nRestart the service.\n"})
	cfg = Config{KBRoot: only}
	if _, err := cfg.knowledgeBases(log); err == nil || !strings.Contains(err.Error(), "Runbooks") {
		t.Errorf("a root with only Runbooks: %v, want an error naming it", err)
	}
}

// runAndAsk runs the service with args until it has made write (if not nil) and resolved
// questions in the knowledge base "team", stops it as SIGTERM does, and returns each
// question's route and source paths (not scores: they move with the hits each start
// learns).
func runAndAsk(t *testing.T, args []string, write func(context.Context, quarryv1.KnowledgeServiceClient), questions []string) []string {
	t.Helper()
	addr, stop, wait := start(t, args...)
	conn, err := grpcx.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if write != nil {
		write(ctx, quarryv1.NewKnowledgeServiceClient(conn))
	}
	var out []string
	for _, q := range questions {
		res, err := quarryv1.NewSearchServiceClient(conn).Resolve(ctx, &quarryv1.ResolveRequest{KnowledgeBase: "team", Query: q})
		if err != nil {
			t.Fatalf("%q: %v", q, err)
		}
		line := fmt.Sprintf("%q → %v:", q, res.GetRoute())
		for _, s := range res.GetSources() {
			line += " " + s.GetPath()
		}
		out = append(out, line)
	}
	stop()
	if err := wait(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	return out
}

// A restart with the same -data-dir answers as the first start did, from the index and
// term statistics it kept: the statistics file is read, not written again, and a damaged
// one is computed and kept again, with the same answers.
func TestARestartAnswersFromWhatTheDataDirKept(t *testing.T) {
	data := t.TempDir()
	root := kbFolder(t, map[string]string{
		"ops/walrus.md":    "# Walrus rotation\n\nThe walrus rotation runbook for the pager.\n",
		"ops/kafka.md":     "# Kafka\n\nConsumer lag alerts and the rotation of brokers.\n",
		"auth/_index.md":   "# Auth\n\nTokens and keys.\n",
		"auth/jwt/keys.md": "---\ntitle: Signing keys\ntags: [jwt, keys]\n---\nRotate the JWT signing key every 90 days.\n",
	})
	questions := []string{"walrus rotation runbook", "rotate the jwt signing key", "kafka consumer lag"}
	ask := func() []string {
		t.Helper()
		return runAndAsk(t, []string{"-kb", "team=" + root, "-data-dir", data, "-watch=false"}, nil, questions)
	}
	kept := func() (string, os.FileInfo) {
		t.Helper()
		matches, err := filepath.Glob(filepath.Join(data, "team", "corpus-*"))
		if err != nil || len(matches) != 1 {
			t.Fatalf("kept term statistics: %v, %v; want one file", matches, err)
		}
		fi, err := os.Stat(matches[0])
		if err != nil {
			t.Fatal(err)
		}
		return matches[0], fi
	}

	first := ask()
	file, before := kept()
	if again := ask(); !slices.Equal(again, first) {
		t.Errorf("after a restart:\n%s\nwant, as at the first start:\n%s", strings.Join(again, "\n"), strings.Join(first, "\n"))
	}
	if _, after := kept(); !after.ModTime().Equal(before.ModTime()) {
		t.Error("the restart wrote the term statistics again instead of reading them")
	}

	if err := os.WriteFile(file, []byte("damaged"), 0o644); err != nil {
		t.Fatal(err)
	}
	if again := ask(); !slices.Equal(again, first) {
		t.Errorf("after a restart with damaged statistics:\n%s\nwant:\n%s", strings.Join(again, "\n"), strings.Join(first, "\n"))
	}
	if _, after := kept(); after.Size() == int64(len("damaged")) {
		t.Error("the damaged statistics were not computed and kept again")
	}
}

// A knowledge base written through the gRPC API keeps its index when the service stops:
// the next start on the written folder reopens it rather than indexing the folder again,
// and answers as the written service did.
func TestARestartAfterWritesReopensTheWrittenIndex(t *testing.T) {
	data := t.TempDir()
	root := kbFolder(t, map[string]string{
		"ops/walrus.md":    "# Walrus rotation\n\nThe walrus rotation runbook for the pager.\n",
		"auth/jwt/keys.md": "---\ntitle: Signing keys\ntags: [jwt, keys]\n---\nRotate the JWT signing key every 90 days.\n",
	})
	questions := []string{"walrus rotation runbook", "kafka consumer lag", "rotate the jwt signing key"}
	run := func(write func(context.Context, quarryv1.KnowledgeServiceClient)) []string {
		t.Helper()
		return runAndAsk(t, []string{"-kb", "team=" + root, "-data-dir", data, "-watch=false"}, write, questions)
	}
	// The one index folder kept, named by the tree it holds, and its metadata file, which
	// a rebuild would replace.
	index := func() (string, os.FileInfo) {
		t.Helper()
		metas, err := filepath.Glob(filepath.Join(data, "team", "*", "index_meta.json"))
		if err != nil || len(metas) != 1 {
			t.Fatalf("kept indexes: %v, %v; want one", metas, err)
		}
		fi, err := os.Stat(metas[0])
		if err != nil {
			t.Fatal(err)
		}
		return filepath.Base(filepath.Dir(metas[0])), fi
	}

	run(nil)
	before, _ := index()
	written := run(func(ctx context.Context, kc quarryv1.KnowledgeServiceClient) {
		if _, err := kc.UpsertFile(ctx, &quarryv1.UpsertFileRequest{KnowledgeBase: "team", Path: "ops/kafka.md",
			Content: []byte("# Kafka\n\nConsumer lag alerts and the rotation of brokers.\n")}); err != nil {
			t.Fatal(err)
		}
		if _, err := kc.DeleteFile(ctx, &quarryv1.DeleteFileRequest{KnowledgeBase: "team", Path: "ops/walrus.md"}); err != nil {
			t.Fatal(err)
		}
	})
	after, kept := index()
	if after == before {
		t.Fatalf("the written index is still kept under the first tree's name %s", before)
	}
	if _, err := os.Stat(filepath.Join(data, "team", "corpus-"+after)); err != nil {
		t.Errorf("no term statistics kept for the written tree: %v", err)
	}
	if again := run(nil); !slices.Equal(again, written) {
		t.Errorf("after a restart:\n%s\nwant, as the written service answered:\n%s", strings.Join(again, "\n"), strings.Join(written, "\n"))
	}
	if name, now := index(); name != after || !os.SameFile(now, kept) || !now.ModTime().Equal(kept.ModTime()) {
		t.Error("the restart indexed the written folder again instead of reopening the kept index")
	}
}
