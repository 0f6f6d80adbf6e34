#!/usr/bin/env bash
# `make image` and `make image-check`.
#
#   scripts/image.sh build   builds the static binary and the image
#                            (deploy/Containerfile, FROM scratch) with podman
#   scripts/image.sh check   runs the image with podman and asks it a
#                            question on loopback; exits non-zero on failure
#
# IMAGE names the image (default localhost/sluice:dev); LDFLAGS are the
# Makefile's version stamps.
#
# The ulimit trap: on a host where podman may not raise resource limits
# (no CAP_SYS_RESOURCE, as in many VMs and CI containers), `podman run`
# fails with "error setting rlimits ... operation not permitted" because it
# asks for its built-in defaults, which can exceed the hard limits it runs
# under. Asking for limits no higher than the hard ones works:
# --ulimit nofile=4096:4096 --ulimit nproc=4096:4096 (the check does so).
set -euo pipefail
cd "$(dirname "$0")/.."
IMAGE=${IMAGE:-localhost/sluice:dev}
ULIMITS=(--ulimit nofile=4096:4096 --ulimit nproc=4096:4096)

need_podman() {
	command -v podman >/dev/null && return
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
		echo "image: installing podman (apt-get)" >&2
		DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends podman >/dev/null
	else
		echo "image: podman is not installed (apt-get install podman)" >&2
		exit 1
	fi
}

build() {
	need_podman
	ctx=$(mktemp -d)
	trap 'rm -rf "$ctx"' EXIT
	CGO_ENABLED=0 GOOS=linux go build -trimpath -buildvcs=false -ldflags "-s -w ${LDFLAGS:-}" -o "$ctx/sluice" ./cmd/sluice
	podman build --quiet -f deploy/Containerfile -t "$IMAGE" "$ctx" >/dev/null
	echo "image: built $IMAGE ($(podman image inspect --format '{{.Size}}' "$IMAGE") bytes)"
}

check() {
	need_podman
	podman image exists "$IMAGE" || { echo "image: $IMAGE not built (make image)" >&2; exit 1; }
	name=sluice-image-check-$$
	log=$(mktemp)
	# --network=host: the container shares the host's loopback, so podman
	# adds no bridge, no iptables rule and no sysctl on the host (other
	# loopback tests may run on it). --listen 127.0.0.1:0 takes a free port,
	# read back from the "listening" log line. --read-only as in the chart.
	trap 'podman rm -f -t 2 "$name" >/dev/null 2>&1 || true; rm -f "$log"' EXIT
	podman run -d --name "$name" --network=host --read-only --cap-drop=ALL \
		--security-opt=no-new-privileges "${ULIMITS[@]}" \
		"$IMAGE" serve --listen 127.0.0.1:0 --log-format json >/dev/null
	local addr="" i
	for i in $(seq 1 120); do
		podman logs "$name" >"$log" 2>&1 || true
		addr=$(sed -n 's/.*"msg":"listening","addr":"\(http:\/\/[^"]*\)".*/\1/p' "$log" | head -1)
		[ -n "$addr" ] && break
		[ "$(podman inspect --format '{{.State.Running}}' "$name" 2>/dev/null)" = true ] || break
		sleep 0.5
	done
	if [ -z "$addr" ]; then
		echo "FAIL image-run: sluice serve did not start in the container; its log:"
		cat "$log"
		return 1
	fi
	local user out
	# The uid the process really runs as, not what the image asks for.
	user=$(podman top "$name" user | awk 'NR == 2 {print $1}')
	case $user in "" | 0 | root) echo "FAIL image-run: sluice runs as uid '$user' in the container"; return 1 ;; esac
	grep -q 'built-in default model' "$log" || { echo "FAIL image-run: the log does not say it serves the built-in model"; cat "$log"; return 1; }
	out=$(curl -sS -m 60 "$addr/v1/completions" -H 'Content-Type: application/json' \
		-d '{"prompt":"Once upon a time","max_tokens":8,"temperature":0}')
	if ! jq -e '.choices[0].text | type == "string"' >/dev/null <<<"$out" || ! jq -e '.usage.completion_tokens == 8' >/dev/null <<<"$out"; then
		echo "FAIL image-run: $addr/v1/completions answered: $out"
		return 1
	fi
	echo "PASS image-run: podman run $IMAGE serve (built-in model, uid $user, read-only root) answered 8 tokens on $addr"
}

case ${1:-build} in
build) build ;;
check) check ;;
*) echo "usage: $0 build|check" >&2; exit 2 ;;
esac
