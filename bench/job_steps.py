"""A job's CPU time step by step, with call counts: both phases on one thread.

    .venv/bin/python -m bench.job_steps --store bench/out/shape-bench-10kp/store --repeat 2

Runs ``compact --full`` on a hard-linked clone of ``--store`` (the store is left as it
was), ``--repeat`` times, with phase 1 on the job's thread ("inline"), and wraps each of
a fixed list of steps (``STEPS``) to add up the CPU time spent in it (``process_time``)
and how often it was called. Prints the last run's figures, heaviest first.

Figures are inclusive: a step's time holds the steps it calls (``take_upto`` holds
``add_run``, which holds ``Block.records``). The wrappers cost about a microsecond a call,
so a step called once per section reads a little heavy. This is the deterministic
counterpart of ``bench/spy_job.sh``: no sampling, every call counted, but only the steps
listed, and both phases in one process (as a job runs without phase 1's helper), or
with ``--worker-only`` the worker's process alone, phase 1 in its helper (the helper's
steps are not counted). It also prints the job's timeline around its groups' phase 2
(``_run_group``): with ``--worker-only``, time between groups is the worker waiting for
phase 1. Use it to see what a change saves, step by step; compare jobs' wall times with
``bench.ab``.
Not a test.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.profile_job import cloned, phase1_inline

STEPS: tuple[tuple[str, str], ...] = (
    ("compactor.worker.merge", "SectionMerge.pending_shared"),
    ("compactor.worker.merge", "SectionMerge.take_upto"),
    ("compactor.worker.merge", "SectionMerge._next_unit"),
    ("compactor.worker.merge", "_Table"),
    ("compactor.worker.gather", "GroupRows.add_run"),
    ("compactor.worker.gather", "GroupRows.batch"),
    ("compactor.fileformat.block", "Block.records"),
    ("compactor.fileformat.reader", "StreamReader._block"),
    ("compactor.worker.pipeline", "Phase1Walk._partition"),
    ("compactor.worker.pipeline", "group_window"),
    ("compactor.worker.group", "salted_keys"),
    ("compactor.worker.kernel", "KeyBuffer.insert"),
    ("compactor.worker.runner", "group_survivors"),
    ("compactor.fileformat.writer", "FileWriter.write_rows"),
    ("compactor.fileformat.writer", "FileWriter._write_block"),
    ("compactor.fileformat.ipc", "BatchEncoder.encode"),
    ("compactor.worker.runner", "_finish_outputs"),
    ("compactor.worker.runner", "_run_group"),
)
"""(module, name): a function or class of the module, or a method as Class.method."""


class Steps:
    """Wraps the ``STEPS`` in place for as long as it is entered, adding up each one's CPU
    time and calls."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: Counter[str] = Counter()
        self.groups: list[tuple[float, float]] = []
        """Each group's phase 2 (``_run_group``): when it started and ended (wall)."""
        self._undo: list[tuple[Any, str, Any]] = []

    def __enter__(self) -> Steps:
        for module_name, name in STEPS:
            owner: Any = importlib.import_module(module_name)
            *path, attr = name.split(".")
            for part in path:
                owner = getattr(owner, part)
            original = getattr(owner, attr)
            self._undo.append((owner, attr, original))
            setattr(owner, attr, self._timed(name, original))
        return self

    def __exit__(self, *exc: object) -> None:
        for owner, attr, original in reversed(self._undo):
            setattr(owner, attr, original)
        self._undo.clear()

    def _timed(self, name: str, f: Callable[..., Any]) -> Callable[..., Any]:
        seconds, calls = self.seconds, self.calls

        groups = self.groups if name == "_run_group" else None

        @functools.wraps(f)
        def timed(*args: Any, **kwargs: Any) -> Any:
            start, wall = time.process_time(), time.perf_counter()
            try:
                return f(*args, **kwargs)
            finally:
                seconds[name] += time.process_time() - start
                calls[name] += 1
                if groups is not None:
                    groups.append((wall, time.perf_counter()))

        return timed


def one_job(
    store: Path, now_ms: int | None, inline: bool = True
) -> tuple[float, tuple[float, float], Steps]:
    """One job on a fresh clone of ``store``, phase 1 inline or (``inline`` false) as the
    worker chooses: its CPU time in this process, when it started and ended (wall), and
    the steps this process ran."""
    with (
        phase1_inline(inline),
        cloned(store, now_ms) as (compactor, _, _, at_ms),
        Steps() as steps,
    ):
        start, wall = time.process_time(), time.perf_counter()
        compactor.run_planned(at_ms, full=True)
        return time.process_time() - start, (wall, time.perf_counter()), steps


def timeline(job: tuple[float, float], groups: list[tuple[float, float]]) -> str:
    """Where a job's wall time went around its groups' phase 2: when the first began, how
    long they ran, how long the job's thread waited between them (for phase 1's next
    group), and what came after the last (the outputs' finish and the commit)."""
    if not groups:
        return f"wall: {job[1] - job[0]:.3f} s, no group of small partitions"
    busy = sum(end - start for start, end in groups)
    between = groups[-1][1] - groups[0][0] - busy
    return (
        f"wall: {job[1] - job[0]:.3f} s; {len(groups)} groups' phase 2 from "
        f"{groups[0][0] - job[0]:.3f} s, {busy:.3f} s running, {between:.3f} s between "
        f"them, {job[1] - groups[-1][1]:.3f} s after the last"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.job_steps", description=__doc__)
    ap.add_argument("--store", type=Path, required=True, help="a local store (not changed)")
    ap.add_argument("--now-ms", type=int, default=None, help="default: the store's newest + 1 h")
    ap.add_argument("--repeat", type=int, default=2, help="jobs in turn; the last is printed")
    ap.add_argument(
        "--worker-only",
        action="store_true",
        help="phase 1 in its helper process, as a job runs it: the worker's steps only",
    )
    args = ap.parse_args(argv)
    if args.repeat < 1:
        ap.error("--repeat must be at least 1")
    for _ in range(args.repeat):
        total, wall, steps = one_job(args.store, args.now_ms, inline=not args.worker_only)
    where = "the worker's process, phase 1 in its helper" if args.worker_only else "phase 1 inline"
    print(f"job: {total:.3f} s CPU, {where}")
    print(timeline(wall, steps.groups))
    print()
    print("| step | CPU s (inclusive) | calls |")
    print("|---|---:|---:|")
    for name, seconds in sorted(steps.seconds.items(), key=lambda item: -item[1]):
        print(f"| {name} | {seconds:.3f} | {steps.calls[name]:,} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
