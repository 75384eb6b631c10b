"""``LocalStore``: the object store as a directory (the embedded default).

Invariants:

- Key ``a/b/c`` is the file ``<root>/a/b/c``; keys are validated by ``keys.check_key``.
- Every write goes to a fresh temp file in ``<root>/.compactor-tmp/``, is fsynced, then
  committed by ``os.replace`` (plain put) or ``os.link`` (if_none_match, which fails if
  the key exists), and the directory is fsynced. Readers see the old or the new file,
  never a mix, and every write produces a new inode.
- All commits (replace, link, unlink) run under one lock: a ``threading.Lock`` for this
  process plus ``fcntl.flock`` on ``<root>/.compactor-lock`` for other processes. So
  if_match's compare-ETag-then-replace is atomic against every other writer.
- ETag = ``<inode>-<mtime_ns>-<size>`` (hex), cheap to compute: nothing is hashed. A write
  creates a new inode and its mtime is set from a clock that never repeats within a
  process, so a freed and reused inode number cannot bring back an old ETag.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import io
import os
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import TracebackType
from typing import BinaryIO, TypeVar

from . import _filemap
from .base import (
    GetCounter,
    MultipartWriter,
    ObjectInfo,
    ObjectNotFound,
    ObjectStore,
    ObjectStream,
    PendingUpload,
    PreconditionFailed,
    StoreError,
    check_buffer_size,
)
from .keys import RESERVED_PREFIX, check_conditions, check_key, check_prefix

TMP_DIR = RESERVED_PREFIX + "tmp"
LOCK_FILE = RESERVED_PREFIX + "lock"
_UPLOAD_PREFIX = "u-"
DEFAULT_ROOT = Path("./compactor-data")
_WRITE_BUFFER = 1 << 20
_A = TypeVar("_A")
_R = TypeVar("_R")

_clock_lock = threading.Lock()
_last_ns = 0


def _unique_ns() -> int:
    """Wall-clock nanoseconds, strictly increasing within this process."""
    global _last_ns
    with _clock_lock:
        _last_ns = max(time.time_ns(), _last_ns + 1)
        return _last_ns


def _etag(st: os.stat_result) -> str:
    return f"{st.st_ino:x}-{st.st_mtime_ns:x}-{st.st_size:x}"


def _mtime_ms(st: os.stat_result) -> int:
    """A file's write time in milliseconds since the epoch."""
    return st.st_mtime_ns // 1_000_000


def _info(key: str, st: os.stat_result) -> ObjectInfo:
    return ObjectInfo(key, st.st_size, _etag(st), _mtime_ms(st))


class LocalStore(ObjectStore):
    def __init__(self, root: Path | str = DEFAULT_ROOT) -> None:
        self.root = Path(root).absolute()
        self.url = self.root.as_uri()
        self.gets = GetCounter()
        self._tmp = self.root / TMP_DIR
        self._thread_lock = threading.Lock()  # held for commits
        self._init_lock = threading.Lock()
        self._lock_fd = -1
        self._closed = False

    def portable(self) -> Callable[[], ObjectStore] | None:
        """The same root; not for a subclass, whose own behaviour a plain store lacks."""
        return functools.partial(LocalStore, self.root) if type(self) is LocalStore else None

    def _prepare(self) -> int:
        """Create the root, temp dir and lock file (on the first write, so reading a
        store that does not exist creates nothing); returns the lock file's fd."""
        with self._init_lock:
            if self._closed:
                raise StoreError(f"local store {self.url} is closed")
            if self._lock_fd < 0:
                try:
                    self._tmp.mkdir(parents=True, exist_ok=True)
                    self._lock_fd = os.open(self.root / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
                except OSError as e:
                    raise StoreError(f"cannot create local store {self.root}: {e}") from e
            return self._lock_fd

    # -- helpers -------------------------------------------------------------------

    def _path(self, key: str) -> Path:
        return self.root / check_key(key, self.url)

    def _error(self, op: str, key: str, e: OSError) -> StoreError:
        path = self.root / key
        if isinstance(e, FileNotFoundError):
            return ObjectNotFound(f"object not found: {path} (key {key!r} in {self.url})")
        return StoreError(f"cannot {op} {path} (key {key!r} in {self.url}): {e.strerror or e}")

    def _commit_lock(self) -> _CommitLock:
        return _CommitLock(self._thread_lock, self._prepare())

    def _new_temp(self, key: str, prefix: str = "w-") -> tuple[int, str]:
        self._prepare()
        try:
            return tempfile.mkstemp(dir=self._tmp, prefix=prefix)
        except OSError as e:
            raise self._error("create a temp file for", key, e) from e

    def _seal(self, fd: int) -> str:
        """Stamp a unique mtime, fsync; returns the ETag the file will have once committed."""
        ns = _unique_ns()
        os.utime(fd, ns=(ns, ns))
        os.fsync(fd)
        return _etag(os.fstat(fd))

    def _commit(self, tmp: str, key: str, *, if_none_match: bool, if_match: str | None) -> None:
        """Move the sealed temp file ``tmp`` to ``key``; always removes ``tmp``."""
        path = self._path(key)
        try:
            with self._commit_lock():
                path.parent.mkdir(parents=True, exist_ok=True)
                if if_none_match:
                    try:
                        os.link(tmp, path)
                    except FileExistsError:
                        raise PreconditionFailed(
                            f"{path} exists (If-None-Match, key {key!r} in {self.url})"
                        ) from None
                elif if_match is not None:
                    try:
                        current = _etag(os.stat(path))
                    except FileNotFoundError:
                        raise PreconditionFailed(
                            f"{path} does not exist (If-Match {if_match}, key {key!r} "
                            f"in {self.url})"
                        ) from None
                    if current != if_match:
                        raise PreconditionFailed(
                            f"{path} has ETag {current}, not {if_match} (If-Match, key "
                            f"{key!r} in {self.url})"
                        )
                    os.replace(tmp, path)
                else:
                    os.replace(tmp, path)
            _fsync_dir(path.parent)
        except OSError as e:
            raise self._error("write", key, e) from e
        finally:
            _unlink_quietly(tmp)

    # -- ObjectStore -----------------------------------------------------------------

    def head(self, key: str) -> ObjectInfo:
        try:
            st = os.stat(self._path(key))
        except OSError as e:
            raise self._error("stat", key, e) from e
        return _info(key, st)

    def get(self, key: str) -> tuple[bytes, str]:
        path = self._path(key)
        self.gets.add(key)
        try:
            with open(path, "rb") as f:
                etag = _etag(os.fstat(f.fileno()))
                return f.read(), etag
        except OSError as e:
            raise self._error("read", key, e) from e

    def get_range(self, key: str, start: int, end: int) -> bytes:
        """With ``start < 0`` the last ``-start`` bytes (``end`` is ignored). ``[start,
        end)`` is clipped to the object; an empty range returns ``b""`` without a read."""
        path = self._path(key)
        if start >= 0 and end <= start:
            return b""
        self.gets.add(key)
        try:
            with open(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                if start < 0:
                    start, end = max(0, size + start), size
                end = min(end, size)
                if start >= end:
                    return b""
                f.seek(start)
                return f.read(end - start)
        except OSError as e:
            raise self._error("read", key, e) from e

    def open_stream(
        self, key: str, start: int = 0, *, buffer_size: int | None = None
    ) -> ObjectStream:
        path = self._path(key)
        if start < 0:
            raise ValueError(f"stream start must be >= 0, got {start}")
        if buffer_size is not None:
            check_buffer_size(buffer_size)  # a stream of a file holds no buffer: 0 is within
        self.gets.add(key)
        try:
            f = open(path, "rb", buffering=0)  # noqa: SIM115
        except OSError as e:
            raise self._error("open", key, e) from e
        try:
            st = os.fstat(f.fileno())
            if start > st.st_size:
                raise StoreError(
                    f"stream start {start} is past the end of {path} ({st.st_size} bytes)"
                )
            f.seek(start)
        except OSError as e:
            f.close()
            raise self._error("open", key, e) from e
        except BaseException:
            f.close()
            raise
        return LocalObjectStream(key, path, f, _etag(st), st.st_size, start)

    def put(
        self, key: str, data: bytes, *, if_none_match: bool = False, if_match: str | None = None
    ) -> str:
        check_conditions(if_none_match, if_match)
        self._path(key)
        fd, tmp = self._new_temp(key)
        try:
            with os.fdopen(fd, "wb", buffering=0) as f:
                f.write(data)
                etag = self._seal(f.fileno())
        except OSError as e:
            _unlink_quietly(tmp)
            raise self._error("write", key, e) from e
        self._commit(tmp, key, if_none_match=if_none_match, if_match=if_match)
        return etag

    def open_multipart(self, key: str, *, if_none_match: bool = False) -> MultipartWriter:
        self._path(key)
        fd, tmp = self._new_temp(key, f"{_UPLOAD_PREFIX}{key.rpartition('/')[2]}.")
        return LocalMultipartWriter(self, key, fd, tmp, if_none_match)

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        """Keys starting with ``prefix`` (a plain string prefix), sorted."""
        check_prefix(prefix, self.url)
        if prefix.startswith(RESERVED_PREFIX) and "/" in prefix:
            return  # inside the temp dir: never keys
        base = self.root / prefix.rpartition("/")[0]
        keys: list[str] = []
        for dirpath, dirnames, filenames in os.walk(base, onerror=_raise_unless_missing):
            rel = os.path.relpath(dirpath, self.root)
            if rel == ".":
                dirnames[:] = [d for d in dirnames if not d.startswith(RESERVED_PREFIX)]
                filenames = [n for n in filenames if not n.startswith(RESERVED_PREFIX)]
                rel = ""
            else:
                rel = rel.replace(os.sep, "/") + "/"
            keys.extend(k for n in filenames if (k := rel + n).startswith(prefix))
        keys.sort()
        for key in keys:
            try:
                st = os.stat(self.root / key)
            except FileNotFoundError:
                continue  # deleted since the walk
            except OSError as e:
                raise self._error("stat", key, e) from e
            yield _info(key, st)

    def delete(self, key: str) -> None:
        path = self._path(key)
        if not os.path.lexists(path):
            return  # also keeps a delete from creating a store that does not exist
        try:
            with self._commit_lock():
                try:
                    os.unlink(path)
                except FileNotFoundError:
                    return
                # Prune empty parents under the lock, so no commit is racing for them.
                parent = path.parent
                while parent != self.root:
                    try:
                        parent.rmdir()
                    except OSError:
                        break
                    parent = parent.parent
        except OSError as e:
            raise self._error("delete", key, e) from e

    def pending_uploads(self) -> Iterator[PendingUpload]:
        """Temp files of multipart writers (``u-<key's last part>.<random>`` in the temp
        dir: a local upload's parts are the file itself). ``key`` is the key's last part
        and ``initiated_ms`` the file's last write."""
        try:
            names = sorted(os.listdir(self._tmp))
        except FileNotFoundError:
            return
        for name in names:
            if not name.startswith(_UPLOAD_PREFIX):
                continue
            try:
                st = os.stat(self._tmp / name)
            except FileNotFoundError:
                continue  # completed or aborted meanwhile
            key = name[len(_UPLOAD_PREFIX) : name.rindex(".")]
            yield PendingUpload(key, str(self._tmp / name), _mtime_ms(st))

    def abort_upload(self, upload: PendingUpload) -> None:
        _unlink_quietly(upload.upload_id)

    def close(self) -> None:
        """Writes fail afterwards; reads still work."""
        with self._init_lock:
            self._closed = True
            if self._lock_fd >= 0:
                os.close(self._lock_fd)
                self._lock_fd = -1


class LocalObjectStream(ObjectStream):
    """An unbuffered file reader; the open file pins the version it was opened on.

    Each read is one read of the file straight into the bytes it returns: no read buffer
    to fill and copy out of again. Whoever reads a stream in small pieces buffers it
    (``fileformat.reader.StreamReader`` reads ahead); a 300 KiB block through a buffered
    reader was copied twice, about 2% of a 10,000-partition job's CPU."""

    def __init__(
        self, key: str, path: Path, f: io.FileIO, etag: str, size: int, start: int
    ) -> None:
        self.key = key
        self.etag = etag
        self.size = size
        self.position = start
        self.resumes = 0
        self._path = path
        self._f: io.FileIO | None = f

    def read(self, n: int) -> bytes:
        """Exactly ``n`` bytes unless the object ends first; ``n < 0`` reads to the end."""
        if n < 0:
            data: bytes = self._file_read(io.FileIO.read, -1)
        else:
            data = self._file_read(io.FileIO.read, n) or b""
            if 0 < len(data) < n:  # a file reads short only at its end, or on a signal
                rest = bytearray(n - len(data))
                data += rest[: self._read_fully(memoryview(rest))]
        self.position += len(data)
        return data

    def readinto(self, view: memoryview) -> int:
        n = self._read_fully(view)
        self.position += n
        return n

    def read_mapped(self, n: int, back: int = 0) -> memoryview | None:
        """``ObjectStream.read_mapped``: the bytes mapped from the file, read only
        (``_filemap.map_range``), or None where the object ends before them or the map
        fails (the file cut short since it was opened, no address space left): the caller
        then reads them as usual, and gets the usual errors.

        The map goes when the last view of it goes, as a bytes object of the same bytes
        would, and holds no file descriptor. Reading the long payloads of a job's inputs
        this way saves the kernel's copy out of the page cache and the fresh pages of
        each new bytes object (bench/README.md, "Long payloads mapped, not copied").

        The store never changes a file in place (every write is a new file renamed over
        the key), so mapped bytes cannot change under a reader. A file cut short in place
        by something else while a view of it is held ends the reading process with SIGBUS
        when the missing bytes are read: before any commit, so the catalog and the
        inputs stay as they were."""
        f = self._f
        if f is None:
            raise StoreError(f"read from a closed stream of {self._path}")
        start = self.position - back
        if n < 1 or not 0 <= back <= n or start < 0 or start + n > self.size:
            return None
        try:
            mapped = memoryview(_filemap.map_range(f.fileno(), start, n))
            f.seek(start + n)
        except (OSError, ValueError):
            return None
        self.position = start + n
        return mapped

    def _read_fully(self, view: memoryview) -> int:
        """Fills ``view`` (fewer bytes only at the end of the file); returns how many."""
        got = 0
        while got < len(view):
            n = self._file_read(io.FileIO.readinto, view[got:])
            if not n:
                break
            got += n
        return got

    def _file_read(self, op: Callable[[io.FileIO, _A], _R], arg: _A) -> _R:
        """``op(file, arg)``: a StoreError if the stream is closed or the file fails."""
        if self._f is None:
            raise StoreError(f"read from a closed stream of {self._path}")
        try:
            return op(self._f, arg)
        except OSError as e:
            raise StoreError(f"cannot read {self._path} at byte {self.position}: {e}") from e

    def close(self) -> None:
        if self._f is not None:
            self._f.close()
            self._f = None


class LocalMultipartWriter(MultipartWriter):
    """Appends to a temp file; ``complete`` commits it like ``put``."""

    def __init__(self, store: LocalStore, key: str, fd: int, tmp: str, if_none_match: bool) -> None:
        self.key = key
        self.bytes_written = 0
        self._store = store
        self._tmp = tmp
        self._if_none_match = if_none_match
        self._f: BinaryIO | None = os.fdopen(fd, "wb", buffering=_WRITE_BUFFER)
        self._etag: str | None = None

    def write(self, data: bytes | memoryview) -> None:
        if self._f is None:
            raise StoreError(f"write to a finished multipart writer for {self.key!r}")
        try:
            self._f.write(data)
        except OSError as e:
            self.abort()
            raise self._store._error("write", self.key, e) from e
        self.bytes_written += len(data)

    def complete(self) -> str:
        if self._etag is not None:
            return self._etag
        f = self._f
        if f is None:
            raise StoreError(f"complete of an aborted multipart writer for {self.key!r}")
        self._f = None
        try:
            with f:
                f.flush()
                etag = self._store._seal(f.fileno())
        except OSError as e:
            _unlink_quietly(self._tmp)
            raise self._store._error("write", self.key, e) from e
        self._store._commit(self._tmp, self.key, if_none_match=self._if_none_match, if_match=None)
        self._etag = etag
        return etag

    def abort(self) -> None:
        if self._f is not None:
            f, self._f = self._f, None
            try:
                f.close()
            finally:
                _unlink_quietly(self._tmp)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._etag is None:
            self.abort()


class _CommitLock:
    def __init__(self, thread_lock: threading.Lock, fd: int) -> None:
        self._thread_lock = thread_lock
        self._fd = fd

    def __enter__(self) -> None:
        self._thread_lock.acquire()
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX)
        except BaseException:
            self._thread_lock.release()
            raise

    def __exit__(self, *exc: object) -> None:
        try:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
        finally:
            self._thread_lock.release()


def _raise_unless_missing(e: OSError) -> None:
    if not isinstance(e, FileNotFoundError):
        raise StoreError(f"cannot list {e.filename}: {e.strerror or e}") from e


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _unlink_quietly(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
