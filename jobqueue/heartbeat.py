"""While a worker runs a job, a heartbeat keeps the job its own: at about a third of the
visibility timeout it extends the message's visibility and renews the job's lease, each
to the full timeout again."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from types import TracebackType

from compactor.catalog.leases import JobLeases
from compactor.jobqueue.errors import LostJob
from compactor.jobqueue.sqs import JobQueue, Message

BEATS_PER_TIMEOUT = 3


class Heartbeat:
    """A daemon thread for one job. After a failed beat it stops beating, and ``check``
    (the job's guard) raises LostJob: the worker no longer owns the job, so it must not
    commit it. Invariant: while ``check`` passes, the message and the lease were both
    extended less than a third of the timeout ago (or the job has just started)."""

    def __init__(
        self,
        queue: JobQueue,
        message: Message,
        leases: JobLeases,
        job_id: str,
        timeout_s: int,
        on_failure: Callable[[LostJob], None] = lambda e: None,
        *,
        unread: bool = False,
    ) -> None:
        self._queue, self._message, self._leases = queue, message, leases
        self._job_id, self._timeout_s = job_id, timeout_s
        self._unread = unread  # a drop job's lease may hold a quarantined file
        self._on_failure = on_failure
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"heartbeat-{job_id}", daemon=True)
        self.beats = 0
        self.lost: LostJob | None = None
        self._stale_after_s = timeout_s * 2 / BEATS_PER_TIMEOUT
        self._last_ok = time.monotonic()

    def __enter__(self) -> Heartbeat:
        self._last_ok = time.monotonic()
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join()

    def check(self) -> None:
        """LostJob after a failed beat, or once no beat has succeeded for 2/3 of the
        timeout (a beat stuck in a slow call: the message may be visible to others)."""
        if self.lost is None and time.monotonic() - self._last_ok > self._stale_after_s:
            self.lost = LostJob(
                f"job {self._job_id}: no heartbeat succeeded for {self._stale_after_s:.1f} s"
            )
            self._on_failure(self.lost)
        if self.lost is not None:
            raise self.lost

    def _run(self) -> None:
        interval = self._timeout_s / BEATS_PER_TIMEOUT
        while not self._stop.wait(interval):
            try:
                self._queue.extend(self._message, self._timeout_s)
                self._leases.renew(self._job_id, self._timeout_s * 1000, unread=self._unread)
            except Exception as e:  # noqa: BLE001 (any failure means the job is not ours)
                if self.lost is not None:
                    return  # check() already declared it lost
                self.lost = LostJob(f"job {self._job_id}: heartbeat failed: {e}")
                self._on_failure(self.lost)
                return
            self.beats += 1
            self._last_ok = time.monotonic()
