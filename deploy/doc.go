// Package deploy holds sluice's Kubernetes deployment: the Helm chart in
// helm/sluice and the image's Dockerfile. It has no Go code of its own;
// deploy_test.go renders the chart with Helm's own packages, decodes every
// object strictly into k8s.io/api types and checks it against the flags
// the sluice binary accepts, so the chart cannot drift from the binary.
package deploy
