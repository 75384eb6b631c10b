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
phase 1's, when it has one, nor the encoder's). ``--plain`` runs the same job without it
and prints only wall and CPU time, for a sampling profiler that sees every thread and
compiled code too:

    py-spy record --native --threads -r 200 -f raw -o /tmp/job.txt -- \
        .venv/bin/python -m bench.profile_job --store ... --plain
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

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
    args = ap.parse_args(argv)

    from compactor.catalog import Catalog
    from compactor.objectstore import LocalStore
    from compactor.worker.compactor import Compactor

    with tempfile.TemporaryDirectory(prefix="profile-job-") as tmp:
        clone = Path(tmp) / "store"
        shutil.copytree(args.store, clone, copy_function=os.link)
        store = LocalStore(str(clone))
        snap = Catalog(store).snapshot()
        sections = sum(f.section_count for f in snap.files)
        now_ms = args.now_ms
        if now_ms is None:
            now_ms = max(f.created_ms for f in snap.files) + 3_600_000
        compactor = Compactor(store)
        if args.plain:
            wall, cpu = time.perf_counter(), time.process_time()
            compactor.run_planned(now_ms, full=True)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            print(f"{len(snap.files)} input files, {sections:,} input sections: "
                  f"{wall:.2f} s wall, {cpu:.2f} s CPU")  # fmt: skip
            return 0
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
        f"{len(snap.files)} input files, {sections:,} input sections, "
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


if __name__ == "__main__":
    raise SystemExit(main())
