#!/bin/sh
# make bench-crowding-ab OLD=bin1 NEW=bin2: issue 28's crowding workload
# (disaggregated; tenant b's TTFT alone and while tenant a floods) on two
# sluice builds interleaved, ROUNDS rounds (default 10) with the order
# alternating, so the machine's load falls on both alike. Each round is one
# `sluice bench serve --workload crowding --repeats 1` per build, driven by
# one binary, DRIVER (default NEW; `make bench-crowding-ab` builds this
# tree's), with --sluice OLD or NEW as the server; REQUESTS (b's requests
# per block) and BLOCKS (alone/flooded block pairs on the run's server; 0:
# a fresh server per phase) set the run's size. Per build it prints the
# medians over the rounds of b's TTFT p50 and p99 flooded / alone, the
# push to the commit and the rest of the handoff (b's mean ms per request,
# alone and flooded), a's tok/s and how b's prompts started while a floods
# (nested at a pause point of a's step, or at a step boundary), then every
# round's figures, then `sluice bench crowding-ci` over the runs' JSON
# reports: per build b's TTFT ratios pooled over every round with 95%
# intervals and the verdict against the 1.10x bound, and new/old with its
# interval. OLD=NEW (the same binary) is an A/A run: the new/old interval
# is the measurement's noise. CROWDING_FLAGS adds flags to every run (e.g.
# --colocated, "--sluice-flags=--handoff-after-prefill"). The report, with
# the command, CPU, dates and load averages, goes to
# $BENCH_OUT/crowding-ab-<date>.txt, the runs' JSON to the directory of the
# same name.
set -eu
if [ $# -ne 2 ] || [ ! -x "$1" ] || [ ! -x "$2" ]; then
	echo "usage: $0 OLD-SLUICE-BINARY NEW-SLUICE-BINARY (ROUNDS, CROWDING_FLAGS, BENCH_OUT in the environment)" >&2
	exit 2
fi
OLD=$1
NEW=$2
DRIVER=${DRIVER:-$NEW}
if [ ! -x "$DRIVER" ]; then
	echo "$0: DRIVER $DRIVER is not an executable sluice binary" >&2
	exit 2
fi
# The servers may be any build; the driver must know --blocks, --json-out
# and crowding-ci (`make bench-crowding-ab` builds this tree's as DRIVER).
if ! "$DRIVER" bench serve --help 2>&1 | grep -q -- '-json-out'; then
	echo "$0: DRIVER $DRIVER is a sluice build without bench serve --json-out/--blocks; set DRIVER to a newer build (make bench-crowding-ab builds one)" >&2
	exit 2
fi
ROUNDS=${ROUNDS:-10}
REQUESTS=${REQUESTS:-64}
BLOCKS=${BLOCKS:-4}
FLAGS=${CROWDING_FLAGS:-}
OUT=${BENCH_OUT:-bench-out}
STAMP=crowding-ab-$(date -u +%Y%m%dT%H%M%SZ)
REPORT=$OUT/$STAMP.txt
JSONDIR=$OUT/$STAMP
mkdir -p "$OUT" "$JSONDIR"
ROWS=$(mktemp)
RUN=$(mktemp)
trap 'rm -f "$ROWS" "$RUN"' EXIT
CMD="bench serve --workload crowding --prompt 256 --gen 16 --long-prompt 1024 --long-gen 8 --concurrency 2 --requests $REQUESTS --blocks $BLOCKS --repeats 1 $FLAGS"
T0=$(date +%s)
{
	echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
	echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //') ($(nproc) CPUs)"
	echo "loadavg at start: $(cut -d' ' -f1-3 /proc/loadavg)"
	echo "old: $OLD"
	echo "new: $NEW"
	echo "driver: $DRIVER"
	echo "command: DRIVER $CMD --sluice BINARY --json-out $JSONDIR/{old,new}-ROUND.json, $ROUNDS rounds, the order alternating"
} | tee "$REPORT"
r=1
while [ "$r" -le "$ROUNDS" ]; do
	order="old new"
	if [ $((r % 2)) -eq 0 ]; then
		order="new old"
	fi
	for which in $order; do
		bin=$OLD
		if [ "$which" = new ]; then
			bin=$NEW
		fi
		# shellcheck disable=SC2086
		if ! "$DRIVER" $CMD --sluice "$bin" --json-out "$JSONDIR/$which-$(printf %03d "$r").json" >"$RUN" 2>&1; then
			echo "round $r $which: the run failed (its output follows)" >&2
			cat "$RUN" >&2
			exit 1
		fi
		ratios=$(sed -n 's/^flooded \/ alone: TTFT p50 \([0-9.]*\)x, p99 \([0-9.]*\)x.*/\1 \2/p' "$RUN")
		push=$(awk '/last chunk to the accepted commit/ {print $(NF-1), $NF}' "$RUN")
		rest=$(awk '/the rest \(/ {print $(NF-1), $NF}' "$RUN")
		atok=$(awk '$1 == "a" && $2 == "flooding" {print $NF}' "$RUN")
		# b's prompts while a floods by how their first chunk started
		# (prefill_wait/<how>, builds that export it): at a pause point of
		# a's step (nested, after_nested) or at a step boundary for another reason.
		starts=$(awk '$1 ~ /prefill_wait\// && NF >= 5 {n = $(NF-1); if ($1 ~ /\/(after_)?nested$/) nested += n; else if ($1 !~ /\/next_step$/) other += n; seen = 1} END {if (seen) print nested + 0, other + 0}' "$RUN")
		echo "$which $r ${ratios:-- -} ${push:-- -} ${rest:-- -} ${atok:--} $(cut -d' ' -f1 /proc/loadavg) ${starts:-- -}" >>"$ROWS"
	done
	r=$((r + 1))
done
med() {
	sort -n | awk '{a[NR] = $1} END {if (NR == 0) print "-"; else if (NR % 2) print a[(NR + 1) / 2]; else printf "%.2f\n", (a[NR / 2] + a[NR / 2 + 1]) / 2}'
}
{
	echo
	echo "medians over the rounds (b's phases: mean ms per request, alone / flooded):"
	printf '%-5s %10s %10s %14s %14s %10s %16s\n' build "p50 x" "p99 x" "push a/f" "rest a/f" "a tok/s" "nested/boundary"
	for which in old new; do
		col() { awk -v w="$which" -v c="$1" '$1 == w {print $c}' "$ROWS" | grep -v '^-$' | med; }
		printf '%-5s %10s %10s %14s %14s %10s %16s\n' "$which" "$(col 3)x" "$(col 4)x" "$(col 5) / $(col 6)" "$(col 7) / $(col 8)" "$(col 9)" "$(col 11) / $(col 12)"
	done
	echo "(nested/boundary: b's prompts while a floods whose first chunk ran at a pause point of a's step, and that waited for a step boundary for another reason than an idle batch; '-' for builds without prefill_wait/<how>)"
	echo
	echo "rounds: build round p50x p99x push_alone push_flooded rest_alone rest_flooded a_tok_s loadavg nested_flooded boundary_flooded"
	cat "$ROWS"
	echo "loadavg at end: $(cut -d' ' -f1-3 /proc/loadavg)"
	echo
	echo "pooled over the rounds (sluice bench crowding-ci):"
	"$DRIVER" bench crowding-ci --old "$JSONDIR/old-*.json" --new "$JSONDIR/new-*.json"
	echo "elapsed: $(($(date +%s) - T0)) s"
} | tee -a "$REPORT"
