"""Builds stores with hand-made live files, for worker tests."""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence

from compactor.catalog import Catalog, CommitRecord, LiveFile, TopicConfig
from compactor.catalog.changes import append_files, create_topic
from compactor.fileformat import (
    FileWriter,
    Record,
    StreamReader,
    batch_to_records,
    records_to_batch,
)
from compactor.fileformat.writer import BLOCK_BYTES
from compactor.objectstore import ObjectStore

TP = tuple[str, int]


def make_topics(catalog: Catalog, topics: Mapping[str, tuple[int, dict[str, str]]]) -> None:
    for name, (partitions, settings) in topics.items():
        config = TopicConfig.parse(settings)
        catalog.commit(lambda s, n=name, p=partitions, c=config: create_topic(s, n, p, c))


def add_file(
    store: ObjectStore,
    catalog: Catalog,
    file_id: str,
    sections: Mapping[TP, Sequence[Record]],
    *,
    level: int = 0,
    share_below: int = 0,
    block_bytes: int = BLOCK_BYTES,
    compression: str | None = "zstd",
    max_batch_bytes: int = 4096,
) -> LiveFile:
    """Writes one live file holding ``sections`` and appends it to the live sequence
    (version 3, sections under ``share_below`` bytes sharing blocks, if that is not 0)."""
    sink = io.BytesIO()
    writer = FileWriter(
        sink,
        object_name=file_id,
        compression=compression,
        max_batch_bytes=max_batch_bytes,
        share_below=share_below,
        block_bytes=block_bytes,
    )
    for (topic, partition), records in sorted(sections.items()):
        if records:
            writer.write_section(topic, partition, [records_to_batch(list(records))])
    meta = writer.finish()
    key = f"data/L{level}/{file_id}.cf"
    store.put(key, sink.getvalue())
    live = LiveFile.of_sections(file_id, key, level, meta.size, 0, meta.sections)
    snap = catalog.snapshot()
    touched = {tp: snap.next_offsets[tp] for tp, recs in sections.items() if recs}
    new_next = {
        tp: max(snap.next_offsets[tp], recs[-1].offset + 1) for tp, recs in sections.items() if recs
    }
    catalog.commit(
        lambda s: append_files(s, [live], touched, new_next),
        CommitRecord("ingest", {"files": [file_id]}),
        new_files={file_id: (live, meta.sections)},
    )
    return live


def read_file(store: ObjectStore, key: str) -> dict[TP, list[Record]]:
    data, _ = store.get(key)
    out: dict[TP, list[Record]] = {}
    for section in StreamReader(io.BytesIO(data), object_name=key, size=len(data)).sections():
        records = out.setdefault((section.topic, section.partition), [])
        for batch in section.batches():
            records.extend(batch_to_records(batch))
    return out


def read_live(store: ObjectStore, catalog: Catalog) -> dict[TP, list[Record]]:
    """Every partition's records across the live files, in sequence order."""
    out: dict[TP, list[Record]] = {}
    for live in catalog.snapshot().files:
        for tp, records in read_file(store, live.key).items():
            out.setdefault(tp, []).extend(records)
    return out
