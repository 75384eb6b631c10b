"""The compiled batch encoder (``fileformat/_encoder.cpp``): its refusals, its thread's
end, and a writer whose encoding fails."""

from __future__ import annotations

import io
import threading

import pyarrow as pa
import pytest

from compactor.fileformat import _encoder
from compactor.fileformat.records import RECORD_SCHEMA, Record, records_to_batch
from compactor.fileformat.writer import FileWriter


def _batch(n: int, start: int = 0) -> pa.RecordBatch:
    return records_to_batch(
        [Record(start + i, 1_000 + i, b"key-%d" % (i % 7), b"value %d" % i * 20) for i in range(n)]
    )


def _decoded(payload: bytes) -> pa.RecordBatch:
    return pa.ipc.read_record_batch(pa.ipc.read_message(payload), RECORD_SCHEMA)


def test_refuses_what_it_cannot_take() -> None:
    with pytest.raises(ValueError, match="codec must be"):
        _encoder.Encoder("snappy")
    encoder = _encoder.Encoder("zstd")
    with pytest.raises(ValueError, match="PyCapsule"):
        encoder.encode(("not", "capsules"))
    with pytest.raises(TypeError):
        encoder.encode(_batch(3))  # type: ignore[arg-type]
    capsules = _batch(3).__arrow_c_array__()
    encoder.encode(capsules)
    with pytest.raises(ValueError, match="already taken"):
        encoder.encode(capsules)


def test_a_closed_encoder_drops_what_waits_and_still_encodes_here() -> None:
    encoder = _encoder.Encoder("zstd")
    batch = _batch(20_000)
    queued = [encoder.submit(batch.__arrow_c_array__()) for _ in range(30)]
    encoder.close()
    encoder.close()  # idempotent
    outcomes = []
    for encoding in queued:
        assert encoding.done() or True  # answers without waiting
        try:
            outcomes.append(_decoded(encoding.result()).equals(batch))
        except RuntimeError as exc:
            assert "closed first" in str(exc)
            outcomes.append(None)
    assert None in outcomes  # at least the last ones were never encoded
    assert all(o in (True, None) for o in outcomes)
    with pytest.raises(RuntimeError, match="closed"):
        encoder.submit(batch.__arrow_c_array__())
    assert _decoded(encoder.encode(batch.__arrow_c_array__())).equals(batch)


def test_encodes_from_several_threads_at_once() -> None:
    encoder = _encoder.Encoder("zstd")
    batches = [_batch(500 + i, start=10_000 * i) for i in range(8)]
    expected = [_encoder.Encoder("zstd").encode(b.__arrow_c_array__()) for b in batches]
    got: dict[int, bytes] = {}

    def encode(i: int) -> None:
        for _ in range(20):
            got[i] = encoder.encode(batches[i].__arrow_c_array__())

    threads = [threading.Thread(target=encode, args=(i,)) for i in range(len(batches))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [got[i] for i in range(len(batches))] == expected


def test_a_block_whose_encoding_fails_fails_finish_and_writes_nothing_of_it() -> None:
    """An encoding that never comes (the thread closed while the block waited behind a
    long batch) surfaces when the block's turn comes, and the block stays first in line:
    ``finish`` fails, and fails again, rather than writing a file without it."""
    sink = io.BytesIO()
    writer = FileWriter(sink, encode_ahead=True, share_below=128 << 10, min_compress_bytes=0)
    for p in range(3):
        writer.write_section("t", p, [_batch(200, start=1_000 * p)])
    busy = writer._encoder.submit(_batch(300_000))  # about a tenth of a second of zstd
    writer._write_block()  # the block, closed, waits behind it
    writer._encoder.close()  # the thread ends after the long batch: the block is dropped
    assert _decoded(busy.result()).num_rows == 300_000
    written = sink.tell()
    with pytest.raises(RuntimeError, match="closed first"):
        writer.finish()
    assert sink.tell() == written  # nothing of the block, no footer
    with pytest.raises(RuntimeError, match="closed first"):
        writer.finish()
    assert sink.tell() == written
    writer.close()


def test_a_block_that_cannot_be_submitted_stays_open() -> None:
    """An error where a block is handed over leaves it the open block: ``finish`` fails
    too, without writing it."""
    sink = io.BytesIO()
    writer = FileWriter(sink, encode_ahead=True, share_below=128 << 10, min_compress_bytes=0)
    for p in range(3):
        writer.write_section("t", p, [_batch(200, start=1_000 * p)])
    writer._encoder.close()
    written = sink.tell()
    for _ in range(2):
        with pytest.raises(RuntimeError, match="encoder is closed"):
            writer.finish()
        assert sink.tell() == written
    writer.close()
