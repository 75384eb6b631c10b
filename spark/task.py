"""What one Spark task runs: one job, with its executor process's key buffer.

A task receives the job document and the settings the driver broadcast (never a
client: each executor process opens its own store and catalog reader, and allocates one
key buffer, on its first task and reuses them for every task it runs). The job runs exactly as
anywhere else (``worker.runner.run_job``): two GET streams per input, a multipart
upload under the job-derived key with If-None-Match, then its own commit. So a retried
or speculative attempt adopts the output an earlier attempt completed, and of two
attempts at most one commits; the other reports ``committed: false``.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from typing import Any

from compactor.catalog import Catalog
from compactor.catalog.leases import JobLeases, LeaseKeeper
from compactor.fileformat.offset_index import build_index, encode_index, index_key
from compactor.jobqueue.scheduler import process_owner
from compactor.objectstore import ObjectStore, PreconditionFailed, open_store
from compactor.objectstore.request_tally import SENT, as_json
from compactor.planner.codecs import DEFAULT_CODECS, LevelCodecs
from compactor.planner.job import OUTPUT_GROUPS, Job
from compactor.worker.kernel import KeyBuffer
from compactor.worker.runner import StaleJob, run_job

FAULTS = ("before-commit", "after-commit")
"""Faults a first attempt can be told to inject (``COMPACTOR_SPARK_INJECT_FAULT``), to
show that retries and speculation never leave two outputs or two commits: fail just
before the uploads complete, or just after the commit landed."""


class InjectedFault(RuntimeError):
    """The fault a first attempt was asked to inject."""


@dataclass(frozen=True, slots=True)
class TaskSettings:
    """What the driver broadcasts: plain values only."""

    store_url: str
    endpoint_url: str | None
    key_buffer_bytes: int
    now_ms: int
    lease_ms: int
    inject_fault: str | None = None
    compression_top: str | None = DEFAULT_CODECS.top
    compression_below_top: str | None = DEFAULT_CODECS.below_top

    @property
    def codecs(self) -> LevelCodecs:
        return LevelCodecs(self.compression_top, self.compression_below_top)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


_process: dict[str, Any] = {}
"""This executor process's store and key buffer, made by its first task."""


def _store(settings: TaskSettings) -> ObjectStore:
    key = ("store", settings.store_url, settings.endpoint_url)
    if _process.get("store_key") != key:
        _process["store"] = open_store(settings.store_url, endpoint_url=settings.endpoint_url)
        _process["store_key"] = key
    store: ObjectStore = _process["store"]
    return store


def _catalog(settings: TaskSettings) -> Catalog:
    """This executor process's catalog reader, on its store: kept across tasks, so a task
    reads only the entries committed since the one before it (CATALOG.md §3), not the
    newest checkpoint and the log after it again."""
    store = _store(settings)
    catalog = _process.get("catalog")
    if not isinstance(catalog, Catalog) or catalog.store is not store:
        catalog = _process["catalog"] = Catalog(store)
        _process["catalogs"] = _process.get("catalogs", 0) + 1
    return catalog


def _buffer(settings: TaskSettings) -> KeyBuffer:
    buffer = _process.get("buffer")
    if buffer is None or buffer.capacity_bytes != settings.key_buffer_bytes:
        buffer = _process["buffer"] = KeyBuffer(settings.key_buffer_bytes)
        _process["buffers"] = _process.get("buffers", 0) + 1
    assert isinstance(buffer, KeyBuffer)
    return buffer


def _task_cpus() -> int:
    """The CPUs Spark gave this task (``spark.task.cpus``): phase 1 gets a process of its
    own only where the task may keep two busy (``worker.pipeline.phase1_mode``)."""
    from pyspark import TaskContext

    context = TaskContext.get()
    return context.cpus() if context is not None else 1


def _executor() -> dict[str, int]:
    """Which executor process ran the task, how many key buffers it has allocated, and
    how many catalog readers it has made (each reads the catalog whole once)."""
    return {
        "pid": os.getpid(),
        "key_buffers_allocated": int(_process.get("buffers", 0)),
        "catalog_readers": int(_process.get("catalogs", 0)),
    }


def run_task(settings: dict[str, Any], document: str, attempt: int) -> dict[str, Any]:
    """Runs one job document; its report as ``compact --json`` prints it (``committed``
    false, with a note, if another attempt or job got there first), with the executor
    that ran it and the requests the task sent (``requests``: the executor's Python
    worker runs one task at a time, so what its ``SENT`` counted meanwhile is the
    task's)."""
    sent_before = SENT.snapshot()
    s = TaskSettings(**settings)
    job = Job.loads(document)
    store = _store(s)
    catalog = _catalog(s)
    fault = s.inject_fault if attempt == 0 else None
    leases = JobLeases(catalog, process_owner("spark"))
    keeper = LeaseKeeper(leases, job.id, s.lease_ms, unread=job.drop)

    def guard() -> None:
        keeper()
        if fault == "before-commit" and not job.drop:
            raise InjectedFault(f"job {job.id}: injected fault before the commit (attempt 0)")

    try:
        report = run_job(
            store,
            catalog,
            job,
            _buffer(s),
            now_ms=s.now_ms,
            compression=s.codecs.for_level(job.output_level),
            cpus=_task_cpus(),
            guard=guard,
        )
    except StaleJob as stale:
        live = {f.id for f in catalog.snapshot().files}
        earlier = any(job.output_file_id(g) in live for g in OUTPUT_GROUPS)
        note = "an earlier attempt of this job committed it" if earlier else str(stale)
        return {
            "job_id": job.id,
            "rule": job.rule,
            "committed": False,
            "note": note,
            "executor": _executor(),
            "requests": as_json(SENT.since(sent_before)),
        }
    if fault == "after-commit":
        raise InjectedFault(f"job {job.id}: injected fault after the commit (attempt 0)")
    return {
        **report.to_json(),
        "executor": _executor(),
        "requests": as_json(SENT.since(sent_before)),
    }


def index_task(settings: dict[str, Any], key: str, size: int) -> dict[str, Any]:
    """Writes the offset index of the data file ``key`` (FORMAT.md section 12), reading
    the file once, front to back (one GET); a file indexed meanwhile is left as it is."""
    sent_before = SENT.snapshot()
    store = _store(TaskSettings(**settings))
    store.gets.watch([key])
    try:
        gets_before = store.gets.get(key)
        with store.open_stream(key) as stream:
            index = build_index(stream, object_name=key, size=size)
        gets = store.gets.get(key) - gets_before
    finally:
        store.gets.unwatch([key])
    try:
        store.put(index_key(key), encode_index(index), if_none_match=True)
        written = True
    except PreconditionFailed:
        written = False
    return {
        "key": key,
        "index": index_key(key),
        "written": written,
        "sections": len(index.sections),
        "gets": gets,
        "requests": as_json(SENT.since(sent_before)),
    }
