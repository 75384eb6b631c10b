"""Writes files front to back into a sink, holding only per-section metadata."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Protocol

import pyarrow as pa

from compactor.fileformat import _sections
from compactor.fileformat.batches import (
    BatchStats,
    Figures,
    batch_problem,
    batch_stats,
    batching_weight,
    copied,
    header_offsets,
    int64_view,
    plan_slices,
    section_figures,
)
from compactor.fileformat.bitmap import KIND_ROARING32, OffsetSet, OffsetSetBuilder, small_bitmap
from compactor.fileformat.block import TableEntry, shared_table
from compactor.fileformat.errors import FormatError
from compactor.fileformat.footer import encode_footer_entry, encode_tail, footer_payload
from compactor.fileformat.framing import (
    BLOCK_END_MAGIC,
    FORMAT_VERSION,
    FRAME_HEADER,
    SECTION_END,
    SHARED_VERSION,
    TAG_BATCH,
    TAG_FOOTER,
    TAG_SECTION_HEADER,
    TAG_SECTION_TABLE,
    TAG_SHARED_BATCH,
    TAG_TRAILER,
    EncodedFrame,
    Payload,
    encode_file_header,
    encode_frame,
    encode_frame_header,
)
from compactor.fileformat.ipc import BatchEncoder, Message, Pending, inspect_message
from compactor.fileformat.meta import FileMeta, SectionMeta, section_key
from compactor.fileformat.read_frames import frame_of
from compactor.fileformat.records import RECORD_SCHEMA
from compactor.fileformat.section import (
    encode_section_end,
    encode_section_header,
    encode_topic,
    encode_trailer,
)

if TYPE_CHECKING:
    from compactor.fileformat.offset_index import IndexBuilder

MAX_BATCH_BYTES_LIMIT = 64 << 20
MAX_BATCH_BYTES = 1 << 20
"""Default ``max_batch_bytes``: a framed section's batches are cut at this batching weight
(``batches.plan_slices``)."""
MIN_COMPRESS_BYTES = 8 << 10
"""Batches smaller than this (logical bytes) are written uncompressed (see BatchEncoder)."""
SHARE_BELOW = 128 << 10
"""The ``share_below`` of the writers of this system (ingest, compaction): sections
lighter than this share blocks (FORMAT.md section 13), so a file of thousands of small
partitions is read and written a block at a time rather than a section at a time."""
BLOCK_BYTES = 256 << 10
"""Default ``block_bytes``: the most a shared block weighs (batching weight, logical
bytes plus 8 per header: ``batches.batching_weight``). A job holds
one decoded block per input file and pointer while it walks the block's sections, so this
times twice the number of inputs is what blocks add to a job's memory (ARCHITECTURE §7)."""
ENCODE_AHEAD = 4
"""Compressed batches a writer may have in encoding on its encoder thread at once."""


class Sink(Protocol):
    """Where a writer's bytes go, in order (a file, a BytesIO, a multipart upload)."""

    def write(self, data: bytes | memoryview, /) -> Any: ...


class _OpenSection:
    __slots__ = (
        "topic",
        "partition",
        "header_frame",
        "position",
        "stats",
        "index",
        "offsets",
        "held",
        "held_weight",
        "meta",
    )

    def __init__(self, topic: str, partition: int) -> None:
        self.topic = topic
        self.partition = partition
        self.header_frame = encode_frame(
            TAG_SECTION_HEADER, encode_section_header(topic, partition)
        )
        self.position: int | None = None  # set when its header is written
        self.stats: BatchStats | None = None
        self.index: list[tuple[int, int]] = []  # (first offset, position in the section)
        self.offsets: OffsetSetBuilder | None = None
        self.held: list[pa.RecordBatch] = []  # records kept back for a shared block
        self.held_weight = 0  # batching weight (plan_slices), what bounds a block
        self.meta: SectionMeta | None = None  # set when its end is written


class _Block:
    """The open shared block: its sections as table entries (``TableEntry``, their start
    -1: a section's rows are placed by the block's pieces) and serialized offset bitmaps,
    and its records as pieces, each a section's batches or a run of rows of a bigger
    batch, consecutive sections that are consecutive rows of one batch making one run. A
    section costs a tuple and a bitmap here; ``FileWriter._write_block`` encodes them
    all at once."""

    __slots__ = ("entries", "bitmaps", "pieces", "logical", "weight")

    def __init__(self) -> None:
        self.entries: list[TableEntry] = []
        self.bitmaps: list[bytes] = []
        self.pieces: list[pa.RecordBatch | list[Any]] = []
        """Batches, and runs as [batch, first row, rows]."""
        self.logical = 0
        self.weight = 0

    def add(
        self,
        figures: Figures,
        topic: str,
        partition: int,
        batches: list[pa.RecordBatch],
        offsets: OffsetSet,
        weight: int,
    ) -> None:
        """A section of its own batches: its stats as ``figures``, its offsets, its
        batching weight."""
        key = section_key(topic, partition)
        entry = (*figures, topic, partition, key, -1, offsets.kind, -1, -1)
        self.entries.append(TableEntry._make(entry))
        self.bitmaps.append(offsets.serialize())
        self.pieces += batches
        self.logical += figures[4]
        self.weight += weight

    def fitting(self, weights: list[int], i: int, limit: int, below: int) -> int:
        """How far from ``i`` the sections of ``weights`` lighter than ``below`` fit in
        the block (its weight at most ``limit``): the end of those that do."""
        total, j = self.weight, i
        while j < len(weights) and weights[j] < below and total + weights[j] <= limit:
            total += weights[j]
            j += 1
        return j

    def take(
        self,
        records: pa.RecordBatch,
        items: list[tuple[str, int, int, int]],
        entries: list[TableEntry],
        bitmaps: list[bytes | None],
        weights: list[int],
        i: int,
        j: int,
    ) -> None:
        """The sections ``items[i:j]``, rows of ``records``, whose entries, bitmaps (none
        None) and weights are those of ``FileWriter._kept``."""
        self.entries += entries[i:j]
        self.bitmaps += bitmaps[i:j]  # type: ignore[arg-type]
        pieces = self.pieces
        for _, _, start, rows in items[i:j]:
            last = pieces[-1] if pieces else None
            if isinstance(last, list) and last[0] is records and last[1] + last[2] == start:
                last[2] += rows
            else:
                pieces.append([records, start, rows])
        self.logical += sum(e[4] for e in entries[i:j])
        self.weight += sum(weights[i:j])

    def records(self) -> list[pa.RecordBatch]:
        """The block's records, in order, a run as one slice."""
        return [p if isinstance(p, pa.RecordBatch) else p[0].slice(p[1], p[2]) for p in self.pieces]


def frame_message(frame: EncodedFrame, object_name: str) -> Message | None:
    """The batch message a kept frame holds, as a writer checks it before writing the
    frame as it was read (``FileWriter.reuses``); None if it is not one a writer would
    write."""
    try:
        return inspect_message(frame.payload, 0, object_name)
    except FormatError:
        return None


class FileWriter:
    """Writes one file: ``begin_section`` / ``write_batch``... / ``end_section``, then ``finish``.

    Bytes reach the sink as they are produced: the file header at construction, a section's
    header with its first records, each batch frame as soon as it is encoded. Only
    per-section metadata (stats, batch index, offset bitmap) is kept until ``finish``.

    Data errors raise ValueError and leave the writer as it was (a rejected batch writes
    nothing); calls out of order (a batch outside a section, anything after ``finish``)
    raise RuntimeError, as does any call after a write to the sink failed (what reached
    the sink is then unknown, so the writer writes nothing more, a footer least of all).

    With ``encode_ahead``, batches and shared blocks big enough to be compressed are
    encoded on a thread of the writer's own (Arrow compresses without the GIL), up to
    ``ENCODE_AHEAD`` of each at a time, while the caller goes on producing the next ones;
    frames still reach the sink in file order, each as soon as it and those before it are
    encoded. A framed section's end is written behind its last frame, so the caller goes
    on to the next section while the last batches of one are encoded (waiting there for
    them cost a job a fifth of its time on sections of a few MiB: ``bench/README.md``,
    "A section's end behind its frames"); a block is written only after every frame before
    it, a framed section's first batch only after every block before it, and ``finish``
    waits for all. The file's bytes are the same either way.
    ``close`` stops the thread (``finish`` does too); a writer abandoned on an error must
    be closed. An encoding error surfaces from a later call, when the batch's or block's
    turn to be written comes, and leaves the writer unusable (the section already counts
    the batch; the block stays first in line, so ``finish`` fails too).

    With ``share_below`` (bytes of batching weight, ``batches.batching_weight``), a
    section whose records weigh less than that is not framed on its own: it waits, with
    the small sections that follow it, to be written as one shared block (FORMAT.md
    section 13) of at most ``block_bytes``, and the file is version 3. A section that
    grows past ``share_below`` is framed as usual, after the block it would have joined.
    The writer then holds at most one block and one small section of records.
    ``end_section`` returns None for a section that waits in a block (its position and
    length are the block's) or, with ``encode_ahead``, behind batches still being encoded;
    ``finish`` lists every section.
    """

    def __init__(
        self,
        sink: Sink,
        *,
        object_name: str = "<file>",
        compression: str | None = "zstd",
        max_batch_bytes: int = MAX_BATCH_BYTES,
        min_compress_bytes: int = MIN_COMPRESS_BYTES,
        encode_ahead: bool = False,
        index: IndexBuilder | None = None,
        share_below: int = 0,
        block_bytes: int = BLOCK_BYTES,
    ) -> None:
        """``index``: told of every batch frame and section as they are written, so the
        file's offset index (FORMAT.md section 12) needs no read of the file."""
        if not 1 <= max_batch_bytes <= MAX_BATCH_BYTES_LIMIT:
            raise ValueError(f"max_batch_bytes must be in 1..{MAX_BATCH_BYTES_LIMIT}")
        if not 0 <= share_below <= block_bytes <= MAX_BATCH_BYTES_LIMIT:
            raise ValueError(
                f"need 0 <= share_below ({share_below}) <= block_bytes ({block_bytes}) "
                f"<= {MAX_BATCH_BYTES_LIMIT}"
            )
        self.object_name = object_name
        self._sink = sink
        self._encoder = BatchEncoder(compression, min_compress_bytes)
        self._encode_ahead = encode_ahead and compression is not None
        self._executor: ThreadPoolExecutor | None = None
        # Framed sections' batches and ends waiting to be written, in file order:
        # (section, first offset, largest timestamp, payload being encoded or ready), or
        # (section, 0, 0, None) for a section's end. All of it comes before any block in
        # self._blocks.
        self._pending: deque[
            tuple[_OpenSection, int, int, Pending | bytes | EncodedFrame | None]
        ] = deque()
        # Shared blocks closed but not yet written, in order, each with its payload being
        # encoded or ready (``_write_block``). Drained before anything else is written.
        self._blocks: deque[tuple[_Block, Pending | bytes]] = deque()
        self._index = index
        self.footer_crc: int | None = None
        """The footer frame's CRC (also in the tail), once ``finish`` has run."""
        self.frames_reused = 0
        """Batch frames written as a reader read them (``write_batch``)."""
        self._in_flight = 0
        self._max_batch_bytes = max_batch_bytes
        self._position = 0
        self._sections: list[SectionMeta] = []
        self._footer: list[bytes] = []  # the sections' footer entries, a block's as one
        self._last_key: tuple[bytes, int] | None = None
        self._open: _OpenSection | None = None
        self._finished = False
        self._broken = False  # a write to the sink failed: the file's bytes are unknown
        self._share_below = share_below
        self._block_limit = block_bytes
        self._version = SHARED_VERSION if share_below else FORMAT_VERSION
        self._block = _Block()
        self._emit(encode_file_header(self._version))

    @property
    def position(self) -> int:
        """Bytes written so far."""
        return self._position

    def _emit(self, data: bytes | memoryview) -> None:
        try:
            self._sink.write(data)
        except BaseException:
            self._broken = True  # what reached the sink is unknown: nothing more is written
            raise
        self._position += len(data)

    def _state(self, want_open: bool) -> _OpenSection | None:
        if self._broken:
            raise RuntimeError(f"{self.object_name}: an earlier write to the sink failed")
        if self._finished:
            raise RuntimeError(f"{self.object_name}: writer already finished")
        if want_open and self._open is None:
            raise RuntimeError(f"{self.object_name}: no section is open")
        if not want_open and self._open is not None:
            raise RuntimeError(
                f"{self.object_name}: section {self._open.topic}/{self._open.partition} is open"
            )
        return self._open

    def begin_section(self, topic: str, partition: int) -> None:
        """Opens the section of ``topic``/``partition``.

        Sections must come in strictly increasing (topic, partition) order (ValueError).
        """
        self._state(want_open=False)
        section = _OpenSection(topic, partition)  # validates topic and partition
        key = section_key(topic, partition)
        if self._last_key is not None and key <= self._last_key:
            last_topic, last_partition = self._last_key[0].decode(), self._last_key[1]
            raise ValueError(
                f"section {topic}/{partition} does not come after {last_topic}/{last_partition}"
            )
        self._open = section

    def write_batch(self, batch: pa.RecordBatch) -> None:
        """Appends records of RECORD_SCHEMA to the open section, re-chunked to the size bound.

        Offsets must strictly increase within the batch and across the section (ValueError).
        An empty batch is accepted and writes nothing.

        A batch a reader decoded from a frame it kept (``read_frames``), passed on as it
        is, is written in that frame where this writer would write the batch as one frame
        in the frame's codec (``reuses``): the same records, without encoding them again.
        It is checked and measured as any batch.
        """
        section = self._state(want_open=True)
        assert section is not None
        if not isinstance(batch, pa.RecordBatch):
            raise ValueError(f"expected a pyarrow.RecordBatch, not {type(batch).__name__}")
        problem = batch_problem(batch)
        if problem is not None:
            raise ValueError(f"{self.object_name}: {section.topic}/{section.partition}: {problem}")
        if batch.num_rows == 0:
            return
        first = int64_view(batch.column(0))[0]
        if section.stats is not None and first <= section.stats.last_offset:
            raise ValueError(
                f"{self.object_name}: {section.topic}/{section.partition}: offset {first} "
                f"does not follow {section.stats.last_offset}"
            )
        if section.offsets is None and self._share_below:
            logical, weight = batching_weight(batch)
            if section.held_weight + weight < self._share_below:
                stats = batch_stats(batch, logical)
                section.stats = stats if section.stats is None else section.stats.then(stats)
                section.held.append(batch)
                section.held_weight += weight
                return
            self._frame(section)
        self._write_framed(section, batch, frame_of(batch))

    def reuses(self, frame: EncodedFrame, rows: int, logical: int) -> bool:
        """Whether ``frame`` is what this writer writes for a batch of ``rows`` records
        and ``logical`` bytes in one frame, but for the encoder's choices: a message of
        ``rows`` records of RECORD_SCHEMA, in the codec this writer gives a batch of that
        size, within the expansion bound readers enforce (``ipc.inspect_message``)."""
        message = frame_message(frame, self.object_name)
        return (
            message is not None
            and message.rows == rows
            and message.schema is RECORD_SCHEMA
            and message.codec == self._encoder.codec_for(logical)
        )

    def _frame(self, section: _OpenSection) -> None:
        """Gives up holding ``section`` for a block: writes the open block, then the
        section's header and the records held so far as framed batches."""
        self._write_block()
        self._flush_blocks(0)  # an encoding error here leaves the section as it was
        section.stats = None
        for batch in section.held:
            self._write_framed(section, batch)
        section.held = []

    def _write_framed(
        self, section: _OpenSection, batch: pa.RecordBatch, frame: EncodedFrame | None = None
    ) -> None:
        runs = plan_slices(batch, self._max_batch_bytes)
        if frame is not None and (len(runs) > 1 or not self.reuses(frame, *runs[0][1:])):
            frame = None
        if section.offsets is None:
            self._flush_blocks(0)
            section.offsets = OffsetSetBuilder(int64_view(batch.column(0))[0])
        for start, length, logical in runs:
            chunk = batch if length == batch.num_rows else batch.slice(start, length)
            stats = batch_stats(chunk, logical)
            section.offsets.add(chunk.column(0), stats.first_offset, stats.last_offset)
            section.stats = stats if section.stats is None else section.stats.then(stats)
            if frame is None:
                encoded: Pending | bytes | EncodedFrame = self._encode(chunk, logical)
            else:
                encoded = frame
                self.frames_reused += 1
            self._pending.append((section, stats.first_offset, stats.max_timestamp, encoded))
            self._flush(ENCODE_AHEAD)

    def _encode(self, chunk: pa.RecordBatch, logical: int) -> Pending | bytes:
        if not self._encode_ahead or not self._encoder.compresses(logical):
            return self._encoder.encode(chunk, logical)
        self._in_flight += 1
        if self._encoder.submits:
            return self._encoder.submit(chunk)
        return self._encoding_thread().submit(self._encoder.encode, chunk, logical)

    def _encoding_thread(self) -> ThreadPoolExecutor:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(1, thread_name_prefix=f"encode-{self.object_name}")
        return self._executor

    def _flush(self, in_flight: int) -> None:
        """Writes, in order, the frames of the pending batches that are encoded (a
        section's header before its first) and the ends of the sections whose frames are
        all written, first waiting until at most ``in_flight`` batches are still being
        encoded."""
        pending = self._pending
        while pending:
            section, first_offset, max_timestamp, payload = pending[0]
            body: Payload
            if payload is None:
                pending.popleft()
                self._write_end(section)
                continue
            if isinstance(payload, EncodedFrame):
                header = FRAME_HEADER.pack(TAG_BATCH, len(payload.payload), payload.crc)
                body = payload.payload
            else:
                if not isinstance(payload, bytes):
                    ready = _ready(payload, self._in_flight, in_flight)
                    if ready is None:
                        return
                    payload = ready
                    self._in_flight -= 1
                body = payload
                header = encode_frame_header(TAG_BATCH, body)
            pending.popleft()
            if section.position is None:
                section.position = self._position
                self._emit(section.header_frame)
            relative = self._position - section.position
            section.index.append((first_offset, relative))
            if self._index is not None:
                self._index.batch(first_offset, relative, max_timestamp)
            self._emit(header)
            self._emit(body)

    def close(self) -> None:
        """Stops the encoder thread (if one was started); what is pending is dropped."""
        self._encoder.close()
        self._pending.clear()
        self._blocks.clear()
        self._in_flight = 0
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
            self._executor = None

    def end_section(self) -> SectionMeta | None:
        """Closes the open section and returns its metadata, or None while it waits: in a
        shared block, or behind its batches still being encoded (written by a later call).

        ValueError if the section has no records; it is then dropped (nothing of it was
        written) and the writer can go on.
        """
        section = self._state(want_open=True)
        assert section is not None
        self._open = None
        if section.held:
            self._share(section)
            return None
        if section.stats is None or section.offsets is None:
            raise ValueError(
                f"{self.object_name}: section {section.topic}/{section.partition} has no records"
            )
        self._last_key = section_key(section.topic, section.partition)
        self._pending.append((section, 0, 0, None))
        self._flush(ENCODE_AHEAD)
        return section.meta

    def _write_end(self, section: _OpenSection) -> None:
        """Writes the end of a framed section whose frames are all written: its trailer,
        and its entries in the footer and the index."""
        assert section.stats is not None and section.offsets is not None
        assert section.position is not None
        offsets = section.offsets.build()
        trailer = encode_frame(TAG_TRAILER, encode_trailer(section.stats, section.index, offsets))
        self._emit(trailer)
        self._emit(encode_section_end(len(trailer)))
        length = self._position - section.position
        if self._index is not None:
            self._index.end_section(
                section.topic, section.partition, section.position, length, offsets
            )
        meta = section.stats.section_meta(
            section.topic, section.partition, section.position, length
        )
        self._sections.append(meta)
        self._footer.append(encode_footer_entry(meta, encode_topic(meta.topic)))
        section.meta = meta

    def _share(self, section: _OpenSection) -> None:
        """Adds a closed small section to the open block, writing the block first if the
        section would make it heavier than ``block_bytes``."""
        assert section.stats is not None
        if self._block.weight + section.held_weight > self._block_limit:
            self._write_block()
        offsets = _offsets(section.held, section.stats)
        figures = section.stats.figures()
        self._block.add(
            figures, section.topic, section.partition, section.held, offsets, section.held_weight
        )
        self._last_key = self._block.entries[-1].key

    def write_rows(
        self, records: pa.RecordBatch, sections: Sequence[tuple[str, int, int, int]]
    ) -> None:
        """``write_section`` of each (topic, partition, first row, rows) of ``records``, in
        order (rows between or after them are not written); a section without rows is
        skipped. The file's bytes are the same as those calls would make, but a run of
        small sections is checked, measured and kept at once: one compiled pass
        (``section_figures``) over ``records`` for their stats and order, and one
        (``_sections.small_sections``) for their keys, bitmaps and weights, rather than a
        few Arrow calls and objects per section. Sections that are not small, and any run
        that fails a check (then each section's own check raises, as ``write_section``
        would), take ``write_section``."""
        self._state(want_open=False)
        items = [item for item in sections if item[3]]
        kept = self._kept(records, items) if self._share_below and len(items) > 1 else None
        if kept is None:
            for topic, partition, start, rows in items:
                self.write_section(topic, partition, (records.slice(start, rows),))
            return
        entries, bitmaps, weights = kept
        i = 0
        while i < len(items):
            if weights[i] >= self._share_below:  # framed, after the block it would join
                topic, partition, start, rows = items[i]
                self.write_section(topic, partition, (records.slice(start, rows),))
                i += 1
                continue
            j = self._block.fitting(weights, i, self._block_limit, self._share_below)
            if j == i:
                self._write_block()
                continue
            if None in bitmaps[i:j]:
                _build_bitmaps(records, items, entries, bitmaps, i, j)
            self._block.take(records, items, entries, bitmaps, weights, i, j)
            self._last_key = entries[j - 1].key
            i = j

    def _kept(
        self, records: pa.RecordBatch, items: list[tuple[str, int, int, int]]
    ) -> tuple[list[TableEntry], list[bytes | None], list[int]] | None:
        """Each section's table entry, bitmap (None where ``small_bitmap`` makes none)
        and batching weight (``_sections.small_sections``), if every section passes the
        checks of ``begin_section`` and ``write_batch``; else None."""
        if batch_problem(records, ordered=False) is not None:
            return None
        try:
            descent, figures = section_figures(records, items, start_at=2)
        except (TypeError, ValueError):  # a span outside the batch: write_section says so
            return None
        if descent >= 0:
            return None
        return _sections.small_sections(
            items,
            figures,
            int64_view(records.column(0)),
            header_offsets(records),
            self._last_key,
            TableEntry,
        )

    def _write_block(self) -> None:
        """Closes the open block (FORMAT.md section 13), if it holds any section, and
        writes it: at once, or with ``encode_ahead`` once the writer's thread has encoded
        it (``_flush_blocks``). Its sections stay in it until it is written: an error
        leaves them there (the open block, or the first in line), so a later ``finish``
        fails too rather than writing a file without them."""
        block = self._block
        if not block.entries:
            return
        records = copied(block.records())
        if self._encode_ahead and self._encoder.submits and self._encoder.compresses(block.logical):
            payload: Pending | bytes = self._encoder.submit(records)
        else:
            payload = self._encoder.encode(records, block.logical)
        block.pieces = []  # copied: the batches they are rows of need not wait with it
        self._block = _Block()
        self._blocks.append((block, payload))
        self._flush_blocks(ENCODE_AHEAD)

    def _flush_blocks(self, in_flight: int) -> None:
        """Writes the closed blocks that are encoded, in order, first waiting until at
        most ``in_flight`` blocks wait to be written."""
        blocks = self._blocks
        while blocks:
            block, payload = blocks[0]
            if not isinstance(payload, bytes):
                ready = _ready(payload, len(blocks), in_flight)  # an error: it stays first
                if ready is None:
                    return
                payload = ready
            self._flush(0)  # the frames before it
            blocks.popleft()
            self._emit_block(block, payload)

    def _emit_block(self, block: _Block, payload: bytes) -> None:
        """Writes a closed block whose batch is encoded as ``payload``."""
        table = encode_frame(TAG_SECTION_TABLE, shared_table(block.entries, block.bitmaps))
        position = self._position
        self._emit(encode_frame_header(TAG_SHARED_BATCH, payload))
        self._emit(payload)
        self._emit(table)
        self._emit(SECTION_END.pack(len(table), BLOCK_END_MAGIC))
        length = self._position - position
        self._sections += _sections.entry_metas(SectionMeta, block.entries, position, length)
        self._footer.append(_sections.footer_entries(block.entries, position, length))
        if self._index is not None:
            self._index.shared(block.entries, block.bitmaps, position, length)

    def write_section(
        self, topic: str, partition: int, batches: Iterable[pa.RecordBatch]
    ) -> SectionMeta | None:
        """``begin_section``, ``write_batch`` for each batch, ``end_section``."""
        self.begin_section(topic, partition)
        for batch in batches:
            self.write_batch(batch)
        return self.end_section()

    def finish(self) -> FileMeta:
        """Writes the footer and tail; returns what the footer says. The sink is not closed."""
        self._state(want_open=False)
        self._flush(0)
        self._write_block()
        self._flush_blocks(0)
        self.close()
        payload = footer_payload(self._footer, len(self._sections), self._version)
        footer = encode_frame(TAG_FOOTER, payload)
        self.footer_crc = FRAME_HEADER.unpack_from(footer)[2]
        self._emit(footer)
        self._emit(encode_tail(footer, self._version))
        self._finished = True
        return FileMeta(tuple(self._sections), self._position, self._version)


def _ready(payload: Pending, waiting: int, bound: int) -> bytes | None:
    """The bytes of a payload being encoded, first in line with ``waiting`` in all: at
    once if it is done, after waiting for it if more than ``bound`` wait; None while it
    may wait longer."""
    if waiting <= bound and not payload.done():
        return None
    return payload.result()


def _offsets(batches: list[pa.RecordBatch], stats: BatchStats) -> OffsetSet:
    """A section's offsets: for one batch of a small section, its bitmap's bytes made
    in one compiled pass (``small_bitmap``), else built with pyroaring."""
    if len(batches) == 1:
        made = small_bitmap(int64_view(batches[0].column(0)), stats.first_offset)
        if made is not None:
            return OffsetSet.made(KIND_ROARING32, made, stats.first_offset, stats.last_offset)
    return _built_offsets(batches, stats.first_offset)


def _built_offsets(batches: list[pa.RecordBatch], first_offset: int) -> OffsetSet:
    """A section's offsets built with pyroaring, batch by batch."""
    builder = OffsetSetBuilder(first_offset)
    for batch in batches:
        builder.add_column(batch.column(0))
    return builder.build()


def _build_bitmaps(
    records: pa.RecordBatch,
    items: list[tuple[str, int, int, int]],
    entries: list[TableEntry],
    bitmaps: list[bytes | None],
    i: int,
    j: int,
) -> None:
    """The bitmaps ``small_bitmap`` did not make among ``items[i:j]`` (offsets that are
    not one small container), built with pyroaring from a slice, their entries' kinds
    set."""
    for k in range(i, j):
        if bitmaps[k] is None:
            _, _, start, rows = items[k]
            built = _built_offsets([records.slice(start, rows)], entries[k].first_offset)
            entries[k] = entries[k]._replace(kind=built.kind)
            bitmaps[k] = built.serialize()


def write_file(
    sink: Sink,
    sections: Iterable[tuple[str, int, Iterable[pa.RecordBatch]]],
    *,
    object_name: str = "<file>",
    compression: str | None = "zstd",
    max_batch_bytes: int = MAX_BATCH_BYTES,
    min_compress_bytes: int = MIN_COMPRESS_BYTES,
    share_below: int = 0,
    block_bytes: int = BLOCK_BYTES,
) -> FileMeta:
    """Writes a whole file of ``(topic, partition, batches)`` sections, in order."""
    writer = FileWriter(
        sink,
        share_below=share_below,
        block_bytes=block_bytes,
        object_name=object_name,
        compression=compression,
        max_batch_bytes=max_batch_bytes,
        min_compress_bytes=min_compress_bytes,
    )
    for topic, partition, batches in sections:
        writer.write_section(topic, partition, batches)
    return writer.finish()
