"""A job that fails loses nothing: corrupt or truncated inputs, found by either pointer, with
phase 1 inline, on its own thread or in its own process, end in a FormatError naming the
object; the catalog, the inputs and the store's objects are as they were, and no thread is
left running. Among them, the faults only phase 1's pointer looks for (``FileChecks``): a
shared block's bitmap, or a footer, that disagrees with the sections."""

from __future__ import annotations

import io
import struct
import threading
from dataclasses import replace

import pyarrow as pa
import pytest
from worker_scenarios import make_topics

from compactor.catalog import Catalog, LiveFile
from compactor.catalog.changes import append_files
from compactor.fileformat import RECORD_SCHEMA, FileWriter, FormatError, reader
from compactor.fileformat.block import parse_section_table
from compactor.fileformat.footer import encode_footer, encode_tail, parse_footer
from compactor.fileformat.framing import (
    FILE_HEADER,
    FILE_TAIL,
    FRAME_HEADER,
    SECTION_END,
    TAG_BATCH,
    TAG_FOOTER,
    TAG_SECTION_TABLE,
    TAG_TRAILER,
    encode_frame,
    encode_frame_header,
)
from compactor.fileformat.writer import SHARE_BELOW
from compactor.objectstore import ObjectStore
from compactor.planner.job import Job, JobInput
from compactor.worker.kernel import KeyBuffer
from compactor.worker.pipeline import PHASE1_MODES, Phase1Mode
from compactor.worker.runner import run_job
from tests.test_fileformat_writer import encoding_threads_settled

NOW = 1_700_000_000_000
PARTITIONS = 3
RECORDS = 3_000  # per partition and file: compressed batches, values big enough to matter
JOB_THREADS = ("phase1-", "encode-")
"""Name prefixes of the threads a job starts (worker.pipeline, FileWriter's encode_ahead)."""


SMALL = 40
"""Records per partition and file in a file of shared blocks (``_file(shared=True)``)."""


def _batch(file: int, partition: int, records: int = RECORDS) -> pa.RecordBatch:
    base = file * RECORDS
    return pa.RecordBatch.from_arrays(
        [
            pa.array(range(base, base + records), pa.int64()),
            pa.array([NOW] * records, pa.int64()),
            pa.array([b"key-%d-%d" % (partition, i % 500) for i in range(records)]),
            pa.array([b"value %d of file %d " % (i, file) * 4 for i in range(records)]),
            pa.array([[]] * records, RECORD_SCHEMA.field("headers").type),
            pa.nulls(records, pa.int64()),
        ],
        schema=RECORD_SCHEMA,
    )


def _file(file: int, shared: bool = False) -> bytes:
    """Input ``file``: each partition a framed section of RECORDS records, or, ``shared``,
    one of SMALL records, all in one shared block."""
    sink = io.BytesIO()
    writer = FileWriter(
        sink,
        object_name=f"f{file}",
        max_batch_bytes=64 << 10,
        share_below=SHARE_BELOW if shared else 0,
    )
    for p in range(PARTITIONS):
        writer.write_section("t", p, [_batch(file, p, SMALL if shared else RECORDS)])
    writer.finish()
    return sink.getvalue()


def _frames(data: bytes, tag: bytes) -> list[tuple[int, int]]:
    """(frame position, payload length) of every frame tagged ``tag``, found by walking
    the file's frames (a trailer's and a section table's are followed by the 8-byte
    section or block end)."""
    frames, at = [], FILE_HEADER.size
    while True:
        found, length, _ = FRAME_HEADER.unpack_from(data, at)
        if found == tag:
            frames.append((at, length))
        if found == TAG_FOOTER:
            return frames
        at += FRAME_HEADER.size + length
        if found in (TAG_TRAILER, TAG_SECTION_TABLE):
            at += SECTION_END.size


def _value_only_corruption(data: bytes) -> bytes:
    """``data`` with one batch of the last partition changed so that phase 1 (offsets and
    keys only) decodes it and phase 2 (whole records) cannot; its frame CRC is valid."""
    frame_at, length = _frames(data, TAG_BATCH)[-2]
    at = frame_at + FRAME_HEADER.size
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


def _bitmap_corruption(data: bytes) -> bytes:
    """``data`` (a file of shared blocks) with the last two bytes of one section's offset
    bitmap in its block's table raised to 0xFFFF: the bitmap then disagrees with the
    section's stats, the table frame's CRC is valid, and the size is the same."""
    (at, length), *_ = _frames(data, TAG_SECTION_TABLE)
    start = at + FRAME_HEADER.size
    table = data[start : start + length]
    entry = parse_section_table(table, start, "x").entries[1]
    table = table[: entry.bitmap_to - 2] + b"\xff\xff" + table[entry.bitmap_to :]
    return data[:at] + encode_frame(TAG_SECTION_TABLE, table) + data[start + length :]


def _footer_corruption(data: bytes) -> bytes:
    """``data`` (version 3) with its footer's second section one millisecond newer than
    it is, the footer frame and the tail's CRCs valid, the size the same."""
    ((at, length),) = _frames(data, TAG_FOOTER)
    start = at + FRAME_HEADER.size
    metas = list(parse_footer(data[start : start + length], start, "x", at, 3))
    metas[1] = replace(metas[1], max_timestamp=metas[1].max_timestamp + 1)
    footer = encode_frame(TAG_FOOTER, encode_footer(metas, 3))
    assert len(footer) == FRAME_HEADER.size + length
    return data[:at] + footer + encode_tail(footer, 3)


BLOCK_CORRUPTIONS = {
    "a bitmap that disagrees with its stats": _bitmap_corruption,
    "a footer that disagrees with the sections": _footer_corruption,
}
"""Faults in files of shared blocks that only phase 1's pointer looks for: a job's
phase-2 pointer leaves these checks to it (``reader.FileChecks``)."""


def _store(store: ObjectStore, files: list[bytes], shared: bool = False) -> tuple[Catalog, Job]:
    catalog = Catalog(store)
    make_topics(catalog, {"t": (PARTITIONS, {"cleanup.policy": "compact"})})
    live = []
    for i, data in enumerate(files):
        key = f"data/L1/f{i}.cf"
        store.put(key, data)
        good = reader.StreamReader(io.BytesIO(_file(i, shared)), object_name=key)
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


INPUT_FAULTS = {
    **{name: (corrupt, False) for name, corrupt in CORRUPTIONS.items()},
    **{
        f"{name} (phase 1 finds it)": (corrupt, True) for name, corrupt in BLOCK_CORRUPTIONS.items()
    },
}
"""Each fault, and whether it is put in files of shared blocks."""


@pytest.mark.parametrize("phase1", PHASE1_MODES)
@pytest.mark.parametrize("fault", list(INPUT_FAULTS), ids=list(INPUT_FAULTS))
def test_a_corrupt_input_fails_the_job_and_changes_nothing(
    store: ObjectStore, fault: str, phase1: Phase1Mode
) -> None:
    corrupt, shared = INPUT_FAULTS[fault]
    files = [_file(i, shared) for i in range(3)]
    files[1] = corrupt(files[1])
    catalog, job = _store(store, files, shared)
    snap_before = catalog.snapshot()
    objects_before = _objects(store)
    with pytest.raises(FormatError) as failure:
        run_job(store, catalog, job, KeyBuffer(1 << 20), now_ms=NOW, phase1=phase1)
    assert failure.value.object_name == "data/L1/f1.cf"
    assert catalog.snapshot() == snap_before
    assert _objects(store) == objects_before  # no output, inputs byte for byte
    assert not [t.name for t in threading.enumerate() if t.name.startswith(JOB_THREADS)]
    assert not encoding_threads_settled(False)


def _streamed(data: bytes, checks: reader.FileChecks, fields: tuple[str, ...] | None) -> None:
    """Streams ``data`` to its end as a job's pointer does, decoding ``fields`` (None:
    whole records) of every section."""
    stream = reader.StreamReader(
        io.BytesIO(data), object_name="f", keep_footer=False, file_checks=checks
    )
    for section in stream.sections():
        for _ in section.batches(fields):
            pass


@pytest.mark.parametrize("corruption", list(BLOCK_CORRUPTIONS), ids=list(BLOCK_CORRUPTIONS))
def test_which_stream_finds_a_fault_of_the_bytes_alone(corruption: str) -> None:
    """Phase 1's pointer ("all") finds it though it decodes only offsets and keys; phase
    2's ("elsewhere") decodes whole records and passes it; a reader on its own
    ("decoded") finds a bitmap's fault when it decodes whole records, a footer's always."""
    good, data = _file(1, shared=True), BLOCK_CORRUPTIONS[corruption](_file(1, shared=True))
    assert len(data) == len(good) and data != good
    keys = ("offset", "key")
    with pytest.raises(FormatError, match="disagree"):
        _streamed(data, "all", keys)
    _streamed(data, "elsewhere", None)
    with pytest.raises(FormatError, match="disagree"):
        _streamed(data, "decoded", None)
    if corruption.startswith("a bitmap"):
        _streamed(data, "decoded", keys)
    else:
        with pytest.raises(FormatError, match="disagree"):
            _streamed(data, "decoded", keys)
    for checks in ("all", "elsewhere", "decoded"):
        _streamed(good, checks, None)  # type: ignore[arg-type]


def test_a_stream_that_leaves_the_checks_elsewhere_still_checks_every_crc_and_the_tail() -> None:
    data = _file(1, shared=True)
    (table_at, _), *_ = _frames(data, TAG_SECTION_TABLE)
    flipped = bytearray(data)
    flipped[table_at + FRAME_HEADER.size + 6] ^= 1
    with pytest.raises(FormatError, match="checksum mismatch"):
        _streamed(bytes(flipped), "elsewhere", None)
    tail_at = len(data) - FILE_TAIL.size
    wrong_tail = data[:tail_at] + bytes([data[tail_at] ^ 1]) + data[tail_at + 1 :]
    with pytest.raises(FormatError, match="tail"):
        _streamed(wrong_tail, "elsewhere", None)
    with pytest.raises(ValueError, match="cannot keep"):
        reader.StreamReader(io.BytesIO(data), object_name="f", file_checks="elsewhere")


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
