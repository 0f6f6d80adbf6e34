// Package k8stest holds the checks `make test-k8s` runs against a real
// single-node Kubernetes cluster (scripts/k8s/test.sh starts it): the Helm
// chart installed, a decode pod deleted under load, a rolling upgrade to
// another model, decode scaled 2 -> 3 -> 1, the rendered objects validated
// by the API server, the pods' real uid and root file system, and /metrics
// scraped from inside the cluster. The checks are behind the k8s build tag
// (`go test -tags k8s`), so the default suite never runs them; each prints
// one PASS or FAIL line.
package k8stest
