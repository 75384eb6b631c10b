"""``QueueWorker``: receives job documents one at a time and runs each with the process's
one key buffer.

For each message, in order: parse the job (a message that is not a job document is
logged and left for the queue's redrive policy); take the job's lease (a job whose inputs
are gone or held by another job is stale: the message is deleted as a no-op; one that
names a live input with another key or size than the catalog's fails before any lease,
its message left for the redrive policy, as a poison message is); run it
under a heartbeat; delete the message once the commit landed, or once the job proved
stale. A failing job has aborted its uploads and committed nothing; its message stays,
to reappear after the visibility timeout. SIGTERM (any BaseException) aborts the job the
same way and makes the message visible again at once.

With ``quarantine_after`` N (off by default), a job that fails on a damaged input (a
FormatError naming it) at the N-th delivery of its message or a later one has that input
read once more, front to back, under a heartbeat; if the read confirms the damage, the
file is set aside as ``compactor catalog quarantine`` sets it (``catalog.quarantine``),
the job's lease is released and its message deleted: the job can never commit, and the
planner plans the runs beside the file without it. Unconfirmed, or on any error on the
way, the message stays as for any failure.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from compactor.catalog import CatalogError, CommitConflict, LiveFile, Snapshot
from compactor.catalog.leases import JobLeases
from compactor.catalog.quarantine import file_damage, fitted_reason, set_aside
from compactor.fileformat import FormatError
from compactor.jobqueue.errors import LostJob, QueueError
from compactor.jobqueue.events import EventLog
from compactor.jobqueue.heartbeat import Heartbeat
from compactor.jobqueue.metrics import WorkerMetrics
from compactor.jobqueue.scheduler import process_owner
from compactor.jobqueue.sqs import LONG_POLL_S, JobQueue, Message
from compactor.objectstore.throttle import ReadThrottle
from compactor.planner.job import Job, JobDocumentError
from compactor.worker.compactor import Compactor
from compactor.worker.runner import StaleJob, check_job
from compactor.worker.stats import JobReport

RECEIVE_BACKOFF_MAX_S = 30.0


@dataclass(frozen=True, slots=True)
class WorkerSettings:
    visibility_timeout_s: int = 300
    """How long a received message stays invisible, renewed by the heartbeat; also each
    lease's duration."""
    exit_when_idle_s: float | None = None
    max_jobs: int | None = None
    max_bytes_per_second: float | None = None
    quarantine_after: int | None = None
    """Set a job's damaged input aside once its message has been delivered this many
    times (the module's doc); None: never."""


class QueueWorker:
    def __init__(
        self,
        compactor: Compactor,
        queue: JobQueue,
        settings: WorkerSettings,
        *,
        metrics: WorkerMetrics,
        log: EventLog,
        now_ms: Callable[[], int],
    ) -> None:
        """``now_ms``: the clock of the time rules a job applies (the wall clock unless
        the operator fixed one)."""
        self.compactor, self.queue, self.settings = compactor, queue, settings
        self.metrics, self.log, self.now_ms = metrics, log, now_ms
        self.leases = JobLeases(compactor.catalog, process_owner("worker"))
        self.throttle = ReadThrottle(settings.max_bytes_per_second, on_read=metrics.read_bytes.inc)
        self.outcomes: dict[str, int] = {}
        self._backoff_s = 0.0

    def serve(self) -> None:
        """Poll and run jobs until ``max_jobs`` messages were handled, or none came for
        ``exit_when_idle_s``."""
        s = self.settings
        handled = 0
        idle_since = time.monotonic()
        self.log(
            "worker_started", queue=self.queue.url, visibility_timeout_s=s.visibility_timeout_s
        )
        while s.max_jobs is None or handled < s.max_jobs:
            wait = LONG_POLL_S
            if s.exit_when_idle_s is not None:
                left = s.exit_when_idle_s - (time.monotonic() - idle_since)
                wait = min(LONG_POLL_S, max(0, math.ceil(left)))
            message = self._receive(wait)
            if message is None:
                idle_s = time.monotonic() - idle_since
                if s.exit_when_idle_s is not None and idle_s >= s.exit_when_idle_s:
                    self.log("worker_idle", idle_s=round(idle_s, 1))
                    return
                continue
            self.metrics.messages_received.inc()
            handled += 1
            self.handle(message)
            idle_since = time.monotonic()

    def _receive(self, wait_s: int) -> Message | None:
        """One long poll; a failure (the endpoint away for a while) is logged and retried
        after a pause that doubles up to RECEIVE_BACKOFF_MAX_S, counting as idle time."""
        try:
            message = self.queue.receive(wait_s, self.settings.visibility_timeout_s)
        except QueueError as e:
            self._backoff_s = min(RECEIVE_BACKOFF_MAX_S, self._backoff_s * 2 or 1.0)
            self.log("receive_failed", error=str(e), retry_in_s=self._backoff_s)
            time.sleep(self._backoff_s)
            return None
        self._backoff_s = 0.0
        return message

    def handle(self, message: Message) -> str:
        """Runs one message's job; returns its outcome (metrics.OUTCOMES, or "poison")."""
        try:
            job = Job.loads(message.body)
        except Exception as e:  # noqa: BLE001 (whatever the body does, it is poison)
            if not isinstance(e, JobDocumentError):
                e = JobDocumentError(f"not a job document: {type(e).__name__}: {e}")
            self.metrics.poison_messages.inc()
            self.outcomes["poison"] = self.outcomes.get("poison", 0) + 1
            self.log(
                "poison_message",
                message_id=message.message_id,
                receive_count=message.receive_count,
                error=str(e),
            )
            return "poison"
        try:
            outcome = self._run(job, message)
        except BaseException:
            self._finish("aborted", job, message, error="stopped (SIGTERM or interrupt)")
            self._release(message)
            raise
        return outcome

    def _run(self, job: Job, message: Message) -> str:
        timeout_s = self.settings.visibility_timeout_s
        self.log(
            "job_received",
            job=job.id,
            rule=job.rule,
            inputs=len(job.inputs),
            message_id=message.message_id,
            receive_count=message.receive_count,
        )
        heartbeat = Heartbeat(
            self.queue,
            message,
            self.leases,
            job.id,
            timeout_s,
            on_failure=lambda e: self._heartbeat_failed(job, e),
            unread=job.drop,
        )
        try:
            snap = self.compactor.catalog.snapshot()
            check_job(snap, job)  # before the lease: see there
            self.leases.take(
                job.id, [i.id for i in job.inputs], timeout_s * 1000, unread=job.drop, refresh=False
            )
            delay_s = self._compaction_delay_s(snap, job)
            with heartbeat:
                report = self.compactor.run(
                    job,
                    self.now_ms(),
                    read_throttle=self.throttle,
                    guard=heartbeat.check,
                    snapshot=self.compactor.catalog.snapshot(refresh=False),  # the lease's
                )
        except (StaleJob, CommitConflict) as e:  # inputs gone, or another job's lease
            return self._stale(job, message, str(e))
        except LostJob as e:
            return self._finish("aborted", job, message, error=str(e))
        except Exception as e:  # noqa: BLE001 (the worker lives on; the message reappears)
            error = f"{type(e).__name__}: {e}"
            if self._set_aside_damaged_input(job, message, e):
                self._release_lease(job)
                self._delete(message)
                return self._finish(
                    "failed", job, message, error=error, note="input set aside; message deleted"
                )
            return self._finish("failed", job, message, error=error)
        if delay_s is not None:
            self.metrics.compaction_delay_seconds.set(delay_s)
        self.metrics.observe(report)
        if not report.committed:
            return self._stale(job, message, report.note, report)
        self._delete(message)
        return self._finish("committed", job, message, report=report)

    def _set_aside_damaged_input(self, job: Job, message: Message, error: Exception) -> bool:
        """``quarantine_after``: sets the input ``error`` finds damaged aside, at the
        message's ``quarantine_after``-th delivery or a later one, once a read of the file
        confirms the damage. True if the job can never commit now (its input set aside,
        here or by another worker, or no longer live). Whatever fails on the way is logged
        and leaves the message as any failure does: the worker lives on."""
        after = self.settings.quarantine_after
        if after is None or message.receive_count < after or not isinstance(error, FormatError):
            return False
        try:
            return self._confirm_and_set_aside(job, message, error)
        except Exception as e:  # noqa: BLE001 (a store away, a lost message: no quarantine)
            self.log("damage_not_confirmed", job=job.id, error=f"{type(e).__name__}: {e}")
            return False

    def _confirm_and_set_aside(self, job: Job, message: Message, error: FormatError) -> bool:
        catalog = self.compactor.catalog
        ids = {i.id for i in job.inputs}
        inputs = {f.key: f for f in catalog.snapshot().files if f.id in ids}
        damaged = inputs.get(error.object_name)  # a FormatError names its object by key
        if damaged is None:
            return False
        where = {"job": job.id, "file": damaged.id, "key": damaged.key}
        timeout_s = self.settings.visibility_timeout_s
        # The read may be long: the message and the lease stay ours while it runs, and a
        # heartbeat lost on the way (LostJob from check) means another worker has the job.
        with Heartbeat(self.queue, message, self.leases, job.id, timeout_s) as heartbeat:
            damage = file_damage(catalog.store, damaged, self.throttle)
            heartbeat.check()
        if damage is None:
            self.log("damage_not_confirmed", **where, error="the file reads clean")
            return False
        reason = fitted_reason(
            f"worker: job {job.id} failed on it at delivery {message.receive_count}: {damage}"
        )
        try:
            since_ms = set_aside(catalog, damaged, reason)
        except CatalogError as e:  # set aside by another worker, or replaced, meanwhile
            self.log("quarantine_not_committed", **where, error=str(e))
            return not self._still_takeable(damaged)
        self.metrics.files_quarantined.inc()
        self.log("file_quarantined", **where, reason=reason, since_ms=since_ms)
        return True

    def _still_takeable(self, live: LiveFile) -> bool:
        snap = self.compactor.catalog.snapshot()
        return live.id not in snap.quarantined and any(f.id == live.id for f in snap.files)

    def _release_lease(self, job: Job) -> None:
        try:
            self.leases.release(job.id)
        except Exception as e:  # noqa: BLE001 (it expires anyway)
            self.log("lease_release_failed", job=job.id, error=str(e))

    def _stale(self, job: Job, message: Message, why: str, report: JobReport | None = None) -> str:
        self._delete(message)
        return self._finish("stale", job, message, report=report, note=why)

    def _finish(
        self,
        outcome: str,
        job: Job,
        message: Message,
        *,
        report: JobReport | None = None,
        **fields: object,
    ) -> str:
        self.metrics.jobs.labels(outcome).inc()
        self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1
        if report is not None:
            fields = {
                **fields,
                "records_in": report.stats.records_in,
                "records_out": report.stats.records_out,
                "bytes_in": report.bytes_in,
                "bytes_out": report.bytes_out,
                "gets": [f.gets for f in report.inputs],
                "duration_s": round(report.duration_s, 3),
            }
        self.log(
            f"job_{outcome}", job=job.id, rule=job.rule, message_id=message.message_id, **fields
        )
        return outcome

    def _compaction_delay_s(self, snap: Snapshot, job: Job) -> float | None:
        """How long the job's oldest input has waited, from ``snap`` (a file's creation
        time never changes, so the state read before the lease tells it)."""
        created = {f.id: f.created_ms for f in snap.files}
        times = [created[i.id] for i in job.inputs if i.id in created]
        if not times:
            return None
        return max(0.0, (self.compactor.catalog.clock() - min(times)) / 1000)

    def _heartbeat_failed(self, job: Job, error: LostJob) -> None:
        self.metrics.heartbeat_failures.inc()
        self.log("heartbeat_failed", job=job.id, error=str(error))

    def _delete(self, message: Message) -> None:
        try:
            self.queue.delete(message)
        except QueueError as e:
            # Receipt invalid: another consumer holds it now. Any other failure: it
            # reappears after its timeout. Either way whoever runs it next finds it stale.
            self.log("delete_failed", message_id=message.message_id, error=str(e))

    def _release(self, message: Message) -> None:
        try:
            self.queue.release(message)
        except Exception as e:  # noqa: BLE001 (it reappears after its timeout anyway)
            self.log("release_failed", message_id=message.message_id, error=str(e))
