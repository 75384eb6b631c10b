"""A zstd batch message is decompressed by the thread's kept zstd context before Arrow reads
it (``_sections.zstd_stored_as_is``, called by ``ipc.read_compressed``).

The rewritten message must decode, whole or some fields, to exactly what Arrow's own codec
decodes from the original; its buffers must be the original's decompressed and stored as
they are; and anything it cannot decompress exactly must be left to Arrow, whose error a
reader then reports, so a bad payload is refused as before.
"""

from __future__ import annotations

import os
import struct
import threading

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compactor.fileformat import FormatError, _sections, ipc
from compactor.fileformat.field_decode import decode_fields
from compactor.fileformat.framing import MAX_DECODED_BATCH
from compactor.fileformat.ipc import MIN_SAVINGS, BatchEncoder, decode_batch
from compactor.fileformat.records import RECORD_SCHEMA, RECORD_SCHEMA_V1
from tests.test_buffers_as_is import STORED_AS_IS, batches, buffers, layout, prefix
from tests.test_kept_readers import batch_of, fresh_decode, payload_of

needs_kept_zstd = pytest.mark.skipif(
    not _sections.KEPT_ZSTD_CONTEXT and os.environ.get("COMPACTOR_EXPECT_KEPT_ZSTD") != "1",
    reason="built without libzstd: Arrow decodes zstd (test_the_build_keeps_a_context)",
)
ALL = (1 << ipc.BUFFERS) - 1
FIELDS = [None, [0, 2], [0, 1, 2], [0, 4], [0, 2, 5]]
"""Read options' included fields: all; phase 1's under each strategy; headers; horizons."""


_OPTIONS: dict[tuple[int, ...] | None, pa.ipc.IpcReadOptions] = {}


def options_of(fields: list[int] | None) -> pa.ipc.IpcReadOptions:
    """Read options for ``fields`` (None: all), one object each, as the decoders keep."""
    key = None if fields is None else tuple(fields)
    if key not in _OPTIONS:
        _OPTIONS[key] = pa.ipc.IpcReadOptions(included_fields=fields or [], use_threads=False)
    return _OPTIONS[key]


def test_the_build_keeps_a_context() -> None:
    """Where .ci/run installed libzstd (``COMPACTOR_EXPECT_KEPT_ZSTD=1``) the reader's
    module was built with it, as the encoder was."""
    expected = os.environ.get("COMPACTOR_EXPECT_KEPT_ZSTD")
    if expected is None:
        pytest.skip("no expectation set (COMPACTOR_EXPECT_KEPT_ZSTD)")
    assert _sections.KEPT_ZSTD_CONTEXT is (expected == "1")


def test_wanted_buffers_follow_the_schema() -> None:
    assert ipc.wanted_buffers(RECORD_SCHEMA, None) == ALL
    assert ipc.wanted_buffers(RECORD_SCHEMA_V1, None) == (1 << ipc.BUFFERS_V1) - 1
    assert ipc.wanted_buffers(RECORD_SCHEMA, [0, 2]) == 0b11 | 0b111 << 4
    assert ipc.wanted_buffers(RECORD_SCHEMA, [4]) == ((1 << 9) - 1) << 10
    assert ipc.wanted_buffers(RECORD_SCHEMA, [5]) == 0b11 << 19


@needs_kept_zstd
@settings(max_examples=120, deadline=None)
@given(
    batch=batches(),
    v1=st.booleans(),
    fields=st.sampled_from(FIELDS),
    min_savings=st.sampled_from([None, 0.0, MIN_SAVINGS["lz4"], 1.0]),
)
def test_a_rewritten_message_decodes_as_arrows_codec_does(
    batch: pa.RecordBatch, v1: bool, fields: list[int] | None, min_savings: float | None
) -> None:
    """Any batch, either schema, any fields; Arrow's own message (every buffer
    compressed) or one whose buffers are stored as they are where zstd did not pay."""
    schema = RECORD_SCHEMA_V1 if v1 else RECORD_SCHEMA
    if v1 and fields is not None and 5 in fields:
        fields = [0, 2]
    if v1 or min_savings is None:
        payload = payload_of(batch, schema, "zstd")
    else:
        payload = BatchEncoder("zstd", 0, min_savings).encode(batch, 1 << 20)
    options = options_of(fields)
    wanted = ipc.wanted_buffers(schema, fields)
    stored = _sections.zstd_stored_as_is(payload, wanted, MAX_DECODED_BATCH)
    assert stored is not None
    original, plain = buffers(payload), buffers(stored)
    assert len(original) == len(plain)
    for i, (was, now) in enumerate(zip(original, plain, strict=True)):
        if not was or not wanted >> i & 1:
            assert now == b""
        elif prefix(was) == STORED_AS_IS:
            assert now == was
        else:
            assert prefix(now) == STORED_AS_IS and len(now) == 8 + prefix(was)
    got = ipc.read_compressed(payload, schema, options, "zstd")
    got.validate(full=True)
    assert pa.Table.from_batches([got]).equals(fresh_decode(payload, schema, options))


@needs_kept_zstd
@pytest.mark.parametrize("rows", [1, 40, 5_000])
def test_decoders_take_the_kept_context_and_agree(rows: int) -> None:
    """``decode_batch`` and ``decode_fields`` on a zstd payload: the same batches as the
    uncompressed message of the same records."""
    batch = batch_of(rows, rows)
    zstd = payload_of(batch, RECORD_SCHEMA, "zstd")
    plain = payload_of(batch, RECORD_SCHEMA, None)  # type: ignore[arg-type]
    assert decode_batch(zstd, 0, "t").equals(decode_batch(plain, 0, "t"))
    for names in (["key"], ["key", "timestamp"], ["headers"], ["delete_horizon"]):
        assert decode_fields(zstd, 0, "t", names).equals(decode_fields(plain, 0, "t", names))


def _first_compressed(payload: bytes) -> tuple[int, int, int]:
    """The position in the payload, stored length and declared size of its first buffer
    that zstd compressed."""
    body = 8 + struct.unpack_from("<i", payload, 4)[0]
    _, _, spans = layout(payload[8:body])
    for (off, length), buffer in zip(spans, buffers(payload), strict=True):
        if buffer and prefix(buffer) != STORED_AS_IS:
            return body + off, length, prefix(buffer)
    raise AssertionError("no compressed buffer")


def _spoiled(payload: bytes, how: str) -> bytes:
    at, length, declared = _first_compressed(payload)
    bad = bytearray(payload)
    if how == "declared-longer":
        struct.pack_into("<q", bad, at, declared + 1)
    elif how == "declared-shorter":
        struct.pack_into("<q", bad, at, declared - 1)
    else:  # a frame whose magic number is gone
        bad[at + 8 : at + 12] = b"\0\0\0\0"
    return bytes(bad)


@needs_kept_zstd
@pytest.mark.parametrize("how", ["declared-longer", "declared-shorter", "not-a-frame"])
def test_what_does_not_decompress_exactly_is_left_to_arrow(how: str) -> None:
    """A buffer that does not decompress to its declared size is not rewritten: Arrow
    reads the payload as it is and fails, the decoders say so as a FormatError naming the
    object and position, and the next payload decodes."""
    batch = batch_of(9, 3_000)
    payload = payload_of(batch, RECORD_SCHEMA, "zstd")
    bad = _spoiled(payload, how)
    assert _sections.zstd_stored_as_is(bad, ALL, MAX_DECODED_BATCH) is None
    for decode in (
        lambda p: decode_batch(p, 100, "data/x.cf"),
        lambda p: decode_fields(p, 100, "data/x.cf", ["key"]),
    ):
        with pytest.raises(FormatError, match="data/x.cf: byte 100: "):
            decode(bad)
        assert decode(payload).num_rows == 3_000


def _relaid(payload: bytes, skew: int = 0, skewed: int = -1, meta_pad: int = 0) -> bytes:
    """``payload`` with its body laid out again, buffer by buffer at 8-aligned offsets
    but buffer ``skewed`` ``skew`` bytes later, and its metadata ``meta_pad`` bytes
    longer: the same message to Arrow, but for where its buffers start."""
    body = 8 + struct.unpack_from("<i", payload, 4)[0]
    meta = bytearray(payload[8:body]) + bytes(meta_pad)
    body_length_at, vector, spans = layout(payload[8:body])
    new = bytearray()
    for i, (off, length) in enumerate(spans):
        new += bytes(-len(new) % 8 + (skew if i == skewed else 0))
        struct.pack_into("<qq", meta, vector + 16 * i, len(new), length)
        new += payload[body + off : body + off + length]
    new += bytes(-len(new) % 8)
    struct.pack_into("<q", meta, body_length_at, len(new))
    return b"\xff\xff\xff\xff" + struct.pack("<i", len(meta)) + bytes(meta) + bytes(new)


@needs_kept_zstd
def test_a_buffer_arrow_refuses_for_its_place_is_still_refused() -> None:
    """Arrow refuses a buffer that does not start 8-aligned in the body; the rewrite,
    which places every buffer anew, must not make such a payload decodable."""
    payload = payload_of(batch_of(1, 500), RECORD_SCHEMA, "zstd")
    assert decode_batch(_relaid(payload), 0, "t").num_rows == 500  # the relayout is sound
    bad = _relaid(payload, skew=3, skewed=5)
    assert _sections.zstd_stored_as_is(bad, ALL, MAX_DECODED_BATCH) is None
    with pytest.raises(FormatError, match="8-byte aligned"):
        decode_batch(bad, 0, "t")
    key_buffers = ipc.wanted_buffers(RECORD_SCHEMA, [0, 2])
    assert _sections.zstd_stored_as_is(bad, key_buffers, MAX_DECODED_BATCH) is None


@needs_kept_zstd
def test_metadata_of_an_odd_length_is_left_to_arrow() -> None:
    """A body that does not start 8-aligned in the payload would give misaligned arrays
    once rewritten: declined, and Arrow decodes it as before."""
    payload = _relaid(payload_of(batch_of(1, 500), RECORD_SCHEMA, "zstd"), meta_pad=4)
    assert _sections.zstd_stored_as_is(payload, ALL, MAX_DECODED_BATCH) is None
    assert decode_batch(payload, 0, "t").equals(decode_batch(_relaid(payload), 0, "t"))


@needs_kept_zstd
@pytest.mark.parametrize("cap", [MAX_DECODED_BATCH, (1 << 62) - 1, (1 << 63) - 1])
def test_declared_sizes_that_would_overflow_are_declined(cap: int) -> None:
    """Two buffers each declaring nearly 2^63 bytes: no sum may wrap, whatever cap the
    caller gives; nothing is allocated or written."""
    payload = bytearray(payload_of(batch_of(1, 3_000), RECORD_SCHEMA, "zstd"))
    body = 8 + struct.unpack_from("<i", payload, 4)[0]
    _, _, spans = layout(bytes(payload[8:body]))
    wanted = 0
    for i, (off, length) in enumerate(spans):
        if length >= 8 and struct.unpack_from("<q", payload, body + off)[0] >= 0:
            struct.pack_into("<q", payload, body + off, (1 << 63) - 16)
            wanted |= 1 << i
    assert bin(wanted).count("1") >= 2
    assert _sections.zstd_stored_as_is(bytes(payload), wanted, cap) is None
    assert _sections.usual_message(bytes(payload), False, cap, 1) is None


@needs_kept_zstd
def test_a_mapped_payload_is_read_in_place() -> None:
    """A memoryview, as the local store maps a long payload, and a view into a larger
    buffer, as the same payload read among others."""
    payload = payload_of(batch_of(2, 2_000), RECORD_SCHEMA, "zstd")
    expected = _sections.zstd_stored_as_is(payload, ALL, MAX_DECODED_BATCH)
    assert expected is not None
    inside = memoryview(bytes(16) + payload + bytes(8))[16 : 16 + len(payload)]
    for view in (memoryview(payload), inside):
        assert _sections.zstd_stored_as_is(view, ALL, MAX_DECODED_BATCH) == expected


@needs_kept_zstd
def test_the_decoders_rewrite_every_zstd_message(monkeypatch: pytest.MonkeyPatch) -> None:
    """``decode_batch`` and ``decode_fields`` go through the rewrite for a zstd message
    (not Arrow's codec), and it accepts each."""
    rewrite = _sections.zstd_stored_as_is
    results: list[bool] = []

    def watched(payload: object, wanted: int, cap: int) -> bytes | None:
        out = rewrite(payload, wanted, cap)
        results.append(out is not None)
        return out

    monkeypatch.setattr(_sections, "zstd_stored_as_is", watched)
    payload = payload_of(batch_of(3, 700), RECORD_SCHEMA, "zstd")
    decode_batch(payload, 0, "t")
    decode_fields(payload, 0, "t", ["key"])
    decode_batch(payload_of(batch_of(3, 700), RECORD_SCHEMA, "lz4"), 0, "t")
    assert results == [True, True]


@pytest.mark.parametrize("codec", ["lz4", None])
def test_other_codecs_are_left_to_arrow(codec: str | None) -> None:
    payload = payload_of(batch_of(3, 100), RECORD_SCHEMA, codec)  # type: ignore[arg-type]
    assert _sections.zstd_stored_as_is(payload, ALL, MAX_DECODED_BATCH) is None


def test_a_message_over_the_cap_is_left_to_arrows_checks() -> None:
    payload = payload_of(batch_of(5, 2_000), RECORD_SCHEMA, "zstd")
    assert _sections.zstd_stored_as_is(payload, ALL, 1_000) is None
    assert _sections.zstd_stored_as_is(payload[:-9], ALL, MAX_DECODED_BATCH) is None


@needs_kept_zstd
def test_threads_that_come_and_go_each_decode_with_a_context() -> None:
    """Each thread makes its own context (freed when it ends); many short threads and a
    few long ones decode the same payloads alike."""
    work = [payload_of(batch_of(s, 50 * s + 1), RECORD_SCHEMA, "zstd") for s in range(1, 9)]
    expected = [fresh_decode(p, RECORD_SCHEMA, options_of(None)) for p in work]
    failures: list[int] = []

    def run(rounds: int) -> None:
        for _ in range(rounds):
            for i, payload in enumerate(work):
                batch = ipc.read_compressed(payload, RECORD_SCHEMA, options_of(None), "zstd")
                if not pa.Table.from_batches([batch]).equals(expected[i]):
                    failures.append(i)

    for wave in range(10):
        threads = [threading.Thread(target=run, args=(1 + 5 * (wave == k),)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert failures == []
