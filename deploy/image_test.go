package deploy

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// image is what the run tests take from a service's Dockerfile: how the binary is
// built, and what the final image adds around it (entrypoint, environment, user, health
// check and the files it ships).
type image struct {
	// Dockerfile is the path from the repository root.
	Dockerfile string
	// Module and Package are where the build stage runs `go build` (cd Module && go build
	// ... Package), and Out the binary's name in /out.
	Module, Package, Out string
	// Entrypoint is the exec-form ENTRYPOINT; Env the final stage's ENV, in order.
	Entrypoint []string
	Env        [][2]string
	// User is the final stage's USER ("nonroot:nonroot").
	User string
	// Health is the HEALTHCHECK command in exec form.
	Health []string
	// Copies are the final stage's COPY instructions from the build context.
	Copies []imageCopy
	// Bin is the built binary on this machine (set by buildImages).
	Bin string
	// Prefix is the binary's environment prefix ("QUARRY_GATEWAY_") and Vars the
	// variables its flags read (platform/config: QUARRY_<SERVICE>_<FLAG>), from -h.
	Prefix string
	Vars   map[string]bool
}

var flagRE = regexp.MustCompile(`(?m)^  -([a-z0-9.-]+)`)

// readFlags runs the binary with -h and records the variables its flags read.
func (img *image) readFlags(service string) error {
	out, _ := exec.Command(img.Bin, "-h").CombinedOutput() // -h exits 2
	img.Prefix = "QUARRY_" + strings.ToUpper(service) + "_"
	img.Vars = map[string]bool{}
	for _, m := range flagRE.FindAllStringSubmatch(string(out), -1) {
		img.Vars[img.Prefix+strings.ToUpper(strings.NewReplacer("-", "_", ".", "_").Replace(m[1]))] = true
	}
	if len(img.Vars) < 5 {
		return fmt.Errorf("%s -h lists %d flags:\n%s", img.Bin, len(img.Vars), out)
	}
	return nil
}

// reads reports whether the binary reads the variable k: one of its flags' variables,
// or any that is not another Quarry service's (OTEL_*, PATH). A QUARRY_<SERVICE>_ name
// no flag has is an error: config.ApplyEnv ignores it silently.
func (img *image) reads(k string) (bool, error) {
	if !strings.HasPrefix(k, "QUARRY_") {
		return true, nil
	}
	if strings.HasPrefix(k, img.Prefix) {
		if !img.Vars[k] {
			return false, fmt.Errorf("%s: no flag of %s reads it, so it is ignored", k, img.Out)
		}
		return true, nil
	}
	return false, nil // another service's setting, from a shared ConfigMap
}

// imageCopy is one COPY of a build-context path into the image.
type imageCopy struct {
	Src, Dst string
	// Chown is the --chown value ("" when the files stay root's).
	Chown string
	// Empty marks a folder the build stage made with mkdir and the final stage copies
	// (--from=build): an empty folder with Chown's owner, such as a volume's mount point.
	Empty bool
}

// layOut puts into host what the COPY puts at its destination, owned by o: the files
// from the repository (the build context), or the empty folder.
func (c imageCopy) layOut(host string, o owner) error {
	if c.Empty {
		return mkdir(host, o, 0o755)
	}
	if err := copyTree(filepath.Join("..", c.Src), host, o, 0o755); err != nil {
		return fmt.Errorf("image COPY %s: %w", c.Src, err)
	}
	return nil
}

// shippedMounts lays out under root what the image ships at each destination no volume
// hides, and returns those mounts. Each COPY keeps its --chown owner, unless rootOwned
// (a read-only root filesystem: the container cannot write there, whoever owns it).
func (img *image) shippedMounts(root string, hidden map[string]bool, rootOwned bool) ([]mount, error) {
	var mounts []mount
	for i, c := range img.Copies {
		dst := filepath.Clean(c.Dst)
		if hidden[dst] {
			continue
		}
		host := filepath.Join(root, "img"+strconv.Itoa(i))
		if err := c.layOutAsBuilt(host, rootOwned); err != nil {
			return nil, fmt.Errorf("image %s: %w", c.Dst, err)
		}
		mounts = append(mounts, mount{ctr: dst, host: host})
	}
	return mounts, nil
}

// layOutAsBuilt lays out the COPY with its --chown owner, or root's when rootOwned.
func (c imageCopy) layOutAsBuilt(host string, rootOwned bool) error {
	o, err := userOf(c.Chown)
	if err != nil {
		return err
	}
	if rootOwned {
		o = owner{0, 0}
	}
	return c.layOut(host, o)
}

// images are the three Quarry images, by the name compose and the manifests give them.
var images = map[string]string{
	"gateway": "gateway/Dockerfile",
	"search":  "services/search/Dockerfile",
	"agent":   "services/agent/Dockerfile",
}

// buildRE finds the build stage's `cd <module> && go build ... -o /out/<name> <package>`.
var buildRE = regexp.MustCompile(`cd (\S+) && go build [^&]*-o /out/(\S+) (\./\S+)`)

// mkdirRE finds the folders a build stage makes with `mkdir -p`.
var mkdirRE = regexp.MustCompile(`mkdir -p (\S+)`)

// parseDockerfile reads the parts of a Dockerfile the run tests use. It understands the
// subset our Dockerfiles use (exec-form ENTRYPOINT and HEALTHCHECK, ENV k=v) and fails
// on anything in the final stage it would otherwise silently ignore.
func parseDockerfile(root, path string) (*image, error) {
	raw, err := os.ReadFile(filepath.Join(root, path))
	if err != nil {
		return nil, err
	}
	img := &image{Dockerfile: path}
	// Join continuation lines first: the build RUN spans several.
	var lines []string
	var cur strings.Builder
	sc := bufio.NewScanner(strings.NewReader(string(raw)))
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(l, "#") || l == "" && cur.Len() == 0 {
			continue
		}
		if strings.HasSuffix(l, `\`) {
			cur.WriteString(strings.TrimSuffix(l, `\`) + " ")
			continue
		}
		cur.WriteString(l)
		lines = append(lines, cur.String())
		cur.Reset()
	}
	froms := 0
	for _, l := range lines {
		if strings.HasPrefix(l, "FROM ") {
			froms++
		}
	}
	stage := 0
	made := map[string]bool{}
	for _, l := range lines {
		instr, rest, _ := strings.Cut(l, " ")
		rest = strings.TrimSpace(rest)
		if instr == "FROM" {
			stage++
			continue
		}
		if stage < froms { // a build stage: only the go build and its folders matter
			if m := buildRE.FindStringSubmatch(l); m != nil {
				img.Module, img.Out, img.Package = m[1], m[2], m[3]
			}
			for _, m := range mkdirRE.FindAllStringSubmatch(l, -1) {
				made[m[1]] = true
			}
			continue
		}
		switch instr {
		case "ENV":
			for _, kv := range strings.Fields(rest) {
				k, v, ok := strings.Cut(kv, "=")
				if !ok {
					return nil, fmt.Errorf("%s: ENV %q: only the k=v form is understood", path, rest)
				}
				img.Env = append(img.Env, [2]string{k, strings.Trim(v, `"`)})
			}
		case "USER":
			img.User = rest
		case "ENTRYPOINT":
			if err := json.Unmarshal([]byte(rest), &img.Entrypoint); err != nil {
				return nil, fmt.Errorf("%s: ENTRYPOINT must be exec form (a JSON array): %w", path, err)
			}
		case "HEALTHCHECK":
			_, cmd, ok := strings.Cut(rest, "CMD ")
			if !ok {
				return nil, fmt.Errorf("%s: HEALTHCHECK without CMD", path)
			}
			if err := json.Unmarshal([]byte(strings.TrimSpace(cmd)), &img.Health); err != nil {
				return nil, fmt.Errorf("%s: HEALTHCHECK CMD must be exec form: %w", path, err)
			}
		case "COPY":
			f := strings.Fields(rest)
			var c imageCopy
			from := false
			for len(f) > 0 && strings.HasPrefix(f[0], "--") {
				if strings.HasPrefix(f[0], "--from") {
					from = true
				}
				if v, ok := strings.CutPrefix(f[0], "--chown="); ok {
					c.Chown = v
				}
				f = f[1:]
			}
			if from {
				// The built binaries (Bin stands in for them), or a folder the build
				// stage made.
				if len(f) == 2 && made[f[0]] {
					c.Dst, c.Empty = f[1], true
					img.Copies = append(img.Copies, c)
				}
				continue
			}
			if len(f) != 2 {
				return nil, fmt.Errorf("%s: COPY %q: want one source and one destination", path, rest)
			}
			c.Src, c.Dst = f[0], f[1]
			img.Copies = append(img.Copies, c)
		case "EXPOSE", "WORKDIR", "LABEL":
		default:
			return nil, fmt.Errorf("%s: final-stage %s is not understood by the run test", path, instr)
		}
	}
	switch {
	case img.Module == "":
		return nil, fmt.Errorf("%s: no `cd <module> && go build -o /out/<name> ./<pkg>` in the build stage", path)
	case len(img.Entrypoint) == 0:
		return nil, fmt.Errorf("%s: no ENTRYPOINT", path)
	case img.Entrypoint[0] != img.Out:
		return nil, fmt.Errorf("%s: ENTRYPOINT runs %q but the build writes /out/%s", path, img.Entrypoint[0], img.Out)
	}
	return img, nil
}

// healthAddr returns the -addr and -service of a grpc-health-probe HEALTHCHECK.
func (img *image) healthAddr() (addr, service string, err error) {
	if len(img.Health) == 0 || img.Health[0] != "grpc-health-probe" {
		return "", "", fmt.Errorf("%s: HEALTHCHECK %v is not grpc-health-probe", img.Dockerfile, img.Health)
	}
	for _, a := range img.Health[1:] {
		switch {
		case strings.HasPrefix(a, "-addr="):
			addr = strings.TrimPrefix(a, "-addr=")
		case strings.HasPrefix(a, "-service="):
			service = strings.TrimPrefix(a, "-service=")
		default:
			return "", "", fmt.Errorf("%s: grpc-health-probe flag %q is not understood by the run test", img.Dockerfile, a)
		}
	}
	if addr == "" {
		return "", "", fmt.Errorf("%s: grpc-health-probe without -addr", img.Dockerfile)
	}
	return addr, service, nil
}

var (
	buildOnce  sync.Once
	builtDir   string
	built      map[string]*image
	buildError error
)

// buildImages builds the three binaries once per test run, the way the Dockerfiles do
// (GOWORK=off, CGO_ENABLED=0, from the module's folder), so a module that only builds
// inside go.work, or a wrong package path in a Dockerfile, fails here.
func buildImages(t *testing.T) map[string]*image {
	t.Helper()
	buildOnce.Do(func() {
		root, err := filepath.Abs("..")
		if err != nil {
			buildError = err
			return
		}
		builtDir, err = os.MkdirTemp("", "quarry-deploy-bin-")
		if err != nil {
			buildError = err
			return
		}
		// The services may run as the image's non-root user: it must reach the binaries.
		if err := os.Chmod(builtDir, 0o755); err != nil {
			buildError = err
			return
		}
		built = map[string]*image{}
		var mu sync.Mutex
		var wg sync.WaitGroup
		errs := make([]error, 0, len(images))
		for name, df := range images {
			img, err := parseDockerfile(root, df)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			img.Bin = filepath.Join(builtDir, img.Out)
			built[name] = img
			wg.Add(1)
			go func() {
				defer wg.Done()
				// GOWORK=off from the module's folder as the Dockerfile does; not its
				// CGO_ENABLED=0 and -trimpath, which would compile everything a second time
				// next to make's build-standalone (minutes on a cold cache) for binaries that
				// behave the same here (the test answers their DNS itself).
				cmd := exec.Command("go", "build", "-o", img.Bin, img.Package)
				cmd.Dir = filepath.Join(root, img.Module)
				cmd.Env = append(os.Environ(), "GOWORK=off")
				out, err := cmd.CombinedOutput()
				if err != nil {
					err = fmt.Errorf("%s: go build %s in %s (GOWORK=off): %v\n%s", df, img.Package, img.Module, err, out)
				} else {
					err = img.readFlags(name)
				}
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if len(errs) > 0 {
			buildError = fmt.Errorf("%v", errs)
		}
	})
	if buildError != nil {
		t.Fatal(buildError)
	}
	return built
}

func TestMain(m *testing.M) {
	code := m.Run()
	if builtDir != "" {
		_ = os.RemoveAll(builtDir)
	}
	os.Exit(code)
}

// versionRE finds the build's -X flag that stamps the VERSION build argument.
var versionRE = regexp.MustCompile(`-X (\S+)\.(\w+)=\$\{VERSION\}`)

// TestImagesStampTheirVersion: each image's build sets the variable the telemetry
// reads service.version from. The linker ignores -X for a variable that does not
// exist, so a renamed one would leave every span without a version, silently.
func TestImagesStampTheirVersion(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	for name, df := range images {
		raw, err := os.ReadFile(filepath.Join(root, df))
		if err != nil {
			t.Fatal(err)
		}
		m := versionRE.FindStringSubmatch(string(raw))
		if m == nil || !strings.Contains(string(raw), "ARG VERSION") {
			t.Errorf("%s: no ARG VERSION stamped with -ldflags -X pkg.var=${VERSION}", df)
			continue
		}
		cmd := exec.Command("go", "doc", "-u", m[1], m[2])
		cmd.Dir = filepath.Join(root, "platform")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "var "+m[2]+" string") {
			t.Errorf("%s (%s): -X %s.%s names no string variable: %v\n%s", df, name, m[1], m[2], err, out)
		}
	}
}
