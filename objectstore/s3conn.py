"""``S3Connection``: one store's access to one bucket, shared by the store, its streams and
its multipart writers.

Control calls (head, put, list, delete, multipart create/complete/abort, whole-object and
ranged GETs) go through ``client``, a boto3 client used on the caller's thread. Streaming
GETs and multipart part uploads go through aiobotocore on one event loop run in a daemon
thread (``aio()``); the synchronous API hands coroutines to it.

Endpoint: the ``endpoint_url`` argument, else ``AWS_ENDPOINT_URL_S3``, else
``AWS_ENDPOINT_URL``, else AWS; the one resolved value is given to both clients, which
also share one botocore configuration (retries, timeouts, checksums, addressing).
Credentials and region: the standard AWS chain (``region_name`` overrides the region).

This module imports nothing from the store, stream or writer modules: they import it.
"""

from __future__ import annotations

import datetime
import os
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import boto3
from aiobotocore.config import AioConfig
from aiobotocore.session import get_session
from botocore.config import Config
from botocore.exceptions import ClientError

from ._loop import LoopThread
from ._s3errors import BODY_ERRORS, error_code, map_error, was_retried
from .base import GetCounter, ObjectInfo, ObjectStream, PreconditionFailed, StoreError
from .keys import check_conditions, check_key, check_prefix
from .request_tally import SENT

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client


def epoch_ms(when: datetime.datetime) -> int:
    """An S3 timestamp (LastModified, Initiated: timezone-aware) in ms since the epoch."""
    return int(when.timestamp() * 1000)


def modified_ms(described: Mapping[str, Any]) -> int | None:
    """An object's LastModified (HeadObject's answer, a listing's entry) in ms since the
    epoch; None if the server gave none."""
    when = described.get("LastModified")
    return None if when is None else epoch_ms(when)


class S3Connection:
    """Clients, key mapping and error mapping for ``s3://bucket/prefix/``.

    ``gets`` counts every GET sent through this connection, per store key; the process's
    ``request_tally.SENT`` counts every attempt of every request, by operation. The event loop
    and the aiobotocore client are created on the first ``aio()``; after ``close()``,
    ``aio()`` raises StoreError. Streams registered with ``track_stream`` are closed by
    ``close()`` before the loop stops.
    """

    def __init__(
        self,
        bucket: str,
        prefix: str,
        endpoint_url: str | None,
        *,
        region_name: str | None,
        max_attempts: int,
        connect_timeout: float,
        read_timeout: float,
        max_pool_connections: int,
    ) -> None:
        if not bucket:
            raise StoreError("S3 store needs a bucket name")
        self.bucket = bucket
        self.prefix = prefix.rstrip("/")
        if self.prefix:
            check_prefix(self.prefix, f"s3://{bucket}")
        self.url = f"s3://{bucket}/{self.prefix}" if self.prefix else f"s3://{bucket}"
        self.gets = GetCounter()

        endpoint = (
            endpoint_url
            or os.environ.get("AWS_ENDPOINT_URL_S3")
            or os.environ.get("AWS_ENDPOINT_URL")
            or None
        )
        options: dict[str, Any] = {
            "connect_timeout": connect_timeout,
            "read_timeout": read_timeout,
            "retries": {"mode": "standard", "total_max_attempts": max_attempts},
            "request_checksum_calculation": "when_required",
            "response_checksum_validation": "when_required",
            "max_pool_connections": max_pool_connections,
        }
        if endpoint is not None:
            # MinIO, LocalStack, moto: bucket names are not DNS names there.
            options["s3"] = {"addressing_style": "path"}
        self._aio_options = options
        self._region = region_name
        self._endpoint_arg = endpoint
        self.client: S3Client = boto3.session.Session().client(
            "s3", region_name=region_name, endpoint_url=endpoint, config=Config(**options)
        )
        SENT.watch(self.client)
        self.endpoint_url: str = self.client.meta.endpoint_url
        self._loop: LoopThread | None = None
        self._aio_client: Any = None
        self._lock = threading.Lock()  # guards the loop, the aio client, streams, closing
        self._streams: set[ObjectStream] = set()
        self._closed = False

    # -- keys and errors -------------------------------------------------------------

    def full_key(self, key: str) -> str:
        """The bucket key for a store key (checked, then put under the prefix)."""
        check_key(key, self.url)
        return f"{self.prefix}/{key}" if self.prefix else key

    def where(self, key: str) -> str:
        return f"{self.url}/{key}"

    def error(self, e: BaseException, op: str, key: str | None = None) -> StoreError:
        where = self.where(key) if key is not None else self.url
        return map_error(e, op=op, where=where, bucket=self.bucket, endpoint=self.endpoint_url)

    # -- requests shared by the store and its writers --------------------------------

    def head(self, key: str) -> ObjectInfo:
        """One ``head_object`` of a store key; see ``ObjectStore.head``."""
        try:
            r = self.client.head_object(Bucket=self.bucket, Key=self.full_key(key))
        except Exception as e:
            raise self.error(e, "head", key) from e
        return ObjectInfo(key, r["ContentLength"], r["ETag"], modified_ms(r))

    def put(
        self, key: str, data: bytes, *, if_none_match: bool = False, if_match: str | None = None
    ) -> str:
        """One ``put_object`` of a store key; see ``ObjectStore.put``. Under
        ``if_none_match``, a refusal of botocore's retry is believed only if the key does
        not hold exactly ``data`` (``_etag_if_holding``)."""
        check_conditions(if_none_match, if_match)
        full = self.full_key(key)
        try:
            if if_none_match:
                r = self.client.put_object(Bucket=self.bucket, Key=full, Body=data, IfNoneMatch="*")
            elif if_match is not None:
                r = self.client.put_object(
                    Bucket=self.bucket, Key=full, Body=data, IfMatch=if_match
                )
            else:
                r = self.client.put_object(Bucket=self.bucket, Key=full, Body=data)
        except ClientError as e:
            if if_match is not None and error_code(e)[0] in ("NoSuchKey", "404"):
                raise PreconditionFailed(
                    f"put {self.where(key)}: object does not exist (If-Match {if_match})"
                ) from e
            refusal = self.error(e, "put", key)
            if if_none_match and isinstance(refusal, PreconditionFailed) and was_retried(e):
                etag = self._etag_if_holding(key, full, data)
                if etag is not None:
                    return etag
            raise refusal from e
        except Exception as e:
            raise self.error(e, "put", key) from e
        return r["ETag"]

    def _etag_if_holding(self, key: str, full: str, data: bytes) -> str | None:
        """The object's ETag if the key holds exactly ``data``: a create-if-absent PUT
        whose answer was lost landed, and botocore's retry found the key taken by it.
        Read back, not judged by the ETag, which is no MD5 under SSE-KMS. One GET, only
        after a refused retry; None if the key holds anything else or the GET failed (the
        refusal then stands, as it would have without the look)."""
        try:
            held, etag = self.small_get(key, Bucket=self.bucket, Key=full)
        except Exception:
            return None
        return etag if held == data else None

    def small_get(self, key: str, **request: Any) -> tuple[bytes, str]:
        """One ``get_object`` of store key ``key`` (``request``: its arguments) read
        whole, counted in ``gets``. If the body breaks mid-way (botocore does not retry
        that) the whole GET is repeated: the result is always one version's bytes and
        ETag."""
        attempts = 3
        for attempt in range(attempts):
            self.gets.add(key)
            r = self.client.get_object(**request)
            try:
                return r["Body"].read(), r["ETag"]
            except BODY_ERRORS:
                if attempt == attempts - 1:
                    raise
            finally:
                r["Body"].close()
        raise AssertionError("unreachable")

    # -- the event loop and open streams ---------------------------------------------

    def aio(self) -> tuple[LoopThread, Any]:
        """The event-loop thread and the aiobotocore client, created on first use."""
        with self._lock:
            if self._closed:
                raise StoreError(f"{self.url} is closed")
            if self._loop is None:
                self._loop = LoopThread(f"s3-loop-{self.bucket}")
            if self._aio_client is None:
                self._aio_client = self._loop.call(self._create_aio_client())
            return self._loop, self._aio_client

    async def _create_aio_client(self) -> Any:
        ctx = get_session().create_client(
            "s3",
            region_name=self._region,
            endpoint_url=self._endpoint_arg,
            config=AioConfig(**self._aio_options),
        )
        client = await ctx.__aenter__()
        SENT.watch(client)
        return client

    def track_stream(self, stream: ObjectStream) -> None:
        """Have ``close()`` close ``stream`` if it is still open then."""
        with self._lock:
            self._streams.add(stream)

    def forget_stream(self, stream: ObjectStream) -> None:
        with self._lock:
            self._streams.discard(stream)

    def close(self) -> None:
        """Close open streams, the aiobotocore client, the loop thread and boto3's pool.
        Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            streams = list(self._streams)
        for stream in streams:
            stream.close()
        if self._loop is not None:
            if self._aio_client is not None:
                client, self._aio_client = self._aio_client, None
                try:
                    self._loop.call(client.close())
                finally:
                    self._loop.stop()
            else:
                self._loop.stop()
        self.client.close()
