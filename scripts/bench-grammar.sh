#!/usr/bin/env bash
# bench-grammar.sh: structured-output decode speed, sluice against
# llama-server on the same GGUF file and thread count (issue 25). Both
# servers run at once; each round sends, to each server in turn, one
# streamed chat request without a response format (ignore_eos, MAX tokens)
# and one with a json_schema response format (the same schema for both:
# an object of fixed-length strings, long enough to decode MAX tokens or
# close to it). Decode speed is (completion tokens - 1) / (time from the
# first to the last streamed token), so prompt processing is left out on
# both sides. Rounds alternate the order; the medians of ROUNDS rounds
# (default 7) and the load average go to stdout as a markdown table, with
# the median of each server's per-round ratio.
#
#   scripts/bench-grammar.sh [DIR]
#
# THREADS (default 1, both servers), MAX (default 128), MODELS (default
# "15m": ../shared/models/bench-15M-q8_0.gguf, 32k vocabulary; add
# "qwen2vocab" for the bench-15M shape written by `sluice synth` with
# Qwen2's 151,646-token vocabulary into DIR, default ../bench).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-../bench}
shared=${SLUICE_SHARED:-../shared}
rounds=${ROUNDS:-7}
threads=${THREADS:-1}
max=${MAX:-128}
mkdir -p "$dir"
go build -o "$dir/.sluice-grammar" ./cmd/sluice
s=$dir/.sluice-grammar
llama=$("$shared/tools/llama.cpp/select" llama-server)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
for name in ${MODELS:-15m}; do
	case $name in
	15m) m=$shared/models/bench-15M-q8_0.gguf ;;
	qwen2vocab)
		m=$dir/bench-15M-qwen2vocab.gguf
		[ -e "$m" ] || "$s" synth --out "$m" --preset bench-15M --type q8_0 --vocab-from testdata/vocab/ggml-vocab-qwen2.gguf >&2
		;;
	*) echo "unknown model $name" >&2; exit 2 ;;
	esac
	lport=$((18000 + RANDOM % 1000)); sport=$((lport + 1000))
	# llama-server's wait() probes /v1/models, which it serves too.
	"$llama" -m "$m" -t "$threads" -tb "$threads" -c 1024 --host 127.0.0.1 --port "$lport" -np 1 >"$dir/grammar-llama.log" 2>&1 &
	pids+=($!)
	"$s" serve --model "$m" --colocated --threads "$threads" --listen "127.0.0.1:$sport" --context 1024 >"$dir/grammar-sluice.log" 2>&1 &
	pids+=($!)
	load0=$(cut -d' ' -f1-3 /proc/loadavg)
	python3 - "$lport" "$sport" "$rounds" "$max" "$name" "$threads" "$load0" <<'PY'
import json, sys, time, urllib.request, statistics
lport, sport, rounds, mx, name, threads, load0 = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], sys.argv[6], sys.argv[7]
schema = {"type": "object", "additionalProperties": False, "required": ["items"],
          "properties": {"items": {"type": "array", "minItems": 12, "maxItems": 12,
                                   "items": {"type": "string", "minLength": 24, "maxLength": 24}}}}
def wait(port):
    for _ in range(600):
        try:
            return json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=2).read())["data"][0]["id"]
        except Exception:
            time.sleep(0.5)
    sys.exit(f"server on port {port} did not come up")
def run(srv, port, constrained, seed):
    # sluice: its chat endpoint (response_format is a chat parameter);
    # llama-server: its native /completion with json_schema (its chat
    # endpoint wraps the schema in the chat template's generation prompt,
    # which fails to initialise on these template-less files).
    if srv == "sluice":
        url = f"http://127.0.0.1:{port}/v1/chat/completions"
        body = {"model": smodel, "messages": [{"role": "user", "content": "List twelve short codes as JSON."}],
                "max_tokens": mx, "temperature": 1, "seed": seed, "stream": True, "stream_options": {"include_usage": True}}
        if constrained:
            body["response_format"] = {"type": "json_schema", "json_schema": {"name": "codes", "schema": schema}}
    else:
        url = f"http://127.0.0.1:{port}/completion"
        # llama-server's own defaults truncate (top_k 40, top_p 0.95,
        # min_p 0.05) where sluice's draw covers the whole vocabulary:
        # turn them off so both servers sample the same distribution.
        body = {"prompt": "List twelve short codes as JSON.", "n_predict": mx, "temperature": 1, "seed": seed, "stream": True,
                "top_k": 0, "top_p": 1.0, "min_p": 0.0}
        if constrained:
            body["json_schema"] = schema
    if not constrained:
        body["ignore_eos"] = True
    req = urllib.request.Request(url, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json", "Authorization": "Bearer k"})
    first = last = None
    n, text = 0, ""
    with urllib.request.urlopen(req, timeout=600) as r:
        for line in r:
            line = line.strip()
            if not line.startswith(b"data: ") or line == b"data: [DONE]":
                continue
            ev = json.loads(line[6:])
            if ev.get("usage"):
                n = ev["usage"]["completion_tokens"]
            if "tokens_predicted" in ev and ev.get("stop"):
                n = ev["tokens_predicted"]
            piece = ev.get("content") or "".join(c.get("delta", {}).get("content") or "" for c in ev.get("choices", []))
            if piece:
                now = time.perf_counter()
                first = first or now
                last = now
                text += piece
    if constrained and n < mx:
        json.loads(text)  # a finished output must be the JSON the schema asks for
    return (n - 1) / (last - first), n
wait(lport)
smodel = wait(sport)
rates = {}
for r in range(rounds):
    order = [("llama-server", lport), ("sluice", sport)]
    if r % 2:
        order.reverse()
    for srv, port in order:
        for constrained in (False, True):
            rate, n = run(srv, port, constrained, 100 + r)
            rates.setdefault((srv, constrained), []).append(rate)
            print(f"round {r} {srv} {'json_schema' if constrained else 'free'}: {n} tokens, {rate:.1f} tok/s", file=sys.stderr)
med = {k: statistics.median(v) for k, v in rates.items()}
load1 = open("/proc/loadavg").read().split()[:3]
cpu = next(l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name"))
print(f"\n{name}: {cpu}, {threads} thread(s), {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load average {load0} -> {' '.join(load1)}, median of {rounds} rounds\n")
print("| server | free tok/s | json_schema tok/s | json_schema / free |")
print("|---|---:|---:|---:|")
for srv in ("llama-server", "sluice"):
    f, c = med[(srv, False)], med[(srv, True)]
    print(f"| {srv} | {f:.1f} | {c:.1f} | {c / f:.2f} |")
print(f"| sluice / llama-server | {med[('sluice', False)] / med[('llama-server', False)]:.2f} | {med[('sluice', True)] / med[('llama-server', True)]:.2f} | |")
# Each round measures a server's two requests back to back, so the ratio
# of a round's pair sees the same load: its median is steadier than the
# ratio of the medians on a loaded machine.
pair = {srv: statistics.median(c / f for f, c in zip(rates[(srv, False)], rates[(srv, True)])) for srv in ("llama-server", "sluice")}
print(f"\nmedian of the per-round json_schema / free ratios: llama-server {pair['llama-server']:.2f}, sluice {pair['sluice']:.2f}")
PY
	cleanup
	pids=()
done
