package deploy

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	quarryv1 "github.com/quarry-router/quarry/gen/quarry/v1"
	"github.com/quarry-router/quarry/platform/redistest"
	"github.com/quarry-router/quarry/platform/syncbuf"
	"github.com/quarry-router/quarry/platform/telemetry/telemetrytest"
	"github.com/quarry-router/quarry/services/agent/llm/llmtest"
	"golang.org/x/net/dns/dnsmessage"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// This file is the machinery shared by TestComposeRuns and TestOverlaysRun: each
// container becomes a process on its own loopback address (127.0.0.0/8 all reaches lo
// on Linux), with the environment its image and its deployment file give it, its mounts
// as folders, and service names answered by a small DNS server.

// The question the example knowledge base answers from one document (T2, DIRECT), and
// one it routes to an LLM, which without an LLM comes back degraded from the agent.
const (
	directQuestion = "How do I rotate the JWT signing key?"
	llmQuestion    = "What should I check before a production deploy?"
	oodQuestion    = "How do I rotate Kafka consumer credentials?"
	// toolDocument is what the stand-in model asks the agent's read_document tool for.
	toolDocument      = "auth/api-keys/issuing-api-keys.md"
	toolDocumentTitle = "title: Issuing an API key for a partner or batch job"
	exampleKB         = "platform"
)

// nonrootUID is the distroless "nonroot" user (and the manifests' runAsUser).
const nonrootUID = 65532

// subnet returns a random 127.x.y.0 prefix for one run, so two runs at once (another
// engineer's `make test`, a CI retry) never fight over the fixed ports the deployment
// files name.
func subnet(t *testing.T) string {
	t.Helper()
	var b [2]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("127.%d.%d.", 1+int(b[0])%254, 1+int(b[1])%254)
}

// runRoot makes a folder for one run that the services' non-root user can enter
// (t.TempDir's parents are 0700).
func runRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "quarry-deploy-run-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// asRoot reports whether the test may give files and processes another owner: then the
// containers run as their image's or manifest's user, and mounts get the owner and mode
// the container runtime would give them.
func asRoot() bool { return os.Geteuid() == 0 }

// owner is a uid and gid; -1 keeps the test's own.
type owner struct{ uid, gid int }

var keep = owner{-1, -1}

// userOf parses a Dockerfile USER ("nonroot:nonroot", "65532").
func userOf(user string) (owner, error) {
	id := func(s string) (int, error) {
		switch s {
		case "nonroot":
			return nonrootUID, nil
		case "root", "":
			return 0, nil
		}
		return strconv.Atoi(s)
	}
	u, g, ok := strings.Cut(user, ":")
	uid, err := id(u)
	if err != nil {
		return keep, fmt.Errorf("USER %q: %w", user, err)
	}
	gid := uid
	if ok {
		if gid, err = id(g); err != nil {
			return keep, fmt.Errorf("USER %q: %w", user, err)
		}
	}
	return owner{uid, gid}, nil
}

// copyTree copies the folder src to dst, giving everything to o (when running as root).
func copyTree(src, dst string, o owner, dirMode fs.FileMode) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		to := filepath.Join(dst, rel)
		if d.IsDir() {
			if err := os.MkdirAll(to, dirMode); err != nil {
				return err
			}
			if err := os.Chmod(to, dirMode); err != nil {
				return err
			}
		} else {
			raw, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			if err := os.WriteFile(to, raw, 0o644); err != nil {
				return err
			}
		}
		return chown(to, o)
	})
}

func chown(path string, o owner) error {
	if !asRoot() || o == keep {
		return nil
	}
	return os.Lchown(path, o.uid, o.gid)
}

// mkdir makes a folder owned by o with mode.
func mkdir(path string, o owner, mode fs.FileMode) error {
	if err := os.MkdirAll(path, mode); err != nil {
		return err
	}
	if err := os.Chmod(path, mode); err != nil {
		return err
	}
	return chown(path, o)
}

// mount is a container path and the folder standing in for it.
type mount struct {
	ctr, host string
}

// network maps the names a deployment file uses to this machine: service names to the
// containers' loopback addresses, and the few outside dependencies the test stands in
// for on ports of its own (a trace collector, Meilisearch, an LLM) to those.
type network struct {
	// ips maps a service name (compose service, Kubernetes Service) to its address.
	ips map[string]string
	// headless maps a headless Service's name to the addresses of all its pods, which
	// its DNS answer lists (ips holds the first); it changes as pods come and go.
	headless map[string][]string
	// mu guards the maps once the DNS server reads them: the test's goroutine changes
	// them (addStandIn, setPods) under it, the server answers under it.
	mu sync.Mutex
	// standIns maps "name:port" to the host:port of the test's stand-in.
	standIns map[string]string
	// namespace is the Kubernetes namespace ("" for compose), for the FQDN forms.
	namespace string
	// dns is the address of the DNS server answering for ips.
	dns string
}

// canonical returns the service a host name means, or "" if none: the name itself, or
// in Kubernetes <svc>.<ns>, <svc>.<ns>.svc and <svc>.<ns>.svc.cluster.local.
func (n *network) canonical(host string) string {
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if _, ok := n.ips[host]; ok {
		return host
	}
	for k := range n.standIns {
		if strings.HasPrefix(k, host+":") {
			return host
		}
	}
	if n.namespace == "" {
		return ""
	}
	svc, rest, ok := strings.Cut(host, ".")
	if !ok {
		return ""
	}
	switch rest {
	case n.namespace, n.namespace + ".svc", n.namespace + ".svc.cluster.local":
		return n.canonical(svc)
	}
	return ""
}

// lookup answers a DNS question for name: the service's addresses. It also accepts
// the name under the machine's own search domains, which Go's resolver tries first for
// a name without dots.
func (n *network) lookup(name string) ([]string, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	name = strings.TrimSuffix(strings.ToLower(name), ".")
	svc := n.canonical(name)
	if svc == "" {
		first, rest, _ := strings.Cut(name, ".")
		if strings.HasSuffix(rest, "svc.cluster.local") || strings.HasSuffix(rest, ".svc") {
			return nil, false // another namespace's Service: not ours
		}
		svc = first
	}
	ip, ok := n.ips[svc]
	if !ok {
		return nil, false
	}
	if pods, ok := n.headless[svc]; ok {
		return slices.Clone(pods), true
	}
	return []string{ip}, true
}

// addStandIn points "name:port" at a stand-in's host:port.
func (n *network) addStandIn(nameport, addr string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.standIns[nameport] = addr
}

// setPods changes the addresses a headless Service's DNS answer lists, as the endpoints
// controller does when a pod becomes ready or starts to terminate.
func (n *network) setPods(svc string, ips []string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.headless == nil {
		n.headless = map[string][]string{}
	}
	n.headless[svc] = slices.Clone(ips)
}

var (
	hostPortRE = regexp.MustCompile(`(^|//|@)([A-Za-z0-9][A-Za-z0-9.-]*):(\d+)`)
	bindAllRE  = regexp.MustCompile(`^(0\.0\.0\.0)?:(\d+)$`)
)

// rewrite turns one value of a container's environment (or argument) into what it
// means on this machine: a bind-all listen address binds the container's own address,
// a dns:/// target asks the test's DNS server, other host:port names get the service's
// address (or the stand-in's), and container paths become their mounts' folders. It
// fails on a host or an absolute path the deployment does not provide: in a container
// that would be a name that does not resolve or a file that is not there.
func (n *network) rewrite(ip string, mounts []mount, v string) (string, error) {
	if m := bindAllRE.FindStringSubmatch(v); m != nil {
		return net.JoinHostPort(ip, m[2]), nil
	}
	if rest, ok := strings.CutPrefix(v, "dns:///"); ok {
		host, _, err := net.SplitHostPort(rest)
		if err != nil {
			return "", fmt.Errorf("gRPC target %q: %w", v, err)
		}
		// Strict here (lookup also takes the machine's search domains): the name must be
		// one the cluster's or compose's DNS would answer.
		if c := n.canonical(host); c == "" || n.ips[c] == "" {
			return "", fmt.Errorf("gRPC target %q: no service %q in this deployment", v, host)
		}
		return "dns://" + n.dns + "/" + rest, nil
	}
	var bad error
	v = hostPortRE.ReplaceAllStringFunc(v, func(s string) string {
		m := hostPortRE.FindStringSubmatch(s)
		host, port := m[2], m[3]
		if net.ParseIP(host) != nil || host == "localhost" || !strings.ContainsAny(host, "abcdefghijklmnopqrstuvwxyz") {
			return s
		}
		c := n.canonical(host)
		if a, ok := n.standIns[c+":"+port]; ok {
			return m[1] + a
		}
		if a, ok := n.ips[c]; ok && c != "" {
			return m[1] + net.JoinHostPort(a, port)
		}
		bad = errors.Join(bad, fmt.Errorf("%q names %s:%s, which no service of this deployment answers", v, host, port))
		return s
	})
	if bad != nil {
		return "", bad
	}
	if strings.HasPrefix(v, "/") {
		ms := append([]mount(nil), mounts...)
		sort.Slice(ms, func(i, j int) bool { return len(ms[i].ctr) > len(ms[j].ctr) })
		for _, m := range ms {
			if v == m.ctr || strings.HasPrefix(v, m.ctr+"/") {
				return m.host + strings.TrimPrefix(v, m.ctr), nil
			}
		}
		return "", fmt.Errorf("path %s: nothing is mounted there and the image does not ship it", v)
	}
	return v, nil
}

// startDNS serves A records for the network's services on a UDP port of 127.0.0.1, so
// gRPC's dns:/// resolver finds the containers by the names the deployment uses (and a
// TLS client checks the certificate against those names).
func startDNS(t *testing.T, n *network) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pc.Close() })
	go func() {
		buf := make([]byte, 1500)
		for {
			sz, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			if resp, err := dnsAnswer(n, buf[:sz]); err == nil {
				_, _ = pc.WriteTo(resp, from)
			}
		}
	}()
	return pc.LocalAddr().String()
}

func dnsAnswer(n *network, query []byte) ([]byte, error) {
	var p dnsmessage.Parser
	h, err := p.Start(query)
	if err != nil {
		return nil, err
	}
	q, err := p.Question()
	if err != nil {
		return nil, err
	}
	ips, known := n.lookup(q.Name.String())
	rh := dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired}
	if !known {
		rh.RCode = dnsmessage.RCodeNameError
	}
	b := dnsmessage.NewBuilder(nil, rh)
	if err := b.StartQuestions(); err != nil {
		return nil, err
	}
	if err := b.Question(q); err != nil {
		return nil, err
	}
	if err := b.StartAnswers(); err != nil {
		return nil, err
	}
	for _, ip := range ips {
		if q.Type != dnsmessage.TypeA {
			break
		}
		a := dnsmessage.AResource{}
		copy(a.A[:], net.ParseIP(ip).To4())
		if err := b.AResource(dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 5}, a); err != nil {
			return nil, err
		}
	}
	return b.Finish()
}

// proc is one container's process.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  *syncbuf.Buffer // its output, from its pipe goroutines
	done chan struct{}
}

// procSpec says how to start a container's process.
type procSpec struct {
	name string
	argv []string
	env  []string
	as   owner
	dir  string
}

// start runs a container's process with exactly env, as spec.as when running as root,
// killed if the test process dies, and its output logged if the test fails.
func start(t *testing.T, spec procSpec) *proc {
	t.Helper()
	cmd := exec.Command(spec.argv[0], spec.argv[1:]...)
	cmd.Env = spec.env
	cmd.Dir = spec.dir
	p := &proc{name: spec.name, cmd: cmd, log: &syncbuf.Buffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.log, p.log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if asRoot() && spec.as != keep {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(spec.as.uid), Gid: uint32(spec.as.gid)}
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("%s: start %v: %v", spec.name, spec.argv, err)
	}
	go func() { _ = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("--- %s output:\n%s", spec.name, tail(p.log.String(), 6000))
		}
	})
	return p
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM, as docker stop and the kubelet do, and fails unless the process
// exits 0 within grace (after which the runtime would SIGKILL it).
func (p *proc) stop(t *testing.T, grace time.Duration) {
	t.Helper()
	if p.exited() {
		t.Errorf("%s had exited before SIGTERM: %v", p.name, p.cmd.ProcessState)
		return
	}
	begin := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Errorf("%s: SIGTERM: %v", p.name, err)
		return
	}
	select {
	case <-p.done:
		if code := p.cmd.ProcessState.ExitCode(); code != 0 {
			t.Errorf("%s exited %d after SIGTERM, want 0", p.name, code)
		}
		t.Logf("%s stopped in %v (grace %v)", p.name, time.Since(begin).Round(time.Millisecond), grace)
	case <-time.After(grace):
		t.Errorf("%s still running %v after SIGTERM: the runtime would SIGKILL it", p.name, grace)
	}
}

// checkHealth asks the gRPC health service at addr about service, plaintext, as
// grpc-health-probe and the kubelet's gRPC probe do, until it answers SERVING or
// timeout passes; it fails at once if the process exits.
func checkHealth(t *testing.T, p *proc, what, addr, service string, timeout time.Duration) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("%s: %s: %v", p.name, what, err)
	}
	defer conn.Close()
	hc := healthpb.NewHealthClient(conn)
	deadline := time.Now().Add(timeout)
	var last string
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: service})
		cancel()
		if err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return
		}
		last = fmt.Sprint(resp.GetStatus(), " ", err)
		if p.exited() {
			t.Fatalf("%s exited (%v) before its %s at %s (service %q) passed", p.name, p.cmd.ProcessState, what, addr, service)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s at %s (service %q) not SERVING within %v: %s", p.name, what, addr, service, timeout, last)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// startRedis runs redis-server with the deployment's arguments, bound to the container's
// address on the port the image listens on (6379), and waits for PING, the equivalent of
// `redis-cli ping`.
func startRedis(t *testing.T, ip, dir string, args []string) *proc {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatal(redistest.InstallHint)
	}
	// The image's WORKDIR is /data; logs go to stdout as in the image.
	argv := append([]string{"redis-server"}, args...)
	argv = append(argv, "--bind", ip, "--port", "6379", "--dir", dir, "--logfile", "", "--daemonize", "no")
	p := start(t, procSpec{name: "redis", argv: argv, env: []string{"PATH=" + os.Getenv("PATH")}, as: keep})
	deadline := time.Now().Add(10 * time.Second)
	for {
		reply, err := redisCommand(net.JoinHostPort(ip, "6379"), "PING")
		if err == nil && reply == "+PONG" {
			return p
		}
		if p.exited() || time.Now().After(deadline) {
			t.Fatalf("redis-server %v not answering PING: %v %q", argv, err, reply)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// redisCommand sends one inline command and returns the reply's first line.
func redisCommand(addr, command string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := io.WriteString(c, command+"\r\n"); err != nil {
		return "", err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSpace(line), err
}

// checkMeiliHealth is the equivalent of the Meilisearch health check (GET /health).
// The stand-in checks the API key on every route, so the probe presents it.
func checkMeiliHealth(t *testing.T, url, key string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url+"/health", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("meilisearch health: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("meilisearch health: %s", resp.Status)
	}
}

// askThrough runs the end-to-end check through a gateway connection: a question the
// example knowledge base answers directly, the same question again from the shared
// Redis cache (which must then hold entries), and a question routed to an LLM. Without
// an LLM the agent must answer it "no LLM provider configured" — proof the gateway
// reached it; with llm (the stand-in model) the model asks the agent's read_document
// tool for a document, which the agent must fetch from the search service, and the
// answer must not be degraded. With wantDirect false (the Meilisearch stand-in, which
// does not rank as Meilisearch does) the first question may take an LLM route, and the
// cache is checked with an out-of-domain question instead, which both engines decide
// alike.
func askThrough(t *testing.T, conn *grpc.ClientConn, redisAddr string, wantDirect bool, llm *llmtest.Server) {
	t.Helper()
	c := quarryv1.NewQueryServiceClient(conn)
	ask := func(q string) *quarryv1.QueryResponse {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		resp, err := c.Query(ctx, &quarryv1.QueryRequest{KnowledgeBase: exampleKB, Query: q})
		if err != nil {
			t.Fatalf("Query(%q) through the gateway: %v", q, err)
		}
		return resp
	}
	answer := llmtest.Turn{Content: "Check the deploy checklist."}
	if llm != nil {
		llm.Repeat(answer) // a question the stand-in search routes to the model
	}
	first := ask(directQuestion)
	if len(first.GetSources()) == 0 || !strings.Contains(first.GetSources()[0].GetPath(), "jwt") {
		t.Errorf("%q: top source %v, want the JWT key rotation document", directQuestion, first.GetSources())
	}
	cached, want := directQuestion, quarryv1.Tier_TIER_DIRECT
	switch {
	case first.GetTier() == quarryv1.Tier_TIER_DIRECT && !first.GetFromCache():
	case wantDirect:
		t.Fatalf("first ask: tier %v from_cache %v, want DIRECT computed now", first.GetTier(), first.GetFromCache())
	default:
		t.Logf("%q: tier %v with the Meilisearch stand-in", directQuestion, first.GetTier())
		cached, want = oodQuestion, quarryv1.Tier_TIER_OUT_OF_DOMAIN
		if first = ask(oodQuestion); first.GetTier() != want {
			t.Fatalf("%q: tier %v, want %v", oodQuestion, first.GetTier(), want)
		}
	}
	n, err := redisCommand(redisAddr, "DBSIZE")
	if err != nil || n == ":0" {
		t.Fatalf("Redis DBSIZE after a %v answer: %q, %v; want the answer cached there", want, n, err)
	}
	again := ask(cached)
	if again.GetTier() != quarryv1.Tier_TIER_EXACT_CACHE || !again.GetFromCache() || again.GetOriginTier() != want || again.GetAnswer() != first.GetAnswer() {
		t.Errorf("repeat: tier %v from_cache %v origin %v, want the %v answer from the exact cache", again.GetTier(), again.GetFromCache(), again.GetOriginTier(), want)
	}
	if llm == nil {
		resp := ask(llmQuestion)
		if !resp.GetDegraded() || resp.GetDegradedReason() != "no LLM provider configured" {
			t.Errorf("LLM route: degraded %v reason %q, want the agent's 'no LLM provider configured'", resp.GetDegraded(), resp.GetDegradedReason())
		}
		return
	}
	llm.Reset()
	llm.Script(llmtest.Turn{ToolCalls: []llmtest.Call{{ID: "call_read", Name: "read_document", Arguments: `{"path":"` + toolDocument + `"}`}}}, answer)
	resp := ask(llmQuestion)
	if resp.GetDegraded() || (resp.GetTier() != quarryv1.Tier_TIER_SINGLE_LLM && resp.GetTier() != quarryv1.Tier_TIER_AGENTIC) {
		t.Fatalf("LLM route: tier %v degraded %v (%s), want the model's answer", resp.GetTier(), resp.GetDegraded(), resp.GetDegradedReason())
	}
	read := false
	for _, req := range llm.Requests() {
		for _, m := range req.Messages {
			read = read || m.Role == "tool" && strings.Contains(m.Text(), toolDocumentTitle)
		}
	}
	if !read {
		t.Errorf("the model never got %s back from the agent's read_document tool: the agent did not reach search", toolDocument)
	}
	if p := llm.Problems(); len(p) > 0 {
		t.Errorf("LLM stand-in: %v", p)
	}
}

// randomKey returns a fresh API key.
func randomKey(t *testing.T) string {
	t.Helper()
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("qk_%x%x", binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:]))
}

// envList turns ordered pairs into KEY=value, the later of two same keys winning.
func envList(pairs [][2]string) []string {
	idx := map[string]int{}
	var out []string
	for _, kv := range pairs {
		if i, ok := idx[kv[0]]; ok {
			out[i] = kv[0] + "=" + kv[1]
			continue
		}
		idx[kv[0]] = len(out)
		out = append(out, kv[0]+"="+kv[1])
	}
	return out
}

// scrape GETs a service's Prometheus /metrics at each of urls (one per replica), as
// Prometheus would, and checks each answers and one holds a sample of the metric family
// want: client-side round-robin may send all of a few questions to one replica.
func scrape(t *testing.T, service, want string, urls ...string) {
	t.Helper()
	var bodies []string
	for _, url := range urls {
		body, err := telemetrytest.Scrape(url)
		if err != nil {
			t.Errorf("%s: %v", service, err)
			return
		}
		if strings.Contains(body, "\n"+want) {
			return
		}
		bodies = append(bodies, body)
	}
	t.Errorf("%s: no replica's metrics (%s) hold %s after the questions:\n%.800s", service, strings.Join(urls, ", "), want, bodies[0])
}
