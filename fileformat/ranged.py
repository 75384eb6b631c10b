"""Random access: the footer from the file's end, one section by ranged reads.

``read_range(start, end)`` must return bytes ``[start, end)`` of the object. Positions in
errors are absolute positions in the object.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterator
from dataclasses import replace

import pyarrow as pa

from compactor.fileformat.batches import BatchStats, int64_view
from compactor.fileformat.bitmap import OffsetSet
from compactor.fileformat.block import (
    Block,
    SharedSection,
    find_section,
    parse_section_table,
    read_block,
)
from compactor.fileformat.errors import FormatError
from compactor.fileformat.footer import parse_footer, parse_tail
from compactor.fileformat.framing import (
    BLOCK_END_MAGIC,
    FILE_HEADER,
    FILE_TAIL,
    FRAME_HEADER,
    MAX_FRAME_PAYLOAD,
    MIN_FILE_SIZE,
    MIN_SECTION_LENGTH,
    SECTION_END,
    SECTION_END_MAGIC,
    TAG_BATCH,
    TAG_FOOTER,
    TAG_SECTION_HEADER,
    TAG_SECTION_TABLE,
    TAG_SHARED_BATCH,
    TAG_TRAILER,
    U32,
    Cursor,
    check_file_header,
    parse_frame,
)
from compactor.fileformat.ipc import decode_measured
from compactor.fileformat.meta import FileMeta, SectionMeta
from compactor.fileformat.section import (
    TRAILER_FIXED,
    Trailer,
    parse_section_end,
    parse_section_header,
    parse_trailer,
    section_header_frame_length,
)

ReadRange = Callable[[int, int], bytes]

TAIL_READ = 64 << 10
"""How many bytes the first ranged read of a footer (or a section's trailer) fetches."""
MAX_SECTION_READ = 16 << 20
"""Sections up to this length are fetched with one ranged read; longer ones in windows."""


def _fetch(read_range: ReadRange, start: int, end: int, object_name: str, what: str) -> bytes:
    data = read_range(start, end)
    if len(data) != end - start:
        raise FormatError(
            object_name,
            start,
            f"ranged read of {what} [{start}, {end}) returned {len(data)} bytes",
        )
    return data if isinstance(data, bytes) else bytes(data)


def read_footer(
    read_range: ReadRange, size: int, *, object_name: str, tail_read: int = TAIL_READ
) -> FileMeta:
    """The footer of a ``size``-byte object, with one ranged read of its last ``tail_read``
    bytes (a second read only if the footer is longer).

    The file header is checked too when the first read covers it (small files).
    """
    if size < MIN_FILE_SIZE:
        raise FormatError(object_name, 0, f"{size} bytes is too small for a file")
    start = size - min(size, max(tail_read, MIN_FILE_SIZE))
    data = _fetch(read_range, start, size, object_name, "file tail")
    tail_at = size - FILE_TAIL.size
    footer_length, crc, version = parse_tail(data[tail_at - start :], tail_at, object_name)
    footer_at = tail_at - footer_length
    if footer_length < FRAME_HEADER.size + 4 or footer_at < FILE_HEADER.size:
        raise FormatError(object_name, tail_at, f"impossible footer length {footer_length}")
    if footer_at >= start:
        frame = data[footer_at - start : tail_at - start]
    else:
        frame = _fetch(read_range, footer_at, tail_at, object_name, "footer")
    cur = Cursor(frame, footer_at, object_name)
    payload = parse_frame(cur, TAG_FOOTER, "footer")
    cur.expect_end("the footer frame")
    if FRAME_HEADER.unpack_from(frame, 0)[2] != crc:
        raise FormatError(object_name, tail_at + 4, "file tail CRC differs from the footer's")
    if start == 0 and check_file_header(Cursor(data, 0, object_name)) != version:
        raise FormatError(object_name, 8, "file header and tail disagree on the version")
    sections = parse_footer(payload, footer_at + FRAME_HEADER.size, object_name, footer_at, version)
    return FileMeta(sections, size, version)


class _SectionLayout:
    """A section's checked header and trailer, and how to fetch its batch frames.

    Fetches the whole section with one read when it is at most ``max_read`` bytes long;
    otherwise the header and the trailer separately and the batches in windows of about
    ``max_read`` bytes, so memory stays bounded for sections of any length.
    """

    def __init__(
        self,
        read_range: ReadRange,
        meta: SectionMeta,
        object_name: str,
        max_read: int,
        with_header: bool,
    ) -> None:
        self.read_range = read_range
        self.meta = meta
        self.object_name = object_name
        self.max_read = max_read
        pos, length = meta.position, meta.length
        if pos < FILE_HEADER.size or length < MIN_SECTION_LENGTH:
            raise FormatError(object_name, pos, f"impossible section range {pos} (+{length})")
        header_length = section_header_frame_length(meta.topic)
        self.whole = (
            _fetch(read_range, pos, pos + length, object_name, "section")
            if with_header and length <= max_read
            else None
        )
        self.block: Block | None = None
        self.shared: SharedSection | None = None
        self.trailer: Trailer
        tail = self._tail()
        if tail[-len(BLOCK_END_MAGIC) :] == BLOCK_END_MAGIC:
            self.shared = shared = self._shared(tail, with_header)
            self.trailer = shared.trailer.trailer()
            self._check_stats(length - SECTION_END.size)
            return
        if with_header:
            self._check_header(header_length)
        payload, trailer_at = self._last_frame(
            tail,
            SECTION_END_MAGIC,
            TAG_TRAILER,
            FRAME_HEADER.size + TRAILER_FIXED.size,
            header_length + FRAME_HEADER.size,
            "section trailer",
        )
        # The file's version is unknown here: the trailer says its own.
        self.trailer = parse_trailer(payload, pos + trailer_at + FRAME_HEADER.size, object_name)
        self.trailer_at = trailer_at
        self._check_stats(trailer_at)
        positions = [p for _, p in self.trailer.index]
        if positions[0] != header_length or positions[-1] + FRAME_HEADER.size > trailer_at:
            raise FormatError(
                object_name,
                pos + trailer_at,
                "batch index positions do not fit between the section header and the trailer",
            )
        self.bounds = [*positions, trailer_at]

    def _check_stats(self, trailer_at: int) -> None:
        # ``meta`` may come from a catalog that does not keep the min delete horizon, so
        # only the other stats are compared (the footer's is checked by a streaming read).
        meta = self.meta
        if replace(self.trailer.stats, min_delete_horizon=None) != _meta_stats(meta):
            raise FormatError(
                self.object_name,
                meta.position + trailer_at,
                f"section trailer {self.trailer.stats} disagrees with the footer entry {meta}",
            )

    def _shared(self, tail: bytes, with_header: bool) -> SharedSection:
        """The section's entry in the shared block that its range is (FORMAT.md section
        13): from the whole block when its records are wanted, else from its table."""
        pos, length, name = self.meta.position, self.meta.length, self.object_name
        if with_header:
            whole = self.whole
            if whole is None:  # a block is one batch: bounded as a batch is, not windowed
                self._check_block_range(tail)
                whole = _fetch(self.read_range, pos, pos + length, name, "shared block")
            self.block = read_block(whole, pos, name)
            sections = self.block.sections
        else:
            payload, table_at = self._last_frame(
                tail,
                BLOCK_END_MAGIC,
                TAG_SECTION_TABLE,
                FRAME_HEADER.size + U32.size,
                FRAME_HEADER.size,
                "section table",
            )
            sections = parse_section_table(payload, pos + table_at + FRAME_HEADER.size, name)
        return find_section(sections, self.meta.topic, self.meta.partition, name, pos)

    def _check_block_range(self, tail: bytes) -> None:
        """That the range is exactly a block whose batch frame is within the frame cap,
        before it is fetched whole: a corrupt entry cannot make the reader ask for more."""
        pos, length, name = self.meta.position, self.meta.length, self.object_name
        end_at = pos + length - SECTION_END.size
        table_length = parse_section_end(tail[-SECTION_END.size :], end_at, name, BLOCK_END_MAGIC)
        tag, batch_length, _ = FRAME_HEADER.unpack(self._get(0, FRAME_HEADER.size, "block head"))
        if (
            tag != TAG_SHARED_BATCH
            or batch_length > MAX_FRAME_PAYLOAD
            or FRAME_HEADER.size + batch_length + table_length + SECTION_END.size != length
        ):
            raise FormatError(name, pos, f"range of {length} bytes is not a shared block")

    def _last_frame(
        self,
        tail: bytes,
        magic: bytes,
        tag: bytes,
        min_length: int,
        min_at: int,
        what: str,
    ) -> tuple[bytes, int]:
        """The payload of the frame that the range's end (8 bytes: its length, ``magic``)
        locates, and the frame's position relative to the range: a section's trailer or
        a block's table. Read from ``tail`` when it holds it, else with one more read."""
        pos, length, name = self.meta.position, self.meta.length, self.object_name
        end_at = pos + length - SECTION_END.size
        frame_length = parse_section_end(tail[-SECTION_END.size :], end_at, name, magic)
        frame_at = length - SECTION_END.size - frame_length
        if frame_length < min_length or frame_at < min_at:
            raise FormatError(name, end_at, f"impossible {what} length {frame_length}")
        needed = frame_length + SECTION_END.size
        frame = (
            tail[len(tail) - needed : -SECTION_END.size]
            if needed <= len(tail)
            else self._get(frame_at, length - SECTION_END.size, what)
        )
        cur = Cursor(frame, pos + frame_at, name)
        payload = parse_frame(cur, tag, what)
        cur.expect_end(f"the {what}")
        return payload, frame_at

    def _get(self, start: int, end: int, what: str) -> bytes:
        """Bytes [start, end) of the section (relative positions)."""
        if self.whole is not None:
            return self.whole[start:end]
        pos = self.meta.position
        return _fetch(self.read_range, pos + start, pos + end, self.object_name, what)

    def _tail(self) -> bytes:
        if self.whole is not None:
            return self.whole
        n = min(self.meta.length, TAIL_READ)
        return self._get(self.meta.length - n, self.meta.length, "section tail")

    def _check_header(self, header_length: int) -> None:
        pos = self.meta.position
        cur = Cursor(self._get(0, header_length, "section header"), pos, self.object_name)
        payload = parse_frame(cur, TAG_SECTION_HEADER, "section header")
        topic, partition = parse_section_header(payload, pos + FRAME_HEADER.size, self.object_name)
        if (topic, partition) != (self.meta.topic, self.meta.partition):
            raise FormatError(
                self.object_name,
                pos,
                f"section holds {topic}/{partition}, not {self.meta.topic}/{self.meta.partition}",
            )

    def batches(self, start: int) -> Iterator[tuple[pa.RecordBatch, BatchStats]]:
        """Decoded batches from index entry ``start`` on, each with its stats
        (``ipc.decode_measured``) and checked against the index."""
        index, bounds = self.trailer.index, self.bounds
        pos = self.meta.position
        k = start
        while k < len(index):
            if self.whole is not None:
                end, window, base = len(index), self.whole, 0
            else:
                # One window: batch k and as many following batches as fit in max_read.
                end = k + 1
                while end < len(index) and bounds[end + 1] - bounds[k] <= self.max_read:
                    end += 1
                window, base = self._get(bounds[k], bounds[end], "batches"), bounds[k]
            for j in range(k, end):
                at = pos + bounds[j]
                cur = Cursor(window, pos + base, self.object_name, bounds[j] - base)
                payload = parse_frame(cur, TAG_BATCH, "batch")
                if cur.offset != bounds[j + 1] - base:
                    raise FormatError(
                        self.object_name,
                        at,
                        "batch frame does not end where the batch index says the next one starts",
                    )
                batch, stats = decode_measured(
                    payload, at + FRAME_HEADER.size, self.object_name, self.trailer.version
                )
                if stats.first_offset != index[j][0]:
                    raise FormatError(
                        self.object_name,
                        at,
                        f"batch starts at offset "
                        f"{stats.first_offset}, the index says {index[j][0]}",
                    )
                yield batch, stats
            k = end


def _meta_stats(meta: SectionMeta) -> BatchStats:
    return BatchStats(
        meta.first_offset,
        meta.last_offset,
        meta.record_count,
        meta.tombstones,
        meta.uncompressed_bytes,
        meta.min_timestamp,
        meta.max_timestamp,
    )


def read_section(
    read_range: ReadRange,
    meta: SectionMeta,
    *,
    object_name: str,
    from_offset: int | None = None,
    max_read: int = MAX_SECTION_READ,
) -> Iterator[pa.RecordBatch]:
    """The batches of the section ``meta`` (an entry of the file's footer), in offset order.

    With ``from_offset`` X, the first batch yielded starts at the smallest offset present
    that is >= X (Kafka fetch semantics; nothing if there is none), found with the offset
    bitmap and the batch index, and only the batches from there on are decoded. A section
    of up to ``max_read`` bytes is fetched with one ranged read.
    """
    layout = _SectionLayout(read_range, meta, object_name, max_read, with_header=True)
    if layout.block is not None:
        assert layout.shared is not None
        yield from _shared_rows(layout.block, layout.shared, from_offset)
        return
    trailer = layout.trailer
    start, target = 0, None
    if from_offset is not None:
        target = trailer.offsets.next_present(from_offset)
        if target is None:
            return
        start = bisect.bisect_right([o for o, _ in trailer.index], target) - 1
    stats: BatchStats | None = None
    for batch, s in layout.batches(start):
        if stats is not None and s.first_offset <= stats.last_offset:
            raise FormatError(
                object_name,
                meta.position,
                f"batch at offset {s.first_offset} does not follow offset {stats.last_offset}",
            )
        stats = s if stats is None else stats.then(s)
        if target is not None:
            offsets = int64_view(batch.column(0))
            i = bisect.bisect_left(offsets, target)
            if i == len(offsets) or offsets[i] != target:
                raise FormatError(
                    object_name,
                    meta.position,
                    f"offset bitmap lists offset {target}, its batch does not hold it",
                )
            batch = batch.slice(i) if i else batch
            target = None
        yield batch
    if start == 0 and (stats is None or not trailer.agrees(stats)):
        raise FormatError(
            object_name,
            meta.position + layout.trailer_at,
            f"section trailer {trailer.stats} disagrees with the records {stats}",
        )


def _shared_rows(
    block: Block, shared: SharedSection, from_offset: int | None
) -> Iterator[pa.RecordBatch]:
    """A shared section's rows, from the next present offset >= ``from_offset``."""
    target = None
    if from_offset is not None:
        target = shared.trailer.offsets().next_present(from_offset)
        if target is None:
            return
    # the block's records are checked against its whole table
    batch = block.rows(shared.start, shared.count)
    if target is not None:
        offsets = int64_view(batch.column(0))
        i = bisect.bisect_left(offsets, target)
        if i == len(offsets) or offsets[i] != target:
            raise FormatError(
                block.object_name,
                block.payload_at,
                f"offset bitmap lists offset {target}, its batch does not hold it",
            )
        batch = batch.slice(i) if i else batch
    yield batch


def read_section_offsets(
    read_range: ReadRange, meta: SectionMeta, *, object_name: str
) -> OffsetSet:
    """The offsets present in section ``meta``, from its trailer alone (one or two reads)."""
    return _SectionLayout(read_range, meta, object_name, 0, with_header=False).trailer.offsets
