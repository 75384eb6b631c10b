"""A TCP proxy on loopback that cuts one S3 response mid-body or drops it whole: a
resumed stream, a lost answer to a request the server carried out."""

from __future__ import annotations

import contextlib
import re
import socket
import threading
from collections.abc import Callable
from types import TracebackType
from urllib.parse import urlsplit


class CuttingProxy:
    """A TCP proxy on 127.0.0.1 in front of the S3 endpoint. The first response to
    ``<method> <path>`` is cut (connection closed) after ``cut_after`` body bytes;
    everything else passes through. A ``path`` with a query (``/b/k?uploadId=``) or
    ending in ``/`` (``/b/data/L0/``) matches every request line it begins.
    ``cut_after=None`` drops that response whole once the server has begun it: the
    server carried the request out and the client sees the connection close, as when an
    answer is lost on the way; ``on_drop`` runs first, so what it changes at the server
    comes before the client's retry. Records every request
    line and headers it forwards. Sockets wait ``timeout_s`` for data (more than an SQS
    long poll's 20 s where one passes).

    Bounded: sockets time out, and leaving the ``with`` block stops every thread.
    Assumes no HTTP pipelining (true of botocore and aiohttp)."""

    def __init__(
        self,
        upstream_url: str,
        path: str,
        cut_after: int | None,
        method: str = "GET",
        on_drop: Callable[[], None] = lambda: None,
        timeout_s: float = 10,
    ) -> None:
        parts = urlsplit(upstream_url)
        assert parts.hostname is not None and parts.port is not None
        self._upstream = (parts.hostname, parts.port)
        self._target = _request_line_start(method, path).encode()
        self._cut_after = cut_after
        self._on_drop = on_drop
        self._timeout_s = timeout_s
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.1)
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self.requests: list[tuple[str, dict[str, str]]] = []
        self.cuts = 0
        self.dropped: list[int] = []
        """The status of each answer dropped whole."""
        self._cut_armed = False  # the one cut has been given to a connection
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._sockets: list[socket.socket] = []
        self._threads: list[threading.Thread] = []

    def __enter__(self) -> CuttingProxy:
        self._spawn(self._accept_loop)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        with self._lock:
            sockets = list(self._sockets)
        for s in sockets:
            _shut(s)
        for t in list(self._threads):
            t.join(timeout=5)
        self._listener.close()

    def _spawn(self, target: object, *args: object) -> None:
        t = threading.Thread(target=target, args=args, daemon=True)  # type: ignore[arg-type]
        with self._lock:
            self._threads.append(t)
        t.start()

    def _accept_loop(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            upstream = socket.create_connection(self._upstream, timeout=self._timeout_s)
            client.settimeout(self._timeout_s)
            with self._lock:
                self._sockets += [client, upstream]
            armed = threading.Event()
            self._spawn(self._requests, client, upstream, armed)
            self._spawn(self._responses, client, upstream, armed)

    def _requests(
        self, client: socket.socket, upstream: socket.socket, armed: threading.Event
    ) -> None:
        pending, body_left = b"", 0
        while True:
            try:
                data = client.recv(65536)
            except OSError:
                data = b""
            if not data:
                _shut(upstream)
                return
            pending += data
            while pending:
                if body_left:
                    taken = min(body_left, len(pending))
                    pending, body_left = pending[taken:], body_left - taken
                    continue
                end = pending.find(b"\r\n\r\n")
                if end < 0:
                    break
                head, pending = pending[:end].decode("latin-1"), pending[end + 4 :]
                line, *fields = head.split("\r\n")
                headers = {
                    k.strip().lower(): v.strip() for k, v in (f.split(":", 1) for f in fields)
                }
                body_left = int(headers.get("content-length", "0"))
                with self._lock:
                    self.requests.append((line, headers))
                    if (line + " ").encode().startswith(self._target) and not self._cut_armed:
                        self._cut_armed = True
                        armed.set()  # before forwarding: the response cannot precede it
            try:
                upstream.sendall(data)
            except OSError:
                return

    def _responses(
        self, client: socket.socket, upstream: socket.socket, armed: threading.Event
    ) -> None:
        head = b""
        body_sent: int | None = None
        while True:
            try:
                data = upstream.recv(65536)
            except OSError:
                data = b""
            if not data:
                _shut(client)
                return
            if armed.is_set() and self._cut_after is None:
                head += data
                interim, head = _interim_responses(head)
                try:
                    client.sendall(interim)  # "100 Continue": the body is still to come
                except OSError:
                    return
                if (status := _final_status(head)) is not None:
                    with self._lock:
                        self.cuts += 1
                        self.dropped.append(status)
                    self._on_drop()  # before the client learns of the drop, hence retries
                    _shut(client)
                    _shut(upstream)
                    return
                continue
            if armed.is_set():
                assert self._cut_after is not None
                if body_sent is None:
                    forwarded = len(head)
                    head += data
                    end = head.find(b"\r\n\r\n")
                    if end < 0:
                        out = data
                    else:
                        body = head[end + 4 :]
                        out = (head[: end + 4] + body[: self._cut_after])[forwarded:]
                        body_sent = min(len(body), self._cut_after)
                else:
                    out = data[: self._cut_after - body_sent]
                    body_sent += len(out)
                try:
                    client.sendall(out)
                except OSError:
                    return
                if body_sent is not None and body_sent >= self._cut_after:
                    with self._lock:
                        self.cuts += 1
                    _shut(client)
                    _shut(upstream)
                    return
                continue
            try:
                client.sendall(data)
            except OSError:
                return

    def recorded(self) -> list[tuple[str, dict[str, str]]]:
        """Every request line and its headers forwarded so far."""
        with self._lock:
            return list(self.requests)

    def lines(self, method: str, path: str) -> list[str]:
        """The request lines forwarded that match ``method`` and ``path`` (as the cut's)."""
        start = _request_line_start(method, path)
        with self._lock:
            return [line for line, _ in self.requests if (line + " ").startswith(start)]

    def gets(self, path: str) -> list[dict[str, str]]:
        with self._lock:
            return [h for line, h in self.requests if line.startswith(f"GET {path} ")]


def _request_line_start(method: str, path: str) -> str:
    """How a request line that matches begins: the whole path, or a path with a query or
    a folder's path (every key under it)."""
    return f"{method} {path}" + ("" if "?" in path or path.endswith("/") else " ")


def _interim_responses(data: bytes) -> tuple[bytes, bytes]:
    """The complete informational (1xx) responses at the start of ``data``, and the rest."""
    end = 0
    while _INTERIM.match(data, end) and (stop := data.find(b"\r\n\r\n", end)) >= 0:
        end = stop + 4
    return data[:end], data[end:]


def _final_status(rest: bytes) -> int | None:
    """The status of the final response ``rest`` begins with (what follows the complete
    informational responses), None until its status line has come; 0 if it has none."""
    if b"\r\n" not in rest or _INTERIM.match(rest):
        return None  # a status line, or an informational response, still arriving
    status = _STATUS.match(rest)
    return 0 if status is None else int(status.group(1))


_INTERIM = re.compile(rb"HTTP/1\.\d 1\d\d ")
_STATUS = re.compile(rb"HTTP/1\.\d (\d\d\d)")


def _shut(s: socket.socket) -> None:
    with contextlib.suppress(OSError):
        s.shutdown(socket.SHUT_RDWR)
    s.close()
