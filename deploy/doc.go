// Package deploy holds Quarry's Kubernetes manifests (k8s/base and k8s/overlays) and the
// tests of every deployment description in the repository:
//
//   - render_test.go renders every overlay with kustomize and decodes each object
//     strictly against the Kubernetes API types, so a typo in a manifest fails CI, not a
//     rollout; compose_test.go checks docker-compose.yml and the Dockerfiles statically.
//   - compose_run_test.go (TestComposeRuns) and overlay_run_test.go (TestOverlaysRun)
//     run them: each Quarry container becomes its image's binary (built as the
//     Dockerfile builds it), started with the environment, user and mounts the
//     description gives it, on a loopback address of its own, with a DNS server for the
//     service names, a real redis-server, and stand-ins for Meilisearch, the trace
//     collector and the LLM. Health checks and probes must pass, a question must go
//     through the gateway (over TLS in prod) and come back from the Redis cache, and
//     every service must exit 0 on SIGTERM within its grace period. No Docker engine or
//     Kubernetes is needed; run_test.go and image_test.go hold the machinery.
package deploy
