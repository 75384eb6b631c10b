"""Where a job's thread spends its time, from a py-spy raw profile of every thread.

    SPY_MODE=--nonblocking REPEAT=4 bash bench/spy_job.sh <py-spy> \\
        bench/out/shape-ingest-64p/store /tmp/job
    .venv/bin/python -m bench.spy_summary /tmp/job.worker
    .venv/bin/python -m bench.spy_summary /tmp/job.helper --top 40

Reads the samples of one process's main thread: the worker's (phase 2 and the writer's
framing, and phase 1 when it runs inline) or its phase-1 helper's (told apart by the
helper's module on the stack). Prints three tables of shares of that thread's samples:

- **steps**: each named step of a job (a sample counts for every step on its stack, so
  shares overlap where steps nest). A step whose function is on no sample's stack is
  flagged: the code has renamed or removed it, and ``WORKER_STEPS`` or ``HELPER_STEPS``
  needs the new name.
- **by function, own**: the function at the top of each stack (with ``--nonblocking``,
  the Python frame that called into native code: Arrow, the CRC, the key kernel).
- **by function, under**: every function on each stack, once per sample, but those on
  nearly every stack (``COMMON``: the process's entry down to the job's loop).

The last two need no list of names, so they stay true as the code changes. py-spy
samples wall time: a thread waiting for the GIL, for its encoder or for the other
process counts as busy in the call that waits. Not a test.
"""

from __future__ import annotations

import argparse
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

HELPER_ROOT = "_serve (compactor/worker/phase1_process.py"
"""On every stack of a phase-1 helper's main thread (its loop over jobs)."""
COMMON = 0.9
"""A function on more than this share of the stacks (the process's entry down to the
job's loop) is left out of the "under" table: it says nothing about where time goes."""

WORKER_STEPS = (
    ("phase 2: a group's sections taken (read, checked, decoded)", "section_batches"),
    ("  a frame's CRC (the first touch of its mapped bytes)", "frame_crc"),
    ("  a batch decoded (Arrow, lz4 or zstd)", "read_compressed"),
    ("  a section's trailer", "SectionReader._end"),
    ("  a shared block decoded and checked", "Block.records"),
    ("  the stream's next unit (merge)", "SectionMerge._next_unit"),
    ("phase 2: survivors decided (keep-set, time rules)", "decide"),
    ("phase 2: survivors picked (one copy)", "picked"),
    ("writer: framed sections' batches", "FileWriter.write_batch"),
    ("  slices planned", "plan_slices"),
    ("  waiting for the encoder thread, writing frames", "FileWriter._flush"),
    ("writer: shared sections", "FileWriter.write_rows"),
    ("writer: the output file's bytes", "LocalMultipartWriter.write"),
    ("waiting for phase 1's feed", "Phase1Process._get"),
)
HELPER_STEPS = (
    ("phase 1: a partition's batches taken (read, checked, decoded)", "Phase1Walk._phase1_batches"),
    ("  a frame's CRC (the first touch of its mapped bytes)", "frame_crc"),
    ("  keys and offsets decoded", "decode_fields"),
    ("  a section's trailer", "SectionReader._end"),
    ("  a shared block decoded and checked", "Block.records"),
    ("hashed into the key buffer", "KeyBuffer.insert"),
    ("a window's winners", "KeyBuffer.winners"),
    ("sending to the worker", "_send"),
    ("waiting for the worker to release a keep-set", "_HelperWalk._acquire"),
)


def _function(frame: str) -> str:
    """A py-spy frame ``name (path:line)`` as ``name (file)``."""
    name, _, where = frame.partition(" (")
    path = where.rsplit(":", 1)[0]
    return f"{name} ({path.rsplit('/', 1)[-1]})" if path else name


def summarize(lines: Iterable[str], top: int) -> list[str]:
    """The report's lines for the samples of ``lines`` (py-spy's raw format)."""
    threads: Counter[str] = Counter()
    own: Counter[str] = Counter()
    under: Counter[str] = Counter()
    names: Counter[str] = Counter()
    samples = 0
    helper = False
    for line in lines:
        stack, _, count = line.rstrip("\n").rpartition(" ")
        if not stack:
            continue
        frames = stack.split(";")
        n = int(count)
        thread = frames[0].split(":", 1)[-1].strip()
        threads[thread] += n
        if thread != "MainThread":
            continue
        samples += n
        helper = helper or any(f.startswith(HELPER_ROOT) for f in frames)
        calls = frames[1:] or ["(no Python frame)"]
        own[_function(calls[-1])] += n
        for f in {_function(f) for f in calls}:
            under[f] += n
        for f in {f.split(" (", 1)[0] for f in calls}:
            names[f] += n
    steps = HELPER_STEPS if helper else WORKER_STEPS
    share = 1 / max(1, samples)
    out = [
        f"{'phase-1 helper' if helper else 'worker'}: main thread, {samples:,} samples",
        "",
        "| step | function | share |",
        "|---|---|---:|",
    ]
    missing = []
    for label, function in steps:
        if not names[function]:
            missing.append(function)
        out.append(f"| {label} | `{function}` | {names[function] * share:.1%} |")
    for function in missing:
        out.append(
            f"warning: no sample's stack holds `{function}`: renamed (WORKER_STEPS, HELPER_STEPS), "
            "or not on this shape's path"
        )
    under = Counter({f: n for f, n in under.items() if n * share <= COMMON})
    for title, counts in (("own", own), ("under", under)):
        out += ["", f"| function ({title}) | share |", "|---|---:|"]
        out += [f"| {f} | {n * share:.1%} |" for f, n in counts.most_common(top)]
    out.append("")
    for thread, n in sorted(threads.items(), key=lambda kv: -kv[1]):
        if thread != "MainThread":
            out.append(f"other thread {thread}: {n:,} samples")
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        prog="python -m bench.spy_summary",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("raw", type=Path, help="py-spy record -f raw output")
    ap.add_argument("--top", type=int, default=25, help="functions in each by-function table")
    args = ap.parse_args(argv)
    with args.raw.open() as lines:
        print("\n".join(summarize(lines, args.top)))


if __name__ == "__main__":
    main()
