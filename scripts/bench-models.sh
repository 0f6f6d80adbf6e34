#!/usr/bin/env bash
# bench-models.sh: writes the models of docs/benchmarks.md's speed table into DIR
# (default ../bench): stories260K and bench-15M-q8_0 linked from
# ../shared/models, the bench-110M and TinyLlama-1.1B shapes written by
# `sluice synth` (seeded, so every machine measures the same bytes).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-../bench}
vocab=${VOCAB:-../shared/vocab/ggml-vocab-llama-spm.gguf}
mkdir -p "$dir"
go build -o "$dir/.sluice" ./cmd/sluice
s=$dir/.sluice
for m in stories260K bench-15M-q8_0; do
	[ -e "$dir/$m.gguf" ] || ln -s "$(realpath ../shared/models/$m.gguf)" "$dir/$m.gguf"
done
tl=(--layers 22 --embd 2048 --heads 32 --kv-heads 4 --ff 5632 --vocab-from "$vocab")
[ -e "$dir/bench-110M-q8_0.gguf" ] || "$s" synth --preset bench-110M --type q8_0 --vocab-from "$vocab" --out "$dir/bench-110M-q8_0.gguf"
[ -e "$dir/bench-110M-q4_K.gguf" ] || "$s" synth --preset bench-110M --type q4_K --vocab-from "$vocab" --out "$dir/bench-110M-q4_K.gguf"
[ -e "$dir/tinyllama-q4_K.gguf" ] || "$s" synth "${tl[@]}" --type q4_K --out "$dir/tinyllama-q4_K.gguf"
[ -e "$dir/tinyllama-q8_0.gguf" ] || "$s" synth "${tl[@]}" --type q8_0 --out "$dir/tinyllama-q8_0.gguf"
[ -e "$dir/tinyllama-8k.gguf" ] || "$s" synth "${tl[@]}" --type q4_K --context 8192 --out "$dir/tinyllama-8k.gguf"
rm -f "$s"
ls -l "$dir"
