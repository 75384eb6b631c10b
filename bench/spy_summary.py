"""Where a job's own thread spends its time, from a py-spy raw profile of every thread.

    py-spy record --native --threads -r 200 -f raw -o /tmp/job.txt -- \\
        .venv/bin/python -m bench.profile_job --store bench/out/shape-ingest-64p/store --plain
    .venv/bin/python -m bench.spy_summary /tmp/job.txt

Prints, for the main thread (the job's: phase 2, the writer, and phase 1 when it runs
inline), the share of its samples under each step of a job (a sample counts for every
step on its stack, so the shares overlap where steps nest), then each other thread's
samples. py-spy samples wall time: a thread waiting for the GIL or for Arrow's thread
pool counts as busy in the call that waits. Not a test.
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

STEPS = (
    ("phase 1 (read, decode keys, hash)", "phase1_windows"),
    ("  hashing into the key buffer", "KeyBuffer.insert"),
    ("  decoding keys (Arrow)", "decode_fields"),
    ("phase 2: decoding whole batches", "decode_batch"),
    ("a shared block's check", "check_block_batch"),
    ("a batch's stats (reader, block check, writer)", "batch_stats"),
    ("survivor masks and filter", "_survivors"),
    ("writing framed sections", "FileWriter.write_batch"),
    ("writing shared sections", "FileWriter.write_rows"),
    ("a group's window (small partitions)", "group_window"),
    ("reading the files", "LocalObjectStream.read"),
    ("a section table's parse", "_parse_section_table"),
    ("a block's table read and checked", "StreamReader._block"),
    ("the walk's rounds (the partitions ahead)", "SectionMerge.pending_shared"),
    ("taking a group's runs (reading and decoding included)", "SectionMerge.take_upto"),
)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.spy_summary", description=__doc__)
    ap.add_argument("raw", type=Path, help="py-spy record -f raw output")
    args = ap.parse_args(argv)
    threads: Counter[str] = Counter()
    steps: Counter[str] = Counter()
    main_samples = 0
    for line in args.raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames = stack.split(";")
        n = int(count)
        thread = frames[0].split(":", 1)[-1].strip()
        threads[thread] += n
        if thread != "MainThread":
            continue
        main_samples += n
        names = {f.split(" (", 1)[0] for f in frames}
        for label, function in STEPS:
            if function in names:
                steps[label] += n
    print(f"main thread: {main_samples:,} samples")
    print("| step | share of the main thread |")
    print("|---|---:|")
    for label, _ in STEPS:
        print(f"| {label} | {steps[label] / max(1, main_samples):.0%} |")
    others = {t: n for t, n in threads.items() if t != "MainThread"}
    for thread, n in sorted(others.items(), key=lambda kv: -kv[1]):
        print(f"other thread {thread}: {n:,} samples")


if __name__ == "__main__":
    main()
