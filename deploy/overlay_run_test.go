package deploy

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quarry-router/quarry/platform/grpcx"
	"github.com/quarry-router/quarry/platform/grpcx/tlstest"
	"github.com/quarry-router/quarry/platform/telemetry/otlptest"
	"github.com/quarry-router/quarry/services/agent/llm/llmtest"
	"github.com/quarry-router/quarry/services/search/engine/meili/meilitest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// What an overlay expects from outside itself, played by the test:
const (
	// otelCollector is the OTLP endpoint's Service; no overlay deploys it (a cluster's
	// own collector is assumed), so the test's collector stands in.
	otelCollector = "otel-collector:4317"
	// kbClaim is the prod knowledge bases' volume, filled by the teams' sync job; here
	// with the example knowledge base.
	kbClaim = "quarry-kb"
	// apiKeysSecret holds the gateway's callers' keys; production replaces the example
	// entry, and so does the test, adding a key of its own.
	apiKeysSecret, apiKeysFile = "quarry-api-keys", "api-keys.json"
	// operatorLLM is the model endpoint the test configures for the agent (the overlays
	// leave quarry-config's LLM settings empty for the operator to fill): an Ollama in another
	// namespace, played by the stand-in model, so the agent's tools call search as
	// deployed (over mutual TLS in prod).
	operatorLLM = "ollama.llm.svc.cluster.local:11434"
)

// tlsSecretRE names the Secrets cert-manager would create (not in the overlay).
var tlsSecretRE = regexp.MustCompile(`^(quarry-[a-z]+)-tls$`)

// overlayRun is one overlay's Quarry workloads played as processes, each pod on its
// own loopback address: one per StatefulSet, and up to maxReplicas per Deployment.
type overlayRun struct {
	t         *testing.T
	overlay   string
	images    map[string]*image
	root      string
	namespace string
	net       *network
	ca        *tlstest.CA
	collector *otlptest.Collector
	llm       *llmtest.Server
	key       string

	configMaps map[string]map[string]string
	secrets    map[string]map[string]string
	claims     map[string]bool
	// podIPs maps a workload (Deployment or StatefulSet) to its (first) pod's address,
	// replicas a Deployment to all its pods' addresses.
	podIPs   map[string]string
	replicas map[string][]string
	// meili is the Meilisearch stand-in's URL, once it runs.
	meili string
	// traced are the OTEL_SERVICE_NAMEs of the Quarry pods.
	traced []string
	// callerTrace and unsampledTrace are the trace ids (hex) of the questions' callers:
	// one sampled its trace, the other did not.
	callerTrace, unsampledTrace string
	// policies are the overlay's NetworkPolicies, templates the pods' templates, and
	// calls the connections the pods' settings make, checked against the policies.
	policies  []*networkingv1.NetworkPolicy
	templates map[string]*corev1.PodTemplateSpec
	calls     []call
}

// call is a connection one pod's settings make to another's Service.
type call struct {
	from, to, service string
	port              int32
}

// TestOverlaysRun renders each overlay and runs its gateway, search and agent pods as
// processes: command, args and environment (envFrom, valueFrom) from the rendered
// objects, image ENTRYPOINT and ENV from the Dockerfiles, volumes as folders (Secrets
// and ConfigMaps written out, cert-manager's certificates made by a test CA), Service
// names answered by a DNS server with the pods' addresses, Redis as a real
// redis-server and Meilisearch as the scripted stand-in. Every startup, readiness and
// liveness probe must pass as the kubelet would run it (plaintext gRPC health on the
// probe's port and service, against the pod address); then a question goes through the
// gateway the way the overlay serves it (TLS in prod), and each pod must exit 0 on
// SIGTERM within its terminationGracePeriodSeconds.
func TestOverlaysRun(t *testing.T) {
	imgs := buildImages(t)
	for _, name := range slices.Sorted(maps.Keys(overlays)) {
		t.Run(name, func(t *testing.T) {
			r := &overlayRun{t: t, images: imgs, root: runRoot(t), key: randomKey(t),
				configMaps: map[string]map[string]string{}, secrets: map[string]map[string]string{},
				claims: map[string]bool{}, podIPs: map[string]string{}, replicas: map[string][]string{}}
			r.overlay = name
			r.run(overlays[name])
		})
	}
}

func (r *overlayRun) run(dir string) {
	t := r.t
	var deployments []*appsv1.Deployment
	var statefulSets []*appsv1.StatefulSet
	var services []*corev1.Service
	autoscaled := map[string]int32{} // a Deployment's autoscaler's minReplicas
	for _, o := range render(t, dir) {
		switch x := o.(type) {
		case *autoscalingv2.HorizontalPodAutoscaler:
			autoscaled[x.Spec.ScaleTargetRef.Name] = *x.Spec.MinReplicas
		case *appsv1.Deployment:
			deployments = append(deployments, x)
			r.namespace = x.Namespace
		case *appsv1.StatefulSet:
			statefulSets = append(statefulSets, x)
		case *corev1.Service:
			services = append(services, x)
		case *corev1.ConfigMap:
			r.configMaps[x.Name] = x.Data
		case *corev1.Secret:
			data := map[string]string{}
			for k, v := range x.Data {
				data[k] = string(v)
			}
			for k, v := range x.StringData { // the API server merges stringData into data
				data[k] = v
			}
			r.secrets[x.Name] = data
		case *corev1.PersistentVolumeClaim:
			r.claims[x.Name] = true
		case *networkingv1.NetworkPolicy:
			r.policies = append(r.policies, x)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	r.createOperatorSecrets()
	sort.Slice(deployments, func(i, j int) bool { return deployments[i].Name < deployments[j].Name })
	sort.Slice(statefulSets, func(i, j int) bool { return statefulSets[i].Name < statefulSets[j].Name })

	// Pod addresses, then each Service's name to the address of the pod it selects.
	base := subnet(t)
	next := 2
	templates := map[string]*corev1.PodTemplateSpec{}
	for _, d := range deployments {
		for range replicaCount(d, autoscaled[d.Name]) {
			r.replicas[d.Name] = append(r.replicas[d.Name], base+strconv.Itoa(next))
			next++
		}
		r.podIPs[d.Name], templates[d.Name] = r.replicas[d.Name][0], &d.Spec.Template
	}
	for _, s := range statefulSets {
		r.podIPs[s.Name], templates[s.Name] = base+strconv.Itoa(next), &s.Spec.Template
		next++
	}
	r.collector = otlptest.Start(t)
	r.llm = llmtest.New(t)
	r.net = &network{ips: map[string]string{}, namespace: r.namespace, standIns: map[string]string{
		otelCollector: strings.TrimPrefix(r.collector.Endpoint(), "http://"),
		operatorLLM:   strings.TrimPrefix(r.llm.URL, "http://"),
	}}
	var cfg map[string]string
	for name, data := range r.configMaps {
		if isQuarryConfig(name) {
			cfg = data
		}
	}
	if cfg == nil {
		t.Fatal("no ConfigMap quarry-config")
	}
	for k, v := range map[string]string{"QUARRY_AGENT_LLM_BASE_URL": "http://" + operatorLLM + "/v1", "QUARRY_AGENT_LLM_MODEL": "llama3.2"} {
		if cfg[k] == "" {
			cfg[k] = v
		}
	}
	for _, svc := range services {
		r.mapService(svc, templates)
	}
	r.net.dns = startDNS(t, r.net)
	r.addAPIKey()

	// Backing services first (the stand-ins must exist before a pod's environment names
	// them); the Quarry pods then start together, as a rollout would, search last, so
	// the gateway and the agent must cope with a search service that is not up yet.
	for _, s := range statefulSets {
		r.startBacking(s)
	}
	var started []*startedPod
	for _, d := range deployments {
		for i := range r.replicas[d.Name] {
			started = append(started, r.startPod(d, i))
		}
	}
	for _, sp := range started {
		r.probe(sp)
	}

	r.templates = templates
	r.templates[collectorPod] = collectorTemplate()
	r.checkPolicies()
	r.query(templates)
	r.scrapeMetrics()
	r.checkReplicas(started)
	r.checkDrainWithAnswerInFlight(started)

	for i := len(started) - 1; i >= 0; i-- {
		if !started[i].stopped {
			started[i].p.stop(t, started[i].grace())
		}
	}
	seen := map[string]bool{}
	for _, s := range r.collector.Spans() {
		switch s.TraceID.String() {
		case r.callerTrace:
			seen[s.Service] = true
		case r.unsampledTrace:
			t.Errorf("%s exported span %s of a trace its caller did not sample", s.Service, s.Name)
		}
	}
	for _, svc := range r.traced {
		if !seen[svc] {
			t.Errorf("no span from %s of the caller's sampled trace reached the OTLP endpoint (have %v)", svc, seen)
		}
	}
}

// mapService points a Service's name at the pod it selects. The test has no kube-proxy:
// a client reaches the pod on the Service's port, so that port must be the one the
// container serves (a headless Service never translates it anyway).
func (r *overlayRun) mapService(svc *corev1.Service, templates map[string]*corev1.PodTemplateSpec) {
	t := r.t
	var target string
	for name, tpl := range templates {
		if len(svc.Spec.Selector) > 0 && labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(tpl.Labels)) {
			if target != "" {
				t.Fatalf("Service %s selects both %s and %s", svc.Name, target, name)
			}
			target = name
		}
	}
	if target == "" {
		t.Fatalf("Service %s selects no pod of the overlay", svc.Name)
	}
	for _, sp := range svc.Spec.Ports {
		port, ok := containerPort(templates[target].Spec.Containers[0], sp.TargetPort)
		if !ok {
			t.Errorf("Service %s port %s: targetPort %s is no port of %s", svc.Name, sp.Name, sp.TargetPort.String(), target)
		} else if port != sp.Port {
			t.Errorf("Service %s port %d goes to container port %d; the test maps Services to pods without port translation", svc.Name, sp.Port, port)
		}
	}
	r.net.ips[svc.Name] = r.podIPs[target]
	if svc.Spec.ClusterIP == corev1.ClusterIPNone && len(r.replicas[target]) > 0 {
		r.net.setPods(svc.Name, r.replicas[target])
	}
}

// maxReplicas bounds the pods played per Deployment: two show what replicas share and
// how they balance, on a 2-core machine.
const maxReplicas = 2

// replicaCount is how many of a Deployment's pods the test plays: what its autoscaler
// scales it to at once (minReplicas, 0 without one), else its replicas.
func replicaCount(d *appsv1.Deployment, minReplicas int32) int {
	n := 1 // Kubernetes' default
	switch {
	case minReplicas > 0:
		n = int(minReplicas)
	case d.Spec.Replicas != nil:
		n = int(*d.Spec.Replicas)
	}
	return max(1, min(n, maxReplicas))
}

// containerPort resolves a port by number or by name.
func containerPort(c corev1.Container, p intstr.IntOrString) (int32, bool) {
	for _, cp := range c.Ports {
		if (p.Type == intstr.String && cp.Name == p.StrVal) || (p.Type == intstr.Int && cp.ContainerPort == p.IntVal) {
			return cp.ContainerPort, true
		}
	}
	return 0, false
}

// createOperatorSecrets creates, in an overlay that leaves its Secrets to the operator
// (outOfBandSecrets), each of operatorSecrets as the operator would before applying it:
// random values, an API keys file with no entry yet (addAPIKey adds the test's).
func (r *overlayRun) createOperatorSecrets() {
	t := r.t
	if !outOfBandSecrets[r.overlay] {
		return
	}
	for name, keys := range operatorSecrets {
		if _, ok := r.secrets[name]; ok {
			t.Fatalf("%s renders Secret %s, which the operator creates", r.overlay, name)
		}
		data := map[string]string{}
		for _, k := range keys {
			switch k {
			case apiKeysFile:
				data[k] = "[]"
			default:
				data[k] = randomKey(t)
			}
		}
		r.secrets[name] = data
	}
}

// checkLLMKey: every request the agent sent the model carries the API key the
// agent's environment gives it (from quarry-secrets), as a bearer token.
func (r *overlayRun) checkLLMKey() {
	t := r.t
	tpl, ok := r.templates["quarry-agent"]
	if !ok {
		return
	}
	key := r.env("quarry-agent", tpl.Spec.Containers[0], r.images["agent"])["QUARRY_AGENT_LLM_API_KEY"]
	reqs := r.llm.Requests()
	if len(reqs) == 0 {
		t.Error("the model got no request")
	}
	for _, req := range reqs {
		want := ""
		if key != "" {
			want = "Bearer " + key
		}
		if req.Authorization != want {
			t.Errorf("the agent called the model with Authorization %q, want %q (QUARRY_AGENT_LLM_API_KEY)", req.Authorization, want)
			return
		}
	}
}

// addAPIKey adds the test's key to the gateway's keys, as an operator replaces the
// example entry; the entries already there must still load.
func (r *overlayRun) addAPIKey() {
	t := r.t
	data, ok := r.secrets[apiKeysSecret]
	if !ok || data[apiKeysFile] == "" {
		t.Fatalf("no Secret %s with %s", apiKeysSecret, apiKeysFile)
	}
	var keys []map[string]any
	if err := json.Unmarshal([]byte(data[apiKeysFile]), &keys); err != nil {
		t.Fatalf("Secret %s %s: %v", apiKeysSecret, apiKeysFile, err)
	}
	sum := sha256.Sum256([]byte(r.key))
	keys = append(keys, map[string]any{"name": "deploy-test", "sha256": hex.EncodeToString(sum[:]), "knowledge_bases": []string{exampleKB}})
	raw, err := json.Marshal(keys)
	if err != nil {
		t.Fatal(err)
	}
	data[apiKeysFile] = string(raw)
}

// startBacking runs a StatefulSet's pod: Redis as redis-server with the container's
// args, Meilisearch as the scripted stand-in with the master key the manifest gives it.
func (r *overlayRun) startBacking(s *appsv1.StatefulSet) {
	t := r.t
	c := s.Spec.Template.Spec.Containers[0]
	env := r.env(s.Name, c, nil)
	switch {
	case strings.HasPrefix(c.Image, "redis:"):
		if len(c.Command) > 0 {
			t.Fatalf("%s: command %v overrides the image's redis-server", s.Name, c.Command)
		}
		dir := filepath.Join(r.root, s.Name)
		if err := mkdir(dir, keep, 0o755); err != nil {
			t.Fatal(err)
		}
		startRedis(t, r.podIPs[s.Name], dir, c.Args)
	case strings.HasPrefix(c.Image, "getmeili/meilisearch:"):
		key := env["MEILI_MASTER_KEY"]
		if len(key) < 16 && env["MEILI_ENV"] == "production" {
			t.Fatalf("%s: Meilisearch refuses to start in production with a master key under 16 bytes", s.Name)
		}
		m := meilitest.New(t, key)
		r.meili = m.URL
		port, ok := containerPort(c, intstr.FromString("http"))
		if !ok {
			t.Fatalf("%s: no http port", s.Name)
		}
		for svc, ip := range r.net.ips {
			if ip == r.podIPs[s.Name] {
				r.net.addStandIn(svc+":"+strconv.Itoa(int(port)), strings.TrimPrefix(m.URL, "http://"))
			}
		}
		checkMeiliHealth(t, m.URL, key)
	default:
		t.Fatalf("StatefulSet %s (image %s) is not played by this test", s.Name, c.Image)
	}
}

// env resolves a container's environment as the kubelet does: the image's ENV, then
// envFrom in order, then env (valueFrom included), later entries winning, and $(VAR)
// references to earlier variables expanded.
func (r *overlayRun) env(pod string, c corev1.Container, img *image) map[string]string {
	return r.envAt(pod, r.podIPs[pod], c, img)
}

// envAt is env for the pod of a workload at ip.
func (r *overlayRun) envAt(pod, ip string, c corev1.Container, img *image) map[string]string {
	t := r.t
	out := map[string]string{}
	if img != nil {
		for _, kv := range img.Env {
			out[kv[0]] = kv[1]
		}
	}
	for _, from := range c.EnvFrom {
		var data map[string]string
		var ok bool
		switch {
		case from.ConfigMapRef != nil:
			data, ok = r.configMaps[from.ConfigMapRef.Name]
		case from.SecretRef != nil:
			data, ok = r.secrets[from.SecretRef.Name]
		}
		if !ok {
			t.Fatalf("%s: envFrom %v names nothing the overlay has", pod, from)
		}
		for k, v := range data {
			out[from.Prefix+k] = v
		}
	}
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			out[e.Name] = expand(e.Value, out)
			continue
		}
		var data map[string]string
		var key string
		switch vf := e.ValueFrom; {
		case vf.ConfigMapKeyRef != nil:
			data, key = r.configMaps[vf.ConfigMapKeyRef.Name], vf.ConfigMapKeyRef.Key
		case vf.SecretKeyRef != nil:
			data, key = r.secrets[vf.SecretKeyRef.Name], vf.SecretKeyRef.Key
		case vf.FieldRef != nil && vf.FieldRef.FieldPath == "status.podIP":
			out[e.Name] = ip
			continue
		case vf.FieldRef != nil && vf.FieldRef.FieldPath == "metadata.namespace":
			out[e.Name] = r.namespace
			continue
		default:
			t.Fatalf("%s: env %s: valueFrom %v is not played by this test", pod, e.Name, vf)
		}
		v, ok := data[key]
		if !ok {
			t.Fatalf("%s: env %s: key %s is not in the referenced ConfigMap or Secret", pod, e.Name, key)
		}
		out[e.Name] = v
	}
	return out
}

var varRefRE = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// expand replaces $(VAR) with the variable's value, leaving unknown references as they
// are, as Kubernetes does.
func expand(s string, env map[string]string) string {
	return varRefRE.ReplaceAllStringFunc(s, func(m string) string {
		if v, ok := env[m[2:len(m)-1]]; ok {
			return v
		}
		return m
	})
}

// startedPod is a Quarry pod whose process runs.
type startedPod struct {
	name     string // the pod's: the workload's, "-<n>" added for the nth replica after the first
	workload string
	ip       string
	p        *proc
	spec     *corev1.PodSpec
	env      map[string]string
	stopped  bool // by the test, before the end
}

// grace is the pod's terminationGracePeriodSeconds.
func (sp *startedPod) grace() time.Duration {
	if g := sp.spec.TerminationGracePeriodSeconds; g != nil {
		return time.Duration(*g) * time.Second
	}
	return 30 * time.Second
}

// startPod runs replica n of a Deployment's single container as the image's binary.
func (r *overlayRun) startPod(d *appsv1.Deployment, n int) *startedPod {
	t := r.t
	ps := &d.Spec.Template.Spec
	if len(ps.Containers) != 1 || len(ps.InitContainers) != 0 {
		t.Fatalf("%s: the test plays one container and no init containers", d.Name)
	}
	c := ps.Containers[0]
	repo := c.Image
	if i := strings.LastIndex(repo, "/"); i >= 0 {
		repo = repo[i+1:]
	}
	repo, tag, _ := strings.Cut(repo, ":")
	img := r.images[strings.TrimPrefix(repo, "quarry-")]
	if img == nil || tag == "" {
		t.Fatalf("%s: image %s is not a tagged Quarry image", d.Name, c.Image)
	}

	// The user: runAsUser (container over pod), else the image's USER, which the kubelet
	// can check against runAsNonRoot only when it is numeric.
	as, err := userOf(img.User)
	if err != nil {
		t.Fatal(err)
	}
	var runAsUser *int64
	var nonRoot *bool
	readOnlyRoot := false
	if sc := ps.SecurityContext; sc != nil {
		runAsUser, nonRoot = sc.RunAsUser, sc.RunAsNonRoot
	}
	if sc := c.SecurityContext; sc != nil {
		if sc.RunAsUser != nil {
			runAsUser = sc.RunAsUser
		}
		if sc.RunAsNonRoot != nil {
			nonRoot = sc.RunAsNonRoot
		}
		readOnlyRoot = sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem
	}
	if runAsUser != nil {
		as = owner{int(*runAsUser), as.gid}
	} else if nonRoot != nil && *nonRoot {
		if _, err := strconv.Atoi(strings.Split(img.User, ":")[0]); err != nil {
			t.Fatalf("%s: runAsNonRoot with the image's non-numeric USER %q and no runAsUser: the kubelet cannot verify it and refuses to start the container", d.Name, img.User)
		}
	}
	if nonRoot != nil && *nonRoot && as.uid == 0 {
		t.Fatalf("%s: runAsNonRoot but the container would run as root", d.Name)
	}

	name := d.Name
	if n > 0 {
		name += "-" + strconv.Itoa(n)
	}
	podRoot := filepath.Join(r.root, name)
	if err := mkdir(podRoot, keep, 0o755); err != nil {
		t.Fatal(err)
	}
	mounts := r.mounts(name, ps, c, img, podRoot, readOnlyRoot)
	ip := r.replicas[d.Name][n]
	env := r.envAt(d.Name, ip, c, img)
	var pairs [][2]string
	for _, k := range slices.Sorted(maps.Keys(env)) {
		reads, err := img.reads(k)
		if err != nil {
			t.Errorf("%s: %v", d.Name, err)
		}
		if !reads {
			pairs = append(pairs, [2]string{k, env[k]})
			continue
		}
		if n == 0 {
			r.recordCalls(d.Name, env[k])
		}
		v, err := r.net.rewrite(ip, mounts, env[k])
		if err != nil {
			t.Fatalf("%s: %s: %v", d.Name, k, err)
		}
		pairs = append(pairs, [2]string{k, v})
		if k == "OTEL_SERVICE_NAME" && n == 0 {
			r.traced = append(r.traced, v)
		}
	}
	home := filepath.Join(podRoot, "home")
	homeOwner := as
	if readOnlyRoot {
		homeOwner = owner{0, 0}
	}
	if err := mkdir(home, homeOwner, 0o755); err != nil {
		t.Fatal(err)
	}
	pairs = append(pairs, [2]string{"PATH", filepath.Dir(img.Bin)}, [2]string{"HOME", home})

	argv := []string{img.Bin}
	argv = append(argv, img.Entrypoint[1:]...)
	if len(c.Command) > 0 {
		t.Fatalf("%s: command %v overrides the image's entrypoint; the test plays images as built", d.Name, c.Command)
	}
	for _, a := range c.Args {
		a = expand(a, env)
		if flag, val, ok := strings.Cut(a, "="); ok && strings.HasPrefix(flag, "-") {
			v, err := r.net.rewrite(ip, mounts, val)
			if err != nil {
				t.Fatalf("%s: arg %s: %v", d.Name, a, err)
			}
			a = flag + "=" + v
		} else if v, err := r.net.rewrite(ip, mounts, a); err != nil {
			t.Fatalf("%s: arg %s: %v", d.Name, a, err)
		} else {
			a = v
		}
		argv = append(argv, a)
	}
	p := start(t, procSpec{name: name, argv: argv, env: envList(pairs), as: as, dir: home})
	return &startedPod{name: name, workload: d.Name, ip: ip, p: p, spec: ps, env: env}
}

// mounts lays out a pod's volumes as the kubelet would and returns them with the
// paths the image ships: Secrets and ConfigMaps as files (root's, read-only), emptyDirs
// writable by all, the knowledge base claim with the example knowledge base, and
// cert-manager's TLS Secrets with certificates from the test CA naming the Service.
func (r *overlayRun) mounts(pod string, ps *corev1.PodSpec, c corev1.Container, img *image, podRoot string, readOnlyRoot bool) []mount {
	t := r.t
	volumes := map[string]corev1.Volume{}
	for _, v := range ps.Volumes {
		volumes[v.Name] = v
	}
	var mounts []mount
	hidden := map[string]bool{}
	for i, vm := range c.VolumeMounts {
		if vm.SubPath != "" || vm.SubPathExpr != "" {
			t.Fatalf("%s: subPath mounts are not played by this test", pod)
		}
		v, ok := volumes[vm.Name]
		if !ok {
			t.Fatalf("%s: volumeMount %s names no volume", pod, vm.Name)
		}
		host := filepath.Join(podRoot, "vol"+strconv.Itoa(i))
		// Kubernetes mounts Secrets and ConfigMaps read-only whatever readOnly says.
		files := func(data map[string]string, items []corev1.KeyToPath) {
			if err := mkdir(host, owner{0, 0}, 0o755); err != nil {
				t.Fatal(err)
			}
			if len(items) > 0 {
				picked := map[string]string{}
				for _, it := range items {
					val, ok := data[it.Key]
					if !ok {
						t.Fatalf("%s: volume %s: no key %s", pod, vm.Name, it.Key)
					}
					picked[it.Path] = val
				}
				data = picked
			}
			for k, val := range data {
				if err := os.WriteFile(filepath.Join(host, k), []byte(val), 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}
		switch {
		case v.Secret != nil:
			data, ok := r.secrets[v.Secret.SecretName]
			if !ok {
				data, ok = r.certManagerSecret(v.Secret.SecretName)
			}
			if !ok {
				t.Fatalf("%s: volume %s: Secret %s is not in the overlay", pod, vm.Name, v.Secret.SecretName)
			}
			files(data, v.Secret.Items)
		case v.ConfigMap != nil:
			data, ok := r.configMaps[v.ConfigMap.Name]
			if !ok {
				t.Fatalf("%s: volume %s: ConfigMap %s is not in the overlay", pod, vm.Name, v.ConfigMap.Name)
			}
			files(data, v.ConfigMap.Items)
		case v.EmptyDir != nil:
			if err := mkdir(host, owner{0, 0}, 0o777); err != nil {
				t.Fatal(err)
			}
		case v.PersistentVolumeClaim != nil:
			claim := v.PersistentVolumeClaim.ClaimName
			if !r.claims[claim] {
				t.Fatalf("%s: volume %s: PersistentVolumeClaim %s is not in the overlay", pod, vm.Name, claim)
			}
			if claim != kbClaim {
				t.Fatalf("%s: the test knows no content for claim %s", pod, claim)
			}
			// Filled by the teams' sync job, not by this pod: root's files. Read-only
			// mounts cannot be written whoever owns them.
			if err := copyTree(filepath.Join("..", "examples", "kb"), host, owner{0, 0}, 0o755); err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatalf("%s: volume %s: its kind is not played by this test", pod, vm.Name)
		}
		mounts = append(mounts, mount{ctr: filepath.Clean(vm.MountPath), host: host})
		hidden[filepath.Clean(vm.MountPath)] = true
	}
	// What the image ships, unless a volume hides it.
	shipped, err := img.shippedMounts(podRoot, hidden, readOnlyRoot)
	if err != nil {
		t.Fatalf("%s: %v", pod, err)
	}
	return append(mounts, shipped...)
}

// certManagerSecret makes the Secret cert-manager would write for a Certificate of the
// Service quarry-<service>: tls.crt, tls.key and ca.crt, the certificate naming the
// Service by its short, namespaced and cluster-local names.
func (r *overlayRun) certManagerSecret(name string) (map[string]string, bool) {
	t := r.t
	m := tlsSecretRE.FindStringSubmatch(name)
	if m == nil {
		return nil, false
	}
	if data, ok := r.secrets[name]; ok {
		return data, true
	}
	if r.ca == nil {
		r.ca = tlstest.NewCA(t, "quarry-test-ca")
	}
	svc := m[1]
	certFile, keyFile := r.ca.Issue(t, svc, svc, svc+"."+r.namespace, svc+"."+r.namespace+".svc", svc+"."+r.namespace+".svc.cluster.local")
	data := map[string]string{}
	for k, f := range map[string]string{"tls.crt": certFile, "tls.key": keyFile, "ca.crt": r.ca.CertFile} {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		data[k] = string(raw)
	}
	r.secrets[name] = data
	return data, true
}

// probe runs a pod's startup, readiness and liveness probes as the kubelet would:
// gRPC health, plaintext, on the probe's port (a number or a named container port)
// and service, against the pod's address. The startup probe gets its
// periodSeconds × failureThreshold; the others 30 s.
func (r *overlayRun) probe(sp *startedPod) {
	t := r.t
	c := sp.spec.Containers[0]
	for _, pr := range []struct {
		what  string
		probe *corev1.Probe
	}{{"startupProbe", c.StartupProbe}, {"readinessProbe", c.ReadinessProbe}, {"livenessProbe", c.LivenessProbe}} {
		if pr.probe == nil {
			continue
		}
		if pr.probe.GRPC == nil {
			t.Fatalf("%s: %s is not a gRPC probe", sp.name, pr.what)
		}
		service := ""
		if pr.probe.GRPC.Service != nil {
			service = *pr.probe.GRPC.Service
		}
		timeout := 30 * time.Second
		if pr.what == "startupProbe" {
			period, failures := pr.probe.PeriodSeconds, pr.probe.FailureThreshold
			if period == 0 {
				period = 10
			}
			if failures == 0 {
				failures = 3
			}
			timeout = min(timeout, time.Duration(period*failures)*time.Second)
		}
		addr := net.JoinHostPort(sp.ip, strconv.Itoa(int(pr.probe.GRPC.Port)))
		checkHealth(t, sp.p, pr.what, addr, service, timeout)
	}
}

// query asks through the gateway's Service the way a client of the overlay would: over
// TLS, trusting the CA and checking the certificate names quarry-gateway, when the
// gateway serves TLS; with the test's API key.
func (r *overlayRun) query(templates map[string]*corev1.PodTemplateSpec) {
	t := r.t
	// The questions come from a caller that traces them and sampled its trace: every
	// overlay's sampler must follow that (prod samples a tenth of new traces), so the
	// trace goes on through each pod.
	caller := &traceCaller{parent: newTraceparent(t, true)}
	conn := r.dialGateway("", grpc.WithChainUnaryInterceptor(caller.unary), grpc.WithChainStreamInterceptor(caller.stream))
	defer conn.Close()
	r.callerTrace = traceID(caller.parent)
	redis := ""
	for svc, ip := range r.net.ips {
		if strings.Contains(svc, "redis") {
			redis = net.JoinHostPort(ip, "6379")
		}
	}
	search := templates["quarry-search"]
	wantDirect := r.env("quarry-search", search.Spec.Containers[0], r.images["search"])["QUARRY_SEARCH_ENGINE"] != "meilisearch"
	askThrough(t, conn, redis, wantDirect, r.llm)
	r.checkLLMKey()

	// A caller that did not sample its trace: nothing of it may be exported.
	caller.parent = newTraceparent(t, false)
	r.unsampledTrace = traceID(caller.parent)
	if _, err := ask(conn, unsampledQuestion, 15*time.Second); err != nil {
		t.Fatalf("Query(%q) from a caller whose trace is not sampled: %v", unsampledQuestion, err)
	}
}

// dialGateway connects to the gateway's Service (ip "") or to the gateway pod at ip,
// as a client of the overlay would: over TLS, trusting the CA and checking that the
// certificate names quarry-gateway, when the gateway serves TLS; with the test's API key.
func (r *overlayRun) dialGateway(ip string, opts ...grpc.DialOption) *grpc.ClientConn {
	t := r.t
	t.Helper()
	gw, ok := r.templates["quarry-gateway"]
	if !ok {
		t.Fatal("no quarry-gateway Deployment")
	}
	port, ok := containerPort(gw.Spec.Containers[0], intstr.FromString("grpc"))
	if !ok {
		t.Fatal("quarry-gateway has no grpc port")
	}
	env := r.env("quarry-gateway", gw.Spec.Containers[0], r.images["gateway"])
	var cfg grpcx.ClientTLSConfig
	target := net.JoinHostPort(cmp.Or(ip, r.podIPs["quarry-gateway"]), strconv.Itoa(int(port)))
	if env["QUARRY_GATEWAY_TLS_CERT"] != "" {
		if r.ca == nil {
			t.Fatal("the gateway serves TLS but no certificate was issued")
		}
		cfg = grpcx.ClientTLSConfig{CAFile: r.ca.CertFile, ServerName: "quarry-gateway"}
		if ip == "" {
			// By name, so the certificate is checked against the Service's name.
			cfg.ServerName = ""
			target = fmt.Sprintf("dns://%s/quarry-gateway.%s:%d", r.net.dns, r.namespace, port)
		}
	}
	conn, err := cfg.Dial(target, r.key, opts...)
	if err != nil {
		t.Fatalf("dial the gateway at %s: %v", target, err)
	}
	return conn
}

// unsampledQuestion is new to the cache, so the gateway asks the search service.
const unsampledQuestion = "how do I rotate the database credentials for the billing service?"

// traceCaller puts a W3C traceparent on each call, as a caller with its own tracing would.
type traceCaller struct{ parent string }

func (c *traceCaller) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	return invoker(metadata.AppendToOutgoingContext(ctx, "traceparent", c.parent), method, req, reply, cc, opts...)
}

func (c *traceCaller) stream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	return streamer(metadata.AppendToOutgoingContext(ctx, "traceparent", c.parent), desc, cc, method, opts...)
}

// newTraceparent is a traceparent header of a new trace, sampled or not.
func newTraceparent(t *testing.T, sampled bool) string {
	var ids [24]byte
	if _, err := rand.Read(ids[:]); err != nil {
		t.Fatal(err)
	}
	flags := "00"
	if sampled {
		flags = "01"
	}
	return "00-" + hex.EncodeToString(ids[:16]) + "-" + hex.EncodeToString(ids[16:]) + "-" + flags
}

// traceID is a traceparent's trace id, in hex.
func traceID(traceparent string) string { return strings.Split(traceparent, "-")[1] }

// recordCalls notes the Services a setting of pod names (host:port, dns:///host:port).
func (r *overlayRun) recordCalls(pod, v string) {
	for _, m := range hostPortRE.FindAllStringSubmatch(v, -1) {
		svc := r.net.canonical(m[2])
		port, _ := strconv.Atoi(m[3])
		if svc != "" && svc+":"+m[3] == otelCollector {
			// Not deployed by the overlay, but a Service of its namespace: the overlay's
			// policies select the collector's pods too.
			r.calls = append(r.calls, call{from: pod, to: collectorPod, service: svc, port: int32(port)})
			continue
		}
		ip, ok := r.net.ips[svc]
		if svc == "" || !ok {
			continue // an outside endpoint (the LLM in another namespace)
		}
		for w, wip := range r.podIPs {
			if wip == ip {
				r.calls = append(r.calls, call{from: pod, to: w, service: svc, port: int32(port)})
			}
		}
	}
}

// collectorPod stands for the pods behind the otelCollector Service, which the cluster
// runs in the overlay's namespace; collectorTemplate is such a pod as the OpenTelemetry
// Collector's Helm chart labels it, serving OTLP on its usual ports.
const collectorPod = "otel-collector"

func collectorTemplate() *corev1.PodTemplateSpec {
	return &corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app.kubernetes.io/name": "opentelemetry-collector"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name:  "otel-collector",
			Ports: []corev1.ContainerPort{{Name: "otlp", ContainerPort: 4317}, {Name: "otlp-http", ContainerPort: 4318}},
		}}},
	}
}

// checkPolicies plays the overlay's NetworkPolicies (this machine enforces none): every
// connection a pod's settings make must be admitted by the ingress policies that select
// the pod called (same namespace, pod selectors, ports by number or name), and by the
// egress policies that select the caller.
func (r *overlayRun) checkPolicies() {
	t := r.t
	for _, c := range r.calls {
		from, to := r.templates[c.from], r.templates[c.to]
		if !r.admits(networkingv1.PolicyTypeIngress, to, ourPod(from), ourPod(to), c.port) {
			t.Errorf("NetworkPolicy: no ingress rule lets %s reach %s (Service %s) on port %d", c.from, c.to, c.service, c.port)
		}
		if !r.admits(networkingv1.PolicyTypeEgress, from, ourPod(from), ourPod(to), c.port) {
			t.Errorf("NetworkPolicy: no egress rule lets %s reach %s (Service %s) on port %d", c.from, c.to, c.service, c.port)
		}
	}
	if len(r.calls) == 0 {
		t.Error("no pod setting names another pod's Service: the wiring was not read")
	}
	r.checkNoOtherEgress()
}

// checkNoOtherEgress: a pod reaches another only where its settings call it. Every pod
// of the overlay is isolated for egress, and no egress policy lets it reach another
// pod's container port it does not call (search → Redis, gateway → Meilisearch, Redis →
// anything).
func (r *overlayRun) checkNoOtherEgress() {
	t := r.t
	called := map[call]bool{}
	for _, c := range r.calls {
		called[call{from: c.from, to: c.to, port: c.port}] = true
	}
	for _, from := range slices.Sorted(maps.Keys(r.templates)) {
		if from == collectorPod {
			continue // the cluster's, not the overlay's
		}
		ftpl := r.templates[from]
		isolated := false
		for _, np := range r.policies {
			sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
			if err != nil {
				t.Fatalf("NetworkPolicy %s: %v", np.Name, err)
			}
			if slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeEgress) && sel.Matches(labels.Set(ftpl.Labels)) {
				isolated = true
			}
		}
		if !isolated {
			t.Errorf("NetworkPolicy: no egress policy selects %s: it may reach anything", from)
		}
		for _, to := range slices.Sorted(maps.Keys(r.templates)) {
			if to == collectorPod {
				continue // OTLP over gRPC or HTTP: both its ports, whichever is called
			}
			ttpl := r.templates[to]
			for _, cp := range ttpl.Spec.Containers[0].Ports {
				if called[call{from: from, to: to, port: cp.ContainerPort}] {
					continue
				}
				if r.admits(networkingv1.PolicyTypeEgress, ftpl, ourPod(ftpl), ourPod(ttpl), cp.ContainerPort) {
					t.Errorf("NetworkPolicy: %s may reach %s on port %d (%s), which its settings never call", from, to, cp.ContainerPort, cp.Name)
				}
			}
		}
	}
}

// metricsFamilies names, for each Quarry pod, a metric family its /metrics must hold
// once a question has gone through: the gateway's queries, the search backend's calls,
// the agent's LLM tokens.
var metricsFamilies = map[string]string{
	"quarry-gateway": "quarry_gateway_queries_total",
	"quarry-search":  "quarry_search_backend_duration_milliseconds",
	"quarry-agent":   "gen_ai_client_token_usage",
}

// scrapeMetrics scrapes each Quarry pod as Prometheus would from its pod annotations
// (prometheus.io/scrape, port, path), after the questions, and checks the
// NetworkPolicies let a scraper in the monitoring namespace reach that port and a pod of
// any other namespace not.
func (r *overlayRun) scrapeMetrics() {
	t := r.t
	monitoring := podRef{labels: labels.Set{"app.kubernetes.io/name": "prometheus"}, namespace: labels.Set{"kubernetes.io/metadata.name": "monitoring"}}
	elsewhere := podRef{labels: monitoring.labels, namespace: labels.Set{"kubernetes.io/metadata.name": "default"}}
	for _, name := range slices.Sorted(maps.Keys(metricsFamilies)) {
		tpl, ok := r.templates[name]
		if !ok {
			t.Errorf("no %s Deployment", name)
			continue
		}
		a := tpl.Annotations
		if a["prometheus.io/scrape"] != "true" {
			t.Errorf("%s: pod annotation prometheus.io/scrape = %q, want \"true\"", name, a["prometheus.io/scrape"])
			continue
		}
		port, err := strconv.Atoi(a["prometheus.io/port"])
		if err != nil {
			t.Errorf("%s: pod annotation prometheus.io/port = %q: %v", name, a["prometheus.io/port"], err)
			continue
		}
		if _, ok := containerPort(tpl.Spec.Containers[0], intstr.FromInt(port)); !ok {
			t.Errorf("%s: the metrics port %d is not a container port", name, port)
		}
		if !r.admits(networkingv1.PolicyTypeIngress, tpl, monitoring, ourPod(tpl), int32(port)) {
			t.Errorf("NetworkPolicy: a scraper in the monitoring namespace cannot reach %s's metrics port %d", name, port)
		}
		if r.admits(networkingv1.PolicyTypeIngress, tpl, elsewhere, ourPod(tpl), int32(port)) {
			t.Errorf("NetworkPolicy: any namespace's pods reach %s's metrics port %d", name, port)
		}
		path := cmp.Or(a["prometheus.io/path"], "/metrics")
		var urls []string
		for _, ip := range r.replicas[name] {
			urls = append(urls, "http://"+net.JoinHostPort(ip, strconv.Itoa(port))+path)
		}
		scrape(t, name, metricsFamilies[name], urls...)
	}
}

// podRef is one end of a connection: one of the overlay's pods, or a pod in another
// namespace (a metrics scraper).
type podRef struct {
	tpl *corev1.PodTemplateSpec // the overlay's pod; nil for one elsewhere
	// labels are the pod's; namespace, the labels of its namespace when that is not the
	// overlay's.
	labels, namespace labels.Set
}

func ourPod(tpl *corev1.PodTemplateSpec) podRef { return podRef{tpl: tpl, labels: tpl.Labels} }

// admits reports whether the policies of type typ that select subject let from reach
// to on port; a subject no such policy selects is not isolated.
func (r *overlayRun) admits(typ networkingv1.PolicyType, subject *corev1.PodTemplateSpec, from, to podRef, port int32) bool {
	isolated := false
	selects := func(sel *metav1.LabelSelector, set labels.Set) bool {
		s, err := metav1.LabelSelectorAsSelector(sel)
		if err != nil {
			r.t.Fatalf("NetworkPolicy selector %v: %v", sel, err)
		}
		return s.Matches(set)
	}
	matches := func(sel *metav1.LabelSelector, tpl *corev1.PodTemplateSpec) bool { return selects(sel, tpl.Labels) }
	portOK := func(ports []networkingv1.NetworkPolicyPort) bool {
		if len(ports) == 0 {
			return true
		}
		for _, p := range ports {
			if p.Port == nil {
				return true
			}
			if to.tpl != nil {
				if n, ok := containerPort(to.tpl.Spec.Containers[0], *p.Port); ok && n == port {
					return true
				}
			}
			if p.Port.Type == intstr.Int && p.Port.IntVal == port {
				return true
			}
		}
		return false
	}
	peerOK := func(peers []networkingv1.NetworkPolicyPeer, other podRef) bool {
		if len(peers) == 0 {
			return true
		}
		for _, p := range peers {
			switch {
			case p.IPBlock != nil:
				// Not one of the modelled pods.
			case p.NamespaceSelector == nil:
				// The policy's own namespace: the overlay's.
				if other.namespace == nil && p.PodSelector != nil && selects(p.PodSelector, other.labels) {
					return true
				}
			case other.namespace != nil && selects(p.NamespaceSelector, other.namespace) &&
				(p.PodSelector == nil || selects(p.PodSelector, other.labels)):
				return true
			}
		}
		return false
	}
	for _, np := range r.policies {
		if !slices.Contains(np.Spec.PolicyTypes, typ) || !matches(&np.Spec.PodSelector, subject) {
			continue
		}
		isolated = true
		if typ == networkingv1.PolicyTypeIngress {
			for _, rule := range np.Spec.Ingress {
				if peerOK(rule.From, from) && portOK(rule.Ports) {
					return true
				}
			}
		} else {
			for _, rule := range np.Spec.Egress {
				if peerOK(rule.To, to) && portOK(rule.Ports) {
					return true
				}
			}
		}
	}
	return !isolated
}
