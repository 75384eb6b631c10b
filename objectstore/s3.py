"""``S3Store``: S3, MinIO, LocalStack.

The store creates one ``S3Connection`` (``s3conn``: clients, event loop, endpoint, key and
error mapping) and hands it to every stream (``s3stream``) and multipart writer
(``s3multipart``) it opens. Imports point one way only: this module -> s3stream,
s3multipart -> s3conn.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import Any

from botocore.exceptions import ClientError

from ._s3errors import error_code
from .base import (
    MultipartWriter,
    ObjectInfo,
    ObjectStore,
    ObjectStream,
    PendingUpload,
    check_buffer_size,
)
from .keys import check_prefix
from .s3conn import S3Connection, epoch_ms, modified_ms
from .s3multipart import S3MultipartWriter
from .s3stream import S3ObjectStream

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
        if part_size < 1:
            raise ValueError(f"part_size must be positive, got {part_size}")
        self._settings: dict[str, Any] = {
            "region_name": region_name,
            "part_size": part_size,
            "stream_chunk_size": stream_chunk_size,
            "max_resumes": max_resumes,
            "max_attempts": max_attempts,
            "connect_timeout": connect_timeout,
            "read_timeout": read_timeout,
            "max_pool_connections": max_pool_connections,
        }
        self._conn = S3Connection(
            bucket,
            prefix,
            endpoint_url,
            region_name=region_name,
            max_attempts=max_attempts,
            connect_timeout=connect_timeout,
            read_timeout=read_timeout,
            max_pool_connections=max_pool_connections,
        )
        self.bucket = self._conn.bucket
        self.prefix = self._conn.prefix
        self.url = self._conn.url
        self.endpoint_url = self._conn.endpoint_url
        self.gets = self._conn.gets
        self.part_size = part_size
        self.stream_chunk_size = stream_chunk_size
        self.max_resumes = max_resumes

    def portable(self) -> Callable[[], ObjectStore] | None:
        """The same bucket, prefix, endpoint and settings; not for a subclass, whose own
        behaviour a plain store lacks."""
        if type(self) is not S3Store:
            return None
        return functools.partial(
            S3Store, self.bucket, self.prefix, self.endpoint_url, **self._settings
        )

    def head(self, key: str) -> ObjectInfo:
        return self._conn.head(key)

    def get(self, key: str) -> tuple[bytes, str]:
        full = self._conn.full_key(key)
        try:
            return self._conn.small_get(key, Bucket=self.bucket, Key=full)
        except Exception as e:
            raise self._conn.error(e, "get", key) from e

    def get_range(self, key: str, start: int, end: int) -> bytes:
        """With ``start < 0`` the last ``-start`` bytes (``end`` is ignored). ``[start,
        end)`` is clipped to the object; an empty range returns ``b""`` without a GET."""
        full = self._conn.full_key(key)
        if start >= 0 and end <= start:
            return b""
        spec = f"bytes={start}" if start < 0 else f"bytes={start}-{end - 1}"
        try:
            return self._conn.small_get(key, Bucket=self.bucket, Key=full, Range=spec)[0]
        except ClientError as e:
            if error_code(e)[1] == 416:
                return b""  # range starts past the end (or the object is empty)
            raise self._conn.error(e, "get range of", key) from e
        except Exception as e:
            raise self._conn.error(e, "get range of", key) from e

    def open_stream(
        self, key: str, start: int = 0, *, buffer_size: int | None = None
    ) -> ObjectStream:
        if start < 0:
            raise ValueError(f"stream start must be >= 0, got {start}")
        chunk = self.stream_chunk_size if buffer_size is None else check_buffer_size(buffer_size)
        stream = S3ObjectStream(self._conn, key, start, chunk, max_resumes=self.max_resumes)
        self._conn.track_stream(stream)
        return stream

    def put(
        self, key: str, data: bytes, *, if_none_match: bool = False, if_match: str | None = None
    ) -> str:
        return self._conn.put(key, data, if_none_match=if_none_match, if_match=if_match)

    def open_multipart(self, key: str, *, if_none_match: bool = False) -> MultipartWriter:
        return S3MultipartWriter(self._conn, key, if_none_match, part_size=self.part_size)

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        """Keys starting with ``prefix`` (a plain string prefix), in S3's sorted order."""
        check_prefix(prefix, self.url)
        strip = len(self.prefix) + 1 if self.prefix else 0
        full_prefix = f"{self.prefix}/{prefix}" if self.prefix else prefix
        pages = self._conn.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=full_prefix
        )
        try:
            for page in pages:
                for obj in page.get("Contents", []):
                    yield ObjectInfo(obj["Key"][strip:], obj["Size"], obj["ETag"], modified_ms(obj))
        except Exception as e:
            raise self._conn.error(e, f"list {prefix!r} in") from e

    def delete(self, key: str) -> None:
        full = self._conn.full_key(key)
        try:
            self._conn.client.delete_object(Bucket=self.bucket, Key=full)
        except ClientError as e:
            if error_code(e)[0] in ("NoSuchKey", "404"):
                return
            raise self._conn.error(e, "delete", key) from e
        except Exception as e:
            raise self._conn.error(e, "delete", key) from e

    def pending_uploads(self) -> Iterator[PendingUpload]:
        strip = len(self.prefix) + 1 if self.prefix else 0
        pages = self._conn.client.get_paginator("list_multipart_uploads").paginate(
            Bucket=self.bucket, Prefix=f"{self.prefix}/" if self.prefix else ""
        )
        try:
            for page in pages:
                for up in page.get("Uploads", []):
                    initiated = epoch_ms(up["Initiated"])
                    yield PendingUpload(up["Key"][strip:], up["UploadId"], initiated)
        except Exception as e:
            raise self._conn.error(e, "list multipart uploads in") from e

    def upload_written_ms(self, upload: PendingUpload) -> int | None:
        """The newest of its parts' LastModified (ListParts), else its start."""
        pages = self._conn.client.get_paginator("list_parts").paginate(
            Bucket=self.bucket, Key=self._conn.full_key(upload.key), UploadId=upload.upload_id
        )
        newest = upload.initiated_ms
        try:
            for page in pages:
                for part in page.get("Parts", []):
                    newest = max(newest, epoch_ms(part["LastModified"]))
        except ClientError as e:
            if error_code(e)[0] in ("NoSuchUpload", "404"):
                return None
            raise self._conn.error(e, "list the parts of an upload of", upload.key) from e
        except Exception as e:
            raise self._conn.error(e, "list the parts of an upload of", upload.key) from e
        return newest

    def abort_upload(self, upload: PendingUpload) -> None:
        full = self._conn.full_key(upload.key)
        try:
            self._conn.client.abort_multipart_upload(
                Bucket=self.bucket, Key=full, UploadId=upload.upload_id
            )
        except ClientError as e:
            if error_code(e)[0] in ("NoSuchUpload", "404"):
                return
            raise self._conn.error(e, "abort an upload of", upload.key) from e
        except Exception as e:
            raise self._conn.error(e, "abort an upload of", upload.key) from e

    def close(self) -> None:
        """Close open streams, the aiobotocore client, the loop thread and boto3's pool."""
        self._conn.close()

    def __repr__(self) -> str:
        return f"S3Store({self.url!r}, endpoint_url={self.endpoint_url!r})"
