#!/usr/bin/env bash
# Runs every Fuzz* target in the module for FUZZTIME each (default 60s; an
# execution count such as 3000x also works: the default suite uses a count
# because Go 1.26's fuzz coordinator can end a timed run with a spurious
# "context deadline exceeded", golang/go#75804).
set -euo pipefail
cd "$(dirname "$0")/.."
FUZZTIME="${FUZZTIME:-60s}"
for pkg in $(go list ./...); do
  dir=$(go list -f '{{.Dir}}' "$pkg")
  targets=$(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/^func //' | sort -u || true)
  for t in $targets; do
    echo "-- fuzz $pkg $t ($FUZZTIME)"
    go test -run='^$' -fuzz="^${t}\$" -fuzztime="$FUZZTIME" "$pkg"
  done
done
