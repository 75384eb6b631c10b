"""``S3Store``: S3, MinIO, LocalStack.

Control calls (head, put, list, delete, multipart create/complete/abort, whole-object and
ranged GETs) go through a boto3 client on the caller's thread. Streaming GETs and
multipart part uploads go through aiobotocore on one event loop owned by the store and
run in a daemon thread; the synchronous API hands coroutines to it.

Endpoint: the ``endpoint_url`` argument, else ``AWS_ENDPOINT_URL_S3``, else
``AWS_ENDPOINT_URL``, else AWS; the one resolved value is given to both clients.
Credentials and region: the standard AWS chain (``region_name`` overrides the region).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import boto3
from aiobotocore.config import AioConfig
from aiobotocore.session import get_session
from botocore.config import Config
from botocore.exceptions import ClientError

from ._loop import LoopThread
from ._s3errors import BODY_ERRORS, error_code, map_error
from .base import (
    GetCounter,
    MultipartWriter,
    ObjectInfo,
    ObjectStore,
    ObjectStream,
    PreconditionFailed,
    StoreError,
    check_buffer_size,
)
from .keys import check_conditions, check_key, check_prefix
from .s3multipart import S3MultipartWriter
from .s3stream import S3ObjectStream

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

MiB = 1 << 20
DEFAULT_PART_SIZE = 8 * MiB
DEFAULT_STREAM_CHUNK = 1 * MiB


class S3Store(ObjectStore):
    """Objects under ``s3://bucket/prefix/``.

    ``part_size``: multipart part size (AWS requires >= 5 MiB for all but the last part);
    after every 1000 parts the size grows by another ``part_size`` so the 10,000-part
    limit is never reached first. ``max_resumes``: how many times one stream may be
    re-opened after its connection broke. ``max_attempts``/``connect_timeout``: botocore
    retries, kept short so an unreachable endpoint fails within seconds.
    """

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        endpoint_url: str | None = None,
        *,
        region_name: str | None = None,
        part_size: int = DEFAULT_PART_SIZE,
        stream_chunk_size: int = DEFAULT_STREAM_CHUNK,
        max_resumes: int = 5,
        max_attempts: int = 3,
        connect_timeout: float = 2.0,
        read_timeout: float = 30.0,
        max_pool_connections: int = 256,
    ) -> None:
        if not bucket:
            raise StoreError("S3 store needs a bucket name")
        if part_size < 1:
            raise ValueError(f"part_size must be positive, got {part_size}")
        self.bucket = bucket
        self.prefix = prefix.rstrip("/")
        if self.prefix:
            check_prefix(self.prefix, f"s3://{bucket}")
        self.url = f"s3://{bucket}/{self.prefix}" if self.prefix else f"s3://{bucket}"
        self.gets = GetCounter()
        self.part_size = part_size
        self.stream_chunk_size = stream_chunk_size
        self.max_resumes = max_resumes

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
        self._client: S3Client = boto3.session.Session().client(
            "s3", region_name=region_name, endpoint_url=endpoint, config=Config(**options)
        )
        self.endpoint_url: str = self._client.meta.endpoint_url
        self._endpoint_arg = endpoint
        self._loop: LoopThread | None = None
        self._aio_client: Any = None
        self._aio_lock = threading.Lock()
        self._streams: set[ObjectStream] = set()
        self._closed = False

    # -- plumbing --------------------------------------------------------------------

    def full_key(self, key: str) -> str:
        check_key(key, self.url)
        return f"{self.prefix}/{key}" if self.prefix else key

    def where(self, key: str) -> str:
        return f"{self.url}/{key}"

    def error(self, e: BaseException, op: str, key: str | None = None) -> StoreError:
        where = self.where(key) if key is not None else self.url
        return map_error(e, op=op, where=where, bucket=self.bucket, endpoint=self.endpoint_url)

    def aio(self) -> tuple[LoopThread, Any]:
        """The event-loop thread and the aiobotocore client, created on first use."""
        with self._aio_lock:
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
        return await ctx.__aenter__()

    # -- ObjectStore -----------------------------------------------------------------

    def head(self, key: str) -> ObjectInfo:
        full = self.full_key(key)
        try:
            r = self._client.head_object(Bucket=self.bucket, Key=full)
        except Exception as e:
            raise self.error(e, "head", key) from e
        return ObjectInfo(key, r["ContentLength"], r["ETag"])

    def get(self, key: str) -> tuple[bytes, str]:
        full = self.full_key(key)
        try:
            return self._small_get(key, Bucket=self.bucket, Key=full)
        except Exception as e:
            raise self.error(e, "get", key) from e

    def get_range(self, key: str, start: int, end: int) -> bytes:
        """With ``start < 0`` the last ``-start`` bytes (``end`` is ignored). ``[start,
        end)`` is clipped to the object; an empty range returns ``b""`` without a GET."""
        full = self.full_key(key)
        if start >= 0 and end <= start:
            return b""
        spec = f"bytes={start}" if start < 0 else f"bytes={start}-{end - 1}"
        try:
            return self._small_get(key, Bucket=self.bucket, Key=full, Range=spec)[0]
        except ClientError as e:
            if error_code(e)[1] == 416:
                return b""  # range starts past the end (or the object is empty)
            raise self.error(e, "get range of", key) from e
        except Exception as e:
            raise self.error(e, "get range of", key) from e

    def _small_get(self, key: str, **request: Any) -> tuple[bytes, str]:
        """One GET read whole. If the body breaks mid-way (botocore does not retry that)
        the whole GET is repeated: the result is always one version's bytes and ETag."""
        attempts = 3
        for attempt in range(attempts):
            self.gets.add(key)
            r = self._client.get_object(**request)
            try:
                return r["Body"].read(), r["ETag"]
            except BODY_ERRORS:
                if attempt == attempts - 1:
                    raise
            finally:
                r["Body"].close()
        raise AssertionError("unreachable")

    def open_stream(
        self, key: str, start: int = 0, *, buffer_size: int | None = None
    ) -> ObjectStream:
        if start < 0:
            raise ValueError(f"stream start must be >= 0, got {start}")
        chunk = self.stream_chunk_size if buffer_size is None else check_buffer_size(buffer_size)
        stream = S3ObjectStream(self, key, start, chunk)
        with self._aio_lock:
            self._streams.add(stream)
        return stream

    def forget_stream(self, stream: ObjectStream) -> None:
        with self._aio_lock:
            self._streams.discard(stream)

    def put(
        self, key: str, data: bytes, *, if_none_match: bool = False, if_match: str | None = None
    ) -> str:
        check_conditions(if_none_match, if_match)
        full = self.full_key(key)
        try:
            if if_none_match:
                r = self._client.put_object(
                    Bucket=self.bucket, Key=full, Body=data, IfNoneMatch="*"
                )
            elif if_match is not None:
                r = self._client.put_object(
                    Bucket=self.bucket, Key=full, Body=data, IfMatch=if_match
                )
            else:
                r = self._client.put_object(Bucket=self.bucket, Key=full, Body=data)
        except ClientError as e:
            if if_match is not None and error_code(e)[0] in ("NoSuchKey", "404"):
                raise PreconditionFailed(
                    f"put {self.where(key)}: object does not exist (If-Match {if_match})"
                ) from e
            raise self.error(e, "put", key) from e
        except Exception as e:
            raise self.error(e, "put", key) from e
        return r["ETag"]

    def open_multipart(self, key: str, *, if_none_match: bool = False) -> MultipartWriter:
        self.full_key(key)
        return S3MultipartWriter(self, key, if_none_match)

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        """Keys starting with ``prefix`` (a plain string prefix), in S3's sorted order."""
        check_prefix(prefix, self.url)
        strip = len(self.prefix) + 1 if self.prefix else 0
        full_prefix = f"{self.prefix}/{prefix}" if self.prefix else prefix
        pages = self._client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=full_prefix
        )
        try:
            for page in pages:
                for obj in page.get("Contents", []):
                    yield ObjectInfo(obj["Key"][strip:], obj["Size"], obj["ETag"])
        except Exception as e:
            raise self.error(e, f"list {prefix!r} in") from e

    def delete(self, key: str) -> None:
        full = self.full_key(key)
        try:
            self._client.delete_object(Bucket=self.bucket, Key=full)
        except ClientError as e:
            if error_code(e)[0] in ("NoSuchKey", "404"):
                return
            raise self.error(e, "delete", key) from e
        except Exception as e:
            raise self.error(e, "delete", key) from e

    def close(self) -> None:
        """Close open streams, the aiobotocore client, the loop thread and boto3's pool."""
        with self._aio_lock:
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
        self._client.close()

    def __repr__(self) -> str:
        return f"S3Store({self.url!r}, endpoint_url={self.endpoint_url!r})"
