"""The writer: what it rejects, how it bounds batches, that it streams."""

from __future__ import annotations

import contextlib
import io
import random
import threading
import time
import tracemalloc
from pathlib import Path

import pyarrow as pa
import pytest

from compactor.fileformat import (
    RECORD_SCHEMA,
    FileMeta,
    FileWriter,
    Record,
    SectionMeta,
    StreamReader,
    batch_to_records,
    records_to_batch,
    verify_stream,
)
from compactor.fileformat.framing import TAG_TRAILER


def batch(*offsets: int, value: bytes = b"v") -> pa.RecordBatch:
    return records_to_batch([Record(o, 1000 + o % 1000, b"k%d" % o, value) for o in offsets])


def read_back(data: bytes) -> dict[tuple[str, int], list[Record]]:
    out = {}
    reader = StreamReader(io.BytesIO(data), object_name="f", size=len(data))
    for section in reader.sections():
        out[(section.topic, section.partition)] = [
            r for b in section.batches() for r in batch_to_records(b)
        ]
    return out


def logical_size(r: Record) -> int:
    size = 16 + len(r.key or b"") + len(r.value or b"")
    return size + sum(len(k.encode()) + len(v or b"") for k, v in r.headers)


class RecordingSink:
    """Discards data, remembering how much arrived."""

    def __init__(self) -> None:
        self.total = 0

    def write(self, data: bytes | memoryview) -> None:
        self.total += len(data)


@pytest.mark.parametrize(
    ("first", "second"),
    [
        (("b", 0), ("a", 0)),
        (("a", 1), ("a", 0)),
        (("a", 0), ("a", 0)),
        (("ä", 0), ("z", 5)),  # sorted by UTF-8 bytes, the same order as Python's str
    ],
)
def test_rejects_sections_out_of_order(first: tuple[str, int], second: tuple[str, int]) -> None:
    sink = io.BytesIO()
    w = FileWriter(sink)
    w.write_section(*first, [batch(1)])
    with pytest.raises(ValueError, match="does not come after"):
        w.begin_section(*second)
    # The writer is unchanged: a later section still works.
    w.write_section("\uffff", 0, [batch(1)])
    meta = w.finish()
    assert verify_stream(io.BytesIO(sink.getvalue()), object_name="f") == meta
    assert [(s.topic, s.partition) for s in meta.sections] == [first, ("\uffff", 0)]


@pytest.mark.parametrize(
    ("batches", "accepted"),
    [
        ([batch(1, 1)], 0),
        ([batch(2, 1)], 0),
        ([batch(1, 2), batch(2, 3)], 2),
        ([batch(5), batch(4)], 1),
        ([batch(5), batch(), batch(5)], 1),
        ([batch(1, 2**62, 3)], 0),
    ],
)
def test_rejects_offsets_that_do_not_strictly_increase(
    batches: list[pa.RecordBatch], accepted: int
) -> None:
    sink = io.BytesIO()
    w = FileWriter(sink)
    w.begin_section("t", 0)
    with pytest.raises(ValueError, match="offset"):
        for b in batches:
            w.write_batch(b)
    # A rejected batch writes nothing: finishing the section gives a valid file with the
    # records accepted before it.
    w.write_batch(batch(2**63 - 1))
    w.end_section()
    meta = w.finish()
    got = read_back(sink.getvalue())[("t", 0)]
    expected = [r for b in batches for r in batch_to_records(b)][:accepted]
    assert got == [*expected, *batch_to_records(batch(2**63 - 1))]
    assert verify_stream(io.BytesIO(sink.getvalue()), object_name="f") == meta


def test_rejects_wrong_schemas_and_nulls() -> None:
    w = FileWriter(io.BytesIO())
    w.begin_section("t", 0)
    good = batch(1, 2)
    renamed = pa.RecordBatch.from_arrays(good.columns, names=["o", "t", "k", "v", "h", "d"])
    with pytest.raises(ValueError, match="schema"):
        w.write_batch(renamed)
    wrong_type = pa.RecordBatch.from_arrays(
        [good.column(0).cast(pa.int32()), *good.columns[1:]], names=RECORD_SCHEMA.names
    )
    with pytest.raises(ValueError, match="schema"):
        w.write_batch(wrong_type)
    with pytest.raises(ValueError, match="RecordBatch"):
        w.write_batch(pa.Table.from_batches([good]))
    null_offset = pa.RecordBatch.from_arrays(
        [pa.array([1, None], pa.int64()), *good.columns[1:]], schema=RECORD_SCHEMA
    )
    with pytest.raises(ValueError, match="null offset"):
        w.write_batch(null_offset)
    w.write_batch(good)
    assert w.end_section().record_count == 2


def test_empty_section_is_rejected_and_writes_nothing() -> None:
    sink = io.BytesIO()
    w = FileWriter(sink)
    w.begin_section("t", 0)
    w.write_batch(batch())
    before = len(sink.getvalue())
    with pytest.raises(ValueError, match="no records"):
        w.end_section()
    assert len(sink.getvalue()) == before
    # The dropped section does not count for ordering: the same key can follow.
    w.write_section("t", 0, [batch(3)])
    meta = w.finish()
    assert [s.record_count for s in meta.sections] == [1]
    with pytest.raises(ValueError, match="no records"):
        FileWriter(io.BytesIO()).write_section("t", 0, [])


def test_call_order_and_argument_errors() -> None:
    w = FileWriter(io.BytesIO())
    with pytest.raises(RuntimeError):
        w.write_batch(batch(1))
    with pytest.raises(RuntimeError):
        w.end_section()
    w.begin_section("t", 0)
    with pytest.raises(RuntimeError):
        w.begin_section("u", 0)
    with pytest.raises(RuntimeError):
        w.finish()
    w.write_batch(batch(1))
    w.end_section()
    w.finish()
    with pytest.raises(RuntimeError):
        w.finish()
    with pytest.raises(ValueError):
        FileWriter(io.BytesIO(), compression="gzip")
    with pytest.raises(ValueError):
        FileWriter(io.BytesIO(), max_batch_bytes=0)
    for topic, partition in [("", 0), ("t", -1), ("t", 2**31), ("\ud800", 0), ("x" * 70_000, 0)]:
        with pytest.raises(ValueError):
            FileWriter(io.BytesIO()).begin_section(topic, partition)


def test_batches_are_bounded_by_logical_size() -> None:
    recs = [
        Record(i, i, b"key", b"x" * (i % 50), (("h", b"1"),) if i % 3 else ()) for i in range(5000)
    ]
    big = Record(5000, 0, None, b"y" * 10_000)
    sink = io.BytesIO()
    w = FileWriter(sink, max_batch_bytes=4096)
    w.write_section("t", 0, [records_to_batch(recs), records_to_batch([big])])
    meta = w.finish()
    reader = StreamReader(io.BytesIO(sink.getvalue()), object_name="f")
    sizes = []
    for section in reader.sections():
        for b in section.batches():
            rows = batch_to_records(b)
            sizes.append((len(rows), sum(map(logical_size, rows))))
    assert sizes[-1] == (1, 16 + 10_000)  # larger than the bound: a batch of its own
    assert all(size <= 4096 for _, size in sizes[:-1])
    # Greedy: every batch but the last of the run is more than half full.
    assert all(size > 2048 for _, size in sizes[:-2])
    assert sum(n for n, _ in sizes) == 5001
    assert meta.sections[0].uncompressed_bytes == sum(s for _, s in sizes)


def test_headers_count_towards_the_batch_bound() -> None:
    # Headers with empty keys and null values have no logical size but cost Arrow 8 bytes
    # of offsets each; they must still split batches.
    recs = [Record(i, 0, None, None, (("", None),) * 100) for i in range(100)]
    sink = io.BytesIO()
    w = FileWriter(sink, max_batch_bytes=1024)
    w.write_section("t", 0, [records_to_batch(recs)])
    w.finish()
    reader = StreamReader(io.BytesIO(sink.getvalue()), object_name="f")
    counts = [b.num_rows for s in reader.sections() for b in s.batches()]
    assert sum(counts) == 100
    assert max(counts) == 1  # 16 + 8 * 100 bytes of weight each: one record per batch


def test_writer_streams_and_keeps_only_metadata() -> None:
    value = bytes(range(256)) * 256  # 64 KiB
    sink = RecordingSink()
    tracemalloc.start()
    try:
        w = FileWriter(sink, compression=None, max_batch_bytes=1 << 20)
        w.begin_section("t", 0)
        progress = []
        for i in range(40):
            b = records_to_batch([Record(i * 16 + j, 0, None, value) for j in range(16)])
            w.write_batch(b)  # 1 MiB
            progress.append(sink.total)
            del b
        written_before_end = sink.total
        w.end_section()
        meta = w.finish()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert meta.sections[0].record_count == 640
    # Every batch reached the sink as soon as it was written.
    assert all(b - a > 1 << 20 for a, b in zip(progress, progress[1:], strict=False))
    assert written_before_end > 40 << 20
    assert sink.total == meta.size
    assert meta.size - written_before_end < 4096  # only trailer, footer and tail remained
    # 40 MiB went through; Python never held more than a few batches' worth.
    assert peak < 8 << 20


def test_meta_json_round_trip() -> None:
    sink = io.BytesIO()
    w = FileWriter(sink)
    w.write_section("ünï", 3, [batch(1, 5)])
    meta = w.finish()
    s = meta.sections[0]
    assert SectionMeta.from_json(s.to_json()) == s
    assert FileMeta.from_json(meta.to_json()) == meta
    assert s.to_json()["topic"] == "ünï"
    bad = s.to_json()
    bad["record_count"] = "2"
    with pytest.raises(ValueError):
        SectionMeta.from_json(bad)
    del bad["record_count"]
    with pytest.raises(ValueError):
        SectionMeta.from_json(bad)


def test_highly_compressible_batches_are_stored_plain() -> None:
    # zstd would shrink a MiB of zeros far more than 64x, which readers refuse to expand.
    recs = [Record(0, 0, None, bytes(1 << 20))]
    sizes = {}
    for compression in ("zstd", None):
        sink = io.BytesIO()
        w = FileWriter(sink, compression=compression)
        w.write_section("t", 0, [records_to_batch(recs)])
        w.finish()
        sizes[compression] = len(sink.getvalue())
        assert read_back(sink.getvalue())[("t", 0)] == recs
    assert sizes["zstd"] == sizes[None]


def test_ordinary_batches_are_compressed() -> None:
    rnd = random.Random(1)
    words = [b"alpha", b"beta", b"gamma", b"delta", b"user", b"id", b"order", b"paid"]
    text = [
        Record(i, 0, None, b" ".join(rnd.choice(words) for _ in range(100))) for i in range(500)
    ]
    sizes = {}
    for compression in ("zstd", "lz4", None):
        sink = io.BytesIO()
        w = FileWriter(sink, compression=compression)
        w.write_section("t", 0, [records_to_batch(text)])
        w.finish()
        sizes[compression] = len(sink.getvalue())
        assert read_back(sink.getvalue())[("t", 0)] == text
    assert sizes["zstd"] < sizes[None] / 3
    assert sizes["lz4"] < sizes[None] / 2


class _CountingSink(io.BytesIO):
    """Records how many bytes each write had, to compare what reached the sink when."""

    def __init__(self) -> None:
        super().__init__()
        self.sizes: list[int] = []

    def write(self, data: object) -> int:
        n = super().write(data)  # type: ignore[call-overload]
        self.sizes.append(n)
        return n


@pytest.mark.parametrize("share_below", [0, 4 << 10])
@pytest.mark.parametrize("seed", range(6))
def test_encoding_ahead_writes_the_same_bytes(seed: int, share_below: int) -> None:
    """Batches encoded on the writer's thread (big ones) and inline (small ones), mixed in
    one section and across sections, give the same file, written in the same pieces; with
    ``share_below``, small sections' blocks come after the framed sections' ends that
    wait behind the encoder."""
    rnd = random.Random(seed)
    sections = []
    for p in range(rnd.randrange(1, 5)):
        batches, offset = [], 0
        for _ in range(rnd.randrange(1, 12)):
            n = rnd.choice([1, 5, 40, 300, 2000])
            value = rnd.randbytes(rnd.randrange(0, 60)).hex().encode()
            batches.append(batch(*range(offset, offset + n), value=value))
            offset += n + rnd.randrange(0, 3)
        sections.append(("t", p, batches))
    max_batch_bytes = rnd.choice([16 << 10, 1 << 20])
    outputs = []
    for ahead in (False, True):
        sink = _CountingSink()
        writer = FileWriter(
            sink, max_batch_bytes=max_batch_bytes, encode_ahead=ahead, share_below=share_below
        )
        for topic, partition, batches in sections:
            writer.write_section(topic, partition, batches)
        outputs.append((writer.finish(), sink.getvalue(), sink.sizes))
    (meta, data, sizes), (meta_ahead, data_ahead, sizes_ahead) = outputs
    assert data_ahead == data
    assert meta_ahead == meta
    assert sizes_ahead == sizes
    verify_stream(io.BytesIO(data_ahead), object_name="f", size=len(data_ahead))


def test_a_sections_end_waits_behind_its_batches_being_encoded() -> None:
    """``end_section`` does not wait for the encoder: the section's trailer is written
    behind its last frame, by a later call, while the caller goes on to the next
    section; ``finish`` lists both, and the file is the one a writer without
    ``encode_ahead`` writes."""
    rnd = random.Random(7)
    big = [
        batch(*range(i * 4000, (i + 1) * 4000), value=rnd.randbytes(200).hex().encode())
        for i in range(6)
    ]
    outputs = []
    for ahead in (False, True):
        sink = io.BytesIO()
        writer = FileWriter(sink, max_batch_bytes=1 << 20, encode_ahead=ahead)
        first = writer.write_section("t", 0, big)
        if ahead:
            assert first is None  # six batches of about 1.6 MiB each: not encoded yet
            assert TAG_TRAILER not in sink.getvalue()
        else:
            assert first is not None and first.record_count == 24_000
        second = writer.write_section("t", 1, [batch(0, 1, 2)])  # encoded inline: small
        assert (second is None) == ahead
        meta = writer.finish()
        assert [(s.partition, s.record_count) for s in meta.sections] == [(0, 24_000), (1, 3)]
        outputs.append((meta, sink.getvalue()))
    assert outputs[0] == outputs[1]
    verify_stream(io.BytesIO(outputs[1][1]), object_name="f", size=len(outputs[1][1]))


def encoding_threads() -> list[str]:
    """The writers' encoding threads of this process: Python's (``encode-<file>``, for
    lz4's buffer-by-buffer batches) and the compiled encoder's (``encode-batches``, by
    its OS name)."""
    return python_encoding_threads() + native_encoding_threads()


def python_encoding_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("encode-")]


def native_encoding_threads() -> list[str]:
    return ["encode-batches"] * len(native_encoding_tids())


def native_encoding_tids() -> list[int]:
    """The OS thread ids of this process's compiled encoders' threads (``encode-batches``)."""
    tids = []
    for comm in Path("/proc/self/task").glob("*/comm"):
        with contextlib.suppress(OSError):  # a thread that ended meanwhile
            if comm.read_text().strip() == "encode-batches":
                tids.append(int(comm.parent.name))
    return tids


def encoding_threads_settled(present: bool, within_s: float = 10.0) -> list[str]:
    """``encoding_threads()`` now if ``present`` (the compiled encoder's thread is named by
    ``submit``, which started it); else once it is empty, or as it is after ``within_s``:
    a joined native thread may stay listed under /proc for a moment. Python's threads are
    joined, hence gone, at once: not waited for."""
    if present:
        return encoding_threads()
    if joined := python_encoding_threads():
        return joined
    deadline = time.monotonic() + within_s
    while (threads := encoding_threads()) and time.monotonic() < deadline:
        time.sleep(0.001)
    return threads


@pytest.mark.parametrize("codec", ["zstd", "lz4"])
def test_encoding_ahead_uses_a_thread_and_stops_it(codec: str) -> None:
    big = batch(*range(5000), value=b"0123456789abcdef" * 4)
    writer = FileWriter(io.BytesIO(), object_name="ahead", compression=codec, encode_ahead=True)
    writer.begin_section("t", 0)
    writer.write_batch(big)
    assert encoding_threads_settled(True)  # compressible batches go to the encoder thread
    writer.end_section()
    writer.finish()
    assert not encoding_threads_settled(False)
    abandoned = FileWriter(
        io.BytesIO(), object_name="abandoned", compression=codec, encode_ahead=True
    )
    abandoned.begin_section("t", 0)
    abandoned.write_batch(big)
    abandoned.close()  # what a failed job does
    assert not encoding_threads_settled(False)
