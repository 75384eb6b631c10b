"""What a batch's compression costs per call, by codec and batch size: encoding by the
writer's compiled encoder (``fileformat/_encoder.cpp``, zstd with one kept context where
the build had libzstd) against pyarrow's own stream writer (Arrow's codec, a zstd context
a buffer); and decoding by the reader's path (``ipc.decode_batch``: a zstd message's
buffers decompressed by the thread's kept context first, where the build had libzstd),
with its read step alone both ways: ``ipc.read_compressed`` given the message's codec, and
given none, so that Arrow's codec decompresses (a zstd context a buffer).

    .venv/bin/python -m bench.codec_calls
    .venv/bin/python -m bench.codec_calls --rows 1,50,1000,20000 --repeat 5

Each way runs ``--calls`` times a round, ``--repeat`` rounds in turn; the least CPU time a
call of the rounds is printed, in µs, with the payload's size. Each buffer Arrow
compresses or decompresses with zstd gets a context of its own, and making one runs
zstd's CPU feature test, ``cpuid``, which traps to the hypervisor on a virtual machine:
the table shows what that costs a batch here against lz4 and no codec. Not a test: the
timings depend on the machine.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import pyarrow as pa

from compactor.fileformat import _encoder, _sections, ipc
from compactor.fileformat.records import Record, records_to_batch

CODECS = ("zstd", "lz4", "none")
_WHOLE = pa.ipc.IpcReadOptions(use_threads=False)


def _batch(rows: int) -> pa.RecordBatch:
    """``rows`` records of 100-byte values, every tenth with a header."""
    return records_to_batch(
        [
            Record(
                i,
                1_700_000_000_000 + i,
                b"key-%08d" % i,
                (b"%02x" % (i % 251)) * 50,
                (("h", b"v"),) if i % 10 == 0 else (),
            )
            for i in range(rows)
        ]
    )


def _arrow_message(batch: pa.RecordBatch, codec: str) -> bytes:
    """``batch``'s message as pyarrow's stream writer writes it, less the schema's."""
    options = pa.ipc.IpcWriteOptions(
        compression=None if codec == "none" else codec, use_threads=False
    )
    schema_only, whole = pa.BufferOutputStream(), pa.BufferOutputStream()
    pa.ipc.new_stream(schema_only, batch.schema, options=options).close()
    with pa.ipc.new_stream(whole, batch.schema, options=options) as writer:
        writer.write_batch(batch)
    head = len(schema_only.getvalue()) - 8
    return bytes(whole.getvalue())[head:-8]


def _least_per_call(work: Callable[[], object], calls: int, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.process_time()
        for _ in range(calls):
            work()
        best = min(best, (time.process_time() - start) / calls)
    return best * 1e6


def _row(batch: pa.RecordBatch, codec: str, calls: int, repeat: int) -> str:
    """One table row: ``batch`` encoded both ways and decoded, in ``codec``."""
    encoder = _encoder.Encoder(codec)
    try:
        payload = encoder.encode(batch.__arrow_c_array__())
        compiled = _least_per_call(lambda: encoder.encode(batch.__arrow_c_array__()), calls, repeat)
    finally:
        encoder.close()
    arrow = _least_per_call(lambda: _arrow_message(batch, codec), calls, repeat)
    if not ipc.decode_batch(payload, 0, "bench").equals(batch):
        raise SystemExit(f"codec_calls: a {codec} payload does not decode to its batch")
    decode = _least_per_call(lambda: ipc.decode_batch(payload, 0, "bench"), calls, repeat)
    schema, named = batch.schema, None if codec == "none" else codec
    kept = _least_per_call(
        lambda: ipc.read_compressed(payload, schema, _WHOLE, named), calls, repeat
    )
    arrows = _least_per_call(
        lambda: ipc.read_compressed(payload, schema, _WHOLE, None), calls, repeat
    )
    return (
        f"| {batch.num_rows:,} | {codec} | {len(payload):,} | {compiled:.1f} | {arrow:.1f} "
        f"| {decode:.1f} | {kept:.1f} | {arrows:.1f} |"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", default="1,50,1000,20000", help="batch sizes, comma-separated")
    ap.add_argument("--calls", type=int, default=0, help="calls a round (default: by size)")
    ap.add_argument("--repeat", type=int, default=5, help="rounds of each way")
    args = ap.parse_args()
    print(
        f"kept zstd contexts in this build: writing {_encoder.KEPT_ZSTD_CONTEXT}, "
        f"reading {_sections.KEPT_ZSTD_CONTEXT}\n"
    )
    print(
        "| rows | codec | payload bytes | encode, compiled (µs) | encode, pyarrow (µs) "
        "| decode (µs) | read (µs) | read, Arrow's codec (µs) |"
    )
    print("|---:|---|---:|---:|---:|---:|---:|---:|")
    for rows in (int(r) for r in args.rows.split(",")):
        batch = _batch(rows)
        calls = args.calls or max(10, 2_000 // max(rows, 1))
        for codec in CODECS:
            print(_row(batch, codec, calls, args.repeat))


if __name__ == "__main__":
    main()
