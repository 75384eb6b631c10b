"""Shared fixtures: a real S3 (+SQS) HTTP endpoint on loopback, and stores on it.

- ``s3_endpoint`` (session): moto's server app on 127.0.0.1 (free port), behind a WSGI
  middleware that logs every request at the server (``s3_endpoint.log``, a RequestLog).
  Sets dummy AWS credentials, region and ``AWS_ENDPOINT_URL`` for the session. With
  ``COMPACTOR_TEST_S3_ENDPOINT=http://host:port`` set, that external endpoint (MinIO,
  LocalStack) is used instead, with credentials from the environment, and ``log`` is None.
- ``request_log`` (function): the server's RequestLog, reset; skips on external endpoints.
- ``s3_bucket`` (function): a fresh bucket name, emptied and deleted afterwards.
- ``s3_store`` (function): an S3Store on that bucket (closed afterwards).
- ``s3_url`` (function): ``.url`` ("s3://bucket"), ``.endpoint_url``, ``.bucket``, ``.env``
  (environment for a CLI subprocess), on the same bucket as ``s3_store``.
- ``job_queues`` (function): an SQS job queue with a dead-letter queue on the same
  endpoint (``make_job_queues`` for other timeouts and receive counts).
- ``local_store`` (function): a LocalStore in tmp_path.
- ``store`` (function): parametrized over ``local`` and ``s3``.
- ``any_store_url`` (function): CLI arguments naming a fresh store, parametrized over
  ``local`` (``["--store", DIR]``) and ``s3`` (``["--store", "s3://bucket",
  "--endpoint-url", URL]``; subprocesses also find the endpoint in the environment).

Tests that reach ``s3_endpoint`` are marked ``aws`` (see ``pytest_collection_modifyitems``):
``pytest -m aws`` runs them against an external endpoint (``make test-localstack``).
"""

from __future__ import annotations

import json
import os
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import boto3
import pytest
from botocore.config import Config

from compactor.objectstore import LocalStore, ObjectStore
from compactor.objectstore.s3 import S3Store

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

EXTERNAL_ENV = "COMPACTOR_TEST_S3_ENDPOINT"
# moto accepts parts down to this size (AWS: 5 MiB); tests use small parts to stay quick.
MOTO_PART_MIN_SIZE = 16 * 1024
MOTO_TEST_PART_SIZE = 256 * 1024
EXTERNAL_TEST_PART_SIZE = 5 * 1024 * 1024
REGION = "us-east-1"


@dataclass(frozen=True)
class LoggedRequest:
    method: str
    bucket: str
    key: str  # the object key in the bucket (with any store prefix); "" for bucket calls
    query: str
    headers: dict[str, str]  # lower-case names


class RequestLog:
    """Every request the S3 server received, in arrival order. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: list[LoggedRequest] = []

    def record(self, entry: LoggedRequest) -> None:
        with self._lock:
            self._entries.append(entry)

    def requests(
        self, method: str | None = None, key: str | None = None, *, bucket: str | None = None
    ) -> list[LoggedRequest]:
        with self._lock:
            entries = list(self._entries)
        return [
            e
            for e in entries
            if (method is None or e.method == method.upper())
            and (key is None or e.key == key)
            and (bucket is None or e.bucket == bucket)
        ]

    def count(self, method: str, key: str, *, bucket: str | None = None) -> int:
        """Requests with this method on this object key (in any bucket unless given)."""
        return len(self.requests(method, key, bucket=bucket))

    def reset(self) -> None:
        with self._lock:
            self._entries.clear()


class _LoggingApp:
    """WSGI middleware: logs each request, then hands it to moto.

    Conditional writes (PUT/POST with If-Match or If-None-Match) are serialized: moto
    checks the condition and stores the object in two steps, while S3 and MinIO make the
    pair atomic, which is what the conditional-write tests rely on.
    """

    def __init__(self, app: Callable[..., Iterable[bytes]], log: RequestLog) -> None:
        self._app = app
        self._log = log
        self._conditional = threading.Lock()

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        path = environ.get("PATH_INFO", "").encode("latin-1").decode("utf-8", "replace")
        bucket, _, key = path.lstrip("/").partition("/")
        headers = {
            name[5:].replace("_", "-").lower(): str(value)
            for name, value in environ.items()
            if name.startswith("HTTP_")
        }
        method = environ["REQUEST_METHOD"]
        self._log.record(
            LoggedRequest(method, bucket, key, environ.get("QUERY_STRING", ""), headers)
        )
        if method in ("PUT", "POST") and ("if-match" in headers or "if-none-match" in headers):
            with self._conditional:
                result = self._app(environ, start_response)
                try:
                    return [b"".join(result)]
                finally:
                    close = getattr(result, "close", None)
                    if close is not None:
                        close()
        return self._app(environ, start_response)


@dataclass
class S3Endpoint:
    url: str
    log: RequestLog | None  # None on an external endpoint
    part_size: int  # the smallest multipart part size tests should use here
    external: bool = False

    def client(self) -> S3Client:
        """A plain boto3 S3 client on this endpoint (for set-up and inspection)."""
        return boto3.client(
            "s3",
            endpoint_url=self.url,
            config=Config(
                request_checksum_calculation="when_required",
                response_checksum_validation="when_required",
                s3={"addressing_style": "path"},
            ),
        )


@dataclass
class S3Url:
    bucket: str
    endpoint_url: str
    url: str = ""
    env: dict[str, str] = field(default_factory=dict)

    @property
    def cli_args(self) -> list[str]:
        return ["--store", self.url, "--endpoint-url", self.endpoint_url]


def _start_moto(log: RequestLog) -> tuple[str, Callable[[], None]]:
    from moto.moto_server.werkzeug_app import (
        DomainDispatcherApplication,
        MotoRequestHandler,
        create_backend_app,
    )
    from werkzeug.serving import make_server

    class QuietHandler(MotoRequestHandler):
        def log_request(self, *args: Any, **kwargs: Any) -> None:
            pass

    app = _LoggingApp(DomainDispatcherApplication(create_backend_app), log)
    server = make_server("127.0.0.1", 0, app, threaded=True, request_handler=QuietHandler)
    thread = threading.Thread(target=server.serve_forever, name="moto", daemon=True)
    thread.start()

    def stop() -> None:
        server.shutdown()
        thread.join()
        server.server_close()

    return f"http://127.0.0.1:{server.server_port}", stop


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[S3Endpoint]:
    mp = pytest.MonkeyPatch()
    # Never ask the EC2 metadata service (a non-loopback address) for credentials.
    mp.setenv("AWS_EC2_METADATA_DISABLED", "true")
    mp.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    external = os.environ.get(EXTERNAL_ENV)
    try:
        if external:
            if not os.environ.get("AWS_DEFAULT_REGION") and not os.environ.get("AWS_REGION"):
                mp.setenv("AWS_DEFAULT_REGION", REGION)
            mp.setenv("AWS_ENDPOINT_URL", external)
            yield S3Endpoint(external, None, EXTERNAL_TEST_PART_SIZE, external=True)
            return
        for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_REGION"):
            mp.delenv(name, raising=False)
        mp.setenv("AWS_ACCESS_KEY_ID", "testing")
        mp.setenv("AWS_SECRET_ACCESS_KEY", "testing")
        mp.setenv("AWS_DEFAULT_REGION", REGION)
        mp.setenv("AWS_CONFIG_FILE", os.devnull)
        mp.setenv("AWS_SHARED_CREDENTIALS_FILE", os.devnull)
        mp.setenv("S3_UPLOAD_PART_MIN_SIZE", str(MOTO_PART_MIN_SIZE))
        # Objects up to this size stay in memory instead of spooling to temp files.
        mp.setenv("MOTO_S3_DEFAULT_KEY_BUFFER_SIZE", str(64 << 20))
        import moto.s3.models  # reads S3_UPLOAD_PART_MIN_SIZE at import: set it directly

        mp.setattr(moto.s3.models, "S3_UPLOAD_PART_MIN_SIZE", MOTO_PART_MIN_SIZE)
        log = RequestLog()
        url, stop = _start_moto(log)
        mp.setenv("AWS_ENDPOINT_URL", url)
        try:
            yield S3Endpoint(url, log, MOTO_TEST_PART_SIZE)
        finally:
            stop()
    finally:
        mp.undo()


@pytest.fixture
def request_log(s3_endpoint: S3Endpoint) -> RequestLog:
    if s3_endpoint.log is None:
        pytest.skip(
            f"server-side request log needs the built-in moto server ({EXTERNAL_ENV} is set)"
        )
    s3_endpoint.log.reset()
    return s3_endpoint.log


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark ``aws`` every test that reaches ``s3_endpoint``: through its fixture closure,
    or as the ``"s3"`` variant of a local/S3 parametrization (``store``, ``any_store_url``
    and tests' own ``"s3"`` params, which request S3 fixtures with getfixturevalue)."""
    for item in items:
        callspec = getattr(item, "callspec", None)
        params = callspec.params.values() if callspec is not None else ()
        if "s3_endpoint" in getattr(item, "fixturenames", ()) or "s3" in params:
            item.add_marker(pytest.mark.aws)


@pytest.fixture(autouse=True)
def _aws_marker_is_complete(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail a test that reached ``s3_endpoint`` unmarked: ``-m aws`` would skip it."""
    yield
    if "s3_endpoint" in request.fixturenames and request.node.get_closest_marker("aws") is None:
        pytest.fail(
            "this test used s3_endpoint but is not marked aws, so make test-localstack "
            "would not run it: add @pytest.mark.aws"
        )


@pytest.fixture
def s3_bucket(s3_endpoint: S3Endpoint) -> Iterator[str]:
    name = f"test-{uuid.uuid4().hex[:20]}"
    client = s3_endpoint.client()
    region = client.meta.region_name
    if region and region != "us-east-1":
        client.create_bucket(
            Bucket=name,
            CreateBucketConfiguration={"LocationConstraint": region},  # type: ignore[typeddict-item]
        )
    else:
        client.create_bucket(Bucket=name)
    try:
        yield name
    finally:
        _remove_bucket(client, name)
        client.close()


def _remove_bucket(client: S3Client, bucket: str) -> None:
    try:
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
            for obj in page.get("Contents", []):
                client.delete_object(Bucket=bucket, Key=obj["Key"])
        uploads = client.list_multipart_uploads(Bucket=bucket).get("Uploads", [])
        for up in uploads:
            client.abort_multipart_upload(Bucket=bucket, Key=up["Key"], UploadId=up["UploadId"])
        client.delete_bucket(Bucket=bucket)
    except Exception as e:  # clean-up must not mask the test's own outcome
        print(f"warning: could not remove test bucket {bucket}: {e}")


@pytest.fixture
def s3_store(s3_endpoint: S3Endpoint, s3_bucket: str) -> Iterator[S3Store]:
    store = S3Store(s3_bucket, endpoint_url=s3_endpoint.url, part_size=s3_endpoint.part_size)
    try:
        yield store
    finally:
        store.close()


@pytest.fixture
def s3_url(s3_endpoint: S3Endpoint, s3_bucket: str) -> S3Url:
    url = f"s3://{s3_bucket}"
    env = {
        name: os.environ[name]
        for name in (
            "AWS_ACCESS_KEY_ID",
            "AWS_SECRET_ACCESS_KEY",
            "AWS_SESSION_TOKEN",
            "AWS_DEFAULT_REGION",
            "AWS_REGION",
            "AWS_CONFIG_FILE",
            "AWS_SHARED_CREDENTIALS_FILE",
            "AWS_EC2_METADATA_DISABLED",
        )
        if name in os.environ
    }
    env.update(
        {
            "AWS_ENDPOINT_URL": s3_endpoint.url,
            "COMPACTOR_STORE": url,
            "COMPACTOR_S3_PART_SIZE": str(s3_endpoint.part_size),
        }
    )
    return S3Url(bucket=s3_bucket, endpoint_url=s3_endpoint.url, url=url, env=env)


@pytest.fixture
def local_store(tmp_path: Path) -> Iterator[LocalStore]:
    store = LocalStore(tmp_path / "store")
    try:
        yield store
    finally:
        store.close()


@pytest.fixture(params=["local", "s3"])
def store(request: pytest.FixtureRequest) -> ObjectStore:
    result: ObjectStore = request.getfixturevalue(f"{request.param}_store")
    return result


@pytest.fixture(params=["local", "s3"])
def any_store_url(request: pytest.FixtureRequest, tmp_path: Path) -> list[str]:
    if request.param == "local":
        return ["--store", str(tmp_path / "store")]
    s3: S3Url = request.getfixturevalue("s3_url")
    return s3.cli_args


@dataclass
class JobQueues:
    """A job queue and its dead-letter queue (redrive after ``max_receive_count``)."""

    url: str
    dlq_url: str
    endpoint_url: str
    max_receive_count: int

    def client(self) -> Any:
        return boto3.client("sqs", endpoint_url=self.endpoint_url)

    def count(self, url: str) -> int:
        """Messages in ``url``, visible or in flight (approximate, as SQS reports)."""
        attrs = self.client().get_queue_attributes(
            QueueUrl=url,
            AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
        )["Attributes"]
        return int(attrs["ApproximateNumberOfMessages"]) + int(
            attrs["ApproximateNumberOfMessagesNotVisible"]
        )


def make_job_queues(
    endpoint: S3Endpoint, visibility_timeout_s: int = 30, max_receive_count: int = 3
) -> JobQueues:
    """Fresh queues on the test endpoint (moto's server, or an external one)."""
    client = boto3.client("sqs", endpoint_url=endpoint.url)
    name = f"jobs-{uuid.uuid4().hex[:12]}"
    dlq_url = client.create_queue(QueueName=f"{name}-dlq")["QueueUrl"]
    dlq_arn = client.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])[
        "Attributes"
    ]["QueueArn"]
    redrive = {"deadLetterTargetArn": dlq_arn, "maxReceiveCount": str(max_receive_count)}
    url = client.create_queue(
        QueueName=name,
        Attributes={
            "VisibilityTimeout": str(visibility_timeout_s),
            "RedrivePolicy": json.dumps(redrive),
        },
    )["QueueUrl"]
    return JobQueues(url, dlq_url, endpoint.url, max_receive_count)


@pytest.fixture
def job_queues(s3_endpoint: S3Endpoint) -> Iterator[JobQueues]:
    queues = make_job_queues(s3_endpoint)
    try:
        yield queues
    finally:
        client = queues.client()
        for url in (queues.url, queues.dlq_url):
            try:
                client.delete_queue(QueueUrl=url)
            except Exception as e:  # clean-up must not mask the test's own outcome
                print(f"warning: could not delete test queue {url}: {e}")
