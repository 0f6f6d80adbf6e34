#!/usr/bin/env bash
# bench-table.sh: the side-by-side speed table of docs/benchmarks.md (issue 15's done-when
# table) in one go: for each kernel path and thread count it runs
# `sluice bench --llama-bench` over the table's models (sluice and llama-bench
# interleaved test by test, same files, same threads, 1-thread runs pinned to
# one vCPU) and writes one JSON file per configuration, then prints the
# markdown tables (scripts/benchtable). Long (about 10-15 minutes per
# configuration on a 2-vCPU machine): run it on an idle machine.
#
#   scripts/bench-table.sh OUT_DIR [CONFIG ...]
#
# CONFIG is PATH-tTHREADS with PATH one of avx512, avx2 (the AVX2 path,
# with AVX-VNNI where the CPU has it), avx2novnni (the plain AVX2 kernels a
# Zen 3 runs); default: avx512-t1 avx512-t2 avx2-t1 avx2-t2 (configurations
# the CPU cannot run are skipped). Environment: MODELS (directory holding
# the models; default ../bench), LLAMA (llama.cpp builds; default
# ../shared/tools/llama.cpp), REPS (default 3), PROMPTS (default 128,512),
# GEN (default 128), SLUICE (the binary; default: built from this checkout).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: scripts/bench-table.sh OUT_DIR [CONFIG ...]}
shift
configs=("$@")
[ ${#configs[@]} -gt 0 ] || configs=(avx512-t1 avx512-t2 avx2-t1 avx2-t2)
models=${MODELS:-../bench}
llama=${LLAMA:-../shared/tools/llama.cpp}
reps=${REPS:-3}
prompts=${PROMPTS:-128,512}
gen=${GEN:-128}
mkdir -p "$out"
if [ -z "${SLUICE:-}" ]; then
	go build -o "$out/sluice" ./cmd/sluice
	SLUICE=$out/sluice
fi
margs=()
for m in stories260K bench-15M-q8_0 bench-110M-q8_0 bench-110M-q4_K tinyllama-q4_K tinyllama-q8_0; do
	if [ -e "$models/$m.gguf" ]; then margs+=(--model "$models/$m.gguf"); else echo "bench-table: $models/$m.gguf missing, row skipped" >&2; fi
done
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
for c in "${configs[@]}"; do
	path=${c%-t*}
	threads=${c##*-t}
	vnni=on
	build=avx2
	case $path in
	avx512) build=avx512 ;;
	avx2) ;;
	avx2novnni) path=avx2 vnni=off ;;
	*) echo "bench-table: unknown configuration $c" >&2; exit 2 ;;
	esac
	if [ "$path" = avx512 ] && ! grep -q avx512_vnni /proc/cpuinfo; then echo "bench-table: $c skipped: no AVX-512 VNNI" >&2; continue; fi
	pin=()
	[ "$threads" = 1 ] && pin=(taskset -c "${PIN_CPU:-1}")
	echo "== $c: $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
	SLUICE_KERNELS=$path SLUICE_AVXVNNI=$vnni "${pin[@]}" "$SLUICE" bench "${margs[@]}" --threads "$threads" \
		--prompt "$prompts" --gen "$gen" --reps "$reps" --llama-bench "$llama/$build/llama-bench" --json >"$out/$c.json"
	echo "== $c done: $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
done
go run ./scripts/benchtable "$out"/*.json
