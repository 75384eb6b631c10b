"""Checks that a store holds every invariant the catalog promises.

Per live file: the object exists with the catalog's size, every checksum holds, each
section's bitmap and stats match its records, and the footer matches the catalog. Per
partition: offsets strictly increase along the live sequence with no overlap between
files, and stay below the partition's next offset. Above L0, no file mixes compacted
and non-compacted topics.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from compactor.catalog.snapshot import LiveFile, Snapshot
from compactor.fileformat import FormatError, verify_stream
from compactor.objectstore import ObjectStore, StoreError

MAX_LEVEL = 4


@dataclass(frozen=True, slots=True)
class VerifyReport:
    files: int
    partitions: int
    records: int
    problems: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.problems


def verify_store(
    store: ObjectStore,
    snapshot: Snapshot,
    on_file: Callable[[LiveFile], None] | None = None,
) -> VerifyReport:
    problems: list[str] = []
    problems.extend(_check_catalog(snapshot))
    for live in snapshot.files:
        if on_file is not None:
            on_file(live)
        problems.extend(_check_file(store, live))
    problems.extend(_check_partitions(snapshot))
    partitions = sum(1 for tp in snapshot.partitions() if snapshot.sections_of(*tp))
    records = sum(f.record_count for f in snapshot.files)
    return VerifyReport(len(snapshot.files), partitions, records, tuple(problems))


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
    for f in s.files:
        if not 0 <= f.level <= MAX_LEVEL:
            yield f"{f.key}: level {f.level} outside 0..{MAX_LEVEL}"
        compacted = set()
        for sec in f.sections:
            topic = s.topics.get(sec.topic)
            if topic is None:
                yield f"{f.key}: section of unknown topic {sec.topic!r}"
                continue
            if not 0 <= sec.partition < topic.partitions:
                yield f"{f.key}: section of {sec.topic}/{sec.partition}, which does not exist"
            compacted.add(topic.config.compacted)
        if f.level > 0 and len(compacted) > 1:
            yield f"{f.key}: L{f.level} file mixes compacted and non-compacted topics"


def _check_file(store: ObjectStore, live: LiveFile) -> Iterator[str]:
    try:
        info = store.head(live.key)
        if info.size != live.size:
            yield f"{live.key}: {info.size} bytes in the store, catalog says {live.size}"
            return
        with store.open_stream(live.key) as stream:
            meta = verify_stream(stream, object_name=live.key, size=info.size)
    except (StoreError, FormatError) as exc:
        yield str(exc)
        return
    if meta.sections != live.sections:
        yield f"{live.key}: footer does not match the catalog's sections"


def _check_partitions(s: Snapshot) -> Iterator[str]:
    for topic, partition in s.partitions():
        previous_last = -1
        for live, sec in s.sections_of(topic, partition):
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
