"""The footer index and the file tail (FORMAT.md, "Footer" and "Tail")."""

from __future__ import annotations

import struct
from typing import Final, Protocol

from compactor.fileformat.batches import NO_HORIZON, BatchStats
from compactor.fileformat.framing import (
    FILE_HEADER,
    FILE_TAIL,
    FORMAT_VERSION,
    FRAME_HEADER,
    MAGIC,
    MIN_SECTION_LENGTH,
    SHARED_VERSION,
    SUPPORTED_VERSIONS,
    U16,
    U32,
    Cursor,
)
from compactor.fileformat.meta import SectionMeta, section_key
from compactor.fileformat.section import encode_topic, read_topic_partition, stats_problem


class Figures(Protocol):
    """What a footer entry records of a section's records (a ``BatchStats``, a
    ``SectionMeta``, a block's ``TableEntry``)."""

    @property
    def first_offset(self) -> int: ...
    @property
    def last_offset(self) -> int: ...
    @property
    def record_count(self) -> int: ...
    @property
    def tombstones(self) -> int: ...
    @property
    def uncompressed_bytes(self) -> int: ...
    @property
    def min_timestamp(self) -> int: ...
    @property
    def max_timestamp(self) -> int: ...
    @property
    def min_delete_horizon(self) -> int | None: ...


FOOTER_ENTRY: Final = struct.Struct("<QQqqQQQqqq")
"""After topic and partition: position, length, first offset, last offset, record count,
tombstones, uncompressed bytes, min timestamp, max timestamp, min delete horizon."""
FOOTER_ENTRY_HEAD: Final = struct.Struct("<iQQqqQQQqqq")
"""The partition, then FOOTER_ENTRY."""
FOOTER_ENTRY_V1: Final = struct.Struct("<QQqqQQQqq")
"""FOOTER_ENTRY of version 1, without the min delete horizon."""


def encode_footer(sections: list[SectionMeta], version: int = FORMAT_VERSION) -> bytes:
    """A version-2 or version-3 footer payload (version 3 starts with its version)."""
    entries = [encode_footer_entry(s, encode_topic(s.topic)) for s in sections]
    return footer_payload(entries, len(sections), version)


def footer_payload(entries: list[bytes], count: int, version: int) -> bytes:
    """The footer payload of ``count`` sections whose entries are ``entries`` joined (a
    writer makes a block's in one compiled pass, ``_sections.footer_entries``)."""
    head = [U32.pack(version)] if version >= SHARED_VERSION else []
    return b"".join([*head, U32.pack(count), *entries])


def encode_footer_entry(s: SectionMeta, topic: bytes) -> bytes:
    """A section's version-2 footer entry; ``topic`` is its topic as UTF-8."""
    return footer_entry(topic, s.partition, s.position, s.length, s)


def footer_entry(topic: bytes, partition: int, position: int, length: int, s: Figures) -> bytes:
    """The version-2 footer entry of a section at ``position`` whose records ``s``
    describes (a shared section's from its block's table entry, without a SectionMeta)."""
    return (
        U16.pack(len(topic))
        + topic
        + FOOTER_ENTRY_HEAD.pack(
            partition,
            position,
            length,
            s.first_offset,
            s.last_offset,
            s.record_count,
            s.tombstones,
            s.uncompressed_bytes,
            s.min_timestamp,
            s.max_timestamp,
            NO_HORIZON if s.min_delete_horizon is None else s.min_delete_horizon,
        )
    )


def parse_footer(
    payload: bytes, base: int, object_name: str, footer_frame_at: int, version: int
) -> tuple[SectionMeta, ...]:
    """Decodes the footer payload (at absolute ``base``) of a file of format ``version``
    and checks the index it describes.

    Invariants: sections are strictly sorted by (topic UTF-8 bytes, partition); they tile
    the file from the end of the file header to ``footer_frame_at`` without gaps (in
    version 3, consecutive sections of one shared block list the block's range, which
    tiles); each section's stats are possible.
    """
    cur = Cursor(payload, base, object_name)
    if version >= SHARED_VERSION:
        (stated,) = cur.unpack(U32, "footer version")
        if stated != version:
            raise cur.error(f"footer says version {stated}, the tail {version}", base)
    (count,) = cur.unpack(U32, "footer section count")
    entry = FOOTER_ENTRY if version >= 2 else FOOTER_ENTRY_V1
    shared = version >= SHARED_VERSION
    min_entry = U16.size + 1 + 4 + entry.size
    if count * min_entry > cur.remaining:
        raise cur.error(f"footer claims {count} sections, which cannot fit", base)
    sections: list[SectionMeta] = []
    expected_position = FILE_HEADER.size
    previous: tuple[bytes, int] | None = None
    for _ in range(count):
        at = cur.position
        topic, partition = read_topic_partition(cur, "footer entry")
        (position, length, first, last, records, tombstones, nbytes, min_ts, max_ts, *rest) = (
            cur.unpack(entry, "footer entry")
        )
        horizon = None if not rest or rest[0] == NO_HORIZON else rest[0]
        key = section_key(topic, partition)
        if previous is not None and key <= previous:
            raise cur.error(f"section {topic}/{partition} is out of order in the footer", at)
        previous = key
        if (
            shared
            and sections
            and (position, length) == (sections[-1].position, sections[-1].length)
        ):
            pass  # another section of the same shared block
        elif position != expected_position or length < MIN_SECTION_LENGTH:
            raise cur.error(
                f"section {topic}/{partition} at {position} (+{length}) does not follow the "
                f"previous section ending at {expected_position}",
                at,
            )
        problem = stats_problem(
            BatchStats(first, last, records, tombstones, nbytes, min_ts, max_ts, horizon)
        )
        if problem is not None:
            raise cur.error(f"section {topic}/{partition}: impossible stats: {problem}", at)
        expected_position = position + length
        sections.append(
            SectionMeta(
                topic,
                partition,
                first,
                last,
                records,
                nbytes,
                min_ts,
                max_ts,
                tombstones,
                position,
                length,
                horizon,
            )
        )
    cur.expect_end("the footer's sections")
    if expected_position != footer_frame_at:
        raise cur.error(
            f"sections end at {expected_position} but the footer starts at {footer_frame_at}",
            base,
        )
    return tuple(sections)


def encode_tail(footer_frame: bytes, version: int) -> bytes:
    crc = FRAME_HEADER.unpack_from(footer_frame, 0)[2]
    return FILE_TAIL.pack(len(footer_frame), crc, version, MAGIC)


def parse_tail(data: bytes, base: int, object_name: str) -> tuple[int, int, int]:
    """Checks the 20-byte tail; returns (footer frame length, footer CRC, format version)."""
    cur = Cursor(data, base, object_name)
    length, crc, version, magic = cur.unpack(FILE_TAIL, "file tail")
    if magic != MAGIC:
        raise cur.error(f"bad tail magic {magic!r}: not a compactor file", base + 12)
    if version not in SUPPORTED_VERSIONS:
        raise cur.error(f"unsupported format version {version}", base + 8)
    return int(length), int(crc), int(version)
