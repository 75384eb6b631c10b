"""Where a compaction's CPU goes: each step of a job, timed on its own, per input record.

    python -m bench.cpu_budget --store bench/out/work-2000000-100b-100p/store [--json]

Runs the steps the worker runs, one after the other, on one thread each (the key buffer
with its usual two hashing threads), over every live file of a ``bench.workload`` store,
and reports CPU time (user + system of the process) per input record:

- ``read + CRC``: the frames read and checksummed, nothing decoded (``SectionReader.skip``);
  a job does this twice, once per pointer.
- ``phase 1 decode``: offsets and keys only (``phase1_fields``), values never decompressed.
- ``hash + insert, keep-sets``: the worker's phase 1 (``phase1_windows``): every key into
  the key buffer, each window's winners taken out as its keep-set.
- ``phase 2 decode``: whole records.
- ``survivors``: the worker's phase 2 (``phase2_windows``): masks from the keep-sets,
  tombstone horizons, each batch filtered.
- ``encode output``: the survivors encoded (zstd), as the writer does, with no sink.

The sum, halved, is what a job could take on two cores if nothing else cost anything and
the steps spread perfectly: the ceiling this format and codec put on throughput here.
Each pass reads the store from a warm page cache; a step's cost is the difference between
two passes (the least CPU time of two runs each), so small steps can read a little off.
Timings vary with the machine and what else runs on it; the shares hold better.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from compactor.catalog import Catalog
from compactor.fileformat import SectionReader
from compactor.fileformat.batches import batch_stats
from compactor.fileformat.ipc import BatchEncoder
from compactor.fileformat.writer import MIN_COMPRESS_BYTES
from compactor.objectstore import LocalStore
from compactor.worker.kernel import KeyBuffer
from compactor.worker.memory import use_lean_memory_pool
from compactor.worker.partition import Window, phase1_fields, phase1_windows, phase2_windows
from compactor.worker.policy import PartitionPolicy
from compactor.worker.stats import CompactionStats

from .contenders import live_files, merged_pointer

Partition = tuple[str, int]


def _partitions(store: LocalStore) -> Iterator[tuple[Partition, Iterator[SectionReader]]]:
    """Partition by partition, in the worker's order (one stream per file, merged)."""
    with ExitStack() as stack:
        pointer = merged_pointer(store, live_files(store, None), stack)
        while (tp := pointer.next_partition()) is not None:
            yield tp, pointer.take(*tp)


def _cpu(step: Callable[[], Any], repeat: int = 2) -> tuple[float, Any]:
    """The least CPU time of ``repeat`` runs of ``step``, and its result."""
    best, result = float("inf"), None
    for _ in range(repeat):
        start = time.process_time()
        result = step()
        best = min(best, time.process_time() - start)
    return best, result


def _read(store: LocalStore) -> None:
    for _, sections in _partitions(store):
        for section in sections:
            section.skip()


def _policies(store: LocalStore, now_ms: int) -> dict[str, PartitionPolicy]:
    """Each topic's policy for a full compaction (every file of the store in the job)."""
    return {
        name: PartitionPolicy.for_partition(
            topic.config,
            deduplicate=True,
            now_ms=now_ms,
            includes_oldest=True,
            includes_newest=True,
        )
        for name, topic in Catalog(store).snapshot().topics.items()
    }


def _phase1(
    store: LocalStore, policies: dict[str, PartitionPolicy], buffer: KeyBuffer | None
) -> dict[Partition, list[Window]]:
    """Decodes what phase 1 decodes; with a buffer, runs the worker's phase 1 and returns
    each partition's windows (keep-sets out of the buffer)."""
    windows = {}
    for tp, sections in _partitions(store):
        policy = policies[tp[0]]
        batches = (b for s in sections for b in s.batches(phase1_fields(policy)))
        if buffer is None:
            for _ in batches:
                pass
        else:
            windows[tp] = list(phase1_windows(batches, policy, buffer))
    return windows


def _phase2(
    store: LocalStore,
    policies: dict[str, PartitionPolicy],
    windows: dict[Partition, list[Window]] | None,
    encode: bool,
) -> int:
    """Decodes whole records; with windows, runs the worker's phase 2 (the survivors); with
    ``encode``, encodes those as the writer does (zstd). Returns the records kept."""
    encoder = BatchEncoder("zstd", MIN_COMPRESS_BYTES)
    stats = CompactionStats()
    kept = 0  # (records_out is counted where the worker writes, not in phase2_windows)
    for tp, sections in _partitions(store):
        batches = (b for s in sections for b in s.batches())
        if windows is None:
            for _ in batches:
                pass
            continue
        for b in phase2_windows(batches, windows[tp], policies[tp[0]], stats):
            kept += b.num_rows
            if encode:
                encoder.encode(b, batch_stats(b).uncompressed_bytes)
    return kept


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", type=Path, required=True)
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--now-ms", type=int, default=int(time.time() * 1000), help="the clock for horizons"
    )
    args = parser.parse_args(argv)
    use_lean_memory_pool()
    store = LocalStore(str(args.store))
    records = sum(f.record_count for f in live_files(store, None))
    _read(store)  # the page cache warm, as bench.run has it for every contender
    read, _ = _cpu(lambda: _read(store))
    policies = _policies(store, args.now_ms)
    buffer = KeyBuffer()
    phase1, _ = _cpu(lambda: _phase1(store, policies, None))
    with_insert, windows = _cpu(lambda: _phase1(store, policies, buffer))
    phase2, _ = _cpu(lambda: _phase2(store, policies, None, encode=False))
    with_filter, survivors = _cpu(lambda: _phase2(store, policies, windows, encode=False))
    with_encode, _ = _cpu(lambda: _phase2(store, policies, windows, encode=True))
    steps = {
        "read + CRC (x2: both pointers)": 2 * read,
        "phase 1 decode (offset, key)": phase1 - read,
        "hash + insert, keep-sets": with_insert - phase1,
        "phase 2 decode (whole records)": phase2 - read,
        "survivors (masks, filter)": with_filter - phase2,
        "encode output (zstd)": with_encode - with_filter,
    }
    total = sum(steps.values())
    report = {
        "records": records,
        "survivors": survivors,
        "cpu_s": steps,
        "total_cpu_s": total,
        "ns_per_record": {k: v / records * 1e9 for k, v in steps.items()},
        "ceiling_records_per_s_2_cores": records / (total / 2),
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(f"{records:,} records in, {survivors:,} survivors")
    print("| step | CPU s | ns/record | share |\n|---|---:|---:|---:|")
    for name, cpu in steps.items():
        print(f"| {name} | {cpu:.2f} | {cpu / records * 1e9:.0f} | {cpu / total:.0%} |")
    print(f"| total | {total:.2f} | {total / records * 1e9:.0f} | 100% |")
    ceiling = report["ceiling_records_per_s_2_cores"]
    print(f"ceiling on two cores, if the steps spread perfectly: {ceiling:,.0f} records/s")


if __name__ == "__main__":
    main()
