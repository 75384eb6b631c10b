"""A group's message between phase 1's process and the job's: made, pickled, unpickled.

    .venv/bin/python -m bench.group_message /tmp/old . [--partitions 140] [--runs 5]

Phase 1 makes a ``Partition`` for each partition of a group of small partitions and
sends the ``Group`` through a pipe, pickled; the job's process unpickles it and frees it
after the group's phase 2 (ingest-10kp: 72 groups of about 140 partitions a job). Each
run is a fresh interpreter in one checkout (its compactor through ``PYTHONPATH``) that
times 3,000 rounds of each step with the cyclic collector off, the checkouts taking
turns; prints each checkout's medians in µs per group. Not a test: the timings depend on
the machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from .ab import in_turn, run_in
from .bytecode import compile_checkout

TIMED = """
import gc, json, pickle, sys, time
import pyarrow as pa
from compactor.worker.group import Group
from compactor.worker.partition import KeepSet
from compactor.worker.policy import Partition, PartitionPolicy
n, rounds = int(sys.argv[1]), 3000
gc.disable()
policy = PartitionPolicy(True, "offset", None, 1, None, None, 2, True)
keys = tuple((b"topic-a", 1000 + i) for i in range(n))
keep = KeepSet(pa.array(range(36 * n), pa.int64()))
t = time.perf_counter()
for _ in range(rounds):
    parts = tuple(Partition("topic-a", 1000 + i, policy, "compacted") for i in range(n))
made = time.perf_counter() - t
group = Group(parts, tuple(range(n)), keys, keep, 0.5)
t = time.perf_counter()
for _ in range(rounds):
    data = pickle.dumps(group, protocol=pickle.HIGHEST_PROTOCOL)
pickled = time.perf_counter() - t
t = time.perf_counter()
for _ in range(rounds):
    del_me = pickle.loads(data)
    del del_me
unpickled = time.perf_counter() - t
print(json.dumps([1e6 * x / rounds for x in (made, pickled, unpickled)]))
"""
STEPS = ("make the partitions", "pickle the group", "unpickle and free it")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m bench.group_message",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("checkouts", type=Path, nargs="+")
    ap.add_argument("--partitions", type=int, default=140, help="a group's partitions")
    ap.add_argument("--runs", type=int, default=5, help="interpreters per checkout, in turn")
    args = ap.parse_args(argv)
    checkouts = [c.resolve() for c in args.checkouts]
    for checkout in checkouts:
        compile_checkout(checkout)
    runs: dict[Path, list[list[float]]] = {c: [] for c in checkouts}
    for checkout in in_turn(checkouts, args.runs):
        done = run_in(checkout, [sys.executable, "-c", TIMED, str(args.partitions)])
        if done.returncode != 0:
            raise SystemExit(f"bench.group_message: {checkout}: {done.stderr.strip()}")
        runs[checkout].append(json.loads(done.stdout))
    print(f"a group of {args.partitions} partitions, µs, medians of {args.runs} runs")
    print("| checkout | " + " | ".join(STEPS) + " | together |")
    print("|---|" + "---:|" * (len(STEPS) + 1))
    for checkout, values in runs.items():
        medians = [statistics.median(v[k] for v in values) for k in range(len(STEPS))]
        cells = " | ".join(f"{m:.0f}" for m in medians)
        print(f"| {checkout} | {cells} | {sum(medians):.0f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
