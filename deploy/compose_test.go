package deploy

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestComposeFile checks docker-compose.yml against the repository: every image it
// builds has its Dockerfile, and the services the issue promises are there.
func TestComposeFile(t *testing.T) {
	raw, err := os.ReadFile("../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	var compose struct {
		Services map[string]struct {
			Build *struct {
				Context    string `json:"context"`
				Dockerfile string `json:"dockerfile"`
			} `json:"build"`
			Image    string   `json:"image"`
			Profiles []string `json:"profiles"`
		} `json:"services"`
	}
	if err := yaml.Unmarshal(raw, &compose); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	for _, want := range []string{"gateway", "search", "agent", "redis", "meilisearch", "jaeger", "ollama"} {
		if _, ok := compose.Services[want]; !ok {
			t.Errorf("docker-compose.yml has no %s service", want)
		}
	}
	for name, s := range compose.Services {
		if s.Build == nil {
			continue
		}
		df := filepath.Join("..", s.Build.Context, s.Build.Dockerfile)
		if _, err := os.Stat(df); err != nil {
			t.Errorf("service %s builds from %s: %v", name, df, err)
		}
	}
	if p := compose.Services["ollama"].Profiles; len(p) != 1 || p[0] != "llm" {
		t.Errorf("ollama must be in the optional llm profile, got %v", p)
	}
}

// cacheMountRE finds the targets of a Dockerfile's RUN --mount=type=cache, and goCaches
// are the folders go writes its caches to in the golang images (GOPATH=/go, HOME=/root).
var (
	cacheMountRE = regexp.MustCompile(`--mount=type=cache,(?:[a-z]+=[^,\s]*,)*target=([^,\s]+)`)
	goCaches     = map[string]bool{"/go/pkg/mod": true, "/root/.cache/go-build": true}
)

// TestDockerfiles checks each service's image recipe for what the deployment relies on:
// a multi-stage static build, a distroless non-root final image and a gRPC health check.
func TestDockerfiles(t *testing.T) {
	for _, df := range []string{"../gateway/Dockerfile", "../services/search/Dockerfile", "../services/agent/Dockerfile"} {
		t.Run(df, func(t *testing.T) {
			raw, err := os.ReadFile(df)
			if err != nil {
				t.Fatal(err)
			}
			s := string(raw)
			for _, want := range []string{"CGO_ENABLED=0", "AS build", "FROM gcr.io/distroless/static", "USER nonroot", "HEALTHCHECK", "grpc-health-probe", "ENTRYPOINT"} {
				if !strings.Contains(s, want) {
					t.Errorf("%s lacks %q", df, want)
				}
			}
			// A cache mount helps only where the golang image's go writes: its GOPATH is
			// /go, so the module cache is /go/pkg/mod (not $HOME/go), and the build
			// cache is $HOME/.cache/go-build. A mount elsewhere caches nothing: the
			// modules land in the layer, and any go.sum change downloads all of them again.
			for _, m := range cacheMountRE.FindAllStringSubmatch(s, -1) {
				if !goCaches[m[1]] {
					t.Errorf("%s: cache mount at %s, where go in golang images writes no cache (want one of /go/pkg/mod, /root/.cache/go-build)", df, m[1])
				}
			}
			// Every COPY source from the build context must exist.
			for _, line := range strings.Split(s, "\n") {
				f := strings.Fields(line)
				if len(f) < 3 || f[0] != "COPY" || strings.HasPrefix(f[1], "--from") {
					continue
				}
				for _, src := range f[1 : len(f)-1] {
					if strings.HasPrefix(src, "--") {
						continue
					}
					if _, err := os.Stat(filepath.Join("..", src)); err != nil {
						t.Errorf("%s copies %s: %v", df, src, err)
					}
				}
			}
		})
	}
}

// TestComposePublishesOnLoopbackOnly: compose is a trial on one machine, without
// credentials worth the name (the gateway open with -auth-open-network, the search
// service with no keys, Meilisearch's master key a default from this repository, Ollama
// and Jaeger with none), so every port it publishes binds the host's loopback: with no
// host address Docker publishes on every interface, and anyone on the machine's network
// could query the knowledge bases or rewrite the Meilisearch index.
func TestComposePublishesOnLoopbackOnly(t *testing.T) {
	p := loadCompose(t, nil, []string{"llm"})
	for _, name := range p.ServiceNames() {
		s, err := p.GetService(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, port := range s.Ports {
			if port.HostIP != "127.0.0.1" {
				t.Errorf("%s publishes %s:%d on %q: want 127.0.0.1:%s:%d", name, port.Published, port.Target, port.HostIP, port.Published, port.Target)
			}
		}
	}
}
