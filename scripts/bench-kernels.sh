#!/usr/bin/env bash
# bench-kernels.sh: the kernel-goal tables of docs/benchmarks.md (issue 31
# item 5 and its depth table, issue 24's dense rows) in one go, written into
# docs/benchmarks.md between the "bench-kernels" markers (an Intel CPU's
# between the "bench-kernels-intel" ones: see MARKER). Every figure is a
# ratio measured side by side in one run: `sluice bench --llama-bench`
# alternates sluice and llama-bench test by test on the same file, the same
# threads (1-thread runs pinned to one vCPU), llama.cpp with
# OMP_WAIT_POLICY=passive, against llama.cpp's build for the path (avx512 /
# avx2). The AVX2 path is forced as a Zen 3 runs it
# (SLUICE_KERNELS=avx2 SLUICE_AVXVNNI=off).
#
#   scripts/bench-kernels.sh [PART ...]      (make bench-kernels PARTS="...")
#
# PART (default: item5 dense depth-quick):
#   item5        pp128, pp512, tg128 on bench-15M-q8_0, bench-110M-q8_0 and
#                TinyLlama-q4_K shapes; 4 configurations (AVX-512 / AVX2,
#                1 thread pinned / 2 threads). About 6 minutes on an idle
#                2-vCPU machine with REPS=1, 15 with REPS=3.
#   dense        the same tests on the qwen3 / gemma3 dense shapes (issue 24),
#                4 configurations. About 2 minutes idle (REPS=1), 4 (3).
#   depth-quick  decode and prefill at depth 8192 on the bench-110M shape
#                (36k context), 4 configurations. About 8 minutes idle
#                (llama-bench refills the 8192 positions before each test).
#   depth        issue 31's table: --depth 0,2048,8192,16384,32768 on the
#                bench-110M shape (36k context) and 0,2048,8192,16384 on the
#                TinyLlama-q4_K shape (20k context), 4 configurations. Long:
#                llama-bench refills the context before every test, so this
#                is over an hour even idle.
#   table        measures nothing: writes the tables from the JSON files of
#                OUT and MERGE, e.g. MERGE="d1 d2" OUT=d3 scripts/bench-kernels.sh table
#   depth-b110, depth-tl  one model of the depth part. B110_DEPTHS and
#                TL_DEPTHS (comma lists) choose the depths, CONFIGS the
#                configurations. Pieces split by CONFIGS and by part share
#                OUT and build up the table (each writes OUT/PART-CONFIG.json
#                and the splice takes every file in OUT), e.g.
#                CONFIGS=avx512-t1 scripts/bench-kernels.sh depth-b110
#                A depth subset rewrites its configuration's file: give it
#                its own OUT and DOC= to print it without touching the doc,
#                e.g. OUT=d16k DOC= CONFIGS=avx512-t1 B110_DEPTHS=16384 \
#                scripts/bench-kernels.sh depth-b110
#
# Environment: MODELS (default ../bench; missing models are written with
# sluice synth, seeded), LLAMA (llama.cpp builds; default
# ../shared/tools/llama.cpp), REPS (default 3 for item5/dense, 1 for depth
# parts), OUT (JSON directory; default bench-kernels-out), CONFIGS (default
# "avx512-t1 avx512-t2 avx2novnni-t1 avx2novnni-t2"), DOC (file to update;
# default docs/benchmarks.md; DOC= to only print), MARKER (the markers
# the tables go between; default bench-kernels on an AMD CPU,
# bench-kernels-intel on an Intel one, so that each vendor's tables are
# rewritten beside the other's, never over them), COMMIT (the commit(s)
# the captions name; default HEAD), SLUICE (the binary;
# default: built from this checkout), PIN_CPU (the CPU 1-thread runs are
# pinned to; default 1), MERGE (more OUT directories whose JSON files the
# tables take too, before OUT's own: pieces measured into separate
# directories make one table, a later file's cells replacing an earlier
# one's).
set -euo pipefail
cd "$(dirname "$0")/.."
parts=("$@")
[ ${#parts[@]} -gt 0 ] || parts=(item5 dense depth-quick)
models=${MODELS:-../bench}
llama=${LLAMA:-../shared/tools/llama.cpp}
out=${OUT:-bench-kernels-out}
doc=${DOC-docs/benchmarks.md}
case $(grep -m1 '^vendor_id' /proc/cpuinfo | sed 's/.*: //') in
GenuineIntel) marker=${MARKER:-bench-kernels-intel} ;;
*) marker=${MARKER:-bench-kernels} ;;
esac
read -r -a configs <<<"${CONFIGS:-avx512-t1 avx512-t2 avx2novnni-t1 avx2novnni-t2}"
vocab=${VOCAB:-../shared/vocab/ggml-vocab-llama-spm.gguf}
mkdir -p "$out" "$models"
if [ -z "${SLUICE:-}" ]; then
	go build -o "$out/sluice" ./cmd/sluice
	SLUICE=$out/sluice
fi
s=$SLUICE

# model NAME: makes sure $models/NAME.gguf exists (seeded sluice synth).
tl=(--layers 22 --embd 2048 --heads 32 --kv-heads 4 --ff 5632 --vocab-from "$vocab")
model() {
	local f=$models/$1.gguf
	[ -e "$f" ] && return
	echo "bench-kernels: writing $f" >&2
	case $1 in
	bench-15M-q8_0) ln -s "$(realpath ../shared/models/bench-15M-q8_0.gguf)" "$f" ;;
	bench-110M-q8_0-36k) "$s" synth --preset bench-110M --type q8_0 --context 36864 --vocab-from "$vocab" --out "$f" ;;
	tinyllama-q4_K-20k) "$s" synth "${tl[@]}" --type q4_K --context 20480 --out "$f" ;;
	q3-q4k) "$s" synth --arch qwen3 --layers 8 --embd 1024 --heads 16 --kv-heads 8 --head-dim 128 --ff 3072 \
		--type q4_K --context 4096 --vocab 32000 --out "$f" ;;
	g3-q4k) "$s" synth --arch gemma3 --layers 8 --embd 1152 --heads 4 --kv-heads 1 --head-dim 256 --ff 3456 \
		--sliding-window 512 --type q4_K --context 4096 --vocab 32000 --tie-output --out "$f" ;;
	*) echo "bench-kernels: unknown model $1" >&2; exit 2 ;;
	esac
}

export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
# run PART CONFIG ARGS...: one sluice bench --llama-bench run, JSON to $out/PART-CONFIG.json.
run() {
	local part=$1 c=$2
	shift 2
	local path=${c%-t*} threads=${c##*-t} vnni=on build=avx2 pin=()
	case $path in
	avx512) build=avx512 ;;
	avx2) ;;
	avx2novnni) path=avx2 vnni=off ;;
	*) echo "bench-kernels: unknown configuration $c" >&2; exit 2 ;;
	esac
	if [ "$path" = avx512 ] && ! grep -q avx512_vnni /proc/cpuinfo; then echo "bench-kernels: $c skipped: no AVX-512 VNNI" >&2; return; fi
	[ "$threads" = 1 ] && pin=(taskset -c "${PIN_CPU:-1}")
	echo "== $part $c: $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
	local l0
	l0=$(cut -d' ' -f1 /proc/loadavg)
	SLUICE_KERNELS=$path SLUICE_AVXVNNI=$vnni "${pin[@]}" "$s" bench "$@" --threads "$threads" \
		--llama-bench "$llama/$build/llama-bench" --json >"$out/$part-$c.json"
	echo "== $part $c done: $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
	# The run's date and load average (start, end) for the table's caption.
	echo "$(date -u +%Y-%m-%d) $l0 $(cut -d' ' -f1 /proc/loadavg)" >"$out/$part-$c.meta"
}

for p in "${parts[@]}"; do
	case $p in
	item5)
		ms=(bench-15M-q8_0 bench-110M-q8_0-36k tinyllama-q4_K-20k)
		margs=()
		for m in "${ms[@]}"; do
			model "$m"
			margs+=(--model "$models/$m.gguf")
		done
		for c in "${configs[@]}"; do
			run item5 "$c" "${margs[@]}" --prompt 128,512 --gen 128 --reps "${REPS:-3}"
		done ;;
	dense)
		for m in q3-q4k g3-q4k; do model "$m"; done
		for c in "${configs[@]}"; do
			run dense "$c" --model "$models/q3-q4k.gguf" --model "$models/g3-q4k.gguf" --prompt 128,512 --gen 128 --reps "${REPS:-3}"
		done ;;
	depth-quick)
		model bench-110M-q8_0-36k
		for c in "${configs[@]}"; do
			run depth-quick "$c" --model "$models/bench-110M-q8_0-36k.gguf" --prompt 512 --gen 32 --depth 0,8192 --reps "${REPS:-1}"
		done ;;
	depth | depth-b110 | depth-tl)
		[ "$p" = depth-tl ] || model bench-110M-q8_0-36k
		[ "$p" = depth-b110 ] || model tinyllama-q4_K-20k
		for c in "${configs[@]}"; do
			[ "$p" = depth-tl ] || run depth-b110 "$c" --model "$models/bench-110M-q8_0-36k.gguf" --prompt 512 --gen 32 \
				--depth "${B110_DEPTHS:-0,2048,8192,16384,32768}" --reps "${REPS:-1}"
			[ "$p" = depth-b110 ] || run depth-tl "$c" --model "$models/tinyllama-q4_K-20k.gguf" --prompt 512 --gen 32 \
				--depth "${TL_DEPTHS:-0,2048,8192,16384}" --reps "${REPS:-1}"
		done ;;
	table) ;; # measure nothing: only write the tables from OUT (and MERGE)
	*) echo "bench-kernels: unknown part $p" >&2; exit 2 ;;
	esac
done

cpu=$(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //')
md=$out/tables.md
go run ./scripts/benchtable -kernels -cpu "$cpu (family $(grep -m1 'cpu family' /proc/cpuinfo | sed 's/.*: //') model $(grep -m1 '^model[[:space:]]' /proc/cpuinfo | sed 's/.*: //'), $(nproc) vCPUs)" \
	-commit "${COMMIT:-$(git rev-parse --short HEAD)}" $(for d in ${MERGE:-}; do ls "$d"/*.json; done) "$out"/*.json >"$md"
cat "$md"
if [ -n "$doc" ]; then
	go run ./scripts/benchtable -splice "$doc" -marker "$marker" <"$md"
	echo "bench-kernels: updated $doc ($marker)" >&2
fi
