"""``worker.message_pipe``: whole messages through a real pipe, whatever their size, and
the ends of a pipe whose other end has gone."""

from __future__ import annotations

import os
import threading

import pytest

from compactor.worker.message_pipe import MessagePipe


def _pipe() -> tuple[MessagePipe, MessagePipe]:
    r, w = os.pipe()
    return MessagePipe(r), MessagePipe(w)


def test_messages_arrive_whole_and_in_order() -> None:
    reader, writer = _pipe()
    messages = [b"", b"x", bytes(range(256)) * 400, os.urandom(3 << 20), b"end"]
    sender = threading.Thread(target=lambda: [writer.send_bytes(m) for m in messages])
    sender.start()  # the large ones do not fit the pipe's buffer: sent while read
    assert [reader.recv_bytes() for _ in messages] == messages
    sender.join()
    writer.close()
    with pytest.raises(EOFError):
        reader.recv_bytes()
    reader.close()
    reader.close()  # closing twice is no error


def test_a_message_cut_short_is_the_end_of_the_pipe() -> None:
    reader, writer = _pipe()
    os.write(writer.fd, (100).to_bytes(8, "little") + b"only ten b")
    writer.close()
    with pytest.raises(EOFError):
        reader.recv_bytes()
    reader.close()


def test_writing_to_a_pipe_nobody_reads_raises() -> None:
    reader, writer = _pipe()
    reader.close()
    with pytest.raises(BrokenPipeError):
        writer.send_bytes(b"anyone?")
    writer.close()
