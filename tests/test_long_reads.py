"""A long read that starts in the stream reader's read-ahead (a frame's payload after its
header) is one bytes object the source reads straight into (``_sections.joined_read``)."""

from __future__ import annotations

import io
import random

import pyarrow as pa
import pytest

from compactor.fileformat import (
    FileWriter,
    FormatError,
    Record,
    StreamReader,
    _sections,
    batch_to_records,
    records_to_batch,
)
from compactor.fileformat.reader import READ_AHEAD
from compactor.objectstore.local import LocalStore

NAME = "data/long.cf"


class CountingSource:
    """A real byte stream (``io.BytesIO``) that counts its reads and readintos."""

    def __init__(self, data: bytes) -> None:
        self.inner = io.BytesIO(data)
        self.reads: list[int] = []
        self.readintos: list[int] = []

    def read(self, n: int) -> bytes:
        self.reads.append(n)
        return self.inner.read(n)

    def readinto(self, view: memoryview) -> int:
        self.readintos.append(len(view))
        return self.inner.readinto(view)


def records(partition: int, n: int) -> list[Record]:
    rng = random.Random(partition)
    return [
        Record(
            i,
            1_700_000_000_000 + i,
            b"k-%d" % (i % 50),
            None if i % 17 == 0 else rng.randbytes(700 + i % 300),
            (("h", b"v"),) if i % 5 == 0 else (),
        )
        for i in range(n)
    ]


def long_frames_file() -> tuple[bytes, dict[tuple[str, int], list[Record]]]:
    """Uncompressed sections of a few hundred KiB in one batch each: every batch frame is
    longer than the read-ahead, and starts after a short frame that it shares a read with."""
    sink = io.BytesIO()
    w = FileWriter(sink, object_name=NAME, compression=None)
    expected = {}
    for partition, n in [(0, 300), (1, 5), (2, 450), (3, 120)]:
        recs = records(partition, n)
        w.write_section("t", partition, [records_to_batch(recs)])
        expected[("t", partition)] = recs
    w.finish()
    return sink.getvalue(), expected


DATA, EXPECTED = long_frames_file()


def read_all(reader: StreamReader) -> dict[tuple[str, int], list[Record]]:
    out: dict[tuple[str, int], list[Record]] = {}
    for section in reader.sections():
        out[(section.topic, section.partition)] = [
            r for b in section.batches() for r in batch_to_records(b)
        ]
    return out


def test_long_payloads_are_read_in_place_when_the_size_is_known() -> None:
    src = CountingSource(DATA)
    assert read_all(StreamReader(src, object_name=NAME, size=len(DATA))) == EXPECTED
    # three sections' batches are longer than the read-ahead and start inside it
    assert len(src.readintos) >= 3
    assert all(n > 0 for n in src.readintos)
    assert max(src.readintos) > READ_AHEAD
    # no read joined a payload's two parts: each long one came through readinto
    assert max(src.reads) <= READ_AHEAD


def test_size_unknown_reads_as_before() -> None:
    src = CountingSource(DATA)
    assert read_all(StreamReader(src, object_name=NAME)) == EXPECTED
    assert src.readintos == []


def test_a_local_stream_reads_in_place(tmp_path: object) -> None:
    store = LocalStore(str(tmp_path))
    store.put(NAME, DATA)
    with store.open_stream(NAME, buffer_size=64 << 10) as stream:
        got = read_all(StreamReader(stream, object_name=NAME, size=len(DATA)))
        assert stream.position == len(DATA)
    assert got == EXPECTED


@pytest.mark.parametrize("cut", [1, 1000, READ_AHEAD + 1])
def test_an_object_shorter_than_its_size_is_a_format_error(cut: int) -> None:
    """The size the catalog gave is larger than the bytes that arrive: the in-place read
    comes up short, and the reader says so (nothing past the object is made up)."""
    first_long = next(  # the payload of the first long batch frame after the first read
        i
        for i in range(READ_AHEAD, len(DATA))
        if DATA[i - 12 : i - 8] == b"BTCH"
        and int.from_bytes(DATA[i - 8 : i - 4], "little") > READ_AHEAD + 1
    )
    data = DATA[: first_long + cut]
    src = CountingSource(data)
    with pytest.raises(FormatError, match="truncated .*frame payload") as e:
        read_all(StreamReader(src, object_name=NAME, size=len(DATA)))
    assert e.value.object_name == NAME
    assert e.value.position == first_long
    assert src.readintos  # the payload was being read in place


def test_joined_read() -> None:
    stream = io.BytesIO(b"0123456789")
    assert _sections.joined_read(memoryview(b"ab"), 6, stream.readinto) == b"ab0123"
    assert _sections.joined_read(b"", 3, stream.readinto) == b"456"
    # the stream ends: only what it gave
    assert _sections.joined_read(b"xy", 10, stream.readinto) == b"xy789"
    assert _sections.joined_read(b"xy", 2, stream.readinto) == b"xy"
    out = _sections.joined_read(b"", 4, io.BytesIO(b"abcd").readinto)
    assert type(out) is bytes and hash(out) == hash(b"abcd")


def test_joined_read_refuses_what_it_cannot_trust() -> None:
    with pytest.raises(ValueError, match="after a head"):
        _sections.joined_read(b"abc", 2, io.BytesIO(b"").readinto)
    with pytest.raises(ValueError, match="returned 5"):
        _sections.joined_read(b"", 4, lambda view: 5)
    with pytest.raises(ValueError, match="returned -1"):
        _sections.joined_read(b"", 4, lambda view: -1)
    with pytest.raises(ValueError, match="returned 'x'"):
        _sections.joined_read(b"", 4, lambda view: "x")

    def fails(view: memoryview) -> int:
        raise OSError("disk gone")

    with pytest.raises(OSError, match="disk gone"):
        _sections.joined_read(b"", 4, fails)

    kept: list[object] = []

    def keeps_an_export(view: memoryview) -> int:
        view[:] = b"wxyz"
        kept.append(pa.py_buffer(view))  # holds the view's buffer
        return len(view)

    with pytest.raises(BufferError):
        _sections.joined_read(b"", 4, keeps_an_export)
    assert kept[-1].to_pybytes() == b"wxyz"  # type: ignore[attr-defined]  # still its own

    def keeps_the_view(view: memoryview) -> int:
        view[:] = b"cd"
        kept.append(view)
        return len(view)

    assert _sections.joined_read(b"ab", 4, keeps_the_view) == b"abcd"
    with pytest.raises(ValueError, match="released"):
        kept[-1].tobytes()  # type: ignore[attr-defined]
