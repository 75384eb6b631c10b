"""A local file's stream gives its bytes as a view of the file, mapped
(``LocalObjectStream.mapped``), and the stream reader reads that view instead of the
stream: batch payloads are slices of it, not copies, and the memory the map holds stays
bounded (``release``). A file that cannot be mapped is read through the stream as before."""

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
from compactor.fileformat.reader import RELEASE_EVERY
from compactor.objectstore.local import LocalStore

NAME = "data/mapped.cf"


def write_file(sections: int, records: int, value_bytes: int) -> tuple[bytes, list[Record]]:
    """An uncompressed file (so that a decoded batch's values are its payload's bytes):
    ``sections`` partitions of ``records`` records each."""
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


DATA, RECORDS = write_file(sections=4, records=400, value_bytes=700)


def stored(tmp_path: Path, data: bytes) -> LocalStore:
    store = LocalStore(str(tmp_path))
    store.put(NAME, data)
    return store


def test_the_view_is_the_file_from_the_streams_start(tmp_path: Path) -> None:
    store = stored(tmp_path, DATA)
    with store.open_stream(NAME, 12_345) as stream:
        view = stream.mapped()
        assert view is not None and view.readonly
        assert view == DATA[12_345:]
        assert stream.mapped() is view  # mapped once
    assert view[:100] == DATA[12_345:12_445]  # a view outlives its stream


@pytest.mark.skipif(not Path("/proc/self/fd").exists(), reason="Linux's /proc")
def test_a_mapped_stream_holds_one_descriptor_and_still_reads(tmp_path: Path) -> None:
    """Mapping closes the stream's file (the map holds a descriptor of its own), and the
    stream's own reads go on from its position, through the map."""
    store = stored(tmp_path, DATA)

    def descriptors() -> int:
        return len(os.listdir("/proc/self/fd"))

    before = descriptors()
    with store.open_stream(NAME, 100) as stream:
        assert descriptors() == before + 1
        view = stream.mapped()
        assert view is not None
        assert descriptors() == before + 1
        assert stream.read(10) == DATA[100:110]
        into = bytearray(5)
        assert stream.readinto(memoryview(into)) == 5 and into == DATA[110:115]
        assert stream.read(-1) == DATA[115:]
        assert stream.read(3) == b"" and stream.position == len(DATA)
    assert descriptors() == before + 1  # the map stays while a view of it is held
    del view
    assert descriptors() == before


def test_nothing_to_map_gives_no_view(tmp_path: Path) -> None:
    store = stored(tmp_path, DATA)
    store.put("data/empty.cf", b"")
    with store.open_stream(NAME, len(DATA)) as stream:
        assert stream.mapped() is None
    with store.open_stream("data/empty.cf") as stream:
        assert stream.mapped() is None


def test_batch_payloads_are_slices_of_the_map(tmp_path: Path) -> None:
    """Every decoded batch's values lie inside the mapped file: nothing was copied."""
    store = stored(tmp_path, DATA)
    with store.open_stream(NAME) as stream:
        reader = StreamReader(stream, object_name=NAME, size=len(DATA))
        view = stream.mapped()
        assert view is not None
        start = pa.py_buffer(view).address
        got: list[Record] = []
        for section in reader.sections():
            for batch in section.batches():
                values = batch.column("value").buffers()[2]
                assert start <= values.address < start + len(view)
                got += batch_to_records(batch)
        assert stream.position == 0  # the stream itself read nothing
    assert got == RECORDS


def test_a_file_cut_short_after_it_was_opened_is_read_and_refused(tmp_path: Path) -> None:
    """The map fails (the file is shorter than the stream's size), so the stream is read
    as before, and the reader says where the object ends."""
    store = stored(tmp_path, DATA)
    with store.open_stream(NAME) as stream:
        os.truncate(tmp_path / NAME, len(DATA) // 2)
        reader = StreamReader(stream, object_name=NAME, size=len(DATA))
        assert stream.mapped() is None
        with pytest.raises(FormatError, match="truncated") as e:
            for section in reader.sections():
                for _ in section.batches():
                    pass
    assert e.value.object_name == NAME


LARGEST_FOLIO_KIB = 2048


def _resident_kib(path: Path) -> int | None:
    """The resident memory of this process's map of ``path`` (``/proc/self/smaps``)."""
    lines = Path("/proc/self/smaps").read_text().splitlines()
    for i, line in enumerate(lines):
        if line.endswith(str(path)):
            for field in lines[i + 1 :]:
                if field.startswith("Rss:"):
                    return int(field.split()[1])
    return None


@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="Linux's /proc")
def test_the_map_holds_little_more_than_the_reader_has_not_passed(tmp_path: Path) -> None:
    """Reading a 64 MiB file through its map, the map's resident memory stays within what
    the reader has not passed, not the file; once the stream is closed, none is left.
    The page cache may hold a file in folios of up to 2 MiB, which a fault maps whole."""
    data, records = write_file(sections=64, records=1_000, value_bytes=1_000)
    store = stored(tmp_path, data)
    path = tmp_path / NAME
    peak = 0
    count = 0
    with store.open_stream(NAME) as stream:
        reader = StreamReader(stream, object_name=NAME, size=len(data))
        for section in reader.sections():
            for batch in section.batches():
                count += batch.num_rows
            resident = _resident_kib(path)
            assert resident is not None
            peak = max(peak, resident)
        largest_section_kib = 1_000 * 1_030 // 1024
        assert peak <= (RELEASE_EVERY >> 10) + largest_section_kib + 2 * LARGEST_FOLIO_KIB
        assert peak * 8 < len(data) >> 10
    assert count == len(records)
    assert not _resident_kib(path)  # unmapped, or nothing resident
