"""The queue layer's one error family."""

from __future__ import annotations


class QueueError(Exception):
    """Any failure talking to the job queue; the message names the queue."""


class QueueUnreachable(QueueError):
    """The queue's endpoint did not answer."""


class ReceiptInvalid(QueueError):
    """A message's receipt handle no longer works: its visibility timeout expired (and
    another consumer may have received it), or it was deleted."""


class LostJob(QueueError):
    """A worker no longer owns the job it is running: a heartbeat could not extend the
    message's visibility or renew the job's lease. The job stops and commits nothing."""
