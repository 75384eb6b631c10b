"""Streaming multipart upload to S3 with bounded memory.

Invariants:

- At most one part is buffered here (plus what a single ``write`` hands over) and at
  most ``MAX_IN_FLIGHT`` parts are uploading (through aiobotocore on the connection's
  loop).
- The multipart upload is created when the first part is full. An object smaller than
  one part (including an empty one) is written by one ``put_object`` at ``complete``,
  with the same If-None-Match condition.
- Any failure aborts the upload (nothing visible, no parts left behind); so does leaving
  the ``with`` block without a successful ``complete``.
- ``complete`` succeeds when the request that wrote the object landed and its answer was
  lost: botocore retries it, and S3 refuses the retry (NoSuchUpload: the upload is
  already complete; PreconditionFailed: the object now exists). A refused retry of
  CompleteMultipartUpload is believed only if the object's ETag is not the one S3
  derives from the parts uploaded (``multipart_etag``); if it is, the first attempt
  wrote it. The PUT of a small object is the connection's, which reads the key back
  after a refused retry (``S3Connection.put``).

The writer holds only the store's ``S3Connection`` (never the store itself).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import hashlib
from collections import deque
from types import TracebackType
from typing import Any

from botocore.exceptions import ClientError

from ._s3errors import error_code, was_retried
from .base import MultipartWriter, PreconditionFailed, StoreError
from .s3conn import S3Connection

MAX_IN_FLIGHT = 2
CREATE_WAIT_S = 60.0
"""How long an abort waits for an interrupted CreateMultipartUpload to answer."""
MAX_PARTS = 10_000
_GROWTH_EVERY = 1000  # parts; then the part size grows by one base part size


class S3MultipartWriter(MultipartWriter):
    def __init__(
        self, conn: S3Connection, key: str, if_none_match: bool, *, part_size: int
    ) -> None:
        self.key = key
        self.bytes_written = 0
        self.part_size = part_size
        self._conn = conn
        self._full_key = conn.full_key(key)
        self._if_none_match = if_none_match
        self._buf = bytearray()
        self._upload_id: str | None = None
        self._creating: concurrent.futures.Future[str] | None = None
        self._next_part = 1
        self._in_flight: deque[tuple[int, concurrent.futures.Future[str]]] = deque()
        self._done: list[dict[str, Any]] = []
        self._state = "open"  # -> "completed" | "aborted"
        self._etag: str | None = None

    def _part_size(self, number: int) -> int:
        return self.part_size * (1 + (number - 1) // _GROWTH_EVERY)

    def _check_open(self) -> None:
        if self._state != "open":
            raise StoreError(f"multipart writer for {self._conn.where(self.key)} is {self._state}")

    def write(self, data: bytes | memoryview) -> None:
        self._check_open()
        self._buf += data
        self.bytes_written += len(data)
        while len(self._buf) >= (size := self._part_size(self._next_part)):
            part = bytes(self._buf[:size])
            del self._buf[:size]
            self._send(part)

    def _send(self, part: bytes) -> None:
        try:
            if self._upload_id is None:
                self._upload_id = self._create().result()
            while len(self._in_flight) >= MAX_IN_FLIGHT:
                self._collect_oldest()
            number = self._next_part
            if number > MAX_PARTS:
                raise StoreError(
                    f"{self._conn.where(self.key)}: more than {MAX_PARTS} multipart parts"
                )
            loop, client = self._conn.aio()
            future = loop.submit(self._upload_part(client, self._upload_id, number, part))
            self._in_flight.append((number, future))
            self._next_part += 1
        except Exception as e:
            self._abort_quietly()
            if isinstance(e, StoreError):
                raise
            raise self._conn.error(e, "upload part of", self.key) from e
        except BaseException:
            self._abort_quietly()
            raise

    def _create(self) -> concurrent.futures.Future[str]:
        """Starts the upload on the connection's loop thread. A signal that interrupts the
        caller's wait (SIGTERM raises in the main thread) cannot interrupt the request
        there, so ``abort`` still learns the upload's id once S3 has created it, and
        aborts it instead of leaving it to garbage collection."""
        loop, client = self._conn.aio()
        self._creating = loop.submit(self._create_upload(client))
        return self._creating

    async def _create_upload(self, client: Any) -> str:
        r = await client.create_multipart_upload(Bucket=self._conn.bucket, Key=self._full_key)
        upload_id: str = r["UploadId"]
        return upload_id

    async def _upload_part(self, client: Any, upload_id: str, number: int, part: bytes) -> str:
        r = await client.upload_part(
            Bucket=self._conn.bucket,
            Key=self._full_key,
            UploadId=upload_id,
            PartNumber=number,
            Body=part,
        )
        etag: str = r["ETag"]
        return etag

    def _collect_oldest(self) -> None:
        number, future = self._in_flight.popleft()
        self._done.append({"PartNumber": number, "ETag": future.result()})

    def complete(self) -> str:
        if self._state == "completed" and self._etag is not None:
            return self._etag
        self._check_open()
        if self._upload_id is None:
            data = bytes(self._buf)
            try:
                etag = self._conn.put(self.key, data, if_none_match=self._if_none_match)
            finally:
                self._state = "aborted"  # replaced below on success
                self._buf = bytearray()
        else:
            if self._buf:
                part = bytes(self._buf)
                self._buf = bytearray()
                self._send(part)
            try:
                while self._in_flight:
                    self._collect_oldest()
                request: dict[str, Any] = {
                    "Bucket": self._conn.bucket,
                    "Key": self._full_key,
                    "UploadId": self._upload_id,
                    "MultipartUpload": {"Parts": self._done},
                }
                if self._if_none_match:
                    request["IfNoneMatch"] = "*"
                try:
                    etag = self._conn.client.complete_multipart_upload(**request)["ETag"]
                except ClientError as e:
                    etag = self._landed_despite(e)
            except Exception as e:
                self._abort_quietly()
                if isinstance(e, StoreError):
                    raise
                raise self._conn.error(e, "complete multipart upload of", self.key) from e
            except BaseException:
                self._abort_quietly()
                raise
        self._state, self._etag = "completed", etag
        return etag

    def _landed_despite(self, refusal: ClientError) -> str:
        """The object's ETag if a refused CompleteMultipartUpload was a retry of one that
        had landed, its answer lost; else the refusal, as the store's error: an upload gone
        with no object (aborted, or expired by a lifecycle rule) is a StoreError, and a key
        another object took first, under If-None-Match, is PreconditionFailed."""
        code, status = error_code(refusal)
        refused = code == "NoSuchUpload" or code == "PreconditionFailed" or status == 412
        if not (refused and was_retried(refusal)):
            raise refusal
        expected = multipart_etag([part["ETag"] for part in self._done])
        now = self._etag_now()
        if expected is not None and now == expected:
            return expected
        if code == "NoSuchUpload" and self._if_none_match and now is not None:
            raise PreconditionFailed(
                f"complete multipart upload of {self._conn.where(self.key)}: precondition "
                "failed (the key holds another object)"
            ) from refusal
        raise refusal

    def _etag_now(self) -> str | None:
        """The ETag of the object at the key now, quoted; None if there is none or the HEAD
        failed (the refusal then stands, as it would have without the look)."""
        try:
            bare = self._conn.head(self.key).etag.strip('"')
        except StoreError:
            return None
        return f'"{bare}"'

    def abort(self) -> None:
        """Discard everything; raises StoreError only if S3 refused the abort."""
        if self._state != "open":
            return
        self._state = "aborted"
        self._buf = bytearray()
        for _, future in self._in_flight:
            future.cancel()
        concurrent.futures.wait([f for _, f in self._in_flight])
        self._in_flight.clear()
        if self._upload_id is None and self._creating is not None:
            with contextlib.suppress(Exception):  # never created: nothing to abort
                self._upload_id = self._creating.result(timeout=CREATE_WAIT_S)
        if self._upload_id is None:
            return
        try:
            self._conn.client.abort_multipart_upload(
                Bucket=self._conn.bucket, Key=self._full_key, UploadId=self._upload_id
            )
        except ClientError as e:
            if error_code(e)[0] != "NoSuchUpload":
                raise self._conn.error(e, "abort multipart upload of", self.key) from e
        except Exception as e:
            raise self._conn.error(e, "abort multipart upload of", self.key) from e

    def _abort_quietly(self) -> None:
        # The original failure matters more; S3 lifecycle rules reclaim leftover uploads.
        with contextlib.suppress(StoreError):
            self.abort()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._state != "completed":
            self._abort_quietly()


def multipart_etag(part_etags: list[str]) -> str | None:
    """The ETag S3 gives an object completed from parts of these ETags: the MD5 of the
    parts' MD5 digests concatenated, a dash and the number of parts; None if a part's
    ETag is not 16 bytes in hex. S3, MinIO, LocalStack and moto agree. Under SSE-KMS or
    SSE-C an ETag is no MD5 of the bytes, and the object's never equals the result: such
    an object is never taken for one this writer wrote."""
    try:
        digests = [bytes.fromhex(etag.strip('"')) for etag in part_etags]
    except ValueError:
        return None
    if any(len(digest) != 16 for digest in digests):
        return None
    whole = hashlib.md5(b"".join(digests), usedforsecurity=False).hexdigest()
    return f'"{whole}-{len(part_etags)}"'
