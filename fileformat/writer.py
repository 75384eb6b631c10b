"""Writes files front to back into a sink, holding only per-section metadata."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Protocol

import pyarrow as pa

from compactor.fileformat.batches import (
    BatchStats,
    batch_problem,
    batch_stats,
    int64_view,
    plan_slices,
)
from compactor.fileformat.bitmap import OffsetSetBuilder
from compactor.fileformat.footer import encode_footer, encode_tail
from compactor.fileformat.framing import (
    FORMAT_VERSION,
    FRAME_HEADER,
    TAG_BATCH,
    TAG_FOOTER,
    TAG_SECTION_HEADER,
    TAG_TRAILER,
    encode_file_header,
    encode_frame,
    encode_frame_header,
)
from compactor.fileformat.ipc import BatchEncoder
from compactor.fileformat.meta import FileMeta, SectionMeta, section_key
from compactor.fileformat.section import encode_section_end, encode_section_header, encode_trailer

if TYPE_CHECKING:
    from compactor.fileformat.offset_index import IndexBuilder

MAX_BATCH_BYTES_LIMIT = 64 << 20
MIN_COMPRESS_BYTES = 8 << 10
"""Batches smaller than this (logical bytes) are written uncompressed (see BatchEncoder)."""
ENCODE_AHEAD = 4
"""Compressed batches a writer may have in encoding on its encoder thread at once."""


class Sink(Protocol):
    """Where a writer's bytes go, in order (a file, a BytesIO, a multipart upload)."""

    def write(self, data: bytes | memoryview, /) -> Any: ...


class _OpenSection:
    __slots__ = ("topic", "partition", "header_frame", "position", "stats", "index", "offsets")

    def __init__(self, topic: str, partition: int) -> None:
        self.topic = topic
        self.partition = partition
        self.header_frame = encode_frame(
            TAG_SECTION_HEADER, encode_section_header(topic, partition)
        )
        self.position: int | None = None  # set when the first batch is written
        self.stats: BatchStats | None = None
        self.index: list[tuple[int, int]] = []  # (first offset, position in the section)
        self.offsets: OffsetSetBuilder | None = None


class FileWriter:
    """Writes one file: ``begin_section`` / ``write_batch``... / ``end_section``, then ``finish``.

    Bytes reach the sink as they are produced: the file header at construction, a section's
    header with its first records, each batch frame as soon as it is encoded. Only
    per-section metadata (stats, batch index, offset bitmap) is kept until ``finish``.

    Data errors raise ValueError and leave the writer as it was (a rejected batch writes
    nothing); calls out of order (a batch outside a section, anything after ``finish``)
    raise RuntimeError.

    With ``encode_ahead``, batches big enough to be compressed are encoded on a thread of
    the writer's own (Arrow compresses without the GIL), up to ``ENCODE_AHEAD`` at a time,
    while the caller goes on producing the next ones; frames still reach the sink in batch
    order, each as soon as it and those before it are encoded, and ``end_section`` and
    ``finish`` wait for all. The file's bytes are the same either way. ``close`` stops
    the thread (``finish`` does too); a writer abandoned on an error must be closed. An
    encoding error surfaces from a later call, when the batch's turn to be written
    comes, and leaves the writer unusable (the section already counts the batch).
    """

    def __init__(
        self,
        sink: Sink,
        *,
        object_name: str = "<file>",
        compression: str | None = "zstd",
        max_batch_bytes: int = 1 << 20,
        min_compress_bytes: int = MIN_COMPRESS_BYTES,
        encode_ahead: bool = False,
        index: IndexBuilder | None = None,
    ) -> None:
        """``index``: told of every batch frame and section as they are written, so the
        file's offset index (FORMAT.md section 12) needs no read of the file."""
        if not 1 <= max_batch_bytes <= MAX_BATCH_BYTES_LIMIT:
            raise ValueError(f"max_batch_bytes must be in 1..{MAX_BATCH_BYTES_LIMIT}")
        self.object_name = object_name
        self._sink = sink
        self._encoder = BatchEncoder(compression, min_compress_bytes)
        self._encode_ahead = encode_ahead and compression is not None
        self._executor: ThreadPoolExecutor | None = None
        # Batches of the open section waiting for their frames to be written, in order:
        # (first offset, largest timestamp, payload being encoded or ready). end_section
        # drains it.
        self._pending: deque[tuple[int, int, Future[bytes] | bytes]] = deque()
        self._index = index
        self.footer_crc: int | None = None
        """The footer frame's CRC (also in the tail), once ``finish`` has run."""
        self._in_flight = 0
        self._max_batch_bytes = max_batch_bytes
        self._position = 0
        self._sections: list[SectionMeta] = []
        self._last_key: tuple[bytes, int] | None = None
        self._open: _OpenSection | None = None
        self._finished = False
        self._emit(encode_file_header())

    @property
    def position(self) -> int:
        """Bytes written so far."""
        return self._position

    def _emit(self, data: bytes | memoryview) -> None:
        self._sink.write(data)
        self._position += len(data)

    def _state(self, want_open: bool) -> _OpenSection | None:
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
            last = self._sections[-1]
            raise ValueError(
                f"section {topic}/{partition} does not come after {last.topic}/{last.partition}"
            )
        self._open = section

    def write_batch(self, batch: pa.RecordBatch) -> None:
        """Appends records of RECORD_SCHEMA to the open section, re-chunked to the size bound.

        Offsets must strictly increase within the batch and across the section (ValueError).
        An empty batch is accepted and writes nothing.
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
        runs = plan_slices(batch, self._max_batch_bytes)
        if section.position is None:
            section.position = self._position
            section.offsets = OffsetSetBuilder(first)
            self._emit(section.header_frame)
        assert section.offsets is not None
        for start, length, logical in runs:
            chunk = batch if length == batch.num_rows else batch.slice(start, length)
            stats = batch_stats(chunk, logical)
            section.offsets.add(chunk.column(0), stats.first_offset, stats.last_offset)
            section.stats = stats if section.stats is None else section.stats.then(stats)
            encoded = self._encode(chunk, logical)
            self._pending.append((stats.first_offset, stats.max_timestamp, encoded))
            self._flush(ENCODE_AHEAD)

    def _encode(self, chunk: pa.RecordBatch, logical: int) -> Future[bytes] | bytes:
        if not self._encode_ahead or not self._encoder.compresses(logical):
            return self._encoder.encode(chunk, logical)
        if self._executor is None:
            self._executor = ThreadPoolExecutor(1, thread_name_prefix=f"encode-{self.object_name}")
        self._in_flight += 1
        return self._executor.submit(self._encoder.encode, chunk, logical)

    def _flush(self, in_flight: int) -> None:
        """Writes the frames of the pending batches that are encoded, in order, first
        waiting until at most ``in_flight`` batches are still being encoded."""
        pending = self._pending
        section = self._open
        while pending:
            first_offset, max_timestamp, payload = pending[0]
            if not isinstance(payload, bytes):
                if self._in_flight <= in_flight and not payload.done():
                    return
                payload = payload.result()
                self._in_flight -= 1
            pending.popleft()
            assert section is not None and section.position is not None
            relative = self._position - section.position
            section.index.append((first_offset, relative))
            if self._index is not None:
                self._index.batch(first_offset, relative, max_timestamp)
            self._emit(encode_frame_header(TAG_BATCH, payload))
            self._emit(payload)

    def close(self) -> None:
        """Stops the encoder thread (if one was started); what is pending is dropped."""
        self._pending.clear()
        self._in_flight = 0
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
            self._executor = None

    def end_section(self) -> SectionMeta:
        """Closes the open section and returns its metadata.

        ValueError if the section has no records; it is then dropped (nothing of it was
        written) and the writer can go on.
        """
        section = self._state(want_open=True)
        assert section is not None
        self._flush(0)
        self._open = None
        if section.stats is None or section.position is None or section.offsets is None:
            raise ValueError(
                f"{self.object_name}: section {section.topic}/{section.partition} has no records"
            )
        offsets = section.offsets.build()
        trailer = encode_frame(TAG_TRAILER, encode_trailer(section.stats, section.index, offsets))
        if self._index is not None:
            self._index.end_section(offsets)
        self._emit(trailer)
        self._emit(encode_section_end(len(trailer)))
        s = section.stats
        meta = s.section_meta(
            section.topic, section.partition, section.position, self._position - section.position
        )
        self._sections.append(meta)
        self._last_key = section_key(section.topic, section.partition)
        return meta

    def write_section(
        self, topic: str, partition: int, batches: Iterable[pa.RecordBatch]
    ) -> SectionMeta:
        """``begin_section``, ``write_batch`` for each batch, ``end_section``."""
        self.begin_section(topic, partition)
        for batch in batches:
            self.write_batch(batch)
        return self.end_section()

    def finish(self) -> FileMeta:
        """Writes the footer and tail; returns what the footer says. The sink is not closed."""
        self._state(want_open=False)
        self.close()
        footer = encode_frame(TAG_FOOTER, encode_footer(self._sections))
        self.footer_crc = FRAME_HEADER.unpack_from(footer)[2]
        self._emit(footer)
        self._emit(encode_tail(footer, FORMAT_VERSION))
        self._finished = True
        return FileMeta(tuple(self._sections), self._position, FORMAT_VERSION)


def write_file(
    sink: Sink,
    sections: Iterable[tuple[str, int, Iterable[pa.RecordBatch]]],
    *,
    object_name: str = "<file>",
    compression: str | None = "zstd",
    max_batch_bytes: int = 1 << 20,
    min_compress_bytes: int = MIN_COMPRESS_BYTES,
) -> FileMeta:
    """Writes a whole file of ``(topic, partition, batches)`` sections, in order."""
    writer = FileWriter(
        sink,
        object_name=object_name,
        compression=compression,
        max_batch_bytes=max_batch_bytes,
        min_compress_bytes=min_compress_bytes,
    )
    for topic, partition, batches in sections:
        writer.write_section(topic, partition, batches)
    return writer.finish()
