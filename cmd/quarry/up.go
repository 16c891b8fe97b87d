package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	gatewayapp "github.com/quarry-router/quarry/gateway/app"
	quarryv1 "github.com/quarry-router/quarry/gen/quarry/v1"
	"github.com/quarry-router/quarry/platform/config"
	"github.com/quarry-router/quarry/platform/grpcx"
	"github.com/quarry-router/quarry/platform/telemetry"
	agentapp "github.com/quarry-router/quarry/services/agent/app"
	"github.com/quarry-router/quarry/services/agent/llm"
	searchapp "github.com/quarry-router/quarry/services/search/app"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// upConfig says where the all-in-one run listens and what it serves.
type upConfig struct {
	Gateway, Search, Agent string
	KBRoot                 string
	Demo                   bool
	LogLevel               slog.Level
	// Extra flags passed through to each service.
	SearchArgs, GatewayArgs, AgentArgs []string
	// GatewayOpts change what the gateway builds (benchmarks hand in a filled cache).
	GatewayOpts []gatewayapp.Option
}

// system is a running all-in-one Quarry.
type system struct {
	Gateway, Search, Agent net.Addr
	done                   chan error
}

// start runs search, agent and gateway in this process, each on its own gRPC listener,
// so the calls between them take the same path as in a deployment. They stop in the
// order of their calls, as a rolling deployment stops them: the gateway first, when ctx
// ends; the agent once the gateway has drained, since the LLM answers still in flight
// call it; the search service last, since the agent's tools call it. Stopped all at once,
// an answer in flight lost the documents its tools asked for, unflagged. A service that
// fails stops the others the same way.
func start(ctx context.Context, cfg upConfig, log *slog.Logger) (*system, error) {
	if err := checkKBRoot(cfg.KBRoot); err != nil {
		return nil, err
	}
	g, gctx := errgroup.WithContext(ctx)
	base := context.WithoutCancel(ctx)
	searchCtx, stopSearch := context.WithCancel(base)
	agentCtx, stopAgent := context.WithCancel(base)
	gatewayCtx, stopGateway := context.WithCancel(base)
	go func() {
		<-gctx.Done()
		stopGateway()
	}()
	searchReady := make(chan net.Addr, 1)
	agentReady := make(chan net.Addr, 1)
	gatewayReady := make(chan net.Addr, 1)
	send := func(ch chan net.Addr) func(net.Addr) { return func(a net.Addr) { ch <- a } }
	// fail stops what has started, all at once: nothing is in flight yet.
	fail := func(err error) (*system, error) {
		stopGateway()
		stopAgent()
		stopSearch()
		if werr := g.Wait(); werr != nil {
			err = werr
		}
		return nil, err
	}

	g.Go(func() error {
		args := append([]string{"-listen", cfg.Search, "-kb-root", cfg.KBRoot}, cfg.SearchArgs...)
		return wrap("search", searchapp.Run(searchCtx, args, log.With("service", "search"), send(searchReady)))
	})
	sys := &system{done: make(chan error, 1)}
	var err error
	if sys.Search, err = await(gctx, searchReady); err != nil {
		return fail(err)
	}
	// The agent's tools call the search service, whose address is known only now.
	g.Go(func() error {
		defer stopSearch()
		args := append([]string{"-listen", cfg.Agent, "-search-addr", sys.Search.String()}, cfg.AgentArgs...)
		return wrap("agent", agentapp.Run(agentCtx, args, log.With("service", "agent"), send(agentReady)))
	})
	if sys.Agent, err = await(gctx, agentReady); err != nil {
		return fail(err)
	}
	g.Go(func() error {
		defer stopAgent()
		args := append([]string{"-listen", cfg.Gateway, "-search-addr", sys.Search.String(), "-agent-addr", sys.Agent.String()}, cfg.GatewayArgs...)
		return wrap("gateway", gatewayapp.Run(gatewayCtx, args, log.With("service", "gateway"), send(gatewayReady), cfg.GatewayOpts...))
	})
	if sys.Gateway, err = await(gctx, gatewayReady); err != nil {
		return fail(err)
	}
	go func() { sys.done <- g.Wait() }()
	return sys, nil
}

// checkKBRoot says what is wrong with the folder of knowledge bases, if anything.
func checkKBRoot(dir string) error {
	st, err := os.Stat(dir)
	switch {
	case err != nil:
		return fmt.Errorf("knowledge bases folder %q not found: run from the repository root or pass -kb-root", dir)
	case !st.IsDir():
		return fmt.Errorf("-kb-root %q is a file, not a folder: pass the folder whose subfolders are the knowledge bases", dir)
	}
	return nil
}

// await waits for a service to report its address, or for ctx (the group's) to end
// first: a service failed, or the stop was asked for.
func await(ctx context.Context, ready chan net.Addr) (net.Addr, error) {
	select {
	case a := <-ready:
		return a, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func wrap(service string, err error) error {
	if err != nil {
		return fmt.Errorf("%s: %w", service, err)
	}
	return nil
}

func up(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("up", flag.ContinueOnError)
	var cfg upConfig
	fs.StringVar(&cfg.Gateway, "listen", "127.0.0.1:7700", "gateway (QueryService) address")
	fs.StringVar(&cfg.Search, "search-listen", "127.0.0.1:7701", "search service address")
	fs.StringVar(&cfg.Agent, "agent-listen", "127.0.0.1:7702", "agent service address")
	fs.StringVar(&cfg.KBRoot, "kb-root", "examples/kb", "folder whose subfolders are the knowledge bases to serve")
	fs.BoolVar(&cfg.Demo, "demo", true, "ask one question per tier after start-up and print the answers")
	inPlace := fs.Bool("in-place", false, "serve -kb-root itself, so KnowledgeService writes change it (default: serve a temporary copy)")
	fs.TextVar(&cfg.LogLevel, "log-level", slog.LevelWarn, "log level of the services (debug, info, warn, error)")
	metricsAddr := fs.String("metrics-addr", "", `address to serve Prometheus /metrics of all three services on ("" = off)`)
	var llmCfg llm.Config
	llmCfg.RegisterFlags(fs)
	if err := parseFlags(fs, args, false); err != nil {
		return err
	}
	cfg.AgentArgs = llmArgs(fs)
	// Checked before anything starts, and before the copy, whose own error ("stat .: no
	// such file or directory") named neither the folder nor the way out.
	if err := checkKBRoot(cfg.KBRoot); err != nil {
		return err
	}
	log := slog.New(telemetry.LogHandler(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: cfg.LogLevel})))
	// What logs through slog's default (the LLM provider) goes where the services'
	// lines go, at their level, with trace ids, as daemon.Main has it.
	defer slog.SetDefault(slog.Default())
	slog.SetDefault(log)
	// Off unless OTEL_TRACES_EXPORTER or an OTLP endpoint is set; then one process
	// exports the spans of all three services.
	tel, err := telemetry.Setup(ctx, telemetry.Config{Service: "quarry"})
	if err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = tel.Shutdown(sctx)
	}()
	// Served until the services have drained after SIGTERM, not only until it: the
	// last scrapes record how the last calls went.
	stopMetrics, err := telemetry.StartMetrics(context.WithoutCancel(ctx), *metricsAddr, log)
	if err != nil {
		return err
	}
	defer stopMetrics()
	kbRootName := cfg.KBRoot
	began := time.Now()
	if !*inPlace {
		// The write side and the folder watcher would otherwise edit the repository's
		// example knowledge base.
		tmp, err := os.MkdirTemp("", "quarry-up-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		if err := copyKBRoot(tmp, cfg.KBRoot); err != nil {
			return fmt.Errorf("copy %s to serve it (pass -in-place to serve it as it is): %w", cfg.KBRoot, err)
		}
		fmt.Fprintf(stdout, "Serving a copy of %s in %s (-in-place serves and writes the folder itself)\n", cfg.KBRoot, tmp)
		cfg.KBRoot = tmp
	}
	// Stopped by the signal, or here when the demo fails: the services must be gone
	// before the deferred clean-up removes the copy they serve.
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	sys, err := start(ctx, cfg, log)
	if err != nil {
		if ctx.Err() != nil && errors.Is(err, context.Canceled) {
			return nil // Ctrl-C during start-up
		}
		if errors.Is(err, syscall.EADDRINUSE) {
			// Most often an earlier "quarry up" still running: "go run ... &" and
			// "kill $!" stop the go tool, not the program it started.
			return fmt.Errorf("%w (another quarry up still running? stop it, or choose other ports with -listen, -search-listen and -agent-listen)", err)
		}
		return err
	}
	fmt.Fprintf(stdout, "Quarry is up in %v (%s)\n", time.Since(began).Round(time.Millisecond), backends(llmCfg))
	fmt.Fprintf(stdout, "  gateway (QueryService)  %s\n  search  (SearchService) %s\n  agent   (AgentService)  %s\n", sys.Gateway, sys.Search, sys.Agent)
	if *metricsAddr != "" {
		fmt.Fprintf(stdout, "  metrics (Prometheus)    http://%s/metrics\n", *metricsAddr)
	}
	// The demo asks the example knowledge base; another -kb-root may not hold it, and its
	// first question's NOT_FOUND stopped the system that had just started.
	hasDemoKB := isDir(filepath.Join(cfg.KBRoot, demoKB))
	if hasDemoKB {
		fmt.Fprintf(stdout, "  try: go run ./cmd/quarry query -addr %s -kb %s -explain \"how do I rotate the JWT signing key?\"\n\n", sys.Gateway, demoKB)
	} else {
		fmt.Fprintf(stdout, "  try: go run ./cmd/quarry query -addr %s -kb KB -explain \"a question\"  (KB: a folder of %s)\n\n", sys.Gateway, kbRootName)
	}
	if cfg.Demo && !hasDemoKB {
		fmt.Fprintf(stdout, "(no demo: it asks the example knowledge base %q, which %s does not hold)\n\n", demoKB, kbRootName)
	} else if cfg.Demo {
		if err := demo(ctx, sys.Gateway.String(), stdout); err != nil {
			if ctx.Err() != nil {
				// Ctrl-C while a demo question waited (a local model writing a T3/T4
				// answer): a stop asked for, not a failure.
				<-sys.done
				return nil
			}
			// A gateway given API keys (QUARRY_GATEWAY_AUTH_KEYS) refused the demo's
			// keyless question, and UNAUTHENTICATED stopped the system just started.
			if c := status.Code(err); c != codes.Unauthenticated && c != codes.PermissionDenied {
				stop()
				<-sys.done
				return err
			}
			fmt.Fprintf(stdout, "(no demo: the gateway wants an API key that may query %q: set QUARRY_API_KEY to one, or -demo=false)\n\n", demoKB)
		}
	}
	fmt.Fprintln(stdout, "Serving; press Ctrl-C to stop.")
	err = <-sys.done
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// copyKBRoot copies the folder of knowledge bases to dst for "up" to serve. A knowledge
// base that is a link to a folder (git-sync publishes each checkout so) is served by the
// search service; os.CopyFS copied the link itself, so a relative one pointed nowhere
// from the copy ("no knowledge base found under -kb-root /tmp/quarry-up-…") and an
// absolute one let the write side change the original. Its folder is copied instead.
func copyKBRoot(dst, src string) error {
	entries, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	for _, e := range entries {
		from, to := filepath.Join(src, e.Name()), filepath.Join(dst, e.Name())
		if e.Type()&os.ModeSymlink != 0 {
			if fi, err := os.Stat(from); err != nil || !fi.IsDir() {
				continue // the search service serves only folders
			}
		} else if !e.IsDir() {
			continue
		}
		if err := copyKB(to, from); err != nil {
			return err
		}
	}
	return nil
}

// copyKB copies the knowledge base in folder src to dst, which it creates: its folders
// and regular files. Links, named pipes, sockets and devices inside it are left out: the
// search service serves none of them (it never follows a link), and os.CopyFS refused
// the whole copy for one of them, so "up" and "eval" failed on a knowledge base the
// search service serves. src itself may be a link to a folder.
func copyKB(dst, src string) error {
	src, err := filepath.EvalSymlinks(src)
	if err != nil {
		return err
	}
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		to := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(to, 0o755)
		case d.Type().IsRegular():
			return copyFile(to, p)
		default:
			return nil
		}
	})
}

func copyFile(dst, src string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("copy %s: %w", src, err)
	}
	return out.Close()
}

// llmArgs passes the LLM flags given to "quarry up" on to the agent. Flags left
// unset are not passed, so the agent's QUARRY_AGENT_LLM_* environment still applies.
func llmArgs(fs *flag.FlagSet) []string {
	var args []string
	fs.Visit(func(f *flag.Flag) {
		if strings.HasPrefix(f.Name, "llm-") {
			args = append(args, "-"+f.Name+"="+f.Value.String())
		}
	})
	return args
}

// llmName says which LLM the banner reports; the agent reads the environment itself.
func llmName(c llm.Config) string {
	base, model := c.BaseURL, c.Model
	if base == "" {
		base = os.Getenv(config.EnvName("agent", "llm-base-url"))
	}
	if model == "" {
		model = os.Getenv(config.EnvName("agent", "llm-model"))
	}
	return llm.Config{BaseURL: base, Model: model}.Describe()
}

// backends says what the system runs on: the embedded defaults, or the Redis cache and
// the Meilisearch engine the services' environment (QUARRY_GATEWAY_CACHE_BACKEND,
// QUARRY_SEARCH_ENGINE), which "up" passes on, chose instead; the banner claimed the
// defaults whatever they were.
func backends(llmCfg llm.Config) string {
	env := func(service, flag string) string { return strings.TrimSpace(os.Getenv(config.EnvName(service, flag))) }
	cache, engine := "in-process cache", "Bleve BM25"
	defaults := true
	if env("gateway", "cache-backend") == "redis" {
		cache, defaults = "Redis cache", false
		if addr := env("gateway", "redis-addr"); addr != "" {
			cache += " at " + addr
		}
	}
	if env("search", "engine") == "meilisearch" {
		engine, defaults = "Meilisearch", false
		if u := env("search", "meili-url"); u != "" {
			engine += " at " + u
		}
	}
	s := cache + ", " + engine + ", " + llmName(llmCfg)
	if defaults {
		s = "embedded defaults: " + s
	}
	return s
}

// demoKB is the knowledge base the demo asks: examples/kb/platform.
const demoKB = "platform"

func isDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}

// demoQuestion is one step of the start-up demo.
type demoQuestion struct {
	Why, KB, Query string
}

// demoQuestions walk through every tier on the example knowledge base.
var demoQuestions = []demoQuestion{
	{"T2: a question one document answers", demoKB, "How do I rotate the JWT signing key?"},
	{"T0: the same question again", demoKB, "how do I rotate the JWT signing key?"},
	{"T1: the same words in another order", demoKB, "JWT signing key: how do I rotate it?"},
	{"out of domain: a tool the knowledge base never mentions", demoKB, "How do I rotate Kafka consumer credentials?"},
	{"T3/T4 route: no single document answers (an LLM answers; degraded without one)", demoKB, "What should I check before a production deploy?"},
}

func demo(ctx context.Context, addr string, w io.Writer) error {
	// The key the query command would present, for a gateway that wants one; the
	// gateway is on this machine, where plaintext may carry it.
	conn, err := grpcx.Dial(addr, grpcx.WithBearer(apiKey("")))
	if err != nil {
		return err
	}
	defer conn.Close()
	c := quarryv1.NewQueryServiceClient(conn)
	for _, q := range demoQuestions {
		// Long enough for a local model to write a T3/T4 answer.
		qctx, cancel := context.WithTimeout(ctx, 90*time.Second)
		start := time.Now()
		resp, err := c.Query(qctx, &quarryv1.QueryRequest{KnowledgeBase: q.KB, Query: q.Query})
		cancel()
		if err != nil {
			return fmt.Errorf("demo question %q: %w", q.Query, err)
		}
		fmt.Fprintf(w, "# %s\n> %s\n  %s\n", q.Why, q.Query, summaryLine(resp, time.Since(start)))
		for i, s := range resp.GetSources() {
			if i == 3 {
				break
			}
			fmt.Fprintf(w, "  source %.3f %s\n", s.GetScore(), s.GetPath())
		}
		fmt.Fprintf(w, "  %s\n\n", firstLine(resp.GetAnswer()))
	}
	return nil
}

// firstLine returns the first non-heading line of a markdown answer.
func firstLine(md string) string {
	for _, l := range strings.Split(md, "\n") {
		l = strings.TrimSpace(l)
		if l != "" && !strings.HasPrefix(l, "#") {
			if len(l) > 160 {
				// Cut at a character boundary: a byte cut inside "“" or "é" printed
				// invalid UTF-8.
				cut := 160
				for cut > 0 && !utf8.RuneStart(l[cut]) {
					cut--
				}
				l = l[:cut] + "…"
			}
			return l
		}
	}
	return ""
}
