"""Whole messages over a pipe, between a worker and its phase-1 helper.

A message is its length (8 bytes, little-endian) and then its bytes. What
``multiprocessing.connection.Connection`` does with pipes, without the 30 modules
``multiprocessing`` imports (sockets, tempfile, its archive codecs), 5 ms of a command's
start that the helper's fork waits for (``worker.helper_process``).
"""

from __future__ import annotations

import os
import struct

_LENGTH = struct.Struct("<Q")


class MessagePipe:
    """One end of a pipe: ``send_bytes`` on the write end, ``recv_bytes`` on the read end.

    A message is written whole or the write raises (``BrokenPipeError`` once the reader
    has gone); ``recv_bytes`` raises ``EOFError`` once the writer has gone, including in
    the middle of a message. The end's descriptor is owned: ``close`` closes it."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.closed = False

    def send_bytes(self, data: bytes) -> None:
        view = memoryview(data)
        header = _LENGTH.pack(len(view))
        written = os.writev(self.fd, [header, view])
        while written < len(header) + len(view):
            if written < len(header):
                written += os.write(self.fd, header[written:])
            else:
                written += os.write(self.fd, view[written - len(header) :])

    def recv_bytes(self) -> bytes:
        (length,) = _LENGTH.unpack(self._read(_LENGTH.size))
        return self._read(length)

    def _read(self, n: int) -> bytes:
        chunk = os.read(self.fd, n)
        if len(chunk) == n:
            return chunk
        chunks = [chunk]
        got = len(chunk)
        while got < n:
            if not chunk:
                raise EOFError("the other end of the pipe has gone")
            chunk = os.read(self.fd, n - got)
            chunks.append(chunk)
            got += len(chunk)
        return b"".join(chunks)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            os.close(self.fd)
