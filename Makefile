# The README's two commands are `make serve` (or `go run ./cmd/sluice serve`)
# and `make test`. Everything else here is optional and longer.
GO ?= go
SEEDS ?= 100000
FUZZTIME ?= 60s

.PHONY: test serve build fuzz soak bench bench-go bench-model sim spec
test:
	./scripts/test.sh

serve:
	$(GO) run ./cmd/sluice serve

build:
	$(GO) build -o bin/sluice ./cmd/sluice

fuzz:
	FUZZTIME=$(FUZZTIME) ./scripts/fuzz.sh

# Speed figures are ratios measured within one run; pin single-thread runs
# with taskset -c 1 when comparing against llama.cpp's pinned numbers.
bench: bench-go bench-model

bench-go:
	$(GO) test -run='^$$' -bench=. -count=1 ./...

bench-model:
	$(GO) run ./cmd/sluice bench --synth

.PHONY: bench-cluster
# The router's CPU per request and its balance over 1, 2, 3 decode workers,
# every role its own process on loopback (README "Cluster").
bench-cluster:
	$(GO) build -o bin/sluice ./cmd/sluice
	./bin/sluice bench cluster $(BENCH_CLUSTER_FLAGS)

# sluice serve vs llama-server (when ../shared/tools/llama.cpp is there) on
# loopback, interleaved; BENCH_SERVE_FLAGS="--requests 64 --repeats 3" etc.
LLAMA_SELECT ?= ../shared/tools/llama.cpp/select
BENCH_SERVE_FLAGS ?=
.PHONY: bench-serve
bench-serve:
	$(GO) build -o bin/sluice ./cmd/sluice
	./bin/sluice bench serve $$(test -x $(LLAMA_SELECT) && echo --llama-server $$($(LLAMA_SELECT) llama-server)) $(BENCH_SERVE_FLAGS)

sim:
	SLUICE_SIM_SEEDS=$(SEEDS) $(GO) test -count=1 -timeout 0 -run 'TestSim' -v ./internal/sim/

spec:
	$(GO) test -count=1 -run 'TestSpin' -v ./spec/

soak:
	SLUICE_SOAK=1 $(GO) test -count=1 -timeout 0 -run 'Soak' -v ./...

# sluice audit and sluice preflight against a real llama-server (from
# ../shared/tools/llama.cpp) on loopback; COUNT=10 runs it ten times.
# `make test` runs the same tests inside go test ./... when ../shared exists.
COUNT ?= 1
.PHONY: test-interop
test-interop:
	$(GO) test -count=$(COUNT) -timeout 30m -v -run '^TestInterop' ./cmd/sluice/
