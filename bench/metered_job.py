"""The full job of a shape's store as a queue worker runs it, and as ``compact`` does.

    .venv/bin/python -m bench.metered_job --shape ingest-64p --pairs 5

A queue worker reads every job through a ``ReadThrottle`` without a rate: a meter for
``compactor_worker_read_bytes_total``. ``compact`` passes none. Each pair runs the full
job on a fresh hard-linked clone of the store (``bench.profile_job.cloned``), once
metered and once not, in alternating order, in this process, so phase 1's helper is
started once and reused. It prints each job's wall and CPU time (this process's; the
helper's is not in it), where phase 1 ran, and the medians. Not a test: the timings
depend on the machine.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from .profile_job import cloned


def one_job(store: Path, metered: bool) -> tuple[float, float, str]:
    from compactor.objectstore.throttle import ReadThrottle
    from compactor.planner.plan import full_plan

    with cloned(store, None) as (compactor, _, _, at_ms):
        (job,) = full_plan(compactor.catalog.snapshot(), at_ms, None, frozenset()).jobs
        meter = ReadThrottle(None) if metered else None
        wall, cpu = time.perf_counter(), time.process_time()
        report = compactor.run(job, at_ms, read_throttle=meter)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    assert report.committed
    return wall, cpu, report.phase1


def main(argv: list[str] | None = None) -> int:
    from compactor import cli  # noqa: F401 (before pyarrow, as the command line imports it)

    parser = argparse.ArgumentParser(prog="python -m bench.metered_job")
    parser.add_argument("--shape", required=True, help="bench/out/shape-<shape>/store")
    parser.add_argument("--pairs", type=int, default=5)
    args = parser.parse_args(argv)
    store = Path(f"bench/out/shape-{args.shape}/store")
    one_job(store, False)  # starts the helper; not counted
    runs: dict[bool, list[tuple[float, float, str]]] = {False: [], True: []}
    for pair in range(args.pairs):
        for metered in (pair % 2 == 0, pair % 2 != 0):
            wall, cpu, phase1 = one_job(store, metered)
            runs[metered].append((wall, cpu, phase1))
            way = "metered  " if metered else "unmetered"
            print(f"{way} {wall:.2f} s wall, {cpu:.2f} s CPU, phase 1 in {phase1}", flush=True)
    for metered, done in runs.items():
        way = "metered  " if metered else "unmetered"
        wall = statistics.median(w for w, _, _ in done)
        cpu = statistics.median(c for _, c, _ in done)
        print(f"{args.shape} {way} median of {len(done)}: {wall:.2f} s wall, {cpu:.2f} s CPU")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
