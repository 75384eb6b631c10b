"""One sequential GET stream over an S3 object, with resume after a broken connection.

Invariants:

- The body is read on the connection's event loop in chunks of ``chunk_size`` bytes (the
  store's ``stream_chunk_size`` unless the caller chose another; more for a bigger
  ``read``), so many small reads do not each cross threads. ``_buf`` holds at most one
  chunk.
- ``_wire`` is the absolute position of the next byte the current body delivers; bytes
  before it are either returned or held in ``_buf``.
- A body that fails mid-way (or ends before ``size``) is closed and re-opened with
  ``Range: bytes=<_wire>-`` and ``If-Match: <etag of the first response>``, so a resumed
  stream never mixes two versions: if the object changed, the read fails with StoreError.
  Each re-open counts in ``resumes`` and in the connection's (the store's) GET counter;
  at most ``max_resumes`` re-opens per stream.
- The body is closed at EOF, on ``close()``, and when the store closes its connection.

The stream holds only the store's ``S3Connection`` (never the store itself).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from ._s3errors import BODY_ERRORS, error_code
from .base import ObjectNotFound, ObjectStream, StoreError
from .s3conn import S3Connection

if TYPE_CHECKING:
    from ._loop import LoopThread


class S3ObjectStream(ObjectStream):
    def __init__(
        self, conn: S3Connection, key: str, start: int, chunk_size: int, *, max_resumes: int
    ) -> None:
        self.key = key
        self.chunk_size = chunk_size
        self.position = start
        self.resumes = 0
        self.max_resumes = max_resumes
        self._conn = conn
        self._full_key = conn.full_key(key)
        self._loop: LoopThread
        self._loop, self._client = conn.aio()
        self._body: Any = None
        self._buf = bytearray()
        self._wire = start
        self._closed = False
        self._last_error: BaseException | None = None
        self.etag = ""
        self.size = 0
        try:
            self._loop.call(self._first_open(start))
        except StoreError:
            raise
        except Exception as e:
            raise conn.error(e, "open stream of", key) from e

    # -- runs on the event loop -------------------------------------------------------

    async def _get(self, start: int, if_match: str | None) -> dict[str, Any]:
        request: dict[str, Any] = {"Bucket": self._conn.bucket, "Key": self._full_key}
        if start > 0:
            request["Range"] = f"bytes={start}-"
        if if_match is not None:
            request["IfMatch"] = if_match
        self._conn.gets.add(self.key)
        response: dict[str, Any] = await self._client.get_object(**request)
        return response

    async def _first_open(self, start: int) -> None:
        try:
            r = await self._get(start, None)
        except ClientError as e:
            if start > 0 and error_code(e)[1] == 416:
                await self._open_at_end(start)
                return
            raise
        self.etag, self._body = r["ETag"], r["Body"]
        try:
            self.size = self._check_start(r, start)
        except StoreError:
            await self._close_body()
            raise
        if self.size == start:
            await self._close_body()

    async def _open_at_end(self, start: int) -> None:
        """A Range past the last byte is a 416; fine if ``start`` is exactly the end."""
        head = await self._client.head_object(Bucket=self._conn.bucket, Key=self._full_key)
        self.etag, self.size = head["ETag"], head["ContentLength"]
        if start != self.size:
            raise StoreError(
                f"stream start {start} is past the end of {self._where} ({self.size} bytes)"
            )

    def _check_start(self, r: dict[str, Any], start: int) -> int:
        """The object's size, after checking the response begins at ``start``."""
        content_range = r.get("ContentRange")
        if content_range is None:
            if start > 0:
                raise StoreError(f"{self._where}: server ignored Range bytes={start}-")
            return int(r["ContentLength"])
        # "bytes <first>-<last>/<size>"
        span, _, total = content_range.partition(" ")[2].partition("/")
        first = int(span.partition("-")[0])
        if first != start:
            raise StoreError(f"{self._where}: asked for byte {start}, got {content_range}")
        return int(total)

    async def _resume(self) -> None:
        if self.resumes >= self.max_resumes:
            raise StoreError(
                f"stream of {self._where} broke {self.resumes + 1} times; giving up at byte "
                f"{self._wire} of {self.size}: {self._last_error!r}"
            )
        if self.resumes > 0:
            await asyncio.sleep(min(0.1 * 2 ** (self.resumes - 1), 2.0))
        self.resumes += 1
        try:
            r = await self._get(self._wire, self.etag)
        except ClientError as e:
            code, status = error_code(e)
            if status == 412 or code == "PreconditionFailed":
                raise StoreError(
                    f"{self._where} changed while streaming (ETag {self.etag} is no longer "
                    f"current): cannot resume at byte {self._wire}"
                ) from e
            if code in ("NoSuchKey", "404"):
                raise ObjectNotFound(
                    f"{self._where} was deleted while streaming: cannot resume at byte {self._wire}"
                ) from e
            raise
        self._body = r["Body"]
        if r["ETag"] != self.etag:
            await self._close_body()
            raise StoreError(f"{self._where} changed while streaming (ETag {r['ETag']})")
        try:
            self._check_start(r, self._wire)
        except StoreError:
            await self._close_body()
            raise

    async def _fill(self, want: int) -> bytes:
        """Up to ``want`` more bytes from the wire (fewer only at the end of the object)."""
        chunks: list[bytes] = []
        got = 0
        while got < want and self._wire < self.size:
            if self._body is None:
                await self._resume()
            try:
                chunk: bytes = await self._body.read(min(want - got, self.size - self._wire))
            except BODY_ERRORS as e:
                self._last_error = e
                await self._close_body()
                continue
            if not chunk:  # the connection ended early without an error
                self._last_error = EOFError(f"body ended at byte {self._wire}")
                await self._close_body()
                continue
            chunks.append(chunk)
            got += len(chunk)
            self._wire += len(chunk)
        if self._wire >= self.size:
            await self._close_body()
        return b"".join(chunks)

    async def _close_body(self) -> None:
        body, self._body = self._body, None
        if body is not None:
            await _close(body)

    # -- caller side ------------------------------------------------------------------

    @property
    def _where(self) -> str:
        return self._conn.where(self.key)

    def read(self, n: int) -> bytes:
        """Exactly ``n`` bytes unless the object ends first; ``n < 0`` reads to the end."""
        if self._closed:
            raise StoreError(f"read from a closed stream of {self._where}")
        if n < 0:
            n = self.size - self.position
        missing = n - len(self._buf)
        if missing > 0 and self._wire < self.size:
            try:
                data = self._loop.call(self._fill(max(missing, self.chunk_size)))
            except StoreError:
                raise
            except Exception as e:
                raise self._conn.error(e, f"read at byte {self._wire} of", self.key) from e
            if not self._buf and len(data) <= n:
                self.position += len(data)
                return data
            self._buf += data
        out = bytes(self._buf[:n])
        del self._buf[:n]
        self.position += len(out)
        return out

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._buf = bytearray()
        try:
            if self._body is not None and not self._loop.loop.is_closed():
                self._loop.call(self._close_body())
        finally:
            self._conn.forget_stream(self)


async def _close(body: Any) -> None:
    # Closing a broken connection may itself fail; there is nothing left to keep.
    with contextlib.suppress(Exception):
        await body.aclose()
