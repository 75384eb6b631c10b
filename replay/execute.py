"""Running one job document by hand (``compactor replay --execute``), as a worker would:
under the job's lease, with the process's key buffer, committing at the end.

The lease is taken before the first GET and renewed from the job's guard (after every
output batch) once a third of its duration has passed, so a scheduler plans around the
inputs and no queue worker starts the same job meanwhile. A job that does not commit
gives its lease back at once.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from compactor.catalog import CommitConflict
from compactor.catalog.changes import Leased
from compactor.catalog.leases import JobLeases, LeaseKeeper
from compactor.jobqueue.scheduler import process_owner
from compactor.planner.job import Job
from compactor.worker.compactor import Compactor
from compactor.worker.runner import StaleJob, check_job
from compactor.worker.stats import JobProgress, JobReport

DEFAULT_LEASE_MS = 10 * 60 * 1000


def execute_job(
    compactor: Compactor,
    job: Job,
    now_ms: int,
    *,
    lease_ms: int = DEFAULT_LEASE_MS,
    on_progress: Callable[[JobProgress], None] | None = None,
) -> JobReport:
    """Runs ``job`` under its lease and commits. StaleJob if its inputs are no longer a
    live run (already compacted: a no-op); Leased if another job's lease holds one;
    InputMismatch, before any lease, if it names an input's id with another key or size."""
    check_job(compactor.catalog.snapshot(), job)  # a mismatched document takes no lease
    leases = JobLeases(compactor.catalog, process_owner("replay"))
    try:
        leases.take(job.id, [i.id for i in job.inputs], lease_ms, unread=job.drop, refresh=False)
    except Leased:
        raise
    except CommitConflict as stale:
        raise StaleJob(f"job {job.id}: {stale}") from None
    try:
        report = compactor.run(
            job,
            now_ms,
            on_progress,
            guard=LeaseKeeper(leases, job.id, lease_ms, unread=job.drop),
            snapshot=compactor.catalog.snapshot(refresh=False),  # the lease's
        )
    except BaseException:
        _give_back(leases, job.id)
        raise
    if not report.committed:
        _give_back(leases, job.id)
    return report


def _give_back(leases: JobLeases, job_id: str) -> None:
    with contextlib.suppress(Exception):  # it expires anyway
        leases.release(job_id)
