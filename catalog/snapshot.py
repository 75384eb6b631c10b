"""One immutable state of the catalog: topics, next offsets, the live file sequence,
garbage, job leases, quarantined files.

The live files form one sequence ordered by the age of their data (oldest first).
For every partition, the sections of that partition along the sequence have strictly
increasing, non-overlapping offset ranges; ``catalog.changes`` keeps it so.

A snapshot holds each file's summary (``catalog.summary``), not its sections: the
planner decides from summaries, and the sections are read from the file's manifest
(``catalog.manifests``) by those who need them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence, Set
from dataclasses import dataclass, field
from functools import cached_property

from compactor.catalog.config import TopicConfig
from compactor.catalog.summary import (
    PartitionRanges,
    TopicSummary,
    in_ranges,
    summarize,
    union_ranges,
)
from compactor.fileformat import SectionMeta

MAX_LEVEL = 4
"""The top level: files live at levels 0 to 4."""

CATALOG_FORMAT = 2

TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class Topic:
    name: str
    partitions: int
    config: TopicConfig


@dataclass(frozen=True, slots=True)
class LiveFile:
    """A live file as the catalog knows it: where it is, its level, and per topic a
    summary of its sections (sorted by topic)."""

    id: str
    key: str
    """The object's key in the store."""
    level: int
    size: int
    created_ms: int
    topics: tuple[TopicSummary, ...]

    @classmethod
    def of_sections(
        cls,
        id: str,
        key: str,
        level: int,
        size: int,
        created_ms: int,
        sections: Sequence[SectionMeta],
    ) -> LiveFile:
        return cls(id, key, level, size, created_ms, summarize(sections))

    @property
    def record_count(self) -> int:
        return sum(t.record_count for t in self.topics)

    @property
    def tombstones(self) -> int:
        return sum(t.tombstones for t in self.topics)

    @property
    def uncompressed_bytes(self) -> int:
        return sum(t.uncompressed_bytes for t in self.topics)

    @property
    def section_count(self) -> int:
        return sum(t.sections for t in self.topics)

    @property
    def max_section_bytes(self) -> int:
        return max((t.max_section_bytes for t in self.topics), default=0)

    @property
    def topic_names(self) -> frozenset[str]:
        return frozenset(t.topic for t in self.topics)

    def topic(self, name: str) -> TopicSummary | None:
        for t in self.topics:
            if t.topic == name:
                return t
        return None

    def holds(self, topic: str, partition: int) -> bool:
        """Whether the file has a section of ``topic``/``partition``."""
        summary = self.topic(topic)
        return summary is not None and summary.holds(partition)


@dataclass(frozen=True, slots=True)
class Garbage:
    """A replaced file, deleted from the store once ``replaced_ms`` + grace has passed."""

    key: str
    replaced_ms: int
    file_id: str | None = None
    """The replaced file's id, whose manifest goes with it (None in a format-1 store)."""


@dataclass(frozen=True, slots=True)
class Lease:
    """A job's claim on its input files until ``expires_ms`` (wall clock).

    The lease belongs to the job, not to a process: whoever runs the job may renew it.
    While it is unexpired no other job may lease or replace those inputs; once expired
    the inputs are plannable again (``catalog.leases``).
    """

    job_id: str
    owner: str
    inputs: tuple[str, ...]
    taken_ms: int
    expires_ms: int

    def active(self, now_ms: int) -> bool:
        return now_ms < self.expires_ms


@dataclass(frozen=True, slots=True)
class Quarantine:
    """A live file an operator set aside (``compactor catalog quarantine``): no job takes
    it until it is released (but a retention drop, which reads nothing), so a file that
    cannot be read does not stop the compaction of the files around it. Its records stay
    live and are read as before."""

    file_id: str
    reason: str
    since_ms: int


@dataclass(frozen=True)
class Snapshot:
    version: int = 0
    """The catalog version this state is: the number of the last commit applied, 0 for a
    store that has never been committed to."""
    topics: Mapping[str, Topic] = field(default_factory=dict)
    next_offsets: Mapping[TopicPartition, int] = field(default_factory=dict)
    files: tuple[LiveFile, ...] = ()
    garbage: tuple[Garbage, ...] = ()
    leases: Mapping[str, Lease] = field(default_factory=dict)
    """Job id -> its lease, expired ones included until a commit drops them."""
    last_full_compaction_ms: int | None = None
    """When the last full compaction committed: the clock of the planner's daily
    compaction. It starts at the first ingest, so the first one runs a day after data
    arrives; None while the store has never held data."""
    quarantined: Mapping[str, Quarantine] = field(default_factory=dict)
    """File id -> why no job may take it (the files set aside, all live). Last, so that
    a state made field by field in order before it existed is made the same."""

    @cached_property
    def _holders(self) -> dict[str, list[LiveFile]]:
        index: dict[str, list[LiveFile]] = {}
        for live in self.files:
            for t in live.topics:
                index.setdefault(t.topic, []).append(live)
        return index

    def holders(self, topic: str) -> Sequence[LiveFile]:
        """The files with a section of ``topic``, in live-sequence order."""
        return self._holders.get(topic, ())

    def files_holding(self, topic: str, partition: int) -> list[LiveFile]:
        """The files with a section of the partition, in live-sequence order (so in offset
        order)."""
        return [f for f in self._holders.get(topic, ()) if f.holds(topic, partition)]

    def oldest_and_newest_holder(
        self, topic: str, partition: int
    ) -> tuple[LiveFile, LiveFile] | None:
        """The first and the last file in live order with a section of the partition,
        None if none has one. Scans in from both ends, so a job asking for each of its
        partitions pays for the files outside its run, not for the whole sequence."""
        holders = self._holders.get(topic, ())
        first = next((f for f in holders if f.holds(topic, partition)), None)
        if first is None:
            return None
        last = next(f for f in reversed(holders) if f.holds(topic, partition))
        return first, last

    def partitions(self) -> Iterator[TopicPartition]:
        for name in sorted(self.topics):
            for p in range(self.topics[name].partitions):
                yield name, p

    def file(self, file_id: str) -> LiveFile:
        for live in self.files:
            if live.id == file_id:
                return live
        raise KeyError(file_id)

    def level_totals(self) -> dict[int, tuple[int, int]]:
        """Level -> the number of its live files and their bytes: every level from 0 to
        ``MAX_LEVEL`` in order, then any other a file claims (a catalog ``verify`` faults)
        in order of appearance (``compactor stats``, the scheduler's metrics)."""
        totals = dict.fromkeys(range(MAX_LEVEL + 1), (0, 0))
        for f in self.files:
            files, size = totals.get(f.level, (0, 0))
            totals[f.level] = (files + 1, size + f.size)
        return totals

    def leased_inputs(self, now_ms: int) -> dict[str, str]:
        """Input file id -> the job id of the unexpired lease holding it."""
        return {
            i: lease.job_id
            for lease in self.leases.values()
            if lease.active(now_ms)
            for i in lease.inputs
        }


class InputEnds:
    """Whether a set of live files (a job's inputs) holds a partition's oldest data and
    its newest: the first and the last file in live order with a section of it
    (``Snapshot.oldest_and_newest_holder``), asked for every partition of a job. Where
    every file holding a topic is in the set (a full compaction, or a level's whole run),
    both are exactly whether the set holds the partition: one bisect, not a scan of the
    topic's files from both ends."""

    __slots__ = ("_snap", "_ids", "_whole")

    def __init__(self, snap: Snapshot, ids: Set[str]) -> None:
        self._snap, self._ids = snap, ids
        self._whole: dict[str, PartitionRanges | None] = {}
        """Per topic, the partitions its files hold if every one of them is in the set,
        else None."""

    def __call__(self, topic: str, partition: int) -> tuple[bool, bool]:
        if topic not in self._whole:
            holders = self._snap.holders(topic)
            whole = all(f.id in self._ids for f in holders)
            self._whole[topic] = _held(holders, topic) if whole else None
        held = self._whole[topic]
        if held is not None:
            inside = in_ranges(held, partition)
            return inside, inside
        ends = self._snap.oldest_and_newest_holder(topic, partition)
        if ends is None:
            return False, False
        return ends[0].id in self._ids, ends[1].id in self._ids


def _held(files: Sequence[LiveFile], topic: str) -> PartitionRanges:
    """The partitions of ``topic`` that any of ``files`` holds."""
    held: PartitionRanges = ()
    for f in files:
        summary = f.topic(topic)
        if summary is not None:
            held = union_ranges(held, summary.partitions)
    return held
