"""What bounds a job's memory, and phase 1's partial decoding (docs/ARCHITECTURE.md §5 and §7)."""

from __future__ import annotations

import io
from pathlib import Path

import pyarrow as pa
import pytest

from compactor.fileformat import (
    RECORD_SCHEMA,
    FormatError,
    Record,
    StreamReader,
    records_to_batch,
    write_file,
)
from compactor.fileformat.reader import decode_fields
from compactor.objectstore.local import LocalStore
from compactor.worker.partition import phase1_fields
from compactor.worker.policy import PartitionPolicy
from compactor.worker.runner import (
    MAX_STREAM_BUFFER,
    MIN_STREAM_BUFFER,
    READ_MEMORY_BUDGET,
    stream_buffer_size,
)


def test_stream_buffers_share_a_fixed_budget() -> None:
    for inputs in (1, 2, 5, 23, 33, 100, 161, 256, 512):
        size = stream_buffer_size(inputs)
        assert MIN_STREAM_BUFFER <= size <= MAX_STREAM_BUFFER
        assert size % 4096 == 0
        assert 2 * inputs * size <= max(READ_MEMORY_BUDGET, 2 * inputs * MIN_STREAM_BUFFER)
    assert stream_buffer_size(161) * 2 * 161 <= READ_MEMORY_BUDGET
    assert stream_buffer_size(10_000) == MIN_STREAM_BUFFER
    assert stream_buffer_size(1) == MAX_STREAM_BUFFER


def test_local_stream_buffer_size(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    data = bytes(range(256)) * 1000
    store.put("o", data)
    with store.open_stream("o", buffer_size=4096) as s:
        got = s.read(10) + s.read(100_000) + s.read(-1)
    assert got == data
    with pytest.raises(ValueError):
        store.open_stream("o", buffer_size=0)


def _records(n: int) -> list[Record]:
    return [
        Record(
            offset=10 + 2 * i,
            timestamp=1_700_000_000_000 + i,
            key=None if i % 7 == 0 else f"k{i % 13}".encode(),
            value=None if i % 5 == 0 else b"v" * (i % 300),
            headers=(("h", (i).to_bytes(8, "big")),) if i % 3 else (),
        )
        for i in range(n)
    ]


@pytest.mark.parametrize("compression", [None, "zstd", "lz4"])
def test_partial_decode_matches_the_whole(compression: str | None) -> None:
    batch = records_to_batch(_records(3000))
    buf = io.BytesIO()
    write_file(buf, [("t", 0, [batch])], compression=compression, max_batch_bytes=64 << 10)
    for fields in (("offset", "key"), ("key", "timestamp"), ("offset", "key", "headers")):
        whole, partial = [], []
        reader = StreamReader(io.BytesIO(buf.getvalue()), object_name="f")
        for section in reader.sections():
            partial += list(section.batches(fields))
        reader = StreamReader(io.BytesIO(buf.getvalue()), object_name="f")
        for section in reader.sections():
            whole += list(section.batches())
        assert reader.footer is not None
        assert len(whole) == len(partial) > 1
        for w, p in zip(whole, partial, strict=True):
            names = [n for n in RECORD_SCHEMA.names if n in fields or n == "offset"]
            assert p.schema.names == names
            assert p.equals(w.select(names))


def test_partial_decode_still_checks_offset_order() -> None:
    bad = records_to_batch(_records(50))
    # A batch payload whose offsets decrease: encode by hand, bypassing the writer's checks.
    options = pa.ipc.IpcWriteOptions(compression="zstd")
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, RECORD_SCHEMA, options=options) as w:
        w.write_batch(bad.take(pa.array(list(reversed(range(50))))))
    stream = sink.getvalue().to_pybytes()
    # The batch message follows the schema message and precedes the end-of-stream marker.
    schema_sink = pa.BufferOutputStream()
    pa.ipc.new_stream(schema_sink, RECORD_SCHEMA).close()
    prefix = len(schema_sink.getvalue()) - 8
    payload = stream[prefix:-8]
    with pytest.raises(FormatError, match="offsets do not strictly increase"):
        decode_fields(payload, 100, "f", ("offset", "key"))


def test_phase1_fields() -> None:
    def policy(strategy: str, lag: int | None) -> PartitionPolicy:
        return PartitionPolicy(
            deduplicate=True,
            strategy=strategy,
            header="h" if strategy == "header" else None,
            lag_cutoff_ms=lag,
            retention_cutoff_ms=None,
            tombstones_droppable=False,
            now_ms=0,
            horizon_ms=0,
        )

    assert phase1_fields(policy("offset", None)) == ("offset", "key")
    assert set(phase1_fields(policy("offset", 5))) == {"offset", "key", "timestamp"}
    assert set(phase1_fields(policy("timestamp", None))) == {"offset", "key", "timestamp"}
    assert set(phase1_fields(policy("header", None))) == {
        "offset",
        "key",
        "timestamp",
        "headers",
    }
