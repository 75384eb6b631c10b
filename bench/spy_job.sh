#!/bin/bash
# Samples a job's two processes with py-spy: the worker (phase 2 and the writer) and its
# phase-1 helper (worker.phase1_process), which py-spy's --subprocesses does not follow.
#
#   bench/spy_job.sh <py-spy> <store> <out>   # writes <out>.worker and <out>.helper
#   .venv/bin/python -m bench.spy_summary <out>.worker
#   .venv/bin/python -m bench.spy_summary <out>.helper
#
# The store is not changed (bench.profile_job compacts a hard-linked clone). Not a test.
#
# SPY_MODE=--nonblocking samples without stopping the processes (no native frames; the
# default --native stops them at every sample, which stretches a 2 s job to 15 s), and
# REPEAT=N runs N jobs in turn (the helper kept between them). The job runs the checkout
# this file is in: to measure another, copy this file, bench/profile_job.py and
# bench/spy_summary.py into it and give PYTHON=<this checkout's .venv/bin/python>.
set -euo pipefail
spy=$1 store=$2 out=$3
mode=${SPY_MODE:---native} repeat=${REPEAT:-1}
cd "$(dirname "$0")/.."
PYTHONPATH="$PWD" "${PYTHON:-.venv/bin/python}" -m bench.profile_job --store "$store" \
    --plain --repeat "$repeat" &
job=$!
helper=""
for _ in $(seq 1 500); do
    helper=$(pgrep -P "$job" | head -1 || true)  # forked (the job's only child) or spawned
    [ -n "$helper" ] && break
    sleep 0.01
done
if [ -z "$helper" ]; then
    echo "spy_job: no phase-1 helper started (a store that cannot travel, or one CPU)" >&2
    wait "$job"
    exit 1
fi
"$spy" record "$mode" --threads -r 200 -f raw -o "$out.helper" --pid "$helper" >/dev/null 2>&1 &
"$spy" record "$mode" --threads -r 200 -f raw -o "$out.worker" --pid "$job" >/dev/null 2>&1
wait
