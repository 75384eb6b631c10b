#!/bin/bash
# Runs every benchmark whose figures the README quotes, at the checkout this file is in,
# and keeps each command's output:
#
#   bench/readme.sh            # about 20 minutes on two cores; needs bench/requirements.txt
#
# Writes bench/out/readme-<commit>-<time>/NN-<name>.log, one a command, each starting
# with the command line. Refuses a tree with uncommitted changes: the README names the
# commit its figures were measured at, so the figures must be that commit's. Run it on a
# quiet machine (no tests at the same time): every figure is a time or a memory peak.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -n "$(git status --porcelain --untracked-files=no)" ]; then
    echo "bench/readme.sh: the tree has uncommitted changes; commit first" >&2
    exit 1
fi
P=${PYTHON:-.venv/bin/python}
commit=$(git rev-parse --short HEAD)
out="bench/out/readme-$commit-$(date -u +%Y%m%d-%H%M%S)"
mkdir -p "$out"
n=0
step() {
    local name=$1
    shift
    n=$((n + 1))
    local log
    log=$(printf '%s/%02d-%s.log' "$out" "$n" "$name")
    echo "== $* (-> $log)" >&2
    { echo "\$ $*"; "$@"; } >"$log" 2>&1 || {
        echo "bench/readme.sh: '$*' failed; see $log" >&2
        exit 1
    }
}
step catalog "$P" -m bench.catalog_bench
step shapes-lz4 "$P" -m bench.shapes --repeat 3
step shapes-zstd "$P" -m bench.shapes --compression zstd --repeat 3
step shapes-duckdb-zstd "$P" -m bench.shapes --duckdb-compression zstd --repeat 3
step codec-calls "$P" -m bench.codec_calls
for shape in ingest-64p bench-100p bench-10kp ingest-10kp; do
    step "floor-$shape" "$P" -m bench.floor --shape "$shape" --repeat 3
done
step profile-job "$P" -m bench.profile_job --store bench/out/shape-bench-100p/store --plain --repeat 4
step command-timeline "$P" -m bench.command_timeline --store bench/out/shape-bench-100p/store
for shape in ingest-64p bench-100p bench-10kp ingest-10kp; do
    step "bound-$shape" "$P" -m bench.profile_job --store "bench/out/shape-$shape/store" --plain \
        --repeat 5
    step "phase2-read-$shape" "$P" -m bench.phase2_read --shape "$shape" --repeat 5
    step "decode-probe-$shape" "$P" -m bench.decode_probe --shape "$shape" --repeat 9
done
step kernel "$P" -m bench.kernel_bench --keys 4000000 --repeat 3
step run-100b "$P" -m bench.run --records 10000000 --value-bytes 100 --only duckdb,compactor,copy
step run-1024b "$P" -m bench.run --records 10000000 --value-bytes 1024 \
    --only duckdb,compactor,copy --delete-data
step spark "$P" -m bench.spark_bench --records 10000000 --value-bytes 100
echo "$out"
