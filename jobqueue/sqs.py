"""``JobQueue``: one SQS queue of job documents, through boto3.

Endpoint: ``AWS_ENDPOINT_URL_SQS`` if set; else, for a queue URL outside amazonaws.com
(LocalStack, ElasticMQ, a moto server), the queue URL's own origin, since the URL says
where the queue is; else boto3's choice for AWS (which honours ``AWS_ENDPOINT_URL``).
The store's ``--endpoint-url`` does not apply: S3 and SQS may live apart (MinIO and
ElasticMQ). Region: the standard chain, else
the one the queue URL names, else us-east-1. Credentials: the standard chain; they never
appear in a message or a log line.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar
from urllib.parse import urlsplit

from botocore.exceptions import BotoCoreError, ClientError, EndpointConnectionError

from compactor.jobqueue.errors import QueueError, QueueUnreachable, ReceiptInvalid
from compactor.objectstore.request_tally import SENT
from compactor.planner.job import Job

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient

_T = TypeVar("_T")

LONG_POLL_S = 20
"""SQS's longest receive wait; the client's read timeout exceeds it."""
READ_TIMEOUT_S = LONG_POLL_S + 10

_GONE = {"ReceiptHandleIsInvalid", "MessageNotInflight", "InvalidParameterValue"}
_MISSING = {"AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist", "NonExistentQueue"}
_REGION_IN_URL = (
    re.compile(r"^sqs[.-]([a-z0-9-]+)\.amazonaws\.com"),  # sqs.us-east-1.amazonaws.com
    re.compile(r"^/queue/([a-z0-9-]+)/"),  # LocalStack's path strategy
)


@dataclass(frozen=True, slots=True)
class Message:
    body: str
    receipt: str
    message_id: str
    receive_count: int
    """How many times SQS has handed this message out, this time included."""


class JobQueue:
    def __init__(self, url: str) -> None:
        self.url = url
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise QueueError(f"not a queue URL: {url!r} (expected http(s)://host/.../name)")
        endpoint_url = os.environ.get("AWS_ENDPOINT_URL_SQS") or None
        if endpoint_url is None and not _is_aws(parts.netloc):
            endpoint_url = f"{parts.scheme}://{parts.netloc}"
        import boto3  # here, not at the top: every CLI command imports this module
        from botocore.config import Config

        self._client: SQSClient = boto3.session.Session().client(
            "sqs",
            endpoint_url=endpoint_url,
            region_name=_region(parts.netloc, parts.path),
            config=Config(
                connect_timeout=2,
                read_timeout=READ_TIMEOUT_S,
                retries={"max_attempts": 3, "mode": "standard"},
            ),
        )
        SENT.watch(self._client)
        self.fifo = url.endswith(".fifo")

    def visibility_timeout_s(self) -> int:
        """The queue's default visibility timeout (its ``VisibilityTimeout`` attribute)."""
        attrs = self._call(
            "read the attributes of",
            lambda: self._client.get_queue_attributes(
                QueueUrl=self.url, AttributeNames=["VisibilityTimeout"]
            ),
        )
        return int(attrs["Attributes"]["VisibilityTimeout"])

    def send(self, job: Job) -> str:
        """Publish ``job``'s document; returns the message id."""
        body = job.dumps()
        if self.fifo:
            r = self._call(
                "send to",
                lambda: self._client.send_message(
                    QueueUrl=self.url,
                    MessageBody=body,
                    MessageGroupId=job.id,
                    MessageDeduplicationId=job.id,
                ),
            )
        else:
            r = self._call(
                "send to", lambda: self._client.send_message(QueueUrl=self.url, MessageBody=body)
            )
        return r["MessageId"]

    def receive(self, wait_s: int, visibility_s: int) -> Message | None:
        """At most one message, waiting up to ``wait_s`` (a long poll), invisible to
        others for ``visibility_s`` from now."""
        r = self._call(
            "receive from",
            lambda: self._client.receive_message(
                QueueUrl=self.url,
                MaxNumberOfMessages=1,
                WaitTimeSeconds=wait_s,
                VisibilityTimeout=visibility_s,
                MessageSystemAttributeNames=["ApproximateReceiveCount"],
            ),
        )
        for m in r.get("Messages", []):
            count = int(m.get("Attributes", {}).get("ApproximateReceiveCount", "1"))
            return Message(m.get("Body", ""), m["ReceiptHandle"], m["MessageId"], count)
        return None

    def extend(self, message: Message, visibility_s: int) -> None:
        """Keep ``message`` invisible for ``visibility_s`` from now (0: visible at once).
        ReceiptInvalid if its receipt no longer works."""
        self._call(
            "change a message's visibility in",
            lambda: self._client.change_message_visibility(
                QueueUrl=self.url, ReceiptHandle=message.receipt, VisibilityTimeout=visibility_s
            ),
            message,
        )

    def release(self, message: Message) -> None:
        """Make ``message`` visible again at once, for the next consumer."""
        self.extend(message, 0)

    def delete(self, message: Message) -> None:
        """ReceiptInvalid if its receipt no longer works."""
        self._call(
            "delete a message from",
            lambda: self._client.delete_message(QueueUrl=self.url, ReceiptHandle=message.receipt),
            message,
        )

    def close(self) -> None:
        self._client.close()

    def _call(self, what: str, request: Callable[[], _T], message: Message | None = None) -> _T:
        try:
            return request()
        except ClientError as e:
            code = str(e.response.get("Error", {}).get("Code", ""))
            text = str(e.response.get("Error", {}).get("Message", "")) or code
            if message is not None and code in _GONE:
                raise ReceiptInvalid(
                    f"message {message.message_id} in {self.url}: receipt no longer valid ({text})"
                ) from None
            if code in _MISSING:
                raise QueueError(f"queue {self.url} does not exist") from None
            raise QueueError(f"cannot {what} queue {self.url}: {code}: {text}") from None
        except EndpointConnectionError as e:
            raise QueueUnreachable(f"queue {self.url} is unreachable: {e}") from None
        except BotoCoreError as e:
            raise QueueError(f"cannot {what} queue {self.url}: {e}") from None


def _is_aws(netloc: str) -> bool:
    return netloc.split(":")[0].endswith(".amazonaws.com")


def _region(netloc: str, path: str) -> str | None:
    import boto3

    if boto3.session.Session().region_name:
        return None  # the standard chain has one
    for pattern, text in zip(_REGION_IN_URL, (netloc, path), strict=True):
        if m := pattern.match(text):
            return m.group(1)
    return "us-east-1"
