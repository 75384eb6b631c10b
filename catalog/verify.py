"""Checks that a store holds every invariant the catalog promises.

The catalog itself: its log chains from the newest checkpoint (``Catalog.snapshot``
refuses a log that does not), and no input file is held by two unexpired leases. Per
live file: its manifest exists and its summary is what the manifest's sections sum to;
the object exists with the catalog's size, every checksum holds, each section's bitmap
and stats match its records, and the footer matches the manifest. Per partition: offsets
strictly increase along the live sequence with no overlap between files, and stay below
the partition's next offset. Above L0, no file mixes compacted and non-compacted topics.

Beside the problems, the report lists *strays*: objects under ``data/`` that no live file
or garbage entry names, nor their offset indexes. They break no invariant (the catalog
serves nothing from them) but hold storage nobody will delete: the uploads of an ingest or
a job that has not committed yet, or that failed or was killed after uploading. While the
log has a gap, nothing is a stray: the entries past it name files no readable state holds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from compactor.catalog.catalog import Catalog, log_gaps
from compactor.catalog.errors import CatalogError
from compactor.catalog.snapshot import MAX_LEVEL, LiveFile, Snapshot
from compactor.catalog.summary import summarize
from compactor.fileformat import FormatError, SectionMeta, verify_stream
from compactor.fileformat.offset_index import (
    OffsetIndex,
    decode_index,
    encode_index,
    index_key,
    read_and_index,
)
from compactor.objectstore import ObjectInfo, ObjectNotFound, ObjectStore, StoreError

Sections = dict[str, tuple[SectionMeta, ...]]

DATA_PREFIX = "data/"
"""Where every data file and offset index is written (``ingest.agent.l0_key``,
``planner.job.Job.output_key``, ``fileformat.offset_index.index_key``)."""


@dataclass(frozen=True, slots=True)
class VerifyReport:
    files: int
    partitions: int
    records: int
    problems: tuple[str, ...]
    strays: tuple[ObjectInfo, ...] = ()
    """Objects under ``data/`` the catalog does not name (the module's doc); not problems."""

    @property
    def ok(self) -> bool:
        return not self.problems


def verify_store(
    catalog: Catalog,
    snapshot: Snapshot,
    on_file: Callable[[LiveFile], None] | None = None,
) -> VerifyReport:
    logged = catalog.logged_versions()
    problems: list[str] = catalog.check_log(logged)
    problems.extend(_check_catalog(snapshot))
    sections: Sections = {}
    for live in snapshot.files:
        if on_file is not None:
            on_file(live)
        try:
            sections[live.id] = catalog.sections(live)
        except CatalogError as exc:
            problems.append(str(exc))
            continue
        if summarize(sections[live.id]) != live.topics:
            problems.append(f"{live.key}: the catalog's summary does not match its manifest")
        problems.extend(_check_file(catalog.store, live, sections[live.id]))
    problems.extend(_check_partitions(snapshot, sections))
    partitions = len({(sec.topic, sec.partition) for secs in sections.values() for sec in secs})
    records = sum(f.record_count for f in snapshot.files)
    strays: tuple[ObjectInfo, ...] = ()
    # Past a gap in the log, entries name files no readable state holds: they are not
    # strays, and deleting them would lose committed data (check_log reports the gap).
    if not log_gaps(logged):
        try:
            strays = tuple(_strays(catalog, snapshot))
        except CatalogError as exc:  # a gap since: reported, and nothing judged stray
            problems.append(str(exc))
    return VerifyReport(len(snapshot.files), partitions, records, tuple(problems), strays)


def _strays(catalog: Catalog, snapshot: Snapshot) -> Iterator[ObjectInfo]:
    """The objects under ``data/`` that neither ``snapshot`` nor the newest state names.
    Listed after every file was checked; a name the snapshot lacks is looked up again in
    the newest state, so a commit made meanwhile does not make its files strays."""
    named = _named(snapshot)
    listed = [info for info in catalog.store.list(DATA_PREFIX) if info.key not in named]
    if listed:
        newer = _named(catalog.snapshot())
        yield from (info for info in listed if info.key not in newer)


def _named(snapshot: Snapshot) -> set[str]:
    keys = {f.key for f in snapshot.files} | {g.key for g in snapshot.garbage}
    return keys | {index_key(k) for k in keys}


def _check_catalog(s: Snapshot) -> Iterator[str]:
    ids = [f.id for f in s.files]
    keys = [f.key for f in s.files]
    if len(set(ids)) != len(ids):
        yield "catalog lists a file id twice"
    if len(set(keys)) != len(keys):
        yield "catalog lists an object key twice"
    live_keys = set(keys)
    for g in s.garbage:
        if g.key in live_keys:
            yield f"{g.key}: both live and awaiting deletion"
    held: dict[str, str] = {}
    for lease in s.leases.values():
        for i in lease.inputs:
            other = held.setdefault(i, lease.job_id)
            if other != lease.job_id:
                yield f"file {i} is leased by both job {other} and job {lease.job_id}"
    for f in s.files:
        if not 0 <= f.level <= MAX_LEVEL:
            yield f"{f.key}: level {f.level} outside 0..{MAX_LEVEL}"
        compacted = set()
        for summary in f.topics:
            topic = s.topics.get(summary.topic)
            if topic is None:
                yield f"{f.key}: section of unknown topic {summary.topic!r}"
                continue
            if summary.partitions and not summary.partitions[-1][1] < topic.partitions:
                yield (
                    f"{f.key}: section of {summary.topic}/{summary.partitions[-1][1]}, "
                    "which does not exist"
                )
            compacted.add(topic.config.compacted)
        if f.level > 0 and len(compacted) > 1:
            yield f"{f.key}: L{f.level} file mixes compacted and non-compacted topics"


def _check_file(
    store: ObjectStore, live: LiveFile, sections: tuple[SectionMeta, ...]
) -> Iterator[str]:
    try:
        info = store.head(live.key)
        if info.size != live.size:
            yield f"{live.key}: {info.size} bytes in the store, catalog says {live.size}"
            return
        stored = _stored_index(store, live.key)
        with store.open_stream(live.key) as stream:
            if stored is None:
                meta = verify_stream(stream, object_name=live.key, size=info.size)
            else:
                index, meta = read_and_index(
                    stream, object_name=live.key, size=info.size, verify=True
                )
    except (StoreError, FormatError) as exc:
        yield str(exc)
        return
    if meta.sections != sections:
        yield f"{live.key}: footer does not match the catalog's sections"
    if stored is not None and encode_index(stored) != encode_index(index):
        yield f"{index_key(live.key)}: the offset index does not describe its file"


def _stored_index(store: ObjectStore, key: str) -> OffsetIndex | None:
    """The file's offset index, None if it has none (FormatError if it is corrupt)."""
    try:
        body, _ = store.get(index_key(key))
    except ObjectNotFound:
        return None
    return decode_index(body, index_key(key))


def _check_partitions(s: Snapshot, sections: Sections) -> Iterator[str]:
    by_partition: dict[tuple[str, int], list[tuple[LiveFile, SectionMeta]]] = {}
    for live in s.files:
        for sec in sections.get(live.id, ()):
            by_partition.setdefault((sec.topic, sec.partition), []).append((live, sec))
    for topic, partition in s.partitions():
        previous_last = -1
        for live, sec in by_partition.get((topic, partition), ()):
            if sec.first_offset <= previous_last:
                yield (
                    f"{topic}/{partition}: {live.key} starts at offset {sec.first_offset}, "
                    f"not after {previous_last} in the file before it"
                )
            previous_last = sec.last_offset
        next_offset = s.next_offsets.get((topic, partition), 0)
        if previous_last >= next_offset:
            yield (
                f"{topic}/{partition}: offset {previous_last} is not below "
                f"next offset {next_offset}"
            )
