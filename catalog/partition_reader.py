"""A partition's records from a position on, as a Kafka consumer seeks: from the next
present offset >= X, or from the first record whose timestamp >= T (``offsetsForTimes``).

A file with an offset index (FORMAT.md section 12) costs one GET of the index and one
ranged GET of the data, from the batch holding the first record wanted to its section's
end; a file whose index is absent or stale (its size is not the file's) is read through
its manifest and trailer as before. Files come in offset order, and once the first
record is found every later record of the partition follows, whatever its timestamp.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator

import pyarrow as pa

from compactor.catalog.catalog import Catalog
from compactor.catalog.snapshot import LiveFile
from compactor.fileformat import FormatError, compute, read_section
from compactor.fileformat.offset_index import (
    OffsetIndex,
    decode_index,
    index_key,
    read_from_batch,
)
from compactor.objectstore import ObjectNotFound

EARLIEST = -(1 << 63)


def read_partition(
    catalog: Catalog,
    topic: str,
    partition: int,
    *,
    from_offset: int | None = None,
    from_timestamp: int | None = None,
) -> Iterator[pa.RecordBatch]:
    """The partition's batches in offset order, starting as asked (at most one of
    ``from_offset`` and ``from_timestamp``)."""
    started = from_offset is None and from_timestamp is None
    for live in catalog.snapshot().files_holding(topic, partition):
        if started:  # every record of the file's section
            yield from _seek(catalog, live, topic, partition, EARLIEST, None)
            continue
        for batch in _seek(catalog, live, topic, partition, from_offset, from_timestamp):
            started = True
            yield batch


def _seek(
    catalog: Catalog,
    live: LiveFile,
    topic: str,
    partition: int,
    from_offset: int | None,
    from_timestamp: int | None,
) -> Iterator[pa.RecordBatch]:
    """This file's batches from the first record sought; nothing if it holds none."""
    index = _index(catalog, live)
    if index is None:
        yield from _seek_by_trailer(catalog, live, topic, partition, from_offset, from_timestamp)
        return
    section = index.section(topic, partition)
    if section is None:
        raise FormatError(index_key(live.key), 0, f"no entry for {topic}/{partition}")
    read_range = functools.partial(catalog.store.get_range, live.key)
    if from_offset is not None:
        found = section.seek_offset(from_offset)
        if found is None:
            return
        batches = read_from_batch(read_range, index, section, found[1], live.key)
        yield from _from_offset(batches, found[0])
    else:
        assert from_timestamp is not None
        first = section.seek_timestamp(from_timestamp)
        if first is None:
            return
        batches = read_from_batch(read_range, index, section, first, live.key)
        yield from _from_timestamp(batches, from_timestamp)


def _index(catalog: Catalog, live: LiveFile) -> OffsetIndex | None:
    key = index_key(live.key)
    try:
        body, _ = catalog.store.get(key)
    except ObjectNotFound:
        return None
    index = decode_index(body, key)
    return index if index.data_size == live.size else None


def _seek_by_trailer(
    catalog: Catalog,
    live: LiveFile,
    topic: str,
    partition: int,
    from_offset: int | None,
    from_timestamp: int | None,
) -> Iterator[pa.RecordBatch]:
    section = catalog.section(live, topic, partition)
    read_range = functools.partial(catalog.store.get_range, live.key)
    if from_offset is not None:
        if section.last_offset < from_offset:
            return
        yield from read_section(read_range, section, object_name=live.key, from_offset=from_offset)
        return
    assert from_timestamp is not None
    if section.max_timestamp < from_timestamp:
        return
    batches = read_section(read_range, section, object_name=live.key)
    yield from _from_timestamp(batches, from_timestamp)


def _from_offset(batches: Iterator[pa.RecordBatch], offset: int) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        keep = compute.greater_equal(batch.column("offset"), offset)
        if compute.all(keep):
            yield batch
        else:
            yield compute.filter(batch, keep)


def _from_timestamp(batches: Iterator[pa.RecordBatch], timestamp: int) -> Iterator[pa.RecordBatch]:
    """From the first record whose timestamp >= ``timestamp`` on, every record."""
    found = False
    for batch in batches:
        if found:
            yield batch
            continue
        hits = compute.greater_equal(batch.column("timestamp"), timestamp)
        first = compute.index(hits, True)
        if first >= 0:
            found = True
            yield batch.slice(first)
