"""What bounds a job's memory, and phase 1's partial decoding (docs/ARCHITECTURE.md §5 and §7)."""

from __future__ import annotations

import io
import os
import platform
import subprocess
import sys
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
from compactor.worker.pointer import (
    MAX_STREAM_BUFFER,
    MIN_STREAM_BUFFER,
    READ_MEMORY_BUDGET,
    stream_buffer_size,
)
from compactor.worker.policy import PartitionPolicy


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


_FAULTS_OF_FREED_BATCHES = """
import resource, sys, threading
from compactor.worker.memory import keep_freed_batches, use_lean_memory_pool
if sys.argv[1] == "job":
    use_lean_memory_pool()  # what every job's write_outputs calls
print("kept" if sys.argv[1] == "ask" and keep_freed_batches() else "default")

def batches():  # a job's pattern: blocks of a few hundred KiB, allocated and freed, on two threads
    for i in range(200):
        blocks = [bytearray(300_000 + 1000 * (i % 7) * k) for k in range(4)]
        del blocks

before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
thread = threading.Thread(target=batches)
thread.start()
thread.join()
batches()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _faults(mode: str, **env: str) -> tuple[str, int]:
    done = subprocess.run(
        [sys.executable, "-c", _FAULTS_OF_FREED_BATCHES, mode],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        check=True,
    )
    said, faults = done.stdout.split()
    return said, int(faults)


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc malloc's settings")
def test_a_job_reuses_freed_batch_memory_instead_of_faulting_it_in_again() -> None:
    """worker.memory.keep_freed_batches: with glibc's default thresholds, blocks of a few
    hundred KiB freed and allocated again come back as new pages (a page fault per 4 KiB);
    after a job's memory set-up they reuse the freed heap. An operator's own malloc
    settings are left alone."""
    _, default = _faults("none")
    _, after_job = _faults("job")
    assert default > 20_000  # 200 rounds of about 1.2 MiB, faulted in again each time
    assert after_job * 20 < default
    said, untouched = _faults("ask", GLIBC_TUNABLES="glibc.malloc.trim_threshold=131072")
    assert said == "default" and untouched * 20 > default
    said, _ = _faults("ask", MALLOC_TRIM_THRESHOLD_="131072")
    assert said == "default"
    said, _ = _faults("ask")
    assert said == "kept"
