"""The offset index sidecar against its specification (FORMAT.md section 12): the bytes
read back field by field as the tables lay them out, the index built while writing equals
the one built by reading the file, seeks equal a scan, and a damaged index is refused."""

from __future__ import annotations

import io
import struct
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compactor.fileformat import (
    FileWriter,
    FormatError,
    Record,
    batch_to_records,
    records_to_batch,
)
from compactor.fileformat.offset_index import (
    IndexBuilder,
    build_index,
    decode_index,
    encode_index,
    read_from_batch,
)


def _file(
    sections: list[tuple[str, int, list[Record]]], max_batch_bytes: int
) -> tuple[bytes, bytes]:
    """A data file of ``sections`` and the index its writer reported."""
    sink, builder = io.BytesIO(), IndexBuilder()
    writer = FileWriter(sink, index=builder, max_batch_bytes=max_batch_bytes)
    for topic, partition, records in sections:
        writer.write_section(topic, partition, [records_to_batch(records)])
    meta = writer.finish()
    assert writer.footer_crc is not None
    return sink.getvalue(), encode_index(builder.build(meta, writer.footer_crc))


def _records(offsets: list[int], timestamps: list[int]) -> list[Record]:
    return [
        Record(o, t, b"k%d" % (o % 7), None if o % 5 == 0 else b"v" * (o % 13))
        for o, t in zip(offsets, timestamps, strict=True)
    ]


def test_the_bytes_are_laid_out_as_the_spec_says() -> None:
    records = _records([10, 11, 15], [300, 100, 200])
    data, index = _file([("t", 3, records)], 1 << 20)
    magic, version, flags = struct.unpack_from("<8sII", index, 0)
    assert (magic, version, flags) == (b"CFOIDX\r\n", 1, 0)
    tag, length, crc = struct.unpack_from("<4sII", index, 16)
    assert tag == b"OIDX" and 28 + length == len(index)
    assert crc == zlib.crc32(index[16:24] + index[28:])  # tag, length, then the payload
    p = 28
    size, footer_crc, data_version, count = struct.unpack_from("<QIII", index, p)
    assert size == len(data) and data_version == 2 and count == 1
    assert footer_crc == struct.unpack_from("<I", data, len(data) - 16)[0]  # the tail's
    p += 20
    (n,) = struct.unpack_from("<H", index, p)
    assert index[p + 2 : p + 2 + n] == b"t"
    p += 2 + n
    fields = struct.unpack_from("<iQQqqIB3sI", index, p)
    partition, position, section_length, first, last, batches, kind, reserved, nbitmap = fields
    assert (partition, position, first, last, batches, kind) == (3, 16, 10, 15, 1, 1)
    assert reserved == b"\0\0\0" and position + section_length < len(data)
    p += struct.calcsize("<iQQqqIB3sI") + nbitmap
    batch_first, batch_position, max_timestamp = struct.unpack_from("<qQq", index, p)
    assert (batch_first, max_timestamp) == (10, 300)
    assert data[position + batch_position : position + batch_position + 4] == b"BTCH"
    assert p + 24 == len(index)


offsets_strategy = st.lists(st.integers(0, 3), min_size=1, max_size=300).map(
    lambda gaps: [sum(gaps[: i + 1]) + i for i in range(len(gaps))]
)


@st.composite
def files(draw: st.DrawFn) -> tuple[list[tuple[str, int, list[Record]]], int]:
    sections = []
    for partition in range(draw(st.integers(1, 4))):
        offsets = draw(offsets_strategy)
        if draw(st.booleans()):  # a span that needs the 64-bit bitmap
            offsets = [*offsets, offsets[-1] + (1 << 33)]
        timestamps = draw(
            st.lists(st.integers(0, 10_000), min_size=len(offsets), max_size=len(offsets))
        )
        sections.append(("t", partition, _records(offsets, timestamps)))
    return sections, draw(st.sampled_from([64, 512, 1 << 20]))


@settings(max_examples=60, deadline=None)
@given(files(), st.integers(-5, 400), st.integers(-5, 10_005))
def test_the_index_seeks_exactly_what_a_scan_finds(
    case: tuple[list[tuple[str, int, list[Record]]], int], x: int, t: int
) -> None:
    sections, max_batch_bytes = case
    data, encoded = _file(sections, max_batch_bytes)
    read = build_index(io.BytesIO(data), object_name="f", size=len(data))
    assert encode_index(read) == encoded  # the writer's index is the reader's
    index = decode_index(encoded, "f.idx")
    assert index.matches(len(data), read.data_footer_crc)

    def read_range(start: int, end: int) -> bytes:
        return data[start:end]

    for topic, partition, records in sections:
        section = index.section(topic, partition)
        assert section is not None and len(section.offsets) == len(records)
        by_offset = [r for r in records if r.offset >= x]
        found = section.seek_offset(x)
        if found is None:
            assert by_offset == []
        else:
            present, batch = found
            assert present == by_offset[0].offset
            got = [
                r
                for b in read_from_batch(read_range, index, section, batch, "f")
                for r in batch_to_records(b)
                if r.offset >= present
            ]
            assert [r.offset for r in got] == [r.offset for r in by_offset]
        first_recent = next((i for i, r in enumerate(records) if r.timestamp >= t), None)
        batch_t = section.seek_timestamp(t)
        if first_recent is None:
            assert batch_t is None
        else:
            assert batch_t is not None
            rows = [
                r
                for b in read_from_batch(read_range, index, section, batch_t, "f")
                for r in batch_to_records(b)
            ]
            assert records[first_recent].offset in [r.offset for r in rows]
            assert all(r.timestamp < t for r in records[:first_recent])
            assert rows[0].offset <= records[first_recent].offset


@pytest.mark.parametrize("at", [0, 9, 13, 20, 30, -1])
def test_a_damaged_index_is_refused_naming_a_byte(at: int) -> None:
    data, index = _file([("t", 0, _records([1, 2, 3], [5, 6, 7]))], 1 << 20)
    damaged = bytearray(index)
    damaged[at] ^= 0x40
    with pytest.raises(FormatError, match=r"^f\.idx: byte \d+: "):
        decode_index(bytes(damaged), "f.idx")
    with pytest.raises(FormatError):
        decode_index(index[:-1], "f.idx")
    with pytest.raises(FormatError):
        decode_index(index + b"\0", "f.idx")
