#!/bin/sh
# make bench-longctx: issue 31's long-context serving run (docs/testing.md).
# Writes a synthetic 64k-context model (small weights, so a 32k prompt
# prefills in seconds), then one `sluice bench serve --workload longctx
# --interference` run: TTFT of a LONGCTX_PROMPT-token prompt colocated,
# disaggregated over TCP and shm (streaming handoff), TCP with
# --handoff-after-prefill, and llama-server (when ../shared has it),
# interleaved; then short requests' ITL with no long prompt and while one
# prefills. Every sluice output must equal colocated's (exit 1 if not).
# The table, with the command, CPU, date and load average, goes to
# $BENCH_OUT/longctx-<date>.txt. On a quiet machine drop --omp-passive:
#   LONGCTX_FLAGS= make bench-longctx
set -eu
OUT=${BENCH_OUT:-bench-out}
PROMPT=${LONGCTX_PROMPT:-32768}
REPEATS=${LONGCTX_REPEATS:-3}
THREADS=${LONGCTX_THREADS:-2}
FLAGS=${LONGCTX_FLAGS---omp-passive}
GO=${GO:-go}
mkdir -p "$OUT" bin
$GO build -o bin/sluice ./cmd/sluice
MODEL=$OUT/longctx-synth-64k.gguf
if [ ! -f "$MODEL" ]; then
	./bin/sluice synth --out "$MODEL" --arch llama --layers 2 --embd 128 --heads 2 --kv-heads 2 --ff 384 \
		--context 65536 --type q8_0 --seed 31 --name synthetic-longctx-64k
fi
LLAMA=""
SEL=../shared/tools/llama.cpp/select
if [ -x "$SEL" ]; then
	LLAMA="--llama-server $($SEL llama-server)"
fi
REPORT=$OUT/longctx-$(date -u +%Y%m%dT%H%MZ).txt
CMD="./bin/sluice bench serve --workload longctx --interference --model $MODEL --long-prompt $PROMPT --long-gen 8 --prompt 64 --gen 256 --concurrency 4 --requests 16 --repeats $REPEATS --threads $THREADS --timeout 90m $LLAMA $FLAGS"
{
	echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
	echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //') ($(nproc) CPUs)"
	echo "loadavg at start: $(cut -d' ' -f1-3 /proc/loadavg)"
	echo "command: $CMD"
} | tee "$REPORT"
# shellcheck disable=SC2086
$CMD 2>&1 | tee -a "$REPORT"
echo "loadavg at end: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$REPORT"
