#!/usr/bin/env bash
# bench-moe.sh: the mixture-of-experts table of docs/benchmarks.md, written
# between its "bench-moe" markers. Writes the MoE shapes with `sluice synth`
# when missing (seeded; 2-4 GB each, slow to write: the K-quant search is
# single-threaded) into DIR, then runs `sluice bench --llama-bench` on each
# (pp128, pp512, tg128; sluice and llama-bench alternating test by test;
# 1 thread pinned and 2 threads; the AVX-512 path against llama.cpp's
# avx512 build, the AVX2 path as a Zen 3 runs it, SLUICE_KERNELS=avx2
# SLUICE_AVXVNNI=off, against its avx2 build), one JSON file per model and
# configuration in OUT, then formats the table (scripts/benchtable) with
# the routed decode bytes and both engines' decode bandwidth fractions.
#
#   scripts/bench-moe.sh [DIR]       (make bench-moe)
#
# DIR: the models (default $MODELS or ../bench). Environment: REPS (default
# 3; 1 is roughly 15-20 minutes on an idle 2-vCPU machine, 3 roughly 45,
# estimated from the tests' rates; each missing model adds 10-30), OUT
# (default bench-moe-out; earlier files there stay in the table), LLAMA
# (llama.cpp builds; default ../shared/tools/llama.cpp), DOC (file to
# update, default docs/benchmarks.md; DOC= to only print), SLUICE (the
# binary; default built from this checkout), CONFIGS (default "avx512-t1
# avx512-t2 avx2novnni-t1 avx2novnni-t2"), ONLY="MODEL-CONFIG ..." to run
# only those (e.g. ONLY="q3moe-q8_0-avx2novnni-t2"; the rest of the table
# comes from OUT's earlier files).
#
# Shapes (24 layers, n_embd 1024, 64 experts, top-8, expert FFN 768, head dim
# 128, built-in vocabulary):
#   q3moe-*  qwen3moe, Qwen3-30B-A3B scaled: 16 heads (2 KV)
#   glm-*    glm4moe, GLM-4.5-Air scaled: 24 heads (2 KV), RoPE on 64 of 128
#            dims, first layer dense (FFN 4096), one shared expert,
#            renormalised weights, one nextn layer (not run)
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-${MODELS:-../bench}}
llama=${LLAMA:-../shared/tools/llama.cpp}
reps=${REPS:-3}
out=${OUT:-bench-moe-out}
doc=${DOC-docs/benchmarks.md}
read -r -a configs <<<"${CONFIGS:-avx512-t1 avx512-t2 avx2novnni-t1 avx2novnni-t2}"
mkdir -p "$dir" "$out"
if [ -z "${SLUICE:-}" ]; then
	go build -o "$out/sluice" ./cmd/sluice
	SLUICE=$out/sluice
fi
s=$SLUICE
q=(--arch qwen3moe --layers 24 --embd 1024 --heads 16 --kv-heads 2 --head-dim 128 --ff 3072
	--experts 64 --experts-used 8 --expert-ff 768 --context 4096)
g=(--arch glm4moe --layers 24 --embd 1024 --heads 24 --kv-heads 2 --head-dim 128 --rope-dim 64 --ff 4096
	--dense-layers 1 --experts 64 --experts-used 8 --expert-ff 768 --shared-experts 1
	--expert-weights-norm --expert-weights-scale 1 --nextn 1 --context 4096)
models=(q3moe-q4_K q3moe-q8_0 glm-q4_K)
want() { # MODEL: is it selected?
	local c
	for c in "${configs[@]}"; do
		case " ${ONLY:-$1-$c} " in *" $1-$c "*) return 0 ;; esac
	done
	return 1
}
for t in q4_K q8_0; do
	want q3moe-$t && { [ -e "$dir/q3moe-$t.gguf" ] || "$s" synth "${q[@]}" --type $t --out "$dir/q3moe-$t.gguf"; }
done
want glm-q4_K && { [ -e "$dir/glm-q4_K.gguf" ] || "$s" synth "${g[@]}" --type q4_K --out "$dir/glm-q4_K.gguf"; }
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
for c in "${configs[@]}"; do
	path=${c%-t*} threads=${c##*-t} vnni=on build=avx2 pin=()
	case $path in
	avx512) build=avx512 ;;
	avx2novnni) path=avx2 vnni=off ;;
	*) echo "bench-moe: unknown configuration $c" >&2; exit 2 ;;
	esac
	if [ "$path" = avx512 ] && ! grep -q avx512_vnni /proc/cpuinfo; then echo "bench-moe: $c skipped: no AVX-512 VNNI" >&2; continue; fi
	[ "$threads" = 1 ] && pin=(taskset -c "${PIN_CPU:-1}")
	for m in "${models[@]}"; do
		case " ${ONLY:-$m-$c} " in *" $m-$c "*) ;; *) continue ;; esac
		l0=$(cut -d' ' -f1 /proc/loadavg)
		echo "== $m $c: $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
		SLUICE_KERNELS=$path SLUICE_AVXVNNI=$vnni "${pin[@]}" "$s" bench --model "$dir/$m.gguf" \
			--llama-bench "$llama/$build/llama-bench" --threads "$threads" --prompt 128,512 --gen 128 \
			--reps "$reps" --json >"$out/moe-$m-$c.json"
		echo "== $m $c done: $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
		echo "$(date -u +%Y-%m-%d) $l0 $(cut -d' ' -f1 /proc/loadavg)" >"$out/moe-$m-$c.meta"
	done
done
cpu=$(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //')
md=$out/table.md
go run ./scripts/benchtable -kernels -cpu "$cpu (family $(grep -m1 'cpu family' /proc/cpuinfo | sed 's/.*: //') model $(grep -m1 '^model[[:space:]]' /proc/cpuinfo | sed 's/.*: //'), $(nproc) vCPUs)" \
	-commit "$(git rev-parse --short HEAD)" "$out"/moe-*.json >"$md"
cat "$md"
if [ -n "$doc" ]; then
	go run ./scripts/benchtable -splice "$doc" -marker bench-moe <"$md"
	echo "bench-moe: updated $doc" >&2
fi
