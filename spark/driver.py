"""The driver of ``compactor spark compact``: plan, lease, fan out one task per job,
collect the reports; with ``until_idle``, plan again after each wave.

Steps of a wave: plan on the newest snapshot (inputs another job has leased are left
out); take each job's lease (``fresh``: a job someone else is running is skipped); hand
the leased jobs to Spark, one task per job, at most ``max_concurrent_jobs`` at a time;
collect each task's report. Each job commits on its own in its task, so a cluster that
dies halfway keeps every job it finished, and the leases of the others expire.

Invariants: the driver never hands the same inputs out twice (a job is published to
tasks only once its lease is committed, and a lease refuses inputs another job holds);
no client crosses the wire (tasks get ``spark.task.TaskSettings``, plain values).
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from compactor.catalog import Catalog, CatalogError, CommitConflict
from compactor.catalog.leases import JobLeases
from compactor.fileformat.offset_index import index_key
from compactor.jobqueue.scheduler import process_owner
from compactor.objectstore import StoreError
from compactor.planner.config import PlannerConfig
from compactor.planner.job import Job
from compactor.planner.plan import full_plan, plan
from compactor.spark.failures import SparkUnavailable, reported, task_failure
from compactor.spark.master import check_reachable
from compactor.spark.task import TaskSettings, index_task, run_task
from compactor.worker.errors import WorkerError

DEFAULT_LEASE_MS = 30 * 60 * 1000


@dataclass(frozen=True, slots=True)
class SparkCompaction:
    settings: TaskSettings
    config: PlannerConfig | None = None
    until_idle: bool = False
    full: bool = False
    max_concurrent_jobs: int | None = None


def use_this_python() -> None:
    """Executors run the driver's Python (this virtualenv, activated or not) unless the
    user chose another (PYSPARK_PYTHON, spark.pyspark.python)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


def spark_session(master: str | None, conf: Mapping[str, str] | None = None) -> Any:
    """A SparkSession whose executors run this Python: ``master``, else spark-submit's,
    else ``local[*]``; ``conf``: more Spark settings."""
    from py4j.protocol import Py4JJavaError
    from pyspark import SparkConf
    from pyspark.errors import PySparkRuntimeError
    from pyspark.sql import SparkSession

    use_this_python()
    builder = SparkSession.builder.appName("compactor").config(
        "spark.ui.showConsoleProgress", "false"
    )
    for name, value in (conf or {}).items():
        builder = builder.config(name, value)
    if master is not None:
        check_reachable(master)  # in seconds, where Spark would take a minute
        builder = builder.master(master)
    elif not SparkConf().contains("spark.master"):  # not under spark-submit
        builder = builder.master("local[*]")
    try:
        spark = builder.getOrCreate()
    except PySparkRuntimeError as exc:  # the JVM exited: no Java, a master URL it refuses
        if exc.getCondition() != "JAVA_GATEWAY_EXITED":
            raise
        raise SparkUnavailable("its driver's JVM exited before it started", True) from exc
    except Py4JJavaError as exc:  # the JVM runs, Spark gave up: no master answered
        first = str(exc.java_exception).strip().splitlines()[0]
        raise SparkUnavailable(first, False) from exc
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def compact_on_spark(
    spark: Any,
    run: SparkCompaction,
    catalog: Catalog,
    *,
    on_wave: Callable[[list[Job]], None] = lambda jobs: None,
) -> list[dict[str, Any]]:
    """Runs the planner's jobs on ``spark`` (a SparkSession); every task's report."""
    sc = spark.sparkContext
    broadcast = sc.broadcast(run.settings.to_json())
    leases = JobLeases(catalog, process_owner("spark-driver"))
    reports: list[dict[str, Any]] = []
    seen: set[str] = set()
    while True:
        jobs = _leased(leases, _planned(catalog, run), run.settings.lease_ms)
        if not jobs:
            return reports
        for job in jobs:
            if job.id in seen:
                raise WorkerError("the planner proposed this job twice; stopping", job_id=job.id)
            seen.add(job.id)
        on_wave(jobs)
        step = run.max_concurrent_jobs or len(jobs)
        for start in range(0, len(jobs), step):
            wave = [job.dumps() for job in jobs[start : start + step]]
            try:
                reports += _fan_out(sc, broadcast, wave)
            except BaseException:
                _release(leases, jobs[start:])
                raise
        if run.full or not run.until_idle:
            return reports


def _planned(catalog: Catalog, run: SparkCompaction) -> list[Job]:
    snap = catalog.snapshot()
    leased = frozenset(snap.leased_inputs(catalog.clock()))
    choose = full_plan if run.full else plan
    return list(choose(snap, run.settings.now_ms, run.config, leased).jobs)


def _leased(leases: JobLeases, jobs: list[Job], lease_ms: int) -> list[Job]:
    """The jobs whose lease this driver took (others are held, or already stale). The
    first lease reads the catalog, which planning may have taken long enough to leave
    behind; each one after is tried on the state the one before it left read."""
    taken = []
    for n, job in enumerate(jobs):
        try:
            leases.take(
                job.id,
                [i.id for i in job.inputs],
                lease_ms,
                fresh=True,
                unread=job.drop,
                refresh=n == 0,
            )
        except CommitConflict:
            continue
        taken.append(job)
    return taken


def _release(leases: JobLeases, jobs: list[Job]) -> None:
    """Gives back the leases of ``jobs`` that are still held: a failed wave's, and those
    of the waves it stopped, so that the next run need not wait for them to expire. Its
    tasks have ended; a commit never depended on a lease (it checks its inputs)."""
    held = leases.catalog.snapshot().leases
    for job in jobs:
        if job.id in held:
            with contextlib.suppress(CatalogError, StoreError):
                leases.release(job.id)


def _fan_out(sc: Any, broadcast: Any, documents: list[str]) -> list[dict[str, Any]]:
    """One task per job document; each task's report, in the documents' order."""

    @reported
    def task(document: str) -> dict[str, Any]:
        from pyspark import TaskContext

        context = TaskContext.get()
        attempt = context.attemptNumber() if context is not None else 0
        return run_task(broadcast.value, document, attempt)

    return _collected(sc.parallelize(documents, len(documents)).map(task))


def index_on_spark(spark: Any, settings: TaskSettings, catalog: Catalog) -> list[dict[str, Any]]:
    """Writes the offset index of every live file that lacks one, one task per file;
    each task's report. The files needing one come from one listing of the store."""
    indexed = {info.key for info in catalog.store.list("data/") if info.key.endswith(".idx")}
    todo = [(f.key, f.size) for f in catalog.snapshot().files if index_key(f.key) not in indexed]
    if not todo:
        return []
    broadcast = spark.sparkContext.broadcast(settings.to_json())

    @reported
    def task(file: tuple[str, int]) -> dict[str, Any]:
        return index_task(broadcast.value, file[0], file[1])

    return _collected(spark.sparkContext.parallelize(todo, len(todo)).map(task))


def _collected(rdd: Any) -> list[dict[str, Any]]:
    """The tasks' reports; if a task failed (after Spark's retries), its own error
    (``spark.failures``), not the Py4J error around it."""
    try:
        result: list[dict[str, Any]] = rdd.collect()
    except Exception as exc:
        failed = task_failure(exc)
        if failed is None:
            raise
        # A bug's (raised_as None) Py4J error stays chained: --debug shows its stack.
        raise failed from (exc if failed.raised_as is None else None)
    return result
