"""``Scheduler``: plans, leases each due job's inputs, then publishes the job.

Invariants: a job is published only after its lease is committed, so a job whose inputs
are leased and unexpired is never published again (the planner skips leased inputs, and
a lease taken by a racing scheduler fails ours). The lease runs for the queue's
visibility timeout: a message still waiting in the queue when it expires may be
published again, and whichever copy runs second finds the job stale, a no-op.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from typing import TYPE_CHECKING

from compactor.catalog import Catalog, CommitConflict, Snapshot
from compactor.catalog.leases import JobLeases
from compactor.jobqueue.errors import QueueError
from compactor.jobqueue.sqs import JobQueue
from compactor.planner.config import PlannerConfig
from compactor.planner.job import Job
from compactor.planner.plan import plan

if TYPE_CHECKING:
    from compactor.jobqueue.metrics import SchedulerMetrics


def process_owner(role: str) -> str:
    """Who took or renewed a lease, for ``compactor history``: role@host:pid."""
    return f"{role}@{socket.gethostname()}:{os.getpid()}"


@dataclass(frozen=True, slots=True)
class Published:
    job: Job
    message_id: str
    lease_expires_ms: int


@dataclass(frozen=True, slots=True)
class Unsent:
    """A due job the queue refused (too big for one message, say); its lease is released."""

    job: Job
    error: str


@dataclass
class Pass:
    published: list[Published]
    unsent: list[Unsent]
    snapshot: Snapshot | None = None
    """The catalog state the pass planned on (None: it planned on none)."""
    lease_clock_ms: int = 0
    """The wall clock the pass read its leases at (``leased_inputs``)."""


class Scheduler:
    def __init__(
        self,
        catalog: Catalog,
        queue: JobQueue,
        config: PlannerConfig | None = None,
        *,
        lease_ms: int | None = None,
        metrics: SchedulerMetrics | None = None,
    ) -> None:
        """``lease_ms``: how long a published job's lease lasts before a worker renews it
        (default: the queue's visibility timeout). ``metrics`` counts each job as it is
        published or refused."""
        self.catalog, self.queue, self.config = catalog, queue, config
        self.leases = JobLeases(catalog, process_owner("scheduler"))
        self._lease_ms = lease_ms
        self.metrics = metrics

    def lease_ms(self) -> int:
        if self._lease_ms is not None:
            return self._lease_ms
        timeout_s = self.queue.visibility_timeout_s()
        if timeout_s < 1:
            raise QueueError(
                f"queue {self.queue.url} has a visibility timeout of {timeout_s} s: a job's "
                "lease lasts that long, so set one of at least a few minutes"
            )
        return timeout_s * 1000

    def publish_due(self, now_ms: int) -> Pass:
        """Plan on the current snapshot (the time rules at ``now_ms``; leases on the wall
        clock), then lease and publish each due job. A job the queue refuses is released
        and reported, and the others go on; the pass fails (QueueError) only if the queue
        refused every job."""
        ttl_ms = self.lease_ms()
        self.leases.expire()
        snap = self.catalog.snapshot(refresh=False)  # as expire just read or committed it
        clock_ms = self.catalog.clock()
        leased = frozenset(snap.leased_inputs(clock_ms))
        done = Pass([], [], snap, clock_ms)
        for job in plan(snap, now_ms, self.config, leased).jobs:
            try:
                lease = self.leases.take(
                    job.id, [i.id for i in job.inputs], ttl_ms, fresh=True, unread=job.drop
                )
            except CommitConflict:
                continue  # leased or replaced since the snapshot: the next pass replans
            try:
                message_id = self.queue.send(job)
            except BaseException as e:
                self.leases.release(job.id)  # unpublished: its inputs are plannable again
                if not isinstance(e, QueueError):
                    raise
                done.unsent.append(Unsent(job, str(e)))
                if self.metrics is not None:
                    self.metrics.unsent(job)
                continue
            done.published.append(Published(job, message_id, lease.expires_ms))
            if self.metrics is not None:
                self.metrics.published(job)
        if done.unsent and not done.published:
            first = done.unsent[0]
            raise QueueError(f"{len(done.unsent)} jobs could not be published: {first.error}")
        return done
