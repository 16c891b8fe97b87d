package app

import (
	"context"
	"flag"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	quarryv1 "github.com/quarry-router/quarry/gen/quarry/v1"
	"github.com/quarry-router/quarry/platform/auth"
	"github.com/quarry-router/quarry/platform/grpcx"
	"github.com/quarry-router/quarry/platform/telemetry/telemetrytest"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestAPIKeys runs the search service with API keys over a real socket: reads need a
// key allowed the knowledge base, writes the write right, and a forbidden knowledge
// base looks the same whether it exists or not.
func TestAPIKeys(t *testing.T) {
	dir := t.TempDir()
	keys := filepath.Join(dir, "keys.json")
	if err := os.WriteFile(keys, []byte(`[
  {"name": "reader", "sha256": "`+auth.HashKey("read-key")+`", "knowledge_bases": ["platform"]},
  {"name": "other", "sha256": "`+auth.HashKey("other-key")+`", "knowledge_bases": ["payments"]},
  {"name": "writer", "sha256": "`+auth.HashKey("write-key")+`", "knowledge_bases": ["*"], "write": true}
]`), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan net.Addr, 1)
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, []string{"-listen", "127.0.0.1:0", "-kb", "platform=../../../examples/kb/platform", "-auth-keys", keys, "-watch=false"},
			slog.New(slog.NewTextHandler(io.Discard, nil)), func(a net.Addr) { ready <- a })
	}()
	var addr net.Addr
	select {
	case addr = <-ready:
	case err := <-done:
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); <-done })

	call := func(key string, f func(context.Context, quarryv1.SearchServiceClient, quarryv1.KnowledgeServiceClient) error) codes.Code {
		conn, err := grpcx.Dial(addr.String(), grpcx.WithBearer(key))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		cctx, ccancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer ccancel()
		return status.Code(f(cctx, quarryv1.NewSearchServiceClient(conn), quarryv1.NewKnowledgeServiceClient(conn)))
	}
	resolve := func(kb string) func(context.Context, quarryv1.SearchServiceClient, quarryv1.KnowledgeServiceClient) error {
		return func(ctx context.Context, s quarryv1.SearchServiceClient, _ quarryv1.KnowledgeServiceClient) error {
			_, err := s.Resolve(ctx, &quarryv1.ResolveRequest{KnowledgeBase: kb, Query: "rotate the jwt signing key"})
			return err
		}
	}
	del := func(ctx context.Context, _ quarryv1.SearchServiceClient, k quarryv1.KnowledgeServiceClient) error {
		_, err := k.DeleteFile(ctx, &quarryv1.DeleteFileRequest{KnowledgeBase: "platform", Path: "no/such/file.md"})
		return err
	}
	tests := []struct {
		name string
		key  string
		call func(context.Context, quarryv1.SearchServiceClient, quarryv1.KnowledgeServiceClient) error
		want codes.Code
	}{
		{"a reader reads its knowledge base", "read-key", resolve("platform"), codes.OK},
		{"no key is UNAUTHENTICATED", "", resolve("platform"), codes.Unauthenticated},
		{"an unknown key is UNAUTHENTICATED", "guess", resolve("platform"), codes.Unauthenticated},
		{"another team's key is PERMISSION_DENIED", "other-key", resolve("platform"), codes.PermissionDenied},
		{"a missing knowledge base looks forbidden, not missing", "other-key", resolve("nosuchkb"), codes.PermissionDenied},
		{"a reader may not write", "read-key", del, codes.PermissionDenied},
		{"a writer gets past auth to the write side", "write-key", del, codes.NotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := call(tt.key, tt.call); got != tt.want {
				t.Fatalf("code = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestFailedStartReleasesMetricsPort(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	telemetrytest.FailedStartReleasesMetrics(t, func(listen, metrics string) error {
		return Run(context.Background(), []string{"-listen", listen, "-metrics-addr", metrics, "-kb", "platform=../../../examples/kb/platform", "-watch=false"}, log, nil)
	})
}

func TestMetricsAreServedWhileDraining(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	telemetrytest.MetricsServedWhileDraining(t, func(ctx context.Context, metrics string) error {
		return Run(ctx, []string{"-listen", "127.0.0.1:0", "-metrics-addr", metrics, "-drain-grace", "1s",
			"-kb", "platform=../../../examples/kb/platform", "-watch=false"}, log, nil)
	})
}

// Replicas share a version salt, and so cached answers, when only where they listen
// differs; any other setting makes its own.
func TestVersionSaltFollowsTheSettingsThatDecideAnswers(t *testing.T) {
	salt := func(args ...string) string {
		t.Helper()
		fs := flag.NewFlagSet("search", flag.ContinueOnError)
		var cfg Config
		cfg.RegisterFlags(fs)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		return versionSalt(fs)
	}
	base := salt()
	fs := flag.NewFlagSet("search", flag.ContinueOnError)
	new(Config).RegisterFlags(fs)
	for name := range operationalFlags {
		if fs.Lookup(name) == nil {
			t.Errorf("operationalFlags names -%s, which is no flag of the search service", name)
		}
	}
	for _, tc := range []struct {
		args []string
		same bool
	}{
		{[]string{"-listen", "127.0.0.1:9999", "-metrics-addr", "127.0.0.1:9998", "-health-listen", "127.0.0.1:9997"}, true},
		{[]string{"-drain-grace", "5s", "-drain-timeout", "20s", "-max-connection-age", "5m"}, true},
		// Where the trees, the index and the engine are: replicas mount them where they may.
		{[]string{"-kb-root", "/mnt/other", "-kb", "a=/x", "-data-dir", "/var/tmp/index", "-meili-url", "http://10.0.0.9:7700", "-meili-key", "k2"}, true},
		{[]string{"-engine", "meilisearch"}, false},
		{[]string{"-bleve-fuzziness", "2"}, false},
		{[]string{"-gate-direct-min", "0.9"}, false},
		{[]string{"-rank-coverage-exponent", "0.65"}, false},
	} {
		if got := salt(tc.args...) == base; got != tc.same {
			t.Errorf("%v: same salt %v, want %v", tc.args, got, tc.same)
		}
	}
}

func TestGoBuildIDNamesThisBuild(t *testing.T) {
	id := goBuildID()
	if runtime.GOOS == "linux" && id == "" {
		t.Fatal("no Go build ID read from this executable")
	}
	if id != goBuildID() {
		t.Fatal("the build ID changed between two reads")
	}
}

// The service writes and removes files in -data-dir: it must not be a knowledge base's
// folder, lie in one, or hold one.
func TestDataDirApartFromTheKnowledgeBases(t *testing.T) {
	base := t.TempDir()
	kbDir := filepath.Join(base, "kbs", "platform")
	if err := os.MkdirAll(kbDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(kbDir, filepath.Join(base, "link")); err != nil {
		t.Fatal(err)
	}
	// A link whose ".." is the knowledge base: the system resolves the link first.
	if err := os.MkdirAll(filepath.Join(kbDir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(base, "a"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(kbDir, "sub"), filepath.Join(base, "a", "l")); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		ok   bool
	}{
		{"a folder of its own", []string{"-kb", "platform=" + kbDir, "-data-dir", filepath.Join(base, "data")}, true},
		{"a sibling whose name starts alike", []string{"-kb", "platform=" + kbDir, "-data-dir", kbDir + "-data"}, true},
		{"the knowledge base's folder", []string{"-kb", "platform=" + kbDir, "-data-dir", kbDir}, false},
		{"inside the knowledge base", []string{"-kb", "platform=" + kbDir, "-data-dir", filepath.Join(kbDir, ".index")}, false},
		{"holding the knowledge base", []string{"-kb", "platform=" + kbDir, "-data-dir", filepath.Join(base, "kbs")}, false},
		{"-kb-root itself", []string{"-kb-root", filepath.Join(base, "kbs"), "-data-dir", filepath.Join(base, "kbs")}, false},
		{"through a symbolic link", []string{"-kb", "platform=" + kbDir, "-data-dir", filepath.Join(base, "link", "data")}, false},
		{"a relative spelling", []string{"-kb", "platform=" + kbDir, "-data-dir", relTo(t, kbDir)}, false},
		{"\"..\" after a link", []string{"-kb", "platform=" + kbDir, "-data-dir", filepath.Join(base, "a", "l") + "/../idx"}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fs := flag.NewFlagSet("search", flag.ContinueOnError)
			var cfg Config
			cfg.RegisterFlags(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			err := cfg.Validate()
			if tc.ok != (err == nil) || err != nil && !strings.Contains(err.Error(), "-data-dir") {
				t.Errorf("Validate() = %v, want ok %v", err, tc.ok)
			}
		})
	}
	// The service refuses to start so, before it writes anything; a knowledge base
	// -kb-root links to elsewhere (git-sync's layout) is checked too.
	elsewhere := filepath.Join(base, "elsewhere", "team")
	if err := os.MkdirAll(elsewhere, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(elsewhere, "a.md"), []byte("# A\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(elsewhere, filepath.Join(base, "kbs", "team")); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"-kb", "platform=" + kbDir, "-data-dir", kbDir},
		{"-kb-root", filepath.Join(base, "kbs"), "-data-dir", filepath.Join(elsewhere, "idx")},
	} {
		err := Run(context.Background(), append([]string{"-listen", "127.0.0.1:0", "-watch=false"}, args...), slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
		if err == nil || !strings.Contains(err.Error(), "overlaps the knowledge base folder") {
			t.Errorf("Run %q = %v, want the overlap refused", args, err)
		}
	}
	for _, dir := range []string{kbDir, elsewhere} {
		if entries, _ := os.ReadDir(dir); len(entries) != map[string]int{kbDir: 1, elsewhere: 1}[dir] {
			t.Errorf("%s holds %d entries after a refused start, want what the test put there", dir, len(entries))
		}
	}
}

func relTo(t *testing.T, dir string) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(wd, dir)
	if err != nil {
		t.Fatal(err)
	}
	return rel
}
