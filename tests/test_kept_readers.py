"""Compressed batch messages are decoded by one Arrow stream reader kept per thread, per
schema and per read options (``ipc.read_compressed``). It must decode every payload as a
stream opened for that payload alone would, and a payload it fails on must not spoil the
next one."""

from __future__ import annotations

import random
import struct
import threading
from collections.abc import Callable

import pyarrow as pa
import pytest

from compactor.fileformat import FormatError, Record, ipc, records_to_batch
from compactor.fileformat.field_decode import decode_fields
from compactor.fileformat.records import RECORD_SCHEMA, RECORD_SCHEMA_V1

WHOLE = pa.ipc.IpcReadOptions(use_threads=False)
KEYS = pa.ipc.IpcReadOptions(included_fields=[0, 2], use_threads=False)


def batch_of(seed: int, n: int) -> pa.RecordBatch:
    rng = random.Random(seed)
    return records_to_batch(
        [
            Record(
                i,
                1_700_000_000_000 + i,
                b"key-%d" % rng.randrange(n),
                None if rng.random() < 0.1 else rng.randbytes(rng.randrange(200)) * 3,
                (("h", b"v"),) if i % 7 == 0 else (),
            )
            for i in range(n)
        ]
    )


def payload_of(batch: pa.RecordBatch, schema: pa.Schema, codec: str) -> bytes:
    """The batch message a stream writer of ``schema`` writes for ``batch``."""
    batch = pa.RecordBatch.from_arrays(batch.columns[: len(schema)], schema=schema)
    sink = pa.BufferOutputStream()
    options = pa.ipc.IpcWriteOptions(compression=codec)
    with pa.ipc.new_stream(sink, schema, options=options) as writer:
        writer.write_batch(batch)
    stream = sink.getvalue().to_pybytes()
    schema_message = ipc._SCHEMA_MESSAGES[len(schema)]
    assert stream.startswith(schema_message)
    return bytes(stream[len(schema_message) : -8])  # without the end-of-stream marker


def fresh_decode(payload: bytes, schema: pa.Schema, options: pa.ipc.IpcReadOptions) -> pa.Table:
    """What a stream opened for this payload alone decodes."""
    stream = pa.py_buffer(ipc._SCHEMA_MESSAGES[len(schema)] + payload)
    return pa.ipc.open_stream(stream, options=options).read_all()


Case = tuple[bytes, pa.Schema, pa.ipc.IpcReadOptions, str]
"""A payload, its schema, the read options, its codec."""


def cases(count: int, seed: int) -> list[Case]:
    rng = random.Random(seed)
    out = []
    for i in range(count):
        schema = rng.choice([RECORD_SCHEMA, RECORD_SCHEMA_V1])
        codec = rng.choice(["lz4", "zstd"])
        payload = payload_of(batch_of(seed * 1000 + i, rng.randrange(1, 300)), schema, codec)
        out.append((payload, schema, rng.choice([WHOLE, KEYS]), codec))
    return out


def test_interleaved_schemas_and_options_decode_as_fresh_streams() -> None:
    for payload, schema, options, codec in cases(60, seed=1):
        batch = ipc.read_compressed(payload, schema, options, codec)
        assert pa.Table.from_batches([batch]).equals(fresh_decode(payload, schema, options))


@pytest.mark.parametrize(
    "spoil",
    [
        pytest.param(lambda p: p[: len(p) - 5], id="truncated"),
        pytest.param(lambda p: p + bytes(8), id="trailing-bytes"),
        pytest.param(lambda p: p + p, id="two-messages"),
        pytest.param(lambda p: p[:-64] + bytes(64), id="zeroed-tail"),
    ],
)
def test_a_failed_payload_leaves_the_next_one_decodable(spoil: Callable[[bytes], bytes]) -> None:
    good = [(p, s, c) for p, s, _, c in cases(4, seed=2)]
    for payload, schema, codec in good:
        ipc.read_compressed(payload, schema, WHOLE, codec)  # the thread's reader exists
    bad, schema, codec = good[0]
    with pytest.raises((ValueError, OSError)):  # as Arrow raised it, or the feed's check
        ipc.read_compressed(spoil(bad), schema, WHOLE, codec)
    assert (len(schema), WHOLE) not in ipc._kept.readers  # dropped, not fed again
    for payload, schema, codec in good:
        batch = ipc.read_compressed(payload, schema, WHOLE, codec)
        assert pa.Table.from_batches([batch]).equals(fresh_decode(payload, schema, WHOLE))


def test_trailing_bytes_are_named() -> None:
    payload, schema, _, codec = cases(1, seed=3)[0]
    with pytest.raises(ValueError, match="ends 3 bytes before its payload's end"):
        ipc.read_compressed(payload + b"abc", schema, WHOLE, codec)


def test_public_decoders_raise_format_errors_and_go_on() -> None:
    payload = payload_of(batch_of(4, 200), RECORD_SCHEMA, "lz4")
    body = 8 + struct.unpack_from("<i", payload, 4)[0]
    bad = bytearray(payload)  # the offsets' buffer claims one byte more than it holds:
    struct.pack_into("<q", bad, body, 200 * 8 + 1)  # the message's checks still pass
    for decode in (
        lambda p: ipc.decode_batch(p, 100, "data/x.cf"),
        lambda p: decode_fields(p, 100, "data/x.cf", ["key"]),
    ):
        with pytest.raises(FormatError, match="data/x.cf: byte 100: .*decompress"):
            decode(bytes(bad))
        assert decode(payload).num_rows == 200


def test_each_thread_decodes_with_its_own_reader() -> None:
    work = cases(40, seed=5)
    expected = [fresh_decode(p, s, o) for p, s, o, _ in work]
    failures: list[str] = []
    start = threading.Barrier(4)

    def run(shift: int) -> None:
        start.wait()
        for rounds in range(5):
            for i in range(len(work)):
                j = (i + shift + rounds) % len(work)
                payload, schema, options, codec = work[j]
                batch = ipc.read_compressed(payload, schema, options, codec)
                if not pa.Table.from_batches([batch]).equals(expected[j]):
                    failures.append(f"thread {shift}: case {j}")

    threads = [threading.Thread(target=run, args=(k * 7,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
