#!/usr/bin/env bash
# Builds the Kubernetes binaries, helm and CoreDNS that `make test-k8s` runs,
# from the Go module proxy (no container registry, no release tarballs), and
# caches them by version under the user's cache directory:
#
#   ${XDG_CACHE_HOME:-~/.cache}/sluice/k8s/<k8s version>/bin/
#
# A cold build takes about 30 minutes on a 2-core machine, so it runs at
# nice 19 with `go build -p 1` (one package at a time) to leave the CPU to
# whatever else the machine does; a warm run finds every binary and returns
# at once. Each binary is built into a temporary name and renamed, so an
# interrupted build never leaves a half-written binary that looks cached.
#
#   scripts/k8s/build.sh            # all of them
#   scripts/k8s/build.sh kubelet    # some of them
set -euo pipefail

K8S_VERSION=${K8S_VERSION:-v1.33.13}
HELM_VERSION=${HELM_VERSION:-v3.18.6}
COREDNS_VERSION=${COREDNS_VERSION:-v1.12.4}
CACHE=${SLUICE_K8S_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sluice/k8s/$K8S_VERSION}
BIN=$CACHE/bin
mkdir -p "$BIN" "$CACHE/src"

K8S_CMDS="kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl"
want=${*:-$K8S_CMDS helm coredns}

export CGO_ENABLED=0 GOFLAGS=-mod=mod
GOBUILD=(nice -n 19 go build -p 1 -trimpath)

log() { echo "[k8s-build $(date -u +%H:%M:%S)] $*"; }

# k8s.io/kubernetes cannot be `go install`ed: its go.mod requires every
# staging module (k8s.io/api, k8s.io/client-go, ...) at v0.0.0 and replaces
# it with ./staging/src/... A scratch module that requires it, with one
# replace per staging module to the published v0.<minor>.<patch> tag,
# builds the same code.
k8s_module() {
	local dir=$CACHE/src/kubernetes
	[ -f "$dir/.ready" ] && { echo "$dir"; return; }
	rm -rf "$dir" && mkdir -p "$dir"
	local staging=v0.${K8S_VERSION#v1.}
	(
		cd "$dir"
		go mod init sluice.local/k8sbuild >/dev/null 2>&1
		local gomod
		gomod=$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
		[ -f "$gomod" ] || { echo "k8s-build: no go.mod for k8s.io/kubernetes@$K8S_VERSION" >&2; exit 1; }
		go mod edit -require="k8s.io/kubernetes@$K8S_VERSION"
		grep -oE '^[[:space:]]*k8s\.io/[a-z0-9-]+ => \./staging/' "$gomod" | awk '{print $1}' | while read -r m; do
			go mod edit -replace="$m=$m@$staging"
		done
		printf 'package tools\n\nimport _ "k8s.io/kubernetes/cmd/kubelet"\n' >tools.go
		nice -n 19 go mod tidy >/dev/null
	) >&2
	touch "$dir/.ready"
	echo "$dir"
}

k8s_ldflags() {
	local major minor
	major=${K8S_VERSION#v}; major=${major%%.*}
	minor=${K8S_VERSION#v*.}; minor=${minor%%.*}
	local v
	for v in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
		printf -- '-X %s.gitVersion=%s -X %s.gitMajor=%s -X %s.gitMinor=%s -X %s.gitTreeState=clean ' \
			"$v" "$K8S_VERSION" "$v" "$major" "$v" "$minor" "$v"
	done
	printf -- '-s -w'
}

build_one() { # name
	local c=$1 out=$BIN/$1
	if [ -x "$out" ]; then log "$c: cached"; return; fi
	local s=$SECONDS
	case $c in
	kube-* | kubelet | kubectl)
		local dir
		dir=$(k8s_module)
		(cd "$dir" && "${GOBUILD[@]}" -ldflags "$(k8s_ldflags)" -o "$out.tmp" "k8s.io/kubernetes/cmd/$c")
		;;
	helm)
		local dir=$CACHE/src/helm
		mkdir -p "$dir"
		(cd "$dir" && [ -f go.mod ] || go mod init sluice.local/helmbuild >/dev/null 2>&1
		 cd "$dir" && go mod edit -require="helm.sh/helm/v3@$HELM_VERSION" &&
		 printf 'package tools\n\nimport _ "helm.sh/helm/v3/cmd/helm"\n' >tools.go &&
		 nice -n 19 go mod tidy >/dev/null &&
		 "${GOBUILD[@]}" -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION" -o "$out.tmp" helm.sh/helm/v3/cmd/helm)
		;;
	coredns)
		# Only the plugins the test's Corefile uses (scripts/k8s/coredns.yaml):
		# the full CoreDNS links every cloud provider's SDK and takes several
		# times as long to build. This is CoreDNS's documented way to build
		# a custom server: import the plugins, set dnsserver.Directives (in
		# plugin.cfg's order) and call coremain.Run.
		local dir=$CACHE/src/coredns
		mkdir -p "$dir"
		cat >"$dir/main.go" <<'GO'
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/ready"
)

func init() {
	dnsserver.Directives = []string{"ready", "health", "errors", "cache", "kubernetes"}
}

func main() { coremain.Run() }
GO
		(cd "$dir" && { [ -f go.mod ] || go mod init sluice.local/corednsbuild >/dev/null 2>&1; } &&
			go mod edit -require="github.com/coredns/coredns@$COREDNS_VERSION" &&
			nice -n 19 go mod tidy >/dev/null &&
			"${GOBUILD[@]}" -ldflags "-s -w" -o "$out.tmp" .)
		;;
	*)
		echo "k8s-build: unknown binary $c" >&2
		return 2
		;;
	esac
	mv "$out.tmp" "$out"
	log "$c: built in $((SECONDS - s))s ($(stat -c %s "$out") bytes)"
}

for c in $want; do build_one "$c"; done
log "all in $BIN"
