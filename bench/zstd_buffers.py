"""What the top level's zstd costs, buffer by buffer, on a job's own output batches.

    .venv/bin/python -m bench.zstd_buffers --store bench/out/shape-ingest-10kp/store

Runs ``compact --full`` on a hard-linked clone of ``--store`` (``bench.profile_job``'s
clone: the store is left as it was) and keeps every batch the job's writers compress
(``BatchEncoder.encode`` observed, not changed: the job writes what it always writes).
Then, on this thread, best of three:
- each of RECORD_SCHEMA's buffers of those batches compressed alone with Arrow's zstd
  codec (``pa.Codec``, as Arrow's IPC writer calls it for each buffer): how many calls,
  their bytes, what zstd keeps of them, the time and its share;
- one call on a 4-byte buffer: what a buffer costs before its bytes do, most of it the
  context Arrow's codec makes and frees for every buffer (a bound, not a saving: with a
  context kept from call to call, zstd still resets it for every buffer);
- the batches as the writer encodes them (``BatchEncoder``, Arrow's IPC writer for zstd).
The question it answers is where a top-level job's encoding goes, by buffer. Not a test:
the timings depend on the machine.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path

import pyarrow as pa

from compactor.fileformat.batches import logical_bytes
from compactor.fileformat.ipc import BatchEncoder, Pending

from .codecs import BUFFER_NAMES, least_of
from .profile_job import cloned

CODEC = "zstd"


@contextmanager
def kept_batches() -> Iterator[list[tuple[pa.RecordBatch, int]]]:
    """While inside, every batch a writer compresses in ``CODEC`` is appended, with its
    logical bytes, to the list it yields: those it encodes on its thread (``encode``) and
    those it hands to the encoder's own (``submit``, whose logical bytes are counted
    here); the encoder itself runs as it always does."""
    kept: list[tuple[pa.RecordBatch, int]] = []
    encode, submit = BatchEncoder.encode, BatchEncoder.submit

    def observed(self: BatchEncoder, batch: pa.RecordBatch, logical_bytes: int) -> bytes:
        if self.codec_for(logical_bytes) == CODEC:
            kept.append((batch, logical_bytes))
        return encode(self, batch, logical_bytes)

    def observed_submit(self: BatchEncoder, batch: pa.RecordBatch) -> Pending:
        logical = logical_bytes(batch)
        if self.codec_for(logical) == CODEC:
            kept.append((batch, logical))
        return submit(self, batch)

    setattr(BatchEncoder, "encode", observed)  # noqa: B010
    setattr(BatchEncoder, "submit", observed_submit)  # noqa: B010
    try:
        yield kept
    finally:
        setattr(BatchEncoder, "encode", encode)  # noqa: B010
        setattr(BatchEncoder, "submit", submit)  # noqa: B010


def _compress_all(codec: pa.Codec, buffers: list[pa.Buffer], sizes: list[int]) -> None:
    """Compresses each buffer alone; ``sizes`` gets what zstd kept of each."""
    sizes[:] = [codec.compress(buffer).size for buffer in buffers]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m bench.zstd_buffers",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--store", type=Path, required=True, help="a local store (not changed)")
    ap.add_argument("--now-ms", type=int, default=None, help="default: the store's newest + 1 h")
    args = ap.parse_args(argv)
    with kept_batches() as batches, cloned(args.store, args.now_ms) as (compactor, *_, now_ms):
        compactor.run_planned(now_ms, full=True)
    if not batches:
        print(f"the job compressed no batch in {CODEC}")
        return 1
    codec = pa.Codec(CODEC)
    columns: list[list[pa.Buffer]] = [[] for _ in BUFFER_NAMES]
    for batch, _ in batches:
        buffers = [b for column in batch.columns for b in column.buffers()]
        for i, buffer in enumerate(buffers):
            if buffer is not None and buffer.size:
                columns[i].append(buffer)
    logical = sum(n for _, n in batches)
    print(f"{len(batches)} {CODEC} batches, {logical / 1e6:.1f} MB logical, "
          f"{sum(map(len, columns)):,} buffers")  # fmt: skip
    print()
    print("| buffer | calls | MB | kept by zstd | ms (CPU) | share | MB/s |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    rows = []
    for name, buffers in zip(BUFFER_NAMES, columns, strict=True):
        if buffers:
            sizes: list[int] = []
            seconds = least_of(partial(_compress_all, codec, buffers, sizes))[0]
            raw = sum(b.size for b in buffers)
            rows.append((name, len(buffers), raw, sum(sizes), seconds))
    total = sum(r[4] for r in rows)
    for name, calls, raw, packed, seconds in rows:
        speed = raw / seconds / 1e6
        print(f"| {name} | {calls:,} | {raw / 1e6:.2f} | {packed / raw:.3f} "
              f"| {seconds * 1e3:.1f} | {seconds / total:.0%} | {speed:,.0f} |")  # fmt: skip
    calls = sum(r[1] for r in rows)
    tiny = pa.py_buffer(b"\0\0\0\0")
    per_call = least_of(lambda: [codec.compress(tiny) for _ in range(10_000)])[0] / 10_000
    encoder = BatchEncoder(CODEC)
    whole = least_of(lambda: [encoder.encode(b, n) for b, n in batches])[0]
    print()
    print(f"buffer by buffer: {total * 1e3:.1f} ms; one call on 4 bytes "
          f"{per_call * 1e6:.1f} µs, over the {calls:,} calls {calls * per_call * 1e3:.1f} ms; "
          f"the writer's encoder (whole batches): {whole * 1e3:.1f} ms")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
