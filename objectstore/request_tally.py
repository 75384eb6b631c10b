"""``RequestTally``: the AWS API requests a process sends, by service and operation.

What S3 and SQS bill is requests, one per HTTP attempt: botocore's retries included, each
GET that resumes a broken stream included, whether the job that sent it committed or not.
So the tally counts at botocore's ``before-send`` event, which fires once per attempt,
for every client ``watch`` is given: the S3 store's two clients (boto3 for control calls,
aiobotocore for streams and part uploads) and the job queue's SQS client.

``SENT`` is the process's tally. A job's phase-1 helper process counts its own and
reports what it sent as it goes (``worker.phase1_process``); the worker adds that to its
``SENT``, so a worker's figures are its helper's too.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Mapping
from typing import Any

Operation = tuple[str, str]
"""(service, operation) as botocore names them: ("s3", "GetObject"), ("sqs", "SendMessage")."""


class RequestTally:
    """Thread-safe counts of requests sent, by (service, operation)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[Operation] = Counter()

    def count(self, operation: Operation, n: int = 1) -> None:
        with self._lock:
            self._counts[operation] += n

    def add(self, counts: Mapping[Operation, int]) -> None:
        with self._lock:
            self._counts.update(counts)

    def snapshot(self) -> dict[Operation, int]:
        with self._lock:
            return dict(self._counts)

    def since(self, before: Mapping[Operation, int]) -> dict[Operation, int]:
        """What was counted after ``before`` (an earlier ``snapshot``) was taken."""
        return difference(self.snapshot(), before)

    def on_send(self, event_name: str, **kwargs: Any) -> None:
        """botocore's ``before-send.<service>.<Operation>`` handler. It returns None, so
        the request goes out as it would have, and it never raises: botocore would take
        an error here for the request's own."""
        _, _, rest = event_name.partition(".")
        service, _, operation = rest.partition(".")
        self.count((service, operation))

    def watch(self, client: Any) -> None:
        """Count every request ``client`` (boto3's or aiobotocore's) sends from now on."""
        client.meta.events.register(
            "before-send", self.on_send, unique_id=f"request-tally-{id(self)}"
        )


def difference(
    now: Mapping[Operation, int], before: Mapping[Operation, int]
) -> dict[Operation, int]:
    """The counts of ``now`` above those of ``before`` (two snapshots of one tally)."""
    return {op: n - before.get(op, 0) for op, n in now.items() if n > before.get(op, 0)}


SENT = RequestTally()
"""The requests this process sent (and, in a worker, its phase-1 helper's)."""


def from_json(doc: Mapping[str, Mapping[str, int]]) -> dict[Operation, int]:
    """``as_json``'s document read back as counts: how a Spark driver adds up what its
    tasks, each in an executor process with its own ``SENT``, report they sent."""
    return {(service, op): n for service, ops in doc.items() for op, n in ops.items()}


def total(*counts: Mapping[Operation, int]) -> dict[Operation, int]:
    """The sum of several processes' counts."""
    out: Counter[Operation] = Counter()
    for c in counts:
        out.update(c)
    return dict(out)


def as_json(counts: Mapping[Operation, int]) -> dict[str, dict[str, int]]:
    """``{"s3": {"GetObject": 12, ...}, "sqs": {...}}``, sorted, for a JSON report."""
    out: dict[str, dict[str, int]] = {}
    for (service, operation), n in sorted(counts.items()):
        out.setdefault(service, {})[operation] = n
    return out
