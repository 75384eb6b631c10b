"""What each codec the format allows costs and saves on a workload's own batches.

    .venv/bin/python -m bench.codecs --store bench/out/shape-ingest-64p/store [--batches N]

Takes the first ``--batches`` batches of a store's live files as the writer wrote them
(a framed section's batches, a shared block's one batch), decoded whole, encodes each as
the writer does (``BatchEncoder``: zstd, lz4 or
none, at the writer's threshold for compressing) and decodes it as a job does
(``decode_batch``, whole), best of three, on this thread (a decode decompresses on the
calling thread, as a job's does; an encode hands a batch's buffers to Arrow's thread
pool). Prints, per codec: the bytes stored per logical byte,
and encode and decode speed in logical MB/s of CPU time and of wall time. The question it
answers is whether a cheaper codec below the top level pays in CPU for the bytes it adds
(ARCHITECTURE.md §9.1). Not a test: the timings depend on the machine.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa

from compactor.fileformat import StreamReader
from compactor.fileformat.batches import batch_stats
from compactor.fileformat.ipc import COMPRESSIONS, BatchEncoder, decode_batch
from compactor.fileformat.reader import SharedRun
from compactor.fileformat.writer import MIN_COMPRESS_BYTES
from compactor.objectstore import LocalStore

from .contenders import live_files


def _batches(store: LocalStore, limit: int) -> list[tuple[pa.RecordBatch, int]]:
    """The first ``limit`` batches of the store's live files as the writer wrote them
    (a framed section's batches; a shared block's one batch), each with its logical
    bytes."""
    out: list[tuple[pa.RecordBatch, int]] = []
    for live in live_files(store, None):
        with store.open_stream(live.key) as stream:
            reader = StreamReader(stream, object_name=live.key, size=live.size)
            for unit in reader.units():
                if isinstance(unit, SharedRun):
                    batch = unit.block.records()
                    out.append((batch, batch_stats(batch).uncompressed_bytes))
                else:
                    out += [(b, batch_stats(b).uncompressed_bytes) for b in unit.batches()]
                if len(out) >= limit:
                    return out
    return out


def _best(step: Callable[[], object]) -> tuple[float, float]:
    """The least CPU and wall seconds of three runs of ``step``."""
    cpu = wall = float("inf")
    for _ in range(3):
        c, w = time.process_time(), time.perf_counter()
        step()
        cpu, wall = min(cpu, time.process_time() - c), min(wall, time.perf_counter() - w)
    return cpu, wall


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        prog="python -m bench.codecs",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--store", type=Path, required=True, help="a bench.workload store")
    ap.add_argument("--batches", type=int, default=500, help="batches to take")
    args = ap.parse_args(argv)
    batches = _batches(LocalStore(args.store), args.batches)
    logical = sum(n for _, n in batches)
    print(
        f"{len(batches)} batches, {sum(b.num_rows for b, _ in batches):,} records, "
        f"{logical / 1e6:.1f} MB logical"
    )
    print("| codec | stored / logical | encode MB/s (CPU) | encode MB/s (wall) "
          "| decode MB/s (CPU) | decode MB/s (wall) |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|")
    for codec in COMPRESSIONS:
        encoder = BatchEncoder(codec, MIN_COMPRESS_BYTES)
        payloads: list[bytes] = []

        def encode(encoder: BatchEncoder = encoder, payloads: list[bytes] = payloads) -> None:
            payloads[:] = [encoder.encode(b, n) for b, n in batches]

        def decode(payloads: list[bytes] = payloads) -> None:
            for p in payloads:
                decode_batch(p, 0, "codecs", ordered=False)  # a block spans sections

        enc_cpu, enc_wall = _best(encode)
        dec_cpu, dec_wall = _best(decode)
        stored = sum(len(p) for p in payloads)
        mb = logical / 1e6
        print(
            f"| {codec or 'none'} | {stored / logical:.3f} | {mb / enc_cpu:,.0f} | "
            f"{mb / enc_wall:,.0f} | {mb / dec_cpu:,.0f} | {mb / dec_wall:,.0f} |"
        )


if __name__ == "__main__":
    main()
