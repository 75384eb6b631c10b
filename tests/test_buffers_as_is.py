"""An lz4 batch's buffers are compressed only where it pays (``ipc._BufferWise``).

The messages are read back by Arrow (the records must survive), and their buffers are
walked here by a reader of Arrow's flatbuffer metadata of this file's own, against Arrow's
messages for the same batch with every buffer compressed (its IPC stream writer) and with
none: each buffer of the result must be one or the other, as the rule says.
"""

from __future__ import annotations

import random
import struct

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compactor.fileformat import ipc
from compactor.fileformat.ipc import (
    MIN_SAVINGS,
    MIN_SAVINGS_INTEGERS,
    RETRY_EVERY,
    BatchEncoder,
    decode_batch,
    inspect_message,
)
from compactor.fileformat.records import Record, records_to_batch

STORED_AS_IS = -1


def _table(data: bytes, pos: int) -> tuple[int, list[int]]:
    vtable = pos - struct.unpack_from("<i", data, pos)[0]
    size = struct.unpack_from("<H", data, vtable)[0]
    slots = struct.unpack_from(f"<{(size - 4) // 2}H", data, vtable + 4)
    return pos, [pos + s if s else 0 for s in slots]


def layout(meta: bytes) -> tuple[int, int, list[tuple[int, int]]]:
    """Where a message's metadata holds its bodyLength and its buffers' vector (the
    first pair's position), and each body buffer's (offset, length)."""
    _, message = _table(meta, struct.unpack_from("<I", meta, 0)[0])
    header = message[2] + struct.unpack_from("<I", meta, message[2])[0]
    _, batch = _table(meta, header)
    vector = batch[2] + struct.unpack_from("<I", meta, batch[2])[0]
    count = struct.unpack_from("<I", meta, vector)[0]
    flat = struct.unpack_from(f"<{2 * count}q", meta, vector + 4)
    return message[3], vector + 4, list(zip(flat[::2], flat[1::2], strict=True))


def buffers(payload: bytes) -> list[bytes]:
    """Each body buffer's bytes (empty ones too), found through the message's metadata."""
    meta_len = struct.unpack_from("<i", payload, 4)[0]
    meta, body = payload[8 : 8 + meta_len], payload[8 + meta_len :]
    body_length_at, _, spans = layout(meta)
    assert struct.unpack_from("<q", meta, body_length_at)[0] == len(body), "bodyLength"
    out = []
    for off, length in spans:
        assert off % 8 == 0 and off + length <= len(body)
        out.append(body[off : off + length])
    return out


def prefix(buffer: bytes) -> int:
    return int(struct.unpack_from("<q", buffer)[0])


values = st.one_of(
    st.none(),
    st.binary(max_size=120),  # random: no codec shrinks these
    st.sampled_from([b"", b"value " * 20, b"x" * 64, b'{"user": 1, "event": "click"}']),
)
keys = st.one_of(st.none(), st.binary(max_size=24), st.sampled_from([b"user-1", b"user-22"]))


@st.composite
def batches(draw: st.DrawFn) -> pa.RecordBatch:
    rows = draw(st.lists(st.tuples(keys, values, st.integers(1, 3)), min_size=1, max_size=300))
    records, offset = [], draw(st.integers(0, 1 << 40))
    for key, value, step in rows:
        offset += step
        headers = (("h", value[:4]),) if value and len(value) % 5 == 0 else ()
        records.append(Record(offset, 1_700_000_000_000 + offset, key, value, headers))
    return records_to_batch(records)


@settings(max_examples=150, deadline=None)
@given(
    batch=batches(),
    codec=st.sampled_from(["lz4", "zstd"]),
    min_savings=st.sampled_from([0.0, 0.1, MIN_SAVINGS["lz4"], 0.6, 1.0]),
)
def test_each_buffer_is_compressed_only_where_it_pays(
    batch: pa.RecordBatch, codec: str, min_savings: float
) -> None:
    payload = BatchEncoder(codec, 0, min_savings).encode(batch, 1 << 20)
    assert decode_batch(payload, 0, "t").equals(batch)
    arrows = ipc._StreamEncoder(codec).encode(batch)
    every = buffers(arrows)
    plain = buffers(BatchEncoder(None).encode(batch, 1 << 20))
    got = buffers(payload)
    assert len(got) == len(every) == len(plain)
    as_is = 0
    for mine, compressed, raw in zip(got, every, plain, strict=True):
        if not compressed:
            assert mine == compressed == raw == b""
            continue
        declared = prefix(compressed)
        if declared == STORED_AS_IS:  # Arrow's own choice where the codec would grow it
            assert prefix(mine) == STORED_AS_IS and mine[8:] == raw
            as_is += 1
            continue
        assert declared == len(raw)
        if len(compressed) - 8 > (1.0 - min_savings) * declared:
            assert prefix(mine) == STORED_AS_IS
            assert mine[8:] == raw
            as_is += 1
        else:
            assert mine == compressed
    decoded = inspect_message(payload, 0, "t").decoded
    assert decoded == sum(len(raw) for raw in plain)
    if not as_is:
        assert payload == arrows


def test_random_values_and_offsets_are_stored_as_is_and_zeros_compressed() -> None:
    """The shape of this system's benchmark workloads: lz4 cannot shrink random values,
    shrinks a batch's offsets and timestamps by about half, less than the threshold, and
    a buffer of zeros (no record has a delete horizon) by far more."""
    rng = random.Random(7)
    batch = records_to_batch(
        [
            Record(1000 + i, 1_700_000_000_000 + i, b"k%d" % i, rng.randbytes(100))
            for i in range(2000)
        ]
    )
    got = buffers(BatchEncoder("lz4", 0).encode(batch, 1 << 20))
    offsets, value_data = got[1], got[9]  # the offset column's data, the value column's data
    horizons = got[-1]  # the delete horizons' data: zeros, every one null
    assert prefix(value_data) == STORED_AS_IS
    assert prefix(offsets) == STORED_AS_IS and len(offsets) == 8 + 2000 * 8
    assert prefix(horizons) == 2000 * 8 and len(horizons) < 2000 * 8 * (1 - MIN_SAVINGS["lz4"])
    assert MIN_SAVINGS_INTEGERS["lz4"] > MIN_SAVINGS["lz4"]
    explicit = buffers(BatchEncoder("lz4", 0, MIN_SAVINGS["lz4"]).encode(batch, 1 << 20))
    assert prefix(explicit[1]) == 2000 * 8  # a threshold given holds for every buffer
    assert len(explicit[1]) < 2000 * 8 * (1 - MIN_SAVINGS["lz4"])


def test_a_threshold_outside_zero_to_one_is_refused() -> None:
    with pytest.raises(ValueError, match="min_savings"):
        BatchEncoder("lz4", 0, 1.5)


def test_the_as_is_golden_mixes_stored_and_compressed_buffers() -> None:
    """``tests/golden/v2-lz4-as-is.kcf`` (the spec tests read it with pyarrow alone) holds
    one lz4 batch whose long values are LZ4 frames and whose few-byte buffers, which lz4
    would not shrink, are stored as is; ``v2-zstd.kcf``, the same records in zstd by
    Arrow's writer, compresses every buffer."""
    from test_format_spec import GOLDEN, walk

    def kinds(name: str) -> set[str]:
        (section,) = walk((GOLDEN / name).read_bytes()).sections
        ((_, payload),) = section.batches
        return {
            "as is" if prefix(b) == STORED_AS_IS else "compressed" for b in buffers(payload) if b
        }

    assert kinds("v2-lz4-as-is.kcf") == {"as is", "compressed"}
    assert kinds("v2-zstd.kcf") == {"compressed"}


@pytest.mark.parametrize("codec", ["zstd", "lz4"])
def test_only_lz4_is_encoded_buffer_by_buffer_by_default(codec: str) -> None:
    """zstd batches are Arrow's IPC writer's messages, every buffer compressed; lz4's
    store a buffer that does not pay as it is."""
    rng = random.Random(5)
    batch = records_to_batch(
        [Record(i, i, rng.randbytes(8), rng.randbytes(100)) for i in range(1000)]
    )
    payload = BatchEncoder(codec, 0).encode(batch, 1 << 20)
    assert (payload == ipc._StreamEncoder(codec).encode(batch)) == (codec == "zstd")
    assert (prefix(buffers(payload)[9]) == STORED_AS_IS) == (codec == "lz4")


def test_a_buffer_that_did_not_pay_is_tried_again_at_the_retry() -> None:
    """Values that lz4 cannot shrink are stored as they are, and the encoder stops trying:
    values it could shrink, in the next batches, stay as they are until the retry, every
    ``RETRY_EVERY`` batches; from there they are compressed. The delete horizons' data
    (zeros: no record has one), which always pays, is compressed in every batch."""
    rng = random.Random(3)

    def batch(values: list[bytes]) -> pa.RecordBatch:
        return records_to_batch(
            [Record(i, 1_700_000_000_000 + i, b"k", v) for i, v in enumerate(values)]
        )

    random_values = batch([rng.randbytes(100) for _ in range(500)])
    text_values = batch([b"value " * 20 for _ in range(500)])
    encoder = BatchEncoder("lz4", 0)
    kinds = []
    for n in range(2 * RETRY_EVERY):
        got = buffers(encoder.encode(random_values if n == 0 else text_values, 1 << 20))
        kinds.append((prefix(got[-1]) != STORED_AS_IS, prefix(got[9]) != STORED_AS_IS))
    assert kinds == [(True, False)] * RETRY_EVERY + [(True, True)] * RETRY_EVERY
    assert decode_batch(encoder.encode(text_values, 1 << 20), 0, "t").equals(text_values)


def test_an_empty_batch_is_refused_and_the_encoder_still_works() -> None:
    """A message of no rows is no batch frame (FORMAT.md 6.2), and its metadata leaves
    the row count out: the encoder refuses it, whether or not the process has made its
    metadata template yet, and goes on encoding the next batches right."""
    empty = records_to_batch([])
    batch = records_to_batch([Record(7, 7, b"k", b"value " * 30)] * 1)
    for fresh in (True, False):
        if fresh:
            ipc._templates.clear()
        encoder = BatchEncoder("lz4", 0)
        with pytest.raises(ValueError, match="at least one row"):
            encoder.encode(empty, 1 << 20)
        payload = encoder.encode(batch, 1 << 20)
        assert inspect_message(payload, 0, "t").rows == 1
        assert decode_batch(payload, 0, "t").equals(batch)
    with pytest.raises(ValueError, match="row count"):  # the layout is never guessed
        ipc._layout(BatchEncoder(None).encode(empty, 0))
