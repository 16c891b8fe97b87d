package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	quarryv1 "github.com/quarry-router/quarry/gen/quarry/v1"
	"github.com/quarry-router/quarry/services/search/kb"
	"github.com/quarry-router/quarry/services/search/kbgen"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// benchCmd is "quarry bench": a load generator over gRPC, against a running gateway on
// loopback or an embedded Quarry it starts on a generated knowledge base.
func benchCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	var srv serverFlags
	srv.register(fs, "", "gateway to load (loopback only); empty starts an embedded Quarry")
	kbID := fs.String("kb", "bench", "knowledge base to ask")
	files := fs.Int("files", 5000, "embedded: size of the generated knowledge base")
	questions := fs.String("questions", "", "JSONL file of questions ({\"query\": ...}); default: generated known-item questions")
	c := fs.Int("c", 64, "concurrent callers")
	d := fs.Duration("d", 30*time.Second, "how long to measure (after warm-up)")
	n := fs.Int("n", 0, "measure this many calls instead of a duration")
	warm := fs.Duration("warmup", 3*time.Second, "warm-up before measuring")
	mixFlag := fs.String("mix", "repeat=0.5,reword=0.2,new=0.25,echo=0.05", "weights of repeated (T0), reworded (T1), new questions and bare gRPC echoes")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	timeout := fs.Duration("timeout", 10*time.Second, "deadline of each call")
	if err := parseFlags(fs, args, false); err != nil {
		return err
	}
	// Flag values the run cannot use are the command line's mistake (exit 2), as the
	// flag package's own "invalid value" is; they exited 1, as a failed run does.
	mix, err := parseMix(*mixFlag)
	if err != nil {
		return usageError{err}
	}
	switch {
	case *c < 1 || *c > 1024:
		return usagef("-c must be in [1,1024], got %d", *c)
	case *n == 0 && (*d <= 0 || *d > time.Hour):
		return usagef("-d must be in (0, 1h], got %v", *d)
	case *n < 0:
		return usagef("-n must be >= 0, got %d", *n)
	}
	if err := checkCallFlags(*timeout, *kbID); err != nil {
		return err
	}
	// The id names the generated KB's folder under a temporary one: "-kb ../x" wrote the
	// files outside it, where the clean-up did not reach.
	if !kb.ValidID(*kbID) {
		return usagef("-kb %q is no knowledge base id (%s)", *kbID, kb.IDRule)
	}

	cfg := loadConfig{Concurrency: *c, Duration: *d, Count: *n, Warmup: *warm, KB: *kbID, Mix: mix, Timeout: *timeout}
	// Read first: a bad file is reported before a knowledge base is generated.
	var fileQuestions []string
	if *questions != "" {
		if fileQuestions, err = readQuestions(*questions); err != nil {
			return err
		}
	}
	target := srv.addr
	embedded := target == ""
	if embedded {
		dir, err := os.MkdirTemp("", "quarry-bench-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		fmt.Fprintf(stderr, "generating a %d-file knowledge base and starting Quarry...\n", *files)
		m, err := kbgen.Generate(filepath.Join(dir, *kbID), kbgen.Options{Files: *files, Seed: 1})
		if err != nil {
			return genkbError(err)
		}
		for _, q := range m.Questions(*files, 11) {
			cfg.Questions = append(cfg.Questions, q.Query)
		}
		sctx, cancel := context.WithCancel(ctx)
		defer cancel()
		// Every caller here is 127.0.0.1, one caller to the per-caller limits: lift them.
		sys, err := start(sctx, upConfig{Gateway: "127.0.0.1:0", Search: "127.0.0.1:0", Agent: "127.0.0.1:0", KBRoot: dir,
			GatewayArgs: []string{"-limit-concurrency=0"}},
			slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err != nil {
			return err
		}
		defer func() { cancel(); <-sys.done }()
		target = sys.Gateway.String()
	} else if !validTarget(target) {
		// As query's: "-addr 127.0.0.1" exited 1 with "missing port in address".
		return usagef("-addr %q is not HOST:PORT", target)
	} else if err := loopbackOnly(ctx, target); err != nil {
		return err
	}
	if *questions != "" {
		cfg.Questions = fileQuestions
	}
	if len(cfg.Questions) == 0 {
		return errors.New("no questions: pass -questions FILE with a running gateway")
	}

	srv.addr = target
	conn, err := srv.dial()
	if err != nil {
		return err
	}
	defer conn.Close()
	var mem memoryReport
	if embedded {
		cfg.OnMeasuring = func() { mem.RSSStartKiB, mem.HeapStartKiB = rssKiB(), liveHeapKiB() }
	}
	rep, err := runLoad(ctx, quarryv1.NewQueryServiceClient(conn), healthpb.NewHealthClient(conn), cfg, stderr)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		// Ctrl-C: the calls it cut short are not counted, so the run "passed" and
		// exited 0 with a report of whatever it had measured so far.
		return err
	}
	if embedded {
		runtime.GC()
		mem.RSSEndKiB, mem.RSSPeakKiB, mem.HeapEndKiB = rssKiB(), peakRSSKiB(), liveHeapKiB()
		rep.Memory = &mem
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return err
		}
	} else {
		rep.print(stdout)
	}
	// With -json too: a run whose calls failed exited 0.
	if rep.Errors > 0 {
		return fmt.Errorf("%d calls failed", rep.Errors)
	}
	return nil
}

// loopbackOnly refuses to load anything but this machine: a load generator pointed at a
// shared deployment by mistake is an outage.
func loopbackOnly(ctx context.Context, addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("-addr %q: %w", addr, err)
	}
	// Within a deadline and Ctrl-C: a resolver that does not answer held the command
	// for as long as the system's own retries took.
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	ips, err := net.DefaultResolver.LookupIPAddr(ctx, host)
	if err != nil {
		return fmt.Errorf("-addr %q: %w", addr, err)
	}
	for _, ip := range ips {
		if !ip.IP.IsLoopback() {
			return fmt.Errorf("-addr %q is not a loopback address: quarry bench only loads this machine", addr)
		}
	}
	return nil
}

func readQuestions(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	line := 0
	for sc.Scan() {
		line++
		// A blank line (a trailing one, one between groups) is no question; it was
		// "unexpected end of JSON input", with no line named.
		if strings.TrimSpace(sc.Text()) == "" {
			continue
		}
		var q struct {
			Query string `json:"query"`
		}
		if err := json.Unmarshal(sc.Bytes(), &q); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, line, err)
		}
		if q.Query != "" {
			out = append(out, q.Query)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s:%d: %w", path, line+1, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf(`%s: no questions (one {"query": ...} object a line)`, path)
	}
	return out, nil
}
