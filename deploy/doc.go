// Package deploy holds Quarry's Kubernetes manifests (k8s/base and k8s/overlays) and the
// test that renders every overlay with kustomize and decodes each object strictly
// against the Kubernetes API types, so a typo in a manifest fails CI, not a rollout.
package deploy
