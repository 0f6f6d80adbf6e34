#!/usr/bin/env bash
# `make test-k8s`: sluice's Helm chart on a real single-node Kubernetes.
#
# What it does, in order (docs/operations.md and docs/testing.md say it for
# users):
#   1. installs the Debian packages it needs (containerd, runc, etcd, CNI
#      plugins, podman, iptables, conntrack, busybox-static, openssl);
#   2. builds or reuses the Kubernetes v1.33 binaries, helm and CoreDNS
#      (scripts/k8s/build.sh, cached by version under ~/.cache/sluice/k8s);
#   3. builds four images with podman, none from a registry (sluice, the
#      pod sandbox, busybox for the chart's init container and the in-cluster
#      scraper, CoreDNS) and imports them into the cluster's containerd;
#   4. starts etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
#      containerd, kubelet and kube-proxy as plain processes, on a bridge of
#      its own (10.244.0.1/24) so that nothing listens on the host's real
#      interfaces, and deploys CoreDNS;
#   5. runs the checks (deploy/k8stest, `go test -tags k8s`), each printing
#      one PASS or FAIL line;
#   6. tears everything down, whatever happened (trap): stops the processes
#      it started (by pid), unmounts, deletes the bridge, the iptables rules
#      and chains that appeared during the run (KUBE-*, CNI-* only: it never
#      flushes a table), restores the sysctls the kubelet, kube-proxy and it
#      changed, and removes the host paths that did not exist before.
#
# It needs root, Linux, cgroups (v1 or v2) and no other Kubernetes on the
# host. Exit status: 0 when every check passed.
#
# Environment: SLUICE_K8S_DIR (work directory, default /tmp/sluice-k8s),
# SLUICE_K8S_KEEP=1 (leave the cluster up at the end for a look; tear it
# down later with `scripts/k8s/test.sh down`), SLUICE_K8S_RUN (a -run
# pattern for the checks).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
W=${SLUICE_K8S_DIR:-/tmp/sluice-k8s}
K8S_VERSION=${K8S_VERSION:-v1.33.13}
CACHE=${SLUICE_K8S_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sluice/k8s/$K8S_VERSION}
BIN=$CACHE/bin
BRIDGE=sluicek8s0
NODE_IP=10.244.0.1
POD_CIDR=10.244.0.0/24
SVC_CIDR=10.96.0.0/16
DNS_IP=10.96.0.10
NODE=sluice-k8s-node
export KUBECONFIG=$W/admin.kubeconfig
T0=$SECONDS

log() { echo "[k8s $(printf '%4d' $((SECONDS - T0)))s] $*"; }
die() { echo "k8s: $*" >&2; exit 1; }
kubectl() { "$BIN/kubectl" "$@"; }
ctr_() { ctr -a "$W/containerd/containerd.sock" -n k8s.io "$@"; }

# The sysctls the kubelet (protectKernelDefaults off: overcommit, panic,
# keys), kube-proxy (route_localnet, conntrack) and this script
# (ip_forward, bridge-nf-call) may change. Only these are restored, and
# only when they differ from the start: other processes on the host may
# change others meanwhile, and those are theirs.
SYSCTLS="vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops kernel.keys.root_maxkeys
kernel.keys.root_maxbytes net.ipv4.ip_forward net.ipv4.conf.all.route_localnet
net.bridge.bridge-nf-call-iptables net.bridge.bridge-nf-call-ip6tables net.netfilter.nf_conntrack_max
net.netfilter.nf_conntrack_tcp_timeout_established net.netfilter.nf_conntrack_tcp_timeout_close_wait"
# Host paths the kubelet, containerd and CNI write whatever their root
# directories say; removed at the end only when they did not exist before.
HOST_PATHS="/var/lib/kubelet /var/log/containers /var/log/pods /run/containerd /var/lib/cni /usr/libexec/kubernetes /run/netns /etc/kubernetes"
PROCS="kube-proxy kubelet kube-scheduler kube-controller-manager kube-apiserver etcd containerd"

packages() {
	local want="containerd runc etcd-server containernetworking-plugins podman iptables conntrack socat busybox-static openssl curl jq" missing=""
	for p in $want; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
	[ -z "$missing" ] && return
	log "apt-get install$missing"
	DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $missing >/dev/null
}

# ---------------------------------------------------------------- teardown

alive() { [ -f "$W/pid/$1" ] && kill -0 "$(cat "$W/pid/$1")" 2>/dev/null; }

stop() { # name: SIGTERM, then SIGKILL after 15 s, by the recorded pid only
	alive "$1" || { rm -f "$W/pid/$1"; return 0; }
	local p i
	p=$(cat "$W/pid/$1")
	kill "$p" 2>/dev/null || true
	for i in $(seq 1 30); do kill -0 "$p" 2>/dev/null || break; sleep 0.5; done
	kill -0 "$p" 2>/dev/null && kill -9 "$p" 2>/dev/null
	rm -f "$W/pid/$1"
}

new_chains() { # iptables-binary table: KUBE-/CNI- chains that were not there at the start
	local ipt=$1 t=$2
	"$ipt-save" -t "$t" 2>/dev/null | grep -oE '^:(KUBE|CNI)-[^ ]+' | tr -d : | while read -r ch; do
		grep -qx "$ipt $t $ch" "$W/state/chains" 2>/dev/null || echo "$ch"
	done
}

clean_iptables() {
	local ipt t ch chains
	for ipt in iptables ip6tables; do
		command -v "$ipt-save" >/dev/null || continue
		for t in filter nat mangle raw; do
			chains=$(new_chains "$ipt" "$t")
			[ -z "$chains" ] && continue
			# Rules in any chain that jump to one of ours, deleted one by one
			# as iptables-save prints them (never a flush of a built-in chain).
			for ch in $chains; do
				"$ipt-save" -t "$t" | grep -E "^-A .* -j $ch( |\$)" | sed 's/^-A /-D /' | while read -r r; do
					eval "$ipt -w -t $t $r" 2>/dev/null || true
				done
			done
			for ch in $chains; do "$ipt" -w -t "$t" -F "$ch" 2>/dev/null || true; done
			for ch in $chains; do "$ipt" -w -t "$t" -X "$ch" 2>/dev/null || true; done
		done
	done
}

teardown() {
	set +e
	[ -d "$W/pid" ] || return 0
	log "teardown"
	# Controllers first, so nothing recreates the pods; then the pods, while
	# the kubelet runs, so CNI DEL releases their addresses and veths.
	stop kube-controller-manager
	stop kube-scheduler
	if alive kube-apiserver && alive kubelet; then
		kubectl delete pods --all -A --grace-period=2 --wait=false >/dev/null 2>&1
		for i in $(seq 1 40); do [ -z "$(ctr_ tasks ls -q 2>/dev/null)" ] && break; sleep 0.5; done
	fi
	for p in kube-proxy kubelet kube-apiserver etcd; do stop "$p"; done
	if alive containerd; then
		for t in $(ctr_ tasks ls -q 2>/dev/null); do ctr_ tasks kill -s SIGKILL "$t" >/dev/null 2>&1; done
		sleep 1
		for t in $(ctr_ tasks ls -q 2>/dev/null); do ctr_ tasks delete -f "$t" >/dev/null 2>&1; done
		for c in $(ctr_ containers ls -q 2>/dev/null); do ctr_ containers delete "$c" >/dev/null 2>&1; done
	fi
	stop containerd
	# containerd-shim processes of our containerd (their command line names
	# our socket's directory): killed by pid.
	for p in $(pgrep -f "containerd-shim.*-address $W/containerd/" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
	# Mounts under the work directory, deepest first; then pod network
	# namespaces created during the run.
	awk '{print $5}' /proc/self/mountinfo | grep -E "^$W/" | sort -r | while read -r m; do umount -l "$m" 2>/dev/null; done
	for ns in /run/netns/cni-*; do
		[ -e "$ns" ] || continue
		grep -qx "$ns" "$W/state/netns" 2>/dev/null && continue
		umount "$ns" 2>/dev/null; rm -f "$ns"
	done
	ip link del "$BRIDGE" 2>/dev/null
	clean_iptables
	# cgroups the kubelet made (kubepods in every v1 hierarchy, or v2): empty
	# directories only, deepest first.
	for d in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods /sys/fs/cgroup/*/kubepods.slice /sys/fs/cgroup/kubepods.slice; do
		[ -d "$d" ] || continue
		grep -qx "$d" "$W/state/cgroups" 2>/dev/null && continue
		find "$d" -depth -type d -exec rmdir {} \; 2>/dev/null
	done
	for p in $HOST_PATHS; do
		grep -qx "$p" "$W/state/paths" 2>/dev/null && continue
		[ -e "$p" ] || continue
		[ "$p" = /run/netns ] && { [ -z "$(ls -A /run/netns)" ] || continue; umount /run/netns 2>/dev/null; }
		rm -rf "$p"
	done
	if [ -f "$W/state/sysctl" ]; then
		while IFS='=' read -r k v; do
			[ "$(sysctl -n "$k" 2>/dev/null)" = "$v" ] || sysctl -q -w "$k=$v" 2>/dev/null || echo "k8s: could not restore sysctl $k=$v" >&2
		done <"$W/state/sysctl"
	fi
	rm -rf "$W/pid"
	log "teardown done"
}

# -------------------------------------------------------------------- setup

record_host() {
	mkdir -p "$W/state"
	local k
	: >"$W/state/sysctl"
	for k in $SYSCTLS; do
		v=$(sysctl -n "$k" 2>/dev/null) && echo "$k=$v" >>"$W/state/sysctl"
	done
	: >"$W/state/chains"
	for ipt in iptables ip6tables; do
		command -v "$ipt-save" >/dev/null || continue
		for t in filter nat mangle raw; do
			"$ipt-save" -t "$t" 2>/dev/null | grep -oE '^:(KUBE|CNI)-[^ ]+' | tr -d : | sed "s/^/$ipt $t /" >>"$W/state/chains" || true
		done
	done
	: >"$W/state/paths"
	for p in $HOST_PATHS; do [ -e "$p" ] && echo "$p" >>"$W/state/paths"; done
	ls -d /run/netns/cni-* 2>/dev/null >"$W/state/netns" || true
	ls -d /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods /sys/fs/cgroup/*/kubepods.slice /sys/fs/cgroup/kubepods.slice 2>/dev/null >"$W/state/cgroups" || true
}

pki() {
	local P=$W/pki
	mkdir -p "$P"
	cd "$P"
	openssl genrsa -out ca.key 2048 2>/dev/null
	openssl req -x509 -new -nodes -key ca.key -subj "/CN=sluice-k8s-test-ca" -days 1 -out ca.crt 2>/dev/null
	cert() { # name CN O SAN
		openssl genrsa -out "$1.key" 2048 2>/dev/null
		openssl req -new -key "$1.key" -subj "/CN=$2${3:+/O=$3}" -out "$1.csr" 2>/dev/null
		if [ -n "$4" ]; then
			printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth,clientAuth\n' "$4" >"$1.ext"
		else
			printf 'extendedKeyUsage=clientAuth\n' >"$1.ext"
		fi
		openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 1 -extfile "$1.ext" -out "$1.crt" 2>/dev/null
	}
	cert apiserver kube-apiserver "" "IP:$NODE_IP,IP:127.0.0.1,IP:10.96.0.1,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
	cert admin admin system:masters ""
	cert apiserver-kubelet-client kube-apiserver-kubelet-client system:masters ""
	cert kubelet "system:node:$NODE" system:nodes ""
	cert kube-scheduler system:kube-scheduler "" ""
	cert kube-controller-manager system:kube-controller-manager "" ""
	cert kube-proxy system:kube-proxy "" ""
	openssl genrsa -out sa.key 2048 2>/dev/null
	openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
	for u in admin kubelet kube-scheduler kube-controller-manager kube-proxy; do
		cat >"$W/$u.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: sluice-k8s
  cluster: {server: "https://$NODE_IP:6443", certificate-authority: "$P/ca.crt"}
users:
- name: $u
  user: {client-certificate: "$P/$u.crt", client-key: "$P/$u.key"}
contexts:
- name: sluice-k8s
  context: {cluster: sluice-k8s, user: $u}
current-context: sluice-k8s
EOF
	done
	cd - >/dev/null
}

configs() {
	mkdir -p "$W/cni/net.d" "$W/logs" "$W/pid" "$W/manifests" "$W/models"
	# No ipMasq, no portmap: pods talk only to each other and to the API
	# server on the bridge's own address, so CNI adds no iptables rule.
	cat >"$W/cni/net.d/10-sluice-k8s.conflist" <<EOF
{"cniVersion": "0.4.0", "name": "sluice-k8s", "plugins": [{
  "type": "bridge", "bridge": "$BRIDGE", "isGateway": true, "ipMasq": false, "hairpinMode": true,
  "ipam": {"type": "host-local", "ranges": [[{"subnet": "$POD_CIDR", "gateway": "$NODE_IP"}]],
           "routes": [{"dst": "0.0.0.0/0"}], "dataDir": "$W/cni/ipam"}}]}
EOF
	cat >"$W/containerd.toml" <<EOF
version = 2
root = "$W/containerd/root"
state = "$W/containerd/state"
[grpc]
  address = "$W/containerd/containerd.sock"
[ttrpc]
  address = "$W/containerd/containerd.sock.ttrpc"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "localhost/sluice-pause:test"
  # No CAP_SYS_RESOURCE in many VMs: never raise a process's OOM score.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        BinaryName = "$(command -v runc)"
        Root = "$W/containerd/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$W/cni/net.d"
EOF
	local cgdriver=cgroupfs
	cat >"$W/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $NODE_IP
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: "$W/pki/ca.crt"}
authorization: {mode: Webhook}
cgroupDriver: $cgdriver
# This machine kind runs cgroup v1: Kubernetes 1.31+ refuses it unless told.
failCgroupV1: false
containerRuntimeEndpoint: "unix://$W/containerd/containerd.sock"
failSwapOn: false
clusterDomain: cluster.local
clusterDNS: [$DNS_IP]
resolvConf: /etc/resolv.conf
staticPodPath: "$W/manifests"
serializeImagePulls: false
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
maxPods: 40
# No CAP_SYS_RESOURCE: leave OOM scores alone.
oomScoreAdj: 0
protectKernelDefaults: false
podLogsDir: "$W/pod-logs"
volumePluginDir: "$W/kubelet-plugins"
EOF
}

start() { # name command...: started at nice 10, output to logs/<name>.log
	local n=$1
	shift
	nohup nice -n 10 "$@" >"$W/logs/$n.log" 2>&1 &
	echo $! >"$W/pid/$n"
}

wait_for() { # seconds description command...
	local s=$1 d=$2 i
	shift 2
	for i in $(seq 1 $((s * 2))); do "$@" >/dev/null 2>&1 && return 0; sleep 0.5; done
	die "$d did not come up in ${s}s (logs in $W/logs)"
}

images() {
	# sluice (make image), then the pause, busybox and CoreDNS images, each
	# FROM scratch with one static binary; saved and imported into the
	# cluster's containerd (no registry).
	IMAGE=localhost/sluice:test LDFLAGS="${LDFLAGS:-}" "$ROOT/scripts/image.sh" build >/dev/null
	local ctx=$W/image-ctx
	rm -rf "$ctx" && mkdir -p "$ctx/pause" "$ctx/busybox/bin" "$ctx/coredns"
	(cd "$ROOT" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$ctx/pause/pause" ./scripts/k8s/pause)
	printf 'FROM scratch\nCOPY pause /pause\nUSER 65535:65535\nENTRYPOINT ["/pause"]\n' >"$ctx/pause/Containerfile"
	cp /bin/busybox "$ctx/busybox/bin/busybox"
	for a in sh cat wget sleep; do ln -s busybox "$ctx/busybox/bin/$a"; done
	printf 'FROM scratch\nCOPY bin /bin\nUSER 65532:65532\nENTRYPOINT ["/bin/sh"]\n' >"$ctx/busybox/Containerfile"
	cp "$BIN/coredns" "$ctx/coredns/coredns"
	printf 'FROM scratch\nCOPY coredns /coredns\nUSER 65532:65532\nENTRYPOINT ["/coredns"]\n' >"$ctx/coredns/Containerfile"
	podman build --quiet -t localhost/sluice-pause:test "$ctx/pause" >/dev/null
	podman build --quiet -t localhost/busybox:test "$ctx/busybox" >/dev/null
	podman build --quiet -t localhost/coredns:test "$ctx/coredns" >/dev/null
	for i in localhost/sluice:test localhost/sluice-pause:test localhost/busybox:test localhost/coredns:test; do
		rm -f "$ctx/image.tar"
		podman save -q "$i" -o "$ctx/image.tar"
		ctr_ images import "$ctx/image.tar" >/dev/null
	done
	rm -rf "$ctx"
}

up() {
	local P=$W/pki
	record_host
	pki
	configs
	# Our own bridge, with the node's address on it, before anything
	# starts: the API server and kubelet listen there, never on the host's
	# real interfaces; the CNI bridge plugin finds it and attaches pods.
	ip link add "$BRIDGE" type bridge
	ip addr add "$NODE_IP/24" dev "$BRIDGE"
	ip link set "$BRIDGE" up
	# Pod -> Service -> pod on the same bridge is routed through the host.
	sysctl -q -w net.ipv4.ip_forward=1
	[ -e /proc/sys/net/bridge/bridge-nf-call-iptables ] && sysctl -q -w net.bridge.bridge-nf-call-iptables=1
	start containerd containerd --config "$W/containerd.toml"
	start etcd etcd --name sluice-k8s --data-dir "$W/etcd" \
		--listen-client-urls http://127.0.0.1:23790 --advertise-client-urls http://127.0.0.1:23790 \
		--listen-peer-urls http://127.0.0.1:23800 --initial-advertise-peer-urls http://127.0.0.1:23800 \
		--initial-cluster sluice-k8s=http://127.0.0.1:23800
	wait_for 30 containerd test -S "$W/containerd/containerd.sock"
	log "images"
	images
	log "control plane"
	start kube-apiserver "$BIN/kube-apiserver" \
		--etcd-servers=http://127.0.0.1:23790 --bind-address="$NODE_IP" --advertise-address="$NODE_IP" --secure-port=6443 \
		--service-cluster-ip-range="$SVC_CIDR" --tls-cert-file="$P/apiserver.crt" --tls-private-key-file="$P/apiserver.key" \
		--client-ca-file="$P/ca.crt" --kubelet-client-certificate="$P/apiserver-kubelet-client.crt" \
		--kubelet-client-key="$P/apiserver-kubelet-client.key" --service-account-key-file="$P/sa.pub" \
		--service-account-signing-key-file="$P/sa.key" --service-account-issuer=https://kubernetes.default.svc.cluster.local \
		--authorization-mode=Node,RBAC --anonymous-auth=false --enable-admission-plugins=NodeRestriction \
		--kubelet-preferred-address-types=InternalIP
	wait_for 120 kube-apiserver kubectl get --raw /readyz
	start kube-controller-manager "$BIN/kube-controller-manager" \
		--kubeconfig="$W/kube-controller-manager.kubeconfig" --bind-address=127.0.0.1 --leader-elect=false \
		--authentication-kubeconfig="$W/kube-controller-manager.kubeconfig" --authorization-kubeconfig="$W/kube-controller-manager.kubeconfig" \
		--service-account-private-key-file="$P/sa.key" --root-ca-file="$P/ca.crt" \
		--cluster-signing-cert-file="$P/ca.crt" --cluster-signing-key-file="$P/ca.key" \
		--use-service-account-credentials=true --controllers='*,-nodeipam,-cloud-node-lifecycle,-service,-route'
	start kube-scheduler "$BIN/kube-scheduler" --kubeconfig="$W/kube-scheduler.kubeconfig" \
		--authentication-kubeconfig="$W/kube-scheduler.kubeconfig" --authorization-kubeconfig="$W/kube-scheduler.kubeconfig" \
		--bind-address=127.0.0.1 --leader-elect=false
	log "node"
	start kubelet "$BIN/kubelet" --config="$W/kubelet.yaml" --kubeconfig="$W/kubelet.kubeconfig" \
		--root-dir="$W/kubelet" --cert-dir="$W/kubelet/pki" --hostname-override="$NODE" --node-ip="$NODE_IP" --v=1
	# kube-proxy in iptables mode, touching no conntrack sysctl and no
	# route_localnet (no localhost NodePorts).
	start kube-proxy "$BIN/kube-proxy" --kubeconfig="$W/kube-proxy.kubeconfig" --hostname-override="$NODE" \
		--proxy-mode=iptables --cluster-cidr="$POD_CIDR" --conntrack-max-per-core=0 \
		--conntrack-tcp-timeout-established=0 --conntrack-tcp-timeout-close-wait=0 \
		--iptables-localhost-nodeports=false --metrics-bind-address=127.0.0.1:10249 --healthz-bind-address=127.0.0.1:10256
	wait_for 120 "node $NODE" kubectl wait --for=condition=Ready "node/$NODE" --timeout=2s
	wait_for 60 "the default ServiceAccount" kubectl get serviceaccount default -n default
	log "CoreDNS"
	sed "s/@DNS_IP@/$DNS_IP/" "$ROOT/scripts/k8s/coredns.yaml" | kubectl apply -f - >/dev/null
	kubectl -n kube-system rollout status deployment/coredns --timeout=120s >/dev/null
	log "cluster up"
}

down() {
	[ -d "$W" ] || return 0
	teardown
}

main() {
	case ${1:-test} in
	down)
		down
		exit 0
		;;
	up | test) ;;
	*) die "usage: $0 [test|up|down]" ;;
	esac

	[ "$(id -u)" = 0 ] || die "needs root (it starts a kubelet and changes iptables and sysctls)"
	[ "$(uname -s)" = Linux ] || die "needs Linux"
	if [ -d "$W/pid" ]; then
		log "a previous run left $W: tearing it down first"
		teardown
	fi
	rm -rf "$W"
	mkdir -p "$W"
	packages
	"$ROOT/scripts/k8s/build.sh"
	[ "${SLUICE_K8S_KEEP:-}" = 1 ] || trap teardown EXIT
	trap 'exit 130' INT TERM
	up
	[ "${1:-test}" = up ] && { trap - EXIT; log "cluster left up: KUBECONFIG=$KUBECONFIG; $0 down"; exit 0; }

	log "checks"
	rc=0
	(
		cd "$ROOT"
		SLUICE_K8S_DIR=$W SLUICE_K8S_BIN=$BIN SLUICE_K8S_CTR="$W/containerd/containerd.sock" \
			go test -tags k8s -count=1 -timeout 40m -v -run "${SLUICE_K8S_RUN:-.}" ./deploy/k8stest/
	) >"$W/checks.log" 2>&1 || rc=$?
	grep -E '^(PASS|FAIL) ' "$W/checks.log" || true
	if [ "$rc" != 0 ]; then
		grep -qE '^FAIL ' "$W/checks.log" || tail -40 "$W/checks.log"
		echo "k8s: checks failed; full log: $W/checks.log, cluster logs: $W/logs" >&2
	fi
	log "checks done (exit $rc)"
	exit "$rc"
}

# Sourcing the file (bash -c ". scripts/k8s/test.sh; up") gives the
# functions without running anything.
if [ "${BASH_SOURCE[0]}" = "$0" ]; then main "$@"; fi
