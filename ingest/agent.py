"""Writes ingested records into L0 files the way an agent does, and commits them.

Records of many partitions share one L0 file; a file is cut every ``max_file_bytes``
(estimated from the records' logical size) or ``max_file_records``. Offsets are
assigned per partition from the snapshot read at the start. Files are uploaded as
they fill but become live only in one final commit, so an ingest that fails part-way
leaves the catalog untouched (its uploaded objects are deleted).

If another ingest advanced one of our partitions meanwhile, our offsets are stale: the
files are rewritten with every stale partition's offsets shifted past the other
ingest's (order within the partition kept), and the commit is retried.

A file is uploaded under a fresh key with If-None-Match. A PUT that landed with its
answer lost is the store's to tell from a refusal (``ObjectStore.put``); nothing else can
write that key.
"""

from __future__ import annotations

import functools
import io
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import pyarrow as pa

from compactor.catalog import (
    Catalog,
    CatalogError,
    CommitRecord,
    LiveFile,
    Snapshot,
    TopicPartition,
    topic_names,
)
from compactor.catalog.changes import OffsetsMoved, append_files
from compactor.catalog.manifests import manifest_key
from compactor.fileformat import RECORD_SCHEMA, FileWriter, SectionMeta, StreamReader, compute
from compactor.fileformat.writer import SHARE_BELOW
from compactor.ingest.jsonl import InputRecord
from compactor.objectstore import ObjectStore
from compactor.planner.codecs import DEFAULT_CODECS

DEFAULT_MAX_FILE_BYTES = 8 << 20
RECORD_OVERHEAD_BYTES = 16
"""Offset and timestamp, counted in a record's logical size."""
MAX_REBASES = 50


def l0_key(file_id: str) -> str:
    return f"data/L0/{file_id}.cf"


@dataclass
class _PartitionBuffer:
    offsets: list[int] = field(default_factory=list)
    timestamps: list[int] = field(default_factory=list)
    keys: list[bytes | None] = field(default_factory=list)
    values: list[bytes | None] = field(default_factory=list)
    headers: list[list[dict[str, object]]] = field(default_factory=list)

    def batch(self) -> pa.RecordBatch:
        return pa.RecordBatch.from_arrays(
            [
                pa.array(self.offsets, pa.int64()),
                pa.array(self.timestamps, pa.int64()),
                pa.array(self.keys, pa.binary()),
                pa.array(self.values, pa.binary()),
                pa.array(self.headers, RECORD_SCHEMA.field("headers").type),
                pa.nulls(len(self.offsets), pa.int64()),
            ],
            schema=RECORD_SCHEMA,
        )


@dataclass(frozen=True, slots=True)
class IngestResult:
    records: int
    files: tuple[LiveFile, ...]
    rebases: int
    snapshot: Snapshot


class UnknownPartition(CatalogError):
    pass


class L0Ingest:
    """One ingest: ``add`` records, then ``commit``; ``abandon`` deletes what was uploaded.
    Its L0 files are written in ``compression`` (default: the codec below the top level,
    ``planner.codecs``)."""

    def __init__(
        self,
        store: ObjectStore,
        catalog: Catalog,
        *,
        now_ms: int,
        max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
        max_file_records: int | None = None,
        compression: str | None = DEFAULT_CODECS.for_level(0),
    ) -> None:
        if max_file_bytes < 1:
            raise ValueError("--max-file-bytes must be at least 1")
        if max_file_records is not None and max_file_records < 1:
            raise ValueError("--max-file-records must be at least 1")
        self.store = store
        self.catalog = catalog
        self.now_ms = now_ms
        self.max_file_bytes = max_file_bytes
        self.max_file_records = max_file_records
        self.compression = compression
        self.base = catalog.snapshot()
        self._next: dict[TopicPartition, int] = {}
        self._buffers: dict[TopicPartition, _PartitionBuffer] = {}
        self._buffered_bytes = 0
        self._buffered_records = 0
        self.records = 0
        self.files: list[LiveFile] = []
        self._sections: dict[str, tuple[SectionMeta, ...]] = {}

    def add(self, rec: InputRecord) -> None:
        tp = (rec.topic, rec.partition)
        buf = self._buffers.get(tp)
        if buf is None:
            topic = self.base.topics.get(rec.topic)
            if topic is None:
                raise UnknownPartition(topic_names.unknown_topic(rec.topic, self.base.topics))
            if not 0 <= rec.partition < topic.partitions:
                raise UnknownPartition(
                    f"topic {rec.topic!r} has partitions 0..{topic.partitions - 1}, "
                    f"not {rec.partition}"
                )
            buf = self._buffers[tp] = _PartitionBuffer()
        offset = self._next.get(tp)
        if offset is None:
            offset = self.base.next_offsets.get(tp, 0)
        self._next[tp] = offset + 1
        buf.offsets.append(offset)
        buf.timestamps.append(self.now_ms if rec.timestamp is None else rec.timestamp)
        buf.keys.append(rec.key)
        buf.values.append(rec.value)
        buf.headers.append([{"key": k, "value": v} for k, v in rec.headers])
        size = RECORD_OVERHEAD_BYTES + len(rec.key or b"") + len(rec.value or b"")
        size += sum(len(k) + len(v or b"") for k, v in rec.headers)
        self._buffered_bytes += size
        self._buffered_records += 1
        self.records += 1
        if self._buffered_bytes >= self.max_file_bytes or (
            self.max_file_records is not None and self._buffered_records >= self.max_file_records
        ):
            self.flush()

    def flush(self) -> None:
        """Cut the current L0 file: every buffered partition, in (topic, partition) order."""
        if not self._buffers:
            return
        sections = [(tp[0], tp[1], [buf.batch()]) for tp, buf in sorted(self._buffers.items())]
        self._buffers.clear()
        self._buffered_bytes = self._buffered_records = 0
        self.files.append(self._upload(sections))

    def _upload(self, sections: Iterable[tuple[str, int, Iterable[pa.RecordBatch]]]) -> LiveFile:
        file_id = uuid.uuid4().hex
        key = l0_key(file_id)
        sink = io.BytesIO()
        writer = FileWriter(
            sink, object_name=key, compression=self.compression, share_below=SHARE_BELOW
        )
        for topic, partition, batches in sections:
            writer.write_section(topic, partition, batches)
        meta = writer.finish()
        self.store.put(key, sink.getvalue(), if_none_match=True)
        live = LiveFile.of_sections(file_id, key, 0, meta.size, self.now_ms, meta.sections)
        self._sections[file_id] = meta.sections
        return live

    def commit(self, on_rebase: Callable[[int], None] | None = None) -> IngestResult:
        self.flush()
        expected = {tp: self.base.next_offsets.get(tp, 0) for tp in self._next}
        rebases = 0
        while True:
            change = functools.partial(
                append_files,
                files=tuple(self.files),
                expected_next=dict(expected),
                new_next=dict(self._next),
            )
            record = CommitRecord(
                "ingest", {"files": [f.id for f in self.files], "records": self.records}
            )
            new_files = {f.id: (f, self._sections[f.id]) for f in self.files}
            try:
                snap = self.catalog.commit(change, record, new_files=new_files)
                return IngestResult(self.records, tuple(self.files), rebases, snap)
            except OffsetsMoved as moved:
                rebases += 1
                if rebases > MAX_REBASES:
                    raise CatalogError(
                        f"ingest gave up after {MAX_REBASES} rebases over concurrent ingests"
                    ) from moved
                if on_rebase is not None:
                    on_rebase(rebases)
                self._rebase(moved.moved, expected)

    def _rebase(
        self, moved: dict[TopicPartition, int], expected: dict[TopicPartition, int]
    ) -> None:
        shift = {tp: moved[tp] - expected[tp] for tp in moved}
        old_files, self.files = self.files, []
        for old in old_files:
            self.files.append(self._upload(self._shifted_sections(old, shift)))
            self.store.delete(old.key)
            self.store.delete(manifest_key(old.id))
            del self._sections[old.id]
        for tp, delta in shift.items():
            self._next[tp] += delta
            expected[tp] = moved[tp]

    def _shifted_sections(
        self, old: LiveFile, shift: dict[TopicPartition, int]
    ) -> list[tuple[str, int, list[pa.RecordBatch]]]:
        data, _ = self.store.get(old.key)
        out = []
        for section in StreamReader(
            io.BytesIO(data), object_name=old.key, size=len(data)
        ).sections():
            delta = shift.get((section.topic, section.partition), 0)
            batches = [_shift_offsets(b, delta) for b in section.batches()]
            out.append((section.topic, section.partition, batches))
        return out

    def abandon(self) -> None:
        """Delete every object this ingest uploaded; the catalog never saw them."""
        for f in self.files:
            self.store.delete(f.key)
            self.store.delete(manifest_key(f.id))
        self.files.clear()
        self._buffers.clear()


def _shift_offsets(batch: pa.RecordBatch, delta: int) -> pa.RecordBatch:
    if delta == 0:
        return batch
    return batch.set_column(0, RECORD_SCHEMA.field("offset"), compute.add(batch.column(0), delta))
