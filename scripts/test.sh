#!/usr/bin/env bash
# The whole test suite, exactly as CI runs it (.ci/run calls this via make).
# It installs what the suite needs when missing: Go modules (go command) and
# Debian's spin (model checker) via apt-get. It prints a summary of skipped
# tests and fails under CI (CI=true) if any test skipped.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v spin >/dev/null 2>&1; then
  echo "== installing spin (Debian package) for the protocol model checks"
  SUDO=""; [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1 && SUDO="sudo"
  # Wait for another apt/dpkg (unattended upgrades, a parallel job) to let
  # go of the lock instead of failing at once; show apt's own words when it
  # fails, so the reason is on the screen and not guessed.
  apt_log=$(mktemp)
  if ! { $SUDO apt-get -o DPkg::Lock::Timeout=300 update -qq &&
         $SUDO env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -qq spin; } >"$apt_log" 2>&1; then
    echo "WARNING: could not install spin; apt-get said:"
    sed 's/^/    /' "$apt_log"
    echo "WARNING: the spec tests will skip (and fail under CI)"
  fi
  rm -f "$apt_log"
fi
if ! command -v gcc >/dev/null 2>&1; then
  echo "WARNING: no C compiler: spin cannot compile its verifiers"
fi

echo "== gofmt"
bad=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$bad" ]; then echo "gofmt would change:"; echo "$bad"; exit 1; fi

echo "== go vet"
go vet ./...
# The kernels have Go fallbacks for other architectures (asm_other.go,
# mqa_other.go, ...); a kernel added on amd64 without its stub breaks them,
# and nothing else here builds for another GOARCH.
echo "== go vet (GOARCH=arm64)"
GOARCH=arm64 go vet ./...
# The interop tests (make test-interop) do not run here; vet keeps them compiling.
echo "== go vet (-tags interop)"
go vet -tags interop ./...

echo "== go test"
# -json through scripts/testsummary: package lines, failed tests' output,
# then "== skipped: N tests" with each skip and its reason. Under CI
# (CI=true) any skip fails the run (opt-in long runs aside).
go build -o "${TMPDIR:-/tmp}/sluice-testsummary" ./scripts/testsummary
go test -json -count=1 -timeout 20m ./... | "${TMPDIR:-/tmp}/sluice-testsummary"

echo "== go test -race (concurrency-heavy packages)"
race_pkgs=$(go list ./internal/kv/... ./internal/handoff/... ./internal/engine/... ./internal/incident/... ./internal/request/... ./internal/router/... 2>/dev/null || true)
if [ -n "$race_pkgs" ]; then
  go test -count=1 -race -short -timeout 20m $race_pkgs
fi

echo "== short fuzz runs (make fuzz runs them longer)"
FUZZTIME="${FUZZTIME:-3000x}" ./scripts/fuzz.sh
