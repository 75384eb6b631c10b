"""A job's CPU by step, over both of its processes: the budget a plan for speed starts from.

    bench/spy_job.sh <py-spy> <store> /tmp/job          # /tmp/job.worker, /tmp/job.helper
    .venv/bin/python -m bench.profile_job --store <store> --plain --repeat 4
    .venv/bin/python -m bench.spy_budget /tmp/job --records N --worker-cpu S --helper-cpu S

Each sample of a process's main thread goes to one step: the innermost step on its stack
(a step's own share leaves out the steps it calls), or "other". Samples that wait (on
the other process's pipe, or for the worker's leave to go on) and samples that import
modules (spy_job.sh starts both processes afresh) or make and remove ``profile_job``'s
clone of the store are left out. A step's CPU is its
share of its process's other samples times that process's CPU time in a job run without
the profiler (``--worker-cpu`` and ``--helper-cpu``: ``profile_job --plain``'s figures
of a warm job), given per input record. py-spy samples wall time (a thread waiting for
the GIL counts as busy in the call that waits), and ``--native`` overstates system
calls, so read the figures as a budget, good to a few percent of a job, not as a
measurement of any one call. Not a test.
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

Steps = tuple[tuple[str, tuple[str, ...]], ...]
WAITING = "(waiting)"
IMPORTS = "(imports)"
CLONE = "(the benchmark's clone)"
LEFT_OUT = (WAITING, IMPORTS, CLONE)

WORKER_STEPS: Steps = (
    ("phase 2 decode (lz4, Arrow IPC)", ("read_compressed", "read_record_batch")),
    ("input checks (batch, block, stats)", ("decode_batch", "check_block_batch")),
    ("reading, CRC, section tables", ("StreamReader.units", "_Input.read")),
    ("merge and gather (a group's runs)", ("SectionMerge.take_upto", "GroupRows.batch")),
    ("survivors (masks, filter, partition order)", ("group_survivors",)),
    ("output encode (zstd)", ("BatchEncoder.encode",)),
    (
        "output sections (stats, bitmaps, tables)",
        ("FileWriter.write_rows", "FileWriter._write_block"),
    ),
    ("output finish (footer, index, upload)", ("_finish_outputs",)),
    ("phase 1's messages (unpickle)", ("Phase1Process._get",)),
    (WAITING, ("Connection._recv", "Connection._send")),
    (IMPORTS, ("_find_and_load",)),
    (CLONE, ("cloned",)),
)
"""The job's process: phase 2 and the writer."""

HELPER_STEPS: Steps = (
    ("phase 1 decode (offsets, keys)", ("read_compressed", "decode_fields")),
    ("input checks (batch, block)", ("check_block_batch",)),
    ("reading, CRC, section tables", ("StreamReader.units", "_Input.read")),
    ("merge (sections in order)", ("SectionMerge.take_upto",)),
    ("hash + insert (key buffer)", ("KeyBuffer.insert",)),
    ("group windows (salted keys, keep-sets)", ("group_window",)),
    ("messages to the worker (pickle, pipe)", ("_send",)),
    (WAITING, ("Connection._recv", "_HelperWalk._acquire")),
    (IMPORTS, ("_find_and_load",)),
)
"""Phase 1's helper process."""


def shares(raw: Path, steps: Steps) -> tuple[int, Counter[str]]:
    """The main thread's samples that count (not ``LEFT_OUT``), and how many went to each
    step (innermost first)."""
    counted: Counter[str] = Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames = stack.split(";")
        if not frames[0].rstrip().endswith("MainThread"):
            continue
        n = int(count)
        step = _step(frames, steps)
        if step not in LEFT_OUT:
            total += n
            counted[step] += n
    return total, counted


def _step(frames: list[str], steps: Steps) -> str:
    for frame in reversed(frames):
        name = frame.split(" (", 1)[0]
        for label, functions in steps:
            if name in functions:
                return label
    return "other"


def budget(raw: Path, steps: Steps, cpu_s: float, records: int) -> list[tuple[str, float, float]]:
    """(step, share of the process, ns of CPU per input record) for each step, in order."""
    total, counted = shares(raw, steps)
    rows = []
    for label in [label for label, _ in steps if label not in LEFT_OUT] + ["other"]:
        share = counted[label] / max(1, total)
        rows.append((label, share, share * cpu_s * 1e9 / records))
    return rows


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.spy_budget", description=__doc__)
    ap.add_argument("out", type=Path, help="spy_job.sh's <out> (its .worker and .helper)")
    ap.add_argument("--records", type=int, required=True, help="the job's input records")
    ap.add_argument("--worker-cpu", type=float, required=True, help="CPU s of the job's process")
    ap.add_argument("--helper-cpu", type=float, required=True, help="CPU s of its helper")
    args = ap.parse_args(argv)
    print("| process | step | share of its process | ns per input record |")
    print("|---|---|---:|---:|")
    for process, steps, cpu_s in (
        ("worker", WORKER_STEPS, args.worker_cpu),
        ("helper", HELPER_STEPS, args.helper_cpu),
    ):
        raw = args.out.with_name(f"{args.out.name}.{process}")
        rows = budget(raw, steps, cpu_s, args.records)
        for label, share, ns in rows:
            print(f"| {process} | {label} | {share:.0%} | {ns:,.0f} |")
        print(f"| {process} | **all** | 100% | **{cpu_s * 1e9 / args.records:,.0f}** |")


if __name__ == "__main__":
    main()
