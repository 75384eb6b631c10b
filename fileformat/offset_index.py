"""The offset index sidecar (FORMAT.md section 12): per section, its byte range, its
offset bitmap and a sparse offset and time index of its batches, in an object of its own
at the data file's key + ``.idx``.

``build_index`` makes one from a whole data file read once front to back (the Spark
backfill); ``IndexBuilder`` from what a ``FileWriter`` reports as it writes (a compaction
output, no read at all). ``decode_index`` checks every byte it reads and raises
FormatError; ``OffsetIndex.matches`` ties an index to one version of its file.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Final

import pyarrow as pa

from compactor.fileformat import _sections, compute
from compactor.fileformat.bitmap import OffsetSet
from compactor.fileformat.block import TableEntry, read_block
from compactor.fileformat.errors import FormatError
from compactor.fileformat.framing import (
    FRAME_HEADER,
    TAG_BATCH,
    TAG_SHARED_BATCH,
    U16,
    Cursor,
    encode_frame,
    parse_frame,
)
from compactor.fileformat.ipc import decode_batch
from compactor.fileformat.meta import FileMeta
from compactor.fileformat.ranged import ReadRange
from compactor.fileformat.reader import Source, StreamReader

INDEX_SUFFIX: Final = ".idx"
INDEX_MAGIC: Final = b"CFOIDX\r\n"
INDEX_VERSION: Final = 1
TAG_INDEX: Final = b"OIDX"

_HEADER = struct.Struct("<8sII")
_PAYLOAD_HEAD = struct.Struct("<QIII")
_ENTRY_FIXED = struct.Struct("<iQQqqIB3sI")  # after the topic
_BATCH = struct.Struct("<qQq")


def index_key(data_key: str) -> str:
    return data_key + INDEX_SUFFIX


@dataclass(frozen=True, slots=True)
class BatchEntry:
    first_offset: int
    position: int
    """The batch frame's position relative to its section."""
    max_timestamp: int


@dataclass(frozen=True, slots=True)
class SectionIndex:
    topic: str
    partition: int
    position: int
    length: int
    offsets: OffsetSet
    batches: tuple[BatchEntry, ...]

    @property
    def first_offset(self) -> int:
        return self.offsets.first()

    @property
    def last_offset(self) -> int:
        return self.offsets.last()

    def seek_offset(self, offset: int) -> tuple[int, int] | None:
        """(the next present offset >= ``offset``, the index of the batch holding it);
        None if the section holds none."""
        present = self.offsets.next_present(offset)
        if present is None:
            return None
        batch = max(i for i, b in enumerate(self.batches) if b.first_offset <= present)
        return present, batch

    def seek_timestamp(self, timestamp: int) -> int | None:
        """The index of the first batch holding a record whose timestamp >= ``timestamp``;
        None if no record of the section is that recent."""
        return next((i for i, b in enumerate(self.batches) if b.max_timestamp >= timestamp), None)


@dataclass(frozen=True, slots=True)
class OffsetIndex:
    data_size: int
    data_footer_crc: int
    data_version: int
    sections: tuple[SectionIndex, ...]

    def section(self, topic: str, partition: int) -> SectionIndex | None:
        return next(
            (s for s in self.sections if s.topic == topic and s.partition == partition), None
        )

    def matches(self, size: int, footer_crc: int) -> bool:
        """Whether the index describes the data file of this size and footer CRC."""
        return (self.data_size, self.data_footer_crc) == (size, footer_crc)


def encode_index(index: OffsetIndex) -> bytes:
    entries = [
        _entry(
            s.topic.encode(),
            s.partition,
            s.position,
            s.length,
            s.offsets,
            [(b.first_offset, b.position, b.max_timestamp) for b in s.batches],
        )
        for s in index.sections
    ]
    head = (index.data_size, index.data_footer_crc, index.data_version, len(entries))
    return _encoded(*head, entries)


def _entry(
    topic: bytes,
    partition: int,
    position: int,
    length: int,
    offsets: OffsetSet,
    batches: Sequence[tuple[int, int, int]],
) -> bytes:
    """One section's entry: its topic, fixed fields, bitmap and batches (each its first
    offset, position in the section and largest timestamp). A shared block's sections
    have theirs made in one compiled pass (``_sections.index_entries``)."""
    bitmap = offsets.serialize()
    fixed = _ENTRY_FIXED.pack(
        partition,
        position,
        length,
        offsets.first(),
        offsets.last(),
        len(batches),
        offsets.kind,
        b"\0\0\0",
        len(bitmap),
    )
    parts = [U16.pack(len(topic)), topic, fixed, bitmap]
    parts += [_BATCH.pack(*b) for b in batches]
    return b"".join(parts)


def _encoded(
    size: int, footer_crc: int, version: int, count: int, entries: Sequence[bytes]
) -> bytes:
    """The index object of a data file of ``size`` bytes, footer CRC and format version,
    whose ``count`` sections' entries are, in file order, ``entries`` joined."""
    payload = [_PAYLOAD_HEAD.pack(size, footer_crc, version, count), *entries]
    header = _HEADER.pack(INDEX_MAGIC, INDEX_VERSION, 0)
    return header + encode_frame(TAG_INDEX, b"".join(payload))


def decode_index(data: bytes, object_name: str) -> OffsetIndex:
    """The index in ``data``; FormatError naming the byte of any problem."""
    cur = Cursor(data, 0, object_name)
    magic, version, flags = cur.unpack(_HEADER, "index header")
    if magic != INDEX_MAGIC:
        raise FormatError(object_name, 0, f"bad magic {magic!r}: not an offset index")
    if version != INDEX_VERSION:
        raise FormatError(object_name, 8, f"unsupported offset index version {version}")
    if flags != 0:
        raise FormatError(object_name, 12, f"index flags must be zero, got {flags}")
    payload = parse_frame(cur, TAG_INDEX, "offset index")
    if cur.remaining:
        raise FormatError(object_name, cur.position, "bytes after the index frame")
    p = Cursor(payload, _HEADER.size + 12, object_name)
    size, footer_crc, version, count = p.unpack(_PAYLOAD_HEAD, "index payload")
    sections = tuple(_section(p, object_name) for _ in range(count))
    if p.remaining:
        raise FormatError(object_name, p.position, "bytes after the last index entry")
    return OffsetIndex(size, footer_crc, version, sections)


def _section(p: Cursor, object_name: str) -> SectionIndex:
    at = p.position
    (n,) = p.unpack(U16, "index entry")
    if not n:
        raise FormatError(object_name, at, "index entry with an empty topic")
    topic_bytes = p.take(n, "topic")
    try:
        topic = topic_bytes.decode()
    except UnicodeDecodeError:
        raise FormatError(object_name, at, "topic is not valid UTF-8") from None
    partition, position, length, first, last, batches, kind, reserved, nbitmap = p.unpack(
        _ENTRY_FIXED, "index entry"
    )
    if reserved != b"\0\0\0" or batches < 1 or partition < 0:
        raise FormatError(object_name, at, f"malformed index entry for {topic}/{partition}")
    bitmap_at = p.position
    try:
        offsets = OffsetSet.deserialize(kind, p.take(nbitmap, "offset bitmap"), first)
    except ValueError as e:
        raise FormatError(object_name, bitmap_at, f"bad offset bitmap: {e}") from None
    if not len(offsets) or offsets.first() != first or offsets.last() != last:
        raise FormatError(object_name, bitmap_at, "bitmap disagrees with the entry's offsets")
    entries = tuple(BatchEntry(*p.unpack(_BATCH, "batch entry")) for _ in range(batches))
    return SectionIndex(topic, partition, position, length, offsets, entries)


class IndexBuilder:
    """Collects a file's index while it is written, each section's entry encoded as soon
    as the writer reports it: each batch frame of a framed section (first offset,
    position in its section, the batch's largest timestamp), then the section
    (``end_section``); or a shared block's sections at once (``shared``). ``encode``
    takes the finished file's meta and footer CRC."""

    def __init__(self) -> None:
        self._batches: list[tuple[int, int, int]] = []
        self._entries: list[bytes] = []
        self._count = 0

    def batch(self, first_offset: int, position: int, max_timestamp: int) -> None:
        self._batches.append((first_offset, position, max_timestamp))

    def end_section(
        self, topic: str, partition: int, position: int, length: int, offsets: OffsetSet
    ) -> None:
        """The section whose batches were reported since the last one ended."""
        entry = _entry(topic.encode(), partition, position, length, offsets, self._batches)
        self._entries.append(entry)
        self._count += 1
        self._batches = []

    def shared(
        self, entries: list[TableEntry], bitmaps: list[bytes], position: int, length: int
    ) -> None:
        """A shared block's sections, as their table entries and serialized bitmaps
        (``_sections.index_entries``): each one batch, at the block's start."""
        self._entries.append(_sections.index_entries(entries, bitmaps, position, length))
        self._count += len(entries)

    def encode(self, meta: FileMeta, footer_crc: int) -> bytes:
        """The index object; ValueError if it holds another number of sections than
        ``meta`` lists, or batches of a section that never ended."""
        if self._batches or self._count != len(meta.sections):
            raise ValueError(
                f"the index holds {self._count} sections, the file {len(meta.sections)}"
            )
        head = (meta.size, footer_crc, meta.format_version, self._count)
        return _encoded(*head, self._entries)

    def build(self, meta: FileMeta, footer_crc: int) -> OffsetIndex:
        """``encode``'s index, decoded."""
        return decode_index(self.encode(meta, footer_crc), "<index being built>")


def build_index(source: Source, *, object_name: str, size: int) -> OffsetIndex:
    """The index of a whole data file read once, front to back (only each batch's offset
    and timestamp columns are decoded)."""
    return read_and_index(source, object_name=object_name, size=size)[0]


def read_and_index(
    source: Source, *, object_name: str, size: int, verify: bool = False
) -> tuple[OffsetIndex, FileMeta]:
    """The file's index and footer from one front-to-back read; with ``verify``, every
    record decoded and every check of ``verify_stream`` made along the way."""
    reader = StreamReader(source, object_name=object_name, size=size, verify=verify)
    builder = IndexBuilder()
    fields = None if verify else ["timestamp"]
    for section in reader.sections():
        maxima = [int(compute.max(b.column("timestamp")).as_py()) for b in section.batches(fields)]
        assert section.offsets is not None
        for first, position, latest in zip(
            section.batch_firsts, section.batch_positions, maxima, strict=True
        ):
            builder.batch(first, position, latest)
        assert section.meta is not None
        m = section.meta
        builder.end_section(m.topic, m.partition, m.position, m.length, section.offsets)
    assert reader.footer is not None and reader.footer_crc is not None
    return builder.build(reader.footer, reader.footer_crc), reader.footer


def read_from_batch(
    read_range: ReadRange, index: OffsetIndex, section: SectionIndex, batch: int, object_name: str
) -> Iterator[pa.RecordBatch]:
    """The section's batches from its ``batch``-th on, with one ranged read from that
    batch's frame to the section's end (the trailer comes along and is not decoded)."""
    start = section.position + section.batches[batch].position
    data = bytes(read_range(start, section.position + section.length))
    if data[: len(TAG_SHARED_BATCH)] == TAG_SHARED_BATCH and start == section.position:
        block = read_block(data, start, object_name)
        shared = block.find(section.topic, section.partition)
        yield block.rows(shared.start, shared.count)
        return
    cur = Cursor(data, start, object_name)
    for _ in section.batches[batch:]:
        at = cur.position
        payload = parse_frame(cur, TAG_BATCH, "batch")
        yield decode_batch(payload, at + FRAME_HEADER.size, object_name, index.data_version)
