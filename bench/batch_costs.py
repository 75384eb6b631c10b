"""What phase 2 pays per gathered batch in a real job: calls, wall and CPU time per call.

    .venv/bin/python -m bench.batch_costs --store bench/out/shape-ingest-64p/store --repeat 3

Runs ``compact --full`` on a hard-linked clone of ``--store`` (``bench.profile_job``'s
clone; the store is left as it was), ``--repeat`` times with phase 1's helper kept, and
times each call of the job thread's per-batch steps, wrapped where the worker looks them
up: a gathered batch's concatenation (``worker.gather``'s ``concat``, which also gathers
survivors for the writer and a group's rows), the verdict on its records
(``worker.partition.decide``), the survivors' filter (``worker.partition.filter_batch``)
and the keep-set lookup (``KeepSet.bits``, a group's too). For each: calls per job, wall
and the calling thread's CPU time per job, and per call. Phase 1 runs in its helper
process, where nothing is timed; where it cannot (one CPU, a store that cannot travel)
it runs in this process and its concatenations are counted too. A group's verdict
(``worker.group``'s own ``decide``) is not. The figures include the wrappers' own cost
(about a microsecond a call) and move with this machine's speed; compare runs made in
turn. Not a test.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.profile_job import cloned


@dataclass
class _Cost:
    calls: int = 0
    wall: float = 0.0
    cpu: float = 0.0


def _timed(f: Callable[..., Any], cost: _Cost) -> Callable[..., Any]:
    def timed(*args: Any, **kwargs: Any) -> Any:
        wall, cpu = time.perf_counter(), time.thread_time()
        try:
            return f(*args, **kwargs)
        finally:
            cost.calls += 1
            cost.wall += time.perf_counter() - wall
            cost.cpu += time.thread_time() - cpu

    return timed


@contextmanager
def timed_steps() -> Iterator[dict[str, _Cost]]:
    """While inside, each step is timed into the dict's entry of its name."""
    from compactor.worker import gather, partition

    steps: list[tuple[Any, str, str]] = [
        (gather, "concat", "concat (gathered and coalesced batches)"),
        (partition, "decide", "decide (a batch's verdict)"),
        (partition, "filter_batch", "filter_batch (survivors)"),
        (partition.KeepSet, "bits", "KeepSet.bits (keep-set lookup)"),
    ]
    costs = {label: _Cost() for _, _, label in steps}
    originals = [getattr(owner, name) for owner, name, _ in steps]
    try:
        for owner, name, label in steps:
            setattr(owner, name, _timed(getattr(owner, name), costs[label]))
        yield costs
    finally:
        for (owner, name, _), original in zip(steps, originals, strict=True):
            setattr(owner, name, original)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.batch_costs", description=__doc__)
    ap.add_argument("--store", type=Path, required=True, help="a local store (not changed)")
    ap.add_argument("--now-ms", type=int, default=None, help="default: the store's newest + 1 h")
    ap.add_argument("--repeat", type=int, default=3, help="jobs in turn, each on a fresh clone")
    args = ap.parse_args(argv)
    with timed_steps() as costs:
        for _ in range(args.repeat):
            with cloned(args.store, args.now_ms) as (compactor, files, sections, now_ms):
                compactor.run_planned(now_ms, full=True)
    n = args.repeat
    print(f"{files} input files, {sections:,} input sections, {n} job(s); per job:")
    print("| step | calls | wall s | CPU s | µs per call, wall | µs per call, CPU |")
    print("|---|---:|---:|---:|---:|---:|")
    for label, c in costs.items():
        per = max(1, c.calls)
        print(
            f"| {label} | {c.calls / n:,.0f} | {c.wall / n:.3f} | {c.cpu / n:.3f} | "
            f"{c.wall / per * 1e6:,.0f} | {c.cpu / per * 1e6:,.0f} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
