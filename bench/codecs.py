"""What each codec the format allows costs and saves on a workload's own batches.

    .venv/bin/python -m bench.codecs --store bench/out/shape-ingest-64p/store [--batches N]

Takes the first ``--batches`` batches of a store's live files as the writer wrote them
(a framed section's batches, a shared block's one batch), decoded whole, encodes each as
the writer does (``BatchEncoder``: zstd, lz4 or none, at the writer's threshold for
compressing) and decodes it as a job does, best of three, on this thread: whole
(``decode_batch``, phase 2) and its offsets and keys (``decode_fields``, phase 1 under
the offset strategy). ``--buffers`` first prints what each codec saves on each of the
record schema's buffers. Prints, per codec: the bytes stored per logical byte, and encode
and decode speed in logical MB/s of CPU time and of wall time. Each codec runs two ways:
buffer by buffer (a buffer stored as it is where the codec shrinks it by less than its
share in ``ipc.MIN_SAVINGS``, lz4's for a codec without one, and not tried again until
the encoder's next retry) and with every buffer compressed, as Arrow's IPC writer does
it. The writer's way for each codec is marked. The question it answers is whether a
codec pays in CPU for the bytes it saves (ARCHITECTURE.md §9.1). Not a test: the
timings depend on the machine.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import pyarrow as pa

from compactor.fileformat import StreamReader, ipc
from compactor.fileformat.batches import batch_stats
from compactor.fileformat.field_decode import decode_fields
from compactor.fileformat.ipc import COMPRESSIONS, MIN_SAVINGS, BatchEncoder, decode_batch
from compactor.fileformat.reader import SharedRun
from compactor.fileformat.writer import MIN_COMPRESS_BYTES
from compactor.objectstore import LocalStore
from compactor.worker.memory import use_lean_memory_pool

from .contenders import live_files

PHASE1_FIELDS = ("offset", "key")


class Encoder(Protocol):
    def encode(self, batch: pa.RecordBatch, logical_bytes: int) -> bytes: ...


class ArrowsEncoder:
    """The writer's encoder before buffers were stored as is: Arrow's IPC stream writer,
    which compresses every buffer (batches under the writer's threshold uncompressed)."""

    def __init__(self, codec: str) -> None:
        self._arrows = ipc._StreamEncoder(codec)

    def encode(self, batch: pa.RecordBatch, logical_bytes: int) -> bytes:
        if logical_bytes < MIN_COMPRESS_BYTES:
            return BatchEncoder(None).encode(batch, logical_bytes)
        return self._arrows.encode(batch)


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


BUFFER_NAMES = [
    f"{column} {part}"
    for column, parts in [
        ("offset", ("validity", "data")),
        ("timestamp", ("validity", "data")),
        ("key", ("validity", "offsets", "data")),
        ("value", ("validity", "offsets", "data")),
        ("headers", ("validity", "offsets")),
        ("header", ("validity",)),
        ("header key", ("validity", "offsets", "data")),
        ("header value", ("validity", "offsets", "data")),
        ("delete_horizon", ("validity", "data")),
    ]
    for part in parts
]
"""RECORD_SCHEMA's buffers in message order (FORMAT.md 6.2: 21)."""


def _buffer_savings(batches: list[tuple[pa.RecordBatch, int]]) -> None:
    """Prints, for each of RECORD_SCHEMA's buffers, its bytes over the batches and what
    each codec (``pa.Codec``, as Arrow's IPC writer calls it) saves of them. The buffers
    are the decoded batches' own, in the message's order (a column's, then its
    children's)."""
    codecs = [c for c in COMPRESSIONS if c]
    raw = [0] * len(BUFFER_NAMES)
    packed = {c: [0] * len(BUFFER_NAMES) for c in codecs}
    for batch, _ in batches:
        buffers = [b for column in batch.columns for b in column.buffers()]
        assert len(buffers) == len(BUFFER_NAMES)
        for i, buffer in enumerate(buffers):
            if buffer is not None and buffer.size:
                raw[i] += buffer.size
                for c in codecs:
                    packed[c][i] += len(pa.Codec(c).compress(buffer, asbytes=True))
    print("| buffer | bytes | " + " | ".join(f"{c} saves" for c in codecs) + " |")
    print("|---|---:|" + "---:|" * len(codecs))
    for i, name in enumerate(BUFFER_NAMES):
        if raw[i]:
            saved = " | ".join(f"{1 - packed[c][i] / raw[i]:.1%}" for c in codecs)
            print(f"| {name} | {raw[i]:,} | {saved} |")
    print()


def least_of(step: Callable[[], object], runs: int = 3) -> tuple[float, float]:
    """The least CPU (this process's) and wall seconds of ``runs`` runs of ``step``."""
    cpu = wall = float("inf")
    for _ in range(runs):
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
    ap.add_argument(
        "--buffers",
        action="store_true",
        help="first, what each codec saves on each buffer of the batches' messages",
    )
    args = ap.parse_args(argv)
    use_lean_memory_pool()  # a job's pool and malloc settings (worker/memory.py)
    batches = _batches(LocalStore(args.store), args.batches)
    logical = sum(n for _, n in batches)
    print(
        f"{len(batches)} batches, {sum(b.num_rows for b, _ in batches):,} records, "
        f"{logical / 1e6:.1f} MB logical"
    )
    if args.buffers:
        _buffer_savings(batches)
    print("| codec | buffers compressed | stored / logical | encode MB/s (CPU) "
          "| encode MB/s (wall) | decode MB/s (CPU) | decode MB/s (wall) "
          "| offsets and keys MB/s (CPU) |")  # fmt: skip
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    ways: list[tuple[str | None, str, Encoder]] = [(None, "-", BatchEncoder(None))]
    for codec in COMPRESSIONS:
        if codec:
            savings = MIN_SAVINGS.get(codec, MIN_SAVINGS["lz4"])
            pays, every = f"where it pays ({savings:.0%})", "every one (Arrow's writer)"
            if codec in MIN_SAVINGS:
                pays += ", the writer's"
            else:
                every += ", the writer's"
            ways += [
                (codec, pays, BatchEncoder(codec, MIN_COMPRESS_BYTES, savings)),
                (codec, every, ArrowsEncoder(codec)),
            ]
    for codec, which, encoder in ways:
        payloads: list[bytes] = []

        def encode(encoder: Encoder = encoder, payloads: list[bytes] = payloads) -> None:
            payloads[:] = [encoder.encode(b, n) for b, n in batches]

        def decode(payloads: list[bytes] = payloads) -> None:
            for p in payloads:
                decode_batch(p, 0, "codecs", ordered=False)  # a block spans sections

        def decode_keys(payloads: list[bytes] = payloads) -> None:
            for p in payloads:
                decode_fields(p, 0, "codecs", PHASE1_FIELDS, ordered=False)

        enc_cpu, enc_wall = least_of(encode)
        dec_cpu, dec_wall = least_of(decode)
        keys_cpu, _ = least_of(decode_keys)
        stored = sum(len(p) for p in payloads)
        mb = logical / 1e6
        print(
            f"| {codec or 'none'} | {which} | {stored / logical:.3f} | {mb / enc_cpu:,.0f} | "
            f"{mb / enc_wall:,.0f} | {mb / dec_cpu:,.0f} | {mb / dec_wall:,.0f} "
            f"| {mb / keys_cpu:,.0f} |"
        )


if __name__ == "__main__":
    main()
