"""The worker against real stores: GET requests counted at the S3 server, many windows
through a small buffer, and the job's commit and report."""

from __future__ import annotations

import gc
import random

import pyarrow as pa
import pytest
from conftest import RequestLog, S3Endpoint
from cutting_proxy import CuttingProxy
from worker_scenarios import add_file, make_topics, read_live

from compactor.catalog import Catalog, LiveFile
from compactor.catalog.changes import append_files
from compactor.catalog.verify import verify_store
from compactor.fileformat import RECORD_SCHEMA, FileWriter, Record
from compactor.fileformat.offset_index import index_key
from compactor.objectstore import LocalStore, ObjectStore
from compactor.objectstore.s3 import S3Store
from compactor.planner.job import Job, JobInput
from compactor.worker.collector import YOUNG_THRESHOLD
from compactor.worker.kernel import KeyBuffer
from compactor.worker.runner import run_job
from compactor.worker.stats import JobProgress

NOW = 1_700_000_000_000


def _job(catalog: Catalog, level: int = 2, dedup: bool = True) -> Job:
    files = catalog.snapshot().files
    return Job(tuple(JobInput(f.id, f.key, f.size) for f in files), level, dedup)


def test_four_files_of_1000_partitions_take_exactly_eight_gets(
    s3_store: S3Store, request_log: RequestLog
) -> None:
    catalog = Catalog(s3_store)
    make_topics(catalog, {"t": (1000, {"cleanup.policy": "compact"})})
    for i in range(4):
        sections = {
            ("t", p): [Record(i * 10 + j, NOW, b"k%d" % (j % 3), b"v%d" % i) for j in range(3)]
            for p in range(1000)
        }
        add_file(s3_store, catalog, f"f{i}", sections, level=1)
    job = _job(catalog)
    request_log.reset()
    report = run_job(s3_store, catalog, job, KeyBuffer(1 << 20), now_ms=NOW)
    assert report.committed
    per_file = {i.key: request_log.count("GET", i.key) for i in job.inputs}
    assert per_file == {i.key: 2 for i in job.inputs}
    assert sum(per_file.values()) == 8
    assert [f.gets for f in report.inputs] == [2, 2, 2, 2]
    assert s3_store.gets.snapshot() == {}  # the job's inputs were watched only while it ran
    assert report.phase1 == "process"  # with a second CPU, whatever the sections' size
    assert report.stats.partitions == 1000
    # Each partition had 3 keys across 4 files: 12 records in, the 3 newest out.
    assert report.stats.records_in == 12_000
    assert report.stats.records_out == 3_000
    assert verify_store(catalog, catalog.snapshot()).ok


def test_two_million_keys_through_a_one_mib_buffer(local_store: LocalStore) -> None:
    catalog = Catalog(local_store)
    make_topics(catalog, {"t": (1, {"cleanup.policy": "compact"})})
    n = 2_000_000
    batch_size = 100_000
    sink = local_store.open_multipart("data/L1/big.cf")
    writer = FileWriter(sink, object_name="big")
    writer.begin_section("t", 0)
    for start in range(0, n, batch_size):
        offsets = pa.array(range(start, start + batch_size), pa.int64())
        keys = pa.array([b"key-%09d" % i for i in range(start, start + batch_size)], pa.binary())
        writer.write_batch(
            pa.RecordBatch.from_arrays(
                [
                    offsets,
                    pa.array([NOW] * batch_size, pa.int64()),
                    keys,
                    keys,
                    pa.array([[]] * batch_size, RECORD_SCHEMA.field("headers").type),
                    pa.nulls(batch_size, pa.int64()),
                ],
                schema=RECORD_SCHEMA,
            )
        )
    writer.end_section()
    meta = writer.finish()
    sink.complete()
    live = LiveFile.of_sections("big", "data/L1/big.cf", 1, meta.size, 0, meta.sections)
    catalog.commit(
        lambda s: append_files(s, [live], {("t", 0): 0}, {("t", 0): n}),
        new_files={live.id: (live, meta.sections)},
    )
    buffer = KeyBuffer(1 << 20)
    report = run_job(local_store, catalog, _job(catalog), buffer, now_ms=NOW, phase1="thread")
    assert report.committed
    assert report.stats.records_in == n
    assert report.stats.records_out == n
    assert report.stats.windows >= n // buffer.capacity
    assert report.stats.windows > 50
    assert report.phase1 == "thread"
    assert buffer.threads == 2  # hashed on one thread meanwhile, then set back
    assert [f.gets for f in report.inputs] == [2]
    snap = catalog.snapshot()
    assert verify_store(catalog, snap).ok
    assert snap.files[0].record_count == n


def test_copy_job_separates_compacted_and_plain_topics(store: ObjectStore) -> None:
    catalog = Catalog(store)
    make_topics(
        catalog,
        {"c": (2, {"cleanup.policy": "compact"}), "d": (2, {"cleanup.policy": "delete"})},
    )
    for i in range(3):
        add_file(
            store,
            catalog,
            f"f{i}",
            {
                (t, p): [Record(i * 5 + j, NOW, b"same", b"%d" % j) for j in range(5)]
                for t in "cd"
                for p in range(2)
            },
        )
    before = read_live(store, catalog)
    report = run_job(
        store, catalog, _job(catalog, level=1, dedup=False), KeyBuffer(4096), now_ms=NOW
    )
    assert report.committed and len(report.outputs) == 2
    snap = catalog.snapshot()
    assert [f.level for f in snap.files] == [1, 1]
    sections = [catalog.sections(f) for f in snap.files]
    assert sorted({s.topic for s in secs} == {"c"} for secs in sections) == [False, True]
    assert all(len({s.topic for s in secs}) == 1 for secs in sections)
    assert [f.topic_names for f in snap.files] == [{s.topic for s in secs} for secs in sections]
    assert verify_store(catalog, snap).ok
    assert read_live(store, catalog) == before  # a copy drops nothing
    assert report.stats.records_out == report.stats.records_in == 60


def test_cut_stream_resumes_and_is_counted(s3_endpoint: S3Endpoint, s3_store: S3Store) -> None:
    catalog = Catalog(s3_store)
    make_topics(catalog, {"t": (1, {"cleanup.policy": "compact"})})
    rng = random.Random(3)
    for i in range(2):
        records = [
            Record(i * 40_000 + j, NOW, b"k%d" % rng.randrange(5_000), rng.randbytes(100))
            for j in range(40_000)
        ]
        add_file(s3_store, catalog, f"f{i}", {("t", 0): records}, level=1)
    victim = catalog.snapshot().files[1]
    assert victim.size > 4 << 20
    expected = read_live(s3_store, catalog)
    path = f"/{s3_store.bucket}/{victim.key}"
    with CuttingProxy(s3_endpoint.url, path, 3 << 20) as proxy:
        through = S3Store(s3_store.bucket, endpoint_url=proxy.url)
        try:
            report = run_job(
                through, Catalog(through), _job(catalog), KeyBuffer(1 << 20), now_ms=NOW
            )
        finally:
            through.close()
    assert proxy.cuts == 1
    assert report.committed
    by_key = {f.key: f for f in report.inputs}
    assert (by_key[victim.key].gets, by_key[victim.key].resumes) == (3, 1)
    assert [(f.gets, f.resumes) for f in report.inputs if f.key != victim.key] == [(2, 0)]
    resumed = proxy.gets(path)[-1]
    assert resumed["if-match"] and resumed["range"].startswith("bytes=")
    survivors = read_live(s3_store, catalog)[("t", 0)]
    latest = {r.key: r for r in expected[("t", 0)]}
    assert survivors == sorted(latest.values(), key=lambda r: r.offset)


@pytest.mark.parametrize(
    ("distinct", "method", "query"),
    [(200, "PUT", ""), (1 << 40, "POST", "?uploadId=")],  # an output over a part: 9 MB
    ids=["put-object", "complete-multipart-upload"],
)
def test_an_output_whose_answer_is_lost_commits_at_once(
    s3_endpoint: S3Endpoint, s3_store: S3Store, distinct: int, method: str, query: str
) -> None:
    """The request that makes the job's output visible lands, and its answer is lost:
    botocore's retry is refused, and the job still commits on this attempt with the
    output's offset index (an earlier attempt's output would be adopted without one)."""
    catalog = Catalog(s3_store)
    make_topics(catalog, {"t": (1, {"cleanup.policy": "compact"})})
    rng = random.Random(5)
    for i in range(2):
        records = [
            Record(i * 40_000 + j, NOW, b"k%d" % rng.randrange(distinct), rng.randbytes(100))
            for j in range(40_000)
        ]
        add_file(s3_store, catalog, f"f{i}", {("t", 0): records}, level=1)
    expected = read_live(s3_store, catalog)
    job = _job(catalog)
    output = job.output_key("compacted")
    path = f"/{s3_store.bucket}/{output}{query}"
    with CuttingProxy(s3_endpoint.url, path, None, method=method) as proxy:
        through = S3Store(s3_store.bucket, endpoint_url=proxy.url, part_size=s3_endpoint.part_size)
        try:
            report = run_job(through, Catalog(through), job, KeyBuffer(1 << 20), now_ms=NOW)
        finally:
            through.close()
    assert (proxy.dropped, len(proxy.lines(method, path))) == ([200], 2)
    assert report.committed
    multipart = s3_store.head(output).size > s3_endpoint.part_size
    assert multipart == (method == "POST")
    s3_store.head(index_key(output))  # written by this attempt, after its output
    assert list(s3_store.pending_uploads()) == []
    latest = {r.key: r for r in expected[("t", 0)]}
    assert read_live(s3_store, catalog)[("t", 0)] == sorted(latest.values(), key=lambda r: r.offset)


def test_progress_is_reported_as_phase_2_reads(local_store: LocalStore) -> None:
    catalog = Catalog(local_store)
    make_topics(catalog, {"t": (20, {"cleanup.policy": "compact"})})
    for i in range(3):
        sections = {
            ("t", p): [Record(i * 300 + j, NOW, b"k%d" % (j % 50), b"v") for j in range(300)]
            for p in range(20)
        }
        add_file(local_store, catalog, f"f{i}", sections, level=1)
    heard: list[JobProgress] = []
    young: set[int] = set()

    def hear(progress: JobProgress) -> None:
        heard.append(progress)
        young.add(gc.get_threshold()[0])

    threshold = gc.get_threshold()
    report = run_job(
        local_store,
        catalog,
        _job(catalog),
        KeyBuffer(1 << 20),
        now_ms=NOW,
        on_progress=hear,
        progress_interval_s=0,
    )
    assert report.committed
    assert young == {YOUNG_THRESHOLD}  # worker.collector while the job ran
    assert gc.get_threshold() == threshold
    # with no interval, a call after every batch written and at every partition's end
    assert len(heard) >= 2 * 20
    assert {p.records_total for p in heard} == {18_000}
    assert {p.job_id for p in heard} == {report.job_id}
    seen = [(p.records_in, p.records_out, p.partitions) for p in heard]
    assert seen == sorted(seen)  # never goes back
    assert all(0 < p.fraction <= 1 for p in heard)
    last = heard[-1]
    assert (last.records_in, last.records_out, last.partitions) == (18_000, 1_000, 20)
    assert last.fraction == 1.0
