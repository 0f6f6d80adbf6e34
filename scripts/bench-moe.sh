#!/usr/bin/env bash
# bench-moe.sh: the mixture-of-experts rows of docs/benchmarks.md. Writes the
# two MoE shapes with `sluice synth` (seeded; 2-4 GB each, slow to write: the
# K-quant search is single-threaded) into DIR (default ../bench), then runs
# `sluice bench --llama-bench` on each (pp128, pp512, tg128; interleaved test
# by test; 1 thread pinned and 2 threads; AVX-512 and the AVX2 path against
# llama.cpp's matching build), one JSON file per run in DIR/moe-out.
#
#   scripts/bench-moe.sh [DIR]
#
# ONLY="TAG ..." runs only those configurations (TAG as the JSON file names:
# MODEL-PATH-tTHREADS, e.g. ONLY="q3moe-q8_0-avx2-t2 glm-q4_K-avx2-t2", the
# two cells the 2026-12-06 table lacks).
#
# Shapes (24 layers, n_embd 1024, 64 experts, top-8, expert FFN 768, head dim
# 128, built-in vocabulary):
#   q3moe-*  qwen3moe, Qwen3-30B-A3B scaled: 16 heads (2 KV)
#   glm-*    glm4moe, GLM-4.5-Air scaled: 24 heads (2 KV), RoPE on 64 of 128
#            dims, first layer dense (FFN 4096), one shared expert,
#            renormalised weights, one nextn layer (not run)
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-../bench}
llama=${LLAMA:-../shared/tools/llama.cpp}
reps=${REPS:-1}
mkdir -p "$dir/moe-out"
go build -o "$dir/.sluice" ./cmd/sluice
s=$dir/.sluice
q=(--arch qwen3moe --layers 24 --embd 1024 --heads 16 --kv-heads 2 --head-dim 128 --ff 3072
	--experts 64 --experts-used 8 --expert-ff 768 --context 4096)
g=(--arch glm4moe --layers 24 --embd 1024 --heads 24 --kv-heads 2 --head-dim 128 --rope-dim 64 --ff 4096
	--dense-layers 1 --experts 64 --experts-used 8 --expert-ff 768 --shared-experts 1
	--expert-weights-norm --expert-weights-scale 1 --nextn 1 --context 4096)
for t in q4_K q8_0; do
	[ -e "$dir/q3moe-$t.gguf" ] || "$s" synth "${q[@]}" --type $t --out "$dir/q3moe-$t.gguf"
done
[ -e "$dir/glm-q4_K.gguf" ] || "$s" synth "${g[@]}" --type q4_K --out "$dir/glm-q4_K.gguf"
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
run() { # tag model threads path
	case " ${ONLY:-$1} " in *" $1 "*) ;; *) return ;; esac
	local pin=() env=(SLUICE_KERNELS=$4) build=$4
	[ "$3" = 1 ] && pin=(taskset -c 1)
	[ "$4" = avx2 ] && env+=(SLUICE_AVXVNNI=off)
	env "${env[@]}" "${pin[@]}" "$s" bench --model "$dir/$2.gguf" --llama-bench "$llama/$build/llama-bench" \
		--threads "$3" --prompt 128,512 --gen 128 --reps "$reps" --json >"$dir/moe-out/$1.json"
}
for m in q3moe-q4_K q3moe-q8_0 glm-q4_K; do
	for th in 1 2; do
		run "$m-avx512-t$th" "$m" "$th" avx512
		run "$m-avx2-t$th" "$m" "$th" avx2
	done
done
