"""A job that fails loses nothing: corrupt or truncated inputs, found by either pointer, with
phase 1 inline or on its own thread, end in a FormatError naming the object; the catalog,
the inputs and the store's objects are as they were, and no thread is left running."""

from __future__ import annotations

import io
import struct
import threading

import pyarrow as pa
import pytest
from worker_scenarios import make_topics

from compactor.catalog import Catalog, LiveFile
from compactor.catalog.changes import append_files
from compactor.fileformat import RECORD_SCHEMA, FileWriter, FormatError, reader
from compactor.fileformat.framing import FRAME_HEADER, TAG_BATCH, encode_frame_header
from compactor.objectstore import ObjectStore
from compactor.planner.job import Job, JobInput
from compactor.worker.kernel import KeyBuffer
from compactor.worker.pipeline import PHASE1_MODES, Phase1Mode
from compactor.worker.runner import run_job

NOW = 1_700_000_000_000
PARTITIONS = 3
RECORDS = 3_000  # per partition and file: compressed batches, values big enough to matter
JOB_THREADS = ("phase1-", "encode-")
"""Name prefixes of the threads a job starts (worker.pipeline, FileWriter's encode_ahead)."""


def _batch(file: int, partition: int) -> pa.RecordBatch:
    base = file * RECORDS
    return pa.RecordBatch.from_arrays(
        [
            pa.array(range(base, base + RECORDS), pa.int64()),
            pa.array([NOW] * RECORDS, pa.int64()),
            pa.array([b"key-%d-%d" % (partition, i % 500) for i in range(RECORDS)]),
            pa.array([b"value %d of file %d " % (i, file) * 4 for i in range(RECORDS)]),
            pa.array([[]] * RECORDS, RECORD_SCHEMA.field("headers").type),
            pa.nulls(RECORDS, pa.int64()),
        ],
        schema=RECORD_SCHEMA,
    )


def _file(file: int) -> bytes:
    sink = io.BytesIO()
    writer = FileWriter(sink, object_name=f"f{file}", max_batch_bytes=64 << 10)
    for p in range(PARTITIONS):
        writer.write_section("t", p, [_batch(file, p)])
    writer.finish()
    return sink.getvalue()


def _batch_frames(data: bytes) -> list[tuple[int, int]]:
    """(payload position, length) of every batch frame, found by walking the frames."""
    frames, at = [], 16
    while at + FRAME_HEADER.size <= len(data):
        tag, length, _ = FRAME_HEADER.unpack_from(data, at)
        if tag == TAG_BATCH:
            frames.append((at + FRAME_HEADER.size, length))
        at += FRAME_HEADER.size + length
        if tag == b"STRL":
            at += 8  # the section end
        elif tag == b"FOOT":
            break
    return frames


def _value_only_corruption(data: bytes) -> bytes:
    """``data`` with one batch of the last partition changed so that phase 1 (offsets and
    keys only) decodes it and phase 2 (whole records) cannot; its frame CRC is valid."""
    at, length = _batch_frames(data)[-2]
    payload = data[at : at + length]
    whole = reader.decode_fields(payload, at, "x", RECORD_SCHEMA.names)
    assert whole.num_rows
    for pos in range(len(payload) - 8, 8, -8):  # from the end: the value buffers come late
        bad = payload[:pos] + struct.pack("<q", 1 << 40) + payload[pos + 8 :]
        try:
            reader.decode_fields(bad, at, "x", ("offset", "key"))
        except FormatError:
            continue
        try:
            reader.decode_fields(bad, at, "x", RECORD_SCHEMA.names)
        except FormatError:
            header = encode_frame_header(TAG_BATCH, bad)
            start = at - FRAME_HEADER.size
            return data[:start] + header + bad + data[at + length :]
    raise AssertionError("no value-only corruption found")


def _store(store: ObjectStore, files: list[bytes]) -> tuple[Catalog, Job]:
    catalog = Catalog(store)
    make_topics(catalog, {"t": (PARTITIONS, {"cleanup.policy": "compact"})})
    live = []
    for i, data in enumerate(files):
        key = f"data/L1/f{i}.cf"
        store.put(key, data)
        good = reader.StreamReader(io.BytesIO(_file(i)), object_name=key)
        sections = [s.meta for s in _sections(good)]
        live.append(LiveFile.of_sections(f"f{i}", key, 1, len(data), 0, sections))
        expected = {("t", p): i * RECORDS for p in range(PARTITIONS)}
        new_next = {("t", p): (i + 1) * RECORDS for p in range(PARTITIONS)}
        catalog.commit(
            lambda s, f=live[-1], e=expected, n=new_next: append_files(s, [f], e, n),
            new_files={live[-1].id: (live[-1], sections)},
        )
    job = Job(tuple(JobInput(f.id, f.key, f.size) for f in live), 2, True)
    return catalog, job


def _sections(stream: reader.StreamReader) -> list[reader.SectionReader]:
    out = []
    for section in stream.sections():
        section.skip()
        out.append(section)
    return out


def _objects(store: ObjectStore) -> dict[str, bytes]:
    return {o.key: store.get(o.key)[0] for o in store.list("")}


CORRUPTIONS = {
    "values only (phase 2 finds it)": _value_only_corruption,
    "bit flip (phase 1 finds it)": lambda d: d[:200] + bytes([d[200] ^ 0x10]) + d[201:],
    "truncated": lambda d: d[: len(d) * 2 // 3],
}


@pytest.mark.parametrize("phase1", PHASE1_MODES)
@pytest.mark.parametrize("corruption", list(CORRUPTIONS), ids=list(CORRUPTIONS))
def test_a_corrupt_input_fails_the_job_and_changes_nothing(
    store: ObjectStore, corruption: str, phase1: Phase1Mode
) -> None:
    files = [_file(i) for i in range(3)]
    files[1] = CORRUPTIONS[corruption](files[1])
    catalog, job = _store(store, files)
    snap_before = catalog.snapshot()
    objects_before = _objects(store)
    with pytest.raises(FormatError) as failure:
        run_job(store, catalog, job, KeyBuffer(1 << 20), now_ms=NOW, phase1=phase1)
    assert failure.value.object_name == "data/L1/f1.cf"
    assert catalog.snapshot() == snap_before
    assert _objects(store) == objects_before  # no output, inputs byte for byte
    assert not [t.name for t in threading.enumerate() if t.name.startswith(JOB_THREADS)]


def test_the_corruption_is_one_phase_2_alone_finds() -> None:
    """The value-only corruption really passes phase 1's decode: the thread case above
    then fails on the job's thread while phase 1 runs ahead."""
    data = _value_only_corruption(_file(1))
    stream = reader.StreamReader(io.BytesIO(data), object_name="f")
    for section in stream.sections():
        for _ in section.batches(("offset", "key")):
            pass
    with pytest.raises(FormatError):
        for section in reader.StreamReader(io.BytesIO(data), object_name="f").sections():
            for _ in section.batches():
                pass
