#!/usr/bin/env bash
# bench-kvq8.sh: the Q8_0 KV page rows of docs/benchmarks.md. Writes the
# bench-110M shape (Q8_0 weights, 16k context) with `sluice synth` into DIR
# (default ../bench), then runs `sluice bench --llama-bench` at depth 8192
# (pp512, tg32) with F16 and Q8_0 KV pages, llama-bench getting the same
# cache type (-ctk/-ctv; -fa on for q8_0), alternating the two types REPS
# times (default 3) so each pair sees the same load. One JSON file per run
# in DIR/kvq8-out; the load average is recorded beside each.
#
#   scripts/bench-kvq8.sh [DIR]
#
# THREADS (default 2), PATHS (default avx512; avx2 forces the AVX2 path
# against llama.cpp's AVX2 build), DEPTH (default 8192).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-../bench}
llama=${LLAMA:-../shared/tools/llama.cpp}
reps=${REPS:-3}
threads=${THREADS:-2}
depth=${DEPTH:-8192}
mkdir -p "$dir/kvq8-out"
go build -o "$dir/.sluice" ./cmd/sluice
s=$dir/.sluice
m=$dir/b110-16k.gguf
[ -e "$m" ] || "$s" synth --out "$m" --preset bench-110M --type q8_0 --context 16384 --vocab-from testdata/vocab/ggml-vocab-llama-spm.gguf
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
for path in ${PATHS:-avx512}; do
	env=(SLUICE_KERNELS=$path)
	[ "$path" = avx2 ] && env+=(SLUICE_AVXVNNI=off)
	pin=()
	[ "$threads" = 1 ] && pin=(taskset -c "${PIN_CPU:-1}")
	for r in $(seq 1 "$reps"); do
		for kv in f16 q8_0; do
			out=$dir/kvq8-out/$path-t$threads-$kv-$r
			cut -d' ' -f1-3 /proc/loadavg >"$out.load"
			env "${env[@]}" "${pin[@]}" "$s" bench --model "$m" --kv-type $kv --llama-bench "$llama/$path/llama-bench" \
				--threads "$threads" --prompt 512 --gen 32 --depth "$depth" --reps 1 --json >"$out.json"
			cut -d' ' -f1-3 /proc/loadavg >>"$out.load"
			echo "$path t$threads $kv rep $r: $(cat "$out.load" | tr '\n' ' ')" >&2
		done
	done
done
