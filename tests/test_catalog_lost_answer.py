"""A commit whose log-entry PUT lands and whose answer is lost: the store's retry is
refused (If-None-Match), and the committer must see that the entry is its own rather than
another committer's. Taken for a lost race, the change would be evaluated on top of
itself: an ingest would see its own offsets as moved, re-upload its files at new offsets
and delete the objects its commit made live; a compaction would see its inputs gone."""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest
from conftest import S3Endpoint
from cutting_proxy import CuttingProxy
from worker_scenarios import add_file, make_topics, read_live

from compactor.catalog import Catalog
from compactor.catalog.log import log_key
from compactor.catalog.verify import verify_store
from compactor.fileformat import Record
from compactor.ingest.agent import L0Ingest
from compactor.ingest.jsonl import InputRecord
from compactor.objectstore.s3 import S3Store
from compactor.planner.job import Job, JobInput
from compactor.worker.kernel import KeyBuffer
from compactor.worker.runner import run_job

NOW = 1_700_000_000_000


@pytest.fixture
def next_entry_lost(
    s3_endpoint: S3Endpoint, s3_store: S3Store
) -> Iterator[tuple[S3Store, CuttingProxy, str]]:
    """(an S3Store through a proxy that drops the answer to the PUT of the catalog's next
    log entry, the proxy, that entry's path), once the topic ``t`` exists."""
    make_topics(Catalog(s3_store), {"t": (2, {"cleanup.policy": "compact"})})
    yield from _through_proxy(s3_endpoint, s3_store)


def _through_proxy(
    s3_endpoint: S3Endpoint, s3_store: S3Store
) -> Iterator[tuple[S3Store, CuttingProxy, str]]:
    version = Catalog(s3_store).snapshot().version + 1
    path = f"/{s3_store.bucket}/{log_key(version)}"
    with CuttingProxy(s3_endpoint.url, path, None, method="PUT") as proxy:
        through = S3Store(s3_store.bucket, endpoint_url=proxy.url)
        try:
            yield through, proxy, path
        finally:
            through.close()


def test_an_ingest_whose_commit_answer_is_lost_commits_once(
    next_entry_lost: tuple[S3Store, CuttingProxy, str], s3_store: S3Store
) -> None:
    through, proxy, path = next_entry_lost
    before = Catalog(s3_store).snapshot().version
    ingest = L0Ingest(through, Catalog(through), now_ms=NOW, max_file_records=40)
    sent = [InputRecord("t", i % 2, NOW, b"k%d" % (i % 13), b"v%d" % i, ()) for i in range(100)]
    for record in sent:
        ingest.add(record)
    result = ingest.commit()
    assert (proxy.dropped, len(proxy.lines("PUT", path))) == ([200], 2)
    assert (result.rebases, result.snapshot.version) == (0, before + 1)
    catalog = Catalog(s3_store)
    snap = catalog.snapshot()
    assert snap.version == before + 1  # one commit, not a second on top of the first
    assert {f.key for f in snap.files} == {f.key for f in result.files}
    assert verify_store(catalog, snap).ok  # every live file's object is there
    live = read_live(s3_store, catalog)
    for partition in (0, 1):
        kept = [(r.offset, r.key, r.value) for r in live[("t", partition)]]
        mine = [(r.key, r.value) for r in sent if r.partition == partition]
        assert kept == [(n, k, v) for n, (k, v) in enumerate(mine)]


def test_a_compaction_whose_commit_answer_is_lost_commits_once(
    s3_endpoint: S3Endpoint, s3_store: S3Store
) -> None:
    catalog = Catalog(s3_store)
    make_topics(catalog, {"t": (1, {"cleanup.policy": "compact"})})
    rng = random.Random(7)
    for i in range(2):
        records = [Record(i * 500 + j, NOW, b"k%d" % rng.randrange(50), b"v") for j in range(500)]
        add_file(s3_store, catalog, f"f{i}", {("t", 0): records}, level=1)
    expected = read_live(s3_store, catalog)
    files = catalog.snapshot().files
    job = Job(tuple(JobInput(f.id, f.key, f.size) for f in files), 2, True)
    for through, proxy, path in _through_proxy(s3_endpoint, s3_store):
        report = run_job(through, Catalog(through), job, KeyBuffer(1 << 20), now_ms=NOW)
        assert (proxy.dropped, len(proxy.lines("PUT", path))) == ([200], 2)
    assert report.committed, report
    catalog = Catalog(s3_store)
    snap = catalog.snapshot()
    assert [f.key for f in snap.files] == [job.output_key("compacted")]
    assert verify_store(catalog, snap).ok
    latest = {r.key: r for r in expected[("t", 0)]}
    assert read_live(s3_store, catalog)[("t", 0)] == sorted(latest.values(), key=lambda r: r.offset)


def test_an_l0_upload_whose_answer_is_lost_is_committed(
    s3_endpoint: S3Endpoint, s3_store: S3Store
) -> None:
    """The PUT of an ingest's L0 file lands and its answer is lost: the store's retry is
    refused (If-None-Match), and the ingest must see that the object holds its own bytes
    instead of failing an ingest that wrote everything."""
    make_topics(Catalog(s3_store), {"t": (2, {"cleanup.policy": "compact"})})
    folder = f"/{s3_store.bucket}/data/L0/"
    with CuttingProxy(s3_endpoint.url, folder, None, method="PUT") as proxy:
        through = S3Store(s3_store.bucket, endpoint_url=proxy.url)
        try:
            ingest = L0Ingest(through, Catalog(through), now_ms=NOW, max_file_records=40)
            sent = [InputRecord("t", i % 2, NOW, b"k%d" % i, b"v%d" % i, ()) for i in range(100)]
            for record in sent:
                ingest.add(record)
            result = ingest.commit()
        finally:
            through.close()
        puts = proxy.lines("PUT", folder)
    assert proxy.dropped == [200]
    assert len(puts) == len(result.files) + 1  # the first file's PUT sent twice
    catalog = Catalog(s3_store)
    snap = catalog.snapshot()
    assert {f.key for f in snap.files} == {f.key for f in result.files}
    assert verify_store(catalog, snap).ok
    live = read_live(s3_store, catalog)
    for partition in (0, 1):
        kept = [(r.key, r.value) for r in live[("t", partition)]]
        assert kept == [(r.key, r.value) for r in sent if r.partition == partition]
