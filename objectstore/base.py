"""The object store interface every part of compactor talks to.

Two implementations: ``LocalStore`` (a directory, the embedded default) and
``S3Store`` (S3, MinIO, LocalStack). Both count every GET request per object key in
``store.gets`` so a job can report GET streams per input file.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from types import TracebackType


class StoreError(Exception):
    """Any failure talking to the store; the message names the store and the key."""


class ObjectNotFound(StoreError):
    pass


class PreconditionFailed(StoreError):
    """A conditional write lost: If-None-Match found the key, or If-Match a newer ETag."""


class StoreUnreachable(StoreError):
    pass


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    key: str
    size: int
    etag: str
    modified_ms: int | None = None
    """When the object was written, in milliseconds since the epoch on the store's clock
    (S3's LastModified, a local file's mtime); None where the store does not say."""


@dataclass(frozen=True, slots=True)
class PendingUpload:
    """A multipart upload begun and neither completed nor aborted (a writer that died, or
    one still running). ``key`` is where it would land (a local store's temp file name
    when it cannot know); ``upload_id`` names it to ``abort_upload``."""

    key: str
    upload_id: str
    initiated_ms: int


class GetCounter:
    """Thread-safe count of GET requests (each stream open or resume is one): all of them
    (``total``), and per key for the keys being watched (``watch``, ``unwatch``: a job's
    inputs while it reads them), or for every key from a ``reset`` on (a test's or a
    benchmark's view).

    Invariant: a key's entry lives only while it is watched (or every key is counted), so
    a worker that runs for months holds no entry for each catalog version and input it
    ever read. Watches nest: a key stays watched until each ``watch`` of it is undone."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()
        self._watched: Counter[str] = Counter()
        self._every_key = False
        self.total = 0

    def add(self, key: str) -> None:
        with self._lock:
            self.total += 1
            if self._every_key or key in self._watched:
                self._counts[key] += 1

    def get(self, key: str) -> int:
        """The GETs of ``key`` counted while it was watched (0 where it never was)."""
        with self._lock:
            return self._counts[key]

    def watch(self, keys: Iterable[str]) -> None:
        with self._lock:
            self._watched.update(keys)

    def unwatch(self, keys: Iterable[str]) -> None:
        """Undoes one ``watch`` of each of ``keys``; a key no longer watched loses its
        count (unless every key is counted)."""
        with self._lock:
            for key in keys:
                self._watched[key] -= 1
                if self._watched[key] <= 0:
                    del self._watched[key]
                    if not self._every_key:
                        self._counts.pop(key, None)

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)

    def reset(self) -> None:
        """Forgets the counts, and from now on counts every key, watched or not (a test's
        or a benchmark's view; ``total`` is left as it is)."""
        with self._lock:
            self._counts.clear()
            self._every_key = True


def check_buffer_size(buffer_size: int) -> int:
    """A stream's ``buffer_size`` (see ``ObjectStore.open_stream``), checked: at least 1."""
    if isinstance(buffer_size, bool) or not isinstance(buffer_size, int) or buffer_size < 1:
        raise ValueError(f"stream buffer_size must be a positive int, got {buffer_size!r}")
    return buffer_size


class ObjectStream(ABC):
    """A sequential reader over one object, opened by one GET from ``start``.

    ``read(n)`` returns exactly ``n`` bytes unless the object ends first (then fewer;
    ``b""`` at the end). ``position`` is the absolute byte position reached.
    """

    key: str
    etag: str
    size: int
    position: int
    resumes: int

    @abstractmethod
    def read(self, n: int) -> bytes: ...

    def readinto(self, view: memoryview) -> int:
        """Fills ``view`` with the next bytes (fewer only if the object ends first) and
        returns how many; a stream that can read straight into it does (local files)."""
        data = self.read(len(view))
        view[: len(data)] = data
        return len(data)

    def read_mapped(self, n: int, back: int = 0) -> memoryview | None:
        """The object's ``n`` bytes from ``back`` bytes before ``position`` (bytes the
        caller read ahead and has not used yet), as a read-only view of the store's own
        copy, not copied, with the stream moved past them; None, the stream not moved,
        where the store cannot give one. Only a local file's stream can (it maps them);
        S3's bytes arrive through a socket and are always copied."""
        return None

    @abstractmethod
    def close(self) -> None: ...

    def __enter__(self) -> ObjectStream:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class MultipartWriter(ABC):
    """Streams one object out in parts; nothing is visible until ``complete``.

    ``write`` buffers at most one part; ``abort`` discards everything uploaded. Used as a
    context manager it aborts unless ``complete`` succeeded.
    """

    key: str
    bytes_written: int

    @abstractmethod
    def write(self, data: bytes | memoryview) -> None: ...

    @abstractmethod
    def complete(self) -> str:
        """Make the object visible; returns its ETag. Raises PreconditionFailed if the
        writer was opened with ``if_none_match`` and the key exists, unless it holds exactly
        the bytes written (as when this writer's own request put them there and its answer
        was lost): the write is then done."""

    @abstractmethod
    def abort(self) -> None: ...

    def __enter__(self) -> MultipartWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is not None:
            self.abort()


class ObjectStore(ABC):
    """Keys are '/'-separated paths relative to the store's root."""

    url: str
    gets: GetCounter

    def portable(self) -> Callable[[], ObjectStore] | None:
        """A picklable recipe for this store in another process: called there, it makes a
        store onto the same objects with the same settings, with its own connections and
        its own GET counter. None (the default) if this store cannot say how."""
        return None

    @abstractmethod
    def head(self, key: str) -> ObjectInfo: ...

    def exists(self, key: str) -> bool:
        """Whether ``key`` is there (a HEAD request)."""
        try:
            self.head(key)
        except ObjectNotFound:
            return False
        return True

    @abstractmethod
    def get(self, key: str) -> tuple[bytes, str]:
        """The whole object and its ETag, by one GET."""

    @abstractmethod
    def get_range(self, key: str, start: int, end: int) -> bytes:
        """Bytes [start, end) by one ranged GET; ``start`` < 0 means the last -start bytes."""

    @abstractmethod
    def open_stream(
        self, key: str, start: int = 0, *, buffer_size: int | None = None
    ) -> ObjectStream:
        """One GET from ``start`` to the end, read sequentially.

        ``buffer_size`` bounds what the stream holds beyond what ``read`` asked for (its
        read buffer, or the body chunk it fetches at once); None is the store's default.
        A job that holds many streams open at once passes a smaller one, so its read
        memory stays bounded. A ``read`` longer than the buffer still returns all of it.
        """

    @abstractmethod
    def put(
        self, key: str, data: bytes, *, if_none_match: bool = False, if_match: str | None = None
    ) -> str:
        """Write an object, returns its ETag. ``if_none_match``: only if the key does not
        exist; ``if_match``: only if its ETag is this. Losing raises PreconditionFailed.

        A create-if-absent whose own request landed and whose answer was lost succeeds:
        a store that retries tells its retry's refusal from another writer's object by
        the bytes the key holds. So two writers of the same bytes under ``if_none_match``
        both succeed; a writer that must know it won writes bytes no other writes (the
        catalog's log entries carry a ``writer`` of their own)."""

    @abstractmethod
    def open_multipart(self, key: str, *, if_none_match: bool = False) -> MultipartWriter: ...

    @abstractmethod
    def list(self, prefix: str = "") -> Iterator[ObjectInfo]: ...

    @abstractmethod
    def delete(self, key: str) -> None:
        """Delete; deleting a missing key is not an error."""

    @abstractmethod
    def pending_uploads(self) -> Iterator[PendingUpload]:
        """Every multipart upload not yet completed or aborted."""

    @abstractmethod
    def abort_upload(self, upload: PendingUpload) -> None:
        """Discard a pending upload's parts; one already gone is not an error."""

    def upload_written_ms(self, upload: PendingUpload) -> int | None:
        """When ``upload`` last received a part (its start, before its first), or None if
        it is gone: how long its writer has been silent. This store's ``initiated_ms`` is
        that already (a local upload's file is written in place)."""
        return upload.initiated_ms

    def close(self) -> None:  # noqa: B027 (optional: a store without resources keeps it)
        """Release clients and threads."""
