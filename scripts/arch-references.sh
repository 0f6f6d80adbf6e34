#!/usr/bin/env bash
# arch-references.sh: regenerate testdata/models/arch/*.gguf (small synthetic
# qwen3 and gemma3 models written by `sluice synth`) and
# testdata/reference/arch.json (llama.cpp's prompt ids, greedy ids and top-2
# log-probabilities for them), which internal/model's TestArchReferences
# holds sluice to.
#
# Needs ../shared/tools/llama.cpp (llama-server), python3 and curl. Settings
# as ../shared/reference/README.md: greedy over raw logits, F32 KV cache,
# flash attention off, 1 thread, the whole prompt in one batch, one token
# per step after it. Each case's greedy ids are cut before the first step
# whose top-2 log-probabilities are closer than CUT (logit units): there an
# implementation that rounds differently may pick either.
#
# Usage: scripts/arch-references.sh   (from the repository root)
set -euo pipefail
cd "$(dirname "$0")/.."
CUT=${CUT:-0.25}
PORT=${PORT:-18397}
NGEN=32
LS=$(../shared/tools/llama.cpp/select llama-server)
out=testdata/models/arch
mkdir -p "$out" testdata/reference
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
go build -o "$bin/sluice" ./cmd/sluice

# name: synth flags. head_dim differs from embd/heads in every model; the
# gemma3 window (16) is shorter than the longer prompts, and layer 5 of 7 is
# the global one.
models=(
  "qwen3-hd32-f16|--arch qwen3 --layers 2 --embd 64 --heads 4 --kv-heads 2 --head-dim 32 --ff 128 --type f16 --seed 3101 --output-scale 12"
  "qwen3-hd24-q8_0|--arch qwen3 --layers 3 --embd 64 --heads 4 --kv-heads 2 --head-dim 24 --ff 128 --type q8_0 --seed 3102 --output-scale 12"
  "gemma3-w16-f16|--arch gemma3 --layers 7 --embd 64 --heads 2 --kv-heads 1 --head-dim 48 --ff 128 --sliding-window 16 --type f16 --seed 3201 --output-scale 12"
  "gemma3-w16-q8_0|--arch gemma3 --layers 7 --embd 64 --heads 4 --kv-heads 2 --head-dim 32 --ff 192 --sliding-window 16 --type q8_0 --seed 3202 --output-scale 12"
  "gemma3-spm-q8_0|--arch gemma3 --layers 6 --embd 64 --heads 2 --kv-heads 1 --head-dim 32 --ff 128 --sliding-window 16 --type q8_0 --seed 3203 --output-scale 12 --spm-vocab"
  "gemma3-rope8-q8_0|--arch gemma3 --layers 6 --embd 64 --heads 2 --kv-heads 1 --head-dim 32 --ff 128 --sliding-window 16 --type q8_0 --seed 3204 --output-scale 12 --rope-scaling 8 --rope-base 10000"
)
prompts='["Once upon a time", "The quick brown fox jumps over the lazy dog, and then the dog chases the fox across the field until nightfall.", "In 2026, KV caches are paged: each page belongs to one tenant and one generation.", "a b c d e f g h i j k l m n o p q r s t u v w x y z 0 1 2 3 4 5 6 7 8 9", " Café  naïve\\tthe   über-fast 東京 😀 <start_of_turn>user"]'

results=()
for m in "${models[@]}"; do
  name=${m%%|*}
  flags=${m#*|}
  # shellcheck disable=SC2086
  "$bin/sluice" synth --out "$out/$name.gguf" $flags --context 512 >/dev/null
  "$LS" -m "$out/$name.gguf" --host 127.0.0.1 --port "$PORT" -t 1 -tb 1 -c 512 -np 1 -b 512 -ub 512 \
    -fa off -ctk f32 -ctv f32 --no-warmup >"$bin/server.log" 2>&1 &
  pid=$!
  for _ in $(seq 100); do curl -sf "127.0.0.1:$PORT/health" >/dev/null 2>&1 && break; sleep 0.1; done
  python3 - "$name" "$PORT" "$NGEN" "$CUT" "$prompts" >"$bin/$name.json" <<'EOF'
import json, sys, urllib.request
name, port, ngen, cut, prompts = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), json.loads(sys.argv[5])
def post(path, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(req))
cases = []
for p in prompts:
    ids = post("/tokenize", {"content": p, "add_special": True})["tokens"]
    r = post("/completion", {"prompt": ids, "n_predict": ngen, "temperature": 0, "top_k": 1, "n_probs": 2,
                             "cache_prompt": False, "ignore_eos": True, "return_tokens": True, "samplers": ["top_k"]})
    # r["tokens"] are the generated ids. The server folds a token that
    # ends inside a UTF-8 character (a byte-fallback token) into the next
    # one's completion_probabilities entry, so its own top-2 are not
    # reported: the ids are cut there too (margin unknown).
    gen, margins = [], []
    probs = r["completion_probabilities"]
    for i, tok in enumerate(r["tokens"]):
        if i >= len(probs) or probs[i]["id"] != tok:
            break
        top = probs[i]["top_logprobs"]
        margin = top[0]["logprob"] - top[1]["logprob"]
        if margin < cut:
            break
        assert tok == top[0]["id"]
        gen.append(tok)
        margins.append(round(margin, 4))
    cases.append({"prompt": p, "prompt_token_ids": ids, "generated_token_ids": gen, "top2_margins": margins,
                  "steps_run": len(r["tokens"])})
print(json.dumps({"file": f"models/arch/{name}.gguf", "cases": cases}))
EOF
  kill "$pid"; wait "$pid" 2>/dev/null || true
  results+=("$bin/$name.json")
done
python3 - "$CUT" "${results[@]}" >testdata/reference/arch.json <<'EOF'
import json, sys
cut = float(sys.argv[1])
models = [json.load(open(p)) for p in sys.argv[2:]]
print(json.dumps({
    "produced_by": "scripts/arch-references.sh: llama.cpp llama-server (../shared/tools/llama.cpp, release v0.5.0 / ggml 0.25.1), "
                   "greedy over raw logits, F32 KV cache, flash attention off, 1 thread, whole prompt in one batch",
    "cut_margin": cut,
    "models": models}, indent=1))
EOF
(cd testdata && sha256sum models/arch/*.gguf reference/arch.json)
