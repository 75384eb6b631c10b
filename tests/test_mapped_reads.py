"""A local file's stream gives a long payload as a read-only map of the file's bytes
(``LocalObjectStream.read_mapped``), and the stream reader takes batch payloads that
way: not copied, the map gone with its last view, no descriptor held by it. A payload
that cannot be mapped is read through the stream as before."""

from __future__ import annotations

import io
import os
import random
from pathlib import Path

import pyarrow as pa
import pytest

from compactor.fileformat import (
    FileWriter,
    FormatError,
    Record,
    StreamReader,
    batch_to_records,
    records_to_batch,
)
from compactor.fileformat.read_frames import frame_of
from compactor.fileformat.reader import READ_AHEAD, READ_AHEAD_MAPPING
from compactor.objectstore.local import LocalStore
from compactor.objectstore.throttle import ReadThrottle, ThrottledStream

NAME = "data/mapped.cf"
LINUX = pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="Linux's /proc")


def write_file(sections: int, records: int, value_bytes: int) -> tuple[bytes, list[Record]]:
    """An uncompressed file (so that a decoded batch's values are its payload's bytes):
    ``sections`` partitions of ``records`` records each, one batch a section."""
    rng = random.Random(7)
    sink = io.BytesIO()
    w = FileWriter(sink, object_name=NAME, compression=None)
    every: list[Record] = []
    for partition in range(sections):
        recs = [
            Record(i, 1_700_000_000_000 + i, b"k-%d" % i, rng.randbytes(value_bytes), ())
            for i in range(records)
        ]
        w.write_section("t", partition, [records_to_batch(recs)])
        every += recs
    w.finish()
    return sink.getvalue(), every


DATA, RECORDS = write_file(sections=3, records=700, value_bytes=1_000)


def stored(tmp_path: Path, data: bytes) -> LocalStore:
    store = LocalStore(str(tmp_path))
    store.put(NAME, data)
    return store


def maps_of(path: Path) -> int:
    """How many maps of ``path`` this process has (``/proc/self/maps``)."""
    return sum(
        line.endswith(str(path)) for line in Path("/proc/self/maps").read_text().splitlines()
    )


def test_read_mapped_gives_the_bytes_and_moves_the_stream(tmp_path: Path) -> None:
    store = stored(tmp_path, DATA)
    with store.open_stream(NAME, 100) as stream:
        assert stream.read(10) == DATA[100:110]
        view = stream.read_mapped(50_000, 4)  # from 4 bytes before the position
        assert view is not None and view.readonly
        assert view == DATA[106:50_106]
        assert stream.position == 50_106
        assert stream.read(10) == DATA[50_106:50_116]
        assert stream.read_mapped(len(DATA), 0) is None  # past the end: not moved
        assert stream.read_mapped(10, 11) is None  # more before the position than wanted
        assert stream.position == 50_116
    assert view[:100] == DATA[106:206]  # a view outlives its stream


def test_batch_payloads_are_maps_of_the_file(tmp_path: Path) -> None:
    """Every decoded batch's values lie in its payload's map: nothing was copied."""
    store = stored(tmp_path, DATA)
    got: list[Record] = []
    with store.open_stream(NAME) as stream:
        for section in StreamReader(stream, object_name=NAME, size=len(DATA)).sections():
            for batch in section.batches():
                frame = frame_of(batch)  # the frame a batch this heavy was decoded from
                assert frame is not None and isinstance(frame.payload, memoryview)
                assert len(frame.payload) > READ_AHEAD
                start = pa.py_buffer(frame.payload).address
                values = batch.column("value").buffers()[2]
                assert start <= values.address < start + len(frame.payload)
                got += batch_to_records(batch)
        assert stream.position == len(DATA)
    assert got == RECORDS


@LINUX
def test_a_map_goes_with_its_last_view_and_holds_no_descriptor(tmp_path: Path) -> None:
    store = stored(tmp_path, DATA)
    path = tmp_path / NAME
    descriptors = len(os.listdir("/proc/self/fd"))
    with store.open_stream(NAME) as stream:
        view = stream.read_mapped(100_000)
        assert view is not None
        assert maps_of(path) == 1
        assert len(os.listdir("/proc/self/fd")) == descriptors + 1  # the stream's file
    assert len(os.listdir("/proc/self/fd")) == descriptors
    assert maps_of(path) == 1 and view[-1] == DATA[99_999]
    part = view[10:20]
    del view
    assert maps_of(path) == 1  # a slice holds the map too
    del part
    assert maps_of(path) == 0


def test_a_file_cut_short_after_it_was_opened_is_read_and_refused(tmp_path: Path) -> None:
    """The map is refused (the range is past the file's end now), so the payload is read
    through the stream as before, and the reader says where the object ends."""
    store = stored(tmp_path, DATA)
    with store.open_stream(NAME) as stream:
        os.truncate(tmp_path / NAME, len(DATA) // 2)
        assert stream.read_mapped(len(DATA) // 2 + 1) is None
        assert stream.position == 0
        with pytest.raises(FormatError, match="truncated") as e:
            for section in StreamReader(stream, object_name=NAME, size=len(DATA)).sections():
                for _ in section.batches():
                    pass
    assert e.value.object_name == NAME


def test_a_closed_stream_maps_nothing(tmp_path: Path) -> None:
    store = stored(tmp_path, DATA)
    stream = store.open_stream(NAME)
    stream.close()
    with pytest.raises(Exception, match="closed stream"):
        stream.read_mapped(10)


def test_a_throttled_stream_maps_and_meters_every_byte(tmp_path: Path) -> None:
    """A queue worker's streams are paced (``ThrottledStream``): its payloads are mapped
    too, and the bytes mapped count as read, once (what was read ahead is not counted
    again)."""
    store = stored(tmp_path, DATA)
    throttle = ReadThrottle(None)
    got: list[Record] = []
    with store.open_stream(NAME) as stream:
        source = ThrottledStream(stream, throttle)
        for section in StreamReader(source, object_name=NAME, size=len(DATA)).sections():
            for batch in section.batches():
                frame = frame_of(batch)
                assert frame is not None and isinstance(frame.payload, memoryview)
                got += batch_to_records(batch)
    assert got == RECORDS
    assert throttle.bytes_total == len(DATA)


def read_records(source: CountingBytes) -> list[Record]:
    return [
        r
        for section in StreamReader(source, object_name=NAME, size=len(DATA)).sections()
        for batch in section.batches()
        for r in batch_to_records(batch)
    ]


class CountingBytes(io.BytesIO):
    """A real byte stream that records the length of each read."""

    def __init__(self, data: bytes) -> None:
        super().__init__(data)
        self.reads: list[int] = []

    def read(self, n: int | None = -1) -> bytes:
        self.reads.append(-1 if n is None else n)
        return super().read(n)


def test_a_stream_that_gives_no_map_keeps_its_read_ahead() -> None:
    """An S3 stream's ``read_mapped`` gives None: its payloads are copied, read ahead by
    64 KiB as before mapping existed."""

    class Unmapped(CountingBytes):
        def read_mapped(self, n: int, back: int = 0) -> memoryview | None:
            return None

    source = Unmapped(DATA)
    assert read_records(source) == RECORDS
    assert READ_AHEAD in source.reads and READ_AHEAD_MAPPING not in source.reads


def test_a_stream_that_maps_reads_ahead_less_once_it_has() -> None:
    """After its first mapped payload, a source is read ahead by 8 KiB: a payload starts
    just after its frame's header, and what a longer read-ahead held of it would have been
    copied for nothing."""

    class Mapping(CountingBytes):
        mapped = 0

        def read_mapped(self, n: int, back: int = 0) -> memoryview | None:
            start = self.tell() - back
            self.seek(start + n)
            self.mapped += 1
            return memoryview(self.getvalue())[start : start + n]

    source = Mapping(DATA)
    assert read_records(source) == RECORDS
    assert source.mapped == 3  # one long batch a section
    first = source.reads.index(READ_AHEAD_MAPPING)
    assert READ_AHEAD not in source.reads[first:]
