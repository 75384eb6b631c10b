"""Frames copied as they are: a writer given a batch with its frame as read writes that
frame's bytes where it would encode the batch alike (``FileWriter.write_batch``), and a
copy job (L0 -> L1) hands it every heavy enough batch's frame (``worker.copy``)."""

from __future__ import annotations

import io
import random
import tempfile
from pathlib import Path

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st
from worker_scenarios import add_file, make_topics, read_live

from compactor.catalog import Catalog
from compactor.catalog.verify import verify_store
from compactor.fileformat import FileWriter, Record, StreamReader, records_to_batch, verify_stream
from compactor.fileformat.batches import batching_weight
from compactor.fileformat.framing import EncodedFrame
from compactor.fileformat.ipc import inspect_message
from compactor.fileformat.writer import MIN_COMPRESS_BYTES
from compactor.objectstore import LocalStore
from compactor.planner.job import Job, JobInput
from compactor.worker.copy import REUSE_FROM
from compactor.worker.gather import weight
from compactor.worker.kernel import KeyBuffer
from compactor.worker.runner import run_job

NOW = 1_700_000_000_000
Sections = dict[tuple[str, int], list[Record]]


def _records(first: int, n: int, value_bytes: int, rng: random.Random) -> list[Record]:
    out = []
    for i in range(n):
        value = None if rng.random() < 0.05 else rng.randbytes(value_bytes).hex().encode()
        out.append(Record(first + i, NOW - 1000 + i, b"key-%d" % rng.randrange(50), value, ()))
    return out


def _write(sections: Sections, compression: str | None, **options: int) -> bytes:
    sink = io.BytesIO()
    writer = FileWriter(sink, object_name="in", compression=compression, **options)
    for (topic, partition), records in sorted(sections.items()):
        writer.write_section(topic, partition, [records_to_batch(records)])
    writer.finish()
    return sink.getvalue()


def _frames(data: bytes) -> list[tuple[tuple[str, int], pa.RecordBatch, EncodedFrame | None]]:
    stream = StreamReader(io.BytesIO(data), object_name="in", size=len(data))
    return [
        ((s.topic, s.partition), batch, frame)
        for s in stream.sections()
        for batch, frame in s.frames()
    ]


def _payloads(data: bytes) -> list[bytes]:
    return [frame.payload for _, _, frame in _frames(data) if frame is not None]


def _copy(data: bytes, compression: str | None, **options: int) -> tuple[bytes, int]:
    """``data``'s sections written again, each batch with its frame; the bytes and how
    many frames the writer reused."""
    sink = io.BytesIO()
    writer = FileWriter(sink, object_name="out", compression=compression, **options)
    by_section: dict[tuple[str, int], list[tuple[pa.RecordBatch, EncodedFrame | None]]] = {}
    for tp, batch, frame in _frames(data):
        by_section.setdefault(tp, []).append((batch, frame))
    for (topic, partition), batches in by_section.items():
        writer.begin_section(topic, partition)
        for batch, frame in batches:
            writer.write_batch(batch, frame)
        writer.end_section()
    writer.finish()
    return sink.getvalue(), writer.frames_reused


def _records_of(data: bytes) -> dict[tuple[str, int], list[dict[str, object]]]:
    out: dict[tuple[str, int], list[dict[str, object]]] = {}
    for tp, batch, _ in _frames(data):
        out.setdefault(tp, []).extend(batch.to_pylist())
    return out


def _big_sections(rng: random.Random) -> Sections:
    return {("t", p): _records(0, 6000, 100, rng) for p in range(3)}


def test_a_frame_written_in_its_own_codec_is_written_as_it_was_read() -> None:
    data = _write(_big_sections(random.Random(1)), "lz4")
    out, reused = _copy(data, "lz4")
    assert reused == len(_payloads(data)) > 3  # several frames a section
    assert _payloads(out) == _payloads(data)  # byte for byte
    verify_stream(io.BytesIO(out), object_name="out", size=len(out))
    assert _records_of(out) == _records_of(data)


def test_a_frame_of_another_codec_is_encoded_again() -> None:
    data = _write(_big_sections(random.Random(2)), "lz4")
    for codec in ("zstd", None):
        out, reused = _copy(data, codec)
        assert reused == 0
        assert {inspect_message(p, 0, "out").codec for p in _payloads(out)} == {codec}
        verify_stream(io.BytesIO(out), object_name="out", size=len(out))
        assert _records_of(out) == _records_of(data)


def test_a_frame_the_writer_would_cut_or_hold_is_encoded_again() -> None:
    data = _write(_big_sections(random.Random(3)), "lz4")
    cut, reused = _copy(data, "lz4", max_batch_bytes=64 << 10)  # the frames are ~1 MiB
    assert reused == 0
    assert len(_payloads(cut)) > len(_payloads(data))
    assert _records_of(cut) == _records_of(data)
    held, reused = _copy(data, "lz4", share_below=4 << 20, block_bytes=8 << 20)
    assert reused == 0  # every section is lighter than share_below: held for a block
    verify_stream(io.BytesIO(held), object_name="out", size=len(held))
    assert _records_of(held) == _records_of(data)
    # Each section's first frame is held until the second shows it is heavier than
    # share_below, then written with the records held, encoded again.
    framed, reused = _copy(data, "lz4", share_below=1 << 20, block_bytes=8 << 20)
    assert reused == len(_payloads(data)) - len(_big_sections(random.Random(3))) > 0
    assert _records_of(framed) == _records_of(data)


def test_a_frame_is_reused_only_for_its_own_records() -> None:
    data = _write(_big_sections(random.Random(4)), "lz4")
    frames = _frames(data)
    (_, batch, frame), (_, other, _) = frames[0], frames[1]
    assert frame is not None
    writer = FileWriter(io.BytesIO(), object_name="out", compression="lz4")
    logical = batching_weight(batch)[0]
    assert writer.reuses(frame, batch.num_rows, logical)
    assert not writer.reuses(frame, batch.num_rows + 1, logical)
    assert not writer.reuses(EncodedFrame(frame.payload[:-8], frame.crc), batch.num_rows, logical)
    if other.num_rows != batch.num_rows:  # a frame of other records is never written for these
        writer.begin_section("t", 0)
        writer.write_batch(other, frame)
        assert writer.frames_reused == 0


def _copy_job(catalog: Catalog) -> Job:
    files = catalog.snapshot().files
    return Job(tuple(JobInput(f.id, f.key, f.size) for f in files), 1, False)


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    files=st.integers(1, 4),
    input_codecs=st.lists(st.sampled_from(["lz4", "zstd", None]), min_size=4, max_size=4),
    output_codec=st.sampled_from(["lz4", "zstd", None]),
)
def test_a_copy_job_writes_every_record_and_reuses_the_frames_it_may(
    seed: int, files: int, input_codecs: list[str | None], output_codec: str | None
) -> None:
    """Any mix of heavy and light batches, tombstones, codecs in and out: the job's
    output holds every record of the inputs in order, verifies, and reuses the frames
    that are heavy enough and already in the codec the writer gives their size; all of
    them but, in each output section, a first one lighter than the writer's share_below,
    which the writer holds (``FileWriter``) before it knows the section is framed."""
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory() as tmp:
        store = LocalStore(tmp)
        catalog = Catalog(store)
        make_topics(catalog, {"t": (3, {"cleanup.policy": "compact"})})
        reusable = 0
        next_offset = dict.fromkeys(range(3), 0)
        for i in range(files):
            sections: Sections = {}
            for p in range(3):
                n = rng.choice([0, 1, 40, 700, 2500])
                if n:
                    sections[("t", p)] = _records(
                        next_offset[p], n, rng.choice([10, 100, 300]), rng
                    )
                    next_offset[p] += n + rng.randrange(3)
            if not sections:
                continue
            live = add_file(
                store,
                catalog,
                f"f{i}",
                sections,
                compression=input_codecs[i],
                max_batch_bytes=rng.choice([96 << 10, 1 << 20]),
            )
            reusable += _reusable(store.get(live.key)[0], output_codec)
        if not catalog.snapshot().files:
            return
        before = read_live(store, catalog)
        report = run_job(
            store,
            catalog,
            _copy_job(catalog),
            KeyBuffer(4096),
            now_ms=NOW,
            compression=output_codec,
            phase1="inline",
        )
        assert report.committed
        assert read_live(store, catalog) == before
        assert verify_store(catalog, catalog.snapshot()).ok
        assert reusable - len(before) <= report.stats.frames_reused <= reusable
        assert (
            report.stats.records_out
            == report.stats.records_in
            == sum(len(r) for r in before.values())
        )


def _reusable(data: bytes, codec: str | None) -> int:
    """The frames of ``data`` a copy into ``codec`` may reuse: heavy enough, and in the
    codec the writer gives a batch of their size."""
    count = 0
    for _, batch, frame in _frames(data):
        if frame is None or weight(batch) < REUSE_FROM:
            continue
        logical = batching_weight(batch)[0]
        wanted = codec if logical >= MIN_COMPRESS_BYTES else None
        count += inspect_message(frame.payload, 0, "in").codec == wanted
    return count


def test_a_copy_job_of_heavy_frames_reuses_every_one(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    catalog = Catalog(store)
    make_topics(catalog, {"t": (3, {"cleanup.policy": "compact"})})
    rng = random.Random(5)
    payloads = []
    for i in range(3):
        sections = {("t", p): _records(i * 3000, 3000, 100, rng) for p in range(3)}
        live = add_file(
            store, catalog, f"f{i}", sections, compression="lz4", max_batch_bytes=1 << 20
        )
        payloads += _payloads(store.get(live.key)[0])
    before = read_live(store, catalog)
    report = run_job(
        store, catalog, _copy_job(catalog), KeyBuffer(4096), now_ms=NOW, compression="lz4"
    )
    assert report.stats.frames_reused == len(payloads) == 9  # one frame a section
    (out,) = catalog.snapshot().files
    assert sorted(_payloads(store.get(out.key)[0])) == sorted(payloads)  # byte for byte
    assert read_live(store, catalog) == before
    assert verify_store(catalog, catalog.snapshot()).ok
