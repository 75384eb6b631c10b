"""Shared blocks (FORMAT.md section 13): many small sections in one record batch.

A block is a ``SBLK`` frame holding one Arrow record batch of the records of its sections
in section order, a ``STBL`` frame holding the section table, and the 8-byte block end
(the table frame's length, ``BEND``). A table entry is a section's topic, partition and
version-2 trailer (one batch, at relative position 0), so a shared section's stats,
bitmap and consistency rules are those of any section; its rows are the batch's rows that
follow those of the entries before it.

A block is decoded and checked once for all its sections: one Arrow decode and one
compiled pass over its buffers as Arrow's C data interface exports them
(``_sections.batch_figures``) for every section's offsets, their order and, when every
column was decoded, its stats.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, overload

import pyarrow as pa

from compactor.fileformat import _sections
from compactor.fileformat.batches import BatchStats, int64_view
from compactor.fileformat.errors import FormatError
from compactor.fileformat.field_decode import decode_fields, field_indices
from compactor.fileformat.framing import (
    BLOCK_END_MAGIC,
    FORMAT_VERSION,
    FRAME_HEADER,
    I32,
    MIN_SECTION_HEADER_PAYLOAD,
    SECTION_END,
    SHARED_VERSION,
    TAG_SECTION_TABLE,
    TAG_SHARED_BATCH,
    U16,
    U32,
    Cursor,
    Payload,
    parse_frame,
)
from compactor.fileformat.ipc import decode_unchecked
from compactor.fileformat.meta import SectionMeta, section_key
from compactor.fileformat.records import RECORD_SCHEMA
from compactor.fileformat.second_read import MEMO, Role
from compactor.fileformat.section import (
    TRAILER_FIXED,
    TrailerHead,
    dense_bitmap,
    encode_section_header,
    parse_section_end,
    parse_trailer_head,
    read_topic_partition,
)

MIN_TABLE_ENTRY = MIN_SECTION_HEADER_PAYLOAD + U32.size + TRAILER_FIXED.size


@dataclass(frozen=True, slots=True)
class SharedSection:
    """One entry of a block's section table, checked (``parse_section_table``)."""

    topic: str
    partition: int
    key: tuple[bytes, int]
    trailer: TrailerHead
    """Its trailer, checked but for the bitmap, which ``trailer.offsets()`` reads."""
    start: int
    """Its first row in the block's batch."""
    count: int
    """Its rows (``trailer.stats.record_count``), a field because a job reads it for every
    section of every block, twice."""


class TableEntry(NamedTuple):
    """One entry of a block's section table as plain values, cheap to make for 10,000s
    of entries: what a job reads of every section. Its first eight fields are its stats,
    in ``BatchStats``'s order and with its names (``entry[:8]`` are a section's figures,
    see ``section_figures``)."""

    first_offset: int
    last_offset: int
    record_count: int
    tombstones: int
    uncompressed_bytes: int
    min_timestamp: int
    max_timestamp: int
    min_delete_horizon: int | None
    topic: str
    partition: int
    key: tuple[bytes, int]
    start: int
    """Its first row in the block's batch; -1 in the entries a writer holds
    (``FileWriter``), which places a section's rows by its block's pieces."""
    kind: int
    """Its bitmap's kind."""
    bitmap_from: int
    """Where its bitmap starts in the table payload; -1 for an entry parsed field by field
    (``_any_entry``), whose ``SharedSection`` is made at once."""
    bitmap_to: int


class SectionTable(Sequence[SharedSection]):
    """A block's checked section table (``parse_section_table``): ``entries`` for what is
    read of every section, packed (``_sections.SectionEntries``: C values, a
    ``TableEntry`` made when one is asked for), and each entry as a ``SharedSection``
    (its trailer with the bitmap's bytes) made when first asked for: a compaction asks
    for almost none."""

    __slots__ = ("entries", "_payload", "_base", "_object_name", "_made")

    def __init__(
        self,
        entries: _sections.SectionEntries[TableEntry],
        payload: bytes,
        base: int,
        object_name: str,
        made: dict[int, SharedSection] | None = None,
    ) -> None:
        self.entries = entries
        self._payload, self._base, self._object_name = payload, base, object_name
        self._made = {} if made is None else made

    def __len__(self) -> int:
        return len(self.entries)

    @overload
    def __getitem__(self, i: int) -> SharedSection: ...

    @overload
    def __getitem__(self, i: slice) -> tuple[SharedSection, ...]: ...

    def __getitem__(self, i: int | slice) -> SharedSection | tuple[SharedSection, ...]:
        if isinstance(i, slice):
            return tuple(self[j] for j in range(*i.indices(len(self))))
        if i < 0:
            i += len(self.entries)
        section = self._made.get(i)
        if section is None:
            e = self.entries[i]  # IndexError past the end
            stats = BatchStats(*e[:8])
            trailer = TrailerHead(
                stats,
                ((e.first_offset, 0),),
                FORMAT_VERSION,
                e.kind,
                self._payload[e.bitmap_from : e.bitmap_to],
                self._base + e.bitmap_from,
                self._object_name,
            )
            section = self._made[i] = SharedSection(
                e.topic, e.partition, e.key, trailer, e.start, e.record_count
            )
        return section

    def __iter__(self) -> Iterator[SharedSection]:
        return (self[i] for i in range(len(self.entries)))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, SectionTable):
            return tuple(self) == tuple(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def check_bitmaps(self) -> None:
        """Every section's bitmap against its stats (``TrailerHead.check_bitmap``): in
        one compiled pass (``_sections.unsettled``) without making a ``SharedSection``,
        a dense section's by its bytes (``is_dense_bitmap``) and one of a single small
        container by parsing it; any other fully."""
        for i in _sections.unsettled(self.entries, self._payload, dense_bitmap):
            self[i].trailer.check_bitmap()


def encode_section_table(sections: Sequence[tuple[str, int, bytes]]) -> bytes:
    """A ``STBL`` payload of (topic, partition, version-2 trailer payload) entries."""
    parts = [U32.pack(len(sections))]
    for topic, partition, trailer in sections:
        parts += (encode_section_header(topic, partition), U32.pack(len(trailer)), trailer)
    return b"".join(parts)


def shared_table(entries: list[TableEntry], bitmaps: list[bytes]) -> bytes:
    """The ``STBL`` payload of the sections ``entries`` whose offset bitmaps (serialized,
    of their entries' kinds) are ``bitmaps``: what ``encode_section_table`` makes of
    their trailers (each with one index entry, at (first offset, 0)), in one compiled
    pass (``_sections.table_payload``). A writer's sections are all of this form."""
    return _sections.table_payload(entries, bitmaps)


def entry_meta(e: TableEntry, position: int, length: int) -> SectionMeta:
    """The metadata of the section of the table entry ``e`` in a block at ``position``,
    ``length`` bytes long. (A writer makes a whole block's at once, in C:
    ``_sections.entry_metas``, the same objects.)"""
    return SectionMeta(
        e.topic, e.partition, e[0], e[1], e[2], e[4], e[5], e[6], e[3], position, length, e[7]
    )


def parse_section_table(
    payload: bytes, base: int, object_name: str, role: Role = None
) -> SectionTable:
    """The entries of a ``STBL`` payload that starts at absolute ``base``.

    Invariants: at least one entry; entries strictly sorted as sections are; each trailer
    passes ``parse_trailer_head`` and indexes exactly one batch, at relative position 0.
    A job's second pointer takes what its first parsed of the same bytes
    (``fileformat.second_read``).
    """
    return MEMO.decoded(
        "table", payload, role, lambda: (_parse_section_table(payload, base, object_name), True)
    )


def _parse_section_table(payload: bytes, base: int, object_name: str) -> SectionTable:
    cur = Cursor(payload, base, object_name)
    (count,) = cur.unpack(U32, "section table count")
    if count < 1 or count * MIN_TABLE_ENTRY > cur.remaining:
        raise cur.error(f"section table claims {count} sections, which cannot fit", base)
    entries = _sections.SectionEntries(TableEntry)
    made: dict[int, SharedSection] = {}
    start = 0
    topics = _TOPICS  # blocks' sections mostly share a few topics: decode each once
    if len(topics) > _MAX_TOPICS:
        topics.clear()
    while True:
        previous = entries[-1].key if entries else None
        cur.offset, start = _usual_entries(
            payload, cur.offset, count, topics, previous, start, entries
        )
        if len(entries) == count:
            break
        previous = entries[-1].key if entries else None
        section = made[len(entries)] = _any_entry(cur, topics, previous, start)
        st, trailer = section.trailer.stats, section.trailer
        entries.append(
            TableEntry(
                *st.figures(),
                section.topic,
                section.partition,
                section.key,
                start,
                trailer.kind,
                -1,
                -1,
            )
        )
        start += section.count
    cur.expect_end("the section table")
    return SectionTable(entries, payload, base, object_name, made)


_TOPICS: dict[bytes, str] = {}
"""Topics as raw bytes, decoded (and checked) once for every table of this process."""
_MAX_TOPICS = 4096

_usual_entries = _sections.usual_entries
"""Appends the entries that are as this system writes them (a topic already seen in the
table, a layout-2 trailer with one index entry at (first offset, 0)) and pass every check
``_any_entry`` makes, up to the first that is not, without a Cursor or any object per
entry (``_sections.c``): each is packed into the ``SectionEntries``, its ``TableEntry``
and its trailer made only if asked for (``SectionTable``).
The trailer up to its bitmap is the fixed fields, the delete horizon (layout 2) and the
one batch index entry, ``_sections.USUAL_TRAILER`` bytes."""


def _any_entry(
    cur: Cursor, topics: dict[bytes, str], previous: tuple[bytes, int] | None, start: int
) -> SharedSection:
    """The table entry at ``cur``, checked field by field (FormatError naming the first
    that is wrong)."""
    payload = cur.data
    at = cur.position
    topic_at = cur.offset + U16.size
    n = U16.unpack_from(payload, cur.offset)[0] if cur.remaining >= U16.size else 0
    raw_topic = payload[topic_at : topic_at + n]
    topic = topics.get(raw_topic) if n and len(raw_topic) == n else None
    if topic is None:
        topic, partition = read_topic_partition(cur, "section table entry")
        topics[raw_topic] = topic
    else:
        cur.offset = topic_at + n
        (partition,) = cur.unpack(I32, "section table entry partition")
        if partition < 0:
            raise cur.error(f"negative partition {partition} in section table entry", at)
    key = (raw_topic, partition)
    if previous is not None and key <= previous:
        raise cur.error(f"section {topic}/{partition} is out of order in the block", at)
    (length,) = cur.unpack(U32, "section table entry")
    trailer_at = cur.position
    raw = cur.take(length, "shared section trailer")
    trailer = parse_trailer_head(raw, trailer_at, cur.object_name, SHARED_VERSION)
    if trailer.index != ((trailer.stats.first_offset, 0),):
        raise cur.error(
            f"shared section {topic}/{partition} indexes {len(trailer.index)} batches, "
            "not one at position 0",
            trailer_at,
        )
    return SharedSection(topic, partition, key, trailer, start, trailer.stats.record_count)


def find_section(
    table: SectionTable, topic: str, partition: int, object_name: str, at: int
) -> SharedSection:
    """The entry of ``topic``/``partition`` in a block's table; FormatError if it has none."""
    key = section_key(topic, partition)
    entries = table.entries
    i = bisect.bisect_left(entries, key, key=lambda e: e.key)
    if i == len(entries) or entries[i].key != key:
        raise FormatError(object_name, at, f"the shared block holds no {topic}/{partition}")
    return table[i]


class Block:
    """A shared block's checked table, and its batch decoded once (per set of columns)."""

    __slots__ = (
        "payload",
        "payload_at",
        "sections",
        "object_name",
        "role",
        "check_bitmaps",
        "_decoded",
        "_shaped",
    )

    def __init__(
        self,
        payload: Payload,
        payload_at: int,
        sections: SectionTable,
        object_name: str,
        role: Role = None,
        check_bitmaps: bool = True,
    ) -> None:
        self.payload = payload
        self.payload_at = payload_at
        self.sections = sections
        self.object_name = object_name
        self.role = role
        self.check_bitmaps = check_bitmaps
        """Whether decoding its whole batch checks its table's bitmaps too (not if its
        reader checked them already, or leaves them to another: ``reader.FileChecks``)."""
        self._decoded: tuple[tuple[int, ...], pa.RecordBatch] | None = None
        self._shaped: dict[tuple[str, ...] | None, pa.RecordBatch] = {}

    def find(self, topic: str, partition: int) -> SharedSection:
        return find_section(self.sections, topic, partition, self.object_name, self.payload_at)

    def records(self, fields: Sequence[str] | None = None) -> pa.RecordBatch:
        """The block's batch, whole or with only ``fields`` (and the offset), checked
        against the table (``check_block_batch``)."""
        indices = field_indices(RECORD_SCHEMA.names if fields is None else fields)
        if self._decoded is not None and set(indices) <= set(self._decoded[0]):
            return self._decoded[1]
        whole = len(indices) == len(RECORD_SCHEMA)
        if whole:
            batch = decode_unchecked(
                self.payload, self.payload_at, self.object_name, SHARED_VERSION, self.role
            )
        else:
            batch = decode_fields(
                self.payload,
                self.payload_at,
                self.object_name,
                [RECORD_SCHEMA.names[i] for i in indices],
                SHARED_VERSION,
                self.role,
                ordered=False,
            )
        bitmaps = whole and self.check_bitmaps
        check_block_batch(batch, self.sections, self.object_name, self.payload_at, whole, bitmaps)
        self._decoded = (tuple(range(len(RECORD_SCHEMA))) if whole else indices, batch)
        return batch

    def rows(self, start: int, count: int, fields: Sequence[str] | None = None) -> pa.RecordBatch:
        """The ``count`` rows from ``start`` (a section's, or a run of sections'), whole
        or with ``fields`` (and the offset) in schema order, as ``SectionReader.batches``
        gives them."""
        return self.shaped(fields).slice(start, count)

    def shaped(self, fields: Sequence[str] | None = None) -> pa.RecordBatch:
        """The block's batch, whole or with ``fields`` (and the offset) in schema order."""
        key = None if fields is None else tuple(fields)
        batch = self._shaped.get(key)
        if batch is None:
            batch = self.records(fields)
            if fields is not None:
                names = [RECORD_SCHEMA.names[i] for i in field_indices(fields)]
                if batch.schema.names != names:
                    batch = batch.select(names)
            self._shaped[key] = batch
        return batch


def read_block(data: bytes, base: int, object_name: str) -> Block:
    """The block whose bytes (``SBLK`` frame, ``STBL`` frame, block end) are ``data``,
    at absolute ``base``; its batch is not decoded yet."""
    cur = Cursor(data, base, object_name)
    payload = parse_frame(cur, TAG_SHARED_BATCH, "shared batch")
    table_at = cur.position
    table = parse_frame(cur, TAG_SECTION_TABLE, "section table")
    end_at = cur.position
    check_block_end(cur.take(SECTION_END.size, "block end"), end_at, object_name, end_at - table_at)
    cur.expect_end("the shared block")
    sections = parse_section_table(table, table_at + FRAME_HEADER.size, object_name)
    return Block(payload, base + FRAME_HEADER.size, sections, object_name)


def check_block_end(data: bytes, at: int, object_name: str, table_frame_length: int) -> None:
    """That the 8-byte block end at ``at`` is ``BEND`` and records the table frame's
    length."""
    recorded = parse_section_end(data, at, object_name, BLOCK_END_MAGIC)
    if recorded != table_frame_length:
        raise FormatError(
            object_name,
            at,
            f"block end records a {recorded}-byte table, the table frame has {table_frame_length}",
        )


def check_block_batch(
    batch: pa.RecordBatch,
    table: SectionTable,
    object_name: str,
    at: int,
    whole: bool,
    bitmaps: bool,
) -> None:
    """That ``batch`` holds exactly the records the table describes: the row count, each
    section's first and last offset, offsets strictly increasing within every section,
    and, when ``whole`` (every column decoded, by ``ipc.decode_unchecked``), the nulls
    ``batches.decoded_problem`` refuses and every section's stats; and, when ``bitmaps``,
    every section's bitmap against its stats. One compiled pass over the block
    (``_sections.batch_figures``, or ``_sections.figures`` for the offsets alone)
    measures every section."""
    entries = table.entries
    last = entries[-1]
    if batch.num_rows != last.start + last.record_count:
        raise FormatError(
            object_name,
            at,
            f"shared batch has {batch.num_rows} rows, its table {last.start + last.record_count}",
        )
    if bitmaps:
        table.check_bitmaps()  # their consistency with the stats (FORMAT.md 6.4)
    try:
        found = _figures(batch, entries, whole, compare=True, checked=whole)
    except ValueError as err:  # a column shorter than its rows: Arrow's checks pass none
        raise FormatError(object_name, at, f"shared batch: {err}") from None
    if isinstance(found, str):
        raise FormatError(object_name, at, f"invalid batch: {found}")
    descent, bad = found
    if descent >= 0:
        raise FormatError(object_name, at, "offsets do not strictly increase in a section")
    if bad >= 0:
        _, (seen,) = _figures(batch, entries[bad : bad + 1], whole)
        raise FormatError(object_name, at, _disagreement(entries[bad], seen))


def _figures(
    batch: pa.RecordBatch,
    entries: _sections.SectionEntries[TableEntry] | list[TableEntry],
    whole: bool,
    compare: bool = False,
    checked: bool = False,
) -> Any:
    """The entries' sections' figures in ``batch`` (``_sections.batch_figures`` if it is
    whole, else their offsets only: ``_sections.figures``), or with ``compare`` their
    check against the entries; with ``checked``, first the whole batch's nulls."""
    if whole:
        arrays = batch.__arrow_c_array__()
        return _sections.batch_figures(
            arrays, entries, _START, _COUNT, compare=compare, checked=checked
        )
    offsets = int64_view(batch.column(0))
    return _sections.figures(entries, _START, _COUNT, offsets, compare=compare)


_START, _COUNT = TableEntry._fields.index("start"), TableEntry._fields.index("record_count")


def _disagreement(entry: TableEntry, seen: tuple[int | None, ...]) -> str:
    where = f"shared section {entry.topic}/{entry.partition}"
    if seen[:2] != entry[:2]:
        return (
            f"{where} holds offsets {seen[0]}..{seen[1]}, "
            f"its trailer says {entry.first_offset}..{entry.last_offset}"
        )
    return f"{where}: trailer stats {BatchStats(*entry[:8])} disagree with the records " + str(
        BatchStats(*seen)  # type: ignore[arg-type]
    )
