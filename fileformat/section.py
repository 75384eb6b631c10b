"""Section header and trailer payloads (FORMAT.md, "Section").

A section is: a section header frame, one or more batch frames, a trailer frame, and the
8-byte section end. The trailer holds the section's stats, its batch index and its offset
bitmap; ``parse_trailer`` checks that these agree with each other before anyone uses them.
"""

from __future__ import annotations

import functools
import struct
from dataclasses import dataclass, replace
from typing import Final

from pyroaring import BitMap

from compactor.fileformat.batches import NO_HORIZON, RECORD_OVERHEAD, BatchStats
from compactor.fileformat.bitmap import KIND_ROARING32, KIND_ROARING64, SPAN_32, OffsetSet
from compactor.fileformat.errors import FormatError
from compactor.fileformat.framing import (
    FRAME_HEADER,
    I32,
    MAX_TOPIC_BYTES,
    SECTION_END,
    SECTION_END_MAGIC,
    U16,
    Cursor,
    layout_version,
)
from compactor.fileformat.second_read import MEMO, Role

TRAILER_FIXED: Final = struct.Struct("<qqQQQqqIBB2x")
"""first offset, last offset, record count, tombstones, uncompressed bytes, min timestamp,
max timestamp, batch count, bitmap kind, flags, 2 zero bytes: the part common to both
versions (in version 1 the flags byte is zero)."""
TRAILER_HORIZON: Final = struct.Struct("<q")
"""Version 2 only (flags bit 0), after the common part: the min delete horizon."""
FLAG_HORIZON: Final = 1
INDEX_ENTRY: Final = struct.Struct("<qQ")  # first offset of the batch, its frame's position


def encode_topic(topic: str) -> bytes:
    """The UTF-8 bytes of a valid topic name; ValueError otherwise."""
    if not isinstance(topic, str) or not topic:
        raise ValueError(f"topic must be a non-empty string, not {topic!r}")
    raw = topic.encode("utf-8")  # UnicodeEncodeError (a ValueError) for lone surrogates
    if len(raw) > MAX_TOPIC_BYTES:
        raise ValueError(f"topic is {len(raw)} bytes in UTF-8, more than {MAX_TOPIC_BYTES}")
    return raw


def check_partition(partition: int) -> int:
    if not isinstance(partition, int) or isinstance(partition, bool):
        raise ValueError(f"partition must be an int, not {partition!r}")
    if not 0 <= partition < 1 << 31:
        raise ValueError(f"partition {partition} is not in 0..2^31-1")
    return partition


def encode_section_header(topic: str, partition: int) -> bytes:
    raw = encode_topic(topic)
    return U16.pack(len(raw)) + raw + I32.pack(check_partition(partition))


def section_header_frame_length(topic: str) -> int:
    return FRAME_HEADER.size + U16.size + len(topic.encode("utf-8")) + I32.size


def read_topic_partition(cur: Cursor, what: str) -> tuple[str, int]:
    """Reads ``topic_length u16 | topic | partition i32`` and checks both values."""
    at = cur.position
    (n,) = cur.unpack(U16, f"{what} topic length")
    if n == 0:
        raise cur.error(f"empty topic name in {what}", at)
    raw = cur.take(n, f"{what} topic")
    try:
        topic = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise cur.error(f"{what} topic is not UTF-8", at + 2) from None
    at = cur.position
    (partition,) = cur.unpack(I32, f"{what} partition")
    if partition < 0:
        raise cur.error(f"negative partition {partition} in {what}", at)
    return topic, partition


def parse_section_header(payload: bytes, base: int, object_name: str) -> tuple[str, int]:
    cur = Cursor(payload, base, object_name)
    out = read_topic_partition(cur, "section header")
    cur.expect_end("section header")
    return out


@dataclass(frozen=True, slots=True)
class Trailer:
    """A section's trailer, checked for internal consistency.

    Invariants (enforced by ``parse_trailer``): ``stats`` are possible (counts, ranges);
    the index is non-empty, its first offsets strictly increase from ``stats.first_offset``
    and are present in ``offsets``, its positions strictly increase; ``offsets`` holds
    exactly ``record_count`` offsets from ``first_offset`` to ``last_offset``, in the
    32-bit kind exactly when the span fits.
    """

    stats: BatchStats
    index: tuple[tuple[int, int], ...]  # (first offset, frame position in the section)
    offsets: OffsetSet
    version: int
    """The format version the trailer is laid out in: 1 (no min delete horizon, so
    ``stats.min_delete_horizon`` is None) or 2."""

    def agrees(self, records: BatchStats) -> bool:
        """Whether the trailer's stats are those of ``records`` (the section's records), as
        far as its version records them."""
        if self.version == 1:
            records = replace(records, min_delete_horizon=None)
        return self.stats == records


def encode_trailer(stats: BatchStats, index: list[tuple[int, int]], offsets: OffsetSet) -> bytes:
    """A version-2 trailer payload."""
    fixed = TRAILER_FIXED.pack(
        stats.first_offset,
        stats.last_offset,
        stats.record_count,
        stats.tombstones,
        stats.uncompressed_bytes,
        stats.min_timestamp,
        stats.max_timestamp,
        len(index),
        offsets.kind,
        FLAG_HORIZON,
    )
    horizon = NO_HORIZON if stats.min_delete_horizon is None else stats.min_delete_horizon
    entries = b"".join(INDEX_ENTRY.pack(o, p) for o, p in index)
    return fixed + TRAILER_HORIZON.pack(horizon) + entries + offsets.serialize()


def parse_trailer(
    payload: bytes, base: int, object_name: str, version: int | None = None, role: Role = None
) -> Trailer:
    """Decodes and checks a trailer payload that starts at absolute position ``base``.

    ``version`` is the file's format version, None when the caller does not know it (it
    holds a section's position and length only): the trailer's flags then say it.
    ``role``: the reader's part in a pair reading the same bytes
    (``fileformat.second_read``).
    """
    return MEMO.decoded(
        ("trailer", version),
        payload,
        role,
        lambda: (_parse_trailer(payload, base, object_name, version), True),
    )


def _parse_trailer(payload: bytes, base: int, object_name: str, version: int | None) -> Trailer:
    return parse_trailer_head(payload, base, object_name, version).trailer()


@dataclass(frozen=True, slots=True)
class TrailerHead:
    """A trailer checked up to its bitmap, which ``offsets()`` deserializes and checks:
    a reader that never needs a section's offsets (a compaction's pointers, which see the
    offsets in the records) never pays for them."""

    stats: BatchStats
    index: tuple[tuple[int, int], ...]
    version: int
    kind: int
    bitmap: bytes
    bitmap_at: int
    object_name: str

    def offsets(self) -> OffsetSet:
        """The bitmap, checked against the stats and the batch index."""
        first, last, count = (
            self.stats.first_offset,
            self.stats.last_offset,
            self.stats.record_count,
        )
        at = self.bitmap_at
        try:
            offsets = OffsetSet.deserialize(self.kind, self.bitmap, first)
        except ValueError as exc:
            raise FormatError(self.object_name, at, f"bad offset bitmap: {exc}") from None
        relative = offsets.relative
        present = len(relative)
        if present != count or relative.min() != 0 or first + relative.max() != last:
            raise FormatError(
                self.object_name,
                at,
                f"offset bitmap ({present} offsets) disagrees with the trailer stats "
                f"({count} offsets from {first} to {last})",
            )
        # Every entry's offset is in first..last (checked by parse_trailer_head), so its
        # relative offset fits the bitmap's kind.
        for o, _ in self.index:
            if o - first not in relative:
                raise FormatError(
                    self.object_name, at, f"batch index offset {o} is not in the offset bitmap"
                )
        return offsets

    def check_bitmap(self) -> None:
        """That the bitmap is consistent with the stats and the index, as ``offsets()``
        checks; without deserializing it when the section is dense (every offset from first
        to last, as an L0 file's sections are) and its bitmap is byte for byte the one the
        writer makes of such offsets (``dense_bitmap``), which passes every check
        ``offsets()`` makes. Any other bytes take the whole check."""
        st = self.stats
        bitmap = self.bitmap
        if not is_dense_bitmap(
            self.kind, st.first_offset, st.last_offset, st.record_count, bitmap, 0, len(bitmap)
        ):
            self.offsets()

    def trailer(self) -> Trailer:
        """The whole trailer, its bitmap read and checked."""
        return Trailer(self.stats, self.index, self.offsets(), self.version)


def is_dense_bitmap(
    kind: int, first: int, last: int, count: int, data: bytes, start: int, end: int
) -> bool:
    """Whether ``data[start:end]``, the bitmap of a section of ``count`` offsets from
    ``first`` to ``last``, is byte for byte the one the writer makes of a dense section
    (every offset from first to last): such a bitmap passes every check of
    ``TrailerHead.offsets()``. Compared in place, without a copy."""
    if kind != KIND_ROARING32 or last - first + 1 != count:
        return False
    dense = dense_bitmap(count)
    return end - start == len(dense) and data.startswith(dense, start)


@functools.lru_cache(maxsize=1024)
def dense_bitmap(count: int) -> bytes:
    """The serialized bitmap (kind 1) of relative offsets 0..count-1, made as the writer's
    ``OffsetSetBuilder`` makes it (one range; a bitmap built otherwise may serialize with
    other containers)."""
    bitmap = BitMap()
    bitmap.add_range(0, count)
    return OffsetSet(0, bitmap).serialize()


def parse_trailer_head(
    payload: bytes, base: int, object_name: str, version: int | None
) -> TrailerHead:
    """Decodes and checks a trailer payload (at absolute ``base``) up to its bitmap.
    (Without a Cursor for its fixed fields: a block's table holds a trailer per section.)"""
    cur = Cursor(payload, base, object_name)
    size = len(payload)
    if size < TRAILER_FIXED.size:
        raise cur.error(f"truncated section trailer: needs {TRAILER_FIXED.size} bytes, {size} left")
    (first, last, count, tombstones, nbytes, min_ts, max_ts, batches, kind, flags) = (
        TRAILER_FIXED.unpack_from(payload)
    )
    if payload[TRAILER_FIXED.size - 2 : TRAILER_FIXED.size] != b"\0\0":
        raise cur.error("reserved trailer bytes are not zero", base + TRAILER_FIXED.size - 2)
    layout = _trailer_version(flags, version)
    if layout is None:
        raise cur.error(
            f"trailer flags {flags:#x} in a version-{version} file", base + TRAILER_FIXED.size - 3
        )
    horizon = None
    cur.offset = TRAILER_FIXED.size
    if layout == 2:
        (raw,) = cur.unpack(TRAILER_HORIZON, "section trailer")
        horizon = None if raw == NO_HORIZON else raw
    stats = BatchStats(first, last, count, tombstones, nbytes, min_ts, max_ts, horizon)
    problem = stats_problem(stats)
    if problem is None and not 1 <= batches <= count:
        problem = f"{batches} batches for {count} records"
    if problem is not None:
        raise cur.error(f"impossible trailer: {problem}", base)
    span = last - first
    expected_kind = KIND_ROARING32 if span < SPAN_32 else KIND_ROARING64
    if kind != expected_kind:
        raise cur.error(
            f"bitmap kind {kind} for a span of {span}, expected {expected_kind}",
            base + TRAILER_FIXED.size - 4,
        )
    index_at = cur.position
    if cur.remaining < batches * INDEX_ENTRY.size:
        raise cur.error(f"truncated batch index: {batches} entries do not fit")
    raw_index = cur.take(batches * INDEX_ENTRY.size, "batch index")
    index = tuple(INDEX_ENTRY.iter_unpack(raw_index))
    if index[0][0] != first:
        raise cur.error(f"batch index starts at offset {index[0][0]}, not {first}", index_at)
    for i in range(1, batches):
        if not (index[i][0] > index[i - 1][0] and index[i][1] > index[i - 1][1]):
            raise cur.error(
                f"batch index entry {i} does not follow entry {i - 1}",
                index_at + i * INDEX_ENTRY.size,
            )
    if index[-1][0] > last:
        raise cur.error("batch index goes past the last offset", index_at)
    bitmap_at = cur.position
    bitmap = cur.take(cur.remaining, "bitmap")
    return TrailerHead(stats, index, layout, kind, bitmap, bitmap_at, object_name)


def _trailer_version(flags: int, version: int | None) -> int | None:
    """The version a trailer with these flags is laid out in, None if it cannot be one
    of ``version`` (or of any version, when that is None)."""
    layout = {0: 1, FLAG_HORIZON: 2}.get(flags)
    return layout if version is None or layout == layout_version(version) else None


def stats_problem(s: BatchStats) -> str | None:
    """Why these stats cannot describe a non-empty run of records, or None."""
    if s.record_count < 1:
        return f"record count {s.record_count}"
    if s.first_offset > s.last_offset or s.record_count - 1 > s.last_offset - s.first_offset:
        return f"{s.record_count} records do not fit offsets {s.first_offset}..{s.last_offset}"
    if s.tombstones > s.record_count:
        return f"{s.tombstones} tombstones among {s.record_count} records"
    if s.uncompressed_bytes < RECORD_OVERHEAD * s.record_count:
        return f"{s.uncompressed_bytes} bytes for {s.record_count} records"
    if s.min_timestamp > s.max_timestamp:
        return f"timestamps {s.min_timestamp} > {s.max_timestamp}"
    if s.min_delete_horizon is not None and not s.tombstones:
        return f"a delete horizon ({s.min_delete_horizon}) without tombstones"
    return None


def encode_section_end(trailer_frame_length: int) -> bytes:
    return SECTION_END.pack(trailer_frame_length, SECTION_END_MAGIC)


def parse_section_end(
    data: bytes, base: int, object_name: str, magic: bytes = SECTION_END_MAGIC
) -> int:
    """Returns the trailer frame length the section end records (with ``magic``
    BLOCK_END_MAGIC: the section table frame length a shared block's end records)."""
    cur = Cursor(data, base, object_name)
    length, found = cur.unpack(SECTION_END, "section end")
    if found != magic:
        raise cur.error(f"bad section end marker {found!r}", base + 4)
    return int(length)
