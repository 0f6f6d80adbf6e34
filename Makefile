# The two commands of README.md are `make serve` (or `go run ./cmd/sluice serve`)
# and `make test`. Everything else here is optional and longer.
GO ?= go
SEEDS ?= 100000
FUZZTIME ?= 60s

# What `sluice version` and every role's first log line report, stamped at
# link time so that a build without VCS stamping (-buildvcs=false, a copy
# without .git) still says it: HEAD's tag, else Go's pseudo-version of
# HEAD; the full commit, "+dirty" when the tree has changes.
REVISION ?= $(shell git rev-parse HEAD 2>/dev/null)$(shell git status --porcelain 2>/dev/null | grep -q . && echo +dirty)
VERSION ?= $(shell git describe --tags --exact-match 2>/dev/null || TZ=UTC git log -1 --abbrev=12 --date=format-local:%Y%m%d%H%M%S --format=v0.0.0-%cd-%h 2>/dev/null)
LDFLAGS = -X main.version=$(VERSION) -X main.revision=$(REVISION)

.PHONY: test serve build fuzz soak bench bench-go bench-model sim spec
test:
	./scripts/test.sh

serve:
	$(GO) run -ldflags "$(LDFLAGS)" ./cmd/sluice serve

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/sluice ./cmd/sluice

fuzz:
	FUZZTIME=$(FUZZTIME) ./scripts/fuzz.sh

# Structured outputs at length: every corpus schema (testdata/schemas) with
# GRAMMAR_SEEDS seeds at temperature 1 on stories260K and the synthetic qwen2
# model, colocated, in process, over TCP and shm with preemptions, each
# output validated by an independent JSON Schema validator; then the mask
# benchmark (per-token mask p50/p99 and compile time on 50k and 151k
# vocabularies).
GRAMMAR_SEEDS ?= 8
.PHONY: test-grammar
test-grammar:
	SLUICE_GRAMMAR_SEEDS=$(GRAMMAR_SEEDS) $(GO) test -count=1 -timeout 60m -run 'TestConstrained' ./internal/engine/
	$(GO) test -count=1 -run '^$$' -bench BenchmarkMask -benchtime 1x ./internal/grammar/

# Speed figures are ratios measured within one run; pin single-thread runs
# with taskset -c 1 when comparing against llama.cpp's pinned numbers.
bench: bench-go bench-model

bench-go:
	$(GO) test -run='^$$' -bench=. -count=1 ./...

bench-model:
	$(GO) run ./cmd/sluice bench --synth

.PHONY: bench-table
# The side-by-side speed table of docs/benchmarks.md (sluice bench --llama-bench over the
# six models, each kernel path, 1 thread pinned and 2 threads; about an hour
# on a 2-vCPU machine; models from `make bench-models`, llama.cpp from
# ../shared). BENCH_TABLE_CONFIGS="avx512-t1 avx2novnni-t1" etc.
bench-table:
	scripts/bench-table.sh bench-out $(BENCH_TABLE_CONFIGS)

.PHONY: bench-kernels
# The kernel-goal and depth tables of docs/benchmarks.md (issue 31 item 5,
# issue 24's dense rows): scripts/bench-kernels.sh runs sluice bench
# --llama-bench per part and configuration and rewrites the tables between
# the bench-kernels markers (bench-kernels-intel on an Intel CPU). Default
# parts item5 dense depth-quick: about 15-20 minutes on an idle 2-vCPU
# machine with REPS=1 (about 30 with the default REPS=3);
# BENCH_KERNELS_PARTS=depth is the full depth table (over an hour).
BENCH_KERNELS_PARTS ?= item5 dense depth-quick
bench-kernels:
	scripts/bench-kernels.sh $(BENCH_KERNELS_PARTS)

.PHONY: bench-kvq8
# The Q8_0 KV page rows of docs/benchmarks.md: bench-110M (16k context) at
# depth 8192 with F16 and Q8_0 pages, against llama-bench with the same
# -ctk/-ctv, alternated REPS times; about 5 minutes a rep on 2 vCPUs.
bench-kvq8:
	scripts/bench-kvq8.sh

.PHONY: bench-grammar
# Structured outputs against llama-server (issue 25): decode tok/s with a
# json_schema response format / without one, for both servers on the same
# file and threads, interleaved rounds (ROUNDS, default 7), medians and the
# load average; MODELS="15m qwen2vocab" adds the bench-15M shape with
# Qwen2's 151k vocabulary (written by sluice synth into ../bench).
bench-grammar:
	scripts/bench-grammar.sh

.PHONY: bench-moe
# The mixture-of-experts table of docs/benchmarks.md: writes the qwen3moe and
# glm4moe bench shapes (2-4 GB each) into ../bench when missing, runs sluice
# bench --llama-bench on them (4 configurations) and rewrites the table
# between the bench-moe markers. REPS=1 roughly 15-20 minutes on an idle
# 2-vCPU machine, the default REPS=3 roughly 45 (estimated from the tests'
# rates); each missing model adds 10-30 minutes of sluice synth
# (scripts/bench-moe.sh for ONLY=...).
bench-moe:
	scripts/bench-moe.sh

# The container image, FROM scratch with the static binary (deploy/Containerfile):
# podman, no registry. `make image-check` runs it with podman (sluice serve,
# the built-in model) and asks it a question on loopback.
IMAGE ?= localhost/sluice:dev
.PHONY: image image-check
image:
	IMAGE=$(IMAGE) LDFLAGS="$(LDFLAGS)" scripts/image.sh build

image-check: image
	IMAGE=$(IMAGE) scripts/image.sh check

# The Helm chart on a real single-node Kubernetes (v1.33, built from the Go
# module proxy and cached under ~/.cache/sluice/k8s; Debian's containerd,
# runc, etcd and CNI plugins; podman images, no registry): install, a decode
# pod deleted under load, a rolling model upgrade, decode scaled 2->3->1,
# server-side validation, the pods' uid and read-only root, /metrics from
# inside the cluster, the InferencePool example against its CRD. Root only;
# 30-70 minutes cold (the build), about 3 minutes with the binaries cached.
# Not in `make test` (docs/testing.md).
.PHONY: test-k8s
test-k8s:
	LDFLAGS="$(LDFLAGS)" scripts/k8s/test.sh

.PHONY: bench-models
# Writes the synthetic models of the speed table into ../bench (the real
# ones are linked from ../shared/models): about 8 minutes.
bench-models:
	scripts/bench-models.sh

.PHONY: bench-longctx
# Issue 31's long-context serving run: TTFT of a 32k-token prompt PD over TCP,
# PD over shm, colocated and llama-server side by side, and short requests'
# ITL while such prompts prefill, on a synthetic 64k-context model it writes
# into bench-out/ (docs/testing.md; about 15 minutes on an idle 2-vCPU
# machine). LONGCTX_PROMPT, LONGCTX_REPEATS, LONGCTX_THREADS, LONGCTX_FLAGS.
bench-longctx:
	GO=$(GO) scripts/bench-longctx.sh

.PHONY: bench-cluster
# The router's CPU per request and its balance over 1, 2, 3 decode workers,
# every role its own process on loopback (docs/benchmarks.md).
bench-cluster:
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/sluice ./cmd/sluice
	./bin/sluice bench cluster $(BENCH_CLUSTER_FLAGS)

# sluice serve vs llama-server (when ../shared/tools/llama.cpp is there) on
# loopback, interleaved; BENCH_SERVE_FLAGS="--requests 64 --repeats 3" etc.
# bench-serve-interference: short requests' ITL while ~2k-token prompts keep
# arriving, colocated vs disaggregated; bench-serve-kv: a pool of a quarter
# of the in-flight demand, every output checked against its solo run;
# bench-serve-crowding: see below.
LLAMA_SELECT ?= ../shared/tools/llama.cpp/select
LLAMA_SERVER_FLAG = $$(test -x $(LLAMA_SELECT) && echo --llama-server $$($(LLAMA_SELECT) llama-server))
BENCH_SERVE_FLAGS ?=
.PHONY: bench-serve bench-serve-interference bench-serve-kv bench-serve-crowding bench-serve-encrypt
bench-serve:
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/sluice ./cmd/sluice
	./bin/sluice bench serve $(LLAMA_SERVER_FLAG) $(BENCH_SERVE_FLAGS)
bench-serve-interference:
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/sluice ./cmd/sluice
	./bin/sluice bench serve --workload interference --concurrency 8 --requests 64 $(LLAMA_SERVER_FLAG) $(BENCH_SERVE_FLAGS)
bench-serve-kv:
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/sluice ./cmd/sluice
	./bin/sluice bench serve --workload kv-pressure --concurrency 16,64 --requests 64 $(BENCH_SERVE_FLAGS)
	./bin/sluice bench serve --workload kv-pressure --concurrency 16,64 --requests 64 --colocated $(BENCH_SERVE_FLAGS)
# bench-serve-crowding: tenant b repeating its own prompts alone and while
# tenant a floods unique 1k-token prompts (4 alone/flooded block pairs per
# server, 2 servers): b's cache hit rate and TTFT p50/p99 side by side,
# the ratios with 95% intervals against the 1.10x bound (issue 28).
# bench-serve-encrypt: serving tok/s with the roles' frames encrypted vs
# plain, both servers up, driven in turn (issue 28), and the handoff
# benchmark's encrypted vs plain-frame vs raw TCP transfer, interleaved.
bench-serve-encrypt:
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/sluice ./cmd/sluice
	./bin/sluice bench serve --workload encrypt --prompt 512 --gen 32 --concurrency 4 --requests 16 --repeats 5 $(BENCH_SERVE_FLAGS)
	$(MAKE) bench-handoff-encrypt
# bench-handoff-encrypt: BenchmarkHandoffEncrypt (raw TCP, plain frames and
# encrypted frames in turn, each iteration): enc/crc and enc/raw medians.
.PHONY: bench-handoff-encrypt
bench-handoff-encrypt:
	uptime
	$(GO) test -timeout 20m -run '^$$' -bench HandoffEncrypt -benchtime 10x -count 3 ./internal/handoff/handoffbench
bench-serve-crowding:
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/sluice ./cmd/sluice
	./bin/sluice bench serve --workload crowding --colocated --prompt 256 --gen 16 --long-prompt 1024 --long-gen 8 --concurrency 2 --requests 64 --blocks 4 --repeats 2 $(BENCH_SERVE_FLAGS)
	./bin/sluice bench serve --workload crowding --prompt 256 --gen 16 --long-prompt 1024 --long-gen 8 --concurrency 2 --requests 64 --blocks 4 --repeats 2 $(BENCH_SERVE_FLAGS)
# bench-crowding-ab: the crowding workload (disaggregated) on two sluice
# builds interleaved, OLD=binary NEW=binary (ROUNDS, default 10; REQUESTS,
# BLOCKS, CROWDING_FLAGS), driven by this tree's build: medians of b's TTFT
# ratios, push and rest phases, a's tok/s per build, then b's TTFT ratios
# pooled over the rounds with 95% intervals and new/old, into bench-out/
# (docs/benchmarks.md). bench-crowding-aa BIN=binary: the same binary on
# both sides, so the new/old interval is the measurement's noise.
.PHONY: bench-crowding-ab bench-crowding-aa
bench-crowding-ab:
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/sluice ./cmd/sluice
	DRIVER=bin/sluice scripts/bench-crowding-ab.sh "$(OLD)" "$(NEW)"
bench-crowding-aa:
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/sluice ./cmd/sluice
	DRIVER=bin/sluice scripts/bench-crowding-ab.sh "$(BIN)" "$(BIN)"

# the prefix cache's multi-turn chat benchmark: sluice cache on / off and
# llama-server's prompt cache, interleaved; BENCH_CHAT_FLAGS="--rounds 3" etc.
BENCH_CHAT_FLAGS ?= --omp-passive
.PHONY: bench-chat
bench-chat:
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/sluice ./cmd/sluice
	./bin/sluice bench chat $$(test -x $(LLAMA_SELECT) && echo --llama-server $$($(LLAMA_SELECT) llama-server)) $(BENCH_CHAT_FLAGS)

# Targeted mutations of the isolation safeguards (scripts/mutate/mutations.txt):
# each one patched into a copy of the module, its package's tests run, the
# survivors listed (exit 1 if any). Not part of `make test`: tens of minutes
# on a 2-core machine. MUTATE_FLAGS="-only sched-" runs a subset.
MUTATE_FLAGS ?=
.PHONY: mutate
mutate:
	$(GO) run ./scripts/mutate $(MUTATE_FLAGS)

sim:
	SLUICE_SIM_SEEDS=$(SEEDS) $(GO) test -count=1 -timeout 0 -run 'TestSim' -v ./internal/sim/

spec:
	SLUICE_SPEC_FULL=1 $(GO) test -count=1 -timeout 20m -run 'TestSpin' -v ./spec/

soak:
	SLUICE_SOAK=1 $(GO) test -count=1 -timeout 0 -run 'Soak' -v ./...

# sluice audit and sluice preflight against a real llama-server (from
# ../shared/tools/llama.cpp) on loopback, then the official JS client; build
# tag interop, so `make test` never needs them. COUNT=10 runs them ten times.
COUNT ?= 1
.PHONY: test-interop
test-interop:
	SLUICE_REQUIRE_SHARED=1 $(GO) test -tags interop -count=$(COUNT) -timeout 30m -v -run '^TestInterop' ./cmd/sluice/
	$(GO) test -tags interop -count=$(COUNT) -timeout 10m -v -run '^TestInteropOpenAIJSClient$$' ./internal/router/node/

.PHONY: print-version
# The version the build targets stamp (for docker build --build-arg VERSION=...).
print-version:
	@echo $(VERSION)

.PHONY: chaos
# The chaos soak (docs/testing.md): 3 tenants against 2 routers, 2 prefill
# and 2 decode workers as processes, each in its own network namespace
# (needs root and /dev/net/tun), with random kill -9 and restarts,
# SIGSTOP/SIGCONT and packet faults (loss, delay, jitter, reordering,
# duplication, partitions) one at a time for CHAOS_DURATION; the report
# counts requests exact / migrated / failed cleanly / wrong and leaked
# pages, and the run fails on any wrong output or leaked page.
# CHAOS_SEED=n replays a schedule.
CHAOS_DURATION ?= 5m
CHAOS_SEED ?=
chaos:
	SLUICE_CHAOS=$(CHAOS_DURATION) SLUICE_CHAOS_SEED=$(CHAOS_SEED) $(GO) test -count=1 -timeout 90m -run '^TestChaos$$' -v ./cmd/sluice
