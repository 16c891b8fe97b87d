package deploy

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

var overlays = map[string]string{
	"dev":  "k8s/overlays/dev",
	"prod": "k8s/overlays/prod",
}

// decoder decodes YAML into the typed Kubernetes objects and fails on unknown fields.
func decoder(t *testing.T) runtime.Decoder {
	t.Helper()
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		appsv1.AddToScheme, corev1.AddToScheme, autoscalingv2.AddToScheme, policyv1.AddToScheme, networkingv1.AddToScheme,
	} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	return serializer.NewCodecFactory(scheme, serializer.EnableStrict).UniversalDeserializer()
}

// render runs kustomize on dir and returns each object decoded.
func render(t *testing.T, dir string) []runtime.Object {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	rm, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	dec := decoder(t)
	var out []runtime.Object
	for _, r := range rm.Resources() {
		y, err := r.AsYAML()
		if err != nil {
			t.Fatal(err)
		}
		obj, _, err := dec.Decode(y, nil, nil)
		if err != nil {
			t.Errorf("%s %s/%s does not decode strictly: %v", dir, r.GetKind(), r.GetName(), err)
			continue
		}
		out = append(out, obj)
	}
	return out
}

func TestOverlaysRenderToValidObjects(t *testing.T) {
	for name, dir := range overlays {
		t.Run(name, func(t *testing.T) {
			objs := render(t, dir)
			kinds := map[string][]string{}
			for _, o := range objs {
				gvk := o.GetObjectKind().GroupVersionKind()
				kinds[gvk.Kind] = append(kinds[gvk.Kind], fmt.Sprint(o.(interface{ GetName() string }).GetName()))
				if ns, ok := o.(interface{ GetNamespace() string }); ok && gvk.Kind != "Namespace" && ns.GetNamespace() == "" {
					t.Errorf("%s %s has no namespace", gvk.Kind, ns.(interface{ GetName() string }).GetName())
				}
			}
			for _, want := range []string{"Deployment", "Service", "HorizontalPodAutoscaler", "PodDisruptionBudget", "StatefulSet", "ConfigMap", "NetworkPolicy", "Namespace"} {
				if len(kinds[want]) == 0 {
					t.Errorf("no %s rendered", want)
				}
			}
			checkSecrets(t, name, objs)
			checkDeployments(t, objs)
			checkScaling(t, objs)
			checkServices(t, objs)
			checkTLSProbes(t, objs)
			checkDrain(t, objs)
			checkImages(t, dir, objs)
			checkSpread(t, objs)
			checkStartup(t, objs)
			checkConfigRolls(t, objs)
			checkServiceAccountTokens(t, objs)
		})
	}
}

// TestEveryOverlayIsRendered: overlays is a list kept by hand, and an overlay added
// under k8s/overlays without it would be applied without ever being rendered, decoded
// or run by these tests.
func TestEveryOverlayIsRendered(t *testing.T) {
	entries, err := os.ReadDir("k8s/overlays")
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, dir := range overlays {
		listed[filepath.Clean(dir)] = true
	}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		dir := filepath.Join("k8s/overlays", e.Name())
		if _, err := os.Stat(filepath.Join(dir, "kustomization.yaml")); err != nil {
			continue // not an overlay kustomize can build
		}
		if !listed[dir] {
			t.Errorf("overlay %s is not in overlays: the render and run tests skip it", dir)
		}
	}
}

// checkConfigRolls: the services read quarry-config as their environment, at start only.
// Rendered under a name that carries a hash of its contents (a configMapGenerator) and
// named so by every Quarry Deployment, a changed setting changes the pod template and the
// apply rolls the pods; under a fixed name the pods kept the old settings until someone
// restarted them.
func checkConfigRolls(t *testing.T, objs []runtime.Object) {
	var name string
	for _, o := range objs {
		if cm, ok := o.(*corev1.ConfigMap); ok && strings.HasPrefix(cm.Name, "quarry-config") {
			if !isQuarryConfig(cm.Name) {
				t.Errorf("ConfigMap %s: want quarry-config with a hash of its contents in its name", cm.Name)
			}
			name = cm.Name
		}
	}
	for _, o := range objs {
		d, ok := o.(*appsv1.Deployment)
		if !ok || !strings.HasPrefix(d.Name, "quarry-") {
			continue
		}
		var refs []string
		for _, c := range d.Spec.Template.Spec.Containers {
			for _, from := range c.EnvFrom {
				if from.ConfigMapRef != nil {
					refs = append(refs, from.ConfigMapRef.Name)
				}
			}
		}
		if !slices.Contains(refs, name) {
			t.Errorf("Deployment %s reads ConfigMaps %v, not the rendered quarry-config %s", d.Name, refs, name)
		}
	}
}

// checkServiceAccountTokens: no workload calls the Kubernetes API, so none gets a
// service account token. The kubelet mounts the namespace's default one into every pod
// that does not opt out, and quarry-agent-egress lets the agent reach any address on
// 443, the API server's among them: a compromised agent would carry a credential there.
func checkServiceAccountTokens(t *testing.T, objs []runtime.Object) {
	for _, o := range objs {
		var ps *corev1.PodSpec
		var kind, name string
		switch x := o.(type) {
		case *appsv1.Deployment:
			ps, kind, name = &x.Spec.Template.Spec, "Deployment", x.Name
		case *appsv1.StatefulSet:
			ps, kind, name = &x.Spec.Template.Spec, "StatefulSet", x.Name
		default:
			continue
		}
		if ps.AutomountServiceAccountToken == nil || *ps.AutomountServiceAccountToken {
			t.Errorf("%s %s: the pod gets a service account token it never uses: set automountServiceAccountToken: false", kind, name)
		}
	}
}

// checkDeployments: every Quarry service has gRPC probes, requests and limits, and runs
// as non-root with a read-only root filesystem.
func checkDeployments(t *testing.T, objs []runtime.Object) {
	seen := map[string]bool{}
	for _, o := range objs {
		d, ok := o.(*appsv1.Deployment)
		if !ok {
			continue
		}
		seen[d.Name] = true
		ps := d.Spec.Template.Spec
		if ps.SecurityContext == nil || ps.SecurityContext.RunAsNonRoot == nil || !*ps.SecurityContext.RunAsNonRoot {
			t.Errorf("%s: pod does not require a non-root user", d.Name)
		}
		for _, c := range ps.Containers {
			if c.ReadinessProbe == nil || c.ReadinessProbe.GRPC == nil {
				t.Errorf("%s/%s: no gRPC readiness probe", d.Name, c.Name)
			}
			if c.LivenessProbe == nil || c.LivenessProbe.GRPC == nil {
				t.Errorf("%s/%s: no gRPC liveness probe", d.Name, c.Name)
			}
			if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() ||
				c.Resources.Limits.Cpu().IsZero() || c.Resources.Limits.Memory().IsZero() {
				t.Errorf("%s/%s: resource requests and limits must both be set", d.Name, c.Name)
			}
			if c.SecurityContext == nil || c.SecurityContext.ReadOnlyRootFilesystem == nil || !*c.SecurityContext.ReadOnlyRootFilesystem {
				t.Errorf("%s/%s: root filesystem is writable", d.Name, c.Name)
			}
		}
	}
	for _, name := range []string{"quarry-gateway", "quarry-search", "quarry-agent"} {
		if !seen[name] {
			t.Errorf("no Deployment %s", name)
		}
	}
}

// operatorSecrets are the Secrets the pods read that an overlay in outOfBandSecrets
// leaves to the operator (sealed-secrets, external-secrets or `kubectl create secret`),
// with the keys the pods read from them.
var operatorSecrets = map[string][]string{
	"quarry-secrets":  {"QUARRY_AGENT_LLM_API_KEY", "MEILI_MASTER_KEY"},
	"quarry-api-keys": {"api-keys.json"},
}

// outOfBandSecrets are the overlays whose Secrets the operator creates: they must render
// none, because `kubectl apply -k` would overwrite the operator's Secret with the base's
// placeholders (an empty LLM key, a published Meilisearch master key, an API key entry
// nobody holds) at every apply, and a sealed-secrets or external-secrets controller
// refuses to take over a Secret kubectl created first.
var outOfBandSecrets = map[string]bool{"prod": true}

// checkSecrets: an overlay in outOfBandSecrets renders no Secret, and every Secret its
// pods read is one the overlay renders, one of operatorSecrets there, or a
// cert-manager certificate (quarry-<service>-tls).
func checkSecrets(t *testing.T, overlay string, objs []runtime.Object) {
	rendered := map[string]bool{}
	for _, o := range objs {
		if s, ok := o.(*corev1.Secret); ok {
			rendered[s.Name] = true
			if outOfBandSecrets[overlay] {
				t.Errorf("%s renders Secret %s: `kubectl apply -k` would overwrite the one the operator created with the base's placeholders", overlay, s.Name)
			}
		}
	}
	known := func(name string) bool {
		_, operator := operatorSecrets[name]
		return rendered[name] || outOfBandSecrets[overlay] && operator || tlsSecretRE.MatchString(name)
	}
	for _, o := range objs {
		var ps *corev1.PodSpec
		var workload string
		switch x := o.(type) {
		case *appsv1.Deployment:
			ps, workload = &x.Spec.Template.Spec, x.Name
		case *appsv1.StatefulSet:
			ps, workload = &x.Spec.Template.Spec, x.Name
		default:
			continue
		}
		var names []string
		for _, v := range ps.Volumes {
			if v.Secret != nil {
				names = append(names, v.Secret.SecretName)
			}
		}
		for _, c := range append(ps.InitContainers, ps.Containers...) {
			for _, from := range c.EnvFrom {
				if from.SecretRef != nil {
					names = append(names, from.SecretRef.Name)
				}
			}
			for _, e := range c.Env {
				if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
					ref := e.ValueFrom.SecretKeyRef
					names = append(names, ref.Name)
					if keys, ok := operatorSecrets[ref.Name]; ok && !rendered[ref.Name] && !slices.Contains(keys, ref.Key) {
						t.Errorf("%s/%s: env %s reads key %s of Secret %s, which the operator's Secret does not hold (%v)", workload, c.Name, e.Name, ref.Key, ref.Name, keys)
					}
				}
			}
		}
		for _, n := range names {
			if !known(n) {
				t.Errorf("%s: reads Secret %s, which %s neither renders nor leaves to the operator", workload, n, overlay)
			}
		}
	}
}

// checkScaling: HPAs on CPU for gateway and search, a PDB for each service. An
// autoscaled Deployment sets no replicas: `kubectl apply` would set that count again on
// every apply, undoing the autoscaler's.
func checkScaling(t *testing.T, objs []runtime.Object) {
	hpa, pdb := map[string]bool{}, map[string]bool{}
	for _, o := range objs {
		switch x := o.(type) {
		case *autoscalingv2.HorizontalPodAutoscaler:
			if len(x.Spec.Metrics) == 0 || x.Spec.Metrics[0].Resource == nil || x.Spec.Metrics[0].Resource.Name != corev1.ResourceCPU {
				t.Errorf("HPA %s does not scale on CPU", x.Name)
			}
			hpa[x.Spec.ScaleTargetRef.Name] = true
		case *policyv1.PodDisruptionBudget:
			pdb[x.Name] = true
		}
	}
	for _, name := range []string{"quarry-gateway", "quarry-search"} {
		if !hpa[name] {
			t.Errorf("no HPA for %s", name)
		}
	}
	for _, o := range objs {
		if d, ok := o.(*appsv1.Deployment); ok && hpa[d.Name] && d.Spec.Replicas != nil {
			t.Errorf("%s: replicas %d set beside its HorizontalPodAutoscaler, which owns the count", d.Name, *d.Spec.Replicas)
		}
	}
	for _, name := range []string{"quarry-gateway", "quarry-search", "quarry-agent"} {
		if !pdb[name] {
			t.Errorf("no PodDisruptionBudget for %s", name)
		}
	}
}

// checkServices: search and agent are headless so gRPC clients balance per call over
// every pod; only the gateway is admitted from outside by the network policies.
func checkServices(t *testing.T, objs []runtime.Object) {
	open := map[string]bool{}
	for _, o := range objs {
		switch x := o.(type) {
		case *corev1.Service:
			if (x.Name == "quarry-search" || x.Name == "quarry-agent") && x.Spec.ClusterIP != corev1.ClusterIPNone {
				t.Errorf("Service %s must be headless for client-side load balancing", x.Name)
			}
		case *networkingv1.NetworkPolicy:
			for _, rule := range x.Spec.Ingress {
				if len(rule.From) == 0 {
					open[x.Spec.PodSelector.MatchLabels["app.kubernetes.io/name"]] = true
				}
			}
		}
	}
	for name := range open {
		if name != "quarry-gateway" {
			t.Errorf("network policy lets anyone reach %s; only the gateway may be", name)
		}
	}
	if !open["quarry-gateway"] {
		t.Error("no network policy admits clients to the gateway")
	}
}

// checkTLSProbes: Kubernetes' gRPC probes speak plaintext, so a service configured to
// serve TLS must be probed on its plaintext health port, and must mount the files its
// TLS flags name.
func checkTLSProbes(t *testing.T, objs []runtime.Object) {
	config := quarryConfig(objs)
	for _, o := range objs {
		d, ok := o.(*appsv1.Deployment)
		if !ok || !strings.HasPrefix(d.Name, "quarry-") {
			continue
		}
		svc := strings.ToUpper(strings.TrimPrefix(d.Name, "quarry-"))
		cert := config["QUARRY_"+svc+"_TLS_CERT"]
		if cert == "" {
			continue
		}
		_, port, err := net.SplitHostPort(config["QUARRY_"+svc+"_HEALTH_LISTEN"])
		if err != nil {
			t.Errorf("%s serves TLS but QUARRY_%s_HEALTH_LISTEN is not a host:port: %v", d.Name, svc, err)
			continue
		}
		c := d.Spec.Template.Spec.Containers[0]
		for name, p := range map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe, "startup": c.StartupProbe} {
			if name == "startup" && p == nil {
				continue // optional; when there, it must use the health port too
			}
			if p == nil || p.GRPC == nil || fmt.Sprint(p.GRPC.Port) != port {
				t.Errorf("%s serves TLS: its %s probe must use the plaintext health port %s", d.Name, name, port)
			}
		}
		mounted := false
		for _, m := range c.VolumeMounts {
			if strings.HasPrefix(cert, m.MountPath+"/") {
				mounted = true
			}
		}
		if !mounted {
			t.Errorf("%s: nothing is mounted at %s (QUARRY_%s_TLS_CERT)", d.Name, cert, svc)
		}
	}
}

// checkDrain: each Quarry pod's drain (quarry-config's -drain-grace and
// -drain-timeout) ends within its terminationGracePeriodSeconds, with time to spare for
// telemetry's last flush, so the kubelet's SIGKILL never cuts calls in flight; the
// gateway's drain outlasts the LLM answers it waits for (-agent-timeout); and servers
// behind headless Services keep ending connections (-max-connection-age), without
// which clients never reach replicas the autoscaler adds.
func checkDrain(t *testing.T, objs []runtime.Object) {
	config := quarryConfig(objs)
	duration := func(key string) time.Duration {
		t.Helper()
		d, err := time.ParseDuration(config[key])
		if err != nil {
			t.Errorf("quarry-config %s = %q: want a duration: %v", key, config[key], err)
		}
		return d
	}
	const spare = 5 * time.Second
	for _, o := range objs {
		d, ok := o.(*appsv1.Deployment)
		if !ok || !strings.HasPrefix(d.Name, "quarry-") {
			continue
		}
		svc := strings.ToUpper(strings.TrimPrefix(d.Name, "quarry-"))
		drain := duration("QUARRY_"+svc+"_DRAIN_GRACE") + duration("QUARRY_"+svc+"_DRAIN_TIMEOUT")
		grace := 30 * time.Second // Kubernetes' default
		if g := d.Spec.Template.Spec.TerminationGracePeriodSeconds; g != nil {
			grace = time.Duration(*g) * time.Second
		}
		if drain+spare > grace {
			t.Errorf("%s: drain grace and timeout (%s) plus %s exceed terminationGracePeriodSeconds (%s)", d.Name, drain, spare, grace)
		}
		if age, ok := config["QUARRY_"+svc+"_MAX_CONNECTION_AGE"]; ok && (svc == "SEARCH" || svc == "AGENT") {
			if a, err := time.ParseDuration(age); err != nil || a == 0 {
				t.Errorf("quarry-config QUARRY_%s_MAX_CONNECTION_AGE = %q: clients of a headless Service need connections that end", svc, age)
			}
		}
	}
	if timeout, agent := duration("QUARRY_GATEWAY_DRAIN_TIMEOUT"), duration("QUARRY_GATEWAY_AGENT_TIMEOUT"); timeout < agent {
		t.Errorf("the gateway's drain timeout (%s) is shorter than its agent timeout (%s): a rollout cuts LLM answers in flight", timeout, agent)
	}
}

// quarryConfig is the rendered ConfigMap quarry-config's data (empty without one).
func quarryConfig(objs []runtime.Object) map[string]string {
	for _, o := range objs {
		if cm, ok := o.(*corev1.ConfigMap); ok && isQuarryConfig(cm.Name) {
			return cm.Data
		}
	}
	return map[string]string{}
}

// isQuarryConfig reports whether a rendered ConfigMap's name is quarry-config's: the
// generator adds a hash of its contents.
func isQuarryConfig(name string) bool {
	rest, ok := strings.CutPrefix(name, "quarry-config-")
	return ok && len(rest) == 10
}

// checkImages: every images entry of the overlay's kustomization changes some container.
// Kustomize matches an entry by the image name the base renders (after the base's own
// images transformer, ghcr.io/...), and silently ignores one that matches nothing, which
// left the overlays running the base's :latest images.
func checkImages(t *testing.T, dir string, objs []runtime.Object) {
	raw, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var k struct {
		Images []struct {
			Name    string `json:"name"`
			NewName string `json:"newName"`
			NewTag  string `json:"newTag"`
		} `json:"images"`
	}
	if err := yaml.Unmarshal(raw, &k); err != nil {
		t.Fatalf("%s/kustomization.yaml: %v", dir, err)
	}
	var images []string
	for _, o := range objs {
		var ps *corev1.PodSpec
		switch x := o.(type) {
		case *appsv1.Deployment:
			ps = &x.Spec.Template.Spec
		case *appsv1.StatefulSet:
			ps = &x.Spec.Template.Spec
		default:
			continue
		}
		for _, c := range append(ps.InitContainers, ps.Containers...) {
			images = append(images, c.Image)
		}
	}
	for _, e := range k.Images {
		want := e.Name
		if e.NewName != "" {
			want = e.NewName
		}
		if e.NewTag != "" {
			want += ":" + e.NewTag
		}
		found := false
		for _, img := range images {
			if img == want || e.NewTag == "" && strings.HasPrefix(img, want+":") {
				found = true
			}
		}
		if !found {
			t.Errorf("%s: images entry %q (want %s) changes no container (images rendered: %v); name it as the base renders it", dir, e.Name, want, images)
		}
	}
}

// checkSpread: a Deployment's topology spread constraints count that Deployment's pods
// only. A selector that matches every Quarry component balances all of them together,
// so one Deployment's replicas may still share a node.
func checkSpread(t *testing.T, objs []runtime.Object) {
	var deps []*appsv1.Deployment
	for _, o := range objs {
		if d, ok := o.(*appsv1.Deployment); ok {
			deps = append(deps, d)
		}
	}
	for _, d := range deps {
		for _, c := range d.Spec.Template.Spec.TopologySpreadConstraints {
			sel, err := metav1.LabelSelectorAsSelector(c.LabelSelector)
			if err != nil {
				t.Errorf("%s: topology spread selector: %v", d.Name, err)
				continue
			}
			if !sel.Matches(labels.Set(d.Spec.Template.Labels)) {
				t.Errorf("%s: topology spread over %s does not count its own pods", d.Name, c.TopologyKey)
			}
			for _, other := range deps {
				if other != d && sel.Matches(labels.Set(other.Spec.Template.Labels)) {
					t.Errorf("%s: topology spread over %s also counts %s's pods: each Deployment's replicas must be spread on their own", d.Name, c.TopologyKey, other.Name)
				}
			}
		}
	}
}

// checkStartup: the gateway reports NOT_SERVING until the search service answers its
// generation watch (gateway/app), so its liveness must not begin before search may
// still be starting (search's startup probe budget), or the kubelet restarts gateways
// over and over while search indexes, and each restart backs off further.
func checkStartup(t *testing.T, objs []runtime.Object) {
	deps := map[string]*appsv1.Deployment{}
	for _, o := range objs {
		if d, ok := o.(*appsv1.Deployment); ok {
			deps[d.Name] = d
		}
	}
	// window is how long a container may stay unhealthy from its start before the
	// kubelet restarts it: the startup probe's budget when there is one, else the
	// liveness probe's.
	window := func(c corev1.Container) time.Duration {
		budget := func(p *corev1.Probe) time.Duration {
			period, failures := p.PeriodSeconds, p.FailureThreshold
			if period == 0 {
				period = 10
			}
			if failures == 0 {
				failures = 3
			}
			return time.Duration(p.InitialDelaySeconds+period*failures) * time.Second
		}
		switch {
		case c.StartupProbe != nil:
			return budget(c.StartupProbe)
		case c.LivenessProbe != nil:
			return budget(c.LivenessProbe)
		}
		return 1<<63 - 1
	}
	gw, search := deps["quarry-gateway"], deps["quarry-search"]
	if gw == nil || search == nil {
		return // checkDeployments reports it
	}
	g, s := window(gw.Spec.Template.Spec.Containers[0]), window(search.Spec.Template.Spec.Containers[0])
	if g <= s {
		t.Errorf("quarry-gateway may be restarted %s after it starts, while quarry-search may take %s to start and the gateway is NOT_SERVING until search answers: give the gateway a startup probe longer than search's", g, s)
	}
}
