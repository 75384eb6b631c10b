"""The worker process's compactor: one key buffer, allocated once, reused by every job
(and, where phase 1 runs in a process of its own, that process, started once)."""

from __future__ import annotations

from collections.abc import Callable

from compactor.catalog import Catalog, Snapshot
from compactor.catalog.garbage import (
    DEFAULT_GRACE_MS,
    DEFAULT_HISTORY_RETENTION_MS,
    collect_all_garbage,
)
from compactor.objectstore import ObjectStore
from compactor.objectstore.throttle import ReadThrottle
from compactor.planner.codecs import DEFAULT_CODECS, LevelCodecs
from compactor.planner.config import PlannerConfig
from compactor.planner.job import Job
from compactor.planner.plan import full_plan, plan
from compactor.worker.errors import WorkerError
from compactor.worker.helper_pool import process_pays, usable_cpus, warm_up
from compactor.worker.kernel import KeyBuffer
from compactor.worker.phase1_process import store_recipe
from compactor.worker.runner import StaleJob, run_job
from compactor.worker.stats import JobProgress, JobReport

DEFAULT_KEY_BUFFER_BYTES = 128 << 20


class Compactor:
    def __init__(
        self,
        store: ObjectStore,
        *,
        key_buffer_bytes: int = DEFAULT_KEY_BUFFER_BYTES,
        codecs: LevelCodecs = DEFAULT_CODECS,
        grace_ms: int = DEFAULT_GRACE_MS,
        history_retention_ms: int = DEFAULT_HISTORY_RETENTION_MS,
    ) -> None:
        self.store = store
        self.history_retention_ms = history_retention_ms
        self.catalog = Catalog(store)
        self.buffer = KeyBuffer(key_buffer_bytes)
        self.codecs = codecs
        self.grace_ms = grace_ms
        if process_pays(may_fork=store_recipe(store, self.buffer) is not None, cpus=usable_cpus()):
            warm_up()  # phase 1's process starts while the catalog is read and planned

    def run(
        self,
        job: Job,
        now_ms: int,
        on_progress: Callable[[JobProgress], None] | None = None,
        *,
        read_throttle: ReadThrottle | None = None,
        guard: Callable[[], None] = lambda: None,
        snapshot: Snapshot | None = None,
    ) -> JobReport:
        """Runs ``job`` with this process's key buffer (``worker.runner.run_job``), its
        outputs in the codec of their level."""
        return run_job(
            self.store,
            self.catalog,
            job,
            self.buffer,
            now_ms=now_ms,
            compression=self.codecs.for_level(job.output_level),
            on_progress=on_progress,
            read_throttle=read_throttle,
            guard=guard,
            snapshot=snapshot,
        )

    def collect_garbage(self, now_ms: int) -> list[str]:
        """Everything deleteable (``catalog.garbage.collect_all_garbage``); returns the
        keys deleted."""
        return collect_all_garbage(self.catalog, now_ms, self.grace_ms, self.history_retention_ms)

    def run_planned(
        self,
        now_ms: int,
        config: PlannerConfig | None = None,
        *,
        full: bool = False,
        until_idle: bool = False,
        on_job: Callable[[Job], None] = lambda job: None,
        on_report: Callable[[JobReport], None] = lambda report: None,
        on_progress: Callable[[JobProgress], None] | None = None,
    ) -> list[JobReport]:
        """Run the planner's jobs: the first one, or (``until_idle``) every job of each
        plan and plan again until none is due. ``full`` runs the full compaction once.
        A job whose inputs another compactor took first is dropped, and the store
        planned again. ``on_job``, ``on_progress`` and ``on_report`` hear of each job as
        it starts, while it runs, and when it is done."""
        reports: list[JobReport] = []
        seen: set[str] = set()
        while True:
            snap = self.catalog.snapshot()
            leased = frozenset(snap.leased_inputs(self.catalog.clock()))
            jobs = (full_plan if full else plan)(snap, now_ms, config, leased).jobs
            if not (until_idle or full):
                jobs = jobs[:1]
            if not jobs:
                return reports
            for job in jobs:
                if job.id in seen:
                    raise WorkerError(
                        "the planner proposed this job twice; stopping", job_id=job.id
                    )
                seen.add(job.id)
                on_job(job)
                try:
                    report = self.run(job, now_ms, on_progress)
                except StaleJob:
                    break  # another compactor took these inputs first: plan again
                reports.append(report)
                on_report(report)
            if full or not until_idle:
                return reports
