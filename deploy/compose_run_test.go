package deploy

import (
	"context"
	"maps"
	"net"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"
	quarryv1 "github.com/quarry-router/quarry/gen/quarry/v1"
	"github.com/quarry-router/quarry/platform/telemetry/otlptest"
	"github.com/quarry-router/quarry/services/agent/llm/llmtest"
	"github.com/quarry-router/quarry/services/search/engine/meili/meilitest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// loadCompose loads docker-compose.yml with compose-go, the loader `docker compose`
// uses: schema validation, interpolation from env (only env: the test's own
// environment must not leak in), the x-otel merge and the profiles enabled.
func loadCompose(t *testing.T, env map[string]string, profiles []string) *types.Project {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(root, "docker-compose.yml")
	p, err := loader.LoadWithContext(context.Background(), types.ConfigDetails{
		WorkingDir:  root,
		ConfigFiles: []types.ConfigFile{{Filename: file}},
		Environment: types.Mapping(env),
	}, func(o *loader.Options) { o.SetProjectName("quarry", true) }, loader.WithProfiles(profiles))
	if err != nil {
		t.Fatalf("compose-go: %v", err)
	}
	return p
}

// dependencyOrder lists the project's services with every service after the ones it
// depends on, independents in name order (compose starts those in parallel, so the test
// may not rely on any order between them).
func dependencyOrder(t *testing.T, p *types.Project) []string {
	t.Helper()
	var out []string
	state := map[string]int{} // 1 visiting, 2 done
	var visit func(name string)
	visit = func(name string) {
		switch state[name] {
		case 1:
			t.Fatalf("compose: dependency cycle through %s", name)
		case 2:
			return
		}
		state[name] = 1
		s, err := p.GetService(name)
		if err != nil {
			t.Fatalf("compose: %v", err)
		}
		deps := make([]string, 0, len(s.DependsOn))
		for d := range s.DependsOn {
			deps = append(deps, d)
		}
		sort.Strings(deps)
		for _, d := range deps {
			visit(d)
		}
		state[name] = 2
		out = append(out, name)
	}
	names := p.ServiceNames()
	sort.Strings(names)
	for _, n := range names {
		visit(n)
	}
	return out
}

// composeRun is one `docker compose up` played as processes.
type composeRun struct {
	t       *testing.T
	project *types.Project
	images  map[string]*image
	net     *network
	root    string
	// healthy and started record the conditions depends_on waits for.
	healthy, started map[string]bool
	procs            []*proc
	graces           []time.Duration
	collector        *otlptest.Collector
	// llm is the stand-in model when the llm profile runs.
	llm *llmtest.Server
	// traced are the OTEL_SERVICE_NAMEs of the services that export traces.
	traced []string
}

// TestComposeRuns plays docker-compose.yml: each Quarry service runs as its image would
// (ENTRYPOINT, ENV and USER from its Dockerfile, the compose environment, volumes as
// folders) on its own loopback address, in depends_on order, each waited for with its
// health check; then a question goes through the gateway, its repeat comes from the
// Redis cache, and every service must stop cleanly on SIGTERM within its
// stop_grace_period; the spans every service exported must reach the trace endpoint.
// It runs with the defaults, with the Meilisearch engine the file offers
// (QUARRY_SEARCH_ENGINE=meilisearch), and with the llm profile, where the agent's model
// (a stand-in for Ollama) has the agent read a document from search.
func TestComposeRuns(t *testing.T) {
	imgs := buildImages(t)
	for _, tc := range []struct {
		name     string
		env      map[string]string
		profiles []string
	}{
		{"defaults", nil, nil},
		{"meilisearch", map[string]string{"QUARRY_SEARCH_ENGINE": "meilisearch"}, nil},
		// The README's `docker compose --profile llm up` with Ollama's address.
		{"llm profile", map[string]string{"QUARRY_LLM_BASE_URL": "http://ollama:11434/v1", "QUARRY_LLM_MODEL": "llama3.2"}, []string{"llm"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &composeRun{t: t, project: loadCompose(t, tc.env, tc.profiles), images: imgs, root: runRoot(t),
				healthy: map[string]bool{}, started: map[string]bool{}}
			r.run()
		})
	}
}

func (r *composeRun) run() {
	t := r.t
	base := subnet(t)
	r.net = &network{ips: map[string]string{}, standIns: map[string]string{}}
	order := dependencyOrder(t, r.project)
	names := slices.Sorted(slices.Values(order))
	for i, name := range names {
		r.net.ips[name] = base + strconv.Itoa(2+i)
	}
	r.net.dns = startDNS(t, r.net)
	// Jaeger and Ollama are called later, not at start (exporters retry, the agent asks
	// its model per question), so nothing waits for them: their stand-ins run from the
	// start, on ports of their own.
	r.collector = otlptest.Start(t)
	for _, name := range order {
		switch s := r.service(name); {
		case strings.HasPrefix(s.Image, "jaegertracing/"):
			r.net.addStandIn(name+":4317", strings.TrimPrefix(r.collector.Endpoint(), "http://"))
		case strings.HasPrefix(s.Image, "ollama/ollama:"):
			r.llm = llmtest.New(t)
			r.net.addStandIn(name+":11434", strings.TrimPrefix(r.llm.URL, "http://"))
		}
	}
	for _, name := range order {
		r.checkDependencies(name)
		r.startService(name)
	}

	gw := r.service("gateway")
	// A client reaches the published gRPC port; the container side is Target.
	grpcPort := -1
	for _, p := range gw.Ports {
		if p.Published == "7700" {
			grpcPort = int(p.Target)
		}
	}
	if grpcPort < 0 {
		t.Fatalf("gateway publishes %v, want 7700", gw.Ports)
	}
	addr := net.JoinHostPort(r.net.ips["gateway"], strconv.Itoa(grpcPort))
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	engine := r.service("search").Environment["QUARRY_SEARCH_ENGINE"]
	askThrough(t, conn, net.JoinHostPort(r.net.ips["redis"], "6379"), engine == nil || *engine != "meilisearch", r.llm)
	r.checkWrites(conn)
	r.scrapeMetrics()

	// docker compose down stops dependents first.
	for i := len(r.procs) - 1; i >= 0; i-- {
		r.procs[i].stop(t, r.graces[i])
	}
	// Spans are flushed at shutdown: every service named its traces as compose says.
	seen := map[string]bool{}
	for _, s := range r.collector.Spans() {
		seen[s.Service] = true
	}
	for _, svc := range r.traced {
		if !seen[svc] {
			t.Errorf("no span from %s reached the OTLP endpoint (have %v)", svc, seen)
		}
	}
	// Jaeger takes traces only: metrics pushed to it fail at every push (Unimplemented,
	// logged by every service each minute), so compose leaves them to /metrics.
	if got := r.collector.Metrics(); len(got) > 0 {
		t.Errorf("metrics were pushed to Jaeger's OTLP port, which takes none: %v", slices.Sorted(maps.Keys(got)))
	}
}

// scrapeMetrics scrapes each Quarry service's /metrics, on the address its
// QUARRY_<SERVICE>_METRICS_ADDR names and at the port compose publishes for it. The
// agent has LLM token metrics only where a model answered (the llm profile); without
// one, its gRPC server metrics.
func (r *composeRun) scrapeMetrics() {
	t := r.t
	for _, name := range []string{"gateway", "search", "agent"} {
		s := r.service(name)
		v := s.Environment["QUARRY_"+strings.ToUpper(name)+"_METRICS_ADDR"]
		if v == nil {
			t.Errorf("%s: no QUARRY_%s_METRICS_ADDR: /metrics is off", name, strings.ToUpper(name))
			continue
		}
		_, port, err := net.SplitHostPort(*v)
		if err != nil {
			t.Errorf("%s: metrics address %q: %v", name, *v, err)
			continue
		}
		if !slices.ContainsFunc(s.Ports, func(p types.ServicePortConfig) bool { return strconv.Itoa(int(p.Target)) == port }) {
			t.Errorf("%s: compose does not publish its metrics port %s (ports %v)", name, port, s.Ports)
		}
		want := metricsFamilies["quarry-"+name]
		if name == "agent" && r.llm == nil {
			want = "rpc_server_"
		}
		scrape(t, name, want, "http://"+net.JoinHostPort(r.net.ips[name], port)+"/metrics")
	}
}

// The file checkWrites adds to the example knowledge base, and a question only it answers.
const (
	writtenPath     = "runbooks/zorbulator-flux-valve.md"
	writtenQuestion = "How do I recalibrate the zorbulator flux valve?"
	writtenContent  = "---\ntitle: Recalibrating the zorbulator flux valve\ntags: [zorbulator]\n---\n" +
		"# Recalibrating the zorbulator flux valve\n\nTo recalibrate the zorbulator flux valve, drain the " +
		"zorbulator, reset the flux valve to its factory offset and run the zorbulator calibration job.\n"
)

// checkWrites plays what the compose file offers for the write side: the CLI on the
// host (`quarry sync`, `archive`, whose -addr default is 127.0.0.1:7701) reaches the
// search service's KnowledgeService on a port compose publishes on the host's
// loopback only (the search service takes no API keys), the named volume takes the
// write, and the gateway's next answer comes from the new file.
func (r *composeRun) checkWrites(gateway *grpc.ClientConn) {
	t := r.t
	s := r.service("search")
	target := -1
	for _, p := range s.Ports {
		if p.Published != "7701" {
			continue
		}
		if p.HostIP != "127.0.0.1" {
			t.Errorf("search publishes 7701 on %q: without API keys it must be the host's loopback only (127.0.0.1:7701:7701)", p.HostIP)
		}
		target = int(p.Target)
	}
	if target < 0 {
		t.Errorf("search publishes %v: the CLI's sync and archive (-addr 127.0.0.1:7701) cannot reach its KnowledgeService", s.Ports)
		return
	}
	conn, err := grpc.NewClient(net.JoinHostPort(r.net.ips["search"], strconv.Itoa(target)), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	resp, err := quarryv1.NewKnowledgeServiceClient(conn).UpsertFile(ctx, &quarryv1.UpsertFileRequest{
		KnowledgeBase: exampleKB, Path: writtenPath, Content: []byte(writtenContent)})
	if err != nil {
		t.Errorf("UpsertFile %s on the published port: %v", writtenPath, err)
		return
	}
	if resp.GetFile().GetOutcome() != quarryv1.FileOutcome_FILE_OUTCOME_INDEXED {
		t.Errorf("UpsertFile %s: %v, want INDEXED", writtenPath, resp.GetFile())
	}
	// The gateway learns the new generation through its watch: within a moment.
	var last *quarryv1.QueryResponse
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if last, err = ask(gateway, writtenQuestion, 15*time.Second); err != nil {
			t.Fatalf("Query(%q): %v", writtenQuestion, err)
		}
		if len(last.GetSources()) > 0 && last.GetSources()[0].GetPath() == writtenPath {
			return
		}
	}
	t.Errorf("%q after the write: tier %v, sources %v; want %s first", writtenQuestion, last.GetTier(), last.GetSources(), writtenPath)
}

func (r *composeRun) service(name string) types.ServiceConfig {
	s, err := r.project.GetService(name)
	if err != nil {
		r.t.Fatal(err)
	}
	return s
}

// checkDependencies fails if a depends_on condition of name does not hold, as
// `docker compose up` would, and if name's environment names a service it does not
// depend on (it could start before that service answers), other than the trace sink
// and optional (profile) services.
func (r *composeRun) checkDependencies(name string) {
	t := r.t
	s := r.service(name)
	for dep, d := range s.DependsOn {
		switch d.Condition {
		case types.ServiceConditionHealthy:
			if !r.healthy[dep] {
				t.Fatalf("%s depends on %s being healthy, which it is not (no health check?)", name, dep)
			}
		case types.ServiceConditionStarted, "":
			if !r.started[dep] {
				t.Fatalf("%s depends on %s, which did not start", name, dep)
			}
		default:
			t.Fatalf("%s: depends_on condition %q is not played by this test", name, d.Condition)
		}
	}
	for k, v := range s.Environment {
		if v == nil || strings.HasPrefix(k, "OTEL_") {
			continue
		}
		for _, m := range hostPortRE.FindAllStringSubmatch(*v, -1) {
			other := r.net.canonical(m[2])
			if other == "" || other == name || len(r.service(other).Profiles) > 0 {
				continue // an optional service cannot be depended on
			}
			if _, ok := s.DependsOn[other]; !ok {
				t.Errorf("%s: %s=%s names %s, but %s does not depend_on it: it may start before %s answers", name, k, *v, other, name, other)
			}
		}
	}
}

// startService starts one compose service: a Quarry image as its binary, Redis as a
// real redis-server, Meilisearch and Jaeger as the test's stand-ins.
func (r *composeRun) startService(name string) {
	t := r.t
	s := r.service(name)
	ip := r.net.ips[name]
	switch {
	case s.Build != nil:
		r.startQuarry(name, s)
	case strings.HasPrefix(s.Image, "redis:"):
		if len(s.Command) == 0 || s.Command[0] != "redis-server" {
			t.Fatalf("redis: command %v does not run redis-server", s.Command)
		}
		if s.HealthCheck == nil || !slices.Equal(s.HealthCheck.Test, []string{"CMD", "redis-cli", "ping"}) {
			t.Fatalf("redis: health check %v, want redis-cli ping (what the test plays)", s.HealthCheck)
		}
		dir := filepath.Join(r.root, name, "data")
		if err := mkdir(dir, keep, 0o755); err != nil {
			t.Fatal(err)
		}
		startRedis(t, ip, dir, s.Command[1:])
		r.healthy[name] = true
	case strings.HasPrefix(s.Image, "getmeili/meilisearch:"):
		key := s.Environment["MEILI_MASTER_KEY"]
		if key == nil || *key == "" {
			t.Fatal("meilisearch: no MEILI_MASTER_KEY")
		}
		m := meilitest.New(t, *key)
		r.net.addStandIn(name+":7700", strings.TrimPrefix(m.URL, "http://"))
		if s.HealthCheck != nil {
			checkMeiliHealth(t, m.URL, *key)
			r.healthy[name] = true
		}
	case strings.HasPrefix(s.Image, "jaegertracing/"), strings.HasPrefix(s.Image, "ollama/ollama:"):
		// Its stand-in runs from the start (see run).
	default:
		t.Fatalf("compose service %s (image %s) is not played by this test", name, s.Image)
	}
	r.started[name] = true
}

// startQuarry runs a service built from one of the Quarry Dockerfiles.
func (r *composeRun) startQuarry(name string, s types.ServiceConfig) {
	t := r.t
	var img *image
	for key, df := range images {
		if filepath.Clean(s.Build.Dockerfile) == df {
			img = r.images[key]
		}
	}
	if img == nil {
		t.Fatalf("%s builds %s, which is not a Quarry Dockerfile", name, s.Build.Dockerfile)
	}
	if len(s.Entrypoint) > 0 || len(s.Command) > 0 {
		t.Fatalf("%s overrides the image's entrypoint or command; the test plays images as built", name)
	}
	user := img.User
	if s.User != "" {
		user = s.User
	}
	as, err := userOf(user)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	ctrRoot := filepath.Join(r.root, name)
	mounts := r.volumes(name, s, img, ctrRoot)

	env := append([][2]string(nil), img.Env...)
	keys := make([]string, 0, len(s.Environment))
	for k := range s.Environment {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if v := s.Environment[k]; v != nil {
			env = append(env, [2]string{k, *v})
		}
	}
	for i := range env {
		reads, err := img.reads(env[i][0])
		if err != nil {
			t.Errorf("%s: %v", name, err)
		}
		if !reads {
			continue
		}
		v, err := r.net.rewrite(r.net.ips[name], mounts, env[i][1])
		if err != nil {
			t.Fatalf("%s: %s: %v", name, env[i][0], err)
		}
		env[i][1] = v
		if env[i][0] == "OTEL_SERVICE_NAME" {
			r.traced = append(r.traced, v)
		}
	}
	home := filepath.Join(ctrRoot, "home")
	if err := mkdir(home, as, 0o755); err != nil {
		t.Fatal(err)
	}
	env = append(env, [2]string{"PATH", filepath.Dir(img.Bin)}, [2]string{"HOME", home})
	argv := append([]string{img.Bin}, img.Entrypoint[1:]...)
	p := start(t, procSpec{name: name, argv: argv, env: envList(env), as: as, dir: home})

	// The image's HEALTHCHECK (a compose healthcheck would replace it): grpc-health-probe
	// on the container's own loopback, which here is its address.
	if s.HealthCheck != nil {
		t.Fatalf("%s: a compose healthcheck over the image's is not played by this test", name)
	}
	addr, service, err := img.healthAddr()
	if err != nil {
		t.Fatal(err)
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil || (host != "127.0.0.1" && host != "localhost") {
		t.Fatalf("%s: HEALTHCHECK -addr=%s: want the container's loopback", img.Dockerfile, addr)
	}
	checkHealth(t, p, "HEALTHCHECK", net.JoinHostPort(r.net.ips[name], port), service, 30*time.Second)
	r.healthy[name] = true
	r.procs = append(r.procs, p)
	grace := 10 * time.Second // compose's default
	if s.StopGracePeriod != nil {
		grace = time.Duration(*s.StopGracePeriod)
	}
	r.graces = append(r.graces, grace)
}

// volumes makes a folder for each volume and for each path the image ships, with the
// owner Docker would give it, and returns the mounts.
func (r *composeRun) volumes(name string, s types.ServiceConfig, img *image, ctrRoot string) []mount {
	t := r.t
	if err := mkdir(ctrRoot, keep, 0o755); err != nil {
		t.Fatal(err)
	}
	var mounts []mount
	hidden := map[string]bool{}
	for i, v := range s.Volumes {
		host := filepath.Join(ctrRoot, "vol"+strconv.Itoa(i))
		switch v.Type {
		case types.VolumeTypeBind:
			// A copy, so the KnowledgeService cannot write into the repository. A bind
			// mount keeps the host's owner: here, the test's.
			if err := copyTree(v.Source, host, keep, 0o755); err != nil {
				t.Fatalf("%s: bind %s: %v", name, v.Source, err)
			}
		case types.VolumeTypeVolume:
			// A new named volume takes the image's folder at the target, owner included;
			// where the image has none, Docker creates it root's, 0755.
			var from *imageCopy
			for _, c := range img.Copies {
				if filepath.Clean(c.Dst) == filepath.Clean(v.Target) {
					from = &c
				}
			}
			if from == nil {
				if err := mkdir(host, owner{0, 0}, 0o755); err != nil {
					t.Fatal(err)
				}
				break
			}
			if err := from.layOutAsBuilt(host, false); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
		default:
			t.Fatalf("%s: volume type %s is not played by this test", name, v.Type)
		}
		mounts = append(mounts, mount{ctr: filepath.Clean(v.Target), host: host})
		hidden[filepath.Clean(v.Target)] = true
	}
	shipped, err := img.shippedMounts(ctrRoot, hidden, false)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return append(mounts, shipped...)
}
