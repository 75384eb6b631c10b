"""What decoding a store's compressed batch messages costs, opened two ways: every
compressed batch payload of a store's live files, decoded whole (phase 2) and as offsets
and keys (phase 1).

    .venv/bin/python -m bench.ipc_decode --store bench/out/shape-ingest-64p/store

The payloads are collected first (the files walked by ``StreamReader``, its calls to
``ipc.read_compressed`` recorded), then decoded ``--repeat`` times each way, in turn, on
this thread, CPU time:

- **kept reader** (``ipc.read_compressed``): one Arrow stream reader per thread, schema
  and options, fed each payload by memoryview slices (a zstd payload's buffers first
  decompressed by the thread's kept zstd context, where the build had libzstd);
- **a stream a batch** (how every batch was decoded before): a new stream reader over
  ``schema message + payload``, one copy of the payload and one parse of the schema each;
- **kept reader, uncompressed**: the kept reader on the same batches re-encoded without
  compression, whose buffers Arrow takes in place: what is left once nothing is
  decompressed, so the difference with the first row is the codec's share.

A second table gives each of the message's buffers (in Arrow's depth-first order): how
many messages store it compressed and how many as it is (FORMAT.md 6.2), its stored bytes,
the bytes decompressing it writes, and the CPU of decompressing it alone with Arrow's
codec (``pa.Codec.decompress``, one Python call a buffer: about half a µs of each call is
the call), µs a message: which buffers the codec's share is spent on.

The two must decode equal batches (checked on every payload first). Not a test: the
timings depend on the machine.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa

from compactor.fileformat import StreamReader, ipc
from compactor.fileformat.field_decode import field_indices
from compactor.objectstore import LocalStore

from .contenders import live_files

Decode = Callable[[bytes, pa.Schema, pa.ipc.IpcReadOptions, str | None], pa.RecordBatch]
Payload = tuple[bytes, pa.Schema, str | None]
"""A compressed batch message, its schema and its codec."""
PHASE1_FIELDS = ("offset", "key")  # phase 1's under the default strategy


def collect(store: LocalStore) -> list[Payload]:
    """Every compressed batch payload of the store's live files, with its schema."""
    found: list[Payload] = []
    decode = ipc.read_compressed

    def recording(
        payload: bytes | memoryview,
        schema: pa.Schema,
        options: pa.ipc.IpcReadOptions,
        codec: str | None,
    ) -> pa.RecordBatch:
        found.append((bytes(payload), schema, codec))
        return decode(payload, schema, options, codec)

    ipc.read_compressed = recording
    try:
        for f in live_files(store, None):
            with store.open_stream(f.key) as stream:
                reader = StreamReader(stream, object_name=f.key, size=f.size, keep_footer=False)
                for section in reader.sections():
                    for _ in section.batches():
                        pass
    finally:
        ipc.read_compressed = decode
    return found


def a_stream_a_batch(
    payload: bytes, schema: pa.Schema, options: pa.ipc.IpcReadOptions, codec: str | None
) -> pa.RecordBatch:
    """A new stream reader, Arrow's codec (``codec`` is the message's own)."""
    prefixed = pa.py_buffer(ipc._SCHEMA_MESSAGES[len(schema)] + payload)
    return pa.ipc.open_stream(prefixed, options=options).read_next_batch()


WAYS: dict[str, Decode] = {"kept reader": ipc.read_compressed, "a stream a batch": a_stream_a_batch}
UNCOMPRESSED = "kept reader, uncompressed"


def uncompressed(payloads: list[Payload]) -> list[Payload]:
    """The same batches' messages without compression (Arrow's ``serialize``)."""
    whole = pa.ipc.IpcReadOptions(use_threads=False)
    return [
        (ipc.read_compressed(p, s, whole, c).serialize().to_pybytes(), s, None)
        for p, s, c in payloads
    ]


def buffer_names(schema: pa.Schema) -> list[str]:
    """A message's buffers of ``schema``, named in Arrow's depth-first order (as
    ``ipc.wanted_buffers`` counts them)."""

    def named(name: str, t: pa.DataType) -> list[str]:
        if pa.types.is_list(t):
            return [f"{name} validity", f"{name} offsets", *named(f"{name} item", t.value_type)]
        if pa.types.is_struct(t):
            children = [
                named(f"{name}.{t.field(i).name}", t.field(i).type) for i in range(t.num_fields)
            ]
            return [f"{name} validity", *(b for c in children for b in c)]
        if pa.types.is_binary(t) or pa.types.is_string(t):
            return [f"{name} validity", f"{name} offsets", f"{name} data"]
        return [f"{name} validity", f"{name} data"]

    return [b for f in schema for b in named(f.name, f.type)]


Packed = tuple[memoryview, int, str]
"""A compressed buffer of a message: its codec's frame, its decompressed size, the codec."""


def decompress_cpu(packed: list[Packed], repeat: int) -> float:
    """The median CPU seconds of decompressing every buffer of ``packed`` with Arrow's
    codec (``pa.Codec.decompress``, one Python call a buffer), ``repeat`` times."""
    codecs = {name: pa.Codec(name) for name in {c for _, _, c in packed}}
    runs = []
    for _ in range(repeat):
        start = time.process_time()
        for frame, size, codec in packed:
            codecs[codec].decompress(frame, decompressed_size=size)
        runs.append(time.process_time() - start)
    return statistics.median(runs)


def buffer_table(payloads: list[Payload], repeat: int) -> list[str]:
    """Per buffer of the messages: compressed or as it is, stored and decoded bytes, and
    the CPU its decompression takes alone, µs a message (of all the messages)."""
    counts: dict[int, list[int]] = {}
    packed: dict[int, list[Packed]] = {}
    names: list[str] = []
    for payload, schema, codec in payloads:
        names = names or buffer_names(schema)
        layout = ipc._layout(payload)
        for k in range(len(layout.spans) // 2):
            at, length = layout.body_start + layout.spans[2 * k], layout.spans[2 * k + 1]
            if not length:
                continue
            prefix = int.from_bytes(payload[at : at + 8], "little", signed=True)
            row = counts.setdefault(k, [0, 0, 0, 0])
            row[0 if prefix >= 0 else 1] += 1
            row[2] += length - 8
            row[3] += prefix if prefix >= 0 else 0
            if prefix >= 0 and codec is not None:
                frame = memoryview(payload)[at + 8 : at + length]
                packed.setdefault(k, []).append((frame, prefix, codec))
    lines = [
        "| buffer | compressed | as it is | stored MB | decompressed to MB | "
        "decompressed alone, µs a message |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for k, (compressed, as_is, stored, decoded) in sorted(counts.items()):
        name = names[k] if k < len(names) else str(k)
        cpu = decompress_cpu(packed[k], repeat) if k in packed else 0.0
        lines.append(
            f"| {name} | {compressed:,} | {as_is:,} | {stored / 1e6:,.1f} | "
            f"{decoded / 1e6:,.1f} | {1e6 * cpu / len(payloads):.1f} |"
        )
    return lines


def run(decode: Decode, payloads: list[Payload], options: pa.ipc.IpcReadOptions) -> float:
    start = time.process_time()
    for payload, schema, codec in payloads:
        decode(payload, schema, options, codec)
    return time.process_time() - start


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        prog="python -m bench.ipc_decode",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--store", type=Path, required=True, help="a bench.workload store")
    ap.add_argument("--repeat", type=int, default=7, help="runs of each way, in turn")
    args = ap.parse_args(argv)
    payloads = collect(LocalStore(args.store))
    if not payloads:
        raise SystemExit(f"{args.store}: no compressed batch messages")
    keys = list(field_indices(PHASE1_FIELDS))
    decodes = {
        "whole": pa.ipc.IpcReadOptions(use_threads=False),
        "offsets and keys": pa.ipc.IpcReadOptions(included_fields=keys, use_threads=False),
    }
    plain = uncompressed(payloads)
    timed = {way: (decode, payloads) for way, decode in WAYS.items()}
    timed[UNCOMPRESSED] = (ipc.read_compressed, plain)
    for options in decodes.values():
        for (payload, schema, codec), (bare, _, _) in zip(payloads, plain, strict=True):
            kept, fresh = (decode(payload, schema, options, codec) for decode in WAYS.values())
            if not kept.equals(fresh) or not kept.equals(
                ipc.read_compressed(bare, schema, options, None)
            ):
                raise SystemExit("the ways decoded different batches")
    mb = sum(len(p) for p, _, _ in payloads) / 1e6
    print(f"{len(payloads):,} compressed batch messages, {mb:,.1f} MB, {args.repeat} runs each")
    print("| decode | way | median CPU s | range | µs a message |")
    print("|---|---|---:|---:|---:|")
    for label, options in decodes.items():
        times: dict[str, list[float]] = {way: [] for way in timed}
        for i in range(args.repeat):
            for way in timed if i % 2 == 0 else reversed(timed):
                decode, messages = timed[way]
                times[way].append(run(decode, messages, options))
        for way, t in times.items():
            median = statistics.median(t)
            print(
                f"| {label} | {way} | {median:.3f} | {min(t):.3f}-{max(t):.3f} "
                f"| {1e6 * median / len(payloads):.1f} |"
            )
    print()
    print("\n".join(buffer_table(payloads, args.repeat)))


if __name__ == "__main__":
    main()
