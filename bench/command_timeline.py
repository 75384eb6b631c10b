"""Where a one-shot ``compact --full`` spends the time that is not its job.

    .venv/bin/python -m bench.command_timeline --store bench/out/shape-ingest-10kp/store

The table of ``bench.shapes`` times the whole command, from its start to its exit; the
job's own ``duration_s`` leaves out the interpreter's start, the imports, the command
line, the catalog and the plan, the garbage collection, the report and the exit. This
runs the same command (``cli.launch``'s two steps: phase 1's helper started, then the
command line) ``--repeat`` times, each on a fresh hard-linked clone of the store with its
files in the page cache, in a child that marks when each step starts on the system-wide
monotonic clock, and prints the median of each step's length, then how long phase 2
waited for phase 1's helper (its first window, and in all). The parent's clock gives
what the child cannot see of itself: the interpreter's start before its first line, and
the teardown after its exit handlers. Not a test: the timings depend on the machine.
"""

from __future__ import annotations

import argparse
import atexit
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
STEPS = (
    ("interpreter start", "spawned", "started"),
    ("helper started (cli.launch: its modules imported, then forked)", "started", "helper"),
    ("imports (command line, its command)", "helper", "imported"),
    ("arguments, store, key buffer", "imported", "planning"),
    ("catalog and plan", "planning", "job"),
    ("job: until phase 2's first partition", "job", "phase 2"),
    ("job: phase 2, outputs finished", "phase 2", "written"),
    ("job: commit", "written", "committed"),
    ("garbage, report", "committed", "returned"),
    ("exit handlers (helper killed)", "returned", "handled"),
    ("teardown and exit", "handled", "exited"),
)
"""Each step's name and the marks it runs between."""
FEED_FIRST, FEED_ALL = "feed, first", "feed, all"
"""The marks that are lengths, not times: phase 2's waits for phase 1's helper."""


def child(argv: list[str]) -> int:
    """The command, marked: what ``cli.launch.main`` runs, with a mark at each step."""
    marks: dict[str, float] = {"started": time.monotonic()}
    atexit.register(lambda: _report(marks))  # registered first, so it runs last
    from compactor.cli.commands import command_of
    from compactor.worker.helper_pool import start_for_command

    start_for_command(command_of(argv))
    marks["helper"] = time.monotonic()
    import compactor.worker.compactor as compactor_module
    import compactor.worker.runner as runner
    from compactor.cli.launch import exit_at_once
    from compactor.cli.main import main

    marks["imported"] = time.monotonic()
    _mark_before(marks, "planning", compactor_module.Compactor, "run_planned")
    _mark_before(marks, "job", runner, "write_outputs", after="written")
    _mark_before(marks, "phase 2", runner, "_run_group")  # a group of small partitions
    _mark_before(marks, "phase 2", runner, "_run_partition")  # or a partition on its own
    _mark_before(marks, "commit", runner, "_commit", after="committed")
    with feed_waits() as waits:
        code = main(argv)
    marks[FEED_ALL], marks[FEED_FIRST] = waits["all"], waits.get("first", 0.0)
    marks["returned"] = time.monotonic()
    return exit_at_once(code)


def _mark_before(
    marks: dict[str, float], name: str, owner: Any, attr: str, after: str | None = None
) -> None:
    """Marks ``name`` when ``owner.attr`` is first called (unless already marked), and
    ``after`` when it returns."""
    original = getattr(owner, attr)

    def marked(*args: Any, **kwargs: Any) -> Any:
        marks.setdefault(name, time.monotonic())
        try:
            return original(*args, **kwargs)
        finally:
            if after is not None:
                marks[after] = time.monotonic()

    setattr(owner, attr, marked)


@contextmanager
def feed_waits() -> Iterator[dict[str, float]]:
    """While inside, how long phase 2 waits for each item of phase 1's feed (the ``_get``
    of every feed: a helper's, a thread's, or phase 1 run inline, whose "wait" is phase 1
    itself), in seconds: ``"all"``, and ``"first"``, those until the first window's or
    group's keep-set arrived (a helper's start on the job). ``bench.profile_job`` uses
    it too."""
    from compactor.worker import phase1_process, pipeline
    from compactor.worker.group import Group
    from compactor.worker.partition import Window

    waits = {"all": 0.0}

    def timed(get: Callable[[Any], Any]) -> Callable[[Any], Any]:
        def wrapper(self: Any) -> Any:
            start = time.perf_counter()
            try:
                item = get(self)
            finally:
                waits["all"] += time.perf_counter() - start
            if isinstance(item, Window | Group):
                waits.setdefault("first", waits["all"])
            return item

        return wrapper

    feeds = (pipeline.Phase1Inline, pipeline.Phase1Thread, phase1_process.Phase1Process)
    originals = [feed._get for feed in feeds]
    for feed, get in zip(feeds, originals, strict=True):
        setattr(feed, "_get", timed(get))  # noqa: B010 (each feed class, by name)
    try:
        yield waits
    finally:
        for feed, get in zip(feeds, originals, strict=True):
            setattr(feed, "_get", get)  # noqa: B010


def _report(marks: dict[str, float]) -> None:
    marks["handled"] = time.monotonic()
    print("TIMELINE " + json.dumps(marks), file=sys.stderr, flush=True)


def run_once(store: Path, now_ms: int) -> dict[str, float]:
    """One marked command on a fresh clone of ``store``: each step's length, in seconds."""
    from .run import clone_store  # not in the child, which must import as the command does

    with tempfile.TemporaryDirectory(prefix="bench-timeline-", dir=store.parent) as tmp:
        clone = Path(tmp) / "store"
        clone_store(store, clone)
        cmd = [sys.executable, "-m", "bench.command_timeline", "--child", "--"]
        cmd += ["--store", str(clone), "--now-ms", str(now_ms), "compact", "--full", "--json"]
        spawned = time.monotonic()
        done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
        exited = time.monotonic()
    if done.returncode != 0:
        raise SystemExit(f"bench.command_timeline: the command failed: {done.stderr.strip()}")
    line = next(x for x in done.stderr.splitlines() if x.startswith("TIMELINE "))
    marks = {**json.loads(line.removeprefix("TIMELINE ")), "spawned": spawned, "exited": exited}
    steps = {name: marks[end] - marks[start] for name, start, end in STEPS}
    return steps | {name: marks.get(name, 0.0) for name in (FEED_FIRST, FEED_ALL)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", type=Path, help="a workload's store (bench.workload)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(args.rest[1:] if args.rest[:1] == ["--"] else args.rest)
    if args.store is None:
        ap.error("--store is required")
    import statistics  # not in the child, which must import as the command does

    from .bytecode import compile_checkout
    from .workload import MANIFEST, Params

    params = Params(**json.loads((args.store.parent / MANIFEST).read_text())["params"])
    compile_checkout(ROOT)  # timed as an installed package runs (bench.bytecode)
    runs = [run_once(args.store, params.compaction_now_ms) for _ in range(args.repeat)]
    total = [sum(r[name] for name, _, _ in STEPS) for r in runs]
    print(f"`compact --full` of {args.store}, {args.repeat} runs, medians\n")
    print("| step | ms | range |\n|---|---:|---:|")
    for name, _, _ in STEPS:
        values = [r[name] * 1e3 for r in runs]
        low, high = min(values), max(values)
        print(f"| {name} | {statistics.median(values):.0f} | {low:.0f}-{high:.0f} |")
    print(f"| **the command** | **{statistics.median(total) * 1e3:.0f}** | "
          f"{min(total) * 1e3:.0f}-{max(total) * 1e3:.0f} |")  # fmt: skip
    waits = (
        (FEED_FIRST, "until its first window or group (the helper's start on the job)"),
        (FEED_ALL, "in all (phase 1 itself where it had no helper)"),
    )
    print("\nOf phase 2, waiting for phase 1's feed from its helper:\n")
    print("| wait | ms | range |\n|---|---:|---:|")
    for name, label in waits:
        values = [r[name] * 1e3 for r in runs]
        print(
            f"| {label} | {statistics.median(values):.0f} | {min(values):.0f}-{max(values):.0f} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
