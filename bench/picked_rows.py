"""A gathered run's survivors: picked from its batches against concatenated, then filtered.

    .venv/bin/python -m bench.picked_rows [--batches 32] [--rows 856] [--keep 0.35]
    .venv/bin/python -m bench.picked_rows --batches 27 --rows 515 --partitions 500

Builds a run as phase 2 gathers it at ingest-64p (32 batches of 856 records, UUID-sized
keys, 100-byte values, 1% tombstones, no headers), a mask keeping about ``--keep`` of
its records, and times, best of ``--repeat`` rounds of ``--calls`` calls each:
``fileformat.picked`` on a table of the batches (what phase 2 does now) and
``concat`` then ``filter_batch`` (what it did before), with the compiled passes alone
beside them. With ``--partitions P``, the batches are a group's pieces instead (each
input's rows of P small partitions, ``worker.group``; the second line above is a group
of ingest-10kp's at 2 MiB, about 5 records a section), and the kept rows are taken
partition after partition (``kernel.survivor_order``): ``picked.taken`` from a table of
the pieces (phase 2 now) against ``concat`` then ``take_batch`` (before). Not a test:
the timings depend on the machine.
"""

from __future__ import annotations

import argparse
import os
import random
import time
from collections.abc import Callable

import pyarrow as pa

from compactor.fileformat import RECORD_SCHEMA, _rows
from compactor.fileformat.batches import concat, empty_headers, filter_batch, take_batch
from compactor.fileformat.picked import picked, taken
from compactor.worker.kernel import survivor_order
from compactor.worker.masks import bool_array


def _batch(rows: int, first: int, rng: random.Random) -> pa.RecordBatch:
    values = [None if rng.random() < 0.01 else os.urandom(50).hex().encode() for _ in range(rows)]
    return pa.RecordBatch.from_arrays(
        [
            pa.array(range(first, first + rows), pa.int64()),
            pa.array(range(rows), pa.int64()),
            pa.array([os.urandom(18).hex().encode() for _ in range(rows)], pa.binary()),
            pa.array(values, pa.binary()),
            empty_headers(rows),
            pa.nulls(rows, pa.int64()),
        ],
        schema=RECORD_SCHEMA,
    )


def _best_ms(call: Callable[[], object], calls: int, repeat: int) -> float:
    call()
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(calls):
            call()
        best = min(best, (time.perf_counter() - start) / calls)
    return best * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=32)
    parser.add_argument("--rows", type=int, default=856)
    parser.add_argument("--keep", type=float, default=0.35)
    parser.add_argument("--partitions", type=int, default=0, help="a group's pieces: P a batch")
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    rng = random.Random(1)
    batches = [_batch(args.rows, 1000 * i, rng) for i in range(args.batches)]
    table = pa.Table.from_batches(batches)
    n = table.num_rows
    keep = sum(1 << i for i in range(n) if rng.random() < args.keep)
    rows = keep.bit_count()
    if args.partitions:
        _group(batches, table, keep, args)
        return
    mask = keep.to_bytes((n + 7) >> 3, "little")
    chunks = table.column("value").chunks
    values = [
        (len(c), c.offset, c.buffers()[0] if c.null_count else None, *c.buffers()[1:3])
        for c in chunks
    ]
    offsets = [(len(c), c.offset, None, c.buffers()[1]) for c in table.column("offset").chunks]

    def filtered() -> object:
        return filter_batch(concat(batches), bool_array(keep, n))

    timings = [
        ("picked from a table of the batches (phase 2 now)", lambda: picked(table, keep, rows)),
        ("concatenated, then filtered (before)", filtered),
        ("  of it, the concatenation", lambda: concat(batches)),
        ("_rows.pick_binary, the values alone", lambda: _rows.pick_binary(mask, rows, values)),
        ("_rows.pick_fixed, the offsets alone", lambda: _rows.pick_fixed(mask, rows, 8, offsets)),
    ]
    _table(f"{args.batches} batches of {args.rows} records, {rows:,} of {n:,} kept", timings, args)


def _group(
    batches: list[pa.RecordBatch], table: pa.Table, keep: int, args: argparse.Namespace
) -> None:
    """The batches as a group's pieces: each holds the same ``--partitions`` partitions'
    rows, partition after partition, in even runs; the kept rows taken in partition order."""
    per = -(-args.rows // args.partitions)
    labels = pa.array([r // per for _ in batches for r in range(args.rows)], pa.int32())
    order, _ = survivor_order(keep, labels, args.partitions)
    assert order is not None
    timings = [
        ("taken from a table of the pieces (phase 2 now)", lambda: taken(table, order)),
        ("concatenated, then taken (before)", lambda: take_batch(concat(batches), order)),
        ("  of it, the concatenation", lambda: concat(batches)),
    ]
    what = (
        f"a group of {args.batches} pieces of {args.rows} records, {args.partitions} "
        f"partitions, {len(order):,} of {table.num_rows:,} kept"
    )
    _table(what, timings, args)


def _table(
    what: str, timings: list[tuple[str, Callable[[], object]]], args: argparse.Namespace
) -> None:
    print(f"{what}; best of {args.repeat}")
    print()
    print("| what | ms a run |")
    print("|---|---:|")
    for name, call in timings:
        print(f"| {name} | {_best_ms(call, args.calls, args.repeat):.3f} |")


if __name__ == "__main__":
    main()
