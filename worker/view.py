"""The materialized view of a partition: each key's winning value under the topic's
compaction strategy, a winning tombstone deleting the key. Compaction must leave it
unchanged (docs/ARCHITECTURE.md §4), which is what the demo checks."""

from __future__ import annotations

import functools

from compactor.catalog import Catalog, Snapshot
from compactor.fileformat import batch_to_records, read_section
from compactor.worker.policy import header_value, record_rank

View = dict[bytes, bytes]


def partition_view(catalog: Catalog, snap: Snapshot, topic: str, partition: int) -> View:
    config = snap.topics[topic].config
    best: dict[bytes, tuple[tuple[int, ...], bytes | None]] = {}
    for live in snap.files_holding(topic, partition):
        section = catalog.section(live, topic, partition)
        read_range = functools.partial(catalog.store.get_range, live.key)
        for batch in read_section(read_range, section, object_name=live.key):
            for r in batch_to_records(batch):
                if r.key is None:
                    continue
                header = header_value(r.headers, config.compaction_strategy_header)
                rank = record_rank(config.compaction_strategy, r.offset, r.timestamp, header)
                current = best.get(r.key)
                if current is None or rank > current[0]:
                    best[r.key] = (rank, r.value)
    return {k: v for k, (_, v) in best.items() if v is not None}


def store_views(catalog: Catalog, snap: Snapshot) -> dict[tuple[str, int], View]:
    return {tp: partition_view(catalog, snap, *tp) for tp in snap.partitions()}
