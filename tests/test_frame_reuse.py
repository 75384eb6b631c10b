"""Frames written as they were read: a writer handed the very batch a reader decoded
from a kept frame (``fileformat.read_frames``) writes that frame's bytes where it would
encode the batch alike (``FileWriter.write_batch``). A copy job (L0 -> L1) passes its
inputs' batches on as they are; a deduplicating job, the batches of which every record
survives unchanged. Both are checked against the Kafka model."""

from __future__ import annotations

import io
import random
import tempfile
from pathlib import Path

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka_model import TopicRules, compact, view
from worker_scenarios import add_file, make_topics, read_live

from compactor.catalog import Catalog
from compactor.catalog.verify import verify_store
from compactor.fileformat import FileWriter, Record, StreamReader, records_to_batch, verify_stream
from compactor.fileformat.batches import batching_weight
from compactor.fileformat.framing import EncodedFrame
from compactor.fileformat.ipc import inspect_message
from compactor.fileformat.read_frames import frame_of
from compactor.fileformat.writer import MIN_COMPRESS_BYTES
from compactor.jobqueue.metrics import WorkerMetrics
from compactor.objectstore import LocalStore
from compactor.planner.job import Job, JobInput
from compactor.worker.kernel import KeyBuffer
from compactor.worker.runner import run_job

NOW = 1_700_000_000_000
Sections = dict[tuple[str, int], list[Record]]
Read = tuple[tuple[str, int], pa.RecordBatch, EncodedFrame | None]


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


def _frames(data: bytes) -> list[Read]:
    """Each batch of ``data``, decoded whole, with the frame kept for it (held: a frame
    is kept while its batch lives)."""
    stream = StreamReader(io.BytesIO(data), object_name="in", size=len(data))
    return [
        ((s.topic, s.partition), batch, frame_of(batch))
        for s in stream.sections()
        for batch in s.batches()
    ]


def _payloads(data: bytes) -> list[bytes]:
    """The payloads of ``data``'s batch frames that are kept when read."""
    return [frame.payload for _, _, frame in _frames(data) if frame is not None]


def _copy(data: bytes, compression: str | None, **options: int) -> tuple[bytes, int]:
    """``data``'s sections written again, batch by batch as read; the bytes and how many
    frames the writer reused."""
    sink = io.BytesIO()
    writer = FileWriter(sink, object_name="out", compression=compression, **options)
    by_section: dict[tuple[str, int], list[pa.RecordBatch]] = {}
    for tp, batch, _ in _frames(data):
        by_section.setdefault(tp, []).append(batch)
    for (topic, partition), batches in by_section.items():
        writer.write_section(topic, partition, batches)
    writer.finish()
    return sink.getvalue(), writer.frames_reused


def _records_of(data: bytes) -> dict[tuple[str, int], list[dict[str, object]]]:
    out: dict[tuple[str, int], list[dict[str, object]]] = {}
    for tp, batch, _ in _frames(data):
        out.setdefault(tp, []).extend(batch.to_pylist())
    return out


def _big_sections(rng: random.Random) -> Sections:
    return {("t", p): _records(0, 10_000, 100, rng) for p in range(3)}


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
    assert len(_frames(cut)) > len(_frames(data))
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
    writer.begin_section("t", 0)
    writer.write_batch(batch.slice(0))  # equal records, another batch: encoded
    writer.write_batch(pa.concat_batches([other]))
    assert writer.frames_reused == 0


def test_a_frame_is_kept_only_while_its_batch_lives() -> None:
    data = _write(_big_sections(random.Random(6)), "lz4")
    stream = StreamReader(io.BytesIO(data), object_name="in", size=len(data))
    section = next(stream.sections())
    batches = section.batches()
    first = next(batches)
    assert frame_of(first) is not None
    assert frame_of(first.slice(0)) is None
    del first
    second = next(batches)
    assert frame_of(second) is not None
    light = records_to_batch(_records(0, 10, 10, random.Random(0)))
    assert frame_of(light) is None


def _job(catalog: Catalog, level: int, dedup: bool) -> Job:
    """Every live file into ``level``."""
    files = catalog.snapshot().files
    return Job(tuple(JobInput(f.id, f.key, f.size) for f in files), level, dedup)


def _copy_job(catalog: Catalog) -> Job:
    return _job(catalog, 1, False)


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
    """The frames of ``data`` a copy into ``codec`` may reuse: kept when read, and in the
    codec the writer gives a batch of their size."""
    count = 0
    for _, batch, frame in _frames(data):
        if frame is None:
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
    metrics = WorkerMetrics()
    metrics.observe(report)
    assert metrics.registry.get_sample_value("compactor_worker_frames_reused_total") == 9
    (out,) = catalog.snapshot().files
    assert sorted(_payloads(store.get(out.key)[0])) == sorted(payloads)  # byte for byte
    assert read_live(store, catalog) == before
    assert verify_store(catalog, catalog.snapshot()).ok


def _unique_records(
    first: int, n: int, rng: random.Random, hot: float, tombstones: float
) -> list[Record]:
    """Records of 600-byte values, each with a key of its own but ``hot`` of them, whose
    keys come from ten; ``tombstones`` of them null."""
    out = []
    for i in range(n):
        key = b"hot-%d" % rng.randrange(10) if rng.random() < hot else b"own-%d" % (first + i)
        value = None if rng.random() < tombstones else rng.randbytes(300).hex().encode()
        out.append(Record(first + i, NOW - 10_000 + i, key, value, ()))
    return out


def _dedup_job(catalog: Catalog) -> Job:
    return _job(catalog, 2, True)


def _dedup_store(
    tmp: str, seed: int, files: int, hot: float, tombstones: float
) -> tuple[LocalStore, Catalog, dict[tuple[str, int], list[Record]]]:
    rng = random.Random(seed)
    store = LocalStore(tmp)
    catalog = Catalog(store)
    make_topics(catalog, {"t": (2, {"cleanup.policy": "compact"})})
    written: dict[tuple[str, int], list[Record]] = {}
    for i in range(files):
        sections = {
            ("t", p): _unique_records(i * 10_000, rng.choice([300, 2500]), rng, hot, tombstones)
            for p in range(2)
        }
        for tp, records in sections.items():
            written.setdefault(tp, []).extend(records)
        add_file(
            store, catalog, f"f{i}", sections, level=1, compression="lz4", max_batch_bytes=1 << 20
        )
    return store, catalog, written


def _whole_survivors(data: bytes, winners: dict[tuple[str, int], set[int]]) -> int:
    """How many batches of ``data`` a deduplicating job into the inputs' codec writes as
    they were read: kept when read, every record a winner and none a tombstone (a kept
    tombstone is stamped with its horizon, which changes the batch). A batch in a frame
    its output may write is never gathered with others (``worker.gather``), so each of
    them is."""
    whole = 0
    for tp, batch, frame in _frames(data):
        offsets = batch.column("offset").to_pylist()
        whole += (
            frame is not None
            and all(o in winners[tp] for o in offsets)
            and not batch.column("value").null_count
        )
    return whole


@settings(max_examples=15, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    files=st.integers(1, 3),
    hot=st.sampled_from([0.0, 0.001, 0.3]),
    tombstones=st.sampled_from([0.0, 0.01]),
)
def test_a_deduplicating_job_writes_the_batches_that_survive_whole_as_they_were_read(
    seed: int, files: int, hot: float, tombstones: float
) -> None:
    """What survives is the Kafka model's, and the materialized view is unchanged; only
    batches of which every record survives unchanged are written in the frames they were
    read in, and every one of them is (one window holds each partition here)."""
    with tempfile.TemporaryDirectory() as tmp:
        store, catalog, written = _dedup_store(tmp, seed, files, hot, tombstones)
        inputs = [store.get(f.key)[0] for f in catalog.snapshot().files]
        rules = TopicRules()
        expected = {
            tp: compact(
                records,
                rules,
                deduplicate=True,
                now_ms=NOW,
                includes_oldest=True,
                includes_newest=True,
            )
            for tp, records in written.items()
        }
        winners = {tp: {r.offset for r in records} for tp, records in expected.items()}
        whole = sum(_whole_survivors(data, winners) for data in inputs)
        report = run_job(
            store, catalog, _dedup_job(catalog), KeyBuffer(64 << 20), now_ms=NOW, compression="lz4"
        )
        assert report.committed and report.stats.windows == 2
        after = read_live(store, catalog)
        assert {tp: r for tp, r in after.items() if r} == {tp: r for tp, r in expected.items() if r}
        for tp, records in written.items():
            assert view(after.get(tp, []), rules) == view(records, rules)
        assert verify_store(catalog, catalog.snapshot()).ok
        assert report.stats.frames_reused == whole


def test_a_deduplicating_job_of_unique_keys_writes_every_kept_frame_as_it_was_read(
    tmp_path: Path,
) -> None:
    store, catalog, _ = _dedup_store(str(tmp_path), 7, 2, 0.0, 0.0)
    heavy = [
        f.payload
        for live in catalog.snapshot().files
        for _, b, f in _frames(store.get(live.key)[0])
        if f is not None
    ]
    report = run_job(
        store, catalog, _dedup_job(catalog), KeyBuffer(64 << 20), now_ms=NOW, compression="lz4"
    )
    assert report.stats.frames_reused == len(heavy) > 0
    assert report.stats.records_out == report.stats.records_in
    (out,) = catalog.snapshot().files
    assert set(heavy) <= set(_payloads(store.get(out.key)[0]))  # byte for byte
