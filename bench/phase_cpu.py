"""Both processes of warm jobs, in alternation between checkouts.

    .venv/bin/python -m bench.phase_cpu --store bench/out/shape-ingest-10kp/store \\
        /tmp/old . --runs 6

Each run is ``python -m bench.profile_job --store STORE --plain --repeat 4`` in one
checkout (its own ``bench.profile_job`` and compactor, through ``PYTHONPATH``), the
checkouts taking turns, the first one alternating. A run's first job starts phase 1's
helper; the other three reuse it, and only those warm jobs count. For each checkout it
prints the medians of the jobs' wall time, the job's process's CPU, the helper's CPU and
the time the job's thread waited on phase 1's feed, and, pairing the checkouts' jobs in
order, in how many the first checkout's figure is lower. ``bench.ab`` times whole
commands; this shows which process a change moved. Not a test: the timings depend on the
machine.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
from pathlib import Path

from .ab import in_turn, run_in
from .bytecode import compile_checkout

JOB_LINE = re.compile(
    r"([\d.]+) s wall, ([\d.]+) s CPU, ([\d.]+) s waiting on phase 1's feed, "
    r"helper ([\d.]+) s CPU"
)
FIGURES = ("wall", "the job's process's CPU", "waiting on phase 1", "the helper's CPU")
JOBS = 4


def warm_jobs(checkout: Path, store: Path) -> list[tuple[float, ...]]:
    """The figures of a run's warm jobs in ``checkout``."""
    cmd = [sys.executable, "-m", "bench.profile_job", "--store", str(store), "--plain"]
    done = run_in(checkout, [*cmd, "--repeat", str(JOBS)])
    jobs = [tuple(map(float, m.groups())) for m in JOB_LINE.finditer(done.stdout)]
    if done.returncode != 0 or len(jobs) != JOBS:
        raise SystemExit(f"bench.phase_cpu: {checkout}: {done.stderr.strip()[-500:]}")
    return jobs[1:]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m bench.phase_cpu",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("checkouts", type=Path, nargs=2, help="this one and another, built")
    ap.add_argument("--store", type=Path, required=True, help="a bench.workload store")
    ap.add_argument("--runs", type=int, default=6, help="runs of each checkout, in turn")
    args = ap.parse_args(argv)
    checkouts = [c.resolve() for c in args.checkouts]
    store = args.store.resolve()
    for checkout in checkouts:
        compile_checkout(checkout)
    jobs: dict[Path, list[tuple[float, ...]]] = {c: [] for c in checkouts}
    for checkout in in_turn(checkouts, args.runs):
        jobs[checkout] += warm_jobs(checkout, store)
    first, second = checkouts
    print(f"{len(jobs[first])} warm jobs each, {store}")
    print(f"| figure | {first} | {second} | the first lower in |")
    print("|---|---:|---:|---:|")
    for k, name in enumerate(FIGURES):
        a = [job[k] for job in jobs[first]]
        b = [job[k] for job in jobs[second]]
        lower = sum(x < y for x, y in zip(a, b, strict=True))
        print(
            f"| {name} | {statistics.median(a):.3f} s | {statistics.median(b):.3f} s "
            f"| {lower} of {len(a)} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
