"""Where a job's time goes: ``compact --full`` under cProfile, summed by layer.

    .venv/bin/python -m bench.profile_job --store bench/out/shape-bench-10kp/store
    .venv/bin/python -m bench.profile_job --store ... --top 30 --save /tmp/job.prof

Runs the full compaction on a hard-linked clone of ``--store`` (the store itself is left
as it was) in this process under cProfile, then prints:

- each layer's own time (``tottime`` summed over the functions of its files): the
  fileformat reader, writer and checks, the worker, the key kernel, pyarrow, the object
  store, the rest; with the time per input section, which is the figure that matters for
  small sections;
- the ``--top`` functions by own time.

cProfile inflates Python calls against compiled ones, so compare profiles with each other,
never with wall times from ``bench.run``. It also sees only the job's own thread (not
phase 1's, when it has one, nor the encoder's); ``--inline`` runs phase 1 on the job's
thread, so that one profile holds both phases' calls. ``--plain`` runs the same job without it
and prints only wall and CPU time, the CPU time of phase 1's helper process and the time
the job's thread waited on phase 1 (which process bounds the job), ``--repeat`` times,
for a sampling profiler that sees every thread and compiled code too (``bench/spy_job.sh``
samples both processes, ``bench.spy_budget`` sums them by step):

    py-spy record --native --threads -r 200 -f raw -o /tmp/job.txt -- \
        .venv/bin/python -m bench.profile_job --store ... --plain
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import resource
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

_READER = ("reader.py", "framing.py", "section.py", "footer.py", "second_read.py")
LAYERS = (
    ("fileformat: reader", tuple(f"fileformat/{f}" for f in _READER)),
    ("fileformat: batch decode and checks", ("fileformat/ipc.py", "fileformat/batches.py",
                                             "fileformat/bitmap.py")),
    ("fileformat: writer", ("fileformat/writer.py", "fileformat/offset_index.py")),
    ("worker", ("worker/",)),
    ("key kernel (C)", ("_keybuffer",)),
    ("pyarrow", ("pyarrow",)),
    ("object store", ("objectstore/",)),
)  # fmt: skip


def layer_of(filename: str, funcname: str) -> str:
    where = filename if filename != "~" else funcname
    for name, marks in LAYERS:
        if any(m in where for m in marks):
            return name
    return "other (interpreter, catalog, builtins)"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.profile_job", description=__doc__)
    ap.add_argument("--store", type=Path, required=True, help="a local store (not changed)")
    ap.add_argument("--now-ms", type=int, default=None, help="default: the store's newest + 1 h")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--save", type=Path, default=None, help="also write the raw profile here")
    ap.add_argument("--plain", action="store_true", help="no cProfile: wall and CPU time only")
    ap.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="with --plain: jobs in turn, each on a fresh clone (phase 1's helper is "
        "started by the first, then kept, as a queue worker keeps it)",
    )
    ap.add_argument(
        "--inline",
        action="store_true",
        help="phase 1 on the job's thread, so that the profile sees both phases "
        "(as bench.job_steps runs them)",
    )
    args = ap.parse_args(argv)
    if args.plain:
        for _ in range(args.repeat):
            _plain(args.store, args.now_ms)
        return 0

    with (
        phase1_inline(args.inline),
        cloned(args.store, args.now_ms) as (compactor, files, sections, now_ms),
    ):
        profile = cProfile.Profile()
        reports = profile.runcall(compactor.run_planned, now_ms, full=True)
    if args.save is not None:
        profile.dump_stats(str(args.save))
    stats = pstats.Stats(profile)
    raw = stats.stats  # type: ignore[attr-defined]
    total = sum(v[2] for v in raw.values())
    by_layer: dict[str, float] = defaultdict(float)
    for (filename, _, funcname), (_, _, tottime, _, _) in raw.items():
        by_layer[layer_of(filename, funcname)] += tottime
    job = reports[0]
    print(
        f"{files} input files, {sections:,} input sections, "
        f"{job.stats.records_in:,} records in, {job.stats.records_out:,} out, "
        f"{total:.1f} s profiled ({total / max(1, sections) * 1e6:,.0f} µs per input section)"
    )
    print()
    print("| layer | own s | share | µs per input section |")
    print("|---|---:|---:|---:|")
    for name, secs in sorted(by_layer.items(), key=lambda kv: -kv[1]):
        print(f"| {name} | {secs:.2f} | {secs / total:.0%} | {secs / sections * 1e6:,.1f} |")
    print()
    sys.stdout.flush()
    stats.sort_stats("tottime").print_stats(args.top)
    print(json.dumps({"sections": sections, "profiled_s": round(total, 2)}))
    return 0


@contextmanager
def phase1_inline(inline: bool = True) -> Iterator[None]:
    """While inside, if ``inline``, every job runs phase 1 on the job's thread (the
    worker's choice, ``runner.phase1_mode``, replaced), as a job without a helper does."""
    from compactor.worker import runner

    chosen = getattr(runner, "phase1_mode")  # noqa: B009 (patched by name: a private import)
    if inline:
        setattr(runner, "phase1_mode", lambda *args, **kwargs: "inline")  # noqa: B010
    try:
        yield
    finally:
        setattr(runner, "phase1_mode", chosen)  # noqa: B010


@contextmanager
def cloned(source: Path, now_ms: int | None) -> Iterator[tuple[Any, int, int, int]]:
    """A compactor on a hard-linked clone of the store ``source`` (removed on leaving),
    with the store's input files and sections and the clock to compact at (``now_ms``,
    or the store's newest file's creation + 1 h)."""
    from compactor.catalog import Catalog
    from compactor.objectstore import LocalStore
    from compactor.worker.compactor import Compactor

    with tempfile.TemporaryDirectory(prefix="profile-job-") as tmp:
        clone = Path(tmp) / "store"
        shutil.copytree(source, clone, copy_function=os.link)
        store = LocalStore(str(clone))
        snap = Catalog(store).snapshot()
        sections = sum(f.section_count for f in snap.files)
        if now_ms is None:
            now_ms = max(f.created_ms for f in snap.files) + 3_600_000
        yield Compactor(store), len(snap.files), sections, now_ms


def _plain(source: Path, now_ms: int | None) -> None:
    """One job on a fresh clone of ``source``, no profiler: its wall and CPU time (this
    process's, its threads' too), the CPU time of phase 1's helper process during the
    job (one this run started counts its start-up too; ``--repeat`` reuses it), and how
    long the job's thread waited on phase 1's feed (where phase 1 runs on the job's
    thread, the time phase 1 itself took); then the CPU time of the job's thread alone
    (the rest of the process's is the writer's encoder thread and Arrow's), and the
    process's time in the kernel and its minor page faults. ``compactor.cli`` is imported
    first, as the command line imports it, so that the helper is forked as the command
    forks its own (``worker.helper_process``), not spawned to import everything first."""
    from compactor import cli  # noqa: F401 (before pyarrow: worker.memory.prefer_lean_pool)
    from compactor.worker import helper_pool

    from .command_timeline import feed_waits

    with cloned(source, now_ms) as (compactor, files, sections, at_ms), feed_waits() as waits:
        before = _cpu_of(helper_pool.idle_pids())
        usage = resource.getrusage(resource.RUSAGE_SELF)
        wall, cpu, own = time.perf_counter(), time.process_time(), time.thread_time()
        compactor.run_planned(at_ms, full=True)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        own = time.thread_time() - own
        after_usage = resource.getrusage(resource.RUSAGE_SELF)
        after = _cpu_of(helper_pool.idle_pids())
        helper = sum(s - before.get(pid, 0.0) for pid, s in after.items())
    print(f"{files} input files, {sections:,} input sections: "
          f"{wall:.2f} s wall, {cpu:.2f} s CPU, {waits['all']:.2f} s waiting on phase 1's feed, "
          f"helper {helper:.2f} s CPU; the job's thread {own:.2f} s CPU, the job's process "
          f"{after_usage.ru_stime - usage.ru_stime:.2f} s of it in the kernel, "
          f"{after_usage.ru_minflt - usage.ru_minflt:,} page faults", flush=True)  # fmt: skip


def _cpu_of(pids: list[int]) -> dict[int, float]:
    """Each live process's CPU time so far (user + system, from ``/proc``)."""
    tick = os.sysconf("SC_CLK_TCK")
    seen = {}
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        seen[pid] = (int(fields[11]) + int(fields[12])) / tick  # utime, stime
    return seen


if __name__ == "__main__":
    raise SystemExit(main())
