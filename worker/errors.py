"""Errors of the worker; each message is one line a user can act on.

A job fails with the error of the layer that found the problem: the reader's FormatError
for bad bytes (object, byte position), the store's StoreError, the catalog's
CatalogError for a commit that lost. WorkerError is for what only the worker can find: an
invariant of the job itself that does not hold. Whatever the error, a failed job has
committed nothing, its multipart uploads are aborted and its inputs are untouched
(``worker.runner``), so it is safe to run again.
"""

from __future__ import annotations


class WorkerError(Exception):
    """A job that cannot go on: something the worker relies on does not hold.

    ``str(e)`` is ``"job {job_id}: {reason}"`` (the reason alone while no job is known).
    """

    reason: str
    job_id: str | None

    def __init__(self, reason: str, *, job_id: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.job_id = job_id

    def _where(self) -> str:
        return f"job {self.job_id}" if self.job_id else ""

    def __str__(self) -> str:
        where = self._where()
        return f"{where}: {self.reason}" if where else self.reason


class PhaseMismatch(WorkerError):
    """The job's two reads of its inputs disagree: phase 2's pointer met other partitions
    or records than phase 1's did. Both read the same immutable objects in the same order,
    so an input object was replaced while the job ran, or the worker has a bug.

    ``str(e)`` is ``"job {job_id}: partition {topic}/{partition}: {reason}"``. Code that
    sees one partition's records only (``worker.partition``) raises it without the job or
    the partition; the runner adds them with ``locate``.
    """

    topic: str | None
    partition: int | None

    def __init__(
        self,
        reason: str,
        *,
        job_id: str | None = None,
        topic: str | None = None,
        partition: int | None = None,
    ) -> None:
        super().__init__(reason, job_id=job_id)
        self.topic = topic
        self.partition = partition

    def locate(self, job_id: str, topic: str, partition: int) -> None:
        """Names the job and the partition, unless the raiser already did."""
        if self.job_id is None:
            self.job_id = job_id
        if self.topic is None:
            self.topic, self.partition = topic, partition

    def _where(self) -> str:
        parts = [super()._where()]
        if self.topic is not None:
            parts.append(f"partition {self.topic}/{self.partition}")
        return ": ".join(p for p in parts if p)


class InputMismatch(WorkerError):
    """The job document names a live input file by its id, but with another key or size
    than the catalog holds for that id: the document was not planned from this catalog's
    state, or was altered on its way. File ids are never reused, so no retry can make it
    right. The job reads nothing and commits nothing: it would otherwise read one file's
    records and retire another's.

    ``str(e)`` is ``"job {job_id}: input {id} is {key} ({size} bytes) in the catalog, not
    {key} ({size} bytes)"``.
    """


class KeyBufferUnavailable(WorkerError):
    """The key buffer's table cannot be allocated at the size asked for: the machine (or
    the process's memory limit) has less than ``--key-buffer-bytes`` to give. Nothing has
    been read or written; a smaller buffer (more, smaller windows) or a larger machine
    runs the same jobs to the same outputs.

    ``str(e)`` is ``"a key buffer of {bytes} bytes cannot be allocated here: ..."``.
    """
